"""Atomic file writes and the provenance record (versions, git commit, date) stored beside every output.

Core and companion both write through here: ``run.json`` of a run, ``provenance.json`` of a figure, the run store.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import functools
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from ._version import __version__

PACKAGE_ROOT = Path(__file__).resolve().parent
_UMASK = os.umask(0)
os.umask(_UMASK)
# the libraries whose version can change a number or a figure (recorded in every provenance, and part of a figure's
# cache key)
LIBRARIES = ("torch", "numpy", "scipy", "matplotlib", "tqdm", "papermill", "jupytext", "nbformat", "ipykernel")


def temp_prefix(name: str) -> str:
    """The start of the name of a temporary file or folder that becomes ``name`` once complete:
    ``.<name>.<host>.<pid>.``, completed by ``tempfile`` with a random part and ``.tmp``. The host and process in the
    name let a later writer tell a dead writer's leftover from a live one's (:func:`remove_stale_temps`)."""
    return f".{name}.{socket.gethostname()}.{os.getpid()}."


def temp_dir(parent: str | os.PathLike[str], name: str) -> Path:
    """A new temporary folder in ``parent`` for what becomes ``parent/name`` (:func:`temp_prefix`)."""
    return Path(tempfile.mkdtemp(dir=parent, prefix=temp_prefix(name), suffix=".tmp"))


def remove_stale_temps(parent: str | os.PathLike[str], name: str | None = None) -> list[Path]:
    """Delete the temporary files and folders in ``parent`` (those of ``name`` only, if given) that writers on this
    host left when they were killed: their process is gone (:func:`process_alive`). A live writer's, another host's
    and any other file are kept. Returns what was deleted."""
    host = re.escape(socket.gethostname())
    pattern = re.compile(rf"\.(?P<name>.+)\.{host}\.(?P<pid>\d+)\.[^.]*\.tmp")
    removed: list[Path] = []
    try:
        entries = list(Path(parent).iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m is None or (name is not None and m["name"] != name) or process_alive(int(m["pid"])):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def lock_path(path: str | os.PathLike[str]) -> Path:
    """The lock file of the output ``path``: ``.<name>.lock`` beside it (see :func:`output_lock`)."""
    path = Path(path)
    return path.parent / f".{path.name}.lock"


@contextmanager
def output_lock(path: str | os.PathLike[str], say: Callable[[int | str], object] | None = None) -> Iterator[Path]:
    """Hold the lock of the output ``path`` (a file or folder one writer at a time makes) for the block: the lock
    file :func:`lock_path` (``fcntl.flock``, the holder's PID in it), made in ``path``'s existing parent and removed
    when the block ends. When another process holds it, ``say(pid)`` (its PID, or "" when unknown) is called once and
    the lock waited for. A killed holder releases it; its lock file stays until the next writer's block ends.

    A waiter may have opened a lock file that its holder then removed: it holds the lock only if its file is still
    the one at the lock's path, and otherwise opens that one again."""
    lock = lock_path(path)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if say is not None:
                say(os.pread(fd, 32, 0).decode(errors="replace").strip())
                say = None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
        try:
            current = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        os.close(fd)
    try:
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:  # a full disk: the PID only tells a waiter whom it waits for
            pass
        yield lock
    finally:
        lock.unlink(missing_ok=True)  # while still held: a waiter then finds its file gone and opens a new one
        os.close(fd)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` (of this host) still runs: it exists (a live process of another user counts) and,
    where /proc tells, is not a zombie (a killed writer whose parent died too stays one until it is reaped, and can
    write nothing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """A temporary path beside ``path`` to write to, renamed to ``path`` only if the block succeeds (else removed):
    for writers that take a file name (``xarray.Dataset.to_netcdf``)."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temp_prefix(path.name), suffix=".tmp")
    except OSError as err:
        raise _naming(err, path) from None
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise _naming(err, path) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _naming(err: OSError, path: Path) -> OSError:
    """``err`` about the file ``path`` a writer was making: a failed write of an open file (a full disk) names no
    file, and one of the temporary file names a hidden name the reader never asked for."""
    if err.errno is None or err.filename and not Path(err.filename).name.startswith(temp_prefix(path.name)):
        return err
    return type(err)(err.errno, err.strerror or str(err), str(path))


def atomic_write(path: str | os.PathLike[str], write: Callable[..., object], *, binary: bool = False) -> None:
    """Call ``write(file)`` on a temporary file beside ``path`` and rename it into place only if it succeeded."""
    with atomic_path(path) as tmp, open(tmp, "wb" if binary else "w") as f:
        write(f)


def write_file(path: str | os.PathLike[str], write: Callable[..., object], *, binary: bool = False,
               atomic: bool = True) -> None:
    """``write(file)`` into ``path``: through :func:`atomic_write`, or with ``atomic=False`` straight into the file —
    for a file in a folder that is itself made under a temporary name and renamed into place whole (a run-store
    entry), where a temporary file and a rename per file would only repeat that guarantee."""
    if atomic:
        atomic_write(path, write, binary=binary)
        return
    with open(path, "wb" if binary else "w") as f:
        write(f)


def write_json(path: str | os.PathLike[str], obj: Any, *, atomic: bool = True) -> None:
    """``obj`` as indented JSON (numpy numbers and arrays, paths as JSON values) into ``path`` (:func:`write_file`)."""
    text = json.dumps(obj, indent=2, sort_keys=False, default=jsonable)
    write_file(path, lambda f: f.write(text), atomic=atomic)


def write_csv(path: str | os.PathLike[str], columns: dict[str, np.ndarray], *, exact: bool = False,
              atomic: bool = True) -> None:
    """A CSV with a header row; the ``step`` column is written as integers, the rest with 10 significant digits,
    or with ``exact`` as the shortest text that reads back to the same float64 (``repr``). ``atomic``: as for
    :func:`write_file`."""
    names = list(columns)
    table = np.column_stack([np.asarray(columns[k], dtype=np.float64) for k in names])
    if not exact:
        fmt = ["%d" if k == "step" else "%.10g" for k in names]
        write_file(path, lambda f: np.savetxt(f, table, delimiter=",", header=",".join(names), comments="",
                                              fmt=fmt), atomic=atomic)
        return
    # each number's repr (a Python int's or float's: the shortest text that reads back to it), a column at a time
    cols = [map(repr, col.astype(np.int64).tolist() if k == "step" else col.tolist()) for k, col in zip(names, table.T)]
    rows = "\n".join(map(",".join, zip(*cols)))
    text = ",".join(names) + "\n" + (rows + "\n" if rows else "")
    write_file(path, lambda f: f.write(text), atomic=atomic)


def jsonable(x):
    """``x`` (a numpy number or array, a path) as a JSON value: the ``default`` of ``json.dumps`` for run records."""
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serialisable: {type(x)}")


def git_commit(where: Path = PACKAGE_ROOT) -> str | None:
    """The commit of the checkout holding ``where`` ("+dirty" appended if it has changes), or None.

    ``git status`` runs without its optional locks: by default it refreshes the index under ``.git/index.lock``,
    and a run killed meanwhile (a sweep stopped by SIGKILL, a lost machine) would leave that lock in the reader's
    repository, where every later git command refuses to work until it is removed by hand."""
    git = ["git", "--no-optional-locks"]
    try:
        sha = subprocess.run([*git, "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        if not sha:
            return None
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], cwd=where,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


@functools.cache
def _process_commit() -> str | None:
    """:func:`git_commit` of the package's checkout, asked once per process, as :func:`_version` asks once: the
    modules a process runs were imported from the checkout as it then was (two git commands per run written cost a
    page of many small runs more CPU than its training)."""
    return git_commit()


def library_versions(libraries: Iterable[str] = LIBRARIES) -> dict[str, str | None]:
    """The installed version of each of ``libraries`` (default :data:`LIBRARIES`; None when absent)."""
    return {lib: _version(lib) for lib in libraries}


@functools.cache
def _version(lib: str) -> str | None:
    """The installed version of ``lib``, looked up once per process: the modules a process imported stay what they
    were (every run written records it; a lookup scans the installed packages' metadata)."""
    try:
        return metadata.version(lib)
    except metadata.PackageNotFoundError:
        return None


def peak_memory_mb() -> float:
    """Peak resident memory of this process so far (Linux/macOS), in MB."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 / 1024 if sys.platform == "darwin" else peak / 1024


def provenance() -> dict:
    return {
        "linattn_version": __version__,
        "git_commit": _process_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "libraries": library_versions(),
        "peak_memory_mb": round(peak_memory_mb(), 1),
    }
