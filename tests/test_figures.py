"""Every figure notebook of figures_src/ executes at the quick preset through the runner and writes its files.

The whole quick set runs ONCE per session (module-scoped fixture, ``--jobs 2``) into a temporary root; the tests are
parametrised over whatever notebooks exist, so new figures are covered automatically.
"""

from __future__ import annotations

import json
import shutil
import time

import nbformat
import pytest

from linattn import figures
from linattn.cli import main

NAMES = sorted(figures.discover())
OUTPUTS = ("{n}.png", "{n}.svg", "{n}.pdf", "{n}.csv", "provenance.json", "numbers.json")


@pytest.fixture(scope="module")
def quick_set(tmp_path_factory):
    root = tmp_path_factory.mktemp("figures")
    src = tmp_path_factory.mktemp("figures_src")  # a snapshot: edits to figures_src/ meanwhile change nothing
    for name, path in figures.discover().items():
        shutil.copy2(path, src / path.name)
    start = time.perf_counter()
    # a fixed source hash, so that edits to the package while the suite runs cannot invalidate the cache test
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(figures, "source_hash", lambda package=None: "fixed-for-this-session")
        code = main(["figures", "--preset", "quick", "--jobs", "2", "--out", str(root), "--src", str(src)])
        seconds = time.perf_counter() - start
        yield root, src, code, seconds


def test_some_notebooks_exist():
    assert NAMES, "figures_src/ holds no notebooks"


def test_quick_set_succeeds(quick_set):
    root, _, code, seconds = quick_set
    failed = sorted(p.name for p in root.glob("*.failed.ipynb"))
    assert code == 0 and not failed, f"failed figures: {failed}"
    print(f"quick preset, {len(NAMES)} figures, --jobs 2: {seconds:.1f} s")


@pytest.mark.parametrize("name", NAMES)
def test_figure_files(quick_set, name):
    root, _, _, _ = quick_set
    for pattern in OUTPUTS:
        path = root / name / pattern.format(n=name)
        assert path.is_file() and path.stat().st_size > 0, f"{name}: missing or empty {path.name}"
    nb = nbformat.read(root / f"{name}.ipynb", as_version=4)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert nb.cells[-1].cell_type == "markdown" and "Cite this figure" in nb.cells[-1].source
    # the numbered figure: one directive, in a markdown cell (figure-first pages put it right after the lead)
    assert sum(f":name: fig-{name}" in c.source for c in nb.cells if c.cell_type == "markdown") == 1
    rows = json.loads((root / name / "numbers.json").read_text())
    assert rows and all(set(r) == {"quantity", "paper", "theory", "reproduced", "abs_error"} for r in rows)
    prov = json.loads((root / name / "provenance.json").read_text())
    assert prov["figure"] == name and prov["parameters"] and prov["wall_time_s"] >= 0
    # injected parameters reached the notebook: it wrote into the temporary root, at the quick preset
    assert (root / name / figures.CACHE_KEY).is_file()


def test_second_run_is_cached(quick_set):
    root, src, _, _ = quick_set
    results = figures.run_figures(preset="quick", out=root, src=src, jobs=2, progress=False)
    assert {r.status for r in results} == {"cached"}
