"""Count calls of the settings' and runs' checks across every process of a figure build: the runner, its pool worker
and the notebook's kernel.

:func:`counting` writes a ``sitecustomize.py`` into a temporary folder put first on ``$PYTHONPATH``, so that every
Python process the build starts (the spawned worker, the kernel) installs the counters as it starts; the process the
test runs in gets them by :func:`install`. Each counted call appends one line, ``<pid> <what>``, to the file named
by ``$LINATTN_TEST_COUNTS``. The counted functions are wrapped where they are defined (a module's attribute, a
class's method), so calls from inside their own module are counted too; a module is wrapped as it is imported
(a finder on ``sys.meta_path``), or at once where it is imported already.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import os
import sys
import types
from collections import Counter
from pathlib import Path

ENV = "LINATTN_TEST_COUNTS"

# module → the functions counted there ("Class.method" for a method)
COUNTED = {
    "linattn.companion.presets": ("resolve", "settings", "parameters", "check_model"),
    "linattn.config": ("RunConfig._check_all",),  # validate's checks, where they are carried out
}
FIGURES = "linattn.companion.figures."  # every figure module's own runs(S) is counted as "<module>.runs"

SITECUSTOMIZE = f"""\
import os, sys
if os.environ.get({ENV!r}):
    sys.path.insert(0, {str(Path(__file__).parent)!r})
    import counting
    sys.path.pop(0)
    counting.install()
"""


def _record(what: str, detail: str = "") -> None:
    with open(os.environ[ENV], "a", encoding="utf-8") as f:  # one short append: lines of processes never mix
        f.write(f"{os.getpid()} {what}{chr(9) + detail if detail else ''}\n")


def _run_words(args) -> str:
    """Which run a RunConfig check is about (its first argument): settings that tell a figure's runs apart,
    not those that change as a run is stored or carried on (track_value, epoch)."""
    cfg = args[0]
    return " ".join(f"{k}={getattr(cfg, k)}" for k in ("model", "seed", "draws", "engine", "dynamics"))


def _counted(function, what: str):
    if getattr(function, "_counted", False):
        return function

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        _record(what, _run_words(args) if what.endswith("_check_all") else "")
        return function(*args, **kwargs)

    wrapper._counted = True
    return wrapper


def _patch(module, setattr_=setattr) -> None:
    """Wrap the counted functions of ``module`` (one of :data:`COUNTED`, or a figure module's ``runs``)."""
    name = module.__name__
    for dotted in COUNTED.get(name, ()):
        owner, _, attr = dotted.rpartition(".")
        target = getattr(module, owner) if owner else module
        setattr_(target, attr, _counted(getattr(target, attr), f"{name.rsplit('.', 1)[-1]}.{dotted}"))
    runs, what = getattr(module, "runs", None), f"{name.rsplit('.', 1)[-1]}.runs"
    if not name.startswith(FIGURES) or runs is None:
        return
    if isinstance(runs, types.FunctionType) and runs.__module__ == name:
        setattr_(module, "runs", _counted(runs, what))
    elif isinstance(getattr(runs, "function", None), types.FunctionType):  # the contract's Once: count each build
        setattr_(runs, "function", _counted(runs.function, what))


def _wanted(name: str) -> bool:
    return name in COUNTED or (name.startswith(FIGURES) and name.count(".") == 3)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it asks the other finders and wraps the counted functions of the module once loaded."""

    def find_spec(self, fullname, path, target=None):
        if not _wanted(fullname):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                load = spec.loader.exec_module

                def exec_module(module, load=load):
                    load(module)
                    _patch(module)

                spec.loader.exec_module = exec_module
                return spec
        return None


def install(setattr_=setattr) -> None:
    """Count in this process: modules already imported are wrapped now (through ``setattr_``: a test's
    ``monkeypatch.setattr`` undoes it), the others as they are imported."""
    for name in list(sys.modules):
        if _wanted(name):
            _patch(sys.modules[name], setattr_)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def uninstall() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]


@contextlib.contextmanager
def counting(folder: Path, monkeypatch):
    """Count the calls of every process started in the block (and of this one); yields a function that reads the
    counts so far: ``{what: calls}`` over all processes, ``{what: {pid: calls}}`` with ``by_process=True``, and
    every call as ``(pid, what, detail)`` with ``details=True`` (a RunConfig check's detail names its run)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    counts = folder / "counts.txt"
    counts.write_text("")
    monkeypatch.setenv(ENV, str(counts))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    install(monkeypatch.setattr)

    def read(by_process: bool = False, details: bool = False):
        if details:  # (pid, what, detail) of every call, in order
            return [(int(pid), what, detail) for line in counts.read_text().splitlines() if line
                    for (pid, what), detail in [(line.split("\t")[0].split(" ", 1), line.partition("\t")[2])]]
        rows = [line.split("\t")[0].split(" ", 1) for line in counts.read_text().splitlines() if line]
        if not by_process:
            return Counter(what for _, what in rows)
        out: dict = {}
        for pid, what in rows:
            out.setdefault(what, Counter())[int(pid)] += 1
        return out

    try:
        yield read
    finally:
        uninstall()
