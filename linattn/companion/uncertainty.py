"""How sure a comparison is, in one place: the standard error of a loss, the band of a difference, the verdict.

Every page that sets two numbers side by side judges their difference d here, by one band::

    band = resolution + COVERAGE · √(se_a² + se_b²)

``resolution``: what the numbers cannot resolve at all (one pixel of a published image, or a reading's own ±);
``se_a``, ``se_b``: the standard errors of the two numbers, each from its own sample (an independent sample carries its
own error, so a difference from one carries both). The verdict (:func:`verdict`) is *agrees* when |d| ≤ band,
*cannot tell* when |d| is beyond the band but within a further ``unresolved`` margin the band cannot cover (a training
loss's bias, the shift a finite training set alone gives a step), else *differs*.

Sources of the errors, and the rules this module keeps:

* A **mean loss over a drawn set at given weights** (a test loss, or a training loss at given weights) is a mean
  over the set's n sequences of the per-sequence losses (y − ŷ)², measured on the sequences themselves
  (:func:`per_sequence_losses`), never from a formula with an assumed kurtosis. Its standard error has one rule,
  :func:`mean_loss_error`, on every page: a set drawn at icl = 1 (a training set, or an in-context test set; linattn's
  streams and the reference draws alike) has its task vectors whitened (their sample mean 0 and sample covariance
  ∝ I, exactly), so its per-sequence losses are not independent and sd/√n overstates its sampling error; the rule
  first takes out the part of the losses that the whitened moments fix (a control-variate regression,
  :func:`whitened_standard_error`). Other sets (sequences sharing w_fix, noise context labels) are independent
  draws, and their error is sd/√n (:func:`standard_error`). Two test losses on the same sequences (a run drawn with
  the published run's random numbers) share that error, so their difference carries none of it; two independent
  test sets as large differ by √2 × it.
* A **training loss** on the fitted set is biased (the weights were fitted to that sample: an optimism of about
  −(p/P)·L for p fitted parameters), so it never *agrees* by sampling error: its band is the resolution alone, and the
  spread two independent training sets would show is an ``unresolved`` margin (:func:`training_loss_margin`).
* A **reading off a published plot** carries that plot's pixel as its resolution, and the reading itself a further
  pixel (where the point was placed) as an ``unresolved`` margin: a difference just beyond the band cannot tell; a
  systematic digitisation offset shared by many readings is measured (:func:`systematic_offset`) and stated, and the
  differences are judged after removing it.
* A **step** carries the spread across seeds or training draws where the page has them (:func:`spread`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

AGREES, CANNOT_TELL, DIFFERS = "agrees", "cannot tell", "differs"
VERDICTS = (AGREES, CANNOT_TELL, DIFFERS)

#: How many standard errors a difference may reach and still be read as sampling error: 2, a two-sided 95 % band
#: for a Gaussian estimate (one comparison in twenty of two equal quantities falls outside it by chance).
COVERAGE = 2.0


def _finite(x) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def standard_error(per_sequence) -> float:
    """The standard error of the mean of ``per_sequence`` (e.g. the per-sequence losses of a test set): their sample
    standard deviation (ddof = 1) over √n. A ValueError for fewer than two finite values."""
    x = np.asarray(per_sequence, dtype=np.float64).ravel()
    if x.size < 2 or not np.isfinite(x).all():
        raise ValueError(f"per_sequence must hold two or more finite values, got {x.size} values"
                         + ("" if np.isfinite(x).all() else " with non-finite ones"))
    return float(x.std(ddof=1) / math.sqrt(x.size))


#: How close to exact the sample moments of recovered task vectors must be to count as whitened (relative): a
#: whitened set's are exact to float32 rounding (~1e-6), independent draws' are off by ~1/√P (3e-4 even at P = 10⁷).
WHITENED_TOL = 1e-4


def task_vectors(seqs, tol: float = WHITENED_TOL) -> np.ndarray | None:
    """The task vector w_p of each sequence of ``seqs`` (a :class:`~linattn.data.Sequences`), (P, D), recovered from
    its context: the least-squares solution of y_n = w_pᵀx_n over its N = seq_len − 1 context tokens. None where the
    context does not determine one (N < D, or labels that no w fits to within ``tol`` of their size: noise labels,
    icl = 0)."""
    X = np.asarray(seqs.X, dtype=np.float64)
    x, y = X[:, :-1, :-1], X[:, :-1, -1]
    if x.shape[1] < x.shape[2]:
        return None
    xt = x.swapaxes(1, 2)  # batched matmul: several times faster than einsum at P ~ 10⁵
    try:
        w = np.linalg.solve(xt @ x, xt @ y[..., None])[..., 0]
    except np.linalg.LinAlgError:
        return None
    misfit = np.abs((x @ w[..., None])[..., 0] - y).max()
    return w if misfit <= tol * max(np.abs(y).max(), np.finfo(float).tiny) else None


def is_whitened(w, tol: float = WHITENED_TOL) -> bool:
    """Whether the rows of ``w`` (P, D) have a sample mean of exactly 0 and a sample covariance of exactly c·I (any
    c > 0: the divisor P or P − 1), to ``tol`` relative to c: what ``data._whiten`` and the reference draws' whitening
    make of a drawn set's task vectors at icl = 1."""
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] <= w.shape[1]:
        return False
    centred = w - w.mean(axis=0)
    cov = centred.T @ centred / w.shape[0]
    c = np.trace(cov) / w.shape[1]
    return bool(c > 0 and np.abs(w.mean(axis=0)).max() <= tol * math.sqrt(c)
                and np.abs(cov / c - np.eye(w.shape[1])).max() <= tol)


def whitened_standard_error(per_sequence, w):
    """The standard error of the mean of ``per_sequence`` (ℓ_p, one loss a sequence at given weights; a (P, k) array:
    k losses a sequence, an array of k errors from one regression) over a set whose task vectors ``w`` (P, D) are
    whitened, by control variates.

    Whitening fixes the sample moments of z_p = (w_p, vech(w_p w_pᵀ)) at their population values, so the part of ℓ
    linear in z cannot vary from set to set. Regress ℓ_p = α + βᵀz_p + r_p by least squares (k = D + D(D+1)/2
    regressors and the intercept) and keep what is left::

        se² = Σ_p r_p² / ((P − 1 − k) · P)

    Why this is the whitened set's error (to first order in 1/√P): whitening maps independent draws u_p ~ N(0, I) to
    w_p = S^{-1/2}(u_p − ū), which moves the mean of ℓ by −E[∇_w ℓ]·ū − ½ Σ_ij E[∂_i ℓ w_j] (S − I)_ij; by Stein's
    identity E[∇ℓ] = E[ℓ w] and E[∂_i ℓ w_j] = E[ℓ (w_i w_j − δ_ij)], which is exactly −βᵀ(z̄ − E z) with β the
    population regression of ℓ on z (Var(w_i w_j) = 1 + δ_ij). So the whitened mean is the mean of ℓ − βᵀz, whose
    error is that of the residuals. Centring the inputs across sequences leaves the error unchanged to this order:
    a model whose output is odd in the tokens has a loss even in them, so E[∇_x ℓ] = 0. At zero weights (ℓ_p = y_p²)
    it is :func:`origin_loss_error`'s whitened closed form. A ValueError where the sizes disagree or there are too
    few sequences for the regression (P ≤ k + 2)."""
    loss = np.asarray(per_sequence, dtype=np.float64)
    residual, fitted = _whitened_residuals(loss if loss.ndim == 2 else loss.reshape(-1, 1), w)
    P = len(residual)
    se = np.sqrt((residual * residual).sum(axis=0) / (P - fitted) / P)
    return se if loss.ndim == 2 else float(se[0])


def _whitened_residuals(columns: np.ndarray, w) -> tuple[np.ndarray, int]:
    """The residuals r_p of ℓ_p = α + βᵀz_p + r_p (:func:`whitened_standard_error`), one column a loss of ``columns``
    (P, k), and the number of fitted coefficients (D + D(D+1)/2 + 1). A ValueError where the sizes disagree or
    P ≤ that number + 1."""
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] != len(columns):
        raise ValueError(f"w must have shape (P, D) with P = {len(columns)} (one task vector a loss), got {w.shape}")
    P, D = w.shape
    upper = np.triu_indices(D)
    z = np.column_stack([np.ones(P), w, (w[:, :, None] * w[:, None, :])[:, upper[0], upper[1]]])
    if P <= z.shape[1] + 1 or not np.isfinite(columns).all():
        raise ValueError(f"per_sequence must hold more than {z.shape[1] + 1} finite values for D = {D}, got {P}")
    coef, *_ = np.linalg.lstsq(z, columns, rcond=None)
    return columns - z @ coef, z.shape[1]


def mean_loss_error_spread(per_sequence, seqs):
    """How uncertain :func:`mean_loss_error`'s value is itself, relative to it, estimated from the same set (an (n, k)
    array: k losses a sequence, an array of k spreads, the task vectors recovered once): that error is
    √(Σ r_p² / ((P − k′) P)) over the residuals r_p (after the whitened moments' part is taken out,
    :func:`whitened_standard_error`; else the deviations from the mean, k′ = 1), so to first order in 1/√P its
    relative standard error is

        ½ · sd(r²) / (mean(r²) · √P)

    (the delta method on the mean of r²). Losses with heavy tails (a training loss near a saddle) make it large: one
    set's error is then itself a noisy estimate. A ValueError as :func:`mean_loss_error`."""
    loss = np.asarray(per_sequence, dtype=np.float64)
    columns = loss if loss.ndim == 2 else loss.reshape(-1, 1)
    if len(columns) != len(seqs.y) or loss.ndim > 2:
        raise ValueError(f"per_sequence must hold one loss a sequence ({len(seqs.y)}), got shape {loss.shape}")
    w = whitened_task_vectors(seqs)
    if w is None:
        for column in columns.T:
            standard_error(column)  # its checks: two or more finite values
        residual = columns - columns.mean(axis=0)
    else:
        residual = _whitened_residuals(columns, w)[0]
    squares = residual * residual
    spread = 0.5 * squares.std(axis=0, ddof=1) / (squares.mean(axis=0) * math.sqrt(len(squares)))
    return spread if loss.ndim == 2 else float(spread[0])


def mean_loss_error(per_sequence, seqs):
    """The standard error of a mean loss at given weights, the mean of ``per_sequence`` over the drawn set ``seqs``
    (a training or a test set; the losses' order the sequences'; an (n, k) array: k losses a sequence, at k weights,
    and an array of k errors, the task vectors recovered once), the one rule for every page: where the set's task
    vectors (:func:`task_vectors`) are whitened (:func:`is_whitened`: a set drawn at icl = 1 with more sequences than
    D, the training set or the in-context test set)
    :func:`whitened_standard_error`; else (some sequences sharing w_fix, noise labels) the plain
    :func:`standard_error`, the sequences then being independent draws. A ValueError where there is not one loss a
    sequence (or one row of losses a sequence)."""
    loss = np.asarray(per_sequence, dtype=np.float64)
    if loss.ndim not in (1, 2) or loss.shape[0] != len(seqs.y):
        raise ValueError(f"per_sequence must hold one loss a sequence ({len(seqs.y)}), got shape {loss.shape}")
    w = whitened_task_vectors(seqs)
    if w is not None:
        return whitened_standard_error(loss, w)
    return standard_error(loss) if loss.ndim == 1 else np.array([standard_error(ell) for ell in loss.T])


def whitened_task_vectors(seqs) -> np.ndarray | None:
    """The task vectors of ``seqs`` (:func:`task_vectors`) where they are whitened (:func:`is_whitened`), else None:
    whether :func:`mean_loss_error` takes the whitening into account on this set."""
    w = task_vectors(seqs)
    return w if w is not None and is_whitened(w) else None


def origin_loss_error(cov, n: int, *, whitened: bool) -> float:
    """The standard error of L̂(ℳ₀) = (1/n) Σ_p y_p², the loss at zero weights over n sequences, about its population
    value L(ℳ₀) = tr Λ (Λ = ``cov``), in closed form from the data model (y_p = w_pᵀx_p, x_p ~ N(0, Λ),
    w_p ~ N(0, I_D)).

    Given w_p, y_p² has mean w_pᵀΛw_p and variance 2 (w_pᵀΛw_p)², and E[(wᵀΛw)²] = (tr Λ)² + 2 tr Λ². A training
    set at icl = 1 has its task vectors whitened ((1/P) Σ_p w_p w_pᵀ = I, ``whitened=True``), so Σ_p w_pᵀΛw_p is
    n tr Λ exactly and only the first part is left: se² = 2 ((tr Λ)² + 2 tr Λ²)/n. Independent task vectors (a
    Monte-Carlo population estimate, ``whitened=False``) add Var(wᵀΛw) = 2 tr Λ²: se² = (2 (tr Λ)² + 6 tr Λ²)/n.
    (The centring of a training set's inputs shifts the mean by O(tr Λ/n), far below the error.)"""
    lam = np.linalg.eigvalsh(np.asarray(cov, dtype=np.float64))
    if int(n) < 1:
        raise ValueError(f"n must be a number of sequences >= 1, got {n}")
    t1, t2 = float(lam.sum()), float((lam ** 2).sum())
    var = 2 * (t1 * t1 + 2 * t2) if whitened else 2 * t1 * t1 + 6 * t2
    return math.sqrt(var / int(n))


def per_sequence_losses(result, which: str = "test_icl", weights: str = "final") -> np.ndarray:
    """The loss of each sequence of ``result.datasets.<which>`` ("train", "test_iwl" or "test_icl"), (y − ŷ)², with the
    run's ``weights`` ("final" or "init"): the values whose mean is the recorded loss at that step. The prediction is
    the model's own (``models.predict`` with the run's normalisation); runs on prefixes of varied length
    (``vary_len``) are refused (ValueError), their loss not being one term per sequence."""
    from ..models import build_model  # torch: imported where a model is built

    if which not in ("train", "test_iwl", "test_icl"):
        raise ValueError(f"which must be 'train', 'test_iwl' or 'test_icl', got {which!r}")
    if weights not in ("final", "init"):
        raise ValueError(f"weights must be 'final' or 'init', got {weights!r}")
    cfg = result.config
    if getattr(cfg, "vary_len", False):
        raise ValueError("per_sequence_losses: a vary_len run's loss is a sum over prefixes, not one term a sequence")
    seqs = getattr(result.datasets, which, None) if result.datasets is not None else None
    if seqs is None:
        raise ValueError(f"the run has no {which} set")
    model = result.model if weights == "final" else build_model(cfg.model, result.init, softmax=cfg.softmax)
    return (np.asarray(seqs.y, dtype=np.float64) - model.predict(seqs.X, cfg.normalize)) ** 2


def difference_band(*standard_errors, resolution: float = 0.0, coverage: float = COVERAGE) -> float:
    """The band of a difference: ``resolution`` + ``coverage`` · √(Σ se²) over the ``standard_errors`` of the numbers
    compared (None: a number without sampling error, such as a theory value or a population loss)."""
    ses = [_finite(se) for se in standard_errors]
    return float(resolution) + coverage * math.sqrt(sum(se * se for se in ses if se is not None))


def training_loss_margin(se_train, coverage: float = COVERAGE) -> float | None:
    """The ``unresolved`` margin of a training-loss comparison with a published curve trained on another sample of
    the same size: ``coverage`` · √2 · se_train (two independent training sets, each with the standard error of its
    per-sequence losses). Within it a difference cannot be told from the draw of the training set; the bias of a
    fitted set keeps it from counting as agreement. None without a standard error."""
    se = _finite(se_train)
    return None if se is None else difference_band(se, se, coverage=coverage)


def verdict(difference, band, unresolved=0.0) -> str:
    """*agrees* when |``difference``| ≤ ``band``; *cannot tell* when it is beyond the band but within ``band`` +
    ``unresolved`` (an effect the band does not cover, of known size but unknown sign), or when there is no band
    (None); else *differs*. A missing difference (None or NaN: the event did not happen in our run) *differs*."""
    d = _finite(difference)
    if d is None:
        return DIFFERS
    b = _finite(band)
    if b is None:
        return CANNOT_TELL
    if abs(d) <= b:
        return AGREES
    return CANNOT_TELL if abs(d) <= b + (_finite(unresolved) or 0.0) else DIFFERS


@dataclass(frozen=True)
class Offset:
    """A systematic offset shared by ``n`` differences, ``value`` + ``slope`` × level (a scale read a little off:
    ``slope`` 0 for a constant offset); ``scatter``: the standard deviation of the differences about it;
    ``standard_error``: that of ``value`` (scatter / √n for a constant offset)."""

    value: float
    scatter: float
    standard_error: float
    n: int
    slope: float = 0.0

    def at(self, level) -> float:
        """The offset at ``level`` (a constant offset: ``value`` at every level)."""
        return self.value + self.slope * float(level)


def systematic_offset(differences, levels=None) -> Offset | None:
    """The offset the finite ``differences`` share (:class:`Offset`): their mean; or, with the ``levels`` they were
    read at, the least-squares line d = value + slope × level (an offset that grows or shrinks along the scale).
    None for fewer than two differences (three for a line)."""
    d = np.ravel(np.asarray(differences, dtype=np.float64))
    x = np.zeros_like(d) if levels is None else np.ravel(np.asarray(levels, dtype=np.float64))
    keep = np.isfinite(d) & np.isfinite(x)
    d, x = d[keep], x[keep]
    params = 1 if levels is None else 2
    if d.size < params + 1:
        return None
    if levels is None:
        scatter = float(d.std(ddof=1))
        return Offset(float(d.mean()), scatter, scatter / math.sqrt(d.size), int(d.size))
    design = np.column_stack([np.ones_like(x), x])
    (value, slope), *_ = np.linalg.lstsq(design, d, rcond=None)
    residual = d - design @ np.array([value, slope])
    scatter = float(math.sqrt(residual @ residual / (d.size - 2)))
    cov = scatter ** 2 * np.linalg.inv(design.T @ design)
    return Offset(float(value), scatter, float(math.sqrt(cov[0, 0])), int(d.size), float(slope))


def spread(values) -> float | None:
    """The spread of one quantity across seeds or training draws: the sample standard deviation (ddof = 1) of its
    finite ``values``; None for fewer than two."""
    x = np.asarray([v for v in np.ravel(np.asarray(values, dtype=np.float64)) if math.isfinite(v)])
    return float(x.std(ddof=1)) if x.size >= 2 else None
