"""The autograd objective: the model's own forward pass on every sequence, gradients by autograd.

    L(θ) = 1/(P·T) Σ_p Σ_terms (y_p − ŷ_θ(X_p))²      (T prefixes per sequence under ``vary_len``, else 1)

It trusts nothing but ``model.forward`` (query row only, ``models._Attention.forward``), so it trains every model,
softmax included, and is the reference the faster objectives are tested against. Its cost per step grows with P·N.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..normalization import lengths, prefix_terms
from .base import DEFAULT_CHUNK, Objective
from .declarations import AutogradEngine

if TYPE_CHECKING:
    from ..models import Model


class Autograd(AutogradEngine, Objective):
    """Mean squared error from ``model(X, scale)`` on every sequence, chunked so memory stays bounded.

    The data are converted to ``dtype`` on ``device`` once; each step runs the model chunk by chunk and accumulates
    the gradient into the parameters' ``.grad``.
    """

    def __init__(self, seqs, *, vary_len=False, normalize="sum", chunk=DEFAULT_CHUNK, dtype=torch.float64,
                 device="cpu"):
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

    def value_and_grad(self, model: Model) -> float:
        """The loss; its gradient is accumulated into the parameters' ``.grad``."""
        return self._run(model, backward=True)

    @torch.no_grad()
    def value(self, model: Model) -> float:
        return self._run(model, backward=False)
