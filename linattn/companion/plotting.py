"""Plotting helpers shared by the CLI and the figure notebooks: one style, loss curves with dotted theory lines,
and the primitives of drawn schematics (nodes, edges, arrows, boxes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

# Every text is at least FONT_PT: the book shows figures at most about 650 px wide (its content column), and a
# figure whose SVG is at most _CONTENT_WIDTH_IN wide is shown at its natural size or shrunk only a little, so that
# 10-pt text reads at ≥ 13 px and its mathtext sub/superscripts (0.7×) at ≥ 9 px (the rule checked by
# tests/readability.py). Lay figures out at most _CONTENT_WIDTH_IN wide, text included.
FONT_PT = 10.0
_CONTENT_WIDTH_IN = 6.8
_STYLE: dict[RcKeyType, Any] = {
    "figure.figsize": (6.4, 3.6),
    "font.size": FONT_PT,
    "axes.titlesize": 10.5,
    "axes.labelsize": FONT_PT,
    "xtick.labelsize": FONT_PT,
    "ytick.labelsize": FONT_PT,
    "legend.fontsize": FONT_PT,
    "figure.titlesize": 11,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.4,
    "savefig.dpi": 150,
    # figures are made at the PNG's dpi, so the text their layout measures (tight_layout) is measured by the renderer
    # that draws the PNG (output.laid_out_once), once, not again at another dpi
    "figure.dpi": 150,
    "svg.fonttype": "none",  # SVG keeps <text> elements (real, selectable text at its font size), not glyph paths
    "svg.hashsalt": "linattn",  # stable ids in the SVG output
}
_THEORY_LINE = dict(color="0.45", linestyle=":", linewidth=1.1)
_THEORY_TEXT: dict[str, Any] = {"color": "0.3", "fontsize": FONT_PT}


def use_style() -> None:
    """Apply the figures' shared matplotlib style (rcParams) to the current session."""
    import matplotlib as mpl

    mpl.rcParams.update(_STYLE)


def top_title(ax, text: str, **style):
    """``ax``'s title ``text`` at its top edge (``axes.titlepad`` above it), placed once. Left to place itself,
    matplotlib checks at every draw, for each title, whether tick labels, an axis label or an axis' offset text of
    the axes (or its twins and secondary axes) sit up there, which measures their y axes again (a fifth to a third of
    a panel figure's drawing); for axes with nothing above their top spine it then puts the title at exactly this
    place. Use it only for such axes."""
    return ax.set_title(text, y=1.0, **style)


def loss_figure(history, title: str = ""):
    """A figure of the training (and test) loss against the step."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, col in history.columns().items():
        if name in ("train_loss", "test_iwl", "test_icl"):
            ax.plot(history.step, col, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.legend()
    return fig


def show_loss(history, title: str = "") -> None:
    """Open a window with the training (and test) loss against the step."""
    import matplotlib.pyplot as plt

    loss_figure(history, title)
    plt.show()


def spaced_levels(positions, min_gap: float) -> list[bool]:
    """Which of the levels at display ``positions`` (in the order of the levels, e.g. L(M_0) … L(M_D)) get a label,
    so that no two labels are closer than ``min_gap``: the first and the last level always (the last only if it is
    far enough from the first), every other level when it is far enough from all labels kept so far and from the
    last. Positions that are not finite (levels outside the view) get none."""
    y = np.asarray(positions, dtype=np.float64)
    n = len(y)
    keep = [False] * n
    idx = [i for i in range(n) if np.isfinite(y[i])]
    if not idx:
        return keep
    first, last = idx[0], idx[-1]
    kept = [first]
    keep[first] = True
    for i in idx[1:-1]:
        if all(abs(y[i] - y[k]) >= min_gap for k in kept) and abs(y[i] - y[last]) >= min_gap:
            kept.append(i)
            keep[i] = True
    if last != first and all(abs(y[last] - y[k]) >= min_gap for k in kept):
        keep[last] = True
    return keep


def _level_formatter(ax, levels, labels, fontsize: float = FONT_PT, spacing: float = 1.1):
    """A tick formatter for the theory axis of ``ax``: the label of each level, left blank where it would come
    closer than ``spacing`` text lines to the label of another level (:func:`spaced_levels`). It decides when the
    figure is drawn, from the final size of the axes, so the choice holds for any figure size, layout and dpi."""
    from matplotlib.ticker import Formatter

    levels = np.asarray(levels, dtype=np.float64)
    labels = list(labels)

    def index_of(value) -> int:
        return int(np.argmin(np.abs(levels - value)))

    class LevelLabels(Formatter):
        def __call__(self, x, pos=None):
            return labels[index_of(x)]

        def format_ticks(self, values):
            lo, hi = sorted(ax.get_ylim())
            index = [index_of(v) for v in values]
            pos = np.full(len(levels), np.nan)
            for i in index:
                if lo <= levels[i] <= hi:
                    pos[i] = ax.transData.transform((0.0, levels[i]))[1]
            keep = spaced_levels(pos, fontsize * ax.figure.dpi / 72.0 * spacing)  # one text line, display px
            return [labels[i] if keep[i] else "" for i in index]

    return LevelLabels()


def _include_levels(ax, levels, margin: float = 0.04) -> None:
    """Widen the y-limits of ``ax`` (linear scale) so that every theory level is inside, with ``margin`` of the
    range to spare: a dotted theory line must never be cut off by the frame."""
    levels = [float(v) for v in levels if np.isfinite(v)]
    if not levels or ax.get_yscale() != "linear":
        return
    lo, hi = ax.get_ylim()
    flip = lo > hi
    lo, hi = min(lo, hi), max(lo, hi)
    pad = margin * max(hi - lo, max(levels) - min(levels), 1e-12)
    new_lo = min(lo, min(levels) - pad) if min(levels) <= lo else lo
    new_hi = max(hi, max(levels) + pad) if max(levels) >= hi else hi
    if (new_lo, new_hi) != (lo, hi):
        ax.set_ylim((new_hi, new_lo) if flip else (new_lo, new_hi))


def theory_lines(ax, levels, labels=None, *, text: bool = True, **style):
    """Dotted horizontal lines at the theory ``levels`` (e.g. plateau losses), labelled at the right edge (on a
    secondary axis, see :func:`theory_axis`); labels that would overlap a neighbour's are left out. Returns the
    label axis (None without labels)."""
    levels = list(levels)
    labels = list(labels) if labels is not None else [None] * len(levels)
    if text and any(labels):
        return theory_axis(ax, levels, [lab or "" for lab in labels], **style)
    kw = dict(_THEORY_LINE, **style)
    for level in levels:
        ax.axhline(level, zorder=0, **kw)
    return None


def plot_loss_with_theory(ax, step, curves, levels=(), level_labels=None, *, xlabel: str = "step",
                          ylabel: str = "training loss", legend: bool | str = True):
    """Loss curves (``curves``: a list of ``(loss, label, style dict)``) and dotted theory ``levels`` on ``ax``;
    ``legend``: False, True (upper right) or a matplotlib legend location. The y-limits include every level;
    if you set y-limits afterwards, call ``_include_levels`` so that no level is cut off."""
    for loss, label, style in curves:
        ax.plot(step, loss, label=label, **(style or {}))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xlim(step[0], step[-1])
    theory_lines(ax, levels, level_labels)
    if legend and any(label for _, label, _ in curves):
        ax.legend(loc=legend if isinstance(legend, str) else "upper right")
    return ax


# ------------------------------------------------------------------------------------------ schematics
# Drawing primitives of the schematic figures, in data coordinates of an equal-aspect axes without its frame.

def draw_node(ax, xy, r, color="white", edge="0.2", text=None, fontsize=FONT_PT, zorder=3):
    """A circle of radius ``r`` at ``xy``, with ``text`` at its centre."""
    from matplotlib.patches import Circle

    ax.add_patch(Circle(xy, r, facecolor=color, edgecolor=edge, linewidth=0.9, zorder=zorder))
    if text:
        ax.text(*xy, text, ha="center", va="center", fontsize=fontsize, zorder=zorder + 1)


def draw_edge(ax, a, b, color="0.5", lw=0.6, alpha=1.0):
    """A straight line from ``a`` to ``b``, under the nodes."""
    ax.plot([a[0], b[0]], [a[1], b[1]], color=color, linewidth=lw, alpha=alpha, zorder=1,
            solid_capstyle="round")


def draw_arrow(ax, a, b, text=None, color="0.25"):
    """An arrow from ``a`` to ``b``, with ``text`` above its middle."""
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=9, color=color, linewidth=1.0))
    if text:
        ax.text((a[0] + b[0]) / 2, (a[1] + b[1]) / 2 + 0.12, text, ha="center", va="bottom", fontsize=FONT_PT)


def draw_box(ax, xy, w, h, text, color="#f2f2f2", fontsize=FONT_PT):
    """A rounded ``w`` × ``h`` box centred at ``xy``, holding ``text``."""
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((xy[0] - w / 2, xy[1] - h / 2), w, h, boxstyle="round,pad=0.04",
                                facecolor=color, edgecolor="0.3", linewidth=0.9))
    ax.text(*xy, text, ha="center", va="center", fontsize=fontsize)


def node_column(n, x, top, bottom):
    """The centres of ``n`` nodes spaced evenly from ``top`` to ``bottom`` at ``x`` (one: in the middle)."""
    ys = np.linspace(top, bottom, n) if n > 1 else np.array([(top + bottom) / 2])
    return [(x, y) for y in ys]


def theory_axis(ax, levels, labels, **style):
    """Dotted theory lines at ``levels`` with their ``labels`` as ticks of a right-hand axis (the paper's style for
    saddle levels). The axis follows the y-limits of ``ax`` whenever they change; the y-limits are widened to
    include every level (``_include_levels``), and labels that would overlap a neighbouring level's are left blank
    when the figure is drawn (``_level_formatter``). Returns the right-hand axis."""
    kw = dict(_THEORY_LINE, **style)
    levels = [float(v) for v in levels]
    for level in levels:
        ax.axhline(level, zorder=0, **kw)
    _include_levels(ax, levels)
    right = ax.secondary_yaxis("right")
    right.set_yticks(levels)
    right.yaxis.set_major_formatter(_level_formatter(ax, levels, labels, _THEORY_TEXT["fontsize"]))
    right.tick_params(axis="y", length=0, pad=2, labelsize=_THEORY_TEXT["fontsize"], labelcolor=_THEORY_TEXT["color"])
    right.minorticks_off()
    right.spines["right"].set_visible(False)
    return right


def plateau_labels(count: int, symbol: str = "ℳ") -> list[str]:
    """["$L(ℳ_{0})$", …, "$L(ℳ_{count-1})$"] for :func:`theory_axis`. The script M is the Unicode letter (in
    DejaVu Sans), not ``\\mathcal``: matplotlib would write that as a private-use glyph no browser can show in an
    SVG with real text."""
    return [f"$L({symbol}_{{{m}}})$" for m in range(count)]


def plot_rank_panels(step, losses: dict, levels, *, ncols: int = 2, panel_size=(3.2, 2.4)):
    """One panel per key-query rank R (``losses``: {R: loss curve}), each with the dotted theory plateaus
    L(M_0..M_D) labelled on a right-hand axis (the paper's style for saddle levels). Returns (fig, axes)."""
    import matplotlib.pyplot as plt

    ranks = list(losses)
    nrows = -(-len(ranks) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_size[0] * ncols, panel_size[1] * nrows), sharex=True,
                             sharey=True, squeeze=False, layout="constrained")
    labels = plateau_labels(len(levels))
    for ax, R in zip(axes.flat, ranks):
        ax.plot(step, losses[R], color="black", linewidth=1.2)
        ax.set_xlim(step[0], step[-1])
        ax.set_ylim(0, 1.08 * levels[0])
        ax.set_title(f"$R = {R}$")
        theory_axis(ax, levels, labels)
    for ax in axes[-1]:
        ax.set_xlabel("step")
    for ax in axes[:, 0]:
        ax.set_ylabel("training loss")
    for ax in list(axes.flat)[len(ranks):]:
        ax.set_visible(False)
    return fig, axes


def loss_panel(ax, step, curves, levels, *, log_steps: bool = False, mark_step=None, title: str | None = None,
               color="black", linewidth: float = 1.0):
    """Loss curves (arrays over ``step``) on ``ax`` with the dotted theory plateaus L(M_0..M_D) labelled on a
    right-hand axis (the paper's style for saddle levels). ``log_steps`` draws against step + 1 on a log axis (so
    step 0 shows and late, long plateaus get room); ``mark_step`` adds a dashed vertical line there (e.g. the
    published run's end)."""
    x = np.asarray(step, dtype=np.float64) + (1.0 if log_steps else 0.0)
    for loss in curves:
        ax.plot(x, loss, color=color, linewidth=linewidth)
    if log_steps:
        ax.set_xscale("log")
    ax.set_xlim(x[0], x[-1])
    ax.set_ylim(0, 1.08 * levels[0])
    if mark_step is not None:
        ax.axvline(mark_step + (1.0 if log_steps else 0.0), color="tab:red", linestyle="--", linewidth=0.9)
    if title:
        top_title(ax, title)
    ax.set_xlabel("step + 1 (log scale)" if log_steps else "step")
    theory_axis(ax, levels, plateau_labels(len(levels)))
    return ax


def log_axis_start(first_drops, fallback: float) -> float:
    """Where a log step axis starts: the power of ten at or below the earliest of ``first_drops`` (NaN: a curve that
    never dropped; ``fallback`` when none did), and never below 10, so the first plateau shows a decade long."""
    drops = np.asarray(first_drops, dtype=np.float64)
    drops = drops[np.isfinite(drops)]
    first = drops.min() if drops.size else fallback
    return float(10.0 ** np.floor(np.log10(max(first, 10))))


def log_thin(n: int, points: int = 4000) -> np.ndarray:
    """Sorted unique indices 0 … n−1, evenly spaced in log(index + 1): what a log-step axis can resolve, so long runs
    draw (and save) a few thousand samples instead of every step. Always keeps the first and last index."""
    if n <= points:
        return np.arange(n)
    idx = np.unique(np.round(np.geomspace(1, n, points)).astype(int) - 1)
    return np.union1d(idx, [0, n - 1])


# ------------------------------------------------------------------------------------------ panel grids

def panel_grid(count: int, max_cols: int = 3) -> tuple[int, int]:
    """(rows, columns) for ``count`` panels: at most ``max_cols`` columns, as few rows as that allows, and the
    columns then spread evenly over those rows (6 → 2 × 3, 4 → 2 × 2, 8 → 3 × 3 with one slot left empty)."""
    if count < 1:
        raise ValueError(f"need at least one panel, got {count}")
    rows = -(-count // max_cols)
    return rows, -(-count // rows)
