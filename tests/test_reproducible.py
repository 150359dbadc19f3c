"""Every figure notebook reproduces itself: nbval re-executes an executed book notebook and compares its text outputs
with the book's (:mod:`linattn.companion.reproduce`, ``make check-reproducible``).

The two slow tests need the quick figures ``make test`` builds (``conftest.require_built``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import require_built
from nbval.plugin import get_sanitize_patterns

from linattn.companion import reproduce
from linattn.companion.runner.paths import ENV_RUNS_DIR, preset_root

# Figure 3a trains six seeds; Figure 3b reads its seed-0 run back from the store; Figure 1b trains ATTN_M and an MLP
CHECKED = ("fig01b_attnm_loss", "fig03a_attns_loss", "fig03b_attns_values")
DOCTORED = "fig01b_attnm_loss"


def _check(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "linattn.companion.reproduce", *args], capture_output=True,
                          text=True, timeout=900, env=None if env is None else {**os.environ, **env})


def _quick_root(names) -> Path:
    root = preset_root("quick")
    problems = reproduce.problems(list(names), root)
    if problems:
        require_built("quick figures not ready to re-execute (run `make test` or `linattn figures --preset quick`): "
                      + "; ".join(problems))
    return root


def _files(*paths) -> dict:
    """(size, modification time) of every file under ``paths``: what re-executing must leave as it was."""
    files = [f for path in paths for f in ([path] if path.is_file() else path.rglob("*")) if f.is_file()]
    return {f: (f.stat().st_size, f.stat().st_mtime_ns) for f in files}


def test_the_sanitize_patterns_mask_wall_times_dates_and_paths_and_nothing_else(tmp_path):
    patterns = get_sanitize_patterns(reproduce.sanitize_file(tmp_path / "s.cfg").read_text())  # as nbval reads them
    assert len(patterns) == len(reproduce.SANITIZE)

    def clean(text):
        for rx, rep in patterns:
            text = re.sub(rx, rep, text)
        return text

    assert clean("population GD 1.7 s, P = 1000 12 s, flow 250 ms") == clean("population GD 3.1 s, P = 1000 9 s, "
                                                                          "flow 80 ms")
    assert clean("run 2026-11-24, at 2026-11-24T23:44:46+00:00") == clean("run 2027-01-02, at 2027-01-02T01:02:03Z")
    assert clean("/work/main/.venv/lib/tqdm/auto.py:21: TqdmWarning") == clean("/home/u/env/tqdm/auto.py:21: "
                                                                               "TqdmWarning")
    kept = ("| plateau L(M_1) | 0.7 | 0.7046 | 0.7051 | 5.2e-04 |", "| 5 | 1.026 | 3125 steps | 2 seeds |",
            "κ = 1/D, τ/(λ_d² v₀)", "https://ipywidgets.readthedocs.io/en/stable/user_install.html", "1000-1050")
    for text in kept:
        assert clean(text) == text
    assert clean("| 1.026 |") != clean("| 1.027 |")


@pytest.mark.book
@pytest.mark.slow
def test_quick_notebooks_reproduce_with_every_run_trained_again(tmp_path):
    """Fresh run store: each run is trained again from its seed, and every cell's text output (tables, Markdown,
    glued values, printed lines) equals the book's. The book's figures are left as they were, and the run store in
    use (here a folder of the test's own) is not touched."""
    root = _quick_root(CHECKED)
    book = [p for n in CHECKED for p in (root / n, root / f"{n}.ipynb")]
    before = _files(*book)
    store = tmp_path / "runs"
    proc = _check("--preset", "quick", "--fresh-runs", *CHECKED, env={ENV_RUNS_DIR: str(store)})
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    cells = sum(c.cell_type == "code" for n in CHECKED for c in nbformat.read(root / f"{n}.ipynb", 4).cells)
    assert f"{cells} passed" in proc.stdout  # every code cell ran and was compared
    assert _files(*book) == before
    assert not store.exists()


def _doctor(nb) -> tuple[int, str, str]:
    """Change the last digit of the first decimal in the notebook's last Markdown table; (code cell, old, new)."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i in reversed(range(len(code))):
        for out in code[i].outputs:
            text = out.get("data", {}).get("text/markdown", "")
            m = re.search(r"\| (\d+\.\d+) \|", text)
            if m:
                old = m.group(1)
                new = old[:-1] + str((int(old[-1]) + 1) % 10)
                out["data"]["text/markdown"] = text[:m.start(1)] + new + text[m.end(1):]
                return i, old, new
    raise AssertionError("no Markdown table with a decimal number in the notebook")


@pytest.mark.book
@pytest.mark.slow
def test_a_number_changed_by_hand_fails_naming_the_cell_and_both_values(tmp_path):
    root = _quick_root([DOCTORED])
    shutil.copytree(root / DOCTORED, tmp_path / DOCTORED)  # with its run record, so the copy is current
    nb = nbformat.read(root / f"{DOCTORED}.ipynb", 4)
    cell, old, new = _doctor(nb)
    nbformat.write(nb, tmp_path / f"{DOCTORED}.ipynb")

    proc = _check("--root", str(tmp_path), "--fresh-runs", DOCTORED)
    assert proc.returncode == 1, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert re.search(rf"FAILED \S*{DOCTORED}\.ipynb::Cell {cell}\b", proc.stdout), proc.stdout[-6000:]
    assert "1 failed" in proc.stdout  # only the edited cell
    assert re.search(rf"book: .*\| {re.escape(new)} \|", proc.stdout), proc.stdout[-6000:]
    assert re.search(rf"re-run: .*\| {re.escape(old)} \|", proc.stdout), proc.stdout[-6000:]


def test_a_missing_notebook_is_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        reproduce.main(["--root", str(tmp_path), "no_such_figure"])
    assert stop.value.code == 2
    out = capsys.readouterr()
    assert "error: cannot check" in out.err and "no_such_figure" in out.err
    assert "test session starts" not in out.out
    assert list(tmp_path.iterdir()) == []
