"""The least-squares end point (t → ∞) of an ATTN_M run, from its own data: ATTN_M's output is linear in its features
T (a two-layer linear network on them), so from a small start the flow ends, generically, at the minimiser
m* = E[TTᵀ]⁺E[yT] of its training loss when the heads can carry its rank (our derivation, not the paper's). Its
losses need no training: each is a quadratic form in m* on a set's feature moments (:func:`.phase.quadratic_loss`).
Used by the phase diagram (every cell) and by Figure 14 (each panel)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .phase import FLAT, quadratic_loss, triple

if TYPE_CHECKING:
    import torch

# torch and the objectives are imported where they are used: a page that imports this module imports torch only
# once it computes (inside frame.build, whose garbage collection settings make the import cheaper)

TESTS = ("test_iwl", "test_icl")


def data_moments(result, seqs) -> tuple:
    """(E[TTᵀ], E[yT], E[y²]) of the sequences ``seqs`` on ATTN_M's features (the exact engine's quadratic form, as
    ``Exact.from_data`` accumulates it, without its check that the model is linear in them: ATTN_M is)."""
    import torch

    from ....models import build_model
    from ....objectives.base import Moments, feature_batches

    model = build_model("attnM", result.init, dtype=torch.float64)
    with torch.no_grad():
        return triple(Moments.accumulate(feature_batches(model, seqs, vary_len=False,
                                                         normalize=result.config.normalize)))


def sequence_features(seqs, normalize: str) -> torch.Tensor:
    """ATTN_M's features T of each sequence of ``seqs`` (``models.attention_features`` at the token scale of
    ``normalize``), (P, F), in float64: a linear attention model's prediction is ŷ = ⟨combined(), T⟩ whatever its
    weights, so one set's features serve every set of weights."""
    import torch

    from ....models import attention_features
    from ....normalization import token_scale

    X = torch.as_tensor(seqs.X, dtype=torch.float64)
    return attention_features(X, token_scale(X.shape[1], normalize))


def per_sequence_losses(model, seqs, features: torch.Tensor) -> np.ndarray:
    """(ŷ − y)² of each sequence of ``seqs`` for the linear attention ``model``, ŷ = ⟨combined(), T⟩ on the
    sequences' ``features`` T (:func:`sequence_features`): the terms whose mean is its loss on that set."""
    import torch

    with torch.no_grad():
        out = (features @ model.combined().to(torch.float64)).numpy()
    return (out - np.asarray(seqs.y, dtype=np.float64)) ** 2


def train_moments(result) -> tuple:
    """The moments of a run's training loss: its training set's, or the mixture's at P = ∞."""
    from ....objectives.population import mixture_moments

    cfg, data = result.config, result.datasets
    if cfg.trainset_size is None:
        return triple(mixture_moments("attention", data.cov, cfg.seq_len, icl=cfg.icl, w_fix=data.w_fix,
                                      normalize=cfg.normalize))
    return data_moments(result, data.train)


def test_moments(result) -> dict:
    """The moments of a run's two test sets, by name (``test_iwl``, ``test_icl``)."""
    return {k: data_moments(result, getattr(result.datasets, k)) for k in TESTS}


# a library function, not a test (pytest reads this attribute; mypy does not model attributes set on a function)
test_moments.__test__ = False  # type: ignore[attr-defined]


def least_squares(moments) -> tuple[np.ndarray | None, float]:
    """(m*, curvature): the minimiser of the quadratic loss on ``moments`` and E[TTᵀ]'s smallest eigenvalue over its
    largest; m* is None where that ratio is below :data:`.phase.FLAT` (the loss is flat in some direction, its
    minima a valley: no unique end point)."""
    ev = np.linalg.eigvalsh(moments[0])
    curvature = float(ev[0] / ev[-1])
    return (np.linalg.lstsq(moments[0], moments[1], rcond=1e-12)[0] if curvature >= FLAT else None), curvature


def end_point(result, tests: dict | None = None) -> dict:
    """The t → ∞ losses of one run: at m* of its training loss, the training loss and the loss on each test set of
    ``tests`` (name → moments; default the run's own, :func:`test_moments`), by name; None where m* is not unique."""
    mom = train_moments(result)
    m_star, _ = least_squares(mom)
    sets = {"train_loss": mom, **(test_moments(result) if tests is None else tests)}
    return {k: None if m_star is None else quadratic_loss(m_star, v) for k, v in sets.items()}
