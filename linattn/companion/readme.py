"""The README's "Reproduction at a glance" table, checked against the built figures' ``numbers.json``.

The README quotes a few headline numbers of the paper book. The table between its two marker lines is a committed
snapshot of a paper build: a build never rewrites it (a build writes only build outputs). Instead it is checked
against the numbers a paper build produced, within the tolerances of :func:`agrees` (what "same numbers" may differ
by between machines: see the README), and rewritten only on request::

    python -m linattn.companion.readme            # compare with _build/figures/paper; exit 1 if they disagree
    python -m linattn.companion.readme --write    # rewrite the table from the built numbers

Each row of :func:`glance` (the figure modules' ``README_ROWS``) names a figure and the ``numbers.json`` rows it
shows, by their ``key`` (``a|b``: the
row ``a``, else ``b``: at the published settings a count the paper's text states is written as its claim); several
rows are shown side by side, separated by commas.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import NamedTuple

from ..records import atomic_write
from .runner.paths import REPO_ROOT, preset_root

START = "<!-- reproduction-at-a-glance: start (python -m linattn.companion.readme --write writes this table) -->"
END = "<!-- reproduction-at-a-glance: end -->"


class GlanceRow(NamedTuple):
    """One README row: the paper's figure, what is shown, the figure notebook and the keys of its ``numbers.json``
    rows."""

    figure: str
    what: str
    name: str
    keys: tuple[str, ...]


def glance() -> tuple[GlanceRow, ...]:
    """The README's rows: each figure module's ``README_ROWS`` ((the paper's figure, what is shown, the keys of its
    ``numbers.json`` rows), …), in the registry's order of the figures."""
    from . import figures

    return tuple(GlanceRow(figure, what, name, tuple(keys)) for name in figures.names()
                 for figure, what, keys in figures.contract(name).README_ROWS)


_COLUMNS = ("paper", "theory", "reproduced")


def _number(x) -> str | None:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    if isinstance(x, str):
        return x
    return str(int(x)) if float(x).is_integer() else f"{x:.4g}"


def find_rows(numbers: list[dict], keys) -> list[dict]:
    """The row of ``numbers`` with each of ``keys`` (``a|b``: ``a`` if there is one, else ``b``); KeyError naming a
    missing one."""
    by_key = {r.get("key"): r for r in numbers}
    out = []
    for wanted in keys:
        row = next((by_key[k] for k in wanted.split("|") if k in by_key), None)
        if row is None:
            raise KeyError(f"no numbers.json row has the key {wanted!r}")
        out.append(row)
    return out


def glance_table(figures: Path) -> str:
    """The Markdown table of :func:`glance` from the ``numbers.json`` files under ``figures`` (one preset's figures
    folder); a figure not built yet raises FileNotFoundError."""
    lines = ["| figure | quantity | paper | theory | ours |", "|---|---|---|---|---|"]
    cache: dict[str, list[dict]] = {}
    for g in glance():
        if g.name not in cache:
            cache[g.name] = json.loads((Path(figures) / g.name / "numbers.json").read_text(encoding="utf-8"))
        rows = find_rows(cache[g.name], g.keys)
        cells = []
        for col in _COLUMNS:
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


# Between two machines the draws agree bit for bit and a trajectory to about 1e-6 relative, but a drop that passes
# near a saddle late in a long run may move by a few steps (Figure 4's last drop at step ~147350: 4 steps between
# two CPUs). A value printed to 4 significant figures may then differ in its last digit.
RELATIVE = 2e-3  # losses and other real numbers
STEPS = 1e-4  # integers of 1000 or more (steps): this fraction of the value; smaller integers (counts) exactly


def agrees(shown: str, built: str) -> bool:
    """Whether a README cell's value ``shown`` agrees with the value ``built`` a build gives (both as the table
    prints them: a number, or "—" for none)."""
    if shown == built or "—" in (shown, built):
        return shown == built
    try:
        a, b = float(shown), float(built)
    except ValueError:
        return False
    if a.is_integer() and b.is_integer():
        return abs(a - b) <= (STEPS * abs(b) if abs(b) >= 1000 else 0)
    return abs(a - b) <= RELATIVE * max(abs(a), abs(b))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def differences(text: str, table: str) -> list[str]:
    """Where the README ``text``'s table and the built ``table`` disagree beyond :func:`agrees`, one line each."""
    if START not in text or END not in text:
        raise ValueError("the README has no reproduction-at-a-glance markers")
    shown = text.split(START, 1)[1].split(END, 1)[0].strip().splitlines()
    built = table.strip().splitlines()
    if len(shown) != len(built):
        return [f"the README's table has {len(shown) - 2} rows, the build gives {len(built) - 2}"]
    out = []
    for line_shown, line_built in zip(shown[2:], built[2:]):
        row_shown, row_built = _cells(line_shown), _cells(line_built)
        if row_shown[:2] != row_built[:2]:
            out.append(f"row {' | '.join(row_shown[:2])}: the build's row is {' | '.join(row_built[:2])}")
            continue
        for column, a, b in zip(("paper", "theory", "ours"), row_shown[2:], row_built[2:]):
            values_a, values_b = a.split(", "), b.split(", ")
            if len(values_a) != len(values_b) or not all(map(agrees, values_a, values_b)):
                out.append(f"{' | '.join(row_shown[:2])}, {column}: README {a}, build {b}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m linattn.companion.readme", description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="paper", help="whose numbers the table shows (default: paper)")
    p.add_argument("--write", action="store_true", help="rewrite the README's table from the built numbers")
    args = p.parse_args(argv)
    readme = REPO_ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    try:
        table = glance_table(preset_root(args.preset))
        new = with_table(text, table)
    except (FileNotFoundError, KeyError, ValueError) as e:
        print(f"python -m linattn.companion.readme: error: {e}", file=sys.stderr)
        return 2
    if args.write:
        if new != text:
            atomic_write(readme, lambda f: f.write(new))
        print("README.md: wrote the reproduction table from the built numbers")
        return 0
    if diffs := differences(text, table):
        print("README.md: the reproduction table disagrees with the built numbers:\n  " + "\n  ".join(diffs),
              file=sys.stderr)
        return 1
    print("README.md: the reproduction table agrees with the built numbers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
