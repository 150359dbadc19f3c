"""The phase diagram's rules, pure functions of arrays: where a verdict sets in along c (:func:`bracket`), the
sample-wise peak and the count it sits next to, the flat directions of the features, and the population end point
and its crossings solved in c. Every verdict the phase diagram page states comes from one of them."""

from __future__ import annotations

import numpy as np

from ....objectives.population import mixture_moments

#: The settled criterion's defaults: a test loss moved less than TOLERANCE (relative to its final value) over the last
#: WINDOW of the training.
TOLERANCE, WINDOW = 0.02, 0.1

#: E[TTᵀ]'s smallest eigenvalue relative to its largest below which the training loss counts as flat in some
#: direction: its minima then form a valley and the least-squares end point is not unique. (Measured on Figure 14's
#: setting: such cells sit at 1e-16, the others above 1e-9.)
FLAT = 1e-12


def triple(moments) -> tuple[np.ndarray, np.ndarray, float]:
    """(E[TTᵀ], E[yT], E[y²]) of ``objectives.Moments`` as float64 numpy arrays (small, and picklable)."""
    return (moments.TT.detach().cpu().numpy().astype(np.float64),
            moments.yT.detach().cpu().numpy().astype(np.float64), float(moments.yy))


def quadratic_loss(m: np.ndarray, moments: tuple) -> float:
    """L(m) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩ for the moments (E[TTᵀ], E[yT], E[y²])."""
    A, b, c = moments
    return float(c - 2 * b @ m + m @ A @ m)



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
    """The number of directions of the features that E[TTᵀ] leaves flat: its eigenvalues below ``tol`` (default
    :data:`FLAT`) times its largest. For the fixed task's sequences (context labels w_fixᵀx), the directions that only
    sequences with a fresh task determine."""
    ev = np.linalg.eigvalsh(np.asarray(TT, dtype=np.float64))
    return int(np.sum(ev < (FLAT if tol is None else tol) * ev[-1]))


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
    fresh, half = (triple(mixture_moments("attention", cov, seq_len, icl=c, w_fix=w_fix,
                                           normalize=normalize)) for c in (1.0, 0.5))
    fixed = tuple(2 * h - f for h, f in zip(half, fresh))  # the mixture's moments are linear in c
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


def brackets(holds):
    """:func:`bracket` along ``icl`` for each other coordinate: two DataArrays (a, b)."""
    import xarray as xr

    return xr.apply_ufunc(lambda h, c: bracket(h, c), holds, holds.icl, input_core_dims=[["icl"], ["icl"]],
                          output_core_dims=[[], []], vectorize=True)


def verdicts(ds, midpoint: float, fixed: tuple, fresh: tuple, tests: dict):
    """Where each solution wins, on the c > 0 branch only (c = 0 trains on noise context labels, another recipe):
    the brackets of :func:`bracket` (the in-context test loss below ``midpoint`` for good: ``switch_lo/hi`` per
    step, ``theory_lo/hi`` of the end point; the in-weight test loss above it for good: ``iwl_lo/hi``), the cells
    where the in-weight test loss is below it (``iwl_wins``), each finite P's :func:`sample_wise_peak` of the final
    in-context test loss (``peak_icl``: its c, NaN without one), and at P = ∞ both crossings solved in c
    (``population_switch``, ``population_edge``: :func:`population_crossing` inside the grid's bracket, or below its
    first c > 0 down to a millionth of it)."""
    pos = ds.sel(icl=ds.icl.values[ds.icl.values > 0])
    ds["switch_lo"], ds["switch_hi"] = brackets(pos.test_icl < midpoint)
    lo, hi = brackets(pos.limit_test_icl < midpoint)
    unique = ~pos.flat.sel(icl=lo.fillna(pos.icl[0]))  # the theory claims no bracket whose lower cell is flat
    ds["theory_lo"], ds["theory_hi"] = lo.where(unique), hi.where(unique)
    ds["iwl_lo"], ds["iwl_hi"] = brackets(pos.final_test_iwl > midpoint)
    ds["iwl_wins"] = (ds.final_test_iwl < midpoint) & (ds.icl > 0)
    peaks = [sample_wise_peak(pos.final_test_icl.sel(trainset_size=P).values) if np.isfinite(P) else None
             for P in ds.trainset_size.values]
    ds["peak_icl"] = ("trainset_size", [np.nan if j is None else float(pos.icl[j]) for j in peaks])
    exact = {"population_switch": np.nan, "population_edge": np.nan}
    if np.isinf(ds.trainset_size.values[-1]):
        inf = ds.isel(trainset_size=-1)
        for key, (a, b), test in (("population_switch", (inf.theory_lo, inf.theory_hi), "test_icl"),
                                  ("population_edge", (inf.iwl_lo, inf.iwl_hi), "test_iwl")):
            a, b = float(a), float(b)
            if np.isfinite(b):
                exact[key] = population_crossing(fixed, fresh, tests[test], midpoint, a if np.isfinite(a) else b / 1e6,
                                                 b)
    return ds.assign(exact)


# ---------------------------------------------------------------- the page: settings, computations, numbers, words

def settling_step(ds) -> dict:
    """Per P whose final in-context bracket exists, the first recorded step from which the bracket (``switch_lo``,
    ``switch_hi``) stays where it ends."""
    out = {}
    for P in ds.trainset_size.values:
        lo, hi = (ds[k].sel(trainset_size=P).values for k in ("switch_lo", "switch_hi"))
        if not np.isfinite(hi[-1]):
            continue
        same = (hi == hi[-1]) & ((lo == lo[-1]) | (np.isnan(lo) & np.isnan(lo[-1])))
        moved = np.flatnonzero(~same)
        out[float(P)] = int(ds.step.values[moved[-1] + 1 if moved.size else 0])
    return out


def near_count(fresh, peak: int, k: int) -> bool:
    """Whether a peak at ``peak`` fresh sequences sits next to ``k``: k lies between the grid's fresh counts on
    either side of the peak (``fresh``: the grid's counts at one P, increasing), so the grid cannot place the peak
    any closer to k."""
    fresh = np.asarray(fresh)
    j = int(np.flatnonzero(fresh == peak)[0])
    return 0 < j < fresh.size - 1 and fresh[j - 1] < k < fresh[j + 1]


