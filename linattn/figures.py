"""The figure runner: execute every ``figures_src/<name>.md`` notebook into ``<root>/<name>.ipynb``.

    linattn figures [--preset quick|paper] [--only NAMES] [--jobs N] [--force] [--out DIR] [--src DIR] [--list]

Each notebook (jupytext MyST markdown) is converted in memory and executed by papermill with the parameters
``preset`` and ``out_dir`` (= ``<root>``) injected; the notebook writes its files to ``<root>/<name>/`` through
:class:`linattn.figure_io.FigureOutput`. After a successful run the runner appends the "Cite this figure" cell
(:func:`cite_block`) and writes the executed notebook atomically to ``<root>/<name>.ipynb``.

Cache: a figure is skipped when its cache key — a hash of the notebook text, of every ``.py`` file of ``linattn``
and of the parameters — equals ``<root>/<name>/.cache-key`` and its executed notebook exists. The key is written
only after success. Before a figure runs, its key, executed notebook and output folder are moved to
``<root>/.previous/`` so that a failed run never leaves old outputs looking current; the failed executed
notebook (with the traceback) goes to ``<root>/<name>.failed.ipynb``.

Figures run in parallel (``--jobs``, one worker process and one kernel each, every kernel limited to one thread).
Report notebooks (``beyond_error_table``, or any whose front matter says ``linattn: {report: true}``) read the
other figures' outputs, so they start after all the others have finished.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from .figure_io import REPO_ROOT, figures_root
from .provenance import PACKAGE_ROOT, atomic_write

SRC_DIR = REPO_ROOT / "figures_src"
REPORT_NAMES = ("beyond_error_table",)
CACHE_KEY = ".cache-key"
NOT_HASHED = ("book.py",)
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")

PAPER_BIBTEX = """@inproceedings{zhang2025training,
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


@dataclass
class FigureResult:
    name: str
    status: str  # "ran", "cached" or "failed"
    seconds: float = 0.0
    error: str | None = None  # the exception line of a failed figure
    notebook: Path | None = None  # the executed notebook (<name>.ipynb, or <name>.failed.ipynb on failure)


# ---------------------------------------------------------------- discovery and cache keys

def discover(src=None) -> dict[str, Path]:
    """``{name: path}`` of every ``*.md`` notebook in ``src`` (default ``<repository>/figures_src``), sorted."""
    src = Path(src) if src is not None else SRC_DIR
    return {p.stem: p for p in sorted(src.glob("*.md")) if not p.name.startswith((".", "_"))}


def read_notebook(path: Path):
    return notebook_from_text(Path(path).read_text(encoding="utf-8"))


def notebook_from_text(text: str):
    """The nbformat notebook of a jupytext MyST markdown text (converted in memory, nothing written)."""
    import jupytext

    return jupytext.reads(text, fmt="md:myst")


def is_report(name: str, notebook) -> bool:
    """Report notebooks read the other figures' outputs and therefore run last."""
    meta = notebook.metadata.get("linattn", {}) or {}
    return name in REPORT_NAMES or bool(meta.get("report", False))


def source_hash(package=PACKAGE_ROOT) -> str:
    """SHA-256 over the relative path and content of every ``.py`` file of the ``linattn`` package.

    ``book.py`` (the book build, which never touches a figure) is left out, so editing it re-runs nothing.
    """
    h = hashlib.sha256()
    for path in sorted(Path(package).rglob("*.py")):
        if "__pycache__" in path.parts or path.name in NOT_HASHED:
            continue
        h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def cache_key(text: str, params: dict, sources: str) -> str:
    blob = json.dumps({"notebook": text, "parameters": params, "linattn": sources}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def is_current(root: Path, name: str, key: str) -> bool:
    key_file = root / name / CACHE_KEY
    return (root / f"{name}.ipynb").is_file() and key_file.is_file() and key_file.read_text().strip() == key


# ---------------------------------------------------------------- the cite cell

def cite_block(name: str) -> str:
    """The "Cite this figure" markdown cell appended to every executed figure notebook (paths relative to
    ``<root>``, where the executed notebook lies)."""
    from . import __version__

    files = [("PDF", "pdf"), ("PNG", "png"), ("CSV", "csv")]
    links = [f"{{download}}`{label} <{name}/{name}.{ext}>`" for label, ext in files]
    links.append(f"{{download}}`provenance.json <{name}/provenance.json>`")
    return "\n".join([
        "## Cite this figure",
        "",
        f"This figure's anchor is `fig-{name}` (link to it with `` {{numref}}`fig-{name}` ``).",
        f"Files: {' · '.join(links)}.",
        "",
        "If you use it, please cite the paper whose result it reproduces:",
        "",
        "```bibtex",
        PAPER_BIBTEX,
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


# ---------------------------------------------------------------- one figure (runs in a worker process)

def _error_line(exc: BaseException) -> str:
    ename, evalue = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    if ename:
        return f"{ename}: {evalue}"
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"


def execute_one(name: str, text: str, root: str, params: dict, timeout: float | None = None) -> dict:
    """Convert and execute one notebook (its MyST ``text``: the very text its cache key was computed from);
    returns ``{"ok", "seconds", "error", "notebook"}``. Never raises."""
    import nbformat
    import papermill

    root_p = Path(root)
    running = root_p / f".{name}.running.ipynb"
    failed = root_p / f"{name}.failed.ipynb"
    for var in THREAD_ENV:  # inherited by the kernel: one thread each, so parallel figures do not oversubscribe
        os.environ[var] = "1"
    os.environ.setdefault("MPLBACKEND", "Agg")
    start = time.perf_counter()
    try:
        nb = notebook_from_text(text)
        nb = papermill.execute_notebook(nb, str(running), parameters=params, kernel_name="python3", language="python",
                                        progress_bar=False, cwd=str(root_p), execution_timeout=timeout)
        for cell in nb.cells:  # the book folds the code, and drops papermill's machine-specific parameter cell
            if cell.cell_type == "code":
                tags = cell.metadata.setdefault("tags", [])
                tags.append("remove-cell" if "injected-parameters" in tags else "hide-input")
        nb.cells.append(nbformat.v4.new_markdown_cell(cite_block(name)))
        text = nbformat.writes(nb)
        atomic_write(root_p / f"{name}.ipynb", lambda f: f.write(text))
        running.unlink(missing_ok=True)
        return {"ok": True, "seconds": time.perf_counter() - start, "error": None,
                "notebook": str(root_p / f"{name}.ipynb")}
    except Exception as exc:  # noqa: BLE001 — one failing figure must never stop the others
        if running.exists():
            os.replace(running, failed)
        else:  # failed before execution started (e.g. unreadable notebook): leave a note where the notebook goes
            note = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
                f"# {name} failed before execution\n\n```\n{_error_line(exc)}\n```")])
            atomic_write(failed, lambda f: f.write(nbformat.writes(note)))
        return {"ok": False, "seconds": time.perf_counter() - start, "error": _error_line(exc),
                "notebook": str(failed)}


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


def _last_wall_time(root: Path, name: str) -> float:
    """Seconds the figure took last time (its provenance.json), +inf when unknown: longest first packs the jobs."""
    for folder in (root / name, root / ".previous" / name):
        try:
            return float(json.loads((folder / "provenance.json").read_text())["wall_time_s"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return float("inf")


def plan(names: dict[str, Path]) -> tuple[list[str], list[str]]:
    """(ordinary figures, report figures that run after them)."""
    first, last = [], []
    for name, path in names.items():
        (last if is_report(name, read_notebook(path)) else first).append(name)
    return first, last


def run_figures(*, preset: str = "quick", only=None, jobs: int = 2, force: bool = False, out=None, src=None,
                timeout: float | None = None, progress: bool = True) -> list[FigureResult]:
    """Execute the figure notebooks (all, or those in ``only``) and return one :class:`FigureResult` each."""
    from tqdm.auto import tqdm

    found = discover(src)
    if only:
        unknown = sorted(set(only) - set(found))
        if unknown:
            raise KeyError(f"unknown figure(s): {', '.join(unknown)}; known: {', '.join(found)}")
        found = {k: v for k, v in found.items() if k in set(only)}
    root = figures_root(out).resolve()
    root.mkdir(parents=True, exist_ok=True)
    params = {"preset": preset}
    sources = source_hash()
    texts = {n: p.read_text(encoding="utf-8") for n, p in found.items()}
    keys = {n: cache_key(texts[n], params, sources) for n in found}
    first, last = plan(found)
    results: dict[str, FigureResult] = {}
    todo = []
    for name in first + last:
        if not force and is_current(root, name, keys[name]):
            results[name] = FigureResult(name, "cached", notebook=root / f"{name}.ipynb")
        else:
            todo.append(name)
    bar = tqdm(total=len(todo), desc="figures", unit="fig", disable=not progress or not todo, leave=True)

    def finished(name, out_):
        res = FigureResult(name, "ran" if out_["ok"] else "failed", out_["seconds"], out_["error"],
                           Path(out_["notebook"]))
        if out_["ok"]:
            atomic_write(root / name / CACHE_KEY, lambda f: f.write(keys[name] + "\n"))
            bar.write(f"  done    {name}  ({res.seconds:.1f} s)")
        else:
            bar.write(f"  FAILED  {name}  ({res.seconds:.1f} s): {res.error}\n"
                      f"          executed notebook with the traceback: {res.notebook}")
        results[name] = res
        bar.update(1)

    context = multiprocessing.get_context("spawn")  # no fork of a process that may hold torch threads
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=context) as pool:
        for stage in ([n for n in todo if n in first], [n for n in todo if n in last]):
            queue = sorted(stage, key=lambda n: -_last_wall_time(root, n))  # stable: ties keep name order
            pending = {}
            while queue or pending:
                while queue and len(pending) < max(1, jobs):  # submit only what runs now: the bar names it
                    name = queue.pop(0)
                    _retire(root, name)
                    pending[pool.submit(execute_one, name, texts[name], str(root),
                                        {"preset": preset, "out_dir": str(root)}, timeout)] = name
                bar.set_postfix_str("running: " + ", ".join(sorted(pending.values())), refresh=True)
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    name = pending.pop(fut)
                    try:
                        finished(name, fut.result())
                    except Exception as exc:  # noqa: BLE001 — the worker itself died
                        finished(name, {"ok": False, "seconds": 0.0, "error": _error_line(exc),
                                        "notebook": str(root / f"{name}.failed.ipynb")})
    bar.close()
    return [results[n] for n in first + last]


def list_figures(*, preset: str = "quick", out=None, src=None) -> list[tuple[str, str, bool]]:
    """``(name, "current" | "stale" | "missing", is_report)`` for every notebook."""
    found = discover(src)
    root = figures_root(out).resolve()
    sources = source_hash()
    rows = []
    for name, path in found.items():
        key = cache_key(path.read_text(encoding="utf-8"), {"preset": preset}, sources)
        state = ("current" if is_current(root, name, key)
                 else "stale" if (root / f"{name}.ipynb").exists() else "missing")
        rows.append((name, state, is_report(name, read_notebook(path))))
    return rows


def add_arguments(p) -> None:
    p.add_argument("--preset", choices=("quick", "paper"), default="quick",
                   help="quick: CI-sized runs (default); paper: the published settings")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these figures (names of figures_src/*.md)")
    p.add_argument("--jobs", type=int, default=2, help="figures executed in parallel (default 2)")
    p.add_argument("--force", action="store_true", help="re-run figures even when their cache key is unchanged")
    p.add_argument("--out", type=Path, default=None,
                   help="output root (default $LINATTN_FIGURES_DIR, else book/figures)")
    p.add_argument("--src", type=Path, default=None, help="folder of the notebooks (default figures_src/)")
    p.add_argument("--timeout", type=float, default=None, help="seconds allowed per notebook cell")
    p.add_argument("--list", action="store_true", help="list the figures and whether their outputs are current")


def cmd_figures(args) -> int:
    if args.jobs < 1:
        print("linattn: error: --jobs must be a positive integer", file=sys.stderr)
        return 2
    if args.list:
        for name, state, report in list_figures(preset=args.preset, out=args.out, src=args.src):
            print(f"{name:28s} {state:8s}{'  (report: runs last)' if report else ''}")
        return 0
    try:
        results = run_figures(preset=args.preset, only=args.only, jobs=args.jobs, force=args.force, out=args.out,
                              src=args.src, timeout=args.timeout)
    except KeyError as e:
        print(f"linattn: error: {e.args[0]}", file=sys.stderr)
        return 2
    ran = [r for r in results if r.status == "ran"]
    cached = [r for r in results if r.status == "cached"]
    failed = [r for r in results if r.status == "failed"]
    print(f"figures: {len(ran)} ran, {len(cached)} up to date, {len(failed)} failed "
          f"(outputs in {figures_root(args.out).resolve()})")
    for r in failed:
        print(f"  FAILED {r.name}: {r.error}\n         see {r.notebook}", file=sys.stderr)
    return 1 if failed else 0
