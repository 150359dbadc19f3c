"""``python -m linattn.companion.runner.notebooks --new NAME`` writes a figure that the runner builds: in a temporary
copy of the repository, a new figure is added through the command alone and built at the quick preset."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NEEDED = ("linattn/", "figures_src/", "book/", "_toc.yml", "CITATION.cff", "pyproject.toml")
NAME = "dummy_trial"
CODE_LINES_MAX = 8  # the notebooks' budget: prose and one call


def _copy(dest: Path) -> Path:
    """The repository's files under ``NEEDED`` (tracked, or new and not ignored) copied into ``dest``."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.splitlines()
    for rel in listed:
        if rel.startswith(NEEDED) and (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    return dest


def _run(repo: Path, *args, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(repo), LINATTN_RUNS_DIR=str(repo / "_runs"))
    return subprocess.run([sys.executable, "-m", *args], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _tree(repo: Path) -> dict:
    return {p.relative_to(repo): p.read_bytes() for p in repo.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def _code_lines(text: str) -> int:
    cells = re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", text, re.S)
    return sum(1 for cell in cells if ":tags: [parameters" not in cell
               for line in cell.splitlines() if line.strip() and not line.startswith(":"))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return _copy(tmp_path_factory.mktemp("repo"))


@pytest.mark.slow
def test_a_new_figure_written_by_the_command_builds_at_the_quick_preset(repo, tmp_path):
    made = _run(repo, "linattn.companion.runner.notebooks", "--new", NAME)
    assert made.returncode == 0, made.stderr
    notebook, module = repo / "figures_src" / f"{NAME}.md", repo / "linattn/companion/figures" / f"{NAME}.py"
    assert notebook.is_file() and module.is_file()
    assert f"- file: book/figures/{NAME}" in (repo / "_toc.yml").read_text()
    assert f"{{ref}}`fig-{NAME}`" in (repo / "book/beyond.md").read_text()
    assert _code_lines(notebook.read_text()) <= CODE_LINES_MAX
    checked = _run(repo, "linattn.companion.runner.notebooks", "--sync")  # its parameters cell is its PRESETS'
    assert checked.returncode == 0 and NAME not in checked.stdout, checked.stdout + checked.stderr
    out = tmp_path / "out"
    built = _run(repo, "linattn", "figures", "--preset", "quick", "--only", NAME, "--jobs", "1", "--out", str(out))
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    rows = json.loads((out / NAME / "numbers.json").read_text())
    assert rows and all(r["key"].startswith("final_loss.seed") and r["reproduced"] > 0 for r in rows)
    assert (out / NAME / f"{NAME}.svg").is_file() and "Cite this figure" in (out / f"{NAME}.ipynb").read_text()


@pytest.mark.parametrize("name, why", [(None, "exists already"), ("9lives", "not a figure name"),
                                       ("Upper", "not a figure name"), ("class", "not a figure name"),
                                       ("common", "module of the figures package")])
def test_a_taken_or_invalid_name_is_refused_in_one_line_and_writes_nothing(repo, name, why):
    name = name or next(p.stem for p in sorted((repo / "figures_src").glob("*.md")))  # None: an existing figure's
    before = _tree(repo)
    refused = _run(repo, "linattn.companion.runner.notebooks", "--new", name, timeout=60)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "error:" in refused.stderr and why in refused.stderr, refused.stderr
    assert _tree(repo) == before
