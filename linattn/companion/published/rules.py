"""How ours compare with the published readings (:mod:`linattn.companion.published.readings`): measuring the same
quantity on our curves, the difference and its verdict, the one-to-one pairing of curves that cannot be told apart,
and the form of a claim of the paper's text. What is figure-specific (which readings, which claim) lives with each
figure's module (``figures/<name>.py``), built from these rules.

Every comparison row carries its difference (ours minus the reading, 0 inside a range), that difference in pixels of
the image, its tolerance (one pixel, or the reading's own ±), its band and a verdict by
:mod:`linattn.companion.uncertainty` (ours and the published curve need not come from the same sample, since numpy's
draw of the tokens goes through an SVD whose signs depend on the LAPACK library):

* a **test loss** whose per-sequence losses we have (at the start or the end of the run) is judged in the band
  tolerance + 2·√(se² + se²) when the published test set is an independent one as large (each with the standard
  error of our per-sequence losses), and in the tolerance alone when ours is drawn with the published run's random
  numbers (:func:`test_loss_error`: the same sequences, whose sampling error cancels in the difference);
* a **training loss** gets no sampling-error agreement (it is biased): its band is the tolerance; beyond it, but within
  the spread two independent training sets would show (:func:`~linattn.companion.uncertainty.training_loss_margin`),
  it *cannot tell*;
* a **step** is judged in its tolerance; beyond it, but within the shift the finite training set alone gives that step
  (ours against the population twin of our run, where the page has one), it *cannot tell*;
* every reading carries one more pixel, the ± of placing the published point itself
  (:func:`reading_margin`): beyond the band but within it, a difference *cannot tell*;
* a digitisation **offset** shared by many readings (:func:`~linattn.companion.uncertainty.systematic_offset`) is
  measured, stated, and removed before the difference is judged.

A figure that draws several seeds in one colour cannot tie most of its published crossings to seeds: our curves are
paired with them one to one by an optimal assignment (:func:`match_one_to_one`), each published crossing used once. A
crossing the image does tie to a seed (a line drawn twice, so with double ink) is compared with that seed alone; where
the image allows more than one such reading, the one with the smallest total distance over all the curves gives every
pair (:func:`match_with_ties`).

Two kinds of row keep their verdict but are not counted as evidence (:func:`linattn.companion.published.page.counted`):
a *check of the reading* (:attr:`Reading.checks_reading`: the image's drawing of a theory value beside our theory
value, which tests the reading, not the run) and a row that *restates* the fact of others (:func:`restating`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...analysis.loss_curves import first_step_below
from ..uncertainty import (
    difference_band,
    systematic_offset,
    training_loss_margin,
    verdict,
)
from .readings import Crossing, Image, Reading

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
    kind = how[0]
    arg: Any = how[1] if len(how) > 1 else None  # its type is the kind's: a level, a step, a window, (lag's) a tuple
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
        low, high = arg
        return _crossing_lag(y, np.asarray(curves["reference"], dtype=np.float64), low, high, steps=x)
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


def pixels(x: float, unit: str, image: Image) -> float:
    """``x`` in pixels of ``image``: only a step or a loss has a pixel (NaN for a count, or a missing ``x``)."""
    return x / image.pixel(unit) if unit in ("step", "loss") and x is not None and math.isfinite(x) else math.nan


def reading_margin(unit: str, image: Image) -> float:
    """The ± of a reading itself: a value read off ``image`` is placed to within one pixel, on top of the band that
    the comparison grants (its resolution and sampling error); a difference beyond the band but within this further
    pixel *cannot tell*. 0 for a count (counted, not read off an axis)."""
    return image.pixel(unit) if unit in ("step", "loss") else 0.0


def judged_difference(row: dict) -> float:
    """The difference a row's verdict judges: ours − the reading, less the ``offset`` removed first (NaN where
    missing). The page's table, ``numbers.json`` and the report read it from here."""
    d = row.get("difference")
    d = math.nan if d is None else float(d)
    return d - float(row.get("offset") or 0.0)


def check_row(image: Image, panel: str, what: str, published: str, paper, ours, diff: float, unit: str,
               tolerance: float, standard_error=None, unresolved=0.0, offset=0.0, bound: bool = False) -> dict:
    """One comparison row: the reading and ours, their difference in the unit and in pixels of ``image``, the
    tolerance, the standard error of the difference where the quantity has one (its band is then tolerance + 2 ×
    it), the ``unresolved`` margin beyond the band (*cannot tell* there: the given margin plus the reading's own
    pixel, :func:`reading_margin`), the ``offset`` removed before judging, and the verdict
    (:func:`linattn.companion.uncertainty.verdict` of :func:`judged_difference`); ``bound``: the difference is only a
    bound (:func:`is_bound`), which the page says in words. Rows of this shape feed the page's table, its prose
    (:func:`summary`) and ``numbers.json`` (:func:`number_rows`)."""
    band = difference_band(standard_error, resolution=tolerance)
    row = dict(figure=image.name, panel=panel, what=what, published=published, paper=paper,
               reproduced=None if ours is None or not math.isfinite(ours) else float(ours),
               difference=diff, pixels=pixels(diff, unit, image), unit=unit, tolerance=tolerance,
               standard_error=standard_error, band=band, unresolved=unresolved + reading_margin(unit, image),
               offset=offset, bound=bool(bound))
    return dict(row, verdict=verdict(judged_difference(row), band, row["unresolved"]))


@dataclass(frozen=True)
class Sampling:
    """What is known of one curve's sampling error: ``kind`` "test" (a held-out set: unbiased) or "train" (the fitted
    set: biased), and the standard error of its loss from the per-sequence losses at the ``start`` and at the
    ``final`` weights (None where not measured), in the curve's own units."""

    kind: str
    start: float | None = None
    final: float | None = None
    same_draws: bool = False  # a test set drawn with the published run's random numbers: the same sequences


def test_loss_error(se, same_draws: bool) -> float | None:
    """The standard error of ours − published for a test loss with standard error ``se`` on our test set: √2·se
    when the published test set is an independent one of the same size; none (None) when it is the same draws (the
    authors' random numbers), since the sequences' sampling error is then common to both and cancels in the
    difference: what is left differs only by the training, which the band's pixel covers."""
    return None if same_draws or se is None else math.sqrt(2.0) * se


def finite_p_margin(ours, twin) -> float:
    """The further margin of a step reading that the finite training set alone gives: |ours − twin|, the shift
    between our run's step and the same step of its population twin (the same start, P = ∞); 0 where there is no
    twin or either step is not within the run. Every page that has a twin judges its step readings with it."""
    if ours is None or twin is None:
        return 0.0
    ours, twin = float(ours), float(twin)
    return abs(ours - twin) if math.isfinite(ours) and math.isfinite(twin) else 0.0


def _errors(r: Reading, ours: float, sampling: dict, twins: dict, last_step) -> tuple:
    """(standard error of the difference, unresolved margin) of reading ``r`` (see the module's docstring)."""
    if r.unit == "step":
        return None, finite_p_margin(ours, twins.get(r.curve))
    s = sampling.get(r.curve)
    where = r.sampled(last_step)
    se = getattr(s, where) if s is not None and where else None
    if s is None or se is None or isinstance(r.value, tuple):
        return None, 0.0
    if s.kind == "train":
        return None, training_loss_margin(se)
    return test_loss_error(se, s.same_draws), 0.0


def compare(readings: list[Reading], curves: dict, image: Image, steps=None, sampling=None,
            twins=None) -> list[dict]:
    """Every reading beside ours, one ``check_row`` each. ``curves`` maps each reading's ``curve`` to an array;
    ``sampling``: curve → :class:`Sampling` (the loss readings' sampling errors; missing: judged by the tolerance);
    ``twins``: curve → the same curve of the population twin (a step reading's finite-P margin is the shift between
    ours and the twin's)."""
    sampling, twins = sampling or {}, twins or {}
    x = np.arange(len(np.atleast_1d(next(iter(curves.values()))))) if steps is None else np.asarray(steps)
    rows = []
    for r in readings:
        ours = measure(curves, r.how, r.curve, steps)
        twin = measure(twins, r.how, r.curve, steps) if r.curve in twins and r.unit == "step" else None
        se, margin = _errors(r, ours, sampling, {r.curve: twin} if twin is not None else {}, x[-1])
        row = check_row(image, r.panel, r.what, r.text(), r.value if not isinstance(r.value, tuple) else r.text(),
                        ours, difference(ours, r.value), r.unit, r.tolerance(image), se, margin)
        s = sampling.get(r.curve)
        row["same_test_set"] = bool(s is not None and s.kind == "test" and s.same_draws and r.unit == "loss")
        row["checks_reading"] = r.checks_reading
        rows.append(row)
    return rows


def judged_after_offset(rows: list[dict]) -> list[dict]:
    """``rows`` with every loss reading judged after removing the offset of the image's loss scale: the line
    ours − published ≈ value + slope × published fitted to all of them
    (:func:`linattn.companion.uncertainty.systematic_offset`), taken off each reading's difference at its level; the
    other rows as they are."""
    loss = [i for i, r in enumerate(rows) if r["unit"] == "loss" and isinstance(r["paper"], float)
            and math.isfinite(r["difference"])]
    shared = systematic_offset([rows[i]["difference"] for i in loss], [rows[i]["paper"] for i in loss])
    if shared is None:
        return rows
    out = list(rows)
    for i in loss:
        r = rows[i]
        judged = dict(r, offset=shared.at(r["paper"]), scale_offset=shared)
        out[i] = dict(judged, verdict=verdict(judged_difference(judged), r["band"], r["unresolved"]))
    return out


def offset_of(rows: list[dict]):
    """The offset of the loss scale the ``rows`` were judged after (:func:`judged_after_offset`), a
    :class:`linattn.companion.uncertainty.Offset`, or None."""
    return next((r["scale_offset"] for r in rows if "scale_offset" in r), None)


# ------------------------------------------------------------------ curves paired one to one with crossings

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


def is_bound(step: float, crossing: Crossing) -> bool:
    """Whether ours − the crossing (:func:`signed_distance`) is only a bound: the crossing is known only to lie beyond
    a step (one interval open at one end: a curve still on its plateau at the end of the published window) and our
    step lies outside it, so that the published step, and with it the difference, is bounded, not known."""
    if step is None or not math.isfinite(step) or len(crossing.where) != 1:
        return False
    (low, high), x = crossing.where[0], float(step)
    return (high == math.inf and x < low) or (low == -math.inf and x > high)


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


def _total_distance(pairs) -> float:
    """The total distance (:func:`crossing_distance`) of ``(key, step, crossing)`` pairs."""
    return sum(crossing_distance(step, c) for _, step, c in pairs)


def match_with_ties(ours: dict, readings) -> list[tuple]:
    """Pair our curves' steps with the published crossings where the image ties some crossings to a curve, by the
    reading of the image that makes the total distance smallest. ``readings``: each a ``(ties, crossings)`` the
    image's ink allows (a seed whose line is drawn twice fills one of two double-ink crossings, and the curves that
    share the other then hold that one, not the nearer): ``ties`` key → the :class:`Crossing` of a curve the image
    ties (compared with it, the same seed on both sides), ``crossings`` those of the other curves, paired one to one
    (:func:`match_one_to_one`). Every pair comes from that one reading, each crossing holding no more curves than
    its ink; the first of equal totals is kept. Returns ``(key, step, crossing)`` in the order of ``ours``; a tie
    whose key is not among ``ours`` is unused."""
    best = None
    for ties, crossings in readings:
        own = {k: ties[k] for k in ours if k in ties}
        pairs = {k: (k, step, c) for k, step, c in match_one_to_one({k: v for k, v in ours.items() if k not in own},
                                                                    crossings)}
        pairs.update({k: (k, ours[k], c) for k, c in own.items()})
        chosen = [pairs[k] for k in ours if k in pairs]
        total = _total_distance(chosen)
        if best is None or total < best[0]:
            best = (total, chosen)
    return [] if best is None else best[1]


def where(row: dict) -> str:
    """How a page names a comparison row: "<panel>, <what>", or its ``what`` alone where it has no panel."""
    return f"{row['panel']}, {row['what']}" if row["panel"] else row["what"]


def restating(row: dict, facts: list[dict]) -> dict:
    """``row`` marked as restating ``facts``, the rows that already state its fact (a count of curves still on a
    plateau, say, that the pairing rows of that drop decide): it keeps its verdict, which the page shows with the
    rows it restates (``restates``: their :func:`where`), and is not counted again
    (:func:`linattn.companion.published.page.counted`)."""
    return dict(row, restates=[where(r) for r in facts])


def first_of_each_fact(n: int, same) -> list[int]:
    """For ``n`` rows in order, the index of the first row that states each row's fact (a row's own index where it
    is the first): rows ``i`` and ``j`` state one fact where ``same(i, j)`` holds, taken both ways and along chains (a
    chain of such pairs is one fact), whatever their verdicts (two rests on one training set at one level, agreeing
    alike). Every row but the first of its fact restates it (:func:`restating`), so each fact is counted once
    (:func:`linattn.companion.published.page.counted`)."""
    first = list(range(n))

    def root(i: int) -> int:
        while first[i] != i:
            i = first[i]
        return i

    for j in range(n):
        for i in range(j):
            if same(i, j) or same(j, i):
                a, b = sorted((root(i), root(j)))
                first[b] = a  # the earlier row stands for the joined fact
    return [root(i) for i in range(n)]


def crossing_value(crossing: Crossing):
    """A crossing as ``numbers.json`` holds it: its step, or its text where it is a range or a choice."""
    (low, high), *rest = crossing.where
    return float(low) if low == high and not rest else crossing.text


# ------------------------------------------------------------------------------- claims of the paper's text
# A figure with no published image to read sets what the paper's text says of it beside our run as a claim: a count,
# ours, a verdict (agrees or differs, no tolerance: a count agrees only when it is met) and why, with numbers from the
# run.


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


def slug(text: str) -> str:
    """``text`` as a part of a ``numbers.json`` key: lower case, runs of other characters as one ``_``
    ("Figure X" → ``figure_x``, "c = 0.2" → ``c_0_2``)."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def in_tolerances(error, tolerance) -> float:
    """|error| / tolerance: ≤ 1 where a check agrees; inf for a non-zero error against a zero tolerance (a count);
    NaN without an error."""
    if error is None or isinstance(error, str) or not math.isfinite(error):
        return math.nan
    if tolerance == 0:
        return 0.0 if error == 0 else math.inf
    return abs(error) / tolerance
