"""The softmax-attention objective with its gradient written out: one pass over the tokens, no autograd graph.

For a sequence x̃_1 … x̃_n (the last the query x̃_q, label zeroed) and head h, with W_KQ[h] = ``model.key_query()[h]``
(ATTN_M: W_KQ[h]; ATTN_S: W_Q[h]ᵀ W_K[h]) and v_h the value row of the label:

    (1)  q_h = W_KQ[h]ᵀ x̃_q,   s_hm = q_h · x̃_m,   a_hm = softmax_m(s_hm),   u_hm = v_h · x̃_m
    (2)  ŷ = Σ_h ŷ_h,   ŷ_h = Σ_m a_hm u_hm,   L = mean of (y − ŷ)² over sequences (and prefixes under vary_len)

Every sum over the n keys is one of Z_h = Σ_m e_hm, T_h = Σ_m e_hm x̃_m, TU_h = Σ_m e_hm u_hm x̃_m with

    (3)  e_hm = 2^(z_hm),   z_hm = log₂e · (s_hm − c_h),   c_h = s_hq (the query's own score, by default)

so one pass over the tokens gives the loss and the gradient (any shift c_h cancels from every ratio below):

    (4)  ŷ_h = v_h · T_h / Z_h
    (5)  ∂L/∂q_h = c Σ_m a_hm (u_hm − ŷ_h) x̃_m = (c/Z_h) (TU_h − ŷ_h T_h)       (∂ŷ/∂s_hm = a_hm (u_hm − ŷ_h))
    (6)  ∂L/∂v_h = Σ (c/Z_h) T_h,   ∂L/∂W_KQ[h] = Σ x̃_q ⊗ ∂L/∂q_h,   c = ∂L/∂ŷ = 2(ŷ − y)/(P · terms)

summed over sequences. The last step to the parameters (W_Q, W_K of ATTN_S) is autograd through ``key_query()``:
a product of (H, D+1, D+1) matrices, the only graph a step builds. Projecting the query rather than the keys makes a
score D+1 products whatever the rank R, and a value D+1 more.

The shift (3). Any c_h gives the same ratios; it only has to keep 2^z in range. The query is one of the keys, so
with c_h = s_hq the query's term is e_hq = 1 and Z_h ≥ 1 (nothing underflows), and the pass also takes the largest
z_hm over the keys: while it stays ≤ ``SHIFT_LIMIT`` (2^64 in float32: the sums keep ~2^60 of headroom) the result
is exact; a chunk where some key outscores the query by more (one key takes almost all the attention, e.g. scores
in the hundreds) is computed again with c_h = max_m s_hm, the largest of the very scores it then shifts (so the top
key's z is exactly 0, however large the scores). This saves the separate max pass of the usual two-pass softmax.

Layout. Sequences are stored in blocks of ``BLOCK`` = 32, the sequence index innermost — the context tokens
X (blocks, n−1, D+1, BLOCK), the queries (terms, blocks, D+1, BLOCK) — so every operation vectorises across
sequences, a token's D+1 coordinates lie side by side (the kernel reads them at fixed offsets), and a block (20 KB
at D = 4, n = 32) stays in the L1 cache while all heads read it.

Kernels (``Softmax.kernel``). On the CPU, ``native``: ``softmax_kernel.c``, compiled on first use in each process
by the system's C compiler for this CPU and the dimension D+1 (under a second; ``$CC`` picks the compiler) and
called through ctypes, once per prefix length over the whole set. One SIMD instruction handles 16 sequences
(float32; 8 in float64) where the CPU has AVX-512, else 8 (4), 2^z is a polynomial times 2^n (AVX-512's vscalef,
else exponent bits), and for each head and group of sequences the keys' weights 2^z are computed into a small buffer,
then their terms added to the sums Z, T, TU (3)-(5) in registers, while the block after next is prefetched;
a group of sequences where some key outscores the query by more than ``SHIFT_LIMIT`` is computed again in the
kernel. On CUDA, ``compiled``: ``chunk_sums`` through ``torch.compile`` (triton) chunk by chunk, for sets of at
least ``COMPILE_FROM`` sequence-terms. ``eager``: ``chunk_sums`` in plain torch (``compile=False``, the reference the
tests hold the others to, and the fallback, with a warning, where no compiler works).
Data and arithmetic are in ``dtype`` (float32 by default); the loss, ∂L/∂v and ∂L/∂W_KQ accumulate in float64.
Timings, the memory floor and the float32-vs-float64 trajectories: ``benchmarks/README.md``.
"""

from __future__ import annotations

import ctypes
import functools
import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .. import data as data_mod
from ..normalization import lengths, prefix_queries
from . import native
from .base import DEFAULT_CHUNK, Objective
from .declarations import SoftmaxEngine
from .native import KnownFallback, fallback_reason, huge_page_copy

if TYPE_CHECKING:
    from ..models import Model

BLOCK = 32
LOG2E = 1.0 / math.log(2.0)
# on CUDA compile=None compiles for sets of at least this many sequence-terms (P × prefixes): below, an eager step
# takes a few ms and torch.compile (once per process and dtype; cached on disk for later processes) does not pay
COMPILE_FROM = 4096
KERNEL_SOURCE = Path(__file__).with_name("softmax_kernel.c")
# largest z = log2(e)·(s − c) of a key allowed before a chunk is computed again with c = its largest score (3)
SHIFT_LIMIT = {torch.float32: 64.0, torch.float64: 512.0}
# on a GPU a chunk holds at least this many sequences: chunks of 4096 leave most of the card idle, and a step of
# Figure 5's ATTN_S then goes to launching 20 chunks' kernels and waiting on each (about 90 MB of sums at H = 5)
GPU_CHUNK = 2 ** 17

# Inductor stores a pointwise value read by several consumers once it has more than a few ops or reads; raised
# thresholds keep the scores and 2^z in registers inside the reduction over keys. unroll_reductions_threshold=1
# keeps the 5-term reductions that give q_h and the query's own score buffers of their own, computed once per
# sequence and head, instead of inlining them into the loop over keys.
_INDUCTOR_OPTIONS: dict[str, Any] = {"realize_reads_threshold": 64, "realize_acc_reads_threshold": 64,
                     "realize_opcount_threshold": 400, "unroll_reductions_threshold": 1}


def _tree_sum(terms):
    """Σ terms added pairwise: the same sum as left to right, half as deep a chain of dependent additions."""
    while len(terms) > 1:
        terms = [a + b for a, b in zip(terms[::2], terms[1::2])] + terms[len(terms) - len(terms) % 2:]
    return terms[0]


def _dot(a, b, start=None):
    """start + Σ_i a_i b_i, left to right (FMAs once contracted)."""
    acc = a[0] * b[0] if start is None else start + a[0] * b[0]
    for x, y in zip(a[1:], b[1:]):
        acc = acc + x * y
    return acc


def chunk_sums(X: torch.Tensor, xq: torch.Tensor, W: torch.Tensor, v: torch.Tensor, y: torch.Tensor,
               largest: bool,
               grad: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor]:
    """Loss, ∂L/∂W_KQ and ∂L/∂v summed over a chunk of blocks (unweighted), and the largest Z_h.

    X (K, N, D+1, B): the N context tokens; xq (K, D+1, B): the query (also a key); W (H, D+1, D+1): W[h, b, a] =
    log₂e · W_KQ[h][a, b]; v (H, D+1); y (K, B). The shift (3) is c = s_q, or with ``largest`` (a chunk computed
    again) the largest score over the keys and the query, taken from the very scores it shifts: a largest score
    summed in another order can differ from them by its rounding, which at scores of 10³⁰ is far more than 2^z
    spans (the top key's weight then overflows or vanishes). Returns float64 Σ (ŷ − y)², float64
    (H, D+1, D+1) [h, a, b] or None, float64 (H, D+1) or None, and max Z_h (Z_h ≥ 1; above 2^``SHIFT_LIMIT`` a
    key outscored the shift by more than the limit, and the sums may have lost range). Zero tokens with a zero target
    (the padding of the last block) contribute nothing.
    """
    d = X.shape[2]
    x = [X[:, None, :, b] for b in range(d)]                         # (K, 1, N, B): coordinate b of each context token
    x_q = [xq[:, None, b] for b in range(d)]                         # (K, 1, B)
    Q = (W[None, :, :, :, None] * xq[:, None, None]).sum(3)          # (K, H, D+1, B): q_h (1), log₂ units
    q = [Q[:, :, b] for b in range(d)]
    s_q = (Q * xq[:, None]).sum(2)                                   # the query's score of itself (a buffer)
    terms = [qb[:, :, None] * xb for qb, xb in zip(q, x)]           # (K, H, N, B) each
    if largest:
        s = _tree_sum(terms)                                         # the scores (log₂ units)
        shift = torch.cat([s, s_q[:, :, None]], 2).amax(2)
        z = s - shift[:, :, None]                                    # 0 at the largest score, exactly
    else:
        shift = s_q
        z = _tree_sum(terms + [-shift[:, :, None]])                  # (K, H, N, B): z (3)
    e = torch.exp2(z)
    e_q = torch.exp2(s_q - shift)                                    # 1 unless the shift is a key's score
    Z = e.sum(2) + e_q
    T = [(e * x[b]).sum(2) + e_q * x_q[b] for b in range(d)]         # (K, H, B) each
    y_h = _dot([v[:, b, None] for b in range(d)], T) / Z             # (4)
    r = y_h.sum(1) - y
    loss = (r.double() ** 2).sum()
    if not grad:
        return loss, None, None, Z.amax()
    u = _dot([v[:, b, None, None] for b in range(d)], x)             # (K, H, N, B)
    u_q = _dot([v[:, b, None] for b in range(d)], x_q)
    eu = e * u
    TU = [(eu * x[b]).sum(2) + e_q * u_q * x_q[b] for b in range(d)]
    g = 2.0 * r[:, None] / Z
    dq = torch.stack([g * (TU[b] - y_h * T[b]) for b in range(d)], 2)              # (K, H, D+1, B): (5)
    dW = (xq[:, None, :, None].double() * dq[:, :, None].double()).sum((0, 4))    # (H, D+1, D+1): (6)
    dv = torch.stack([(g * T[b]).double().sum((0, 2)) for b in range(d)], 1)       # (6)
    return loss, dW, dv, Z.amax()


@functools.cache
def _compiled():
    return torch.compile(chunk_sums, options=_INDUCTOR_OPTIONS)


_P = ctypes.c_void_p


@functools.cache
def _native(dim: int, double: bool):
    """``softmax_sums`` of ``softmax_kernel.c`` for D+1 = ``dim`` in float64 (``double``) or float32, compiled for
    this CPU and loaded (``native.load``). Raises where no C compiler works."""
    fn = native.load(KERNEL_SOURCE.name, (f"DIM={dim}", *(["USE_DOUBLE"] * double))).softmax_sums
    real = ctypes.c_double if double else ctypes.c_float
    fn.argtypes = [_P, ctypes.c_long, ctypes.c_long, ctypes.c_int, _P, _P, _P, _P, ctypes.c_int, real, ctypes.c_int,
                   _P, _P, _P]
    fn.restype = ctypes.c_int
    return fn


_compile_failed: set[str] = set()  # device types whose compiler failed once: eager from then on


class Softmax(SoftmaxEngine, Objective):
    """Mean squared error of a softmax attention model (``AttnM``/``AttnS`` with ``softmax=True``) and its gradient.

    Same interface as :class:`~linattn.objectives.Autograd`: ``value_and_grad(model)`` returns the loss and accumulates
    the gradient into the parameters' ``.grad``; ``value(model)`` returns the loss. ``normalize`` is accepted and, as in
    the model, ignored (softmax has no scale). ``dtype`` is the arithmetic's (float64 accumulation either way).
    ``compile``: False runs ``chunk_sums`` eagerly; True runs the native kernel on the CPU and compiles
    ``chunk_sums`` on CUDA; None (default) is True, on CUDA only for sets of at least ``COMPILE_FROM`` sequence-terms.
    ``kernel`` says which runs (``native``, ``compiled`` or ``eager``). ``chunk``: sequences per call of
    ``chunk_sums`` (bounds the memory of its intermediate sums, about 0.7 KB a sequence at H = 5); on a GPU at least
    ``GPU_CHUNK``. The native kernel needs no chunks: it keeps only a few KB of sums at a time.
    """

    def __init__(self, seqs: data_mod.Sequences, *, vary_len=False, normalize="sum", chunk=DEFAULT_CHUNK,
                 dtype=torch.float32, device="cpu", compile: bool | None = None):
        P, n, d = seqs.X.shape
        K = max(2, -(-P // BLOCK))
        self.P, self.vary_len, self.normalize = P, vary_len, normalize
        self.terms = list(lengths(n, vary_len))
        self.dtype, self.device = dtype, torch.device(device)
        on_cpu = self.device.type == "cpu"
        if compile is None:
            compile = on_cpu or P * len(self.terms) >= COMPILE_FROM
        native = on_cpu and dtype in (torch.float32, torch.float64)
        self.kernel = ("native" if native else "compiled") if compile else "eager"
        if self.device.type == "cuda":
            chunk = max(chunk, GPU_CHUNK)
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
        # the last token is never a context token (it is the query of the whole sequence)
        X = blocked(tokens[:, :n - 1])                                                   # (K, n−1, d, B)
        self.X = huge_page_copy(X) if on_cpu else X.contiguous().to(self.device)  # the kernel streams it each step
        self.xq = blocked(q_tok).permute(1, 0, 2, 3).contiguous().to(self.device)        # (terms, K, d, B)
        self.y = blocked(targets).transpose(0, 1).contiguous().to(self.device)           # (terms, K, B)

    @property
    def step_bytes(self) -> int:
        """Bytes of data a step reads: every term's context tokens, queries and targets (the memory floor)."""
        item = self.X.element_size()
        context = sum(self.X[:, :m - 1].numel() for m in self.terms)
        return item * (context + self.xq.numel() + self.y.numel())

    def _check(self, model):
        if not (getattr(model, "softmax", False) and hasattr(model, "key_query")):
            raise ValueError(f"the softmax engine covers softmax attention (ATTN_M/ATTN_S with softmax=True) only; "
                             f"got {type(model).__name__} with softmax={getattr(model, 'softmax', None)}: "
                             f"use engine 'exact' or 'autograd'")

    def _failed(self, err: Exception):
        """The compiler did not work: eager from now on, in this engine and every later one on this device type."""
        _compile_failed.add(self.device.type)
        warnings.warn(f"the softmax engine's {self.kernel} kernel failed on {self.device.type} "
                      f"({fallback_reason(err)}); it runs eagerly (same result, slower)", KnownFallback, stacklevel=4)
        self.kernel = "eager"

    def _native_sums(self, m: int, t: int, W, v, grad: bool):
        """One call of the native kernel: term ``t`` (sequence length ``m``) over the whole set."""
        try:
            fn = _native(W.shape[1], self.dtype == torch.float64)
        except Exception as err:  # no C compiler
            self._failed(err)
            return None
        loss = torch.zeros((), dtype=torch.float64)
        dW = torch.zeros(W.shape, dtype=torch.float64)                         # [h, a, b]
        dv = torch.zeros(v.shape, dtype=torch.float64)
        X, xq, y = self.X, self.xq[t], self.y[t]
        limit = 2.0 ** SHIFT_LIMIT[self.dtype]
        if fn(X.data_ptr(), X.shape[0], X.shape[1], m - 1, xq.data_ptr(), y.data_ptr(), W.data_ptr(), v.data_ptr(),
              W.shape[0], limit, int(grad), loss.data_ptr(), dW.data_ptr(), dv.data_ptr()) != 0:
            raise MemoryError("the softmax kernel could not allocate its buffers")
        return [(loss, dW, dv)]

    def _chunk_sums(self, m: int, t: int, W, v, grad: bool):
        """``chunk_sums`` of term ``t`` (sequence length ``m``), chunk by chunk, compiled or eager; a chunk where a key
        outscores the query by more than the limit (3) is computed again with the largest scores as the shift."""
        z_limit = 2.0 ** SHIFT_LIMIT.get(self.dtype, 64.0)
        parts = []
        for blocks in self.chunks:
            args = (self.X[blocks, :m - 1], self.xq[t, blocks], W, v, self.y[t, blocks])
            part, dW_part, dv_part, Z_max = self._sums(*args, False, grad)
            if not Z_max.item() <= z_limit:  # a key outscores the query by more than the limit (3), or NaN
                part, dW_part, dv_part, _ = self._sums(*args, True, grad)
            parts.append((part, dW_part, dv_part))
        return parts

    def _sums(self, *args):
        if self.kernel == "compiled":
            X, xq, W, v, y, _, _ = args
            # one graph for every chunk, prefix length and head count (and one more for `largest`, where needed)
            for t, dims in ((X, (0, 1)), (xq, (0,)), (W, (0,)), (v, (0,)), (y, (0,))):
                for dim in dims:
                    torch._dynamo.maybe_mark_dynamic(t, dim)
            try:
                return _compiled()(*args)
            except Exception as err:  # no triton, …: same result, eagerly
                self._failed(err)
        return chunk_sums(*args)

    def _run(self, model, grad: bool) -> float:
        self._check(model)
        with torch.set_grad_enabled(grad):
            W = model.key_query()                                  # (H, d, d); for ATTN_S a product, kept for backward
        H, d = W.shape[0], W.shape[1]
        Wl = (W.detach().transpose(1, 2) * LOG2E).to(self.dtype).contiguous()   # [h, b, a] = log₂e · W_KQ[h][a, b]
        v = model.v.detach().to(self.dtype).contiguous()
        f64: dict[str, Any] = dict(dtype=torch.float64, device=self.device)
        loss, dW, dv = torch.zeros((), **f64), torch.zeros(H, d, d, **f64), torch.zeros(H, d, **f64)
        if self.device.type in _compile_failed:
            self.kernel = "eager"
        with torch.no_grad():
            for t, m in enumerate(self.terms):
                parts = self._native_sums(m, t, Wl, v, grad) if self.kernel == "native" else None
                for part, dW_part, dv_part in parts or self._chunk_sums(m, t, Wl, v, grad):
                    loss += part
                    if grad:
                        dW += dW_part
                        dv += dv_part
        weight = 1.0 / (self.P * len(self.terms))
        if grad:
            torch.autograd.backward([W, model.v], [(dW * weight).to(W.dtype), (dv * weight).to(model.v.dtype)])
        return loss.item() * weight

    def value_and_grad(self, model: Model) -> float:
        """The loss; its gradient is accumulated into the parameters' ``.grad``."""
        return self._run(model, grad=True)

    def value(self, model: Model) -> float:
        return self._run(model, grad=False)
