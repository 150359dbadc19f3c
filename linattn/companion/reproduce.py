"""Check that executed figure notebooks reproduce themselves: re-execute each with nbval and compare its outputs.

    python -m linattn.companion.reproduce [--preset paper|quick] [--root DIR] [--fresh-runs] [--allow-stale] [NAME ...]

Each executed notebook ``<root>/<NAME>.ipynb`` (the runner's, default root ``_build/figures/<preset>``; default: every
figure) is copied into a temporary folder with papermill's injected parameters kept but ``out_dir`` pointed at that
folder, so that re-running it never writes into the book's outputs. nbval (``pytest --nbval``) then runs it cell by
cell in a fresh kernel and compares every text output with the one the book shows: the numbers tables, the Markdown
cells' text, glued values, printed lines. A difference fails with the cell, its source and both values.

Before comparing, nbval rewrites both sides with :data:`SANITIZE` (its sanitize-file format, ``regex:``/``replace:``
pairs), which masks only what legitimately changes from run to run: wall times, dates and file paths (a wall time is
a number with its unit, ``12.3 s``: a notebook that shows or glues one writes it so). Not compared
(``_NOT_COMPARED``): pictures, also glued ones (their bytes depend on the renderer; the numbers drawn are in the
tables, which are compared), and what a cell writes to stderr (warnings: they depend on which notebook trained a
shared run first, not on the numbers). nbval itself leaves out widget views (their ids are random).

Runs. By default the notebooks read their runs from the run store the book was made with (fast: it re-checks
everything a notebook computes from stored runs). ``--fresh-runs`` gives them an empty run store in the temporary
folder, so every run is trained again from its seed: the stronger check (same seed, same numbers), and as slow as
building those figures the first time.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .runner import cachekey, execute, figure_args
from .runner.paths import ENV_RUNS_DIR, environment, preset_root

_PROG = "python -m linattn.companion.reproduce"
# (regex, replacement): what may differ between two runs of the same notebook, and nothing else
SANITIZE = (
    (r"\b\d+(?:\.\d+)? ?(?:ms|s|min)\b", "<seconds> s"),  # wall times: "1.7 s", "250 ms"
    (r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?", "<date>"),  # ISO dates
    (r"(?<![\w:/.])(?:/[\w.+@-]+){2,}", "<path>"),  # absolute paths (not URLs, not fractions such as 1/D)
)
_PICTURES = ("image/png", "image/jpeg", "image/svg+xml", "application/pdf")
_GLUE_PREFIX = "application/papermill.record/"  # how myst-nb's glue stores a value's MIME bundle
# pictures, also glued ones; and stderr: its warnings come from whichever notebook happened to train a shared run
# first, and a warning filter shows each once per kernel, so they depend on the order of work, not on the numbers
_NOT_COMPARED = _PICTURES + tuple(_GLUE_PREFIX + m for m in _PICTURES) + ("stderr",)
_patched: dict = {}  # what pytest_sessionstart replaced, for pytest_sessionfinish to put back


def pytest_collectstart(collector):
    """nbval's hook point (this module is a pytest plugin): leave ``_NOT_COMPARED`` out of the comparison."""
    from nbval.plugin import IPyNbFile

    if isinstance(collector, IPyNbFile):
        collector.skip_compare += _NOT_COMPARED


def pytest_sessionstart(session):
    """Run each cell as papermill ran it, with ``store_history=True``. nbval 0.11 passes False, with which IPython
    ignores a cell's closing ``;`` (nbval issue #194, IPython issue #14162): a cell such as ``glue(...);`` would show
    an output the book does not have. Undone when the session ends."""
    from nbval.kernel import RunningKernel

    def execute_cell_input(self, cell_input, allow_stdin=None):
        return self.kc.execute(cell_input, store_history=True, allow_stdin=allow_stdin, stop_on_error=False)

    _patched[RunningKernel] = RunningKernel.execute_cell_input
    RunningKernel.execute_cell_input = execute_cell_input


def pytest_sessionfinish(session, exitstatus):
    for cls, original in _patched.items():
        cls.execute_cell_input = original
    _patched.clear()


def pytest_assertrepr_compare(config, op, left, right):
    """How nbval explains a differing output (it asks this pytest hook; this plugin's answer comes first): each line
    that differs, as the book shows it and as the re-run gives it (after sanitising)."""
    if op != "==" or not (isinstance(left, str) and isinstance(right, str)):
        return None
    lines = ["the book's output and the re-run's differ:"]
    for book, rerun in itertools.zip_longest(left.splitlines(), right.splitlines()):
        if book != rerun:
            lines += [f"  book:   {book if book is not None else '(no line)'}",
                      f"  re-run: {rerun if rerun is not None else '(no line)'}"]
    return lines


def sanitize_file(path: Path) -> Path:
    """Write :data:`SANITIZE` to ``path`` in nbval's format (``--nbval-sanitize-with``)."""
    path.write_text("".join(f"[{i}]\nregex: {rx}\nreplace: {rep}\n\n" for i, (rx, rep) in enumerate(SANITIZE)),
                    encoding="utf-8")
    return path


def _prepare(name: str, root: Path, into: Path) -> Path:
    """Copy ``<root>/<name>.ipynb`` to ``<into>/<name>.ipynb`` with the same parameters but ``out_dir = into``
    (papermill rewrites its injected-parameters cell, which has no outputs to compare)."""
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    nb = load_notebook_node(str(root / f"{name}.ipynb"))
    params = dict(nb.metadata.get("papermill", {}).get("parameters", {}), out_dir=str(into))
    nb = parameterize_notebook(nb, params, kernel_name="python3", language="python")
    path = into / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def problems(names: list[str], root: Path, stale_ok: bool = False) -> list[str]:
    """Why some of ``names`` cannot be checked in ``root``: no executed notebook, or a stale one (made by other code
    or another notebook text, so a difference would not mean it fails to reproduce)."""
    out = []
    for name in names:
        if not (root / f"{name}.ipynb").is_file():
            out.append(f"{name}: no executed notebook {root / name}.ipynb")
        elif not stale_ok and not cachekey.is_current(root, name, cachekey.expected_key(name, root)):
            out.append(f"{name}: stale (its notebook, the linattn code or a library changed since it ran; re-run it "
                       f"with `linattn figures --only {name}`)")
    return out


def check(names: list[str], root: Path, *, fresh_runs: bool = False) -> int:
    """Re-execute the executed notebooks ``names`` of ``root`` with nbval; pytest's exit code (0: all reproduce)."""
    import nbformat
    import pytest

    root = Path(root).resolve()
    with tempfile.TemporaryDirectory(prefix="linattn-reproduce-") as tmp_name:
        tmp = Path(tmp_name)
        into = tmp / "figures"
        into.mkdir()
        reports = {n for n in names if cachekey.is_report(n, nbformat.read(root / f"{n}.ipynb", as_version=4))}
        if reports:  # a report reads the other figures' numbers from its root: give it the ones it read
            for numbers in root.glob("*/numbers.json"):
                (into / numbers.parent.name).mkdir(exist_ok=True)
                shutil.copy2(numbers, into / numbers.parent.name / numbers.name)
        paths = [_prepare(n, root, into) for n in sorted(names, key=lambda n: n in reports)]
        env = {var: "1" for var in execute.THREAD_ENV}  # as the runner executes them: one thread, Agg
        env["MPLBACKEND"] = os.environ.get("MPLBACKEND", "Agg")
        if fresh_runs:
            env[ENV_RUNS_DIR] = str(tmp / "runs")
        with environment(env):  # the kernels nbval starts inherit it
            args = ["--nbval", "--nbval-current-env", "--nbval-sanitize-with", str(sanitize_file(tmp / "sanitize.cfg")),
                    f"--nbval-kernel-startup-timeout={execute.KERNEL_START_TIMEOUT}", "-p", "no:cacheprovider",
                    f"--rootdir={tmp}", f"--color={'yes' if sys.stdout.isatty() else 'no'}", *map(str, paths)]
            return int(pytest.main(args, plugins=[sys.modules[__name__]]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=_PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="figures to check (default: every figure, or with --root every executed notebook there)")
    parser.add_argument("--preset", choices=figure_args.PRESET_CHOICES, default="paper",
                        help="check the book of this preset, _build/figures/<preset> (default paper)")
    parser.add_argument("--root", type=Path, help="check the executed notebooks in this folder instead")
    parser.add_argument("--fresh-runs", action="store_true",
                        help="train every run again in an empty run store instead of reading the book's")
    parser.add_argument("--allow-stale", dest="stale_ok", action="store_true",
                        help="also check notebooks whose source or code changed since they ran")
    args = parser.parse_args(argv)
    root = args.root if args.root is not None else preset_root(args.preset)
    # default: every figure of the preset's book; in a folder of one's own (--root), the executed ones it holds
    names = args.names or (sorted(p.stem for p in root.glob("*.ipynb") if "." not in p.stem) if args.root
                           else list(cachekey.discover()))
    if not names:
        parser.error(f"no executed notebooks in {root}")
    found = problems(names, Path(root), args.stale_ok)
    if found:
        parser.error("cannot check:\n  " + "\n  ".join(found))
    return check(names, root, fresh_runs=args.fresh_runs)


if __name__ == "__main__":
    sys.exit(main())
