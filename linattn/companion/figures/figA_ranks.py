"""The paper's Figure 12 (appendix): the key-query ranks Figure 4 leaves out (3, 5, 6 and 7 at D = 8), in Figure 4's
setting. Where R does not divide D the last head is only partly filled; the paper still expects long plateaus only
after 0, R, 2R, … learned directions (``theory.long_plateaus``).

One run per rank and seed through the run store, its weights recorded every ``snapshot_every`` steps; each curve's
rests, each saddle named by what is learned there, which are long and which the paper expects long
(:mod:`~linattn.companion.figures.common.low_rank`), the directions learned and the final loss; for the first
seed, each drop's step beside its prediction from the run's own initial weights (``runstore.predicted_drop_steps``).
"""

from __future__ import annotations

import numpy as np

from ... import theory
from ...analysis import loss_curves
from .. import presets, published, runstore
from ..output import MarkdownTable
from ..output import words as list_words
from .common import low_rank, preset_blocks
from .common.frame import settings_attrs

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    # snapshot_every: the weights are recorded so that each rest's saddle is named by what is learned there
    "quick": dict(preset_blocks.without(preset_blocks.LOW_RANK_QUICK, "rank"), ranks=[3, 5, 6, 7], seeds=[10, 11, 12],
                  snapshot_every=10),
    "paper": dict(preset_blocks.without(preset_blocks.LOW_RANK_PAPER, "rank"), ranks=[3, 5, 6, 7], seeds=[10, 11, 12],
                  snapshot_every=20),
}
# settings of a reader's own the page must stay true at (each cheap at the quick preset)
KNOB_CASES = (dict(in_dim=4, head_num=3, ranks=[3], seeds=[10, 11], epoch=1501),
              dict(in_dim=5, head_num=3, ranks=[2, 4], seeds=[12], epoch=1501))
TOLERANCES = [preset_blocks.PLATEAUS]



def runs(S: dict) -> dict:
    """One run per seed and rank (seeds outer, ranks inner)."""
    return preset_blocks.sweep(S)


def compute(S: dict):
    """Each rank's training loss at every seed (``train_loss``: seed × rank × step) with what is measured on it: the
    heads' share of each direction at every weight snapshot (``learned_share``), every rest with its saddle named by
    what is learned there, its steps, level, the saddle's loss and whether it is long (``rest_*``: seed × rank × rest,
    :func:`~.common.low_rank.rest_variables`), the directions learned and the final loss; the first seed's drop steps
    beside those predicted from its initial weights (``drop_step``, ``drop_step_predicted``: rank × direction); the
    theory's saddle losses (``plateau_theory``: m) and eigenvalues."""
    import xarray as xr

    ranks, seeds = [int(R) for R in S["ranks"]], [int(x) for x in S["seeds"]]
    grid = low_rank.seed_runs(runs(S), S)
    first = grid[0]
    cfg, cov = first[0].config, first[0].datasets.cov
    levels = theory.plateau_losses(cov, cfg.N)
    loss = np.array([[r.history.train_loss for r in by_rank] for by_rank in grid])
    rests, snapshot = low_rank.rest_variables(loss, grid, loss.shape[-1])
    ds = xr.Dataset(
        {"train_loss": (("seed", "rank", "step"), loss),
         **low_rank.curve_variables(loss, levels),
         **rests,
         "drop_step": (("rank", "direction"), [loss_curves.drop_steps(L, levels) for L in loss[0]]),
         "drop_step_predicted": (("rank", "direction"), [runstore.predicted_drop_steps(r)
                                                         for r in first]),
         "plateau_theory": ("m", levels), "eigenvalue": ("direction", theory.spectrum(cov)[0])},
        coords={"seed": seeds, "rank": ranks, "step": first[0].history.step, "m": np.arange(len(levels)),
                "snapshot": snapshot,
                "direction": np.arange(1, len(levels))},
        attrs=settings_attrs(S, engine=first[0].engine, seeds=seeds,
                             runs={str(R): r.config.to_dict() for R, r in zip(ranks, first)}))
    ds.attrs.update(band=loss_curves.REST_BAND, published=int(presets.is_published(NAME, S)))
    low_rank.describe_rests(ds)
    ds.drop_step_predicted.attrs["description"] = ("drop steps of the population gradient descent from the first "
                                                   "seed's initial weights (runstore.predicted_drop_steps)")
    return ds


def numbers(ds) -> list[dict]:
    """``numbers.json``: per rank, the directions learned at the first seed beside the drops predicted from its
    initial weights, every seed's rests (each level beside its saddle's loss, the long ones beside the paper's:
    :func:`~.common.low_rank.rest_rows`), and each drop's step beside its prediction."""
    seeds, rows = [int(x) for x in ds.seed.values], []
    for R in (int(x) for x in ds["rank"].values):
        r = ds.sel(rank=R)
        pred = r.drop_step_predicted.values
        rows.append(dict(key=f"R{R}.learned", quantity=f"R={R}: directions learned, seed {seeds[0]} (theory: drops "
                                                       "predicted from the initial weights)",
                         theory=int(np.sum(np.isfinite(pred))),
                         reproduced=int(r.directions_learned.sel(seed=seeds[0]))))
        rows += low_rank.rest_rows(ds, R, f"R{R}", "")
        rows += low_rank.predicted_rows(r, R, f"R{R}", f"seed {seeds[0]}")
    return rows


def rank_table(ds) -> MarkdownTable:
    """Per rank: the saddles the paper expects long among those the curves left, the long rests found
    at each seed (:func:`~.common.low_rank.long_cell`), the directions learned and the final loss (first seed)."""
    D, seeds = ds.sizes["m"] - 1, [int(x) for x in ds.seed.values]
    rows = [dict(rank=f"$R = {R}$", expected=low_rank.expected_cell(ds, int(R)), found=low_rank.long_cell(ds, int(R)),
                 learned=", ".join(str(int(n)) for n in ds.directions_learned.sel(rank=R).values) + f" of {D}",
                 final=float(ds.final_loss.sel(rank=R, seed=seeds[0]))) for R in ds["rank"].values]
    return MarkdownTable(rows, {"rank": "rank", "expected": "long rests the paper expects",
                                "found": f"long rests found (seeds {list_words(seeds)})",
                                "learned": "directions learned", "final": f"final loss (seed {seeds[0]})"},
                         {"final": ".4f"})


def verdict(ds) -> str:
    """The page's sentences on the rests (:func:`~.common.low_rank.rests_text`)."""
    return low_rank.rests_text(ds)


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``)."""
    import json

    S = json.loads(ds.attrs["settings"])
    ranks = [int(R) for R in ds["rank"].values]
    return dict(H=S["head_num"], D=ds.sizes["m"] - 1, ranks=list_words(ranks),
                rest_tol=loss_curves.REST_TOL, band=loss_curves.rest_band_words(ds.attrs["band"]),
                min_dwell=f"{loss_curves.REST_MIN_DWELL:g}", max_rate=f"{loss_curves.REST_MAX_RATE:g}",
                long_fraction=f"{loss_curves.LONG_FRACTION:g}",
                seeds=list_words(list(ds.seed.values)),
                settings=low_rank.describe(S, ranks=ranks),
                caption=published.page.caption_lead("Figure 12", bool(ds.attrs["published"])),
                setting_note=("These are Figure 4's published settings, with the paper's appendix ranks."
                              if ds.attrs["published"] else
                              "These are not the settings of the paper's figure."))


def plot(ds):
    """One row per rank: the training loss at every seed with the saddle losses L(M_0) … L(M_D) dotted and labelled
    (left), and its distance to the last one, L − L(M_D), on a log axis (right)."""
    import matplotlib.pyplot as plt

    from ..plotting import loss_panel

    ranks, levels, step = list(ds["rank"].values), ds.plateau_theory.values, ds.step.values
    fig, axes = plt.subplots(len(ranks), 2, figsize=(6.6, 0.5 + 1.75 * len(ranks)), sharex=True, squeeze=False)
    for (ax, ax_log), R in zip(axes, ranks):
        curves = list(ds.train_loss.sel(rank=R).values)
        loss_panel(ax, step, curves, levels, title=f"$R = {R}$", linewidth=0.9)
        low_rank.gap_panel(ax_log, step, curves, levels, title=f"$R = {R}$: $L - L(ℳ_D)$")
    for ax in axes[:-1].flat:
        ax.set_xlabel("")
    axes[-1, 1].set_xlabel("step")
    fig.tight_layout()
    return fig
