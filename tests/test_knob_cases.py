"""Every figure page stays true at settings of a reader's own: each module's ``KNOB_CASES`` (dicts of ``--param``
overrides beyond its presets) built at the quick preset through the real runner, into a temporary folder with a run
store of its own, must build with no printed warning or error, and the page must not present itself as the paper's
figure, print a missing value as "nan" or a step in exponent notation.

The figures come from the registry (``linattn.companion.figures.names()``): a new figure is tested without an edit
here, and one that declares fewer than two cases fails.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from linattn.companion import figures as registry
from linattn.companion import presets
from linattn.companion.runner import schedule
from linattn.companion.runner.execute import is_published_run

NAMES = registry.names()
MIN_CASES = 2


def _cases(name: str) -> tuple:
    return registry.contract(name).KNOB_CASES


# one test per declared case; a module that declares none still gets a test, which fails (test_every_module_...)
CASES = [pytest.param(name, dict(case), id=f"{name}-{i}") for name in NAMES for i, case in enumerate(_cases(name))]


def _has_knobs(name: str) -> bool:
    """Whether a reader can vary the figure at all: its presets set something (the error table's page has no
    parameter; the runner refuses ``--param`` for it)."""
    return presets.has_presets(name) and any(presets.table(name).values())


def test_every_module_declares_two_knob_cases_or_more():
    short = {name: len(_cases(name)) for name in NAMES if _has_knobs(name) and len(_cases(name)) < MIN_CASES}
    assert not short, f"figure modules with fewer than {MIN_CASES} KNOB_CASES (name: count): {short}"
    stray = [name for name in NAMES if not _has_knobs(name) and _cases(name)]
    assert not stray, f"figure modules without parameters that declare knob cases: {stray}"


def test_every_knob_case_is_a_dict_of_the_figures_own_settings_or_run_settings():
    """A case is checked before it is built: every key is a setting of the figure or of the runs it trains (what
    ``linattn figures --param`` accepts), and the case is not the published settings (it would test nothing new)."""
    from linattn.config import RunConfig

    fields = set(RunConfig.field_names())
    for name in NAMES:
        own = presets.table(name)["quick"] if presets.has_presets(name) else {}
        for case in _cases(name):
            assert isinstance(case, dict) and case, f"{name}: a knob case must be a non-empty dict: {case!r}"
            unknown = sorted(set(case) - set(own) - fields)
            assert not unknown, f"{name}: knob case {case} names no setting: {unknown}"


def _page_text(nb, prose: bool = True) -> str:
    """What a reader of the executed page sees as text: its markdown cells (``prose``) and its cells' text outputs
    (tables, sentences and the values glued into the prose)."""
    parts = []
    for cell in nb.cells:
        if prose and cell.cell_type == "markdown":
            parts.append(cell.source)
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            parts += [str(data[k]) for k in ("text/markdown", "text/plain") if k in data]
            if out.get("output_type") == "stream":
                parts.append(out.get("text", ""))
    return "\n".join(parts)


def _title(nb) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line
    return ""


NAN = re.compile(r"\bnan\b", re.IGNORECASE)
EXPONENT = re.compile(r"\d\.?\d*e\+0?\d")  # 1.474e+05: a step or count printed in exponent notation


@pytest.mark.slow
@pytest.mark.parametrize("name, case", CASES)
def test_knob_case_builds_true_and_without_warnings(name, case, tmp_path, monkeypatch):
    monkeypatch.setenv("LINATTN_RUNS_DIR", str(tmp_path / "runs"))
    out = tmp_path / "figures"
    [result] = schedule.run_figures(preset="quick", only=[name], overrides=case, out=out, jobs=1, progress=False)
    assert result.status == "ran", f"{name} {case}: {result.status}: {result.error}"
    nb = nbformat.read(out / f"{name}.ipynb", as_version=4)
    values = {"preset": "quick", **presets.resolve(name, "quick", case)} if presets.has_presets(name) else case
    text = _page_text(nb)
    if not is_published_run(name, values):
        assert "reproduces the paper's" not in text and "It reproduces **" not in text, \
            f"{name} {case}: a re-run at settings of our own calls itself the paper's figure"
        title = _title(nb)
        assert not title.startswith("# Figure ") or "experiment at settings of our own" in title, \
            f"{name} {case}: the title names the paper's figure: {title!r}"
    values = _page_text(nb, prose=False)  # the fixed prose may name NaN where it describes the data files
    assert not NAN.search(values), f"{name} {case}: a value is printed as nan: …{_around(values, NAN)}…"
    assert not EXPONENT.search(values), \
        f"{name} {case}: a number in exponent notation: …{_around(values, EXPONENT)}…"


def _around(text: str, pattern: re.Pattern) -> str:
    m = pattern.search(text)
    return text[max(0, m.start() - 80):m.end() + 40]


# --------------------------------------------------------------- the one place that says whether a page is the paper's

def test_a_rerun_is_named_as_the_experiment_not_the_figure():
    from linattn.companion.published import page

    assert page.caption_lead("Figure 1b", True) == "The paper's Figure 1b, reproduced"
    assert page.caption_lead("Figure 1b", False) == "Figure 1b's experiment at settings of our own"
    assert page.reproduces("Figure 1b", True) == "This page reproduces the paper's Figure 1b"
    rerun = page.reproduces("Figure 1b", False)
    assert "reproduces" not in rerun and "Figure 1b's experiment at settings of our own" in rerun
    title = "# Figure 4 — low-rank ATTN_S"
    assert page.page_title(title, True) == title
    assert page.page_title(title, False) == "# Figure 4's experiment at settings of our own — low-rank ATTN_S"
    assert page.page_title("# Beyond the paper — your own experiment", False) == \
        "# Beyond the paper — your own experiment"  # names no figure of the paper: kept


def test_the_cite_block_cites_the_figure_only_at_the_published_settings():
    from linattn.companion.runner import citation

    text = "# Figure 4 — low-rank ATTN_S\n"
    assert "It reproduces **Figure 4**" in citation.cite_block("fig04_low_rank", text, at_published=True)
    block = citation.cite_block("fig04_low_rank", text, at_published=False)
    assert "reproduces" not in block and "not the published Figure 4" in block
    assert "{ref}`Figure 4's experiment <fig-fig04_low_rank>`" in block


def test_a_run_is_published_only_at_the_paper_presets_settings():
    paper = {"preset": "paper", **presets.resolve("fig03a_attns_loss", "paper")}
    assert is_published_run("fig03a_attns_loss", paper)
    assert is_published_run("fig03a_attns_loss", {**paper, "epoch_extended": 30001})  # a longer run only
    assert not is_published_run("fig03a_attns_loss", {**paper, "head_num": 7})
    assert not is_published_run("fig03a_attns_loss", {"preset": "quick",
                                                       **presets.resolve("fig03a_attns_loss", "quick")})


def test_steps_are_whole_numbers_and_a_missing_one_is_said_in_words():
    import numpy as np

    from linattn.companion.output import NumbersTable, median_and_range, step_number, step_text

    assert step_number(405.5) == 406 and step_number(711.3) == 711 and step_number(147350.0) == 147350
    assert step_number(float("nan")) is None and step_number(None) is None
    assert step_text(np.nan) == "not within the run" and step_text(1.474e5) == "147400"
    assert median_and_range([405.0, 406.0]) == "406 (405–406)"
    table = str(NumbersTable([{"quantity": "step", "paper": None, "theory": 147350.0, "reproduced": 64290.0,
                               "abs_error": 0.5}]))
    assert "147350" in table and "64290" in table and "e+" not in table and "0.5" in table
