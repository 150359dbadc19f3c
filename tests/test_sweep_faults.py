"""linattn sweep against the probes of issue 45: YAML ranges in spec files (not YAML 1.1's base-60 numbers), an
ambiguous spec value refused naming the file, spec errors naming the file, an unusable --out, a dry run into a closed
pipe, cells stored one by one on slow engines, a Ctrl-C after every cell is stored, two sweeps into one folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from linattn import ConfigError, RunConfig
from linattn.cli import main

pytest.importorskip("dask.distributed")
pytest.importorskip("xarray")

from linattn.companion import sweeps  # noqa: E402

BIN = Path(sys.executable).parent
TINY = dict(model="attnS", head_num=2, in_dim=2, seq_len=8, trainset_size=200, lr=0.05, init=0.1, draws="streams")
TINY_FLAGS = ["--model", "attnS", "--head", "2", "--in_dim", "2", "--seq_len", "8", "--trainset_size", "200",
              "--lr", "0.05", "--init", "0.1", "--draws", "streams", "--epoch", "10"]


def _dry_run_labels(capsys, tmp_path, yaml_text: str) -> list[str]:
    spec = tmp_path / "grid.yaml"
    spec.write_text(yaml_text)
    assert main(["sweep", *TINY_FLAGS, "--spec", str(spec), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    return [line.split("  ")[1].strip() for line in lines[1:]]


@pytest.mark.parametrize("text, key, values", [
    ("seed: 1:6", "seed", [1, 2, 3, 4, 5]),  # YAML 1.1: the base-60 number 66
    ("seed: 2:8", "seed", [2, 3, 4, 5, 6, 7]),  # 128
    ("seed: 1:9:2", "seed", [1, 3, 5, 7]),  # 4142
    ("head_num: 1:4", "head_num", [1, 2, 3]),  # 64 heads
    ("head: 12:14", "head_num", [12, 13]),
    ("seed: 0:3", "seed", [0, 1, 2]),
    ("seed: '1:3'", "seed", [1, 2]),
    ("seed: [1, 7]\ninit: [1e-2, 0.5]", None, None),
])
def test_a_range_in_a_spec_file_is_a_range(capsys, tmp_path, text, key, values):
    labels = _dry_run_labels(capsys, tmp_path, text + "\n")
    if key is None:
        assert labels == [f"seed={s}, init={i}" for s in (1, 7) for i in ("0.01", "0.5")]
    else:
        assert labels == [f"{key}={v}" for v in values]


@pytest.mark.parametrize("text, value, yaml11", [
    ("seed: [010, 2]", "010", "8"),  # YAML 1.1: octal
    ("seed: 0x10", "0x10", "16"),
    ("seed: [1_0]", "1_0", "10"),
    ("init: 1:30.5", "1:30.5", "90.5"),  # base 60
])
def test_an_ambiguous_spec_value_is_refused_naming_the_file(capsys, tmp_path, text, value, yaml11):
    spec = tmp_path / "grid.yaml"
    spec.write_text("lr: [0.05]\n" + text + "\n")
    out = tmp_path / "sweep"
    assert main(["sweep", *TINY_FLAGS, "--spec", str(spec), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"linattn sweep: error: --spec {spec}: line 2: ") and err.count("\n") == 1, err
    assert f"{value} is ambiguous" in err and f"YAML 1.1 reads it as {yaml11}" in err
    assert not out.exists()


@pytest.mark.parametrize("text, says", [
    ("head: 0:x", "head: 0:x: START:STOP[:STEP] takes integers"),
    ("colour: [1, 2]", "colour: not a setting that can be swept"),
    ("seed: [a, b]", "seed: expected an integer, got 'a'"),
    ("seed: 5:2", "seed: 5:2: the range is empty"),
    ("seed: [1, 1]", "seed: a value is listed twice"),
    ("seed: [1]\nhead_num: [2]\nhead: [3]", "head: head_num is swept twice"),
])
def test_a_spec_file_error_names_the_spec_file(capsys, tmp_path, text, says):
    spec = tmp_path / "grid.yaml"
    spec.write_text(text + "\n")
    assert main(["sweep", *TINY_FLAGS, "--spec", str(spec), "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"linattn sweep: error: --spec {spec}: {says}"), err
    assert "--grid" not in err and err.count("\n") == 1
    assert not (tmp_path / "a").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc (Linux)")
def test_an_unusable_out_folder_is_one_line_and_exit_2(capsys, tmp_path):
    assert main(["sweep", *TINY_FLAGS, "--grid", "seed=0,1", "--out", "/proc/x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("linattn sweep: error: --out /proc/x cannot be created in /proc") and err.count("\n") == 1
    with pytest.raises(ConfigError, match="out /proc/x cannot be created") as caught:
        sweeps.sweep(RunConfig(**TINY, epoch=10), {"seed": [0]}, out="/proc/x")
    assert caught.value.field == "out"


def test_a_dry_run_into_a_closed_pipe_ends_quietly(tmp_path):
    """``linattn sweep --dry-run | head -1``: the reader closes the pipe after one line; no traceback."""
    cmd = [str(BIN / "linattn"), "sweep", *TINY_FLAGS, "--grid", "seed=0:400", "--grid", "init=0.1,0.2,0.3",
           "--dry-run"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 141 and first.startswith(b"1200 cells")
    assert err == "", err
