"""Gradient flow: the η → 0 limit of gradient descent, on GD's step axis (t/τ = 2·lr·step)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from linattn import cli, data, models, objectives, theory
from linattn.config import ConfigError, RunConfig
from linattn.flow import gradient_flow
from linattn.experiment import run
from linattn.train import gradient_descent


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
