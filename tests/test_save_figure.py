"""FigureOutput.save_figure writes its three files from one layout and one bounding box."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.layout_engine import ConstrainedLayoutEngine  # noqa: E402

from linattn.companion.output import PNG_DPI, FigureOutput  # noqa: E402
from linattn.companion.plotting import plateau_labels, theory_axis, use_style  # noqa: E402


class CountingLayout(ConstrainedLayoutEngine):
    """Constrained layout that counts how often it runs."""

    runs = 0

    def execute(self, fig):
        type(self).runs += 1
        return super().execute(fig)


def _figure():
    """Two panels under constrained layout with mathtext labels and a right-hand theory axis whose labels are chosen
    at draw time from the axes' size (a layout that depends on the renderer)."""
    use_style()
    fig, axes = plt.subplots(1, 2, figsize=(6.4, 3.0))
    fig.set_layout_engine(CountingLayout())
    levels = [1.0, 0.6, 0.58, 0.2]
    for ax in axes:
        ax.plot([0, 1, 2, 3], [1.0, 0.6, 0.4, 0.2])
        ax.set_xlabel("step $t$")
        ax.set_title("$L(ℳ_{1})$ at $10^{-2}$")
        theory_axis(ax, levels, plateau_labels(len(levels)))
    axes[1].legend(["a curve"], loc="center left", bbox_to_anchor=(1.0, 0.5))  # outside the figure's edge
    return fig


def _svg_size_pt(path):
    text = path.read_text()
    w, h = (float(re.search(rf'{k}="([\d.]+)pt"', text).group(1)) for k in ("width", "height"))
    return w, h


def _pdf_size_pt(path):
    box = re.search(rb"/MediaBox \[ *([\d. ]+)\]", path.read_bytes()).group(1).split()
    return float(box[2]) - float(box[0]), float(box[3]) - float(box[1])


def test_three_files_from_one_layout_and_one_box(tmp_path):
    fig = _figure()
    CountingLayout.runs = 0
    png, svg, pdf = FigureOutput("demo", tmp_path).save_figure(fig)
    assert CountingLayout.runs == 1  # laid out once for all three (savefig with "tight" runs it once per file)
    assert isinstance(fig.get_layout_engine(), CountingLayout) and fig.dpi == plt.rcParams["figure.dpi"]
    w, h = _svg_size_pt(svg)
    assert _pdf_size_pt(pdf) == pytest.approx((w, h), abs=1e-5)  # one bounding box for the vector files
    rows, cols = mpimg.imread(png).shape[:2]
    assert abs(cols - w * PNG_DPI / 72) <= 1 and abs(rows - h * PNG_DPI / 72) <= 1  # and for the PNG
    plt.close(fig)


def _clip_ids_numbered(data: bytes) -> bytes:
    """An SVG with its clip-path ids numbered in order: matplotlib hashes them from the clip objects' addresses, which
    differ from one save to the next."""
    ids: dict[bytes, bytes] = {}
    return re.sub(rb"\bp[0-9a-f]{10}\b", lambda m: ids.setdefault(m.group(0), b"clip%d" % len(ids)), data)


def test_saving_again_writes_the_same_files(tmp_path):
    fig = _figure()
    first = [p.read_bytes() for p in FigureOutput("a", tmp_path).save_figure(fig)]
    second = [p.read_bytes() for p in FigureOutput("b", tmp_path).save_figure(fig)]
    # the figure is left as it was (its engine, dpi and axes positions), so a second save lays it out alike
    assert first[0] == second[0] and first[2] == second[2]
    assert _clip_ids_numbered(first[1]) == _clip_ids_numbered(second[1])
    plt.close(fig)


def _tight_figure(pad: float):
    """One log-scale panel with mathtext labels, laid out by ``tight_layout`` (no engine left to run at saving), its
    text ``pad`` font sizes from the figure's edge."""
    use_style()
    fig, ax = plt.subplots(figsize=(4.0, 3.0))
    ax.plot([1, 10, 100, 1000], [1.0, 0.6, 0.4, 0.2])
    ax.set_xscale("log")
    ax.set_xlabel("step $t$")
    fig.tight_layout(pad=pad)
    return fig


@pytest.mark.parametrize("pad", [1.08, 0.2])  # the padded box inside the figure; past its edge (filled with its face)
def test_png_of_a_tight_figure_is_its_layout_draw_as_savefig_draws_it(tmp_path, pad):
    fig = _tight_figure(pad)
    png = FigureOutput("demo", tmp_path).save_figure(fig)[0]
    w, h = _svg_size_pt(tmp_path / "demo" / "demo.svg")
    saved = mpimg.imread(png)
    assert abs(saved.shape[0] - h * PNG_DPI / 72) <= 1 and abs(saved.shape[1] - w * PNG_DPI / 72) <= 1
    # the same box with its edges on whole pixels, as the PNG rounds them: savefig draws the very same pixels
    import io

    import numpy as np
    from matplotlib.transforms import Bbox

    from linattn.companion.output import laid_out_once

    with laid_out_once(fig) as (bbox, pixels):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=PNG_DPI, bbox_inches=Bbox(np.round(bbox.get_points() * PNG_DPI) / PNG_DPI
                                                                      + 1e-9))
    buf.seek(0)
    assert pixels is not None and np.array_equal(np.round(mpimg.imread(buf) * 255).astype(np.uint8), pixels)
    assert np.array_equal(np.round(saved * 255).astype(np.uint8), pixels)  # and a second save writes the same
    plt.close(fig)
