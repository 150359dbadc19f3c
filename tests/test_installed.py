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

from linattn.companion import runstore
from linattn.companion.runner import notebooks, paths
from linattn.objectives import softmax as se

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
        # the softmax engine's C kernel, compiled where it runs
        assert z.read("linattn/objectives/softmax_kernel.c") == se.KERNEL_SOURCE.read_bytes()

    site, cwd = tmp_path / "site", tmp_path / "work"
    cwd.mkdir()
    installed = subprocess.run(pip + ["install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr

    # the installed copy, not the checkout, is imported; it knows it is not a checkout and writes under the cwd
    probe = _run([sys.executable, "-c", "import linattn\nfrom linattn.companion import runstore\n"
                  "from linattn.companion.runner import paths\n"
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


# ── a real, non-editable install into a new virtual environment ──────────────────────────────────────────────────

def _distribution_closure(names: list[str]) -> dict:
    """name → importlib.metadata distribution of ``names`` and everything they require (unconditionally or on
    this platform), as installed in the test's own environment."""
    from importlib import metadata

    from packaging.requirements import Requirement

    found, todo = {}, list(names)
    while todo:
        dist = metadata.distribution(todo.pop())
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in found:
            continue
        found[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return found


def _venv_with(tmp_path: Path, name: str, requirements: list[str]) -> Path:
    """A new virtual environment whose only third-party packages are ``requirements`` and what they need: links to
    the test environment's installed copies in one folder that a ``.pth`` file puts on ``sys.path`` (so no package
    is downloaded, and a package the requirements do not name is absent). Returns its python."""
    venv = tmp_path / name
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    deps = tmp_path / f"{name}-deps"
    deps.mkdir()
    for dist in _distribution_closure(requirements).values():
        for top in {Path(str(f)).parts[0] for f in dist.files or []} - {".."}:
            target = Path(dist.locate_file(top))
            if target.exists() and not (deps / top).exists() and not top.endswith(".pth"):
                (deps / top).symlink_to(target)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "linattn-test-deps.pth").write_text(str(deps) + "\n")
    return python


def _built_wheel(tmp_path: Path) -> Path:
    source = tmp_path / "checkout"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*LEFT_OUT))
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(wheels), "."], cwd=source, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("linattn-*.whl")
    return wheel


@pytest.mark.slow
def test_the_figures_extra_runs_a_glued_figure_and_a_plain_install_names_the_extra(tmp_path):
    """``pip install "linattn[figures]"`` (non-editable, into a new environment holding only what the extra
    declares) runs a figure that hands numbers to its prose with myst-nb's glue, from an empty folder; a plain
    install answers ``linattn figures --list`` with one line naming the extra and exit code 2."""
    from linattn.companion import extras

    wheel = _built_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:  # what the wheel declares, not what this environment has installed
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        declared = [line.partition(":")[2].strip() for line in z.read(meta).decode().splitlines()
                    if line.startswith("Requires-Dist:")]
    core = extras.requirements(None, declared=declared)
    pip = ["-m", "pip", "--disable-pip-version-check", "--no-input"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", paths.ENV_RUNS_DIR, "LINATTN_FIGURES_DIR",
                                                             "VIRTUAL_ENV", "JUPYTER_PATH")}

    plain = _venv_with(tmp_path, "plain", core)
    installed = subprocess.run([sys.executable, *pip, "--python", str(plain), "install", "--no-index", "-q",
                                str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    work = tmp_path / "work-plain"
    work.mkdir()
    listed = subprocess.run([str(plain.parent / "linattn"), "figures", "--list"], cwd=work, env=env,
                            capture_output=True, text=True, timeout=300)
    assert listed.returncode == 2, listed.stderr
    assert listed.stderr.startswith("linattn figures: error: ") and len(listed.stderr.splitlines()) == 1
    assert 'pip install "linattn[figures]"' in listed.stderr and "jupytext" in listed.stderr
    assert list(work.iterdir()) == []

    full = _venv_with(tmp_path, "figures", core + extras.requirements("figures", declared=declared))
    installed = subprocess.run([sys.executable, *pip, "--python", str(full), "install", "--no-index", "-q",
                                f"linattn[figures] @ {wheel.as_uri()}"], capture_output=True, text=True,
                               timeout=300)
    assert installed.returncode == 0, installed.stderr
    work = tmp_path / "work"
    work.mkdir()
    ran = subprocess.run([str(full.parent / "linattn"), "figures", "--preset", "quick", "--only",
                          "fig01b_attnm_loss", "--out", "figs", "--jobs", "1"], cwd=work, env=env,
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    import nbformat

    executed = nbformat.read(work / "figs" / "fig01b_attnm_loss.ipynb", as_version=4)
    outputs = [o for c in executed.cells for o in c.get("outputs", [])]
    assert any("application/papermill.record/text/plain" in o.get("data", {}) for o in outputs)  # glued values
    assert (work / "figs" / "fig01b_attnm_loss" / "fig01b_attnm_loss.png").is_file()
    # the run store is where the README says: under the working directory, not under --out
    assert (work / "_build" / "runs" / "trainings.jsonl").is_file() and not (work / "figs" / "_build").exists()
