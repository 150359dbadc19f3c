"""Names from before the package was split into the science core and the companion, kept for this release.

Each old name still works and warns once per use with a FutureWarning naming its replacement: moved modules
(``linattn.engines`` → ``linattn.objectives``, ``linattn.figure_io`` → ``linattn.companion.output``, …) through an
import hook that hands out a forwarding module, renamed functions, classes and keyword arguments through
:func:`deprecated_names` and :func:`renamed_kwargs`. The module ``linattn.run`` has no alias: that name is the
function :func:`linattn.run <linattn.experiment.run>` (its module is ``linattn.experiment``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED_MODULES = {
    "linattn.engines": "linattn.objectives",
    "linattn.population": "linattn.objectives.population",
    "linattn.softmax_engine": "linattn.objectives.softmax",
    "linattn.provenance": "linattn.records",
    "linattn.figures": "linattn.companion.runner",
    "linattn.notebooks": "linattn.companion.notebooks",
    "linattn.figure_io": "linattn.companion.output",
    "linattn.presets": "linattn.companion.presets",
    "linattn.published": "linattn.companion.published",
    "linattn.plotting": "linattn.companion.plotting",
    "linattn.book": "linattn.companion.book",
}


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    warnings.warn(f"{old} is deprecated and will be removed in the next release; use {new}", FutureWarning,
                  stacklevel=stacklevel)


def deprecated_names(module: str, names: dict):
    """A module ``__getattr__`` serving ``names`` = {old name: (function returning the new object, new name)}."""

    def __getattr__(name):
        if name in names:
            get, new = names[name]
            warn_renamed(f"{module}.{name}", new)
            return get()
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def renamed_kwargs(**renames: str):
    """Decorator: keyword ``old`` of the function is accepted as ``renames[old]`` with a FutureWarning."""

    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{fn.__name__}() got both {old}= (deprecated) and {new}=")
                    warn_renamed(f"{fn.__name__}({old}=…)", f"{new}=")
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return inner

    return wrap


class _Forward(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        target = importlib.import_module(self.target)
        warn_renamed(f"the module {module.__name__}", f"{self.target}", stacklevel=7)
        module.__getattr__ = lambda name: getattr(target, name)
        module.__dir__ = lambda: dir(target)
        module.__doc__ = f"Moved to {self.target}; this forwarding module is deprecated."


class _MovedModules(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED_MODULES:
            return importlib.util.spec_from_loader(fullname, _Forward(MOVED_MODULES[fullname]))
        return None


def install() -> None:
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.append(_MovedModules())


__all__ = ["MOVED_MODULES", "deprecated_names", "renamed_kwargs", "install"]
