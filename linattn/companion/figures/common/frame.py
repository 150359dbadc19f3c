"""The frame every figure page runs in: timing, style, and the files a figure leaves.

    with figure(NAME, S, out_dir) as page:
        ds = fig01b.compute(S)
        page.save(ds, fig01b.plot(ds), fig01b.numbers(ds))

:meth:`FigurePage.save` writes the figure (PNG, SVG, PDF), the labelled dataset as NetCDF (``<name>.nc``: open it
with ``xarray.open_dataset``), the curves as a tidy CSV (one column per dimension and per variable along ``step``)
and ``numbers.json``; leaving the frame writes ``provenance.json`` with the wall time. Nothing is written when the
body raises.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import time
import types
from typing import TYPE_CHECKING

import numpy as np

from ...output import FigureOutput, NumbersTable
from ...plotting import use_style

if TYPE_CHECKING:
    import xarray as xr


def settings_attrs(S: dict, *, engine: str, seeds, runs: dict | None = None) -> dict:
    """A dataset's attributes from a figure's settings ``S``: NetCDF keeps text and numbers only, so the settings
    and the settings of each run (``runs``: name → ``RunConfig.to_dict()``) are JSON text."""
    seeds = [int(seeds)] if isinstance(seeds, (int, float)) else [int(s) for s in seeds]
    attrs = {"settings": json.dumps(S, sort_keys=True, default=str), "engine": str(engine), "seeds": seeds}
    if runs:
        attrs["runs"] = json.dumps(runs, sort_keys=True, default=str)
    return attrs


def padded(rows, width: int):
    """Ragged 1-d ``rows`` (runs of different lengths, plateaus found per run) as one (len(rows), width) float
    array, NaN past each row's end: a dataset variable over (run, position)."""
    out = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


class FigurePage:
    """What :func:`figure` yields: the output folder and the dataset a page saves."""

    def __init__(self, name: str, S: dict, out_dir=None):
        self.name, self.settings = name, dict(S)
        self.out = FigureOutput(name, out_dir)
        self.dataset: xr.Dataset | None = None
        self.provenance: dict = {}  # more keys for provenance.json (a page that trains nothing says what it read)
        self._start = time.perf_counter()

    def save(self, ds, fig=None, numbers=(), *, stem: str | None = None) -> NumbersTable:
        """Write ``ds`` (``<stem>.nc`` and the tidy ``<stem>.csv`` of its curves along ``step``; None: a page with
        no dataset), the figure ``fig`` and the ``numbers`` rows; ``stem`` defaults to the figure's name (a second
        dataset or figure of the page gets its own). Returns the numbers as a table."""
        import matplotlib.pyplot as plt

        stem = stem or self.name
        if stem == self.name:
            self.dataset = ds
        if ds is not None:
            self.out.save_dataset(ds, stem=stem)
        if fig is not None:
            self.out.save_figure(fig, stem=None if stem == self.name else stem)
            plt.close(fig)
        return self.out.save_numbers(list(numbers)) if stem == self.name else NumbersTable(list(numbers))

    def _finish(self) -> None:
        attrs: dict = self.dataset.attrs if self.dataset is not None else {}
        extra = {"runs": json.loads(attrs["runs"])} if "runs" in attrs else {}
        extra.update(self.provenance)
        if "commands" in attrs:
            extra["commands"] = attrs["commands"].splitlines()
        self.out.write_provenance(self.settings, seeds=attrs.get("seeds", []), engine=attrs.get("engine", "none"),
                                  wall_time=time.perf_counter() - self._start, **extra)


@contextlib.contextmanager
def figure(name: str, S: dict, out_dir=None):
    """The frame of figure ``name`` run with settings ``S``, writing under ``out_dir`` (see the module)."""
    use_style()
    page = FigurePage(name, S, out_dir)
    yield page
    page._finish()


#: How many allocations (net of frees) of container objects the cyclic garbage collector lets pass before it runs,
#: while a page is built; Python's default is 700.
PAGE_GC_THRESHOLD = 50_000


@contextlib.contextmanager
def fewer_collections(threshold: int = PAGE_GC_THRESHOLD):
    """The cyclic garbage collector run less often: its youngest generation every ``threshold`` allocations instead
    of Python's 700 (the older generations' counts as they were). A page allocates millions of small objects (the
    torch import, the runs' histories, matplotlib's artists) beside hundreds of thousands that live as long as the
    process, and each run of the older generations walks all of these again to find almost no garbage: about 0.4 s
    of CPU of a page (measured with ``gc.callbacks``: 0.6–0.7 s of collections at 700, 0.2 s at 50 000). Garbage
    in reference cycles is still collected, a little later. The thresholds are restored on leaving."""
    before = gc.get_threshold()
    gc.set_threshold(threshold, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


@dataclasses.dataclass(frozen=True)
class BuiltPage:
    """What :func:`build` gives a notebook: the figure's module ``fig``, its settings ``S``, its dataset ``ds``, its
    numbers ``table`` (a page of many: its tables by section), the values ``said`` its prose glues and its
    ``comparison`` with the published figure (None where it declares none or its run is not at the published
    settings)."""

    fig: types.ModuleType
    S: dict
    ds: xr.Dataset
    table: NumbersTable | dict
    said: dict
    comparison: list | None = None

    def summary(self, image, also: str = ""):
        """The comparison with the published ``image`` in words (:func:`linattn.companion.published.page.summary`),
        followed by ``also`` where there is a comparison, as Markdown."""
        from IPython.display import Markdown

        from ... import published

        return Markdown(published.page.summary(self.comparison or [], image) + (also if self.comparison else ""))

    def comparison_table(self, otherwise: str | None = None):
        """The comparison's table, or ``otherwise`` (a sentence saying why there is none) as Markdown; None where
        there is neither (the page's prose says why)."""
        from IPython.display import Markdown

        from ... import published

        if self.comparison:
            return published.page.table(self.comparison)
        return Markdown(otherwise) if otherwise else None

    def claims_table(self, claims, otherwise: str):
        """The table of the paper's ``claims`` set beside this run, or ``otherwise`` as Markdown where there is none."""
        from IPython.display import Markdown

        from ... import published

        return published.page.claims_table(claims) if claims else Markdown(otherwise)

    def markdown(self, text: str):
        """``text`` shown as Markdown (a page's sentences made by its module)."""
        from IPython.display import Markdown

        return Markdown(text)

    def titled(self, tables: dict, otherwise: str = "") -> None:
        """Show each table of ``tables`` (title → table, or a text saying why there is none, shown as Markdown) under
        its title in bold, or ``otherwise`` where there is no title."""
        from IPython.display import Markdown, display

        for title, table in tables.items():
            display(Markdown(f"**{title}**"), Markdown(table) if isinstance(table, str) else table)
        if not tables and otherwise:
            display(Markdown(otherwise))

    def commands(self, key: str = "commands"):
        """The commands that trained the page's runs (the dataset's ``key`` attribute, one a line) as a Markdown
        list."""
        from IPython.display import Markdown

        return Markdown("\n".join(f"* `{c}`" for c in self.ds.attrs[key].splitlines()))


def build(fig, namespace: dict, *, more_plots: tuple[str, ...] = (), **inputs) -> BuiltPage:
    """A figure page's one call: its settings (and runs) as the runner resolved them, given as data
    (:func:`linattn.companion.presets.given`), or, in a notebook run by hand, as its parameters cell left them in
    ``namespace`` (its ``globals()``, :func:`linattn.companion.presets.parameters`), its dataset
    ``fig.compute(S, **inputs)`` in the :func:`figure` frame (the figure, its data and ``numbers.json`` saved under
    ``namespace["out_dir"]``), each plot of ``more_plots`` (``"extended"``:
    ``fig.plot_extended(ds)``, saved as ``<name>_extended``), and its words glued. An input given as a function is
    called with the settings (``weights=fig.example_weights``). A figure that declares ``write_page(S, frame)``
    writes its page itself (two datasets, a cluster) and gives back its dataset, numbers table and words."""
    from ... import presets
    from ...output import glue
    from ..figure_contract import of_module
    from .runs import Once

    declared = of_module(fig)
    resolved = presets.given(namespace)
    if resolved is None:
        S = presets.parameters(declared.NAME, namespace)
    else:  # resolved and checked once, by the runner: used as they are
        S = resolved.settings
        if resolved.runs is not None and isinstance(declared.runs, Once):
            declared.runs.give(S, resolved.runs)
    # a page with no settings of its own (one that reads the others') records the preset it was built at
    with fewer_collections(), figure(declared.NAME, S or {"preset": namespace["preset"]},
                                     namespace.get("out_dir")) as page:
        if declared.write_page is not None:
            ds, table, said = declared.write_page(S, page)
        elif declared.compute is None or declared.words is None:
            raise TypeError(f"figure {declared.NAME!r} declares neither write_page nor compute and words")
        else:
            ds = declared.compute(S, **{k: v(S) if callable(v) else v for k, v in inputs.items()})
            table = page.save(ds, declared.plot(ds), declared.numbers(ds))
            said = declared.words(ds)
        for more in more_plots:
            page.save(None, getattr(fig, f"plot_{more}")(ds), stem=f"{declared.NAME}_{more}")
    glue(**said)
    comparison = declared.comparison(ds) if declared.comparison is not None else None
    return BuiltPage(fig, S, ds, table, said, comparison)
