"""What the ``linattn`` commands share: the one-line usage error (``linattn <command>: error: …``, exit code 2), the
parser that raises it, the run flags of ``linattn train`` (declared with their settings, ``linattn.config.SETTINGS``)
and the words of a ``ConfigError`` in flags."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Callable

from ..config import SETTINGS, ConfigError, RunConfig
from ..errors import ALONE
from ..training.memory import parse_size


class UsageError(Exception):
    """Bad command-line input: reported as one line ``<prog>: error: …``, exit code 2.

    ``prog`` names the (sub)command, e.g. ``linattn train``; None: :func:`main` fills in the command it ran.
    """

    def __init__(self, message: str, prog: str | None = None):
        super().__init__(message)
        self.prog = prog


class TrainHelp(argparse.HelpFormatter):
    """``linattn train --help``: every option that has a default and whose help does not already say it ends with
    "(default: …)"."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (action.option_strings and action.default is not None and action.default is not False
                and action.default != argparse.SUPPRESS and "default" not in text):
            text = f"{text} (default: %(default)s)".strip()
        return text


class Parser(argparse.ArgumentParser):
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


def flag_words(name: str, value=ALONE, *, typed: dict | None = None) -> str:
    """A setting named in a :class:`~linattn.errors.ConfigError` message, as ``linattn train`` writes it: ``--lr``,
    ``--model mlp`` (strings unquoted), the bare flag for a switch that is on (``--cubic_feat``), ``--trainset_size
    inf`` for the population objective (:meth:`ConfigError.words <linattn.errors.ConfigError.words>`). ``typed``: the
    flag the user typed for each setting (:class:`StoreTyped`), used in place of the setting's first flag
    (``--head -3`` is answered about ``--head``, not ``--head_num``)."""
    setting = SETTINGS.get(name)
    flag = setting.flags[0] if setting is not None and setting.flags else _OTHER_FLAGS.get(name, name)
    flag = (typed or {}).get(name) or flag
    if value is ALONE:
        return flag
    if setting is not None and setting.kind == "bool":
        return flag if value else f"no {flag}"
    return f"{flag} {'inf' if value is None else value}"


def cli_message(error: ConfigError, args: argparse.Namespace | None = None, *, swept=()) -> str:
    """``error``'s message in the words of ``linattn train``: every setting it names by its flag, the one typed on
    the command line ``args`` where there was one (not for the settings ``swept`` by a grid, whose values came from
    the grid, not from that flag)."""
    typed = {k: v for k, v in (getattr(args, TYPED, None) or {}).items() if k not in swept}
    return error.words(lambda name, *value: flag_words(name, *value, typed=typed))


TYPED = "typed_flags"  # the attribute of the parsed arguments that holds the flags as typed (StoreTyped)


class StoreTyped(argparse.Action):
    """argparse's ``store`` that also records which of the setting's flags the user typed (``--head`` or
    ``--head_num``), in ``args.typed_flags[dest]``: a message about the setting then names that flag."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        if getattr(namespace, TYPED, None) is None:
            setattr(namespace, TYPED, {})
        getattr(namespace, TYPED)[self.dest] = option_string


_ARG_TYPES: dict[str, Callable[[str], Any]] = {
    "int": int, "size": _size, "number": _finite, "numbers": _floats, "str": str}


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
                               default=s.default, help=s.describe(), action=StoreTyped)
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
