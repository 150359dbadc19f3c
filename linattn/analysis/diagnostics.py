"""Measures of a model's weights along a training run: the in-context matrix A(t), its alignment with the
eigen-directions, effective ranks, subspace stability, conservation-law drift, distance to the PCR predictor, and the
drop step ATTN_M's weights predict. What a loss curve shows (plateaus, the one rule for the step of a drop) is
:mod:`linattn.analysis.loss_curves`.

The measures follow Mainali & Teixeira (arXiv:2504.12916: spectral-rank dynamics, subspace stability, conservation
laws) applied to this project's models. Record them during training with

    snap = snapshot_fn(cfg.N, normalize=cfg.normalize)
    result = run(cfg, snapshot_every=50, snapshot=snap)
    table = tidy(result.history.snapshots, cov, cfg.N, lr=cfg.lr, normalize=cfg.normalize, model=cfg.model)

All matrices A are in the βᵀ A x_q form of ``theory.py`` and, inside snapshots and tables, in the **paper's
normalisation** (a reference-normalised model's A is multiplied by N), so they compare directly with
``theory.fixed_point_A(..., normalize="mean")``. What is read off a model comes from its class's methods
(``weights.ModelWeights``: ``in_context_heads``, ``conserved_quantities``, ``mlp_weights``), which a torch model of
``models.py`` and a run's stored weight arrays (``weights.model_weights``, read without torch) share; a model without
the method raises TypeError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from .. import theory
from ..weights import model_weights

if TYPE_CHECKING:
    from ..weights import ModelWeights  # a torch model of models.py is one too

# --------------------------------------------------------------------------------------------------------------
# The in-context matrix of a model
# --------------------------------------------------------------------------------------------------------------

def _np(t) -> np.ndarray:
    """A reading as a float64 numpy array (a torch tensor detached and brought to the CPU first)."""
    if hasattr(t, "detach"):
        t = t.detach().to("cpu")
    return np.asarray(t, dtype=np.float64)


def _from_model(model, method: str):
    """``model.<method>()``, or a TypeError naming the model when its class does not define that measure."""
    fn = getattr(model, method, None)
    if not callable(fn):
        raise TypeError(f"a {type(model).__name__} has no {method}(): the diagnostics cover the models of "
                        f"linattn.models (AttnM, AttnS, MLP) and their weights (linattn.weights.model_weights)")
    return fn()


def head_matrices(model: ModelWeights) -> np.ndarray:
    """(H, D, D): each head's in-context matrix A_h as the model's weights are (``model.in_context_heads()``).

    ŷ = bᵀ (Σ_h A_h) x_q + terms even in the labels, b = scale Σ_{n≤N} y_n x_n; for attention
    A_h = v_h[D] W_KQ[h][:D, :D]ᵀ + v_h[:D] W_KQ[h][:D, D]ᵀ (ATTN_S: W_KQ = W_Qᵀ W_K), for the MLP
    A_h = w₂[h] reshape(W₁[h], (D, D)). In the model's own normalisation (b = N β for "sum").
    """
    return _np(_from_model(model, "in_context_heads"))


def combined_A(model: ModelWeights, N: int | None = None, *, normalize: str) -> np.ndarray:
    """A = Σ_h A_h in the paper's normalisation: ŷ = βᵀ A x_q + terms even in the labels, β = (1/N) Σ y_n x_n.
    The model's own A for ``normalize="mean"``, N times it for ``"sum"`` (which then needs ``N``)."""
    if normalize == "sum" and N is None:
        raise ValueError("a reference-normalised model needs N to convert A to the paper's normalisation")
    return head_matrices(model).sum(axis=0) * theory.feature_scale(N or 0, normalize=normalize)  # N: checked above


def white_sigma(model: ModelWeights, N: int | None = None, *, normalize: str) -> float:
    """σ = tr(A)/D for the combined A (:func:`combined_A`, paper normalisation): the one number the white-covariance
    theory tracks, where A stays a multiple σ I of the identity (``theory.white_sigma``, Appendix)."""
    A = combined_A(model, N, normalize=normalize)
    return float(np.trace(A)) / A.shape[0]


def in_eigenbasis(A: ArrayLike, cov: ArrayLike) -> np.ndarray:
    """Eᵀ A E: A (D×D, or a stack (..., D, D)) in the eigenbasis of Λ, entry [d, d'] = e_dᵀ A e_d' (decreasing λ)."""
    _, E = theory.spectrum(cov)
    return E.T @ np.asarray(A, float) @ E


def mode_overlaps(A: ArrayLike, cov: ArrayLike) -> np.ndarray:
    """e_dᵀ A e_d for each eigen-direction (decreasing λ): the diagonal of :func:`in_eigenbasis` (one row per matrix
    of a stack). At the fixed point M_m it is 1/(λ_d c_d) for d ≤ m, else 0."""
    return np.diagonal(in_eigenbasis(A, cov), axis1=-2, axis2=-1)


def head_alignment(heads: ArrayLike, cov: ArrayLike) -> np.ndarray:
    """(H, D): e_dᵀ A_h e_d / ‖A_h‖_F per head — ±1 when head h is the rank-one map along e_d, ≈ 0 when unrelated.

    The squares over d sum to at most 1 (equality when A_h is diagonal in the eigenbasis).
    """
    heads = np.asarray(heads, float)
    proj = mode_overlaps(heads, cov)
    norm = np.linalg.norm(heads.reshape(len(heads), -1), axis=1)
    return proj / np.where(norm > 0, norm, 1.0)[:, None]


def head_direction(heads: ArrayLike, cov: ArrayLike) -> np.ndarray:
    """For each head, the eigen-direction (0-based, decreasing λ) it is most aligned with."""
    return np.argmax(np.abs(head_alignment(heads, cov)), axis=1)


# --------------------------------------------------------------------------------------------------------------
# Spectral measures
# --------------------------------------------------------------------------------------------------------------

def effective_rank(M: ArrayLike, eps: float = 1e-300) -> float:
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


def top_subspace(A: ArrayLike, k: int) -> np.ndarray:
    """(D, k): the top-k left singular vectors of A, an orthonormal basis of the subspace A's k largest singular values
    act on (for A on the saddle M_k with k = its numerical rank: its column space, span(e_1 … e_k))."""
    return np.linalg.svd(np.asarray(A, float))[0][:, :k]


def subspace_distance(U: ArrayLike, V: ArrayLike) -> float:
    """How far the subspace spanned by the orthonormal columns of ``U`` lies from that of ``V``: sqrt(mean sin²θ_i)
    over the min(k_U, k_V) principal angles θ_i (scipy ``subspace_angles``), in [0, 1]. 0 when the smaller subspace
    lies inside the larger; 0 also when either is empty (nothing to compare)."""
    from scipy.linalg import subspace_angles  # here: most pages never need scipy.linalg's import

    U, V = np.asarray(U, float), np.asarray(V, float)
    if not U.shape[1] or not V.shape[1]:
        return 0.0
    return float(np.sqrt(np.mean(np.sin(subspace_angles(U, V)) ** 2)))


def size_against_final(A: ArrayLike) -> np.ndarray:
    """σ₁(A(t)) / σ₁(A(T)) for a stack of in-context matrices A (time × D × D): the size of A at each snapshot
    against its size at the last one, T. (The numerical rank counts singular values relative to σ₁(A(t)) itself, so
    it cannot tell a near-zero A from a learned one; this measure can.)"""
    top = np.linalg.svd(np.asarray(A, dtype=np.float64), compute_uv=False)[:, 0]
    return top / top[-1]


def learned_subspace_distance(A: ArrayLike, cov: ArrayLike, rank: int | None = None) -> float:
    """The distance (:func:`subspace_distance`) between the subspace A has learned, its top-r singular subspace with
    r = ``rank`` (default its numerical rank, :func:`numerical_rank`), and the theory's after r drops,
    span(e_1 … e_r) of the r largest eigenvalues of Λ (the column space of the saddle M_r). 0 on every saddle; 1 when
    A has learned directions orthogonal to those; 0 for r = 0."""
    r = numerical_rank(A) if rank is None else int(rank)
    _, E = theory.spectrum(cov)
    return subspace_distance(top_subspace(A, r), E[:, :r])


def learned_subspace_moved(A: ArrayLike, later: Iterable[ArrayLike], rank: int) -> float:
    """How far the subspace A has learned (its top-``rank`` singular subspace, :func:`top_subspace`) lies outside the
    subspaces learned afterwards: the largest :func:`subspace_distance` from the top-r' singular subspace of each
    later matrix in ``later`` (a sequence of D×D matrices), r' its numerical rank, over those with
    ``rank`` ≤ r' < D (a full-rank learned subspace is all of R^D and holds every subspace: no test). 0 when the
    learned directions never move again (theory); NaN where no later matrix qualifies."""
    U = top_subspace(A, rank)
    D = np.asarray(A).shape[0]
    ranked = [(B, numerical_rank(B)) for B in later]
    d = [subspace_distance(U, top_subspace(B, r)) for B, r in ranked if rank <= r < D]
    return float(max(d)) if d else float("nan")


def numerical_rank(A: ArrayLike, rel_tol: float = 0.05) -> int:
    """The number of singular values above ``rel_tol`` times the largest (0 for the zero matrix)."""
    s = np.linalg.svd(np.asarray(A, float), compute_uv=False)
    return int((s > rel_tol * s[0]).sum()) if s[0] > 0 else 0


# --------------------------------------------------------------------------------------------------------------
# Conservation laws
# --------------------------------------------------------------------------------------------------------------

def conserved_quantities(model: ModelWeights) -> dict[str, np.ndarray]:
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

def snapshot_fn(N: int, *, normalize: str) -> Callable[[ModelWeights], dict[str, np.ndarray]]:
    """A ``snapshot(model)`` for ``gradient_descent``/``run``: the head matrices in the paper's normalisation (times N
    for ``normalize="sum"``) and the conserved quantities. Cheap (a few small arrays), so it can be recorded often."""
    factor = theory.feature_scale(N, normalize=normalize)

    def snap(model) -> dict[str, np.ndarray]:
        out = {"heads": head_matrices(model) * factor}
        out.update({f"cons_{k}": v for k, v in conserved_quantities(model).items()})
        return out

    return snap


def snapshot_heads(result, *, before: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(steps, heads): the steps of ``result``'s weight snapshots (those below ``before``, default all) and each one's
    head matrices A_h in the paper's normalisation, (snapshot, H, D, D): the ``"heads"`` :func:`snapshot_fn` records,
    read at once. A_h depends on head h's own weights alone, so every snapshot's heads are read as the heads of one
    model (its weights stacked along the head axis) instead of one model per snapshot, from the weight arrays
    (``linattn.weights.model_weights``: no torch model is built)."""
    cfg = result.config
    snaps = [(s, w) for s, w in result.history.snapshots if before is None or s < before]
    steps = np.array([s for s, _ in snaps], dtype=np.int64)
    if not snaps:
        return steps, np.empty((0, cfg.head_num, cfg.in_dim, cfg.in_dim))
    stacked = {n: np.concatenate([np.asarray(w[n]) for _, w in snaps]) for n in snaps[0][1]}
    heads = head_matrices(model_weights(cfg.model, stacked))
    factor = theory.feature_scale(cfg.N, normalize=cfg.normalize)
    return steps, heads.reshape(len(snaps), -1, *heads.shape[1:]) * factor


def _plateau_index(A, pcr: list, cov, N) -> tuple[int, float]:
    """The plateau M_m whose PCR predictor (``pcr[m]``, ``theory.pcr_weights``) is nearest to A, and that distance
    (mean squared prediction gap)."""
    d = [theory.predictor_distance(A, B, cov, N, normalize="mean") for B in pcr]
    m = int(np.argmin(d))
    return m, float(d[m])


def tidy(snapshots: Iterable[tuple[int, dict[str, np.ndarray]]], cov: ArrayLike, N: int, *, normalize: str,
         lr: float | None = None, model: str | None = None) -> dict[str, np.ndarray]:
    """One row per snapshot (from :func:`snapshot_fn`) as a dict of equal-length arrays, for plotting.

    The snapshots are in the paper's normalisation already; ``normalize`` is the run's, for the time axis
    (``theory.steps_to_time``, which for "sum" needs ``model`` too).

    Columns: step, [time (t/τ, if ``lr`` is given)], loss_theory (L(A) from theory), overlap_d (e_dᵀAe_d, d = 1..D),
    eff_rank, marginal_eff_rank, numerical_rank r, subspace_dist (the learned subspace, A's top-r singular subspace,
    against the theory's span(e_1 … e_r): :func:`learned_subspace_distance`), subspace_change (top-r subspace vs
    the previous snapshot's: spikes where a new direction is being learned), drift_max (largest
    relative conservation drift over heads), plateau (the nearest M_m) and pcr_dist (mean squared gap to M_m's
    predictor), pcr_dist_rel (the same relative to that
    predictor's mean square, or to A's for m = 0).
    """
    if not snapshots:
        raise ValueError("no snapshots: train with snapshot_every > 0 and snapshot=snapshot_fn(...)")
    steps = np.array([s for s, _ in snapshots])
    values = [v for _, v in snapshots]
    A_all = [v["heads"].sum(axis=0) for v in values]
    D = A_all[0].shape[0]
    first = {key[5:]: val for key, val in values[0].items() if key.startswith("cons_")}
    rows: dict[str, list] = {name: [] for name in
                             ["loss_theory", "eff_rank", "marginal_eff_rank", "numerical_rank", "subspace_dist",
                              "subspace_change", "drift_max", "plateau", "pcr_dist", "pcr_dist_rel"]}
    overlaps = []
    zero = np.zeros((D, D))
    pcr = [theory.pcr_weights(cov, N, m, normalize="mean") for m in range(D + 1)]  # each saddle's, once
    pcr_norm = [theory.predictor_distance(B, zero, cov, N, normalize="mean") for B in pcr]
    for i, (v, A) in enumerate(zip(values, A_all)):
        rows["loss_theory"].append(theory.loss_of_A(A, cov, N, normalize="mean"))
        overlaps.append(mode_overlaps(A, cov))
        rows["eff_rank"].append(effective_rank(A))
        rows["marginal_eff_rank"].append(_marginal_effective_rank(v["heads"]))
        r = numerical_rank(A)
        rows["numerical_rank"].append(r)
        rows["subspace_dist"].append(learned_subspace_distance(A, cov, r))
        rows["subspace_change"].append(subspace_distance(top_subspace(A, max(1, r)), top_subspace(A_all[i - 1],
                                                                                                   max(1, r)))
                                       if i else 0.0)
        cur = {key[5:]: val for key, val in v.items() if key.startswith("cons_")}
        rows["drift_max"].append(float(_conservation_drift(first, cur).max()))
        m, dist = _plateau_index(A, pcr, cov, N)
        rows["plateau"].append(m)
        rows["pcr_dist"].append(dist)
        norm = pcr_norm[m] if m else theory.predictor_distance(A, zero, cov, N, normalize="mean")
        rows["pcr_dist_rel"].append(dist / norm if norm > 0 else 0.0)
    table = {"step": steps}
    if lr is not None:
        table["time"] = np.asarray(theory.steps_to_time(steps, lr, normalize=normalize, model=model, N=N))
    table.update({name: np.asarray(col) for name, col in rows.items()})
    overlap_table = np.asarray(overlaps)
    for d in range(D):
        table[f"overlap_{d + 1}"] = overlap_table[:, d]
    return table


def attn_m_effective_a0(model: ModelWeights, cov: ArrayLike, N: int, *, normalize: str) -> float:
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


def attn_m_drop_step(model: ModelWeights, cov: ArrayLike, N: int, *, lr: float, normalize: str) -> float:
    """The GD step of ATTN_M's (or the MLP's) half-drop predicted from the model's current (initial) weights.

    a0 from :func:`attn_m_effective_a0`, the half-drop time t/τ from ``theory.attn_m_drop_time`` (the logistic
    solution along the top mode of E[y z]), converted to steps at learning rate ``lr`` (``theory.time_to_steps``).
    """
    a0 = attn_m_effective_a0(model, cov, N, normalize=normalize)
    t = theory.attn_m_drop_time(cov, N, a0)
    return float(theory.time_to_steps(t, lr, normalize=normalize, model="attnM", N=N))


def escape_law(model: str, inits: ArrayLike, steps: ArrayLike) -> float:
    """The fitted law of the first drop's step against the initialisation scale (entries that are not finite are
    left out; at least two are needed).

    ATTN_M (and the MLP): the slope of step against ln(1/init), in steps per unit; the theory's is τ/s
    (``theory.attn_m_escape_time``). ATTN_S: the exponent of step against init on log–log axes; the theory's
    τ/(λ₁² v₀) gives −1.
    """
    inits, steps = np.asarray(inits, dtype=np.float64), np.asarray(steps, dtype=np.float64)
    ok = np.isfinite(steps) & np.isfinite(inits)
    if ok.sum() < 2:
        raise ValueError("need at least two finite drop steps to fit a law")
    if model == "attnS":
        return float(np.polyfit(np.log(inits[ok]), np.log(steps[ok]), 1)[0])
    return float(np.polyfit(-np.log(inits[ok]), steps[ok], 1)[0])
