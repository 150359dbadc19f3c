"""Training objectives: the mean squared error over a data set, computed three ways.

* :class:`PerSample` — the model's forward pass on every sequence (query row only, chunked over sequences,
  gradients by autograd). Works for every model, softmax included; its cost per step grows with P·N.
* :class:`Exact` — for the linear models ŷ = ⟨m(θ), T⟩ (``models.py``), so over P sequences
  L(θ) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩. One chunked pass over the data builds the three moments (float64);
  each step afterwards costs O(F²) whatever P and N are. Gradients still flow through ``model.combined()``.
* :func:`population` — the same moments for P → ∞, estimated from a large fresh sample (see its docstring).

``vary_len`` averages the loss over the prefixes n = 2 … seq_len (each prefix's last token the query); in the
exact engine that is the average of the prefixes' moments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
import torch

from . import data as data_mod

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


def views(seqs: data_mod.Sequences, *, vary_len: bool, normalize: str):
    """(X, y, scale) for each loss term: the whole sequences, or every prefix n = 2 … seq_len under ``vary_len``."""
    n_tok = seqs.X.shape[1]
    lengths = range(2, n_tok + 1) if vary_len else [n_tok]
    for n in lengths:
        s = data_mod.prefix(seqs.X, seqs.y, n) if n < n_tok else seqs
        yield s.X, s.y, scale_for(n, normalize, vary_len)


def _chunks(X, y, chunk, device, dtype) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for i in range(0, X.shape[0], chunk):
        yield (torch.as_tensor(X[i:i + chunk], dtype=dtype, device=device),
               torch.as_tensor(y[i:i + chunk], dtype=dtype, device=device))


class PerSample:
    """Mean squared error from the model's forward pass on every sequence, chunked so memory stays bounded."""

    name = "autograd"

    def __init__(self, seqs: data_mod.Sequences, *, vary_len=False, normalize="sum", chunk=DEFAULT_CHUNK,
                 dtype=torch.float64, device="cpu"):
        self.terms = list(views(seqs, vary_len=vary_len, normalize=normalize))
        self.P = len(seqs)
        self.chunk, self.dtype, self.device = chunk, dtype, device

    def _run(self, model, backward: bool) -> float:
        total = 0.0
        weight = 1.0 / (self.P * len(self.terms))
        for X, y, scale in self.terms:
            for Xc, yc in _chunks(X, y, self.chunk, self.device, self.dtype):
                part = ((yc - model(Xc, scale)) ** 2).sum() * weight
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
            TT = T.T @ T if TT is None else TT + T.T @ T
            count += y.shape[0]
        return cls(yy / count, yT / count, TT / count, count)

    def loss(self, m: torch.Tensor) -> torch.Tensor:
        """L(m) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩ (differentiable in m)."""
        m = m.to(self.TT.dtype)
        return self.yy - 2 * (m @ self.yT) + m @ (self.TT @ m)


def feature_batches(model, seqs: data_mod.Sequences, *, vary_len, normalize, chunk=DEFAULT_CHUNK, device="cpu"):
    """(features, targets) of every loss term and chunk, in float64 on ``device``."""
    for X, y, scale in views(seqs, vary_len=vary_len, normalize=normalize):
        for Xc, yc in _chunks(X, y, chunk, device, torch.float64):
            yield model.features(Xc, scale), yc


class Exact:
    """The mean squared error through the data's moments: identical in exact arithmetic to :class:`PerSample`."""

    name = "exact"

    def __init__(self, moments: Moments, dtype=torch.float64):
        self.moments = moments
        self.dtype = dtype

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
        loss = self.moments.loss(model.combined())
        loss.backward()
        return loss.item()

    @torch.no_grad()
    def value(self, model) -> float:
        return self.moments.loss(model.combined()).item()


def population(model, *, cov: np.ndarray, seq_len: int, samples: int = 1 << 20, seed: int = 10,
               vary_len=False, normalize="sum", chunk=DEFAULT_CHUNK, device="cpu", dtype=torch.float64) -> Exact:
    """The P → ∞ objective of the icl = 1 task, estimated from ``samples`` fresh sequences (no centring).

    The estimate is unbiased; its standard error on a loss value is about sqrt(Var[(y − ŷ)²] / samples), below
    2e-3 at the default 2²⁰ samples for the paper's settings (the plateau losses of theory.md are matched within
    that by tests). The sample is drawn from its own stream of ``seed``, so it never overlaps the training data.
    """
    rng = data_mod.streams(seed, data_mod.POPULATION)
    w_fix = np.zeros(cov.shape[0])

    def batches():
        done = 0
        while done < samples:
            b = min(chunk, samples - done)
            seqs = data_mod.sample_sequences(b, seq_len, cov, 1.0, w_fix, rng, centre=False)
            yield from feature_batches(model, seqs, vary_len=vary_len, normalize=normalize, chunk=chunk,
                                       device=device)
            done += b

    with torch.no_grad():
        mom = Moments.accumulate(batches())
    mom.yT, mom.TT = mom.yT.to(dtype), mom.TT.to(dtype)
    obj = Exact(mom, dtype)
    obj.name = "population"
    return obj
