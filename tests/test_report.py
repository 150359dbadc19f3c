"""The reproduction report gives every numbers.json row an error value or an explicit "not comparable: <reason>"."""

from __future__ import annotations

import math

import numpy as np
import pytest

from linattn import theory
from linattn.companion.output import (
    AGREES,
    CANNOT_TELL,
    DIFFERS,
    ESTIMATE,
    NOT_COMPARABLE,
    compare_row,
    number_row,
    prose_number,
    prose_text,
    prose_value,
    verdict,
    words,
)


def row(**kw):
    return number_row("q", **kw)


def test_numbers_get_absolute_and_relative_errors():
    c = compare_row(row(theory=0.5, reproduced=0.55))
    assert c["kind"] == "relative" and c["error"] == pytest.approx(0.05) and c["relative"] == pytest.approx(0.1)
    c = compare_row(row(paper=2.0, reproduced=1.0))  # no theory: against the paper
    assert c["relative"] == pytest.approx(0.5)
    c = compare_row(row(theory=0.0, reproduced=0.03))  # a gap whose theory is 0: no relative error
    assert c == {"error": pytest.approx(0.03), "relative": None, "kind": "absolute", "verdict": None}
    c = compare_row(row(paper="< 29", reproduced=40.0, abs_error=11.0))  # a text reference with a given error
    assert c["kind"] == "absolute" and c["error"] == 11.0


def test_rows_without_an_error_say_why():
    figure4_rank8 = compare_row(row(theory="0", reproduced="0 6"))
    figure4_rank1 = compare_row(row(theory="0 1 2", reproduced="0 2"))
    for c in (figure4_rank8, figure4_rank1):
        assert c["kind"] == NOT_COMPARABLE and c["error"].startswith(f"{NOT_COMPARABLE}: ") and c["relative"] is None
    assert "0 6" in figure4_rank8["error"] and "theory 0" in figure4_rank8["error"]
    assert compare_row(row(theory="0 2 4", reproduced="0 2 4")) == {"error": 0.0, "relative": 0.0, "kind": "relative",
                                                                    "verdict": None}
    assert "no paper or theory" in compare_row(row(reproduced=4.0))["error"]
    assert "no reproduced value" in compare_row(row(theory=1.0))["error"]
    assert "no paper or theory" in compare_row(row(reproduced="1 2 3 5"))["error"]


def test_every_row_is_counted_once():
    rows = [row(theory=1.0, reproduced=1.1), row(theory=0.0, reproduced=0.1), row(reproduced=3.0),
            row(theory="0", reproduced="0 6"), row(theory=1.0)]
    kinds = [compare_row(r)["kind"] for r in rows]
    assert kinds == ["relative", "absolute", NOT_COMPARABLE, NOT_COMPARABLE, NOT_COMPARABLE]
    assert all(isinstance(compare_row(r)["error"], (float, str)) for r in rows)


def test_verdict_is_within_the_tolerance():
    assert verdict(16.0, 16.67) == AGREES and verdict(-16.67, 16.67) == AGREES
    assert verdict(17.0, 16.67) == DIFFERS and verdict(1, 0) == DIFFERS and verdict(0, 0) == AGREES
    assert verdict(None, 1.0) == DIFFERS and verdict(float("nan"), 1.0) == DIFFERS  # nothing happened in the run


def test_a_check_carries_its_tolerance_and_verdict_into_the_report():
    plain = row(theory=1.0, reproduced=1.1)
    assert "tolerance" not in plain and "verdict" not in plain  # rows without them keep the five fields
    check = row(paper=751.0, reproduced=790.0, tolerance=17.0)
    assert check["tolerance"] == 17.0 and compare_row(check)["verdict"] == DIFFERS  # 39 steps > 17
    assert compare_row(row(paper=751.0, reproduced=760.0, tolerance=17.0))["verdict"] == AGREES
    stated = row(paper=751.0, reproduced=790.0, tolerance=17.0, verdict=AGREES)
    assert compare_row(stated)["verdict"] == AGREES  # the row's own verdict is kept
    estimate = row(theory=8064.5, reproduced=5064.0, verdict=ESTIMATE)
    assert compare_row(estimate)["verdict"] == ESTIMATE and compare_row(plain)["verdict"] is None
    with pytest.raises(ValueError, match="verdict must be one of"):
        row(theory=1.0, reproduced=1.0, verdict="close enough")


def test_the_report_says_a_claim_or_robustness_run_that_cannot_tell_apart(tmp_path):
    """A claim judged "cannot tell" (a run that ends before it settles) is neither agreement nor difference in the
    summary, and the robustness line counts such runs apart."""
    import json

    from linattn.companion.figures import beyond_error_table as report

    rows = [row(key="claim.figure_5", paper=1, reproduced=1, verdict=CANNOT_TELL),
            row(key="drops.attn_m.check.seed_11", paper=1, reproduced=2, verdict=DIFFERS),
            row(key="drops.attn_m.check.seed_12", paper=1, reproduced=1, verdict=CANNOT_TELL),
            row(key="drops.attn_m.check.seed_13", paper=1, reproduced=1, verdict=AGREES)]
    (tmp_path / "fig05_softmax").mkdir()
    (tmp_path / "fig05_softmax" / "numbers.json").write_text(json.dumps(rows))
    summary = report.summary(report.collect(tmp_path), "quick")
    assert "the paper's claim cannot be told from ours" in summary and "differs from ours" not in summary
    assert "the claim holds in 1 of 3; 1 cannot tell" in summary


def test_the_report_files_rows_by_what_they_carry_and_keys_them_by_figure(tmp_path):
    """linattn.companion.figures.beyond_error_table reads every figure's numbers.json: a reading, a claim, an
    estimate and a plain number land in their own groups whatever their wording, and the report's own rows are keyed
    <figure>.<key>, unique across figures that use the same keys."""
    import json

    from linattn.companion.figures import beyond_error_table as report

    rows = [row(key="a", paper=751.0, reproduced=760.0, tolerance=17.0), row(key="b", paper=8, reproduced=5,
                                                                              verdict=DIFFERS),
            row(key="c", theory=8064.5, reproduced=5064.0, verdict=ESTIMATE), row(key="d", theory=1.0, reproduced=1.1),
            row(key="settle.max", reproduced=0.004, tolerance=0.01, verdict=AGREES),  # the phase diagram's own check
            row(key="drops.attn_m.check.seed_11", paper=1, reproduced=2, verdict=DIFFERS)]  # a robustness run
    for name in ("fig01b_attnm_loss", "fig04_low_rank"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "numbers.json").write_text(json.dumps(rows))
    found = report.collect(tmp_path)
    assert {g: len(v) for g, v in found["groups"].items()} == {"reading": 2, "claim": 2, "robustness": 2, "check": 2,
                                                               "estimate": 2, "other": 2}
    summary = report.summary(found, "quick")
    assert "In all, 2 of 4 verdicts agree" in summary  # 2 readings, 2 claims: the robustness runs are not claims
    assert "Robustness runs" in summary and "holds in 0 of 2" in summary
    assert "fig03a_attns_loss" in found["missing"] and found["pages_read"] == 2
    keys = [r["key"] for r in report.numbers(found)]
    assert len(set(keys)) == len(keys) == 12 and "fig04_low_rank.b" in keys
    assert "1 of 2 readings agree" not in report.summary(found, "quick")  # one reading per page, each agrees
    assert "Figure 1b: 1 of 1 readings agree" in report.summary(found, "quick")


def test_a_row_with_a_standard_error_is_judged_in_its_band():
    """compare_row judges a row with a tolerance and a standard error in tolerance + 2·se: 0.03 off with se 0.02
    agrees (band 0.044), 0.05 off differs; without a standard error the tolerance alone."""
    checked = row(paper=1.0, reproduced=1.03, tolerance=0.004, standard_error=0.02)
    assert checked["standard_error"] == 0.02 and compare_row(checked)["verdict"] == AGREES
    assert compare_row(row(paper=1.0, reproduced=1.05, tolerance=0.004, standard_error=0.02))["verdict"] == DIFFERS
    assert compare_row(row(paper=1.0, reproduced=1.03, tolerance=0.004))["verdict"] == DIFFERS
    assert CANNOT_TELL not in (AGREES, DIFFERS)


def test_the_residual_kurtosis_of_fresh_tasks():
    """κ over the eigenvalues 0.4 … 0.1 is 3(1 + 2·0.3/1) = 4.8 (the theory the book's formula needs; the pages
    measure their errors on the sequences instead), and a mean of squared residuals of fresh tasks scatters as
    L·√((κ − 1)/P) says (a constructed sample, checked within 10 %)."""
    assert theory.residual_kurtosis(np.diag([0.4, 0.3, 0.2, 0.1])) == pytest.approx(4.8)
    assert theory.residual_kurtosis(np.eye(3)) == pytest.approx(3 * (1 + 2 / 3))
    assert theory.residual_kurtosis([0.4, 0.3, 0.2, 0.1], learned=2) == pytest.approx(3 * (1 + 2 * 0.05 / 0.09))  # M_2
    assert theory.residual_kurtosis([0.4, 0.3], learned=1) == pytest.approx(9.0)
    assert theory.residual_kurtosis([0.4], learned=1) == 3.0
    rng = np.random.default_rng(0)
    w = rng.standard_normal((400, 2000, 4))
    x = rng.standard_normal((400, 2000, 4)) * np.sqrt([0.4, 0.3, 0.2, 0.1])
    fresh = ((w * x).sum(-1) ** 2).mean(axis=1)
    kurtosis = theory.residual_kurtosis(np.diag([.4, .3, .2, .1]))
    assert fresh.std() == pytest.approx(math.sqrt((kurtosis - 1) / 2000), rel=0.1)


def test_one_formatter_rounds_prose_to_the_digits_a_number_means():
    assert prose_number(16.00000000000002) == 16 and type(prose_number(16.00000000000002)) is int
    assert prose_number(0.136123) == 0.136 and prose_number(1548.6) == 1549 and prose_number(0.00028123) == 0.000281
    assert prose_number(-0.049671) == -0.0497 and prose_number(0.0) == 0 and prose_number(float("nan")) is None
    assert prose_value(np.float64(2.0)) == 2 and type(prose_value(np.float64(2.0))) is int
    assert prose_text(1e-6) == "1e-06" and prose_text(0.25) == "0.25" and prose_text(None) == "–"
    assert words([0.4, 0.30000000000000004, 0.2]) == "0.4, 0.3 and 0.2"


def test_glued_text_with_tex_is_refused_before_it_reaches_a_page():
    """Glued text is shown as it is, so a $ would reach the reader; prose writes symbols in Unicode instead."""
    from linattn.companion.output import glue, saddle, subscript

    with pytest.raises(ValueError, match="rests"):
        glue(rests="R = 4 rests long at $\\mathcal{M}_6$")
    assert (saddle(6), subscript(12)) == ("ℳ₆", "₁₂")


def test_glue_is_the_one_formatter_of_a_page_s_numbers():
    """No page re-formats a glued number (``{glue:text}`name:.4f``` printed 5/36, glued as 0.139, as "0.1390"): a
    glued quote carries no numeric format spec, and a number meant with other digits is glued as text by
    prose_text, the one formatter (5/36 to four digits: "0.1389")."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    quote = re.compile(r"\{glue:text\}`([^`]+)`")
    specs = [(p.name, m.group(1)) for folder in ("figures_src", "book") for p in sorted((root / folder).glob("*.md"))
             for m in quote.finditer(p.read_text(encoding="utf-8"))
             if re.search(r":[^:]*[eEfFgG%d]$", m.group(1).split("::")[-1])]
    assert specs == []
    assert prose_text(5 / 36, 4) == "0.1389" and prose_text(5 / 36) == "0.139"


def test_a_row_without_a_value_gives_its_own_reason():
    """A row that has no reproduced value because its runs give a bracket, not a value, says so; a row that says
    nothing keeps the default reason (the event did not happen)."""
    bracket = row(theory=0.0066, no_value="the runs give a bracket on the grid of c, not a solved c")
    said = compare_row(bracket)["error"]
    assert said.startswith(f"{NOT_COMPARABLE}: no reproduced value (the runs give a bracket")
    assert "did not happen" not in said
    assert "did not happen" in compare_row(row(theory=1.0))["error"]


def test_the_report_shows_the_band_each_reading_was_judged_in(tmp_path):
    """A Figure 14 reading judged after an offset of the image's scale, in a test-set band wider than a pixel: the
    report's readings table shows that band and that offset (as the figure page does), not the pixel, and its plot
    places the reading at |difference − offset| / band; a reading from a page that states no band shows its
    tolerance."""
    import json

    from linattn.companion.figures import beyond_error_table as report

    judged = row(key="published.c_0_2.final", paper=0.257, reproduced=0.2457, tolerance=0.0099, verdict=AGREES,
                 difference=-0.0113, band=0.0226, offset=-0.008, unresolved=0.0099, unit="loss")
    bare = row(key="b", paper=751.0, reproduced=760.0, tolerance=17.0)
    (tmp_path / "fig14_icl_iwl").mkdir()
    (tmp_path / "fig14_icl_iwl" / "numbers.json").write_text(json.dumps([judged, bare]))
    found = report.collect(tmp_path)
    table = str(report.tables(found)["readings"]["Figure 14"])
    assert "0.023 after -0.008, cannot tell to 0.033" in table and "| 17 |" in table
    assert "0.0099" not in table
    shown = {r["key"]: r for r in found["groups"]["reading"]}
    assert report.judged_in_bands(shown["published.c_0_2.final"]) == pytest.approx(abs(-0.0113 + 0.008) / 0.0226)
    assert report.judged_in_bands(shown["b"]) == pytest.approx(9 / 17)


def test_the_report_tables_say_which_of_our_own_runs_are_missing(tmp_path):
    """The page's sections: the robustness runs and the checks each under its title, a sentence in place of the
    one the report has no row of; the estimates and every other number always shown."""
    import json

    from linattn.companion.figures import beyond_error_table as report
    from linattn.companion.output import MarkdownTable

    check = row(key="settle.max", reproduced=0.004, tolerance=0.01, verdict=AGREES)
    (tmp_path / "beyond_phase_diagram").mkdir()
    (tmp_path / "beyond_phase_diagram" / "numbers.json").write_text(json.dumps([check, row(key="d", theory=1.0,
                                                                                             reproduced=1.1)]))
    tables = report.tables(report.collect(tmp_path))
    own = tables["own_runs"]
    assert list(own) == ["Robustness runs", "Checks of our own runs"]
    assert own["Robustness runs"] == "*(no robustness run at this preset)*"
    checks = own["Checks of our own runs"]
    assert isinstance(checks, MarkdownTable) and "| 0.004 |" in str(checks)
    assert list(tables["unjudged"]) == ["Estimates", "Every other number"]
    assert "| 1.1 |" in str(tables["unjudged"]["Every other number"])
    assert tables["claims"] is None


def test_the_report_counts_readings_without_the_offset_beside_the_count_with_it(tmp_path):
    """Three readings of one page, two judged after an offset of the image's scale: the report states the count that
    agree (3) and, beside it, the count that agree on the raw difference in the same band (worked by hand: 0.012 and
    0.004 against the band 0.0099: one of the two, plus the reading judged without an offset)."""
    import json

    from linattn.companion.figures import beyond_error_table as report

    rows = [row(key="a", paper=0.5, reproduced=0.512, tolerance=0.0099, verdict=AGREES, difference=0.012,
                band=0.0099, offset=0.01, unresolved=0.0099, unit="loss"),
            row(key="b", paper=0.4, reproduced=0.404, tolerance=0.0099, verdict=AGREES, difference=0.004,
                band=0.0099, offset=0.01, unresolved=0.0, unit="loss"),
            row(key="c", paper=700.0, reproduced=705.0, tolerance=17.0, verdict=AGREES, difference=5.0, band=17.0,
                unit="step")]
    (tmp_path / "fig14_icl_iwl").mkdir()
    (tmp_path / "fig14_icl_iwl" / "numbers.json").write_text(json.dumps(rows))
    summary = report.summary(report.collect(tmp_path), "quick")
    assert "3 of 3 readings agree** with ours in their band (the page states it) (2 of 3 without the offset" in summary


def test_the_report_leaves_checks_of_a_reading_and_restated_rows_out_of_its_counts(tmp_path):
    """Constructed numbers.json rows: a reading that agrees, one that differs, a check of the reading (the image's
    drawn theory beside ours) that agrees, and a count restating the row that differs. The report shows all four
    with their verdicts, but its per-page line, its total and its counts table count two readings (1 agrees, 1
    differs) and list the other two apart, each row once."""
    import json

    from linattn.companion.figures import beyond_error_table as report

    rows = [row(key="published.a", paper=100.0, reproduced=101.0, tolerance=10.0, verdict=AGREES),
            row(key="published.b", paper=200.0, reproduced=260.0, tolerance=10.0, verdict=DIFFERS),
            row(key="published.line", paper=0.136, reproduced=0.136, tolerance=0.005, verdict=AGREES,
                checks_reading=True),
            row(key="published.count", paper=1, reproduced=0, tolerance=0.0, verdict=DIFFERS, restates=["b"])]
    (tmp_path / "fig03a_attns_loss").mkdir()
    (tmp_path / "fig03a_attns_loss" / "numbers.json").write_text(json.dumps(rows))
    found = report.collect(tmp_path)
    assert len(found["groups"]["reading"]) == 4  # all four are readings of the image, shown in its table
    summary = report.summary(found, "quick")
    assert "1 of 2 readings agree" in summary and "; 1 differs;" in summary
    assert "1 more checks the reading" in summary and "1 more restates another row's fact" in summary
    assert "In all, 1 of 2 verdicts agree" in summary and "2 more not counted" in summary
    counted = {r["what"]: r["n"] for r in report.tables(found)["counts"].rows}
    assert counted["readings that agree"] == 1 and counted["readings that differ"] == 1
    assert counted["checks of a reading (the image's drawn theory beside our theory; not counted)"] == 1
    assert counted["readings restating another row's fact (not counted again)"] == 1
    shown = next(iter(report.tables(found)["readings"].values()))._repr_markdown_()
    assert "agrees (a check of the reading, not counted)" in shown
    assert "differs (the same fact as b; not counted again)" in shown


def test_a_check_of_our_own_run_that_restates_another_says_so(tmp_path):
    """Constructed checks of our own run (a theory value, no published one): three that differ, two of them
    restating the first (one training set's draw). The summary and the checks table show each restating one's
    verdict with the fact it restates, not counted again; the first keeps its plain verdict."""
    import json

    from linattn.companion.figures import beyond_error_table as report

    rows = [number_row("first", key="plateau.a", theory=0.32, reproduced=0.31, verdict=DIFFERS),
            number_row("second", key="plateau.b", theory=0.37, reproduced=0.36, verdict=DIFFERS, restates=["first"]),
            number_row("third", key="plateau.c", theory=0.32, reproduced=0.31, verdict=DIFFERS, restates=["first"])]
    (tmp_path / "figA_vary_len").mkdir()
    (tmp_path / "figA_vary_len" / "numbers.json").write_text(json.dumps(rows))
    found = report.collect(tmp_path)
    assert len(found["groups"]["check"]) == 3
    summary = report.summary(found, "quick")
    again = "differs (the same fact as first; not counted again)"
    assert summary.count(again) == 2 and "first — differs." in summary
    shown = report.tables(found)["own_runs"]["Checks of our own runs"]._repr_markdown_()
    assert shown.count(again) == 2


def test_the_report_counts_its_checks_each_fact_once(tmp_path):
    """Constructed checks of our own runs: two that agree and state one fact (the second restates the first: the same
    number on one training set), one that differs, and one that restates it. The summary counts the checks, each fact
    once: 1 of 2 agree, 1 differs, 2 more restate another row's fact (not counted again), so that the label names a
    count the page shows; the counts table the same, each row once."""
    import json

    from linattn.companion.figures import beyond_error_table as report

    rows = [number_row("a M0", key="plateau.a.M0", theory=1.0, reproduced=1.0021, verdict=AGREES),
            number_row("b M0", key="plateau.b.M0", theory=1.0, reproduced=1.0021, verdict=AGREES, restates=["a M0"]),
            number_row("a M4", key="plateau.a.M4", theory=0.32, reproduced=0.31, verdict=DIFFERS),
            number_row("b M3", key="plateau.b.M3", theory=0.37, reproduced=0.36, verdict=DIFFERS, restates=["a M4"])]
    (tmp_path / "figA_vary_len").mkdir()
    (tmp_path / "figA_vary_len" / "numbers.json").write_text(json.dumps(rows))
    found = report.collect(tmp_path)
    summary = report.summary(found, "quick")
    assert ("Checks of our own runs (a criterion of ours, not the paper's): **1 of 2 agree**; 1 differs; 2 more "
            "restate another row's fact (not counted again):") in summary
    assert "agrees (the same fact as a M0; not counted again)" in summary
    counted = {r["what"]: r["n"] for r in report.tables(found)["counts"].rows}
    assert counted["checks of our own runs (no published value) that agree"] == 1
    assert counted["checks of our own runs (no published value) that differ"] == 1
    assert counted["checks of our own runs (no published value) that cannot tell"] == 0
    assert counted["checks of our own runs restating another row's fact (not counted again)"] == 2


def test_a_value_that_is_only_a_reference_gives_no_error():
    """Constructed rows: a loss beside a value marked as only a reference for its model (``reference_only``) has no
    error against it, in numbers.json or in the report ("not comparable", with the reference named); beside a paper
    value as well, it is compared with the paper alone; a plain theory row keeps its relative error."""
    beside = row(theory=0.136, reproduced=0.1465, reference_only="linear attention's L*")
    assert beside["reference_only"] == "linear attention's L*" and beside["abs_error"] is None
    c = compare_row(beside)
    assert c["kind"] == NOT_COMPARABLE and c["relative"] is None
    assert c["error"] == f"{NOT_COMPARABLE}: a reference, not this model's theory (linear attention's L*)"
    with_paper = compare_row(row(theory=0.136, paper=0.15, reproduced=0.1465, reference_only="L*"))
    assert with_paper["kind"] == "relative" and with_paper["relative"] == pytest.approx(0.0035 / 0.15)
    assert compare_row(row(theory=0.136, reproduced=0.1465))["relative"] == pytest.approx(0.0105 / 0.136)
    assert "reference_only" not in row(theory=0.136, reproduced=0.1465)


def test_the_report_shows_a_reference_apart_and_plots_no_error_against_it(tmp_path):
    """Constructed numbers.json rows of one page: a loss beside a reference only (0.136, ours 0.1465) and a loss
    beside its theory (0.5, ours 0.55). The table of other numbers names the reference in the quantity, leaves the
    theory column empty and gives the reason for no error; the figure's right panel draws only the theory row's
    relative error; the summary says why the other has none; the report's own numbers.json keeps the mark."""
    import json

    import matplotlib.pyplot as plt

    from linattn.companion.figures import beyond_error_table as report

    rows = [number_row("softmax: final loss", key="final_loss.a", theory=0.136, reproduced=0.1465,
                       reference_only="linear attention's L*"),
            number_row("linear: final loss", key="final_loss.b", theory=0.5, reproduced=0.55)]
    (tmp_path / "fig05_softmax").mkdir()
    (tmp_path / "fig05_softmax" / "numbers.json").write_text(json.dumps(rows))
    found = report.collect(tmp_path)
    shown = report.tables(found)["unjudged"]["Every other number"].rows
    by = {r["quantity"].split(":")[0]: r for r in shown}
    assert by["softmax"]["theory"] is None and by["softmax"]["relative"] is None
    assert by["softmax"]["quantity"] == "softmax: final loss, beside linear attention's L*: 0.136"
    assert by["softmax"]["error"].startswith(f"{NOT_COMPARABLE}: a reference")
    assert by["linear"]["theory"] == 0.5 and by["linear"]["relative"] == pytest.approx(0.1)
    summary = report.summary(found, "quick")
    assert "1 other number has a theory or paper value" in summary
    assert "1 of them beside a reference that is not their model's theory" in summary
    fig = report.plot(found)
    drawn = [float(x) for c in fig.axes[1].collections for x in np.asarray(c.get_offsets())[:, 0]]
    plt.close(fig)
    assert drawn == pytest.approx([0.1])  # the theory row alone: 0.05 / 0.5
    own = {r["key"]: r for r in report.numbers(found)}
    assert own["fig05_softmax.final_loss.a"]["reference_only"] == "linear attention's L*"
    assert "reference_only" not in own["fig05_softmax.final_loss.b"]


def test_fig05_final_losses_beside_l_star_give_no_error_in_the_report(tmp_path):
    """Second route, from a small Figure 5 run: each softmax final loss is set beside linear attention's L* (the last
    of the linear-attention saddle losses of its covariance, read from the dataset), which the rows mark as a
    reference; the report's table shows neither that value as a theory nor the difference as an error, and its
    figure draws no relative error for them."""
    import json

    import matplotlib.pyplot as plt

    from linattn.companion import presets
    from linattn.companion.figures import beyond_error_table as report
    from linattn.companion.figures import fig05_softmax as fig05

    tiny = dict(in_dim=3, seq_len=9, trainset_size=60, epoch=60)
    S = presets.settings(fig05, "quick", attn_m=dict(tiny, head_num=3), attn_s=dict(tiny, head_num=2, epoch=100),
                         check_seeds=[], half_lr_epoch=50)
    ds = fig05.compute(S)
    rows = [number_row(**r) for r in fig05.numbers(ds)]
    (tmp_path / "fig05_softmax").mkdir()
    (tmp_path / "fig05_softmax" / "numbers.json").write_text(json.dumps(rows))
    found = report.collect(tmp_path)
    table = report.tables(found)["unjudged"]["Every other number"]._repr_markdown_()
    for key in fig05.MODELS:
        l_star = float(ds.plateau_theory.sel(model=key).dropna("m").values[-1])
        final = float(ds.final_loss.sel(model=key))
        row_ = next(r for r in rows if r["key"] == f"final_loss.{key}")
        assert row_["theory"] == pytest.approx(l_star) and row_["reference_only"] and row_["abs_error"] is None
        assert f"beside {row_['reference_only']}: {l_star:.4g} | – | – |" in table
        shown = next(r for r in report.tables(found)["unjudged"]["Every other number"].rows
                     if r["key"] == f"final_loss.{key}")
        assert (shown["theory"], shown["relative"], shown["reproduced"]) == (None, None, pytest.approx(final))
        assert isinstance(shown["error"], str) and f"{abs(final - l_star):.4g}" not in shown["error"]
    fig = report.plot(found)
    plotted = sum(len(c.get_offsets()) for c in fig.axes[1].collections)
    plt.close(fig)
    assert plotted == 0  # no other row of the page has a theory value


def test_the_reports_csv_recounts_the_pages_counts_alone(tmp_path):
    """Constructed rows of two pages — readings that agree and differ, a check of the reading, a restating count, a
    check of our own run restating another, and a final loss beside a mere reference — written as the report writes
    its CSV: read back with the csv module alone, the rows with ``counted`` = yes give the summary's counts, each
    excluded row names why (``restates``, ``checks_reading``), and the reference's value sits in ``reference``, not
    in ``theory``."""
    import csv
    import json

    from linattn.companion.figures import beyond_error_table as report
    from linattn.companion.output import FigureOutput

    pages = {"fig03a_attns_loss": [
        row(key="published.a", paper=100.0, reproduced=101.0, tolerance=10.0, verdict=AGREES),
        row(key="published.b", paper=200.0, reproduced=260.0, tolerance=10.0, verdict=DIFFERS),
        row(key="published.line", paper=0.136, reproduced=0.136, tolerance=0.005, verdict=AGREES, checks_reading=True),
        row(key="published.count", paper=1, reproduced=0, tolerance=0.0, verdict=DIFFERS, restates=["b"])],
        "figA_vary_len": [
        number_row("a M0", key="plateau.a.M0", theory=1.0, reproduced=1.0021, verdict=AGREES),
        number_row("b M0", key="plateau.b.M0", theory=1.0, reproduced=1.0021, verdict=AGREES, restates=["a M0"])],
        "fig05_softmax": [
        number_row("final loss", key="final_loss.attn_s", theory=0.136, reproduced=0.1465,
                   reference_only="linear attention's L*")]}
    for name, rows in pages.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "numbers.json").write_text(json.dumps(rows))
    found = report.collect(tmp_path)
    out = FigureOutput(report.NAME, tmp_path)
    path = out.save_rows([report.csv_row(r) for r in found["rows"]], report.COLUMNS)
    with open(path, newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 7
    counted = [r for r in table if r["counted"] == "yes"]
    readings = [r for r in counted if r["figure"] == "fig03a_attns_loss"]
    agree = sum(r["verdict"] == AGREES for r in readings)
    assert (agree, len(readings)) == (1, 2) and f"{agree} of {len(readings)} readings agree" in report.summary(
        found, "quick")
    assert {r["key"]: r["counted"] for r in table if r["counted"] == "no"} == {
        "published.line": "no", "published.count": "no", "plateau.b.M0": "no"}
    assert next(r for r in table if r["key"] == "published.line")["checks_reading"] == "yes"
    assert next(r for r in table if r["key"] == "published.count")["restates"] == "b"
    assert next(r for r in table if r["key"] == "plateau.b.M0")["restates"] == "a M0"
    beside = next(r for r in table if r["key"] == "final_loss.attn_s")
    assert (beside["theory"], float(beside["reference"]), beside["reference_only"]) == (
        "", 0.136, "linear attention's L*")
    assert beside["counted"] == "" and beside["relative_error"] == ""


def test_the_reports_checks_show_the_level_and_the_band_each_verdict_applied(tmp_path):
    """Constructed checks of our own runs: a rest below its level by 0.0079 judged in 2 standard errors (0.0052) and
    the fit's further margin (0.0007), a settling check with a tolerance only, an exponent with its standard error
    (judged in twice it) and a rest whose band and margin differ below the third decimal. The report's table of checks
    shows each one's level beside ours and the band its verdict applied, as the row's page states it."""
    import json

    from linattn.companion.figures import beyond_error_table as report

    rows = [number_row("rest", key="plateau.a.M4", theory=0.3213, reproduced=0.3134, verdict=DIFFERS,
                       difference=0.3134 - 0.3213, band=0.0052, unresolved=0.0007, unit="loss"),
            row(key="settle.max", reproduced=0.004, tolerance=0.02, verdict=AGREES),
            number_row("exponent", key="escape.exponent.drop1", theory=-1.0, reproduced=-1.2129, standard_error=0.0448,
                       verdict=DIFFERS),
            number_row("rest", key="plateau.a.M1", theory=0.7042, reproduced=0.7027, verdict=AGREES,
                       difference=0.7027 - 0.7042, band=0.0070, unresolved=0.0002, unit="loss")]
    (tmp_path / "figA_vary_len").mkdir()
    (tmp_path / "figA_vary_len" / "numbers.json").write_text(json.dumps(rows))
    found = report.collect(tmp_path)
    shown = report.tables(found)["own_runs"]["Checks of our own runs"]
    by_key = {r["key"]: r for r in shown.rows}
    assert by_key["plateau.a.M4"]["band"] == "0.0052, cannot tell to 0.0059"
    assert by_key["settle.max"]["band"] == "0.02"
    assert by_key["escape.exponent.drop1"]["band"] == "0.090 (2 standard errors)"  # 2 × 0.0448, as its page judged
    assert by_key["plateau.a.M1"]["band"] == "0.0070, cannot tell to 0.0072"  # below 0.01: 2 significant digits
    markdown = shown._repr_markdown_()
    assert "| level | ours | band applied | verdict |" in markdown
    assert "0.3213" in markdown and "0.0052, cannot tell to 0.0059" in markdown
