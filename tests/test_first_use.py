"""First use without a trace, on the Python side: errors that name the field as written in Python (and types checked,
not crashed on), ``trainset_size=inf``, reference draws refused only where something is drawn, the memory estimate,
``init_weights``' checks, ``model.predict`` and ``linattn.sample_tasks``, and the documented examples."""

import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import linattn
from linattn.cli import cli_message, main
from linattn.config import ConfigError, RunConfig
from linattn.training import experiment
from linattn.training.memory import check_memory, memory_estimate, parse_size

ROOT = Path(__file__).resolve().parents[1]
C3 = [[1.0, 0.2, 0.0], [0.2, 0.5, 0.1], [0.0, 0.1, 0.3]]


# ── messages in Python's words, types checked ────────────────────────────────────────────────────────────────────

PYTHON_BAD = [
    (dict(head_num=0), r"^head_num must be a positive integer, got 0$"),
    (dict(in_dim=-1), r"^in_dim must be a positive integer, got -1$"),
    (dict(rank=5), r"^rank must be an integer between 1 and in_dim = 4, got 5$"),
    (dict(seq_len=1), r"^seq_len must be at least 2"),
    (dict(trainset_size=0), r"^trainset_size must be a positive integer \(trainset_size=None: the population"),
    (dict(seed=-1), r"^seed must be an integer in \[0, 2\^32\), got -1$"),
    (dict(init=math.nan), r"^init must be a positive finite number, got nan$"),
    (dict(model="mlp"), r'^model="mlp" needs cubic_feat=True'),
    (dict(spectrum=(1.0, 2.0), draws="streams"), r"^spectrum has 2 values, expected in_dim = 4"),
    (dict(draws="numpy"), r"^draws must be one of 'reference', 'streams', got 'numpy'$"),
    (dict(device="gpu"), r"^device must be 'auto', 'cpu' or 'cuda\[:k\]', got 'gpu'$"),
    (dict(cov_matrix=[[1.0, 2.0], [2.0, 1.0]], in_dim=2, draws="streams"), r"^cov_matrix: covariance must be positive"),
    # wrong types: one ConfigError naming the field, never a TypeError from deep inside
    (dict(lr="fast"), r"^lr must be a number, got 'fast'$"),
    (dict(icl=None), r"^icl must be a number, got None$"),
    (dict(head_num=True), r"^head_num must be an integer, got True$"),
    (dict(seq_len=32.0), r"^seq_len must be an integer, got 32.0$"),
    (dict(trainset_size="5000"), r"^trainset_size must be an integer, or None"),
    (dict(white_cov="yes"), r"^white_cov must be True or False, got 'yes'$"),
    (dict(model=3), r"^model must be a string, got 3$"),
    (dict(spectrum="1,2,3,4", draws="streams"), r"^spectrum must be a sequence of numbers, got '1,2,3,4'$"),
    (dict(cov_matrix=[["a", "b"], ["c", "d"]], in_dim=2, draws="streams"), r"^cov_matrix: covariance must be a "
                                                                           r"square matrix of numbers"),
]


@pytest.mark.parametrize("settings, message", PYTHON_BAD, ids=[str(s) for s, _ in PYTHON_BAD])
def test_invalid_settings_raise_one_config_error_in_python_terms(settings, message):
    with pytest.raises(ConfigError, match=message) as info:
        RunConfig(**settings).validate()
    assert "--" not in str(info.value)  # no CLI flag in a Python message


def test_a_config_error_names_its_field_and_value():
    with pytest.raises(ConfigError) as info:
        RunConfig(lr="fast").validate()
    assert (info.value.field, info.value.value) == ("lr", "fast")
    with pytest.raises(ConfigError) as info:
        RunConfig(rank=7).validate()
    assert info.value.field == "rank" and str(info.value) == "rank must be an integer between 1 and in_dim = 4, got 7"
    # another caller words the settings its own way: the CLI by their flags
    assert cli_message(info.value) == "--rank must be an integer between 1 and --in_dim = 4, got 7"
    with pytest.raises(ConfigError) as info:
        RunConfig(model="mlp").validate()
    assert info.value.field == "model" and cli_message(info.value).startswith("--model mlp needs --cubic_feat")


def test_run_and_draw_refuse_a_wrong_type_before_any_work(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("drew data for an invalid config")

    import linattn.reference_draws  # experiment imports it where it draws

    monkeypatch.setattr(linattn.reference_draws, "reference_data", never)
    for call in (lambda c: linattn.run(c, progress=False), linattn.draw):
        with pytest.raises(ConfigError, match="^lr must be a number, got 'fast'$"):
            call(RunConfig(lr="fast"))
    # numpy integers and floats are numbers (a loop over np.arange gives them)
    RunConfig(head_num=np.int64(2), lr=np.float32(0.01), seed=np.uint32(3)).validate()


def test_trainset_size_inf_is_the_population_objective_exactly_as_none():
    inf, none = RunConfig(trainset_size=float("inf")), RunConfig(trainset_size=None)
    assert inf == none and inf.trainset_size is None
    assert inf.to_dict() == none.to_dict() and inf.to_dict()["trainset_size"] == "inf"
    assert RunConfig.from_dict(inf.to_dict()) == none
    small = dict(in_dim=2, seq_len=4, epoch=3, draws="streams", lr=0.01)
    a = linattn.run(RunConfig(trainset_size=math.inf, **small), progress=False)
    b = linattn.run(RunConfig(trainset_size=None, **small), progress=False)
    assert a.engine == "population" and np.array_equal(a.history.train_loss, b.history.train_loss)
    with pytest.raises(ConfigError, match="^trainset_size must be an integer, or None"):
        RunConfig(trainset_size=-math.inf).validate()


# ── reference draws: refused where something is drawn ──────────────────────────────────────────────────────────

@pytest.mark.parametrize("option, message", [
    (dict(spectrum=(0.4, 0.3, 0.2, 0.1)), 'spectrum has no reference draws'),
    (dict(cov_matrix=np.eye(4).tolist()), 'cov_matrix has no reference draws'),
    (dict(trainset_size=None), 'trainset_size=None has no reference draws'),
    (dict(normalize="mean"), 'normalize="mean" has no reference draws'),
    (dict(init_scheme="dec2024", icl=0.5), r'init_scheme="dec2024" with draws="reference" needs icl=1 \(the Dec '
                                           r"2024 code had no icl option\)"),
])
def test_reference_draws_are_refused_where_they_are_drawn(option, message):
    cfg = RunConfig(**{**dict(in_dim=4, seq_len=5, trainset_size=20, epoch=2, lr=0.01), **option})
    cfg.validate()  # valid settings: only drawing them from the reference is impossible
    with pytest.raises(ConfigError, match=f'^{message}.*add draws="streams"$'):
        linattn.draw(cfg)
    with pytest.raises(ConfigError, match=f"^{message}"):
        linattn.run(cfg, progress=False)
    ds, w = linattn.draw(replace(cfg, draws="streams"))  # linattn's own streams have them
    if cfg.trainset_size is not None:  # with the weights and the data given nothing is drawn: the settings train
        assert linattn.run(cfg, init=w, data=ds, progress=False).history.train_loss.shape == (2,)


def test_population_run_with_given_weights_and_covariance_draws_nothing():
    cfg = RunConfig(model="attnS", cov_matrix=C3, trainset_size=None, head_num=2, in_dim=3, seq_len=6, epoch=5,
                    lr=0.01, init=0.3)
    w = linattn.init_weights("attnS", head_num=2, in_dim=3, rank=1, init=0.3, rng=np.random.default_rng(0))
    res = linattn.run(cfg, init=w, progress=False)
    assert res.engine == "population" and np.all(np.isfinite(res.history.train_loss))
    assert res.history.train_loss[-1] < res.history.train_loss[0]
    assert np.array_equal(res.datasets.cov, np.asarray(C3))
    # it trained on that covariance: the same as linattn's streams, which use a given matrix as it is
    streams = linattn.run(replace(cfg, draws="streams"), init=w, progress=False)
    assert np.array_equal(res.history.train_loss, streams.history.train_loss)
    other = linattn.run(replace(cfg, cov_matrix=np.eye(3).tolist()), init=w, progress=False)
    assert not np.allclose(other.history.train_loss, res.history.train_loss)
    # without init the weights would be drawn from the reference, which has no population runs
    with pytest.raises(ConfigError, match=r'cov_matrix has no reference draws.*draws="streams"'):
        linattn.run(cfg, progress=False)
    # nor has it a covariance to draw for one: with given weights but no cov_matrix, Λ would be drawn
    with pytest.raises(ConfigError, match=r'trainset_size=None has no reference draws.*draws="streams"'):
        linattn.run(replace(cfg, cov_matrix=None), init=w, progress=False)
    white = linattn.run(replace(cfg, cov_matrix=None, white_cov=True), init=w, progress=False)
    assert np.allclose(white.datasets.cov, np.eye(3) / 3)


# ── init_weights: the same rules as RunConfig ────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize("bad, message", [
    (dict(rank=7), r"^rank must be an integer between 1 and in_dim = 4, got 7$"),
    (dict(rank=0), r"^rank must be an integer between 1"),
    (dict(init=math.nan), r"^init must be a positive finite number, got nan$"),
    (dict(init=-0.1), r"^init must be a positive finite number"),
    (dict(head_num=0), r"^head_num must be a positive integer, got 0$"),
    (dict(head_num=2.0), r"^head_num must be (a positive|an) integer, got 2.0$"),
    (dict(in_dim=True), r"^in_dim must be (a positive|an) integer, got True$"),
    (dict(model="attnX"), r"^model must be one of 'attnM', 'attnS', 'mlp', got 'attnX'$"),
    (dict(init_scheme="dec2026"), r"^init_scheme must be one of 'dec2024', 'jan2025', 'dec2025'"),
])
def test_init_weights_validates_like_run_config(bad, message):
    args = {**dict(model="attnS", head_num=2, in_dim=4, rank=1, init=0.1, init_scheme="dec2025"), **bad}
    with pytest.raises(ValueError, match=message):
        linattn.init_weights(rng=np.random.default_rng(0), **args)
    # one rule: RunConfig says the same about the same value
    with pytest.raises(ConfigError, match=message):
        RunConfig(**args).validate()


# ── memory ───────────────────────────────────────────────────────────────────────────────────────────────────────

def test_memory_estimate_covers_the_drawn_data_and_grows_with_it():
    for draws, bytes_per_number in (("reference", 4), ("streams", 8)):
        cfg = RunConfig(in_dim=3, seq_len=50, trainset_size=2000, testset_size=500, draws=draws)
        ds, _ = linattn.draw(cfg)
        held = sum(s.X.nbytes + s.y.nbytes for s in (ds.train, ds.test_iwl, ds.test_icl))
        assert ds.train.X.itemsize == bytes_per_number
        assert held <= memory_estimate(cfg) <= 5 * held  # the peak adds the copies made while drawing
    small, large = (memory_estimate(RunConfig(trainset_size=P, draws="streams")) for P in (10**4, 10**6))
    assert 50 < large / small <= 100
    # the population engine holds no data set, but moment tensors that grow with in_dim
    pop = RunConfig(trainset_size=None, seq_len=1000)
    assert 10 * memory_estimate(pop) < memory_estimate(replace(pop, trainset_size=5000, draws="streams"))
    assert memory_estimate(replace(pop, in_dim=40)) > 1000 * memory_estimate(pop)


@pytest.mark.parametrize("settings", [dict(seq_len=100_000_000), dict(trainset_size=100_000_000_000)])
def test_a_run_that_cannot_fit_is_refused_before_drawing(settings, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("drew data for a run that cannot fit")

    monkeypatch.setattr(experiment, "draw_checked", never)  # what run() draws with
    cfg = RunConfig(**settings)
    need = memory_estimate(cfg)
    with pytest.raises(ConfigError, match=r"^this run needs about [\d.]+ TiB of memory .*more than max_memory") as e:
        linattn.run(cfg, progress=False)
    assert "memory available now" in str(e.value)
    assert need > 2**40


def test_max_memory_sets_the_limit():
    cfg = RunConfig(in_dim=3, seq_len=6, trainset_size=50, epoch=2, draws="streams")
    need = memory_estimate(cfg)
    with pytest.raises(ConfigError, match=r"more than max_memory: 1 KiB \(the limit given\)"):
        linattn.run(cfg, progress=False, max_memory="1K")
    assert check_memory(cfg, need) == need  # exactly enough is enough
    with pytest.raises(ConfigError):
        check_memory(cfg, need - 1)
    assert linattn.run(cfg, progress=False, max_memory="1G").history.train_loss.shape == (2,)
    assert [parse_size(s) for s in ("8G", "500M", "1.5GiB", "4096", 4096, "2k")] == [
        8 * 2**30, 500 * 2**20, 3 * 2**29, 4096, 4096, 2048]
    for bad in ("lots", "-1G", "0", 0, 1.5, None):
        with pytest.raises(ValueError, match="^max_memory must be"):
            parse_size(bad)


# ── predict and sample_tasks ─────────────────────────────────────────────────────────────────────────────────────

def _reference_prediction(model, w, X, scale):
    """ŷ from the init.npz-layout arrays with numpy (tests/test_api.py's formulas), times the token scale."""
    D = X.shape[-1] - 1
    xq = X[:, -1]
    if model == "mlp":
        b = np.einsum("pn,pnd->pd", X[:, :-1, -1], X[:, :-1, :-1])
        return scale * np.einsum("pi,pj->pij", b, xq[:, :D]).reshape(len(X), -1) @ w["W1"].T @ w["w2"]
    W_KQ = w["W_KQ"] if model == "attnM" else np.einsum("hra,hrb->hab", w["W_Q"], w["W_K"])
    S = np.einsum("pmb,pmc->pbc", X, X)
    return scale * np.einsum("pa,hab,pbc,hc->p", xq, W_KQ, S, w["W_V"][:, -1])


@pytest.mark.parametrize("model", ["attnM", "attnS", "mlp"])
def test_predict_on_every_model_class(model):
    w = linattn.init_weights(model, head_num=2, in_dim=3, rank=2, init=0.5, rng=np.random.default_rng(1))
    seqs = linattn.sample_tasks(np.asarray(C3), P=7, seq_len=6, seed=2)
    net = linattn.build_model(model, w)
    for normalize, scale in (("sum", 1.0), ("mean", 1 / 5)):
        y = net.predict(seqs.X, normalize=normalize)
        assert isinstance(y, np.ndarray) and y.dtype == np.float64 and y.shape == (7,)
        assert np.allclose(y, _reference_prediction(model, w, seqs.X, scale), rtol=1e-12)
    # torch in, a float32 model: still float64 numpy out, no gradient recorded, the model unchanged
    net32 = linattn.build_model(model, w, dtype=torch.float32)
    y32 = net32.predict(torch.as_tensor(seqs.X))
    assert y32.dtype == np.float64 and np.allclose(y32, net.predict(seqs.X), rtol=1e-5)
    assert all(p.grad is None and p.dtype == torch.float32 for p in net32.parameters())
    with pytest.raises(ValueError, match=r"X must have shape \(P, seq_len, D\+1\) = \(P, seq_len, 4\)"):
        net.predict(seqs.X[..., :3])
    leaked = seqs.X.copy()
    leaked[:, -1, -1] = seqs.y
    with pytest.raises(ValueError, match="query's label"):
        net.predict(leaked)


def test_predict_on_softmax_attention_is_the_forward_pass():
    w = linattn.init_weights("attnM", head_num=2, in_dim=3, init=0.5, rng=np.random.default_rng(1))
    net = linattn.build_model("attnM", w, softmax=True)
    X = linattn.sample_tasks(np.asarray(C3), P=5, seq_len=6, seed=3).X
    with torch.no_grad():
        direct = net(torch.as_tensor(X)).numpy()
    assert np.array_equal(net.predict(X), direct)
    assert not np.allclose(direct, linattn.build_model("attnM", w).predict(X))  # softmax is not linear attention


def test_sample_tasks_draws_the_callers_covariance():
    cov = np.asarray(C3)
    seqs = linattn.sample_tasks(cov, P=50, seq_len=7, seed=5)
    assert isinstance(seqs, linattn.Sequences) and seqs.X.shape == (50, 7, 4) and seqs.y.shape == (50,)
    # the training set a run with that covariance draws from linattn's streams
    ds, _ = linattn.draw(RunConfig(in_dim=3, seq_len=7, trainset_size=50, cov_matrix=C3, draws="streams", seed=5))
    assert np.array_equal(seqs.X, ds.train.X) and np.array_equal(seqs.y, ds.train.y)
    # the inputs follow the covariance (many fresh draws, not centred)
    big = linattn.sample_tasks(cov, P=20000, seq_len=4, seed=6, centre=False)
    x = big.X[:, :-1, :3].reshape(-1, 3)
    assert np.allclose(x.T @ x / len(x), cov, atol=0.02)
    # labels are wᵀx with a fixed task for the in-weight part
    iwl = linattn.sample_tasks(cov, P=30, seq_len=5, seed=7, icl=0.0)
    assert not np.allclose(iwl.X[:, 0, -1], 0.0)
    for bad, message in [(dict(cov=[[1.0, 2.0], [2.0, 1.0]]), "positive definite"),
                         (dict(cov=[[1.0, 0.5], [0.0, 1.0]]), "symmetric"), (dict(P=0), "^P must be"),
                         (dict(seq_len=1), "^seq_len must be"), (dict(icl=2.0), "^icl must be"),
                         (dict(seed=-1), "^seed must be"), (dict(P=1), "P=1 with centre=True")]:
        args = {**dict(cov=cov, P=10, seq_len=5, seed=0), **bad}
        with pytest.raises(ValueError, match=message):
            linattn.sample_tasks(args.pop("cov"), **args)


def test_the_documented_examples_run():
    api = (ROOT / "book" / "api.md").read_text(encoding="utf-8")
    code = re.search(r"## Your own covariance.*?```python\n(.*?)```", api, re.S).group(1)
    scope = {}
    exec(compile(code, "book/api.md", "exec"), scope)
    assert scope["y_hat"].shape == (100,) and np.isfinite(scope["test_loss"])
    assert scope["res"].history.train_loss[-1] < scope["res"].history.train_loss[0]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("### Use it from Python")
    section = readme[start:readme.index("\n## ", start)]
    # the exact command for torch's CPU build (pip keeps it when linattn is installed next)
    assert "pip install -e ." in section and "CPU-only" in section
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in section
    for name in ("sample_tasks", "predict"):
        assert name in section and name in api


# ── the CLI side of the same issue ───────────────────────────────────────────────────────────────────────────────

def test_out_under_an_existing_file_says_so(tmp_path, capsys):
    (tmp_path / "README.md").write_text("a file")
    out = tmp_path / "README.md" / "sub"
    assert main(["train", "--in_dim", "3", "--seq_len", "6", "--trainset_size", "50", "--epoch", "2", "--quiet",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    blocker = tmp_path / "README.md"
    assert err == f"linattn train: error: --out {out} cannot be written: {blocker} is a file, not a folder\n"


def test_train_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    d = RunConfig()
    for flag, value in (("--model", d.model), ("--seed", d.seed), ("--lr", d.lr), ("--epoch", d.epoch),
                        ("--testset_size", d.testset_size), ("--dtype", d.dtype), ("--chunk", d.chunk)):
        assert re.search(rf"{flag} \S+ .*?\(default: {re.escape(str(value))}\)", text), flag
    assert "(default: None)" not in text and "(default: False)" not in text
    assert "(default) (default" not in text and "default: auto) (default" not in text
