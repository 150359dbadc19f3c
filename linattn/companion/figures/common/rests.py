"""A training loss resting at a saddle beside the theory's level: the theory's weights of each saddle M_m, the
training loss there on the run's own sequences, its sampling error and how much fitting could lower it, and the
verdict on a rest (the appendix's varying-length page and the population page share it).
"""

from __future__ import annotations

import numpy as np

from ... import uncertainty


def saddle_directions(cov, F: int):
    """The combined weight (``models.fold_combined``, F entries) of the predictor ŷ = x_qᵀ e_d e_dᵀ b for each
    eigenvector e_d of ``cov`` (largest eigenvalue first; b = scale · Σ_n y_n x_n), as the columns of an (F, D)
    array; and the eigenvectors (D, D). The theory's saddle M_m predicts with Σ_{d≤m} a_d e_d e_dᵀ."""
    import torch

    from ....models import fold_combined

    lam, vecs = np.linalg.eigh(np.asarray(cov, dtype=np.float64))
    vecs = vecs[:, np.argsort(lam)[::-1]]
    D = vecs.shape[0]
    columns = []
    for d in range(D):
        M = torch.zeros(D, D + 1, D + 1, dtype=torch.float64)
        M[:, :D, D] = torch.as_tensor(np.outer(vecs[:, d], vecs[:, d]))
        columns.append(fold_combined(M).numpy())
    out = np.stack(columns, axis=1)
    if out.shape[0] != F:
        raise ValueError(f"the features have {F} entries, the folded weights of D = {D} have {out.shape[0]}")
    return out, vecs


def training_terms(seqs, seq_len: int, normalize: str, chunk: int = 1000, *, vary_len: bool = True):
    """(features (B, prefixes, F), targets (B, prefixes)) of the training set's loss terms, a chunk of sequences at
    a time (``normalization.prefix_terms``: every prefix n = 2 … seq_len under ``vary_len``, else the whole
    sequence, one term)."""
    import torch

    from ....models import attention_features
    from ....normalization import prefix_terms
    from ....objectives.base import chunks

    for X, y in chunks(seqs.X, seqs.y, chunk, "cpu", torch.float64):
        terms = list(prefix_terms(X, y, vary_len=vary_len, normalize=normalize))
        yield (torch.stack([attention_features(Xn, scale) for Xn, _, scale in terms], 1).numpy(),
               torch.stack([yn for _, yn, _ in terms], 1).numpy())


def rest_errors(seqs, cov, seq_len: int, normalize: str, *, vary_len: bool = True
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The error of a training loss resting at each saddle M_0 … M_D, from the run's own training set ``seqs`` (P
    sequences, the loss averaged over their prefixes; with ``vary_len=False`` the fixed-length loss, one term a
    sequence, whose saddle levels are ``theory.plateau_losses``) and covariance: ``(se, optimism, own, spread)``,
    each of length D + 1.

    * ``own[m]``: the training loss at the theory's weights of M_m on these P sequences (the mean of the per-sequence
      losses, each the mean of its prefixes' (y − ŷ)²), the weights Σ_{d≤m} a_d e_d e_dᵀ with the a_d that minimise the
      length-averaged population loss (``population_moments``), whose population loss is L(M_m)
      (``theory.vary_len_plateau_losses``).
    * ``se[m]``: its standard error about L(M_m), the finite-P sampling of the training set
      (``uncertainty.mean_loss_error``: the task vectors of a drawn set are whitened, which fixes part of it).
    * ``spread[m]``: how uncertain ``se[m]`` is itself, relative to it (``uncertainty.mean_loss_error_spread``: one
      set's estimate of its own error).
    * ``optimism[m]``: how much lower the training loss gets when the weights are fitted to these P sequences: the
      training loss at those weights minus its least value over every combined weight whose query side lies in the
      learned span e_1 … e_m (rows a of the fold along those directions, all of their entries: what a run resting at
      M_m may fit; 0 at M_0, where nothing is fitted). A rest may sit this much below its level.
    """
    from ....objectives.population import population_moments

    pop = population_moments("attention", cov, seq_len, normalize=normalize, vary_len=vary_len)
    TT, yT = pop.TT.numpy(), pop.yT.numpy()
    G, vecs = saddle_directions(cov, TT.shape[0])
    D, K = vecs.shape[0], TT.shape[0] // vecs.shape[0]
    weights = np.zeros((TT.shape[0], D + 1))
    for m in range(1, D + 1):
        Gm = G[:, :m]
        weights[:, m] = Gm @ np.linalg.solve(Gm.T @ TT @ Gm, Gm.T @ yT)
    per_sequence, yy, b, A = [], 0.0, 0.0, 0.0
    # about as many loss terms a chunk either way: a sequence has seq_len − 1 terms under vary_len, else one
    for T, y in training_terms(seqs, seq_len, normalize, 1000 if vary_len else 32000, vary_len=vary_len):
        per_sequence.append(((y[..., None] - T @ weights) ** 2).mean(axis=1))  # (B, D + 1)
        flat, target = T.reshape(-1, T.shape[-1]), y.reshape(-1)
        yy, b, A = yy + target @ target, b + flat.T @ target, A + flat.T @ flat
    losses = np.concatenate(per_sequence)
    count = losses.shape[0] * T.shape[1]
    yy, b, A = yy / count, b / count, A / count
    se = uncertainty.mean_loss_error(losses, seqs)
    spread = uncertainty.mean_loss_error_spread(losses, seqs)
    optimism = np.zeros(D + 1)
    for m in range(1, D + 1):
        B = np.kron(vecs[:, :m], np.eye(K))  # the fold's rows a along e_1 … e_m, every entry of each
        fitted, *_ = np.linalg.lstsq(B.T @ A @ B, B.T @ b, rcond=None)
        least = yy - 2 * (B.T @ b) @ fitted + fitted @ (B.T @ A @ B) @ fitted
        optimism[m] = max(float(losses[:, m].mean() - least), 0.0)
    return se, optimism, losses.mean(axis=0), spread


def rest_verdict(rest: float, level: float, se: float, optimism: float) -> str | None:
    """The verdict on a rest at ``rest`` beside the theory's level L(M_m) (``uncertainty.verdict``): it
    *agrees* within ``uncertainty.COVERAGE`` (2) standard errors ``se`` of the mean over the training set; below
    the level, beyond that but within the further ``optimism`` (the fit to these sequences, which only lowers a
    training loss) it *cannot tell*; else it *differs*. None where the run does not rest there (NaN)."""
    if rest is None or not np.isfinite(rest):
        return None
    return uncertainty.verdict(rest - level, uncertainty.difference_band(se), optimism if rest < level else 0.0)
