"""The straightforward reference for the query-row computation, as the authors' code computes it: every head's whole
n×n attention matrix, then the query row's output. Only tests and benchmarks use it."""

from __future__ import annotations

import torch

from linattn.objectives import Autograd


def full_attention(model, X: torch.Tensor, scale=1.0) -> torch.Tensor:
    """The prediction of an attention ``model`` for sequences ``X`` through the full (P, H, n, n) attention."""
    W = model.key_query()
    scores = torch.einsum("pna,hab,pmb->phnm", X, W, X)
    weights = torch.softmax(scores, -1) if model.softmax else scores * scale
    out = torch.einsum("phnm,pmc,hc->pn", weights, X, model.v)
    return out[:, -1]


class FullAttention(Autograd):
    """The autograd objective through :func:`full_attention` instead of the model's query-row forward pass."""

    name = "full attention"

    def value_and_grad(self, model) -> float:
        return self._run(model, backward=True, forward=lambda X, scale: full_attention(model, X, scale))
