"""Refusals before any work (issue 37, items 7 and 8): a memory estimate that counts what a run records step by step,
the run store's folder checked and resolved where the command ran, and a sweep spec that gives a setting twice."""

from __future__ import annotations

from dataclasses import replace

import pytest

from linattn.cli import main
from linattn.companion import runstore
from linattn.companion.runner import paths, schedule
from linattn.config import ConfigError, RunConfig
from linattn.training.memory import check_memory, memory_estimate, memory_parts

HUGE_EPOCH = 10**12  # the case: 8 TB a recorded column


def _one_error_line(capsys, prog: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{prog}: error: "), err
    return err


# ── the memory estimate ─────────────────────────────────────────────────────────────────────────────────────────

def test_the_history_is_one_float64_row_a_step_of_step_loss_tests_and_value_weights():
    plain = RunConfig(epoch=1000, testset_size=0)
    assert memory_parts(plain)["the recorded history"] == 8 * 2 * 1000  # step and loss
    full = replace(plain, testset_size=50, track_value=True, head_num=3)
    assert memory_parts(full)["the recorded history"] == 8 * (2 + 2 + 3) * 1000  # + two test losses, three heads
    # the history is kept for the whole run: the peak grows by exactly what the extra steps record
    assert memory_estimate(replace(plain, epoch=3000)) - memory_estimate(plain) == 8 * 2 * 2000


def test_snapshots_and_the_flow_trajectory_are_counted():
    cfg = RunConfig(model="attnM", head_num=2, in_dim=3, epoch=100)  # E = 4: W_KQ and W_V, 2 · 4 · 4 each head
    one_copy = 8 * 2 * (2 * 4 * 4)
    assert "the weight snapshots" not in memory_parts(cfg)
    assert memory_parts(cfg, snapshot_every=10)["the weight snapshots"] == one_copy * (100 // 10 + 2)
    assert memory_estimate(cfg, snapshot_every=10) - memory_estimate(cfg) == one_copy * 12
    flow = memory_parts(replace(cfg, dynamics="flow"))
    assert flow["the integrated trajectory"] == one_copy * 101


def test_a_run_whose_history_cannot_fit_is_refused_naming_epoch():
    cfg = RunConfig(epoch=HUGE_EPOCH)
    with pytest.raises(ConfigError, match=r"largest part: the recorded history.*use a smaller epoch") as e:
        check_memory(cfg, "1T")
    assert e.value.field == "max_memory"
    check_memory(replace(cfg, epoch=6001), "1T")  # the same run at its usual length fits


def test_train_refuses_a_huge_epoch_in_one_line_before_any_work(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--epoch", str(HUGE_EPOCH), "--out", str(out)]) == 2
    err = _one_error_line(capsys, "linattn train")
    assert "the recorded history" in err and "--epoch" in err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_figures_param_refuses_a_huge_epoch_before_any_kernel(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(schedule, "_run", lambda *a: pytest.fail("a kernel was started"))
    out = tmp_path / "figs"
    code = main(["figures", "--preset", "quick", "--only", "fig03a_attns_loss", "--param", f"epoch={HUGE_EPOCH}",
                 "--out", str(out)])
    assert code == 2
    assert "the recorded history" in _one_error_line(capsys, "linattn figures")
    assert not out.exists()


# ── the run store's folder ──────────────────────────────────────────────────────────────────────────────────────

def test_a_run_store_that_is_a_file_is_refused_before_any_kernel(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "store"
    blocker.write_text("not a folder")
    monkeypatch.setenv(paths.ENV_RUNS_DIR, str(blocker))
    monkeypatch.setattr(schedule, "_run", lambda *a: pytest.fail("a kernel was started"))
    out = tmp_path / "figs"
    assert main(["figures", "--preset", "quick", "--only", "fig01a_attnm_schematic", "--out", str(out)]) == 2
    err = _one_error_line(capsys, "linattn figures")
    assert str(blocker) in err and "is a file" in err
    assert not out.exists()


def test_a_relative_run_store_is_taken_from_the_folder_the_command_ran_in(tmp_path, monkeypatch):
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv(paths.ENV_RUNS_DIR, "my-runs")
    assert paths.run_store_dir() == here / "my-runs"
    assert runstore.default_root() == here / "my-runs"
    seen = {}

    def fake_run(*args):  # what the workers are given: their kernels run in --out, elsewhere
        seen["store"] = args[-1]
        return []

    monkeypatch.setattr(schedule, "_run", fake_run)
    schedule.run_figures(preset="quick", only=["fig01a_attnm_schematic"], out=tmp_path / "figs", progress=False)
    assert seen["store"] == here / "my-runs" and seen["store"].is_absolute()


# ── a sweep spec that repeats a key ─────────────────────────────────────────────────────────────────────────────

def test_a_sweep_spec_that_gives_a_key_twice_is_refused_naming_it(tmp_path, capsys):
    spec = tmp_path / "grid.yaml"
    spec.write_text("seed: [0, 1]\ninit: [0.1]\nseed: [2, 3]\n")
    out = tmp_path / "sweep"
    assert main(["sweep", "--spec", str(spec), "--out", str(out)]) == 2
    err = _one_error_line(capsys, "linattn sweep")
    assert "'seed' is given twice (lines 1 and 3)" in err
    assert not out.exists()


def test_a_repeated_key_inside_a_nested_mapping_is_refused_too(tmp_path, capsys):
    spec = tmp_path / "grid.yaml"
    spec.write_text("seed: {a: 1, a: 2}\n")
    assert main(["sweep", "--spec", str(spec), "--dry-run"]) == 2
    assert "'a' is given twice" in _one_error_line(capsys, "linattn sweep")


def test_a_spec_without_repeated_keys_still_sweeps_every_value(tmp_path, capsys):
    spec = tmp_path / "grid.yaml"
    spec.write_text("seed: [0, 1]\ninit: [0.1, 0.2]\n")
    assert main(["sweep", "--spec", str(spec), "--dry-run", "--epoch", "10"]) == 0
    assert capsys.readouterr().out.startswith("4 cells (seed 2 × init 2)")
