"""Run a sweep's cells on Dask and gather them into one dataset.

By default an embedded ``dask.distributed.LocalCluster`` with one single-threaded worker process per core; given a
``dask.distributed.Client``, the cells run on its cluster (a ``dask scheduler`` with workers on other machines, a
SLURM or PBS cluster from ``dask-jobqueue``). Every worker must see the sweep folder at the same path (a shared
file system), since each task writes its run folders there. A task trains several cells of one shape together
(:func:`tasks`, ``linattn.run_many``); each cell is still stored (as soon as it is done), skipped or recorded as
failed on its own.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ...config import ConfigError, RunConfig
from ...errors import named
from ...records import write_json
from ...training.keys import run_key
from .. import extras
from ..runner.paths import environment, unusable_output_dir
from . import cells as cells_mod
from .dataset import SPEC, build_dataset, save_dataset
from .grid import Cell, Grid

#: The most cells one task trains together (``run_many``): the cells of a task interrupted that are not stored yet
#: are trained by the next sweep.
BATCH = 16


def _require_dask():
    extras.require("sweep", "a sweep")


def check_out(out) -> Path:
    """``out`` as a Path if a sweep may write there: a folder that does not exist yet, is empty, or holds a sweep
    (``sweep.json``), and takes new entries (:func:`~linattn.companion.runner.paths.unusable_output_dir` tries); else
    ConfigError naming ``out``."""
    if out is None or str(out) == "":
        raise ConfigError(f"{named('out')} must name the sweep folder (where the runs and the dataset go)",
                          field="out", value=out)
    out = Path(out)

    def refuse(why):
        raise ConfigError(f"{named('out', str(out))} {why}", field="out", value=out)

    if out.exists() and not out.is_dir():
        refuse("exists and is not a folder")
    blocker = next((a for a in out.parents if a.exists()), None)
    if blocker is not None and not blocker.is_dir():
        refuse(f"cannot be written: {blocker} is a file, not a folder")
    # another sweep into the same new folder may be writing its sweep.json (a temporary file, then renamed)
    if out.is_dir() and any(not p.name.startswith(f".{SPEC}.") for p in out.iterdir()) and not (out / SPEC).is_file():
        refuse(f"is a non-empty folder that holds no sweep ({SPEC}); choose a new or empty folder, or the folder of "
               "an earlier sweep to continue it")
    if (why := unusable_output_dir(out)) is not None:
        raise ConfigError(f"{named('out')} {why}", field="out", value=out)
    return out


def plan(grid: Grid, out=None, *, max_memory=None) -> list[tuple[Cell, str, str]]:
    """Every cell of ``grid`` (validated: ConfigError before anything runs) with its folder name and what a sweep
    into ``out`` would do with it: ``"finished"`` (a run folder is there), ``"diverged"`` (recorded; not tried
    again) or ``"to run"``."""
    rows = []
    for cell in grid.validate(max_memory=max_memory):
        key = run_key(cell.config)
        if out is not None and cells_mod.is_finished(cells_mod.run_folder(out, key)):
            state = "finished"
        elif out is not None and cells_mod.recorded_divergence(out, key) is not None:
            state = "diverged"
        else:
            state = "to run"
        rows.append((cell, key, state))
    return rows


@contextlib.contextmanager
def local_client(workers: int | None = None):
    """A ``dask.distributed.Client`` of a new local cluster, closed on exit: ``workers`` single-threaded worker
    processes (default: one per core). Several sweeps can share it (``sweep(..., client=client)``) and start the
    cluster once. ``workers=0``: no cluster, None in place of a client (a figure's runs are then trained in the
    process itself: where two notebooks already share the cores, a cluster only adds its processes' cost)."""
    if workers == 0:
        yield None
        return
    _require_dask()
    from dask.distributed import Client, LocalCluster

    n = workers or os.cpu_count() or 1
    # every server on a free port: with dashboard_address=None the scheduler's HTTP server still tries 8787 first
    # and warns when something else holds it
    with _quiet_resource_tracker():
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, scheduler_port=0,
                               dashboard_address=":0", silence_logs=50)
    try:
        with Client(cluster) as c:
            from .plugin import DieWithParent

            c.register_plugin(DieWithParent(os.getpid()))  # the workers end with this process, even when killed
            yield c
    finally:
        cluster.close()


@contextlib.contextmanager
def _quiet_resource_tracker():
    """Start the cluster's worker processes (and with the first of them multiprocessing's resource tracker) with
    the tracker's own warning silenced: the workers of an interrupted sweep are stopped holding a queue's lock, which
    the tracker then releases itself, warning of "leaked semaphore objects" after the sweep's last line. The
    tracker takes its warning filters from the environment it starts in; the environment is restored after."""
    var, rule = "PYTHONWARNINGS", "ignore::UserWarning:multiprocessing.resource_tracker"
    before = os.environ.get(var)
    with environment({var: rule if not before else f"{before},{rule}"}):
        yield


@contextlib.contextmanager
def _client(client, workers: int | None):
    """The given client, or one of a new local cluster (:func:`local_client`)."""
    if client is not None:
        yield client
    else:
        with local_client(workers) as c:
            yield c


def _bar(total: int, enabled: bool | None):
    from tqdm import tqdm

    return tqdm(total=total, unit="run", disable=False if enabled else None if enabled is None else True,
                dynamic_ncols=True)


def sweep(base_config: RunConfig, grid: dict, *, client=None, out, workers: int | None = None,
          save_data: bool = False, threads: int = 1, max_memory=None, progress: bool | None = None):
    """Train every cell of ``grid`` on Dask and return the results as one xarray Dataset (also written to
    ``out/sweep.nc``).

    This is the Python side of ``linattn sweep``. It lives in the companion, not in ``linattn`` itself, because it
    needs Dask and xarray (the ``sweep`` extra) and the run store's addressing, which the science core does not
    import: use ``linattn.companion.sweeps.sweep``.

    Args:
        base_config: the fixed settings (:class:`~linattn.config.RunConfig`).
        grid: ``{setting: values}``, RunConfig field names; the cells are the product of the values, in this order
            (the dataset's dimensions). E.g. ``{"seed": range(6), "init": [0.005, 0.01, 0.02]}``.
        client: a ``dask.distributed.Client`` to run on; None (default): a local cluster of ``workers``
            single-threaded worker processes (default: one per core), closed at the end.
        out: the sweep folder: a run folder per cell (``runs/<key>``, what ``linattn train --out`` writes plus the
            weights and ``summary.json``), ``sweep.json``, ``sweep.log`` and the dataset ``sweep.nc``. Cells whose
            run is there already are skipped, so the same call after an interruption trains only what is missing.
        save_data: also write each run's ``data.npz``.
        threads: torch threads per task.
        max_memory: the most memory one run may take (as for :func:`linattn.run <linattn.training.experiment.run>`).
        progress: a progress bar (runs done, running and failed, and the time left); None: only on a terminal.

    Every cell is validated first (:meth:`Grid.validate <linattn.companion.sweeps.grid.Grid.validate>`): a bad
    setting raises ConfigError naming it and the cell, before anything is written. A cell that fails or diverges is
    recorded (``status`` and ``message`` in the dataset) and does not stop the others; a diverged cell is not tried
    again by a later sweep (same settings, same numbers), a failed one is. Each cell is stored as soon as it is done;
    an interruption (KeyboardInterrupt, which ``linattn sweep`` raises for SIGTERM too) that comes once every cell
    is stored still writes the dataset. Two sweeps into one folder train each cell once (``cells.cell_lock``).

    The dataset: see :mod:`linattn.companion.sweeps.dataset`.
    """
    spec = Grid(base_config, dict(grid))
    if not (isinstance(threads, int) and threads >= 1):
        raise ConfigError(f"{named('threads')} must be a positive integer, got {threads!r}", field="threads",
                          value=threads)
    rows = plan(spec, None, max_memory=max_memory)  # every cell validated before anything is written
    out = check_out(out)
    _require_dask()
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / SPEC, spec.to_spec())
    (out / cells_mod.RUNS).mkdir(exist_ok=True)
    cells_mod.remove_stale_tmp(out)
    todo = []
    for cell, key, _ in rows:
        if cells_mod.is_finished(cells_mod.run_folder(out, key)):
            cells_mod.log(out, key=key, cell=cell.label, outcome="skipped", status=cells_mod.DONE)
        elif (record := cells_mod.recorded_divergence(out, key)) is not None:
            cells_mod.log(out, key=key, cell=cell.label, outcome="skipped", status=record["status"])
        else:
            todo.append((cell, key))
    keys = [key for _, key, _ in rows]
    try:
        if todo:  # a cluster only when there is something to run
            with _client(client, workers) as dask_client:
                _run(todo, out, dask_client, save_data=save_data, threads=threads, progress=progress)
        ds = build_dataset(spec, out, keys)
        save_dataset(ds, out)
    except BaseException as e:
        cells_mod.remove_stale_tmp(out)  # what the stopped tasks left (a live worker's folder is kept)
        if isinstance(e, KeyboardInterrupt) and all_settled(out, keys):
            save_dataset(build_dataset(spec, out, keys), out)  # stopped once every cell was stored: the dataset
        raise
    return ds


def all_settled(out, keys) -> bool:
    """Whether every cell of ``keys`` has its outcome in the sweep folder ``out`` (``cells.settled``): then an
    interrupted sweep still writes its dataset."""
    return all(cells_mod.settled(out, key) for key in keys)


def _run(todo: list[tuple[Cell, str]], out: Path, client, *, save_data: bool, threads: int, progress) -> None:
    """Submit the cells of ``todo`` to ``client``, cells of one shape together (:func:`tasks`), and log each as it
    completes; on an interruption cancel the rest."""
    from dask.distributed import as_completed

    workers = max(1, len(client.nthreads()))
    futures = [client.submit(cells_mod.train_cells, [(cell.config.to_dict(), key, cell.label) for cell, key in part],
                             str(out), save_data=save_data, threads=threads,
                             key=f"linattn-sweep-{part[0][1]}-{len(part)}", pure=False)
               for part in tasks(todo, workers)]
    done = failed = 0
    bar = _bar(len(todo), progress)
    bar.set_postfix_str(f"done 0, running {min(len(todo), sum(client.nthreads().values()))}, failed 0")
    try:
        for future in as_completed(futures):
            results = future.result()  # the task has logged its cells' outcomes itself (cells.log)
            ok = sum(r["status"] == cells_mod.DONE for r in results)
            done, failed = done + ok, failed + len(results) - ok
            pending = len(todo) - done - failed
            running = min(pending, sum(client.nthreads().values()) or pending)
            bar.set_postfix_str(f"done {done}, running {running}, failed {failed}", refresh=False)
            bar.update(len(results))
    except BaseException:
        client.cancel(futures)
        raise
    finally:
        bar.close()


def tasks(todo: list[tuple[Cell, str]], workers: int, most: int = BATCH) -> list[list[tuple[Cell, str]]]:
    """The cells of ``todo`` cut into tasks: cells of one model and shape (``linattn.training.batch.groups``), those
    drawing the same data next to each other, in parts of at most ``most`` cells and at most one part per worker of a
    group: every worker has work, and the cells of one data draw share it. Each cell is stored as soon as it is done,
    so a task interrupted loses only the run it was training."""
    from ...training.batch import groups
    from ...training.plan import data_key

    out = []
    for members in groups([cell.config for cell, _ in todo]):
        cells = sorted((todo[i] for i in members), key=lambda c: data_key(c[0].config))
        size = min(most, -(-len(cells) // workers))
        out += [cells[i:i + size] for i in range(0, len(cells), size)]
    return out
