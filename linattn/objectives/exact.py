"""The exact objective of the linear models: the loss as a quadratic form in their combined weights.

For ATTN_M, ATTN_S and the MLP the prediction is linear in a fixed feature T of a sequence once the weights are
combined, ŷ = ⟨m(θ), T⟩ (``models.py``: ``features()`` and ``combined()``), so over P sequences

    L(θ) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩,   m = m(θ).

One chunked pass over the data builds the three moments (float64); a step afterwards costs O(F²) whatever P and N are,
and its gradient goes back through ``combined()`` by the model's own ``combined_with_vjp`` (attention), else by autograd.
``vary_len`` averages the prefixes' moments.
"""

from __future__ import annotations

import warnings

import torch

from ..normalization import prefix_terms
from .autograd import Autograd
from .base import DEFAULT_CHUNK, Moments, NotLinearError, Objective, check_linear, chunks
from .declarations import ExactEngine


class Exact(ExactEngine, Objective):
    """The mean squared error through the data's moments: identical in exact arithmetic to :class:`~linattn.objectives.Autograd`.

    A step computes m = combined(θ) and L(m) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩ (one F×F matrix-vector
    product); the gradient goes back through ``combined()`` by ``model.combined_with_vjp`` where the model has it, else
    by autograd, so every model and option shares this path.
    That is only the model's loss if ``features(X) @ combined()`` is its ``forward(X)``: :meth:`from_data` checks
    this once, on the first chunk (:func:`check_linear`).
    """

    def __init__(self, moments: Moments, dtype=torch.float64):
        self.moments = moments
        self.dtype = dtype

    @classmethod
    def from_data(cls, model, seqs, *, vary_len=False, normalize="sum", chunk=DEFAULT_CHUNK, device="cpu",
                  dtype=torch.float64, fallback: bool = False) -> "Exact | Autograd":
        """The objective on ``seqs`` after one pass over them for the moments.

        On the first chunk of full-length sequences it first checks that ``model.features() @ model.combined()``
        is ``model.forward()`` (:func:`check_linear`). If not, it raises :class:`NotLinearError` (a ValueError), or
        with ``fallback=True`` warns and returns the :class:`~linattn.objectives.Autograd` objective on the same data (autograd
        through ``forward()``, so correct for any model, at a cost per step that grows with P·N).
        """
        if getattr(model, "softmax", False):
            raise ValueError("the exact engine covers linear models only; softmax needs engine 'autograd' or 'softmax'")
        n_tok = seqs.X.shape[1]

        def batches():
            checked = False
            for Xc, yc in chunks(seqs.X, seqs.y, chunk, device, torch.float64):
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
            warnings.warn(f"{str(e).split(';')[0]}; falling back to the autograd engine", stacklevel=2)
            return Autograd(seqs, vary_len=vary_len, normalize=normalize, chunk=chunk, dtype=dtype, device=device)
        mom.yT, mom.TT = mom.yT.to(dtype), mom.TT.to(dtype)
        return cls(mom, dtype)

    @classmethod
    def for_data(cls, model, seqs, **opts):
        """:meth:`from_data` (the registry's name for it)."""
        return cls.from_data(model, seqs, **opts)

    def value_and_grad(self, model) -> float:
        """The loss; its gradient is accumulated into the parameters' ``.grad``: through the model's own
        ``combined_with_vjp`` where it has one (the attention models: no autograd graph, about three times faster a
        step), else by autograd through ``combined()``."""
        if not hasattr(model, "combined_with_vjp"):
            loss = self.moments.loss(model.combined())
            loss.backward()
            return loss.item()
        with torch.no_grad():
            m, vjp = model.combined_with_vjp()
            loss, g = self.moments.loss_and_grad(m)
            for p, grad in zip(model.parameters(), vjp(g)):
                grad = grad.to(p.dtype)
                p.grad = grad if p.grad is None else p.grad + grad
        return loss.item()

    def value(self, model) -> float:
        with torch.no_grad():
            return self.moments.loss(model.combined()).item()
