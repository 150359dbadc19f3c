"""Every figure notebook of figures_src/ executed at the quick preset, as ``make test`` leaves them.

``make test`` runs the quick figures once (``linattn figures --preset quick`` into ``_build/figures/quick``) and
builds the quick book from them; these tests read those outputs instead of executing the notebooks a second time
(the runner's own behaviour — caching, failures, reports, overrides — is tested on tiny notebooks in test_runner.py).
They skip when the quick figures have not been made, and fail in CI (``LINATTN_REQUIRE_BROWSER=1``).
"""

from __future__ import annotations

import json

import nbformat
import pytest

from linattn import figures
from test_book import _skip_or_fail

NAMES = sorted(figures.discover())
OUTPUTS = ("{n}.png", "{n}.svg", "{n}.pdf", "{n}.csv", "provenance.json", "numbers.json", "{n}.ipynb")
ROOT = figures.preset_root("quick")
# Figures whose rows compare against the linear-attention theory only for reference (softmax has no theory).
NO_THEORY = ("fig05_softmax",)
PLATEAU_TOLERANCE = 0.03  # |loss on a plateau (or at the end) − the theory's L(M_m)|, at the quick preset's P


@pytest.fixture(scope="module")
def quick_set():
    missing = [n for n in NAMES if not (ROOT / f"{n}.ipynb").is_file()]
    if missing:
        _skip_or_fail(f"the quick figures are not made ({', '.join(missing)} missing in {ROOT}): run `make test`, "
                      f"or `linattn figures --preset quick`")
    return ROOT


def test_some_notebooks_exist():
    assert NAMES, "figures_src/ holds no notebooks"


def test_quick_set_succeeded(quick_set):
    failed = sorted(p.name for p in quick_set.glob("*.failed.ipynb"))
    assert not failed, f"failed figures: {failed}"


@pytest.mark.parametrize("name", NAMES)
def test_figure_files(quick_set, name):
    root = quick_set
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
    # injected parameters reached the notebook: it wrote into the quick root, and the page says so
    assert (root / name / figures.CACHE_KEY).is_file() and figures.run_info(root, name)["preset"] == "quick"
    assert "quick preset" in nb.cells[1].source


@pytest.mark.parametrize("name", [n for n in NAMES if n not in NO_THEORY and n != "beyond_error_table"])
def test_plateaus_and_final_losses_match_the_theory(quick_set, name):
    rows = json.loads((quick_set / name / "numbers.json").read_text())
    checked = [r for r in rows if isinstance(r["theory"], float) and isinstance(r["reproduced"], float)
               and any(w in r["quantity"] for w in ("plateau L(M_", "plateau loss", "final loss"))]
    far = [(r["quantity"], r["theory"], r["reproduced"]) for r in checked
           if abs(r["reproduced"] - r["theory"]) > PLATEAU_TOLERANCE]
    assert not far, f"{name}: further than {PLATEAU_TOLERANCE} from the theory: {far}"


def test_every_quick_figure_is_current(quick_set):
    """Right after `make test` made them, every figure's cache key matches: a second run would skip them all."""
    states = {name: state for name, state, _ in figures.list_figures(preset="quick")}
    stale = sorted(n for n, s in states.items() if s != "current")
    if stale:
        _skip_or_fail(f"quick figures changed since `make test` made them (edited code?): {stale}")
