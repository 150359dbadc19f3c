"""Interruptions and kills: what is left on disk, what is printed, which processes go on."""

import ast
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from linattn.cli import main
from linattn.companion.runner import lifetime
from linattn.companion.runner.interrupts import ENV_SIGNAL, ENV_SIGNAL_AT
from linattn.records import git_commit, process_alive

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

linux_only = pytest.mark.skipif(not lifetime.supported(), reason="the parent-death signal is Linux's")


def _gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` has ended (or is a zombie, which can do nothing more) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return True
        time.sleep(0.05)
    return not process_alive(pid)


# a parent that starts a child and prints the child's pid once the child is ready; the child calls die_with_parent
# (or not) and then sleeps
PARENT = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "ready"
print(child.pid, flush=True)
import time; time.sleep(60)
"""
CHILD = """
import os, sys, time
from linattn.companion.runner.lifetime import die_with_parent
{call}
print("ready", flush=True)
time.sleep(60)
"""


def _orphan_after_sigkill(call: str) -> int:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD.format(call=call)], stdout=subprocess.PIPE,
                              text=True, env=ENV)
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    return child


@linux_only
@pytest.mark.slow  # two fresh Python processes
def test_a_child_that_called_die_with_parent_ends_with_its_killed_parent():
    child = _orphan_after_sigkill("die_with_parent(os.getppid())")
    assert _gone(child, within=5)


@linux_only
@pytest.mark.slow
def test_without_it_the_child_of_a_killed_parent_goes_on():  # what the test above would see without the call
    child = _orphan_after_sigkill("pass")
    try:
        assert not _gone(child, within=1)
    finally:
        os.kill(child, signal.SIGKILL)


@linux_only
def test_a_parent_already_gone_ends_the_child_at_once():
    # a parent id that is not this child's parent: the parent died before the signal was set
    done = subprocess.run([sys.executable, "-c", "from linattn.companion.runner.lifetime import die_with_parent; "
                           "die_with_parent(parent=2**22 + 1); print('went on')"], env=ENV, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 128 + signal.SIGTERM and "went on" not in done.stdout


def test_kernel_arguments_name_the_process_that_starts_the_kernel():
    args = lifetime.kernel_arguments(parent=1234)
    if not lifetime.supported():
        assert args == []
        return
    (arg,) = args
    assert arg.startswith("--IPKernelApp.exec_lines=") and arg.endswith("die_with_parent(1234)")
    assert lifetime.kernel_arguments()[0].endswith(f"die_with_parent({os.getpid()})")  # default: this process


# ── linattn train and linattn sweep stopped by a signal ─────────────────────────────────────────────────────────

FAST = ["--in_dim", "3", "--seq_len", "6", "--trainset_size", "50", "--quiet"]


def _left(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_training_leaves_nothing_and_says_so(sig, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(ENV_SIGNAL_AT, "3")  # the hook: the run sends itself the signal at its step-3 snapshot
    monkeypatch.setenv(ENV_SIGNAL, str(int(sig)))
    out = tmp_path / "made" / "for" / "run"
    assert main(["train", *FAST, "--epoch", "1000", "--out", str(out)]) == 128 + sig
    assert _left(tmp_path) == []  # neither the run's folder, nor its temporary folder, nor the parents it made
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"linattn train: interrupted by {signal.Signals(sig).name}; the run was not finished and nothing "
                    f"was written ({out} was not created)")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers are put back


def test_a_signal_keeps_the_earlier_run_of_overwrite(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "old.txt").write_text("keep me")
    monkeypatch.setenv(ENV_SIGNAL_AT, "2")
    assert main(["train", *FAST, "--epoch", "1000", "--out", str(out), "--overwrite"]) == 143
    assert _left(tmp_path) == ["run", "run/old.txt"]
    assert capsys.readouterr().err.strip().endswith(f"({out} is unchanged)")


def test_a_finished_run_removes_what_killed_writers_left_and_only_that(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its process id names no process now
    host = socket.gethostname()
    stale = [tmp_path / f".run.{host}.{dead.pid}.abc.tmp", tmp_path / f".run.{host}.{dead.pid}.abd.tmp"]
    stale[0].mkdir()
    (stale[0] / "loss.csv").write_text("half")
    stale[1].write_text("half a file")
    kept = [tmp_path / f".run.{host}.{os.getpid()}.abc.tmp",  # a live writer's
            tmp_path / f".run.otherhost.{dead.pid}.abc.tmp",  # another host's: its process cannot be asked
            tmp_path / f".other.{host}.{dead.pid}.abc.tmp",  # another --out's
            tmp_path / f".run.{host}.{dead.pid}.abc.old"]  # an earlier run set aside: never deleted
    for k in kept:
        k.mkdir()
    assert main(["train", *FAST, "--epoch", "3", "--out", str(tmp_path / "run")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run", *(k.name for k in kept)])


@pytest.mark.slow  # a fresh interpreter that imports torch
def test_kill_term_of_a_long_training_leaves_nothing(tmp_path):
    out = tmp_path / "new" / "D"
    proc = subprocess.Popen([sys.executable, "-m", "linattn", "train", *FAST, "--epoch", "2000000", "--out", str(out)],
                            env=ENV, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not any(tmp_path.rglob(".D.*.tmp")) and time.monotonic() < deadline:  # training has begun
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read()
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and _left(tmp_path) == []
    assert err.strip().splitlines() == [f"linattn train: interrupted by SIGTERM; the run was not finished and nothing "
                                        f"was written ({out} was not created)"]


SWEEP = [sys.executable, "-m", "linattn", "sweep", *FAST, "--epoch", "300000", "--grid", "seed=0:40", "--workers", "2"]


def _sweep_until_cells_are_stored(out: Path, n: int) -> subprocess.Popen:
    """A sweep in a process group of its own, SIGINT not ignored (as in a terminal), once ``n`` of its cells are
    stored."""
    proc = subprocess.Popen([*SWEEP, "--out", str(out)], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while len(list((out / "runs").glob("[!.]*"))) < n and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    return proc


def _descendants(pid: int) -> set[int]:
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return {int(c) for c in children} | {d for c in children for d in _descendants(int(c))}


@pytest.mark.slow  # a sweep on a local cluster of two workers
def test_ctrl_c_on_a_sweep_prints_one_line_and_leaves_no_worker(tmp_path):
    out = tmp_path / "sweep"
    proc = _sweep_until_cells_are_stored(out, 2)
    workers = _descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group, workers included
    _, err = proc.communicate(timeout=120)
    stored = len(list((out / "runs").glob("[!.]*")))
    assert proc.returncode == 130
    assert err.splitlines() == [f"linattn sweep: interrupted by SIGINT; {stored} of 40 cells are stored in "
                                f"{out / 'runs'} ({stored} by this sweep), {40 - stored} are not, and sweep.nc was "
                                "not written; the same command goes on from there"]
    assert 2 <= stored < 40 and not list((out / "runs").glob(".*"))  # no temporary folder of a stopped task
    assert all(_gone(pid, within=10) for pid in workers)


@linux_only
@pytest.mark.slow
def test_the_workers_of_a_killed_sweep_end_with_it(tmp_path):
    proc = _sweep_until_cells_are_stored(tmp_path / "sweep", 1)
    workers = _descendants(proc.pid)
    assert workers
    proc.kill()  # the command alone, not its group
    proc.communicate()
    assert all(_gone(pid, within=10) for pid in workers)


def test_a_signal_during_the_final_rename_waits_for_it_and_the_run_is_kept(tmp_path, monkeypatch, capsys):
    from linattn.cli import train_cli

    rename = train_cli._move_into_place

    def signalled_rename(*args):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the rename runs: held back until it is done
        rename(*args)

    monkeypatch.setattr(train_cli, "_move_into_place", signalled_rename)
    out = tmp_path / "run"
    assert main(["train", *FAST, "--epoch", "3", "--out", str(out)]) == 143
    assert (out / "loss.csv").is_file() and _left(tmp_path)[0] == "run"
    assert capsys.readouterr().err.strip() == (f"linattn train: interrupted by SIGTERM after the run was complete; it "
                                               f"is kept in {out}")


def _worker_state():
    return lifetime.parent_death_signal(), signal.getsignal(signal.SIGINT) is signal.SIG_IGN


@linux_only
@pytest.mark.slow  # a local cluster
def test_a_local_clusters_workers_die_with_it_and_leave_ctrl_c_to_it():
    from linattn.companion.sweeps.engine import local_client

    before = lifetime.parent_death_signal()
    with local_client(1) as client:
        assert list(client.run(_worker_state).values()) == [(signal.SIGTERM, True)]
    assert lifetime.parent_death_signal() == before  # set in the workers, not here


@linux_only
@pytest.mark.slow  # a Jupyter kernel
def test_a_kernel_started_with_kernel_arguments_dies_with_its_parent_and_keeps_a_clean_namespace():
    nbformat = pytest.importorskip("nbformat")
    papermill = pytest.importorskip("papermill")
    code = ("import os\nfrom linattn.companion.runner import lifetime as _l\n"
            "print(_l.parent_death_signal(), os.getppid(), sorted(k for k in dir() if not k.startswith('_')))")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    done = papermill.execute_notebook(nb, None, kernel_name="python3", progress_bar=False,
                                      extra_arguments=lifetime.kernel_arguments())
    printed = done.cells[0].outputs[0]["text"].split(maxsplit=2)
    assert printed[:2] == [str(int(signal.SIGTERM)), str(os.getpid())]
    # the start-up line left no name
    assert not {"linattn", "lifetime", "die_with_parent"} & set(ast.literal_eval(printed[2]))


def test_provenance_never_writes_the_readers_git_index(tmp_path):
    """git_commit asks git without its optional locks: a checkout whose index is stale is not rewritten, so a run
    killed while git ran leaves no .git/index.lock behind (it did: a killed sweep's provenance left one)."""
    if shutil.which("git") is None:
        pytest.skip("no git")

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "f.txt").write_text("x")
    git("add", "f.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    index = tmp_path / ".git" / "index"
    before = index.stat().st_mtime_ns
    time.sleep(0.05)
    os.utime(tmp_path / "f.txt", None)  # its stat changed, its content not: a plain status rewrites the index
    assert git_commit(tmp_path) is not None and not git_commit(tmp_path).endswith("+dirty")
    assert index.stat().st_mtime_ns == before
