import csv
import errno
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from linattn import records as provenance
from linattn.cli import build_parser, config_from_args, main

FAST = ["--in_dim", "3", "--seq_len", "6", "--trainset_size", "50", "--epoch", "5", "--quiet"]


def test_every_reference_flag_parses_with_its_meaning():
    args = build_parser().parse_args([
        "train", "--model", "attnS", "--head", "5", "--KQ_dim", "2", "--in_dim", "6", "--out_dim", "1",
        "--seq_len", "17", "--trainset_size", "inf", "--testset_size", "0", "--icl", "1", "--white_cov",
        "--vary_len", "--softmax", "--init", "1e-3", "--lr", "0.02", "--epoch", "7", "--seed", "3",
        "--track_value", "--show", "--out", "x", "--dtype", "float32", "--device", "cpu", "--normalize", "mean",
        "--engine", "autograd", "--save-data", "--init_scheme", "dec2024", "--draws", "streams",
        "--population_samples", "1000",
        "--chunk", "64", "--threads", "2", "--dynamics", "flow"])
    cfg = config_from_args(args)
    assert (cfg.model, cfg.head_num, cfg.rank, cfg.in_dim, cfg.seq_len) == ("attnS", 5, 2, 6, 17)
    assert cfg.trainset_size is None and cfg.white_cov and cfg.vary_len and cfg.softmax and cfg.track_value
    assert (cfg.init, cfg.lr, cfg.epoch, cfg.seed) == (1e-3, 0.02, 7, 3)
    assert (cfg.dtype, cfg.device, cfg.normalize, cfg.engine, cfg.init_scheme, cfg.draws) == (
        "float32", "cpu", "mean", "autograd", "dec2024", "streams")
    assert args.show and args.save_data and str(args.out) == "x" and args.threads == 2 and cfg.dynamics == "flow"
    # the reference's long names and argparse prefixes work too
    args = build_parser().parse_args(["train", "--head_num", "4", "--rank", "3", "--cubic_feat", "--model", "mlp",
                                      "--trainset", "10"])
    cfg = config_from_args(args)
    assert (cfg.head_num, cfg.rank, cfg.cubic_feat, cfg.trainset_size) == (4, 3, True, 10)


def test_reference_defaults():
    cfg = config_from_args(build_parser().parse_args(["train"]))
    assert (cfg.epoch, cfg.lr, cfg.seed, cfg.icl, cfg.trainset_size, cfg.testset_size) == (6001, 1e-3, 10, 1, 5000, 0)
    assert (cfg.seq_len, cfg.in_dim, cfg.model, cfg.rank, cfg.head_num, cfg.init) == (32, 4, "attnM", 1, 1, 0.01)
    assert config_from_args(build_parser().parse_args(["train", "--out_dim", "1"])) == cfg  # the reference's flag
    # the authors' current code: its initialisation era and its random draws
    assert cfg.normalize == "sum" and cfg.init_scheme == "dec2025" and cfg.draws == "reference"
    assert cfg.resolved_engine() == "exact"


BAD = [
    (["--head_num", "0"], "--head_num must be a positive integer, got 0"),
    (["--in_dim", "-1"], "--in_dim must be a positive"),
    (["--trainset_size", "0"], "--trainset_size must be a positive integer (--trainset_size inf: the population"),
    (["--testset_size", "-3"], "--testset_size must be an integer >= 0"),
    (["--epoch", "0"], "--epoch must be a positive"),
    (["--seq_len", "1"], "--seq_len must be at least 2"),
    (["--rank", "4"], "--rank must be an integer between 1 and --in_dim = 3, got 4"),
    (["--rank", "0"], "--rank must be an integer between 1"),
    (["--icl", "1.5"], "--icl must lie in [0, 1]"),
    (["--icl", "-0.1"], "--icl must lie in [0, 1]"),
    (["--lr", "0"], "--lr must be a positive"),
    (["--lr", "-1"], "--lr must be a positive"),
    (["--init", "0"], "--init must be a positive"),
    (["--out_dim", "2"], "argument --out_dim: invalid choice: 2"),
    (["--cubic_feat"], "--cubic_feat only applies to --model mlp"),
    (["--model", "mlp"], "--model mlp needs --cubic_feat (the MLP"),
    (["--softmax", "--model", "mlp", "--cubic_feat"], "--softmax applies to the attention models, not to --model mlp"),
    (["--spectrum", "1,2,-1", "--draws", "streams"], "--spectrum values must be positive"),
    (["--spectrum", "1,2,3"], "--spectrum has no reference draws (the authors' code has no such option); add --draws "
                            "streams"),
    (["--spectrum", "1,2", "--draws", "streams"], "--spectrum has 2 values, expected --in_dim = 3"),
    (["--spectrum", "1,2,3", "--white_cov", "--draws", "streams"], "--spectrum and --white_cov are mutually exclusive"),
    (["--normalize", "mean"], "--normalize mean has no reference draws"),
    (["--population_samples", "5", "--trainset_size", "inf"], "--trainset_size inf has no reference draws"),
    (["--population_samples", "-1"], "--population_samples must be an integer >= 0"),
    (["--init_scheme", "dec2024", "--icl", "0.5"],
     "--init_scheme dec2024 with --draws reference needs --icl 1 (the Dec 2024 code had no --icl option)"),
    (["--draws", "numpy"], "invalid choice"),
    (["--model", "nope"], "invalid choice"),
    (["--in_dim", "x"], "invalid int value"),
    (["--softmax", "--engine", "exact"], "--engine 'exact' covers linear attention only; --softmax needs --engine "
                                         "'autograd'"),
    (["--engine", "softmax"], "--engine 'softmax' covers softmax attention only (set --softmax, or use --engine "
                              "'exact' or 'autograd')"),
    (["--trainset_size", "inf"], "--trainset_size inf has no reference draws"),
    (["--trainset_size", "inf", "--icl", "0.5", "--draws", "streams", "--model", "attnS"],
     "the population engine (--trainset_size inf) supports --icl < 1 only for linear --model attnM"),
    (["--trainset_size", "inf", "--testset_size", "5", "--white_cov"], "use --testset_size 0"),
    (["--trainset_size", "inf", "--engine", "exact", "--draws", "streams"],
     "--trainset_size inf (the population objective) needs --engine 'population'"),
    (["--lr", "nan"], "expected a finite number"),
    (["--threads", "0"], "--threads must be a positive integer"),
    (["--seed", "-1"], "--seed must be an integer in [0, 2^32), got -1"),
    (["--trainset_size", "1"], "--trainset_size 1 is refused: the inputs are centred"),
    (["--testset_size", "1"], "--testset_size 1 is refused"),
    (["--device", "gpu"], "--device must be 'auto', 'cpu' or 'cuda[:k]'"),
    (["--max-memory", "lots"], "argument --max-memory: expected a size such as 8G or 500M, got 'lots'"),
    (["--max-memory", "2K"], "more than --max-memory: 2 KiB (the limit given); use a smaller --trainset_size"),
    (["--seq_len", "100000000"], "(memory available now); use a smaller --trainset_size, --testset_size or --seq_len"),
    (["--trainset_size", "100000000000"], "(largest part: drawing the largest set"),
]


@pytest.mark.parametrize("flags,message", BAD, ids=[" ".join(f) for f, _ in BAD])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(flags, message, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", *FAST, "--out", str(out), *flags])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert err.startswith("linattn train: error: ")
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary folder either


def test_unwritable_out_exits_2(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["train", *FAST, "--out", str(blocker / "run")]) == 2
    err = capsys.readouterr().err
    assert "cannot be written" in err and len(err.strip().splitlines()) == 1


def test_non_spd_covariance_matrix_is_refused():
    from linattn.config import ConfigError, RunConfig

    with pytest.raises(ConfigError, match="positive definite"):
        RunConfig(in_dim=2, cov_matrix=[[1.0, 2.0], [2.0, 1.0]], draws="streams").validate()


def test_diverging_run_exits_1_and_leaves_no_folder(tmp_path, capsys):
    out = tmp_path / "runs" / "run"
    assert main(["train", *FAST, "--init", "1", "--lr", "1e3", "--epoch", "50", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "smaller learning rate" in err and err.startswith("linattn train: error: ")
    assert list(tmp_path.iterdir()) == []  # neither the folder, its temporary sibling, nor the parent made for it


def test_divergence_hint_suggests_a_learning_rate_that_trains(tmp_path, capsys):
    out = tmp_path / "run"
    common = ["train", *FAST, "--init", "1", "--out", str(out)]
    assert main([*common, "--lr", "1e3", "--epoch", "50"]) == 1
    err = capsys.readouterr().err
    lr, steps = re.search(r"--lr (\S+): halved \d+ time\(s\).* over a (\d+)-step trial", err).groups()
    assert float(lr) < 1e3
    # the promise, checked independently: that many steps at that rate stay finite and lower the loss
    assert main([*common, "--lr", lr, "--epoch", steps]) == 0
    _, table = read_csv(out / "loss.csv")
    assert np.all(np.isfinite(table[:, 1])) and table[-1, 1] < table[0, 1]


def _crash_while_writing(monkeypatch, error):
    """Make the run's writer write half a file into its folder and then raise ``error(folder)``."""
    def crash(result, out_dir, **kwargs):
        (Path(out_dir) / "loss.csv").write_text("half written")
        raise error(Path(out_dir))

    monkeypatch.setattr(importlib.import_module("linattn.training.result"), "write_outputs", crash)


def test_an_interrupted_write_leaves_no_folder(tmp_path, monkeypatch, capsys):
    _crash_while_writing(monkeypatch, lambda folder: KeyboardInterrupt())
    assert main(["train", *FAST, "--out", str(tmp_path / "runs" / "run")]) == 130
    assert list(tmp_path.iterdir()) == []  # nor the parent folder it made
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("linattn train: interrupted by SIGINT;") and "nothing was written" in line


def test_a_full_disk_is_one_line_naming_the_file_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    full = lambda folder: OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder / "weights.npz"))  # noqa: E731
    _crash_while_writing(monkeypatch, full)
    out = tmp_path / "runs" / "run"
    assert main(["train", *FAST, "--out", str(out)]) == 1
    assert list(tmp_path.iterdir()) == []
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"linattn train: error: cannot write {out / 'weights.npz'}: No space left on device; nothing was "
                    f"written ({out} was not created)")


def test_a_failed_write_over_an_earlier_run_keeps_it(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "old.txt").write_text("keep me")
    _crash_while_writing(monkeypatch, lambda folder: OSError(errno.EIO, "I/O error"))
    assert main(["train", *FAST, "--out", str(out), "--overwrite"]) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["run"] and (out / "old.txt").read_text() == "keep me"
    assert capsys.readouterr().err.strip().endswith(f"cannot write {out}: I/O error; nothing was written ({out} is "
                                                    "unchanged)")


def test_non_empty_out_is_refused_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "old.txt").write_text("keep me")
    assert main(["train", *FAST, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("linattn train: error: --out") and "--overwrite" in err
    assert sorted(p.name for p in out.iterdir()) == ["old.txt"]
    # a failing run with --overwrite leaves the old folder as it was
    assert main(["train", *FAST, "--init", "1", "--lr", "1e3", "--out", str(out), "--overwrite"]) == 1
    assert sorted(p.name for p in out.iterdir()) == ["old.txt"] and list(tmp_path.iterdir()) == [out]
    assert main(["train", *FAST, "--out", str(out), "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["init.npz", "loss.csv", "run.json", "weights.npz"]
    assert list(tmp_path.iterdir()) == [out]
    # an existing empty folder is simply filled
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["train", *FAST, "--out", str(empty)]) == 0
    assert (empty / "loss.csv").exists()


def test_show_without_a_display_saves_loss_png(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    out = tmp_path / "run"
    assert main(["train", *FAST, "--show", "--out", str(out)]) == 0
    png = out / "loss.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(png) in capsys.readouterr().out


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the refusal without CUDA")
def test_unavailable_device_exits_2(tmp_path, capsys):
    assert main(["train", *FAST, "--device", "cuda", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("linattn train: error: --device cuda") and "no CUDA device" in err
    assert list(tmp_path.iterdir()) == []


def test_error_prefix_names_the_subcommand(capsys):
    assert main(["figures", "--preset", "nope"]) == 2
    assert capsys.readouterr().err.startswith("linattn figures: error: argument --preset")
    assert main(["nope"]) == 2
    assert capsys.readouterr().err.startswith("linattn: error: ")


def test_atomic_write_leaves_nothing_half_written(tmp_path):
    target = tmp_path / "loss.csv"
    target.write_text("old\n")

    def crash(f):
        f.write("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        provenance.atomic_write(target, crash)
    assert target.read_text() == "old\n"
    assert list(tmp_path.iterdir()) == [target]


def read_csv(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    return rows[0], np.array(rows[1:], dtype=float)


@pytest.mark.parametrize("model,extra", [
    ("attnM", []), ("attnS", ["--rank", "2"]), ("mlp", ["--cubic_feat"])])
def test_output_files_and_saved_data_reproduce_the_first_loss(model, extra, tmp_path):
    out = tmp_path / "run"
    assert main(["train", *FAST, "--model", model, "--head", "2", *extra, "--testset_size", "7", "--track_value",
                 "--save-data", "--out", str(out)]) == 0
    header, table = read_csv(out / "loss.csv")
    assert header == ["step", "train_loss", "test_iwl", "test_icl", "value_0", "value_1"]
    assert table.shape == (5, 6) and np.array_equal(table[:, 0], np.arange(5))
    info = json.loads((out / "run.json").read_text())
    assert info["engine"] == "exact" and info["settings"]["model"] == model and info["seed"] == 10
    for key in ("linattn_version", "git_commit", "wall_time_s", "dtype", "libraries"):
        assert key in info
    d, w = np.load(out / "data.npz"), np.load(out / "init.npz")
    X, y = d["X"].astype(np.float64), d["y"].astype(np.float64)  # the reference's draws are float32
    w = {k: v.astype(np.float64) for k, v in w.items()}
    assert X.shape == (50, 6, 4) and y.shape == (50,) and np.all(X[:, -1, -1] == 0)
    # anyone can recompute the first recorded loss from the two files with the formulas
    S = np.einsum("pmb,pmc->pbc", X, X)
    xq = X[:, -1]
    if model == "mlp":
        assert w["W1"].shape == (2, 9) and w["w2"].shape == (2,)
        b = np.einsum("pn,pnd->pd", X[:, :-1, -1], X[:, :-1, :-1])
        z = np.einsum("pi,pj->pij", b, xq[:, :-1]).reshape(50, -1)
        yhat = z @ w["W1"].T @ w["w2"]
    else:
        if model == "attnM":
            assert w["W_KQ"].shape == (2, 4, 4)
            W_KQ = w["W_KQ"]
        else:
            assert w["W_Q"].shape == w["W_K"].shape == (2, 2, 4)
            W_KQ = np.einsum("hra,hrb->hab", w["W_Q"], w["W_K"])
        assert w["W_V"].shape == (2, 4, 4)
        yhat = np.einsum("pa,hab,pbc,hc->p", xq, W_KQ, S, w["W_V"][:, -1])
    assert np.isclose(np.mean((y - yhat) ** 2), table[0, 1], rtol=1e-8)


def test_default_out_folder_differs_by_settings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *FAST]) == 0
    assert main(["train", *FAST, "--lr", "0.002"]) == 0
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(runs) == 2 and all(r.startswith("attnM_head1_D3_R1_P50_N6_seed10_") for r in runs)


@pytest.mark.slow  # a fresh Python process
def test_python_dash_m_works(tmp_path):
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "linattn", "train", *FAST, "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert (out / "loss.csv").exists()


@pytest.mark.parametrize("second_seed", ["1", "2"])
def test_two_trains_into_one_out_wait_for_each_other_and_say_so_truly(tmp_path, second_seed):
    """Issue 45, finding 7: two `linattn train` into one --out at once both trained, and the loser exited 1 saying
    "Directory not empty; nothing was written (… was not created)", which was false. Now one --out has one writer at
    a time: both runs start while a third holder (this test) has the lock, each says it waits; one trains, and the
    other, finding the same run there, keeps it (exit 0, nothing trained) or, finding another, is refused (exit 2).
    Nothing is left beside the folder: no lock file, no temporary folder."""
    out = tmp_path / "runs" / "run"
    out.parent.mkdir()
    flags = [f for f in FAST if f != "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    procs, logs = [], []
    with provenance.output_lock(out):
        for i, seed in enumerate(("1", second_seed)):
            logs.append((tmp_path / f"out{i}", tmp_path / f"err{i}"))
            with open(logs[-1][0], "w") as so, open(logs[-1][1], "w") as se:
                procs.append(subprocess.Popen([sys.executable, "-m", "linattn", "train", *flags, "--seed", seed,
                                               "--out", str(out)], stdout=so, stderr=se, env=env))
        for p, (_, err) in zip(procs, logs):
            for _ in range(600):
                if "waiting" in err.read_text() or p.poll() is not None:
                    break
                subprocess.run(["sleep", "0.1"])
            assert err.read_text() == f"linattn train: waiting: PID {os.getpid()} is writing {out}\n"
    codes = [p.wait(120) for p in procs]
    said = [o.read_text() for o, _ in logs]
    trained = [i for i in (0, 1) if "engine, 5 steps in" in said[i]]
    assert len(trained) == 1, said
    other = 1 - trained[0]
    assert codes[trained[0]] == 0
    if second_seed == "1":
        assert codes[other] == 0
        assert said[other] == (f"linattn train: {out} was written meanwhile by another linattn train of the same run; "
                               "kept it (nothing trained)\n")
    else:
        assert codes[other] == 2 and said[other] == ""
        assert logs[other][1].read_text().splitlines()[-1] == (
            f"linattn train: error: --out {out} was written by another process while this run waited for it, and is "
            "not empty; pass --overwrite to replace it (it is replaced only once the new run has succeeded)")
    assert [p.name for p in out.parent.iterdir()] == ["run"]
    assert sorted(p.name for p in out.iterdir()) == ["init.npz", "loss.csv", "run.json", "weights.npz"]


def test_a_full_disk_names_the_file_not_the_folder(tmp_path, capsys):
    """Issue 45, finding 12: on a real full disk (a 1 MiB tmpfs filled to its last byte) the failed write named
    --out, the folder, while the README says the file: a full disk's write fails without a file name, and the
    temporary file's name is not the reader's."""
    from disks import fill, tmpfs

    with tmpfs(tmp_path / "disk") as disk:
        fill(disk)
        out = disk / "runs" / "run"
        assert main(["train", *FAST, "--out", str(out)]) == 1
        (line,) = capsys.readouterr().err.splitlines()
        named = re.fullmatch(r"linattn train: error: cannot write (\S+): No space left on device; nothing was "
                             rf"written \({re.escape(str(out))} was not created\)", line)
        assert named, line
        assert Path(named[1]).parent == out and Path(named[1]).name in {"loss.csv", "init.npz", "weights.npz",
                                                                        "run.json"}
        assert [p.name for p in disk.iterdir()] == ["filler"]
