"""The ``linattn`` command.

``linattn train`` takes the reference's flags (same names, meanings and defaults; ``--head`` for ``--head_num``,
``--KQ_dim`` for ``--rank``, and unambiguous prefixes) plus ours, every run flag declared with its setting
(``linattn.config.SETTINGS``), and writes the run's folder into ``--out`` (``loss.csv``, ``run.json``, ``init.npz``,
``weights.npz``; with ``--save-data`` also ``data.npz``: ``linattn.experiment.write_outputs``), which
``linattn.load_run`` reads back. Its promises:

* Invalid input (a bad flag or value, an unavailable ``--device``, an existing non-empty ``--out`` without
  ``--overwrite``, an unwritable ``--out``): one line ``linattn train: error: …`` on stderr, exit code 2, before any
  work, nothing written.
* The files are written into a temporary sibling folder that is renamed to ``--out`` only when the run succeeded, so
  a failed, diverged or interrupted run leaves no folder; ``--overwrite`` replaces an existing folder, again only on
  success.
* A diverging run: exit code 1, naming the step and suggesting a learning rate that a short trial run from the same
  initial weights found stable.
* ``--show`` without a display saves the plot as ``loss.png`` beside ``loss.csv`` and says so.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from ._version import __version__
from .config import SETTINGS, ConfigError, RunConfig, parse_size
from .data import ALONE


class UsageError(Exception):
    """Bad command-line input: reported as one line ``<prog>: error: …``, exit code 2.

    ``prog`` names the (sub)command, e.g. ``linattn train``; None: :func:`main` fills in the command it ran.
    """

    def __init__(self, message: str, prog: str | None = None):
        super().__init__(message)
        self.prog = prog


class _TrainHelp(argparse.HelpFormatter):
    """``linattn train --help``: every option that has a default and whose help does not already say it ends with
    "(default: …)"."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (action.option_strings and action.default is not None and action.default is not False
                and action.default != argparse.SUPPRESS and "default" not in text):
            text = f"{text} (default: %(default)s)".strip()
        return text


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line instead of argparse's usage block
        raise UsageError(message, prog=self.prog)


def _size(text: str):
    """An integer, or 'inf' for an infinite training set."""
    if text.lower() in ("inf", "infinity"):
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'inf', got {text!r}") from None


def _floats(text: str):
    try:
        return tuple(float(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _finite(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return x


def _memory(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 8G or 500M, got {text!r}") from None


# The flags of names that are no RunConfig field (every field's flag is declared with it: config.SETTINGS).
_OTHER_FLAGS = {"max_memory": "--max-memory", "out": "--out", "threads": "--threads"}


def flag_words(name: str, value=ALONE) -> str:
    """A setting named in a :class:`~linattn.config.ConfigError` message, as ``linattn train`` writes it: ``--lr``,
    ``--model mlp`` (strings unquoted), the bare flag for a switch that is on (``--cubic_feat``), ``--trainset_size
    inf`` for the population objective (:meth:`ConfigError.words <linattn.data.ConfigError.words>`)."""
    setting = SETTINGS.get(name)
    flag = setting.flags[0] if setting is not None and setting.flags else _OTHER_FLAGS.get(name, name)
    if value is ALONE:
        return flag
    if setting is not None and setting.kind == "bool":
        return flag if value else f"no {flag}"
    return f"{flag} {'inf' if value is None else value}"


def cli_message(error: ConfigError) -> str:
    """``error``'s message in the words of ``linattn train``: every setting it names by its flag."""
    return error.words(flag_words)


_ARG_TYPES = {"int": int, "size": _size, "number": _finite, "numbers": _floats, "str": None}


def add_train_arguments(p: argparse.ArgumentParser, *, sweep: bool = False) -> None:
    """The flags of ``linattn train``, one per setting with a flag (its name, type, choices, default and help
    from :data:`linattn.config.SETTINGS`) and those of the command itself; ``sweep``: those that set a run
    (``linattn sweep``'s fixed settings), without ``--out``, ``--overwrite`` and ``--show``."""
    ref = p.add_argument_group("the reference's flags")
    ours = p.add_argument_group("linattn's flags")
    for s in SETTINGS.values():
        if not s.flags:
            continue
        group = ref if s.reference else ours
        if s.kind == "bool":
            group.add_argument(*s.flags, dest=s.name, action="store_true", help=s.describe())
        else:
            group.add_argument(*s.flags, dest=s.name, type=_ARG_TYPES[s.kind], choices=s.allowed(),
                               default=s.default, help=s.describe())
        if s.name == "in_dim":  # the reference's output dimension: the paper's models predict a scalar
            ref.add_argument("--out_dim", type=int, default=1, choices=[1],
                             help="must be 1 (accepted for the reference's commands)")
    if not sweep:
        ref.add_argument("--show", action="store_true",
                         help="also show the loss curve in a window; without a display it is saved as loss.png "
                              "beside loss.csv")
        ours.add_argument("--out", type=Path, default=None,
                          help="output folder (default: runs/<model>_H…_<the run's key>); it must not exist "
                               "or be empty, and appears only when the run succeeds")
        ours.add_argument("--overwrite", action="store_true",
                          help="replace an existing --out folder (only once the new run has succeeded)")
    ours.add_argument("--max-memory", dest="max_memory", type=_memory, default=None,
                      help="the most memory the run may take, e.g. 8G or 500M (default: the memory available now); "
                           "a run estimated to need more is refused before it starts")
    ours.add_argument("--threads", type=int, default=None,
                      help="CPU threads for torch during the run (default: the engine's choice, one for the exact and "
                           "population engines, whose steps are too small to share)")
    ours.add_argument("--save-data", dest="save_data", action="store_true",
                      help="also write the data sets and the task, data.npz")
    ours.add_argument("--quiet", action="store_true", help="no progress bar or summary")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    settings = {k: v for k, v in vars(args).items() if k in RunConfig.field_names()}
    return RunConfig(**settings)


def default_out(cfg: RunConfig) -> Path:
    """runs/<reference-style name>_<8 hex digits of the run's key>: distinct runs never share a folder."""
    from .experiment import run_key

    P = "inf" if cfg.trainset_size is None else cfg.trainset_size
    name = f"{cfg.model}_head{cfg.head_num}_D{cfg.in_dim}_R{cfg.rank}_P{P}_N{cfg.seq_len}_seed{cfg.seed}"
    return Path("runs") / f"{name}_{run_key(cfg)[:8]}"


def _headless() -> bool:
    """True when ``plt.show()`` could not open a window: a non-interactive matplotlib backend, or (outside macOS and
    Windows) no X11/Wayland display for a backend that needs one."""
    import matplotlib

    backend = matplotlib.get_backend().lower()
    if backend in ("agg", "cairo", "pdf", "pgf", "ps", "svg", "template"):
        return True
    needs_display = backend not in ("macosx", "webagg", "nbagg", "notebook") and not backend.startswith("module://")
    has_display = bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return needs_display and sys.platform not in ("darwin", "win32") and not has_display


def prepare_out(out: Path, overwrite: bool) -> tuple[Path, list[Path]]:
    """Check ``--out`` and make the temporary sibling folder the run writes into; (that folder, the parent folders
    created for it, to remove again if the run fails). Any problem is a UsageError, before the run starts."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a folder")
    blocker = next((a for a in out.parents if a.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise UsageError(f"--out {out} cannot be written: {blocker} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UsageError(f"--out {out} exists and is not empty; pass --overwrite to replace it (it is replaced only "
                         "once the new run has succeeded)")
    created = [a for a in [out.parent, *out.parent.parents] if not a.exists()]
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    except OSError as e:
        _remove_empty(created)
        raise UsageError(f"--out {out} cannot be written: {e.strerror or e}") from None
    return tmp, created


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:  # innermost first
        try:
            folder.rmdir()
        except OSError:
            pass


def _move_into_place(tmp: Path, out: Path, overwrite: bool) -> None:
    """Rename the finished temporary folder to ``out``; an existing ``out`` is moved aside first and deleted only
    after the rename (with ``--overwrite``; an empty one is simply replaced)."""
    mask = os.umask(0)
    os.umask(mask)
    tmp.chmod(0o777 & ~mask)  # mkdtemp makes the folder private; give it the usual permissions
    old = None
    if out.is_dir() and (overwrite or not any(out.iterdir())):
        old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
        os.replace(out, old / out.name)
    try:
        os.replace(tmp, out)
    except OSError:
        if old is not None:
            os.replace(old / out.name, out)
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def cmd_train(args) -> int:
    from .experiment import plan, run, run_key, write_outputs
    from .train import TrainingDiverged

    cfg = config_from_args(args)
    try:
        checked = plan(cfg, max_memory=args.max_memory)  # checked once, here; run() carries it out
    except ConfigError as e:
        raise UsageError(cli_message(e)) from None
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be a positive integer, got {args.threads}")
    out = args.out or default_out(cfg)
    tmp, created = prepare_out(out, args.overwrite)
    try:
        try:
            result = run(checked, progress=None if not args.quiet else False, threads=args.threads)
        except TrainingDiverged as e:
            print(f"linattn train: error: {e}", file=sys.stderr)
            return 1
        result.key = run_key(result.config)
        write_outputs(result, tmp, save_data=args.save_data)
        headless = args.show and _headless()
        if headless:
            from .companion.plotting import loss_figure

            loss_figure(result.history, title=out.name).savefig(tmp / "loss.png", dpi=150)
        _move_into_place(tmp, out, args.overwrite)
        tmp = None
    finally:
        if tmp is not None:  # the run failed or was interrupted: leave nothing behind
            shutil.rmtree(tmp, ignore_errors=True)
            _remove_empty(created)
    if not args.quiet:
        h = result.history
        print(f"{result.engine} engine, {cfg.epoch} steps in {result.wall_time:.1f} s: "
              f"loss {h.train_loss[0]:.4f} -> {h.train_loss[-1]:.4f}; wrote {out}")
    if headless:
        print(f"linattn train: no display to show the plot on; saved it as {out / 'loss.png'}")
    elif args.show:
        from .companion.plotting import show_loss

        show_loss(result.history, title=out.name)
    return 0


# ── linattn sweep ───────────────────────────────────────────────────────────────────────────────────────────────

_RANGE = re.compile(r"\s*([+-]?\d+)\s*:\s*([+-]?\d+)\s*(?::\s*([+-]?\d+)\s*)?")
_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


def _run_flags() -> dict[str, argparse.Action]:
    """Every name a swept setting may go by (its RunConfig field, each of its ``linattn train`` flags without the
    dashes) → the train parser's action for it, whose type and choices read the values."""
    p = _Parser(prog="linattn sweep")
    add_train_arguments(p, sweep=True)
    names = {}
    for action in p._actions:
        if action.dest in RunConfig.field_names():
            names.update({opt.lstrip("-"): action for opt in action.option_strings}, **{action.dest: action})
    return names


def _grid_value(key: str, text: str, action: argparse.Action):
    text = text.strip()
    if not text:
        raise UsageError(f"--grid {key}: an empty value")
    if isinstance(action, argparse._StoreTrueAction):
        if text.lower() not in _TRUE + _FALSE:
            raise UsageError(f"--grid {key}: expected true or false, got {text!r}")
        return text.lower() in _TRUE
    try:
        value = action.type(text) if action.type else text
    except (argparse.ArgumentTypeError, ValueError) as e:
        detail = str(e) if isinstance(e, argparse.ArgumentTypeError) else f"expected an integer, got {text!r}"
        raise UsageError(f"--grid {key}: {detail}") from None
    if action.choices is not None and value not in action.choices:
        raise UsageError(f"--grid {key}: {text!r} is not one of {', '.join(map(str, action.choices))}")
    return value


def _grid_values(key: str, values, action: argparse.Action) -> list:
    """``V1,V2,…`` or ``START:STOP[:STEP]`` (integers, STOP excluded), or a YAML list or scalar."""
    if isinstance(values, list):
        return [_grid_value(key, str(v), action) for v in values]
    text = str(values)
    if ":" in text:
        m = _RANGE.fullmatch(text)
        if m is None or action.type is not int:
            raise UsageError(f"--grid {key}={text}: START:STOP[:STEP] takes integers, for an integer setting")
        start, stop, step = int(m[1]), int(m[2]), int(m[3] or 1)
        if step == 0 or not range(start, stop, step):
            raise UsageError(f"--grid {key}={text}: the range is empty (STOP is excluded, as in Python's range)")
        return list(range(start, stop, step))
    return [_grid_value(key, v, action) for v in text.split(",")]


class _RepeatedKey(ValueError):
    """A YAML mapping that gives one key twice (YAML itself would keep the last value and drop the others)."""


def _unique_keys_loader():
    """A ``yaml.SafeLoader`` that refuses a mapping giving a key twice (:class:`_RepeatedKey`, naming the key and its
    lines): ``seed: [0, 1]`` then ``seed: [2, 3]`` would otherwise silently sweep seeds 2 and 3 alone."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if not isinstance(key, (str, int, float, bool, type(None))):
                    continue  # an unhashable key: SafeLoader's own error says so
                if key in seen:
                    raise _RepeatedKey(f"the key {key!r} is given twice (lines {seen[key]} and {line}); give each "
                                       "setting once, with all its values")
                seen[key] = line
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def sweep_grid(grid_args: list[str], spec: Path | None) -> dict:
    """``{RunConfig field: values}`` from ``--grid KEY=VALUES`` flags and a YAML ``--spec`` file (a mapping
    KEY: values, a list or a string as after ``--grid KEY=``); UsageError for a bad key or value."""
    entries = []
    if spec is not None:
        import yaml

        try:
            content = yaml.load(spec.read_text(encoding="utf-8"), Loader=_unique_keys_loader())
        except OSError as e:
            raise UsageError(f"--spec {spec}: cannot be read: {e.strerror or e}") from None
        except _RepeatedKey as e:
            raise UsageError(f"--spec {spec}: {e}") from None
        except yaml.YAMLError as e:
            raise UsageError(f"--spec {spec}: not valid YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(content, dict) or not content:
            raise UsageError(f"--spec {spec}: expected a mapping of settings to their values, e.g. 'seed: 0:6'")
        entries += [(str(k), v) for k, v in content.items()]
    for arg in grid_args:
        key, sep, values = arg.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--grid {arg}: expected KEY=V1,V2,… or KEY=START:STOP[:STEP]")
        entries.append((key.strip(), values))
    flags, grid = _run_flags(), {}
    for key, values in entries:
        action = flags.get(key)
        if action is None or action.dest in ("spectrum", "out_dim"):
            raise UsageError(f"--grid {key}: not a setting that can be swept (one of linattn train's run flags, e.g. "
                             "seed, init, lr, icl, trainset_size, head_num)")
        if action.dest in grid:
            raise UsageError(f"--grid {key}: {action.dest} is swept twice")
        grid[action.dest] = _grid_values(key, values, action)
        if len(set(grid[action.dest])) < len(grid[action.dest]):
            raise UsageError(f"--grid {key}: a value is listed twice")
    if not grid:
        raise UsageError("give at least one --grid KEY=VALUES (or a --spec file)")
    return grid


def cmd_sweep(args) -> int:
    from .companion import sweeps

    if args.collect is not None:
        if args.grid or args.spec or args.out or args.dry_run or args.scheduler:
            raise UsageError("--collect DIR rebuilds the dataset of DIR's runs: give it alone")
        try:
            sweeps.read_spec(args.collect)
            ds = sweeps.collect(args.collect)
        except FileNotFoundError as e:
            raise UsageError(f"--collect {e}") from None
        except ImportError as e:
            raise UsageError(str(e)) from None
        print(_describe(ds, args.collect))
        return 0
    grid = sweep_grid(args.grid, args.spec)
    base = config_from_args(args)
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be a positive integer, got {args.threads}")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be a positive integer, got {args.workers}")
    if args.out is None and not args.dry_run:
        raise UsageError("--out DIR is required: the folder of the runs and the dataset")
    try:
        spec = sweeps.Grid(base, grid)
        rows = sweeps.plan(spec, args.out, max_memory=args.max_memory)
        if args.out is not None:
            sweeps.check_out(args.out)
    except ConfigError as e:
        raise UsageError(cli_message(e)) from None
    finished = sum(state != "to run" for _, _, state in rows)
    if args.dry_run:
        shape = " × ".join(f"{k} {len(v)}" for k, v in spec.axes.items())
        print(f"{len(rows)} cells ({shape}): {len(rows) - finished} to run, {finished} finished or diverged before")
        width = max(len(cell.label) for cell, _, _ in rows)
        for cell, key, state in rows:
            print(f"  {cell.label.ljust(width)}  {state:<8}  runs/{key}")
        return 0
    client = None
    try:
        if args.scheduler:
            from dask.distributed import Client

            try:
                client = Client(args.scheduler, timeout=15)
            except (OSError, TimeoutError, ValueError) as e:
                raise UsageError(f"--scheduler {args.scheduler}: no Dask scheduler answers there ({e})") from None
        ds = sweeps.sweep(base, grid, client=client, out=args.out, workers=args.workers, save_data=args.save_data,
                          threads=args.threads or 1, max_memory=args.max_memory,
                          progress=False if args.quiet else None)
    except ImportError as e:
        raise UsageError(str(e)) from None
    except KeyboardInterrupt:
        print(f"linattn sweep: interrupted; every run finished so far is kept in {args.out}, and the same command "
              "goes on from there", file=sys.stderr)
        return 130
    finally:
        if client is not None:
            client.close()
    if not args.quiet:
        print(f"{len(rows) - finished} run, {finished} finished before; " + _describe(ds, args.out))
    failed = int((ds.status != "done").sum())
    if failed:
        print(f"linattn sweep: {failed} of {len(rows)} cells failed or diverged; their status and message are in "
              f"the dataset (and {args.out / 'failed'})", file=sys.stderr)
    return 1 if failed else 0


def _describe(ds, out: Path) -> str:
    dims = ", ".join(f"{k} {n}" for k, n in ds.sizes.items())
    done = int((ds.status == "done").sum())
    return f"{done} of {ds.status.size} cells done; wrote {out / 'sweep.nc'} (dimensions: {dims})"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="linattn", description="Training dynamics of in-context learning in linear attention.")
    parser.add_argument("--version", action="version", version=f"linattn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    train = sub.add_parser(
        "train", help="train one model and write its loss curve", formatter_class=_TrainHelp,
        description="Train one model and write loss.csv, run.json, init.npz and weights.npz into --out (with "
                    "--save-data also data.npz; linattn.load_run reads the folder back). Invalid settings are refused "
                    "with one line and exit code 2 before any work; the folder appears only when the run succeeds "
                    "(a diverging run exits with 1 and suggests a learning rate found stable in a short trial).")
    add_train_arguments(train)
    train.set_defaults(func=cmd_train)
    sw = sub.add_parser(
        "sweep", help="train a grid of runs on Dask; resumable; results as one xarray dataset",
        formatter_class=_TrainHelp,
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
    from .companion import figure_args  # the options alone: the runner is imported when its command runs

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
        from .companion import runner

        return getattr(runner, name)(args)

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
        print(f"{prog}: interrupted; nothing was written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
