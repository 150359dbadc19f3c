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
    for i, g in enumerate(readme.GLANCE):
        existing = json.loads((tmp_path / g.name / "numbers.json").read_text()) if (tmp_path / g.name).exists() else []
        _numbers(tmp_path, g.name, existing + [dict(quantity=q + " (any suffix)", paper=None, theory=0.5,
                                                    reproduced=100 + i + k / 8) for k, q in enumerate(g.quantities)])
    table = readme.glance_table(tmp_path).splitlines()
    assert len(table) == 2 + len(readme.GLANCE)
    first = readme.GLANCE[0]
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
    """Every numbers.json row a README row names exists in the built (quick) figures: renaming a quantity in a
    notebook without updating GLANCE fails here, not at the next paper build."""
    root = figures_dir("quick")
    for g in readme.GLANCE:
        path = root / g.name / "numbers.json"
        if not path.is_file():
            require_built(f"{path} is missing: run `make test` (or linattn figures --preset quick)")
        readme.find_rows(json.loads(path.read_text()), g.quantities)
