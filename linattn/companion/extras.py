"""Which of linattn's optional dependencies ("extras", declared once in ``pyproject.toml``) are installed.

The companion's commands need more than the science core: ``linattn figures`` and ``linattn notebook`` need the
``figures`` extra (jupytext, papermill, a kernel, myst-nb's ``glue``, and the ``sweep`` extra for the phase diagram),
sweeps need ``sweep``. :func:`missing` reads what an extra requires from the installed package's own metadata, so
the list is never written twice, and :func:`require` turns a gap into one sentence naming the install command.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re

_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _requirement(text: str) -> re.Match[str]:
    """The match of a ``Requires-Dist`` line's project name (group 1) and extras (group 2)."""
    m = _REQUIREMENT.match(text)
    if m is None:
        raise ValueError(f"not a requirement: {text!r}")
    return m


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(extra: str | None, package: str = "linattn", declared: list[str] | None = None) -> list[str]:
    """The distributions ``package[extra]`` adds to a plain install (``extra=None``: those of the plain install),
    extras it names of ``package`` itself followed (``linattn[sweep]`` inside ``figures``). ``declared``: the
    package's ``Requires-Dist`` lines (default: the installed package's; [] when it is not installed, e.g. a
    source tree on ``sys.path``: nothing to check against)."""
    if declared is None:
        try:
            declared = metadata.requires(package) or []
        except metadata.PackageNotFoundError:
            return []
    if extra is None:
        return [_requirement(r).group(1) for r in declared if _EXTRA_MARKER.search(r.partition(";")[2]) is None]
    names, todo, seen = [], [extra], set()
    while todo:
        wanted = todo.pop()
        seen.add(wanted)
        for req in declared:
            requirement, _, marker = req.partition(";")
            m = _EXTRA_MARKER.search(marker)
            if m is None or m.group(1) != wanted:
                continue
            name, inner = _requirement(requirement).groups()
            if _normal(name) == _normal(package):
                todo += [e.strip() for e in (inner or "").split(",") if e.strip() and e.strip() not in seen]
            elif name not in names:
                names.append(name)
    return names


def missing(extra: str, package: str = "linattn") -> list[str]:
    """The distributions of ``package[extra]`` that are not installed."""
    gaps = []
    for name in requirements(extra, package):
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            gaps.append(name)
    return gaps


def require(extra: str, what: str) -> None:
    """ImportError in one sentence when ``what`` (e.g. "linattn figures") lacks distributions of ``extra``."""
    if gaps := missing(extra):
        raise ImportError(f"{what} needs linattn's {extra!r} extra ({', '.join(gaps)} not installed): "
                          f"pip install \"linattn[{extra}]\"")
