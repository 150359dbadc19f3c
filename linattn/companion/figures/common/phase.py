"""The phase diagram's rules, pure functions of arrays: the banded verdict against a level (:func:`verdict`: wins,
loses, cannot tell; each test loss's standard error is ``uncertainty.mean_loss_error``'s), where a verdict sets in
along c (:func:`banded_bracket`; :func:`bracket` without a band, for the figure), the sample-wise peak
and the count it sits next to, the null space and rank of the features' covariance, and the population end point and
its crossings solved in c. Every verdict the phase diagram page states comes from one of them."""

from __future__ import annotations

import numpy as np

from ... import uncertainty

#: The settled criterion's defaults: a test loss moved less than TOLERANCE (relative to its final value) over the last
#: WINDOW of the training.
TOLERANCE, WINDOW = 0.02, 0.1

#: E[TTᵀ]'s smallest eigenvalue relative to its largest below which the training loss counts as flat in some
#: direction: its minima then form a valley and the least-squares end point is not unique. (Measured on Figure 14's
#: setting: such cells sit at 1e-16, the others above 1e-9.)
FLAT = 1e-12

#: How far from the midpoint a test loss must lie, in standard errors of its mean over the test sequences, for a
#: verdict: within BAND_Z·SE of it the test set cannot tell which side the loss is on.
BAND_Z = 2.0

#: The verdicts of :func:`verdict`: below the level (wins), above it (loses), within the band (cannot tell).
WINS, LOSES, CANNOT_TELL = 1, -1, 0


def triple(moments) -> tuple[np.ndarray, np.ndarray, float]:
    """(E[TTᵀ], E[yT], E[y²]) of ``objectives.Moments`` as float64 numpy arrays (small, and picklable)."""
    return (moments.TT.detach().cpu().numpy().astype(np.float64),
            moments.yT.detach().cpu().numpy().astype(np.float64), float(moments.yy))


def quadratic_loss(m: np.ndarray, moments: tuple) -> float:
    """L(m) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩ for the moments (E[TTᵀ], E[yT], E[y²])."""
    A, b, c = moments
    return float(c - 2 * b @ m + m @ A @ m)



def verdict(loss, se, level: float, z: float = BAND_Z):
    """Per test loss: :data:`WINS` where it is below ``level`` by more than ``z``·``se``, :data:`LOSES` where above
    it by more, :data:`CANNOT_TELL` within the band (an int array of the broadcast shape)."""
    loss, se = np.asarray(loss, dtype=np.float64), np.asarray(se, dtype=np.float64)
    out = np.where(loss < level - z * se, WINS, np.where(loss > level + z * se, LOSES, CANNOT_TELL))
    return out.astype(np.int64)


def banded_bracket(state, icl) -> tuple[float, float]:
    """Where a verdict sets in for good along the increasing grid ``icl``, from per-cell verdicts ``state``
    (:data:`WINS` where it holds clearly, :data:`LOSES` where it clearly fails, :data:`CANNOT_TELL` between): (a, b)
    with b the smallest grid value from which it holds clearly at every larger one, and a the largest grid value
    below b where it clearly fails — the crossing lies between a and b, cells that cannot tell included. a is NaN
    when no cell below b clearly fails; (NaN, NaN) when it does not hold clearly at the grid's last value."""
    state, icl = np.asarray(state), np.asarray(icl, dtype=np.float64)
    if state.size == 0 or state[-1] != WINS:
        return float("nan"), float("nan")
    not_won = np.flatnonzero(state != WINS)
    b = 0 if not_won.size == 0 else not_won[-1] + 1
    lost = np.flatnonzero(state[:b] == LOSES)
    return (float(icl[lost[-1]]) if lost.size else float("nan")), float(icl[b])


def record_steps(first: int, horizon: int, per_decade: int = 4) -> np.ndarray:
    """The steps a cell's losses are kept at: ``first`` × 10^(k/``per_decade``) from ``first``/10 up to ``horizon``,
    and ``horizon`` itself (``first``, the published horizon, is one of them)."""
    top = int(np.floor(per_decade * np.log10(horizon / first) + 1e-9))
    grid = np.round(first * 10.0 ** (np.arange(-per_decade, top + 1) / per_decade))
    return np.unique(np.concatenate([grid[(grid >= 1) & (grid <= horizon)], [horizon]])).astype(np.int64)


def bracket(holds, icl) -> tuple[float, float]:
    """Where a condition sets in for good along the increasing grid ``icl``: (a, b) with b the smallest grid value
    from which ``holds`` is true at every larger one and a the grid value just before b — the condition sets in
    between a and b, and the grid says no more. a is NaN when it holds on the whole grid; (NaN, NaN) when it fails at
    the grid's last value."""
    holds, icl = np.asarray(holds, dtype=bool), np.asarray(icl, dtype=np.float64)
    if holds.size == 0 or not holds[-1]:
        return float("nan"), float("nan")
    fails = np.flatnonzero(~holds)
    if fails.size == 0:
        return float("nan"), float(icl[0])
    return float(icl[fails[-1]]), float(icl[fails[-1] + 1])


def sample_wise_peak(loss) -> int | None:
    """The index of the largest of ``loss`` (over increasing numbers of fresh sequences) where it is a peak: higher
    than at the first and the last point, so the loss rises to it and falls after it; None where the largest sits
    at an end of the grid (the grid does not show a peak)."""
    loss = np.asarray(loss, dtype=np.float64)
    if loss.size < 3 or not np.isfinite(loss).all():
        return None
    j = int(np.argmax(loss))
    return j if 0 < j < loss.size - 1 else None


def free_directions(TT: np.ndarray, tol: float | None = None) -> int:
    """The number of directions of the features that E[TTᵀ] leaves flat: the dimension of its null space, its
    eigenvalues below ``tol`` (default :data:`FLAT`) times its largest. For the fixed task's sequences (context
    labels w_fixᵀx), the directions that only sequences with a fresh task determine."""
    ev = np.linalg.eigvalsh(np.asarray(TT, dtype=np.float64))
    return int(np.sum(ev < (FLAT if tol is None else tol) * ev[-1]))


def feature_rank(TT: np.ndarray, tol: float | None = None) -> int:
    """The rank of E[TTᵀ] at the relative tolerance ``tol`` (default :data:`FLAT`): the features' count less
    :func:`free_directions`. Minimum-norm least squares on P sequences interpolates them while P is at most this
    rank, and its test loss diverges where P reaches it (sample-wise double descent)."""
    return int(np.asarray(TT).shape[0] - free_directions(TT, tol))


def null_space_gap(TT: np.ndarray, tol: float | None = None) -> tuple[float, float]:
    """E[TTᵀ]'s eigenvalues relative to its largest on either side of ``tol`` (default :data:`FLAT`): the largest
    one counted flat and the smallest one not (NaN where a side is empty) — how clear the count of
    :func:`free_directions` is."""
    ev = np.linalg.eigvalsh(np.asarray(TT, dtype=np.float64))
    rel, tol = ev / ev[-1], FLAT if tol is None else tol
    below, above = rel[rel < tol], rel[rel >= tol]
    return (float(below.max()) if below.size else float("nan")), (float(above.min()) if above.size else float("nan"))


def solve_in_c(loss_at, level: float, lo: float, hi: float) -> float:
    """The c in (``lo``, ``hi``) at which ``loss_at(c)`` equals ``level`` (Brent's method to 1e-9 relative); NaN
    without a sign change of loss_at − level between the ends."""
    from scipy.optimize import brentq

    if not 0 < lo < hi:
        raise ValueError(f"the interval in c must satisfy 0 < lo < hi, got ({lo}, {hi})")
    f_lo, f_hi = loss_at(lo) - level, loss_at(hi) - level
    if not np.isfinite(f_lo * f_hi) or f_lo * f_hi > 0:
        return float("nan")
    return float(brentq(lambda c: loss_at(c) - level, lo, hi, xtol=1e-12, rtol=1e-9))


def task_moments(cov, w_fix, *, seq_len: int, normalize: str) -> tuple[tuple, tuple]:
    """The population moments (E[TTᵀ], E[yT], E[y²]) of the sequences with the fixed task (context labels w_fixᵀx)
    and of those with a fresh task: the training mixture at any c > 0 is (1 − c)·fixed + c·fresh. (At c = 0 the
    training sequences carry noise context labels instead, another recipe.)"""
    from ....objectives.population import mixture_moments  # imports torch: only where the moments are computed

    fresh, half = (triple(mixture_moments("attention", cov, seq_len, icl=c, w_fix=w_fix,
                                           normalize=normalize)) for c in (1.0, 0.5))
    (tt_half, yt_half, yy_half), (tt_fresh, yt_fresh, yy_fresh) = half, fresh
    fixed = (2 * tt_half - tt_fresh, 2 * yt_half - yt_fresh, 2 * yy_half - yy_fresh)  # the moments are linear in c
    return fixed, fresh


def population_end_point(fixed: tuple, fresh: tuple, c: float) -> np.ndarray:
    """The least-squares end point m*(c) = E_c[TTᵀ]⁺ E_c[yT] of the population training loss at in-context fraction
    c > 0 (the mixture (1 − c)·``fixed`` + c·``fresh``)."""
    A, b = (1 - c) * fixed[0] + c * fresh[0], (1 - c) * fixed[1] + c * fresh[1]
    return np.linalg.lstsq(A, b, rcond=None)[0]


def population_crossing(fixed: tuple, fresh: tuple, test: tuple, level: float, lo: float, hi: float) -> float:
    """The c in (``lo``, ``hi``) at which the population end point's test loss (on the moments ``test``) equals
    ``level``: :func:`solve_in_c` on c ↦ L_test(m*(c)), one least-squares solve per trial."""
    return solve_in_c(lambda c: quadratic_loss(population_end_point(fixed, fresh, c), test), level, lo, hi)


def last_crossing(loss_at, level: float, grid) -> float:
    """The c at which ``loss_at(c)`` crosses ``level`` for the last time along the increasing ``grid`` (c > 0; a
    millionth of its first value added below it): :func:`solve_in_c` between the last two neighbours on opposite
    sides; NaN where every point lies on one side."""
    points = np.concatenate([[grid[0] / 1e6], np.asarray(grid, dtype=np.float64)])
    side = np.sign([loss_at(c) - level for c in points])
    change = np.flatnonzero(side[:-1] * side[1:] < 0)
    return float("nan") if change.size == 0 else solve_in_c(loss_at, level, points[change[-1]],
                                                             points[change[-1] + 1])


def _along_icl(rule, da, n_out: int = 2):
    """``rule(values, icl)`` along ``icl`` for each other coordinate of ``da``: ``n_out`` DataArrays."""
    import xarray as xr

    return xr.apply_ufunc(lambda h, c: rule(h, c), da, da.icl, input_core_dims=[["icl"], ["icl"]],
                          output_core_dims=[[]] * n_out, vectorize=True)


def verdicts(ds, midpoint: float, fixed: tuple, fresh: tuple, population_tests: dict):
    """Where each solution wins, on the c > 0 branch only (c = 0 trains on noise context labels, another recipe),
    from the final test losses and their standard errors (``se_test_*``) by :func:`verdict` against ``midpoint``:
    ``icl_state``/``iwl_state`` per cell; the brackets of :func:`banded_bracket` (in-context wins for good:
    ``switch_lo/hi``; the in-weight solution loses for good: ``iwl_lo/hi``); the cells where the in-weight test loss
    is clearly below it (``iwl_wins``); the cells where both test losses lie clearly above tr Λ (``exploded``: no
    solution at all); each finite P's :func:`sample_wise_peak` of the final in-context test loss (``peak_icl``: its c,
    NaN without one); the raw in-context bracket per recorded step (``horizon_switch``: :func:`bracket` of the
    test loss below the midpoint, no band, for the figure); and the population end point's crossings of the
    midpoint, solved in c on the population test moments ``population_tests`` (no sampling error:
    ``population_switch``, ``population_edge``, :func:`last_crossing` over the grid's c > 0)."""
    icl = ds.icl.values
    for k in ("icl", "iwl"):
        ds[f"{k}_state"] = (ds[f"final_test_{k}"].dims, verdict(ds[f"final_test_{k}"], ds[f"se_test_{k}"], midpoint))
    pos = ds.sel(icl=icl[icl > 0])
    ds["switch_lo"], ds["switch_hi"] = _along_icl(banded_bracket, pos.icl_state)
    ds["iwl_lo"], ds["iwl_hi"] = _along_icl(banded_bracket, -pos.iwl_state)
    ds["iwl_wins"] = (ds.iwl_state == WINS) & (ds.icl > 0)
    origin = float(ds.attrs.get("L_origin", np.nan))
    above = [verdict(ds[f"final_test_{k}"], ds[f"se_test_{k}"], origin) == LOSES for k in ("iwl", "icl")]
    ds["exploded"] = (ds.final_test_icl.dims, above[0] & above[1])
    ds["exploded"] = ds.exploded & (ds.icl > 0)
    ds["horizon_switch"] = _along_icl(bracket, pos.test_icl < midpoint)[1]
    peaks = [sample_wise_peak(pos.final_test_icl.sel(trainset_size=P).values) if np.isfinite(P) else None
             for P in ds.trainset_size.values]
    ds["peak_icl"] = ("trainset_size", [np.nan if j is None else float(pos.icl[j]) for j in peaks])
    grid = icl[icl > 0]
    ds["population_switch"] = last_crossing(
        lambda c: quadratic_loss(population_end_point(fixed, fresh, c), population_tests["test_icl"]), midpoint, grid)
    ds["population_edge"] = last_crossing(
        lambda c: quadratic_loss(population_end_point(fixed, fresh, c), population_tests["test_iwl"]), midpoint, grid)
    return ds


# ---------------------------------------------------------------- the page: settings, computations, numbers, words

def near_count(fresh, peak: int, k: int) -> bool:
    """Whether a peak at ``peak`` fresh sequences sits next to ``k``: k lies between the grid's fresh counts on
    either side of the peak (``fresh``: the grid's counts at one P, increasing), so the grid cannot place the peak
    any closer to k."""
    fresh = np.asarray(fresh)
    j = int(np.flatnonzero(fresh == peak)[0])
    return 0 < j < fresh.size - 1 and fresh[j - 1] < k < fresh[j + 1]




def exponent_verdict(seed_exponents, law: float = -1.0) -> tuple[float, float | None, str]:
    """The mean of one drop's fitted exponents over seeds (each seed's own log–log slope of step against init), its
    standard error over the seeds (``uncertainty.spread`` / √n; None for fewer than two seeds), and the verdict against
    the ``law`` by ``uncertainty.verdict`` with the band ``uncertainty.difference_band`` (COVERAGE = 2 SE): *agrees*
    within it, *differs* beyond it; *cannot tell* with fewer than two seeds, or where the band that holds the law
    also holds 0 (a step that does not depend on init: the scatter cannot tell the law from no law at all). NaN mean
    and *cannot tell* without any finite exponent."""
    x = np.asarray(seed_exponents, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    if x.size == 0:
        return float("nan"), None, uncertainty.CANNOT_TELL
    sd = uncertainty.spread(x)
    mean = float(x.mean())
    if sd is None:
        return mean, None, uncertainty.CANNOT_TELL
    se = sd / np.sqrt(x.size)
    band = uncertainty.difference_band(se, resolution=1e-9)  # 1e-9: the fits' floating-point rounding, no evidence
    said = uncertainty.verdict(mean - law, band)
    if said == uncertainty.AGREES and abs(mean) <= band:
        said = uncertainty.CANNOT_TELL
    return mean, float(se), said
