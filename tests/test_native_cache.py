"""The kernel cache: a kernel compiled once is loaded by later processes without the compiler, never one built by
another command or for another CPU; a cached library that does not match its digest (damaged, cut short with its
headers intact) is built again before it is loaded, and a cache on a full disk keeps no temporary file."""

import os
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


# a fresh process (a process that has loaded a library is served it again by name): it counts its compiler calls, and
# trains a tiny run on the exact engine, which calls the kernel (a library cut short dies there with a bus error)
PROBE = ("import subprocess, linattn, linattn.objectives.native as n; calls = []; run = subprocess.run; "
         "n.subprocess.run = lambda c, **k: calls.append(c) or run(c, **k); "
         "r = linattn.run(linattn.RunConfig(model='attnS', head_num=2, in_dim=2, seq_len=8, trainset_size=50, "
         "epoch=20, engine='exact'), progress=False); "
         "print(len(calls), r.engine, bool(r.history.train_loss[-1] > 0))")


def _fresh(setup: str = "") -> list[str]:
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", setup + PROBE],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    return done.stdout.split()


def test_a_damaged_cached_kernel_is_built_again(cache):
    assert _fresh() == ["1", "exact", "True"] and _fresh() == ["0", "exact", "True"]
    (kept,) = cache.glob("exact_kernel-*.so")
    kept.write_bytes(b"not a library")
    assert _fresh() == ["1", "exact", "True"]
    (again,) = cache.glob("exact_kernel-*.so")
    assert again.stat().st_size > 100 and _fresh() == ["0", "exact", "True"]


@pytest.mark.parametrize("cut", ["half", "last byte", "one byte changed"])
def test_a_kernel_cut_short_with_its_headers_intact_is_built_again_before_it_is_loaded(cache, cut):
    """Such a library loads (dlopen reads its headers) and then dies with a bus error when the kernel is called, in
    every later process: the digest in its name is checked before it is loaded."""
    native.load.__wrapped__(SOURCE)  # kept in the cache, as a first process does
    (kept,) = cache.glob("exact_kernel-*.so")
    data = kept.read_bytes()
    assert data[:4] == b"\x7fELF"
    if cut == "one byte changed":
        data = data[:-1] + bytes([data[-1] ^ 0xFF])
    else:
        data = data[:len(data) // 2] if cut == "half" else data[:-1]
    kept.write_bytes(data)
    assert _fresh() == ["1", "exact", "True"]
    assert _fresh() == ["0", "exact", "True"]
    assert [p.name for p in cache.iterdir()] == [p.name for p in cache.glob("exact_kernel-*.so")]


def test_a_cache_on_a_full_disk_keeps_no_temporary_file(cache):
    """The copy into the cache fails part-way with ENOSPC (simulated): the process still runs on its own build, and
    the cache holds nothing, neither a temporary file nor a part of a library."""
    full = ("import errno, shutil\n"
            "def copy(src, dst, **kw):\n"
            "    with open(dst, 'wb') as f: f.write(open(src, 'rb').read()[:4096])\n"
            "    raise OSError(errno.ENOSPC, 'No space left on device', str(dst))\n"
            "shutil.copyfile = copy\n")
    for _ in range(2):
        assert _fresh(full) == ["1", "exact", "True"]
        assert list(cache.iterdir()) == []


def test_a_cache_on_a_real_full_disk_keeps_no_temporary_file(tmp_path, monkeypatch):
    """The same on a tmpfs smaller than the library (needs root to mount it; skipped otherwise)."""
    try:
        native.compiler()
    except RuntimeError:
        pytest.skip("no C compiler")
    where = tmp_path / "full"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(where)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        monkeypatch.setenv("LINATTN_KERNEL_CACHE", str(where))
        for _ in range(2):
            assert _fresh() == ["1", "exact", "True"]
            assert list(where.iterdir()) == []
    finally:
        subprocess.run(["umount", str(where)], check=True)


def test_an_empty_setting_keeps_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LINATTN_KERNEL_CACHE", "")
    assert native.cache_dir() is None
    monkeypatch.setenv("LINATTN_KERNEL_CACHE", str(tmp_path / "k"))
    assert native.cache_dir() == tmp_path / "k" and (tmp_path / "k").is_dir()
