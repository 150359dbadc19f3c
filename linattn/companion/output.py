"""Where a figure notebook writes its outputs, and how (every file atomically).

A figure ``name`` owns the folder ``<root>/<name>/``::

    <name>.png  <name>.svg  <name>.pdf   the figure (PNG at 150 dpi; a second figure: ``<stem>.*``)
    <name>.csv                           the curves drawn (extra CSVs: ``<stem>.csv``)
    numbers.json                         rows {quantity, paper, theory, reproduced, abs_error[, tolerance, verdict]}
    provenance.json                      parameters, seeds, engine, wall time, versions, git commit, date

``<root>`` is ``out_dir`` if given (the figure runner, ``linattn figures``, always gives it: by default
``_build/figures/<preset>``, and it writes the executed notebook beside the folder as ``<root>/<name>.ipynb``),
else ``$LINATTN_FIGURES_DIR``, else the working directory (a notebook opened in Jupyter writes next to itself).
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..records import atomic_path, atomic_write, provenance, write_csv, write_json
from .uncertainty import AGREES, CANNOT_TELL, DIFFERS, VERDICTS, difference_band, verdict  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

ENV_ROOT = "LINATTN_FIGURES_DIR"
NUMBER_FIELDS = ("quantity", "paper", "theory", "reproduced", "abs_error")


def figures_root(out_dir=None) -> Path:
    """``out_dir``, else ``$LINATTN_FIGURES_DIR``, else the working directory."""
    if out_dir is not None and str(out_dir) != "":
        return Path(out_dir)
    env = os.environ.get(ENV_ROOT)
    return Path(env) if env else Path.cwd()


def _number(x):
    """A JSON-ready number (None for missing or non-finite values); strings pass through unchanged."""
    if x is None or isinstance(x, str):
        return x
    x = float(x)
    return x if math.isfinite(x) else None


# The verdicts of a comparison and their bands live in one module (:mod:`linattn.companion.uncertainty`); a row may
# also say ESTIMATE: a theory value that is an order-of-magnitude estimate, not judged.
ESTIMATE = "estimate only"
_VERDICTS = (*VERDICTS, ESTIMATE)


def number_row(quantity: str, *, key: str | None = None, paper=None, theory=None, reproduced=None, abs_error=None,
               tolerance=None, verdict=None, standard_error=None, difference=None, band=None, offset=None,
               unresolved=None, unit=None, no_value=None, bound=None, checks_reading=None, restates=None,
               reference_only=None) -> dict:
    """One row of ``numbers.json``. ``abs_error`` defaults to |reproduced − theory| (|reproduced − paper| when
    there is no theory value), or None when neither is a number. A row that is a check may carry its
    ``tolerance`` and ``verdict`` (one of ``uncertainty.VERDICTS``, or ``ESTIMATE`` for a theory value that is an
    order-of-magnitude estimate, such as an escape time) and the ``standard_error`` of the compared difference (from
    per-sequence losses, :func:`linattn.companion.uncertainty.mean_loss_error`); these keys are present only when
    given. A reading of a published image also carries what its verdict applied (``difference``: ours − the
    reading, signed; ``band``; ``offset`` removed first; ``unresolved`` margin; ``unit``), so that the report shows
    the band the verdict used. ``no_value``: why a row has no reproduced value, where that is not that the event did
    not happen (a grid that brackets a value but gives none). ``bound``: True where ``difference`` is only a bound
    (the reading is known only to lie beyond a step: ``published.rules.is_bound``). ``checks_reading``: True where
    the reading checks the reading itself (the image's drawn theory beside ours); ``restates``: the rows whose fact
    it restates; either keeps its verdict out of every count (``published.page.counted``). ``reference_only``: what
    the ``theory`` value is where it is only a reference for this model, not its theory (Figure 5's softmax final
    loss beside linear attention's L*, "linear attention's L*"): the row then has no error against it (no
    ``abs_error`` by default, "not comparable" in the report, :func:`compare_row`). ``key``: the
    row's stable name (e.g. ``"final_loss.attn_m"``), by which the report, the README and the tests find it
    whatever its wording."""
    row = {"quantity": str(quantity), "paper": _number(paper), "theory": _number(theory),
           "reproduced": _number(reproduced), "abs_error": _number(abs_error)}
    if key is not None:
        row = {"key": str(key), **row}
    if row["abs_error"] is None and isinstance(row["reproduced"], float):
        ref = row["theory"] if isinstance(row["theory"], float) and not reference_only else row["paper"]
        if isinstance(ref, float):
            row["abs_error"] = abs(row["reproduced"] - ref)
    if verdict is not None and verdict not in _VERDICTS:
        raise ValueError(f"verdict must be one of {_VERDICTS}, got {verdict!r}")
    if tolerance is not None:
        row["tolerance"] = _number(tolerance)
    if standard_error is not None:
        row["standard_error"] = _number(standard_error)
    if verdict is not None:
        row["verdict"] = verdict
    for name, value in (("difference", difference), ("band", band), ("offset", offset), ("unresolved", unresolved)):
        if value is not None:
            row[name] = _number(value)
    if unit is not None:
        row["unit"] = str(unit)
    if no_value is not None:
        row["no_value"] = str(no_value)
    if bound:
        row["bound"] = True
    if checks_reading:
        row["checks_reading"] = True
    if restates:
        row["restates"] = [str(r) for r in restates]
    if reference_only:
        row["reference_only"] = str(reference_only)
    return row


NOT_COMPARABLE = "not comparable"


def compare_row(row: dict) -> dict:
    """How a ``numbers.json`` row enters the reproduction report: ``{"error", "relative", "kind"}``.

    ``error`` is the absolute error (a number), or the text ``"not comparable: <reason>"``; ``relative`` is
    error / |reference| where the reference (theory, else paper) is a non-zero number, else None. ``kind``:
    ``"relative"`` (has both), ``"absolute"`` (an error, but the reference is 0 or a text such as ``"< 29"``), or
    ``"not comparable"``. Lists given as text (e.g. plateau indices ``"0 2 4"``) are compared as text: equal lists
    have error 0; lists that differ are not comparable as numbers, and the reason names both. A row whose theory
    value is only a reference for its model (``reference_only``, :func:`number_row`) is compared with the paper
    value, else not comparable: its difference from that reference is no error of the run.

    ``verdict`` is the row's own (:func:`number_row`), else, where the row states a ``tolerance``,
    :func:`linattn.companion.uncertainty.verdict` of its error in the row's ``band`` (else tolerance + 2 × its
    ``standard_error``, if any) and ``unresolved`` margin, else None (a number reported without a stated
    tolerance)."""
    result = _compare(row)
    stated, tol = row.get("verdict"), row.get("tolerance")
    if stated is None and tol is not None:
        band = row.get("band")
        stated = verdict(result["error"] if not isinstance(result["error"], str) else None,
                         band if band is not None else difference_band(row.get("standard_error"), resolution=tol),
                         row.get("unresolved") or 0.0)
    return {**result, "verdict": stated}


def _compare(row: dict) -> dict:
    ours, theory, paper, err = (row.get(k) for k in ("reproduced", "theory", "paper", "abs_error"))
    def is_num(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

    ref = theory if theory is not None else paper
    ref_name = "theory" if theory is not None else "paper"

    def out(error, kind, relative=None):
        return {"error": error, "relative": relative, "kind": kind}

    if ours is None:
        why = row.get("no_value") or "the event did not happen in the run"
        return out(f"{NOT_COMPARABLE}: no reproduced value ({why})", NOT_COMPARABLE)
    if row.get("reference_only"):  # its theory value is no theory of this model: the paper's, else none
        if paper is None:
            return out(f"{NOT_COMPARABLE}: a reference, not this model's theory ({row['reference_only']})",
                       NOT_COMPARABLE)
        ref, ref_name, err = paper, "paper", None
    if ref is None:
        return out(f"{NOT_COMPARABLE}: no paper or theory value (reported for information)", NOT_COMPARABLE)
    if isinstance(ours, str) or (isinstance(ref, str) and not is_num(err)):
        if isinstance(ours, str) and isinstance(ref, str) and ours.split() == ref.split():
            return out(0.0, "relative", 0.0)  # the same list
        return out(f"{NOT_COMPARABLE}: text, not numbers (ours {ours}, {ref_name} {ref})", NOT_COMPARABLE)
    error = err if is_num(err) else (abs(float(ours) - float(ref)) if is_num(ref) else None)
    if error is None:
        return out(f"{NOT_COMPARABLE}: the {ref_name} value is not a finite number", NOT_COMPARABLE)
    if is_num(ref) and ref != 0:
        return out(float(error), "relative", float(error) / abs(float(ref)))
    return out(float(error), "absolute")


def median_and_range(values) -> str:
    """"median (min–max)" of the finite ``values``, as whole steps (:func:`step_number`); "not within the run" when
    none is finite (no run made the event)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return (f"{step_number(np.median(v))} ({step_number(v.min())}–{step_number(v.max())})" if v.size
            else NOT_WITHIN_RUN)


def _fmt(x) -> str:
    if x is None:
        return "–"
    if isinstance(x, str):
        return x
    if float(x).is_integer() and abs(x) < 1e9:  # a step or a count: all its digits, never 1.474e+05
        return str(int(x))
    if 1e4 <= abs(x) < 1e9:  # a step estimate (86190.4): whole steps, never 8.619e+04
        return str(step_number(x))
    return f"{x:.4g}"


NOT_WITHIN_RUN = "not within the run"


def step_number(x) -> int | None:
    """A step as the pages print it: the nearest whole step (a median over an even number of seeds, 405.5, is
    printed 406), None where there is none (NaN: the event did not come within the run)."""
    if x is None:
        return None
    x = float(x)
    return int(np.floor(x + 0.5)) if math.isfinite(x) else None


def step_text(x, missing: str = NOT_WITHIN_RUN) -> str:
    """A step in words: the whole step (:func:`step_number`), or ``missing`` ("not within the run") where there is
    none, never "nan"."""
    n = step_number(x)
    return missing if n is None else str(n)


def _cell(row: dict, key: str) -> str:
    """One cell of :class:`NumbersTable`: the value (:func:`_fmt`), and an error that is only a bound (the row's
    ``bound``) said as one, "at least 316"."""
    shown = _fmt(row[key])
    return f"at least {shown}" if key == "abs_error" and row.get("bound") and row[key] is not None else shown


class NumbersTable:
    """The rows of ``numbers.json``; shown as a markdown table in a notebook and as aligned text by ``print``."""

    def __init__(self, rows: list[dict]):
        self.rows = rows

    def _cells(self):
        return [list(NUMBER_FIELDS)] + [[_cell(r, k) for k in NUMBER_FIELDS] for r in self.rows]

    def __str__(self) -> str:
        cells = self._cells()
        widths = [max(len(row[j]) for row in cells) for j in range(len(NUMBER_FIELDS))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        cells = self._cells()
        head, body = cells[0], cells[1:]
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in body]  # a | in a cell
        return "\n".join(out)


@contextlib.contextmanager
def _no_distributed_unless_imported():
    """While xarray writes a file, a ``dask.distributed`` that this process has not imported stays unimported.

    xarray asks which Dask scheduler is active before it writes (``get_dask_scheduler``), and the asking imports
    ``distributed`` (about 0.35 s of CPU) to see whether a ``Client`` is the one. Where ``distributed`` was never
    imported no client can exist, so the answer is the same without it: the import is made to fail (a ``None`` in
    ``sys.modules``, which xarray and Dask catch as "not installed") and the entries are removed afterwards. Where it
    is imported (a page with a Dask cluster) nothing changes."""
    blocked = () if "distributed" in sys.modules else ("distributed", "dask.distributed")
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # None there makes the import fail (the import system's rule)
    try:
        yield
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


CSV_FLOAT = "%.8g"  # the digits a dataset's tidy CSV keeps


def csv_floats(values) -> np.ndarray:
    """The text of each float of ``values`` as ``DataFrame.to_csv(float_format=CSV_FLOAT)`` writes it (``CSV_FLOAT %
    x``, and an empty cell for NaN), as an object array: a column of these is written as it is, and about twice as
    fast as pandas formats the floats itself (a call per value)."""
    return np.array(["" if x != x else CSV_FLOAT % x for x in np.asarray(values, dtype=np.float64).tolist()],
                    dtype=object)


FIGURE_FORMATS = ("png", "svg", "pdf")
PNG_DPI = 150
# Under these rcParams, ``set_layout_engine(None)`` means no engine (else it would pick one from them).
_NO_ENGINE: dict[RcKeyType, Any] = {"figure.autolayout": False, "figure.constrained_layout.use": False}


@contextlib.contextmanager
def laid_out_once(fig, dpi: float = PNG_DPI):
    """``fig`` laid out once, for saving in several formats: yields its tight bounding box (inches, padded by
    ``savefig.pad_inches``), to be passed as ``bbox_inches`` to each ``savefig``, and the PNG's pixels (or None),
    while its layout engine is off.

    ``savefig(bbox_inches="tight")`` draws the figure twice per file: once to run the layout engine (constrained
    layout) and measure the text for the tight box, once to write. Each draw lays out every text anew in a fresh
    renderer (mathtext is parsed again: most of the cost). Here the figure is drawn once at ``dpi`` on its own canvas
    (the renderer its layout measured the text with, when the figure's dpi is ``dpi``), its box is measured, and the
    layout engine is switched off so that each file is written by one draw at the axes positions that layout left.
    That draw is the PNG's where it can be (:func:`_png_pixels`: the drawn pixels inside the box), so the PNG costs no
    draw of its own. Every file shows the same layout. On leaving, the figure's engine and dpi are as they were."""
    import matplotlib as mpl

    engine, figure_dpi = fig.get_layout_engine(), fig.dpi
    fig.dpi = dpi
    try:
        drawn = _draw_on_agg(fig)
        tight = fig.get_tightbbox()
        bbox = tight.padded(mpl.rcParams["savefig.pad_inches"])
        pixels = _png_pixels(fig, tight, bbox) if drawn else None
    finally:
        fig.dpi = figure_dpi
    with mpl.rc_context(_NO_ENGINE):
        fig.set_layout_engine(None)
    try:
        yield bbox, pixels
    finally:
        with mpl.rc_context(_NO_ENGINE):
            fig.set_layout_engine(engine)


def _draw_on_agg(fig) -> bool:
    """Draw ``fig``: rendered on its canvas where that is Agg's (the Agg and inline backends) and its layout is
    settled (no layout engine left to run: ``tight_layout`` done or none), and True; else laid out without output
    (its engine runs), and False. A first draw that runs constrained layout renders some lines' antialiasing a
    little unlike every later draw, so such a figure's PNG is drawn by ``savefig``, as a second save would draw it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    engine = fig.get_layout_engine()
    if isinstance(fig.canvas, FigureCanvasAgg) and (engine is None or isinstance(engine, PlaceHolderLayoutEngine)):
        fig.canvas.draw()
        return True
    fig.draw_without_rendering()
    return False


def _png_pixels(fig, tight, bbox):
    """The RGBA pixels inside ``bbox`` (inches; ``tight`` padded) of ``fig`` as its Agg canvas has just drawn it,
    the part of the box past the figure's edge (the padding around text that comes close to it) filled with the
    figure's face colour, as ``savefig(bbox_inches=bbox)`` fills it. None where savefig would show what the canvas
    does not hold: artists past the figure's edge (``tight`` reaching past it), or a background that is not the
    figure's own opaque face without a frame (``savefig.facecolor``/``edgecolor`` other than "auto",
    ``savefig.transparent``, a translucent face, a drawn edge). The box's edges are rounded to whole pixels, so the
    image is shifted by less than half a pixel from savefig's."""
    import matplotlib as mpl
    from matplotlib.colors import to_rgba

    face = to_rgba(fig.get_facecolor())
    if (mpl.rcParams["savefig.transparent"] or face[3] < 1.0 or fig.patch.get_linewidth() > 0
            or mpl.rcParams["savefig.facecolor"] != "auto" or mpl.rcParams["savefig.edgecolor"] != "auto"):
        return None
    width, height = fig.canvas.get_width_height(physical=True)
    if tight.x0 < 0 or tight.y0 < 0 or tight.x1 * fig.dpi > width or tight.y1 * fig.dpi > height:
        return None
    x0, x1 = (int(round(x * fig.dpi)) for x in (bbox.x0, bbox.x1))
    top, bottom = (int(round(height - y * fig.dpi)) for y in (bbox.y1, bbox.y0))
    out = np.empty((bottom - top, x1 - x0, 4), dtype=np.uint8)
    out[...] = np.round(np.multiply(face, 255))
    rows, cols = slice(max(top, 0), min(bottom, height)), slice(max(x0, 0), min(x1, width))
    out[rows.start - top:rows.stop - top, cols.start - x0:cols.stop - x0] = \
        np.asarray(fig.canvas.buffer_rgba())[rows, cols]
    return out


class FigureOutput:
    """The output folder of figure ``name``, created when the first file is asked for (:meth:`path`), so that a
    notebook that fails before it writes anything leaves no empty folder behind."""

    def __init__(self, name: str, out_dir=None):
        self.name = name
        self.root = figures_root(out_dir)
        self.dir = self.root / name

    def path(self, filename: str) -> Path:
        """Where the file ``filename`` of this figure goes (its folder is created now if it does not exist yet)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        return self.dir / filename

    def save_figure(self, fig, stem: str | None = None) -> list[Path]:
        """``<name>.png`` (``PNG_DPI``), ``.svg`` and ``.pdf`` (a page's second figure: ``<stem>.*``), all three from
        one layout and one bounding box (:func:`laid_out_once`); dates left out of the metadata so reruns are
        stable. The SVG (the image the book shows) always keeps its text as ``<text>`` elements (``svg.fonttype:
        none``), so the page shows real text at its font size (``tests/readability.py`` checks those sizes)."""
        import matplotlib as mpl
        import matplotlib.image

        metadata = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}
        paths = []
        with mpl.rc_context({"svg.fonttype": "none"}), laid_out_once(fig, PNG_DPI) as (bbox, pixels):
            for fmt in FIGURE_FORMATS:
                buf = io.BytesIO()
                if fmt == "png" and pixels is not None:  # what savefig's PNG writer does with the drawn pixels
                    matplotlib.image.imsave(buf, pixels, format="png", origin="upper", dpi=PNG_DPI,
                                            metadata=metadata[fmt])  # type: ignore[arg-type]  # None: no key
                else:
                    fig.savefig(buf, format=fmt, dpi=PNG_DPI, bbox_inches=bbox, metadata=metadata[fmt])
                path = self.path(f"{stem or self.name}.{fmt}")
                atomic_write(path, lambda f, b=buf: f.write(b.getvalue()), binary=True)
                paths.append(path)
        return paths

    def save_rows(self, rows: list[dict], columns: list[str], stem: str | None = None) -> Path:
        """``rows`` (dicts) as ``<name>.csv`` (or ``<stem>.csv``) with the header ``columns``: text as it is, numbers
        to 6 significant digits, None as an empty cell. For tables that mix text and numbers; curves go through
        :meth:`save_table`."""
        def cell(x):
            return "" if x is None else x if isinstance(x, str) else f"{x:.6g}"

        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([cell(r.get(k)) for k in columns] for r in rows)
        path = self.path(f"{stem or self.name}.csv")
        atomic_write(path, lambda f: f.write(buf.getvalue()))
        return path

    def save_table(self, columns: dict, stem: str | None = None, *, pad: bool = False) -> Path:
        """The curves drawn, as ``<name>.csv`` (or ``<stem>.csv``). Columns must have equal lengths, unless ``pad``:
        then shorter ones (runs of fewer steps) are continued with NaN to the longest."""
        lengths = {k: len(v) for k, v in columns.items()}
        if pad:
            n = max(lengths.values())
            columns = {k: np.concatenate([np.asarray(v, dtype=np.float64), np.full(n - len(v), np.nan)])
                       for k, v in columns.items()}
        elif len(set(lengths.values())) > 1:
            raise ValueError(f"columns of unequal length: {lengths} (pad=True continues the short ones with NaN)")
        path = self.path(f"{stem or self.name}.csv")
        write_csv(path, columns)
        return path

    def save_dataset(self, ds, stem: str | None = None) -> Path:
        """The figure's labelled data: ``ds`` as NetCDF (``<name>.nc``, or ``<stem>.nc``; ``xarray.open_dataset``
        reads it back) and its curves, the variables along ``step`` (all variables when none is), as a tidy CSV
        beside it (``<name>.csv``: a column per dimension and one per variable, a row per point; points where every
        variable is missing — a run shorter than the longest, a step axis another run does not share — are left
        out)."""
        stem = stem or self.name
        with atomic_path(self.path(f"{stem}.nc")) as tmp, _no_distributed_unless_imported():
            ds.to_netcdf(tmp, engine="h5netcdf")
        curves = [v for v in ds.data_vars if "step" in ds[v].dims] or list(ds.data_vars)
        table = ds[curves].to_dataframe().dropna(how="all").reset_index()
        for column in table.columns[[dtype.kind == "f" for dtype in table.dtypes]]:
            table[column] = csv_floats(table[column].to_numpy())
        path = self.path(f"{stem}.csv")
        atomic_write(path, lambda f: table.to_csv(f, index=False, float_format=CSV_FLOAT, lineterminator="\n"))
        return path

    def save_numbers(self, rows: list[dict]) -> NumbersTable:
        """Write ``numbers.json`` (rows completed by :func:`number_row`) and return the table for display. Rows that
        carry a ``key`` must carry distinct ones (the report, the README and the tests find rows by key)."""
        full = [number_row(**r) for r in rows]
        keys = [r["key"] for r in full if "key" in r]
        if len(set(keys)) < len(keys):
            raise ValueError(f"numbers.json keys must be unique; repeated: "
                             f"{sorted({k for k in keys if keys.count(k) > 1})}")
        write_json(self.path("numbers.json"), full)
        return NumbersTable(full)

    def write_provenance(self, params: dict, seeds, engine, wall_time: float, **extra) -> None:
        """``provenance.json``: :func:`linattn.records.provenance` plus the figure's parameters, seeds, engine
        and wall time (seconds), and any ``extra`` keys. Returns nothing: as a notebook cell's last line, a path
        would be shown on the page."""
        info = provenance()
        if seeds is not None:
            seeds = [int(seeds)] if isinstance(seeds, (int, float)) else [int(s) for s in seeds]
        info.update(figure=self.name, parameters=dict(params), seeds=seeds,
                    engine=engine, wall_time_s=round(float(wall_time), 3), **extra)
        write_json(self.path("provenance.json"), info)


PROSE_DIGITS = 3  # significant digits a number in prose keeps (more than a run's noise or a reading ever supports)


def prose_number(x, digits: int = PROSE_DIGITS):
    """``x`` rounded to the digits it means, as a plain Python number: ``digits`` significant digits, but never fewer
    than the whole part (a step 1548.6 stays 1549), and a whole result as an ``int`` (16.00000000000002 → 16,
    0.136123 → 0.136, 2.0e-4 stays 0.0002). None and non-finite values give None."""
    if x is None:
        return None
    x = float(x)
    if not math.isfinite(x):
        return None
    if x == 0:
        return 0
    places = max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))
    r = round(x, places)
    return int(r) if float(r).is_integer() else r


def prose_text(x, digits: int = PROSE_DIGITS) -> str:
    """``x`` as prose writes it (:func:`prose_number`; "–" when missing), ``1e-06`` style for tiny or huge values."""
    v = prose_number(x, digits)
    if v is None:
        return "–"
    return str(v) if isinstance(v, int) or 1e-4 <= abs(v) < 1e6 else f"{v:.{digits}g}"


def prose_value(value):
    """``value`` as a plain Python value, the form a page's prose shows: text and booleans as they are, numbers
    rounded to the digits they mean (:func:`prose_number`: numpy scalars become ``int`` or ``float``, whole numbers
    ``int``); None and non-finite numbers give None. (numpy 2 writes ``np.float64(3.0)`` as its repr, which a page
    cannot format.)"""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    return prose_number(value)


def subscript(n: int) -> str:
    """``n`` in subscript digits, for text that shows no math (glued prose): 12 → ₁₂."""
    return str(n).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))


def saddle(m: int) -> str:
    """The saddle ℳ_m as glued prose writes it: ℳ₃."""
    return "ℳ" + subscript(m)


class _Words(str):
    """Text glued into prose: shown as it is (a ``str``'s repr would add quotes)."""

    def __repr__(self) -> str:
        return str(self)


def glue(**values) -> None:
    """Hand numbers and words from the run to the page's prose: each ``name=value`` is glued with myst-nb (not
    displayed), and the page quotes it as ``{glue:text}`name``` (shown as glued, text without quotes). Values go
    through :func:`prose_value`: glue is the one formatter of a page's numbers, so a page never adds a format spec
    (``name:.4f`` would re-format a number already rounded to 3 digits: 5/36 → 0.139 → "0.1390"); a number meant
    with other digits is glued as text (:func:`prose_text` with ``digits``). Returns None, so a
    cell may end with it.

    Glued text is shown as it is, never parsed, so TeX in it would reach the reader as dollar signs: a text with a
    ``$`` is refused (ValueError naming it), and prose writes symbols in Unicode (:func:`saddle`, :func:`subscript`)."""
    from myst_nb import glue as _glue

    for name, v in values.items():
        v = prose_value(v)
        if isinstance(v, str) and "$" in v:
            raise ValueError(f"glued text {name}={v[:80]!r} holds TeX, which glued text shows as it is: write it in "
                             "Unicode (output.saddle, output.subscript)")
        _glue(name, _Words(v) if isinstance(v, str) else v, display=False)


def words(values, last: str = "and") -> str:
    """``[3034, 7297, 11979]`` → ``"3034, 7297 and 11979"`` (each number as :func:`prose_text` writes it: integers
    as integers, others to the digits they mean); ``"–"`` when empty."""
    items = [prose_text(v) for v in values] if values is not None else []
    if not items:
        return "–"
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


class MarkdownTable:
    """Rows (dicts) shown as a markdown table in a notebook: ``MarkdownTable(rows, {"drop": "drop", ...})`` maps each
    column's key to its header. Numbers are written to 4 significant digits (``formats`` may give a column its own
    format spec, e.g. ``{"step": ".0f"}``); None is shown as –; text passes through (a | is escaped)."""

    def __init__(self, rows: list[dict], columns: dict[str, str], formats: dict[str, str] | None = None):
        self.rows, self.columns, self.formats = rows, columns, formats or {}

    def _cell(self, key, x) -> str:
        if x is None or (isinstance(x, float) and not math.isfinite(x)):
            return "–"
        if isinstance(x, str):
            return x.replace("|", "\\|")
        if isinstance(x, (int, np.integer)) and key not in self.formats:
            return str(int(x))
        return format(float(x), self.formats.get(key, ".4g"))

    def _repr_markdown_(self) -> str:
        out = ["| " + " | ".join(self.columns.values()) + " |", "|" + "---|" * len(self.columns)]
        out += ["| " + " | ".join(self._cell(k, r.get(k)) for k in self.columns) + " |" for r in self.rows]
        return "\n".join(out)

    def __str__(self) -> str:
        return self._repr_markdown_()

    __repr__ = __str__


def by_sign(value, negative: str, positive: str, zero: str) -> str:
    """The word for the sign of ``value``: ``negative`` below 0, ``positive`` above, ``zero`` at 0 (and for NaN, which
    has no sign). The one rule by which prose turns a signed difference into "before"/"after", "earlier"/"later"."""
    x = float(value)
    return negative if x < 0 else positive if x > 0 else zero
