"""The population objective: the loss of the linear models for infinitely many training sequences (P → ∞).

The exact objective (``exact.py``) trains ŷ = ⟨m(θ), T⟩ through the three moments E[y²], E[yT], E[TTᵀ] of the feature
T (``models.attention_features``, ``models.cubic_features``). For P → ∞ and the icl = 1 task those moments are
polynomials in Λ: ``population_moments`` builds them from Isserlis' (Wick's) theorem, with no sampling, and
:class:`Population` trains on them. Like ``theory.py`` this is algebra of the data model only: x ~ N(0, Λ),
w ~ N(0, I_D), y = wᵀx, no centring (paper, Section 2).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from .. import data as data_mod
from ..models import triangle_pairs
from ..normalization import lengths, token_scale
from .base import DEFAULT_CHUNK, Moments, check_linear, feature_batches
from .declarations import PopulationEngine, RunSettings
from .exact import Exact

if TYPE_CHECKING:
    from ..data import Datasets
    from ..models import Model


def _pad(A: np.ndarray, axes: int) -> np.ndarray:
    """A with every one of its ``axes`` axes padded by one trailing zero (D → D+1: the label coordinate)."""
    return np.pad(A, [(0, 1)] * axes)


def _isserlis(Lam: np.ndarray, order: int) -> np.ndarray:
    """E[x_{i1} ⋯ x_{ik}] for x ~ N(0, Λ), k = ``order`` ∈ {4, 6}: the sum over all pairings (Isserlis/Wick)."""
    letters = "abcdef"[:order]
    out: np.ndarray | float = 0.0
    seen = set()
    for perm in itertools.permutations(range(order)):
        pairs = tuple(sorted(tuple(sorted(perm[i:i + 2])) for i in range(0, order, 2)))
        if pairs in seen:
            continue
        seen.add(pairs)
        spec = ",".join(letters[i] + letters[j] for i, j in pairs) + "->" + letters
        out = out + np.einsum(spec, *([Lam] * (order // 2)))
    return np.asarray(out)


def _attention_population(cov: np.ndarray, N: int, scale: float):
    """E[y²], E[yT] (D, D+1, D+1), E[TTᵀ] (D, D+1, D+1, D, D+1, D+1) for T = x_q ⊗ S, unfolded, one length.

    S = s(Σ_{n≤N} x̃_n x̃_nᵀ + x̄_q x̄_qᵀ), x̃_n = (x_n, wᵀx_n), x̄_q = (x_q, 0), x ~ N(0, Λ), w ~ N(0, I), y = wᵀx_q.
    Given w a context token is Gaussian, x̃ ~ N(0, Σ(w)), Σ(w) = Λ̄ + e ūᵀ + ū eᵀ + (wᵀΛw) e eᵀ with ū = (Λw, 0),
    e the label axis, Λ̄ = Λ padded. Tokens are independent given w and the query does not involve w, so with
    K = E_w[Σ(w) ⊗ Σ(w)] (closed form below) and the query's moments X4, X6 (Isserlis):

        E[T_abc T_a'b'c'] / s² = N Λ_aa' (K_{bc,b'c'} + K_{bb',cc'} + K_{bc',cb'})        same context token
                                 + N(N−1) Λ_aa' K_{bc,b'c'}                              two context tokens
                                 + N (X4_{aa'b'c'} EΣ_bc + X4_{aa'bc} EΣ_b'c')             a context token and x̄_q
                                 + X6_{aa'bcb'c'}                                        x̄_q twice
        E[y T_abc] / s = N (e_b Λ²_ac + e_c Λ²_ab),     E[y²] = tr Λ,

    with EΣ = E_w Σ(w) = Λ̄ + tr(Λ) e eᵀ; K = Λ̄⊗Λ̄ + Λ̄⊗tr(Λ)eeᵀ + tr(Λ)eeᵀ⊗Λ̄ + E[L⊗L] + ((trΛ)² + 2 tr Λ²) e⊗e⊗e⊗e,
    L = e ūᵀ + ū eᵀ, E[ū ūᵀ] = Λ̄² (odd powers of w vanish).
    """
    D = cov.shape[0]
    tr = np.trace(cov)
    L1 = _pad(cov, 2)
    L2 = _pad(cov @ cov, 2)
    e = np.zeros(D + 1)
    e[D] = 1.0
    ee = np.outer(e, e)
    K = (np.einsum("bc,de->bcde", L1, L1) + tr * np.einsum("bc,de->bcde", L1, ee)
         + tr * np.einsum("bc,de->bcde", ee, L1)
         + np.einsum("b,d,ce->bcde", e, e, L2) + np.einsum("b,e,cd->bcde", e, e, L2)
         + np.einsum("c,d,be->bcde", e, e, L2) + np.einsum("c,e,bd->bcde", e, e, L2)
         + (tr**2 + 2 * np.trace(cov @ cov)) * np.einsum("b,c,d,e->bcde", e, e, e, e))
    M4 = K + K.transpose(0, 2, 1, 3) + K.transpose(0, 3, 2, 1)  # K_{bc,b'c'} + K_{bb',cc'} + K_{bc',cb'}
    ES = L1 + tr * ee
    X4 = _pad(_isserlis(cov, 4), 4)[:D, :D]  # (a, a', b', c'), zero where b' or c' is the query's label
    X6 = _pad(_isserlis(cov, 6), 6)[:D, :D]  # (a, a', b, c, b', c')
    TT = (np.einsum("ax,bcde->abcxde", cov, N * M4 + N * (N - 1) * K)
          + N * (np.einsum("axde,bc->abcxde", X4, ES) + np.einsum("axbc,de->abcxde", X4, ES))
          + X6.transpose(0, 2, 3, 1, 4, 5))
    yT = N * (np.einsum("b,ac->abc", e, L2[:D]) + np.einsum("c,ab->abc", e, L2[:D]))
    return float(tr), yT * scale, TT * scale**2


def _given_task_population(cov: np.ndarray, N: int, scale: float, w: np.ndarray, noise_labels: bool):
    """:func:`_attention_population`'s three moments for sequences that all carry one known task vector ``w``.

    Given the task, a context token x̃ = (x, label) is Gaussian with covariance Σ: Σ(w) (above) when the label is
    wᵀx, or Λ̄ + e eᵀ when it is N(0, 1) noise independent of x (``noise_labels``: the in-weight-only sequences of
    icl = 0). The query's target is y = wᵀx_q in both. The same sums as there, with K = Σ⊗Σ and EΣ = Σ, and

        E[y T_abc] / s = N (Λw)_a Σ_bc + Σ_i w_i X4_{iabc},     E[y²] = wᵀΛw

    (the second term, the query with itself, vanishes only on average over a fresh w).
    """
    D = cov.shape[0]
    w = np.asarray(w, dtype=np.float64)
    e = np.zeros(D + 1)
    e[D] = 1.0
    if noise_labels:
        Sigma = _pad(cov, 2) + np.outer(e, e)
    else:
        u = np.append(cov @ w, w @ cov @ w)  # (Λw, wᵀΛw): the label's covariance with each coordinate
        Sigma = _pad(cov, 2) + np.outer(e, u) + np.outer(u, e) - u[D] * np.outer(e, e)
    K = np.einsum("bc,de->bcde", Sigma, Sigma)
    M4 = K + K.transpose(0, 2, 1, 3) + K.transpose(0, 3, 2, 1)
    X4 = _pad(_isserlis(cov, 4), 4)[:D, :D]
    X6 = _pad(_isserlis(cov, 6), 6)[:D, :D]
    TT = (np.einsum("ax,bcde->abcxde", cov, N * M4 + N * (N - 1) * K)
          + N * (np.einsum("axde,bc->abcxde", X4, Sigma) + np.einsum("axbc,de->abcxde", X4, Sigma))
          + X6.transpose(0, 2, 3, 1, 4, 5))
    yT = N * np.einsum("a,bc->abc", cov @ w, Sigma) + np.einsum("i,iabc->abc", w, X4)
    return float(w @ cov @ w), yT * scale, TT * scale**2


def _selection(kind: str, D: int):
    """The entries (a, b, c) of the full (D, D+1, D+1) moment arrays that make up feature ``kind``."""
    if kind == "attention":
        b, c = triangle_pairs(D)
        a = np.repeat(np.arange(D), b.numel())
        return a, np.tile(b.numpy(), D), np.tile(c.numpy(), D)
    if kind == "cubic":
        i, j = np.divmod(np.arange(D * D), D)  # z[i·D + j] = b_i x_q,j = T[j, i, D]
        return j, i, np.full(D * D, D)
    raise ValueError(f"kind must be 'attention' or 'cubic', got {kind!r}")


def _averaged(parts, kind: str, D: int, seq_len: int, normalize: str, vary_len: bool) -> Moments:
    """The moments of feature ``kind`` averaged over the prefix lengths, from ``parts(N, scale)`` (full arrays)."""
    sel = _selection(kind, D)
    yy, yT, TT = 0.0, 0.0, 0.0
    ns = lengths(seq_len, vary_len)
    for n in ns:
        yy_n, yT_n, TT_n = parts(n - 1, token_scale(n, normalize, vary_len))
        yy, yT, TT = yy + yy_n, yT + yT_n[sel], TT + TT_n[sel][:, sel[0], sel[1], sel[2]]
    k = len(ns)
    return Moments(yy / k, torch.as_tensor(yT / k), torch.as_tensor(TT / k), count=0)


def population_moments(kind: str, cov: np.ndarray, seq_len: int, *, normalize: str, vary_len: bool = False) -> Moments:
    """The exact P → ∞ moments of the icl = 1 task (x ~ N(0, Λ), w ~ N(0, I), no centring) for one feature map.

    ``kind="attention"``: T = x_q ⊗ triu(S) (``models.attention_features``); ``kind="cubic"``: z = vec(b x_qᵀ)
    (``models.cubic_features``), which is the sub-vector T[j, i, D] (b_i = S_{iD}: the query's label is zero).
    ``vary_len`` averages the moments of the prefix lengths n = 2 … seq_len, each with its factor in front of S
    (``normalization.token_scale``: 1/N for ``normalize="mean"``, 1 or 1/n for "sum"). See
    :func:`_attention_population`.
    """
    cov = np.asarray(cov, dtype=np.float64)
    return _averaged(lambda N, scale: _attention_population(cov, N, scale), kind, cov.shape[0], seq_len, normalize,
                     vary_len)


def mixture_moments(kind: str, cov: np.ndarray, seq_len: int, *, icl: float, w_fix: np.ndarray, normalize: str,
                    vary_len: bool = False) -> Moments:
    """The exact P → ∞ moments of the mixed task of a run with ``icl`` = c < 1 (Figure 14's training sets).

    A fraction c of the sequences carries a fresh task w ~ N(0, I) (the moments of :func:`population_moments`), the
    rest the fixed task ``w_fix`` with labels w_fixᵀx in the context too; for c = 0 the context labels are N(0, 1)
    noise, as in a drawn training set (``data.sample_sequences``). No centring (it vanishes as P → ∞). The
    moments are linear in c between the two kinds of sequence, so the mixture is c · fresh + (1 − c) · fixed.
    """
    cov = np.asarray(cov, dtype=np.float64)
    if not 0.0 <= icl <= 1.0:
        raise ValueError(f"icl must be in [0, 1], got {icl!r}")
    args = (kind, cov.shape[0], seq_len, normalize, vary_len)
    fixed = _averaged(lambda N, scale: _given_task_population(cov, N, scale, w_fix, icl == 0.0), *args)
    if icl == 0.0:
        return fixed
    fresh = _averaged(lambda N, scale: _attention_population(cov, N, scale), *args)
    return Moments(icl * fresh.yy + (1 - icl) * fixed.yy, icl * fresh.yT + (1 - icl) * fixed.yT,
                   icl * fresh.TT + (1 - icl) * fixed.TT, count=0)


class Population(PopulationEngine, Exact):
    """The P → ∞ objective of the icl = 1 task: :class:`~linattn.objectives.Exact` on the population moments."""

    @classmethod
    def for_run(cls, model: Model, datasets: Datasets, cfg: RunSettings, **opts: Any) -> Population:
        """The training objective of a run of ``cfg`` (its covariance from ``datasets``; at ``cfg.icl`` < 1 the
        mixture's moments, :func:`mixture_moments`, with the run's fixed task ``datasets.w_fix``)."""
        if cfg.icl != 1.0:
            mom = mixture_moments(cast(str, model.feature_map), datasets.cov, cfg.seq_len, icl=cfg.icl,
                                  w_fix=cast(np.ndarray, datasets.w_fix),  # the run's fixed task at icl < 1
                                  normalize=cfg.normalize)
            dtype, device = opts.get("dtype", torch.float64), opts.get("device", "cpu")
            mom.yT, mom.TT = mom.yT.to(dtype=dtype, device=device), mom.TT.to(dtype=dtype, device=device)
            return cls(mom, dtype)
        return cls.of(model, cov=datasets.cov, seq_len=cfg.seq_len, samples=cfg.population_samples, seed=cfg.seed,
                      **opts)

    @classmethod
    def of(cls, model: Model, *, cov: np.ndarray, seq_len: int, samples: int = 0, seed: int = 10,
           vary_len: bool = False, normalize: str = "sum", chunk: int = DEFAULT_CHUNK,
           device: str | torch.device = "cpu", dtype: torch.dtype = torch.float64) -> "Population":
        """The P → ∞ objective of the icl = 1 task.

        ``samples=0`` (default): the exact moments of ``population_moments``. ``samples > 0``: a Monte-Carlo
        estimate from that many fresh sequences of ``seed``'s own stream (never overlapping the training data). The
        estimate is unbiased; measured against the exact moments on the Figure 3a task (D = 4, N = 31, 2²⁰ samples) its
        loss at the fixed points M_0 … M_4 is off by 1e-4 to 1.1e-3 (``benchmarks/README.md``) and it takes ~40 s,
        against 0.01 s for the exact moments, which is why it is no longer the default.
        """
        if getattr(model, "softmax", False):
            raise ValueError("the population engine covers linear models only")
        kind = getattr(model, "feature_map", None)
        # the population objective, too, trains through features() @ combined(): check it on a few fresh sequences
        probe = data_mod.sample_sequences(64, seq_len, np.asarray(cov, dtype=np.float64), 1.0, np.zeros(cov.shape[0]),
                                          np.random.default_rng(0), centre=False)
        check_linear(model, torch.as_tensor(probe.X, device=device), token_scale(seq_len, normalize, vary_len),
                     engine="population")
        if samples == 0 and kind is not None:
            mom = population_moments(kind, cov, seq_len, vary_len=vary_len, normalize=normalize)
        else:
            n_samples = samples or (1 << 20)
            rng = data_mod.streams(seed, data_mod.POPULATION)
            w_fix = np.zeros(cov.shape[0])

            def batches():
                done = 0
                while done < n_samples:
                    b = min(chunk, n_samples - done)
                    seqs = data_mod.sample_sequences(b, seq_len, cov, 1.0, w_fix, rng, centre=False)
                    yield from feature_batches(model, seqs, vary_len=vary_len, normalize=normalize, chunk=chunk,
                                               device=device)
                    done += b

            with torch.no_grad():
                mom = Moments.accumulate(batches())
        mom.yT, mom.TT = mom.yT.to(dtype=dtype, device=device), mom.TT.to(dtype=dtype, device=device)
        return cls(mom, dtype)
