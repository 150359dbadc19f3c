"""The length-averaged (--vary_len) plateau losses of ``theory.vary_len_plateau_losses`` against a direct Monte Carlo
fit."""

import numpy as np
import pytest

from linattn import theory


def _mc_plateaus(lam, seq_len, normalize, P, rng):
    """Best loss of ŷ = Σ_{d<m} a_d b_d x_q,d, one (a_d) shared by every prefix, fitted by least squares on samples."""
    D = len(lam)
    x = rng.standard_normal((P, seq_len, D)) * np.sqrt(lam)
    w = rng.standard_normal((P, D))
    y = np.einsum("pnd,pd->pn", x, w)
    feats, targets = [], []
    for n in range(2, seq_len + 1):                     # prefix of n tokens: N = n − 1 context pairs, query x_n
        N = n - 1
        scale = 1.0 / n if normalize == "sum" else 1.0 / N
        b = np.einsum("pk,pkd->pd", y[:, :N], x[:, :N]) * scale
        feats.append(b * x[:, N])                       # feature d: b_d x_q,d
        targets.append(y[:, N])
    F, t = np.concatenate(feats), np.concatenate(targets)
    out = [np.mean(t**2)]
    for m in range(1, D + 1):
        a, *_ = np.linalg.lstsq(F[:, :m], t, rcond=None)
        out.append(np.mean((t - F[:, :m] @ a) ** 2))
    return np.array(out)


@pytest.mark.parametrize("normalize", ["sum", "mean"])
def test_vary_len_plateaus_match_monte_carlo(normalize):
    lam = np.array([0.5, 0.3, 0.2])
    rng = np.random.default_rng(0)
    mc = _mc_plateaus(lam, seq_len=8, normalize=normalize, P=60000, rng=rng)
    th = theory.vary_len_plateau_losses(lam, 8, normalize=normalize)
    assert th.shape == (4,)
    np.testing.assert_allclose(th, mc, atol=0.012)
    # the levels are not those of a fixed length: averaging over short contexts raises them
    assert np.all(th[1:] > theory.plateau_losses(lam, 7)[1:] + 0.02)


def test_vary_len_single_length_reduces_to_fixed_length():
    lam = np.array([0.4, 0.3, 0.2, 0.1])
    # seq_len 2: only N = 1; with the paper's normalisation the average is the fixed-length value
    np.testing.assert_allclose(theory.vary_len_plateau_losses(lam, 2, normalize="mean"), theory.plateau_losses(lam, 1))

