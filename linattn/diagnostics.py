"""Measures on a training run: the in-context matrix A(t), its alignment with the eigen-directions, effective ranks,
subspace stability, conservation-law drift, distance to the PCR predictor, a plateau detector for loss curves and the
one rule for the step of a drop (:func:`drop_steps`).

The measures follow Mainali & Teixeira (arXiv:2504.12916: spectral-rank dynamics, subspace stability, conservation
laws) applied to this project's models. Record them during training with

    snap = snapshot_fn(cfg.N, normalize=cfg.normalize)
    result = run(cfg, snapshot_every=50, snapshot=snap)
    table = tidy(result.history.snapshots, cov, cfg.N, lr=cfg.lr, normalize=cfg.normalize, model=cfg.model)

All matrices A are in the βᵀ A x_q form of ``theory.py`` and, inside snapshots and tables, in the **paper's
normalisation** (a reference-normalised model's A is multiplied by N), so they compare directly with
``theory.fixed_point_A(..., normalize="mean")``. What is read off a model comes from its class's methods
(``models.py``: ``in_context_heads``, ``conserved_quantities``, ``mlp_weights``); a model without the method raises
TypeError.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import theory


# --------------------------------------------------------------------------------------------------------------
# The in-context matrix of a model
# --------------------------------------------------------------------------------------------------------------

def _np(t) -> np.ndarray:
    return t.detach().to("cpu").double().numpy()


def _from_model(model, method: str):
    """``model.<method>()``, or a TypeError naming the model when its class does not define that measure."""
    fn = getattr(model, method, None)
    if not callable(fn):
        raise TypeError(f"a {type(model).__name__} has no {method}(): the diagnostics cover the models of "
                        f"linattn.models (AttnM, AttnS, MLP)")
    return fn()


def head_matrices(model) -> np.ndarray:
    """(H, D, D): each head's in-context matrix A_h as the model's weights are (``model.in_context_heads()``).

    ŷ = bᵀ (Σ_h A_h) x_q + terms even in the labels, b = scale Σ_{n≤N} y_n x_n; for attention
    A_h = v_h[D] W_KQ[h][:D, :D]ᵀ + v_h[:D] W_KQ[h][:D, D]ᵀ (ATTN_S: W_KQ = W_Qᵀ W_K), for the MLP
    A_h = w₂[h] reshape(W₁[h], (D, D)). In the model's own normalisation (b = N β for "sum").
    """
    return _np(_from_model(model, "in_context_heads"))


def combined_A(model, N: int | None = None, *, normalize: str) -> np.ndarray:
    """A = Σ_h A_h in the paper's normalisation: ŷ = βᵀ A x_q + terms even in the labels, β = (1/N) Σ y_n x_n.
    The model's own A for ``normalize="mean"``, N times it for ``"sum"`` (which then needs ``N``)."""
    if normalize == "sum" and N is None:
        raise ValueError("a reference-normalised model needs N to convert A to the paper's normalisation")
    return head_matrices(model).sum(axis=0) * theory.feature_scale(N, normalize=normalize)


def white_sigma(model, N: int | None = None, *, normalize: str) -> float:
    """σ = tr(A)/D for the combined A (:func:`combined_A`, paper normalisation): the one number the white-covariance
    theory tracks, where A stays a multiple σ I of the identity (``theory.white_sigma``, Appendix)."""
    A = combined_A(model, N, normalize=normalize)
    return float(np.trace(A)) / A.shape[0]


def in_eigenbasis(A, cov) -> np.ndarray:
    """Eᵀ A E: A (D×D, or a stack (..., D, D)) in the eigenbasis of Λ, entry [d, d'] = e_dᵀ A e_d' (decreasing λ)."""
    _, E = theory.spectrum(cov)
    return E.T @ np.asarray(A, float) @ E


def mode_overlaps(A, cov) -> np.ndarray:
    """e_dᵀ A e_d for each eigen-direction (decreasing λ): the diagonal of :func:`in_eigenbasis` (one row per matrix
    of a stack). At the fixed point M_m it is 1/(λ_d c_d) for d ≤ m, else 0."""
    return np.diagonal(in_eigenbasis(A, cov), axis1=-2, axis2=-1)


def head_alignment(heads, cov) -> np.ndarray:
    """(H, D): e_dᵀ A_h e_d / ‖A_h‖_F per head — ±1 when head h is the rank-one map along e_d, ≈ 0 when unrelated.

    The squares over d sum to at most 1 (equality when A_h is diagonal in the eigenbasis).
    """
    heads = np.asarray(heads, float)
    proj = mode_overlaps(heads, cov)
    norm = np.linalg.norm(heads.reshape(len(heads), -1), axis=1)
    return proj / np.where(norm > 0, norm, 1.0)[:, None]


def head_direction(heads, cov) -> np.ndarray:
    """For each head, the eigen-direction (0-based, decreasing λ) it is most aligned with."""
    return np.argmax(np.abs(head_alignment(heads, cov)), axis=1)


# --------------------------------------------------------------------------------------------------------------
# Spectral measures
# --------------------------------------------------------------------------------------------------------------

def effective_rank(M, eps: float = 1e-300) -> float:
    """exp(−Σ p_i ln p_i), p_i = σ_i/Σσ_j over M's singular values (Roy & Vetterli): 1 for rank one, r for r equal
    singular values, between otherwise. 0 for the zero matrix."""
    s = np.linalg.svd(np.asarray(M, float), compute_uv=False)
    total = s.sum()
    if total <= eps:
        return 0.0
    p = s[s > eps * total] / total
    return float(np.exp(-(p * np.log(p)).sum()))


def _marginal_effective_rank(heads) -> float:
    """Effective rank of the heads side by side, [A_1 | … | A_H] (D × H·D): the index h is marginalised, so this counts
    the directions all heads use together, however they are split among heads (our definition; it equals
    ``effective_rank(Σ_h A_h)`` when every head carries a different eigen-direction)."""
    heads = np.asarray(heads, float)
    return effective_rank(np.concatenate(list(heads), axis=1))


def _subspace_distance(A, B, k: int) -> float:
    """Distance between the top-k left singular subspaces of A and B: sqrt(mean sin²θ_i) over the k principal angles
    θ_i (scipy ``subspace_angles``), in [0, 1]; 0 when the subspaces coincide."""
    from scipy.linalg import subspace_angles  # here: most pages never need scipy.linalg's import

    Ua = np.linalg.svd(np.asarray(A, float))[0][:, :k]
    Ub = np.linalg.svd(np.asarray(B, float))[0][:, :k]
    theta = subspace_angles(Ua, Ub)
    return float(np.sqrt(np.mean(np.sin(theta) ** 2)))


def _numerical_rank(A, rel_tol: float = 0.05) -> int:
    """The number of singular values above ``rel_tol`` times the largest (0 for the zero matrix)."""
    s = np.linalg.svd(np.asarray(A, float), compute_uv=False)
    return int((s > rel_tol * s[0]).sum()) if s[0] > 0 else 0


# --------------------------------------------------------------------------------------------------------------
# Conservation laws
# --------------------------------------------------------------------------------------------------------------

def conserved_quantities(model) -> dict[str, np.ndarray]:
    """Per head, the quantities gradient flow keeps constant (``model.conserved_quantities()``, from the rescaling
    symmetry of each head's factors). ATTN_S: ‖v_h‖² − ‖W_K[h]‖², ‖W_K[h]‖² − ‖W_Q[h]‖² ("v_minus_k",
    "k_minus_q"); ATTN_M: ‖v_h‖² − ‖W_KQ[h]‖²; MLP: w₂[h]² − ‖W₁[h]‖² (both "v_minus_k"); and "scale", the largest
    squared norm per head, to make the drift relative."""
    return {key: _np(val) for key, val in _from_model(model, "conserved_quantities").items()}


def _conservation_drift(first: dict, current: dict) -> np.ndarray:
    """max over the laws of |Q(t) − Q(0)| / scale(t) per head: how far GD has moved off the gradient-flow invariant,
    relative to the head's current size."""
    keys = [k for k in first if k != "scale"]
    drift = np.max([np.abs(current[k] - first[k]) for k in keys], axis=0)
    return drift / np.maximum(current["scale"], 1e-300)


# --------------------------------------------------------------------------------------------------------------
# Snapshots and tidy tables
# --------------------------------------------------------------------------------------------------------------

def snapshot_fn(N: int, *, normalize: str):
    """A ``snapshot(model)`` for ``gradient_descent``/``run``: the head matrices in the paper's normalisation (times N
    for ``normalize="sum"``) and the conserved quantities. Cheap (a few small arrays), so it can be recorded often."""
    factor = theory.feature_scale(N, normalize=normalize)

    def snap(model) -> dict[str, np.ndarray]:
        out = {"heads": head_matrices(model) * factor}
        out.update({f"cons_{k}": v for k, v in conserved_quantities(model).items()})
        return out

    return snap


def _plateau_index(A, cov, N) -> tuple[int, float]:
    """The plateau M_m whose PCR predictor is nearest to A, and that distance (mean squared prediction gap)."""
    D = np.asarray(A).shape[0]
    d = [theory.predictor_distance(A, theory.pcr_weights(cov, N, m, normalize="mean"), cov, N, normalize="mean")
         for m in range(D + 1)]
    m = int(np.argmin(d))
    return m, float(d[m])


def tidy(snapshots, cov, N: int, *, normalize: str, k: int | None = None, lr: float | None = None,
         model: str | None = None) -> dict[str, np.ndarray]:
    """One row per snapshot (from :func:`snapshot_fn`) as a dict of equal-length arrays, for plotting.

    The snapshots are in the paper's normalisation already; ``normalize`` is the run's, for the time axis
    (``theory.steps_to_time``, which for "sum" needs ``model`` too).

    Columns: step, [time (t/τ, if ``lr`` is given)], loss_theory (L(A) from theory), overlap_d (e_dᵀAe_d, d = 1..D),
    eff_rank, marginal_eff_rank, numerical_rank, subspace_dist (top-k left singular subspace vs the last snapshot's;
    k = 1 by default: a full-rank final A makes larger k trivial), subspace_change (top-r subspace vs the previous
    snapshot's, r the current numerical rank: spikes where a new direction is being learned), drift_max (largest relative conservation drift over heads), plateau (the
    nearest M_m) and pcr_dist (mean squared gap to M_m's predictor), pcr_dist_rel (the same relative to that
    predictor's mean square, or to A's for m = 0).
    """
    if not snapshots:
        raise ValueError("no snapshots: train with snapshot_every > 0 and snapshot=snapshot_fn(...)")
    steps = np.array([s for s, _ in snapshots])
    values = [v for _, v in snapshots]
    A_all = [v["heads"].sum(axis=0) for v in values]
    D = A_all[0].shape[0]
    A_final = A_all[-1]
    if k is None:
        k = 1
    first = {key[5:]: val for key, val in values[0].items() if key.startswith("cons_")}
    rows: dict[str, list] = {name: [] for name in
                             ["loss_theory", "eff_rank", "marginal_eff_rank", "numerical_rank", "subspace_dist",
                              "subspace_change", "drift_max", "plateau", "pcr_dist", "pcr_dist_rel"]}
    overlaps = []
    zero = np.zeros((D, D))
    for i, (v, A) in enumerate(zip(values, A_all)):
        rows["loss_theory"].append(theory.loss_of_A(A, cov, N, normalize="mean"))
        overlaps.append(mode_overlaps(A, cov))
        rows["eff_rank"].append(effective_rank(A))
        rows["marginal_eff_rank"].append(_marginal_effective_rank(v["heads"]))
        rows["numerical_rank"].append(_numerical_rank(A))
        rows["subspace_dist"].append(_subspace_distance(A, A_final, k))
        r = max(1, _numerical_rank(A))
        rows["subspace_change"].append(_subspace_distance(A, A_all[i - 1], r) if i else 0.0)
        cur = {key[5:]: val for key, val in v.items() if key.startswith("cons_")}
        rows["drift_max"].append(float(_conservation_drift(first, cur).max()))
        m, dist = _plateau_index(A, cov, N)
        rows["plateau"].append(m)
        rows["pcr_dist"].append(dist)
        ref = theory.pcr_weights(cov, N, m, normalize="mean") if m else A
        norm = theory.predictor_distance(ref, zero, cov, N, normalize="mean")
        rows["pcr_dist_rel"].append(dist / norm if norm > 0 else 0.0)
    table = {"step": steps}
    if lr is not None:
        table["time"] = theory.steps_to_time(steps, lr, normalize=normalize, model=model, N=N)
    table.update({name: np.asarray(col) for name, col in rows.items()})
    overlaps = np.asarray(overlaps)
    for d in range(D):
        table[f"overlap_{d + 1}"] = overlaps[:, d]
    return table


def attn_m_effective_a0(model, cov, N: int, *, normalize: str) -> float:
    """The initial product a0 that feeds ``theory.attn_m_drop_time`` for a random small ATTN_M (or MLP) start.

    In the linear regime u = W₁ê and w₂ obey τ u̇ = s w₂, τ ẇ₂ = s u, so a = w₂ᵀu ≈ ¼‖u(0) + w₂(0)‖² e^{2st/τ} once
    the decaying mode has died out: that prefactor is a0. The two factors are ``model.mlp_weights()`` (ATTN_M:
    W₁[h] = vec(W_KQ[h][:D, :D]ᵀ), w₂ = v[:, D]), converted to the paper's normalisation.
    """
    _, _, e = theory.attn_m_mode(cov, N)
    factor = theory.weight_scale_to_paper("attnM", N, normalize=normalize)
    W1, w2 = (_np(t) for t in _from_model(model, "mlp_weights"))
    u = W1 @ e * factor
    return float(0.25 * np.sum((u + w2 * factor) ** 2))


def attn_m_drop_step(model, cov, N: int, *, lr: float, normalize: str) -> float:
    """The GD step of ATTN_M's (or the MLP's) half-drop predicted from the model's current (initial) weights.

    a0 from :func:`attn_m_effective_a0`, the half-drop time t/τ from ``theory.attn_m_drop_time`` (the logistic
    solution along the top mode of E[y z]), converted to steps at learning rate ``lr`` (``theory.time_to_steps``).
    """
    a0 = attn_m_effective_a0(model, cov, N, normalize=normalize)
    t = theory.attn_m_drop_time(cov, N, a0)
    return float(theory.time_to_steps(t, lr, normalize=normalize, model="attnM", N=N))


def escape_law(model: str, inits, drop_steps) -> float:
    """The fitted law of the first drop's step against the initialisation scale (entries that are not finite are
    left out; at least two are needed).

    ATTN_M (and the MLP): the slope of step against ln(1/init), in steps per unit; the theory's is τ/s
    (``theory.attn_m_escape_time``). ATTN_S: the exponent of step against init on log–log axes; the theory's
    τ/(λ₁² v₀) gives −1.
    """
    inits, steps = np.asarray(inits, dtype=np.float64), np.asarray(drop_steps, dtype=np.float64)
    ok = np.isfinite(steps) & np.isfinite(inits)
    if ok.sum() < 2:
        raise ValueError("need at least two finite drop steps to fit a law")
    if model == "attnS":
        return float(np.polyfit(np.log(inits[ok]), np.log(steps[ok]), 1)[0])
    return float(np.polyfit(-np.log(inits[ok]), steps[ok], 1)[0])


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


def detect_plateaus(loss, steps=None, *, rel_tol: float = 0.01, abs_tol: float | None = None,
                    window: int | None = None, min_length: int | None = None, smooth: int = 1) -> Plateaus:
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
        from scipy.ndimage import median_filter  # here: importing scipy costs every caller that never smooths

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
    merged: list[list[int]] = []
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


def first_step_below(loss, level: float, steps=None) -> float:
    """The first step at which ``loss`` is strictly below ``level`` (NaN if it never is); ``steps`` defaults to
    0, 1, 2, … (the index into ``loss``)."""
    below = np.flatnonzero(np.asarray(loss) < level)
    if not below.size:
        return np.nan
    return float(below[0] if steps is None else np.asarray(steps)[below[0]])


def drop_steps(loss, levels, steps=None) -> np.ndarray:
    """The step of each drop d = 1 … len(levels)−1 between plateau levels L_{d−1} > L_d: the first step at which the
    loss is below their midpoint (L_{d−1} + L_d)/2 (:func:`first_step_below`; NaN if it never gets there).

    The one drop-step rule of the package (figures, benchmarks and ``published``): with ``theory.plateau_losses``
    as levels, drop d is the passage M_{d−1} → M_d of the paper; with a curve's start and end value, its one drop.
    """
    levels = np.asarray(levels, dtype=np.float64)
    return np.array([first_step_below(loss, mid, steps) for mid in (levels[:-1] + levels[1:]) / 2])


def half_drop_step(loss, steps=None, *, start: float | None = None, final: float | None = None) -> float:
    """The half-drop step of a curve that falls once: the first recorded step at which ``loss`` is strictly below
    the midpoint (start + final)/2 of its level before the drop and its level after it (:func:`drop_steps` with
    the two levels; no interpolation, so the answer is one of ``steps``).

    ``start`` defaults to the first value, ``final`` to the last: a run from a small start sits on its plateau at
    step 0, and a run or a theory curve that has finished its drop ends at its final level. Give the levels where
    they are known better (a noisy curve: the plateau's median). The one half-drop rule for a simulated loss and a
    theory loss alike, so that the two are the same quantity. NaN where the curve never gets below the midpoint,
    or where it does not fall (final ≥ start).
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
    return float(drop_steps(y, [start, final], steps)[0])


LEARNED_FALL, GIVEN_BACK = 0.25, 0.5  # our choices for :func:`learning_course`: a quarter off the start is learning
# that shows on the page; giving back half of the fall is more than noise on a test set of thousands of sequences


def learning_course(loss, *, learned: float = LEARNED_FALL, given_back: float = GIVEN_BACK) -> str:
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


def predicted_drop_steps(config, init: dict, cov, *, horizon: int | None = None, chunk: int = 20000) -> np.ndarray:
    """The step of each drop d = 1 … D that a rank-R ATTN_S run should make, predicted from its own initial weights
    with all its heads: the population (P = ∞) gradient descent of the same model from ``init`` at the same learning
    rate, normalisation and precision, on inputs of covariance ``cov`` (the run's Λ), with its drops read by the
    run's own rule (:func:`drop_steps` against ``theory.plateau_losses(cov, N)``). NaN where a drop is not made
    within ``horizon`` steps (default ``config.epoch``).

    Unlike the closed-form escape time ``theory.attn_s_drop_steps`` (one head, from a typical scale), this knows
    which of the H heads starts with most weight along each direction: the first of H heads to escape is the fastest
    of H. It differs from the finite-P run only by the training set's sampling error. Trained in chunks of ``chunk``
    steps, stopping once all D drops are made; it costs what the same number of exact steps costs (the population
    engine trains on moments of size D(D+1)² × D(D+1)², whatever P).
    """
    import dataclasses

    from .experiment import run

    if config.model != "attnS" or config.vary_len:
        raise ValueError(f"predicted_drop_steps: the saddles L(M_m) are ATTN_S's without vary_len, not "
                         f"model={config.model!r}, vary_len={config.vary_len}")
    cov = np.asarray(cov, dtype=np.float64)
    levels = theory.plateau_losses(cov, config.N)
    horizon = config.epoch if horizon is None else int(horizon)
    base = dataclasses.replace(config.on_population(cov), dynamics="gd")  # in chunks, continued by start_step
    losses, weights, done = [], init, 0
    while done < horizon:
        part = run(dataclasses.replace(base, epoch=min(chunk, horizon - done)), init=weights, start_step=done,
                   progress=False)
        losses.append(part.history.train_loss)
        weights, done = part.weights, done + part.config.epoch
        if np.isfinite(drop_steps(losses[-1], levels[-2:])[0]):
            break
    return drop_steps(np.concatenate(losses), levels)


def first_drop_step(loss, *, min_step: int = 10) -> int | None:
    """The step of a curve's first drop, from its start to its end value (:func:`half_drop_step` with its default
    levels ``loss[0]`` and ``loss[-1]``, as an index); None where it comes before ``min_step`` or never: a curve that
    falls at once has no plateau to leave (a large initialisation)."""
    k = half_drop_step(loss)
    return int(k) if k >= min_step else None


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
    long: list  # the m of the complete rests lasting at least ``long_fraction`` of the longest one

    @property
    def last_complete(self) -> int:
        """The largest m among the complete plateaus (0 if none)."""
        return max((m for m, _ in self.complete), default=0)


def rest_bands(levels, band: float = REST_BAND) -> tuple[np.ndarray, np.ndarray]:
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


def saddle_rests(loss, levels, *, band: float = REST_BAND, tol: float | None = None, steps=None,
                 min_length: int | None = None):
    """The rests of ``loss`` at the saddles L(M_0) … L(M_D) (``levels``, ``theory.plateau_losses``): the one
    plateau classifier of the package. Returns ``(m, Plateaus)``: the saddle of each rest and the rests.

    Each step belongs to the saddle whose band (:func:`rest_bands`, :data:`REST_BAND`) holds its loss, or to none;
    a rest is a maximal run of consecutive steps at one saddle lasting at least ``min_length`` samples (default
    max(3, n/400); shorter runs are a drop passing through a band). Two runs at the same saddle with nothing but
    fewer than ``min_length`` unassigned samples between them are one rest (noise can leave a band for a moment).
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
    rests = [(int(m), a, b) for m, a, b in _join_runs(long_enough, min_len)]
    levels = np.asarray(levels, dtype=np.float64)
    rests = [(m, a, b) for m, a, b in rests if abs(_rest_level(y[a:b + 1]) - levels[m]) <= tol]
    spans = [(a, b) for _, a, b in rests]
    rest_levels = np.array([_rest_level(y[a:b + 1]) for a, b in spans])
    return [m for m, _, _ in rests], Plateaus(levels=rest_levels, starts=np.array([x[a] for a, _ in spans]),
                                              ends=np.array([x[b] for _, b in spans]),
                                              drop_steps=_drops_between(y, x, spans, rest_levels))


REST_LEVEL_QUANTILE = 0.1  # the slowest tenth of a rest's steps: its closest approach to the saddle


def rest_core(y) -> np.ndarray:
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


def saddle_levels(loss, levels, *, band: float = REST_BAND, steps=None) -> np.ndarray:
    """For each saddle M_0 … M_D (``levels``: L(M_0) … L(M_D), ``theory.plateau_losses``), the level of the first
    rest of ``loss`` there (:func:`saddle_rests`), NaN where the curve never rests there. Figures and sweeps put the
    plateaus they found beside the theory with this."""
    m_of, p = saddle_rests(loss, levels, band=band, steps=steps)
    out = np.full(len(levels), np.nan)
    for m, level in zip(m_of, p.levels):
        if np.isnan(out[m]):
            out[m] = level
    return out


def saddle_plateaus(loss, levels, *, band: float = REST_BAND, long_fraction: float = 0.1,
                    steps=None) -> SaddlePlateaus:
    """The rests of ``loss`` at the saddles among ``levels`` (``theory.plateau_losses``: L(M_0) … L(M_D);
    :func:`saddle_rests`), and which of them are *long*.

    A rest is complete if it ends before the curve does (the last one is cut by the end of the run and is not
    classified); a complete rest is long if it lasts at least ``long_fraction`` of the longest complete one, so every
    complete rest at least half as long as the longest is long. The theory's long plateaus for rank-R heads are
    ``theory.long_plateaus(D, R)``: m = 0, R, 2R, ….
    """
    m_of, p = saddle_rests(loss, levels, band=band, steps=steps)
    end = (np.arange(np.size(loss)) if steps is None else np.asarray(steps))[-1]
    complete = [(m, int(b - a)) for m, a, b in zip(m_of, p.starts, p.ends) if b < end]
    longest = max((d for _, d in complete), default=0)
    long = sorted({m for m, d in complete if d >= long_fraction * longest})
    return SaddlePlateaus(plateaus=p, m=m_of, visited=list(m_of), complete=complete, long=long)


@dataclass
class RankSummary:
    """What a rank-R ATTN_S loss curve did, against the saddles L(M_0) … L(M_D) (:func:`rank_summary`)."""

    rank: int
    levels: np.ndarray  # L(M_0) … L(M_D), as given
    plateaus: SaddlePlateaus
    expected_long: list  # the theory's long plateaus m = 0, R, 2R, … up to the last complete plateau
    learned: int  # directions learned: drops made (midpoints between consecutive levels passed)
    final_loss: float
    final_theory: float  # L(M_learned)

    def rows(self, label: str = "", *, key: str = "", paper_learned: int | None = None,
             predicted_learned: int | None = None) -> list[dict]:
        """``numbers.json`` rows: long plateaus (found vs theory, as text), directions learned (beside
        ``paper_learned`` where the paper states it, and as theory ``predicted_learned``, the drops a prediction
        such as :func:`predicted_drop_steps` makes in the same steps), each plateau level at a saddle, and the final
        loss; ``label`` is appended to each quantity (e.g. ", published window") and ``key`` to each row's key
        (``R1.<key>.learned``, ``R1.<key>.plateau.M2``, …)."""
        R, D = self.rank, len(self.levels) - 1
        k = f"R{R}" + (f".{key}" if key else "")
        out = [dict(key=f"{k}.long_plateaus",
                    quantity=f"R={R}: long plateaus m among the complete ones{label} (theory: multiples of R)",
                    theory=" ".join(map(str, self.expected_long)), reproduced=" ".join(map(str, self.plateaus.long))),
               dict(key=f"{k}.learned", quantity=f"R={R}: directions learned{label}"
                    + (" (theory: drops predicted from the initial weights)" if predicted_learned is not None else ""),
                    paper=paper_learned,
                    theory=predicted_learned,
                    reproduced=self.learned)]
        firsts = {}
        for m, level in zip(self.plateaus.m, self.plateaus.plateaus.levels):
            if m is not None:
                firsts.setdefault(m, level)  # a saddle's first rest (a curve may come back near it)
        out += [dict(key=f"{k}.plateau.M{m}", quantity=f"R={R}: plateau L(M_{m}){label}", theory=self.levels[m],
                     reproduced=level) for m, level in firsts.items()]
        out.append(dict(key=f"{k}.final_loss", quantity=f"R={R}: final loss{label}", theory=self.final_theory,
                        reproduced=self.final_loss))
        return out


def rank_summary(loss, levels, rank: int, *, band: float = REST_BAND) -> RankSummary:
    """The long plateaus of a rank-``rank`` ATTN_S curve (:func:`saddle_plateaus`) beside the theory's
    (``theory.long_plateaus``, counted up to the last complete plateau the curve reached), the directions it learned
    (:func:`drop_steps` passed) and its final loss beside L(M_learned)."""
    loss, levels = np.asarray(loss, dtype=np.float64), np.asarray(levels, dtype=np.float64)
    sp = saddle_plateaus(loss, levels, band=band)
    learned = directions_learned(loss, levels)
    expected = [m for m in theory.long_plateaus(len(levels) - 1, rank) if m <= sp.last_complete]
    return RankSummary(rank=rank, levels=levels, plateaus=sp, expected_long=expected, learned=learned,
                       final_loss=float(loss[-1]), final_theory=float(levels[learned]))


def directions_learned(loss, levels, steps=None) -> int:
    """How many eigen-directions a curve has learned: the drops between consecutive saddle levels ``levels``
    (L(M_0) … L(M_D)) whose midpoint it has passed (:func:`drop_steps`)."""
    return int(np.sum(np.isfinite(drop_steps(loss, levels, steps))))


def scalar_ode_overlay(loss, lr: float, cov, N: int, m: int, *, level: float | None = None,
                       start_frac: float = 0.05, normalize: str, model: str = "attnS"):
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
