"""The paper's Figure 12 (appendix): the key-query ranks Figure 4 leaves out (3, 5, 6 and 7 at D = 8), in Figure 4's
setting. Where R does not divide D the last head is only partly filled; the theory still expects long plateaus only
after 0, R, 2R, … learned directions (``theory.long_plateaus``).

One run per rank and seed through the run store; each curve's rests at the saddles, their lengths, which are long
and which the theory expects long (:mod:`~linattn.companion.figures.low_rank`), the directions learned and the final
loss; for the first seed, each drop's step beside its prediction from the run's own initial weights
(``loss_curves.predicted_drop_steps``).
"""

from __future__ import annotations

import numpy as np

from ... import loss_curves, theory
from .. import presets, published
from ..output import MarkdownTable
from ..output import words as list_words
from .common import presets as common
from .common.frame import settings_attrs
from .common.low_rank import (
    describe,
    extra_long_rests,
    gap_panel,
    long_words,
    predicted_rows,
    rests_text,
    seed_runs,
    summaries,
    summaries_of,
    summary_variables,
)

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    "quick": dict(common.without(common.LOW_RANK_QUICK, "rank"), ranks=[3, 5, 6, 7], seeds=[10, 11, 12]),
    "paper": dict(common.without(common.LOW_RANK_PAPER, "rank"), ranks=[3, 5, 6, 7], seeds=[10, 11, 12]),
}
TOLERANCES = [common.PLATEAUS]



def runs(S: dict) -> dict:
    """One run per seed and rank (seeds outer, ranks inner)."""
    return common.sweep(S)


def compute(S: dict):
    """Each rank's training loss at every seed (``train_loss``: seed × rank × step) with what is measured on it: each
    saddle's rest level and length (``plateau_level``, ``rest_steps``: seed × rank × m), which rests are long
    (``plateau_long``) and which the theory expects long (``plateau_long_theory``), the directions learned and the
    final loss; the first seed's drop steps beside those predicted from its initial weights (``drop_step``,
    ``drop_step_predicted``: rank × direction); the theory's saddle losses (``plateau_theory``: m)."""
    import xarray as xr

    ranks, seeds = [int(R) for R in S["ranks"]], [int(x) for x in S["seeds"]]
    grid = seed_runs(runs(S), S)
    first = grid[0]
    cfg, cov = first[0].config, first[0].datasets.cov
    levels = theory.plateau_losses(cov, cfg.N)
    loss = np.array([[r.history.train_loss for r in by_rank] for by_rank in grid])
    ds = xr.Dataset(
        {"train_loss": (("seed", "rank", "step"), loss),
         **summary_variables([summaries(by_seed, ranks, levels) for by_seed in loss], len(levels) - 1),
         "drop_step": (("rank", "direction"), [loss_curves.drop_steps(L, levels) for L in loss[0]]),
         "drop_step_predicted": (("rank", "direction"), [loss_curves.predicted_drop_steps(r.config, r.init, cov)
                                                         for r in first]),
         "plateau_theory": ("m", levels)},
        coords={"seed": seeds, "rank": ranks, "step": first[0].history.step, "m": np.arange(len(levels)),
                "direction": np.arange(1, len(levels))},
        attrs=settings_attrs(S, engine=first[0].engine, seeds=seeds,
                             runs={str(R): r.config.to_dict() for R, r in zip(ranks, first)}))
    ds.attrs.update(band=loss_curves.REST_BAND, published=int(presets.is_published(NAME, S)))
    ds.plateau_level.attrs["description"] = "level of the first rest at saddle M_m (loss_curves.saddle_plateaus)"
    ds.rest_steps.attrs["description"] = "length in steps of the first complete rest at saddle M_m"
    ds.drop_step_predicted.attrs["description"] = ("drop steps of the population gradient descent from the first "
                                                   "seed's initial weights (loss_curves.predicted_drop_steps)")
    return ds


def numbers(ds) -> list[dict]:
    """``numbers.json``: each rank's summary rows at the first seed (long plateaus found beside the theory's,
    directions learned, each saddle's plateau level, the final loss), the other seeds' long plateaus, and each drop's
    step beside its prediction from the run's initial weights."""
    seeds, rows = [int(x) for x in ds.seed.values], []
    for R, s in summaries_of(ds).items():
        pred = ds.drop_step_predicted.sel(rank=R).values
        rows += s.rows(f", seed {seeds[0]}", predicted_learned=int(np.sum(np.isfinite(pred))))
        for sd in seeds[1:]:
            other = summaries_of(ds, seed=sd)[R]
            rows.append(dict(key=f"R{R}.seed{sd}.long_plateaus",
                             quantity=f"R={R}: long plateaus m, seed {sd} (theory: multiples of R)",
                             theory=" ".join(map(str, other.expected_long)),
                             reproduced=" ".join(map(str, other.plateaus.long))))
        r = ds.sel(rank=R)
        rows += predicted_rows(r, R, f"R{R}", f"seed {seeds[0]}")
    return rows


def rank_table(ds) -> MarkdownTable:
    """Per rank: the long plateaus expected and found at each seed, the directions learned and the final loss (first
    seed)."""
    D, seeds = ds.sizes["m"] - 1, [int(x) for x in ds.seed.values]
    rows = []
    for R in ds["rank"].values:
        by_seed = [summaries_of(ds, seed=sd)[int(R)] for sd in seeds]
        rows.append(dict(rank=f"$R = {R}$", expected=long_words(by_seed[0].expected_long),
                         found="; ".join(long_words(s.plateaus.long) or "none" for s in by_seed),
                         learned=", ".join(str(s.learned) for s in by_seed) + f" of {D}",
                         final=by_seed[0].final_loss))
    return MarkdownTable(rows, {"rank": "rank", "expected": "long plateaus expected (multiples of R)",
                                "found": f"long plateaus found (seeds {list_words(seeds)})",
                                "learned": "directions learned", "final": f"final loss (seed {seeds[0]})"},
                         {"final": ".4f"})


def verdict(ds) -> str:
    """The page's sentences on which ranks have their long plateaus where the theory puts them at every seed, and
    what the others found instead (:func:`~.common.low_rank.rests_text`)."""
    extra = extra_long_rests(ds)
    missing = {int(R): any(bool(ds.plateau_long_theory.sel(rank=R, seed=sd, m=m))
                           and not bool(ds.plateau_long.sel(rank=R, seed=sd, m=m))
                           for sd in ds.seed.values for m in ds.m.values) for R in ds["rank"].values}
    agree = [R for R in extra if not any(extra[R].values()) and not missing[R]]
    differ = [R for R in extra if R not in agree]
    n = ds.sizes["seed"]
    seeds = f"at each of the {n} seeds" if n > 1 else "in this run"
    if not differ:
        text = f"Every rank has its long plateaus where the theory puts them, {seeds}. "
    elif not agree:
        text = f"No rank has its long plateaus exactly where the theory puts them {seeds}. "
    else:
        text = (f"Rank{'s' if len(agree) > 1 else ''} {list_words(agree)} "
                f"{'have their' if len(agree) > 1 else 'has its'} long plateaus where the theory puts them, {seeds}. ")
    short = [R for R in differ if missing[R]]
    if short:
        text += (f"Rank{'s' if len(short) > 1 else ''} {list_words(short)} rest{'s' if len(short) == 1 else ''} only "
                 "briefly at a plateau the theory expects long, in at least one seed. ")
    return (text + rests_text(ds)).strip()


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``)."""
    import json

    S = json.loads(ds.attrs["settings"])
    ranks = [int(R) for R in ds["rank"].values]
    return dict(H=S["head_num"], D=ds.sizes["m"] - 1, ranks=list_words(ranks),
                rest_tol=loss_curves.REST_TOL, band=loss_curves.rest_band_words(ds.attrs["band"]),
                seeds=list_words(list(ds.seed.values)),
                settings=describe(S, ranks=ranks),
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
    fig, axes = plt.subplots(len(ranks), 2, figsize=(6.6, 0.5 + 1.75 * len(ranks)), sharex=True, squeeze=False,
                             layout="constrained")
    for (ax, ax_log), R in zip(axes, ranks):
        curves = list(ds.train_loss.sel(rank=R).values)
        loss_panel(ax, step, curves, levels, title=f"$R = {R}$", linewidth=0.9)
        gap_panel(ax_log, step, curves, levels, title=f"$R = {R}$: $L - L(ℳ_D)$")
    for ax in axes[:-1].flat:
        ax.set_xlabel("")
    axes[-1, 1].set_xlabel("step")
    return fig
