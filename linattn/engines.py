"""Training objectives: the mean squared error over a data set, computed three ways.

* :class:`PerSample` — the model's forward pass on every sequence (query row only, chunked over sequences,
  gradients by autograd). Works for every model, softmax included; its cost per step grows with P·N.
* :class:`Exact` — for the linear models ŷ = ⟨m(θ), T⟩ (``models.py``), so over P sequences
  L(θ) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩. One chunked pass over the data builds the three moments (float64);
  each step afterwards costs O(F²) whatever P and N are; gradients come from autograd through ``combined()``.
* :func:`population` — the same moments for P → ∞ (exact, by Gaussian moment identities, see
  ``population.population_moments``), or a Monte-Carlo estimate when asked for.

``vary_len`` averages the loss over the prefixes n = 2 … seq_len (each prefix's last token the query); in the
exact engine that is the average of the prefixes' moments. Prefixes are cut chunk by chunk, so no engine ever
holds more than one chunk's prefixes or features: memory is bounded by the chunk size, not by P.

The engines leave torch's thread count alone: ``linattn train`` sets it once (``--threads``, default 1). An exact
step is a few dozen microseconds of small operations, and with several OpenMP threads on busy cores each one pays a
fork/join (measured 10–50× slower steps with the two cores busy), so from Python call ``torch.set_num_threads(1)``
for small problems on a shared CPU.
"""

from __future__ import annotations

import copy
import warnings
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


def prefix_terms(X: torch.Tensor, y: torch.Tensor, *, vary_len: bool, normalize: str):
    """(X_n, y_n, scale) for each loss term of a chunk of sequences: the whole sequences, or every prefix
    n = 2 … seq_len under ``vary_len``.

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


LINEARITY_RTOL = 1e-9


class NotLinearError(ValueError):
    """A model's ``forward()`` is not ``features() @ combined()``: the exact and population engines cannot train it."""


def _linearity_gap(net, X, scale, T) -> float:
    """max |T @ combined() − forward(X)| relative to the largest prediction (0 when every prediction is 0)."""
    linear, direct = T @ net.combined(), net.forward(X, scale)
    size = max(float(direct.abs().max()), float(linear.abs().max()))
    return float((linear - direct).abs().max()) / size if size > 0 else 0.0


def check_linear(model, X: torch.Tensor, scale=1.0, features: torch.Tensor | None = None, *,
                 engine: str = "exact") -> None:
    """Raise :class:`NotLinearError` unless ``model.features(X) @ model.combined()`` equals ``model.forward(X)`` on
    the sequences ``X`` to a relative 1e-9 (of the largest prediction), both in float64 at the current weights.

    The exact and population engines train through ``features()`` and ``combined()`` and never call ``forward()``,
    so a model whose ``forward()`` computes something else (say a subclass that changes it) would silently be
    trained as the paper's model. ``features`` may pass the already computed ``model.features(X, scale)``.
    """
    name = type(model).__name__
    with torch.no_grad():
        net = copy.deepcopy(model).to(torch.float64)  # float32 weights would blur a 1e-9 comparison
        X = X.to(torch.float64)
        T = net.features(X, scale) if features is None else features.to(torch.float64)
        gap = _linearity_gap(net, X, scale, T)
        # At weights where every prediction is 0 (e.g. value weights at zero) any forward() agrees; the identity
        # must hold for all weights, so it is also checked at random ones (a local generator: no global state).
        gen = torch.Generator().manual_seed(0)
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
        gap = max(gap, _linearity_gap(net, X, scale, T))
    if not gap <= LINEARITY_RTOL:
        also = ", or pass fallback=True to Exact.from_data to get that objective instead" if engine == "exact" else ""
        raise NotLinearError(f"the {engine} engine would train {name} through features() @ combined(), which differs "
                             f"from {name}.forward() by a relative {gap:.2g} (> {LINEARITY_RTOL:g}); train it with "
                             f"--engine autograd (engine='autograd', engines.PerSample){also}")


class Exact:
    """The mean squared error through the data's moments: identical in exact arithmetic to :class:`PerSample`.

    A step computes m = combined(θ) and L(m) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩ (one F×F matrix-vector
    product); the gradient comes from autograd through ``combined()``, so every model and option shares this path.
    That is only the model's loss if ``features(X) @ combined()`` is its ``forward(X)``: :meth:`from_data` checks
    this once, on the first chunk (:func:`check_linear`).
    """

    name = "exact"

    def __init__(self, moments: Moments, dtype=torch.float64):
        self.moments = moments
        self.dtype = dtype

    @classmethod
    def from_data(cls, model, seqs, *, vary_len=False, normalize="sum", chunk=DEFAULT_CHUNK, device="cpu",
                  dtype=torch.float64, fallback: bool = False) -> "Exact | PerSample":
        """The objective on ``seqs`` after one pass over them for the moments.

        On the first chunk of full-length sequences it first checks that ``model.features() @ model.combined()``
        is ``model.forward()`` (:func:`check_linear`). If not, it raises :class:`NotLinearError` (a ValueError), or
        with ``fallback=True`` warns and returns the :class:`PerSample` objective on the same data (autograd
        through ``forward()``, so correct for any model, at a cost per step that grows with P·N).
        """
        if getattr(model, "softmax", False):
            raise ValueError("the exact engine covers linear models only; softmax needs --engine autograd or softmax")
        n_tok = seqs.X.shape[1]

        def batches():
            checked = False
            for Xc, yc in _chunks(seqs.X, seqs.y, chunk, device, torch.float64):
                for Xn, yn, scale in prefix_terms(Xc, yc, vary_len=vary_len, normalize=normalize):
                    T = model.features(Xn, scale)
                    if not checked and Xn.shape[1] == n_tok:
                        check_linear(model, Xn, scale, features=T)
                        checked = True
                    yield T, yn

        try:
            with torch.no_grad():
                mom = Moments.accumulate(batches())
        except NotLinearError as e:
            if not fallback:
                raise
            warnings.warn(f"{str(e).split(';')[0]}; falling back to the per-sample (autograd) engine", stacklevel=2)
            return PerSample(seqs, vary_len=vary_len, normalize=normalize, chunk=chunk, dtype=dtype, device=device)
        mom.yT, mom.TT = mom.yT.to(dtype), mom.TT.to(dtype)
        return cls(mom, dtype)

    def value_and_grad(self, model) -> float:
        """The loss; its gradient is accumulated into the parameters' ``.grad``."""
        loss = self.moments.loss(model.combined())
        loss.backward()
        return loss.item()

    def value(self, model) -> float:
        with torch.no_grad():
            return self.moments.loss(model.combined()).item()


# ---------------------------------------------------------------------------------------------------------------
# Population (P → ∞) moments of the icl = 1 task
# ---------------------------------------------------------------------------------------------------------------

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

    ``samples=0`` (default): the exact moments of ``population.population_moments``. ``samples > 0``: a Monte-Carlo
    estimate from that many fresh sequences of ``seed``'s own stream (never overlapping the training data). The
    estimate is unbiased; measured against the exact moments on the Figure 3a task (D = 4, N = 31, 2²⁰ samples) its
    loss at the fixed points M_0 … M_4 is off by 1e-4 to 1.1e-3 (``benchmarks/README.md``) and it takes ~40 s,
    against 0.01 s for the exact moments, which is why it is no longer the default.
    """
    kind = feature_kind(model)
    if getattr(model, "softmax", False):
        raise ValueError("the population engine covers linear models only")
    # the population objective, too, trains through features() @ combined(): check it on a few fresh sequences
    probe = data_mod.sample_sequences(64, seq_len, np.asarray(cov, dtype=np.float64), 1.0, np.zeros(cov.shape[0]),
                                      np.random.default_rng(0), centre=False)
    check_linear(model, torch.as_tensor(probe.X, device=device), scale_for(seq_len, normalize, vary_len),
                 engine="population")
    if samples == 0 and kind is not None:
        from .population import population_moments  # population.py builds on this module's Moments

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
