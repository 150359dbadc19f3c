"""One cell of a sweep on disk, and the task that trains it.

A sweep folder ``DIR`` holds::

    runs/<key>/      one finished run: what ``linattn train --out`` writes (loss.csv, run.json, init.npz,
                     weights.npz; with save_data also data.npz) and summary.json
    failed/<key>.json  a cell that diverged or failed: its settings, status and message
    sweep.json       the grid last swept into DIR (what ``linattn sweep --collect`` rebuilds)
    sweep.log        one JSON line per cell and sweep: trained, skipped (already finished) or failed
    .locks/<key>.lock  a cell's lock, held while a task trains it (:func:`cell_lock`)
    sweep.nc         the dataset (:mod:`linattn.companion.sweeps.dataset`)

``<key>`` is the run's key (:func:`linattn.training.keys.run_key`: the settings, its length included, the numerical
libraries and the code that computes a trajectory): a run folder holds one finished run of exactly ``epoch`` steps.
It is the one format of a run (:func:`linattn.training.result.write_outputs`), so :func:`linattn.load_run` reads it.

:func:`train_cells` is the task a Dask worker runs: a pure function of some cells' settings and folder (cells of one
shape, trained together by ``linattn.run_many`` and each stored as soon as it is done) that returns a small summary
of each. Each cell is trained as :func:`train_cell` trains one, under its lock: it checks for a finished run before
training (a cell finished meanwhile, by another sweep into the same folder too, is skipped),
writes into a temporary folder, and renames it into place only when the run is complete, so an interrupted task
leaves no run folder (its cells are trained again by the next sweep) and a second writer of the same cell loses the
rename harmlessly.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from ... import theory
from ...analysis import loss_curves
from ...config import RunConfig
from ...records import remove_stale_temps, temp_dir, write_json
from ...training.experiment import run
from ...training.result import write_outputs
from ...training.train import TrainingDiverged

RUNS, FAILED, LOG, LOCKS = "runs", "failed", "sweep.log", ".locks"
DONE, DIVERGED, ERROR, MISSING = "done", "diverged", "failed", "missing"


def run_folder(root, key: str) -> Path:
    return Path(root) / RUNS / key


def failure_file(root, key: str) -> Path:
    return Path(root) / FAILED / f"{key}.json"


def is_finished(folder: Path) -> bool:
    """A run folder is finished once it is in place: it only ever appears whole (renamed from its temporary
    folder)."""
    return (folder / "summary.json").is_file()


def settled(root, key: str) -> bool:
    """Whether the cell ``key`` has its outcome on disk: a finished run, or a record of its failure."""
    return is_finished(run_folder(root, key)) or failure_file(root, key).is_file()


def recorded_divergence(root, key: str) -> dict | None:
    """The failure record of a cell that diverged, or None. Divergence is a property of the settings (same settings,
    same numbers), so such a cell is not tried again; a cell that failed otherwise is."""
    path = failure_file(root, key)
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    return record if record.get("status") == DIVERGED else None


def _finite_or_none(values):
    return [float(v) if np.isfinite(v) else None for v in np.asarray(values, dtype=np.float64)]


def theory_levels(cfg: RunConfig, cov) -> np.ndarray:
    """L(M_0) … L(M_D) for the run's covariance (``theory.plateau_losses``; with ``vary_len`` the levels of the loss
    averaged over prefix lengths, ``theory.vary_len_plateau_losses``)."""
    if cfg.vary_len:
        return theory.vary_len_plateau_losses(cov, cfg.seq_len, normalize=cfg.normalize)
    return theory.plateau_losses(cov, cfg.N)


def summarise(history, cov, cfg: RunConfig) -> dict:
    """What a run did, by the library's diagnostics: the plateau level found at each saddle M_m
    (``loss_curves.saddle_plateaus``, the first stretch at each; None where none), the step of each drop d, named by
    the loss level it crosses: the loss first below the midpoint of L(M_{d-1}) and L(M_d) (``loss_curves.drop_steps``,
    None where the loss never got there; a run that learns a later direction first crosses the same level), the
    directions learned (``loss_curves.directions_learned``), the first drop from start to end value
    (``loss_curves.first_drop_step``) and the final losses; ``theory_levels`` are the saddles' losses the others are
    measured against."""
    loss = np.asarray(history.train_loss, dtype=np.float64)
    levels = theory_levels(cfg, cov)
    found = np.full(len(levels), np.nan)
    if loss.size >= 3 and np.all(np.isfinite(loss)):
        sp = loss_curves.saddle_plateaus(loss, levels)
        for m, level in zip(sp.m, sp.plateaus.levels):
            if m is not None and np.isnan(found[m]):
                found[m] = level
    first = loss_curves.first_drop_step(loss) if loss.size >= 2 else None
    out = {"theory_levels": _finite_or_none(levels), "plateau_levels": _finite_or_none(found),
           "drop_steps": _finite_or_none(loss_curves.drop_steps(loss, levels)),
           "directions_learned": loss_curves.directions_learned(loss, levels), "first_drop_step": first,
           "final_train_loss": float(loss[-1])}
    for name in ("test_iwl", "test_icl"):
        curve = getattr(history, name)
        out[f"final_{name}"] = None if curve is None else float(curve[-1])
    return out


def log(root, **row) -> None:
    """Append ``row`` (with the time) to ``root/sweep.log`` as one JSON line. The task that trains a cell logs it
    itself once its folder is in place, so a sweep killed before its client heard back still lists every run it
    kept (one ``write`` of a line opened for appending: lines from several processes do not interleave)."""
    row["time"] = round(time.time(), 3)
    with open(Path(root) / LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def remove_stale_tmp(root) -> None:
    """Delete the temporary folders that killed tasks of this host left under ``root/runs`` (their process is gone)."""
    remove_stale_temps(Path(root) / RUNS)


def _result(key, status, outcome, *, message="", wall_time=0.0, summary=None) -> dict:
    return {"key": key, "status": status, "outcome": outcome, "message": message, "wall_time": wall_time,
            "summary": summary}


def _record_failure(root, key: str, cfg: RunConfig, status: str, message: str, wall_time: float) -> dict:
    path = failure_file(root, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"status": status, "message": message, "wall_time_s": round(wall_time, 3),
                      "settings": cfg.to_dict()})
    return _result(key, status, "failed", message=message, wall_time=wall_time)


def train_cell(settings: dict, root: str, key: str, *, save_data: bool = False, threads: int = 1,
               label: str = "") -> dict:
    """Train the cell of ``settings`` (``RunConfig.to_dict()``) into ``root/runs/key`` unless it is there already.

    Returns ``{key, status, outcome, message, wall_time, summary}``: ``outcome`` is ``"trained"``, ``"skipped"``
    (finished before this task started) or ``"failed"``; ``status`` is ``"done"``, ``"diverged"`` or ``"failed"``
    (any other exception: its type and message). A failure is also written to ``root/failed/key.json``; it never
    raises, so one cell's failure does not stop the others. The outcome is logged to ``root/sweep.log`` with
    ``label`` (the cell as ``--grid`` writes it) before the task returns (:func:`log`).
    """
    with cell_lock(root, key) as lock:
        lock.take(wait=True)  # another sweep's task training this cell: its run is then skipped
        result = _train_cell(settings, root, key, save_data=save_data, threads=threads)
    log(root, key=key, cell=label, outcome=result["outcome"], status=result["status"],
        wall_time=round(result["wall_time"], 3))
    return result


def _train_cell(settings: dict, root: str, key: str, *, save_data: bool, threads: int) -> dict:
    folder = run_folder(root, key)
    if is_finished(folder):
        return _skipped(folder, key)
    cfg = RunConfig.from_dict(settings)
    start = time.perf_counter()
    try:
        result = run(cfg, progress=False, threads=threads)
    except Exception as e:  # noqa: BLE001 - any error is this cell's outcome, recorded; the others go on
        return _failed(root, key, cfg, e, time.perf_counter() - start)
    return _store(result, root, key, save_data=save_data)


def train_cells(cells: list[tuple[dict, str, str]], root: str, *, save_data: bool = False, threads: int = 1) -> list:
    """:func:`train_cell` of each ``(settings, key, label)`` of ``cells``, the unfinished ones trained together by
    one :func:`linattn.run_many <linattn.training.batch.run_many>` call (cells of one model and shape; those drawing the
    same data draw it once), each stored, failed or logged on its own as soon as it is done (run_many's ``on_result``),
    while the others train. Where the call itself fails, each cell not done yet is trained alone.

    Each cell is trained under its lock (:func:`cell_lock`): a cell that another sweep into the same folder is
    training is left to it and waited for at the end, then skipped once it is in place (trained here where that
    sweep stopped before storing it)."""
    from ...training.batch import run_many

    out, todo, theirs = {}, [], []

    def done(key: str, label: str, result: dict) -> None:  # logged as soon as the cell is in place
        out[key] = result
        log(root, key=key, cell=label, outcome=result["outcome"], status=result["status"],
            wall_time=round(result["wall_time"], 3))

    with contextlib.ExitStack() as held:
        for settings, key, label in cells:
            lock = held.enter_context(cell_lock(root, key))
            if not lock.take(wait=False):
                theirs.append((settings, key, label, lock))
            elif is_finished(run_folder(root, key)):
                done(key, label, _skipped(run_folder(root, key), key))
                lock.release()
            else:
                todo.append((RunConfig.from_dict(settings), key, label, lock))
        start = time.perf_counter()

        def store(i: int, res) -> None:
            cfg, key, label, lock = todo[i]
            if isinstance(res, Exception):
                done(key, label, _failed(root, key, cfg, res, time.perf_counter() - start))
            else:
                done(key, label, _store(res, root, key, save_data=save_data))
            lock.release()

        try:
            if todo:
                run_many([cfg for cfg, *_ in todo], threads=threads, on_result=store)
        except Exception:  # noqa: BLE001 - a batch that cannot run: its cells not done yet one by one
            for cfg, key, label, lock in todo:
                if key not in out:
                    done(key, label, _train_cell(cfg.to_dict(), root, key, save_data=save_data, threads=threads))
                    lock.release()
        for settings, key, label, lock in theirs:  # another sweep's cells: once it is done with them
            lock.take(wait=True)
            if (record := recorded_divergence(root, key)) is not None:
                done(key, label, _result(key, DIVERGED, "skipped", message=record["message"]))
            else:
                done(key, label, _train_cell(settings, root, key, save_data=save_data, threads=threads))
            lock.release()
    return [out[key] for _, key, _ in cells]


class _CellLock:
    """An exclusive lock (``flock``) on one cell's lock file, taken at most once, released early or at the end."""

    def __init__(self, handle):
        self.handle, self.held = handle, False

    def take(self, *, wait: bool) -> bool:
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        except OSError:  # a file system without locks: trained as if no other sweep were there
            return True
        self.held = True
        return True

    def release(self) -> None:
        if self.held:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.held = False


@contextlib.contextmanager
def cell_lock(root, key: str):
    """The lock of cell ``key`` in the sweep folder ``root`` (``root/.locks/<key>.lock``, as the run store locks a
    key): two sweeps into one folder train each cell once, the second waiting for the first's. Not taken yet:
    :meth:`_CellLock.take`; released when the block ends."""
    locks = Path(root) / LOCKS
    locks.mkdir(exist_ok=True)
    with open(locks / f"{key}.lock", "a") as handle:
        lock = _CellLock(handle)
        try:
            yield lock
        finally:
            lock.release()


def _skipped(folder: Path, key: str) -> dict:
    return _result(key, DONE, "skipped", summary=json.loads((folder / "summary.json").read_text()))


def _failed(root, key: str, cfg: RunConfig, error: Exception, wall_time: float) -> dict:
    if isinstance(error, TrainingDiverged):
        return _record_failure(root, key, cfg, DIVERGED, str(error), wall_time)
    return _record_failure(root, key, cfg, ERROR, f"{type(error).__name__}: {error}", wall_time)


def _store(result, root: str, key: str, *, save_data: bool) -> dict:
    """Write the finished run ``result`` into a temporary folder and rename it into ``root/runs/key``."""
    folder, tmp = run_folder(root, key), None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_dir(folder.parent, key)
        result.key = key
        write_outputs(result, tmp, save_data=save_data, atomic=False)  # tmp is renamed into place whole
        summary = summarise(result.history, result.datasets.cov, result.config)
        write_json(tmp / "summary.json", summary, atomic=False)
        tmp.chmod(0o755)
        try:
            os.rename(tmp, folder)  # fails when another writer put the same run in place first: theirs is kept
            tmp = None
        except OSError:
            if not is_finished(folder):
                raise
        failure_file(root, key).unlink(missing_ok=True)
        return _result(key, DONE, "trained", wall_time=result.wall_time, summary=summary)
    except Exception as e:  # noqa: BLE001 - any error is this cell's outcome, recorded; the others go on
        return _failed(root, key, result.config, e, result.wall_time)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
