"""What a loss curve shows: its plateaus (:func:`detect_plateaus`), the one rule for the step of a drop
(:func:`drop_steps`, :func:`half_drop_step`), the rests at the saddles L(M_m) of rank-one ATTN_S
(:func:`saddle_rests`, :func:`saddle_plateaus`, :func:`rank_summary`), whether a test loss learned and kept what it
learned (:func:`learning_course`), and the scalar ODE's curve beside a run (:func:`scalar_ode_overlay`). Nothing here
trains: the drops a run should make, predicted from its own start, are a run of their own (the population run from
the same start, through the companion's run store). Measures of the weights are in :mod:`linattn.analysis.diagnostics`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from numpy.typing import ArrayLike

from .. import theory

if TYPE_CHECKING:
    pass

# --------------------------------------------------------------------------------------------------------------
# Plateau detection
# --------------------------------------------------------------------------------------------------------------

@dataclass
class Plateaus:
    """Detected plateaus of a loss curve: level (median loss), first and last step of each, and the step of each
    drop (where the curve crosses halfway between consecutive levels; one fewer than the levels)."""

    levels: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    drop_steps: np.ndarray

    def __len__(self) -> int:
        return len(self.levels)


def detect_plateaus(loss: ArrayLike, steps: ArrayLike | None = None, *, rel_tol: float = 0.01,
                    abs_tol: float | None = None, window: int | None = None, min_length: int | None = None,
                    smooth: int = 1) -> Plateaus:
    """Find the flat stretches of a loss curve.

    A sample is *flat* when the loss changes by at most ``tol`` across the ``window`` samples either side of it
    (``tol`` = ``abs_tol``, or ``rel_tol`` times the curve's range). Runs of at least ``min_length`` flat samples are
    plateaus; neighbouring runs whose levels differ by less than 2·``tol`` are merged (noise can break a run). Works on
    sample indices, so log-spaced and linear step axes are both fine (on a log axis a late plateau has fewer samples
    per step, but still many samples). ``smooth`` > 1 applies a running median of that width first (noisy curves).
    Defaults: ``window`` = max(1, n/400), ``min_length`` = max(3, n/100).
    """
    y = np.asarray(loss, dtype=np.float64)
    n = y.size
    if n < 3:
        raise ValueError("need at least 3 loss values")
    x = np.arange(n) if steps is None else np.asarray(steps)
    if smooth > 1:
        from scipy.ndimage import (
            median_filter,  # here: importing scipy costs every caller that never smooths
        )

        y = median_filter(y, size=smooth, mode="nearest")
    tol = abs_tol if abs_tol is not None else rel_tol * (y.max() - y.min())
    h = window if window is not None else max(1, n // 400)
    min_len = min_length if min_length is not None else max(3, n // 100)
    lo = np.clip(np.arange(n) - h, 0, n - 1)
    hi = np.clip(np.arange(n) + h, 0, n - 1)
    flat = np.abs(y[hi] - y[lo]) <= tol
    # runs of flat samples
    edges = np.diff(np.concatenate([[0], flat.astype(int), [0]]))
    run_starts, run_ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    runs = [(a, b) for a, b in zip(run_starts, run_ends) if b - a + 1 >= min_len]
    merged: list[list[Any]] = []
    for a, b in runs:
        if merged and abs(np.median(y[a:b + 1]) - np.median(y[merged[-1][0]:merged[-1][1] + 1])) < 2 * tol:
            merged[-1][1] = b
        else:
            merged.append([a, b])
    levels = np.array([np.median(y[a:b + 1]) for a, b in merged])
    return Plateaus(levels=levels, starts=np.array([x[a] for a, _ in merged]),
                    ends=np.array([x[b] for _, b in merged]), drop_steps=_drops_between(y, x, merged, levels))


def _drops_between(y, x, spans, levels) -> np.ndarray:
    """The step of each drop between consecutive flat stretches ``spans`` (sample ranges) at ``levels``: where the
    curve crosses their midpoint (:func:`drop_steps`), else the middle of the gap between them."""
    drops = []
    for (a0, b0), (a1, _), l0, l1 in zip(spans, spans[1:], levels, levels[1:]):
        sign = 1.0 if l1 < l0 else -1.0  # a rise between two plateaus is a drop of −loss
        step = drop_steps(sign * y[b0:a1 + 1], sign * np.array([l0, l1]), x[b0:a1 + 1])[0]
        drops.append(step if np.isfinite(step) else x[b0 + (a1 - b0) // 2])
    return np.array(drops)


def first_step_below(loss: ArrayLike, level: float, steps: ArrayLike | None = None) -> float:
    """The first step at which ``loss`` is strictly below ``level`` (NaN if it never is); ``steps`` defaults to
    0, 1, 2, … (the index into ``loss``)."""
    below = np.flatnonzero(np.asarray(loss) < level)
    if not below.size:
        return np.nan
    return float(below[0] if steps is None else np.asarray(steps)[below[0]])


#: The least fall that counts as a drop, as a fraction of the level the curve falls from. A pair of levels
#: L_{d−1} > L_d with L_{d−1} − L_d < MIN_FALL·L_{d−1} makes no drop, whatever the curve does. Why 1 %: a curve
#: resting on a plateau still creeps (ATTN_S from init 0.001 falls 1e-8 of its level in 20000 steps, and its
#: midpoint crossing would be an event that never happened), while the smallest gap between neighbouring saddle
#: levels the package draws is L(M_7) − L(M_8) at D = 8, N = 15: 2.2 % of L(M_7).
MIN_FALL = 0.01


def drop_steps(loss: ArrayLike, levels: ArrayLike, steps: ArrayLike | None = None, *,
               min_fall: float = MIN_FALL) -> np.ndarray:
    """The step of each drop d = 1 … len(levels)−1 between plateau levels L_{d−1} > L_d: the first step at which the
    loss is below their midpoint (L_{d−1} + L_d)/2 (:func:`first_step_below`; NaN if it never gets there).

    A drop is a fall of at least ``min_fall`` (:data:`MIN_FALL`) of the level it leaves: where
    L_{d−1} − L_d < min_fall·abs(L_{d−1}) (a flat curve's own start and end, two levels that are one) there is no drop
    to find and the answer is NaN. Passing the midpoint is then a fall of at least half that gap.

    The one drop-step rule of the package (figures, benchmarks and ``published``): with ``theory.plateau_losses``
    as levels, drop d is the loss crossing from L(M_{d−1}) towards L(M_d), the passage M_{d−1} → M_d of the paper
    when the directions are learned in order (a run that learns e_{d+1} before e_d crosses the same level); with a
    curve's start and end value, its one drop.
    """
    levels = np.asarray(levels, dtype=np.float64)
    if not 0 <= min_fall < 1:
        raise ValueError(f"min_fall must be a fraction of a level in [0, 1), got {min_fall}")
    upper, lower = levels[:-1], levels[1:]
    falls = upper - lower >= min_fall * np.abs(upper)
    return np.array([first_step_below(loss, (a + b) / 2, steps) if fall else np.nan
                     for a, b, fall in zip(upper, lower, falls)])


def half_drop_step(loss: ArrayLike, steps: ArrayLike | None = None, *, start: float | None = None,
                   final: float | None = None, min_fall: float = MIN_FALL) -> float:
    """The half-drop step of a curve that falls once: the first recorded step at which ``loss`` is strictly below
    the midpoint (start + final)/2 of its level before the drop and its level after it (:func:`drop_steps` with
    the two levels; no interpolation, so the answer is one of ``steps``).

    ``start`` defaults to the first value, ``final`` to the last: a run from a small start sits on its plateau at
    step 0, and a run or a theory curve that has finished its drop ends at its final level. Give the levels where
    they are known better (a noisy curve: the plateau's median). The one half-drop rule for a simulated loss and a
    theory loss alike, so that the two are the same quantity. NaN where the curve never gets below the midpoint,
    or where it does not fall by ``min_fall`` of its start (start − final < min_fall·abs(start): a flat or rising
    curve has no drop).
    """
    y = np.asarray(loss, dtype=np.float64)
    if y.ndim != 1 or y.size < 2:
        raise ValueError(f"loss must be a 1-d curve of at least 2 values, got shape {y.shape}")
    if steps is not None and np.shape(steps) != y.shape:
        raise ValueError(f"steps must have the shape of loss {y.shape}, got {np.shape(steps)}")
    start = float(y[0]) if start is None else float(start)
    final = float(y[-1]) if final is None else float(final)
    if not final < start:
        return float("nan")
    return float(drop_steps(y, [start, final], steps, min_fall=min_fall)[0])


LEARNED_FALL, GIVEN_BACK = 0.25, 0.5  # our choices for :func:`learning_course`: a quarter off the start is learning
# that shows on the page; giving back half of the fall is more than noise on a test set of thousands of sequences


def learning_course(loss: ArrayLike, *, learned: float = LEARNED_FALL, given_back: float = GIVEN_BACK) -> str:
    """What a test loss says about the solution it measures: "not learned" when its lowest value L_low never comes
    ``learned`` × L_start below its start (L_low > (1 − learned) L_start); "transient" when it is learned and the
    loss then climbs back by at least ``given_back`` of the fall, L_end − L_low ≥ given_back (L_start − L_low);
    "kept" otherwise. NaN values are ignored."""
    y = np.asarray(loss, dtype=np.float64)
    y = y[np.isfinite(y)]
    if y.size < 2:
        raise ValueError("need at least 2 finite loss values")
    start, low, end = y[0], y.min(), y[-1]
    if low > (1 - learned) * start:
        return "not learned"
    return "transient" if end - low >= given_back * (start - low) else "kept"


#: A first drop before this many steps is no drop off a plateau (:func:`first_drop_step`): the curve fell at once.
FIRST_DROP_MIN_STEP = 10


def first_drop_step(loss: ArrayLike, *, min_step: int = FIRST_DROP_MIN_STEP) -> int | None:
    """The step of a curve's first drop, from its start to its end value (:func:`half_drop_step` with its default
    levels ``loss[0]`` and ``loss[-1]``, as an index); None where it comes before ``min_step`` (a curve that falls at
    once has no plateau to leave: a large initialisation) or never (a curve that does not fall by
    :data:`MIN_FALL` of its start: it stays on its plateau). :func:`first_drop_course` tells the two apart."""
    k = half_drop_step(loss)
    return int(k) if k >= min_step else None


def first_drop_course(loss: ArrayLike, *, min_step: int = FIRST_DROP_MIN_STEP) -> str:
    """What a curve's first drop did, in the words a page prints: "drop" (:func:`first_drop_step` finds one),
    "no plateau" (it falls by :data:`MIN_FALL` but below its midpoint before ``min_step``) or "no drop within the run"
    (it never falls by :data:`MIN_FALL` of its start, or never below the midpoint)."""
    k = half_drop_step(loss)
    if not np.isfinite(k):
        return "no drop within the run"
    return "drop" if k >= min_step else "no plateau"


#: The band around a saddle level L(M_m) within which a loss counts as resting there, as a fraction of the gap to the
#: neighbouring level on each side: L(M_m) − b·(L(M_m) − L(M_{m+1})) … L(M_m) + b·(L(M_{m−1}) − L(M_m)) (the
#: outermost levels mirror their one gap). Why a third: any b < 1/2 keeps the bands of adjacent levels apart however
#: close the levels lie (L(M_7) − L(M_8) is 0.0127 at D = 8, less than 1 % of the loss range), and a third leaves
#: the middle third of every gap to no level, so the midpoint that the drop rule (:func:`drop_steps`) crosses always
#: lies between two rests; a larger b would admit more of a finite-P offset but leave a drop less room.
REST_BAND = 1 / 3
#: The farthest a rest's level may lie from its saddle's level L(M_m), twice the sampling error of a level near 1
#: read on P = 5000 sequences (L·√(2/P) = 0.02), the smallest training set the paper's figures read plateaus on. A
#: run in a band whose level lies farther off is a shoulder on the way between saddles, not a rest at one.
REST_TOL = 0.04


def rest_band_words(band: float = REST_BAND) -> str:
    """The band in words, for a page's prose: ``"1/3 of the gap to the neighbouring saddle level"``."""
    from fractions import Fraction

    return f"{Fraction(band).limit_denominator(12)} of the gap to the neighbouring saddle level"


@dataclass
class SaddlePlateaus:
    """The rests of a curve at the saddles M_m (:func:`saddle_plateaus`)."""

    plateaus: Plateaus  # every rest, in order: its level (median loss), first and last step, the drops between rests
    m: list  # for each rest, the saddle m it sits at
    visited: list  # the m of every rest, in order
    complete: list  # (m, length in steps) of the rests that end before the curve does
    long: list  # the m of the rests that are long (:func:`classify_long`; a cut one once it already is)

    @property
    def last_complete(self) -> int:
        """The largest m among the complete plateaus (0 if none)."""
        return max((m for m, _ in self.complete), default=0)


def rest_bands(levels: ArrayLike, band: float = REST_BAND) -> tuple[np.ndarray, np.ndarray]:
    """The lower and upper edge of each saddle's band (:data:`REST_BAND`): L(M_m) − b·(L(M_m) − L(M_{m+1})) and
    L(M_m) + b·(L(M_{m−1}) − L(M_m)), the first and last level mirroring their one gap. ``levels`` must fall
    strictly (L(M_0) > L(M_1) > …) and 0 < ``band`` < 1/2, so that no two bands overlap."""
    levels = np.asarray(levels, dtype=np.float64)
    if levels.ndim != 1 or levels.size < 2 or not np.all(np.diff(levels) < 0):
        raise ValueError(f"levels must be at least two strictly falling saddle losses, got {levels}")
    if not 0 < band < 0.5:
        raise ValueError(f"band must lie strictly between 0 and 1/2 (a fraction of the gap), got {band}")
    gaps = -np.diff(levels)
    below = np.concatenate([gaps, gaps[-1:]])  # gap to the next level down
    above = np.concatenate([gaps[:1], gaps])  # gap to the level above
    return levels - band * below, levels + band * above


def saddle_rests(loss: ArrayLike, levels: ArrayLike, *, band: float = REST_BAND, tol: float | None = None,
                 steps: ArrayLike | None = None, min_length: int | None = None) -> tuple[list[int], Plateaus]:
    """The rests of ``loss`` at the saddles L(M_0) … L(M_D) (``levels``, ``theory.plateau_losses``): the one
    plateau classifier of the package. Returns ``(m, Plateaus)``: the saddle of each rest and the rests.

    Each step belongs to the saddle whose band (:func:`rest_bands`, :data:`REST_BAND`) holds its loss, or to none;
    a rest is a maximal run of consecutive steps at one saddle lasting at least ``min_length`` samples (default
    max(3, n/400); shorter runs are a drop passing through a band) and at least :data:`REST_MIN_DWELL` times the
    steps a passage through its band would take at the speed of the drop into it (:func:`is_transit`), and over its
    core the loss must fall at under :data:`REST_MAX_RATE` of the steepest rate of the drops on either side
    (:func:`is_slow`: a shoulder, a drop slowing down in the band, is not a rest). Two runs at
    the same saddle with nothing but fewer than ``min_length`` unassigned samples between them are one rest (noise
    can leave a band for a moment).
    Adjacent levels are never merged, however close: a step lies in one band at most. A rest's level is the median
    loss over its core (:func:`rest_core`), and a run whose level lies farther than ``tol`` (default
    :data:`REST_TOL`) from its saddle's is a shoulder on the way, not a rest there: it is left out. The drops
    between rests are read as in :func:`detect_plateaus`.
    """
    tol = REST_TOL if tol is None else float(tol)
    y = np.asarray(loss, dtype=np.float64)
    n = y.size
    if n < 3:
        raise ValueError("need at least 3 loss values")
    x = np.arange(n) if steps is None else np.asarray(steps)
    lo, hi = rest_bands(levels, band)
    min_len = min_length if min_length is not None else max(3, n // 400)
    inside = (y[:, None] >= lo) & (y[:, None] <= hi)
    label = np.where(inside.any(axis=1), inside.argmax(axis=1), -1)
    change = np.flatnonzero(np.diff(label)) + 1
    runs = [[label[a], a, b - 1] for a, b in zip(np.r_[0, change], np.r_[change, n]) if label[a] >= 0]
    long_enough = [r for r in _join_runs(runs, min_len) if r[2] - r[1] + 1 >= min_len]  # else a drop passing by
    levels = np.asarray(levels, dtype=np.float64)
    rests = [(int(m), a, b) for m, a, b in _join_runs(long_enough, min_len)
             if not is_transit(y, x, levels, int(m), a, b) and is_slow(y, x, levels, int(m), a, b)]
    rests = [(m, a, b) for m, a, b in rests if abs(_rest_level(y[a:b + 1]) - levels[m]) <= tol]
    spans = [(a, b) for _, a, b in rests]
    rest_levels = np.array([_rest_level(y[a:b + 1]) for a, b in spans])
    return [m for m, _, _ in rests], Plateaus(levels=rest_levels, starts=np.array([x[a] for a, _ in spans]),
                                              ends=np.array([x[b] for _, b in spans]),
                                              drop_steps=_drops_between(y, x, spans, rest_levels))


REST_LEVEL_QUANTILE = 0.1  # the slowest tenth of a rest's steps: its closest approach to the saddle


def rest_core(y: ArrayLike) -> np.ndarray:
    """Which samples of a rest's loss ``y`` are its core: its slowest steps (``|Δloss|`` at most its
    ``REST_LEVEL_QUANTILE`` quantile). The gradient is smallest where the curve passes closest to the saddle, so
    the core is the saddle whether the curve sits there long or only slows down on its way through the band; what is
    read "on a plateau" (its level, a measure of the weights) is read there, away from the steps entering or leaving
    the band."""
    y = np.asarray(y, dtype=np.float64)
    speed = np.abs(np.gradient(y)) if y.size > 1 else np.zeros(1)
    return speed <= np.quantile(speed, REST_LEVEL_QUANTILE)


def _rest_level(y) -> float:
    """A rest's level: the median loss over its core (:func:`rest_core`)."""
    return float(np.median(y[rest_core(y)]))


def _join_runs(runs, gap: int) -> list:
    """Runs ``[m, first, last]`` with consecutive runs at the same m joined where fewer than ``gap`` samples lie
    between them."""
    out: list[list[int]] = []
    for m, a, b in runs:
        if out and out[-1][0] == m and a - out[-1][2] - 1 < gap:
            out[-1][2] = b
        else:
            out.append([m, a, b])
    return out


#: A rest lasts at least this many times the steps a passage through its band takes at the speed of the drop into
#: it (:func:`is_transit`). Our choice: at that speed the band is crossed in ``passage`` steps, so a run in the band
#: that lasts twice as long has spent at least as long again at the level as passing it would have taken.
REST_MIN_DWELL = 2.0


def passage_steps(y: np.ndarray, x: np.ndarray | Sequence[float], levels: ArrayLike, m: int, a: int) -> float:
    """The steps a curve ``y`` (at ``x``) would take to cross saddle m's band, b·(g_above + g_below) wide (b =
    :data:`REST_BAND`, g the gaps to the neighbouring levels), at the speed of the drop into it: the steepest fall
    per step between its leaving the band above (its last sample at or above that band's lower edge) and ``a``, where
    it enters. 0 for the top saddle or a run that starts the curve (no drop into it). A shoulder on the way is slow and
    does not count: the drop's speed is its steepest."""
    if a == 0 or m == 0:
        return 0.0
    levels = np.asarray(levels, dtype=np.float64)
    lo, _ = rest_bands(levels)
    left = np.flatnonzero(y[:a] >= lo[m - 1])
    i0 = int(left[-1]) if left.size else 0
    fall = -np.diff(y[i0:a + 1]) / np.diff(np.asarray(x[i0:a + 1], dtype=np.float64))
    speed = float(fall.max()) if fall.size else 0.0
    if speed <= 0:
        return 0.0
    g_above = levels[m - 1] - levels[m]
    g_below = levels[m] - levels[m + 1] if m + 1 < len(levels) else g_above
    return REST_BAND * (g_above + g_below) / speed


def is_transit(y: np.ndarray, x: np.ndarray | Sequence[float], levels: ArrayLike, m: int, a: int, b: int, *,
               min_dwell: float = REST_MIN_DWELL) -> bool:
    """Whether samples a … b of ``y`` in saddle m's band are a drop passing through it rather than a rest: they
    last fewer than ``min_dwell`` × :func:`passage_steps` steps."""
    return bool(x[b] - x[a] + 1 < min_dwell * passage_steps(y, x, levels, m, a))


#: Over a rest's core (:func:`rest_core`) the loss falls at most this fraction of the steepest rate of the drops into
#: and out of it (:func:`is_slow`). Why 0.02, from the paper-preset curves (median core rate ÷ adjacent peak): the
#: rests at M_0 and the long ones fall at 3e-7 to 1e-3 of their drops' speed, the short rests of Figure 3a's six
#: seeds at 5e-4 to 0.01; the shoulders a drop makes while passing a band fall at 0.036 (the P = 80000 M_1 of the
#: population page) to 0.29 (Figure 4's R = 8 M_4 at seed 11; Figure 11's M_1 at 0.19). A rest must be at least
#: twice as slow as the slowest of Figure 3a's and almost half as slow as the fastest shoulder; between 0.01 and 0.04
#: the curves give no clean gap (a few runs of Figure 12 at 0.015-0.03), and 0.02 splits it.
REST_MAX_RATE = 0.02


def adjacent_drop_rate(y, x, levels, m: int, a: int, b: int) -> float:
    """The steepest fall per step of ``y`` (at ``x``) in the drops on either side of the run a … b in saddle m's
    band: the drop in, from the curve's last sample in or above the band above (at or above its lower edge,
    :func:`rest_bands`) to ``a``, and the drop out, from ``b`` to its first sample in or below the band below (at or
    below its upper edge); 0 where the run has no drop on either side (it starts or ends the curve at the first or
    last saddle)."""
    lo, hi = rest_bands(levels)
    xs = np.asarray(x, dtype=np.float64)
    spans = []
    if a > 0 and m > 0:
        left = np.flatnonzero(y[:a] >= lo[m - 1])
        spans.append((int(left[-1]) if left.size else 0, a))
    if b + 1 < y.size and m + 1 < len(levels):
        right = np.flatnonzero(y[b + 1:] <= hi[m + 1])
        spans.append((b, b + 1 + int(right[0]) if right.size else y.size - 1))
    rates = [-np.diff(y[i:j + 1]) / np.diff(xs[i:j + 1]) for i, j in spans if j > i]
    return float(max((r.max() for r in rates), default=0.0))


def is_slow(y, x, levels, m: int, a: int, b: int, *, max_rate: float = REST_MAX_RATE) -> bool:
    """Whether the loss ``y`` rests over samples a … b in saddle m's band rather than slows down on its way through
    (a shoulder): its median fall per step over the core (:func:`rest_core`), abs(ΔL/Δt), is at most ``max_rate`` ×
    the steepest fall per step of the drops on either side (:func:`adjacent_drop_rate`). A run with no drop beside
    it is slow, and so is a run at the last level L(M_D): no drop lies beyond it for a shoulder to belong to, and a
    curve still settling there has arrived at its minimum."""
    peak = adjacent_drop_rate(y, x, levels, m, a, b)
    if peak <= 0 or m == len(levels) - 1:
        return True
    seg = y[a:b + 1]
    rate = np.abs(np.gradient(seg, np.asarray(x[a:b + 1], dtype=np.float64)))
    return bool(np.median(rate[rest_core(seg)]) <= max_rate * peak)


#: A complete rest is *long* when it lasts at least this fraction of the same curve's first rest, at M_0 (its first
#: escape, from the initial scale: the one yardstick every curve carries inside its own window). Our choice: a rest
#: ended by a head whose value weight has already grown is a transit of a few hundred steps; one that lasts half a
#: fresh head's first escape or more needed a fresh head to escape. The rank-one escape time at M_m grows as
#: (λ_1/λ_{m+1})² and for small directions lies far beyond most windows, so it is not the yardstick.
LONG_FRACTION = 0.5


def saddle_name(subset: Iterable[int]) -> str:
    """A saddle by what it has learned (0-based directions): ``"M_m"`` when ``subset`` is the m largest directions,
    else the set itself, counted from 1 as the paper does: ``"{1,2,3,5}"``."""
    s = sorted(int(d) for d in subset)
    return f"M_{len(s)}" if s == list(range(len(s))) else "{" + ",".join(str(d + 1) for d in s) + "}"


@dataclass
class Rest:
    """One rest of a curve (:func:`subset_rests`): the saddle it sits at, named by the directions learned there."""

    subset: tuple  # the directions learned (0-based, increasing)
    level: float  # the rest's loss, the median over its core (:func:`rest_core`)
    theory: float  # the saddle's loss L(A_S) (``theory.fixed_point_loss``)
    start: int  # first step
    end: int  # last step
    complete: bool  # ends before the curve does
    long: bool | None  # lasts LONG_FRACTION of the curve's rest at M_0 (None: not classified)
    expected: float | None  # that yardstick, the M_0 rest in steps (None: not classified)

    @property
    def name(self) -> str:
        return saddle_name(self.subset)

    @property
    def in_order(self) -> bool:
        """Whether the saddle is an M_m (the m largest directions)."""
        return list(self.subset) == list(range(len(self.subset)))

    @property
    def dwell(self) -> int:
        return int(self.end - self.start)


def learned_at(step: float, learned_steps: ArrayLike, learned: ArrayLike) -> tuple:
    """The directions learned at ``step``: the row of ``learned`` (snapshot × direction, booleans) at the last
    snapshot step of ``learned_steps`` at or before it (the first snapshot before any)."""
    i = max(int(np.searchsorted(np.asarray(learned_steps), step, side="right")) - 1, 0)
    return tuple(int(d) for d in np.flatnonzero(np.asarray(learned)[i]))


def subset_rests(loss: ArrayLike, cov: ArrayLike, N: int, *, steps: ArrayLike | None = None,
                 learned: ArrayLike | None = None, learned_steps: ArrayLike | None = None, band: float = REST_BAND,
                 tol: float | None = None) -> list[Rest]:
    """The rests of ``loss`` (:func:`saddle_rests`: in a saddle's band, not a transit), each at the saddle of WHAT
    IS LEARNED there: the subset S of eigen-directions the weights carry at the middle of its core (``learned``:
    snapshot × direction booleans at ``learned_steps``, e.g. ``events.learned_directions``), the M_m of its band
    where no snapshots are given. A rest whose level lies farther than ``tol`` (default :data:`REST_TOL`) from L(A_S)
    (``theory.fixed_point_loss``) is a shoulder and left out. A complete rest is long when it lasts at least
    :data:`LONG_FRACTION` of the curve's own rest at M_0 (none: not classified; :func:`classify_long`)."""
    tol = REST_TOL if tol is None else float(tol)
    y = np.asarray(loss, dtype=np.float64)
    x = np.arange(y.size) if steps is None else np.asarray(steps)
    levels = theory.plateau_losses(cov, N)
    lam = theory.spectrum(cov)[0]
    m_of, p = saddle_rests(y, levels, band=band, tol=np.inf, steps=x)
    found = []
    for m, a, b, level in zip(m_of, p.starts, p.ends, p.levels):
        on = (x >= a) & (x <= b)
        core = x[on][rest_core(y[on])]
        middle = core[len(core) // 2]
        subset = tuple(range(m)) if learned is None else learned_at(middle, cast(ArrayLike, learned_steps), learned)
        loss_s = theory.fixed_point_loss(cov, N, subset)
        if abs(level - loss_s) <= tol:
            found.append(Rest(subset, float(level), loss_s, int(a), int(b), bool(b < x[-1]), None, None))
    classify_long(found, lam, x[0])
    return found


def classify_long(rests: list, eigenvalues: np.ndarray | Sequence[float] | None = None,
                  first_step: float = 0) -> None:
    """Set ``long`` and ``expected`` of each rest of ``rests`` (in order; :class:`Rest`): long when its dwell is at
    least :data:`LONG_FRACTION` × t0, t0 = the dwell of the complete rest at M_0 that starts the curve (at
    ``first_step``), the curve's own first escape; ``expected`` is t0. Without that rest no rest is classified. A
    rest cut by the end of the curve lasts at least its dwell: it is long once that already reaches the threshold,
    else not classified (the window cannot tell). The minimum, where all ``len(eigenvalues)`` directions are learned,
    is no plateau and is not classified; the yardstick itself is read from the curve, not from the spectrum."""
    t0 = next((r.end - first_step for r in rests[:1] if not r.subset and r.start == first_step and r.complete), None)
    if t0 is None or t0 <= 0:
        return
    D = None if eigenvalues is None else len(eigenvalues)
    for r in (r for r in rests if len(r.subset) != D):
        r.expected = float(t0)
        long = bool(r.dwell >= LONG_FRACTION * t0)
        r.long = long if r.complete or long else None


def saddle_levels(loss: ArrayLike, levels: np.ndarray | Sequence[float], *, band: float = REST_BAND,
                  steps: ArrayLike | None = None) -> np.ndarray:
    """For each saddle M_0 … M_D (``levels``: L(M_0) … L(M_D), ``theory.plateau_losses``), the level of the first
    rest of ``loss`` there (:func:`saddle_rests`), NaN where the curve never rests there. Figures and sweeps put the
    plateaus they found beside the theory with this."""
    m_of, p = saddle_rests(loss, levels, band=band, steps=steps)
    out = np.full(len(levels), np.nan)
    for m, level in zip(m_of, p.levels):
        if np.isnan(out[m]):
            out[m] = level
    return out


def saddle_plateaus(loss: ArrayLike, levels: np.ndarray | Sequence[float], *, band: float = REST_BAND,
                    eigenvalues: np.ndarray | Sequence[float] | None = None,
                    steps: ArrayLike | None = None) -> SaddlePlateaus:
    """The rests of ``loss`` at the saddles among ``levels`` (``theory.plateau_losses``: L(M_0) … L(M_D);
    :func:`saddle_rests`), and which of them are *long*.

    A rest is complete if it ends before the curve does (the last one is cut by the end of the run and is
    classified long only once it already lasts long enough); a rest is long if it lasts at least
    :data:`LONG_FRACTION` of the curve's own rest at M_0 (:func:`classify_long`; none is classified without
    ``eigenvalues``, kept as the switch that asks for it). The
    theory's long plateaus for rank-R heads are ``theory.long_plateaus(D, R)``: m = 0, R, 2R, ….
    """
    m_of, p = saddle_rests(loss, levels, band=band, steps=steps)
    x = np.arange(np.size(loss)) if steps is None else np.asarray(steps)
    rests = [Rest(tuple(range(m)), float(lv), float(levels[m]), int(a), int(b), bool(b < x[-1]), None, None)
             for m, lv, a, b in zip(m_of, p.levels, p.starts, p.ends)]
    if eigenvalues is not None:
        classify_long(rests, eigenvalues, x[0])
    complete = [(m, r.dwell) for m, r in zip(m_of, rests) if r.complete]
    long = sorted({m for m, r in zip(m_of, rests) if r.long})
    return SaddlePlateaus(plateaus=p, m=m_of, visited=list(m_of), complete=complete, long=long)


@dataclass
class RankSummary:
    """What a rank-R ATTN_S loss curve did, against the saddles L(M_0) … L(M_D) (:func:`rank_summary`)."""

    rank: int
    levels: np.ndarray  # L(M_0) … L(M_D), as given
    plateaus: SaddlePlateaus
    expected_long: list  # the paper's long plateaus m = 0, R, 2R, … up to the last plateau the curve reached
    learned: int  # directions learned: drops made (midpoints between consecutive levels passed)
    final_loss: float
    final_theory: float  # L(M_learned)

    def rows(self, label: str = "", *, key: str = "", paper_learned: int | None = None,
             predicted_learned: int | None = None) -> list[dict]:
        """``numbers.json`` rows: long plateaus (found vs theory, as text), directions learned (beside
        ``paper_learned`` where the paper states it, and as theory ``predicted_learned``, the drops a prediction
        (e.g. the population run from the run's own start) makes in the same steps), each plateau level at a saddle,
        and the final loss; ``label`` is appended to each quantity (e.g. ", published window") and ``key`` to each
        row's key (``R1.<key>.learned``, ``R1.<key>.plateau.M2``, …)."""
        R = self.rank
        k = f"R{R}" + (f".{key}" if key else "")
        out: list[dict] = [dict(key=f"{k}.long_plateaus",
                                quantity=f"R={R}: long plateaus m{label} (theory: multiples of R)",
                    theory=" ".join(map(str, self.expected_long)), reproduced=" ".join(map(str, self.plateaus.long))),
               dict(key=f"{k}.learned", quantity=f"R={R}: directions learned{label}"
                    + (" (theory: drops predicted from the initial weights)" if predicted_learned is not None else ""),
                    paper=paper_learned,
                    theory=predicted_learned,
                    reproduced=self.learned)]
        firsts: dict[int, float] = {}
        for m, level in zip(self.plateaus.m, self.plateaus.plateaus.levels):
            if m is not None:
                firsts.setdefault(m, level)  # a saddle's first rest (a curve may come back near it)
        out += [dict(key=f"{k}.plateau.M{m}", quantity=f"R={R}: plateau L(M_{m}){label}", theory=self.levels[m],
                     reproduced=level) for m, level in firsts.items()]
        out.append(dict(key=f"{k}.final_loss", quantity=f"R={R}: final loss{label}", theory=self.final_theory,
                        reproduced=self.final_loss))
        return out


def rank_summary(loss: ArrayLike, levels: ArrayLike, rank: int, *, band: float = REST_BAND,
                 eigenvalues: np.ndarray | Sequence[float] | None = None) -> RankSummary:
    """The long plateaus of a rank-``rank`` ATTN_S curve (:func:`saddle_plateaus`) beside the theory's
    (``theory.long_plateaus``, counted up to the last plateau the curve reached, cut by the end or not), the
    directions it learned (:func:`drop_steps` passed) and its final loss beside L(M_learned)."""
    loss, levels = np.asarray(loss, dtype=np.float64), np.asarray(levels, dtype=np.float64)
    sp = saddle_plateaus(loss, levels, band=band, eigenvalues=eigenvalues)
    learned = directions_learned(loss, levels)
    expected = [m for m in theory.long_plateaus(len(levels) - 1, rank) if m <= max(sp.visited, default=0)]
    return RankSummary(rank=rank, levels=levels, plateaus=sp, expected_long=expected, learned=learned,
                       final_loss=float(loss[-1]), final_theory=float(levels[learned]))


def directions_learned(loss: ArrayLike, levels: ArrayLike, steps: ArrayLike | None = None) -> int:
    """How many eigen-directions a curve has learned: the drops between consecutive saddle levels ``levels``
    (L(M_0) … L(M_D)) whose midpoint it has passed (:func:`drop_steps`)."""
    return int(np.sum(np.isfinite(drop_steps(loss, levels, steps))))


@dataclass
class DropLag:
    """Two curves of one run set side by side at matched levels (:func:`drop_lag`): for each drop d = 1 … D, the step
    at which each passes the midpoint towards L(M_d) (NaN where it does not within the run) and the lag (the curve's
    step − the reference's, NaN unless both pass it); for each saddle both rest at, the gap between their plateau
    levels (curve − reference; NaN where either does not rest there)."""

    steps: np.ndarray
    reference_steps: np.ndarray
    lag: np.ndarray
    level_gap: np.ndarray


def drop_lag(loss: ArrayLike, reference: ArrayLike, levels: ArrayLike, steps: ArrayLike | None = None) -> DropLag:
    """How far ``loss`` lies from ``reference`` along the time axis and along the loss axis, each at matched levels:
    the lag of each drop, the difference of the steps at which the two pass the midpoint between L(M_{d−1}) and
    L(M_d) (:func:`drop_steps`, ``levels`` = L(M_0) … L(M_D)), and the gap between their plateau levels at each
    saddle (:func:`saddle_levels`). On a steep fall a lag of a few steps is a large gap in loss at one step, so two
    curves are compared here at the same level, never at the same step."""
    levels = np.asarray(levels, dtype=float)
    a, b = drop_steps(loss, levels, steps), drop_steps(reference, levels, steps)
    return DropLag(steps=a, reference_steps=b, lag=a - b,
                   level_gap=saddle_levels(loss, levels, steps=steps) - saddle_levels(reference, levels, steps=steps))


def scalar_ode_overlay(loss: ArrayLike, lr: float, cov: ArrayLike, N: int, m: int, *, level: float | None = None,
                       start_frac: float = 0.05, normalize: str, model: str = "attnS") -> tuple[np.ndarray, np.ndarray]:
    """The scalar ODE's prediction for drop m → m+1 of a rank-one ATTN_S run, started from the run itself.

    The start is the first step where the loss has fallen ``start_frac`` of the theoretical drop below ``level`` (the
    run's own plateau level; default L(M_m)); v0 is the head size that gives that fall (``theory.v_from_loss_drop``).
    From there ``theory.scalar_ode`` runs in t/τ = 2·η·(step − start). The prediction is shifted by
    ``level − L(M_m)``, so a finite-sample offset of the plateau does not count as a dynamics error.
    Returns (steps, predicted loss) from the start to the end of the run.
    """
    loss = np.asarray(loss, dtype=np.float64)
    theory_levels = theory.plateau_losses(cov, N)
    level = theory_levels[m] if level is None else float(level)
    size = theory_levels[m] - theory_levels[m + 1]
    below = np.flatnonzero(loss <= level - start_frac * size)
    if below.size == 0:
        raise ValueError(f"the loss never falls {start_frac} of drop {m} below {level}")
    start = int(below[0])
    v0 = theory.v_from_loss_drop(cov, N, m, level - loss[start])
    steps = np.arange(start, loss.size)
    t = theory.steps_to_time(steps - start, lr, normalize=normalize, model=model, N=N)
    return steps, theory.scalar_loss_curve(cov, N, m, v0, t) + (level - theory_levels[m])


# --------------------------------------------------------------------------------------------------------------
# Drops of a fall, counted from its rate (Figure 5)
# --------------------------------------------------------------------------------------------------------------

#: The least share of a curve's whole fall y(0) − min y that one drop must make (:func:`count_drops`).
DROP_SHARE = 0.1
#: Two stretches of fast fall are two drops when the fall rate between them dips below this fraction of the
#: smaller of their peak rates (:func:`count_drops`); a shallower dip is one drop that merely slows.
DROP_DIP = 1 / 3


@dataclass
class Drops:
    """The drops of a fall (:func:`count_drops`): the step of each (its midpoint crossing), its share of the whole
    fall, the slow stretch between consecutive drops (step, loss, and the dip: the rate there over the smaller peak
    rate beside it), and whether the run has settled by its end."""

    steps: np.ndarray
    shares: np.ndarray
    pause_steps: np.ndarray
    pause_losses: np.ndarray
    pause_dips: np.ndarray
    settled: bool

    def __len__(self) -> int:
        return len(self.steps)


def fall_rate(loss, steps=None, *, window: int | None = None) -> np.ndarray:
    """The fall rate r(t) = (L(t − h) − L(t + h)) / (step(t + h) − step(t − h)) of a loss curve, averaged over
    ``window`` = h samples each side (one-sided at the ends; default h = max(1, n/120)), clipped at 0 (a rise is no
    fall)."""
    y = np.asarray(loss, dtype=np.float64)
    n = y.size
    x = np.arange(n, dtype=np.float64) if steps is None else np.asarray(steps, dtype=np.float64)
    h = window if window is not None else max(1, n // 120)
    lo, hi = np.clip(np.arange(n) - h, 0, n - 1), np.clip(np.arange(n) + h, 0, n - 1)
    return np.maximum((y[lo] - y[hi]) / (x[hi] - x[lo]), 0.0)


def _merge_cuts(cuts: list, r, y, total: float, dip: float, share: float) -> list:
    """Drop the cuts (sample indices between bumps of the rate ``r``) that do not part two drops: first the one with
    the shallowest dip while any dip is at least ``dip``, then the shallower cut beside the smallest bump while a
    bump falls less than ``share`` of ``total``."""
    def bounds(cs):
        edges = [0, *cs, len(r) - 1]
        return list(zip(edges[:-1], edges[1:]))

    def dips(cs):
        peaks = [r[a:b + 1].max() for a, b in bounds(cs)]
        return [r[c] / max(min(p, q), 1e-300) for c, p, q in zip(cs, peaks[:-1], peaks[1:])]

    while cuts and max(dips(cuts)) >= dip:
        cuts.pop(int(np.argmax(dips(cuts))))
    while cuts:
        falls = [y[a] - y[b] for a, b in bounds(cuts)]
        k = int(np.argmin(falls))
        if falls[k] >= share * total:
            break
        beside = [i for i in (k - 1, k) if 0 <= i < len(cuts)]
        cuts.pop(max(beside, key=lambda i: r[cuts[i]]))
    return cuts


def count_drops(loss, steps=None, *, share: float = DROP_SHARE, dip: float = DROP_DIP,
                window: int | None = None) -> Drops:
    """The drops of a falling loss curve, counted from its fall rate r (:func:`fall_rate`), so that a fall still
    under way at the end of the run counts once it has made ``share`` of the whole fall.

    The rule: cut the curve at every local minimum of r; two neighbouring stretches stay apart (two drops) only
    where r at the cut is below ``dip`` (:data:`DROP_DIP`) times the smaller of their peak rates; then every stretch
    must fall at least ``share`` (:data:`DROP_SHARE`) of the whole fall y(0) − min y, else it joins its neighbour
    across the shallower cut. Each remaining stretch is a drop, its step where the loss crosses the midpoint of the
    stretch's own start and end loss (:func:`drop_steps`). No drop where the whole fall is below :data:`MIN_FALL` of
    y(0). *Settled*: at the rate of its last tenth, the run carried on for as many steps again would fall less than
    ``share`` of the whole fall (a run that has not settled may make another drop)."""
    y = np.asarray(loss, dtype=np.float64)
    if y.size < 3:
        raise ValueError("need at least 3 loss values")
    x = np.arange(y.size, dtype=np.float64) if steps is None else np.asarray(steps, dtype=np.float64)
    total = float(y[0] - y.min())
    k = max(2, y.size // 10)
    end_rate = max(0.0, (y[-k] - y[-1]) / (x[-1] - x[-k]))
    settled = bool(end_rate * (x[-1] - x[0]) < share * max(total, MIN_FALL * abs(y[0])))
    empty = np.array([])
    if total < MIN_FALL * abs(y[0]):
        return Drops(empty, empty, empty, empty, empty, settled)
    r = fall_rate(y, x, window=window)
    interior = np.arange(1, y.size - 1)
    minima = interior[(r[interior] <= r[interior - 1]) & (r[interior] < r[interior + 1])]
    cuts = _merge_cuts([int(c) for c in minima], r, y, total, dip, share)
    edges = [0, *cuts, y.size - 1]
    spans = list(zip(edges[:-1], edges[1:]))
    at = [drop_steps(y[a:b + 1], [y[a], y[b]], x[a:b + 1])[0] for a, b in spans]
    peaks = [r[a:b + 1].max() for a, b in spans]
    dips = [r[c] / min(p, q) for c, p, q in zip(cuts, peaks[:-1], peaks[1:])]
    return Drops(np.array(at), np.array([(y[a] - y[b]) / total for a, b in spans]), x[cuts].astype(float),
                 y[cuts], np.array(dips), settled)


def drop_rule_words(share: float = DROP_SHARE, dip: float = DROP_DIP) -> str:
    """The rule of :func:`count_drops` in words, for a page's prose."""
    from fractions import Fraction

    return (f"the fall rate, averaged over 1/60 of the run, is cut at each of its dips; two fast stretches are two "
            f"drops where the rate between them falls below {Fraction(dip).limit_denominator(12)} of the smaller of "
            f"their peak rates, and each drop makes at least {share:.0%} of the whole fall, so a fall still under way "
            "at the end of the run counts once it has made that share. A run has settled when, carried on at the "
            f"rate of its last tenth for as many steps again, it would fall less than {share:.0%} of its whole fall; "
            "in a run that has not settled another drop may still come")
