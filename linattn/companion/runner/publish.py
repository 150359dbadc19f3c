"""A figure's outputs change whole or not at all: staging, the per-figure lock, and the swap.

A figure ``name`` published in an output root ``<root>`` is two things: its folder ``<root>/<name>/`` (files,
``.cache-key``, ``.run.json``) and its executed notebook ``<root>/<name>.ipynb`` (the book reads both). A run never
writes them in place:

1. it takes the figure's lock, ``<root>/.locks/<name>.lock`` (``fcntl.flock``; the holder's PID is written in
   it): a second runner on the same figure waits, and says which process holds it (:func:`figure_lock`);
2. it cleans what a killed run left of the figure (:func:`recover`: with the lock held no live run owns any of it);
   every runner also does so at its start for each figure whose lock is free, whether or not it runs that figure
   (:func:`recover_idle`: a figure that is up to date keeps no killed run's stage);
3. the notebook writes into a staging folder ``<root>/.staging-<name>-<pid>/`` — beside its destination, so on the
   same file system, where a rename is atomic (:func:`stage_dir`);
4. :func:`swap_in` publishes the staged pair: it marks the stage complete (a ``SWAP`` file, fsynced), moves the old
   pair into the stage (``old/``), the new pair into ``<root>``, and then the old pair into ``<root>/.previous/``.
   SIGINT and SIGTERM wait for the renames. A crash part-way leaves the marker, and the next run that holds the
   lock rolls the swap forward (:func:`recover`); a stage without the marker was incomplete and is removed.

So ``<root>`` only ever holds a complete old or a complete new figure, ``.previous/`` only complete earlier copies,
and a failed run changes nothing there but its ``<root>/<name>.failed.ipynb`` (the traceback notebook).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import sys
from pathlib import Path

LOCKS = ".locks"
PREVIOUS = ".previous"
STAGE_PREFIX = ".staging-"
MARKER = "SWAP"  # in a stage: the stage is complete and its swap has begun


def stage_dir(root: Path, name: str, pid: int | None = None) -> Path:
    """The staging folder of figure ``name`` for process ``pid`` (default: this one), inside ``root``."""
    return Path(root) / f"{STAGE_PREFIX}{name}-{os.getpid() if pid is None else pid}"


def published(root: Path, name: str) -> tuple[str, str]:
    """The names of figure ``name``'s published pair in its root: its folder and its executed notebook."""
    return name, f"{name}.ipynb"


def _holder(path: Path) -> str:
    try:
        pid = path.read_text().strip()
    except OSError:
        pid = ""
    return f"PID {pid}" if pid else "another process"


@contextlib.contextmanager
def figure_lock(root: Path, name: str, say=None, *, wait: bool = True):
    """Hold figure ``name``'s lock in ``root`` for the ``with`` block (it gives the lock file's path). When another
    process holds it, wait for it, after ``say``-ing (default: a line on stderr) which process that is; with
    ``wait=False`` give None at once instead. The lock goes with the process: a killed holder releases it."""
    folder = Path(root) / LOCKS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.lock"
    fd, held = os.open(path, os.O_RDWR | os.O_CREAT, 0o644), False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                yield None
                return
            line = f"  waiting {name}: {_holder(path)} is writing it into {root}"
            (say or (lambda s: print(s, file=sys.stderr, flush=True)))(line)
            fcntl.flock(fd, fcntl.LOCK_EX)
        held = True
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        if held:  # the PID in the file is the holder's: only the holder clears it
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
        os.close(fd)  # releases the lock


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _signals_deferred():
    """SIGINT and SIGTERM wait until the block ends (the swap's few renames are never cut in two)."""
    signals = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _roll_forward(root: Path, name: str, stage: Path) -> None:
    """Finish the swap of a complete ``stage`` (idempotent: each step is one rename, skipped once done): the old
    pair into ``stage/old``, the new pair into ``root``."""
    old = stage / "old"
    old.mkdir(exist_ok=True)
    for item in published(root, name):
        if (stage / item).exists():
            if (root / item).exists():
                os.replace(root / item, old / item)
            os.replace(stage / item, root / item)
    (root / f"{name}.failed.ipynb").unlink(missing_ok=True)  # the run it reported is superseded


def _retire(root: Path, name: str, stage: Path) -> None:
    """Move the old pair (``stage/old``) into ``<root>/.previous/``, replacing the copy there. If that fails part-way
    (a full disk), ``.previous`` keeps none of the pair rather than half of it."""
    old, older, previous = stage / "old", stage / "older", root / PREVIOUS
    items = [item for item in published(root, name) if (old / item).exists()]
    if not items:
        return
    previous.mkdir(exist_ok=True)
    older.mkdir(exist_ok=True)
    try:
        for item in items:  # renamed away first (a rename is atomic, a removal is not), removed with the stage
            if (previous / item).exists():
                os.replace(previous / item, older / item)
        for item in items:
            os.replace(old / item, previous / item)
    except OSError:
        for item in published(root, name):
            _remove(previous / item)


def _roll_back(root: Path, name: str, stage: Path) -> None:
    """Undo a swap that failed part-way: the old pair goes back in place, the new one back into the stage."""
    old = stage / "old"
    for item in published(root, name):
        if (old / item).exists():
            if (root / item).exists():
                os.replace(root / item, stage / item)
            os.replace(old / item, root / item)
    (stage / MARKER).unlink(missing_ok=True)


def swap_in(root: Path, name: str, stage: Path) -> None:
    """Publish the complete ``stage`` of figure ``name`` into ``root`` (see the module) and remove the stage. The
    caller holds the figure's lock. When a rename fails, the swap is rolled back and the error raised; if even that
    fails, the marked stage stays for the next run's :func:`recover`."""
    root = Path(root)
    with _signals_deferred():
        (stage / MARKER).write_text(name + "\n")
        _fsync_dir(stage)
        try:
            _roll_forward(root, name, stage)
        except OSError:
            with contextlib.suppress(OSError):
                _roll_back(root, name, stage)
                discard(stage)
            raise
        _retire(root, name, stage)
        _fsync_dir(root)
    shutil.rmtree(stage, ignore_errors=True)


def recover(root: Path, name: str) -> list[str]:
    """Clean what killed runs left of figure ``name`` in ``root``: a stage marked complete has its swap finished,
    any other is removed. Call it holding the figure's lock (then no live run owns a stage of that figure, except
    this process's own, which it has not made yet). Returns one line per stage it dealt with."""
    root = Path(root)
    done = []
    for stage in stages(root, name):
        if (stage / MARKER).exists():
            with _signals_deferred():
                _roll_forward(root, name, stage)
                _retire(root, name, stage)
            done.append(f"finished the interrupted swap of {stage.name}")
        else:
            done.append(f"removed the unfinished {stage.name}")
        shutil.rmtree(stage, ignore_errors=True)
    return done


def stages(root: Path, name: str) -> list[Path]:
    """The staging folders of figure ``name`` in ``root`` (:func:`stage_dir`), any process's."""
    prefix = f"{STAGE_PREFIX}{name}-"
    return sorted(p for p in Path(root).glob(f"{prefix}*") if p.name[len(prefix):].isdigit())


def recover_idle(root: Path, name: str) -> list[str]:
    """:func:`recover` figure ``name`` in ``root`` where it has a stage and no live runner holds its lock (a runner
    at work recovers it itself, and its stage is its own): what a runner does at its start for every figure, whether
    or not it runs it, so that a killed runner's stage never outlives the next run. Returns :func:`recover`'s lines."""
    if not stages(root, name):
        return []
    with figure_lock(root, name, wait=False) as held:
        return recover(root, name) if held else []


def discard(stage: Path) -> None:
    """Remove an unpublished stage (a failed or interrupted run). Symlinks inside it are removed, not followed."""
    shutil.rmtree(stage, ignore_errors=True)


def save_failed(root: Path, name: str, source: Path | None, write) -> Path:
    """Put figure ``name``'s traceback notebook at ``<root>/<name>.failed.ipynb``: move ``source`` there (it lies in
    the stage, on the same file system), or, when there is none, ``write(file)`` it there through a temporary file
    beside it. Raises what saving raised."""
    from ...records import atomic_write

    target = Path(root) / f"{name}.failed.ipynb"
    if source is not None and source.exists():
        os.replace(source, target)
    else:
        atomic_write(target, write)
    return target
