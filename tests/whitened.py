"""The standard error of a training loss over a set with whitened task vectors, written out apart from the library
(``uncertainty.mean_loss_error``), for the tests that recompute a page's bands by a second route."""

from __future__ import annotations

import numpy as np


def whitened_se(per, X):
    """The standard error of the mean of each column of ``per`` (P, …) over the sequences ``X`` (P, seq_len, D + 1),
    whose task vectors are whitened: each sequence's w by the pseudo-inverse of its context inputs, checked whitened
    (sample mean 0, sample covariance ∝ I), then the residual of the losses after projecting out 1, w and the
    products w_i w_j (i ≤ j) by a QR factorisation, over √(P − 1 − k) and √P."""
    x, labels = X[:, :-1, :-1], X[:, :-1, -1]
    w = np.einsum("pdn,pn->pd", np.linalg.pinv(np.asarray(x, dtype=np.float64)), labels)
    P, D = w.shape
    cov = np.cov(w.T, bias=True)
    assert np.abs(w.mean(axis=0)).max() < 1e-5 and np.allclose(cov / cov[0, 0], np.eye(D), atol=1e-5)
    products = [w[:, i] * w[:, j] for i in range(D) for j in range(i, D)]
    q, _ = np.linalg.qr(np.column_stack([np.ones(P), w, *products]))
    residual = per - q @ (q.T @ per)
    return np.sqrt((residual ** 2).sum(axis=0) / (P - q.shape[1]) / P)
