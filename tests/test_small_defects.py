"""Issue 45, finding 15: "must be a int", ``--head -3`` answered about ``--head_num``, and the resource tracker's
"leaked semaphore objects" after a SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from linattn.cli import main
from linattn.companion.runner.notebooks import with_article

ROOT = Path(__file__).resolve().parents[1]


def test_the_article_fits_the_noun():
    assert [with_article(w) for w in ("int", "float", "list", "str", "integer")] == \
        ["an int", "a float", "a list", "a str", "an integer"]


def test_a_wrong_type_reads_an_int(tmp_path, capsys):
    assert main(["figures", "--only", "fig01a_attnm_schematic", "--param", "head_num=2.5", "--out",
                 str(tmp_path / "o")]) == 2
    assert "head_num must be an int, got 2.5" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--head", "--head_num"])
def test_a_refusal_names_the_flag_typed(flag, capsys):
    assert main(["train", flag, "-3"]) == 2
    assert capsys.readouterr().err == f"linattn train: error: {flag} must be a positive integer, got -3\n"
    assert main(["train", flag, "100000", "--max-memory", "1M"]) == 2
    assert f"use a smaller {flag} or --seq_len" in capsys.readouterr().err


def test_a_sweep_refusal_names_the_flag_typed(capsys):
    assert main(["sweep", "--grid", "seed=0:2", "--head", "-3", "--dry-run"]) == 2
    assert "--head must be a positive integer, got -3" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="named POSIX semaphores and SIGKILL as on Linux")
def test_sigkill_of_the_runner_prints_no_leaked_semaphores(tmp_path):
    """The runner's pool holds named semaphores; killed, it cannot release them, and the resource tracker does, in
    silence (before: "There appear to be 5 leaked semaphore objects to clean up at shutdown")."""
    err = tmp_path / "stderr"
    with open(err, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "linattn", "figures", "--preset", "quick", "--only",
                                 "fig01a_attnm_schematic", "--force", "--jobs", "1", "--out", str(tmp_path / "o")],
                                env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.DEVNULL, stderr=f)
        deadline = time.monotonic() + 60
        while not (tmp_path / "o").exists() and time.monotonic() < deadline:  # the pool is made once the root is
            time.sleep(0.1)
        time.sleep(2.0)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(3.0)  # the workers follow their parent, then the tracker cleans up
    assert "leaked semaphore" not in err.read_text()
