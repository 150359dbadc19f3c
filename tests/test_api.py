"""The public Python API (``import linattn``): run with given weights and data, the final weights' round trip,
load_run, input validation, the exact engine's linearity check and the device choice."""

import dataclasses
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch

import linattn
from linattn import data, models, objectives
from linattn.cli import main
from linattn.config import ConfigError, RunConfig
from linattn.objectives import device_for as pick_device

SMALL = dict(in_dim=3, seq_len=6, trainset_size=40, epoch=30, lr=0.05, init=0.3, head_num=2, draws="streams")
MODELS = [("attnM", {}), ("attnS", {"rank": 2}), ("mlp", {"cubic_feat": True})]


def cfg_of(model, extra, **kw):
    return linattn.RunConfig(model=model, **{**SMALL, **extra, **kw})


def predict(model, weights, X):
    """ŷ straight from the init.npz-layout arrays, with numpy (reference normalisation: no scale)."""
    D = X.shape[-1] - 1
    xq = X[:, -1]
    if model == "mlp":
        b = np.einsum("pn,pnd->pd", X[:, :-1, -1], X[:, :-1, :-1])
        return np.einsum("pi,pj->pij", b, xq[:, :D]).reshape(len(X), -1) @ weights["W1"].T @ weights["w2"]
    W_KQ = weights["W_KQ"] if model == "attnM" else np.einsum("hra,hrb->hab", weights["W_Q"], weights["W_K"])
    S = np.einsum("pmb,pmc->pbc", X, X)
    return np.einsum("pa,hab,pbc,hc->p", xq, W_KQ, S, weights["W_V"][:, -1])


@pytest.mark.parametrize("model,extra", MODELS)
def test_final_weights_rebuild_the_trained_model(model, extra):
    res = linattn.run(cfg_of(model, extra), progress=False)
    assert set(res.weights) == set(res.init) and all(res.weights[k].shape == res.init[k].shape for k in res.init)
    assert any(not np.allclose(res.weights[k], res.init[k]) for k in res.init)  # it trained
    X = torch.as_tensor(res.datasets.train.X, dtype=torch.float64)
    rebuilt = linattn.build_model(model, res.weights)
    with torch.no_grad():
        assert torch.equal(rebuilt(X), res.model(X))
    # the arrays mean what init.npz's mean: the model's output follows from them by the paper's formulas
    assert np.allclose(predict(model, res.weights, res.datasets.train.X), res.model(X).detach().numpy(), rtol=1e-10)
    if model != "mlp":  # W_V rows other than v_h never enter the model: they keep their initial values
        assert np.array_equal(res.weights["W_V"][:, :-1], np.asarray(res.init["W_V"], dtype=np.float64)[:, :-1])
    # and the final weights continue the run: one more step from them equals the step after the last one
    longer = linattn.run(cfg_of(model, extra, epoch=SMALL["epoch"] + 1), progress=False)
    again = linattn.run(cfg_of(model, extra, epoch=1), init=res.weights, progress=False)
    assert again.history.train_loss[0] == pytest.approx(longer.history.train_loss[-1], rel=1e-12)


def test_run_uses_the_given_init_and_data_and_records_their_sizes():
    ds, _ = linattn.draw(linattn.RunConfig(in_dim=3, seq_len=9, trainset_size=30, draws="streams", seed=4))
    w = linattn.init_weights("attnS", head_num=2, in_dim=3, rank=1, init=0.4, rng=np.random.default_rng(7))
    cfg = linattn.RunConfig(model="attnS", head_num=2, in_dim=3, epoch=20, lr=0.05, init=0.01)
    res = linattn.run(cfg, init=w, data=linattn.Sequences(ds.train.X, ds.train.y), progress=False)
    assert all(np.array_equal(res.init[k], w[k]) for k in w)
    first = np.mean((ds.train.y - predict("attnS", w, ds.train.X)) ** 2)
    assert res.history.train_loss[0] == pytest.approx(first, rel=1e-10)
    assert (res.config.trainset_size, res.config.seq_len, res.config.testset_size) == (30, 9, 0)
    assert res.datasets.w_fix is None and res.datasets.test_icl is None
    x = ds.train.X[..., :-1].reshape(-1, 3)
    assert np.allclose(res.datasets.cov, x.T @ x / len(x))
    # a pair (X, y) is the same as a Sequences
    pair = linattn.run(cfg, init=w, data=(ds.train.X, ds.train.y), progress=False)
    assert np.array_equal(pair.history.train_loss, res.history.train_loss)


def test_drawn_datasets_and_init_handed_back_reproduce_the_run():
    cfg = linattn.RunConfig(model="attnM", head_num=2, in_dim=3, seq_len=6, trainset_size=40, testset_size=10,
                            epoch=15, lr=0.05, init=0.3)
    plain = linattn.run(cfg, progress=False)
    ds, init = linattn.draw(cfg)
    again = linattn.run(cfg, init=init, data=ds, progress=False)
    for key, col in plain.history.columns().items():
        assert np.array_equal(col, again.history.columns()[key]), key
    with pytest.raises(ConfigError, match="no test sets"):
        linattn.run(cfg, data=ds.train)


@pytest.mark.slow
def test_acceptance_example_in_a_fresh_interpreter():
    code = textwrap.dedent("""
        import numpy as np, linattn
        ds = linattn.draw(linattn.RunConfig(in_dim=4, seq_len=8, trainset_size=50, draws="streams"))[0]
        X, y = ds.train.X, ds.train.y
        my_weights = linattn.init_weights("attnS", head_num=3, in_dim=4, rank=1, init=0.3,
                                          rng=np.random.default_rng(0))
        res = linattn.run(linattn.RunConfig(model="attnS", head_num=3, rank=1, in_dim=4, epoch=500, lr=0.05,
                                            init=0.3), init=my_weights, data=linattn.Sequences(X, y))
        net = linattn.build_model("attnS", res.weights)
        print(sorted(res.weights), res.history.train_loss[-1] < res.history.train_loss[0], type(net).__name__)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[-2] == "['W_K', 'W_Q', 'W_V'] True AttnS"


def test_wrong_init_is_one_value_error_naming_keys_and_shapes():
    cfg = linattn.RunConfig(model="attnS", head_num=3, rank=1, in_dim=4, epoch=5, draws="streams")
    w = linattn.init_weights("attnS", head_num=3, in_dim=4, rank=1, rng=np.random.default_rng(0))
    old_layout = {"W_Q": w["W_Q"], "W_K": w["W_K"], "v": w["W_V"][:, -1]}
    with pytest.raises(ValueError) as err:
        linattn.run(cfg, init=old_layout)
    msg = str(err.value)
    assert "W_Q (3, 1, 5), W_K (3, 1, 5), W_V (3, 5, 5)" in msg and "missing W_V" in msg and "unexpected v" in msg
    with pytest.raises(ValueError, match=r"wrong shape W_Q \(2, 1, 5\)"):
        linattn.run(cfg, init={**w, "W_Q": w["W_Q"][:2]})
    with pytest.raises(ValueError, match="missing W_V"):
        linattn.build_model("attnS", old_layout)
    with pytest.raises(ValueError, match="non-finite"):
        linattn.run(cfg, init={**w, "W_V": np.full_like(w["W_V"], np.nan)})
    with pytest.raises(ValueError, match="in_dim = 4"):
        linattn.run(cfg, data=data.make_datasets(in_dim=3, seq_len=5, trainset_size=10).train)


def test_load_run_reads_back_what_train_wrote(tmp_path):
    flags = ["--model", "attnS", "--rank", "2", "--head", "2", "--in_dim", "3", "--seq_len", "6",
             "--trainset_size", "40", "--testset_size", "8", "--epoch", "25", "--lr", "0.05", "--init", "0.3",
             "--track_value", "--quiet"]
    assert main(["train", *flags, "--save-data", "--out", str(tmp_path / "a")]) == 0
    assert main(["train", *flags, "--out", str(tmp_path / "b")]) == 0
    cfg = linattn.RunConfig(model="attnS", rank=2, head_num=2, in_dim=3, seq_len=6, trainset_size=40,
                            testset_size=8, epoch=25, lr=0.05, init=0.3, track_value=True)
    ref = linattn.run(cfg, progress=False)
    a, b = linattn.load_run(tmp_path / "a"), linattn.load_run(tmp_path / "b")
    for loaded in (a, b):
        assert loaded.config == cfg and loaded.engine == ref.engine
        for key, col in ref.history.columns().items():
            assert np.allclose(loaded.history.columns()[key], col, rtol=1e-9, atol=0), key
    assert all(np.array_equal(a.weights[k], ref.weights[k]) for k in ref.weights)
    assert all(np.array_equal(a.init[k], ref.init[k]) for k in ref.init)
    assert np.array_equal(a.datasets.train.X, ref.datasets.train.X)
    assert np.array_equal(a.datasets.test_icl.y, ref.datasets.test_icl.y)
    X = torch.as_tensor(ref.datasets.train.X, dtype=torch.float64)
    with torch.no_grad():
        assert torch.equal(a.model(X), ref.model(X))
    # without --save-data: the weights are there all the same, the data are drawn again from the settings on use
    assert all(np.array_equal(b.weights[k], ref.weights[k]) for k in ref.weights)
    assert not (tmp_path / "b" / "data.npz").exists()
    assert np.array_equal(b.datasets.train.X, ref.datasets.train.X) and np.array_equal(b.datasets.cov, ref.datasets.cov)
    assert isinstance(a, linattn.RunResult) and a.path == tmp_path / "a" and a.info["settings"] == cfg.to_dict()
    with pytest.raises(FileNotFoundError, match="no loss.csv"):
        linattn.load_run(tmp_path)


def test_sequences_validate_shape_values_and_the_query_label():
    X = np.random.default_rng(0).normal(size=(5, 4, 3))
    X[:, -1, -1] = 0.0
    y = np.ones(5)
    assert len(linattn.Sequences(X, y)) == 5
    assert linattn.Sequences(X.astype(int), y.astype(int)).X.dtype == np.float64
    with pytest.raises(ValueError, match=r"X must have shape \(P, seq_len, D\+1\)"):
        linattn.Sequences(X[0], y)
    with pytest.raises(ValueError, match=r"y must have shape \(P,\) = \(5,\)"):
        linattn.Sequences(X, y[:4])
    bad = X.copy()
    bad[2, 1, 0] = np.nan
    with pytest.raises(ValueError, match="X must be finite, but 1 of its 60 entries"):
        linattn.Sequences(bad, y)
    with pytest.raises(ValueError, match="y must be finite"):
        linattn.Sequences(X, np.array([1, 2, np.inf, 4, 5]))
    leak = X.copy()
    leak[[1, 3], -1, -1] = y[[1, 3]]
    with pytest.raises(ValueError, match=r"nonzero in 2 of 5 sequences: the model would see the target"):
        linattn.Sequences(leak, y)


class DoubledForward(models.AttnS):
    """ATTN_S whose forward pass is changed (twice the output): no longer features() @ combined()."""

    def forward(self, X, scale=1.0):
        return 2.0 * super().forward(X, scale)


def test_exact_engine_refuses_a_model_whose_forward_is_changed():
    ds = data.make_datasets(in_dim=3, seq_len=6, trainset_size=50, seed=1)
    w = models.init_weights("attnS", head_num=2, in_dim=3, rank=1, init=0.5, rng=np.random.default_rng(2))
    plain, changed = models.build_model("attnS", w), DoubledForward(w["W_Q"], w["W_K"], w["W_V"])
    assert isinstance(objectives.Exact.from_data(plain, ds.train), objectives.Exact)
    assert isinstance(objectives.Exact.from_data(models.build_model("attnS", w, dtype=torch.float32), ds.train),
                      objectives.Exact)  # float32 weights are checked in float64, not refused
    with pytest.raises(ValueError, match="DoubledForward.forward.*engine=.autograd."):
        objectives.Exact.from_data(changed, ds.train)
    silent = {**w, "W_V": np.zeros_like(w["W_V"])}  # every prediction 0 at these weights: still caught
    with pytest.raises(ValueError, match="DoubledForward.forward"):
        objectives.Exact.from_data(DoubledForward(silent["W_Q"], silent["W_K"], silent["W_V"]), ds.train)
    with pytest.raises(ValueError, match="the population engine would train DoubledForward"):
        objectives.Population.of(changed, cov=ds.cov, seq_len=6)
    with pytest.warns(UserWarning, match="falling back"):
        obj = objectives.Exact.from_data(changed, ds.train, fallback=True)
    assert isinstance(obj, objectives.Autograd)
    with torch.no_grad():
        direct = float(((changed(torch.as_tensor(ds.train.X)) - torch.as_tensor(ds.train.y)) ** 2).mean())
    assert obj.value(changed) == pytest.approx(direct, rel=1e-12)
    with warnings.catch_warnings():  # a model that passes gives no warning with fallback=True either
        warnings.simplefilter("error")
        assert isinstance(objectives.Exact.from_data(plain, ds.train, fallback=True), objectives.Exact)


def test_device_auto_is_the_cpu_for_exact_and_population():
    assert pick_device("auto", "exact") == pick_device("auto", "population") == "cpu"
    assert pick_device("auto", "autograd") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert linattn.run(cfg_of("attnM", {}, epoch=2), progress=False).device == "cpu"
    pop = linattn.RunConfig(trainset_size=None, draws="streams", in_dim=2, seq_len=4, epoch=2)
    assert linattn.run(pop, progress=False).device == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_a_gpu_is_refused():
    with pytest.raises(ConfigError, match="sees no CUDA device"):
        linattn.RunConfig(device="cuda").validate()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("engine", ["exact", "autograd"])
def test_cuda_smoke(engine):
    cpu = linattn.run(cfg_of("attnS", {"rank": 2}, engine=engine, device="cpu"), progress=False)
    gpu = linattn.run(cfg_of("attnS", {"rank": 2}, engine=engine, device="cuda"), progress=False)
    assert gpu.device == "cuda" and next(gpu.model.parameters()).is_cuda
    assert np.allclose(gpu.history.train_loss, cpu.history.train_loss, rtol=1e-9)
    assert all(np.allclose(gpu.weights[k], cpu.weights[k], rtol=1e-8, atol=1e-12) for k in cpu.weights)


@pytest.mark.parametrize("name", ["trainset_size", "testset_size"])
def test_a_set_of_one_sequence_is_refused(name):
    with pytest.raises(ConfigError, match=f"^{name}=1 is refused: the inputs are centred"):
        linattn.RunConfig(**{name: 1}).validate()
    # what it would have trained on: a single centred sequence has all-zero inputs
    one = data.make_datasets(in_dim=2, seq_len=4, trainset_size=1).train
    assert not np.any(one.X[..., :-1])


@pytest.mark.parametrize("keep", ["test_iwl", "test_icl"])
def test_a_run_with_one_test_set_records_and_writes_just_that_one(keep, tmp_path):
    from dataclasses import replace

    from linattn.training.result import write_outputs
    cfg = linattn.RunConfig(model="attnM", head_num=2, in_dim=3, seq_len=6, trainset_size=40, testset_size=8,
                            epoch=5, lr=0.05, init=0.3)
    drawn, init = linattn.draw(cfg)
    other = "test_icl" if keep == "test_iwl" else "test_iwl"
    res = linattn.run(cfg, init=init, data=replace(drawn, **{other: None}), progress=False)
    cols = res.history.columns()
    assert keep in cols and other not in cols and len(cols[keep]) == 5
    write_outputs(res, tmp_path / "out")
    header = (tmp_path / "out" / "loss.csv").read_text().splitlines()[0].split(",")
    assert header == ["step", "train_loss", keep]
    assert np.allclose(linattn.load_run(tmp_path / "out").history.columns()[keep], cols[keep], rtol=1e-9)


def test_a_run_on_the_population_loss_keeps_every_setting_but_the_data():
    """RunConfig.on_population: the same model, heads, rank, lr, length and start, on P → ∞ of the run's own Λ."""
    cfg = linattn.RunConfig(model="attnS", head_num=3, rank=2, in_dim=3, seq_len=8, trainset_size=50, testset_size=10,
                            epoch=7, lr=0.03, white_cov=True, seed=4)
    cov = np.diag([0.5, 0.3, 0.2])
    twin = cfg.on_population(cov)
    twin.validate()
    assert twin.trainset_size is None and twin.testset_size == 0 and twin.resolved_engine() == "population"
    assert np.array_equal(twin.cov_matrix, cov) and not twin.white_cov
    changed = {k for k in cfg.field_names() if getattr(cfg, k) != getattr(twin, k)}
    assert changed == {"trainset_size", "testset_size", "engine", "cov_matrix", "white_cov"}


def test_a_run_is_carried_on_by_the_core_and_equals_the_longer_run(tmp_path):
    """RunResult.extended of a run that linattn.run returned trains the remaining steps from its final weights; its
    history and snapshots are the longer run's. A run read back knows no way to carry on (ValueError naming the
    function that does)."""
    from linattn.training.experiment import continued

    cfg = RunConfig(model="attnM", head_num=2, in_dim=3, seq_len=8, trainset_size=40, testset_size=20, epoch=30,
                    lr=0.05, init=0.3, draws="streams")
    short = linattn.run(cfg, progress=False, snapshot_every=10)
    longer = linattn.run(dataclasses.replace(cfg, epoch=70), progress=False, snapshot_every=10)
    carried = short.extended(70)
    assert carried.config.epoch == 70 and carried.history.step.tolist() == list(range(70))
    np.testing.assert_allclose(carried.history.test_icl, longer.history.test_icl, rtol=1e-12)
    assert [s for s, _ in carried.history.snapshots] == [0, 10, 20, 30, 40, 50, 60, 70]
    np.testing.assert_allclose(carried.weights["W_KQ"], longer.weights["W_KQ"], rtol=1e-12)
    linattn.write_outputs(short, tmp_path / "short")
    back = linattn.load_run(tmp_path / "short")
    with pytest.raises(ValueError, match="continued"):
        back.extended(70)
    np.testing.assert_allclose(continued(back, 70).history.train_loss, longer.history.train_loss, rtol=1e-12)
