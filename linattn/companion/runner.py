"""The figure runner: execute the figure notebooks ``figures_src/<name>.md``, one preset per output root.

    linattn figures [--preset paper|quick] [--only NAME ...] [--param KEY=VALUE ...] [--out DIR | --into-book]
                    [--jobs N] [--force] [--retrain] [--list]

Each notebook (jupytext MyST markdown, see :mod:`linattn.companion.notebooks`) is converted in memory and executed
by papermill with ``preset``, ``out_dir`` (= the root) and the reader's overrides injected; it writes its files to
``<root>/<name>/`` (:class:`linattn.companion.output.FigureOutput`). The runner then adds the page's badge (preset,
overrides, date) under the title and the "Cite this figure" cell at the end, and writes the executed notebook
atomically to ``<root>/<name>.ipynb``.

Roots. The book of preset ``P`` is built from ``_build/figures/<P>/`` (:func:`preset_root`: the checkout's, or the
working directory's when linattn is an installed copy), so the paper and the quick figures never mix. Overrides
(``--param``) go to ``--out DIR``; they enter a book's root only with ``--into-book``, and then every page shows
them in its badge. The root is checked before anything runs (:func:`linattn.companion.paths.unusable_output_dir`).

Bad input is refused before anything runs: an unknown figure, an unknown ``--param`` key or one of the wrong type
(:func:`linattn.companion.notebooks.check_overrides`), and a value that would give a run ``RunConfig.validate``
refuses (:func:`linattn.companion.presets.check_overrides`, e.g. ``seeds=[-1]``).

Cache: a figure is skipped when its cache key — a hash of the notebook text, the parameters, the source files of
the linattn modules the notebook imports and of theirs (:mod:`linattn.companion.sources`: not the CLI, the runner or
the book builder) and the versions of the libraries that compute or draw (``records.LIBRARIES``); for report
notebooks also the ``numbers.json`` of every figure they read — equals ``<root>/<name>/.cache-key`` and its executed
notebook exists.
The key and ``.run.json`` (preset, overrides, date) are written only after success. Before a figure runs, its key,
executed notebook and output folder are moved to ``<root>/.previous/``, so a failed run never leaves old outputs
looking current. A failed figure is reported once, when it fails; its executed notebook (with the traceback)
goes to ``<root>/<name>.failed.ipynb`` beside the outputs it wrote, or, when it failed before writing any, stays
in a temporary folder (the report names it) and the figure leaves nothing in ``<root>`` (``_execute_one``). A
warning printed into a notebook's outputs fails its figure, except a known fallback (an engine's slower path with the
same result, :class:`linattn.objectives.native.KnownFallback`): that is taken off the page and said once on the
figure's line and in its ``provenance.json`` and ``.run.json``.

Figures run in parallel (``--jobs``, one worker process and one kernel each, every kernel limited to one thread).
Report notebooks (those whose front matter says ``linattn: {report: true}``, the error table's among them) read the
other figures' outputs, so they start after all the others have finished.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from .._version import __version__
from ..records import atomic_write, library_versions
from . import extras, notebooks, presets
from .figure_args import PRESET_CHOICES, add_arguments, add_notebook_arguments  # noqa: F401
from .paths import (ENV_FIGURE, ENV_RUNS_DIR, UnusableFolder, preset_root, retraining, run_store_dir,
                    unusable_output_dir)
from .sources import notebook_sources, source_hash

CACHE_KEY = ".cache-key"
RUN_INFO = ".run.json"
# seconds a kernel may take to start: papermill's 60 s default was once exceeded on a fresh, busy two-core machine
KERNEL_START_TIMEOUT = 300
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")

_PAPER_BIBTEX = """@inproceedings{zhang2025training,
  title     = {Training Dynamics of In-Context Learning in Linear Attention},
  author    = {Zhang, Yedi and Singh, Aaditya K. and Latham, Peter E. and Saxe, Andrew M.},
  booktitle = {Proceedings of the 42nd International Conference on Machine Learning},
  series    = {Proceedings of Machine Learning Research},
  volume    = {267},
  pages     = {76047--76087},
  year      = {2025},
  eprint    = {2501.16265},
  archivePrefix = {arXiv}
}"""


class PrintedWarning(RuntimeError):
    """A figure notebook printed a warning into its outputs (the message is its first line)."""


@dataclass
class FigureResult:
    name: str
    status: str  # "ran", "cached" or "failed"
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # user + system CPU of the notebook's kernel and everything it started
    error: str | None = None  # the exception line of a failed figure
    notebook: Path | None = None  # the executed notebook (<name>.ipynb, or <name>.failed.ipynb on failure)
    fallbacks: tuple[str, ...] = ()  # known fallbacks the notebook's engines took (notebooks.take_known_fallbacks)


# ---------------------------------------------------------------- discovery and cache keys

discover = notebooks.discover
read_notebook = notebooks.read


def is_report(name: str, notebook) -> bool:
    """Report notebooks read the other figures' outputs and therefore run last."""
    meta = notebook.metadata.get("linattn", {}) or {}
    return bool(meta.get("report", False))


def _inputs_hash(root: Path, names) -> str:
    """SHA-256 over the ``numbers.json`` of figures ``names`` in ``root``: what a report notebook reads."""
    h = hashlib.sha256()
    for name in sorted(names):
        path = Path(root) / name / "numbers.json"
        h.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"missing") + b"\0")
    return h.hexdigest()


def _cache_key(text: str, params: dict, sources: str, versions: dict | None = None, inputs: str | None = None) -> str:
    blob = json.dumps({"notebook": text, "parameters": params, "linattn": sources,
                       "libraries": library_versions() if versions is None else versions, "inputs": inputs},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def figure_key(name: str, text: str, params: dict, *, root: Path, reads: list[str], sources: str | None = None,
               versions: dict | None = None, report: bool = False) -> str:
    """The cache key of figure ``name`` (notebook ``text``) run with ``params`` into ``root``. ``sources``: the
    hash of the linattn sources it depends on (default: computed from the notebook's imports); a report's key
    also covers the ``numbers.json`` of the figures it ``reads`` (the ordinary figures it summarises)."""
    if sources is None:
        sources = source_hash(notebook_sources(notebooks.from_text(text)))
    return _cache_key(text, params, sources, versions, _inputs_hash(root, reads) if report else None)


def is_current(root: Path, name: str, key: str) -> bool:
    key_file = root / name / CACHE_KEY
    return (root / f"{name}.ipynb").is_file() and key_file.is_file() and key_file.read_text().strip() == key


def run_info(root: Path, name: str) -> dict | None:
    """``{"preset", "overrides", "date"}`` of the last successful run of ``name`` in ``root``, or None."""
    try:
        return json.loads((Path(root) / name / RUN_INFO).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def expected_key(name: str, root: Path, src=None) -> str | None:
    """The key figure ``name`` in ``root`` must carry to be current, from its recorded preset and overrides
    (None when it has no run record)."""
    info = run_info(root, name)
    found = discover(src)
    if info is None or name not in found:
        return None
    nb = read_notebook(found[name])
    report = is_report(name, nb)
    others = [n for n, p in found.items() if not is_report(n, read_notebook(p))] if report else []
    params = {"preset": info["preset"], **info.get("overrides", {})}
    return figure_key(name, found[name].read_text(encoding="utf-8"), params, root=root, reads=others,
                      report=report)


# ---------------------------------------------------------------- the cite cell

def cite_block(name: str, text: str = "", *, netcdf: bool = False) -> str:
    """The "Cite this figure" markdown cell appended to every executed figure notebook (paths relative to
    ``<root>``, where the executed notebook lies). A page whose title names a figure of the paper ("# Figure 1b —
    …", the notebook's MyST ``text``) cites that figure by the paper's name."""
    files = [("PDF", "pdf"), ("PNG", "png"), ("SVG", "svg"), ("CSV", "csv")] + [("NetCDF", "nc")] * netcdf
    links = [f"{{download}}`{label} <{name}/{name}.{ext}>`" for label, ext in files]
    links.append(f"{{download}}`provenance.json <{name}/provenance.json>`")
    links.append(f"{{download}}`runnable notebook <{name}/{name}.ipynb>`")
    from . import published

    title = next((line for line in text.splitlines() if line.startswith("# Figure ")), None)
    paper = published.paper_name(title) if title else None
    what = (f"It reproduces **{paper}** of Zhang, Singh, Latham and Saxe (ICML 2025); cite that figure by its name "
            "and the paper:" if paper else "If you use it, please cite the paper whose result it builds on:")
    return "\n".join([
        "## Cite this figure",
        "",
        f"This figure's anchor is `fig-{name}` (link to it with `` {{ref}}`{paper or 'this figure'} <fig-{name}>` ``).",
        f"Files: {' · '.join(links)}.",
        "",
        what,
        "",
        "```bibtex",
        _PAPER_BIBTEX,
        "```",
        "",
        "and the companion that produced it: linattn contributors (2026), *linattn: a reproducible companion to "
        f"\"Training Dynamics of In-Context Learning in Linear Attention\"*, version {__version__} "
        "(see `CITATION.cff` in the repository).",
        "",
        "```bibtex",
        "@software{linattn_companion,",
        "  author  = {{linattn contributors}},",
        "  title   = {linattn: a reproducible companion to ``Training Dynamics of In-Context Learning in Linear "
        "Attention''},",
        "  year    = {2026},",
        f"  version = {{{__version__}}}",
        "}",
        "```",
    ])


def _badge(preset: str, overrides: dict, date: str) -> str:
    """The line under a figure page's title: the preset it shows, any reader's overrides, and the date it ran."""
    parts = [f"{{bdg-primary-line}}`{preset} preset`"]
    parts += [f"{{bdg-warning-line}}`{k} = {v!r}`" for k, v in overrides.items()]
    parts.append(f"{{bdg-secondary-line}}`run {date}`")
    return " ".join(parts)


# ---------------------------------------------------------------- one figure (runs in a worker process)

def _error_line(exc: BaseException) -> str:
    ename, evalue = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    if ename:
        return f"{ename}: {evalue}"
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"


@contextlib.contextmanager
def _quiet_stderr():
    """Send this worker's stderr, which the kernel inherits, to /dev/null while a notebook runs: the kernel's
    start-up warnings are not for readers, and whatever a cell writes to stderr is kept in the notebook itself."""
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


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


def _children_cpu() -> float:
    """User + system CPU seconds of this process's finished children (a notebook's kernel, once shut down, and the
    processes it waited for): the difference around one notebook is what that notebook cost."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _execute_one(name: str, text: str, root: str, params: dict, timeout: float | None = None,
                 store: str | None = None) -> dict:
    """Convert and execute one notebook (its MyST ``text``: the very text its cache key was computed from) with
    ``params`` (``preset`` and the reader's overrides; ``out_dir`` is ``root``) and the run store at ``store`` (an
    absolute path; None: :func:`~linattn.companion.paths.run_store_dir`); returns ``{"ok", "seconds",
    "cpu_seconds", "error", "notebook"}``. Never raises.

    papermill writes the notebook as it runs into a temporary folder, not into ``root``. On failure the executed
    notebook with the traceback becomes ``<root>/<name>.failed.ipynb`` only when the figure had written outputs into
    ``<root>/<name>/`` (they stay together, and neither looks current: no cache key); a figure that failed before
    writing its first output leaves nothing in ``root`` (not even an empty ``<name>/``), and its traceback notebook
    stays in the temporary folder, whose path ``"notebook"`` gives. A notebook that printed a warning into its
    outputs (:func:`linattn.companion.notebooks.printed_warnings`) has failed: the warning is its error, unless it
    is a known fallback (:func:`linattn.companion.notebooks.take_known_fallbacks`): those are taken off the page and
    returned as ``"fallbacks"``, and recorded in the figure's ``provenance.json``."""
    import logging

    import nbformat
    import papermill

    # papermill logs every kernel message at INFO/WARNING and the kernel's own start-up chatter: the runner prints
    # one line per figure instead, and a failure's traceback stays in its .failed.ipynb
    logging.getLogger("papermill").setLevel(logging.ERROR)
    logging.getLogger("traitlets").setLevel(logging.ERROR)

    root_p = Path(root)
    scratch = Path(tempfile.mkdtemp(prefix=f"linattn-{name}-"))
    running = scratch / f"{name}.running.ipynb"
    for var in THREAD_ENV:  # inherited by the kernel: one thread each, so parallel figures do not oversubscribe
        os.environ[var] = "1"
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ[ENV_FIGURE] = name  # the run store's log says which figure asked for each run
    # the kernel runs in the output root: tell it where the run store is, as resolved where the command ran (a
    # relative $LINATTN_RUNS_DIR, or an installed copy's store, is under that folder, not under --out)
    os.environ[ENV_RUNS_DIR] = store or str(run_store_dir())
    start, cpu_start = time.perf_counter(), _children_cpu()
    try:
        nb = notebooks.from_text(text)
        values = notebook_values(name, params)
        with warnings.catch_warnings(), _quiet_stderr():
            warnings.simplefilter("ignore")  # papermill's "Unable to parse line" notes on help comments
            nb = papermill.execute_notebook(nb, str(running), parameters={**values, "out_dir": str(root_p)},
                                            kernel_name="python3", language="python", progress_bar=False,
                                            cwd=str(root_p), execution_timeout=timeout,
                                            start_timeout=KERNEL_START_TIMEOUT)
        fallbacks = notebooks.take_known_fallbacks(nb)  # said on the runner's line, not on the page
        if printed := notebooks.printed_warnings(nb):  # it would show on the page: a failed figure, never cached
            raise PrintedWarning(printed[0])
        if fallbacks:
            _record_fallbacks(root_p / name / "provenance.json", fallbacks)
        tag_code_cells(nb)
        overrides = {k: v for k, v in params.items() if k != "preset"}
        date = datetime.date.today().isoformat()
        at = 1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0
        nb.cells.insert(at, nbformat.v4.new_markdown_cell(_badge(params["preset"], overrides, date)))
        nb.cells.append(nbformat.v4.new_markdown_cell(
            cite_block(name, text, netcdf=(root_p / name / f"{name}.nc").is_file())))
        standalone = nbformat.writes(notebooks.runnable(text, values))
        (root_p / name).mkdir(exist_ok=True)  # a notebook that wrote nothing still gets its runnable copy
        atomic_write(root_p / name / f"{name}.ipynb", lambda f: f.write(standalone))
        text = nbformat.writes(nb)
        atomic_write(root_p / f"{name}.ipynb", lambda f: f.write(text))
        shutil.rmtree(scratch, ignore_errors=True)
        return {"ok": True, "seconds": time.perf_counter() - start, "cpu_seconds": _children_cpu() - cpu_start,
                "error": None, "notebook": str(root_p / f"{name}.ipynb"), "fallbacks": fallbacks}
    except Exception as exc:  # noqa: BLE001 — one failing figure must never stop the others
        failed = scratch / f"{name}.failed.ipynb"
        if running.exists():
            os.replace(running, failed)
        else:  # failed before execution started (e.g. unreadable notebook): a note in place of the notebook
            note = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
                f"# {name} failed before execution\n\n```\n{_error_line(exc)}\n```")])
            atomic_write(failed, lambda f: f.write(nbformat.writes(note)))
        outputs = root_p / name
        if outputs.is_dir() and any(outputs.iterdir()):  # it wrote something: the traceback goes beside it
            os.replace(failed, root_p / failed.name)
            shutil.rmtree(scratch, ignore_errors=True)
            failed = root_p / failed.name
        elif outputs.is_dir():
            outputs.rmdir()
        return {"ok": False, "seconds": time.perf_counter() - start, "cpu_seconds": _children_cpu() - cpu_start,
                "error": _error_line(exc), "notebook": str(failed)}


def _record_fallbacks(path: Path, fallbacks: list[str]) -> None:
    """Add ``"fallbacks"`` (the known fallbacks' messages) to a figure's ``provenance.json``, where it wrote one."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    info["fallbacks"] = list(fallbacks)
    atomic_write(path, lambda f: f.write(json.dumps(info, indent=1) + "\n"))


def done_line(res: FigureResult) -> str:
    """The runner's line for a figure that ran: its time, and once each, the known fallbacks it took."""
    line = f"  done    {res.name}  ({res.seconds:.1f} s, {res.cpu_seconds:.1f} s CPU)"
    return line + "".join(f"; fallback: {f}" for f in res.fallbacks)


# ---------------------------------------------------------------- the runner

def _retire(root: Path, name: str) -> None:
    """Move a figure's key, executed notebook and outputs to ``<root>/.previous/`` (they are no longer current)."""
    (root / name / CACHE_KEY).unlink(missing_ok=True)
    prev = root / ".previous"
    for item in (root / name, root / f"{name}.ipynb", root / f"{name}.failed.ipynb"):
        if item.exists():
            prev.mkdir(parents=True, exist_ok=True)
            dest = prev / item.name
            if dest.is_dir():
                shutil.rmtree(dest)
            elif dest.exists():
                dest.unlink()
            os.replace(item, dest)


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


def run_figures(*, preset: str = "paper", only=None, jobs: int = 2, force: bool = False, out=None, src=None,
                timeout: float | None = None, progress: bool = True, overrides: dict | None = None,
                retrain: bool = False) -> list[FigureResult]:
    """Execute the figure notebooks (all, or those in ``only``) into ``out`` (default :func:`preset_root`) and
    return one :class:`FigureResult` each. ``overrides`` (a reader's parameter values) are checked first, before
    anything is written (:class:`linattn.companion.notebooks.ParameterError`): against every selected notebook's
    parameters cell (known key, right type), then every run the figure would train with them against
    :meth:`linattn.config.RunConfig.validate` (:func:`linattn.companion.presets.check_overrides`); the run store,
    resolved where the command runs, must be a usable folder (:class:`~linattn.companion.paths.UnusableFolder`).
    A root this call created is removed again if nothing was left in it (every figure failed before writing its
    first output)."""
    everything = discover(src)
    found = everything
    if only:
        unknown = sorted(set(only) - set(everything))
        if unknown:
            raise KeyError(f"unknown figure(s): {', '.join(unknown)}; known: {', '.join(everything)}")
        found = {k: v for k, v in everything.items() if k in set(only)}
    overrides = dict(overrides or {})
    parsed = {n: read_notebook(p) for n, p in found.items()}
    for name, nb in parsed.items():
        notebooks.check_overrides(name, nb, overrides)
    if overrides:
        from ..config import ConfigError

        for name in parsed:
            try:
                presets.check_overrides(name, preset, overrides)
            except ConfigError as e:
                raise notebooks.ParameterError(str(e)) from None
    store = run_store_dir()  # resolved here, where the command runs: the kernels run in the output root
    if (why := unusable_output_dir(store)) is not None:
        raise UnusableFolder(f"the run store (${ENV_RUNS_DIR} or the default) {why}")
    root = Path(out if out is not None else preset_root(preset)).resolve()
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    try:
        with retraining(retrain):  # its workers' kernels retrain every run they ask for, once (runstore)
            return _run(root, preset, found, parsed, everything, overrides, jobs, force or retrain, timeout,
                        progress, store)
    finally:
        if created and root.is_dir() and not any(root.iterdir()):
            root.rmdir()


def _run(root, preset, found, parsed, everything, overrides, jobs, force, timeout, progress, store):
    """The body of :func:`run_figures`, once its arguments are checked and ``root`` exists."""
    import multiprocessing  # here, as every import of a run: the CLI's parser and refusals answer without them
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    from tqdm.auto import tqdm

    params = {"preset": preset, **overrides}
    versions = library_versions()
    texts = {n: p.read_text(encoding="utf-8") for n, p in found.items()}
    first = [n for n in found if not is_report(n, parsed[n])]
    last = [n for n in found if is_report(n, parsed[n])]
    read_by_reports = [n for n, p in everything.items() if not is_report(n, read_notebook(p))] if last else []
    keys: dict[str, str] = {}
    results: dict[str, FigureResult] = {}
    started = time.perf_counter()

    def key(name):
        return figure_key(name, texts[name], params, root=root, reads=read_by_reports,
                          sources=source_hash(notebook_sources(parsed[name])), versions=versions,
                          report=name in last)

    def finished(name, out_, bar):
        res = FigureResult(name, "ran" if out_["ok"] else "failed", out_["seconds"], out_.get("cpu_seconds", 0.0),
                           out_["error"], Path(out_["notebook"]) if out_["notebook"] else None,
                           tuple(out_.get("fallbacks", ())))
        if out_["ok"]:
            info = {"preset": preset, "overrides": overrides, "date": datetime.date.today().isoformat(),
                    "seconds": round(res.seconds, 1), "cpu_seconds": round(res.cpu_seconds, 1),
                    "fallbacks": list(res.fallbacks)}
            atomic_write(root / name / RUN_INFO, lambda f: f.write(json.dumps(info, indent=1) + "\n"))
            atomic_write(root / name / CACHE_KEY, lambda f: f.write(keys[name] + "\n"))
            bar.write(done_line(res))
        else:
            where = f"; traceback in {res.notebook}" if res.notebook else ""
            bar.write(f"  FAILED  {name}  ({res.seconds:.1f} s): {res.error}{where}", file=sys.stderr)
        results[name] = res
        bar.update(1)

    context = multiprocessing.get_context("spawn")  # no fork of a process that may hold torch threads
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=context) as pool:
        for stage in (first, last):  # a report's key covers the numbers the first stage just wrote
            todo = []
            for name in stage:
                keys[name] = key(name)
                if not force and is_current(root, name, keys[name]):
                    results[name] = FigureResult(name, "cached", notebook=root / f"{name}.ipynb")
                else:
                    todo.append(name)
            if not todo:
                continue
            # the live bar is for terminals; a log (CI) gets the one line per figure that bar.write prints
            bar = tqdm(total=len(todo), desc="figures" if stage is first else "reports", unit="fig",
                       disable=not progress or not sys.stderr.isatty(), leave=True)
            queue = sorted(todo, key=lambda n: -_expected_seconds(root, n, parsed[n], preset))  # stable
            pending = {}
            while queue or pending:
                while queue and len(pending) < max(1, jobs):  # submit only what runs now: the bar names it
                    name = queue.pop(0)
                    _retire(root, name)
                    pending[pool.submit(_execute_one, name, texts[name], str(root), params, timeout, str(store))] = name
                bar.set_postfix_str("running: " + ", ".join(sorted(pending.values())), refresh=True)
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    name = pending.pop(fut)
                    try:
                        finished(name, fut.result(), bar)
                    except Exception as exc:  # noqa: BLE001 — the worker itself died
                        finished(name, {"ok": False, "seconds": 0.0, "error": _error_line(exc),
                                        "notebook": None}, bar)
            bar.close()
    run_figures.last_wall_time = time.perf_counter() - started
    return [results[n] for n in first + last]


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


def _usage(message: str, command: str = "figures") -> int:
    """One line on stderr and exit code 2: bad input, reported before any work."""
    print(f"linattn {command}: error: {message}", file=sys.stderr)
    return 2


def cmd_figures(args) -> int:
    """``linattn figures``: every bad input (options, ``--param`` keys, types and the runs they would give, the
    output folder) is refused in one line before anything runs or is written; a figure that fails is named once,
    when it fails (on stderr, with where its traceback notebook is), and counted in the closing summary."""
    try:
        extras.require("figures", "linattn figures")
    except ImportError as e:
        return _usage(str(e))
    if args.jobs < 1:
        return _usage("--jobs must be a positive integer")
    try:
        overrides = dict(notebooks.parse_override(item) for item in args.param)
    except notebooks.ParameterError as e:
        return _usage(str(e))
    if overrides and not args.only:
        return _usage("--param needs --only NAME (the figure whose parameters it sets)")
    if overrides and args.out is None and not args.into_book:
        return _usage("--param writes to --out DIR (or, to change the book's own figure, add --into-book)")
    if args.into_book and args.out is not None:
        return _usage("--into-book writes to the book's figures; leave out --out")
    if args.list:
        for name, state, report in list_figures(preset=args.preset, out=args.out, src=args.src):
            print(f"{name:28s} {state:8s}{'  (report: runs last)' if report else ''}")
        return 0
    root = Path(args.out if args.out is not None else preset_root(args.preset))
    if (why := unusable_output_dir(root)) is not None:
        return _usage(f"--out {why}" if args.out is not None else f"the default output folder {why} (give --out DIR)")
    try:
        results = run_figures(preset=args.preset, only=args.only, jobs=args.jobs, force=args.force, out=args.out,
                              src=args.src, timeout=args.timeout, overrides=overrides, retrain=args.retrain)
    except (KeyError, notebooks.ParameterError, UnusableFolder) as e:
        return _usage(e.args[0])
    root = root.resolve()
    ran = [r for r in results if r.status == "ran"]
    cached = [r for r in results if r.status == "cached"]
    failed = [r for r in results if r.status == "failed"]
    where = f"outputs in {root}" if root.is_dir() else "nothing written"
    print(f"figures ({args.preset} preset): {len(ran)} ran, {len(cached)} up to date, {len(failed)} failed "
          f"in {run_figures.last_wall_time:.0f} s; {where}")
    if args.out is not None or overrides:
        for r in results:
            if r.status != "failed":
                files = sorted(p.name for p in (root / r.name).iterdir() if p.suffix in (".pdf", ".png", ".svg",
                                                                                           ".csv"))
                print(f"  {r.name}: {root / r.name}/ ({', '.join(files)}); notebook {root / (r.name + '.ipynb')}")
    return 1 if failed else 0


def cmd_notebook(args) -> int:
    """``linattn notebook NAME``: write figure NAME as a runnable ``.ipynb`` (for Jupyter or papermill), and say how
    to open, convert or run it. Nothing is written when the target is refused."""
    try:
        extras.require("figures", "linattn notebook")
    except ImportError as e:
        return _usage(str(e), "notebook")
    found = discover(args.src)
    if args.name not in found:
        return _usage(f"unknown figure {args.name!r}; known: {', '.join(found)}", "notebook")
    out = args.out or Path(f"{args.name}.ipynb")
    if out.exists() and not args.overwrite:
        return _usage(f"{out} exists (add --overwrite to replace it)", "notebook")
    if out.is_dir():
        return _usage(f"{out} is a folder; give the notebook's file name", "notebook")
    if not out.absolute().parent.is_dir():
        return _usage(f"{out.parent} is not an existing folder (create it first)", "notebook")
    if (why := unusable_output_dir(out.absolute().parent)) is not None:
        return _usage(why, "notebook")
    text = found[args.name].read_text(encoding="utf-8")
    nb = notebooks.runnable(text, notebook_values(args.name, {"preset": args.preset}))
    import nbformat  # here, after every refusal: a refused name answers without it

    atomic_write(out, lambda f: f.write(nbformat.writes(nb)))
    print(f"wrote {out} ({args.preset} preset; when run, it writes its figure into ./{args.name}/ of the working "
          "directory)")
    for line in _notebook_hints(out, notebooks.knobs(notebooks.from_text(text))):
        print(f"  {line}")
    return 0


def papermill_yaml(values: dict) -> str:
    """``values`` as the one-line YAML text of papermill's ``-y`` option (``seeds: [3]``; several as a flow mapping,
    ``{seeds: [3], init: 0.001}``): YAML reads it back as the same Python values (each value is written as JSON,
    which is YAML), where ``-p seeds '[3]'`` would pass the string "[3]"."""
    pairs = ", ".join(f"{k}: {json.dumps(v)}" for k, v in values.items())
    return pairs if len(values) == 1 else "{" + pairs + "}"


def _notebook_hints(path: Path, knobs: dict) -> list[str]:
    """How to open, convert and run the notebook written to ``path`` (lines for :func:`cmd_notebook`), each with what
    to install for it, and a papermill command that sets the seed (``seed`` or ``seeds``, whichever of the
    notebook's ``knobs`` it is)."""
    import shlex

    target = shlex.quote(str(path))
    lines = [f"open it:    jupyter lab {target}   (needs Jupyter: pip install jupyterlab)",
             f"convert it: jupyter nbconvert --to html --execute {target}   (needs: pip install nbconvert)"]
    run = f"papermill {target} {shlex.quote(str(path.with_name(path.stem + '.out.ipynb')))}"
    if "seed" in knobs:
        run += f" -y {shlex.quote(papermill_yaml({'seed': 3}))}"
    elif "seeds" in knobs:
        run += f" -y {shlex.quote(papermill_yaml({'seeds': [3]}))}"
    lines.append(f"run it:     {run}   (needs: pip install \"linattn[figures]\"; parameters as YAML: "
                 "-y '{KEY: VALUE, ...}')")
    if knobs:
        lines.append(f"its parameters: {', '.join(knobs)}")
    return lines
