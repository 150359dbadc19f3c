"""Each figure's computation as a library function, usable without the book, and the registry of figures.

A figure is its notebook ``figures_src/<name>.md`` and its module ``figures/<name>.py`` (the same name; a line in
``_toc.yml`` shows it). The module holds the whole recipe of one page, top to bottom:

* ``NAME`` (its module's name) and, as data, ``PRESETS = {"paper": {...}, "quick": {...}}``, ``KNOB_CASES`` (two
  or more cheap dicts of ``--param`` overrides beyond the presets that the page must stay true at), ``HELP`` for the
  knobs only it has, ``TOLERANCES`` (what its quick build's numbers must show), ``PUBLISHED`` (the names of the
  published readings and the rules it compares with: its own, defined in the module itself, which holds a figure's
  readings, rules and panels, or shared ones in :mod:`linattn.companion.published`);
* ``runs(S)``: the one declaration of what it trains, ``{label: RunConfig or common.runs.FromRun}``;
* ``compute(S) -> xarray.Dataset``: trains ``runs(S)`` through the run store and returns every curve and derived
  quantity with named dimensions, the theory's levels as variables and the settings as attributes;
* ``numbers(ds)``: its ``numbers.json`` rows, each with a stable ``key``; ``plot(ds)`` and ``words(ds)``.

The contract (:class:`.figure_contract.Figure`, :func:`contract`) declares these names: which are required, and the
defaults of the others. What several figures share lives in :mod:`.common`. The notebook is prose around one call,
``page = frame.build(fig, globals())`` (:func:`.common.frame.build`: the settings, ``compute``, the frame
:func:`~linattn.companion.figures.common.frame.figure` that times the page, sets the style and writes the files, and
the glued words); in Python::

    from linattn.companion import figures, presets
    fig = figures.module(name)              # name: a notebook's stem in figures_src/
    ds = fig.compute(presets.settings(fig, "quick", seed=3))
    ds.train_loss.plot(col="model")
"""

from __future__ import annotations

import importlib
import pkgutil

COMMON = "common"
NOT_FIGURES = (COMMON, "figure_contract", "page_build")


def names() -> list[str]:
    """Every figure, by name: the modules of this package (but ``common``, the contract and the page builder),
    sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.ispkg and m.name not in NOT_FIGURES)


def module(name: str):
    """The module of figure ``name``; KeyError for a name that is no figure."""
    if name not in names():
        raise KeyError(f"no figure {name!r}; known: {', '.join(names())}")
    return importlib.import_module(f"{__name__}.{name}")


def contract(name: str):
    """Figure ``name``'s declarations as a checked :class:`~.figure_contract.Figure` (its module's names, the
    optional ones defaulted in the contract); KeyError for a name that is no figure, TypeError for a module that
    breaks the contract."""
    from .figure_contract import of_module

    return of_module(module(name))


def name_of(figure) -> str:
    """A figure's name from its module, or the name itself."""
    return figure if isinstance(figure, str) else figure.__name__.rsplit(".", 1)[-1]
