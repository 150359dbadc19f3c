"""The models' weights as arrays, without torch: which models there are, the shapes of their weights (the layout of
``init.npz``), their initial draws per initialisation era, the checks of both, ATTN_M's weights as the MLP's, and
what is read off a model's weights without a forward pass (:class:`ModelWeights`: the in-context matrices, the
conserved quantities, the MLP's two factors).

``RunConfig`` validation and the theory read these without importing torch; ``models.py`` builds the torch modules
from such arrays (and gives these names too, ``linattn.models.init_weights`` and the rest). Its modules are
:class:`ModelWeights` themselves, their parameters being the weights: one formula for each reading, whether of a
torch model or of a stored run's arrays (:func:`model_weights`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .errors import check_choice, check_int, check_positive, named

MODELS = ("attnM", "attnS", "mlp")
# The reference's three initialisation eras (its code at Dec 2024, Jan 2025 and Dec 2025).
INIT_SCHEMES = ("dec2024", "jan2025", "dec2025")


def attn_s_scales(init_scheme: str, init: float, *, head_num: int, in_dim: int, rank: int) -> tuple[float, float]:
    """(key/query std, value scale) of ATTN_S at initialisation, per era (E = D + 1).

    dec2024: (init, init) — the value weight starts at exactly init; jan2025: (init/√(R·E), init);
    dec2025: (init/√(H·R·E), init/(√H·E)).
    """
    E = in_dim + 1
    return {"dec2024": (init, init), "jan2025": (init / np.sqrt(rank * E), init),
            "dec2025": (init / np.sqrt(head_num * rank * E), init / (np.sqrt(head_num) * E))}[init_scheme]


def check_weight_settings(*, model: str, head_num: int, in_dim: int, rank: int, init: float, init_scheme: str) -> None:
    """The rules for the settings that shape the initial weights (shared by :func:`init_weights` and
    ``RunConfig.validate``): one ConfigError (a ValueError) naming the first invalid one."""
    check_choice("model", model, MODELS)
    check_int("head_num", head_num)
    check_int("in_dim", in_dim)
    check_int("rank", rank, high=in_dim + 1, what=f"an integer between 1 and {named('in_dim')} = {in_dim}")
    check_positive("init", init)
    check_choice("init_scheme", init_scheme, INIT_SCHEMES)


def init_weights(model: str, *, head_num: int, in_dim: int, rank: int = 1, init: float = 0.01,
                 init_scheme: str = "dec2025", rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Initial weights with the reference's distributions, as full arrays (the layout of ``init.npz``).

    These are the distributions of the three eras with linattn's own random streams (``--draws streams``); the
    reference's exact numbers come from ``linattn.reference_draws``. With E = D + 1:

    * ATTN_M and MLP (every era): every entry N(0, init²).
    * ATTN_S ``dec2024``: W_Q, W_K ~ N(0, init²) with nothing zeroed; W_V zero but W_V[h][D, D] = init.
    * ATTN_S ``jan2025``: W_Q, W_K ~ N(0, init²/(R·E)), W_V ~ N(0, init²).
    * ATTN_S ``dec2025``: W_Q, W_K ~ N(0, init²/(H·R·E)), W_V ~ N(0, init²/(H·E²)).

    Then (except dec2024's ATTN_S keys) the blocks that the theory keeps at zero are zeroed; they stay trainable:
    the first D entries of each v_h = W_V[h][D]; ATTN_M's query-x/key-label block W_KQ[h][:D, D]; ATTN_S's key
    label column W_K[h][:, D].

    The arguments are checked as :meth:`~linattn.config.RunConfig.validate` checks them (the same rules): ``model`` and
    ``init_scheme`` among the choices, ``head_num`` and ``in_dim`` positive integers, ``rank`` an integer between 1
    and ``in_dim``, ``init`` positive and finite; otherwise one ValueError naming the argument.
    """
    check_weight_settings(model=model, head_num=head_num, in_dim=in_dim, rank=rank, init=init, init_scheme=init_scheme)
    H, D, R = head_num, in_dim, rank
    if model == "mlp":
        return {"W1": rng.normal(0.0, init, (H, D * D)), "w2": rng.normal(0.0, init, H)}
    out = {}
    if model == "attnM":
        out["W_KQ"] = rng.normal(0.0, init, (H, D + 1, D + 1))
        out["W_KQ"][:, :D, D] = 0.0
        v_std = init
    elif model == "attnS":
        kq_std, v_std = attn_s_scales(init_scheme, init, head_num=H, in_dim=D, rank=R)
        out["W_Q"] = rng.normal(0.0, kq_std, (H, R, D + 1))
        out["W_K"] = rng.normal(0.0, kq_std, (H, R, D + 1))
        if init_scheme == "dec2024":
            out["W_V"] = np.zeros((H, D + 1, D + 1))
            out["W_V"][:, D, D] = v_std
            return out
        out["W_K"][:, :, D] = 0.0
    else:
        raise ValueError(f"unknown model {model!r}; choose one of {MODELS}")
    out["W_V"] = rng.normal(0.0, v_std, (H, D + 1, D + 1))
    out["W_V"][:, D, :D] = 0.0
    return out


def attn_m_to_mlp(W_KQ, v_label):
    """(W₁, w₂) of the MLP that computes what ATTN_M computes while its vector blocks W_KQ[h][:D, D] and v_h[:D] are
    zero (paper Section 4.1): ŷ = Σ_h v_h[D] x_qᵀ U_h b with U_h = W_KQ[h][:D, :D], so W₁[h] = vec(U_hᵀ) and
    w₂[h] = v_h[D] (``v_label``). Works on numpy arrays and torch tensors alike."""
    D = W_KQ.shape[1] - 1
    U = W_KQ[:, :D, :D]
    return U.swapaxes(1, 2).reshape(U.shape[0], -1), v_label


def weight_shapes(model: str, *, head_num: int, in_dim: int, rank: int = 1) -> dict[str, tuple[int, ...]]:
    """The arrays of ``init.npz`` for ``model`` and their shapes, with E = D + 1.

    ATTN_M: W_KQ (H, E, E), W_V (H, E, E). ATTN_S: W_Q (H, R, E), W_K (H, R, E), W_V (H, E, E).
    MLP: W1 (H, D²), w2 (H,). Only the last row of each W_V[h] (v_h) enters the prediction.
    """
    H, E, R = head_num, in_dim + 1, rank
    shapes: dict[str, dict[str, tuple[int, ...]]] = {"attnM": {"W_KQ": (H, E, E), "W_V": (H, E, E)},
              "attnS": {"W_Q": (H, R, E), "W_K": (H, R, E), "W_V": (H, E, E)},
              "mlp": {"W1": (H, in_dim * in_dim), "w2": (H,)}}
    if model not in shapes:
        raise ValueError(f"unknown model {model!r}; choose one of {MODELS}")
    return shapes[model]


def _sizes_of(model: str, weights) -> dict:
    """H, D and R read off the first array of ``weights`` (empty if it is missing or malformed)."""
    first = {"attnM": "W_KQ", "attnS": "W_Q", "mlp": "W1"}.get(model)
    shape: tuple[int, ...] = np.shape(weights[first]) if first in weights else ()
    if model == "attnM" and len(shape) == 3:
        return dict(head_num=shape[0], in_dim=shape[2] - 1)
    if model == "attnS" and len(shape) == 3:
        return dict(head_num=shape[0], rank=shape[1], in_dim=shape[2] - 1)
    if model == "mlp" and len(shape) == 2 and round(np.sqrt(shape[1])) ** 2 == shape[1]:
        return dict(head_num=shape[0], in_dim=round(np.sqrt(shape[1])))
    return {}


def check_weights(model: str, weights: Mapping[str, ArrayLike], *, head_num: int | None = None,
                  in_dim: int | None = None, rank: int | None = None) -> dict[str, np.ndarray]:
    """``weights`` as numpy arrays if they have exactly the keys and shapes of :func:`weight_shapes` and finite
    values; otherwise one ValueError naming the expected keys and shapes. Sizes not given are read off the arrays."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose one of {MODELS}")
    if not isinstance(weights, dict):
        raise ValueError(f"weights must be a dict of arrays (the layout of init.npz), got {type(weights).__name__}")
    w = {k: np.asarray(v) for k, v in weights.items()}
    sizes = _sizes_of(model, w)
    sizes.update({k: v for k, v in dict(head_num=head_num, in_dim=in_dim, rank=rank).items() if v is not None})
    names = list(weight_shapes(model, head_num=1, in_dim=1))
    problems = []
    if missing := [k for k in names if k not in w]:
        problems.append(f"missing {', '.join(missing)}")
    if extra := [k for k in w if k not in names]:
        problems.append(f"unexpected {', '.join(extra)}")
    if "head_num" in sizes and "in_dim" in sizes:
        want = weight_shapes(model, **sizes)
        expected = ", ".join(f"{k} {v}" for k, v in want.items())
        if wrong := [f"{k} {w[k].shape}" for k in want if k in w and w[k].shape != want[k]]:
            problems.append(f"wrong shape {', '.join(wrong)}")
    else:  # the first array is missing or malformed: give the shapes in symbols
        expected = {"attnM": "W_KQ (H, D+1, D+1), W_V (H, D+1, D+1)",
                    "attnS": "W_Q (H, R, D+1), W_K (H, R, D+1), W_V (H, D+1, D+1)",
                    "mlp": "W1 (H, D*D), w2 (H,)"}[model]
        problems = problems or [f"the sizes cannot be read off {names[0]} {w[names[0]].shape}"]
    if not problems:
        if bad := [k for k, v in w.items() if not (np.issubdtype(v.dtype, np.number) and np.isfinite(v).all())]:
            problems.append(f"non-finite or non-numeric values in {', '.join(bad)}")
    if problems:
        got = ", ".join(f"{k} {v.shape}" for k, v in w.items()) or "nothing"
        raise ValueError(f"weights for {model} must be exactly {expected} (the layout of init.npz); got {got}: "
                         f"{'; '.join(problems)}")
    return w


def mlp_from_attn_m(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The MLP weights (arrays) that compute what ATTN_M's ``weights`` compute while the vector blocks are zero
    (paper Section 4.1)."""
    W1, w2 = attn_m_to_mlp(weights["W_KQ"], weights["W_V"][:, -1, -1].copy())
    return {"W1": W1, "w2": w2}


# --------------------------------------------------------------------------------------------------------------
# What is read off a model's weights, on numpy arrays and torch tensors alike
# --------------------------------------------------------------------------------------------------------------

def _namespace(a) -> Any:
    """The array library of ``a``: torch for a torch tensor (imported already, since the tensor exists), else numpy."""
    return sys.modules["torch"] if type(a).__module__.startswith("torch") else np


def _batched_product(a, b):
    """a[h] @ b[h] for each h: torch's ``bmm`` for tensors (the kernel ``@`` dispatches to, without its few
    microseconds of reshaping, which a training step would pay), ``@`` for numpy arrays."""
    return a.bmm(b) if hasattr(a, "bmm") else a @ b


def _balances(**blocks) -> dict[str, Any]:
    """Per head, ‖a_h‖² − ‖b_h‖² for each pair of consecutive factor blocks a, b (keys "a_minus_b"), and "scale", the
    largest ‖·‖² of the head's blocks (to make a drift relative). ŷ is multilinear in a head's factors, so
    a_h → α a_h, b_h → b_h/α leaves it unchanged and gradient flow keeps these differences constant (paper,
    Section 3: balanced heads stay balanced). Whole blocks, zero blocks included, for which the law is exact."""
    sq = {name: (t ** 2).reshape(t.shape[0], -1).sum(axis=1) for name, t in blocks.items()}
    names = list(sq)
    out = {f"{a}_minus_{b}": sq[a] - sq[b] for a, b in zip(names, names[1:])}
    xp = _namespace(sq[names[0]])
    out["scale"] = xp.amax(xp.stack(list(sq.values())), axis=0)
    return out


class ModelWeights:
    """A model as its weights — numpy arrays or torch tensors alike — and what is read off them without a forward
    pass: ``in_context_heads()`` (each head's in-context matrix A_h, ŷ = bᵀ (Σ_h A_h) x_q + terms even in the
    labels), ``conserved_quantities()`` (the gradient-flow invariants of each head) and, for ATTN_M and the MLP,
    ``mlp_weights()`` (the two factors W₁, w₂). Each reading returns arrays of the weights' kind.

    The torch models of ``models.py`` are these, their parameters being the weights (a reading of a model then
    records an autograd graph, as any product of its parameters); :func:`model_weights` makes one of the arrays of
    a run (the layout of ``init.npz``) without importing torch. ``analysis.diagnostics`` reads either."""


class AttentionWeights(ModelWeights):
    """The readings that ATTN_M and ATTN_S share: through each head's merged key-query matrix ``key_query()`` and
    v_h (``v``, (H, D+1): the last row of each head's value matrix)."""

    v: Any

    def key_query(self):
        """(H, D+1, D+1): each head's merged key-query matrix W_KQ[h] (ATTN_S: W_Q[h]ᵀ W_K[h])."""
        raise NotImplementedError

    def in_context_heads(self):
        """(H, D, D): head h's in-context matrix A_h, the coefficient of the part of ŷ linear in the labels.

        With W = W_KQ[h] (ATTN_S: W_Q[h]ᵀ W_K[h]), x̃_q = (x_q, 0) and S split into S_xx = scale Σ_m x_m x_mᵀ (all n
        tokens), b = S[:D, D] = scale Σ_{n≤N} y_n x_n and S_yy = scale Σ_{n≤N} y_n², head h outputs (paper Eq. 2–4)

            x̃_qᵀ W S v_h = bᵀ A_h x_q + x_qᵀ W[:D, :D] S_xx v_h[:D] + (x_qᵀ W[:D, D]) S_yy v_h[D],
            A_h = v_h[D] W[:D, :D]ᵀ + v_h[:D] W[:D, D]ᵀ.

        The last two terms are even in the labels (y → −y leaves them unchanged) and carry no in-context regression.
        For ATTN_S the first term of A_h is the paper's Σ_r v_h k_{h,r} q_{h,r}ᵀ (k = W_K[h][r, :D],
        q = W_Q[h][r, :D]); the second needs the key's label column (W[:D, D] = W_Q[h][:, :D]ᵀ W_K[h][:, D]) and
        v_h[:D], both zero in the theory. The jan2025 and dec2025 initialisations zero them (and for ATTN_M they stay
        zero in the population); dec2024's ATTN_S keeps W_K's label column, and a head can then learn a direction
        through v_h[:D] and W_K[h][:, D] instead of its key. In the reference's normalisation (scale 1) b = N β.
        """
        W = self.key_query()
        D = W.shape[-1] - 1
        return self.v[:, D, None, None] * W[:, :D, :D].swapaxes(1, 2) + self.v[:, :D, None] * W[:, None, :D, D]


class AttnMWeights(AttentionWeights):
    """ATTN_M's weights: each head's merged key-query matrix W_KQ (H, D+1, D+1) and v (H, D+1)."""

    W_KQ: Any

    def __init__(self, W_KQ, v):
        self.W_KQ, self.v = W_KQ, v

    def key_query(self):
        return self.W_KQ

    def conserved_quantities(self) -> dict[str, Any]:
        """Per head ‖v_h‖² − ‖W_KQ[h]‖² ("v_minus_k") and "scale" (see :func:`_balances`)."""
        return _balances(v=self.v, k=self.W_KQ)

    def mlp_weights(self) -> tuple[Any, Any]:
        """(W₁ (H, D²), w₂ (H,)): the MLP with the same in-context matrix while the vector blocks are zero."""
        return attn_m_to_mlp(self.W_KQ, self.v[:, -1])


class AttnSWeights(AttentionWeights):
    """ATTN_S's weights: each head's query and key W_Q, W_K (H, R, D+1) and v (H, D+1)."""

    W_Q: Any
    W_K: Any

    def __init__(self, W_Q, W_K, v):
        self.W_Q, self.W_K, self.v = W_Q, W_K, v

    def key_query(self):
        return _batched_product(self.W_Q.swapaxes(1, 2), self.W_K)

    def conserved_quantities(self) -> dict[str, Any]:
        """Per head ‖v_h‖² − ‖W_K[h]‖² ("v_minus_k"), ‖W_K[h]‖² − ‖W_Q[h]‖² ("k_minus_q") and "scale"
        (see :func:`_balances`)."""
        return _balances(v=self.v, k=self.W_K, q=self.W_Q)


class MLPWeights(ModelWeights):
    """The MLP's weights on the cubic feature: W1 (H, D²) and w2 (H,), ŷ = w₂ᵀ W₁ z."""

    W1: Any
    w2: Any

    def __init__(self, W1, w2):
        self.W1, self.w2 = W1, w2

    def in_context_heads(self):
        """(H, D, D): A_h = w₂[h] · reshape(W₁[h], (D, D)), so ŷ = bᵀ (Σ_h A_h) x_q exactly (z[i·D+j] = b_i x_q,j)."""
        D = math.isqrt(self.W1.shape[1])
        return self.w2[:, None, None] * self.W1.reshape(-1, D, D)

    def conserved_quantities(self) -> dict[str, Any]:
        """Per head w₂[h]² − ‖W₁[h]‖² ("v_minus_k") and "scale" (see :func:`_balances`)."""
        return _balances(v=self.w2, k=self.W1)

    def mlp_weights(self) -> tuple[Any, Any]:
        return self.W1, self.w2


def model_weights(model: str, weights: Mapping[str, ArrayLike]) -> ModelWeights:
    """``model`` ("attnM", "attnS" or "mlp") as its ``weights`` in the layout of ``init.npz`` (checked as
    :func:`check_weights` checks them; v_h is the last row of W_V[h]): what the diagnostics read off a run's stored
    weights, without building its torch model."""
    w = check_weights(model, dict(weights))
    if model == "attnM":
        return AttnMWeights(w["W_KQ"], w["W_V"][:, -1])
    if model == "attnS":
        return AttnSWeights(w["W_Q"], w["W_K"], w["W_V"][:, -1])
    return MLPWeights(w["W1"], w["w2"])
