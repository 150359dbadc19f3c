"""linattn sweep against the probes of issue 45: YAML ranges in spec files (not YAML 1.1's base-60 numbers), an
ambiguous spec value refused naming the file, spec errors naming the file, an unusable --out, a dry run into a closed
pipe, cells stored one by one on slow engines, a Ctrl-C after every cell is stored, two sweeps into one folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import linattn
from linattn import ConfigError, RunConfig
from linattn.cli import main
from linattn.training.keys import run_key

pytest.importorskip("dask.distributed")
xr = pytest.importorskip("xarray")

from linattn.companion import sweeps  # noqa: E402
from linattn.companion.sweeps import cells  # noqa: E402

BIN = Path(sys.executable).parent
TINY = dict(model="attnS", head_num=2, in_dim=2, seq_len=8, trainset_size=200, lr=0.05, init=0.1, draws="streams")
TINY_FLAGS = ["--model", "attnS", "--head", "2", "--in_dim", "2", "--seq_len", "8", "--trainset_size", "200",
              "--lr", "0.05", "--init", "0.1", "--draws", "streams", "--epoch", "10"]


def _dry_run_labels(capsys, tmp_path, yaml_text: str) -> list[str]:
    spec = tmp_path / "grid.yaml"
    spec.write_text(yaml_text)
    assert main(["sweep", *TINY_FLAGS, "--spec", str(spec), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    return [line.split("  ")[1].strip() for line in lines[1:]]


@pytest.mark.parametrize("text, key, values", [
    ("seed: 1:6", "seed", [1, 2, 3, 4, 5]),  # YAML 1.1: the base-60 number 66
    ("seed: 2:8", "seed", [2, 3, 4, 5, 6, 7]),  # 128
    ("seed: 1:9:2", "seed", [1, 3, 5, 7]),  # 4142
    ("head_num: 1:4", "head_num", [1, 2, 3]),  # 64 heads
    ("head: 12:14", "head_num", [12, 13]),
    ("seed: 0:3", "seed", [0, 1, 2]),
    ("seed: '1:3'", "seed", [1, 2]),
    ("seed: [1, 7]\ninit: [1e-2, 0.5]", None, None),
])
def test_a_range_in_a_spec_file_is_a_range(capsys, tmp_path, text, key, values):
    labels = _dry_run_labels(capsys, tmp_path, text + "\n")
    if key is None:
        assert labels == [f"seed={s}, init={i}" for s in (1, 7) for i in ("0.01", "0.5")]
    else:
        assert labels == [f"{key}={v}" for v in values]


@pytest.mark.parametrize("text, value, yaml11", [
    ("seed: [010, 2]", "010", "8"),  # YAML 1.1: octal
    ("seed: 0x10", "0x10", "16"),
    ("seed: [1_0]", "1_0", "10"),
    ("init: 1:30.5", "1:30.5", "90.5"),  # base 60
])
def test_an_ambiguous_spec_value_is_refused_naming_the_file(capsys, tmp_path, text, value, yaml11):
    spec = tmp_path / "grid.yaml"
    spec.write_text("lr: [0.05]\n" + text + "\n")
    out = tmp_path / "sweep"
    assert main(["sweep", *TINY_FLAGS, "--spec", str(spec), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"linattn sweep: error: --spec {spec}: line 2: ") and err.count("\n") == 1, err
    assert f"{value} is ambiguous" in err and f"YAML 1.1 reads it as {yaml11}" in err
    assert not out.exists()


@pytest.mark.parametrize("text, says", [
    ("head: 0:x", "head: 0:x: START:STOP[:STEP] takes integers"),
    ("colour: [1, 2]", "colour: not a setting that can be swept"),
    ("seed: [a, b]", "seed: expected an integer, got 'a'"),
    ("seed: 5:2", "seed: 5:2: the range is empty"),
    ("seed: [1, 1]", "seed: a value is listed twice"),
    ("seed: [1]\nhead_num: [2]\nhead: [3]", "head: head_num is swept twice"),
])
def test_a_spec_file_error_names_the_spec_file(capsys, tmp_path, text, says):
    spec = tmp_path / "grid.yaml"
    spec.write_text(text + "\n")
    assert main(["sweep", *TINY_FLAGS, "--spec", str(spec), "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"linattn sweep: error: --spec {spec}: {says}"), err
    assert "--grid" not in err and err.count("\n") == 1
    assert not (tmp_path / "a").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc (Linux)")
def test_an_unusable_out_folder_is_one_line_and_exit_2(capsys, tmp_path):
    assert main(["sweep", *TINY_FLAGS, "--grid", "seed=0,1", "--out", "/proc/x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("linattn sweep: error: --out /proc/x cannot be created in /proc") and err.count("\n") == 1
    with pytest.raises(ConfigError, match="out /proc/x cannot be created") as caught:
        sweeps.sweep(RunConfig(**TINY, epoch=10), {"seed": [0]}, out="/proc/x")
    assert caught.value.field == "out"


def test_a_dry_run_into_a_closed_pipe_ends_quietly(tmp_path):
    """``linattn sweep --dry-run | head -1``: the reader closes the pipe after one line; no traceback."""
    cmd = [str(BIN / "linattn"), "sweep", *TINY_FLAGS, "--grid", "seed=0:400", "--grid", "init=0.1,0.2,0.3",
           "--dry-run"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 141 and first.startswith(b"1200 cells")
    assert err == "", err


def _finished(out: Path) -> set[str]:
    runs = out / cells.RUNS
    return {p.name for p in runs.iterdir() if cells.is_finished(p)} if runs.is_dir() else set()


@pytest.mark.parametrize("engine", ["exact", "autograd"])
def test_a_task_stores_each_cell_as_soon_as_it_is_done(tmp_path, monkeypatch, engine):
    """A task trains its cells together (run_many) but stores each one before the next starts: with a slow engine a
    part of 16 cells took minutes before any was stored, and a Ctrl-C lost them all."""
    from linattn.training import experiment

    base = RunConfig(**TINY, epoch=30, engine=engine)
    part = [dict(base.to_dict(), seed=s) for s in range(3)]
    keys = [run_key(RunConfig.from_dict(c)) for c in part]
    seen, carry_out = [], experiment.carry_out

    def train(*args, **kwargs):  # each member as it starts training: which cells are stored by then
        seen.append(_finished(tmp_path))
        return carry_out(*args, **kwargs)

    monkeypatch.setattr(experiment, "carry_out", train)
    results = cells.train_cells([(c, k, f"seed={c['seed']}") for c, k in zip(part, keys)], str(tmp_path))
    assert [r["outcome"] for r in results] == ["trained"] * 3
    assert seen == [set(), {keys[0]}, {keys[0], keys[1]}]
    assert _finished(tmp_path) == set(keys)
    assert [r["key"] for r in _log(tmp_path)] == keys


def _log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / cells.LOG).read_text().splitlines()]


# a `linattn sweep` whose Ctrl-C comes once every cell is stored: right after the last cell, or while the dataset
# is being built (the first call of build_dataset sends it)
_CTRL_C = """
import os, signal, sys
from linattn.cli import main
from linattn.training.keys import run_key
from linattn.companion.sweeps import engine
moment = sys.argv[1]
original = getattr(engine, moment)
calls = []
def late(*args, **kwargs):
    calls.append(1)
    result = original(*args, **kwargs) if moment == "_run" else None
    if len(calls) == 1:
        os.kill(os.getpid(), signal.SIGINT)
    return original(*args, **kwargs) if moment != "_run" else result
setattr(engine, moment, late)
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["_run", "build_dataset"])
def test_a_ctrl_c_after_every_cell_is_stored_writes_the_dataset(tmp_path, moment):
    out = tmp_path / "sweep"
    done = subprocess.run([sys.executable, "-c", _CTRL_C, moment, "sweep", *TINY_FLAGS, "--grid", "seed=0:3",
                           "--workers", "1", "--out", str(out), "--quiet"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 130, done.stderr
    assert len(_finished(out)) == 3
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "3 of 3 cells are stored" in err[0] and f"wrote {out / 'sweep.nc'}" in err[0], err
    ds = xr.open_dataset(out / "sweep.nc")
    assert (ds.status == "done").all() and ds.sizes["seed"] == 3
    assert not [p.name for p in out.rglob("*.tmp")]


@pytest.mark.slow
def test_two_identical_sweeps_into_one_folder_train_each_cell_once(tmp_path):
    """Started together, both submit every cell; a cell's lock makes the second wait for the first's cell and skip
    it (or train it, where the first has not): every cell is trained once, and both end with the whole dataset."""
    out = tmp_path / "sweep"
    cmd = [str(BIN / "linattn"), "sweep", *TINY_FLAGS, "--engine", "autograd", "--epoch", "150", "--grid", "seed=0:6",
           "--workers", "1", "--out", str(out), "--quiet"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    trained = [r["key"] for r in _log(out) if r["outcome"] == "trained"]
    assert len(trained) == 6 and len(set(trained)) == 6
    assert len(_finished(out)) == 6 and (xr.open_dataset(out / "sweep.nc").status == "done").all()


@pytest.mark.parametrize("batched", [False, True])
def test_run_many_reports_each_member_as_it_is_done(batched):
    """run_many's on_result gets each member's place and its result (what the returned list holds there), member by
    member in order; a diverged member's exception too."""
    from linattn.training.batch import run_many

    configs = [RunConfig(**dict(TINY, seed=s), epoch=20) for s in range(2)]
    configs.append(RunConfig(**dict(TINY, lr=1e4), epoch=20))
    got = []
    results = run_many(configs, batched=batched, on_result=lambda i, r: got.append((i, r)))
    assert [i for i, _ in got] == [0, 1, 2] and all(r is results[i] for i, r in got)
    assert isinstance(results[2], linattn.TrainingDiverged)
    assert all(r.config == c for r, c in zip(results[:2], configs[:2]))
