"""The ``linattn`` command.

The commands live in modules of their own: :mod:`linattn.cli.train_cli`, :mod:`linattn.cli.sweep` (and the figure
runner, :mod:`linattn.companion.runner.figure_commands`); :mod:`linattn.cli.options` holds what they share, and
:mod:`linattn.companion.runner.interrupts` how SIGINT and SIGTERM stop them. One error idiom for all: ``linattn
<command>: error: …`` on stderr, exit code 2 (:class:`~linattn.cli.options.UsageError`).

``linattn train`` takes the reference's flags (same names, meanings and defaults; ``--head`` for ``--head_num``,
``--KQ_dim`` for ``--rank``, and unambiguous prefixes) plus ours, every run flag declared with its setting
(``linattn.config.SETTINGS``), and writes the run's folder into ``--out`` (``loss.csv``, ``run.json``, ``init.npz``,
``weights.npz``; with ``--save-data`` also ``data.npz``: ``linattn.training.result.write_outputs``), which
``linattn.load_run`` reads back. Its promises:

* Invalid input (a bad flag or value, an unavailable ``--device``, an existing non-empty ``--out`` without
  ``--overwrite``, an unwritable ``--out``): one line ``linattn train: error: …`` on stderr, exit code 2, before any
  work, nothing written.
* The files are written into a temporary sibling folder that is renamed to ``--out`` only when the run succeeded, so
  a failed, diverged or interrupted run leaves no folder; ``--overwrite`` replaces an existing folder, again only on
  success. SIGINT and SIGTERM alike end it with one line saying what was kept, exit code 130 or 143; a write that
  fails (a full disk) with one line naming the path, exit code 1.
* A diverging run: exit code 1, naming the step and suggesting a learning rate that a short trial run from the same
  initial weights found stable.
* ``--show`` without a display saves the plot as ``loss.png`` beside ``loss.csv`` and says so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .._version import __version__

# the names other code imports from linattn.cli (a module before it became this package)
from .options import (  # noqa: F401
    Parser,
    TrainHelp,
    UsageError,
    add_train_arguments,
    cli_message,
    config_from_args,
    flag_words,
)
from .sweep import cmd_sweep, sweep_grid  # noqa: F401
from .train_cli import cmd_train, default_out, prepare_out  # noqa: F401


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="linattn", description="Training dynamics of in-context learning in linear attention.")
    parser.add_argument("--version", action="version", version=f"linattn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    train = sub.add_parser(
        "train", help="train one model and write its loss curve", formatter_class=TrainHelp,
        description="Train one model and write loss.csv, run.json, init.npz and weights.npz into --out (with "
                    "--save-data also data.npz; linattn.load_run reads the folder back). Invalid settings are refused "
                    "with one line and exit code 2 before any work; the folder appears only when the run succeeds "
                    "(a diverging run exits with 1 and suggests a learning rate found stable in a short trial).")
    add_train_arguments(train)
    train.set_defaults(func=cmd_train)
    sw = sub.add_parser(
        "sweep", help="train a grid of runs on Dask; resumable; results as one xarray dataset",
        formatter_class=TrainHelp,
        description="Train every cell of a grid of settings on Dask (a local cluster of one single-threaded worker "
                    "per core, or --scheduler ADDRESS) into content-addressed run folders under --out, each what "
                    "`linattn train --out` writes; the same command again skips the finished runs. The results are "
                    "gathered into one xarray dataset, DIR/sweep.nc (NetCDF), with one dimension per swept setting "
                    "plus step. The fixed settings are linattn train's flags.")
    grids = sw.add_argument_group("the sweep")
    grids.add_argument("--grid", action="append", default=[], metavar="KEY=VALUES",
                       help="a swept setting: KEY=V1,V2,… or KEY=START:STOP[:STEP] (integers, STOP excluded); KEY "
                            "is a run flag's name (seed, init, head, …); repeat for each setting")
    grids.add_argument("--spec", type=Path, default=None, metavar="FILE.yaml",
                       help="the swept settings as YAML, KEY: [V1, V2, …] or KEY: START:STOP[:STEP]")
    grids.add_argument("--out", type=Path, default=None, metavar="DIR",
                       help="the sweep folder: runs/<key> per cell, sweep.json, sweep.log and the dataset sweep.nc")
    grids.add_argument("--dry-run", dest="dry_run", action="store_true",
                       help="list the cells (and, with --out, which are finished) and stop")
    grids.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="a running Dask scheduler, e.g. tcp://10.0.0.5:8786 (default: a local cluster)")
    grids.add_argument("--workers", type=int, default=None,
                       help="worker processes of the local cluster (default: one per core)")
    grids.add_argument("--collect", type=Path, default=None, metavar="DIR",
                       help="rebuild DIR/sweep.nc from DIR's run folders, and nothing else")
    add_train_arguments(sw, sweep=True)
    sw.set_defaults(func=cmd_sweep)
    from ..companion.runner import figure_args  # the options alone: the runner is imported when its command runs

    figs = sub.add_parser("figures", help="execute the figure notebooks of figures_src/ (cached, in parallel)")
    figure_args.add_arguments(figs)
    figs.set_defaults(func=_runner_command("cmd_figures"))
    nb = sub.add_parser("notebook", help="write a figure's notebook as a runnable .ipynb (Jupyter, papermill)")
    figure_args.add_notebook_arguments(nb)
    nb.set_defaults(func=_runner_command("cmd_notebook"))
    return parser


def _runner_command(name: str):
    """The figure runner's command ``name`` (``cmd_figures``, ``cmd_notebook``), imported only when it runs."""
    def command(args) -> int:
        from ..companion.runner import figure_commands

        return getattr(figure_commands, name)(args)

    return command


def main(argv=None) -> int:
    parser = build_parser()
    args = None
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except UsageError as e:
        prog = e.prog or (f"linattn {args.command}" if args is not None else "linattn")
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        prog = f"linattn {args.command}" if args is not None else "linattn"
        print(f"{prog}: interrupted", file=sys.stderr)  # train and sweep say what they kept themselves
        return 130


if __name__ == "__main__":
    sys.exit(main())
