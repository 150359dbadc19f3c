"""Every figure notebook of figures_src/ executed at the quick preset, as ``make test`` leaves them.

``make test`` runs the quick figures once (``linattn figures --preset quick`` into ``_build/figures/quick``) and
builds the quick book from them; these tests read those outputs instead of executing the notebooks a second time
(the runner's own behaviour — caching, failures, reports, overrides — is tested on tiny notebooks in test_runner.py).
Those reading the outputs are marked ``book``: they skip when the quick figures have not been made, and fail in CI
(``LINATTN_REQUIRE_BROWSER=1``), through ``conftest.require_built``.
"""

from __future__ import annotations

import inspect
import json
import re

import nbformat
import pytest
from conftest import require_built

from linattn.companion import book
from linattn.companion import figures as registry
from linattn.companion.runner import cachekey, paths, schedule

NAMES = sorted(cachekey.discover())
OUTPUTS = ("{n}.png", "{n}.svg", "{n}.pdf", "{n}.csv", "provenance.json", "numbers.json", "{n}.ipynb")
ROOT = paths.preset_root("quick")
# What each figure's numbers.json must show against the theory at the quick preset: its module's TOLERANCES (a CI-sized
# run: smaller P and shorter runs than the paper, hence tolerances wider than the paper preset's errors; the shared
# plateau tolerance is linattn.companion.figures.common.preset_blocks.PLATEAU_TOLERANCE). A figure whose list is empty
# (Figure 5: there is no softmax theory; the report: it copies the other figures' rows) is not checked.
TOLERANCES = {n: registry.module(n).TOLERANCES for n in registry.names() if registry.module(n).TOLERANCES}
UNCHECKED = tuple(n for n in registry.names() if n not in TOLERANCES)


@pytest.fixture(scope="module")
def quick_set():
    missing = [n for n in NAMES if not (ROOT / f"{n}.ipynb").is_file()]
    if missing:
        require_built(f"the quick figures are not made ({', '.join(missing)} missing in {ROOT}): run `make test`, "
                      f"or `linattn figures --preset quick`")
    return ROOT


def test_the_book_shows_every_figure_notebook_and_only_those():
    """figures_src/ and the toc's figure pages name the same figures: a notebook left out of _toc.yml would be run
    by `linattn figures` but never shown; a toc entry without a notebook would leave the book build without it."""
    toc = book.toc_figures()
    assert len(toc) == len(set(toc)), f"a figure is listed twice in _toc.yml: {toc}"
    assert set(toc) == set(NAMES), (f"only in figures_src/: {sorted(set(NAMES) - set(toc))}; "
                                    f"only in _toc.yml: {sorted(set(toc) - set(NAMES))}")


@pytest.mark.book
def test_quick_set_succeeded(quick_set):
    failed = sorted(p.name for p in quick_set.glob("*.failed.ipynb"))
    assert not failed, f"failed figures: {failed}"


@pytest.mark.book
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
    fields = {"key", "quantity", "paper", "theory", "reproduced", "abs_error"}
    # a judged reading also carries what its verdict applied (band, offset removed, further margin, unit; bound: a
    # difference known only as a bound; checks_reading, restates: a verdict not counted), a row without a value
    # the reason why (no_value), and a row whose theory value is only a reference for its model what it is
    # (reference_only)
    judged = {"tolerance", "verdict", "standard_error", "difference", "band", "offset", "unresolved", "unit",
              "no_value", "bound", "checks_reading", "restates", "reference_only"}
    assert rows and all(fields <= set(r) <= fields | judged for r in rows)
    keys = [r["key"] for r in rows]
    assert all(keys) and len(set(keys)) == len(keys), f"{name}: every numbers.json row needs a key of its own"
    if not _is_report(name) and any(c.cell_type == "code" and "figure(" in c.source for c in nb.cells):
        # a page computed by a figure module writes its labelled data, and links it under Cite this figure
        assert (root / name / f"{name}.nc").is_file() and f"{name}.nc>" in nb.cells[-1].source
    prov = json.loads((root / name / "provenance.json").read_text())
    assert prov["figure"] == name and prov["parameters"] and prov["wall_time_s"] >= 0
    # injected parameters reached the notebook: it wrote into the quick root, and the page says so
    assert (root / name / cachekey.CACHE_KEY).is_file() and cachekey.run_info(root, name)["preset"] == "quick"
    assert "quick preset" in nb.cells[1].source


def _is_report(name: str) -> bool:
    """Whether a figure is a report (its notebook's front matter says so): it gathers the other figures' rows."""
    return cachekey.is_report(name, cachekey.read_notebook(cachekey.discover()[name]))


# A module that holds its numbers to nothing says so where it declares it: ``TOLERANCES = []  # why``
_UNCHECKED_WITH_REASON = re.compile(r"^TOLERANCES(?:[ \t]*:[^=\n]+)?[ \t]*=[ \t]*\[\][ \t]*#[ \t]*\S", re.MULTILINE)


def test_every_figure_has_tolerances():
    """Every figure holds its quick numbers to its theory, but a figure whose module says, where it declares its
    empty TOLERANCES, why it holds them to nothing (Figure 5: no softmax theory; the report: it copies the other
    figures' rows); every notebook has a module."""
    assert set(TOLERANCES) | set(UNCHECKED) == set(NAMES), "a notebook without a figure module of its name"
    silent = [n for n in UNCHECKED if not _UNCHECKED_WITH_REASON.search(inspect.getsource(registry.module(n)))]
    assert not silent, f"a figure without tolerances that does not say why: {silent}"
    assert _UNCHECKED_WITH_REASON.search("TOLERANCES = []  # no theory for softmax")
    assert not _UNCHECKED_WITH_REASON.search("TOLERANCES = []\n# unrelated comment")


@pytest.mark.book
@pytest.mark.parametrize("name", sorted(TOLERANCES))
def test_numbers_match_the_theory_within_each_figures_tolerances(quick_set, name):
    import re

    rows = json.loads((quick_set / name / "numbers.json").read_text())
    for pattern, kind, tol in TOLERANCES[name]:
        checked = [r for r in rows if re.fullmatch(pattern, r["key"]) and isinstance(r["reproduced"], float)
                   and (kind == "below" or isinstance(r["theory"], float))]
        assert checked, f"{name}: no row with a value to check matches {pattern!r}"

        def err(r):
            if kind == "below":
                return r["reproduced"]
            gap = abs(r["reproduced"] - r["theory"])
            return gap / abs(r["theory"]) if kind == "rel" else gap
        far = [(r["key"], r["theory"], r["reproduced"]) for r in checked if err(r) > tol]
        assert not far, f"{name}: {kind} error above {tol} for {pattern!r}: {far}"


@pytest.mark.book
def test_every_quick_figure_is_current(quick_set):
    """Right after `make test` made them, every figure's cache key matches: a second run would skip them all."""
    states = {name: state for name, state, _ in schedule.list_figures(preset="quick")}
    assert sorted(states) == NAMES
    stale = sorted(n for n, s in states.items() if s != "current")
    assert not stale, (f"quick figures whose cache key no longer matches their build (a second run would redo them; "
                       f"after an edit, rebuild: linattn figures --preset quick): {stale}")
