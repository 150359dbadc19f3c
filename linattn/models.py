"""The paper's models: ATTN_M, ATTN_S and the two-layer MLP on the cubic feature.

Every model maps a batch of sequences ``X`` (P, n, D+1) — the last token the query x̃_q, label zeroed — to the query's
prediction ŷ (P,). Only the query row of attention is ever computed.

Linear attention (paper Eq. 2–4; reference normalisation: no 1/N, see ``scale``)::

    ATTN_M:  ŷ = Σ_h x̃_qᵀ W_KQ[h] S v_h                S = scale · Σ_m x̃_m x̃_mᵀ (all n tokens)
    ATTN_S:  ŷ = Σ_h x̃_qᵀ W_Q[h]ᵀ W_K[h] S v_h          v_h = last row of W_V[h]
    MLP:     ŷ = w₂ᵀ W₁ z,   z = vec(b x_qᵀ),  b = scale · Σ_{n≤N} y_n x_n

Each is *linear in a fixed feature of the sequence* once its weights are combined: ŷ = ⟨combined(), features(X)⟩.
For attention the feature is T = x_q ⊗ S (the query label is zero, so only x_q's D entries enter, and S is
symmetric, so only its upper triangle is kept: F = D·(D+1)(D+2)/2); the combined weight is
M[a, b, c] = Σ_h W_KQ[h][a, b] v_h[c] folded onto that triangle. The exact engine (``engines.py``) trains through
``combined()``; the per-sample engine through ``forward()``; a test checks that the two agree.

With ``softmax=True`` the attention scores s_m = x̃_qᵀ W_KQ x̃_m go through a softmax over the n keys (no scale,
no mask) and the model is no longer linear in a fixed feature.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import nn

MODELS = ("attnM", "attnS", "mlp")
# The reference's three initialisation eras (its code at Dec 2024, Jan 2025 and Dec 2025); the old names are aliases.
INIT_SCHEMES = ("dec2024", "jan2025", "dec2025")
INIT_SCHEME_ALIASES = {"paper": "jan2025", "current": "dec2025"}


def attn_s_scales(scheme: str, init: float, *, heads: int, in_dim: int, rank: int) -> tuple[float, float]:
    """(key/query std, value scale) of ATTN_S at initialisation, per era (E = D + 1).

    dec2024: (init, init) — the value weight starts at exactly init; jan2025: (init/√(R·E), init);
    dec2025: (init/√(H·R·E), init/(√H·E)).
    """
    E = in_dim + 1
    return {"dec2024": (init, init), "jan2025": (init / np.sqrt(rank * E), init),
            "dec2025": (init / np.sqrt(heads * rank * E), init / (np.sqrt(heads) * E))}[scheme]


def init_weights(model: str, *, heads: int, in_dim: int, rank: int = 1, init: float = 0.01,
                 scheme: str = "dec2025", rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Initial weights with the reference's distributions, as full arrays (the layout of ``init.npz``).

    These are the distributions of the three eras with linattn's own random streams (``--draws streams``); the
    reference's exact numbers come from :mod:`linattn.reference_draws`. With E = D + 1:

    * ATTN_M and MLP (every era): every entry N(0, init²).
    * ATTN_S ``dec2024``: W_Q, W_K ~ N(0, init²) with nothing zeroed; W_V zero but W_V[h][D, D] = init.
    * ATTN_S ``jan2025``: W_Q, W_K ~ N(0, init²/(R·E)), W_V ~ N(0, init²).
    * ATTN_S ``dec2025``: W_Q, W_K ~ N(0, init²/(H·R·E)), W_V ~ N(0, init²/(H·E²)).

    Then (except dec2024's ATTN_S keys) the blocks that the theory keeps at zero are zeroed; they stay trainable:
    the first D entries of each v_h = W_V[h][D]; ATTN_M's query-x/key-label block W_KQ[h][:D, D]; ATTN_S's key
    label column W_K[h][:, D].
    """
    H, D, R = heads, in_dim, rank
    if model == "mlp":
        return {"W1": rng.normal(0.0, init, (H, D * D)), "w2": rng.normal(0.0, init, H)}
    if scheme not in INIT_SCHEMES:
        raise ValueError(f"unknown init scheme {scheme!r}; choose one of {INIT_SCHEMES}")
    out = {}
    if model == "attnM":
        out["W_KQ"] = rng.normal(0.0, init, (H, D + 1, D + 1))
        out["W_KQ"][:, :D, D] = 0.0
        v_std = init
    elif model == "attnS":
        kq_std, v_std = attn_s_scales(scheme, init, heads=H, in_dim=D, rank=R)
        out["W_Q"] = rng.normal(0.0, kq_std, (H, R, D + 1))
        out["W_K"] = rng.normal(0.0, kq_std, (H, R, D + 1))
        if scheme == "dec2024":
            out["W_V"] = np.zeros((H, D + 1, D + 1))
            out["W_V"][:, D, D] = v_std
            return out
        out["W_K"][:, :, D] = 0.0
    else:
        raise ValueError(f"unknown model {model!r}; choose one of {MODELS}")
    out["W_V"] = rng.normal(0.0, v_std, (H, D + 1, D + 1))
    out["W_V"][:, D, :D] = 0.0
    return out


def _triangle(D: int):
    """Index pairs (b, c), b ≤ c, of the upper triangle of a symmetric (D+1)×(D+1) matrix."""
    return torch.triu_indices(D + 1, D + 1)


def attention_features(X: torch.Tensor, scale) -> torch.Tensor:
    """T = x_q ⊗ triu(S), S = scale · Σ_m x̃_m x̃_mᵀ: the (P, D·(D+1)(D+2)/2) feature of linear attention."""
    D = X.shape[-1] - 1
    S = torch.einsum("pmb,pmc->pbc", X, X)
    S = S * scale
    b, c = _triangle(D)
    return (X[:, -1, :D, None] * S[:, None, b, c]).reshape(X.shape[0], -1)


@functools.lru_cache(maxsize=None)
def _fold_matrix(D: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """((D+1)², K) 0/1 matrix adding entry (b, c) and (c, b) of a flattened matrix into triangle slot (min, max)."""
    b, c = _triangle(D)
    k = torch.arange(b.numel())
    F = torch.zeros(D + 1, D + 1, b.numel(), dtype=dtype)
    F[b, c, k] = 1.0
    F[c, b, k] = 1.0
    return F.reshape((D + 1) ** 2, -1).to(device)


def fold_combined(M: torch.Tensor) -> torch.Tensor:
    """Fold M (D, D+1, D+1) onto the upper triangle in its last two indices: ⟨M, x_q⊗S⟩ = ⟨fold(M), T⟩,
    fold(M)[a, (b, c)] = M[a, b, c] + M[a, c, b] for b < c and M[a, b, b] on the diagonal."""
    D = M.shape[0]
    return (M.reshape(D, -1) @ _fold_matrix(D, M.dtype, str(M.device))).reshape(-1)


def cubic_features(X: torch.Tensor, scale) -> torch.Tensor:
    """z = vec(b x_qᵀ) with b = scale · Σ_{n≤N} y_n x_n; z[i·D + j] = b_i x_q,j (paper Eq. 6)."""
    D = X.shape[-1] - 1
    b = torch.einsum("pn,pnd->pd", X[:, :-1, D], X[:, :-1, :D]) * scale
    return (b[:, :, None] * X[:, -1, None, :D]).reshape(X.shape[0], -1)


class _Attention(nn.Module):
    """Shared query-row computation; subclasses give the query-key bilinear form and the combined weight."""

    softmax: bool
    v: nn.Parameter  # (H, D+1): v_h, the last row of each head's value matrix

    def query_projection(self, xq: torch.Tensor) -> torch.Tensor:
        """(P, H, D+1): row h is x̃_qᵀ W_KQ[h], so the score of key m in head h is its product with x̃_m."""
        raise NotImplementedError

    def key_query(self) -> torch.Tensor:
        """(H, D+1, D+1): each head's merged key-query matrix W_KQ[h] (ATTN_S: W_Q[h]ᵀ W_K[h])."""
        raise NotImplementedError

    def query_weights(self, X: torch.Tensor, scale=1.0) -> torch.Tensor:
        """(P, H, n): the query's attention to each token — softmax(s) or scale·s, s_m = x̃_qᵀ W_KQ[h] x̃_m."""
        scores = torch.einsum("phb,pmb->phm", self.query_projection(X[:, -1]), X)
        return torch.softmax(scores, dim=-1) if self.softmax else scores * scale

    def forward(self, X: torch.Tensor, scale=1.0) -> torch.Tensor:
        values = torch.einsum("pmc,hc->phm", X, self.v)  # each token's value, last output entry: v_h · x̃_m
        return (self.query_weights(X, scale) * values).sum(dim=(1, 2))

    def full_attention(self, X: torch.Tensor, scale=1.0) -> torch.Tensor:
        """Straightforward reference: every head's whole (n × n) attention matrix, then the query row's output.

        Used only by tests and benchmarks to check :meth:`forward`, which computes the query row alone.
        """
        W = self.key_query()
        scores = torch.einsum("pna,hab,pmb->phnm", X, W, X)
        weights = torch.softmax(scores, -1) if self.softmax else scores * scale
        out = torch.einsum("phnm,pmc,hc->pn", weights, X, self.v)
        return out[:, -1]

    def features(self, X: torch.Tensor, scale=1.0) -> torch.Tensor:
        return attention_features(X, scale)

    def combined(self) -> torch.Tensor:
        """fold(M), M[a, b, c] = Σ_h W_KQ[h][a, b] v_h[c] for a < D: ŷ = ⟨combined(), features(X)⟩."""
        H, D = self.v.shape[0], self.v.shape[1] - 1
        M = self.key_query()[:, :D].reshape(H, -1).T @ self.v  # rows (a, b), columns c: plain matmuls keep
        return fold_combined(M.reshape(D, D + 1, D + 1))       # the autograd graph (and the step) short

    def value_weights(self) -> torch.Tensor:
        """Each head's value weight on the label, v_h[D] (what ``--track_value`` records)."""
        return self.v[:, -1]


class AttnM(_Attention):
    """ATTN_M: H heads with a merged key-query matrix W_KQ[h] ∈ R^{(D+1)×(D+1)}."""

    def __init__(self, W_KQ, W_V, softmax: bool = False):
        super().__init__()
        self.W_KQ = nn.Parameter(torch.as_tensor(W_KQ).clone())
        self.v = nn.Parameter(torch.as_tensor(W_V)[:, -1].clone())
        self.softmax = softmax

    def query_projection(self, xq):
        return torch.einsum("pa,hab->phb", xq, self.W_KQ)

    def key_query(self):
        return self.W_KQ


class AttnS(_Attention):
    """ATTN_S: H heads with separate query and key W_Q[h], W_K[h] ∈ R^{R×(D+1)} (rank R)."""

    def __init__(self, W_Q, W_K, W_V, softmax: bool = False):
        super().__init__()
        self.W_Q = nn.Parameter(torch.as_tensor(W_Q).clone())
        self.W_K = nn.Parameter(torch.as_tensor(W_K).clone())
        self.v = nn.Parameter(torch.as_tensor(W_V)[:, -1].clone())
        self.softmax = softmax

    def query_projection(self, xq):
        return torch.einsum("pa,hra,hrb->phb", xq, self.W_Q, self.W_K)

    def key_query(self):
        return self.W_Q.transpose(1, 2) @ self.W_K


class MLP(nn.Module):
    """Two-layer linear network on the cubic feature: ŷ = w₂ᵀ W₁ z (W₁: H×D², w₂: H)."""

    softmax = False

    def __init__(self, W1, w2):
        super().__init__()
        self.W1 = nn.Parameter(torch.as_tensor(W1).clone())
        self.w2 = nn.Parameter(torch.as_tensor(w2).clone())

    def features(self, X, scale=1.0):
        return cubic_features(X, scale)

    def forward(self, X, scale=1.0):
        return self.features(X, scale) @ self.W1.T @ self.w2

    def combined(self):
        return self.W1.T @ self.w2

    def value_weights(self):
        return self.w2


def build_model(model: str, weights: dict[str, np.ndarray], *, softmax: bool = False,
                dtype=torch.float64, device="cpu") -> nn.Module:
    """A model from ``init_weights``-style arrays, on ``device`` in ``dtype``."""
    w = {k: torch.as_tensor(np.asarray(v), dtype=dtype) for k, v in weights.items()}
    if model == "attnM":
        net = AttnM(w["W_KQ"], w["W_V"], softmax=softmax)
    elif model == "attnS":
        net = AttnS(w["W_Q"], w["W_K"], w["W_V"], softmax=softmax)
    elif model == "mlp":
        net = MLP(w["W1"], w["w2"])
    else:
        raise ValueError(f"unknown model {model!r}; choose one of {MODELS}")
    return net.to(device)


def mlp_from_attn_m(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The MLP weights that compute what ATTN_M computes while its zero blocks are zero (paper Section 4.1).

    ŷ = Σ_h v_h[D] x_qᵀ U_h b with U_h = W_KQ[h][:D, :D], so W₁[h] = vec(U_hᵀ) and w₂[h] = v_h[D].
    """
    W_KQ, W_V = weights["W_KQ"], weights["W_V"]
    D = W_KQ.shape[1] - 1
    U = W_KQ[:, :D, :D]
    return {"W1": np.ascontiguousarray(U.transpose(0, 2, 1)).reshape(U.shape[0], -1), "w2": W_V[:, D, D].copy()}
