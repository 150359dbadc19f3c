"""The types of what a published curve shows, read off the authors' own plots (data only; the rules that compare ours
with them are :mod:`linattn.companion.published.rules`). Each figure's own readings live in its module
(``figures/<name>.py``), next to the rules that compare ours with them.

The authors' plotting notebook carries each read figure's image as the paper printed it. A *pixel* of an image is one
column (steps) or one row (loss) of its axes; each image has its own scale (:class:`Image`), declared by its figure.

A reading (:class:`Reading`) is good to about one pixel; where the reading states a larger ± of its own (a crossing on
a shallow stretch of a curve, a line read from the edge another line leaves visible) that is its tolerance. A range
``(low, high)`` is the set of steps over which the published curve stays within a pixel of its extreme. A
:class:`Crossing` is one published curve's crossing of a level, where the image cannot tie it to one of our curves.
"""

from __future__ import annotations

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
    the start (its sampling error is that of the initial weights' per-sequence losses). ``checks_reading``: the
    image's drawing of a theory value (a dotted line) set beside our theory value: a check that the image is read
    right, not a result of the run, so its verdict is shown but never counted as agreement."""

    panel: str
    what: str
    curve: str
    how: tuple
    value: float | tuple
    unit: str
    stated: float = 0.0
    on_start: bool = False
    checks_reading: bool = False

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


@dataclass(frozen=True)
class Crossing:
    """One published curve's crossing of a drop's midpoint: the steps it may be at (each a ``(low, high)`` interval;
    several when the image cannot say which of two double-ink crossings this curve makes), its text, and its ±."""

    where: tuple
    text: str
    stated: float = 0.0


def crossing_at(*steps, text=None, stated=0.0) -> Crossing:
    """A crossing at one step (or at one of several, "705 or 804"), with its text and its ±."""
    return Crossing(tuple((s, s) for s in steps), text or " or ".join(f"{s}" for s in steps), stated)
