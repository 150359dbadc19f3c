"""The softmax-attention objective with its gradient written out: one pass over the tokens, no autograd graph.

For a sequence x̃_1 … x̃_n (the last the query x̃_q, label zeroed) and head h, with W_KQ[h] = ``model.key_query()[h]``
(ATTN_M: W_KQ[h]; ATTN_S: W_Q[h]ᵀ W_K[h]) and v_h the value row of the label:

    q_h = W_KQ[h]ᵀ x̃_q,   s_hm = q_h · x̃_m,   a_hm = softmax_m(s_hm),   u_hm = v_h · x̃_m
    ŷ = Σ_h ŷ_h,   ŷ_h = Σ_m a_hm u_hm,   L = mean of (y − ŷ)² over sequences (and prefixes under vary_len)

Every sum over the n keys is one of Z_h = Σ_m e_hm, T_h = Σ_m e_hm x̃_m, TU_h = Σ_m e_hm u_hm x̃_m with
e_hm = exp(s_hm − max_m s_hm), so one pass over the tokens gives the loss and the gradient:

    ŷ_h = v_h · T_h / Z_h
    ∂L/∂q_h = c Σ_m a_hm (u_hm − ŷ_h) x̃_m = (c/Z_h) (TU_h − ŷ_h T_h)       (∂ŷ/∂s_hm = a_hm (u_hm − ŷ_h))
    ∂L/∂v_h = Σ (c/Z_h) T_h,   ∂L/∂W_KQ[h] = Σ x̃_q ⊗ ∂L/∂q_h,   c = ∂L/∂ŷ = 2(ŷ − y)/(P · terms)

summed over sequences. The last step to the parameters (W_Q, W_K of ATTN_S) is autograd through ``key_query()``:
a product of (H, D+1, D+1) matrices, the only graph a step builds. Projecting the query rather than the keys makes a
score D+1 products whatever the rank R, and a value D+1 more.

Sequences are stored in blocks of ``BLOCK``, the sequence index innermost — X (blocks, D+1, n, BLOCK) — so every
operation vectorises across sequences. For sets large enough to repay it, the per-chunk function ``chunk_sums``
is compiled by ``torch.compile`` (CPU: one C++ loop nest per block and head that keeps the scores in registers;
CUDA: triton), falling back to eager execution when no compiler works. Data and arithmetic are in ``dtype``
(float32 by default); the loss, ∂L/∂v and the sum of ∂L/∂W_KQ over blocks accumulate in float64. Timings and the
float32-vs-float64 trajectories: ``benchmarks/README.md``.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import torch

from .. import data as data_mod
from ..normalization import lengths, prefix_queries
from .base import DEFAULT_CHUNK, Objective

BLOCK = 128
LOG2E = 1.0 / math.log(2.0)
# compile=None compiles for sets of at least this many sequence-terms (P × prefixes): below, an eager step takes a
# few ms and compiling (5–15 s, once per process and dtype) does not pay for itself
COMPILE_FROM = 4096

# Inductor stores a tensor read by several consumers once it has read more than a few inputs (and, on CPU, any reused
# exp). Raised thresholds and exp2 keep the scores and their exponentials in registers inside the reduction loop.
_INDUCTOR_OPTIONS = dict(realize_reads_threshold=64, realize_acc_reads_threshold=64, realize_opcount_threshold=64)


def chunk_sums(X, xq, Q, v, y, grad: bool):
    """Σ (ŷ − y)², ∂/∂q_h of it for every sequence, and its ∂/∂v, for a chunk of blocks (unweighted sums).

    X (K, D+1, N, B): the N context tokens; xq (K, D+1, B): the query (also a key); Q (K, H, D+1, B): q_h;
    v (H, D+1); y (K, B). Returns (float64 scalar, (K, H, D+1, B) or None, float64 (H, D+1) or None).
    Zero tokens with a zero target (the padding of the last block) contribute nothing.
    """
    d = X.shape[1]
    x = [X[:, None, b] for b in range(d)]                    # (K, 1, N, B): coordinate b of each context token
    x_q = [xq[:, None, b] for b in range(d)]                 # (K, 1, B)
    q = [Q[:, :, b] for b in range(d)]                       # (K, H, B)
    s = sum(q[b][:, :, None] * x[b] for b in range(d))       # (K, H, N, B)
    s_q = sum(q[b] * x_q[b] for b in range(d))               # (K, H, B): the query's score of itself
    s_max = torch.maximum(s.amax(2), s_q)
    e = torch.exp2((s - s_max[:, :, None]) * LOG2E)
    e_q = torch.exp2((s_q - s_max) * LOG2E)
    Z = e.sum(2) + e_q
    T = [(e * x[b]).sum(2) + e_q * x_q[b] for b in range(d)]
    y_h = sum(v[:, b, None] * T[b] for b in range(d)) / Z    # (K, H, B)
    r = y_h.sum(1) - y
    loss = (r.double() ** 2).sum()
    if not grad:
        return loss, None, None
    u = sum(v[:, b, None, None] * x[b] for b in range(d))
    u_q = sum(v[:, b, None] * x_q[b] for b in range(d))
    eu = e * u
    TU = [(eu * x[b]).sum(2) + e_q * u_q * x_q[b] for b in range(d)]
    g = 2.0 * r[:, None] / Z
    dq = torch.stack([g * (TU[b] - y_h * T[b]) for b in range(d)], 2)
    dv = torch.stack([(g * T[b]).double().sum((0, 2)) for b in range(d)], 1)
    return loss, dq, dv


@functools.cache
def _compiled():
    return torch.compile(chunk_sums, options=_INDUCTOR_OPTIONS)


_compile_failed: set[str] = set()  # device types on which torch.compile raised once: eager from then on


class Softmax(Objective):
    """Mean squared error of a softmax attention model (``AttnM``/``AttnS`` with ``softmax=True``) and its gradient.

    Same interface as :class:`~linattn.objectives.Autograd`: ``value_and_grad(model)`` returns the loss and accumulates the
    gradient into the parameters' ``.grad``; ``value(model)`` returns the loss. ``normalize`` is accepted and, as in
    the model, ignored (softmax has no scale). ``dtype`` is the arithmetic's (float64 accumulation either way).
    ``compile``: True compiles ``chunk_sums``, False runs it eagerly, None (default) compiles for sets of at
    least ``COMPILE_FROM`` sequence-terms.
    """

    name = "softmax"
    preferred_device = "accelerator"

    def __init__(self, seqs: data_mod.Sequences, *, vary_len=False, normalize="sum", chunk=DEFAULT_CHUNK,
                 dtype=torch.float32, device="cpu", compile: bool | None = None):
        P, n, d = seqs.X.shape
        K = max(2, -(-P // BLOCK))
        self.P, self.vary_len, self.normalize = P, vary_len, normalize
        self.terms = list(lengths(n, vary_len))
        self.dtype, self.device = dtype, torch.device(device)
        self.compile = P * len(self.terms) >= COMPILE_FROM if compile is None else compile
        # chunks of about `chunk` sequences and never a single block (torch.compile specialises a size-1 dimension)
        n_chunks = max(1, K // max(2, chunk // BLOCK))
        edges = np.linspace(0, K, n_chunks + 1).round().astype(int)
        self.chunks = [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]
        tokens = torch.zeros(K * BLOCK, n, d, dtype=dtype)
        tokens[:P] = torch.as_tensor(np.asarray(seqs.X), dtype=dtype)
        y = torch.zeros(K * BLOCK, dtype=dtype)
        y[:P] = torch.as_tensor(np.asarray(seqs.y), dtype=dtype)
        # term t (sequence length m): context tokens 0 … m−2, query token m−1 with its label zeroed and kept as target
        q_tok, targets = prefix_queries(tokens, y, self.terms)   # (K·B, terms, d), (K·B, terms)
        blocked = lambda t: t.reshape(K, BLOCK, *t.shape[1:]).movedim(1, -1)  # sequence index last
        self.X = blocked(tokens).transpose(1, 2).contiguous().to(self.device)          # (K, d, n, B)
        self.xq = blocked(q_tok).permute(1, 0, 2, 3).contiguous().to(self.device)    # (terms, K, d, B)
        self.y = blocked(targets).transpose(0, 1).contiguous().to(self.device)       # (terms, K, B)

    @staticmethod
    def refuses(cfg) -> str | None:
        """Why this objective cannot train ``cfg`` (None: it can)."""
        if not cfg.softmax:
            return ("engine 'softmax' covers softmax attention only (set softmax=True, or use engine 'exact' or "
                    "'autograd')")
        return None

    def _check(self, model):
        if not (getattr(model, "softmax", False) and hasattr(model, "key_query")):
            raise ValueError(f"the softmax engine covers softmax attention (ATTN_M/ATTN_S with softmax=True) only; "
                             f"got {type(model).__name__} with softmax={getattr(model, 'softmax', None)}: "
                             f"use engine 'exact' or 'autograd'")

    def _sums(self, *args):
        kind = self.device.type
        if self.compile and kind not in _compile_failed:
            X, xq, Q, v, y, _ = args
            # one graph for every chunk, prefix length and head count
            for t, dims in ((X, (0, 2)), (xq, (0,)), (Q, (0, 1)), (v, (0,)), (y, (0,))):
                for dim in dims:
                    torch._dynamo.maybe_mark_dynamic(t, dim)
            try:
                return _compiled()(*args)
            except Exception as err:  # no C++ compiler, no triton, …: same result, eagerly
                _compile_failed.add(kind)
                warnings.warn(f"torch.compile failed on {kind} ({type(err).__name__}: {str(err)[:200]}); the softmax "
                              f"engine runs eagerly (same result, slower)", RuntimeWarning, stacklevel=3)
        return chunk_sums(*args)

    def _run(self, model, grad: bool) -> float:
        self._check(model)
        with torch.set_grad_enabled(grad):
            W = model.key_query()                                  # (H, d, d); for ATTN_S a product, kept for backward
        H, d = W.shape[0], W.shape[1]
        Wt = W.detach().transpose(1, 2).reshape(H * d, d).to(self.dtype)   # row h·d + b: column b of W_KQ[h]
        v = model.v.detach().to(self.dtype)
        f64 = dict(dtype=torch.float64, device=self.device)
        loss, dWt, dv = torch.zeros((), **f64), torch.zeros(H * d, d, **f64), torch.zeros(H, d, **f64)
        with torch.no_grad():
            for blocks in self.chunks:
                for t, m in enumerate(self.terms):
                    xq = self.xq[t, blocks]
                    Q = torch.matmul(Wt, xq).view(xq.shape[0], H, d, BLOCK)
                    part, dq, dv_part = self._sums(self.X[blocks, :, :m - 1], xq, Q, v, self.y[t, blocks], grad)
                    loss += part
                    if grad:
                        dv += dv_part
                        dWt += torch.matmul(dq.view(-1, H * d, BLOCK), xq.transpose(1, 2)).double().sum(0)
        weight = 1.0 / (self.P * len(self.terms))
        if grad:
            dW = (dWt * weight).view(H, d, d).transpose(1, 2)      # ∂L/∂W_KQ[h][a, b] = Σ x̃_q,a ∂L/∂q_h,b
            torch.autograd.backward([W, model.v], [dW.to(W.dtype), (dv * weight).to(model.v.dtype)])
        return loss.item() * weight

    def value_and_grad(self, model) -> float:
        """The loss; its gradient is accumulated into the parameters' ``.grad``."""
        return self._run(model, grad=True)

    def value(self, model) -> float:
        return self._run(model, grad=False)
