"""The phase diagram page's figures: the final test losses over (c, P) with where each solution wins, the
in-context bracket against the horizon and the loss against the fresh sequences; ATTN_S's drop steps against the
initialisation scale."""

from __future__ import annotations

import numpy as np

from .phase import WINS
from .phase_text import size_label

#: The maps' colour scale ends at this multiple of tr Λ (the loss of predicting 0); a loss above it shows in the top
#: colour (the colour bar's arrow).
CAP = 10.0


def _plain_numbers(axis) -> None:
    """Tick labels of a logarithmic axis as plain numbers (0.02, not 2×10⁻²): every power of ten, and 2× and 5× one
    between them."""
    from matplotlib.ticker import FuncFormatter

    def minor(x, _):
        mantissa = x / 10 ** np.floor(np.log10(x) + 1e-9)
        return f"{x:g}" if np.isclose(mantissa, 2) or np.isclose(mantissa, 5) else ""

    axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    axis.set_minor_formatter(FuncFormatter(minor))


def plot(ds):
    """The final in-weight and in-context test losses over (c, P) on one logarithmic colour scale (the c = 0 column,
    another recipe, set apart), with where each solution wins on c > 0; the in-context bracket against the horizon;
    and the final in-context test loss against the number of fresh sequences cP, with the pure in-context column
    (c = 1, cP = P) and the ranks the theory puts the peaks at."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    fig = plt.figure(figsize=(6.8, 7.0), layout="constrained")
    top, bottom = fig.subfigures(2, 1, squeeze=False, height_ratios=[1.0, 0.8])[:, 0]
    axes = dict(zip(("iwl", "icl"), top.subplots(1, 2, sharey=True)))
    axes.update(zip(("horizon", "fresh"), bottom.subplots(1, 2)))
    icl, sizes = ds.icl.values, ds.trainset_size.values
    maps = (ds.final_test_iwl, ds.final_test_icl)
    highest = max(float(m.max()) for m in maps)
    vmax = min(highest, CAP * ds.L_origin)
    norm = LogNorm(vmin=min(float(m.min()) for m in maps), vmax=vmax)
    rows, cols = np.arange(len(sizes)), np.arange(len(icl))
    won = {"iwl": ds.iwl_wins, "icl": (ds.icl_state == WINS) & (ds.icl > 0)}
    for key, loss, title in (("iwl", ds.final_test_iwl, "in-weight test loss"),
                             ("icl", ds.final_test_icl, "in-context test loss")):
        ax = axes[key]
        mesh = ax.pcolormesh(cols, rows, loss.transpose("trainset_size", "icl"), shading="nearest", cmap="viridis",
                             norm=norm)
        i, j = np.nonzero(won[key].transpose("trainset_size", "icl").values)
        ax.plot(j, i, "o", color="white", markeredgecolor="black", markersize=4)
        if icl[0] == 0:  # c = 0: noise context labels, another recipe
            ax.axvline(0.5, color="white", linewidth=3)
        ax.set_title(title)
        ax.set_xticks(cols, [f"{c:g}" + ("*" if c == 0 else "") for c in icl], rotation=90)
        ax.set_yticks(rows, [size_label(P) for P in sizes])
        ax.set_xlabel("in-context fraction c")
    axes["iwl"].set_ylabel("training sequences P")
    bar = top.colorbar(mesh, ax=[axes["iwl"], axes["icl"]], shrink=0.9, label="final test loss",
                       extend="max" if highest > vmax else "neither")
    for level, style in ((ds.L_origin, "-"), (ds.midpoint, "--"), (ds.L_star, ":")):
        if norm.vmin <= level <= norm.vmax:
            bar.ax.axhline(level, color="tab:red", linestyle=style, linewidth=1.5)

    colours = dict(zip(sizes, plt.cm.viridis(np.linspace(0.0, 0.85, len(sizes)))))
    ax = axes["horizon"]
    for P in sizes:
        ax.step(ds.step, ds.horizon_switch.sel(trainset_size=P), where="post", color=colours[P],
                label=f"P = {size_label(P)}")
    ax.axvline(ds.epoch, color="0.4", linestyle=":", linewidth=1.1, label=f"epoch ({ds.epoch} steps)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"training horizon (steps at lr {ds.lr:g})")
    ax.set_ylabel("in-context wins from c ≤")
    _plain_numbers(ax.yaxis)

    ax = axes["fresh"]
    for P in sizes[np.isfinite(sizes)]:
        cell = ds.sel(trainset_size=P, icl=icl[icl > 0])
        ax.plot(cell.fresh.clip(min=0.5), cell.final_test_icl, "o-", color=colours[P], markersize=3)
    if ds.sizes.get("column_P", 0):  # the pure in-context column: c = 1, so cP = P
        ax.plot(ds.column_P, ds.column_test_icl, "s-", color="black", markersize=3, label="c = 1")
        ax.axvline(int(ds.feature_rank), color="black", linestyle="-.", linewidth=1.0)
    ax.axhline(ds.midpoint, color="tab:red", linestyle="--", linewidth=1.0)
    ax.axvline(int(ds.free_directions), color="0.4", linestyle=":", linewidth=1.1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("fresh sequences cP (0 at 0.5)")
    ax.set_ylabel("final in-context test loss")
    handles = [h for ax in (axes["horizon"], axes["fresh"]) for h in zip(*ax.get_legend_handles_labels())]
    bottom.legend(*zip(*handles), loc="outside lower center", ncols=4, fontsize=8)
    return fig


def plot_escape(escape):
    """ATTN_S: the step of each drop (dots, one per seed) against the initialisation scale, and the theory's escape
    time of each direction (dashed), on log–log axes."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.4), layout="constrained")
    colours = plt.cm.plasma(np.linspace(0.0, 0.8, escape.sizes["direction"]))
    for colour, d in zip(colours, escape.direction.values):
        steps = escape.drop_step.sel(direction=d)
        ax.plot(steps.init.broadcast_like(steps).values.ravel(), steps.values.ravel(), "o", color=colour, alpha=0.7,
                markersize=4, label=f"drop {d}")
        ax.plot(escape.init, escape.law.sel(direction=d), "--", color=colour)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("initialisation scale (ATTN_S)")
    ax.set_ylabel("drop step")
    ax.set_xticks(escape.init.values, [f"{i:g}" for i in escape.init.values])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.legend(loc="lower left", ncols=4, handlelength=1.0)
    return fig
