"""The kernel cache: a kernel compiled once is loaded by later processes without the compiler, never one built by
another command or for another CPU, and a damaged cached library is built again."""

import subprocess
import sys

import pytest

from linattn.objectives import native

SOURCE = "exact_kernel.c"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LINATTN_KERNEL_CACHE", str(tmp_path))
    try:
        native.compiler()
    except RuntimeError:
        pytest.skip("no C compiler")
    return tmp_path


def _compiles(monkeypatch) -> list:
    calls = []
    run = subprocess.run
    monkeypatch.setattr(native.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or run(cmd, **kw))
    return calls


def test_a_kernel_compiled_once_is_loaded_without_the_compiler(cache, monkeypatch):
    calls = _compiles(monkeypatch)
    native.load.__wrapped__(SOURCE)  # what a fresh process does (load is cached per process)
    kept = list(cache.glob("exact_kernel-*.so"))
    assert len(calls) == 1 and len(kept) == 1
    assert hasattr(native.load.__wrapped__(SOURCE), "exact_steps") and len(calls) == 1
    monkeypatch.setenv("CC", " ".join([*native.compiler(), "-O1"]))  # another command: its own build
    native.load.__wrapped__(SOURCE)
    assert len(calls) == 2 and len(list(cache.glob("exact_kernel-*.so"))) == 2


def test_another_cpu_gets_its_own_build(cache, monkeypatch):
    calls = _compiles(monkeypatch)
    native.load.__wrapped__(SOURCE)
    monkeypatch.setattr(native, "_cpu", lambda: "model name: another\nflags: sse2")
    native.load.__wrapped__(SOURCE)
    assert len(calls) == 2 and len(list(cache.glob("exact_kernel-*.so"))) == 2


def test_a_damaged_cached_kernel_is_built_again(cache):
    """In fresh processes (a process that has loaded a library is served it again by name)."""
    probe = ("import subprocess, linattn.objectives.native as n; calls = []; run = subprocess.run; "
             "n.subprocess.run = lambda c, **k: calls.append(c) or run(c, **k); "
             f"lib = n.load({SOURCE!r}); print(len(calls), hasattr(lib, 'exact_steps'))")

    def fresh():
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()

    assert fresh() == ["1", "True"] and fresh() == ["0", "True"]
    (kept,) = cache.glob("exact_kernel-*.so")
    kept.write_bytes(b"not a library")
    assert fresh() == ["1", "True"] and kept.stat().st_size > 100 and fresh() == ["0", "True"]


def test_an_empty_setting_keeps_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LINATTN_KERNEL_CACHE", "")
    assert native.cache_dir() is None
    monkeypatch.setenv("LINATTN_KERNEL_CACHE", str(tmp_path / "k"))
    assert native.cache_dir() == tmp_path / "k" and (tmp_path / "k").is_dir()
