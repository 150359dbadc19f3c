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
M[a, b, c] = Σ_h W_KQ[h][a, b] v_h[c] folded onto that triangle. The exact objective (``objectives/exact.py``) trains
through ``combined()``; the autograd engine through ``forward()``; a test checks that the two agree.

With ``softmax=True`` the attention scores s_m = x̃_qᵀ W_KQ x̃_m go through a softmax over the n keys (no scale,
no mask) and the model is no longer linear in a fixed feature.

What the measures of ``diagnostics.py`` read off a model is a method of its class: ``in_context_heads()`` (each
head's in-context matrix A_h, ŷ = bᵀ (Σ_h A_h) x_q + terms even in the labels), ``conserved_quantities()`` (the
gradient-flow invariants of each head) and, for ATTN_M and the MLP, ``mlp_weights()`` (the two factors W₁, w₂).
Each model inherits them, and ``key_query()``, from its weights' class in ``weights.py`` (``AttnMWeights``, …),
where they are written once for numpy arrays and torch tensors alike: a stored run's weights are read the same way
without torch (``weights.model_weights``).
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import nn

from .normalization import token_scale
from .weights import (  # noqa: F401
    INIT_SCHEMES,
    MODELS,
    AttentionWeights,
    AttnMWeights,
    AttnSWeights,
    MLPWeights,
    attn_m_to_mlp,
    attn_s_scales,
    check_weight_settings,
    check_weights,
    init_weights,
    mlp_from_attn_m,
    weight_shapes,
)


def triangle_pairs(D: int):
    """Index pairs (b, c), b ≤ c, of the upper triangle of a symmetric (D+1)×(D+1) matrix."""
    return torch.triu_indices(D + 1, D + 1)


def attention_features(X: torch.Tensor, scale: float | torch.Tensor) -> torch.Tensor:
    """T = x_q ⊗ triu(S), S = scale · Σ_m x̃_m x̃_mᵀ: the (P, D·(D+1)(D+2)/2) feature of linear attention."""
    D = X.shape[-1] - 1
    S = torch.einsum("pmb,pmc->pbc", X, X)
    S = S * scale
    b, c = triangle_pairs(D)
    return (X[:, -1, :D, None] * S[:, None, b, c]).reshape(X.shape[0], -1)


@functools.lru_cache(maxsize=None)
def fold_matrix(D: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """((D+1)², K) 0/1 matrix adding entry (b, c) and (c, b) of a flattened matrix into triangle slot (min, max)."""
    b, c = triangle_pairs(D)
    k = torch.arange(b.numel())
    F = torch.zeros(D + 1, D + 1, b.numel(), dtype=dtype)
    F[b, c, k] = 1.0
    F[c, b, k] = 1.0
    return F.reshape((D + 1) ** 2, -1).to(device)


def fold_combined(M: torch.Tensor) -> torch.Tensor:
    """Fold M (D, D+1, D+1) onto the upper triangle in its last two indices: ⟨M, x_q⊗S⟩ = ⟨fold(M), T⟩,
    fold(M)[a, (b, c)] = M[a, b, c] + M[a, c, b] for b < c and M[a, b, b] on the diagonal."""
    D = M.shape[0]
    return torch.mm(M.reshape(D, -1), fold_matrix(D, M.dtype, M.device)).reshape(-1)


def unfold_combined(g: torch.Tensor) -> torch.Tensor:
    """The adjoint of ``fold_combined``: ∂⟨g, fold(M)⟩/∂M for g of fold's shape, as (D, D+1, D+1) — each
    triangle slot's value on both of its entries (b, c) and (c, b)."""
    D = _dim_of_fold(g.numel())
    return torch.mm(g.reshape(D, -1), fold_matrix(D, g.dtype, g.device).T).reshape(D, D + 1, D + 1)


@functools.lru_cache(maxsize=None)
def _dim_of_fold(size: int) -> int:
    """D from the size D·(D+1)(D+2)/2 of a folded combined weight."""
    D = 1
    while D * (D + 1) * (D + 2) // 2 < size:
        D += 1
    if D * (D + 1) * (D + 2) // 2 != size:
        raise ValueError(f"{size} is not the size D(D+1)(D+2)/2 of a folded combined weight")
    return D


@functools.lru_cache(maxsize=None)
def _attn_m_bilinear_map(D: int) -> np.ndarray:
    """ATTN_M's Φ (D·K, D·(D+1), D+1), K = (D+1)(D+2)/2 (``AttnM.bilinear_map``); read-only, shared."""
    E = D + 1
    fold = fold_matrix(D, torch.float64, torch.device("cpu")).numpy().reshape(E, E, -1)
    Phi = np.einsum("ad,bck->akdbc", np.eye(D), fold).reshape(D * fold.shape[-1], D * E, E)
    Phi.flags.writeable = False
    return Phi


def cubic_features(X: torch.Tensor, scale: float | torch.Tensor) -> torch.Tensor:
    """z = vec(b x_qᵀ) with b = scale · Σ_{n≤N} y_n x_n; z[i·D + j] = b_i x_q,j (paper Eq. 6)."""
    D = X.shape[-1] - 1
    b = torch.einsum("pn,pnd->pd", X[:, :-1, D], X[:, :-1, :D]) * scale
    return (b[:, :, None] * X[:, -1, None, :D]).reshape(X.shape[0], -1)


class _Model(nn.Module):
    """What every model offers beyond ``forward``: :meth:`predict` on plain arrays."""

    @property
    def in_dim(self) -> int:
        """D, the input coordinates of a token (a token is D + 1 numbers: x and its label)."""
        raise NotImplementedError

    def predict(self, X: ArrayLike | torch.Tensor, normalize: str = "sum") -> np.ndarray:
        """The predictions ŷ (P,) for the sequences ``X``, as a float64 numpy array (no gradient is recorded).

        ``X``: a numpy array or torch tensor of shape (P, seq_len, D+1) in the layout of
        :class:`~linattn.data.Sequences`: token m of sequence p is ``X[p, m] = (x_m, y_m)`` and the last token is the
        query, whose label slot
        ``X[p, -1, -1]`` must be 0 (its label is what is predicted). The sum over the seq_len tokens is scaled by
        ``normalization.token_scale(seq_len, normalize)``: 1 for ``"sum"`` (the reference's, as trained by default),
        1/N for ``"mean"`` (the paper's, N = seq_len − 1). Computed in float64 on the model's device with the current
        weights; the model itself is left as it is.
        """
        X = X.detach().cpu().numpy() if isinstance(X, torch.Tensor) else np.asarray(X)
        E = self.in_dim + 1
        if X.ndim != 3 or X.shape[1] < 2 or X.shape[2] != E:
            raise ValueError(f"X must have shape (P, seq_len, D+1) = (P, seq_len, {E}) for this model (D = "
                             f"{self.in_dim}, seq_len >= 2), got shape {X.shape}")
        if leak := np.count_nonzero(X[:, -1, -1]):
            raise ValueError(f"the query's label X[:, -1, -1] must be 0, but it is nonzero in {leak} of {X.shape[0]} "
                             "sequences (the model would see what it predicts)")
        scale = token_scale(X.shape[1], normalize)
        params = list(self.parameters())
        net = self if all(w.dtype == torch.float64 for w in params) else copy.deepcopy(self).to(torch.float64)
        with torch.no_grad():
            y = net(torch.as_tensor(X, dtype=torch.float64, device=params[0].device), scale)
        return y.cpu().numpy()


    def fixed_entries(self) -> list[torch.Tensor | None]:
        """Per parameter (``parameters()`` order) a boolean mask of its entries whose gradient is zero for every
        data set and every weight, so that gradient descent and gradient flow never move them (None: every entry
        moves). They multiply the query's label, which the data always zero. None for every parameter here; the
        attention models override it (``flow.gradient_flow`` integrates only the other entries)."""
        return [None for _ in self.parameters()]

    def bilinear_map(self) -> np.ndarray | None:
        """Φ (F, n_a, n_b), float64, where the combined weight is bilinear in two blocks of the moving weights:

            combined() = Σ_ij Φ[:, i, j] Σ_h a[h, i] b[h, j],

        a (H, n_a) and b (H, n_b) being the entries that move (not ``fixed_entries``), in ``parameters()`` order and
        flattened, split into their first H·n_a and last H·n_b numbers. With it ``flow.gradient_flow`` writes the
        gradient and Hessian of the exact loss in a few numpy products (``flow.BilinearLoss``). None (here) where m
        is not of that form: the flow then goes through the engine and ``combined_jacobian``."""
        return None

    def combined_jacobian(self) -> torch.Tensor:
        """J = ∂m/∂θ, (F, n): the combined weight m = ``combined()`` differentiated in every parameter, θ the
        parameters flattened in ``parameters()`` order (``parameters_to_vector``'s layout). By autograd here; a model
        may write it out (ATTN_M does)."""
        theta = torch.nn.utils.parameters_to_vector(self.parameters()).detach()
        return torch.autograd.functional.jacobian(lambda th: _at(self, th, self.combined), theta)

    def combined_curvature(self, g: torch.Tensor) -> torch.Tensor:
        """∂²⟨g, m⟩/∂θ², (n, n), for a fixed ``g`` of m's shape: the second-order part of the Hessian of any loss of
        m, ∇²L(θ) = Jᵀ (∂²L/∂m²) J + ∂²⟨∂L/∂m, m⟩/∂θ² (J: :meth:`combined_jacobian`). By autograd here."""
        theta = torch.nn.utils.parameters_to_vector(self.parameters()).detach()
        g = g.detach()
        return torch.autograd.functional.hessian(lambda th: torch.dot(g, _at(self, th, self.combined)), theta)


def _at(model: nn.Module, theta: torch.Tensor, fn):
    """``fn()`` (a method of ``model``, by name of its bound method) with the model's parameters replaced by the flat
    vector ``theta``, differentiably (``torch.func.functional_call``); the model itself is left unchanged."""
    at, offset = {}, 0
    for name, p in model.named_parameters():
        at[f"inner.{name}"] = theta[offset:offset + p.numel()].view_as(p)
        offset += p.numel()
    return torch.func.functional_call(_Call(model, fn.__name__), at, ())


class _Call(nn.Module):
    """A module whose forward is another method of ``inner`` (for ``torch.func.functional_call``)."""

    def __init__(self, inner: nn.Module, method: str):
        super().__init__()
        self.inner, self.method = inner, method

    def forward(self) -> Any:
        return getattr(self.inner, self.method)()


class _Attention(_Model, AttentionWeights):
    """Shared query-row computation; subclasses give the query-key bilinear form and the combined weight (and, from
    their weights' class, ``key_query()``)."""

    softmax: bool
    v: nn.Parameter  # (H, D+1): v_h, the last row of each head's value matrix

    @property
    def feature_map(self) -> str | None:
        """The fixed feature T of ``features()`` by name ("attention": x_q ⊗ triu(S)), None for softmax attention,
        whose output is not linear in any fixed feature."""
        return None if self.softmax else "attention"

    @property
    def in_dim(self) -> int:
        return self.v.shape[1] - 1

    def query_projection(self, xq: torch.Tensor) -> torch.Tensor:
        """(P, H, D+1): row h is x̃_qᵀ W_KQ[h], so the score of key m in head h is its product with x̃_m."""
        raise NotImplementedError

    def query_weights(self, X: torch.Tensor, scale: float | torch.Tensor = 1.0) -> torch.Tensor:
        """(P, H, n): the query's attention to each token — softmax(s) or scale·s, s_m = x̃_qᵀ W_KQ[h] x̃_m."""
        scores = torch.einsum("phb,pmb->phm", self.query_projection(X[:, -1]), X)
        return torch.softmax(scores, dim=-1) if self.softmax else scores * scale

    def forward(self, X: torch.Tensor, scale: float | torch.Tensor = 1.0) -> torch.Tensor:
        values = torch.einsum("pmc,hc->phm", X, self.v)  # each token's value, last output entry: v_h · x̃_m
        return (self.query_weights(X, scale) * values).sum(dim=(1, 2))

    def features(self, X: torch.Tensor, scale: float | torch.Tensor = 1.0) -> torch.Tensor:
        return attention_features(X, scale)

    def combined(self) -> torch.Tensor:
        """fold(M), M[a, b, c] = Σ_h W_KQ[h][a, b] v_h[c] for a < D: ŷ = ⟨combined(), features(X)⟩."""
        return self.combined_with_vjp()[0]

    def combined_with_vjp(self) -> tuple[torch.Tensor, Callable[[torch.Tensor], list[torch.Tensor]]]:
        """(``combined()``, vjp): vjp(g) is ∂⟨g, combined()⟩/∂θ for each parameter, in ``parameters()`` order,
        written out rather than recorded by autograd (the exact engine's step: a few small products, no graph, the
        key-query product computed once for both). With A[h] = W_KQ[h][:D] flattened, M = Σ_h A[h] ⊗ v_h and
        G = unfold(g) (``unfold_combined``, as (D(D+1), D+1)):

            ∂/∂v_h = A[h] G,   ∂/∂W_KQ[h][:D] = G v_h (reshaped),   ∂/∂W_KQ[h][D] = 0,

        then through ``key_query()`` (``key_query_vjp``). Every product is called as ``torch.mm``/``torch.bmm``
        (the kernels ``@`` dispatches to, without its reshaping): a step is some 25 products and additions of small
        matrices, each a few microseconds of overhead. vjp records no graph; the value does unless called under
        ``torch.no_grad()`` (as the exact engine does), and combined() keeps an autograd graph through these plain
        products."""
        H, D = self.v.shape[0], self.v.shape[1] - 1
        v = self.v
        A = self.key_query()[:, :D].reshape(H, -1)
        m = fold_combined(torch.mm(A.T, v).reshape(D, D + 1, D + 1))  # M: rows (a, b), columns c

        def vjp(g: torch.Tensor) -> list[torch.Tensor]:
            with torch.no_grad():
                G = unfold_combined(g).reshape(D * (D + 1), D + 1)
                return self.key_query_vjp(torch.mm(v, G.T).reshape(H, D, D + 1)) + [torch.mm(A, G)]
        return m, vjp

    def key_query_vjp(self, g_rows: torch.Tensor) -> list[torch.Tensor]:
        """The gradients of the key-query parameters, in ``parameters()`` order, from ∂/∂W_KQ[h][:D] (``g_rows``,
        (H, D, D+1): the rows ``combined()`` reads; the label row's gradient is zero)."""
        raise NotImplementedError

    def value_weights(self) -> torch.Tensor:
        """Each head's value weight on the label, v_h[D] (what ``--track_value`` records)."""
        return self.v[:, -1]


class AttnM(_Attention, AttnMWeights):
    """ATTN_M: H heads with a merged key-query matrix W_KQ[h] ∈ R^{(D+1)×(D+1)}."""

    def __init__(self, W_KQ, W_V, softmax: bool = False):
        super().__init__()
        self.W_KQ = nn.Parameter(torch.as_tensor(W_KQ).clone())
        self.v = nn.Parameter(torch.as_tensor(W_V)[:, -1].clone())
        self.softmax = softmax

    def query_projection(self, xq: torch.Tensor) -> torch.Tensor:
        return torch.einsum("pa,hab->phb", xq, self.W_KQ)

    def key_query_vjp(self, g_rows: torch.Tensor) -> list[torch.Tensor]:
        return [torch.nn.functional.pad(g_rows, (0, 0, 0, 1))]  # the label row: zero

    def fixed_entries(self) -> list[torch.Tensor | None]:
        """W_KQ[h]'s label row W_KQ[h][D, :]: it multiplies the query's zeroed label in every score."""
        mask = torch.zeros(self.W_KQ.shape, dtype=torch.bool)
        mask[:, -1, :] = True
        return [mask, None]

    def bilinear_map(self) -> np.ndarray:
        """Φ[(a, k), (a', b), c] = δ_aa' fold[(b, c), k] (``fold_combined``): m = fold(M), M[a, b, c] =
        Σ_h W_KQ[h][a, b] v_h[c] (a < D), with a_h = W_KQ[h][:D] flattened (n_a = D(D+1)) and b_h = v_h (n_b = D+1)."""
        return _attn_m_bilinear_map(self.in_dim)

    def combined_jacobian(self) -> torch.Tensor:
        """J = ∂m/∂θ (F, n), written out. m is bilinear: with M[a, b, c] = Σ_h W_KQ[h][a, b] v_h[c] (a < D) and
        m = fold(M), fold(M)[a, k] = Σ_bc M[a, b, c] Φ[b, c, k] (``fold_combined``),

            ∂m[a, k]/∂W_KQ[h][a', b] = δ_aa' Σ_c Φ[b, c, k] v_h[c]   (0 for the label row a' = D),
            ∂m[a, k]/∂v_h[c] = Σ_b W_KQ[h][a, b] Φ[b, c, k]."""
        with torch.no_grad():
            W, v = self.W_KQ, self.v
            H, E = v.shape
            D = E - 1
            Phi = fold_matrix(D, v.dtype, v.device).reshape(E, E, -1)
            eye = torch.eye(E, dtype=v.dtype, device=v.device)[:D]  # δ_aa', a' over all E rows
            JW = torch.einsum("ad,bck,hc->akhdb", eye, Phi, v).reshape(-1, H * E * E)
            Jv = torch.einsum("hab,bck->akhc", W[:, :D], Phi).reshape(-1, H * E)
            return torch.cat([JW, Jv], dim=1)

    def combined_curvature(self, g: torch.Tensor) -> torch.Tensor:
        """∂²⟨g, m⟩/∂θ² (n, n), written out: m is linear in each head's W_KQ[h] and v_h apart, so the only nonzero
        blocks pair W_KQ[h][a, b] with v_h[c] of the same head, ∂²⟨g, m⟩/∂W_KQ[h][a, b]∂v_h[c] = G[a, b, c] with
        G = ``unfold_combined(g)`` (zero on the label row a = D)."""
        with torch.no_grad():
            H, E = self.v.shape
            G = torch.nn.functional.pad(unfold_combined(g.to(self.v.dtype)), (0, 0, 0, 0, 0, 1))  # (E, E, E)
            eye = torch.eye(H, dtype=G.dtype, device=G.device)
            cross = torch.einsum("hj,abc->habjc", eye, G).reshape(H * E * E, H * E)
            n = H * E * E + H * E
            out = torch.zeros(n, n, dtype=G.dtype, device=G.device)
            out[:H * E * E, H * E * E:] = cross
            out[H * E * E:, :H * E * E] = cross.T
            return out


class AttnS(_Attention, AttnSWeights):
    """ATTN_S: H heads with separate query and key W_Q[h], W_K[h] ∈ R^{R×(D+1)} (rank R)."""

    def __init__(self, W_Q, W_K, W_V, softmax: bool = False):
        super().__init__()
        self.W_Q = nn.Parameter(torch.as_tensor(W_Q).clone())
        self.W_K = nn.Parameter(torch.as_tensor(W_K).clone())
        self.v = nn.Parameter(torch.as_tensor(W_V)[:, -1].clone())
        self.softmax = softmax

    def query_projection(self, xq: torch.Tensor) -> torch.Tensor:
        return torch.einsum("pa,hra,hrb->phb", xq, self.W_Q, self.W_K)

    def key_query_vjp(self, g_rows: torch.Tensor) -> list[torch.Tensor]:
        """W_KQ[h] = W_Q[h]ᵀ W_K[h] with G = ∂/∂W_KQ[h] (its label row D zero): ∂/∂W_Q[h] = W_K[h] Gᵀ (zero in column
        D), ∂/∂W_K[h] = W_Q[h] G = W_Q[h][:, :D] G[:D]."""
        D = g_rows.shape[1]
        return [torch.nn.functional.pad(torch.bmm(self.W_K, g_rows.transpose(1, 2)), (0, 1)),
                torch.bmm(self.W_Q[:, :, :D], g_rows)]

    def fixed_entries(self) -> list[torch.Tensor | None]:
        """W_Q[h]'s label column W_Q[h][:, D]: it multiplies the query's zeroed label in every score."""
        mask = torch.zeros(self.W_Q.shape, dtype=torch.bool)
        mask[:, :, -1] = True
        return [mask, None, None]


class MLP(_Model, MLPWeights):
    """Two-layer linear network on the cubic feature: ŷ = w₂ᵀ W₁ z (W₁: H×D², w₂: H)."""

    softmax = False
    feature_map = "cubic"  # z = vec(b x_qᵀ), see cubic_features

    def __init__(self, W1, w2):
        super().__init__()
        self.W1 = nn.Parameter(torch.as_tensor(W1).clone())
        self.w2 = nn.Parameter(torch.as_tensor(w2).clone())

    @property
    def in_dim(self) -> int:
        return math.isqrt(self.W1.shape[1])

    def features(self, X: torch.Tensor, scale: float | torch.Tensor = 1.0) -> torch.Tensor:
        return cubic_features(X, scale)

    def forward(self, X: torch.Tensor, scale: float | torch.Tensor = 1.0) -> torch.Tensor:
        return self.features(X, scale) @ self.W1.T @ self.w2

    def combined(self) -> torch.Tensor:
        return self.W1.T @ self.w2

    def value_weights(self) -> torch.Tensor:
        return self.w2

    def bilinear_map(self) -> np.ndarray:
        """Φ[f, i, 0] = δ_fi: m = W₁ᵀ w₂ = Σ_h W₁[h] w₂[h], with a_h = W₁[h] (n_a = D²) and b_h = w₂[h] (n_b = 1)."""
        return np.eye(self.W1.shape[1])[:, :, None]


#: The models of the package, as :func:`build_model` makes them (for type annotations).
Model = AttnM | AttnS | MLP


def build_model(model: str, weights: dict[str, np.ndarray], *, softmax: bool = False,
                dtype: torch.dtype = torch.float64, device: str | torch.device = "cpu") -> Model:
    """A model from ``init_weights``-style arrays (the layout of ``init.npz``, see :func:`weight_shapes`), on
    ``device`` in ``dtype``. Wrong keys or shapes raise one ValueError naming the expected ones."""
    weights = check_weights(model, weights)
    w = {k: torch.as_tensor(np.asarray(v), dtype=dtype) for k, v in weights.items()}
    net: Model
    if model == "attnM":
        net = AttnM(w["W_KQ"], w["W_V"], softmax=softmax)
    elif model == "attnS":
        net = AttnS(w["W_Q"], w["W_K"], w["W_V"], softmax=softmax)
    elif model == "mlp":
        net = MLP(w["W1"], w["w2"])
    else:
        raise ValueError(f"unknown model {model!r}; choose one of {MODELS}")
    return net.to(device)
