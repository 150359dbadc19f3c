"""Execution of one figure notebook, in a worker process: papermill runs it in a kernel, into a staging folder, and
the staged figure is swapped in whole (:mod:`linattn.companion.runner.publish`).

Each notebook (jupytext MyST markdown, see :mod:`linattn.companion.runner.notebooks`) is converted in memory and
executed by papermill with ``preset``, ``out_dir`` (the stage) and, for a figure with presets, the path of its settings
as the runner resolved them (a :class:`linattn.companion.presets.Resolved`, written into the stage: the kernel uses it
as it is) injected, or, for a notebook without presets, the reader's overrides; it writes its files to
``<stage>/<name>/`` (:class:`linattn.companion.output.FigureOutput`). The executed notebook's injected cell is then
written to show the values it ran with, so that it runs again as it stands. The runner then adds the page's badge
(preset, overrides, date) under the title and the "Cite this figure" cell at the end
(:mod:`linattn.companion.runner.citation`), writes the cache key and run record into the figure's folder, and swaps the
figure in.

A warning printed into a notebook's outputs fails its figure, except a known fallback (an engine's slower path with
the same result, :class:`linattn.objectives.native.KnownFallback`): that is taken off the page and said once on the
figure's line and in its ``provenance.json`` and ``.run.json``.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import time
import warnings
from pathlib import Path
from typing import Any

from ...records import atomic_write
from .. import presets
from . import notebooks, publish
from .cachekey import CACHE_KEY, RUN_INFO, is_current
from .citation import cite_block
from .lifetime import die_with_parent, kernel_arguments
from .paths import ENV_FIGURE, ENV_RUNS_DIR, run_store_dir

# seconds a kernel may take to start: papermill's 60 s default was once exceeded on a fresh, busy two-core machine
KERNEL_START_TIMEOUT = 300
# a notebook's kernel keeps no input history (an SQLite file per kernel, which no one reads back)
KERNEL_SETTINGS = ("--HistoryManager.enabled=False",)
# when its last cell is done the kernel is stopped at once (SIGKILL), not asked to exit: every file a notebook
# writes is complete when its cell ends (written whole, then renamed), every output has reached the notebook, and the
# processes a cell starts end with it (a Dask cluster is closed by its `with`); an orderly exit would only tear down
# the imported libraries and run their exit handlers (about 0.3–0.6 s of CPU a notebook, measured)
KERNEL_SHUTDOWN = "immediate"
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


class PrintedWarning(RuntimeError):
    """A figure notebook printed a warning into its outputs (the message is its first line)."""


# ---------------------------------------------------------------- processes that end with the runner

_IN_WORKER = False  # set in a pool worker: an interrupted figure ends the worker (it never waits for more work)


def _unwind(signum, frame):
    """A worker told to stop: unwind (its stage is removed, its kernel shut down on the way out), silently: the
    runner says in one line what was kept, and a worker's traceback or its kernel's dying words would be noise."""
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    raise KeyboardInterrupt(signum)


def worker_start(parent: int) -> None:
    """The pool worker's initializer: it ends when the runner (process ``parent``) does, even when the runner is
    killed outright (SIGTERM on the parent's death, Linux), and SIGTERM or SIGINT unwind it (:func:`_unwind`) and
    then end it (:func:`execute_figure`), so it is not left waiting on the dead runner's pipe."""
    global _IN_WORKER
    _IN_WORKER = True
    die_with_parent(parent)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _unwind)


# ---------------------------------------------------------------- the page

def badge(preset: str, overrides: dict, date: str) -> str:
    """The line under a figure page's title: the preset it shows, any reader's overrides, and the date it ran."""
    parts = [f"{{bdg-primary-line}}`{preset} preset`"]
    parts += [f"{{bdg-warning-line}}`{k} = {v!r}`" for k, v in overrides.items()]
    parts.append(f"{{bdg-secondary-line}}`run {date}`")
    return " ".join(parts)


RESOLVED_FILE = ".resolved.pickle"  # the kernel's settings, in the stage (not published)


def notebook_values(name: str, params: dict) -> dict:
    """What figure ``name``'s parameters cell is given for ``params`` (``preset`` and a reader's overrides): every
    setting of the figure at that preset with the overrides applied (:func:`linattn.companion.presets.resolve`),
    so the executed notebook shows the values it ran with; a notebook without presets gets ``params`` as they are."""
    if not presets.has_presets(name):
        return dict(params)
    overrides = {k: v for k, v in params.items() if k != "preset"}
    return {"preset": params["preset"], **presets.resolve(name, params["preset"], overrides)}


def _shows_a_figure(cell) -> bool:
    if cell.cell_type == "markdown":
        return "{figure}" in cell.source
    return any(k.startswith("image/") for out in cell.get("outputs", []) for k in out.get("data", {}))


def tag_code_cells(nb) -> None:
    """How the book shows an executed notebook's code: papermill's machine-specific parameter cell is dropped, the
    code before the first figure is left out of the page (the set-up would stand between the title and the figure
    as folded "show code" toggles; it stays in the runnable notebook the page links), and the rest is folded."""
    first_figure = next((i for i, cell in enumerate(nb.cells) if _shows_a_figure(cell)), len(nb.cells))
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.setdefault("tags", [])
        if "injected-parameters" in tags:
            tag = "remove-cell"
        elif i < first_figure:
            tag = "remove-input"
            if "hide-input" in tags:
                tags.remove("hide-input")
        else:
            tag = "hide-input"
        if tag not in tags:  # a notebook may tag its cells itself; a repeated tag makes the JSON invalid
            tags.append(tag)


# ---------------------------------------------------------------- one figure

def error_line(exc: BaseException) -> str:
    ename, evalue = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    if ename:
        return f"{ename}: {evalue}"
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"


@contextlib.contextmanager
def _quiet_stderr():
    """Send this worker's stderr, which the kernel inherits, to /dev/null while a notebook runs: the kernel's
    start-up warnings are not for readers, and whatever a cell writes to stderr is kept in the notebook itself.
    An interruption keeps it quiet (the kernel's dying words, "Task exception was never retrieved", are noise)."""
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    except BaseException as exc:
        if not isinstance(exc, Exception):
            os.close(saved)
            raise
        os.dup2(saved, 2)
        os.close(saved)
        raise
    os.dup2(saved, 2)
    os.close(saved)


def _children_cpu() -> float:
    """User + system CPU seconds of this process's finished children (a notebook's kernel, once shut down, and the
    processes it waited for): the difference around one notebook is what that notebook cost."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _kernel_environment(name: str, store: str | None) -> None:
    """What the kernel inherits: one thread per library, so parallel figures do not oversubscribe; the Agg
    backend; the figure's name (the run store's log says which figure asked for each run); and the run store as
    resolved where the command ran (a relative ``$LINATTN_RUNS_DIR`` is under that folder, not under the stage)."""
    for var in THREAD_ENV:
        os.environ[var] = "1"
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ[ENV_FIGURE] = name
    os.environ[ENV_RUNS_DIR] = store or str(run_store_dir())


def _link_the_others(stage: Path, root: Path, name: str, reads: list[str]) -> None:
    """A report reads the other figures' folders beside its own: link them into its stage."""
    for other in reads:
        if other != name and (root / other).is_dir():
            (stage / other).symlink_to(root / other, target_is_directory=True)


def _injected(params: dict, resolved, stage: Path) -> dict:
    """What papermill injects into the notebook (``out_dir`` aside): for a figure with presets, ``preset`` and the path
    of its :class:`~linattn.companion.presets.Resolved` (written into ``stage``); else ``params`` as they are."""
    if resolved is None:
        return dict(params)
    return {"preset": params["preset"], presets.GIVEN: str(resolved.save(stage / RESOLVED_FILE))}


def _run_notebook(name: str, text: str, stage: Path, values: dict, timeout: float | None):
    import logging

    import papermill

    # papermill logs every kernel message at INFO/WARNING and the kernel's own start-up chatter: the runner prints
    # one line per figure instead, and a failure's traceback stays in its .failed.ipynb
    logging.getLogger("papermill").setLevel(logging.ERROR)
    logging.getLogger("traitlets").setLevel(logging.ERROR)
    with warnings.catch_warnings(), _quiet_stderr():
        warnings.simplefilter("ignore")  # papermill's "Unable to parse line" notes on help comments
        return papermill.execute_notebook(
            notebooks.from_text(text), str(stage / ".running.ipynb"), parameters={**values, "out_dir": str(stage)},
            kernel_name="python3", language="python", progress_bar=False, cwd=str(stage),
            execution_timeout=timeout, start_timeout=KERNEL_START_TIMEOUT, shutdown_kernel=KERNEL_SHUTDOWN,
            extra_arguments=[*kernel_arguments(), *KERNEL_SETTINGS])  # the kernel ends with this worker


def _unstage(nb, name: str, stage: Path, root: Path, values: dict) -> None:
    """The executed ``nb`` as if it had run in ``root``, where it is published, with the ``values`` it ran with (the
    preset and every setting, or a notebook's parameters) as its injected cell and papermill's record of its
    parameters, ``out_dir`` naming ``root``: it runs again as it stands (``linattn.companion.reproduce``), without the
    runner's settings file, which stays in the stage."""
    shown = {**values, "out_dir": str(root)}
    for cell in nb.cells:
        if "injected-parameters" in cell.metadata.get("tags", []):
            cell.source = "# Parameters\n" + "".join(f"{k} = {v!r}\n" for k, v in shown.items())
    record = nb.metadata.get("papermill", {})
    if "parameters" in record:
        record["parameters"] = shown
    if "output_path" in record:
        record["output_path"] = str(root / f"{name}.ipynb")


def is_published_run(name: str, values: dict) -> bool:
    """Whether figure ``name`` ran at its published settings (``values``: what its parameters cell was given, the
    preset included); a notebook without presets (a report) has no settings of its own to differ."""
    if not presets.has_presets(name):
        return True
    return presets.is_published(name, {k: v for k, v in values.items() if k != "preset"})


def _retitle(nb, at_published: bool) -> None:
    """The executed page's title as :func:`linattn.companion.published.page.page_title` gives it (a re-run at
    settings of our own does not carry the paper's figure name as its title)."""
    from ..published.page import page_title

    for cell in nb.cells:
        if cell.cell_type == "markdown":
            lines = cell.source.split("\n")
            for i, line in enumerate(lines):
                if line.startswith("# "):
                    lines[i] = page_title(line, at_published)
                    cell.source = "\n".join(lines)
                    return


def _finish_page(nb, name: str, text: str, stage: Path, params: dict, values: dict) -> list[str]:
    """Turn the executed ``nb`` into the figure's page in ``stage`` (badge, cite cell, runnable copy); returns the
    known fallbacks it took. Raises :class:`PrintedWarning` for any other warning printed on the page."""
    import nbformat

    _unstage(nb, name, stage, stage.parent, values)
    fallbacks = notebooks.take_known_fallbacks(nb)  # said on the runner's line, not on the page
    if printed := notebooks.printed_warnings(nb):  # it would show on the page: a failed figure, never cached
        raise PrintedWarning(printed[0])
    folder = stage / name
    if fallbacks:
        _record_fallbacks(folder / "provenance.json", fallbacks)
    tag_code_cells(nb)
    at_published = is_published_run(name, values)
    _retitle(nb, at_published)
    overrides = {k: v for k, v in params.items() if k != "preset"}
    at = 1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0
    nb.cells.insert(at, nbformat.v4.new_markdown_cell(badge(params["preset"], overrides,
                                                            datetime.date.today().isoformat())))
    nb.cells.append(nbformat.v4.new_markdown_cell(cite_block(name, text, netcdf=(folder / f"{name}.nc").is_file(),
                                                             at_published=at_published)))
    folder.mkdir(exist_ok=True)  # a notebook that wrote nothing still gets its runnable copy
    standalone = nbformat.writes(notebooks.runnable(text, values))
    atomic_write(folder / f"{name}.ipynb", lambda f: f.write(standalone))
    page = nbformat.writes(nb)
    atomic_write(stage / f"{name}.ipynb", lambda f: f.write(page))
    return fallbacks


def _write_record(folder: Path, params: dict, key: str, seconds: float, cpu: float, fallbacks: list[str]) -> None:
    """The run record (``.run.json``: preset, overrides, date, fallbacks, and times: ``seconds``, the wall time from
    when the figure's lock was held to its record, so not the wait for another runner; ``cpu_seconds``, its
    kernel's CPU) and the cache key."""
    info = {"preset": params["preset"], "overrides": {k: v for k, v in params.items() if k != "preset"},
            "date": datetime.date.today().isoformat(), "seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1),
            "fallbacks": list(fallbacks)}
    atomic_write(folder / RUN_INFO, lambda f: f.write(json.dumps(info, indent=1) + "\n"))
    atomic_write(folder / CACHE_KEY, lambda f: f.write(key + "\n"))


def _failure_note(name: str, exc: BaseException):
    import nbformat

    note = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        f"# {name} failed before execution\n\n```\n{error_line(exc)}\n```")])
    return lambda f: f.write(nbformat.writes(note))


def execute_figure(name: str, text: str, root: str, params: dict, key: str, *, timeout: float | None = None,
                   store: str | None = None, force: bool = True, reads: tuple[str, ...] = (), resolved=None) -> dict:
    """Execute figure ``name`` (its MyST ``text``: the very text its cache ``key`` was computed from) with
    ``params`` (``preset`` and the reader's overrides; ``resolved``: its settings as the runner resolved them for
    those, a :class:`linattn.companion.presets.Resolved`, else resolved here where it has presets,
    :func:`linattn.companion.presets.for_build`) and the run store at ``store`` (an absolute path), and
    publish it into ``root`` whole; returns ``{"ok", "cached", "seconds", "cpu_seconds", "error", "notebook",
    "fallbacks", "notes"}``. Never raises an Exception (an interruption unwinds it, leaving ``root`` as it was).

    It holds the figure's lock throughout (:func:`linattn.companion.runner.publish.figure_lock`), first cleans what
    killed runs left, and — unless ``force`` — returns ``cached`` when a runner it waited for made the same figure. A
    failure leaves the published figure as it was; its traceback notebook goes to ``<root>/<name>.failed.ipynb``
    and its error line names the failure's own cause first, then any error met while saving that notebook. A report
    reads the figures named in ``reads`` from ``root``."""
    root_p = Path(root)
    start, cpu_start = time.perf_counter(), _children_cpu()
    result: dict[str, Any] = {"ok": False, "cached": False, "error": None, "notebook": None, "fallbacks": [],
                              "notes": []}

    def timed(**kw):
        return {**result, **kw, "seconds": time.perf_counter() - start,
                "cpu_seconds": _children_cpu() - cpu_start}

    try:
        with publish.figure_lock(root_p, name):
            start = time.perf_counter()  # the figure's own time: not the wait for another runner's lock
            result["notes"] = publish.recover(root_p, name)
            if not force and is_current(root_p, name, key):
                return timed(ok=True, cached=True, notebook=str(root_p / f"{name}.ipynb"))
            stage = publish.stage_dir(root_p, name)
            stage.mkdir()
            try:
                return _execute_staged(name, text, root_p, stage, params, resolved, key, timeout, store, reads,
                                       timed)
            finally:
                if stage.exists() and not (stage / publish.MARKER).exists():
                    publish.discard(stage)
    except KeyboardInterrupt as exc:
        if _IN_WORKER:  # the stage is gone and the kernel shut down: end here rather than wait for more work
            os._exit(128 + (exc.args[0] if exc.args and isinstance(exc.args[0], int) else signal.SIGINT))
        raise


def _execute_staged(name, text, root, stage, params, resolved, key, timeout, store, reads, timed) -> dict:
    """The body of :func:`execute_figure`, with the lock held and the empty ``stage`` made."""
    _kernel_environment(name, store)
    _link_the_others(stage, root, name, list(reads))
    values = {}
    try:
        resolved = resolved if resolved is not None else presets.for_build(name, params)
        values = dict(params) if resolved is None else {"preset": params["preset"], **resolved.settings}
        nb = _run_notebook(name, text, stage, _injected(params, resolved, stage), timeout)
        fallbacks = _finish_page(nb, name, text, stage, params, values)
        done = timed()
        _write_record(stage / name, params, key, done["seconds"], done["cpu_seconds"], fallbacks)
        publish.swap_in(root, name, stage)
        return timed(ok=True, notebook=str(root / f"{name}.ipynb"), fallbacks=fallbacks)
    except Exception as exc:  # noqa: BLE001 — one failing figure must never stop the others
        error = error_line(exc)  # its own cause first
        saved = None
        try:
            saved = publish.save_failed(root, name, stage / ".running.ipynb", _failure_note(name, exc))
        except Exception as second:  # noqa: BLE001
            error += f" (and its traceback notebook could not be saved: {error_line(second)})"
        return timed(error=error, notebook=str(saved) if saved else None)


def _record_fallbacks(path: Path, fallbacks: list[str]) -> None:
    """Add ``"fallbacks"`` (the known fallbacks' messages) to a figure's ``provenance.json``, where it wrote one."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    info["fallbacks"] = list(fallbacks)
    atomic_write(path, lambda f: f.write(json.dumps(info, indent=1) + "\n"))
