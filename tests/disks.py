"""Small file systems for fault tests: a tmpfs of a given size (a disk that fills) and one remounted read-only.

Mounting needs root (or CAP_SYS_ADMIN); where it is not permitted the test is skipped, never passed."""

from __future__ import annotations

import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest


def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True)


@contextmanager
def tmpfs(where: Path, size: str = "1M"):
    """A tmpfs of ``size`` mounted at ``where`` (made if missing) for the block, unmounted after it."""
    where.mkdir(parents=True, exist_ok=True)
    try:
        done = _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where))
    except OSError as err:
        pytest.skip(f"cannot mount a tmpfs here: {err}")
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def remount(where: Path, mode: str) -> None:
    """Remount the tmpfs at ``where`` ``ro`` or ``rw``."""
    done = _mount("-o", f"remount,{mode}", str(where))
    assert done.returncode == 0, done.stderr


def fill(folder: Path) -> None:
    """Fill the file system of ``folder`` to its last byte (a file ``filler`` in it)."""
    block = 1 << 16
    with open(folder / "filler", "wb", buffering=0) as f:
        while block:
            try:
                f.write(b"\0" * block)
            except OSError:
                block //= 2
