"""The run store: a stored run is the run linattn.run would give, step for step, and each step is trained once."""

from __future__ import annotations

import json
import multiprocessing
from dataclasses import replace

import numpy as np
import pytest

import linattn
from linattn.companion import runstore
from linattn.companion.runstore import RunStore

CFG = linattn.RunConfig(model="attnS", head_num=3, rank=1, in_dim=3, seq_len=8, trainset_size=200, epoch=300,
                        lr=0.05, init=0.1, seed=1, draws="streams")
EVERY = 7


def _same_run(stored, direct):
    assert np.array_equal(stored.history.step, direct.history.step)
    assert np.array_equal(stored.history.train_loss, direct.history.train_loss)
    assert [s for s, _ in stored.history.snapshots] == [s for s, _ in direct.history.snapshots]
    for (_, a), (_, b) in zip(stored.history.snapshots, direct.history.snapshots):
        assert all(np.array_equal(a[k], b[k]) for k in b)
    assert all(np.array_equal(stored.weights[k], direct.weights[k]) for k in direct.weights)
    assert all(np.array_equal(stored.init[k], direct.init[k]) for k in direct.init)


def test_any_step_count_is_served_exactly_and_trained_once(tmp_path):
    """300, then 500 (continues from 300), 500 again (nothing), 140 (from the start: no earlier checkpoint), 200
    (continues from 140): each equals a direct run of that many steps, bit for bit."""
    store = RunStore(tmp_path)
    expected_training = {300: 300, 500: 200, 140: 140, 200: 60}
    for epoch in (300, 500, 500, 140, 200):
        cfg = replace(CFG, epoch=epoch)
        stored = store.get(cfg, snapshot_every=EVERY)
        _same_run(stored, linattn.run(cfg, snapshot_every=EVERY, progress=False))
        assert stored.trained_steps == expected_training.pop(epoch, 0)
    log = [json.loads(line) for line in (tmp_path / "trainings.jsonl").read_text().splitlines()]
    assert [row["trained_steps"] for row in log] == [300, 200, 0, 140, 60]
    assert len({row["key"] for row in log}) == 1


def test_values_are_served_with_and_without_track_value(tmp_path):
    store = RunStore(tmp_path)
    plain = store.get(CFG)
    assert plain.history.values is None and plain.config.track_value is False
    tracked = store.get(replace(CFG, track_value=True))
    assert tracked.trained_steps == 0
    direct = linattn.run(replace(CFG, track_value=True), progress=False)
    assert np.array_equal(tracked.history.values, direct.history.values)


def test_a_new_store_reads_what_an_old_one_wrote(tmp_path):
    RunStore(tmp_path).get(CFG, snapshot_every=EVERY)
    again = RunStore(tmp_path).get(CFG, snapshot_every=EVERY)
    assert again.trained_steps == 0
    _same_run(again, linattn.run(CFG, snapshot_every=EVERY, progress=False))
    assert again.datasets.cov.shape == (3, 3) and again.datasets.train.X.shape == (200, 8, 4)  # drawn on first use
    sizes = again.snapshots_of(lambda m: float(m.v.detach().abs().sum()))
    assert [s for s, _ in sizes] == [s for s, _ in again.history.snapshots]
    assert sizes[-1][1] == pytest.approx(np.abs(again.weights["W_V"][:, -1]).sum(), rel=1e-12)


def test_what_changes_the_trajectory_changes_the_key(monkeypatch):
    key = runstore.run_key(CFG)
    assert runstore.run_key(replace(CFG, epoch=10, track_value=True)) == key  # same trajectory, other length
    for changed in (dict(lr=0.06), dict(seed=2), dict(init_scheme="jan2025"), dict(engine="autograd")):
        assert runstore.run_key(replace(CFG, **changed)) != key, changed
    assert runstore.run_key(CFG, snapshot_every=5) != key
    datasets, init = linattn.draw(CFG)
    assert runstore.run_key(CFG, init=init) != key
    other = linattn.Sequences(datasets.train.X, -datasets.train.y)
    assert runstore.run_key(CFG, data=datasets.train) != runstore.run_key(CFG, data=other)
    flow = replace(CFG, dynamics="flow")
    assert runstore.run_key(flow) != runstore.run_key(replace(flow, epoch=10))  # an integrator is kept whole
    monkeypatch.setattr(runstore, "core_hash", lambda: "other science core")
    assert runstore.run_key(CFG) != key


def test_given_weights_and_data_are_part_of_the_run(tmp_path):
    datasets, init = linattn.draw(CFG)
    cfg = replace(CFG, testset_size=0)
    stored = RunStore(tmp_path).get(cfg, init=init, data=datasets.train)
    direct = linattn.run(cfg, init=init, data=datasets.train, progress=False)
    _same_run(stored, direct)
    assert stored.config == direct.config
    assert stored.datasets.train is datasets.train


def _ask(root):
    return RunStore(root).get(replace(CFG, epoch=2000)).trained_steps


@pytest.mark.slow
def test_concurrent_requests_train_once(tmp_path):
    """Two processes asking for the same run at once: one trains it, the other waits and reads it."""
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        trained = pool.map(_ask, [tmp_path, tmp_path])
    assert sorted(trained) == [0, 2000]


def test_snapshots_of_passes_keyword_arguments(tmp_path):
    stored = RunStore(tmp_path).get(CFG, snapshot_every=EVERY)
    scaled = stored.snapshots_of(lambda m, factor: factor * float(m.v.detach().abs().sum()), factor=3.0)
    plain = stored.snapshots_of(lambda m: float(m.v.detach().abs().sum()))
    assert [s for s, _ in scaled] == [s for s, _ in plain]
    assert all(x == pytest.approx(3.0 * y) for (_, x), (_, y) in zip(scaled, plain))


def test_a_stored_run_is_read_once_per_array(tmp_path):
    """Reading an entry back reads each snapshot array once: every snapshot is a view of the same array (a fresh
    read per snapshot made memory grow with the square of the snapshots: Figure 3a's six runs took 23 GB)."""
    store = RunStore(tmp_path)
    store.get(CFG, snapshot_every=1)
    folder = next(p for p in tmp_path.iterdir() if (p / "entry.json").is_file())
    entry = runstore._Entry.load(folder)
    steps = sorted(entry.snapshots)
    assert len(steps) > 10
    for name in entry.snapshots[steps[0]]:
        bases = {id(entry.snapshots[s][name].base) for s in steps}
        assert len(bases) == 1, name
