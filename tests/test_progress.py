"""Long work shows its progress (issue 45, finding 14): ``linattn train`` prints plain periodic lines where its output
is no terminal (a bar on one) and nothing with ``--quiet``; the figure runner says when each figure starts and, every
so often, that it is still running; the compiled loop returns between calls often enough for both."""

from __future__ import annotations

import numpy as np
import pytest
from test_runner import WRITE, make_src, pin_sources

import linattn
from linattn.cli import main
from linattn.companion.runner import schedule
from linattn.config import RunConfig
from linattn.training import train


def test_train_prints_plain_lines_off_a_terminal_and_nothing_when_quiet(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(train, "PROGRESS_EVERY_S", 0.0)  # a line at every update
    assert main(["train", "--epoch", "3000", "--engine", "autograd", "--trainset_size", "64", "--out",
                 str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("training: step ")]
    assert lines and all(ln.endswith(" s") and " of 3,000 (" in ln for ln in lines)
    assert "\r" not in err  # no bar's redraws in a log
    steps = [int(ln.split()[2].replace(",", "")) for ln in lines]
    assert steps == sorted(steps) and steps[-1] < 3000
    assert main(["train", "--epoch", "3000", "--engine", "autograd", "--trainset_size", "64", "--quiet", "--out",
                 str(tmp_path / "b")]) == 0
    assert capsys.readouterr().err == ""


def test_no_line_for_a_run_shorter_than_the_interval(capsys):
    linattn.run(RunConfig(epoch=50, trainset_size=64), progress=True)
    assert capsys.readouterr().err == ""


def test_the_compiled_loop_is_called_in_blocks_with_the_same_numbers(monkeypatch):
    """The exact engine's C loop runs a long run in calls of about CALL_S seconds (so the bar moves and a signal is
    heard between them): the losses are those of one call for all steps."""
    cfg = RunConfig(epoch=4000, trainset_size=64, seq_len=8)
    whole = linattn.run(cfg, progress=False).history.train_loss
    monkeypatch.setattr(train, "CALL_S", 1e-6)  # blocks of 16 steps
    calls = []
    real = train._next_block
    monkeypatch.setattr(train, "_next_block", lambda *a: calls.append(a) or real(*a))
    blocks = linattn.run(cfg, progress=False).history.train_loss
    assert len(calls) > 10 and np.array_equal(whole, blocks)


@pytest.mark.slow
def test_the_runner_says_when_a_figure_starts_and_that_it_is_still_running(tmp_path, capsys, monkeypatch):
    pin_sources(monkeypatch, "pinned")
    monkeypatch.setattr(schedule, "FIRST_NOTE_S", 0.5)
    monkeypatch.setattr(schedule, "NOTE_EVERY_S", 0.5)
    src = make_src(tmp_path, {"slow": WRITE + "time.sleep(3.0)\n"})
    res = schedule.run_figures(src=src, out=tmp_path / "out", jobs=1, preset="quick")
    assert [r.status for r in res] == ["ran"]
    out = capsys.readouterr().out.splitlines()
    start = out.index("  start   slow")
    running = [i for i, ln in enumerate(out) if ln.startswith("  running slow  (") and ln.endswith(" s so far)")]
    done = next(i for i, ln in enumerate(out) if ln.startswith("  done    slow"))
    assert running and start < running[0] and running[-1] < done
    page = (tmp_path / "out" / "slow.ipynb").read_text()
    assert "running slow" not in page and "start   slow" not in page  # never into a page


def test_a_quiet_runner_says_nothing_of_figures_under_way(tmp_path, capsys, monkeypatch):
    pin_sources(monkeypatch, "pinned")
    src = make_src(tmp_path, {"quick": WRITE})
    schedule.run_figures(src=src, out=tmp_path / "out", jobs=1, preset="quick", progress=False)
    assert "start   quick" not in capsys.readouterr().out
