"""The exact engine's compiled loop (objectives/exact_kernel.c) against its torch step, both in this process."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import linattn
from linattn import RunConfig, objectives
from linattn.models import AttnS, build_model
from linattn.objectives import exact as ex
from linattn.objectives.native import KnownFallback
from linattn.training.keys import trajectory_code_hash
from linattn.training.plan import draw_checked
from linattn.training.train import TrainingDiverged, gradient_descent

CASES = {  # settings well inside the stable range, so the two paths' rounding stays at rounding
    "attnM": dict(model="attnM", head_num=3, init=0.05, lr=0.01),
    "attnS R=1": dict(model="attnS", head_num=4, rank=1, init=0.3, lr=0.02, init_scheme="jan2025"),
    "attnS R=3": dict(model="attnS", head_num=2, rank=3, init=0.1, lr=0.02, init_scheme="jan2025"),
    "mlp": dict(model="mlp", head_num=3, init=0.1, lr=0.02, cubic_feat=True),
}


def _setup(settings, **kw):
    cfg = RunConfig(**dict(dict(in_dim=3, seq_len=10, trainset_size=300, testset_size=100, draws="streams", seed=1),
                           **settings, **kw))
    datasets, init = draw_checked(cfg)
    return cfg, datasets, init


def _train(cfg, datasets, init, kernel, **kw):
    model = build_model(cfg.model, init)
    train, tests = objectives.build(cfg, model, datasets, "cpu")
    train.kernel = kernel
    assert (train.compiled_steps(model, list(tests.values())) is not None) == (kernel == "native")
    return model, gradient_descent(model, train, lr=cfg.lr, progress=False, tests=tests, **kw)


def _close(a, b, rtol=1e-8):
    return np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)) <= rtol


@pytest.mark.parametrize("case", list(CASES))
def test_the_compiled_loop_records_what_the_torch_step_records(case):
    cfg, ds, init = _setup(CASES[case])
    opts = dict(epoch=700, track_value=True, snapshot_every=50)
    (m1, h1), (m2, h2) = (_train(cfg, ds, init, k, **opts) for k in ("native", "torch"))
    assert h1.train_loss[-1] < 0.8 * h1.train_loss[0]  # it learns something
    for name in ("train_loss", "test_iwl", "test_icl"):
        assert _close(getattr(h1, name), getattr(h2, name)), name
    assert np.allclose(h1.values, h2.values, rtol=1e-8, atol=1e-12)
    assert [s for s, _ in h1.snapshots] == [s for s, _ in h2.snapshots] == list(range(0, 700, 50)) + [700]
    for (_, a), (_, b) in zip(h1.snapshots, h2.snapshots):
        assert all(np.allclose(a[k], b[k], rtol=1e-8, atol=1e-12) for k in a)
    for p, q in zip(m1.parameters(), m2.parameters()):
        assert torch.allclose(p, q, rtol=1e-8, atol=1e-12)


def test_ranks_above_one_keep_padding_free_weights_in_step():
    """ATTN_S of rank 3: every one of W_Q, W_K, v moves as in the torch step (no row is left behind)."""
    cfg, ds, init = _setup(CASES["attnS R=3"])
    (m1, _), (m2, _) = (_train(cfg, ds, init, k, epoch=50) for k in ("native", "torch"))
    for (name, p), q in zip(m1.named_parameters(), m2.parameters()):
        start = torch.as_tensor(init[name] if name != "v" else init["W_V"][:, -1])
        assert not torch.equal(p, start) and torch.allclose(p, q, rtol=1e-9, atol=1e-14), name


def test_a_diverging_run_stops_at_the_same_step_with_the_same_weights():
    cfg, ds, init = _setup(dict(CASES["attnS R=1"], lr=40.0))
    steps, weights = [], []
    for kernel in ("native", "torch"):
        model = build_model(cfg.model, init)
        train, _ = objectives.build(cfg, model, ds, "cpu")
        train.kernel = kernel
        with pytest.raises(TrainingDiverged) as got:
            gradient_descent(model, train, lr=cfg.lr, epoch=300, progress=False, start_step=7)
        assert not np.isfinite(got.value.loss)
        steps.append(got.value.step)
        weights.append(list(model.parameters()))
    assert steps[0] == steps[1] > 7
    assert all(torch.allclose(p, q, rtol=1e-8, equal_nan=True) for p, q in zip(*weights))


def test_a_continued_run_lines_up_with_one_that_never_stopped():
    cfg, ds, init = _setup(CASES["attnS R=1"])
    _, whole = _train(cfg, ds, init, "native", epoch=500, snapshot_every=100)
    first = build_model(cfg.model, init)
    train, _ = objectives.build(cfg, first, ds, "cpu")
    gradient_descent(first, train, lr=cfg.lr, epoch=230, progress=False)
    rest = gradient_descent(first, train, lr=cfg.lr, epoch=270, progress=False, start_step=230, snapshot_every=100)
    assert list(rest.step) == list(range(230, 500))
    assert _close(rest.train_loss, whole.train_loss[230:], 1e-12)
    assert [s for s, _ in rest.snapshots] == [300, 400, 500]


def test_unknown_models_and_float32_keep_the_torch_step():
    """A subclass may change what the model computes: only the exact classes take the compiled loop."""
    class Sub(AttnS):
        pass

    cfg, ds, init = _setup(CASES["attnS R=1"])
    model = build_model(cfg.model, init)
    train, tests = objectives.build(cfg, model, ds, "cpu")
    assert train.compiled_steps(model, list(tests.values())) is not None
    sub = Sub(*(torch.as_tensor(init[k]) for k in ("W_Q", "W_K", "W_V")))
    assert train.compiled_steps(sub) is None
    assert train.compiled_steps(model.to(torch.float32)) is None


def test_without_a_compiler_it_warns_once_and_takes_the_torch_step(monkeypatch):
    def broken(*args):
        raise RuntimeError("no C compiler")

    monkeypatch.setattr(ex.native, "load", broken)
    monkeypatch.setattr(ex, "_kernel", lambda: broken())
    monkeypatch.setattr(ex, "_compile_failed", False)
    cfg, ds, init = _setup(CASES["mlp"])
    ref = _train(cfg, ds, init, "torch", epoch=100)[1].train_loss
    model = build_model(cfg.model, init)
    train, _ = objectives.build(cfg, model, ds, "cpu")
    with pytest.warns(KnownFallback, match="no C compiler"):
        h = gradient_descent(model, train, lr=cfg.lr, epoch=100, progress=False)
    assert np.array_equal(h.train_loss, ref) and ex._compile_failed
    assert train.compiled_steps(model) is None  # silently, from then on


def test_an_edit_of_the_exact_kernel_changes_the_run_key(tmp_path):
    package = Path(linattn.__file__).parent
    same, edited = (tmp_path / name / "linattn" for name in ("same", "edited"))
    for copy in (same, edited):
        shutil.copytree(package, copy, ignore=shutil.ignore_patterns("companion", "__pycache__"))
    kernel = edited / "objectives" / ex.KERNEL_SOURCE.name
    kernel.write_text(kernel.read_text().replace("n.r[i] *= 2.0;", "n.r[i] *= 2.0000001;"))
    assert trajectory_code_hash(same) == trajectory_code_hash(package) != trajectory_code_hash(edited)
