"""What the objectives share: data chunks, the moments of a linear model's feature, and the linearity check.

Every objective is the mean squared error over a data set (over its prefixes under ``vary_len``) with two methods,
``value_and_grad(model)`` (the loss; its gradient accumulated into the parameters' ``.grad``) and ``value(model)``.
Data are read chunk by chunk, so no objective holds more than one chunk's prefixes or features at a time.

Each engine chooses torch's intra-op thread count for the runs it trains (``Objective.threads``):
``linattn.run`` and ``run_many`` set it for the duration of the run and restore the caller's setting afterwards,
exceptions included (:func:`thread_count`). An exact or population step is a few microseconds of arithmetic, and
with several OpenMP threads on busy cores each small operation pays a fork/join (measured 10–50× slower steps with
the two cores busy), so those engines take one thread. The autograd and softmax engines keep the caller's setting:
their work is large products over the whole data set (autograd) or a C kernel that uses no torch threads (softmax
on the CPU), so the thread count is the caller's to choose (``linattn train --threads``).
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import numpy as np
import torch

from ..normalization import prefix_terms
from .declarations import Engine

if TYPE_CHECKING:
    from ..data import Sequences
    from ..models import Model

DEFAULT_CHUNK = 4096


class Objective(Engine):
    """An engine that trains: what it declares for the registry (``linattn.objectives``) is its
    ``linattn.objectives.declarations.Engine`` (torch-free, in ``declarations.py``).
    """

    def value_and_grad(self, model: Model) -> float:
        """The loss of ``model``; its gradient is accumulated into the parameters' ``.grad`` (each engine's own)."""
        raise NotImplementedError

    def value(self, model: Model) -> float:
        """The loss of ``model``, without a gradient (each engine's own)."""
        raise NotImplementedError

    @classmethod
    def for_data(cls, model: Model, seqs: Sequences, **opts: Any) -> "Objective":
        """The objective on the sequences ``seqs`` (``opts``: vary_len, normalize, chunk, device, dtype)."""
        return cls(seqs, **opts)  # type: ignore[call-arg]  # each engine class defines its own __init__


@contextmanager
def thread_count(threads: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``threads`` for the block (None: left as it is), and the caller's
    setting restored afterwards, also when the block raises."""
    before = torch.get_num_threads()
    if threads is not None and threads != before:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def chunks(X: np.ndarray, y: np.ndarray, chunk: int, device: str | torch.device,
           dtype: torch.dtype) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Consecutive chunks of ``chunk`` sequences as tensors (a copy of that chunk only, never of the whole set)."""
    for i in range(0, X.shape[0], chunk):
        yield (torch.as_tensor(np.require(X[i:i + chunk], requirements=["C", "W"]), dtype=dtype, device=device),
               torch.as_tensor(np.require(y[i:i + chunk], requirements=["C", "W"]), dtype=dtype, device=device))


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
        yT: Any = None
        TT: Any = None
        yy, count = 0.0, 0
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

    def loss_and_grad(self, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(L(m), ∂L/∂m) written out: the same one F×F matrix-vector product as ``loss`` (call it under
        ``torch.no_grad()``, as the exact engine does, to record no graph)."""
        m = m.to(self.TT.dtype)
        r = torch.addmv(self.yT, self.TT, m, beta=-1.0)  # E[TTᵀ] m − E[yT]
        return self.yy + torch.dot(m, r - self.yT), 2.0 * r

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


def feature_batches(model: Model, seqs: Sequences, *, vary_len: bool, normalize: str, chunk: int = DEFAULT_CHUNK,
                    device: str | torch.device = "cpu") -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(features, targets) of every loss term and chunk, in float64 on ``device``; at most ``chunk`` rows each."""
    for Xc, yc in chunks(seqs.X, seqs.y, chunk, device, torch.float64):
        for Xn, yn, scale in prefix_terms(Xc, yc, vary_len=vary_len, normalize=normalize):
            yield model.features(Xn, scale), yn


_LINEARITY_RTOL = 1e-9


class NotLinearError(ValueError):
    """A model's ``forward()`` is not ``features() @ combined()``: the exact and population engines cannot train it."""


def _linearity_gap(net, X, scale, T) -> float:
    """max |T @ combined() − forward(X)| relative to the largest prediction (0 when every prediction is 0)."""
    linear, direct = T @ net.combined(), net.forward(X, scale)
    size = max(float(direct.abs().max()), float(linear.abs().max()))
    return float((linear - direct).abs().max()) / size if size > 0 else 0.0


def check_linear(model: Model, X: torch.Tensor, scale: float | torch.Tensor = 1.0, features: torch.Tensor | None = None,
                 *, engine: str = "exact") -> None:
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
    if not gap <= _LINEARITY_RTOL:
        also = ", or pass fallback=True to Exact.from_data to get that objective instead" if engine == "exact" else ""
        raise NotLinearError(f"the {engine} engine would train {name} through features() @ combined(), which differs "
                             f"from {name}.forward() by a relative {gap:.2g} (> {_LINEARITY_RTOL:g}); train it with "
                             f"engine='autograd' (linattn.objectives.Autograd){also}")


