"""linattn sweep and linattn.companion.sweeps.sweep: refusals before any work, the dry run, the dataset against the run
folders, failures recorded per cell, a killed worker, an interrupted sweep resumed without losing or redoing a run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import linattn
from linattn import ConfigError, RunConfig
from linattn.cli import main
from linattn.records import process_alive
from linattn.training.keys import run_key

pytest.importorskip("dask.distributed")
xr = pytest.importorskip("xarray")

from linattn.companion import sweeps  # noqa: E402
from linattn.companion.sweeps import cells  # noqa: E402

BIN = Path(sys.executable).parent
# tiny runs: a few hundred steps of a two-head ATTN_S on D = 2 (the exact engine: milliseconds a run)
TINY = dict(model="attnS", head_num=2, in_dim=2, seq_len=8, trainset_size=200, lr=0.05, init=0.1, draws="streams")
TINY_FLAGS = ["--model", "attnS", "--head", "2", "--in_dim", "2", "--seq_len", "8", "--trainset_size", "200",
              "--lr", "0.05", "--init", "0.1", "--draws", "streams"]


def finished_folders(out: Path) -> dict[str, tuple]:
    """name → (inode, mtime in ns) of every finished run folder under ``out``."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (out / "runs").iterdir()
            if cells.is_finished(p)}


def log_rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "sweep.log").read_text().splitlines()]


# ── refusals and the dry run (no cluster) ─────────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize("grid, says", [
    (["--grid", "colour=1,2"], "--grid colour: not a setting that can be swept"),
    (["--grid", "seed=a,b"], "--grid seed: expected an integer, got 'a'"),
    (["--grid", "init=0:3"], "START:STOP[:STEP] takes integers"),
    (["--grid", "seed=5:2"], "the range is empty"),
    (["--grid", "seed=0,1,0"], "--grid seed: a value is listed twice"),
    (["--grid", "seed"], "expected KEY=V1,V2"),
    (["--grid", "model=attnX"], "'attnX' is not one of attnM, attnS, mlp"),
    (["--grid", "head=2,0"], "cell head_num=0: --head_num must be a positive integer, got 0"),
    (["--grid", "init=0.1,-1"], "cell init=-1: --init must be a positive finite number"),
    (["--grid", "trainset_size=100,inf", "--draws", "reference"], "add --draws streams"),
    (["--grid", "seed=0:2", "--grid", "seed=3"], "seed is swept twice"),
    ([], "give at least one --grid"),
])
def test_a_bad_grid_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys, grid, says):
    out = tmp_path / "sweep"
    argv = ["sweep", *TINY_FLAGS, "--epoch", "10", *grid, "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("linattn sweep: error: ") and err.count("\n") == 1, err
    assert says in err
    assert not out.exists()


def test_a_bad_spec_file_or_out_folder_is_refused(tmp_path, capsys):
    spec = tmp_path / "grid.yaml"
    spec.write_text("seed: [0, 1]\nhead: 0:x\n")
    assert main(["sweep", "--spec", str(spec), "--out", str(tmp_path / "a")]) == 2
    assert f"--spec {spec}: head: 0:x: START:STOP[:STEP] takes integers" in capsys.readouterr().err
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    assert main(["sweep", "--grid", "seed=0,1", "--out", str(tmp_path / "notes")]) == 2
    assert "holds no sweep" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "notes").iterdir()) == ["keep.txt"]
    assert main(["sweep", "--collect", str(tmp_path / "notes")]) == 2
    assert "not a sweep folder" in capsys.readouterr().err


def test_the_python_api_names_the_field(tmp_path):
    base = RunConfig(**TINY, epoch=10)
    with pytest.raises(ConfigError, match="'colour' is not a setting that can be swept"):
        sweeps.sweep(base, {"colour": [1]}, out=tmp_path / "a")
    with pytest.raises(ConfigError, match=r"grid\['seed'\] must be a list of values"):
        sweeps.sweep(base, {"seed": 3}, out=tmp_path / "a")
    with pytest.raises(ConfigError, match=r"cell seed=1, head_num=0: head_num must be a positive integer"):
        sweeps.sweep(base, {"seed": [1], "head_num": [2, 0]}, out=tmp_path / "a")
    assert not (tmp_path / "a").exists()


def test_dry_run_lists_every_cell_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "sweep"
    spec = tmp_path / "grid.yaml"
    spec.write_text("seed: 0:3\n")
    assert main(["sweep", *TINY_FLAGS, "--spec", str(spec), "--grid", "init=0.05,0.1", "--out", str(out),
                 "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "6 cells (seed 3 × init 2): 6 to run, 0 finished or diverged before"
    labels = [line.split("  ")[1].strip() for line in lines[1:]]
    assert labels == [f"seed={s}, init={i}" for s in range(3) for i in ("0.05", "0.1")]
    assert all("to run" in line and "runs/" in line for line in lines[1:])
    assert not out.exists()


def test_a_cell_is_a_run_folder_that_load_run_reads(tmp_path):
    """The task a worker runs writes the one format of a run under the run's key; linattn.load_run reads it."""
    cfg = RunConfig(**TINY, epoch=20, testset_size=10)
    key = run_key(cfg)
    result = cells.train_cell(cfg.to_dict(), str(tmp_path), key)
    assert result["status"] == "done" and result["outcome"] == "trained"
    saved = linattn.load_run(cells.run_folder(tmp_path, key))
    plain = linattn.run(cfg, progress=False)
    assert saved.config == cfg and saved.key == key and saved.engine == plain.engine
    for name, col in plain.history.columns().items():
        assert np.array_equal(saved.history.columns()[name], col), name
    assert all(np.array_equal(saved.weights[k], plain.weights[k]) for k in plain.weights)
    assert np.array_equal(saved.datasets.test_icl.X, plain.datasets.test_icl.X)


# ── sweeps that run (a local cluster or a real scheduler) ─────────────────────────────────────────────────────────

@pytest.mark.slow
def test_the_dataset_holds_every_cell_as_its_run_folder_says(tmp_path, capsys):
    out = tmp_path / "sweep"
    base = RunConfig(**TINY, epoch=300, testset_size=50, icl=0.5)
    # lr 1e4 diverges: recorded for its cells, the others go on
    ds = sweeps.sweep(base, {"seed": [0, 1], "lr": [0.05, 1e4]}, out=out, workers=1, progress=False)
    assert dict(ds.sizes) == {"seed": 2, "lr": 2, "step": 300, "direction": 2, "m": 3}
    assert list(ds.seed.values) == [0, 1] and list(ds.lr.values) == [0.05, 1e4]
    assert ds.status.sel(lr=0.05).values.tolist() == ["done", "done"]
    assert ds.status.sel(lr=1e4).values.tolist() == ["diverged", "diverged"]
    assert all("the training loss became" in m for m in ds.message.sel(lr=1e4).values)
    assert np.isnan(ds.train_loss.sel(lr=1e4)).all()
    for seed in (0, 1):
        cfg = RunConfig(**dict(TINY, seed=seed, lr=0.05), epoch=300, testset_size=50, icl=0.5)
        saved = linattn.load_run(cells.run_folder(out, run_key(cfg)))
        for name in ("train_loss", "test_iwl", "test_icl"):
            assert np.array_equal(ds[name].sel(seed=seed, lr=0.05).values, getattr(saved.history, name))
        # the summary keeps the run's float64; loss.csv has 10 significant digits
        assert np.isclose(ds.final_train_loss.sel(seed=seed, lr=0.05), saved.history.train_loss[-1], rtol=1e-9, atol=0)
        assert saved.weights is not None and saved.init is not None
    on_disk = xr.open_dataset(out / "sweep.nc")
    xr.testing.assert_identical(on_disk.load(), ds)
    (out / "sweep.nc").unlink()
    assert main(["sweep", "--collect", str(out)]) == 0
    assert "dimensions: seed 2, lr 2, step 300" in capsys.readouterr().out
    xr.testing.assert_identical(xr.open_dataset(out / "sweep.nc").load(), ds)
    # the same sweep again trains nothing: the finished cells and the recorded divergences are skipped
    before = finished_folders(out)
    again = sweeps.sweep(base, {"seed": [0, 1], "lr": [0.05, 1e4]}, out=out, workers=1, progress=False)
    xr.testing.assert_identical(again, ds)
    assert finished_folders(out) == before
    assert [r["outcome"] for r in log_rows(out)[-4:]] == ["skipped"] * 4


def _spawn(*args, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "dask"), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            **kwargs)


@pytest.mark.slow
def test_a_killed_worker_loses_nothing_and_the_numbers_equal_a_plain_run(tmp_path):
    from dask.distributed import Client

    address_file = tmp_path / "scheduler.json"
    procs = [_spawn("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--dashboard-address", ":0",
                    "--scheduler-file", str(address_file))]
    try:
        for _ in range(2):  # no nanny: a killed worker stays dead, and its tasks must move to the other
            procs.append(_spawn("worker", "--scheduler-file", str(address_file), "--host", "127.0.0.1",
                                "--nthreads", "1", "--no-nanny", "--no-dashboard"))
        deadline = time.time() + 60
        while not address_file.exists() and time.time() < deadline:
            time.sleep(0.1)
        with Client(scheduler_file=str(address_file), timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
            out = tmp_path / "sweep"
            base = RunConfig(**TINY, epoch=3000)
            grid = {"seed": list(range(6))}
            result = {}
            runner = threading.Thread(target=lambda: result.update(
                ds=sweeps.sweep(base, grid, client=client, out=out, progress=False)))
            runner.start()
            while not (out / "runs").is_dir() or not finished_folders(out):  # mid-sweep: one run finished
                assert runner.is_alive(), "the sweep ended before a worker could be killed"
                time.sleep(0.02)
            busy = next(w for w, tasks in client.processing().items() if tasks)
            pid = client.run(os.getpid, workers=[busy])[busy]
            os.kill(pid, signal.SIGKILL)
            runner.join(timeout=120)
            assert not runner.is_alive()
            assert len(client.scheduler_info()["workers"]) == 1
    finally:
        for p in procs:
            p.kill()
            p.wait()
    ds = result["ds"]
    assert (ds.status == "done").all()
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as on the workers: the same reductions, the same bits
    try:
        for seed in grid["seed"]:
            cfg = RunConfig(**dict(TINY, seed=seed), epoch=3000)
            plain = linattn.run(cfg, progress=False)
            folder = cells.run_folder(out, run_key(cfg))
            linattn.write_outputs(plain, tmp_path / f"plain{seed}", save_data=True)
            assert (folder / "loss.csv").read_bytes() == (tmp_path / f"plain{seed}" / "loss.csv").read_bytes()
            saved = linattn.load_run(folder)
            assert all(np.array_equal(saved.weights[k], plain.weights[k]) for k in plain.weights)
            assert np.array_equal(ds.train_loss.sel(seed=seed).values, saved.history.train_loss)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_an_interrupted_sweep_resumes_losing_and_redoing_no_run(tmp_path):
    out = tmp_path / "sweep"
    cmd = [str(BIN / "linattn"), "sweep", *TINY_FLAGS, "--epoch", "3000", "--grid", "seed=0:8", "--workers", "2",
           "--out", str(out), "--quiet"]
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while not (out / "runs").is_dir() or len(finished_folders(out)) < 2:
            assert first.poll() is None, "the sweep ended before it could be interrupted"
            time.sleep(0.02)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the command and its worker processes, as a lost machine
        first.wait()
    kept = finished_folders(out)
    assert 2 <= len(kept) < 8
    # each task logs a run once it is in place: the log claims no run that is not there, and misses at most the runs
    # that were being put in place when the command was killed (one a worker)
    claimed = {r["key"] for r in log_rows(out) if r["outcome"] == "trained"} if (out / "sweep.log").exists() else set()
    assert claimed <= set(kept) and len(set(kept) - claimed) <= 2
    logged = len(log_rows(out)) if (out / "sweep.log").exists() else 0
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    this_run = log_rows(out)[logged:]
    assert len(this_run) == 8 and len({r["key"] for r in this_run}) == 8  # each cell once
    assert {r["key"] for r in this_run if r["outcome"] == "skipped"} == set(kept)
    assert {r["outcome"] for r in this_run if r["key"] not in kept} == {"trained"}
    after = finished_folders(out)
    assert len(after) == 8 and all(after[k] == v for k, v in kept.items())  # the same folders, untouched
    assert not list((out / "runs").glob(".*.tmp"))  # the killed tasks' leftovers are gone
    ds = xr.open_dataset(out / "sweep.nc")
    assert (ds.status == "done").all() and ds.sizes["seed"] == 8


@pytest.mark.slow
def test_a_local_cluster_binds_no_fixed_port(tmp_path, capfd):
    """With port 8787 (Dask's usual dashboard port) held by another program, a sweep on its own local cluster
    prints no warning: every server of the cluster binds a free port."""
    import socket
    import warnings

    holder = socket.socket()
    try:
        holder.bind(("", 8787))
    except OSError:
        pass  # something else holds it already: the test stands as it is
    holder.listen()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with sweeps.local_client(1) as client:
                ds = sweeps.sweep(RunConfig(**TINY, epoch=50), {"seed": [0, 1]}, client=client, out=tmp_path / "s",
                                  progress=False)
    finally:
        holder.close()
    assert (ds.status == "done").all()
    assert not [str(w.message) for w in caught if "8787" in str(w.message) or "already in use" in str(w.message)]
    assert "already in use" not in capfd.readouterr().err


def test_the_dataset_attributes_hold_only_the_fixed_settings(tmp_path):
    """A swept setting is a coordinate of the dataset, not one of its fixed settings."""
    spec = sweeps.Grid(RunConfig(**TINY, epoch=10), {"seed": [0, 1], "init": [0.1, 0.2]})
    ds = sweeps.build_dataset(spec, tmp_path)
    settings = json.loads(ds.attrs["settings"])
    assert "seed" not in settings and "init" not in settings
    assert settings["head_num"] == TINY["head_num"] and settings["epoch"] == 10
    assert list(ds.seed.values) == [0, 1] and list(ds.init.values) == [0.1, 0.2]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="zombies are told apart through /proc (Linux)")
def test_a_zombie_task_counts_as_gone_and_its_leftover_is_removed(tmp_path):
    """A killed task whose parent died too stays a zombie until reaped: it can write nothing, so its temporary folder
    is stale (the second sweep of the interrupted-sweep test met one); a live process's folder is kept."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    while Path(f"/proc/{child.pid}/stat").read_text().split(") ")[1][0] != "Z":
        time.sleep(0.01)  # exited, not yet reaped: a zombie
    try:
        host = socket.gethostname()
        runs = tmp_path / cells.RUNS
        dead = runs / f".key1.{host}.{child.pid}.abc.tmp"
        live = runs / f".key2.{host}.{os.getpid()}.abc.tmp"
        for d in (dead, live):
            d.mkdir(parents=True)
        assert not process_alive(child.pid) and process_alive(os.getpid())
        cells.remove_stale_tmp(tmp_path)
        assert not dead.exists() and live.exists()
    finally:
        child.wait()


def test_tasks_keep_one_shape_and_one_data_draw_together():
    """Cells of one shape go to tasks together, the ranks of one seed side by side, at most one task per worker
    of each shape and at most BATCH cells a task; another model is another task."""
    from linattn.companion.sweeps.engine import tasks
    from linattn.companion.sweeps.grid import Grid

    base = RunConfig(model="attnS", in_dim=3, head_num=2, trainset_size=50, draws="streams")
    grid = Grid(base, {"rank": [1, 2, 3], "seed": [0, 1, 2, 3]})
    todo = [(cell, f"k{i}") for i, cell in enumerate(grid.cells())]
    todo.append((Grid(RunConfig(model="attnM", in_dim=3, head_num=2, trainset_size=50), {"seed": [0]}).cells()[0],
                 "m"))
    parts = tasks(todo, workers=2, most=16)
    assert [len(p) for p in parts] == [6, 6, 1] and parts[-1][0][1] == "m"
    seeds = [[cell.config.seed for cell, _ in p] for p in parts[:2]]
    assert seeds == [[0, 0, 0, 1, 1, 1], [2, 2, 2, 3, 3, 3]]
    assert [len(p) for p in tasks(todo, workers=1, most=4)] == [4, 4, 4, 1]


def test_no_workers_is_no_cluster():
    """workers=0 starts nothing: the caller trains in its own process (the phase page at the paper preset)."""
    from linattn.companion.sweeps.engine import local_client

    with local_client(0) as client:
        assert client is None
