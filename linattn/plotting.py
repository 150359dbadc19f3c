"""Plotting helpers shared by the CLI and the figure notebooks: one style, loss curves with dotted theory lines,
and the two drawn schematics (paper Figures 1a and 2)."""

from __future__ import annotations

import numpy as np

STYLE = {
    "figure.figsize": (4.8, 3.4),
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.4,
    "savefig.dpi": 150,
    "svg.hashsalt": "linattn",  # stable ids in the SVG output
}
THEORY_LINE = dict(color="0.45", linestyle=":", linewidth=1.1)


def use_style() -> None:
    """Apply the figures' shared matplotlib style (rcParams) to the current session."""
    import matplotlib as mpl

    mpl.rcParams.update(STYLE)


def show_loss(history, title: str = "") -> None:
    """Open a window with the training (and test) loss against the step."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, col in history.columns().items():
        if name in ("train_loss", "test_iwl", "test_icl"):
            ax.plot(history.step, col, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.legend()
    plt.show()


def theory_lines(ax, levels, labels=None, *, text: bool = True, **style) -> None:
    """Dotted horizontal lines at the theory ``levels`` (e.g. plateau losses), labelled at the right edge."""
    kw = dict(THEORY_LINE, **style)
    labels = list(labels) if labels is not None else [None] * len(levels)
    for level, label in zip(levels, labels):
        ax.axhline(level, zorder=0, **kw)
        if text and label:
            ax.annotate(label, xy=(1.0, level), xycoords=("axes fraction", "data"), xytext=(3, 0),
                        textcoords="offset points", va="center", ha="left", fontsize=7, color=kw["color"])


def plot_loss_with_theory(ax, step, curves, levels=(), level_labels=None, *, xlabel: str = "step",
                          ylabel: str = "training loss", legend: bool | str = True):
    """Loss curves (``curves``: a list of ``(loss, label, style dict)``) and dotted theory ``levels`` on ``ax``;
    ``legend``: False, True (upper right) or a matplotlib legend location."""
    theory_lines(ax, levels, level_labels)
    for loss, label, style in curves:
        ax.plot(step, loss, label=label, **(style or {}))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xlim(step[0], step[-1])
    if legend and any(label for _, label, _ in curves):
        ax.legend(loc=legend if isinstance(legend, str) else "upper right")
    return ax


# ------------------------------------------------------------------------------------------ schematics

def _node(ax, xy, r, color="white", edge="0.2", text=None, fontsize=7, zorder=3):
    from matplotlib.patches import Circle

    ax.add_patch(Circle(xy, r, facecolor=color, edgecolor=edge, linewidth=0.9, zorder=zorder))
    if text:
        ax.text(*xy, text, ha="center", va="center", fontsize=fontsize, zorder=zorder + 1)


def _edge(ax, a, b, color="0.5", lw=0.6, alpha=1.0):
    ax.plot([a[0], b[0]], [a[1], b[1]], color=color, linewidth=lw, alpha=alpha, zorder=1,
            solid_capstyle="round")


def _arrow(ax, a, b, text=None, color="0.25"):
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=9, color=color, linewidth=1.0))
    if text:
        ax.text((a[0] + b[0]) / 2, (a[1] + b[1]) / 2 + 0.12, text, ha="center", va="bottom", fontsize=7)


def _box(ax, xy, w, h, text, color="#f2f2f2", fontsize=7.5):
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((xy[0] - w / 2, xy[1] - h / 2), w, h, boxstyle="round,pad=0.04",
                                facecolor=color, edgecolor="0.3", linewidth=0.9))
    ax.text(*xy, text, ha="center", va="center", fontsize=fontsize)


def _column(n, x, top, bottom):
    ys = np.linspace(top, bottom, n) if n > 1 else np.array([(top + bottom) / 2])
    return [(x, y) for y in ys]


def draw_attn_m_schematic(ax, in_dim: int = 3, heads: int = 4) -> None:
    """Paper Fig. 1a: ATTN_M as a two-layer linear network on the cubic feature z = vec(β x_qᵀ) (D² inputs):
    first layer W₁ (row h = vec of head h's key-query block), H hidden units, second layer w₂ (values v_h)."""
    D, H = in_dim, heads
    ax.set_xlim(-0.2, 10.4)
    ax.set_ylim(-1.6, 7.6)
    ax.set_aspect("equal")
    ax.axis("off")
    # the sequence and the feature map
    _box(ax, (1.0, 5.6), 1.9, 1.3, "context\n$(x_n, y_n)_{n\\leq N}$\nquery $x_q$")
    _box(ax, (1.0, 2.6), 1.9, 1.6, "$\\beta = \\frac{1}{N}\\sum_n y_n x_n$\n\n$z = \\mathrm{vec}(\\beta\\, x_q^\\top)$")
    _arrow(ax, (1.0, 4.9), (1.0, 3.45))
    z = _column(D * D, 4.1, 6.6, 0.2)
    hidden = _column(H, 6.6, 5.2, 1.6)
    out = (9.0, 3.4)
    _arrow(ax, (1.95, 2.6), (2.75, 2.6))  # ends left of the z labels
    for i, p in enumerate(z):
        a, b = divmod(i, D)
        _node(ax, p, 0.22, color="#dbe9f6")
        ax.text(p[0] - 0.32, p[1], f"$\\beta_{a + 1} x_{{q,{b + 1}}}$", ha="right", va="center", fontsize=6)
        for q in hidden:
            _edge(ax, p, q, lw=0.5, alpha=0.8)
    for h, q in enumerate(hidden):
        _node(ax, q, 0.3, color="#fde0c5", text=f"{h + 1}")
        _edge(ax, q, out, color="0.25", lw=1.0)
    _node(ax, out, 0.36, color="#d5efcf", text="$\\hat y$", fontsize=8)
    ax.text(4.1, 7.15, f"$z$ ($D^2 = {D * D}$)", ha="center", fontsize=8)
    ax.text(6.6, 7.15, f"$H = {H}$ heads", ha="center", fontsize=8)
    ax.text(5.3, -0.75, "$W_1$: row $h$ = vec of head $h$'s\nkey–query block $W_{KQ}^{(h)}$", ha="center",
            fontsize=7)
    ax.text(7.9, -0.75, "$w_2$: values $v_h$", ha="center", fontsize=7)
    ax.text(9.0, 2.6, "$\\hat y = w_2^\\top W_1 z$", ha="center", va="top", fontsize=8)


def draw_attn_s_schematic(ax, in_dim: int = 3, heads: int = 2) -> None:
    """Paper Fig. 2: ATTN_S (rank one) as a sum of H three-layer linear networks on z, each convolutional in its
    first layer: the query q_h acts on every group (β_i x_q,1..D) with the same weights (colours show the sharing),
    the key k_h combines the D group outputs β_i (q_hᵀx_q), and the value v_h scales the head's output."""
    D, H = in_dim, heads
    shared = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
    ax.set_xlim(-0.4, 11.2)
    height = H * (D * D * 0.55 + 1.0)
    ax.set_ylim(-1.0, height + 0.6)
    ax.set_aspect("equal")
    ax.axis("off")
    out = (10.2, height / 2)
    _node(ax, out, 0.4, color="#d5efcf", text="$\\hat y$", fontsize=9)
    ax.text(out[0], out[1] - 0.65, "$\\sum_h$", ha="center", va="top", fontsize=9)
    for h in range(H):
        top = height - h * (D * D * 0.55 + 1.0) - 0.3
        bottom = top - (D * D - 1) * 0.55
        z = _column(D * D, 1.6, top, bottom)
        mid = [(4.6, np.mean([z[i * D + j][1] for j in range(D)])) for i in range(D)]
        head = (7.4, (top + bottom) / 2)
        for i in range(D):
            for j in range(D):
                p = z[i * D + j]
                _node(ax, p, 0.2, color="#dbe9f6")
                ax.text(p[0] - 0.3, p[1], f"$\\beta_{i + 1} x_{{q,{j + 1}}}$", ha="right", va="center",
                        fontsize=5.5)
                _edge(ax, p, mid[i], color=shared[j % len(shared)], lw=1.1)
        for i, m in enumerate(mid):
            _node(ax, m, 0.25, color="#fde0c5")
            _edge(ax, m, head, color="0.35", lw=0.9)
        _node(ax, head, 0.3, color="#f6d5e8", text=f"{h + 1}")
        _edge(ax, head, out, color="0.15", lw=1.3)
        ax.text(3.1, top + 0.35, f"$q_{h + 1}$ (shared)", ha="center", fontsize=7)
        ax.text(6.0, top + 0.35, f"$k_{h + 1}$", ha="center", fontsize=7)
        ax.text(8.8, (head[1] + out[1]) / 2 + 0.25, f"$v_{h + 1}$", ha="center", fontsize=7)
    ax.text(1.0, -0.7, f"$z = \\mathrm{{vec}}(\\beta x_q^\\top)$, $D = {D}$", ha="center", fontsize=7.5)
    ax.text(4.6, -0.7, "$\\beta_i\\,(q_h^\\top x_q)$", ha="center", fontsize=7.5)
    ax.text(7.4, -0.7, "$(k_h^\\top\\beta)(q_h^\\top x_q)$", ha="center", fontsize=7.5)


def theory_axis(ax, levels, labels, **style):
    """Dotted theory lines at ``levels`` with their ``labels`` as ticks of a right-hand axis (paper Fig. 3a/4 style);
    returns the twin axis. Call after the y-limits of ``ax`` are final."""
    kw = dict(THEORY_LINE, **style)
    for level in levels:
        ax.axhline(level, zorder=0, **kw)
    right = ax.twinx()
    right.set_ylim(ax.get_ylim())
    right.set_yscale(ax.get_yscale())
    right.set_yticks(list(levels))
    right.set_yticklabels(list(labels), fontsize=7, color=kw["color"])
    right.tick_params(axis="y", length=0, pad=2)
    right.minorticks_off()
    right.spines["right"].set_visible(False)
    right.spines["top"].set_visible(False)
    return right


def plateau_labels(count: int, symbol: str = "M") -> list[str]:
    """["$L(M_0)$", …, "$L(M_{count-1})$"] for :func:`theory_axis`."""
    return [f"$L(\\mathcal{{{symbol}}}_{{{m}}})$" for m in range(count)]


def plot_rank_panels(step, losses: dict, levels, *, ncols: int = 2, panel_size=(3.0, 2.3)):
    """One panel per key-query rank R (``losses``: {R: loss curve}), each with the dotted theory plateaus
    L(M_0..M_D) labelled on a right-hand axis (paper Fig. 4 style). Returns (fig, axes)."""
    import matplotlib.pyplot as plt

    ranks = list(losses)
    nrows = -(-len(ranks) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_size[0] * ncols, panel_size[1] * nrows), sharex=True,
                             sharey=True, squeeze=False)
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
    fig.tight_layout()
    return fig, axes


def loss_panel(ax, step, curves, levels, *, log_steps: bool = False, mark_step=None, title: str | None = None,
               color="black", linewidth: float = 1.0):
    """Loss curves (arrays over ``step``) on ``ax`` with the dotted theory plateaus L(M_0..M_D) labelled on a
    right-hand axis (paper Fig. 3a/4 style). ``log_steps`` draws against step + 1 on a log axis (so step 0 shows and
    late, long plateaus get room); ``mark_step`` adds a dashed vertical line there (e.g. the published run's end)."""
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
        ax.set_title(title)
    ax.set_xlabel("step + 1 (log scale)" if log_steps else "step")
    theory_axis(ax, levels, plateau_labels(len(levels)))
    return ax


def log_thin(n: int, points: int = 4000) -> np.ndarray:
    """Sorted unique indices 0 … n−1, evenly spaced in log(index + 1): what a log-step axis can resolve, so long runs
    draw (and save) a few thousand samples instead of every step. Always keeps the first and last index."""
    if n <= points:
        return np.arange(n)
    idx = np.unique(np.round(np.geomspace(1, n, points)).astype(int) - 1)
    return np.union1d(idx, [0, n - 1])
