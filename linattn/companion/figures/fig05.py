"""Figure 5: softmax attention — separate keys and queries (ATTN_S) still learn in steps, merged ones (ATTN_M) in one
fall (paper Section 6).

Two runs, the settings of Figures 1b and 3a with a softmax over the attention scores (``softmax=True``: the
companion's softmax engine, ``linattn.objectives.softmax``). There is no theory for softmax attention: the
linear-attention saddle losses L(M_0) … L(M_D) of the same covariance (``theory.plateau_losses``) and its minimum L*
are drawn for reference only. Measured: the flat stretches and drops of each curve (``diagnostics.detect_plateaus``)
and where it ends. At the published settings the paper's text for ATTN_M, a single drop, is set beside the run as a
claim (``published.fig5_single_drop_claim``).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ... import diagnostics, theory
from .. import presets, published
from ..commands import train_command
from ..output import MarkdownTable, words as list_words
from ..runstore import figure_runs
from .attn_s_run import describe
from .frame import padded, settings_attrs

NAME = "fig05_softmax"
MODELS = ("attn_m", "attn_s")
TITLES = {"attn_m": "softmax ATTN_M", "attn_s": "softmax ATTN_S"}
PAPER = {"attn_m": "one drop", "attn_s": "several drops"}  # what the paper's figure shows of each


def settings(preset: str = "paper", **overrides) -> dict:
    """The figure's settings at ``preset`` with ``overrides`` (``attn_m``/``attn_s``: a partial dict sets only
    those keys of that run; ``seed``)."""
    return presets.settings(NAME, preset, **overrides)


def compute(S: dict):
    """Both runs' training losses (``train_loss``: model × step; the shorter run is NaN past its end) with what the
    plateau detector finds in each — the level, first and last step of each flat stretch (``plateau_level``,
    ``plateau_start``, ``plateau_end``: model × plateau), the step of each drop (``drop_step``: model × drop), their
    number (``drops``) — the final loss and the training's wall time; for reference, each model's
    linear-attention saddle losses (``plateau_theory``: model × m) and minimum (``loss_star``: model)."""
    import xarray as xr

    runs = {key: run for key in MODELS for run in figure_runs(S, run=key)}
    losses = [runs[k].history.train_loss for k in MODELS]
    found = [diagnostics.detect_plateaus(L) for L in losses]
    levels = [theory.plateau_losses(r.datasets.cov, r.config.N) for r in runs.values()]
    steps = max((r.history.step for r in runs.values()), key=len)
    n_plateaus = max(1, max(len(p.levels) for p in found))
    ds = xr.Dataset(
        {"train_loss": (("model", "step"), padded(losses, len(steps))),
         "plateau_level": (("model", "plateau"), padded([p.levels for p in found], n_plateaus)),
         "plateau_start": (("model", "plateau"), padded([p.starts for p in found], n_plateaus)),
         "plateau_end": (("model", "plateau"), padded([p.ends for p in found], n_plateaus)),
         "drop_step": (("model", "drop"), padded([p.drop_steps for p in found], n_plateaus - 1)),
         "drops": ("model", [len(p.drop_steps) for p in found]),
         "final_loss": ("model", [float(L[-1]) for L in losses]),
         "wall_time": ("model", [float(r.wall_time) for r in runs.values()]),
         "plateau_theory": (("model", "m"), padded(levels, max(len(v) for v in levels))),
         "loss_star": ("model", [theory.loss_star(r.datasets.cov, r.config.N) for r in runs.values()])},
        coords={"model": list(MODELS), "step": steps, "plateau": np.arange(n_plateaus),
                "drop": np.arange(1, n_plateaus), "m": np.arange(max(len(v) for v in levels))},
        attrs=settings_attrs(S, engine=runs["attn_m"].engine, seeds=S["seed"],
                             runs={k: r.config.to_dict() for k, r in runs.items()}))
    ds.attrs.update(published=int(presets.is_published(NAME, S)),
                    commands="\n".join(train_command(runs[k].config) for k in MODELS))
    ds.train_loss.attrs["description"] = "training loss (NaN past the end of the shorter run)"
    ds.plateau_theory.attrs["description"] = "linear attention's saddle losses L(M_m), for reference only"
    return ds


def _runs(ds) -> dict:
    import json

    return json.loads(ds.attrs["runs"])


def _found(ds, model: str):
    """What the plateau detector found in ``model``'s loss, as ``diagnostics.detect_plateaus`` gives it."""
    m = ds.sel(model=model)
    n = int(np.isfinite(m.plateau_level).sum())
    return SimpleNamespace(levels=m.plateau_level.values[:n], starts=m.plateau_start.values[:n],
                           ends=m.plateau_end.values[:n], drop_steps=m.drop_step.values[:int(m.drops)])


def claims(ds) -> list:
    """The paper's text set beside the run — softmax ATTN_M falls in a single drop — with a verdict and the reason
    in numbers from the run (only at the published settings: [] otherwise)."""
    return [published.fig5_single_drop_claim(_found(ds, "attn_m"))] if ds.attrs["published"] else []


def numbers(ds) -> list[dict]:
    """``numbers.json``: the drops detected and the final loss of each model (beside the linear-attention L*); at
    the published settings ATTN_M's count is the paper's claim, with its verdict, in place of the plain row."""
    runs, rows = _runs(ds), []
    for key in MODELS:
        rows.append(dict(key=f"drops.{key}", quantity=f"{TITLES[key]}: drops detected",
                         reproduced=int(ds.drops.sel(model=key))))
        rows.append(dict(key=f"final_loss.{key}",
                         quantity=f"{TITLES[key]}: final loss (P = {runs[key]['trainset_size']})",
                         theory=ds.loss_star.sel(model=key), reproduced=ds.final_loss.sel(model=key)))
    made = claims(ds)
    claimed = {c.counted for c in made}  # a count the paper's text states is written once: as its claim
    return [r for r in rows if r["quantity"] not in claimed] + [c.row() for c in made]


def table(ds) -> MarkdownTable:
    """Each model's drops and final loss beside the linear-attention L* (and, at the published settings, what the
    paper's figure shows)."""
    rows = []
    for key in MODELS:
        final, L_star = float(ds.final_loss.sel(model=key)), float(ds.loss_star.sel(model=key))
        rows.append(dict(model=TITLES[key], paper=PAPER[key], drops=int(ds.drops.sel(model=key)), L_star=L_star,
                         final=f"{final:.4f} ({'below' if final < L_star else 'above'} $L^*$)"))
    columns = {"model": "", "paper": "paper", "drops": "drops detected in this run", "final": "final loss, this run",
               "L_star": "linear-attention $L^*$"}
    if not ds.attrs["published"]:
        del columns["paper"]
    return MarkdownTable(rows, columns)


def _count(n: int, what: str) -> str:
    return {0: f"no {what}", 1: f"one {what}"}.get(n, f"{n} {what}s")


def _detected(ds, key: str, first: bool) -> str:
    """One sentence: the drops found in ``key``'s loss, their steps, the plateaus between them, its last loss."""
    p, final = _found(ds, key), float(ds.final_loss.sel(model=key))
    n, name = len(p.drop_steps), TITLES[key]
    finds = "In this run the detector finds" if first else "It finds"
    if n == 0:
        rest = (f"its loss rests at {p.levels[0]:.2f}" if len(p.levels) else "its loss has no flat stretch")
        return f"{finds} no drop of {name}: {rest} and ends at {final:.3f}."
    steps = f"at step {p.drop_steps[0]:.0f}" if n == 1 else f"at steps {list_words(p.drop_steps)}"
    return (f"{finds} {_count(n, 'drop')} of {name}, {steps}, between plateaus at "
            f"{list_words(np.round(p.levels, 2))}; its last loss is {final:.3f}.")


def _shoulder(ds) -> bool:
    """Whether the run is the published one and ATTN_M's fall pauses on a shoulder (more than one drop)."""
    return bool(ds.attrs["published"]) and int(ds.drops.sel(model="attn_m")) > 1


def _reading(ds) -> str:
    """What the published settings show, in words (only there: "" otherwise)."""
    if not _shoulder(ds):
        return ""
    p = _found(ds, "attn_m")
    shoulders = p.levels[1:-1]
    linear = ds.plateau_theory.sel(model="attn_m").values
    off_saddles = all(np.nanmin(np.abs(linear - s)) > 0.02 for s in shoulders)
    one = len(shoulders) == 1
    text = ("**What the paper preset shows.** "
            + ("Softmax ATTN_S learns in a staircase, as the paper says. " if int(ds.drops.sel(model="attn_s")) > 1
               else "")
            + f"Softmax ATTN_M does not quite fall in one sigmoid: its loss pauses on "
            f"{'a shoulder' if one else f'{len(shoulders)} shoulders'} between steeper stretches, so the plateau "
            f"detector counts {int(ds.drops.sel(model='attn_m'))} drops where the paper describes one (the sentence "
            "under the table gives the steps).")
    if off_saddles:
        text += (f" {'The shoulder is' if one else 'The shoulders are'} not at any of linear attention's saddle "
                 "losses (none lies within 0.02 of one).")
    return text


def _describe(run: dict) -> str:
    return describe(run) + ("" if run["softmax"] else ", without the softmax (linear attention)")


def words(ds) -> dict:
    """The values and sentences the page's prose quotes, by name (for ``output.glue``)."""
    runs = _runs(ds)
    m, s = (int(ds.drops.sel(model=k)) for k in MODELS)
    lead = (f"In this run the plateau detector finds {_count(s, 'drop')} in the loss of ATTN_S, with separate keys "
            f"and queries, and {_count(m, 'drop')} in that of ATTN_M, with merged key and query")
    if _shoulder(ds) and s > 1:
        lead += ("; at the published sizes ATTN_S learns in a staircase, as linear attention does, and ATTN_M in one "
                 "fall that pauses on a shoulder (the paper describes a single drop)")
    paper = presets.PRESETS[NAME]["paper"]
    return dict(lead_result=lead + ".", n=runs["attn_s"]["seq_len"], P_s=runs["attn_s"]["trainset_size"],
                ms_per_step=f"{1e3 * float(ds.wall_time.sel(model='attn_s')) / runs['attn_s']['epoch']:.2g} ms",
                settings_m=_describe(runs["attn_m"]), settings_s=_describe(runs["attn_s"]),
                paper_lrs=list_words([paper[k]["lr"] for k in MODELS]),
                detected=" ".join(_detected(ds, k, k == MODELS[0]) for k in MODELS), reading=_reading(ds))


def plot(ds):
    """The training loss of each model (left ATTN_M, right ATTN_S) with the linear-attention saddle losses of the
    same covariance, dotted, for reference."""
    import matplotlib.pyplot as plt

    from ..plotting import plateau_labels, plot_loss_with_theory

    fig, axes = plt.subplots(1, 2, figsize=(6.6, 3.2))
    for ax, key in zip(axes, MODELS):
        loss = ds.train_loss.sel(model=key).dropna("step")
        levels = ds.plateau_theory.sel(model=key).dropna("m").values
        plot_loss_with_theory(ax, loss.step.values, [(loss.values, None, dict(color="black"))], levels=levels,
                              level_labels=plateau_labels(len(levels)), legend=False)
        ax.set_title(TITLES[key])
        ax.set_ylim(0, 1.08 * max(float(loss.max()), levels[0]))  # every theory level stays in view
    fig.tight_layout()
    return fig
