"""Scheduling many figures: which to run (cache), in what order (longest first, reports last), in a pool of worker
processes (``--jobs``, one kernel each, every kernel limited to one thread).

Report notebooks (those whose front matter says ``linattn: {report: true}``, the error table's among them) read the
other figures' outputs, so they start after all the others have finished. Each figure runs in a worker through
:func:`linattn.companion.runner.execute.execute_figure`, which publishes it whole. An interruption (Ctrl-C, SIGTERM)
stops the workers (their stages are removed, their kernels shut down; the stage of a worker that had to be killed
is removed by the runner once it is gone) and raises :class:`Interrupted`, which says which figures were finished and
published before it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from ...records import library_versions
from .. import presets
from . import interrupts, notebooks
from .cachekey import RUN_INFO, discover, expected_key, figure_key, is_current, is_report, read_notebook, run_info
from .execute import error_line, execute_figure, worker_start
from .paths import ENV_RUNS_DIR, UnusableFolder, preset_root, retraining, run_store_dir, unusable_output_dir
from .sources import notebook_sources, source_hash

# seconds the workers get to remove their stages and shut their kernels down after an interruption
WIND_DOWN_S = 20
# a figure still running says so after FIRST_NOTE_S seconds, then every NOTE_EVERY_S (a log shows it is alive)
FIRST_NOTE_S, NOTE_EVERY_S = 10.0, 30.0


@dataclass
class FigureResult:
    name: str
    status: str  # "ran", "cached" or "failed"
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # user + system CPU of the notebook's kernel and everything it started
    error: str | None = None  # the exception line of a failed figure
    notebook: Path | None = None  # the executed notebook (<name>.ipynb, or <name>.failed.ipynb on failure)
    fallbacks: tuple[str, ...] = ()  # known fallbacks the notebook's engines took (notebooks.take_known_fallbacks)


class Interrupted(interrupts.Interrupted):
    """The runner was interrupted by signal ``signum``; ``results`` are the figures finished before it (published,
    cached or failed), ``unfinished`` the names that were running or waiting."""

    def __init__(self, signum: int, results: list, unfinished: list[str]):
        super().__init__(signum)
        self.results, self.unfinished = results, unfinished


def done_line(res: FigureResult) -> str:
    """The runner's line for a figure that ran: its time, and once each, the known fallbacks it took."""
    line = f"  done    {res.name}  ({res.seconds:.1f} s, {res.cpu_seconds:.1f} s CPU)"
    return line + "".join(f"; fallback: {f}" for f in res.fallbacks)


def _expected_seconds(root: Path, name: str, nb, preset: str) -> float:
    """How long figure ``name`` is expected to take, so the longest start first and the jobs pack: its last run's
    wall time (provenance.json), else the notebook's own estimate (front matter ``linattn: {seconds: {preset: s}}``),
    else 0 (unknown: after the estimated ones, in name order)."""
    for folder in (root / name, root / ".previous" / name):
        try:
            return float(json.loads((folder / "provenance.json").read_text())["wall_time_s"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    estimate = ((nb.metadata.get("linattn", {}) or {}).get("seconds", {}) or {}).get(preset)
    return float(estimate) if estimate is not None else 0.0


def _check_overrides(parsed: dict, preset: str, overrides: dict) -> dict:
    """A reader's values against every selected notebook's parameters cell, then as the runs they would give
    (:func:`linattn.companion.presets.prepare`); returns what that resolved, ``{name: Resolved or None}`` (None: a
    notebook without presets), to be handed on as it is (``{}`` without overrides: each figure is resolved as it
    starts)."""
    for name, nb in parsed.items():
        notebooks.check_overrides(name, nb, overrides)
    if not overrides:
        return {}
    from ...config import ConfigError

    resolved = {}
    for name in parsed:
        try:
            resolved[name] = presets.for_build(name, {"preset": preset, **overrides})
        except ConfigError as e:
            raise notebooks.ParameterError(str(e)) from None
    return resolved


def run_figures(*, preset: str = "paper", only=None, jobs: int = 2, force: bool = False, out=None, src=None,
                timeout: float | None = None, progress: bool = True, overrides: dict | None = None,
                retrain: bool = False) -> list[FigureResult]:
    """Execute the figure notebooks (all, or those in ``only``) into ``out`` (default :func:`preset_root`) and
    return one :class:`FigureResult` each. ``overrides`` (a reader's parameter values) are checked first, before
    anything is written (:class:`linattn.companion.runner.notebooks.ParameterError`): against every selected notebook's
    parameters cell (known key, right type), then every run the figure would train with them against
    :meth:`linattn.config.RunConfig.validate` (:func:`linattn.companion.presets.prepare`, whose record of the settings
    and runs each kernel is then handed as data; a figure without overrides is resolved as it starts); the run store,
    resolved where the command runs, must be a usable folder (:class:`~linattn.companion.runner.paths.UnusableFolder`).
    A root this call created is removed again if nothing but its lock files is left in it. Raises
    :class:`Interrupted` on Ctrl-C or SIGTERM (as a ``KeyboardInterrupt`` whose argument is the signal)."""
    everything = discover(src)
    found = everything
    if only:
        unknown = sorted(set(only) - set(everything))
        if unknown:
            raise KeyError(f"unknown figure(s): {', '.join(unknown)}; known: {', '.join(everything)}")
        found = {k: v for k, v in everything.items() if k in set(only)}
    overrides = dict(overrides or {})
    parsed = {n: read_notebook(p) for n, p in found.items()}
    resolved = _check_overrides(parsed, preset, overrides)
    store = run_store_dir()  # resolved here, where the command runs: the kernels run in the output root
    if (why := unusable_output_dir(store)) is not None and not _readable_folder(store):
        raise UnusableFolder(f"the run store (${ENV_RUNS_DIR} or the default) {why}")
    root = Path(out if out is not None else preset_root(preset)).resolve()
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    try:
        with retraining(retrain):  # its workers' kernels retrain every run they ask for, once (runstore)
            return _run(root, preset, found, parsed, everything, overrides, jobs, force or retrain, timeout,
                        progress, resolved, store)
    finally:
        _remove_if_unused(root, created)


def _readable_folder(path: Path) -> bool:
    """Whether ``path`` is a folder this process can list and read: a run store that cannot be written to is served
    read-only (:class:`~linattn.companion.runstore.RunStore`), and fails only a figure that must train a run."""
    return path.is_dir() and os.access(path, os.R_OK | os.X_OK)


def _remove_if_unused(root: Path, created: bool) -> None:
    """Remove ``root`` again when this call made it and nothing but lock files is in it."""
    from .publish import LOCKS

    if not created or not root.is_dir() or any(p.name != LOCKS for p in root.iterdir()):
        return
    if (root / LOCKS).is_dir():
        for lock in (root / LOCKS).glob("*.lock"):
            lock.unlink()
        (root / LOCKS).rmdir()
    root.rmdir()


def _run(root, preset, found, parsed, everything, overrides, jobs, force, timeout, progress, resolved, store):
    """The body of :func:`run_figures`, once its arguments are checked and ``root`` exists (``resolved``: the figures'
    settings resolved while checking them)."""
    import multiprocessing  # here, as every import of a run: the CLI's parser and refusals answer without them
    from concurrent.futures import ProcessPoolExecutor

    params = {"preset": preset, **overrides}
    first = [n for n in found if not is_report(n, parsed[n])]
    last = [n for n in found if is_report(n, parsed[n])]
    reads = [n for n, p in everything.items() if not is_report(n, read_notebook(p))] if last else []
    texts = {n: p.read_text(encoding="utf-8") for n, p in found.items()}
    versions = library_versions()
    results: dict[str, FigureResult] = {}
    started, since = time.perf_counter(), time.time()
    _clean_killed_stages(root, list(everything))

    keys: dict[str, str] = {}

    def key(name):  # once per figure, when its stage starts: a report's covers what the first stage wrote
        if name not in keys:
            keys[name] = figure_key(name, texts[name], params, root=root, reads=reads, versions=versions,
                                    sources=source_hash(notebook_sources(parsed[name])), report=name in last)
        return keys[name]

    def settings(name):  # once per figure, here: its kernel is handed them as data
        if name not in resolved:
            try:
                resolved[name] = presets.for_build(name, params)
            except Exception:  # noqa: BLE001 — resolved again in its worker, where its failure is that figure's alone
                resolved[name] = None
        return resolved[name]

    def job(name):
        return (execute_figure, name, texts[name], str(root), params, key(name)), dict(
            timeout=timeout, store=str(store), force=force, reads=tuple(reads) if name in last else (),
            resolved=settings(name))

    context = multiprocessing.get_context("spawn")  # no fork of a process that may hold torch threads
    _start_resource_tracker()
    pool = ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=context, initializer=worker_start,
                               initargs=(os.getpid(),))
    try:
        for stage in (first, last):  # a report's key covers the numbers the first stage just wrote
            _run_stage(pool, root, stage, parsed, preset, force, key, job, jobs, results, progress,
                       "figures" if stage is first else "reports")
    except KeyboardInterrupt as exc:
        _stop(pool)
        # a worker killed at the end of its wind-down (one that did not take its signal) left its stage: every
        # worker is gone now, so their locks are free and what they left is finished or removed before we report
        _clean_killed_stages(root, list(everything))
        for name in first + last:  # published by a worker whose result the interruption kept from us
            if name not in results and name in keys and _made_since(root, name, keys[name], since):
                results[name] = FigureResult(name, "ran", notebook=root / f"{name}.ipynb")
        raise Interrupted(interrupts.as_interrupted(exc).signum, [results[n] for n in first + last if n in results],
                          [n for n in first + last if n not in results]) from None
    pool.shutdown()
    # a function attribute (the last call's wall time), which mypy does not model
    run_figures.last_wall_time = time.perf_counter() - started  # type: ignore[attr-defined]
    return [results[n] for n in first + last]


def _clean_killed_stages(root: Path, names: list[str]) -> None:
    """What killed runners left in ``root`` of figures ``names`` (their stages) is finished or removed now, whether
    or not this run executes those figures (:func:`linattn.companion.runner.publish.recover_idle`); one line each. The
    temporary files of killed writers there (a traceback notebook cut short) are removed too."""
    from ...records import remove_stale_temps
    from .publish import recover_idle

    remove_stale_temps(root)
    for name in names:
        for note in recover_idle(root, name):
            print(f"  note    {name}: {note}", flush=True)


# how the resource tracker is told to clean up without a warning (-W's action:message:category)
_TRACKER_QUIET = "ignore:resource_tracker:UserWarning"


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker, which will clean up after the pool without a word.

    The pool's call and result queues hold five named semaphores (three locks and a counter; named because spawned
    workers open them by name). When this process is killed (SIGKILL) they are never released, and the tracker,
    which outlives it, unlinks them, printing "There appear to be 5 leaked semaphore objects" on the terminal of a
    command that was killed. The tracker takes its warning options from this process's ``sys.warnoptions`` when it
    starts; it is started here with one that silences its own warnings (a no-op where it is running already)."""
    from multiprocessing import resource_tracker

    added = _TRACKER_QUIET not in sys.warnoptions
    if added:
        sys.warnoptions.append(_TRACKER_QUIET)
    try:
        resource_tracker.ensure_running()
    finally:
        if added:
            sys.warnoptions.remove(_TRACKER_QUIET)


def _made_since(root: Path, name: str, key: str, since: float) -> bool:
    """Whether figure ``name`` in ``root`` is current for ``key`` and its run record was written after ``since``
    (epoch seconds): it was published by this run."""
    try:
        return is_current(root, name, key) and (root / name / RUN_INFO).stat().st_mtime >= since
    except OSError:
        return False


def _run_stage(pool, root, names, parsed, preset, force, key, job, jobs, results, progress, desc) -> None:
    """Run figures ``names`` (one stage: the ordinary figures, then the reports) in ``pool``, longest first."""
    from concurrent.futures import FIRST_COMPLETED, wait

    from tqdm.auto import tqdm

    todo = []
    for name in names:
        if not force and is_current(root, name, key(name)):
            results[name] = FigureResult(name, "cached", notebook=root / f"{name}.ipynb")
        else:
            todo.append(name)
    if not todo:
        return
    # the live bar is for terminals; a log (CI) gets the one line per figure that bar.write prints
    bar = tqdm(total=len(todo), desc=desc, unit="fig", disable=not progress or not sys.stderr.isatty(), leave=True)
    queue = sorted(todo, key=lambda n: -_expected_seconds(root, n, parsed[n], preset))  # stable
    pending: dict[Future, str] = {}
    notes = _RunningNotes(bar if progress else None)
    try:
        while queue or pending:
            while queue and len(pending) < max(1, jobs):  # submit only what runs now: the bar names it
                name = queue.pop(0)
                args, kwargs = job(name)
                pending[pool.submit(*args, **kwargs)] = name
                notes.started(name)
            bar.set_postfix_str("running: " + ", ".join(sorted(pending.values())), refresh=True)
            done, _ = wait(pending, timeout=notes.wait(), return_when=FIRST_COMPLETED)
            notes.still_running()
            for fut in done:
                name = pending.pop(fut)
                notes.ended(name)
                try:
                    out = fut.result()
                except Exception as exc:  # noqa: BLE001 — the worker itself died
                    out = {"ok": False, "seconds": 0.0, "error": error_line(exc), "notebook": None}
                results[name] = _report(name, out, bar)
                bar.update(1)
    finally:
        bar.close()


class _RunningNotes:
    """The runner's lines about figures under way (through ``bar.write``; None: silent): one as each starts, and
    one after FIRST_NOTE_S seconds and every NOTE_EVERY_S after that while it runs, with its elapsed time. They go
    to the command's own output, never into a page (the kernel's output is the notebook's)."""

    def __init__(self, bar):
        self.bar = bar
        self.since: dict[str, float] = {}  # name → when it started
        self.next: dict[str, float] = {}  # name → when to say it is still running

    def started(self, name: str) -> None:
        now = time.monotonic()
        self.since[name], self.next[name] = now, now + FIRST_NOTE_S
        self._write(f"  start   {name}")

    def ended(self, name: str) -> None:
        self.since.pop(name, None)
        self.next.pop(name, None)

    def wait(self) -> float | None:
        """Seconds until the next line is due (None: none is, or the notes are silent)."""
        if self.bar is None or not self.next:
            return None
        return max(0.0, min(self.next.values()) - time.monotonic())

    def still_running(self) -> None:
        now = time.monotonic()
        for name in sorted(self.next):
            if now >= self.next[name]:
                self.next[name] = now + NOTE_EVERY_S
                self._write(f"  running {name}  ({now - self.since[name]:.0f} s so far)")

    def _write(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line)


def _report(name: str, out: dict, bar) -> FigureResult:
    """The :class:`FigureResult` of one finished figure, and its one line (stdout; stderr when it failed)."""
    status = "cached" if out.get("cached") else "ran" if out["ok"] else "failed"
    res = FigureResult(name, status, out["seconds"], out.get("cpu_seconds", 0.0), out["error"],
                       Path(out["notebook"]) if out["notebook"] else None, tuple(out.get("fallbacks", ())))
    for note in out.get("notes", ()):
        bar.write(f"  note    {name}: {note}")
    if status == "ran":
        bar.write(done_line(res))
    elif status == "cached":
        bar.write(f"  cached  {name}  (made meanwhile by the runner it waited for)")
    else:
        where = f"; traceback in {res.notebook}" if res.notebook else ""
        bar.write(f"  FAILED  {name}  ({res.seconds:.1f} s): {res.error}{where}", file=sys.stderr)
    return res


def _stop(pool) -> None:
    """Stop the pool after an interruption: nothing new starts, each worker gets SIGTERM (it removes its stage and
    shuts its kernel down; a swap under way is finished first) and WIND_DOWN_S seconds to end, then SIGKILL."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + WIND_DOWN_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1)


def list_figures(*, preset: str = "paper", out=None, src=None) -> list[tuple[str, str, bool]]:
    """``(name, "current" | "stale" | "missing", is_report)`` for every notebook, against what its recorded run
    (preset and overrides) would give now."""
    found = discover(src)
    root = Path(out if out is not None else preset_root(preset)).resolve()
    rows = []
    for name, path in found.items():
        key = expected_key(name, root, src)
        info = run_info(root, name) or {}
        state = ("current" if key and info.get("preset") == preset and is_current(root, name, key)
                 else "stale" if (root / f"{name}.ipynb").exists() else "missing")
        rows.append((name, state, is_report(name, read_notebook(path))))
    return rows
