"""The README's reproduction table is written from the built figures' numbers.json (linattn.companion.readme)."""

from __future__ import annotations

import json

import pytest
from conftest import require_built

from linattn.companion import readme
from linattn.companion.book import figures_dir


def _numbers(root, name, rows):
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "numbers.json").write_text(json.dumps(rows))


def test_table_shows_the_built_numbers(tmp_path):
    """Each README row shows the paper, theory and reproduced values of the numbers.json rows it names, side by side;
    a number changed in numbers.json changes the table."""
    for i, g in enumerate(readme.glance()):
        existing = json.loads((tmp_path / g.name / "numbers.json").read_text()) if (tmp_path / g.name).exists() else []
        written = {r["key"] for r in existing}  # a row two README rows name (one as the other's fallback): once
        _numbers(tmp_path, g.name, existing + [dict(key=k.split("|")[-1], quantity="whatever the page says", paper=None,
                                                    theory=0.5, reproduced=100 + i + j / 8)
                                               for j, k in enumerate(g.keys) if k.split("|")[-1] not in written])
    table = readme.glance_table(tmp_path).splitlines()
    assert len(table) == 2 + len(readme.glance())
    first = readme.glance()[0]
    assert table[2] == f"| {first.figure} | {first.what} | — | 0.5, 0.5 | 100, 100.1 |"
    rows = json.loads((tmp_path / first.name / "numbers.json").read_text())
    rows[0]["reproduced"] = 7.25
    _numbers(tmp_path, first.name, rows)
    assert "| 7.25, 100.1 |" in readme.glance_table(tmp_path).splitlines()[2]


def test_only_the_marked_block_is_rewritten():
    text = f"intro\n{readme.START}\nold table\n{readme.END}\nrest\n"
    assert readme.with_table(text, "| new |") == f"intro\n{readme.START}\n| new |\n{readme.END}\nrest\n"
    with pytest.raises(ValueError, match="markers"):
        readme.with_table("no markers", "| new |")


def test_readme_has_the_markers():
    text = (readme.REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count(readme.START) == 1 and text.count(readme.END) == 1


@pytest.mark.book
def test_every_glance_row_names_rows_the_figures_write():
    """Every numbers.json row a README row names exists in the built (quick) figures: renaming a key in a
    notebook without updating GLANCE fails here, not at the next paper build."""
    root = figures_dir("quick")
    for g in readme.glance():
        path = root / g.name / "numbers.json"
        if not path.is_file():
            require_built(f"{path} is missing: run `make test` (or linattn figures --preset quick)")
        readme.find_rows(json.loads(path.read_text()), g.keys)


def test_agreement_allows_what_may_differ_between_machines():
    """Counts and short step numbers agree exactly; a late step may move by a few steps; a loss printed to four
    significant figures may differ in its last digit; none or a changed count is a disagreement."""
    assert readme.agrees("5", "5") and not readme.agrees("5", "6")
    assert readme.agrees("978", "978") and not readme.agrees("978", "979")
    assert readme.agrees("147354", "147350") and not readme.agrees("147354", "146000")
    assert readme.agrees("0.1305", "0.1306") and not readme.agrees("0.1305", "0.1320")
    assert readme.agrees("—", "—") and not readme.agrees("—", "0.5") and not readme.agrees("0.5", "—")


def test_differences_name_the_row_and_column_that_disagree():
    table = "| figure | quantity | paper | theory | ours |\n|---|---|---|---|---|\n| 4 | last drop | — | — | 147354 |"
    text = f"intro\n{readme.START}\n{table}\n{readme.END}\n"
    assert readme.differences(text, table.replace("147354", "147350")) == []
    assert readme.differences(text, table.replace("147354", "120000")) == [
        "4 | last drop, ours: README 147354, build 120000"]
    assert "rows" in readme.differences(text, table + "\n| 5 | more | — | — | 1 |")[0]


def test_the_committed_table_agrees_with_a_paper_build():
    """After `make book` (the paper build), the README's committed table agrees with the built numbers within
    :func:`readme.agrees`; skipped where no paper build exists (CI builds only the quick book)."""
    root = figures_dir("paper")
    if not all((root / g.name / "numbers.json").is_file() for g in readme.glance()):
        pytest.skip("no paper build here (make book)")
    text = (readme.REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.differences(text, readme.glance_table(root)) == []


def test_rows_are_found_by_key_whatever_their_wording():
    rows = [dict(key="drops.attn_m", quantity="x"), dict(key="claim.figure_5", quantity="y"), dict(key="z")]
    assert readme.find_rows(rows, ["claim.figure_5|drops.attn_m"])[0]["quantity"] == "y"
    assert readme.find_rows(rows[:1], ["claim.figure_5|drops.attn_m"])[0]["quantity"] == "x"
    with pytest.raises(KeyError, match="plateau.M0"):
        readme.find_rows(rows, ["plateau.M0"])
