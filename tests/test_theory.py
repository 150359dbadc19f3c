"""The theory module against independent numbers (the paper's stated plateau values), Monte-Carlo moments, and
simulation (ATTN_M)."""

import numpy as np
import pytest
import torch

from linattn import objectives, theory
from linattn.analysis import diagnostics as dg
from linattn.analysis import loss_curves as lc
from linattn.config import RunConfig
from linattn.models import AttnM, build_model
from linattn.training.experiment import run
from linattn.training.flow import gradient_flow

N = 31
SPEC4 = (0.4, 0.3, 0.2, 0.1)


def test_plateau_losses_and_value_weights_match_the_stated_values():
    # the plateau and value-weight numbers the paper states (worked out independently of this code)
    assert np.allclose(theory.plateau_losses(SPEC4, N), [1.0, 0.6406, 0.3774, 0.2098, 0.1360], atol=6e-5)
    assert np.allclose(theory.final_value_weights(SPEC4, N, normalize="mean"), [1.310, 1.430, 1.612, 1.947], atol=6e-4)
    lam8 = np.arange(1, 9) / 36
    assert np.allclose(theory.plateau_losses(lam8, N),
                       [1.0, 0.8113, 0.6490, 0.5130, 0.4032, 0.3192, 0.2605, 0.2260, 0.2133], atol=6e-5)
    D = 4
    assert theory.loss_star(np.ones(D) / D, N) == pytest.approx((D + 1) / (N + D + 1), rel=1e-12)


def test_matrix_and_eigenvalue_inputs_agree_and_fixed_points_are_stationary():
    rng = np.random.default_rng(0)
    Q = np.linalg.qr(rng.standard_normal((4, 4)))[0]
    cov = (Q * np.array(SPEC4)) @ Q.T
    assert np.allclose(theory.plateau_losses(cov, N), theory.plateau_losses(SPEC4, N))
    M = theory.expected_lambda_hat_sq(cov, N)
    for subset in ([], [0], [1, 3], [0, 1, 2, 3]):
        A = theory.fixed_point_A(cov, N, subset, normalize="mean")
        # the loss formula at A equals the closed form, and the gradient in A vanishes on span{e_d : d in S}
        expected = theory.fixed_point_loss(cov, N, subset)
        assert theory.loss_of_A(A, cov, N, normalize="mean") == pytest.approx(expected, abs=1e-12)
        grad = -2 * cov @ cov + 2 * M @ A @ cov
        _, E = theory.spectrum(cov)
        for d in subset:
            assert abs(E[:, d] @ grad @ E[:, d]) < 1e-12
    A = theory.optimal_A(cov, N, normalize="mean")
    assert np.allclose(A, theory.fixed_point_A(cov, N, range(4), normalize="mean"))
    assert np.allclose(theory.optimal_A(cov, N, normalize="sum") * N, A)
    # the reference's A* (N times smaller) is the same predictor: the same loss in either normalisation
    assert theory.loss_of_A(A / N, cov, N, normalize="sum") == pytest.approx(theory.loss_star(cov, N), abs=1e-12)
    # A* is the unconstrained minimiser: any perturbation raises the loss
    for _ in range(5):
        B = A + 1e-3 * rng.standard_normal((4, 4))
        assert theory.loss_of_A(B, cov, N, normalize="mean") > theory.loss_star(cov, N)
    assert len(theory.all_fixed_points(SPEC4, N, normalize="mean")) == 16


def test_moments_match_monte_carlo():
    rng = np.random.default_rng(1)
    D, n = 3, 5
    cov = np.array([[0.5, 0.1, 0.0], [0.1, 0.3, 0.05], [0.0, 0.05, 0.2]])
    P = 200_000
    x = rng.standard_normal((P, n + 1, D)) @ np.linalg.cholesky(cov).T
    w = rng.standard_normal((P, D))
    y = np.einsum("pnd,pd->pn", x, w)
    beta = np.einsum("pn,pnd->pd", y[:, :n], x[:, :n]) / n
    z = (beta[:, :, None] * x[:, n, None, :]).reshape(P, -1)  # z[i·D + j] = β_i x_q,j
    lam_hat = np.einsum("pni,pnj->pij", x[:, :n], x[:, :n]) / n
    assert np.allclose(np.einsum("pij,pjk->ik", lam_hat, lam_hat) / P, theory.expected_lambda_hat_sq(cov, n), atol=4e-3)
    assert np.allclose(z.T @ y[:, n] / P, theory.mean_yz(cov, n, normalize="mean"), atol=3e-3)
    assert np.allclose(z.T @ z / P, theory.second_moment_z(cov, n, normalize="mean"), atol=4e-3)
    A = rng.standard_normal((D, D))
    mc = np.mean((y[:, n] - np.einsum("pi,ij,pj->p", beta, A, x[:, n])) ** 2)
    assert mc == pytest.approx(theory.loss_of_A(A, cov, n, normalize="mean"), rel=0.02)


def test_loss_of_A_matches_the_population_engine_for_a_random_model():
    cfg_cov = np.diag(SPEC4)
    from linattn.data import streams
    from linattn.models import init_weights
    w = init_weights("attnS", head_num=3, in_dim=4, init=0.8, rng=streams(5, 0))
    model = build_model("attnS", w)
    for normalize in ("mean", "sum"):
        obj = objectives.Population.of(model, cov=cfg_cov, seq_len=N + 1, normalize=normalize)
        A = dg.combined_A(model, N, normalize=normalize)  # paper normalisation
        assert obj.value(model) == pytest.approx(theory.loss_of_A(A, cfg_cov, N, normalize="mean"), rel=1e-9)


@pytest.mark.parametrize("model,H,lr,init", [("attnS", 3, 0.02, 0.05), ("attnM", 3, 1e-3, 1e-2),
                                            ("mlp", 3, 1e-3, 1e-2)])
def test_normalisation_conversion_gives_the_same_trajectory(model, H, lr, init):
    base = dict(model=model, head_num=H, in_dim=4, trainset_size=None, epoch=600, seed=3, cubic_feat=model == "mlp",
                draws="streams", init_scheme="jan2025")
    ref = run(RunConfig(**base, lr=lr, init=init, normalize="sum")).history.train_loss
    lr_p, init_p = theory.to_paper_normalisation(model, N, lr=lr, init=init)
    paper = run(RunConfig(**base, lr=lr_p, init=init_p, normalize="mean")).history.train_loss
    assert np.abs(ref - paper).max() < 1e-10
    assert ref[0] - ref[-1] > 0.05  # the runs did move
    # the other factor count's rule does not give the same run
    k = 3 if theory.N_FACTORS[model] == 2 else 2
    wrong = run(RunConfig(**base, lr=lr * N ** (2 / k), init=init * N ** (1 / k), normalize="mean"))
    assert np.abs(ref - wrong.history.train_loss).max() > 1e-3
    assert theory.to_reference_normalisation(model, N, lr=lr_p, init=init_p) == pytest.approx((lr, init))


def test_steps_to_time():
    assert theory.steps_to_time(100, 0.01, normalize="mean") == pytest.approx(2.0)
    assert theory.steps_to_time(100, 0.01, normalize="sum", model="attnM", N=N) == pytest.approx(2.0 * N)
    assert theory.steps_to_time(100, 0.01, normalize="sum", model="attnS", N=N) == pytest.approx(2.0 * N ** (2 / 3))
    assert theory.time_to_steps(2.0, 0.01, normalize="mean") == pytest.approx(100)
    with pytest.raises(ValueError, match="model and N"):
        theory.steps_to_time(100, 0.01, normalize="sum")
    with pytest.raises(ValueError, match="normalize must be one of 'sum', 'mean'"):
        theory.steps_to_time(100, 0.01, normalize="paper")


# every theory function whose result depends on the normalisation, with its other arguments
NORMALISED = {
    "mean_yz": lambda f, **k: f(SPEC4, N, **k),
    "second_moment_z": lambda f, **k: f(SPEC4, N, **k),
    "loss_of_A": lambda f, **k: f(np.eye(4), SPEC4, N, **k),
    "predictor_distance": lambda f, **k: f(np.eye(4), np.zeros((4, 4)), SPEC4, N, **k),
    "weight_scale_to_paper": lambda f, **k: f("attnS", N, **k),
    "steps_to_time": lambda f, **k: f(10, 0.02, model="attnS", N=N, **k),
    "time_to_steps": lambda f, **k: f(1.0, 0.02, model="attnS", N=N, **k),
    "optimal_A": lambda f, **k: f(SPEC4, N, **k),
    "fixed_point_A": lambda f, **k: f(SPEC4, N, [0, 2], **k),
    "all_fixed_points": lambda f, **k: f(SPEC4, N, **k),
    "pcr_weights": lambda f, **k: f(SPEC4, N, 2, **k),
    "final_value_weights": lambda f, **k: f(SPEC4, N, **k),
    "attn_s_drop_steps": lambda f, **k: f(SPEC4, N, lr=0.02, init=0.01, **k),
    "vary_len_plateau_losses": lambda f, **k: f(SPEC4, 8, **k),
    "feature_scale": lambda f, **k: f(N, **k),
}


@pytest.mark.parametrize("name", NORMALISED)
def test_normalize_is_a_required_keyword_wherever_it_changes_a_number(name):
    fn, call = getattr(theory, name), NORMALISED[name]
    with pytest.raises(TypeError, match="normalize"):
        call(fn)                                   # no silent default, hence no silent factor of N
    mean, total = (np.asarray(_value(call(fn, normalize=n)), float) for n in ("mean", "sum"))
    assert not np.allclose(mean, total)            # the choice does change the number


def _value(out):
    return [fp.A for fp in out] if isinstance(out, list) else out


def _aligned_attn_m(w, D):
    W_KQ = np.zeros((1, D + 1, D + 1))
    W_KQ[0, :D, :D] = np.eye(D) * w / np.sqrt(D)
    W_V = np.zeros((1, D + 1, D + 1))
    W_V[0, D, D] = w
    return AttnM(torch.tensor(W_KQ), torch.tensor(W_V))


@pytest.mark.slow
@pytest.mark.parametrize("kappa,normalize", [(1.0, "mean"), (0.25, "sum")])
def test_white_sigma_matches_population_gradient_flow(kappa, normalize):
    """Aligned balanced start, Λ = κI (κ = 1/D is the reference's white covariance), exact population flow."""
    D, w = 4, 1e-3
    cov = np.eye(D) * kappa
    model = _aligned_attn_m(w, D)
    obj = objectives.Population.of(model, cov=cov, seq_len=N + 1, normalize=normalize)
    lr = 0.01 if normalize == "mean" else 0.01 / N  # same paper-normalised rate either way
    w_paper = w * theory.weight_scale_to_paper("attnM", N, normalize=normalize)
    s, lam_z, _ = theory.attn_m_mode(cov, N)
    t_end = 2 * theory.logistic_half_time(s, lam_z, w_paper**2) + 4 / s  # well past the drop
    epochs = int(theory.time_to_steps(t_end, lr, normalize=normalize, model="attnM", N=N))
    hist = gradient_flow(model, obj, lr=lr, epoch=epochs, snapshot_every=max(1, epochs // 400),
                         snapshot=dg.snapshot_fn(N, normalize=normalize))
    steps = np.array([s for s, _ in hist.snapshots])
    sigma = np.array([np.trace(v["heads"].sum(0)) / D for _, v in hist.snapshots])
    t = theory.steps_to_time(steps, lr, normalize=normalize, model="attnM", N=N)
    predicted = theory.white_sigma(t, D, N, w_paper, kappa)
    sigma_inf = D * kappa / (theory.white_c(D, N) * kappa**2 * D)  # = 1/(cκ)
    assert predicted[-1] == pytest.approx(sigma_inf, rel=1e-3)
    err = np.abs(sigma - predicted).max()
    print(f"white sigma kappa={kappa}: max |dsigma| = {err:.2e} (sigma_inf = {sigma_inf:.4f})")
    assert err < 1e-6 * sigma_inf
    loss_pred = theory.white_loss(theory.white_sigma(theory.steps_to_time(hist.step, lr, normalize=normalize,
                                                                           model="attnM", N=N), D, N, w_paper, kappa),
                                  D, N, kappa)
    assert np.abs(hist.train_loss - loss_pred).max() < 1e-6


@pytest.mark.parametrize("seed", [0, 1])
def test_attn_m_drop_time_from_random_small_start(seed):
    D = 4
    lr, init = 0.01, 1e-3
    cfg = RunConfig(model="attnM", head_num=8, init=init, lr=lr, epoch=600, trainset_size=None, normalize="mean",
                    seed=seed, spectrum=(1.0,) * D, draws="streams")
    result = run(cfg)
    cov = result.datasets.cov
    a0 = dg.attn_m_effective_a0(build_model("attnM", result.init), cov, N, normalize="mean")
    loss = result.history.train_loss
    half = lc.drop_steps(loss, [loss[0], theory.loss_star(cov, N)])[0]
    measured = theory.steps_to_time(half, lr, normalize="mean")
    assert theory.attn_m_drop_time(cov, N, a0) == pytest.approx(measured, rel=0.10)
    assert theory.attn_m_escape_time(cov, N, init) == pytest.approx(measured, rel=0.20)
    assert loss[-1] == pytest.approx(theory.loss_star(cov, N), abs=1e-3)
    # the same prediction as a step, from the model (what the figure notebooks call), in both normalisations
    step = dg.attn_m_drop_step(build_model("attnM", result.init), cov, N, lr=lr, normalize="mean")
    assert step == pytest.approx(float(theory.time_to_steps(theory.attn_m_drop_time(cov, N, a0), lr,
                                                            normalize="mean")), rel=1e-12)
    assert step == pytest.approx(half, rel=0.10)
    # the reference-normalised twin (weights / √N, lr / N: the same trajectory) predicts the same step
    ref_lr, scale = theory.to_reference_normalisation("attnM", N, lr=lr, init=1.0)
    twin = build_model("attnM", {k: v * scale for k, v in result.init.items()})
    assert dg.attn_m_drop_step(twin, cov, N, lr=ref_lr, normalize="sum") == pytest.approx(step, rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("trainset_size", [None, 20000])
def test_attn_m_converges_to_loss_star(trainset_size):
    """The Figure 1b command (reference normalisation); population and a large finite training set."""
    result = run(RunConfig(model="attnM", head_num=8, init=1e-6, trainset_size=trainset_size, draws="streams"))
    cov = result.datasets.cov
    A = dg.combined_A(result.model, N, normalize="sum")
    assert result.history.train_loss[0] == pytest.approx(np.trace(cov), abs=0.03)
    assert result.history.train_loss[-1] == pytest.approx(theory.loss_star(cov, N), abs=0.005)
    assert theory.loss_of_A(A, cov, N, normalize="mean") == pytest.approx(theory.loss_star(cov, N), abs=0.002)


def test_scalar_ode_limits_and_escape_time():
    lam, c = 0.3, theory.c_d(SPEC4, N)[1]
    t = np.linspace(0, 2000, 20001)  # escape time 1/(λ²v0) ≈ 1111
    v = theory.scalar_ode(lam, c, 0.01, t)
    assert v[-1] == pytest.approx((lam * c) ** (-1 / 3), rel=1e-6)
    assert np.all(np.diff(v) >= -1e-12)
    # escape: v has grown 10x a bit before the blow-up time of τ v̇ = λ² v², i.e. at 0.9 of it
    t10 = t[np.flatnonzero(v >= 0.1)[0]]
    assert t10 == pytest.approx(0.9 * theory.attn_s_escape_time(lam, 0.01), rel=0.02)
    loss = theory.scalar_loss(SPEC4, N, 1, v)
    assert loss[0] == pytest.approx(theory.plateau_losses(SPEC4, N)[1], abs=1e-5)
    assert loss[-1] == pytest.approx(theory.plateau_losses(SPEC4, N)[2], abs=1e-9)
    v_mid = theory.v_from_loss_drop(SPEC4, N, 1, 0.1)
    assert theory.scalar_loss(SPEC4, N, 1, v_mid) == pytest.approx(theory.plateau_losses(SPEC4, N)[1] - 0.1)


def test_long_plateaus():
    assert theory.long_plateaus(8, 2) == [0, 2, 4, 6]
    assert theory.long_plateaus(8, 3) == [0, 3, 6]
    assert theory.long_plateaus(4, 1) == [0, 1, 2, 3]


def test_attn_s_drop_steps_scale_as_the_escape_time_law():
    lam = np.array([0.4, 0.3, 0.2, 0.1])
    N, lr, init = 31, 0.02, 1e-2
    t = theory.attn_s_drop_steps(lam, N, lr=lr, init=init, rank=1, normalize="mean")
    assert np.allclose(t / t[0], (lam[0] / lam) ** 2)          # ∝ 1/λ_d²
    t2 = theory.attn_s_drop_steps(lam, N, lr=lr, init=2 * init, rank=1, normalize="mean")
    assert np.allclose(t2, t / 2)                              # power law −1 in the initialisation
    t3 = theory.attn_s_drop_steps(lam, N, lr=lr, init=init, rank=8, normalize="mean")
    assert np.allclose(t3, 2 * t)                              # key/query scale 1/√(R(D+1)): v₀ ∝ R^{-1/3}
    # the reference's normalisation is the paper's with converted rate and scale: the same steps
    lr_p, init_p = theory.to_paper_normalisation("attnS", N, lr=lr, init=init)
    assert np.allclose(theory.attn_s_drop_steps(lam, N, lr=lr, init=init, normalize="sum"),
                       theory.attn_s_drop_steps(lam, N, lr=lr_p, init=init_p, normalize="mean"))


def test_logistic_half_time_past_the_final_value_is_nan_without_a_warning():
    import warnings

    s, lam_z = 0.8, 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(theory.logistic_half_time(s, lam_z, 2 * s / lam_z))  # starts above the final value s/λ_z
        assert np.isnan(theory.logistic_half_time(s, lam_z, 0.75 * s / lam_z))  # past half, below the final value
        assert theory.logistic_half_time(s, lam_z, 0.25 * s / lam_z) > 0  # below half: the half-way point is ahead
    # the time it gives is where the closed-form logistic a(t) = (s/λ_z) / (1 + (s/(λ_z a0) − 1) e^{−2st}) is half-way
    for a0 in (1e-8, 1e-3, 0.1 * s / lam_z, 0.49 * s / lam_z):
        t = theory.logistic_half_time(s, lam_z, a0)
        a = (s / lam_z) / (1 + (s / (lam_z * a0) - 1) * np.exp(-2 * s * t))
        assert t > 0 and a == pytest.approx(0.5 * s / lam_z, rel=1e-12)
