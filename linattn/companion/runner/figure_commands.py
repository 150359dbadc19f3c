"""The ``linattn figures`` and ``linattn notebook`` commands (their options:
:mod:`linattn.companion.runner.figure_args`).

    linattn figures [--preset paper|quick] [--only NAME ...] [--param KEY=VALUE ...] [--out DIR | --into-book]
                    [--jobs N] [--force] [--retrain] [--list]

Roots. The book of preset ``P`` is built from ``_build/figures/<P>/`` (:func:`preset_root`: the checkout's, or the
working directory's when linattn is an installed copy), so the paper and the quick figures never mix. Overrides
(``--param``) go to ``--out DIR``; they enter a book's root only with ``--into-book``, and then every page shows
them in its badge. The root is checked before anything runs
(:func:`linattn.companion.runner.paths.unusable_output_dir`).

Bad input is refused before anything runs, as by every linattn command: one line ``linattn <command>: error: …``
on stderr, exit code 2 — an unknown figure, an unknown ``--param`` key or one of the wrong type
(:func:`linattn.companion.runner.notebooks.check_overrides`), and values that, taken together, would give a run
``linattn.training.plan`` refuses (:func:`linattn.companion.presets.check_overrides`, e.g. ``seeds=[-1]``, or a run that
does not fit in memory), or a figure that trains nothing settings it cannot use (a schematic's weights too large,
a drawing too large to draw). Each figure says when it starts and, while it runs, every 30 s that it still does.
Ctrl-C and SIGTERM end the command with one line saying which figures were finished and kept, exit code 130 or 143.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ...records import atomic_write
from .. import extras
from . import notebooks
from .cachekey import discover
from .execute import notebook_values
from .interrupts import signals_interrupt
from .paths import UnusableFolder, preset_root, unusable_output_dir
from .schedule import Interrupted, list_figures, run_figures


def _usage(message: str, command: str = "figures") -> int:
    """One line on stderr and exit code 2: bad input, reported before any work (as ``linattn.cli`` does)."""
    print(f"linattn {command}: error: {message}", file=sys.stderr)
    return 2


def _refusal(args, overrides: dict) -> str | None:
    """What is wrong with ``linattn figures``' options and parsed ``--param`` values together (None: nothing)."""
    if overrides and not args.only:
        return "--param needs --only NAME (the figure whose parameters it sets)"
    if overrides and args.out is None and not args.into_book:
        return "--param writes to --out DIR (or, to change the book's own figure, add --into-book)"
    if args.into_book and args.out is not None:
        return "--into-book writes to the book's figures; leave out --out"
    return None


def interrupted_line(exc: Interrupted, root: Path) -> str:
    """The one line an interrupted ``linattn figures`` ends with: what it kept in ``root`` and what it did not."""
    kept = [r.name for r in exc.results if r.status == "ran"]
    line = "linattn figures: interrupted; "
    line += f"kept {len(kept)} finished figure(s) in {root} ({', '.join(kept)})" if kept else "no figure was published"
    if exc.unfinished:
        line += (f"; not finished: {', '.join(exc.unfinished)} (their earlier outputs, where there were any, are "
                 "as they were)")
    return line


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
    if (why := _refusal(args, overrides)) is not None:
        return _usage(why)
    if args.list:
        for name, state, report in list_figures(preset=args.preset, out=args.out, src=args.src):
            print(f"{name:28s} {state:8s}{'  (report: runs last)' if report else ''}")
        return 0
    root = Path(args.out if args.out is not None else preset_root(args.preset))
    if (why := unusable_output_dir(root)) is not None:
        return _usage(f"--out {why}" if args.out is not None else f"the default output folder {why} (give --out DIR)")
    try:
        with signals_interrupt():
            results = run_figures(preset=args.preset, only=args.only, jobs=args.jobs, force=args.force,
                                  out=args.out, src=args.src, timeout=args.timeout, overrides=overrides,
                                  retrain=args.retrain)
    except (KeyError, notebooks.ParameterError, UnusableFolder) as e:
        return _usage(e.args[0])
    except Interrupted as e:
        print(interrupted_line(e, root.resolve()), file=sys.stderr)
        return e.exit_code
    _summary(args, results, root.resolve(), overrides)
    return 1 if any(r.status == "failed" for r in results) else 0


def _summary(args, results, root: Path, overrides: dict) -> None:
    ran = [r for r in results if r.status == "ran"]
    cached = [r for r in results if r.status == "cached"]
    failed = [r for r in results if r.status == "failed"]
    where = f"outputs in {root}" if root.is_dir() else "nothing written"
    print(f"figures ({args.preset} preset): {len(ran)} ran, {len(cached)} up to date, {len(failed)} failed "
          f"in {run_figures.last_wall_time:.0f} s; {where}")  # type: ignore[attr-defined]  # set by run_figures
    if args.out is not None or overrides:
        for r in results:
            if r.status != "failed":
                files = sorted(p.name for p in (root / r.name).iterdir() if p.suffix in (".pdf", ".png", ".svg",
                                                                                           ".csv"))
                print(f"  {r.name}: {root / r.name}/ ({', '.join(files)}); notebook {root / (r.name + '.ipynb')}")


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
