"""Which of linattn's source files a figure depends on: the modules its notebook imports, and theirs, transitively.

A figure's cache key hashes exactly these files (:func:`source_hash`), so editing the CLI, the book builder, the
figure runner or a test helper re-runs no figure, while editing a module a figure computes with re-runs it. Imports
are read from the code (``ast``), including imports inside functions; ``linattn/__init__.py`` counts for every
``linattn.<x>`` import, since Python runs it first. A package that gives names on first use (PEP 562: a literal
``_LAZY`` table of name → submodule, or ``_SUBMODULES``) counts as importing each submodule it names, since any use
of those names runs them.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from ...records import PACKAGE_ROOT

_PACKAGE = "linattn"


def _module_file(name: str, package_root: Path = PACKAGE_ROOT) -> Path | None:
    """The file of module ``name`` (``linattn.x.y``) under ``package_root``, or None when it is not one."""
    parts = name.split(".")
    if parts[0] != _PACKAGE:
        return None
    base = Path(package_root).joinpath(*parts[1:])
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _module_name(path: Path, package_root: Path) -> str:
    rel = path.relative_to(package_root).with_suffix("")
    parts = [_PACKAGE, *rel.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(code: str, *, module: str | None = None, is_package: bool = False) -> set[str]:
    """Every ``linattn`` module ``code`` may import (absolute, or relative to ``module``), with each imported name
    also tried as a submodule (``from linattn import theory``). Code that does not parse contributes nothing."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if is_package and module and isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in ("_LAZY", "_SUBMODULES") for t in node.targets):
            try:
                table = ast.literal_eval(node.value)
            except ValueError:
                continue
            out.update(f"{module}.{sub}" for sub in (table.values() if isinstance(table, dict) else table))
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                if module is None:
                    continue
                parent = module.split(".") if is_package else module.split(".")[:-1]
                parent = parent[:len(parent) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return {n for n in out if n == _PACKAGE or n.startswith(_PACKAGE + ".")}


def closure(names, package_root: Path = PACKAGE_ROOT) -> list[Path]:
    """The source files of the ``linattn`` modules ``names`` and of everything they import, transitively (with
    the ``__init__.py`` of every package on the way), sorted."""
    package_root = Path(package_root)
    seen: dict[str, Path] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for k in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ first
            prefix = ".".join(parts[:k])
            path = _module_file(prefix, package_root)
            if path is None or prefix in seen:
                continue
            seen[prefix] = path
            mod = _module_name(path, package_root)
            todo.extend(imported_names(path.read_text(encoding="utf-8"), module=mod,
                                       is_package=path.name == "__init__.py"))
    return sorted(set(seen.values()))


def source_hash(code_cells, package_root: Path = PACKAGE_ROOT) -> str:
    """SHA-256 over the relative path and content of every source file the code cells ``code_cells`` depend on
    (:func:`closure` of what they import)."""
    names = set().union(*(imported_names(c) for c in code_cells)) if code_cells else set()
    h = hashlib.sha256()
    for path in closure(names, package_root):
        h.update(path.relative_to(package_root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def notebook_sources(notebook) -> list[str]:
    """The code of a notebook's code cells."""
    return [c.source for c in notebook.cells if c.cell_type == "code"]
