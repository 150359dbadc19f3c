"""C kernels compiled where they run: the one helper that builds and loads the engines' ``.c`` files.

A kernel (``softmax_kernel.c``, ``exact_kernel.c``) is compiled for each set of ``-D`` definitions by the system's
C compiler (``$CC``, which may carry flags, else ``cc``, ``gcc`` or ``clang``) for this CPU (``-march=native`` where
the compiler has it; ``$LINATTN_KERNEL_ISA`` picks another instruction set, :data:`ISA_FLAGS`), kept in a cache
folder (:func:`cache_dir`) so that later processes load it without compiling (a third of a second of CPU each, which
every figure notebook paid), and loaded through ctypes. A cached library
carries a digest of its bytes in its name and is checked against it before it is loaded: one cut short with its
headers intact would load and then die with a bus error when called. No new dependency
and no build step at install: the ``.c`` files ship as package data. Where no compiler works, :func:`load` raises
and the engine falls back to its torch path with one warning, a :class:`KnownFallback`.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import mmap
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

HERE = Path(__file__).resolve().parent
HUGE_PAGE = 2 << 20


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
    ``defines``, once per process, or once per machine where the kernel cache can be written (:func:`cache_dir`).
    Raises RuntimeError where no C compiler works."""
    path = HERE / source
    cc = compiler()
    base = [*cc, "-O3", "-ffp-contract=fast", "-shared", "-fPIC", *(f"-D{d}" for d in defines), str(path)]
    cache = cache_dir()
    for flags in isa_flags():
        name = None if cache is None else f"{path.stem}-{_build_id(path, base + flags)}"
        cached = None if cache is None or name is None else _verified(cache, name)
        if cached is not None:
            try:
                return ctypes.CDLL(str(cached))
            except OSError:  # whole but unloadable: compiled again below, and replaced
                _discard(cached)
        with tempfile.TemporaryDirectory(prefix="linattn-kernel-", ignore_cleanup_errors=True) as tmp:
            lib = Path(tmp) / (path.stem + ".so")
            done = subprocess.run([*base, "-o", str(lib), *flags], capture_output=True, text=True)
            if done.returncode != 0:
                continue
            if cache is not None and name is not None:
                lib = _keep(lib, cache, name)
            return ctypes.CDLL(str(lib))
    raise RuntimeError(f"{cc[0]} could not compile {path.name}: {done.stderr.strip()[:300]}")


ISA_FLAGS = {
    "native": (["-march=native"], []),  # some compilers (and CPUs) have no -march=native
    "avx2": (["-march=native", "-mno-avx512f"], ["-mavx2", "-mfma"]),
    "portable": ([],),
}
"""The compiler's instruction-set flags for each value of ``$LINATTN_KERNEL_ISA``, tried in order until one compiles:
``native`` (the default) all of this CPU's; ``avx2`` this CPU's without AVX-512 (``-mno-avx512f`` turns off every
AVX-512 extension, so the kernels take their 256-bit path, as on a CPU that has AVX2 and no AVX-512); ``portable``
none (the compiler's baseline, SSE2 on x86-64)."""


def isa_flags() -> tuple[list[str], ...]:
    """The flag sets :func:`load` tries for ``$LINATTN_KERNEL_ISA`` (:data:`ISA_FLAGS`; unset or empty: native).
    Raises ValueError naming the variable for any other value."""
    isa = os.environ.get("LINATTN_KERNEL_ISA") or "native"
    if isa not in ISA_FLAGS:
        raise ValueError(f"LINATTN_KERNEL_ISA={isa!r}: choose one of {', '.join(ISA_FLAGS)}")
    return ISA_FLAGS[isa]


def huge_page_copy(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of the CPU tensor ``t`` in memory that Linux is asked to back with 2 MB pages
    (``madvise(MADV_HUGEPAGE)``, for transparent huge pages set to ``madvise``); ``t.contiguous()`` where ``t`` is
    smaller than a huge page or the platform has no such advice. A kernel streaming a data set larger than the L3
    cache waits on page walks with 4 KB pages: Figure 5's ATTN_S step (50 MB) took a fifth longer than the same
    passes in the cache, and as long with 2 MB pages. The memory is freed with the tensor."""
    import torch

    nbytes = t.numel() * t.element_size()
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is None or nbytes < HUGE_PAGE:
        return t.contiguous()
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)  # anonymous (private: shared memory gets no huge pages)
    try:
        buf.madvise(advice)
    except OSError:  # no transparent huge pages in this kernel: 4 KB pages, as any allocation
        pass
    out = torch.frombuffer(buf, dtype=t.dtype, count=t.numel()).view(t.shape)
    return out.copy_(t)


def cache_dir() -> Path | None:
    """Where compiled kernels are kept between processes: ``$LINATTN_KERNEL_CACHE``, else ``linattn/kernels`` under
    ``$XDG_CACHE_HOME`` (default ``~/.cache``); None where it is set to an empty value or cannot be created (each
    process then compiles its own). A kernel is kept as ``<stem>-<build>-<digest>.so``: ``<build>`` hashes its
    source, the compiler's command, the compiler itself (path, size and time of its executable) and this CPU (its
    model and instruction-set flags), so a cache shared between machines or compilers never serves a library built
    for another; ``<digest>`` is the SHA-256 of the library's bytes (:func:`_verified`)."""
    where = os.environ.get("LINATTN_KERNEL_CACHE")
    if where is None:
        where = str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "linattn" / "kernels")
    if not where:
        return None
    try:
        Path(where).mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return Path(where)


def _build_id(path: Path, command: list[str]) -> str:
    h = hashlib.sha256(path.read_bytes())
    exe = shutil.which(command[0])
    stat = os.stat(exe) if exe else None
    h.update(repr((command, exe, stat and (stat.st_size, stat.st_mtime_ns), _cpu())).encode())
    return h.hexdigest()[:24]


@functools.cache
def _cpu() -> str:
    """This CPU's model and instruction-set flags (Linux: /proc/cpuinfo), else what the platform module says."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(sorted({ln for ln in lines if ln.split(":")[0].strip() in ("model name", "flags")}))
    except OSError:
        return f"{platform.machine()} {platform.processor()}"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:24]


def _discard(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:  # a read-only cache: the library is built in a temporary folder each time
        pass


def _verified(cache: Path, name: str) -> Path | None:
    """The cached library of build ``name`` whose bytes match the digest in its file name, or None. A file that does
    not match (cut short, overwritten), and one of the older name without a digest (which cannot be checked), is
    deleted, so that the next build replaces it."""
    _discard(cache / f"{name}.so")
    found = None
    for lib in cache.glob(f"{name}-*.so"):
        try:
            whole = found is None and _digest(lib) == lib.stem.rpartition("-")[2]
        except OSError:
            whole = False
        if whole:
            found = lib
        else:
            _discard(lib)
    return found


def _keep(lib: Path, cache: Path, name: str) -> Path:
    """Copy the library just built into the cache as ``<name>-<digest>.so`` (through a temporary file, checked against
    the digest and renamed into place: a reader sees the whole file or none); the library itself where the cache
    cannot take it (a full or read-only disk), leaving nothing there. Temporary files of killed processes of this
    host are removed first."""
    from ..records import remove_stale_temps, temp_prefix

    cached = cache / f"{name}-{_digest(lib)}.so"
    remove_stale_temps(cache)
    tmp: Path | None = None
    try:
        fd, tmp_name = tempfile.mkstemp(dir=cache, prefix=temp_prefix(cached.name), suffix=".tmp")
        tmp = Path(tmp_name)
        os.close(fd)
        shutil.copyfile(lib, tmp)
        if _digest(tmp) != _digest(lib):
            raise OSError(f"{tmp} was not written whole")
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep the library from other users of a shared cache
        os.replace(tmp, cached)
        tmp = None
        return cached
    except OSError:
        return lib
    finally:
        if tmp is not None:
            _discard(tmp)
