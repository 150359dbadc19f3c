"""A signal stops ``linattn train`` within seconds even in the middle of one long step in C (issue 45, finding 4: a
many-head ATTN_S run exited 268 s after SIGTERM, Python's handler waiting for the einsum to return)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")]

# linattn train whose run is one matrix product of some hundred GFLOP on one thread (tens of seconds in C, where
# Python runs no handler); it says when the product starts
STUCK_TRAIN = """
import sys, torch
torch.set_num_threads(1)
import linattn.training.experiment
from linattn.companion.runner import interrupts
from linattn.cli import main

interrupts.GRACE_S = 1.0

def run(*args, **kwargs):
    a = torch.ones(6000, 6000, dtype=torch.float64)
    print("stepping", file=sys.stderr, flush=True)
    torch.mm(a, a)
    raise SystemExit("the product ended before the signal was taken")

linattn.training.experiment.run = run
sys.exit(main(["train", "--epoch", "3", "--out", sys.argv[1]]))
"""


def _started(proc) -> None:
    line = proc.stderr.readline()
    assert "stepping" in line, line + proc.stderr.read()
    time.sleep(0.3)  # inside the product


def test_sigterm_mid_step_ends_the_run_within_seconds_and_leaves_nothing(tmp_path):
    out = tmp_path / "runs" / "r"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-c", STUCK_TRAIN, str(out)], env=env, stderr=subprocess.PIPE,
                            text=True)
    try:
        _started(proc)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=20)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert rc == 143, err
    assert took < 5, took  # the grace (1 s) and the clean-up, not the product's tens of seconds
    assert "interrupted by SIGTERM; the run was not finished and nothing was written" in err
    assert "stopped in the middle of a step" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # neither the run's temporary folder nor the parent made for it


def test_a_signal_the_main_thread_takes_is_not_cut_short(tmp_path):
    """A signal the handler takes (between two bytecodes) goes the ordinary way: the watchdog does nothing, however
    long the clean-up that follows takes."""
    script = """
import sys, time
from linattn.companion.runner import interrupts
try:
    with interrupts.signals_interrupt(stuck=lambda s: print("watchdog", flush=True), grace=0.2):
        print("ready", flush=True)
        time.sleep(30)
except KeyboardInterrupt:
    time.sleep(1.0)  # a clean-up longer than the grace
    print("cleaned up", flush=True)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0 and out.split() == ["cleaned", "up"]
