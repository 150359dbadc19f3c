"""Faults injected into the figure runner: a figure's outputs change whole or not at all.

The swap is tested without kernels by stopping it at every rename (a crash: the next run completes it; a failed
rename: it is rolled back); a full disk, a cross-device ``--out``, two runners on one figure, a stale stage and an
interruption are tested through the runner on tiny notebooks (each one line: see ``test_runner.notebook``)."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_runner import WRITE, make_src, pin_sources

from linattn.companion.runner import execute, publish, schedule

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def pinned(monkeypatch):
    pin_sources(monkeypatch, "pinned")


class Crash(BaseException):
    """The process dies here (nothing after it runs, no handler catches it)."""


def figure(root: Path, name: str, token: str, *, notebook: bool = True) -> None:
    """A complete published (or staged) figure whose every file says ``token``."""
    (root / name).mkdir(parents=True)
    for f in ("a.txt", "b.txt"):
        (root / name / f).write_text(token)
    if notebook:
        (root / f"{name}.ipynb").write_text(token)


def state(root: Path, name: str) -> str | None:
    """The token of the whole figure ``name`` in ``root``; None when absent; fails when it is mixed or partial."""
    files = [root / name / "a.txt", root / name / "b.txt", root / f"{name}.ipynb"]
    if not any(f.exists() for f in files):
        return None
    tokens = {f.read_text() for f in files}
    assert len(tokens) == 1 and all(f.exists() for f in files), f"mixed or partial figure in {root}: {tokens}"
    return tokens.pop()


def replace_failing_at(patch, k: int, exc) -> list:
    """``os.replace`` as the publish module calls it, raising ``exc`` at its ``k``-th call (k < 0: never);
    returns the list of the calls made."""
    real, calls = os.replace, []

    def replace(src, dst):
        calls.append((src, dst))
        if len(calls) == k + 1:
            raise exc
        return real(src, dst)

    patch.setattr(publish.os, "replace", replace)
    return calls


def staged(tmp_path, label: str) -> tuple[Path, Path]:
    """An output root with figure "one" published ("old", an "older" copy in .previous) and a complete new one
    staged by a process that no longer exists."""
    root = tmp_path / label
    figure(root, "one", "old")
    figure(root / publish.PREVIOUS, "one", "older")
    stage = publish.stage_dir(root, "one", pid=dead_pid())
    figure(stage, "one", "new")
    return root, stage


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def swap_renames(tmp_path) -> int:
    root, stage = staged(tmp_path, "count")
    with pytest.MonkeyPatch.context() as patch:
        calls = replace_failing_at(patch, -1, None)
        publish.swap_in(root, "one", stage)
    assert state(root, "one") == "new" and state(root / publish.PREVIOUS, "one") == "old"
    return len(calls)


def test_a_crash_at_any_rename_of_the_swap_is_completed_by_the_next_run(tmp_path):
    n = swap_renames(tmp_path)
    assert n == 8  # the old pair out, the new pair in, the pair in .previous out, the old pair in
    for k in range(n):
        root, stage = staged(tmp_path, f"crash{k}")
        with pytest.MonkeyPatch.context() as patch, pytest.raises(Crash):
            replace_failing_at(patch, k, Crash())
            publish.swap_in(root, "one", stage)
        assert (stage / publish.MARKER).exists()
        with publish.figure_lock(root, "one"):
            notes = publish.recover(root, "one")
        assert notes == [f"finished the interrupted swap of {stage.name}"]
        assert state(root, "one") == "new" and not stage.exists(), k
        assert state(root / publish.PREVIOUS, "one") == "old", k


def test_a_failed_rename_of_the_swap_is_rolled_back(tmp_path):
    """A rename that fails (a cross-device link, a full disk) puts the old figure back whole and says why."""
    for k in range(swap_renames(tmp_path)):
        root, stage = staged(tmp_path, f"fail{k}")
        with pytest.MonkeyPatch.context() as patch:
            replace_failing_at(patch, k, OSError(errno.EXDEV, os.strerror(errno.EXDEV)))
            if k < 4:  # the renames that change what <root> shows: the old figure is put back, the error raised
                with pytest.raises(OSError, match="Invalid cross-device link"):
                    publish.swap_in(root, "one", stage)
            else:  # the new figure is in place; only the copy in .previous could not be kept
                publish.swap_in(root, "one", stage)
        assert state(root, "one") == ("old" if k < 4 else "new"), k
        assert state(root / publish.PREVIOUS, "one") == ("older" if k < 4 else None), k
        assert not stage.exists(), k


def test_an_unfinished_stage_of_a_dead_run_is_removed_and_the_figure_kept(tmp_path):
    root, stage = staged(tmp_path, "unfinished")
    (stage / "one" / "b.txt").unlink()  # killed while the notebook was writing: no marker
    with publish.figure_lock(root, "one"):
        assert publish.recover(root, "one") == [f"removed the unfinished {stage.name}"]
    assert state(root, "one") == "old" and not stage.exists()


def test_a_second_holder_of_a_figure_lock_waits_and_names_the_first(tmp_path):
    code = ("import sys, time; from linattn.companion.runner import publish\n"
            "with publish.figure_lock(sys.argv[1], 'one', say=lambda s: print(s, flush=True)):\n"
            "    print('got it', time.monotonic(), flush=True)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with publish.figure_lock(tmp_path, "one"):
        proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                                env=env)
        first = proc.stdout.readline()
        assert f"waiting one: PID {os.getpid()} is writing it" in first
        time.sleep(0.5)
        assert proc.poll() is None  # still waiting
    assert proc.stdout.readline().startswith("got it") and proc.wait(30) == 0


# ---------------------------------------------------------------- through the runner, on tiny notebooks

FULL_DISK = WRITE + textwrap.dedent("""\
    import errno
    (root / NAME / "half.nc").write_bytes(b"CDF")  # a writer part-way through its file when the disk filled
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(root / NAME / "half.nc"))
    """)


def cli(*args) -> tuple[int, str, str]:
    """``linattn ARGS`` in a fresh process (its own signals and workers)."""
    proc = subprocess.run([sys.executable, "-m", "linattn", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.slow
def test_a_full_disk_names_its_cause_first_and_leaves_the_published_figure(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    src = make_src(tmp_path, {"one": WRITE})
    out = tmp_path / "out"
    assert schedule.run_figures(src=src, out=out, jobs=1, progress=False)[0].status == "ran"
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and ".locks" not in p.parts}
    (src / "one.md").write_text((src / "one.md").read_text().replace(WRITE.strip(), FULL_DISK.strip()))
    from linattn.cli import main

    assert main(["figures", "--src", str(src), "--out", str(out), "--jobs", "1"]) == 1
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if "FAILED" in ln)
    assert line.split(": ", 1)[1].startswith("OSError: [Errno 28] No space left on device")
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and ".locks" not in p.parts}
    assert after.pop(Path("one.failed.ipynb")) and after == before  # no partial file; the old figure as it was
    assert not list(out.glob(".staging-*")) and not list((tmp_path / "tmp").iterdir())


@pytest.mark.slow
def test_a_cross_device_rename_names_the_notebooks_error_first(tmp_path, monkeypatch):
    """As if --out were on another file system than everything else: a rename between folders fails (EXDEV)."""
    for var in (*execute.THREAD_ENV, "MPLBACKEND", "LINATTN_FIGURE", "LINATTN_RUNS_DIR"):
        monkeypatch.setenv(var, os.environ.get(var, ""))  # execute_figure sets them for its kernel
    real = os.replace

    def replace(src, dst):
        if Path(src).parent != Path(dst).parent:
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(src), None, str(dst))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    out = tmp_path / "out"
    figure(out, "one", "old")
    broken = make_src(tmp_path, {"one": WRITE + 'raise ZeroDivisionError("deliberately broken")\n'})
    text = (broken / "one.md").read_text()
    res = execute.execute_figure("one", text, str(out), {"preset": "quick"}, "key", store=str(tmp_path / "runs"))
    assert not res["ok"] and res["error"].startswith("ZeroDivisionError: deliberately broken (and its traceback")
    assert "[Errno 18] Invalid cross-device link" in res["error"]
    assert state(out, "one") == "old" and not list(out.glob(".staging-*"))
    (tmp_path / "good").mkdir()
    good = (make_src(tmp_path / "good", {"one": WRITE}) / "one.md").read_text()
    res = execute.execute_figure("one", good, str(out), {"preset": "quick"}, "key", store=str(tmp_path / "runs"))
    assert not res["ok"] and res["error"].startswith("OSError: [Errno 18] Invalid cross-device link")
    assert state(out, "one") == "old" and not list(out.glob(".staging-*"))


@pytest.mark.slow
def test_a_stale_stage_of_a_dead_run_is_cleaned_by_the_next_run(tmp_path, capsys):
    src = make_src(tmp_path, {"one": WRITE})
    out = tmp_path / "out"
    stale = publish.stage_dir(out, "one", pid=dead_pid())
    (stale / "one").mkdir(parents=True)
    (stale / "one" / "partial.nc").write_bytes(b"CDF")
    other = publish.stage_dir(out, "two", pid=dead_pid())  # another figure's: not this run's to judge
    other.mkdir()
    from linattn.cli import main

    assert main(["figures", "--src", str(src), "--out", str(out), "--jobs", "1"]) == 0
    assert f"note    one: removed the unfinished {stale.name}" in capsys.readouterr().out
    assert not stale.exists() and other.exists() and (out / "one" / "out.txt").is_file()


SLOW_WRITER = textwrap.dedent("""\
    import os
    token = f"{os.getppid()}-{time.time_ns()}"
    for f in ("a.txt", "b.txt", "c.txt"):
        (root / NAME / f).write_text(token)
        time.sleep(1.0)
    """)


@pytest.mark.slow
def test_two_runners_on_one_figure_leave_it_whole(tmp_path):
    src = make_src(tmp_path, {"one": SLOW_WRITER})
    out = tmp_path / "out"
    args = ["figures", "--src", str(src), "--out", str(out), "--jobs", "1", "--force"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-m", "linattn", *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)]
    while not list(out.glob(".staging-one-*/one/a.txt")):  # the first is writing
        assert procs[0].poll() is None
        time.sleep(0.2)
    procs.append(subprocess.Popen([sys.executable, "-m", "linattn", *args], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env))
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert "waiting one: PID" in outputs[1][1] and "is writing it" in outputs[1][1]
    for folder in (out / "one", out / publish.PREVIOUS / "one"):  # the second run's, and the first's, each whole
        assert len({(folder / f).read_text() for f in ("a.txt", "b.txt", "c.txt")}) == 1
    assert (out / "one" / "a.txt").read_text() != (out / publish.PREVIOUS / "one" / "a.txt").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_run_says_what_it_kept_and_leaves_no_stage_or_kernel(tmp_path, sig):
    pids = tmp_path / "pids"
    pids.mkdir()
    record = f"(Path({str(pids)!r}) / NAME).write_text(str(os.getpid()))\n"
    src = make_src(tmp_path, {"quick": WRITE, "slow": record + WRITE + "time.sleep(120)\n"})
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "linattn", "figures", "--src", str(src), "--out", str(out),
                             "--jobs", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 240
    while not ((out / "quick.ipynb").exists() and (pids / "slow").exists()):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert lines == [f"linattn figures: interrupted; kept 1 finished figure(s) in {out} (quick); not finished: slow "
                     "(their earlier outputs, where there were any, are as they were)"]
    assert (out / "quick" / "out.txt").is_file() and not (out / "slow").exists() and not (out / "slow.ipynb").exists()
    assert not list(out.glob(".staging-*"))
    kernel = int((pids / "slow").read_text())
    for _ in range(100):
        if not Path(f"/proc/{kernel}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{kernel}").exists(), "the slow figure's kernel outlived the runner"


@pytest.mark.slow
def test_a_killed_runner_leaves_no_worker_or_kernel(tmp_path):
    """SIGKILL of ``linattn figures``: its workers and their kernels end within seconds (Linux's parent-death
    signal, :mod:`linattn.companion.runner.lifetime`), and the next run finds nothing of the killed one."""
    pytest.importorskip("linattn.companion.runner.lifetime")
    pid_file = tmp_path / "kernel.pid"
    src = make_src(tmp_path, {"slow": f"Path({str(pid_file)!r}).write_text(str(os.getpid()))\n" + WRITE
                              + "time.sleep(120)\n"})
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "linattn", "figures", "--src", str(src), "--out", str(out),
                             "--jobs", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 240
    while not pid_file.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    started = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
    started.append(int(pid_file.read_text()))
    proc.kill()
    proc.wait()

    def alive(pid):
        try:
            return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False

    for _ in range(100):
        if not any(map(alive, started)):
            break
        time.sleep(0.1)
    assert not [p for p in started if alive(p)], "processes of the killed runner are still running"
    assert not (out / "slow").exists() and not list(out.glob(".staging-*"))


@pytest.mark.slow
def test_a_killed_runs_stage_is_cleaned_by_a_run_that_has_nothing_to_do(tmp_path, capsys):
    """Issue 45, finding 10: after SIGKILL of a whole runner (its workers too), its ``.staging-<name>-<pid>`` stayed,
    and a plain re-run said "up to date" and left it. Every runner start cleans the stages of figures whose lock is
    free, whether or not it runs them; a stage whose figure a live runner holds is left to that runner."""
    src = make_src(tmp_path, {"one": WRITE, "two": WRITE})
    out = tmp_path / "out"
    assert [r.status for r in schedule.run_figures(src=src, out=out, jobs=1, progress=False)] == ["ran", "ran"]
    capsys.readouterr()
    killed = publish.stage_dir(out, "one", pid=dead_pid())
    (killed / "one").mkdir(parents=True)
    (killed / "one" / "partial.nc").write_bytes(b"CDF")
    held = publish.stage_dir(out, "two", pid=dead_pid())
    held.mkdir()
    cut_short = out / f".one.failed.ipynb.{socket.gethostname()}.{dead_pid()}.x1.tmp"  # a traceback notebook's
    cut_short.write_text("{")
    with publish.figure_lock(out, "two") as lock:  # a live runner at work on "two" (this process, its own handle)
        results = schedule.run_figures(src=src, out=out, jobs=1, progress=False, only=["one"])
        assert lock.read_text() == f"{os.getpid()}\n"  # the holder's PID, for those who wait, left as it was
    assert [r.status for r in results] == ["cached"]
    assert f"note    one: removed the unfinished {killed.name}" in capsys.readouterr().out
    assert not killed.exists() and not cut_short.exists() and held.exists() and (out / "one" / "out.txt").is_file()
    assert [r.status for r in schedule.run_figures(src=src, out=out, jobs=1, progress=False)] == ["cached"] * 2
    assert not list(out.glob(".staging-*"))


@pytest.mark.slow
def test_the_run_record_counts_the_figures_own_time_not_the_wait_for_a_lock(tmp_path, monkeypatch):
    """Issue 45, finding 15: ``.run.json``'s "seconds" counted the wait for another runner's lock. It counts from
    the moment the figure's lock is held: here the lock is held elsewhere for 3 s first."""
    import json
    import threading

    for var in (*execute.THREAD_ENV, "MPLBACKEND", "LINATTN_FIGURE", "LINATTN_RUNS_DIR"):
        monkeypatch.setenv(var, os.environ.get(var, ""))  # execute_figure sets them for its kernel
    text = (make_src(tmp_path, {"one": WRITE}) / "one.md").read_text()
    out, held_s, got = tmp_path / "out", 3.0, {}
    with publish.figure_lock(out, "one"):
        worker = threading.Thread(target=lambda: got.update(execute.execute_figure(
            "one", text, str(out), {"preset": "quick"}, "key", store=str(tmp_path / "runs"))))
        started = time.perf_counter()
        worker.start()
        time.sleep(held_s)
    worker.join(300)
    total = time.perf_counter() - started
    record = json.loads((out / "one" / ".run.json").read_text())
    assert got["ok"] and got["seconds"] == pytest.approx(record["seconds"], abs=0.2)
    assert record["seconds"] <= total - held_s + 0.2


@pytest.mark.slow
def test_a_read_only_run_store_is_not_refused(tmp_path, monkeypatch):
    """Issue 45, finding 12: a read-only shared store was refused ("is not writable") even when every run the
    figures need is stored; it is served read-only (a figure fails only where it must train a run)."""
    from disks import remount, tmpfs

    src = make_src(tmp_path, {"one": WRITE})
    with tmpfs(tmp_path / "disk") as disk:
        (disk / "store").mkdir()
        remount(disk, "ro")
        monkeypatch.setenv("LINATTN_RUNS_DIR", str(disk / "store"))
        results = schedule.run_figures(src=src, out=tmp_path / "out", jobs=1, progress=False)
        remount(disk, "rw")
    assert [r.status for r in results] == ["ran"]
    monkeypatch.setenv("LINATTN_RUNS_DIR", str(tmp_path / "out" / "one" / "out.txt"))  # a file: still refused
    with pytest.raises(schedule.UnusableFolder, match="is a file, not a folder"):
        schedule.run_figures(src=src, out=tmp_path / "out", jobs=1, progress=False)


@pytest.mark.slow
def test_an_interrupted_run_whose_worker_cannot_unwind_leaves_no_stage(tmp_path):
    """A worker that does not take its SIGTERM (here stopped by its own kernel; in the wild, an interruption lost
    inside a finaliser) is killed after the wind-down: the runner then removes the stage it left, and its kernel ends
    with it, before the runner says what it kept."""
    pid_file = tmp_path / "kernel.pid"
    stop_worker = "import signal\nos.kill(os.getppid(), signal.SIGSTOP)\n"
    src = make_src(tmp_path, {"slow": f"Path({str(pid_file)!r}).write_text(str(os.getpid()))\n" + WRITE
                              + stop_worker + "time.sleep(120)\n"})
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "linattn", "figures", "--src", str(src), "--out", str(out),
                             "--jobs", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 240
    while not (pid_file.exists() and list(out.glob(".staging-slow-*/slow/out.txt"))):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(0.5)  # the kernel stops its worker right after writing
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert [ln for ln in stderr.splitlines() if ln.strip()] == [
        "linattn figures: interrupted; no figure was published; not finished: slow "
        "(their earlier outputs, where there were any, are as they were)"]
    assert not list(out.glob(".staging-*")) and not (out / "slow").exists()
    kernel = int(pid_file.read_text())
    for _ in range(100):
        if not Path(f"/proc/{kernel}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{kernel}").exists(), "the stopped worker's kernel outlived the runner"
