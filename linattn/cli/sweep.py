"""``linattn sweep``: a grid of runs on Dask into content-addressed run folders, resumable, gathered into one
xarray dataset (:mod:`linattn.companion.sweeps`). SIGINT and SIGTERM are handled alike
(:mod:`linattn.companion.runner.interrupts`): the cluster is closed, the one line says which cells are stored, exit 130
or 143.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..companion.runner.interrupts import as_interrupted, signals_interrupt
from ..config import ConfigError, RunConfig
from .options import Parser, UsageError, add_train_arguments, cli_message, config_from_args

_RANGE = re.compile(r"\s*([+-]?\d+)\s*:\s*([+-]?\d+)\s*(?::\s*([+-]?\d+)\s*)?")
_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


def _run_flags() -> dict[str, argparse.Action]:
    """Every name a swept setting may go by (its RunConfig field, each of its ``linattn train`` flags without the
    dashes) → the train parser's action for it, whose type and choices read the values."""
    p = Parser(prog="linattn sweep")
    add_train_arguments(p, sweep=True)
    names: dict[str, argparse.Action] = {}
    for action in p._actions:
        if action.dest in RunConfig.field_names():
            names.update({opt.lstrip("-"): action for opt in action.option_strings}, **{action.dest: action})
    return names


@dataclass(frozen=True)
class _Given:
    """Where a swept setting was given, for its error messages: ``--grid KEY=…``, or ``KEY:`` in a ``--spec`` file."""

    key: str
    spec: Path | None = None

    def __str__(self) -> str:
        return f"--grid {self.key}" if self.spec is None else f"--spec {self.spec}: {self.key}"

    def value(self, text: str) -> str:
        return f"--grid {self.key}={text}" if self.spec is None else f"{self}: {text}"


def _grid_value(given: _Given, text: str, action: argparse.Action):
    text = text.strip()
    if not text:
        raise UsageError(f"{given}: an empty value")
    if isinstance(action, argparse._StoreTrueAction):
        if text.lower() not in _TRUE + _FALSE:
            raise UsageError(f"{given}: expected true or false, got {text!r}")
        return text.lower() in _TRUE
    try:
        value = action.type(text) if callable(action.type) else text
    except (argparse.ArgumentTypeError, ValueError) as e:
        detail = str(e) if isinstance(e, argparse.ArgumentTypeError) else f"expected an integer, got {text!r}"
        raise UsageError(f"{given}: {detail}") from None
    if action.choices is not None and value not in action.choices:
        raise UsageError(f"{given}: {text!r} is not one of {', '.join(map(str, action.choices))}")
    return value


def _grid_values(given: _Given, values, action: argparse.Action) -> list:
    """``V1,V2,…`` or ``START:STOP[:STEP]`` (integers, STOP excluded), or a YAML list or scalar."""
    if isinstance(values, list):
        return [_grid_value(given, str(v), action) for v in values]
    text = str(values)
    if ":" in text:
        m = _RANGE.fullmatch(text)
        if m is None or action.type is not int:
            raise UsageError(f"{given.value(text)}: START:STOP[:STEP] takes integers, for an integer setting")
        start, stop, step = int(m[1]), int(m[2]), int(m[3] or 1)
        if step == 0 or not range(start, stop, step):
            raise UsageError(f"{given.value(text)}: the range is empty (STOP is excluded, as in Python's range)")
        return list(range(start, stop, step))
    return [_grid_value(given, v, action) for v in text.split(",")]


class _SpecProblem(ValueError):
    """A spec file that YAML reads, but not as meant: a key given twice, or a value YAML 1.1 reads otherwise."""


def _spec_loader():
    """A ``yaml.SafeLoader`` for spec files, without YAML 1.1's surprises.

    Plain integers and floats are read only in decimal notation (YAML 1.2's core schema, less its octal and hex), so
    ``seed: 1:6`` stays the text of a range (YAML 1.1 reads the base-60 number 66) and ``yes``, ``on`` stay text;
    a plain value that YAML 1.1 would read as a number in another notation (``010``: octal 8; ``0x10``, ``1_0``,
    ``1:30.5``) is refused as ambiguous (:class:`_SpecProblem`, with its line), and so is a key given twice
    (``seed: [0, 1]`` then ``seed: [2, 3]`` would otherwise silently sweep seeds 2 and 3 alone)."""
    import yaml

    INT, FLOAT, BOOL = (f"tag:yaml.org,2002:{t}" for t in ("int", "float", "bool"))

    def yaml11(text: str) -> str | None:
        return next((tag for tag, rx in yaml.SafeLoader.yaml_implicit_resolvers.get(text[:1], []) if rx.match(text)),
                    None)

    class SpecLoader(yaml.SafeLoader):
        yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in rules if tag not in (INT, FLOAT, BOOL)]
                                   for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()}

        def construct_mapping(self, node, deep=False):
            seen: dict[object, int] = {}  # key → its line
            for key_node, value_node in node.value:
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if not isinstance(key, (str, int, float, bool, type(None))):
                    continue  # an unhashable key: SafeLoader's own error says so
                if key in seen:
                    raise _SpecProblem(f"the key {key!r} is given twice (lines {seen[key]} and {line}); give each "
                                       "setting once, with all its values")
                seen[key] = line
                for scalar in value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]:
                    if isinstance(scalar, yaml.ScalarNode) and self.ambiguous(scalar):
                        raise _SpecProblem(f"line {scalar.start_mark.line + 1}: {key}: {scalar.value} is ambiguous "
                                           f"(YAML 1.1 reads it as {yaml.safe_load(scalar.value)}); write the number "
                                           "in plain decimal digits")
            return super().construct_mapping(node, deep=deep)

        def ambiguous(self, node) -> bool:
            """A plain value read here as text that YAML 1.1 reads as a number (a range START:STOP[:STEP] aside)."""
            text = node.value
            return (node.style is None and self.resolve(yaml.ScalarNode, text, (True, False)).endswith(":str")
                    and yaml11(text) in (INT, FLOAT) and not _RANGE.fullmatch(text))

    SpecLoader.add_implicit_resolver(BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    SpecLoader.add_implicit_resolver(INT, re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789"))
    SpecLoader.add_implicit_resolver(
        FLOAT, re.compile(r"^(?:[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(?=[eE]))(?:[eE][-+]?[0-9]+)?"
                          r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), list("-+0123456789."))
    return SpecLoader


def _spec_entries(spec: Path) -> list[tuple[_Given, object]]:
    """The ``KEY: values`` of the YAML file ``spec`` (:func:`_spec_loader`); UsageError naming the file."""
    import yaml

    try:
        content = yaml.load(spec.read_text(encoding="utf-8"), Loader=_spec_loader())
    except OSError as e:
        raise UsageError(f"--spec {spec}: cannot be read: {e.strerror or e}") from None
    except _SpecProblem as e:
        raise UsageError(f"--spec {spec}: {e}") from None
    except yaml.YAMLError as e:
        raise UsageError(f"--spec {spec}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(content, dict) or not content:
        raise UsageError(f"--spec {spec}: expected a mapping of settings to their values, e.g. 'seed: 0:6'")
    return [(_Given(str(k), spec), v) for k, v in content.items()]


def sweep_grid(grid_args: list[str], spec: Path | None) -> dict:
    """``{RunConfig field: values}`` from ``--grid KEY=VALUES`` flags and a YAML ``--spec`` file (a mapping
    KEY: values, a list or a string as after ``--grid KEY=``); UsageError for a bad key or value, naming the flag or
    the spec file."""
    entries = [] if spec is None else _spec_entries(spec)
    for arg in grid_args:
        key, sep, listed = arg.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--grid {arg}: expected KEY=V1,V2,… or KEY=START:STOP[:STEP]")
        entries.append((_Given(key.strip()), listed))
    flags, grid = _run_flags(), {}
    for given, values in entries:
        action = flags.get(given.key)
        if action is None or action.dest in ("spectrum", "out_dim"):
            raise UsageError(f"{given}: not a setting that can be swept (one of linattn train's run flags, e.g. "
                             "seed, init, lr, icl, trainset_size, head_num)")
        if action.dest in grid:
            raise UsageError(f"{given}: {action.dest} is swept twice")
        grid[action.dest] = _grid_values(given, values, action)
        if len(set(grid[action.dest])) < len(grid[action.dest]):
            raise UsageError(f"{given}: a value is listed twice")
    if not grid:
        raise UsageError("give at least one --grid KEY=VALUES (or a --spec file)")
    return grid


def cmd_sweep(args) -> int:
    from ..companion import sweeps

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
        raise UsageError(cli_message(e, args, swept=grid)) from None
    finished = sum(state != "to run" for _, _, state in rows)
    if args.dry_run:
        return _print_plan(spec, rows, finished)
    client = None
    try:
        with signals_interrupt():
            if args.scheduler:
                client = connect(args.scheduler)
            try:
                ds = sweeps.sweep(base, grid, client=client, out=args.out, workers=args.workers,
                                  save_data=args.save_data, threads=args.threads or 1, max_memory=args.max_memory,
                                  progress=False if args.quiet else None)
            finally:
                if client is not None:
                    client.close()
    except ImportError as e:
        raise UsageError(str(e)) from None
    except KeyboardInterrupt as e:
        stop = as_interrupted(e)
        print(f"linattn sweep: {interrupted_words(stop, args.out, rows)}", file=sys.stderr)
        return stop.exit_code
    if not args.quiet:
        print(f"{len(rows) - finished} run, {finished} finished before; " + _describe(ds, args.out))
    failed = int((ds.status != "done").sum())
    if failed:
        print(f"linattn sweep: {failed} of {len(rows)} cells failed or diverged; their status and message are in "
              f"the dataset (and {args.out / 'failed'})", file=sys.stderr)
    return 1 if failed else 0


def _print_plan(spec, rows, finished: int) -> int:
    """The dry run's lines: 0, or 141 (as a program killed by SIGPIPE) without a word where the reader of standard
    output has gone (``linattn sweep --dry-run | head``)."""
    shape = " × ".join(f"{k} {len(v)}" for k, v in spec.axes.items())
    width = max(len(cell.label) for cell, _, _ in rows)
    try:
        print(f"{len(rows)} cells ({shape}): {len(rows) - finished} to run, {finished} finished or diverged before")
        for cell, key, state in rows:
            print(f"  {cell.label.ljust(width)}  {state:<8}  runs/{key}")
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's last flush goes nowhere
        return 141
    return 0


# seconds to connect to a --scheduler and hear its handshake, and again for the client to join it
SCHEDULER_TIMEOUT_S = 15.0
# the largest first message a Dask scheduler sends (its handshake: a few hundred bytes of msgpack)
_HANDSHAKE_MAX = 2**20


def connect(address: str):
    """A ``dask.distributed.Client`` of the scheduler at ``address``, or a UsageError within about twice
    :data:`SCHEDULER_TIMEOUT_S` seconds where none answers there. A TCP address is first asked for the handshake a
    Dask scheduler sends as soon as a connection opens (an 8-byte length, then that many bytes): a service that
    sends nothing (a web server waiting for a request) or a length no handshake has (bytes of another protocol,
    which Dask would try to allocate: "3.07 EiB") is refused before Dask reads from it."""
    from dask.distributed import Client

    why = _not_dask(address, SCHEDULER_TIMEOUT_S)
    if why is not None:
        raise UsageError(f"--scheduler {address}: no Dask scheduler answers there ({why})")
    try:
        return Client(address, timeout=SCHEDULER_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as e:
        raise UsageError(f"--scheduler {address}: no Dask scheduler answers there ({e})") from None


def _not_dask(address: str, timeout: float) -> str | None:
    """Why the TCP service at ``address`` is no Dask scheduler (None: it sent a handshake's first frame; other
    schemes, such as tls://, are left to Dask's own timeout)."""
    import socket
    import struct
    import time

    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location)
    except (ValueError, TypeError) as e:
        return f"not an address: {e}"
    if scheme != "tcp":
        return None
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            head = b""
            while len(head) < 8:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = sock.recv(8 - len(head))
                if not chunk:
                    return "it closed the connection without a handshake"
                head += chunk
    except socket.timeout:
        return f"it sent no handshake within {timeout:g} s"
    except OSError as e:
        return e.strerror or str(e)
    (size,) = struct.unpack("<Q", head)
    if not 0 < size <= _HANDSHAKE_MAX:
        return "it answers in another protocol"
    return None


def _describe(ds, out: Path) -> str:
    dims = ", ".join(f"{k} {n}" for k, n in ds.sizes.items())
    done = int((ds.status == "done").sum())
    return f"{done} of {ds.status.size} cells done; wrote {out / 'sweep.nc'} (dimensions: {dims})"




def interrupted_words(stop, out: Path, rows) -> str:
    """The line an interrupted ``linattn sweep`` ends with: which signal, how many cells are stored in ``out`` (before
    and by this sweep) and how many are not, whether the dataset was written (it is once every cell is stored,
    ``sweeps.engine.all_settled``), and that the same command goes on from there."""
    from ..companion.sweeps import cells
    from ..companion.sweeps.engine import all_settled

    stored = sum(cells.is_finished(cells.run_folder(out, key)) for _, key, _ in rows)
    before = sum(state == "finished" for _, _, state in rows)
    where = (f"interrupted by {stop.name}; {stored} of {len(rows)} cells are stored in {out / cells.RUNS} "
             f"({stored - before} by this sweep), {len(rows) - stored} are not")
    if all_settled(out, [key for _, key, _ in rows]):
        return f"{where}; every cell is done, and it wrote {out / 'sweep.nc'}"
    dataset = "sweep.nc was not updated" if (out / "sweep.nc").exists() else "sweep.nc was not written"
    return f"{where}, and {dataset}; the same command goes on from there"
