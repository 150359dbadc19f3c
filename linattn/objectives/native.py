"""C kernels compiled where they run: the one helper that builds and loads the engines' ``.c`` files.

A kernel (``softmax_kernel.c``, ``exact_kernel.c``) is compiled once per process and set of ``-D`` definitions by
the system's C compiler (``$CC``, which may carry flags, else ``cc``, ``gcc`` or ``clang``) for this CPU
(``-march=native`` where the compiler has it) into a temporary folder, and loaded through ctypes; the loaded library
outlives the folder. No new dependency and no build step at install: the ``.c`` files ship as package data. Where
no compiler works, :func:`load` raises and the engine falls back to its torch path with one warning, a
:class:`KnownFallback`.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


class KnownFallback(RuntimeWarning):
    """An engine takes its slower path with the same result, for a reason the documentation names (no C compiler,
    no working ``torch.compile``): worth saying once, not an error. The figure runner reports these on the figure's
    line and in its provenance instead of failing the figure, as it does for any other printed warning."""


def fallback_reason(err: BaseException) -> str:
    """``err`` in one line of at most 200 characters, for a :class:`KnownFallback` message (a compiler's error
    output spans lines)."""
    return f"{type(err).__name__}: {' '.join(str(err).split())}"[:200]


def compiler() -> list[str]:
    """The C compiler's command (``$CC`` split as a shell would, else the first of cc, gcc, clang on the PATH)."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise RuntimeError("no C compiler found (set $CC)")
    return shlex.split(cc)


@functools.cache
def load(source: str, defines: tuple[str, ...] = ()) -> ctypes.CDLL:
    """The library of the kernel ``source`` (a file name in ``linattn/objectives``) compiled with ``-D`` each of
    ``defines``, once per process. Raises RuntimeError where no C compiler works."""
    path = HERE / source
    cc = compiler()
    with tempfile.TemporaryDirectory(prefix="linattn-kernel-", ignore_cleanup_errors=True) as tmp:
        lib = Path(tmp) / (path.stem + ".so")
        base = [*cc, "-O3", "-ffp-contract=fast", "-shared", "-fPIC", *(f"-D{d}" for d in defines), str(path),
                "-o", str(lib)]
        for flags in (["-march=native"], []):  # some compilers (and CPUs) have no -march=native
            done = subprocess.run(base + flags, capture_output=True, text=True)
            if done.returncode == 0:
                break
        else:
            raise RuntimeError(f"{cc[0]} could not compile {path.name}: {done.stderr.strip()[:300]}")
        return ctypes.CDLL(str(lib))
