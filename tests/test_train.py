import numpy as np
import pytest

from linattn.config import RunConfig
from linattn.training.experiment import run
from linattn.training.train import TrainingDiverged

SMALL = dict(in_dim=3, seq_len=8, trainset_size=200, epoch=150, progress=None)


def small(**kw):
    args = {k: v for k, v in SMALL.items() if k != "progress"}
    args.update(kw)
    return RunConfig(**args)


@pytest.mark.parametrize("engine", ["exact", "autograd"])
@pytest.mark.parametrize("model", ["attnM", "attnS"])
def test_loss_decreases(model, engine):
    h = run(small(model=model, engine=engine, head_num=3, init=0.3, lr=0.05), progress=False).history
    assert h.train_loss.shape == (150,)
    assert h.train_loss[-1] < 0.7 * h.train_loss[0]


def test_mlp_loss_decreases():
    h = run(small(model="mlp", cubic_feat=True, head_num=3, init=0.3, lr=0.05), progress=False).history
    assert h.train_loss[-1] < 0.7 * h.train_loss[0]


def test_diverging_run_names_the_step_and_suggests_a_smaller_lr():
    with pytest.raises(TrainingDiverged) as err:
        run(small(init=1.0, lr=50.0), progress=False)
    assert err.value.step < 150
    assert "smaller learning rate" in str(err.value) and f"step {err.value.step}" in str(err.value)


@pytest.mark.parametrize("engine", ["exact", "autograd"])
def test_reruns_are_bit_identical_and_seeds_differ(engine):
    cfg = dict(engine=engine, head_num=2, init=0.2, lr=0.05, testset_size=20, track_value=True, epoch=40)
    a = run(small(**cfg), progress=False).history
    b = run(small(**cfg), progress=False).history
    c = run(small(seed=11, **cfg), progress=False).history
    for key, col in a.columns().items():
        assert np.array_equal(col, b.columns()[key]), key
    assert not np.allclose(a.train_loss, c.train_loss)


def test_records_test_losses_and_values_every_step():
    res = run(small(model="attnS", head_num=2, rank=2, testset_size=30, track_value=True, epoch=20), progress=False)
    cols = res.history.columns()
    assert list(cols) == ["step", "train_loss", "test_iwl", "test_icl", "value_0", "value_1"]
    assert all(len(c) == 20 for c in cols.values())
    # the tracked value of the first step is the initial v_h[D]
    assert np.allclose([cols["value_0"][0], cols["value_1"][0]], res.init["W_V"][:, -1, -1])


def test_loss_is_recorded_before_each_step():
    res = run(small(epoch=1, init=0.3), progress=False)
    from linattn import objectives
    from linattn.models import build_model

    net = build_model("attnM", res.init)
    assert np.isclose(res.history.train_loss[0], objectives.Autograd(res.datasets.train).value(net), rtol=1e-12)


def test_float32_follows_float64():
    a = run(small(init=0.3, lr=0.02), progress=False).history.train_loss
    b = run(small(init=0.3, lr=0.02, dtype="float32"), progress=False).history.train_loss
    assert a[-1] < 0.7 * a[0]
    assert np.max(np.abs(a - b) / a) < 1e-4


@pytest.mark.parametrize("model", ["attnM", "attnS"])
def test_weights_of_a_model_taken_again_follow_its_training(model):
    """WeightsOf (what gradient descent snapshots with: the parameter list and numpy views made once) gives what
    weights_of gives, after updates in place and after a parameter's storage was replaced, and each call's arrays
    are copies (a snapshot kept does not move with the weights)."""
    import torch

    from linattn.models import build_model
    from linattn.training.plan import draw_checked
    from linattn.training.train import WeightsOf, weights_of

    cfg = small(model=model, head_num=3, init=0.3).validate()
    net = build_model(model, draw_checked(cfg)[1], dtype=torch.float64)
    take = WeightsOf(net)
    kept = take(net)

    def same(a, b):
        return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)

    assert same(kept, weights_of(net))
    with torch.no_grad():
        for p in net.parameters():
            p += 1.0
    assert same(take(net), weights_of(net)) and not same(kept, weights_of(net))
    for p in net.parameters():
        p.data = p.data * 3.0
    assert same(take(net), weights_of(net))
    float32 = build_model(model, draw_checked(cfg)[1], dtype=torch.float32)
    assert same(WeightsOf(float32)(float32), weights_of(float32))
