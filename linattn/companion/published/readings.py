"""What the published curves show, read off the authors' own plots: the readings of Figures 1b, 3a and 14 and the
numbers the paper states in its text (data only; the rules that compare ours with them are
:mod:`linattn.companion.published.rules`).

The authors' plotting notebook carries the images of Figures 1b, 3a and 14 as the paper printed them. A *pixel* of
an image is one column (steps) or one row (loss) of its axes; each image has its own scale (:class:`Image`):

* Figure 1b: one pixel is 21.83 steps and 0.00508 in loss (axes 0–6000 steps, 0–1.11);
* Figure 3a: one pixel is 28.90 steps and 0.00383 in loss (axes 0–10000 steps, 0–1.10);
* Figure 14: one pixel is 16.67 steps and 0.0099 in loss, the same in all six panels (axes 0–5000, 0–2.29).

A reading (:class:`Reading`) is good to about one pixel; where the reading states a larger ± of its own (a crossing on
a shallow stretch of a curve, a line read from the edge another line leaves visible) that is its tolerance. A range
``(low, high)`` is the set of steps over which the published curve stays within a pixel of its extreme.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


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
    it is larger than a pixel. ``on_start``: a loss read on the first plateau, where the weights are still those of
    the start (its sampling error is that of the initial weights' per-sequence losses)."""

    panel: str
    what: str
    curve: str
    how: tuple
    value: float | tuple
    unit: str
    stated: float = 0.0
    on_start: bool = False

    def sampled(self, last_step) -> str:
        """Which weights' per-sequence losses give this loss reading its sampling error: "start" (the value at step 0,
        or ``on_start``), "final" (the last value, or a window that reaches ``last_step``, the curve's last), else ""
        (none measured: the weights of that step are not kept)."""
        kind, arg = self.how[0], (self.how[1] if len(self.how) > 1 else None)
        if self.unit != "loss":
            return ""
        if self.on_start or (kind == "at" and arg == 0):
            return "start"
        if kind == "final" or (kind in ("mean", "median", "min") and isinstance(arg, tuple) and arg[1] >= last_step):
            return "final"
        return ""

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
    Reading("", "ATTN_M plateau (median over steps 100–800)", "attn_m", ("median", (100, 800)), 1.007, "loss", 0.005,
            on_start=True),
    *[Reading("", f"ATTN_M first below {level:g}, step", "attn_m", ("below", level), step, "step", 22)
      for level, step in ((0.9, 906), (0.7, 969), (0.5, 1019), (0.3, 1124))],
    Reading("", "ATTN_M at step 3000", "attn_m", ("at", 3000), 0.142, "loss"),
    Reading("", "ATTN_M final (mean over steps 5600–6000)", "attn_m", ("mean", (5600, 6000)), 0.135, "loss", 0.005),
    Reading("", "dotted line L* (ours: theory)", "L_star", ("final",), 0.136, "loss"),
    Reading("", "MLP's lag behind ATTN_M on the drop (mean over losses 0.22–0.89), steps", "mlp",
            ("lag", (0.22, 0.89)), 15, "step"),
]

# --------------------------------------------------------------------------- Figure 3a (seeds 0–5, P = 80000, dec2024)
# Plateau levels of the published curves, m → L(M_m) as read: only at L(M_3) and L(M_4) do the black curves cover the
# dotted theory lines, so that a level read there is the curves' own. Higher up, what the image shows at a plateau is
# its dotted theory line (read 1.001, 0.641 and 0.381), a drawing of the theory and not of the published runs: it is
# not a reading of the curves and is not compared.
FIG3A_PLATEAU_READINGS = {3: 0.210, 4: 0.138}
FIG3A_LAST_STEP = 9966  # the published curves' last step (the window is 10001 steps)
BEYOND = (FIG3A_LAST_STEP, math.inf)  # a crossing after the window: the curve is still on its plateau at the end


@dataclass(frozen=True)
class Crossing:
    """One published curve's crossing of a drop's midpoint: the steps it may be at (each a ``(low, high)`` interval;
    several when the image cannot say which of two double-ink crossings this curve makes), its text, and its ±."""

    where: tuple
    text: str
    stated: float = 0.0


def _at(*steps, text=None, stated=0.0) -> Crossing:
    return Crossing(tuple((s, s) for s in steps), text or " or ".join(f"{s}" for s in steps), stated)


# Drop d of a curve: its first step below the midpoint of L(M_{d-1}) and L(M_d) (``loss_curves.drop_steps``). Seed 0
# is drawn twice, so the image holds seven lines for six curves: a double-ink crossing is seed 0, or two seeds at
# one pixel. Each drop lists six curves: where two double-ink crossings leave one curve unaccounted for, that curve
# is at one of them ("705 or 804").
FIG3A_CROSSINGS = {
    1: tuple([Crossing(((370, 514),), "370–514 (a bundle of five)", 0.0)] * 5) + (_at(563),),
    2: (_at(557, stated=43), _at(601, stated=43), _at(705), _at(804), _at(1098), _at(705, 804)),
    3: (_at(997), _at(1069), _at(1250), _at(1608), _at(1718), _at(1856)),
    4: (_at(3601), _at(4936), _at(5729), _at(6521), _at(4936, 5729),
        Crossing((BEYOND,), f"still on M_3 at {FIG3A_LAST_STEP}")),
}
FIG3A_STILL_ON_M3 = 1  # published curves without the fourth drop inside the window


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
FIG5_ATTN_M_DROPS = 1  # softmax ATTN_M: "a single drop"


# Figure 4, rank one: the paper's text (no image to read)
FIG4_R1_PLATEAUS = 8  # rank one: plateaus at L(M_0) … L(M_7) within the published window (D = 8)
