"""Training objectives: the mean squared error over a data set, computed three ways.

* :class:`PerSample` — the model's forward pass on every sequence (query row only, chunked over sequences,
  gradients by autograd). Works for every model, softmax included; its cost per step grows with P·N.
* :class:`Exact` — for the linear models ŷ = ⟨m(θ), T⟩ (``models.py``), so over P sequences
  L(θ) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩. One chunked pass over the data builds the three moments (float64);
  each step afterwards costs O(F²) whatever P and N are; gradients come from autograd through ``combined()``.
* :func:`population` — the same moments for P → ∞ (exact, by Gaussian moment identities, see
  :func:`population_moments`), or a Monte-Carlo estimate when asked for.

``vary_len`` averages the loss over the prefixes n = 2 … seq_len (each prefix's last token the query); in the
exact engine that is the average of the prefixes' moments. Prefixes are cut chunk by chunk, so no engine ever
holds more than one chunk's prefixes or features: memory is bounded by the chunk size, not by P.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
import torch

from . import data as data_mod
from . import models as models_mod

DEFAULT_CHUNK = 4096


def scale_for(n_tokens: int, normalize: str, vary_len: bool) -> float:
    """The factor in front of Σ_m x̃_m x̃_mᵀ for a sequence of ``n_tokens`` tokens.

    ``normalize="sum"`` (the reference): 1, or 1/n under ``vary_len`` (the reference divides by the prefix length).
    ``normalize="mean"`` (the paper): 1/N with N = n − 1 context pairs.
    """
    if normalize == "mean":
        return 1.0 / (n_tokens - 1)
    if normalize == "sum":
        return 1.0 / n_tokens if vary_len else 1.0
    raise ValueError(f"normalize must be 'sum' or 'mean', got {normalize!r}")


def lengths(n_tokens: int, vary_len: bool) -> range:
    """The sequence lengths that enter the loss: every prefix n = 2 … seq_len under ``vary_len``, else seq_len."""
    return range(2, n_tokens + 1) if vary_len else range(n_tokens, n_tokens + 1)


def views(seqs: data_mod.Sequences, *, vary_len: bool, normalize: str):
    """(X, y, scale) for each loss term: the whole sequences, or every prefix n = 2 … seq_len under ``vary_len``.

    Materialises each prefix of the whole set; the engines use :func:`prefix_terms` on chunks instead.
    """
    n_tok = seqs.X.shape[1]
    for n in lengths(n_tok, vary_len):
        s = data_mod.prefix(seqs.X, seqs.y, n) if n < n_tok else seqs
        yield s.X, s.y, scale_for(n, normalize, vary_len)


def prefix_terms(X: torch.Tensor, y: torch.Tensor, *, vary_len: bool, normalize: str):
    """(X_n, y_n, scale) for each loss term of a chunk of sequences (torch version of :func:`views`).

    Prefix n keeps the first n tokens; its n-th token becomes the query (label zeroed, kept as the target).
    """
    n_tok = X.shape[1]
    for n in lengths(n_tok, vary_len):
        if n == n_tok:
            yield X, y, scale_for(n, normalize, vary_len)
        else:
            Xn = X[:, :n].clone()
            yn = Xn[:, -1, -1].clone()
            Xn[:, -1, -1] = 0.0
            yield Xn, yn, scale_for(n, normalize, vary_len)


def _chunks(X, y, chunk, device, dtype) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Consecutive chunks of ``chunk`` sequences as tensors (a copy of that chunk only, never of the whole set)."""
    for i in range(0, X.shape[0], chunk):
        yield (torch.as_tensor(np.require(X[i:i + chunk], requirements="CW"), dtype=dtype, device=device),
               torch.as_tensor(np.require(y[i:i + chunk], requirements="CW"), dtype=dtype, device=device))


class PerSample:
    """Mean squared error from the model's forward pass on every sequence, chunked so memory stays bounded.

    The data are converted to ``dtype`` on ``device`` once; each step then runs the model chunk by chunk
    (query row only, see ``models._Attention.forward``) and accumulates the gradient by autograd.
    """

    name = "autograd"

    def __init__(self, seqs: data_mod.Sequences, *, vary_len=False, normalize="sum", chunk=DEFAULT_CHUNK,
                 dtype=torch.float64, device="cpu"):
        self.X = torch.as_tensor(seqs.X, dtype=dtype, device=device)
        self.y = torch.as_tensor(seqs.y, dtype=dtype, device=device)
        self.P = len(seqs)
        self.vary_len, self.normalize = vary_len, normalize
        self.n_terms = len(lengths(seqs.X.shape[1], vary_len))
        self.chunk, self.dtype, self.device = chunk, dtype, device

    def _run(self, model, backward: bool, forward=None) -> float:
        forward = forward or model
        total = 0.0
        weight = 1.0 / (self.P * self.n_terms)
        for i in range(0, self.P, self.chunk):
            Xc, yc = self.X[i:i + self.chunk], self.y[i:i + self.chunk]
            for Xn, yn, scale in prefix_terms(Xc, yc, vary_len=self.vary_len, normalize=self.normalize):
                part = ((yn - forward(Xn, scale)) ** 2).sum() * weight
                if backward:
                    part.backward()
                total += part.item()
        return total

    def value_and_grad(self, model) -> float:
        """The loss; its gradient is accumulated into the parameters' ``.grad``."""
        return self._run(model, backward=True)

    @torch.no_grad()
    def value(self, model) -> float:
        return self._run(model, backward=False)

    def value_and_grad_full_attention(self, model) -> float:
        """The same loss through ``model.full_attention`` (every head's whole n×n matrix, as the reference does).

        Only for tests and benchmarks of the query-row computation.
        """
        return self._run(model, backward=True, forward=model.full_attention)


@dataclass
class Moments:
    """E[y²], E[yT] (F,), E[TTᵀ] (F, F) of a data set for one feature map, in float64."""

    yy: float
    yT: torch.Tensor
    TT: torch.Tensor
    count: int

    @classmethod
    def accumulate(cls, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> "Moments":
        """Averages over batches of (features (B, F), targets (B,)), all weighted by their size."""
        yy, yT, TT, count = 0.0, None, None, 0
        for T, y in batches:
            T, y = T.to(torch.float64), y.to(torch.float64)
            yy += float(y @ y)
            yT = T.T @ y if yT is None else yT + T.T @ y
            TT = T.T @ T if TT is None else TT.addmm_(T.T, T)
            count += y.shape[0]
        return cls(yy / count, yT / count, TT / count, count)

    def loss(self, m: torch.Tensor) -> torch.Tensor:
        """L(m) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩ (differentiable in m, ∂L/∂m = 2(E[TTᵀ] m − E[yT]))."""
        return _Quadratic.apply(m.to(self.TT.dtype), self.yy, self.yT, self.TT)

    def minimum(self) -> tuple[float, torch.Tensor]:
        """(min_m L(m), a minimiser): L* = E[y²] − E[yT]ᵀ E[TTᵀ]⁺ E[yT] (least squares on the features)."""
        m = torch.linalg.lstsq(self.TT.cpu(), self.yT.cpu()[:, None], rcond=1e-12).solution[:, 0]
        m = m.to(self.TT.device)
        return float(self.loss(m)), m


class _Quadratic(torch.autograd.Function):
    """L(m) = c − 2 bᵀm + mᵀAm for a symmetric A, whose gradient 2(Am − b) reuses the forward's Am (one F×F
    matrix-vector product a step instead of three)."""

    @staticmethod
    def forward(ctx, m, c, b, A):
        r = torch.addmv(b, A, m, beta=-1.0)  # Am − b
        ctx.save_for_backward(r)
        return c + m @ (r - b)

    @staticmethod
    def backward(ctx, grad):
        (r,) = ctx.saved_tensors
        return 2.0 * grad * r, None, None, None


def feature_batches(model, seqs: data_mod.Sequences, *, vary_len, normalize, chunk=DEFAULT_CHUNK, device="cpu"):
    """(features, targets) of every loss term and chunk, in float64 on ``device``; at most ``chunk`` rows each."""
    for Xc, yc in _chunks(seqs.X, seqs.y, chunk, device, torch.float64):
        for Xn, yn, scale in prefix_terms(Xc, yc, vary_len=vary_len, normalize=normalize):
            yield model.features(Xn, scale), yn


class _OneThread:
    """Run a block with one intra-op CPU thread, then restore the setting.

    An exact-engine step is a few dozen microseconds of small operations; with several OpenMP threads each one pays a
    fork/join, and on shared cores the spin-waits made a step 10–50× slower (measured: 8–16 ms instead of 0.7 ms with
    the two cores busy). GPU steps are unaffected.
    """

    def __enter__(self):
        self.saved = torch.get_num_threads()
        if self.saved != 1:
            torch.set_num_threads(1)

    def __exit__(self, *exc):
        if self.saved != 1:
            torch.set_num_threads(self.saved)


class Exact:
    """The mean squared error through the data's moments: identical in exact arithmetic to :class:`PerSample`.

    A step computes m = combined(θ) and L(m) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩ (one F×F matrix-vector
    product); the gradient comes from autograd through ``combined()``, so every model and option shares this path.
    """

    name = "exact"

    def __init__(self, moments: Moments, dtype=torch.float64):
        self.moments = moments
        self.dtype = dtype
        self._backprop = None

    @classmethod
    def from_data(cls, model, seqs, *, vary_len=False, normalize="sum", chunk=DEFAULT_CHUNK, device="cpu",
                  dtype=torch.float64) -> "Exact":
        if getattr(model, "softmax", False):
            raise ValueError("the exact engine covers linear models only; softmax needs --engine autograd")
        with torch.no_grad():
            mom = Moments.accumulate(feature_batches(model, seqs, vary_len=vary_len, normalize=normalize,
                                                     chunk=chunk, device=device))
        mom.yT, mom.TT = mom.yT.to(dtype), mom.TT.to(dtype)
        return cls(mom, dtype)

    def value_and_grad(self, model) -> float:
        """The loss; its gradient is accumulated into the parameters' ``.grad``."""
        with _OneThread():
            loss = self.moments.loss(model.combined())
            loss.backward()
        return loss.item()

    def value(self, model) -> float:
        with _OneThread(), torch.no_grad():
            return self.moments.loss(model.combined()).item()


# ---------------------------------------------------------------------------------------------------------------
# Population (P → ∞) moments of the icl = 1 task
# ---------------------------------------------------------------------------------------------------------------

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
    I = np.einsum
    K = (I("bc,de->bcde", L1, L1) + tr * I("bc,de->bcde", L1, ee) + tr * I("bc,de->bcde", ee, L1)
         + I("b,d,ce->bcde", e, e, L2) + I("b,e,cd->bcde", e, e, L2)
         + I("c,d,be->bcde", e, e, L2) + I("c,e,bd->bcde", e, e, L2)
         + (tr**2 + 2 * np.trace(cov @ cov)) * I("b,c,d,e->bcde", e, e, e, e))
    M4 = K + K.transpose(0, 2, 1, 3) + K.transpose(0, 3, 2, 1)  # K_{bc,b'c'} + K_{bb',cc'} + K_{bc',cb'}
    ES = L1 + tr * ee
    X4 = _pad(_isserlis(cov, 4), 4)[:D, :D]  # (a, a', b', c'), zero where b' or c' is the query's label
    X6 = _pad(_isserlis(cov, 6), 6)[:D, :D]  # (a, a', b, c, b', c')
    TT = (I("ax,bcde->abcxde", cov, N * M4 + N * (N - 1) * K)
          + N * (I("axde,bc->abcxde", X4, ES) + I("axbc,de->abcxde", X4, ES))
          + X6.transpose(0, 2, 3, 1, 4, 5))
    yT = N * (I("b,ac->abc", e, L2[:D]) + I("c,ab->abc", e, L2[:D]))
    return float(tr), yT * scale, TT * scale**2


def population_moments(kind: str, cov: np.ndarray, seq_len: int, *, vary_len=False, normalize="sum") -> Moments:
    """The exact P → ∞ moments of the icl = 1 task (x ~ N(0, Λ), w ~ N(0, I), no centring) for one feature map.

    ``kind="attention"``: T = x_q ⊗ triu(S) (``models.attention_features``); ``kind="cubic"``: z = vec(b x_qᵀ)
    (``models.cubic_features``), which is the sub-vector T[j, i, D] (b_i = S_{iD}: the query's label is zero).
    ``vary_len`` averages the moments of the prefix lengths n = 2 … seq_len. See :func:`_attention_population`.
    """
    cov = np.asarray(cov, dtype=np.float64)
    D = cov.shape[0]
    if kind == "attention":
        b, c = models_mod._triangle(D)
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


def feature_kind(model) -> str | None:
    """"attention" or "cubic" for the paper's linear models, None for anything else."""
    if isinstance(model, models_mod._Attention) and not model.softmax:
        return "attention"
    if isinstance(model, models_mod.MLP):
        return "cubic"
    return None


def population(model, *, cov: np.ndarray, seq_len: int, samples: int = 0, seed: int = 10,
               vary_len=False, normalize="sum", chunk=DEFAULT_CHUNK, device="cpu", dtype=torch.float64) -> Exact:
    """The P → ∞ objective of the icl = 1 task.

    ``samples=0`` (default): the exact moments of :func:`population_moments`. ``samples > 0``: a Monte-Carlo
    estimate from that many fresh sequences of ``seed``'s own stream (never overlapping the training data). The
    estimate is unbiased; measured against the exact moments on the Figure 3a task (D = 4, N = 31, 2²⁰ samples) its
    loss at the fixed points M_0 … M_4 is off by 1e-4 to 1.1e-3 (``benchmarks/README.md``) and it takes ~40 s,
    against 0.01 s for the exact moments, which is why it is no longer the default.
    """
    kind = feature_kind(model)
    if getattr(model, "softmax", False):
        raise ValueError("the population engine covers linear models only")
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
    obj = Exact(mom, dtype)
    obj.name = "population"
    return obj
