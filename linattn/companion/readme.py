"""The README's "Reproduction at a glance" table, written from the built figures' ``numbers.json``.

The README quotes a few headline numbers of the paper book. Typed by hand they would go stale the moment a run
changes, so the table between the README's two marker lines is written by this module from the paper preset's
``numbers.json`` files (``make book`` runs it after the build)::

    python -m linattn.companion.readme            # rewrite the table from _build/figures/paper
    python -m linattn.companion.readme --check    # exit 1 if the README's table differs from the built numbers

Each row of :data:`GLANCE` names a figure and the ``numbers.json`` rows it shows (by the start of their
``quantity``); several rows are shown side by side, separated by commas.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import NamedTuple

from ..records import atomic_write
from .paths import REPO_ROOT, preset_root

START = "<!-- reproduction-at-a-glance: start (python -m linattn.companion.readme writes this table) -->"
END = "<!-- reproduction-at-a-glance: end -->"


class GlanceRow(NamedTuple):
    """One README row: the paper's figure, what is shown, the figure notebook and its ``numbers.json`` rows."""

    figure: str
    what: str
    name: str
    quantities: tuple[str, ...]


GLANCE = (
    GlanceRow("1b", "plateau, final loss (ATTN_M)", "fig01b_attnm_loss",
              ("plateau loss (ATTN_M)", "final loss (ATTN_M)")),
    GlanceRow("1b", "half-drop step (ATTN_M)", "fig01b_attnm_loss", ("half-drop step (ATTN_M)",)),
    GlanceRow("3a", "plateaus L(M_0), …, L(M_3)", "fig03a_attns_loss",
              ("plateau L(M_0)", "plateau L(M_1)", "plateau L(M_2)", "plateau L(M_3)")),
    GlanceRow("3a", "final loss (mean over seeds, extended run)", "fig03a_attns_loss", ("final loss, extended run",)),
    GlanceRow("4", "R = 1: directions learned in the published window", "fig04_low_rank",
              ("R=1: directions learned within the published window",)),
    GlanceRow("4", "R = 1: step of the last drop (extended run)", "fig04_low_rank", ("R=1: step of the last drop",)),
    GlanceRow("5", "softmax ATTN_M, ATTN_S: drops detected", "fig05_softmax",
              ("softmax ATTN_M: drops detected", "softmax ATTN_S: drops detected")),
    GlanceRow("14, c = 1", "final in-context test loss", "fig14_icl_iwl", ("c=1: final in-context test loss",)),
)
COLUMNS = ("paper", "theory", "reproduced")


def _number(x) -> str | None:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    if isinstance(x, str):
        return x
    return str(int(x)) if float(x).is_integer() else f"{x:.4g}"


def find_rows(numbers: list[dict], quantities) -> list[dict]:
    """The first row of ``numbers`` whose quantity starts with each of ``quantities``; KeyError naming a missing one."""
    out = []
    for q in quantities:
        row = next((r for r in numbers if r["quantity"].startswith(q)), None)
        if row is None:
            raise KeyError(f"no numbers.json row starts with {q!r}")
        out.append(row)
    return out


def glance_table(figures: Path) -> str:
    """The Markdown table of :data:`GLANCE` from the ``numbers.json`` files under ``figures`` (one preset's figures
    folder); a figure not built yet raises FileNotFoundError."""
    lines = ["| figure | quantity | paper | theory | ours |", "|---|---|---|---|---|"]
    cache: dict[str, list[dict]] = {}
    for g in GLANCE:
        if g.name not in cache:
            cache[g.name] = json.loads((Path(figures) / g.name / "numbers.json").read_text(encoding="utf-8"))
        rows = find_rows(cache[g.name], g.quantities)
        cells = []
        for col in COLUMNS:
            values = [_number(r.get(col)) for r in rows]
            cells.append("—" if all(v is None for v in values) else ", ".join(v or "—" for v in values))
        lines.append(f"| {g.figure} | {g.what} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def with_table(text: str, table: str) -> str:
    """``text`` (the README) with the lines between :data:`START` and :data:`END` replaced by ``table``."""
    if START not in text or END not in text:
        raise ValueError("the README has no reproduction-at-a-glance markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table}\n{END}{tail}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m linattn.companion.readme", description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="paper", help="whose numbers the table shows (default: paper)")
    p.add_argument("--check", action="store_true", help="only compare; exit 1 if the README's table is stale")
    args = p.parse_args(argv)
    readme = REPO_ROOT / "README.md"
    try:
        new = with_table(readme.read_text(encoding="utf-8"), glance_table(preset_root(args.preset)))
    except (FileNotFoundError, KeyError, ValueError) as e:
        print(f"python -m linattn.companion.readme: error: {e}", file=sys.stderr)
        return 2
    if new == readme.read_text(encoding="utf-8"):
        print("README.md: the reproduction table is up to date")
        return 0
    if args.check:
        print("README.md: the reproduction table differs from the built numbers (run python -m "
              "linattn.companion.readme)", file=sys.stderr)
        return 1
    atomic_write(readme, lambda f: f.write(new))
    print("README.md: rewrote the reproduction table from the built numbers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
