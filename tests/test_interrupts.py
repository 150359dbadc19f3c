"""Interruptions and kills: what is left on disk, what is printed, which processes go on."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from linattn.companion import lifetime

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

linux_only = pytest.mark.skipif(not lifetime.supported(), reason="the parent-death signal is Linux's")


def _gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` has ended (or is a zombie, which can do nothing more) within ``within`` seconds."""
    from linattn.companion.sweeps.cells import _alive

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


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
from linattn.companion.lifetime import die_with_parent
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
    done = subprocess.run([sys.executable, "-c", "from linattn.companion.lifetime import die_with_parent; "
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
