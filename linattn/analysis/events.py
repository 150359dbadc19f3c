"""Learning events read off a run: which head learns which eigen-direction, and when (Figures 3b, 3c and the
inside-a-head appendix).

Directions are indexed 0 … D−1 in order of decreasing eigenvalue (``theory.spectrum``); heads 0 … H−1. The functions
take arrays recorded by :func:`~linattn.training.experiment.run` (values with ``track_value``, weights or head matrices
as snapshots) and return plain numbers, so each figure's reading of its run is one call a test can reach.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .. import theory
from .diagnostics import mode_overlaps


def vector_alignment(W: ArrayLike, cov: ArrayLike) -> np.ndarray:
    """(H, D): ``abs(e_dᵀ w_h) / ‖w_h‖`` for the rank-one key or query rows w_h = W[h, 0, :D] (``W_K`` or ``W_Q`` of a
    rank-one ATTN_S, shape (H, 1, D+1)): 1 when the row points along e_d, ≈ 0 when orthogonal to it."""
    W = np.asarray(W, dtype=np.float64)
    _, E = theory.spectrum(cov)
    w = W[:, 0, :E.shape[0]]
    return np.abs(w @ E) / np.linalg.norm(w, axis=1, keepdims=True)


def direction_fractions(heads: ArrayLike, cov: ArrayLike, N: int) -> np.ndarray:
    """f_{h,d} = λ_d c_d · e_dᵀ A_h e_d for head matrices ``heads`` (…, H, D, D) in the paper's normalisation: the
    fraction of the fixed point's weight 1/(λ_d c_d) on e_d that head h carries (1: the head alone implements it).
    Rotation-free, so meaningful for heads of any rank."""
    lam, _ = theory.spectrum(cov)
    return mode_overlaps(heads, cov) * (lam * theory.c_d(cov, N))


def first_crossings(series: ArrayLike, threshold: float, steps: ArrayLike) -> dict[tuple[int, int], int]:
    """For a series (snapshots, H, D), the first step (from ``steps``, one per snapshot) at which entry (h, d)
    exceeds ``threshold``, for every (h, d) that ever does; keyed (h, d)."""
    series, steps = np.asarray(series), np.asarray(steps)
    above = series > threshold
    return {(h, d): int(steps[np.argmax(above[:, h, d])])
            for h in range(series.shape[1]) for d in range(series.shape[2]) if above[:, h, d].any()}


def first_learner(crossings: dict[tuple[int, int], int]) -> dict[int, tuple[int, int]]:
    """From :func:`first_crossings`: for each direction d, (head, step) of the earliest crossing (ties: lowest head)."""
    out: dict[int, tuple[int, int]] = {}
    for (h, d), s in sorted(crossings.items()):
        if d not in out or s < out[d][1]:
            out[d] = (h, s)
    return out


def heads_in_order(crossings: dict[tuple[int, int], int]) -> list[tuple[int, list[int], list[int]]]:
    """From :func:`first_crossings`: (head, its directions, their steps) for every head with a crossing, directions
    in the order the head learned them, heads in the order of their first one."""
    per_head: dict[int, list[tuple[int, int]]] = {}
    for (h, d), s in crossings.items():
        per_head.setdefault(h, []).append((s, d))
    rows = [(h, [d for _, d in sorted(v)], [s for s, _ in sorted(v)]) for h, v in per_head.items()]
    return sorted(rows, key=lambda r: (r[2][0], r[0]))


def value_learners(final_values: ArrayLike, directions: ArrayLike,
                   v_final: np.ndarray | Sequence[float]) -> dict[int, int]:
    """{direction d: head h} for the rank-one heads whose final value weight exceeds half the theory's
    v_final[d] = (λ_d c_d)^{-1/3} of the direction they align with (``directions[h]``, e.g.
    ``diagnostics.head_direction``); where two heads share a direction the larger value keeps it."""
    final_values = np.asarray(final_values, dtype=np.float64)
    out: dict[int, int] = {}
    for h, d in enumerate(np.asarray(directions, dtype=int)):
        if final_values[h] > 0.5 * v_final[d] and (d not in out or final_values[h] > final_values[out[d]]):
            out[int(d)] = h
    return dict(sorted(out.items()))


def _half_rise_time(v, t, v_inf: float) -> float:
    """The time at which ``v`` first reaches v_inf/2 (linear interpolation where ``v`` rises monotonically)."""
    v, t = np.asarray(v, dtype=np.float64), np.asarray(t, dtype=np.float64)
    if np.all(np.diff(v) > -1e-9):
        return float(np.interp(0.5 * v_inf, v, t))
    return float(t[np.argmax(v >= 0.5 * v_inf)])


def scalar_ode_rise(v: ArrayLike, t: ArrayLike, lam: float, c: float, *, v_start: float = 1e-3) -> np.ndarray:
    """The scalar ODE τ v̇ = λ² v² − cλ³ v⁵ (``theory.scalar_ode``, paper Section 5) for one head learning direction
    (λ, c), shifted in time so that it reaches half its final value (λc)^{-1/3} when the run's ``v`` does; sampled at
    the run's times ``t`` (t/τ; NaN before the shifted start). ``v_start`` (× the final value) only sets where the
    ODE is started: far enough below the rise that the shape is the ODE's own."""
    v_inf = (lam * c) ** (-1.0 / 3.0)
    v0 = v_start * v_inf
    t_ode = np.linspace(0.0, 3.0 / (lam**2 * v0), 20001)  # well past the blow-up time τ/(λ² v0)
    v_ode = theory.scalar_ode(lam, c, v0, t_ode)
    shifted = t_ode - _half_rise_time(v_ode, t_ode, v_inf) + _half_rise_time(v, t, v_inf)
    return np.interp(np.asarray(t, dtype=np.float64), shifted, v_ode, left=np.nan, right=v_ode[-1])


#: The rise proper is timed from RISE_FROM to RISE_TO of the final value (our choice). A head can pause low, at about
#: a tenth of its final value, while another head is still learning a neighbouring direction (Figure 3a's run: the
#: head of e₄ sits near 10 % of its final value for some 3000 steps); a window starting at 30 % leaves that shoulder
#: out, and taking the *last* passage of 30 % before the rise leaves out a head that rose part-way and fell back.
RISE_FROM, RISE_TO = 0.3, 0.9


def rise_window(v: ArrayLike, steps: ArrayLike, v_inf: float, *, lo: float = RISE_FROM,
                hi: float = RISE_TO) -> tuple[float, float] | None:
    """(start, end) of a rise: ``end`` the first step at which ``v`` reaches hi·v_inf, ``start`` the last step before
    it at which ``v`` is still below lo·v_inf (both interpolated linearly between neighbouring samples). Time spent
    below lo·v_inf before the rise, on a shoulder or in a rise that fell back, is not part of it. None where ``v``
    never reaches hi·v_inf or is never below lo·v_inf before it (NaN counts as below: the ODE before its start)."""
    v, steps = np.nan_to_num(np.asarray(v, dtype=np.float64), nan=-np.inf), np.asarray(steps, dtype=np.float64)
    end = first_index(v >= hi * v_inf)
    if end is None:
        return None
    below = np.flatnonzero(v[:end] < lo * v_inf)
    if below.size == 0:
        return None

    def crossing(i: int, level: float) -> float:  # between sample i (below level) and i + 1 (at or above it)
        a, b = v[i], v[i + 1]
        return float(steps[i] if not np.isfinite(a) else steps[i] + (level - a) / (b - a) * (steps[i + 1] - steps[i]))

    return crossing(int(below[-1]), lo * v_inf), crossing(end - 1, hi * v_inf)


@dataclass
class RiseComparison:
    """A head's value weight against the scalar ODE during its rise (:func:`compare_rise`)."""

    max_gap: float | None  # max |v − v_ODE| / v_final from 5 % to 95 % of the final value (None: no rise seen)
    rise_steps: float | None  # steps of the rise proper, RISE_FROM → RISE_TO of v_final (rise_window), the run
    rise_steps_ode: float | None  # the same for the ODE (None: the ODE's rise is not within the steps)


def _window_length(v: ArrayLike, steps: ArrayLike, v_inf: float) -> float | None:
    w = rise_window(v, steps, v_inf)
    return None if w is None else w[1] - w[0]


def compare_rise(v: ArrayLike, v_ode: ArrayLike, steps: ArrayLike, v_inf: float) -> RiseComparison:
    """How closely a head's value weight ``v`` follows its shifted ODE ``v_ode`` (:func:`scalar_ode_rise`), both
    sampled at ``steps``, relative to the final value ``v_inf``: the largest gap between them from 5 % to 95 % of
    v_inf, and the time of each one's rise proper (:func:`rise_window`)."""
    v, v_ode, steps = (np.asarray(a, dtype=np.float64) for a in (v, v_ode, steps))
    rise = (v > 0.05 * v_inf) & (v < 0.95 * v_inf) & np.isfinite(v_ode)
    return RiseComparison(
        max_gap=float(np.max(np.abs(v[rise] - v_ode[rise])) / v_inf) if rise.any() else None,
        rise_steps=_window_length(v, steps, v_inf), rise_steps_ode=_window_length(v_ode, steps, v_inf))


RISE_FACTOR = 1.25  # our choice: a rise a quarter longer or shorter than the ODE's is visibly another shape on the page


def rise_verdict(ratio: float, factor: float = RISE_FACTOR) -> str:
    """How a head's rise compares with the scalar ODE's, from ``ratio`` = the run's rise time over the ODE's, both
    over the rise proper (:func:`rise_window`, :class:`RiseComparison`): "as fast as the ODE" when
    factor⁻¹ ≤ ratio ≤ factor, "slower than the ODE" above, "faster than the ODE" below, "not measured" where the
    ratio is not a finite number."""
    if not np.isfinite(ratio) or ratio <= 0:
        return "not measured"
    if ratio > factor:
        return "slower than the ODE"
    return "faster than the ODE" if ratio < 1 / factor else "as fast as the ODE"


LEARNED = 0.5  # our choice: a direction is learned once the heads together carry more than half of its fixed point


def learned_share(fraction: ArrayLike) -> np.ndarray:
    """Σ_h f_{h,d}: the share of each direction's fixed-point weight 1/(λ_d c_d) that the heads carry together
    (``fraction``: …, H, D from :func:`direction_fractions`; the head axis is summed). 1 on S and 0 elsewhere at the
    fixed point A_S, whichever heads carry S."""
    return np.asarray(fraction, dtype=np.float64).sum(axis=-2)


def learned_directions(share: ArrayLike, threshold: float = LEARNED) -> np.ndarray:
    """Which eigen-directions the weights have learned (booleans, the shape of ``share``): those whose
    :func:`learned_share` exceeds ``threshold``. Names the saddle a rest sits at (``loss_curves.subset_rests``), in
    order or not."""
    return np.asarray(share, dtype=np.float64) > threshold


def learned_steps(share: ArrayLike, steps: ArrayLike, threshold: float = LEARNED) -> np.ndarray:
    """The first of ``steps`` (one per snapshot) at which each direction's :func:`learned_share` (snapshot ×
    direction) exceeds ``threshold``; NaN for a direction never learned."""
    share, steps = np.asarray(share, dtype=np.float64), np.asarray(steps)
    above = share > threshold
    return np.array([float(steps[np.argmax(col)]) if col.any() else np.nan for col in above.T])


def out_of_order(first_steps: ArrayLike) -> list[tuple[int, int]]:
    """The pairs (d, d′) of directions (0-based), d < d′ (λ_d ≥ λ_d′), where d′ is learned strictly before d (or d is
    never learned and d′ is): the learning order departs from the order of the eigenvalues there."""
    t = np.asarray(first_steps, dtype=np.float64)
    late = np.where(np.isfinite(t), t, np.inf)
    return [(d, e) for d in range(t.size) for e in range(d + 1, t.size) if np.isfinite(t[e]) and late[e] < late[d]]


# --------------------------------------------------------------------------------------------------------------
# Alignment read against the weights' growth
# --------------------------------------------------------------------------------------------------------------

#: The size at which a head counts as grown, as a fraction of its largest output scale ``max_t |v_h|·‖k_h‖·‖q_h‖``
#: (:func:`output_scale`). From the paper's small start a head's output is ~1e-5 of its largest; a tenth of it is the
#: head carrying a tenth of what it will, the early part of the rise that makes its drop.
GROWN = 0.1
#: A head that passes the alignment cut while its output scale is still below this multiple of its size at the first
#: snapshot, from an overlap at the start of at least :data:`NEARLY_ALIGNED` × the cut, was aligned from nearly the
#: start: its random draw already pointed close to the direction, and it crossed the cut before its output had grown
#: (the head of e₁ in Figure 3a's seed-0 run: 0.88 at step 0, past 0.9 at 1.4 × its starting output scale).
UNGROWN = 2.0
#: The overlap at the start, as a fraction of the alignment cut, from which a head that crosses the cut before its
#: output has grown (:data:`UNGROWN`) is said to be aligned from nearly the start; a head that starts further off and
#: turns to the direction before growing aligned while small.
NEARLY_ALIGNED = 0.9


def output_scale(values: ArrayLike, key_norms: ArrayLike, query_norms: ArrayLike) -> np.ndarray:
    """``|v_h|·‖k_h‖·‖q_h‖`` (any shape, element by element): the size of a rank-one head's output, the norm of its
    matrix v_h k_h q_hᵀ: a rank-one head predicts v_h βᵀ k_h q_hᵀ x_q (paper Section 5). A head's value weight alone
    can move while its key and query are still small, so growth is read on this product, not on v_h."""
    return np.abs(np.asarray(values, dtype=np.float64)) * np.asarray(key_norms) * np.asarray(query_norms)


def scale_fraction(scale: ArrayLike) -> np.ndarray:
    """(snapshots, H): abs(s_h(t)) / max_t abs(s_h), each head's size as a fraction of its largest over the run (its
    final one for a head that keeps what it learned; the largest, for one that hands a direction over to another head
    and shrinks; NaN for a head that is 0 throughout)."""
    v = np.abs(np.asarray(scale, dtype=np.float64))
    top = v.max(axis=0)
    return v / np.where(top > 0, top, np.nan)


def first_index(mask: ArrayLike) -> int | None:
    """The first index at which ``mask`` is true (None if it never is)."""
    hit = np.flatnonzero(mask)
    return int(hit[0]) if hit.size else None


@dataclass
class GrowthAlignment:
    """One head's alignment with one direction read against its growth (:func:`alignment_against_growth`)."""

    overlap_at_start: float  # its overlap with the direction at the first snapshot
    overlap_when_grown: float | None  # its overlap when its size first reaches ``grown`` of its largest (None: never)
    grown_step: int | None  # that step
    aligned_step: int | None  # the first step its overlap exceeds ``aligned`` (None: never)
    size_when_aligned: float | None  # its size over its largest at that step
    growth_when_aligned: float | None  # its size at that step over its size at the first snapshot (None: never
    # aligned, or a size of 0 at the first snapshot)

    def verdict(self, aligned: float) -> str:
        """How the head's alignment and growth came, in the words a page prints: "aligned from the start" (overlap
        above ``aligned`` at the first snapshot, by its random draw), "aligned from nearly the start" (an overlap of
        at least :data:`NEARLY_ALIGNED` × ``aligned`` at the first snapshot, and past ``aligned`` while its size was
        below :data:`UNGROWN` times its size then: only the cut parts it from the first kind), "aligned while small"
        (passed ``aligned`` no later than its size reached the grown fraction of its largest: small against its end,
        which says nothing of how far it had grown from its start, ``growth_when_aligned``), "grew before it
        aligned" (its size reached the grown fraction while its overlap was at most ``aligned``) or "not aligned"
        (never passed ``aligned``)."""
        if self.overlap_at_start > aligned:
            return "aligned from the start"
        if self.aligned_step is None:
            return "not aligned"
        if self.nearly_from_start(aligned):
            return "aligned from nearly the start"
        if self.grown_step is None or self.aligned_step <= self.grown_step:
            return "aligned while small"
        return "grew before it aligned"

    def nearly_from_start(self, aligned: float) -> bool:
        """Whether the head started within :data:`NEARLY_ALIGNED` of the cut ``aligned`` (overlap ≥ that fraction of
        it) and passed the cut before its size reached :data:`UNGROWN` times its size at the first snapshot."""
        return (self.overlap_at_start >= NEARLY_ALIGNED * aligned and self.growth_when_aligned is not None
                and self.growth_when_aligned < UNGROWN)


def alignment_against_growth(overlap: ArrayLike, scale: ArrayLike, steps: ArrayLike, *, aligned: float,
                             grown: float = GROWN) -> GrowthAlignment:
    """One head's overlap with a direction (``overlap``: one per snapshot, e.g. the smaller of its key's and its
    query's, :func:`vector_alignment`) read against its size (``scale``: at the same snapshots, its
    :func:`output_scale`): its overlap at the start and when the size first reaches ``grown`` × its largest
    (:func:`scale_fraction`), and its size when the overlap first exceeds ``aligned`` (as ``first_crossings`` counts
    a crossing), over its largest and over its size at the first snapshot (s_h(t_a) / s_h(t_0): a head can be small
    against its end and yet hundreds of times its start). Silent alignment (Atanasov et al. 2022: from a small start
    the tangent kernel turns to the task while the weights are small, then grows in scale without changing its
    directions) has as its analogue here a head that points along its direction before its output grows:
    :meth:`GrowthAlignment.verdict` says whether this head's data show it."""
    overlap = np.asarray(overlap, dtype=np.float64)
    steps = np.asarray(steps)
    raw = np.abs(np.asarray(scale, dtype=np.float64))
    size = scale_fraction(raw[:, None])[:, 0]
    g, a = first_index(size >= grown), first_index(overlap > aligned)
    return GrowthAlignment(overlap_at_start=float(overlap[0]),
                           overlap_when_grown=None if g is None else float(overlap[g]),
                           grown_step=None if g is None else int(steps[g]),
                           aligned_step=None if a is None else int(steps[a]),
                           size_when_aligned=None if a is None else float(size[a]),
                           growth_when_aligned=None if a is None or raw[0] == 0 else float(raw[a] / raw[0]))
