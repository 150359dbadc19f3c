"""What the published curves show, read off the authors' own plots, and how ours compare with them.

The authors' plotting notebook carries the images of Figures 1b, 3a and 14 as the paper printed them. A *pixel* of
an image is one column (steps) or one row (loss) of its axes; each image has its own scale (:class:`Image`):

* Figure 1b: one pixel is 21.83 steps and 0.00508 in loss (axes 0–6000 steps, 0–1.11);
* Figure 3a: one pixel is 28.90 steps and 0.00383 in loss (axes 0–10000 steps, 0–1.10);
* Figure 14: one pixel is 16.67 steps and 0.0099 in loss, the same in all six panels (axes 0–5000, 0–2.29).

A reading (:class:`Reading`) is good to about one pixel; where the reading states a larger ± of its own (a crossing on
a shallow stretch of a curve, a line read from the edge another line leaves visible) that is its tolerance. A range
``(low, high)`` is the set of steps over which the published curve stays within a pixel of its extreme.

Every comparison row carries its difference (ours minus the reading, 0 inside a range), that difference in pixels of
the image, its tolerance and a verdict (:func:`linattn.companion.output.verdict`): *agrees* when the difference is
within the tolerance; for a loss read on a curve of P sequences, *within sampling error* when it is within twice the
loss's standard error on P sequences (:func:`linattn.companion.output.loss_standard_error`: ours and the published
curve need not be trained on the same sample, since numpy's draw of the tokens goes through an SVD whose signs depend
on the LAPACK library); else *differs*.

Figure 3a draws six seeds in one colour (and seed 0 twice), so its published crossings cannot be tied to seeds: our
curves are paired with them one to one by an optimal assignment (:func:`match_one_to_one`), each published crossing
used once.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import theory
from ..diagnostics import first_step_below
from .output import (AGREES, CONSISTENT, DIFFERS, ESTIMATE, WITHIN_NOISE, MarkdownTable, loss_standard_error,
                     verdict, words)


@dataclass(frozen=True)
class Image:
    """One published image: its name in the paper and the steps and loss one pixel spans."""

    name: str
    steps_per_px: float
    loss_per_px: float

    def pixel(self, unit: str) -> float:
        """One pixel in ``unit`` ("step" or "loss")."""
        return self.steps_per_px if unit == "step" else self.loss_per_px


FIG1B_IMAGE = Image("Figure 1b", 21.83, 0.00508)
FIG3A_IMAGE = Image("Figure 3a", 28.90, 0.00383)
FIG14_IMAGE = Image("Figure 14", 16.67, 0.0099)


@dataclass(frozen=True)
class Reading:
    """One value read off a published image, and how to measure the same thing on our curves.

    ``curve`` names the curve (a key of the dict handed to :func:`compare`); ``how`` is one of
    ``("below", level)`` / ``("above", level)``: the first step the curve is below / above ``level``;
    ``("at", step)``: its value at ``step``; ``("mean", (a, b))`` / ``("median", (a, b))`` over steps a–b;
    ``("min", (a, b))`` / ``("argmin", (a, b))`` / ``("max", (a, b))``: its extreme (or the step of its minimum)
    over steps a–b (``None`` for the whole curve); ``("final",)``: its last value; ``("lag", (low, high))``: the mean,
    over loss levels between ``low`` and ``high``, of the steps by which this curve crosses each level after the
    curve ``"reference"`` does. ``value`` is a number or a ``(low, high)`` range; ``stated`` the reading's own ± where
    it is larger than a pixel."""

    panel: str
    what: str
    curve: str
    how: tuple
    value: float | tuple
    unit: str
    stated: float = 0.0

    def tolerance(self, image: Image) -> float:
        """One pixel of ``image`` in this reading's unit, or the reading's own ± where that is larger."""
        return max(image.pixel(self.unit), self.stated)

    def text(self) -> str:
        """The reading as the page shows it: ``751 ± 17``, ``917–967``, ``0.070``."""
        if isinstance(self.value, tuple):
            return "–".join(_fmt(v, self.unit) for v in self.value)
        return _fmt(self.value, self.unit) + (f" ± {_fmt(self.stated, self.unit)}" if self.stated else "")


def _fmt(x: float, unit: str) -> str:
    return f"{x:.0f}" if unit == "step" else f"{x:.3f}"


# -------------------------------------------------------------------------------------------- Figure 1b (seed 10)
# ATTN_M (H = 8, P = 5000, init 1e-6, lr 1e-3) and the MLP on the cubic feature (its own initialisation).
FIG1B = [
    Reading("", "ATTN_M plateau (median over steps 100–800)", "attn_m", ("median", (100, 800)), 1.007, "loss", 0.005),
    *[Reading("", f"ATTN_M first below {level:g}, step", "attn_m", ("below", level), step, "step", 22)
      for level, step in ((0.9, 906), (0.7, 969), (0.5, 1019), (0.3, 1124))],
    Reading("", "ATTN_M at step 3000", "attn_m", ("at", 3000), 0.142, "loss"),
    Reading("", "ATTN_M final (mean over steps 5600–6000)", "attn_m", ("mean", (5600, 6000)), 0.135, "loss", 0.005),
    Reading("", "dotted line L* (ours: theory)", "L_star", ("final",), 0.136, "loss"),
    Reading("", "MLP's lag behind ATTN_M on the drop (mean over losses 0.22–0.89), steps", "mlp",
            ("lag", (0.22, 0.89)), 15, "step"),
]

# --------------------------------------------------------------------------- Figure 3a (seeds 0–5, P = 80000, dec2024)
# Theory lines and plateau levels L(M_0) … L(M_4) as drawn (the black curves cover the last two dotted lines).
FIG3A_PLATEAU_READINGS = (1.001, 0.641, 0.381, 0.210, 0.138)
_FIG3A_LAST_STEP = 9966  # the published curves' last step (the window is 10001 steps)
BEYOND = (_FIG3A_LAST_STEP, math.inf)  # a crossing after the window: the curve is still on its plateau at the end


@dataclass(frozen=True)
class Crossing:
    """One published curve's crossing of a drop's midpoint: the steps it may be at (each a ``(low, high)`` interval;
    several when the image cannot say which of two double-ink crossings this curve makes), its text, and its ±."""

    where: tuple
    text: str
    stated: float = 0.0


def _at(*steps, text=None, stated=0.0) -> Crossing:
    return Crossing(tuple((s, s) for s in steps), text or " or ".join(f"{s}" for s in steps), stated)


# Drop d of a curve: its first step below the midpoint of L(M_{d-1}) and L(M_d) (``diagnostics.drop_steps``). Seed 0
# is drawn twice, so the image holds seven lines for six curves: a double-ink crossing is seed 0, or two seeds at
# one pixel. Each drop lists six curves: where two double-ink crossings leave one curve unaccounted for, that curve
# is at one of them ("705 or 804").
FIG3A_CROSSINGS = {
    1: tuple([Crossing(((370, 514),), "370–514 (a bundle of five)", 0.0)] * 5) + (_at(563),),
    2: (_at(557, stated=43), _at(601, stated=43), _at(705), _at(804), _at(1098), _at(705, 804)),
    3: (_at(997), _at(1069), _at(1250), _at(1608), _at(1718), _at(1856)),
    4: (_at(3601), _at(4936), _at(5729), _at(6521), _at(4936, 5729),
        Crossing((BEYOND,), f"still on M_3 at {_FIG3A_LAST_STEP}")),
}
FIG3A_STILL_ON_M3 = 1  # published curves without the fourth drop inside the window


def fig3a_drop_span(d: int) -> tuple:
    """The published curves' drop ``d`` of Figure 3a: (earliest step, latest step inside the window, the number of
    curves that make it only beyond the window)."""
    crossings = FIG3A_CROSSINGS[d]
    inside = [x for c in crossings for low, high in c.where if math.isfinite(high) for x in (low, high)]
    beyond = sum(all(not math.isfinite(high) for _, high in c.where) for c in crossings)
    return float(min(inside)), float(max(inside)), beyond

# ------------------------------------------------------------------------- Figure 14 (ATTN_M, white covariance, P 5000)
# Curves: "train" (training loss / its first value), "iwl" (in-weight test loss), "icl" (in-context test loss). The
# black curve's first fall has a midpoint (between the plateau 1.002 and the level right after the fall); our curve
# is read where it crosses the same level.


def _panel(c: float, rows: list) -> list[Reading]:
    return [Reading(f"c = {c:g}", what, curve, how, value, unit, stated)
            for what, curve, how, value, unit, stated in rows]


_S, _L = "step", "loss"
FIG14 = {
    0.0: _panel(0.0, [
        ("training loss below 0.537 (the fall's midpoint), step", "train", ("below", 0.537), 751, _S, 17),
        ("training loss below 0.5, step", "train", ("below", 0.5), 757, _S, 0),
        ("training loss, final", "train", ("final",), 0.071, _L, 0),
        ("in-weight test loss at step 0", "iwl", ("at", 0), 1.043, _L, 0),
        ("in-weight test loss, lowest (steps 870–5000)", "iwl", ("min", (870, 5000)), 0.070, _L, 0),
        ("in-weight test loss, final", "iwl", ("final",), 0.070, _L, 0),
        ("in-context test loss at step 0", "icl", ("at", 0), 0.961, _L, 0),
        ("in-context test loss above 1.60, step", "icl", ("above", 1.60), 811, _S, 17),
        ("in-context test loss, highest", "icl", ("max", None), 2.246, _L, 0),
        ("in-context test loss, final", "icl", ("final",), 2.246, _L, 0),
    ]),
    0.2: _panel(0.2, [
        ("training loss below 0.660 (the first fall's midpoint), step", "train", ("below", 0.660), 765, _S, 17),
        ("training loss below 0.5, step", "train", ("below", 0.5), 792, _S, 0),
        ("training loss, final", "train", ("final",), 0.130, _L, 0),
        ("in-weight test loss, lowest", "iwl", ("min", None), 0.261, _L, 0),
        ("in-weight test loss, step of its lowest", "iwl", ("argmin", None), (917, 967), _S, 0),
        ("in-weight test loss at step 2500", "iwl", ("at", 2500), 0.516, _L, 0),
        ("in-weight test loss at step 4000", "iwl", ("at", 4000), 1.018, _L, 0),
        ("in-weight test loss, final", "iwl", ("final",), 1.053, _L, 0),
        ("in-context test loss at step 0", "icl", ("at", 0), 0.982, _L, 0),
        ("in-context test loss, highest", "icl", ("max", None), 1.244, _L, 0),
        ("in-context test loss below 0.5, step", "icl", ("below", 0.5), 2729, _S, 27),
        ("in-context test loss, final", "icl", ("final",), 0.257, _L, 0),
    ]),
    0.4: _panel(0.4, [
        ("training loss below 0.745 (the first fall's midpoint), step", "train", ("below", 0.745), 994, _S, 17),
        ("training loss below 0.5, step", "train", ("below", 0.5), 1215, _S, 0),
        ("training loss at step 2500", "train", ("at", 2500), 0.161, _L, 0),
        ("training loss, final", "train", ("final",), 0.139, _L, 0),
        ("in-weight test loss, lowest", "iwl", ("min", None), 0.358, _L, 0),
        ("in-weight test loss, step of its lowest", "iwl", ("argmin", None), (1167, 1450), _S, 0),
        ("in-weight test loss, final", "iwl", ("final",), 1.084, _L, 0),
        ("in-context test loss, highest", "icl", ("max", None), 1.090, _L, 0),
        ("in-context test loss below 0.5, step", "icl", ("below", 0.5), 1980, _S, 20),
        ("in-context test loss at step 2500", "icl", ("at", 2500), 0.252, _L, 0),
        ("in-context test loss, final", "icl", ("final",), 0.167, _L, 0),
    ]),
    0.6: _panel(0.6, [
        ("training loss below 0.831 (the first fall's midpoint), step", "train", ("below", 0.831), 1383, _S, 19),
        ("training loss at step 1617 (the shoulder)", "train", ("at", 1617), 0.660, _L, 0),
        ("training loss below 0.574 (the whole fall's midpoint), step", "train", ("below", 0.574), 1776, _S, 21),
        ("training loss below 0.5, step", "train", ("below", 0.5), 1860, _S, 0),
        ("training loss, final", "train", ("final",), 0.146, _L, 0),
        ("in-weight test loss, lowest", "iwl", ("min", None), 0.468, _L, 0),
        ("in-weight test loss, step of its lowest", "iwl", ("argmin", None), (1600, 1750), _S, 0),
        ("in-weight test loss, final", "iwl", ("final",), 1.105, _L, 0),
        ("in-context test loss, highest (its start)", "icl", ("max", None), 0.982, _L, 0),
        ("in-context test loss, lowest before step 1500", "icl", ("min", (0, 1500)), 0.962, _L, 0),
        ("in-context test loss below 0.5, step", "icl", ("below", 0.5), 2008, _S, 18),
        ("in-context test loss, final", "icl", ("final",), 0.152, _L, 0),
    ]),
    0.8: _panel(0.8, [
        ("training loss below 0.584 (the fall's midpoint), step", "train", ("below", 0.584), 2362, _S, 18),
        ("training loss below 0.5, step", "train", ("below", 0.5), 2413, _S, 0),
        ("training loss, final", "train", ("final",), 0.146, _L, 0),
        ("in-weight test loss, lowest", "iwl", ("min", None), 0.645, _L, 0),
        ("in-weight test loss, step of its lowest", "iwl", ("argmin", None), (2250, 2267), _S, 0),
        ("in-weight test loss at step 3000", "iwl", ("at", 3000), 1.064, _L, 0),
        ("in-weight test loss, final", "iwl", ("final",), 1.105, _L, 0),
        ("in-context test loss, highest (its start)", "icl", ("max", None), 0.982, _L, 0),
        ("in-context test loss below 0.5, step", "icl", ("below", 0.5), 2454, _S, 18),
        ("in-context test loss, final", "icl", ("final",), 0.148, _L, 0),
    ]),
    1.0: _panel(1.0, [
        ("training loss below 0.580 (the fall's midpoint), step", "train", ("below", 0.580), 2901, _S, 17),
        ("training loss below 0.5, step", "train", ("below", 0.5), 2942, _S, 0),
        ("training loss, final", "train", ("final",), 0.146, _L, 0),
        ("in-weight test loss, lowest", "iwl", ("min", None), 1.025, _L, 0),
        ("in-weight test loss, step of its lowest", "iwl", ("argmin", None), (2567, 2950), _S, 0),
        ("in-weight test loss, final", "iwl", ("final",), 1.121, _L, 0),
        ("in-context test loss, highest (its start)", "icl", ("max", None), 0.982, _L, 0),
        ("in-context test loss below 0.5, step", "icl", ("below", 0.5), 2949, _S, 18),
        ("in-context test loss, final", "icl", ("final",), 0.148, _L, 0),
    ]),
}

FIG14_LAST_STEP = 4983  # where the published curves end (the axis runs to 5000)
# Where a published extreme lies, for the readings that give its value only (the step of an in-weight minimum has a
# reading of its own): the steps over which the curve stays within a pixel of it (its start: step 0).
_FIG14_EXTREME_STEPS = {
    (0.2, "icl", "max"): (900, 933), (0.4, "icl", "max"): (1117, 1183), (0.6, "icl", "max"): (0, 0),
    (0.6, "icl", "min"): (1370, 1370), (0.8, "icl", "max"): (0, 0), (1.0, "icl", "max"): (0, 0),
}


def fig14_landmarks() -> dict:
    """The published readings of Figure 14 as points to draw on our panels: {c: [{"curve", "step", "loss",
    "step_pm"}]}, one per reading that names both a step and a loss: a crossing of a level (± its stated
    uncertainty), a value at a step, a final value (at the published curves' last step), and an extreme whose step
    is known (at the middle of its range, ± half of it). Extremes held over a long stretch (the flat end of c = 0)
    are left out: the final value marks them."""
    points = {}
    for c, readings in FIG14.items():
        steps_of = {(r.curve, "min"): r.value for r in readings if r.how[0] == "argmin"}
        steps_of.update({(curve, kind): span for (cc, curve, kind), span in _FIG14_EXTREME_STEPS.items() if cc == c})
        marks = []
        for r in readings:
            kind = r.how[0]
            if kind in ("below", "above"):
                marks.append(dict(curve=r.curve, step=float(r.value), loss=float(r.how[1]), step_pm=float(r.stated)))
            elif kind == "at":
                marks.append(dict(curve=r.curve, step=float(r.how[1]), loss=float(r.value), step_pm=0.0))
            elif kind == "final":
                marks.append(dict(curve=r.curve, step=float(FIG14_LAST_STEP), loss=float(r.value), step_pm=0.0))
            elif kind in ("min", "max") and (r.curve, kind) in steps_of:
                lo, hi = steps_of[(r.curve, kind)]
                marks.append(dict(curve=r.curve, step=(lo + hi) / 2, loss=float(r.value), step_pm=(hi - lo) / 2))
        points[c] = marks
    return points


# Numbers the paper states in its text (not read off a plot), for other figures' rows.
FIG1B_PLATEAU, FIG1B_FINAL = 1.0, 0.136  # ATTN_M: the plateau at tr Λ and the minimum L* (D = 4, N = 31)
FIG3A_PLATEAUS = (1.000, 0.641, 0.377, 0.210, 0.136)  # L(M_0) … L(M_4), eigenvalues 0.4, 0.3, 0.2, 0.1, N = 31
FIG3B_FINAL_VALUES = (1.310, 1.430, 1.612, 1.947)  # (λ_d c_d)^{-1/3}, paper normalisation, same setting
WHITE_L_STAR = 0.1389  # the white-covariance minimum 1 − 1/c, D = 4, N = 31
FIG5_ATTN_M_DROPS = 1  # softmax ATTN_M: "a single drop"


# ----------------------------------------------------------------------------------------------- measuring ours

def _window(steps: np.ndarray, span) -> np.ndarray:
    if span is None:
        return np.ones(steps.size, dtype=bool)
    return (steps >= span[0]) & (steps <= span[1])


def measure(curves: dict, how: tuple, curve: str, steps=None) -> float:
    """Our value of a reading's ``how`` (see :class:`Reading`) on ``curves[curve]``; NaN where the event does not
    happen (a level never crossed). ``steps`` (default 0, 1, 2, …) is the step of each sample."""
    y = np.atleast_1d(np.asarray(curves[curve], dtype=np.float64))
    x = np.arange(y.size) if steps is None else np.asarray(steps)
    kind, arg = how[0], (how[1] if len(how) > 1 else None)
    if kind == "below":
        return first_step_below(y, arg, x)
    if kind == "above":
        return first_step_below(-y, -arg, x)
    if kind == "at":
        hit = np.flatnonzero(x == arg)
        return float(y[hit[0]]) if hit.size else math.nan
    if kind == "final":
        return float(y[-1])
    if kind == "lag":
        return _crossing_lag(y, np.asarray(curves["reference"], dtype=np.float64), *arg, steps=x)
    inside = _window(x, arg)
    if not inside.any():
        return math.nan
    if kind in ("mean", "median", "min", "max"):
        return float(getattr(np, kind)(y[inside]))
    if kind == "argmin":
        return float(x[inside][np.argmin(y[inside])])
    raise ValueError(f"unknown reading kind {kind!r}")


def _crossing_lag(curve, reference, low: float, high: float, steps=None, levels: int = 50) -> float:
    """The mean over ``levels`` loss levels evenly spaced in [low, high] of (the first step ``curve`` is below the
    level) − (the first step ``reference`` is): positive when ``curve`` falls later. NaN if either never gets there."""
    grid = np.linspace(low, high, levels)
    return float(np.mean([first_step_below(curve, v, steps) - first_step_below(reference, v, steps) for v in grid]))


def difference(ours: float, value) -> float:
    """Ours minus the reading: 0 inside a ``(low, high)`` range, else the signed distance to it. NaN when ours is
    missing."""
    if ours is None or not math.isfinite(ours):
        return math.nan
    if isinstance(value, tuple):
        low, high = value
        return 0.0 if low <= ours <= high else ours - (low if ours < low else high)
    return float(ours - value)


def _check_row(image: Image, panel: str, what: str, published: str, paper, ours, diff: float, unit: str,
              tolerance: float, standard_error=None) -> dict:
    """One comparison row: the reading and ours, their difference in the unit and in pixels of ``image``, the
    tolerance, the sampling error of the quantity where it has one, and the verdict. Rows of this shape feed the
    page's table, its prose (:func:`summary`) and ``numbers.json`` (:func:`number_rows`)."""
    pixels = diff / image.pixel(unit) if unit in ("step", "loss") and math.isfinite(diff) else math.nan
    return dict(figure=image.name, panel=panel, what=what, published=published, paper=paper,
                reproduced=None if ours is None or not math.isfinite(ours) else float(ours),
                difference=diff, pixels=pixels, unit=unit, tolerance=tolerance, standard_error=standard_error,
                verdict=verdict(diff, tolerance, standard_error))


def _loss_se(reading_value, unit: str, P, kurtosis: float = 3.0) -> float | None:
    """The sampling error of a loss reading on a curve of ``P`` sequences, residuals of kurtosis ``kurtosis`` (None
    for steps and counts, or no P)."""
    if unit != "loss" or P is None or isinstance(reading_value, tuple):
        return None
    return loss_standard_error(reading_value, P, kurtosis)


def compare(readings: list[Reading], curves: dict, image: Image, steps=None, P=None) -> list[dict]:
    """Every reading beside ours, one ``_check_row`` each. ``curves`` maps each reading's ``curve`` to an array;
    ``P``: the sequences each loss is a mean over (the loss readings' sampling error; None: not judged by it)."""
    rows = []
    for r in readings:
        ours = measure(curves, r.how, r.curve, steps)
        rows.append(_check_row(image, r.panel, r.what, r.text(), r.value if not isinstance(r.value, tuple)
                              else r.text(), ours, difference(ours, r.value), r.unit, r.tolerance(image),
                              _loss_se(r.value, r.unit, P)))
    return rows


# ----------------------------------------------------------------------------------- Figure 3a: one-to-one pairs

def crossing_distance(step: float, crossing: Crossing) -> float:
    """How far ``step`` lies from a published crossing: 0 inside one of its intervals, else the distance to the
    nearest. A step that never comes (NaN or inf) lies at infinity: 0 from a crossing beyond the window."""
    x = math.inf if step is None or not math.isfinite(step) else float(step)
    best = math.inf
    for low, high in crossing.where:
        if x == math.inf:
            d = 0.0 if high == math.inf else math.inf
        else:
            d = 0.0 if low <= x <= high else (low - x if x < low else x - high)
        best = min(best, d)
    return best


def signed_distance(step: float, crossing: Crossing) -> float:
    """Ours minus the nearest point of the crossing (0 inside an interval); NaN for a step that never comes."""
    if step is None or not math.isfinite(step):
        return 0.0 if any(high == math.inf for _, high in crossing.where) else math.nan
    x = float(step)
    options = [0.0 if low <= x <= high else (x - low if x < low else x - high) for low, high in crossing.where]
    return min(options, key=abs)


def match_one_to_one(ours: dict, crossings) -> list[tuple]:
    """Pair our curves' steps (``ours``: key → step; NaN for a drop that never comes) with the published crossings
    one to one, minimising the total distance (:func:`crossing_distance`) with
    :func:`scipy.optimize.linear_sum_assignment`; every crossing is used at most once (exactly once when there are
    as many curves as crossings). Returns ``(key, step, crossing)`` in the order of ``ours``."""
    from scipy.optimize import linear_sum_assignment  # here: most pages never need scipy.optimize's import

    keys = list(ours)
    big = 1e12  # a finite stand-in for "cannot pair": a step that never comes vs a crossing inside the window
    cost = np.array([[min(crossing_distance(ours[k], c), big) for c in crossings] for k in keys])
    rows, cols = linear_sum_assignment(cost)
    pairs = {keys[i]: crossings[j] for i, j in zip(rows, cols)}
    return [(k, ours[k], pairs[k]) for k in keys if k in pairs]


def fig3a_comparison(drops: dict, plateaus=None, P=None, eigenvalues=None) -> list[dict]:
    """Figure 3a: our drop steps (``drops``: seed → steps of drops 1…4, NaN where a drop never comes; steps past
    the published window count as beyond it) paired one to one with the published crossings, drop by drop; then
    the count of curves still on the M_3 plateau at the window's end, and (``plateaus``: our plateau levels
    L(M_0)…L(M_4), NaN where none was found) the plateau levels read off the image, with the sampling error of a
    level on ``P`` training sequences (residuals of ``theory.residual_kurtosis`` on each plateau where the
    ``eigenvalues`` are given, else Gaussian)."""
    rows = []
    for d, crossings in FIG3A_CROSSINGS.items():
        for seed, step, crossing in match_one_to_one({s: float(t[d - 1]) for s, t in drops.items()}, crossings):
            diff = signed_distance(step, crossing)
            tol = max(FIG3A_IMAGE.steps_per_px, crossing.stated)
            row = _check_row(FIG3A_IMAGE, f"drop {d} (M_{d - 1} → M_{d})", f"seed {seed}, step", crossing.text,
                            _crossing_value(crossing), step, diff, "step", tol)
            row.update(drop=d, seed=seed)
            rows.append(row)
    still = sum(1 for t in drops.values() if not float(t[3]) <= _FIG3A_LAST_STEP)
    rows.append(_check_row(FIG3A_IMAGE, "", f"curves still on the M_3 plateau at step {_FIG3A_LAST_STEP}",
                          str(FIG3A_STILL_ON_M3), FIG3A_STILL_ON_M3, still, still - FIG3A_STILL_ON_M3, "count", 0))
    if plateaus is not None:
        for m, (reading, ours) in enumerate(zip(FIG3A_PLATEAU_READINGS, plateaus)):
            rows.append(_check_row(FIG3A_IMAGE, "", f"plateau L(M_{m}) (ours: mean over seeds)",
                                  f"{reading:.3f}", reading, ours, difference(ours, reading), "loss",
                                  FIG3A_IMAGE.loss_per_px, _loss_se(reading, "loss", P, 3.0 if eigenvalues is None
                                                                    else theory.residual_kurtosis(eigenvalues, m))))
    return rows


def _crossing_value(crossing: Crossing):
    """A crossing as ``numbers.json`` holds it: its step, or its text where it is a range or a choice."""
    (low, high), *rest = crossing.where
    return float(low) if low == high and not rest else crossing.text


def fig1b_comparison(attn_m, mlp, L_star: float, steps=None, P=None) -> list[dict]:
    """Figure 1b: ATTN_M's plateau, crossings, late and final values, the theory's L* against the dotted line, and
    the MLP's (own initialisation) lag behind ATTN_M on the drop (``P``: the training-set size, for the loss
    readings' sampling error)."""
    curves = {"attn_m": attn_m, "mlp": mlp, "reference": attn_m, "L_star": [L_star]}
    return compare(FIG1B, curves, FIG1B_IMAGE, steps, P) if len(attn_m) else []


def fig14_comparison(curves: dict, steps=None, P=None) -> list[dict]:
    """Figure 14, panel by panel (``curves``: c → {"train": training loss / its first value, "iwl", "icl"});
    panels we did not run are left out (``P``: the sequences of the training and test sets, for the loss readings'
    sampling error)."""
    rows = []
    for c, readings in FIG14.items():
        match = [k for k in curves if math.isclose(float(k), c)]
        if match:
            rows += compare(readings, curves[match[0]], FIG14_IMAGE, steps, P)
    return rows


# ------------------------------------------------------------------------------- claims of the paper's text
# Figures 4 and 5 have no published image to read; what the paper's text says of them is set beside our run as a
# claim: a count, ours, a verdict (agrees or differs, no tolerance: a count agrees only when it is met) and why,
# with numbers from the run.

FIG4_R1_PLATEAUS = 8  # rank one: plateaus at L(M_0) … L(M_7) within the published window (D = 8)


@dataclass(frozen=True)
class Claim:
    """One claim of the paper's text beside our run: the ``figure`` it is about, the ``claim`` in brief, what is
    ``counted`` (the quantity of our run's row of that count), the number the paper states (``paper``) and ours,
    the ``verdict`` and the ``reason``, a sentence with numbers from the run."""

    figure: str
    claim: str
    counted: str
    paper: float
    ours: float
    verdict: str
    reason: str

    @property
    def quantity(self) -> str:
        return f"{self.counted} (the paper's text: {self.claim})"

    def row(self) -> dict:
        """The claim as a ``numbers.json`` row: a verdict and no tolerance, which the report counts as a claim. Its
        quantity starts with ``counted``, so it takes the place of a plain row of the same count."""
        return dict(key=f"claim.{slug(self.figure)}", quantity=self.quantity, paper=self.paper, reproduced=self.ours,
                    verdict=self.verdict)


def fig4_plateau_claim(drops, window: int, escape_steps, *,
                       predicted: str = "The theory's escape-time estimates τ/(λ_d² v₀)") -> Claim:
    """Figure 4's rank-one claim: the loss rests on the :data:`FIG4_R1_PLATEAUS` plateaus L(M_0) … L(M_7) within
    the published ``window``. ``drops``: the step of each drop d = 1 … D of our rank-one run (NaN: not made; it may
    run past the window), ``escape_steps``: the theory's escape-time estimate of each (``theory.attn_s_drop_steps``),
    or another prediction of the drop steps named by ``predicted`` (e.g. ``diagnostics.predicted_drop_steps``).
    Ours counts the levels L(M_0) … L(M_{D−1}) the loss reaches inside the window; the reason gives the estimates for
    the directions not learned inside it, and when our run learned them."""
    drops, escape = np.asarray(drops, dtype=np.float64), np.asarray(escape_steps, dtype=np.float64)
    made = drops < window
    inside = int(made.sum())
    reached = min(inside + 1, len(drops))
    paper = FIG4_R1_PLATEAUS
    claim = f"plateaus at the {paper} values L(M_0) … L(M_{paper - 1})"
    counted = f"R=1: plateaus reached within the published window ({window} steps)"
    reason = (f"{inside} of the {len(drops)} drops come inside the {window}-step window"
              + (f" (at step{'s' if inside > 1 else ''} {words(np.round(drops[made]))})" if inside else "")
              + f", so the loss reaches L(M_0) … L(M_{reached - 1}) there.")
    missing = np.flatnonzero(~made)
    if missing.size:
        beyond = [d for d in missing if escape[d] >= window]
        reason += (f" {predicted[0].upper()}{predicted[1:]} for the directions not learned inside it: "
                   + ", ".join(f"drop {d + 1} ≈ step {escape[d]:.0f}" for d in missing)
                   + f" ({len(beyond)} of {missing.size} beyond the window).")
        late = [d for d in missing if np.isfinite(drops[d])]
        if late:
            reason += (f" Carried on, our run made {'it' if len(late) == 1 else 'them'} at "
                       f"step{'s' if len(late) > 1 else ''} {words(np.round(drops[late]))}.")
    return Claim("Figure 4", claim, counted, paper, reached, AGREES if reached >= paper else DIFFERS, reason)


def fig5_single_drop_claim(plateaus, checks=()) -> Claim:
    """Figure 5's claim for softmax ATTN_M: its loss falls in a single drop. ``plateaus``: what
    ``diagnostics.detect_plateaus`` found in our training loss (levels, their first and last steps, the drop steps).
    The reason gives each drop's step and, where there are several, the shoulder between them: its level, its
    steps and how much of the whole fall each drop makes. ``checks``: the same model run again (other seeds, a
    smaller learning rate), each ``{"label", "drops", "drop_steps", "step_scale"[, "final"]}`` (``step_scale``: the
    run's learning rate over the main run's, so that step × scale is the same gradient-flow time; ``final``: its last
    loss); the reason then says whether the checks find as many drops (:func:`check_words`)."""
    levels, drops = np.asarray(plateaus.levels, dtype=np.float64), np.asarray(plateaus.drop_steps, dtype=np.float64)
    paper, ours = FIG5_ATTN_M_DROPS, len(drops)
    claim, counted = "a single drop", "softmax ATTN_M: drops detected"
    if ours == 0:
        reason = "The detector finds no drop: the loss stays on its first plateau to the end of the run."
    elif ours == 1:
        reason = f"The detector finds one drop, at step {drops[0]:.0f}, from {levels[0]:.3f} to {levels[1]:.3f}."
    else:
        fall = levels[0] - levels[-1]
        shoulders = "; ".join(
            f"a shoulder at {levels[k]:.3f} from step {plateaus.starts[k]:.0f} to {plateaus.ends[k]:.0f}"
            for k in range(1, ours))
        shares = ", ".join(f"step {s:.0f} ({(levels[k] - levels[k + 1]) / fall:.0%} of the fall)"
                           for k, s in enumerate(drops))
        reason = (f"The fall from {levels[0]:.3f} to {levels[-1]:.3f} pauses on {shoulders}, so the detector "
                  f"counts {ours} drops: at {shares}.")
    if checks:
        reason += " " + check_words(ours, checks)
    return Claim("Figure 5", claim, counted, paper, ours, AGREES if ours == paper else DIFFERS, reason)


def drop_count_holds(ours: int, checks) -> bool:
    """Whether every check run finds the main run's count of drops (the count is then no accident of one draw or of
    the step size)."""
    return all(int(c["drops"]) == int(ours) for c in checks)


def check_words(ours: int, checks) -> str:
    """Sentences on the check runs: the drops each finds and where (a run at another learning rate also in the main
    run's steps, step × scale, the same gradient-flow time), and whether the main run's count holds
    (:func:`drop_count_holds`), said apart for another step size and for other draws."""
    def one(c) -> str:
        n, steps = int(c["drops"]), np.asarray(c["drop_steps"], dtype=np.float64)
        where = f" at step{'s' if steps.size > 1 else ''} {words(np.round(steps))}" if steps.size else ""
        if steps.size and c["step_scale"] != 1:
            where += f" ({words(np.round(steps * c['step_scale']))} in the main run's steps)"
        final = f", ending at {c['final']:.3f}" if c.get("final") is not None else ""
        return f"{c['label']}, {n} drop{'' if n == 1 else 's'}{where}{final}"

    plural = "s" if ours != 1 else ""
    text = []
    for kind, group in (("step", [c for c in checks if c["step_scale"] != 1]),
                        ("draw", [c for c in checks if c["step_scale"] == 1])):
        if not group:
            continue
        holds = drop_count_holds(ours, group)
        what = "a smaller step" if kind == "step" else "other draws"
        text.append(f"Run again with {what}, ATTN_M shows: {'; '.join(one(c) for c in group)}. "
                    + (f"So the count of {ours} drop{plural} holds with {what}." if holds else
                       f"So the count of {ours} drop{plural} does not hold with {what}."))
    return " ".join(text)


def claims_table(claims: list[Claim]) -> MarkdownTable:
    """The claims as the page's table: the paper's text, what is counted, the paper's count, ours, the verdict and
    why."""
    return MarkdownTable([dict(claim=c.claim, counted=c.counted, paper=c.paper, ours=c.ours, verdict=c.verdict,
                               reason=c.reason) for c in claims],
                         {"claim": "the paper's text", "counted": "counted", "paper": "paper", "ours": "ours",
                          "verdict": "verdict", "reason": "why"}, {"paper": "g", "ours": "g"})


REPORT_GROUPS = ("reading", "claim", "check", "estimate", "other")


def report_group(row: dict) -> str:
    """How the reproduction report files a ``numbers.json`` row (its verdict as :func:`output.compare_row` gives
    it): *reading* (a value read off a published image, judged within its tolerance), *claim* (a claim of the
    paper's text, judged without a tolerance), *check* (a verdict on our own run with no published value beside
    it, such as the phase diagram's settling criterion), *estimate* (an order-of-magnitude theory value, not
    judged) or *other*."""
    judged = row.get("verdict")
    if judged in (AGREES, WITHIN_NOISE, DIFFERS):
        if row.get("paper") is None:
            return "check"
        return "reading" if row.get("tolerance") is not None else "claim"
    return "estimate" if judged == ESTIMATE else "other"


# ---------------------------------------------------------------------------------- what the page shows and says

_COLUMNS = {"panel": "", "what": "quantity", "published": "published", "reproduced": "ours",
           "difference": "difference", "pixels": "pixels", "verdict": "verdict"}


def table(rows: list[dict]) -> MarkdownTable:
    """The comparison rows as the page's table (steps in whole numbers, losses to three decimals, pixels to one)."""
    shown = [dict(r, reproduced=_shown(r["reproduced"], r["unit"]), difference=_signed(r["difference"], r["unit"]))
             for r in rows]
    return MarkdownTable(shown, _COLUMNS, {"pixels": "+.1f"})


def _shown(x, unit) -> str | None:
    if x is None or not math.isfinite(x):
        return None
    return f"{x:.3f}" if unit == "loss" else f"{x:.0f}"


def _signed(x, unit) -> str | None:
    if x is None or not math.isfinite(x):
        return None
    return f"{x:+.3f}" if unit == "loss" else f"{x:+.0f}"


def counts(rows: list[dict]) -> tuple[int, int]:
    """(rows that agree or are within sampling error, rows with a verdict)."""
    judged = [r for r in rows if r["verdict"] in (AGREES, WITHIN_NOISE, DIFFERS)]
    return sum(r["verdict"] in CONSISTENT for r in judged), len(judged)


def summary(rows: list[dict], image: Image) -> str:
    """The sentences that say where ours and the published curves agree and differ, made from the rows themselves:
    the count that agree within their tolerance and, for each row that differs, both values and the difference."""
    if not rows:
        return ("These settings are not the published ones, so there is no published curve to set beside this "
                "run.")
    agree, total = counts(rows)
    noise = sum(r["verdict"] == WITHIN_NOISE for r in rows)
    head = (f"**{image.name}: {agree} of {total} readings agree** with ours within their tolerance (one pixel of the "
            f"published image, {image.steps_per_px:g} steps or {image.loss_per_px:g} in loss, or the reading's own ± "
            "where it is larger)"
            + (f" or, {noise} of them, within the sampling error of a loss on the training set"
               if noise else "") + ".")
    differ = [r for r in rows if r["verdict"] == DIFFERS]
    if not differ:
        return head + " None differs."
    items = [f"{_where(r)}: published {r['published']}, ours {_shown(r['reproduced'], r['unit']) or 'none'}"
             + (f" ({_signed(r['difference'], r['unit'])}, {r['pixels']:+.1f} px)" if math.isfinite(r["pixels"])
                else "") for r in differ]
    return head + f" {'These differ' if len(differ) > 1 else 'This one differs'}:\n\n" + "\n".join(
        f"* {item}" for item in items)


def beyond_pixels(rows: list[dict], pixels: float = 2.0, unit: str = "step") -> list[dict]:
    """The rows in ``unit`` whose difference exceeds ``pixels`` published pixels."""
    return [r for r in rows if r["unit"] == unit and math.isfinite(r["pixels"]) and abs(r["pixels"]) > pixels]


def _where(r: dict) -> str:
    return f"{r['panel']}, {r['what']}" if r["panel"] else r["what"]


def slug(text: str) -> str:
    """``text`` as a part of a ``numbers.json`` key: lower case, runs of other characters as one ``_``
    ("Figure 1b" → ``figure_1b``, "c = 0.2" → ``c_0_2``)."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def number_rows(rows: list[dict]) -> list[dict]:
    """The comparison rows as ``numbers.json`` rows (key, quantity, paper, reproduced, abs_error, tolerance,
    verdict); the key names the published reading: ``published.<panel>.<what>``."""
    return [dict(key=".".join(["published"] + [slug(t) for t in (r["panel"], r["what"]) if t]),
                 quantity=f"published {r['figure']}" + (f", {r['panel']}" if r["panel"] else "") + f": {r['what']}",
                 paper=r["paper"], reproduced=r["reproduced"],
                 abs_error=abs(r["difference"]) if math.isfinite(r["difference"]) else None,
                 tolerance=r["tolerance"], standard_error=r.get("standard_error"), verdict=r["verdict"])
            for r in rows]


def caption_lead(figure: str, at_published: bool) -> str:
    """How a figure's caption begins, for every figure page: "The paper's Figure 3a, reproduced" only at the published
    settings (``presets.is_published``), else "Figure 3a's experiment at settings of our own" (a re-run at other
    knobs is not the paper's figure)."""
    return f"The paper's {figure}, reproduced" if at_published else f"{figure}'s experiment at settings of our own"


def paper_name(title: str) -> str:
    """The paper's name of a figure from its page title ("Figure 1b — …" → "Figure 1b"); pages beyond the paper
    keep their whole title's first part ("Beyond the paper", "Appendix: …")."""
    return title.lstrip("# ").split(" — ")[0].strip()


def page_name(path) -> str:
    """How the report names a page: the paper's name of the figure it reproduces (:func:`paper_name` of a title
    "# Figure …"), else the notebook's own name (pages beyond the paper, the appendix)."""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("# Figure "):
            return paper_name(line)
    return Path(path).stem


def short_quantity(quantity: str, page: str) -> str:
    """A ``numbers.json`` quantity without its ``published <page>`` prefix (for a table that is already per page)."""
    prefix = f"published {page}"
    return quantity[len(prefix):].lstrip(",: ") if quantity.startswith(prefix) else quantity


def in_tolerances(error, tolerance) -> float:
    """|error| / tolerance: ≤ 1 where a check agrees; inf for a non-zero error against a zero tolerance (a count);
    NaN without an error."""
    if error is None or isinstance(error, str) or not math.isfinite(error):
        return math.nan
    if tolerance == 0:
        return 0.0 if error == 0 else math.inf
    return abs(error) / tolerance
