"""linattn works as an installed copy (``pip install .``), not only from a checkout: the figure notebooks travel in
the wheel, ``linattn figures`` finds them there, writes under the working directory (never site-packages), and the
book builder says that it needs a checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from linattn.companion import notebooks, paths, runstore

ROOT = Path(__file__).resolve().parents[1]
# what a build must not see: the environment, build outputs, caches (the copy holds everything else of the checkout)
LEFT_OUT = (".venv", ".git", "_build", "build", "dist", "runs", "__pycache__", "*.egg-info", ".pytest_cache")


def test_a_checkout_reads_and_writes_in_the_repository(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the working directory does not matter in a checkout
    monkeypatch.delenv(paths.ENV_RUNS_DIR, raising=False)
    assert paths.IS_CHECKOUT and paths.SRC_DIR == ROOT / "figures_src"
    assert notebooks.discover() == {p.stem: p for p in sorted((ROOT / "figures_src").glob("*.md"))}
    assert paths.preset_root("quick") == ROOT / "_build" / "figures" / "quick"
    assert runstore.default_root() == ROOT / "_build" / "runs"


def _run(cmd, cwd, site):
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop(paths.ENV_RUNS_DIR, None)
    env.pop("LINATTN_FIGURES_DIR", None)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_wheel_carries_the_notebooks_and_runs_outside_a_checkout(tmp_path):
    source = tmp_path / "checkout"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*LEFT_OUT))
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    built = subprocess.run(pip + ["wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), "."],
                           cwd=source, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("linattn-*.whl")
    names = sorted(notebooks.discover())
    assert len(names) > 10
    with zipfile.ZipFile(wheel) as z:
        inside = {n for n in z.namelist() if n.startswith("linattn/figures_src/")}
        assert inside == {f"linattn/figures_src/{n}.md" for n in names}
        assert z.read(f"linattn/figures_src/{names[0]}.md") == (ROOT / "figures_src" / f"{names[0]}.md").read_bytes()

    site, cwd = tmp_path / "site", tmp_path / "work"
    cwd.mkdir()
    installed = subprocess.run(pip + ["install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr

    # the installed copy, not the checkout, is imported; it knows it is not a checkout and writes under the cwd
    probe = _run([sys.executable, "-c", "import linattn\nfrom linattn.companion import paths, runstore\n"
                  "print(linattn.__file__); print(paths.IS_CHECKOUT); print(paths.preset_root('quick'))\n"
                  "print(runstore.default_root())"], cwd, site)
    assert probe.returncode == 0, probe.stderr
    file, checkout, figures_root, runs_root = probe.stdout.splitlines()
    assert Path(file).resolve() == (site / "linattn" / "__init__.py").resolve()
    assert checkout == "False"
    assert Path(figures_root).resolve() == (cwd / "_build" / "figures" / "quick").resolve()
    assert Path(runs_root).resolve() == (cwd / "_build" / "runs").resolve()

    listed = _run([sys.executable, "-m", "linattn", "figures", "--list", "--preset", "quick"], cwd, site)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == names
    assert all(line.split()[1] == "missing" for line in listed.stdout.splitlines())

    inside_package = site / "linattn" / "out"
    refused = _run([sys.executable, "-m", "linattn", "figures", "--only", names[0], "--out", str(inside_package)],
                   cwd, site)
    assert refused.returncode == 2 and refused.stderr.startswith("linattn figures: error: ")
    assert len(refused.stderr.splitlines()) == 1 and not inside_package.exists()

    book = _run([sys.executable, "-m", "linattn.companion.book", "build", "--preset", "quick"], cwd, site)
    assert book.returncode == 2 and len(book.stderr.splitlines()) == 1, book.stderr
    assert "needs a checkout of the repository" in book.stderr
    assert list(cwd.iterdir()) == []  # none of it wrote anything
