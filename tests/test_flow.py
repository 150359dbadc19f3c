"""Gradient flow: the η → 0 limit of gradient descent, on GD's step axis (t/τ = 2·lr·step)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from linattn import cli, data, models, objectives, theory
from linattn.config import ConfigError, RunConfig, log_steps
from linattn.training.experiment import run
from linattn.training.flow import (
    BilinearLoss,
    _Bilinear,
    _Vectorised,
    _vectorised,
    gradient_flow,
    loss_hessian,
    moving_entries,
)
from linattn.training.keys import run_key
from linattn.training.memory import memory_parts
from linattn.training.plan import draw
from linattn.training.result import load_run, write_outputs
from linattn.training.train import gradient_descent


def _problem(model="attnS", head_num=2, init=0.3, seed=0):
    ds = data.make_datasets(in_dim=3, seq_len=8, trainset_size=200, seed=seed)
    w = models.init_weights(model, head_num=head_num, in_dim=3, init=init, init_scheme="jan2025",
                            rng=np.random.default_rng(seed))
    net = models.build_model(model, w)
    return ds, w, objectives.Exact.from_data(net, ds.train, normalize="mean")


class _Square:
    """L(θ) = Σθ², whose flow τ θ̇ = −½ ∂L/∂θ = −θ is θ(t) = θ(0) e^{−t/τ}: L(t) = L(0) e^{−2t/τ}."""

    def value(self, model):
        return float((model.theta.detach() ** 2).sum())

    def value_and_grad(self, model):
        loss = (model.theta ** 2).sum()
        loss.backward()
        return loss.item()


def test_time_axis_is_theory_steps_to_time():
    """Row k of the flow is the flow at t/τ = theory.steps_to_time(k): the package's one step ↔ time conversion."""
    net = torch.nn.Module()
    net.theta = torch.nn.Parameter(torch.tensor([1.0, -0.5], dtype=torch.float64))
    lr, epochs = 0.02, 60
    hist = gradient_flow(net, _Square(), lr=lr, epoch=epochs, rtol=1e-10, atol=1e-14)
    t = theory.steps_to_time(np.arange(epochs), lr, normalize="mean")
    assert np.allclose(hist.train_loss, 1.25 * np.exp(-2 * t), rtol=1e-7)


@pytest.mark.slow
def test_small_learning_rate_gd_converges_to_the_flow():
    """GD is forward Euler on the flow: its loss curve approaches the flow's as O(lr) at fixed t/τ."""
    ds, w, obj = _problem()
    T = 40.0  # t/τ covered: through the first drop
    flow = gradient_flow(models.build_model("attnS", w), obj, lr=T / 2 / 1000, epoch=1001).train_loss
    assert flow[-1] < 0.7 * flow[0]
    errors = []
    for steps in (250, 1000):
        lr = T / 2 / steps
        gd = gradient_descent(models.build_model("attnS", w), obj, lr=lr, epoch=steps + 1, progress=False)
        on_gd_axis = flow[:: 1000 // steps]
        errors.append(np.max(np.abs(gd.train_loss - on_gd_axis) / on_gd_axis))
    assert errors[1] < 3e-3
    assert 3.0 < errors[0] / errors[1] < 5.0  # first order: 4× more steps, 4× smaller error


def test_flow_conserves_the_balance_that_gd_breaks():
    """Under the flow ‖v_h‖² − ‖W_K[h]‖² is conserved (rescaling v_h by α and W_K[h] by 1/α leaves ATTN_S's
    output unchanged); GD with a large step drifts."""
    ds, w, obj = _problem()

    def balance(net):
        return (net.v.detach() ** 2).sum(1) - (net.W_K.detach() ** 2).sum((1, 2))

    net_f, net_g = models.build_model("attnS", w), models.build_model("attnS", w)
    start = balance(net_f)
    gradient_flow(net_f, obj, lr=0.05, epoch=200)
    gradient_descent(net_g, obj, lr=0.05, epoch=200, progress=False)
    moved = (net_f.v.detach() - torch.as_tensor(w["W_V"][:, -1])).abs().max()
    assert moved > 0.1
    assert torch.max(torch.abs(balance(net_f) - start)) < 1e-6
    assert torch.max(torch.abs(balance(net_g) - start)) > 1e-4


def test_flow_history_matches_gd_layout_with_tests_and_values():
    ds = data.make_datasets(in_dim=3, seq_len=8, trainset_size=100, testset_size=50, icl=0.5, seed=2)
    w = models.init_weights("attnM", head_num=2, in_dim=3, init=0.3, rng=np.random.default_rng(1))
    net = models.build_model("attnM", w)
    tests = {k: objectives.Exact.from_data(net, getattr(ds, k)) for k in ("test_iwl", "test_icl")}
    obj = objectives.Exact.from_data(net, ds.train)
    h = gradient_flow(net, obj, lr=1e-3, epoch=30, tests=tests, track_value=True, snapshot_every=10)
    assert list(h.columns()) == ["step", "train_loss", "test_iwl", "test_icl", "value_0", "value_1"]
    assert len(h.train_loss) == 30 and [s for s, _ in h.snapshots] == [0, 10, 20, 30]
    # row 0 is the initial point, the model ends at t/τ = 2·lr·epochs like GD's last update
    ref = models.build_model("attnM", w)
    assert h.train_loss[0] == pytest.approx(obj.value(ref), rel=1e-14)
    assert h.test_icl[0] == pytest.approx(tests["test_icl"].value(ref), rel=1e-14)
    assert np.allclose(h.snapshots[-1][1]["W_V"][:, -1], net.v.detach().numpy())


def test_run_and_cli_take_the_flow(tmp_path):
    cfg = dict(model="attnM", head_num=2, in_dim=3, seq_len=8, trainset_size=None, epoch=50, lr=0.01, init=0.1,
               draws="streams")
    gd = run(RunConfig(**cfg), progress=False).history.train_loss
    fl = run(RunConfig(**cfg, dynamics="flow")).history.train_loss
    assert np.max(np.abs(gd - fl) / fl) < 0.05 and np.any(gd != fl)
    with pytest.raises(ConfigError):
        RunConfig(dynamics="euler").validate()
    out = tmp_path / "flow"
    assert cli.main(["train", "--model", "attnM", "--head", "2", "--in_dim", "3", "--seq_len", "8",
                     "--trainset_size", "inf", "--epoch", "50", "--lr", "0.01", "--init", "0.1",
                     "--dynamics", "flow", "--draws", "streams", "--out", str(out), "--quiet"]) == 0
    info = json.loads((out / "run.json").read_text())
    assert info["settings"]["dynamics"] == "flow"
    assert info["final_train_loss"] == pytest.approx(fl[-1], rel=1e-12)


# ---------------------------------------------------------------- the Hessian, recorded steps, long flows

def _attn_m_problem(seed=1):
    cfg = RunConfig(model="attnM", head_num=3, in_dim=2, seq_len=8, init=1e-3, lr=0.01, trainset_size=60, icl=0.4,
                    testset_size=0, white_cov=True, draws="streams", init_scheme="jan2025", seed=3)
    datasets, w = draw(cfg)
    rng = np.random.default_rng(seed)
    weights = {k: rng.normal(size=v.shape) for k, v in w.items()}
    model = models.build_model("attnM", weights, dtype=torch.float64)
    return cfg, model, objectives.Exact.from_data(model, datasets.train)


def test_attn_m_writes_out_the_combined_weights_derivatives_as_autograd_computes_them():
    _, model, _ = _attn_m_problem()
    J = model.combined_jacobian()
    np.testing.assert_allclose(J, models._Model.combined_jacobian(model), atol=1e-13)
    g = torch.as_tensor(np.random.default_rng(2).normal(size=J.shape[0]))
    C = model.combined_curvature(g)
    assert C.abs().max() > 0.1  # the test is not of two zero matrices
    np.testing.assert_allclose(C, models._Model.combined_curvature(model, g), atol=1e-13)


def test_loss_hessian_is_the_derivative_of_the_gradient():
    """∇²L of flow.loss_hessian against central differences of the engine's gradient (autograd's or written out)."""
    _, model, objective = _attn_m_problem()
    vec = _Vectorised(model, objective, lr=1.0)
    theta = vec.get()
    full = loss_hessian(model, objective.moments)
    assert not np.all(vec.moving) and np.all(full[~vec.moving] == 0)  # a weight that never moves: no curvature
    H = full[np.ix_(vec.moving, vec.moving)]
    eps = 1e-6
    fd = np.stack([(vec.rhs(0, theta - eps * e) - vec.rhs(0, theta + eps * e)) / (2 * eps)
                   for e in np.eye(theta.size)], axis=1)
    assert np.abs(fd).max() > 1.0
    np.testing.assert_allclose(H, fd, atol=1e-6 * np.abs(fd).max())
    np.testing.assert_allclose(H, H.T, atol=1e-12 * np.abs(H).max())


def test_the_flow_records_the_chosen_steps_and_takes_the_jacobian():
    """At chosen steps the flow equals the every-step flow there; with the analytic Jacobian (LSODA, BDF) too."""
    cfg, model, objective = _attn_m_problem()
    w = {k: v.detach().clone() for k, v in model.state_dict().items()}
    every = gradient_flow(model, objective, lr=0.01, epoch=300)
    chosen = np.array([0, 7, 100, 299, 300])
    for method in ("LSODA", "BDF"):
        model.load_state_dict(w)
        h = gradient_flow(model, objective, lr=0.01, epoch=300, record=chosen, jacobian=True, method=method)
        assert np.array_equal(h.step, chosen) and h.train_loss.shape == (5,)
        np.testing.assert_allclose(h.train_loss[:4], every.train_loss[chosen[:4]], rtol=1e-6)
        assert h.train_loss[-1] == pytest.approx(objective.value(model), rel=1e-12)  # the model ends at k = epoch


# ---------------------------------------------------------------- the moving weights and the bilinear loss

def _random_model(name, seed=0, **opts):
    cfg = RunConfig(model=name, head_num=3, in_dim=3, seq_len=6, trainset_size=40, icl=0.5, testset_size=0,
                    draws="streams", init_scheme="dec2024", cubic_feat=name == "mlp",
                    rank=2 if name == "attnS" else 1, seed=seed)
    datasets, w = draw(cfg)
    rng = np.random.default_rng(seed)
    return models.build_model(name, {k: rng.normal(size=v.shape) for k, v in w.items()}, **opts), datasets


@pytest.mark.parametrize("name, softmax", [("attnM", False), ("attnM", True), ("attnS", False), ("mlp", False)])
def test_the_fixed_entries_get_no_gradient_from_autograd(name, softmax):
    """Every entry a model declares fixed has a zero gradient by autograd through forward() on random weights and
    data (so neither descent nor flow moves it), and the entries left moving have nonzero ones."""
    model, datasets = _random_model(name, softmax=softmax)
    objectives.Autograd(datasets.train).value_and_grad(model)
    grad = torch.nn.utils.parameters_to_vector([p.grad for p in model.parameters()]).numpy()
    moving = moving_entries(model)
    assert np.all(grad[~moving] == 0.0)
    assert np.all(grad[moving] != 0.0)
    assert (~moving).sum() == {"attnM": 3 * 4, "attnS": 3 * 2, "mlp": 0}[name]  # the label row / column


class _AllWeights(models.AttnM):
    """ATTN_M without its declarations: the flow integrates every weight through the engine's torch step."""

    def fixed_entries(self):
        return [None, None]

    def bilinear_map(self):
        return None


def test_the_flow_of_the_moving_weights_is_the_flow_of_all_weights():
    """ATTN_M's flow on its moving weights, with numpy's gradient and Hessian, is the flow of every weight through
    the engine (same losses at tight tolerance), and its label rows end where they started."""
    cfg, model, objective = _attn_m_problem()
    full = _AllWeights(model.W_KQ.detach(), torch.zeros(3, 3, 3, dtype=torch.float64).index_copy(
        1, torch.tensor([2]), model.v.detach()[:, None, :]))
    assert type(_vectorised(model, objective, 1.0)) is _Bilinear
    assert type(_vectorised(full, objective, 1.0)) is _Vectorised and np.all(moving_entries(full))
    label_rows = model.W_KQ.detach()[:, -1].clone()
    chosen = np.array([0, 30, 300, 3000])
    a, b = (gradient_flow(net, objective, lr=0.01, epoch=3000, record=chosen, jacobian=True, rtol=1e-10)
            for net in (model, full))
    assert a.train_loss[-1] < 0.9 * a.train_loss[0]
    np.testing.assert_allclose(a.train_loss, b.train_loss, rtol=1e-8)
    np.testing.assert_allclose(model.v.detach(), full.v.detach(), rtol=1e-6, atol=1e-9)
    assert torch.equal(model.W_KQ.detach()[:, -1], label_rows)


@pytest.mark.parametrize("name", ["attnM", "mlp"])
def test_the_bilinear_loss_has_autograds_gradient_and_hessian(name):
    """BilinearLoss on a model's bilinear_map: its combined weight is combined(), its loss, gradient and Hessian in
    the moving weights are autograd's of the moments' quadratic form of combined() (to 1e-12 relative), at random
    weights."""
    model, datasets = _random_model(name)
    objective = objectives.Exact.from_data(model, datasets.train)
    loss = BilinearLoss(model.bilinear_map(), len(model.value_weights()), objective.moments)
    moving = torch.as_tensor(moving_entries(model))
    full = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    theta = full[moving].numpy()

    mom = objective.moments

    def of_moving(th):  # L = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩ spelled out (moments.loss has no second derivative)
        m = models._at(model, full.masked_scatter(moving, th), model.combined)
        return mom.yy - 2 * m @ mom.yT + m @ mom.TT @ m

    np.testing.assert_allclose(loss.combined(theta), model.combined().detach().numpy(), rtol=1e-13, atol=1e-15)
    value, grad = loss.loss_and_grad(theta)
    th = torch.as_tensor(theta).requires_grad_()
    auto = of_moving(th)
    auto.backward()
    assert value == pytest.approx(auto.item(), rel=1e-12)
    np.testing.assert_allclose(grad, th.grad.numpy(), rtol=0, atol=1e-12 * np.abs(th.grad.numpy()).max())
    hess = torch.autograd.functional.hessian(of_moving, torch.as_tensor(theta)).numpy()
    assert np.abs(hess).max() > 1.0
    np.testing.assert_allclose(loss.hessian(theta), hess, rtol=0, atol=1e-12 * np.abs(hess).max())


def test_the_numpy_flow_is_taken_only_where_its_numbers_are_the_engines():
    """_Bilinear for a float64 ATTN_M or MLP on the exact engine; the engine's own step for ATTN_S (trilinear), a
    float32 model or the autograd engine."""
    model, datasets = _random_model("attnM")
    exact = objectives.Exact.from_data(model, datasets.train)
    assert type(_vectorised(model, exact, 1.0)) is _Bilinear
    assert type(_vectorised(model, objectives.Autograd(datasets.train), 1.0)) is _Vectorised
    assert type(_vectorised(model.to(torch.float32), exact, 1.0)) is _Vectorised
    attn_s, datasets = _random_model("attnS")
    assert type(_vectorised(attn_s, objectives.Exact.from_data(attn_s, datasets.train), 1.0)) is _Vectorised


def test_the_flow_refuses_what_it_cannot_honour():
    cfg, model, objective = _attn_m_problem()
    for kwargs, field in ((dict(method="Euler"), "method"), (dict(jacobian=True, method="RK45"), "method"),
                          (dict(record=[0, 5, 5]), "record"), (dict(record=[0, 11]), "record"),
                          (dict(record=[0.5, 2]), "record")):
        with pytest.raises(ConfigError) as err:
            gradient_flow(model, objective, lr=0.01, epoch=10, **kwargs)
        assert err.value.field == field
    with pytest.raises(ConfigError) as err:
        gradient_flow(model, _Square(), lr=0.01, epoch=10, jacobian=True)  # a loss without moments
    assert err.value.field == "engine"


def test_log_steps_are_a_grid_on_a_log_axis_that_a_longer_run_extends():
    steps = log_steps(10**4, 2)
    assert steps.tolist() == [0, 1, 3, 10, 32, 100, 316, 1000, 3162, 10000]
    longer = log_steps(10**6, 2)
    assert set(steps) <= set(longer) and longer[-1] == 10**6
    assert log_steps(5, 4).tolist() == [0, 1, 2, 3, 5]  # 10^(1/4), 10^(2/4) round to 2 and 3


def test_a_flow_run_records_sparse_steps_and_reads_back(tmp_path):
    """RunConfig(record=...) is a flow run's recorded steps: trained by run, in its key, written and read back, and
    the memory estimate counts the recorded rows, not the steps."""
    base = dict(model="attnM", head_num=2, in_dim=3, seq_len=8, trainset_size=None, lr=0.01, init=0.1,
                draws="streams", dynamics="flow")
    long = RunConfig(**base, epoch=10**7, record=3)
    result = run(long)
    assert np.array_equal(result.history.step, log_steps(10**7, 3))
    dense = run(RunConfig(**base, epoch=2000)).history
    np.testing.assert_allclose(result.history.train_loss[:11], dense.train_loss[result.history.step[:11]],
                               rtol=1e-6)
    write_outputs(result, tmp_path / "r")
    back = load_run(tmp_path / "r")
    assert back.config == long and np.array_equal(back.history.step, result.history.step)
    np.testing.assert_array_equal(back.history.train_loss, result.history.train_loss)
    assert run_key(long) != run_key(RunConfig(**base, epoch=10**7, record=4))
    assert memory_parts(long)["the recorded history"] < 1000 < memory_parts(
        RunConfig(**base, epoch=10**7))["the recorded history"]
    explicit = RunConfig(**base, epoch=100, record=(0, 50, 100))
    assert run(explicit).history.step.tolist() == [0, 50, 100]


def test_record_is_checked_as_a_setting():
    for record, dynamics in ((0, "flow"), ((3, 2), "flow"), ((), "flow"), ((0, 200), "flow"), (4, "gd"),
                             ("log", "flow")):
        with pytest.raises(ConfigError) as err:
            RunConfig(epoch=100, record=record, dynamics=dynamics).validate()
        assert err.value.field == "record"


def test_the_flow_tolerance_is_a_flow_setting_that_reaches_the_integrator():
    """flow_rtol: checked as a setting (positive, flow runs only), in the run key, and handed to the integrator: a
    looser tolerance gives nearby but different losses."""
    base = dict(model="attnM", head_num=2, in_dim=3, seq_len=8, trainset_size=None, lr=0.01, init=0.1,
                draws="streams", dynamics="flow", epoch=10**5, record=2)
    for bad in (dict(flow_rtol=0.0), dict(flow_rtol=1e-4, dynamics="gd", record=None)):
        with pytest.raises(ConfigError) as err:
            RunConfig(**{**base, **bad}).validate()
        assert err.value.field == "flow_rtol"
    tight, loose = RunConfig(**base), RunConfig(**base, flow_rtol=1e-3)
    assert run_key(tight) != run_key(loose)
    a, b = run(tight).history.train_loss, run(loose).history.train_loss
    assert not np.array_equal(a, b)
    np.testing.assert_allclose(b, a, rtol=0.05)



def test_the_bilinear_hessian_is_a_new_array_at_each_call():
    """BilinearLoss writes its Hessian's blocks into one buffer made once: the arrays it returns are copies, so a
    Hessian kept by a caller is not changed by the next one, and the Jacobian the flow hands the integrator is
    −lr times the same numbers."""
    model, datasets = _random_model("attnM")
    objective = objectives.Exact.from_data(model, datasets.train)
    loss = BilinearLoss(model.bilinear_map(), len(model.value_weights()), objective.moments)
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach()[
        torch.as_tensor(moving_entries(model))].numpy()
    first = loss.hessian(theta)
    kept = first.copy()
    second = loss.hessian(2.0 * theta)
    assert np.array_equal(first, kept) and not np.array_equal(first, second)
    assert np.array_equal(loss.hessian(theta), kept)
