"""linattn.run_many: many runs of one shape in one call, each equal to its linattn.run; threads chosen by the engine."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

import linattn
from linattn import ConfigError, RunConfig, TrainingDiverged

BASE = dict(model="attnS", head_num=3, in_dim=3, seq_len=10, trainset_size=300, init=0.3, lr=0.02,
            init_scheme="jan2025", draws="streams", epoch=400)


def _members():
    """Runs that differ in seed, learning rate, length, rank, in-context fraction, initial scale and test sets."""
    return [RunConfig(**dict(BASE, seed=0)),
            RunConfig(**dict(BASE, seed=1, lr=0.03, epoch=250)),
            RunConfig(**dict(BASE, seed=2, rank=3, testset_size=0)),
            RunConfig(**dict(BASE, seed=3, icl=0.5, epoch=333)),
            RunConfig(**dict(BASE, seed=4, init=0.1, rank=2))]


def _same(a, b):
    rel = lambda x, y: np.max(np.abs(x - y) / np.abs(y))
    assert a.config == b.config and a.history.train_loss.shape == b.history.train_loss.shape
    assert rel(a.history.train_loss, b.history.train_loss) <= 1e-8
    assert [s for s, _ in a.history.snapshots] == [s for s, _ in b.history.snapshots]
    for k in b.weights:
        assert np.allclose(a.weights[k], b.weights[k], rtol=1e-8, atol=1e-13), k
    if b.history.values is not None:
        assert np.allclose(a.history.values, b.history.values, rtol=1e-8, atol=1e-13)


@pytest.mark.parametrize("batched", [False, True], ids=["member-by-member", "batched"])
def test_each_member_equals_its_run_alone(batched):
    cfgs = _members()
    if batched:  # batched members share whether they have test sets
        cfgs = [RunConfig(**dict(c.to_dict(), testset_size=50, track_value=True)) for c in cfgs]
    results = linattn.run_many(cfgs, snapshot_every=100, batched=batched)
    for cfg, got in zip(cfgs, results):
        alone = linattn.run(cfg, snapshot_every=100, progress=False)
        _same(got, alone)
        if batched:
            assert np.allclose(got.history.test_icl, alone.history.test_icl, rtol=1e-8)


@pytest.mark.parametrize("batched", [False, True], ids=["member-by-member", "batched"])
def test_a_diverging_member_gets_its_error_and_the_others_go_on(batched):
    cfgs = [RunConfig(**dict(BASE, seed=0)), RunConfig(**dict(BASE, seed=1, lr=60.0)), RunConfig(**dict(BASE, seed=2))]
    results = linattn.run_many(cfgs, batched=batched)
    with pytest.raises(TrainingDiverged) as alone:
        linattn.run(cfgs[1], progress=False)
    assert isinstance(results[1], TrainingDiverged) and results[1].step == alone.value.step
    assert results[1].suggested_lr == alone.value.suggested_lr
    _same(results[2], linattn.run(cfgs[2], progress=False))


def test_given_initial_weights_and_data_per_member():
    cfgs = _members()[:2]
    drawn = [linattn.draw(c) for c in cfgs]
    inits = [{k: v * 1.5 for k, v in w.items()} for _, w in drawn]
    datasets = [ds for ds, _ in drawn]
    for got, cfg, init, ds in zip(linattn.run_many(cfgs, inits=inits, datasets=datasets), cfgs, inits, datasets):
        _same(got, linattn.run(cfg, init=init, data=ds, progress=False))


def test_members_given_the_same_data_set_each_train_from_their_own_weights():
    cfg = _members()[0]
    ds, init = linattn.draw(cfg)
    inits = [init, {k: v * 0.5 for k, v in init.items()}]
    got = linattn.run_many([cfg, cfg], inits=inits, datasets=[ds, ds], batched=True)
    for res, w in zip(got, inits):
        _same(res, linattn.run(cfg, init=w, data=ds, progress=False))
    assert not np.allclose(got[0].history.train_loss, got[1].history.train_loss)


def test_every_member_is_checked_before_any_work():
    cfgs = _members()
    with pytest.raises(ConfigError, match=r"configs\[2\].*lr") as err:
        linattn.run_many(cfgs[:2] + [RunConfig(**dict(BASE, lr=-1.0))])
    assert err.value.field == "lr"
    with pytest.raises(ConfigError, match=r"configs\[1\].*head_num") as err:
        linattn.run_many([cfgs[0], RunConfig(**dict(BASE, head_num=4))])
    assert err.value.field == "head_num"
    with pytest.raises(ConfigError, match="inits"):
        linattn.run_many(cfgs, inits=[None])
    with pytest.raises(ConfigError, match="threads"):
        linattn.run_many(cfgs, threads=0)
    with pytest.raises(ConfigError, match="test sets"):
        linattn.run_many([cfgs[0], RunConfig(**dict(BASE, testset_size=20))], batched=True)


@pytest.mark.parametrize("field,value", [("head_num", 4), ("in_dim", 4), ("seq_len", 12), ("model", "attnM"),
                                         ("dtype", "float32")])
def test_members_of_another_shape_are_refused_naming_the_setting(field, value):
    """What a figure's runs may not differ in: a ValueError (ConfigError) naming the member and the setting."""
    with pytest.raises(ValueError, match=rf"configs\[1\].*{field}") as err:
        linattn.run_many([RunConfig(**BASE), RunConfig(**dict(BASE, **{field: value}))])
    assert isinstance(err.value, ConfigError) and err.value.field == field


def _threads_seen():
    seen = []
    return seen, lambda model: seen.append(torch.get_num_threads())


@pytest.mark.parametrize("engine,inside", [("exact", 1), ("autograd", 3)])
def test_a_run_takes_its_engines_threads_and_gives_the_callers_back(engine, inside):
    """On the CPU, exact: one thread during the run; autograd: the caller's setting; afterwards the caller's, also
    after an exception (pinned to the CPU: on a GPU machine autograd would choose CUDA, and one host thread)."""
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        cfg = RunConfig(**dict(BASE, engine=engine, epoch=5, device="cpu"))
        seen, snap = _threads_seen()
        linattn.run(cfg, snapshot_every=2, snapshot=snap, progress=False)
        assert set(seen) == {inside} and torch.get_num_threads() == 3
        seen, snap = _threads_seen()
        linattn.run_many([cfg, cfg], snapshot_every=2, snapshot=snap)
        assert set(seen) == {inside} and torch.get_num_threads() == 3
        linattn.run(cfg, snapshot_every=2, snapshot=_threads_seen()[1], progress=False, threads=2)

        def fails(model):
            raise KeyError("in the snapshot")
        with pytest.raises(KeyError):
            linattn.run(cfg, snapshot_every=2, snapshot=fails, progress=False)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_the_benchmark_script_runs_at_tiny_sizes(capsys):
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_run_many.py"
    spec = importlib.util.spec_from_file_location("bench_run_many", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.measure([1, 3], device="cpu", trainset_size=100, epoch=20, batched=True)
    assert [r["batch"] for r in rows] == [1, 3] and all(r["runs_per_s"] > 0 for r in rows)


@pytest.mark.parametrize("draws", ["streams", "reference"])
def test_members_of_one_data_draw_and_read_it_once_each_equal_to_its_run(draws, monkeypatch):
    """Ranks and initial scales of one seed share their data: drawn once, moments read once, every result (initial
    weights drawn after the data included) equal to its run alone."""
    from linattn.objectives.base import Moments

    base = dict(BASE, draws=draws, seed=5, testset_size=40)
    cfgs = [RunConfig(**dict(base, rank=1)), RunConfig(**dict(base, rank=2, init=0.1)),
            RunConfig(**dict(base, rank=3, lr=0.01)), RunConfig(**dict(base, seed=6))]
    reads = []
    accumulate = Moments.accumulate.__func__
    monkeypatch.setattr(Moments, "accumulate", classmethod(lambda cls, b: reads.append(1) or accumulate(cls, b)))
    results = linattn.run_many(cfgs)
    assert len(reads) == 2 * 3  # two data draws, each a training set and two test sets
    assert results[0].datasets is results[1].datasets is results[2].datasets
    assert results[3].datasets is not results[0].datasets
    monkeypatch.undo()
    for cfg, got in zip(cfgs, results):
        alone = linattn.run(cfg, progress=False)
        assert all(np.array_equal(got.init[k], alone.init[k]) for k in alone.init)
        assert np.array_equal(got.datasets.train.X, alone.datasets.train.X)
        _same(got, alone)
        assert np.allclose(got.history.test_icl, alone.history.test_icl, rtol=1e-8)


def test_streams_runs_of_one_seed_share_their_test_sets_whatever_their_training_sets():
    """linattn's test sets have streams of their own: runs of one seed that differ in P and c hold the same test
    sets (drawn once, their moments read once), each run equal to its run alone."""
    base = dict(BASE, model="attnM", seed=7, testset_size=40, epoch=200)
    cfgs = [RunConfig(**dict(base, icl=c, trainset_size=P)) for c, P in ((1.0, 300), (0.5, 300), (0.2, 120))]
    results = linattn.run_many(cfgs)
    assert results[0].datasets is not results[1].datasets
    assert results[0].datasets.test_icl is results[1].datasets.test_icl is results[2].datasets.test_icl
    for cfg, got in zip(cfgs, results):
        alone = linattn.run(cfg, progress=False)
        assert np.array_equal(got.datasets.test_iwl.X, alone.datasets.test_iwl.X)
        _same(got, alone)
        assert np.allclose(got.history.test_iwl, alone.history.test_iwl, rtol=1e-8)


def test_calls_handed_one_shared_dict_draw_the_test_sets_once_across_engines(monkeypatch):
    """The run store hands the run_many calls of one request one ``shared`` dict: runs of one seed on two engines
    (finite P on the exact engine, P = ∞ on the population engine) then hold the same test sets, drawn once and their
    moments read once, and each result is still its run alone."""
    import linattn.data as data_mod

    base = dict(BASE, model="attnM", seed=8, testset_size=40, epoch=150, lr=0.005, init=0.1)
    exact, population = RunConfig(**dict(base, icl=0.5)), RunConfig(**dict(base, icl=0.5, trainset_size=None))
    draws = []
    sample = data_mod.sample_sequences
    monkeypatch.setattr(data_mod, "sample_sequences", lambda P, *a, **k: draws.append(P) or sample(P, *a, **k))
    shared: dict = {}
    first = linattn.run_many([exact], shared=shared)[0]
    second = linattn.run_many([population], shared=shared)[0]
    assert (first.engine, second.engine) == ("exact", "population")
    assert draws.count(40) == 2  # the two test sets, once for both calls
    assert second.datasets.test_icl is first.datasets.test_icl
    monkeypatch.undo()
    for cfg, got in zip((exact, population), (first, second)):
        alone = linattn.run(cfg, progress=False)
        assert np.array_equal(got.history.train_loss, alone.history.train_loss)
        assert np.array_equal(got.history.test_icl, alone.history.test_icl)
