"""The population (P → ∞) moments of the icl = 1 task, exactly, by Gaussian moment identities.

The exact and population engines (``engines.py``) train the linear models ŷ = ⟨m(θ), T⟩ through the three moments
E[y²], E[yT], E[TTᵀ] of their feature T (``models.attention_features``, ``models.cubic_features``). For P → ∞ those
are polynomials in Λ: :func:`population_moments` builds them from Isserlis' (Wick's) theorem, with no sampling;
``engines.population`` wraps them in an objective. Like ``theory.py``, this is algebra of the data model only:
x ~ N(0, Λ), w ~ N(0, I_D), y = wᵀx, no centring (paper, Section 2).
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from .engines import Moments, lengths, scale_for
from .models import _triangle


def _pad(A: np.ndarray, axes: int) -> np.ndarray:
    """A with every one of its ``axes`` axes padded by one trailing zero (D → D+1: the label coordinate)."""
    return np.pad(A, [(0, 1)] * axes)


def _isserlis(Lam: np.ndarray, order: int) -> np.ndarray:
    """E[x_{i1} ⋯ x_{ik}] for x ~ N(0, Λ), k = ``order`` ∈ {4, 6}: the sum over all pairings (Isserlis/Wick)."""
    letters = "abcdef"[:order]
    out = 0.0
    seen = set()
    for perm in itertools.permutations(range(order)):
        pairs = tuple(sorted(tuple(sorted(perm[i:i + 2])) for i in range(0, order, 2)))
        if pairs in seen:
            continue
        seen.add(pairs)
        spec = ",".join(letters[i] + letters[j] for i, j in pairs) + "->" + letters
        out = out + np.einsum(spec, *([Lam] * (order // 2)))
    return out


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


def population_moments(kind: str, cov: np.ndarray, seq_len: int, *, normalize: str, vary_len=False) -> Moments:
    """The exact P → ∞ moments of the icl = 1 task (x ~ N(0, Λ), w ~ N(0, I), no centring) for one feature map.

    ``kind="attention"``: T = x_q ⊗ triu(S) (``models.attention_features``); ``kind="cubic"``: z = vec(b x_qᵀ)
    (``models.cubic_features``), which is the sub-vector T[j, i, D] (b_i = S_{iD}: the query's label is zero).
    ``vary_len`` averages the moments of the prefix lengths n = 2 … seq_len, each with its factor in front of S
    (``engines.scale_for``: 1/N for ``normalize="mean"``, 1 or 1/n for "sum"). See :func:`_attention_population`.
    """
    cov = np.asarray(cov, dtype=np.float64)
    D = cov.shape[0]
    if kind == "attention":
        b, c = _triangle(D)
        a = np.repeat(np.arange(D), b.numel())
        sel = (a, np.tile(b.numpy(), D), np.tile(c.numpy(), D))
    elif kind == "cubic":
        i, j = np.divmod(np.arange(D * D), D)  # z[i·D + j] = b_i x_q,j = T[j, i, D]
        sel = (j, i, np.full(D * D, D))
    else:
        raise ValueError(f"kind must be 'attention' or 'cubic', got {kind!r}")
    yy, yT, TT = 0.0, 0.0, 0.0
    ns = lengths(seq_len, vary_len)
    for n in ns:
        yy_n, yT_n, TT_n = _attention_population(cov, n - 1, scale_for(n, normalize, vary_len))
        yy, yT, TT = yy + yy_n, yT + yT_n[sel], TT + TT_n[sel][:, sel[0], sel[1], sel[2]]
    k = len(ns)
    return Moments(yy / k, torch.as_tensor(yT / k), torch.as_tensor(TT / k), count=0)
