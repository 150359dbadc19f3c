"""Figures are legible at the width the book shows them, and theory-level labels neither overlap nor get cut off.

The rule (``tests/readability.py``, imported as ``readability``): every text of a figure SVG reads at ≥ 9 CSS px,
where a text of ``s`` pt in an SVG ``w`` pt wide reads at ``s × min(650, w × 4/3) / w`` px (650 px: the book's content
column).

``test_built_figures_are_readable`` (marked ``book``) checks the SVGs under the figures output roots of
:func:`figures_output_roots`: ``$LINATTN_FIGURES_DIR`` if set, else the quick preset's root ``_build/figures/quick``
(which ``make test`` builds) and the paper preset's ``_build/figures/paper`` where ``make book`` has built it
(``linattn.companion.runner.paths.preset_root``); point it anywhere with ``LINATTN_FIGURES_DIR=/path pytest
tests/test_readability.py``. A root without figures skips, with the reason, or fails under
``LINATTN_REQUIRE_BROWSER=1`` (CI; ``conftest.require_built``).
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import readability
from conftest import require_built

from linattn import theory
from linattn.companion import plotting
from linattn.companion.figures import fig14_icl_iwl as f14
from linattn.companion.output import ENV_ROOT
from linattn.companion.runner import paths


def figures_output_roots() -> list[Path]:
    """Where built figures are looked for: ``$LINATTN_FIGURES_DIR`` if set, else the default output roots of
    ``linattn figures`` (``_build/figures/<preset>``): the quick preset's, and the paper preset's if it holds figures
    (``make test`` builds only the quick ones)."""
    env = os.environ.get(ENV_ROOT)
    if env:
        return [Path(env)]
    paper = paths.preset_root("paper")
    return [paths.preset_root("quick")] + ([paper] if readability.figure_svgs(paper) else [])


def _svg(fig) -> str:
    import io

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


@pytest.fixture(autouse=True)
def _style():
    with matplotlib.rc_context():
        plotting.use_style()
        yield


# ------------------------------------------------------------------------------------------- the checker itself

def test_text_px_rule():
    # natural size below the column: 1 pt = 4/3 px; above it the figure is shrunk to 650 px
    assert readability.text_px(9, 300) == pytest.approx(12.0)
    assert readability.text_px(9, 975) == pytest.approx(6.0)  # 975 pt = 1300 px natural, shown at half size


def test_checker_rejects_small_and_accepts_large_text():
    fig, ax = plt.subplots(figsize=(12, 3))  # about 700 pt wide once cropped: shown at < 1 px per pt
    ax.set_title("tiny", fontsize=7)
    ax.tick_params(labelsize=7)
    small = readability.measure_svg(_svg(fig))
    assert small.width_pt * readability.PX_PER_PT > 650 and small.rendered_px == pytest.approx(650)
    assert small.too_small and any(t.text == "tiny" for t in small.too_small)
    assert readability.problems(_svg(plt.subplots(figsize=(14, 3))[0]))  # too wide: even 10-pt ticks fail

    fig, ax = plt.subplots(figsize=(6.0, 3))
    ax.set_title("$L(ℳ_{0})$ readable", fontsize=10)
    ok = readability.measure_svg(_svg(fig))
    assert ok.texts and not ok.too_small and not ok.as_paths and not ok.private_use
    assert min(t.px for t in ok.texts) >= readability.MIN_TEXT_PX
    assert any(t.text == "0" and t.size_units == pytest.approx(7.0) for t in ok.texts)  # the 0.7× subscript


def test_checker_reads_styles_groups_and_transforms():
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" width="400pt" height="100pt" viewBox="0 0 400 100">'
           '<text style="font: 10px \'DejaVu Sans\'" x="1" y="10">plain</text>'
           '<g style="font-size: 4px" transform="translate(5 5) scale(2)"><text x="0" y="0">scaled</text></g>'
           '<g transform="rotate(-90)"><text font-size="6" x="0" y="0">rotated<tspan style="font-size: 8px">'
           'span</tspan></text></g></svg>')
    sizes = {t.text: t.size_units for t in readability.measure_svg(svg).texts}
    assert sizes == {"plain": 10, "scaled": 8, "rotated": 6, "span": 8}
    # 400 pt → 533 px natural: 1 pt = 4/3 px, so 6 pt reads at 8 px (too small), 8 pt at 10.7 px
    assert [t.text for t in readability.check_svg(svg)] == ["rotated"]


def test_checker_measures_text_drawn_as_paths():
    with matplotlib.rc_context({"svg.fonttype": "path"}):
        fig, ax = plt.subplots(figsize=(4, 2))
        ax.set_title("path", fontsize=12)
        svg = _svg(fig)
    report = readability.measure_svg(svg)
    assert report.as_paths and all(t.as_path for t in report.texts)
    assert max(t.size_units for t in report.texts) == pytest.approx(12.0)  # glyphs at 100 units, scale(0.12)
    assert any("glyphs drawn as paths" in p for p in readability.problems(svg))


def test_mathcal_would_be_unreadable_in_a_browser():
    # why plateau_labels writes the Unicode script M: matplotlib's \mathcal becomes a private-use glyph
    fig, ax = plt.subplots(figsize=(4, 2))
    ax.set_title("$\\mathcal{M}_0$")
    assert readability.measure_svg(_svg(fig)).private_use
    fig, ax = plt.subplots(figsize=(4, 2))
    ax.set_title(plotting.plateau_labels(1)[0])
    assert not readability.measure_svg(_svg(fig)).private_use


# ------------------------------------------------------------------------------------------- theory-level labels

def _visible_level_labels(fig, ax):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    labels = [t for child in ax.child_axes for t in child.yaxis.get_ticklabels() if t.get_visible() and t.get_text()]
    return [(t.get_text(), t.get_window_extent(renderer)) for t in labels]


def test_spaced_levels():
    keep = plotting.spaced_levels([100.0, 90.0, 50.0, 45.0, 44.0, 40.0], 8.0)
    assert keep == [True, True, True, False, False, True]  # first and last always; crowded ones left out
    assert plotting.spaced_levels([10.0, 9.0], 5.0) == [True, False]
    assert plotting.spaced_levels([np.nan, 10.0, 0.0], 5.0) == [False, True, True]


@pytest.mark.parametrize("height", [1.6, 2.4, 4.0])
def test_close_level_labels_do_not_overlap(height):
    levels = [1.0, 0.8, 0.62, 0.5, 0.42, 0.40, 0.385, 0.38, 0.376, 0.2]  # a crowd of close levels
    fig, ax = plt.subplots(figsize=(5.0, height))
    step = np.arange(200)
    plotting.plot_loss_with_theory(ax, step, [(0.2 + 0.8 * np.exp(-step / 40), None, None)], levels,
                                   plotting.plateau_labels(len(levels)), legend=False)
    shown = _visible_level_labels(fig, ax)
    texts = [t for t, _ in shown]
    assert texts[0] == "$L(ℳ_{0})$" and texts[-1] == f"$L(ℳ_{{{len(levels) - 1}}})$"  # the extremes are labelled
    assert len(shown) < len(levels)  # the crowd is thinned
    for i, (_, a) in enumerate(shown):
        for _, b in shown[i + 1:]:
            assert not a.overlaps(b), f"overlapping level labels: {texts}"
    plt.close(fig)


def test_fig4_levels_labelled_without_overlap():
    cov = np.diag(np.arange(8, 0, -1) / 36.0)  # Figure 4: L(M_5) … L(M_8) lie close together
    levels = theory.plateau_losses(cov, 31)
    fig, ax = plt.subplots(figsize=(3.2, 1.8))
    plotting.loss_panel(ax, np.arange(100), [np.linspace(1.0, 0.22, 100)], levels)
    shown = _visible_level_labels(fig, ax)
    assert 2 <= len(shown) < len(levels)
    for i, (_, a) in enumerate(shown):
        assert not any(a.overlaps(b) for _, b in shown[i + 1:])
    plt.close(fig)


def test_every_theory_level_stays_in_view():
    levels = theory.plateau_losses(np.diag([0.4, 0.3, 0.2, 0.1]), 31)  # L(M_0) = 1
    ax = plt.subplots()[1]
    step = np.arange(50)
    plotting.plot_loss_with_theory(ax, step, [(0.7 - 0.002 * step, None, None)], levels,
                                   plotting.plateau_labels(len(levels)), legend=False)  # the curve stays below 1
    lo, hi = ax.get_ylim()
    assert lo < min(levels) and hi > max(levels)
    ax2 = plt.subplots()[1]
    ax2.plot(step, 0.5 + 0 * step)
    ax2.set_ylim(0.4, 0.6)
    plotting.theory_axis(ax2, levels, plotting.plateau_labels(len(levels)))  # limits widened to every level
    lo, hi = ax2.get_ylim()
    assert lo < min(levels) and hi > max(levels)
    plt.close("all")


@pytest.mark.slow
@pytest.mark.parametrize("count", [6, 3, 8, 1])
def test_figure_14_draws_one_readable_panel_per_c(count):
    """Figure 14 as the paper draws it, at any number of in-context fractions: one visible panel per c, titled with
    its c, holding the three curves in the paper's colours (black training loss over its start, blue in-weight and
    red in-context test loss), in a grid at most three wide, every label legible at the book's width."""
    from matplotlib.colors import to_rgba


    step = np.arange(0, 5000, 10)
    cs = [round(c, 3) for c in np.linspace(0.0, 1.0, count)] if count > 1 else [0.5]
    curves = {c: {"train": np.linspace(1, 0.1 + c / 10, step.size), "iwl": np.linspace(1.04, 0.07 + c, step.size),
                  "icl": np.linspace(0.96, 2.2 - 2 * c, step.size)} for c in cs}
    marks = f14.published_landmarks() if count == 6 else None
    fig, axes = f14.plot_panels(step, curves, landmarks=marks, L_star=0.1389)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == len(visible) == count
    assert [ax.get_title() for ax in axes] == [f"$c = {c:.3g}$" for c in cs]
    rows, cols = plotting.panel_grid(count)
    assert cols <= 3 and rows * cols >= count > (rows - 1) * cols
    colours = {to_rgba(f14.ICL_CURVES[k]["color"]) for k in ("train", "iwl", "icl")}
    for ax in axes:
        assert {to_rgba(line.get_color()) for line in ax.get_lines()} >= colours
        assert ax.get_xlabel() in ("", "step")
    assert sum(ax.get_xlabel() == "step" for ax in axes) == cols  # the lowest panel of each column carries the axis
    drawn = sum(len(ax.containers) for ax in axes)  # one error-bar container per published landmark
    assert drawn == (sum(len(v) for v in marks.values()) if marks else 0)
    assert not readability.problems(_svg(fig))


# ------------------------------------------------------------------------------------------- the built figures

@pytest.mark.book
@pytest.mark.parametrize("root", figures_output_roots(), ids=str)
def test_built_figures_are_readable(root):
    svgs = readability.figure_svgs(root)
    if not svgs:
        require_built(f"no figures built under {root} (run `linattn figures --out DIR` and set {ENV_ROOT}=DIR)")
    found = {f"{p.parent.name}/{p.name}": readability.problems(p) for p in svgs}
    bad = {name: msgs for name, msgs in found.items() if msgs}
    assert not bad, "\n".join(m for msgs in bad.values() for m in msgs)
