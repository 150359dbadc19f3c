"""What the published curves show, read off the authors' own plots, and how ours compare.

The images of Figures 1b, 3a and 14 in the authors' plotting notebook resolve about 29 steps and 0.005 in loss per
pixel, so a reading is good to about that much. Where a curve cannot be told apart from its neighbours (Figure 3a's
six seeds are all drawn in black) the reading is a set of steps, not a step per seed.

A reading is a number, a ``(low, high)`` range (any 2-tuple), or a tuple of three or more values (crossings of
curves that cannot be told apart). :func:`gap` is the one rule every comparison uses.
"""

from __future__ import annotations

import math

import numpy as np

from ..diagnostics import drop_steps, first_step_below

PIXEL_STEPS = 29  # steps per pixel of the published images
PIXEL_LOSS = 0.005  # loss per pixel

# Figure 3a: steps at which the six curves first fall below the midpoint of L(M_{d-1}) and L(M_d), drop d = 1..4
# (the rule of ``diagnostics.drop_steps``, applied to the published images).
# Drop 1: all six within a range; drop 2: four distinguishable crossings (curves overlap); drop 4: five crossings,
# the sixth curve is still on the M_3 plateau at the end of the window (step 10000).
FIG3A_DROPS = {1: (376, 578), 2: (583, 711, 810, 1101), 3: (1003, 1072, 1256, 1619, 1724, 1862),
               4: (3605, 4940, 4940, 5734, 6525)}
FIG3A_STILL_ON_M3 = 1  # published curves without the fourth drop inside 10001 steps

# Figure 1b (seed 10): the ATTN_M curve's crossings of 0.7 and 0.5, and its tail; the MLP lies on it.
FIG1B = {"cross_0.7": (960, 980), "cross_0.5": (1000, 1050), "tail": (0.13, 0.14)}

# Figure 14 (white covariance, 5000 steps): per icl fraction c, the readings of the three curves (training loss
# divided by its first value; in-weight test loss; in-context test loss). "drop" is the step of the training
# loss's drop; "*_min"/"*_max" a dip or a peak as (value, step); "*_end" the value at the end of the window.
FIG14 = {
    0.0: {"drop": 700, "train_end": 0.07, "iwl_end": 0.07, "icl_above": 2.3},
    0.2: {"drop": 800, "train_end": 0.12, "iwl_min": (0.25, 900), "iwl_end": 1.05, "icl_max": (1.25, 900),
          "icl_end": 0.25},
    0.4: {"drop": 900, "train_end": 0.15, "iwl_min": (0.35, 1300), "iwl_end": 1.07, "icl_max": (1.1, 1100),
          "icl_end": 0.16},
    0.8: {"drop": (2200, 2600), "train_end": 0.14, "iwl_min": (0.65, 2300), "iwl_end": 1.1, "icl_end": 0.14},
    1.0: {"drop": (2800, 3000), "train_end": 0.14, "iwl_end": 1.1, "icl_end": 0.14},
}

# Numbers the paper states in its text (not read off a plot), for the figures' published-vs-reproduced rows.
FIG1B_PLATEAU, FIG1B_FINAL = 1.0, 0.136  # ATTN_M: the plateau at tr Λ and the minimum L* (D = 4, N = 31)
FIG3A_PLATEAUS = (1.000, 0.641, 0.377, 0.210, 0.136)  # L(M_0) … L(M_4), eigenvalues 0.4, 0.3, 0.2, 0.1, N = 31
FIG3B_FINAL_VALUES = (1.310, 1.430, 1.612, 1.947)  # (λ_d c_d)^{-1/3}, paper normalisation, same setting
WHITE_L_STAR = 0.1389  # the white-covariance minimum 1 − 1/c, D = 4, N = 31
FIG5_ATTN_M_DROPS = 1  # softmax ATTN_M: "a single drop"


def gap(value: float, reading) -> float:
    """Ours minus the nearest published value: 0 inside a ``(low, high)`` range, else the signed distance to it;
    for a tuple of several crossings, to the nearest one. NaN when ``value`` is missing."""
    if value is None or not math.isfinite(value):
        return math.nan
    if isinstance(reading, tuple) and len(reading) == 2:
        low, high = reading
        return 0.0 if low <= value <= high else (value - low if value < low else value - high)
    values = np.atleast_1d(np.asarray(reading, dtype=float))
    return float(value - values[np.argmin(np.abs(values - value))])


def describe(reading) -> str:
    """A reading as text: 960–980, 583 / 711 / 810 / 1101, or a single value."""
    if isinstance(reading, tuple) and len(reading) == 2:
        return f"{_num(reading[0])}–{_num(reading[1])}"
    if isinstance(reading, tuple):
        return " / ".join(_num(v) for v in reading)
    return _num(reading)


def _num(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


class ComparisonTable:
    """Rows (quantity, published, reproduced, difference) shown as a markdown table under a figure."""

    def __init__(self, rows: list[tuple[str, str, str, str]]):
        self.rows = rows

    def _repr_markdown_(self) -> str:
        out = ["| | published (read off the authors' plot) | reproduced | difference |", "|---|---|---|---|"]
        out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in self.rows]
        return "\n".join(out)

    def __repr__(self) -> str:
        return "\n".join("  ".join(str(c) for c in row) for row in self.rows)


def _M(m: int) -> str:
    """The saddle M_m as the book's math writes it (the table is rendered as MyST markdown)."""
    return rf"\mathcal{{M}}_{m}"


def _signed(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:+.0f}" if abs(x) >= 1 or x == 0 else f"{x:+.3f}"


def fig3a_comparison(drops: dict[int, np.ndarray], window: int) -> tuple[ComparisonTable, list[dict]]:
    """Figure 3a's drop steps (``drops``: seed → steps of drops 1…4, NaN if not reached) beside the published
    crossings. Each of our curves is compared with the nearest published crossing of the same drop (the published
    curves cannot be told apart by seed). Returns the page's table and the ``numbers.json`` rows (one per seed and
    drop, plus the count of curves without the fourth drop inside the window)."""
    seeds = list(drops)
    table, rows = [], []
    for d, reading in FIG3A_DROPS.items():
        ours = [float(drops[s][d - 1]) for s in seeds]
        diffs = [gap(v, reading) if v < window else math.nan for v in ours]
        table.append((f"drop {d} (${_M(d - 1)} \\to {_M(d)}$), step", describe(reading) if len(reading) != 2 else
                      f"all six in {describe(reading)}",
                      ", ".join(f"{v:.0f}" if math.isfinite(v) and v < window else "–" for v in ours),
                      ", ".join(_signed(x) for x in diffs)))
        for s, v, x in zip(seeds, ours, diffs):
            nearest = v - x if math.isfinite(x) else None
            rows.append(dict(quantity=f"published Fig 3a: seed {s}, step of drop {d} (vs the nearest published "
                                      f"crossing; one pixel = {PIXEL_STEPS} steps)",
                             paper=nearest, reproduced=v if v < window else None,
                             abs_error=abs(x) if math.isfinite(x) else None))
    still = sum(1 for s in seeds if not drops[s][3] < window)
    table.append((f"curves still on the ${_M(3)}$ plateau at step {window - 1}", str(FIG3A_STILL_ON_M3), str(still),
                  _signed(still - FIG3A_STILL_ON_M3)))
    rows.append(dict(quantity=f"published Fig 3a: curves without the fourth drop inside {window} steps",
                     paper=FIG3A_STILL_ON_M3, reproduced=still))
    return ComparisonTable(table), rows


def fig1b_comparison(attn_m: np.ndarray, mlp: np.ndarray) -> tuple[ComparisonTable, list[dict]]:
    """Figure 1b's ATTN_M curve (crossings of 0.7 and 0.5, tail) and the MLP's distance to it, beside the readings."""
    table, rows = [], []
    for level in (0.7, 0.5):
        reading, ours = FIG1B[f"cross_{level}"], first_step_below(attn_m, level)
        x = gap(ours, reading)
        table.append((f"ATTN_M crosses {level} at step", describe(reading), f"{ours:.0f}", _signed(x)))
        rows.append(dict(quantity=f"published Fig 1b: step where ATTN_M crosses {level}",
                         paper=describe(reading), reproduced=ours, abs_error=abs(x)))
    x = gap(float(attn_m[-1]), FIG1B["tail"])
    table.append(("ATTN_M final loss", describe(FIG1B["tail"]), f"{attn_m[-1]:.4f}", _signed(x)))
    rows.append(dict(quantity="published Fig 1b: ATTN_M final loss", paper=describe(FIG1B["tail"]),
                     reproduced=float(attn_m[-1]), abs_error=abs(x)))
    # the MLP "lies on" ATTN_M: during the steep drop a small shift in steps is a large gap in loss, so compare the
    # steps at which the two curves cross 0.5, against one pixel of the published image
    shift = abs(first_step_below(mlp, 0.5) - first_step_below(attn_m, 0.5))
    table.append(("MLP's crossing of 0.5, steps from ATTN_M's", f"within a line width (< {PIXEL_STEPS})",
                  f"{shift:.0f}", _signed(max(shift - PIXEL_STEPS, 0.0))))
    rows.append(dict(quantity="published Fig 1b: steps between the MLP's (own init) and ATTN_M's crossings of 0.5",
                     paper=f"< {PIXEL_STEPS}", reproduced=shift, abs_error=max(shift - PIXEL_STEPS, 0.0)))
    return ComparisonTable(table), rows


def fig14_comparison(curves: dict[float, dict[str, np.ndarray]]) -> tuple[ComparisonTable, list[dict]]:
    """Figure 14 per icl fraction c (``curves``: c → {"train": normalised training loss, "iwl", "icl"}) beside the
    readings. The drop step is ``diagnostics.drop_steps`` between the normalised training loss's start (1) and its
    end value: the first step below their midpoint."""
    table, rows = [], []

    def add(c, what, reading, ours, text=None):
        x = gap(ours, reading)
        shown = f"{ours:.0f}" if abs(ours) >= 100 else f"{ours:.3g}"  # steps in full, losses to 3 digits
        table.append((f"c = {c:g}: {what}", describe(reading), text or shown, _signed(x)))
        rows.append(dict(quantity=f"published Fig 14, c = {c:g}: {what}", paper=describe(reading), reproduced=ours,
                         abs_error=abs(x) if math.isfinite(x) else None))

    for c, reading in FIG14.items():
        if c not in curves:
            continue
        tr, iwl, icl = (curves[c][k] for k in ("train", "iwl", "icl"))
        add(c, "training loss drops at step", reading["drop"], drop_steps(tr, [1.0, tr[-1]])[0])
        add(c, "training loss at the end", reading["train_end"], float(tr[-1]))
        if "iwl_min" in reading:
            add(c, "in-weight test loss, lowest value", reading["iwl_min"][0], float(iwl.min()))
            add(c, "in-weight test loss, step of its lowest value", reading["iwl_min"][1], float(iwl.argmin()))
        add(c, "in-weight test loss at the end", reading["iwl_end"], float(iwl[-1]))
        if "icl_max" in reading:
            add(c, "in-context test loss, highest value after step 0", reading["icl_max"][0], float(icl[1:].max()))
        if "icl_end" in reading:
            add(c, "in-context test loss at the end", reading["icl_end"], float(icl[-1]))
        if "icl_above" in reading:
            peak = float(icl.max())
            table.append((f"c = {c:g}: in-context test loss, highest value", f"above {reading['icl_above']:g}",
                          f"{peak:.3g}", "agrees" if peak > reading["icl_above"] else "differs"))
            rows.append(dict(quantity=f"published Fig 14, c = {c:g}: in-context test loss goes above "
                                      f"{reading['icl_above']:g} (1 = yes)",
                             paper=1.0, reproduced=float(peak > reading["icl_above"])))
    return ComparisonTable(table), rows
