"""The figure notebooks as files: find them, read their parameters, check a reader's overrides, write runnable copies.

Every figure is a jupytext MyST notebook ``figures_src/<name>.md`` whose first code cell is tagged ``parameters``;
each line of that cell is one knob (``name[: type] = default  # what it means``). For a figure with presets the
cell is written from its module's presets (:func:`parameters_source`: every setting at its paper value, with its
:func:`~linattn.companion.presets.knob_help` text; ``python -m linattn.companion.runner.notebooks --sync`` rewrites the
cells and a test keeps them in step), and the runner resolves the values of the chosen preset with a reader's overrides
once (:func:`linattn.companion.presets.prepare`) and hands them to the kernel as data. :func:`check_overrides` refuses
an unknown key or a value of the wrong type before anything runs.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from ...objectives.native import KnownFallback
from .paths import SRC_DIR

_INJECTED = ("preset", "out_dir", "resolved")  # set by the runner, never by --param (resolved: presets.GIVEN)
_TYPES = {"int": int, "float": float, "str": str, "bool": bool, "list": list, "dict": dict, "tuple": tuple}


class ParameterError(ValueError):
    """A reader's override that the notebook does not declare, or of the wrong type."""


def discover(src=None) -> dict[str, Path]:
    """``{name: path}`` of every ``*.md`` notebook in ``src`` (default ``<repository>/figures_src``), sorted."""
    src = Path(src) if src is not None else SRC_DIR
    return {p.stem: p for p in sorted(src.glob("*.md")) if not p.name.startswith((".", "_"))}


def from_text(text: str):
    """The nbformat notebook of a jupytext MyST markdown text (converted in memory, nothing written)."""
    import jupytext

    return jupytext.reads(text, fmt="md:myst")


def read(path):
    return from_text(Path(path).read_text(encoding="utf-8"))


def parameters_cell(nb):
    """The code cell tagged ``parameters`` (the first such cell); KeyError when there is none."""
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            return cell
    raise KeyError("the notebook has no code cell tagged 'parameters'")


@dataclass(frozen=True)
class Knob:
    """One line of a parameters cell: ``name[: type] = default  # help``."""

    name: str
    default: object
    type: type | None  # the declared annotation, else the type of a non-None default, else None (any literal)
    help: str

    def describe(self) -> str:
        kind = self.type.__name__ if self.type else "any"
        return f"{self.name} ({kind}, default {self.default!r}){': ' + self.help if self.help else ''}"


def knobs(nb) -> dict[str, Knob]:
    """The parameters a reader may set, in the order of the cell (the injected ``preset``/``out_dir`` left out)."""
    from papermill.translators import PythonTranslator

    out = {}
    for p in PythonTranslator.inspect(parameters_cell(nb)):
        if p.name in _INJECTED:
            continue
        default = _literal(p.default)
        declared = _TYPES.get(p.inferred_type_name)
        out[p.name] = Knob(p.name, default, declared or (type(default) if default is not None else None),
                           p.help.strip())
    return out


def _literal(text: str):
    """A Python literal (``3``, ``1e-3``, ``[0, 1]``, ``"jan2025"``, ``None``), else the text itself as a string."""
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return text.strip()


def parse_override(item: str) -> tuple[str, object]:
    """``"KEY=VALUE"`` → (KEY, the literal VALUE); a bare word such as ``jan2025`` stays a string."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ParameterError(f"--param expects KEY=VALUE, got {item!r}")
    return key.strip(), _literal(value)


def _fits(value, kind) -> bool:
    if kind is None or value is None:
        return True
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind in (list, tuple):
        return isinstance(value, (list, tuple))
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def with_article(noun: str) -> str:
    """``noun`` after its indefinite article: "an int", "a float" (by its first letter's sound as a vowel)."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def check_overrides(name: str, nb, overrides: dict) -> dict:
    """``overrides`` if every key is a knob of notebook ``name`` and every value fits its type; else
    :class:`ParameterError` naming the valid knobs. For a figure with nested runs (``attn_m``, ``attn_s``) a
    run-level setting of those runs (``lr``) is a knob too: it sets every run."""
    from .. import presets

    valid = knobs(nb)
    if presets.has_presets(name):
        paper, help_ = presets.table(name)["paper"], presets.knob_help(name)
        for run in presets.nested_runs(name):
            for key, value in paper[run].items():
                valid.setdefault(key, Knob(key, value, _knob_type(value), f"{help_.get(key, key)} (every run)"))
    listing = "; ".join(k.describe() for k in valid.values()) or "none"
    for key, value in overrides.items():
        if key in _INJECTED:
            raise ParameterError(f"{key} is set by the runner (use --preset / --out), not by --param")
        if key not in valid:
            raise ParameterError(f"{name} has no parameter {key!r}; its parameters: {listing}")
        kind = valid[key].type
        if kind is not None and not _fits(value, kind):
            raise ParameterError(f"{name}: {key} must be {with_article(kind.__name__)}, got {value!r}")
    return dict(overrides)


# what a library warning looks like in a cell's stream output: "…/node.py:195: UserWarning: …" or "warnings.warn(…"
_WARNING = re.compile(r"Warning\b|warn\(")
# a known fallback as Python's warnings module prints it: "<file>:<line>: KnownFallback: <message>", then (where
# the source is found) the line of code that warned, indented by two spaces
_FALLBACK = re.compile(rf"^\S.*?:\d+: {KnownFallback.__name__}: (.*)$")


def take_known_fallbacks(nb) -> list[str]:
    """Remove every :class:`~linattn.objectives.native.KnownFallback` warning (an engine's slower path with the same
    result, e.g. no C compiler) from the stream outputs of an executed notebook ``nb``, and return their messages,
    each once, in the order printed. The runner reports them on the figure's line and in its provenance, not on the
    page; every other printed warning stays for :func:`printed_warnings`."""
    found = []
    for cell in nb.cells:
        outputs, after_header = [], False
        for out in cell.get("outputs", []):
            if out.get("output_type") != "stream":
                outputs.append(out)
                continue
            kept = []
            for line in out.get("text", "").splitlines(keepends=True):
                if m := _FALLBACK.match(line.rstrip("\r\n")):
                    found += [m[1]] * (m[1] not in found)
                    after_header = True
                elif after_header and line.startswith("  "):  # the source line under the header
                    after_header = False
                else:
                    after_header = False
                    kept.append(line)
            out["text"] = "".join(kept)
            if kept:
                outputs.append(out)
        if "outputs" in cell:
            cell["outputs"] = outputs
    return found


def printed_warnings(nb) -> list[str]:
    """The first line of every warning an executed notebook printed (its cells' stream outputs): text a reader of
    the page would see. The runner fails a figure that has one; the book's tests check the built notebooks."""
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and _WARNING.search(out.get("text", "")):
                line = next(ln for ln in out["text"].splitlines() if _WARNING.search(ln))
                found.append(line.strip()[:200])
    return found


def _with_parameters(nb, values: dict):
    """``nb`` with the defaults of its parameters cell replaced by ``values`` (each line keeps its annotation and
    help comment); a key that the cell does not declare raises :class:`ParameterError`."""
    cell = parameters_cell(nb)
    lines = cell.source.splitlines()
    for key, value in values.items():
        pattern = re.compile(rf"^({re.escape(key)}\s*(?::[^=]*)?=\s*)(.*?)(\s+#.*)?$")
        hits = [(i, m) for i, line in enumerate(lines) if (m := pattern.match(line))]
        if not hits:
            raise ParameterError(f"the parameters cell declares no {key!r}")
        i, m = hits[0]
        lines[i] = m.group(1) + repr(value) + (m.group(3) or "")
    cell.source = "\n".join(lines)
    return nb


def _knob_type(value) -> type | None:
    if value is None:
        return None
    return float if isinstance(value, float) else type(value)


def parameters_source(name: str) -> str:
    """The parameters cell of figure ``name``, written from its paper preset: ``preset``, then every setting at its
    paper value with its help text, then ``out_dir``."""
    from .. import presets

    lines = ['preset = "paper"  # the preset the values below come from; linattn figures sets it and all of them']
    help_ = presets.knob_help(name)
    for key, value in presets.table(name)["paper"].items():
        kind = _knob_type(value)
        note = help_.get(key)
        if note is None:
            raise KeyError(f"no help for the setting {key!r} of {name}: add it to its module's HELP")
        lines.append(f"{key}{': ' + kind.__name__ if kind else ''} = {value!r}  # {note}")
    if presets.nested_runs(name):
        lines.append("# a run setting given to --param (e.g. lr=0.1) sets it in every run above")
    lines.append("out_dir = None  # where the figure's files go (linattn figures sets it)")
    return "\n".join(lines)


def knobs_markdown() -> str:
    """A Markdown table of every figure's knobs (the settings ``--param`` takes) and their paper values, for the
    re-run page (the book builder writes it into the staged book)."""
    from .. import presets

    rows = ["| figure | knobs (paper value) |", "|---|---|"]
    for name in discover():
        if not presets.has_presets(name):
            continue
        table = presets.table(name)["paper"]
        cells = [f"`{k}` ({'…' if isinstance(v, dict) else v!r})".replace("|", "\\|") for k, v in table.items()]
        if presets.nested_runs(name):
            cells.append("and any run setting of those runs, for both (`lr`, `epoch`, …)")
        rows.append(f"| `{name}` | {', '.join(cells)} |")
    return "\n".join(rows) + "\n"


def sync_parameters(path) -> bool:
    """Rewrite the parameters cell of the notebook at ``path`` from its module's presets (:func:`parameters_source`);
    True when the file changed. The cell's other lines (its tags) stay as they are."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    m = re.search(r"(```\{code-cell\}[^\n]*\n:tags: \[[^\]]*parameters[^\]]*\]\n\n)(.*?)(\n```)", text, re.S)
    if m is None:
        raise KeyError(f"{path.name} has no code cell tagged 'parameters'")
    new = text[:m.start(2)] + parameters_source(path.stem) + text[m.end(2):]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def runnable(text: str, values: dict | None = None):
    """A figure notebook's MyST ``text`` as a standalone ``.ipynb`` for Jupyter or papermill, with its parameters
    set to ``values`` (e.g. ``{"preset": "paper", "seeds": [3]}``); it writes its outputs to ``./<name>/``."""
    import nbformat

    nb = _with_parameters(from_text(text), dict(values or {}))
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nbformat.validate(nb)
    return nb


PROG = "python -m linattn.companion.runner.notebooks"


def main(argv=None) -> int:
    """``python -m linattn.companion.runner.notebooks --sync``: rewrite the parameters cells of every figure with
    presets from its module's presets, and name the notebooks that changed. ``--new NAME``: write a new figure's
    notebook, module, toc line and chapter reference (:mod:`.scaffold`); a bad or taken NAME is refused in one line
    (exit 2), with nothing written."""
    import argparse
    import sys

    from ...records import PACKAGE_ROOT
    from .. import presets
    from .scaffold import new_figure

    p = argparse.ArgumentParser(prog=PROG)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--sync", action="store_true",
                      help="rewrite each figure's parameters cell from its module's PRESETS")
    what.add_argument("--new", metavar="NAME", help="write a new figure's notebook, module and toc line")
    args = p.parse_args(argv)
    if args.new is not None:
        try:
            written = new_figure(args.new, PACKAGE_ROOT.parent, parameters_source)
        except (ValueError, OSError) as e:
            print(f"{PROG}: error: {e}", file=sys.stderr)
            return 2
        print("\n".join(f"wrote {path}" for path in written))
        return 0
    for name, path in discover().items():
        if presets.has_presets(name) and sync_parameters(path):
            print(f"rewrote the parameters cell of {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
