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


@pytest.mark.parametrize("normalize", ["sum", "mean"])
def test_vary_len_plateaus_are_the_minima_of_the_averaged_per_length_losses(normalize):
    """A second route to L(M_m): the loss at each length N is its minimum plus the predictor gap to its minimiser
    (least squares: L_N(A) = L_N(A*_N) + E[(βᵀ(A − A*_N)x_q)²], ``plateau_losses`` and ``predictor_distance``), the
    prefix with N pairs predicts with s_N·A (s_N = N/(N+1) in the reference's normalisation); the average over N is
    minimised numerically over A = Σ_{d≤m} a_d e_d e_dᵀ. Its minimum is L(M_m) for every m, and lies above the
    fixed-length level at the full length."""
    from scipy.optimize import minimize

    cov = np.diag([0.45, 0.3, 0.15, 0.1])
    seq_len, D = 6, 4
    Ns = range(1, seq_len)
    best = [theory.pcr_weights(cov, N, D, normalize="mean") for N in Ns]
    floor = [theory.plateau_losses(cov, N)[-1] for N in Ns]
    s = [N / (N + 1) if normalize == "sum" else 1.0 for N in Ns]

    def averaged(a):
        A = np.diag(np.concatenate([a, np.zeros(D - len(a))]))
        return np.mean([f + theory.predictor_distance(sN * A, B, cov, N, normalize="mean")
                        for N, sN, B, f in zip(Ns, s, best, floor)])

    found = [averaged(np.zeros(0))] + [minimize(averaged, np.ones(m), method="BFGS", options={"gtol": 1e-12}).fun
                                       for m in range(1, D + 1)]
    levels = theory.vary_len_plateau_losses(cov, seq_len, normalize=normalize)
    np.testing.assert_allclose(levels, found, rtol=1e-7, atol=1e-10)
    assert np.all(levels[1:] > theory.plateau_losses(cov, seq_len - 1)[1:])
