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
in the hundreds) is computed again with c_h = max_m s_hm, the largest score, which that pass returned. This saves
the separate max pass of the usual two-pass softmax.

Layout and kernel. Sequences are stored in blocks of ``BLOCK`` = 32, the sequence index innermost — the context tokens
X (blocks, D+1, n−1, BLOCK), the queries (terms, blocks, D+1, BLOCK) — so every operation vectorises across
sequences and a block (20 KB at D = 4, n = 32) stays in the L1 cache while all heads read it. (Blocks of 128, as
before, put the 5 × 31 rows a head reads into 8 of the 64 L1 sets and read them from L2 again for every head and lane
group; 32 halves the time of the score loop.) For sets large enough to repay it, the per-chunk function
``chunk_sums`` is compiled by ``torch.compile``: on the CPU, inductor makes it one C++ loop nest per block, head and
8 sequences in which the scores, 2^z and the 11 running sums stay in registers (FMA contraction on); 2^z is written
in plain torch ops (:func:`pow2`: a degree-5 polynomial in z − round(z) times the exponent field built from
round(z); 3e-7 relative) so that it is inlined, where ``torch.exp2`` is a call into Sleef that spills every
register. The loop's time goes to the chain of dependent operations from a key's score to its sums, so the score is
summed pairwise (:func:`_tree_sum`) and the polynomial evaluated in Estrin's form: ~10 % off a step. Compile time grows with the size of the expression inductor inlines into each of the 11 sums over keys (it
copies a shared subexpression once per use), so z enters :func:`pow2` once, the query's own score s_hq is a buffer
of its own (a small reduction, as q_h (1) is), and the query's e_hq, a value per sequence and head, is
``torch.exp2``: together these cut a cold compile from ~110 s to ~40 s of CPU time. The loss and the sums of ∂L/∂v,
∂L/∂W_KQ over sequences are reduced in the same graph, so a chunk is one call. On CUDA, triton, with
``torch.exp2``. The compiler falls back to eager execution when it does not work.
Data and arithmetic are in ``dtype`` (float32 by default); the loss, ∂L/∂v and ∂L/∂W_KQ accumulate in float64.
Timings, the memory floor and the float32-vs-float64 trajectories: ``benchmarks/README.md``.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import torch

from .. import data as data_mod
from ..data import named
from ..normalization import lengths, prefix_queries
from .base import DEFAULT_CHUNK, Objective

BLOCK = 32
LOG2E = 1.0 / math.log(2.0)
# compile=None compiles for sets of at least this many sequence-terms (P × prefixes): below, an eager step takes a
# few ms and compiling (once per process and dtype; cached on disk for later processes) does not pay for itself
COMPILE_FROM = 4096
# largest z = log2(e)·(s − c) of a key allowed before a chunk is computed again with c = its largest score (3)
SHIFT_LIMIT = {torch.float32: 64.0, torch.float64: 512.0}

# Inductor stores a pointwise value read by several consumers once it has more than a few ops or reads; raised
# thresholds keep the scores and 2^z in registers inside the reduction loop (2^z of a score is ~300 nodes as inductor
# traces it, inlined into 11 sums). unroll_reductions_threshold=1 keeps the 5-term reductions that give q_h and the
# query's own score buffers of their own, computed once per sequence and head, instead of inlining them into the loop
# over keys.
_INDUCTOR_OPTIONS = {"realize_reads_threshold": 64, "realize_acc_reads_threshold": 64,
                     "realize_opcount_threshold": 400, "unroll_reductions_threshold": 1,
                     "cpp.enable_floating_point_contract_flag": "fast"}

# 2^f on [−½, ½]: relative error made near-minimax by Lawson's reweighted least squares on Chebyshev nodes (7.5e-8
# relative; 2.6e-7 in float32 arithmetic)
_POW2_COEFFS = (1.0000000716546729, 0.6931469670643613, 0.24022119723881574, 0.055507132741486956,
                0.009675541332787224, 0.0013276471782291757)


def pow2(z):
    """2^z in float32 from plain torch ops that inductor inlines: 2^n · 2^f with n = round(z), f = z − n ∈ [−½, ½].

    The kernel's time is the latency of the chain from a key's score to its sums, so the chain is kept short: f is
    two operations from z, the polynomial is evaluated in Estrin's form (c₀ + c₁f) + f²((c₂ + c₃f) + f²(c₄ + c₅f))
    (three multiply-adds deep instead of Horner's five), and 2^n, built as the float32 bits (n + 127)·2²³ from n
    clamped to [−126, 126], is off the chain. Below z = −126 the result is < 2⁻¹²⁵ instead of 0 (the sums keep ≥ 1
    from the query); above 126 it stays ≈ 2¹²⁶, which the caller's range check sees."""
    n = torch.round(z)
    f = z - n
    c0, c1, c2, c3, c4, c5 = _POW2_COEFFS
    f2 = f * f
    p = (f * c1 + c0) + f2 * ((f * c3 + c2) + f2 * (f * c5 + c4))
    bits = torch.bitwise_left_shift(torch.clamp(n, -126.0, 126.0).to(torch.int32) + 127, 23)
    return p * bits.view(torch.float32)


def _tree_sum(terms):
    """Σ terms added pairwise: the same sum as left to right, half as deep a chain of dependent additions."""
    while len(terms) > 1:
        terms = [a + b for a, b in zip(terms[::2], terms[1::2])] + terms[len(terms) - len(terms) % 2:]
    return terms[0]


def _exp2(z):
    inline = z.dtype == torch.float32 and z.device.type == "cpu" and torch.compiler.is_compiling()
    return pow2(z) if inline else torch.exp2(z)


def _dot(a, b, start=None):
    """start + Σ_i a_i b_i, left to right (FMAs once contracted)."""
    acc = a[0] * b[0] if start is None else start + a[0] * b[0]
    for x, y in zip(a[1:], b[1:]):
        acc = acc + x * y
    return acc


def chunk_sums(X, xq, W, v, y, floor, grad: bool):
    """Loss, ∂L/∂W_KQ and ∂L/∂v summed over a chunk of blocks (unweighted), and the largest Z_h.

    X (K, D+1, N, B): the N context tokens; xq (K, D+1, B): the query (also a key); W (H, D+1, D+1): W[h, b, a] =
    log₂e · W_KQ[h][a, b]; v (H, D+1); y (K, B); floor (K, H, B): −inf, or the largest scores (log₂ units) when a
    chunk is computed again; the shift (3) is c = max(s_q, floor). Returns float64 Σ (ŷ − y)², float64
    (H, D+1, D+1) [h, a, b] or None, float64 (H, D+1) or None, and max Z_h (Z_h ≥ 1; above 2^``SHIFT_LIMIT`` a
    key outscored the shift by more than the limit, and the sums may have lost range). Zero tokens with a zero target
    (the padding of the last block) contribute nothing.
    """
    d = X.shape[1]
    x = [X[:, None, b] for b in range(d)]                            # (K, 1, N, B): coordinate b of each context token
    x_q = [xq[:, None, b] for b in range(d)]                         # (K, 1, B)
    Q = (W[None, :, :, :, None] * xq[:, None, None]).sum(3)          # (K, H, D+1, B): q_h (1), log₂ units
    q = [Q[:, :, b] for b in range(d)]
    s_q = (Q * xq[:, None]).sum(2)                                   # the query's score of itself (a buffer)
    shift = torch.maximum(s_q, floor)
    z = _tree_sum([qb[:, :, None] * xb for qb, xb in zip(q, x)] + [-shift[:, :, None]])  # (K, H, N, B): z (3)
    e = _exp2(z)
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


def max_scores(X, xq, W):
    """The largest score of each sequence and head over its keys (context and query), log₂ units: (K, H, B)."""
    Q = (W[None, :, :, :, None] * xq[:, None, None]).sum(3)
    s = (Q[:, :, :, None] * X[:, None]).sum(2)                      # (K, H, N, B)
    return torch.maximum(s.amax(2), (Q * xq[:, None]).sum(2))


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
    least ``COMPILE_FROM`` sequence-terms. ``chunk``: sequences per call of ``chunk_sums`` (bounds the memory of
    its intermediate sums, about 0.7 KB a sequence at H = 5).
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
        # the last token is never a context token (it is the query of the whole sequence)
        self.X = blocked(tokens[:, :n - 1]).transpose(1, 2).contiguous().to(self.device)  # (K, d, n−1, B)
        self.xq = blocked(q_tok).permute(1, 0, 2, 3).contiguous().to(self.device)        # (terms, K, d, B)
        self.y = blocked(targets).transpose(0, 1).contiguous().to(self.device)           # (terms, K, B)

    @property
    def step_bytes(self) -> int:
        """Bytes of data a step reads: every term's context tokens, queries and targets (the memory floor)."""
        item = self.X.element_size()
        context = sum(self.X[:, :, :m - 1].numel() for m in self.terms)
        return item * (context + self.xq.numel() + self.y.numel())

    @staticmethod
    def refuses(cfg) -> str | None:
        """Why this objective cannot train ``cfg`` (None: it can)."""
        if not cfg.softmax:
            return (f"{named('engine')} 'softmax' covers softmax attention only (set {named('softmax', True)}, or use "
                    f"{named('engine')} 'exact' or 'autograd')")
        return None

    def _check(self, model):
        if not (getattr(model, "softmax", False) and hasattr(model, "key_query")):
            raise ValueError(f"the softmax engine covers softmax attention (ATTN_M/ATTN_S with softmax=True) only; "
                             f"got {type(model).__name__} with softmax={getattr(model, 'softmax', None)}: "
                             f"use engine 'exact' or 'autograd'")

    def _no_floor(self, H):
        if getattr(self, "_floor", None) is None or self._floor.shape[1] != H:
            self._floor = torch.full((self.X.shape[0], H, BLOCK), -math.inf, dtype=self.dtype, device=self.device)
        return self._floor

    def _sums(self, *args):
        kind = self.device.type
        if self.compile and kind not in _compile_failed:
            X, xq, W, v, y, floor, _ = args
            # one graph for every chunk, prefix length and head count
            for t, dims in ((X, (0, 2)), (xq, (0,)), (W, (0,)), (v, (0,)), (y, (0,)), (floor, (0, 1))):
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
        Wl = (W.detach().transpose(1, 2) * LOG2E).to(self.dtype).contiguous()   # [h, b, a] = log₂e · W_KQ[h][a, b]
        v = model.v.detach().to(self.dtype).contiguous()
        z_limit = 2.0 ** SHIFT_LIMIT.get(self.dtype, 64.0)
        f64 = dict(dtype=torch.float64, device=self.device)
        loss, dW, dv = torch.zeros((), **f64), torch.zeros(H, d, d, **f64), torch.zeros(H, d, **f64)
        no_floor = self._no_floor(H)
        with torch.no_grad():
            for blocks in self.chunks:
                for t, m in enumerate(self.terms):
                    args = (self.X[blocks, :, :m - 1], self.xq[t, blocks], Wl, v, self.y[t, blocks])
                    part, dW_part, dv_part, Z_max = self._sums(*args, no_floor[blocks], grad)
                    if not Z_max.item() <= z_limit:  # a key outscores the query by more than the limit (3), or NaN
                        floor = max_scores(*args[:3])
                        part, dW_part, dv_part, _ = self._sums(*args, floor, grad)
                    loss += part
                    if grad:
                        dW += dW_part
                        dv += dv_part
        weight = 1.0 / (self.P * len(self.terms))
        if grad:
            torch.autograd.backward([W, model.v], [(dW * weight).to(W.dtype), (dv * weight).to(model.v.dtype)])
        return loss.item() * weight

    def value_and_grad(self, model) -> float:
        """The loss; its gradient is accumulated into the parameters' ``.grad``."""
        return self._run(model, grad=True)

    def value(self, model) -> float:
        return self._run(model, grad=False)
