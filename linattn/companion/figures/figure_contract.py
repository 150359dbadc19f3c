"""What a figure module provides, declared once: :class:`Figure`, read through :func:`contract`.

A figure module (``figures/<name>.py``) is read only through this contract: the readers (presets, the README table,
the runner, the tests) ask ``contract(name).HELP``, never ``getattr(module, "HELP", {})``, so an optional name's
default is declared here and nowhere else. :func:`contract` checks the module as it builds the record: a module that
lacks a required name, or declares one of the wrong type, raises a TypeError naming the figure and the name.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from typing import Any

from .common.runs import Once

PRESET_NAMES = ("paper", "quick")


@dataclasses.dataclass(frozen=True)
class Figure:
    """The names one figure module declares (upper case: data; lower case: functions of its settings or dataset).

    Required: ``NAME`` (the module's own name), ``PRESETS`` (``{"paper": {...}, "quick": {...}}``), ``KNOB_CASES``
    (``--param`` overrides beyond the presets the page stays true at), ``TOLERANCES`` (what its quick build's numbers
    must show, a list), ``numbers(ds)`` (its ``numbers.json`` rows) and ``plot(ds)``.
    Optional, with their defaults here: ``HELP`` (the knobs only it has), ``PUBLISHED`` (names in
    :mod:`linattn.companion.published` it compares with), ``README_ROWS`` (its rows of the README's table),
    ``runs(S)`` (what it trains), ``compute(S)`` (its dataset), ``words(ds)`` (the values its prose glues) and
    ``check(S)`` (what its settings cannot be, beyond a run's own checks) and ``comparison(ds)`` (its rows beside the
    published figure); ``write_page(S, frame)`` for a page that is more than ``compute`` → ``plot`` → ``numbers``
    (it saves its files into the frame and returns its dataset, its numbers table and its words). Reading the contract
    puts a :class:`~linattn.companion.figures.common.runs.Once` in place of the module's ``runs``: one build per
    settings.
    """

    module: types.ModuleType
    NAME: str
    PRESETS: Mapping[str, dict]
    KNOB_CASES: tuple
    TOLERANCES: list
    numbers: Callable
    plot: Callable
    HELP: Mapping[str, str] = dataclasses.field(default_factory=dict)
    PUBLISHED: tuple = ()
    README_ROWS: tuple = ()
    runs: Callable | None = None
    compute: Callable | None = None
    words: Callable | None = None
    check: Callable | None = None
    comparison: Callable | None = None
    write_page: Callable | None = None


_FIELDS = {f.name: f for f in dataclasses.fields(Figure) if f.name != "module"}
REQUIRED = tuple(name for name, f in _FIELDS.items()
                 if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
OPTIONAL = tuple(name for name in _FIELDS if name not in REQUIRED)
_TYPES: dict[str, Any] = {"NAME": str, "PRESETS": dict, "KNOB_CASES": tuple, "TOLERANCES": list, "HELP": dict,
                          "PUBLISHED": tuple, "README_ROWS": tuple}


def _checked(name: str, key: str, value):
    want = _TYPES.get(key)
    if want is None:
        if value is not None and not callable(value):
            raise TypeError(f"figure {name!r}: {key} must be a function, not {type(value).__name__}")
    elif not isinstance(value, want):
        raise TypeError(f"figure {name!r}: {key} must be a {want.__name__}, not {type(value).__name__}")
    return value


def of_module(module: types.ModuleType) -> Figure:
    """The contract of ``module``, checked: TypeError for a missing required name or a name of the wrong type."""
    name = module.__name__.rsplit(".", 1)[-1]
    missing = [key for key in REQUIRED if not hasattr(module, key)]
    if missing:
        raise TypeError(f"figure {name!r} does not declare {', '.join(missing)} (required by figures.contract)")
    found = {key: _checked(name, key, getattr(module, key)) for key in _FIELDS if hasattr(module, key)}
    if found["NAME"] != name:
        raise TypeError(f"figure {name!r}: NAME is {found['NAME']!r}, not its module's name")
    if set(found["PRESETS"]) != set(PRESET_NAMES):
        raise TypeError(f"figure {name!r}: PRESETS must hold exactly {', '.join(PRESET_NAMES)}")
    if not all(isinstance(case, dict) for case in found["KNOB_CASES"]):
        raise TypeError(f"figure {name!r}: every KNOB_CASES entry must be a dict of --param overrides")
    if found.get("runs") is not None and not isinstance(found["runs"], Once):
        found["runs"] = Once(found["runs"])
        setattr(module, "runs", found["runs"])  # the module's own calls share one build per settings
    return Figure(module=module, **found)
