"""The reproduction report gives every numbers.json row an error value or an explicit "not comparable: <reason>"."""

from __future__ import annotations

import pytest

from linattn.companion.output import (AGREES, DIFFERS, ESTIMATE, NOT_COMPARABLE, compare_row, number_row,
                                      verdict)


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


def test_the_report_files_rows_by_what_they_carry_and_keys_them_by_figure(tmp_path):
    """linattn.companion.figures.report reads every figure's numbers.json: a reading, a claim, an estimate and a
    plain number land in their own groups whatever their wording, and the report's own rows are keyed
    <figure>.<key>, unique across figures that use the same keys."""
    import json

    from linattn.companion.figures import report

    rows = [row(key="a", paper=751.0, reproduced=760.0, tolerance=17.0), row(key="b", paper=8, reproduced=5,
                                                                              verdict=DIFFERS),
            row(key="c", theory=8064.5, reproduced=5064.0, verdict=ESTIMATE), row(key="d", theory=1.0, reproduced=1.1)]
    for name in ("fig01b_attnm_loss", "fig04_low_rank"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "numbers.json").write_text(json.dumps(rows))
    found = report.collect(tmp_path)
    assert {g: len(v) for g, v in found["groups"].items()} == {"reading": 2, "claim": 2, "estimate": 2, "other": 2}
    assert "fig03a_attns_loss" in found["missing"] and found["pages_read"] == 2
    keys = [r["key"] for r in report.numbers(found)]
    assert len(set(keys)) == len(keys) == 8 and "fig04_low_rank.b" in keys
    assert "1 of 2 readings agree" not in report.summary(found, "quick")  # one reading per page, each agrees
    assert "Figure 1b: 1 of 1 readings agree" in report.summary(found, "quick")
