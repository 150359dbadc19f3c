"""The paper's Figure 12 (appendix): the key-query ranks Figure 4 leaves out (3, 5, 6 and 7 at D = 8), in Figure 4's
setting. Where R does not divide D the last head is only partly filled; the theory still expects long plateaus only
after 0, R, 2R, … learned directions (``theory.long_plateaus``).

One run per rank through the run store; each curve's plateaus named by their saddle, which are long and which the
theory expects long (:mod:`~linattn.companion.figures.low_rank`), the directions learned and the final loss.
"""

from __future__ import annotations

import numpy as np

from ... import theory
from .. import presets
from ..output import MarkdownTable, words as list_words
from ..runstore import figure_runs
from .frame import settings_attrs
from .low_rank import TOL, describe, long_words, summaries, summaries_of, summary_variables

NAME = "figA_ranks"


def settings(preset: str = "paper", **overrides) -> dict:
    """The figure's settings at ``preset`` with ``overrides`` (any knob of its parameters cell)."""
    return presets.settings(NAME, preset, **overrides)


def compute(S: dict):
    """Each rank's training loss (``train_loss``: rank × step) with what is measured on it: each saddle's plateau
    level (``plateau_level``: rank × m), which plateaus are long (``plateau_long``) and which the theory expects long
    (``plateau_long_theory``), the directions learned and the final loss; the theory's saddle losses
    (``plateau_theory``: m)."""
    import xarray as xr

    ranks = [int(R) for R in S["ranks"]]
    runs = figure_runs(S)
    cfg, cov = runs[0].config, runs[0].datasets.cov
    levels = theory.plateau_losses(cov, cfg.N)
    loss = np.array([r.history.train_loss for r in runs])
    ds = xr.Dataset(
        {"train_loss": (("rank", "step"), loss),
         **summary_variables(summaries(loss, ranks, levels, tol=TOL), len(levels) - 1),
         "plateau_theory": ("m", levels)},
        coords={"rank": ranks, "step": runs[0].history.step, "m": np.arange(len(levels))},
        attrs=settings_attrs(S, engine=runs[0].engine, seeds=S["seed"],
                             runs={str(R): r.config.to_dict() for R, r in zip(ranks, runs)}))
    ds.attrs.update(tol=TOL, published=int(presets.is_published(NAME, S)))
    ds.plateau_level.attrs["description"] = (f"level of the first flat stretch at saddle M_m "
                                             f"(diagnostics.saddle_plateaus, tol {TOL})")
    return ds


def numbers(ds) -> list[dict]:
    """``numbers.json``: each rank's summary rows (long plateaus found beside the theory's, directions learned, each
    saddle's plateau level, the final loss)."""
    return [row for s in summaries_of(ds).values() for row in s.rows()]


def rank_table(ds) -> MarkdownTable:
    """Per rank: the long plateaus expected and found, the directions learned and the final loss."""
    D = ds.sizes["m"] - 1
    return MarkdownTable([dict(rank=f"$R = {R}$", expected=long_words(s.expected_long),
                               found=long_words(s.plateaus.long), learned=f"{s.learned} of {D}", final=s.final_loss)
                          for R, s in summaries_of(ds).items()],
                         {"rank": "rank", "expected": "long plateaus expected (multiples of R)",
                          "found": "long plateaus found", "learned": "directions learned", "final": "final loss"},
                         {"final": ".4f"})


def verdict(ds) -> str:
    """The page's sentences on which ranks have their long plateaus where the theory puts them, and what the others
    found instead; at the published settings, our reading of the extra rests."""
    summary = summaries_of(ds)
    agree = [R for R, s in summary.items() if list(s.plateaus.long) == list(s.expected_long)]
    differ = [R for R in summary if R not in agree]
    if not agree:
        text = "In this run no rank has its long plateaus exactly where the theory puts them. "
    elif not differ:
        text = "In this run every rank has its long plateaus where the theory puts them. "
    else:
        text = (f"In this run rank{'s' if len(agree) > 1 else ''} {list_words(agree)} "
                f"{'have their' if len(agree) > 1 else 'has its'} long plateaus where the theory puts them. ")
    extra_any = False
    for R in differ:
        s = summary[R]
        extra = sorted(set(s.plateaus.long) - set(s.expected_long))
        extra_any = extra_any or bool(extra)
        text += (f"Rank {R} differs: expected {list_words(s.expected_long) if s.expected_long else 'none'}, found "
                 f"{list_words(s.plateaus.long) if s.plateaus.long else 'none'}"
                 + (f" (an extra rest near $L(\\mathcal{{M}}_{{{extra[0]}}})$)" if extra else "") + ". ")
    if extra_any and ds.attrs["published"]:
        text += ("As rank 8 does in Figure 4, a rank that rests between multiples of $R$ on its way to its last level "
                 "has that rest counted as a long plateau by the classification by length (our reading: the "
                 "directions of smallest eigenvalue are learned slowly even inside a grown head).")
    return text.strip()


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``)."""
    import json

    S = json.loads(ds.attrs["settings"])
    ranks = [int(R) for R in ds["rank"].values]
    return dict(H=S["head_num"], D=ds.sizes["m"] - 1, ranks=list_words(ranks), tol=ds.attrs["tol"],
                settings=describe(S, ranks=ranks),
                setting_note=("These are Figure 4's published settings, with the paper's appendix ranks."
                              if ds.attrs["published"] else
                              "These are not the settings of the paper's figure."))


def plot(ds):
    """One panel per rank: the training loss with the saddle losses L(M_0) … L(M_D) dotted and labelled."""
    from ..plotting import plot_rank_panels

    fig, _ = plot_rank_panels(ds.step.values, {int(R): ds.train_loss.sel(rank=R).values for R in ds["rank"].values},
                              ds.plateau_theory.values)
    return fig
