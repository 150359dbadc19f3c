"""A figure's cache key: when a figure in an output root is current, and what its run record says.

A figure is skipped when its cache key — a hash of the notebook text, the parameters, the source files of the
linattn modules the notebook imports and of theirs (:mod:`linattn.companion.runner.sources`: not the CLI, the runner or
the book builder) and the versions of the libraries that compute or draw (``records.LIBRARIES``); for report notebooks
also the ``numbers.json`` of every figure they read — equals ``<root>/<name>/.cache-key`` and its executed notebook
exists. The key and ``.run.json`` (preset, overrides, date) are written into the figure's folder before it is
published (:mod:`linattn.companion.runner.publish`), so a published figure always carries the key it was made with.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ...records import library_versions
from . import notebooks
from .sources import notebook_sources, source_hash

CACHE_KEY = ".cache-key"
RUN_INFO = ".run.json"

discover = notebooks.discover
read_notebook = notebooks.read


def is_report(name: str, notebook) -> bool:
    """Report notebooks read the other figures' outputs and therefore run last."""
    meta = notebook.metadata.get("linattn", {}) or {}
    return bool(meta.get("report", False))


def _inputs_hash(root: Path, names) -> str:
    """SHA-256 over the ``numbers.json`` of figures ``names`` in ``root``: what a report notebook reads."""
    h = hashlib.sha256()
    for name in sorted(names):
        path = Path(root) / name / "numbers.json"
        h.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"missing") + b"\0")
    return h.hexdigest()


def _cache_key(text: str, params: dict, sources: str, versions: dict | None = None, inputs: str | None = None) -> str:
    blob = json.dumps({"notebook": text, "parameters": params, "linattn": sources,
                       "libraries": library_versions() if versions is None else versions, "inputs": inputs},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def figure_key(name: str, text: str, params: dict, *, root: Path, reads: list[str], sources: str | None = None,
               versions: dict | None = None, report: bool = False) -> str:
    """The cache key of figure ``name`` (notebook ``text``) run with ``params`` into ``root``. ``sources``: the
    hash of the linattn sources it depends on (default: computed from the notebook's imports); a report's key
    also covers the ``numbers.json`` of the figures it ``reads`` (the ordinary figures it summarises)."""
    if sources is None:
        sources = source_hash(notebook_sources(notebooks.from_text(text)))
    return _cache_key(text, params, sources, versions, _inputs_hash(root, reads) if report else None)


def is_current(root: Path, name: str, key: str | None) -> bool:
    key_file = Path(root) / name / CACHE_KEY
    return (Path(root) / f"{name}.ipynb").is_file() and key_file.is_file() and key_file.read_text().strip() == key


def run_info(root: Path, name: str) -> dict | None:
    """``{"preset", "overrides", "date"}`` of the last successful run of ``name`` in ``root``, or None."""
    try:
        return json.loads((Path(root) / name / RUN_INFO).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def expected_key(name: str, root: Path, src=None) -> str | None:
    """The key figure ``name`` in ``root`` must carry to be current, from its recorded preset and overrides
    (None when it has no run record)."""
    info = run_info(root, name)
    found = discover(src)
    if info is None or name not in found:
        return None
    nb = read_notebook(found[name])
    report = is_report(name, nb)
    others = [n for n, p in found.items() if not is_report(n, read_notebook(p))] if report else []
    params = {"preset": info["preset"], **info.get("overrides", {})}
    return figure_key(name, found[name].read_text(encoding="utf-8"), params, root=root, reads=others,
                      report=report)
