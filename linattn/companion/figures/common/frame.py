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
import json
import time

import numpy as np

from ...output import FigureOutput, NumbersTable
from ...plotting import use_style


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
        self.dataset = None
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
        attrs = self.dataset.attrs if self.dataset is not None else {}
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
