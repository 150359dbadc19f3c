"""The standard error of a training loss over a set with whitened task vectors, written out apart from the library
(``uncertainty.mean_loss_error``), for the tests that recompute a page's bands by a second route."""

from __future__ import annotations

import numpy as np


def whitened_se(per, X):
    """See :func:`whitened_residuals`; the standard error is √(Σ r² / ((P − k′) P))."""
    residual, fitted = whitened_residuals(per, X)
    P = residual.shape[0]
    return np.sqrt((residual ** 2).sum(axis=0) / (P - fitted) / P)


def whitened_residuals(per, X):
    """The residuals of each column of ``per`` (P, …) over the sequences ``X`` (P, seq_len, D + 1), whose task
    vectors are whitened, and the number k′ of regressors: each sequence's w by the pseudo-inverse of its context
    inputs, checked whitened (sample mean 0, sample covariance ∝ I), then the losses with 1, w and the products
    w_i w_j (i ≤ j) projected out by a QR factorisation."""
    x, labels = X[:, :-1, :-1], X[:, :-1, -1]
    w = np.einsum("pdn,pn->pd", np.linalg.pinv(np.asarray(x, dtype=np.float64)), labels)
    P, D = w.shape
    cov = np.cov(w.T, bias=True)
    assert np.abs(w.mean(axis=0)).max() < 1e-5 and np.allclose(cov / cov[0, 0], np.eye(D), atol=1e-5)
    products = [w[:, i] * w[:, j] for i in range(D) for j in range(i, D)]
    q, _ = np.linalg.qr(np.column_stack([np.ones(P), w, *products]))
    return per - q @ (q.T @ per), q.shape[1]
