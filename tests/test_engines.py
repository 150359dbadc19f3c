"""The engines: exact moments ≡ autograd, bounded memory, exact population moments, the softmax query row."""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest
import torch
from full_attention import FullAttention, full_attention
from numpy.polynomial.hermite_e import hermegauss

from linattn import data, models, normalization, objectives
from linattn.objectives import population
from linattn.training.train import gradient_descent

D, SEQ, H = 3, 6, 3


def _weights(model, rank, init, seed):
    w = models.init_weights(model, head_num=H, in_dim=D, rank=rank, init=init, rng=np.random.default_rng(seed))
    return w


# (model, rank, normalize, vary_len, test sets + tracked values, lr, init): every option combination that matters
CASES = {
    "attnM": ("attnM", 1, "sum", False, False, 2e-3, 0.3),
    "attnM-mean-varylen": ("attnM", 1, "mean", True, False, 0.25, 0.3),
    "attnS-R1-tests-values": ("attnS", 1, "sum", False, True, 4e-2, 0.8),
    "attnS-R2-mean": ("attnS", 2, "mean", False, False, 0.15, 0.8),
    "attnS-R2-varylen": ("attnS", 2, "sum", True, True, 0.16, 0.8),
    "mlp": ("mlp", 1, "sum", False, True, 2.4e-2, 0.3),
    "mlp-mean-varylen": ("mlp", 1, "mean", True, False, 1.0, 0.3),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_exact_engine_follows_the_per_sample_trajectory(case):
    model, rank, normalize, vary_len, extras, lr, init = CASES[case]
    ds = data.make_datasets(in_dim=D, seq_len=SEQ, trainset_size=120, testset_size=40 if extras else 0,
                            icl=0.7, seed=3)
    w = _weights(model, rank, init, 4)
    opts = dict(vary_len=vary_len, normalize=normalize, chunk=50)  # several chunks per set
    hist = {}
    for engine in ("exact", "autograd"):
        net = models.build_model(model, w)
        make = ((lambda s: objectives.Exact.from_data(net, s, **opts)) if engine == "exact"
                else (lambda s: objectives.Autograd(s, **opts)))
        tests = {k: make(getattr(ds, k)) for k in ("test_iwl", "test_icl")} if extras else None
        hist[engine] = gradient_descent(net, make(ds.train), lr=lr, epoch=150, tests=tests,
                                        track_value=extras, progress=False)
    ex, ps = hist["exact"], hist["autograd"]
    assert ps.train_loss[-1] < 0.7 * ps.train_loss[0]  # the loss moves a lot, not only along a plateau
    assert np.max(np.abs(ex.train_loss - ps.train_loss) / ps.train_loss) < 1e-6
    if extras:
        for a, b in ((ex.test_iwl, ps.test_iwl), (ex.test_icl, ps.test_icl)):
            assert np.max(np.abs(a - b) / b) < 1e-6
        assert np.max(np.abs(ex.values - ps.values)) < 1e-6 * np.max(np.abs(ps.values))
        assert np.ptp(ps.values) > 0.1  # the tracked values actually move


@pytest.mark.slow
def test_statistics_for_a_million_sequences_stay_chunk_sized():
    """P = 10⁶ sequences (one sequence broadcast, so the data cost no memory): every feature block the engine
    builds has at most ``chunk`` rows, numpy never allocates more than a few chunks, and the moments are those of
    the single sequence (so every chunk was counted once)."""
    P, chunk = 10**6, 8192
    one = data.make_datasets(in_dim=2, seq_len=4, trainset_size=3, seed=1).train
    X = np.broadcast_to(one.X[:1], (P,) + one.X.shape[1:])
    y = np.broadcast_to(one.y[:1], (P,))
    net = models.build_model("attnM", _weights_small())
    rows = []
    features = net.features

    def spy(Xc, scale):
        rows.append(Xc.shape[0])
        return features(Xc, scale)

    net.features = spy
    tracemalloc.start()
    obj = objectives.Exact.from_data(net, data.Sequences(X, y), vary_len=True, chunk=chunk)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert max(rows) == chunk and sum(rows) == P * 3  # three prefix lengths per sequence
    assert peak < 20 * chunk * X[0].nbytes  # a whole copy of the data would be 10⁶ · X[0].nbytes
    ref = objectives.Exact.from_data(net, data.Sequences(np.ascontiguousarray(X[:1]), np.ascontiguousarray(y[:1])),
                                  vary_len=True)
    assert torch.allclose(obj.moments.TT, ref.moments.TT, rtol=1e-12)
    assert torch.allclose(obj.moments.yT, ref.moments.yT, rtol=1e-12)


def _weights_small():
    return models.init_weights("attnM", head_num=2, in_dim=2, init=0.5, rng=np.random.default_rng(0))


# ---------------------------------------------------------------------------------------------------------------
# population moments
# ---------------------------------------------------------------------------------------------------------------

def _quadrature_moments(model, cov, seq_len, *, vary_len, normalize):
    """E[y²], E[yT], E[TTᵀ] by Gauss–Hermite quadrature over every Gaussian variable (x_1 … x_n, w): exact for these
    polynomials (degree ≤ 6 in each variable, 4 nodes per variable), independent of the closed form."""
    Dl = cov.shape[0]
    nodes, wts = hermegauss(4)
    wts = wts / wts.sum()
    n_vars = Dl * (seq_len + 1)
    grid = np.array(list(itertools.product(range(4), repeat=n_vars)))
    u, weight = nodes[grid], np.prod(wts[grid], axis=1)
    C = np.linalg.cholesky(cov)
    x = u[:, :Dl * seq_len].reshape(-1, seq_len, Dl) @ C.T
    w = u[:, Dl * seq_len:]
    labels = np.einsum("pnd,pd->pn", x, w)
    X = np.concatenate([x, labels[..., None]], axis=-1)
    yq = X[:, -1, Dl].copy()
    X[:, -1, Dl] = 0.0
    wt = torch.as_tensor(weight)
    yy, yT, TT, k = 0.0, 0.0, 0.0, 0
    for Xn, yn, scale in normalization.prefix_terms(torch.as_tensor(X), torch.as_tensor(yq), vary_len=vary_len,
                                              normalize=normalize):
        T = model.features(Xn, scale)
        yy, yT, TT, k = yy + wt @ yn**2, yT + T.T @ (wt * yn), TT + T.T @ (wt[:, None] * T), k + 1
    return float(yy) / k, yT / k, TT / k


@pytest.mark.parametrize("model", ["attnM", "mlp"])
@pytest.mark.parametrize("normalize,vary_len", [("sum", False), ("mean", False), ("sum", True)])
def test_population_moments_equal_exact_quadrature(model, normalize, vary_len):
    cov = np.array([[0.6, 0.15], [0.15, 0.4]])
    net = models.build_model(model, models.init_weights(model, head_num=2, in_dim=2, init=0.5,
                                                         rng=np.random.default_rng(0)))
    with torch.no_grad():
        yy, yT, TT = _quadrature_moments(net, cov, 3, vary_len=vary_len, normalize=normalize)
    kind = net.feature_map
    mom = population.population_moments(kind, cov, 3, vary_len=vary_len, normalize=normalize)
    assert abs(mom.yy - yy) < 1e-12
    assert torch.allclose(mom.yT, yT, rtol=1e-10, atol=1e-12)
    assert torch.allclose(mom.TT, TT, rtol=1e-10, atol=1e-12)
    assert TT.abs().max() > 0.1


def _population_loss_of_A(mom, A, Dl, normalize, N):
    """Population loss of the predictor ŷ = βᵀ A x_q, β = (1/N) Σ y_n x_n, written as attention weights m."""
    M = torch.zeros(Dl, Dl + 1, Dl + 1, dtype=torch.float64)
    M[:, :Dl, Dl] = torch.as_tensor(A).T * (1.0 if normalize == "mean" else 1.0 / N)  # M[a=j, b=i, D] = A_ij
    return float(mom.loss(models.fold_combined(M)))


@pytest.mark.parametrize("normalize", ["mean", "sum"])
@pytest.mark.parametrize("Dl,expected", [
    (4, [1.0000, 0.6406, 0.3774, 0.2098, 0.1360]),
    (8, [1.0000, 0.8113, 0.6490, 0.5130, 0.4032, 0.3192, 0.2605, 0.2260, 0.2133]),
])
def test_population_plateaus_match_theory(Dl, expected, normalize):
    """The paper's theory: L at the origin = tr Λ; L(M_m) = tr Λ − Σ_{d≤m} λ_d/c_d at A = Σ_{d≤m} (λ_d c_d)⁻¹ e_d e_dᵀ;
    the minimum over all attention weights is L* = tr Λ − Σ_d λ_d / c_d (ATTN_M's global minimum)."""
    N = 31
    lam = np.arange(Dl, 0, -1) / (Dl * (Dl + 1) / 2)
    cov = data.make_covariance(Dl, np.random.default_rng(2), spectrum=lam)
    evals, evecs = np.linalg.eigh(cov)
    evals, evecs = evals[::-1], evecs[:, ::-1]
    mom = population.population_moments("attention", cov, N + 1, normalize=normalize)
    assert abs(float(mom.loss(torch.zeros_like(mom.yT))) - np.trace(cov)) < 1e-14
    c = 1 + (1 + np.trace(cov) / evals) / N
    for m, value in enumerate(expected):
        A = sum((np.outer(evecs[:, d], evecs[:, d]) / (evals[d] * c[d]) for d in range(m)), np.zeros((Dl, Dl)))
        assert abs(_population_loss_of_A(mom, A, Dl, normalize, N) - value) < 6e-5
    best, _ = mom.minimum()
    assert abs(best - (np.trace(cov) - np.sum(evals / c))) < 1e-9
    assert abs(best - expected[-1]) < 6e-5


def test_population_white_minimum():
    """The paper's theory: Λ = I/D, D = 4, N = 31: L* = (D+1)/(N+D+1)."""
    mom = population.population_moments("cubic", np.eye(4) / 4, 32, normalize="mean")
    assert abs(mom.minimum()[0] - 5 / 36) < 1e-10


def test_population_moments_need_the_normalisation():
    with pytest.raises(TypeError, match="normalize"):
        population.population_moments("cubic", np.eye(2) / 2, 4)  # no silent factor of N


def test_engines_leave_the_thread_count_alone(monkeypatch):
    """The CLI sets torch's threads once (--threads); an engine step must not change them behind its back."""
    net = models.build_model("attnM", _weights_small())
    obj = objectives.Exact.from_data(net, data.make_datasets(in_dim=2, seq_len=4, trainset_size=8, seed=0).train)
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(n))
    obj.value_and_grad(net)
    obj.value(net)
    assert calls == []


def test_population_engine_is_exact_by_default_and_sampling_agrees():
    cov = data.make_covariance(2, np.random.default_rng(0))
    net = models.build_model("attnM", _weights_small())
    exact = objectives.Population.of(net, cov=cov, seq_len=4, normalize="mean")
    sampled = objectives.Population.of(net, cov=cov, seq_len=4, normalize="mean", samples=1 << 16, seed=3)
    assert exact.name == sampled.name == "population"
    # the Monte-Carlo estimate scatters around the exact value: compare the loss of the trained-like weights
    a, b = exact.value(net), sampled.value(net)
    assert a != b and abs(a - b) < 0.05 * a


# ---------------------------------------------------------------------------------------------------------------
# softmax: the query row equals the full attention computation
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["attnM", "attnS"])
@pytest.mark.parametrize("softmax", [True, False])
def test_query_row_equals_full_attention(model, softmax):
    ds = data.make_datasets(in_dim=D, seq_len=SEQ, trainset_size=70, seed=5)
    w = _weights(model, 2 if model == "attnS" else 1, 0.7, 6)
    a = models.build_model(model, w, softmax=softmax)
    b = models.build_model(model, w, softmax=softmax)
    X = torch.as_tensor(ds.train.X)
    assert torch.allclose(a(X, 0.2), full_attention(b, X, 0.2), rtol=1e-12, atol=1e-14)
    la = objectives.Autograd(ds.train, vary_len=True, chunk=32).value_and_grad(a)
    lb = FullAttention(ds.train, vary_len=True, chunk=32).value_and_grad(b)
    assert abs(la - lb) < 1e-12 * la
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-10, atol=1e-14)
        assert q.grad.abs().max() > 0
