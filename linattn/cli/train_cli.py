"""``linattn train``: one run into ``--out``, which appears only when the run is complete.

The files are written into a temporary sibling folder, ``.<out>.<host>.<pid>.….tmp``, renamed to ``--out`` only
when the run succeeded; a run that fails, diverges or is interrupted removes it again, and the parent folders it
made. SIGINT and SIGTERM are handled alike (:mod:`linattn.companion.runner.interrupts`): one line saying what was kept,
exit 130 or 143. A write that fails (a full disk) is one line naming the path, exit 1, nothing left behind. A run that
completes removes the temporary folders that killed writers of the same ``--out`` left (their process is gone).

One ``--out`` is written by one ``linattn train`` at a time: its lock, ``.<out>.lock`` beside it
(:func:`linattn.records.output_lock`), is held from before the run trains until its folder is in place, and removed
then. A second run into the same ``--out`` says which process it waits for, and waits (it trains nothing
meanwhile); when the first has put the same run there (the same key, with its data where this one would save it), the
second keeps it and exits 0, and when ``--out`` now holds anything else it is refused as any non-empty ``--out``
(exit 2).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from ..companion.runner.interrupts import Interrupted, as_interrupted, fault_hook, signals_deferred, signals_interrupt
from ..config import ConfigError, RunConfig
from ..records import lock_path, output_lock, remove_stale_temps, temp_dir, temp_prefix
from .options import UsageError, cli_message, config_from_args


def default_out(cfg: RunConfig) -> Path:
    """runs/<reference-style name>_<8 hex digits of the run's key>: distinct runs never share a folder."""
    from ..training.keys import run_key

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
    """Check ``--out`` and make the temporary sibling folder the run writes into, ``.<out>.<host>.<pid>.….tmp``
    (:func:`linattn.records.temp_dir`); (that folder, the parent folders created for it, to remove again if the run
    fails). Any problem is a UsageError, before the run starts."""
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
        with signals_deferred():  # a signal here must not leave a folder made and not yet known
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = temp_dir(out.parent, out.name)
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
        # ".old", not ".tmp": a writer killed between the two renames leaves the earlier run here, which no later
        # run deletes (remove_stale_temps takes .tmp alone)
        old = Path(tempfile.mkdtemp(dir=out.parent, prefix=temp_prefix(out.name), suffix=".old"))
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
    from ..training.plan import plan

    cfg = config_from_args(args)
    every, hook = fault_hook()
    try:
        checked = plan(cfg, max_memory=args.max_memory, snapshot_every=every)  # checked once; run() carries it out
    except ConfigError as e:
        raise UsageError(cli_message(e, args)) from None
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be a positive integer, got {args.threads}")
    out = args.out or default_out(cfg)
    existed = out.is_dir()
    placed: list[Path] = []  # set once the run's folder is in place: what an interruption after that keeps
    unfinished: list[Path] = []  # the temporary folder and the parent folders made for it, until the run is in place
    done = None
    try:
        with signals_interrupt(stuck=lambda signum: _stuck(signum, unfinished, out, existed)):
            done = _train_into(checked, out, args, placed, snapshot_every=every, snapshot=hook, unfinished=unfinished)
            _report(done, out, args)
    except _MadeMeanwhile:
        if not args.quiet:
            print(f"linattn train: {out} was written meanwhile by another linattn train of the same run; kept it "
                  "(nothing trained)")
        return 0
    except KeyboardInterrupt as e:
        stop = as_interrupted(e)
        print(f"linattn train: {interrupted_words(stop, out, placed=bool(placed), existed=existed)}", file=sys.stderr)
        return stop.exit_code
    except _WriteFailed as e:
        print(f"linattn train: error: {e}; nothing was written ({_unchanged(out, existed)})", file=sys.stderr)
        return 1
    return 0 if done else 1


class _MadeMeanwhile(Exception):
    """The run asked for was put in ``--out`` by another ``linattn train`` while this one waited for it."""


def _waiting(out: Path):
    """What a run says, once, when another process holds ``out``'s lock."""
    def say(pid: str) -> None:
        who = f"PID {pid}" if pid else "another process"
        print(f"linattn train: waiting: {who} is writing {out}", file=sys.stderr, flush=True)
    return say


def _check_unchanged(out: Path, overwrite: bool, key: str, save_data: bool) -> None:
    """With ``out``'s lock held after waiting for another writer: raise :class:`_MadeMeanwhile` where it put this
    very run in ``out`` (``run.json``'s key is ``key``, and ``data.npz`` is there where this run saves it), or
    :class:`UsageError` where ``out`` now holds anything else (without ``overwrite``)."""
    if overwrite or not out.is_dir() or not any(out.iterdir()):
        return
    try:
        same = json.loads((out / "run.json").read_text(encoding="utf-8")).get("key") == key
    except (OSError, ValueError, AttributeError):
        same = False
    if same and (out / "loss.csv").is_file() and (not save_data or (out / "data.npz").is_file()):
        raise _MadeMeanwhile()
    raise UsageError(f"--out {out} was written by another process while this run waited for it, and is not empty; "
                     "pass --overwrite to replace it (it is replaced only once the new run has succeeded)")


class _WriteFailed(Exception):
    """Writing the run's files failed (a full disk, a folder removed meanwhile): the message names the path."""


def _stuck(signum: int, unfinished: list, out: Path, existed: bool) -> None:
    """A signal the training could not take in time (one long step in C): remove the unfinished run's folders and say
    so; the watchdog of :func:`~linattn.companion.runner.interrupts.signals_interrupt` then ends the process."""
    _drop_own_lock(out)  # first: it lies in out's parent, which may be one of the folders made for the run
    if unfinished:
        shutil.rmtree(unfinished[0], ignore_errors=True)
        _remove_empty(unfinished[1:])
    words = interrupted_words(Interrupted(signum), out, placed=False, existed=existed)
    print(f"linattn train: {words}; stopped in the middle of a step", file=sys.stderr, flush=True)


def _drop_own_lock(out: Path) -> None:
    """Remove ``out``'s lock file where this process holds it (its PID is written there): the process is about to end
    without leaving its ``with`` block."""
    lock = lock_path(out)
    try:
        if lock.read_text().strip() == str(os.getpid()):
            lock.unlink()
    except OSError:
        pass


def _train_into(checked, out: Path, args, placed: list, *, snapshot_every: int, snapshot, unfinished: list):
    """Train ``checked`` and put its folder in place as ``out`` (then ``placed`` is made non-empty); the run's result,
    or None when it diverged (said on stderr). Whatever stops it before the folder is in place removes the temporary
    folder and the parent folders made for it (held in ``unfinished`` meanwhile, for a signal that cannot wait)."""
    from ..training.experiment import run
    from ..training.keys import run_key
    from ..training.train import TrainingDiverged

    tmp: Path | None  # None once the folder is in place
    tmp, created = prepare_out(out, args.overwrite)
    held = ExitStack()  # out's lock: released before the folders made for the run are removed
    unfinished[:] = [tmp, *created]
    try:
        held.enter_context(output_lock(out, say=_waiting(out)))
        _check_unchanged(out, args.overwrite, run_key(checked.config), args.save_data)
        try:
            result = run(checked, progress=not args.quiet, threads=args.threads,
                         snapshot_every=snapshot_every, snapshot=snapshot)
        except TrainingDiverged as e:
            print(f"linattn train: error: {e}", file=sys.stderr)
            return None
        result.key = run_key(result.config)
        try:
            _write(result, tmp, out, args)
            with signals_deferred():  # the rename is never cut in two; the signal comes once it is done
                _move_into_place(tmp, out, args.overwrite)
                tmp = None
                unfinished.clear()
                placed.append(out)
        except OSError as e:
            raise _WriteFailed(_write_error(e, tmp, out)) from None
    finally:
        held.close()
        if tmp is not None:  # the run failed or was interrupted: leave nothing behind
            with signals_deferred():
                shutil.rmtree(tmp, ignore_errors=True)
                _remove_empty(created)
                unfinished.clear()
    remove_stale_temps(out.parent, out.name)  # killed writers' leftovers of this --out
    return result


def _write(result, tmp: Path, out: Path, args) -> None:
    from ..training.result import write_outputs

    write_outputs(result, tmp, save_data=args.save_data)
    if args.show and _headless():
        from ..companion.plotting import loss_figure

        loss_figure(result.history, title=out.name).savefig(tmp / "loss.png", dpi=150)


def _write_error(error: OSError, tmp: Path | None, out: Path) -> str:
    """``error`` in one line naming the path as the run would have it (the file in ``out``, not in the temporary
    folder)."""
    path = Path(error.filename) if error.filename else out
    if tmp is not None:
        try:
            path = out / path.relative_to(tmp)
        except ValueError:
            pass
    return f"cannot write {path}: {error.strerror or str(error) or type(error).__name__}"


def _unchanged(out: Path, existed: bool) -> str:
    """What became of ``out``, truly: as it was, never made, or made meanwhile by another writer (left as it is)."""
    if existed:
        return f"{out} is unchanged"
    if out.exists():
        return f"{out} was made meanwhile by another process and is left as it is"
    return f"{out} was not created"


def interrupted_words(stop: Interrupted, out: Path, *, placed: bool, existed: bool) -> str:
    """The line an interrupted ``linattn train`` ends with: which signal, and whether the run was kept."""
    if placed:
        return f"interrupted by {stop.name} after the run was complete; it is kept in {out}"
    return f"interrupted by {stop.name}; the run was not finished and nothing was written ({_unchanged(out, existed)})"


def _report(result, out: Path, args) -> None:
    """The summary line, and the plot: saved beside loss.csv without a display, else shown."""
    if result is None or (args.quiet and not args.show):
        return
    if not args.quiet:
        h = result.history
        print(f"{result.engine} engine, {result.config.epoch} steps in {result.wall_time:.1f} s: "
              f"loss {h.train_loss[0]:.4f} -> {h.train_loss[-1]:.4f}; wrote {out}")
    if (out / "loss.png").is_file() and args.show:
        print(f"linattn train: no display to show the plot on; saved it as {out / 'loss.png'}")
    elif args.show:
        from ..companion.plotting import show_loss

        show_loss(result.history, title=out.name)
