"""The run store: a stored run is the run linattn.run would give, step for step, and each step is trained once."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import shutil
import warnings
from dataclasses import replace
from pathlib import Path

import nbformat
import numpy as np
import pytest

import linattn
from linattn.companion.runner import notebooks
from linattn.companion.runner.paths import ENV_RETRAIN, retraining
from linattn.companion.runstore import QUARANTINE, RunStore, StoreError
from linattn.objectives.native import KnownFallback
from linattn.training import experiment, keys, plan
from linattn.training.keys import run_key

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


@pytest.mark.slow
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


def test_get_many_trains_the_missing_runs_together_and_serves_each_as_get(tmp_path, monkeypatch):
    """A stored run is read, the missing ones are trained in one run_many call per shape (two ranks of one seed draw
    their data once), each stored under its own key; every result is what get() serves, and a second call trains
    nothing."""
    cfgs = [replace(CFG, rank=2), CFG, replace(CFG, rank=3, epoch=200), replace(CFG, seed=2), CFG]
    store = RunStore(tmp_path)
    store.get(cfgs[0], snapshot_every=EVERY)
    draws = []
    monkeypatch.setattr(plan, "_draw_data", lambda kind, args, shared=None, f=plan._draw_data:
                        draws.append(args["seed"]) or f(kind, args, shared))
    got = store.get_many(cfgs, snapshot_every=EVERY)
    assert draws == [1, 2]  # seed 1's data drawn once for both of its runs trained
    assert [r.trained_steps for r in got] == [0, 300, 200, 300, 300]
    for cfg, res in zip(cfgs, got):
        _same_run(res, linattn.run(cfg, snapshot_every=EVERY, progress=False))
    log = [json.loads(line) for line in (tmp_path / "trainings.jsonl").read_text().splitlines()]
    assert sorted(row["trained_steps"] for row in log[1:]) == [0, 200, 300, 300]  # one line per key
    again = RunStore(tmp_path).get_many(cfgs, snapshot_every=EVERY)
    assert [r.trained_steps for r in again] == [0] * 5
    assert again[2].extended(250).trained_steps == 50


def test_get_many_stores_the_others_before_a_member_diverges(tmp_path):
    cfgs = [CFG, replace(CFG, seed=3, lr=500.0)]
    with pytest.raises(linattn.TrainingDiverged):
        RunStore(tmp_path).get_many(cfgs)
    assert RunStore(tmp_path).get(CFG).trained_steps == 0


def test_a_run_carried_on_is_not_drawn_again(tmp_path, monkeypatch):
    """extended() continues with the data sets the run drew, bit for bit the run trained in one go."""
    draws = []
    monkeypatch.setattr(experiment, "draw_checked",
                        lambda cfg, shared=None, f=plan.draw_checked: draws.append(cfg) or f(cfg, shared))
    stored = RunStore(tmp_path).get(CFG, snapshot_every=EVERY).extended(500).extended(700)
    assert len(draws) == 1 and stored.trained_steps == 200
    _same_run(stored, linattn.run(replace(CFG, epoch=700), snapshot_every=EVERY, progress=False))


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


def _key(cfg, **kwargs):
    """The run store's key of ``cfg``: the run's key without its length."""
    return run_key(cfg, length=False, **kwargs)


def test_what_changes_the_trajectory_changes_the_key(monkeypatch):
    key = _key(CFG)
    assert _key(replace(CFG, epoch=10, track_value=True)) == key  # same trajectory, other length
    assert run_key(replace(CFG, epoch=10)) != run_key(CFG)  # a run folder's key: one finished run of that length
    for changed in (dict(lr=0.06), dict(seed=2), dict(init_scheme="jan2025"), dict(engine="autograd")):
        assert _key(replace(CFG, **changed)) != key, changed
    assert _key(CFG, snapshot_every=5) != key
    datasets, init = linattn.draw(CFG)
    assert _key(CFG, init=init) != key
    other = linattn.Sequences(datasets.train.X, -datasets.train.y)
    assert _key(CFG, data=datasets.train) != _key(CFG, data=other)
    flow = replace(CFG, dynamics="flow")
    assert _key(flow) != _key(replace(flow, epoch=10))  # an integrator is kept whole
    with monkeypatch.context() as m:
        m.setattr(keys, "trajectory_code_hash", lambda: "other code")
        assert _key(CFG) != key
    with monkeypatch.context() as m:
        m.setattr(keys, "library_versions", lambda libraries: dict.fromkeys(libraries, "0.0"))
        assert _key(CFG) != key


def _package_copy(tmp_path) -> Path:
    root = Path(linattn.__file__).parent
    copy = tmp_path / "linattn"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


@pytest.mark.slow
def test_comments_and_what_only_measures_a_run_leave_the_key_unchanged(tmp_path):
    """A comment in events.py, diagnostics.py, models.py and theory.py, a docstring edited in models.py, and code
    changed in diagnostics.py, theory.py, events.py, the companion or the CLI retrain no run; code changed in
    models.py, train.py or the run's part of experiment.py does."""
    code = keys.trajectory_code_hash
    original = code(_package_copy(tmp_path / "a"))
    assert original == code()
    edited = _package_copy(tmp_path / "b")
    for name in ("analysis/events.py", "analysis/diagnostics.py", "models.py", "theory.py"):
        with open(edited / name, "a", encoding="utf-8") as f:
            f.write("\n# a comment appended by the test\n")
    models = (edited / "models.py").read_text(encoding="utf-8")
    (edited / "models.py").write_text(models.replace('"""The paper\'s models', '"""The models of the paper', 1),
                                      encoding="utf-8")
    for name in ("analysis/diagnostics.py", "theory.py", "analysis/events.py", "cli/__init__.py",
                 "companion/runstore.py"):
        with open(edited / name, "a", encoding="utf-8") as f:
            f.write("\n\ndef _added_by_the_test():\n    return 1\n")
    with open(edited / "training/experiment.py", "a", encoding="utf-8") as f:  # outside the run's part of it
        f.write("\n\ndef _added_by_the_test():\n    return 1\n")
    assert models != (edited / "models.py").read_text(encoding="utf-8")
    assert code(edited) == original
    for name in ("models.py", "training/train.py"):
        change = "\n_ADDED_BY_THE_TEST = 1\n"
        other = _package_copy(tmp_path / name.replace("/", "-"))
        with open(other / name, "a", encoding="utf-8") as f:
            f.write(change)
        assert code(other) != original, name
    run_part = _package_copy(tmp_path / "run")
    source = (run_part / "training/experiment.py").read_text(encoding="utf-8")
    (run_part / "training/experiment.py").write_text(
        source.replace("    setup = time.perf_counter() - start\n", "    setup = time.perf_counter() - start + 0\n", 1),
        encoding="utf-8")
    assert code(run_part) != original


def test_load_run_reads_a_store_entry(tmp_path):
    stored = RunStore(tmp_path).get(CFG, snapshot_every=EVERY)
    loaded = linattn.load_run(tmp_path / stored.key)
    assert loaded.key == stored.key and loaded.config == replace(CFG, track_value=True)
    _same_run(replace(loaded, history=replace(loaded.history, values=None)), stored)
    assert np.array_equal(loaded.history.values, linattn.run(replace(CFG, track_value=True),
                                                             progress=False).history.values)
    assert np.array_equal(loaded.datasets.train.X, stored.datasets.train.X)  # drawn again from the settings


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


def test_snapshots_of_weight_arrays_read_what_the_rebuilt_models_do(tmp_path):
    """``snapshots_of(fn, arrays=True)`` hands ``fn`` each snapshot's weight arrays (no torch model built): the
    diagnostics read the same numbers off them as off the rebuilt models, keyword arguments passed on."""
    from linattn.analysis import diagnostics
    from linattn.weights import AttnSWeights

    stored = RunStore(tmp_path).get(CFG, snapshot_every=EVERY)
    snap = diagnostics.snapshot_fn(CFG.N, normalize=CFG.normalize)
    read, built = stored.snapshots_of(snap, arrays=True), stored.snapshots_of(snap)
    assert [s for s, _ in read] == [s for s, _ in built] == [s for s, _ in stored.history.snapshots]
    assert all(a.keys() == b.keys() and all(np.allclose(a[k], b[k], rtol=1e-13, atol=1e-16) for k in a)
               for (_, a), (_, b) in zip(read, built))
    kinds = stored.snapshots_of(lambda m, factor: (type(m), factor * float(np.abs(m.v).sum())), arrays=True,
                                factor=3.0)
    assert all(kind is AttnSWeights for _, (kind, _) in kinds)
    assert kinds[-1][1][1] == pytest.approx(3.0 * np.abs(stored.weights["W_V"][:, -1]).sum(), rel=1e-12)


def test_a_stored_run_is_read_once_per_array(tmp_path):
    """Reading an entry back reads each snapshot array once: every snapshot is a view of the same array (a fresh
    read per snapshot made memory grow with the square of the snapshots: Figure 3a's six runs took 23 GB)."""
    store = RunStore(tmp_path)
    key = store.get(CFG, snapshot_every=1).key
    snapshots = linattn.load_run(tmp_path / key).history.snapshots
    assert len(snapshots) > 10
    for name in snapshots[0][1]:
        bases = {id(w[name].base) for _, w in snapshots}
        assert len(bases) == 1, name


# ── faults: a damaged entry is set aside and trained again, never served ──────────────────────────────────────

SMALL = replace(CFG, trainset_size=60, epoch=40)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _cut_short(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-5]))


def _last_loss_edited(path: Path) -> None:
    lines = path.read_text().splitlines()
    fields = lines[-1].split(",")
    fields[lines[0].split(",").index("train_loss")] = "0.5"
    path.write_text("\n".join(lines[:-1] + [",".join(fields)]) + "\n")


FAULTS = {"truncated weights.npz": ("weights.npz", _truncate),
          "garbage run.json": ("run.json", lambda p: p.write_text("{'not': json")),
          "loss.csv cut short": ("loss.csv", _cut_short),
          "last loss edited to 0.5": ("loss.csv", _last_loss_edited),
          "truncated values.npy": ("values.npy", _truncate)}


def _files(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _served_quietly(root, cfg=SMALL, **kwargs):
    """The store's run of ``cfg``, failing on any warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return RunStore(root, **kwargs).get(cfg, snapshot_every=EVERY)


@pytest.mark.parametrize("fault", FAULTS)
def test_a_damaged_entry_is_set_aside_named_and_trained_again(tmp_path, fault):
    """Each fault: a KnownFallback warning names the entry (one line, as the figure runner takes it off the page),
    the damaged entry is moved whole into quarantine/, and the run served is a fresh training, bit for bit."""
    key = RunStore(tmp_path).get(SMALL, snapshot_every=EVERY).key
    folder = tmp_path / key
    name, damage = FAULTS[fault]
    damage(folder / name)
    damaged = _files(folder)
    with pytest.warns(KnownFallback, match=re.escape(str(folder))) as caught:
        again = RunStore(tmp_path).get(SMALL, snapshot_every=EVERY)
    assert again.trained_steps == SMALL.epoch
    _same_run(again, linattn.run(SMALL, snapshot_every=EVERY, progress=False))
    assert again.history.train_loss[-1] != 0.5
    set_aside, = (tmp_path / QUARANTINE).iterdir()
    assert set_aside.name.startswith(key) and _files(set_aside) == damaged
    w = caught[0]
    printed = warnings.formatwarning(str(w.message), w.category, w.filename, w.lineno, "")
    page = nbformat.from_dict({"cells": [{"outputs": [{"output_type": "stream", "text": printed}]}]})
    said, = notebooks.take_known_fallbacks(page)
    assert str(folder) in said and str(set_aside) in said and not page.cells[0].outputs
    assert _served_quietly(tmp_path).trained_steps == 0  # the new entry is served as it is
    log = [json.loads(line) for line in (tmp_path / "trainings.jsonl").read_text().splitlines()]
    assert [row.get("quarantined") for row in log if "quarantined" in row] == [str(set_aside)]


def test_every_file_of_an_entry_is_digested(tmp_path):
    key = RunStore(tmp_path).get(SMALL, snapshot_every=EVERY).key
    folder = tmp_path / key
    info = json.loads((folder / "run.json").read_text())
    files = {p.name for p in folder.iterdir()}
    assert set(info["digests"]) == files and files >= {"loss.csv", "run.json", "init.npz", "weights.npz",
                                                       "snapshots.npz", "checkpoints.npz", "values.npy"}
    assert info["digests"]["weights.npz"] == hashlib.sha256((folder / "weights.npz").read_bytes()).hexdigest()
    info["final_train_loss"] = 0.5  # run.json's own content is digested too
    (folder / "run.json").write_text(json.dumps(info))
    with pytest.warns(KnownFallback, match="run.json does not match its digest"):
        assert RunStore(tmp_path).get(SMALL, snapshot_every=EVERY).trained_steps == SMALL.epoch


def _without_digests(folder: Path) -> None:
    """Remove ``"digests"`` from the entry's run.json (as an entry written before digests existed would be)."""
    info = json.loads((folder / "run.json").read_text())
    del info["digests"]
    (folder / "run.json").write_text(json.dumps(info, indent=2))


def _tail_lowered(path: Path, rows: int = 10, to: float = 0.01) -> None:
    """Set the train loss of the last ``rows`` rows of ``loss.csv`` to ``to`` (an edit that moves a curve's end)."""
    lines = path.read_text().splitlines()
    col = lines[0].split(",").index("train_loss")
    for i in range(len(lines) - rows, len(lines)):
        fields = lines[i].split(",")
        fields[col] = repr(to)
        lines[i] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("edited", [False, True])
def test_an_entry_without_digests_is_set_aside_never_signed(tmp_path, edited):
    """Issue 45, finding 3: run.json's digests deleted (and loss.csv's end edited) made the entry pass for one
    written before digests and be served, then signed. Such an entry cannot prove its files: it is set aside whole
    and its run trained again, bit for bit; nothing of it is signed."""
    folder = tmp_path / RunStore(tmp_path).get(SMALL, snapshot_every=EVERY).key
    _without_digests(folder)
    if edited:
        _tail_lowered(folder / "loss.csv")
    left = _files(folder)
    with pytest.warns(KnownFallback, match=r"run.json has no digests") as caught:
        again = RunStore(tmp_path).get(SMALL, snapshot_every=EVERY)
    assert str(folder) in str(caught[0].message)
    assert again.trained_steps == SMALL.epoch
    _same_run(again, linattn.run(SMALL, snapshot_every=EVERY, progress=False))
    set_aside, = (tmp_path / QUARANTINE).iterdir()
    assert _files(set_aside) == left  # moved as it was: not given digests
    assert "digests" in json.loads((folder / "run.json").read_text())  # the new entry is signed


def test_an_entry_whose_loss_csv_disagrees_with_its_run_json_is_set_aside(tmp_path):
    """Issue 45, finding 3: nothing compared run.json's final_train_loss with loss.csv. An entry whose loss.csv was
    edited and then signed again (digests recomputed, as a tool that re-signs entries would) is caught by that
    comparison."""
    from linattn.companion.runstore import add_digests

    folder = tmp_path / RunStore(tmp_path).get(SMALL, snapshot_every=EVERY).key
    recorded = json.loads((folder / "run.json").read_text())["final_train_loss"]
    _tail_lowered(folder / "loss.csv")
    add_digests(folder)
    with pytest.warns(KnownFallback, match=re.escape(f"last train loss 0.01 is not run.json's final_train_loss "
                                                     f"{recorded!r}")):
        assert RunStore(tmp_path).get(SMALL, snapshot_every=EVERY).trained_steps == SMALL.epoch
    assert len(list((tmp_path / QUARANTINE).iterdir())) == 1


def test_an_entry_keeps_its_value_weights_exactly_in_values_npy(tmp_path):
    """Issue 47: loss.csv holds the step and the losses as text; the value weights, which the store records for every
    run, are in values.npy, bit for bit those of a direct run with track_value, and served as such."""
    direct = linattn.run(replace(SMALL, track_value=True), progress=False)
    stored = RunStore(tmp_path).get(replace(SMALL, track_value=True), snapshot_every=EVERY)
    folder = tmp_path / stored.key
    assert (folder / "loss.csv").read_text().splitlines()[0] == "step,train_loss"
    values = np.load(folder / "values.npy")
    assert values.dtype == np.float64 and np.array_equal(values, direct.history.values)
    assert np.array_equal(stored.history.values, direct.history.values)
    assert RunStore(tmp_path).get(SMALL, snapshot_every=EVERY).history.values is None  # not asked for


def test_an_entry_with_its_value_weights_in_loss_csv_is_served_as_it_is(tmp_path):
    """An entry written before values.npy (the value weights as loss.csv's value_h columns) is read, not retrained."""
    from linattn.companion.runstore import add_digests
    from linattn.records import write_csv

    folder = tmp_path / RunStore(tmp_path).get(SMALL, snapshot_every=EVERY).key
    direct = linattn.run(replace(SMALL, track_value=True), progress=False)
    write_csv(folder / "loss.csv", direct.history.columns(), exact=True)
    (folder / "values.npy").unlink()
    add_digests(folder)
    served = _served_quietly(tmp_path, replace(SMALL, track_value=True))
    assert served.trained_steps == 0 and np.array_equal(served.history.values, direct.history.values)
    assert np.array_equal(served.history.train_loss, direct.history.train_loss)


def test_value_weights_that_do_not_fit_the_history_are_set_aside(tmp_path):
    """values.npy with a row too few, signed again (digests recomputed): the entry is set aside and trained again."""
    from linattn.companion.runstore import add_digests

    folder = tmp_path / RunStore(tmp_path).get(SMALL, snapshot_every=EVERY).key
    np.save(folder / "values.npy", np.load(folder / "values.npy")[:-1])
    add_digests(folder)
    with pytest.warns(KnownFallback, match=re.escape(f"values.npy holds float64 of shape ({SMALL.epoch - 1}, 3)")):
        assert RunStore(tmp_path).get(SMALL, snapshot_every=EVERY).trained_steps == SMALL.epoch
    assert len(list((tmp_path / QUARANTINE).iterdir())) == 1


@pytest.mark.parametrize("target", ["dangling", "foreign"])
def test_an_entry_that_is_a_symlink_is_set_aside_as_a_link_to_the_same_place(tmp_path, target):
    """Issue 45, finding 11: an entry that is a symbolic link to nothing failed every request (NotADirectoryError)
    and was never set aside, and a link set aside landed as a dangling relative link. A link (to nothing, or to a
    folder the store did not write: here a copy of a real entry) is set aside as a link naming the same place, and
    the run is trained into a real folder; the link's target is left as it was."""
    store = tmp_path / "store"
    folder = store / RunStore(store).get(SMALL, snapshot_every=EVERY).key
    elsewhere = tmp_path / "elsewhere"
    if target == "foreign":
        shutil.copytree(folder, elsewhere)
    shutil.rmtree(folder)
    folder.symlink_to(Path("..") / "elsewhere")  # relative, as a hand-made link often is
    before = _files(elsewhere) if target == "foreign" else None
    with pytest.warns(KnownFallback, match=re.escape(f"entry {folder} was damaged (it is a symbolic link to "
                                                     f"../elsewhere")):
        again = RunStore(store).get(SMALL, snapshot_every=EVERY)
    assert again.trained_steps == SMALL.epoch and folder.is_dir() and not folder.is_symlink()
    link, = (store / QUARANTINE).iterdir()
    assert link.is_symlink() and Path(os.readlink(link)).is_absolute()
    assert os.path.realpath(link) == os.path.realpath(elsewhere)
    if before is not None:
        assert _files(elsewhere) == before
    assert _served_quietly(store).trained_steps == 0


def test_an_entry_that_cannot_be_set_aside_is_named(tmp_path):
    folder = tmp_path / RunStore(tmp_path).get(SMALL, snapshot_every=EVERY).key
    _truncate(folder / "weights.npz")
    (tmp_path / QUARANTINE).write_text("a file where the quarantine folder goes")
    with pytest.raises(StoreError, match=re.escape(f"run store entry {folder} is damaged")):
        RunStore(tmp_path).get(SMALL, snapshot_every=EVERY)
    assert (folder / "weights.npz").is_file()  # left where it was, not deleted


def test_retrain_trains_each_run_again_once_per_token(tmp_path, monkeypatch):
    """A store asked to retrain (a token, or $LINATTN_RETRAIN as `linattn figures --retrain` sets it) trains each
    run again from its first step, once under that token; the retrained run equals a fresh one."""
    monkeypatch.delenv(ENV_RETRAIN, raising=False)
    RunStore(tmp_path).get(SMALL, snapshot_every=EVERY)
    direct = linattn.run(SMALL, snapshot_every=EVERY, progress=False)
    first = _served_quietly(tmp_path, retrain="one")
    assert first.trained_steps == SMALL.epoch
    _same_run(first, direct)
    assert _served_quietly(tmp_path, retrain="one").trained_steps == 0
    longer = RunStore(tmp_path, retrain="one").get(replace(SMALL, epoch=50), snapshot_every=EVERY)
    assert longer.trained_steps == 10  # carried on, not retrained: the entry is already this token's
    assert _served_quietly(tmp_path, cfg=replace(SMALL, epoch=50), retrain="two").trained_steps == 50
    with retraining(True):
        assert os.environ[ENV_RETRAIN]
        assert RunStore(tmp_path).get(SMALL, snapshot_every=EVERY).trained_steps == SMALL.epoch
        assert RunStore(tmp_path).get(SMALL, snapshot_every=EVERY).trained_steps == 0
    assert ENV_RETRAIN not in os.environ
    assert _served_quietly(tmp_path).trained_steps == 0
    assert not (tmp_path / QUARANTINE).exists()
    log = [json.loads(line) for line in (tmp_path / "trainings.jsonl").read_text().splitlines()]
    assert [row.get("retrained", False) for row in log] == [False, True, False, False, True, True, False, False]


def test_figures_retrain_flag_retrains_and_reexecutes(tmp_path, monkeypatch):
    """`linattn figures --retrain` reaches the runner as retrain=True, which re-executes the figure (force) with
    $LINATTN_RETRAIN set for its kernels."""
    import argparse

    from linattn.companion.runner import figure_args, schedule

    parser = argparse.ArgumentParser()
    figure_args.add_arguments(parser)
    assert parser.parse_args(["--retrain"]).retrain and not parser.parse_args([]).retrain
    seen = {}

    def fake_run(root, preset, found, parsed, everything, overrides, jobs, force, *rest):
        seen.update(force=force, token=os.environ.get(ENV_RETRAIN))
        return []

    monkeypatch.delenv(ENV_RETRAIN, raising=False)
    monkeypatch.setattr(schedule, "_run", fake_run)
    schedule.run_figures(preset="quick", only=["fig01b_attnm_loss"], out=tmp_path, retrain=True, progress=False)
    assert seen["force"] and seen["token"] and ENV_RETRAIN not in os.environ
    schedule.run_figures(preset="quick", only=["fig01b_attnm_loss"], out=tmp_path, progress=False)
    assert not seen["force"] and seen["token"] is None


# ── full and read-only disks (a small tmpfs; skipped where mounting is not permitted) ─────────────────────────────

def test_a_full_store_serves_its_runs_and_says_once_that_it_cannot_log_them(tmp_path):
    """Issue 45, finding 12: with every run stored and the store's disk full, a request failed on its
    trainings.jsonl line (OSError: [Errno 28], no path). Now the stored run is served; that the log cannot grow is
    said once (a KnownFallback: off the page), naming the log; a run that must be trained fails naming a file."""
    from disks import fill, tmpfs

    with tmpfs(tmp_path / "disk", "2M") as disk:
        store = disk / "store"
        RunStore(store).get(SMALL, snapshot_every=EVERY)
        log = store / "trainings.jsonl"
        pad = -(log.stat().st_size + len('{"pad": ""}\n')) % 4096  # its last block full: a new line needs another
        with open(log, "a") as f:
            f.write(json.dumps({"pad": "x" * pad}) + "\n")
        fill(disk)
        log = log.read_text()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            same = RunStore(store)
            assert same.get(SMALL, snapshot_every=EVERY).trained_steps == 0
            assert same.get(SMALL, snapshot_every=EVERY).trained_steps == 0
        said = [str(w.message) for w in caught]
        assert said == [f"run store: requests are not logged in {store / 'trainings.jsonl'} (No space left on "
                        "device); the runs served are as stored"]
        assert issubclass(caught[0].category, KnownFallback)
        assert (store / "trainings.jsonl").read_text() == log
        with pytest.raises(StoreError, match=r"could not write .*(/\.locks/|/[0-9a-f]{64}).* \(No space left on "
                                             r"device\)"):
            RunStore(store).get(replace(SMALL, seed=2), snapshot_every=EVERY)
        assert not [p for p in store.iterdir() if p.name.startswith(".") and p.name != ".locks"]


def test_a_read_only_store_is_served_read_only(tmp_path, monkeypatch):
    """Issue 45, finding 12: a read-only shared store was refused even with every run stored. It is read without a
    lock; a run it lacks is refused before any training, naming the store."""
    from disks import remount, tmpfs

    from linattn.companion import runstore

    with tmpfs(tmp_path / "disk", "4M") as disk:
        store = disk / "store"
        RunStore(store).get(SMALL, snapshot_every=EVERY)
        shutil.rmtree(store / ".locks")  # a shared store may never have had a reader's lock
        remount(disk, "ro")
        with pytest.warns(KnownFallback, match="requests are not logged .*Read-only file system"):
            served = RunStore(store).get(SMALL, snapshot_every=EVERY)
        assert served.trained_steps == 0
        _same_run(served, linattn.run(SMALL, snapshot_every=EVERY, progress=False))
        monkeypatch.setattr(runstore, "run", lambda *a, **k: pytest.fail("trained a run it cannot store"))
        with pytest.raises(StoreError, match=re.escape(f"run store {store} is read-only (Read-only file system)")):
            RunStore(store).get(replace(SMALL, seed=2), snapshot_every=EVERY)
        remount(disk, "rw")


def test_a_killed_writers_temporary_folder_is_removed_by_the_next_writer_of_its_key(tmp_path):
    """An entry is written into ``.<key>.<host>.<pid>.….tmp`` and renamed into place; a writer killed meanwhile left
    that folder for ever. The next writer of the key removes it (its process is gone); a live writer's is kept."""
    import socket
    import subprocess
    import sys

    key = run_key(SMALL, length=False, snapshot_every=EVERY)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".{key}.{socket.gethostname()}.{dead.pid}.abc123.tmp"
    live = tmp_path / f".{key}.{socket.gethostname()}.{os.getpid()}.def456.tmp"
    for folder in (stale, live):
        (folder / "entry").mkdir(parents=True)
        (folder / "entry" / "loss.csv").write_text("step,train_loss\n0,1.0\n")
    assert RunStore(tmp_path).get(SMALL, snapshot_every=EVERY).key == key
    assert not stale.exists() and live.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == sorted([".locks", live.name])


def test_each_request_reads_its_entry_once_and_a_held_length_is_carried_on_unread(tmp_path, monkeypatch):
    """get_many reads a stored entry once; extended() to a length the entry read already holds (a checkpoint) reads
    nothing more and trains nothing, bit for bit the direct run; a longer one goes through the store."""
    from linattn.companion import runstore

    RunStore(tmp_path).get(CFG, snapshot_every=EVERY).extended(500)  # checkpoints at 300 and 500
    reads = []
    monkeypatch.setattr(runstore._Entry, "load", classmethod(
        lambda cls, folder, f=runstore._Entry.load.__func__: reads.append(folder) or f(cls, folder)))
    store = RunStore(tmp_path)
    assert store.held(CFG, snapshot_every=EVERY) == 500 and store.held(CFG) == 0
    window = store.get_many([CFG], snapshot_every=EVERY)[0]
    longer = window.extended(500)
    assert len(reads) == 1 and longer.trained_steps == 0
    _same_run(longer, linattn.run(replace(CFG, epoch=500), snapshot_every=EVERY, progress=False))
    assert longer.extended(600).trained_steps == 100 and len(reads) == 2
    log = [json.loads(line) for line in (tmp_path / "trainings.jsonl").read_text().splitlines()]
    assert [(row["epoch"], row["trained_steps"]) for row in log[-3:]] == [(300, 0), (500, 0), (600, 100)]


def test_an_entry_is_written_once_into_its_folder_and_signed_as_it_reads_back(tmp_path, monkeypatch):
    """Issue 47: an entry's files go straight into its temporary folder, which is renamed into place whole (no
    temporary file and rename per file), and run.json is written once, last, its digests those of the files and of
    its own content as read back (recomputed here from the bytes, not through the store's digest functions)."""
    import linattn.records as records

    renamed = []
    replace_file = os.replace
    monkeypatch.setattr(records.os, "replace", lambda a, b: renamed.append(b) or replace_file(a, b))
    opened = []
    real_open = open

    def counting_open(path, *args, **kwargs):
        opened.append(Path(path).name)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counting_open)
    stored = RunStore(tmp_path).get(SMALL, snapshot_every=EVERY)
    monkeypatch.undo()
    folder = tmp_path / stored.key
    assert renamed == []  # no file of the entry was made under a temporary name of its own
    assert opened.count("run.json") == 1
    info = json.loads((folder / "run.json").read_text())
    digests = info.pop("digests")
    assert digests.pop("run.json") == hashlib.sha256(json.dumps(info, sort_keys=True).encode()).hexdigest()
    assert digests == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()
                       if p.name != "run.json"}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert _served_quietly(tmp_path).trained_steps == 0


def test_the_exact_csv_is_each_numbers_shortest_text(tmp_path):
    """records.write_csv(exact=True): a header, then per row the step as an integer and every other number as the
    shortest text that reads back to the same float64 (Python's repr), whatever the number (subnormal, huge, nan,
    inf, negative zero); an empty history is its header alone."""
    from linattn.records import write_csv

    odd = [0.1, 1 / 3, -0.0, 5e-324, 1.7976931348623157e308, float("nan"), float("inf"), 123456789.125, 1e-17]
    loss = np.array(odd)
    write_csv(tmp_path / "a.csv", {"step": np.arange(len(odd)), "train_loss": loss, "test_icl": loss[::-1]},
              exact=True)
    lines = (tmp_path / "a.csv").read_text().splitlines()
    assert lines[0] == "step,train_loss,test_icl"
    for i, line in enumerate(lines[1:]):
        step, a, b = line.split(",")
        assert step == str(i) and a == repr(odd[i]) and b == repr(odd[::-1][i])
        assert np.array_equal(float(a), loss[i], equal_nan=True)
    write_csv(tmp_path / "b.csv", {"step": np.zeros(0), "train_loss": np.zeros(0)}, exact=True)
    assert (tmp_path / "b.csv").read_text() == "step,train_loss\n"
