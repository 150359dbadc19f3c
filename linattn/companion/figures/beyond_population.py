"""Beyond the paper: infinite data (the population loss, by gradient descent and by gradient flow) beside finite
training sets, from the same initial weights.

The paper's theory is derived for the population loss under gradient flow; its simulations use gradient descent on
P training sequences. One run per value of ``trainset_sizes`` (None: the population loss, ``RunConfig(
trainset_size=None)``, its moments exact or estimated from ``population_samples`` fresh sequences), and, with
``flow``, the population run again as a gradient flow (``dynamics="flow"``, read at t/τ = 2·lr·step so it shares
the step axis). Measured: the level of the first flat stretch at each saddle M_0 … M_D
(``loss_curves.saddle_levels``, the one rule), beside the theory's population levels L(M_m)
(``theory.plateau_losses``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ... import theory
from ...analysis import loss_curves
from .. import presets, uncertainty
from ..commands import train_command
from ..output import saddle, subscript
from ..output import words as list_words
from .common import preset_blocks
from .common.frame import settings_attrs
from .common.runs import FromRun
from .common.trainer import train

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    # P = None is the population (infinite-data) objective: its exact moments at the paper preset (the theory's own
    # loss; a Monte-Carlo estimate from 2^20 fresh sequences was off by 1e-4 to 1e-3 at the saddles and cost ~10 s of
    # CPU a run), estimated from population_samples fresh sequences at the quick one (the path stays exercised). Every
    # run draws from linattn's own streams (draws="streams"), so that the initial weights stay the same as P changes
    # and P = ∞, which has no reference draws, can be run at all
    "quick": dict(preset_blocks.without(preset_blocks.ATTN_S_QUICK, "trainset_size"), draws="streams",
                  trainset_sizes=[None, 1000, 4000], population_samples=1 << 15, flow=True, seed=0),
    "paper": dict(preset_blocks.without(preset_blocks.ATTN_S_PAPER, "trainset_size"), draws="streams",
                  trainset_sizes=[None, 5000, 80000], population_samples=0, flow=True, seed=0),
}
HELP = {
    "flow": "also integrate the gradient flow of the population loss",
}
# A drop of population GD lies within 5 % of the flow's step (lr = 0.02: GD lags the flow by a few steps)
TOLERANCES = [preset_blocks.PLATEAUS, (r"drop_step\.population_gd\.d\d+", "rel", 0.05)]
#: Other settings the page must stay true at (built at the quick preset by the suite): another D and H with one
#: finite set, and another seed and start with no flow
KNOB_CASES = (dict(in_dim=3, head_num=2, trainset_sizes=[None, 500], epoch=1001),
              dict(seed=3, init=0.02, flow=False, epoch=1001))
GD, FLOW = "population GD", "population flow"


def _label(P) -> str:
    return GD if P is None else f"P = {P}"


def _slug(curve: str) -> str:
    """A curve's name in a numbers key: ``population_gd``, ``population_flow``, ``P1000``."""
    return curve.replace("P = ", "P").replace(" ", "_").replace("GD", "gd")


def runs(S: dict) -> dict:
    """One run per value of ``trainset_sizes`` (None: the population loss), labelled by its curve ("population
    GD", "P = 1000", …), and with ``flow`` the population run's gradient flow from the same initial weights."""
    if None not in S["trainset_sizes"]:
        raise ValueError("trainset_sizes must hold None (the population loss): the other curves are set beside it")
    out = {_label(cfg.trainset_size): cfg for cfg in preset_blocks.sweep(S).values()}
    if S["flow"]:
        out[FLOW] = FromRun(dataclasses.replace(out[GD], dynamics="flow"), GD, "initial")
    return out


def origin_error(cfg, cov) -> float:
    """The standard error of a run's loss at zero weights about L(M_0) (``uncertainty.origin_loss_error``): a finite
    training set's n = P sequences, whose task vectors are whitened where ``data.sample_sequences`` whitens them
    (icl = 1 and P > D); the independent fresh sequences of a Monte-Carlo population estimate; 0 for the exact
    population loss, which has no sampling error."""
    P, D = cfg.trainset_size, np.shape(cov)[0]
    if P is not None:
        return uncertainty.origin_loss_error(cov, P, whitened=cfg.icl == 1 and P > D)
    n = cfg.population_samples
    return uncertainty.origin_loss_error(cov, n, whitened=False) if n else 0.0


def compute(S: dict):
    """Every curve's training loss (``train_loss``: curve × step; ``curve``: "population GD", "P = 1000", …,
    "population flow", with its ``trainset_size`` (inf: the population) and ``dynamics`` as coordinates), the level
    of the first flat stretch at each saddle (``plateau_level``: curve × m, NaN where the curve never rests there),
    the standard error of each curve's loss at zero weights about L(M_0) (``origin_error``, :func:`origin_error`),
    the drops each made (``directions_learned``, ``loss_curves.directions_learned``) and the final loss; the theory's
    population levels (``plateau_theory``: m) and the run's input covariance Λ (``input_cov``). The settings, the
    engines and the runs' settings as attributes. (No training times: runs trained together in one stack share one
    clock, so a run's recorded time is not its own.)"""
    import xarray as xr

    curves = train(runs(S), S)
    pop = curves[GD]
    levels = theory.plateau_losses(pop.datasets.cov, pop.config.N)
    loss = np.stack([r.history.train_loss for r in curves.values()])
    engines = list(dict.fromkeys("flow" if r.config.dynamics == "flow" else r.engine for r in curves.values()))
    ds = xr.Dataset(
        {"train_loss": (("curve", "step"), loss),
         "plateau_level": (("curve", "m"), [loss_curves.saddle_levels(L, levels) for L in loss]),
         "origin_error": ("curve", [origin_error(r.config, pop.datasets.cov) for r in curves.values()]),
         "directions_learned": ("curve", [loss_curves.directions_learned(L, levels) for L in loss]),
         "final_loss": ("curve", loss[:, -1]),
         "plateau_theory": ("m", levels),
         "input_cov": (("i", "j"), pop.datasets.cov)},
        coords={"curve": list(curves), "step": pop.history.step, "m": np.arange(len(levels)),
                "trainset_size": ("curve", [np.inf if r.config.trainset_size is None else r.config.trainset_size
                                            for r in curves.values()]),
                "dynamics": ("curve", [r.config.dynamics for r in curves.values()])},
        attrs=settings_attrs(S, engine=", ".join(engines), seeds=S["seed"],
                             runs={k: r.config.to_dict() for k, r in curves.items()}))
    ds.attrs.update(band=loss_curves.REST_BAND, published=int(presets.is_published(NAME, S)),
                    commands="\n".join(train_command(r.config) for r in curves.values()))
    ds.plateau_level.attrs["description"] = (f"level of the first flat stretch at saddle M_m "
                                             f"(loss_curves.saddle_levels, band {loss_curves.REST_BAND:.3g})")
    ds.origin_error.attrs["description"] = "standard error of the loss at zero weights about L(M_0) (0: exact)"
    return ds


def flow_lag(ds) -> loss_curves.DropLag | None:
    """Population GD beside the population flow at matched levels (``loss_curves.drop_lag``: the lag of each drop in
    steps and the gap between their plateau levels); None when the flow was not integrated."""
    if FLOW not in ds.curve.values:
        return None
    return loss_curves.drop_lag(ds.train_loss.sel(curve=GD).values, ds.train_loss.sel(curve=FLOW).values,
                                ds.plateau_theory.values, ds.step.values)


def gap_words(gap: float, m: int) -> str:
    """A signed gap at saddle m in words: "0.038 below L(ℳ₀)", "0.039 above L(ℳ₁)", "0.000 at L(ℳ₂)" (to the
    third decimal)."""
    side = "at" if f"{abs(gap):.3f}" == "0.000" else "below" if gap < 0 else "above"
    return f"{abs(gap):.3f} {side} L({saddle(m)})"


def origin_gaps(ds) -> dict:
    """For each curve that rested at M_0: ``(gap, se, verdict)``, gap = plateau level − L(M_0), se its
    ``origin_error`` and the verdict of ``uncertainty.verdict`` on the band of ``uncertainty.COVERAGE`` standard errors
    (None for the exact population loss: no sampling error, no band)."""
    out = {}
    for c in ds.curve.values:
        gap = float(ds.plateau_level.sel(curve=c, m=0) - ds.plateau_theory.sel(m=0))
        se = float(ds.origin_error.sel(curve=c))
        if np.isfinite(gap):
            out[str(c)] = (gap, se, uncertainty.verdict(gap, uncertainty.difference_band(se)) if se > 0 else None)
    return out


def _listed(texts) -> str:
    """``["a", "b", "c"]`` → ``"a, b and c"`` (texts; :func:`~linattn.companion.output.words` writes numbers)."""
    texts = list(texts)
    return texts[0] if len(texts) == 1 else f"{', '.join(texts[:-1])} and {texts[-1]}"


def origin_words(ds) -> str:
    """The page's sentence on the plateaus at M_0 (:func:`origin_gaps`): each sampled curve's gap from L(M_0) in its
    standard errors, within or beyond the band; the exact population curves' gaps as they are."""
    gaps = origin_gaps(ds)
    if not gaps:
        return "No curve of this run rests at ℳ₀."
    two = f"{uncertainty.COVERAGE:g}"
    sampled = [f"{c} lies {gap_words(g, 0)}, {abs(g) / se:.1f} standard errors, "
               + ("within" if v == uncertainty.AGREES else "beyond") + f" the band of {two}"
               for c, (g, se, v) in gaps.items() if v is not None]
    exact = [f"{c} {abs(g):.1g} {'below' if g < 0 else 'above'}" for c, (g, se, v) in gaps.items() if v is None]
    parts = ["At ℳ₀, " + "; ".join(sampled) + "."] if sampled else []
    if exact:
        parts.append(("The" if sampled else "At ℳ₀, the") + " exact population loss has no sampling error; its "
                     "curves' gaps from L(ℳ₀): " + _listed(exact) + ".")
    return " ".join(parts)


def plateau_gaps(ds) -> dict:
    """For each curve that rested at a saddle with a direction fitted (m ≥ 1), its largest gap from the theory:
    ``(gap, m)`` with gap = plateau level − L(M_m) (signed: < 0 below the theory's level) at the saddle m ≥ 1 where
    |gap| is largest."""
    gaps = (ds.plateau_level - ds.plateau_theory).sel(m=ds.m.values[1:])
    out = {}
    for c in ds.curve.values:
        g = gaps.sel(curve=c).values
        if np.isfinite(g).any():
            k = int(np.nanargmax(np.abs(g)))
            out[str(c)] = (float(g[k]), k + 1)
    return out


def fitted_words(ds) -> str:
    """The page's sentence on the plateaus at the saddles with directions fitted: each curve's largest gap."""
    gaps = plateau_gaps(ds)
    if not gaps:
        return "No curve of this run rests at a saddle with a direction fitted."
    return ("At the saddles with directions fitted, the largest gap: "
            + "; ".join(f"{c}: {gap_words(g, m)}" for c, (g, m) in gaps.items()) + ".")


def finite_learned_plateaus(ds) -> int:
    """How many plateaus the finite training sets rested on at a saddle with a direction fitted (ℳ₁ … ℳ_D: finite-P
    curves × saddles m ≥ 1 with a ``plateau_level``)."""
    finite = ds.trainset_size.values < np.inf
    return int(np.isfinite(ds.plateau_level.values[finite][:, 1:]).sum())


def bias_words(ds) -> str:
    """The page's sentence on a training loss's bias: where directions are fitted to the training set its plateau is
    biased low, beside the sampling error of a mean over P sequences; the run measures that error at M_0 only (no
    direction fitted there) and neither a held-out loss nor the error at a fitted saddle, so the finite sets' gaps
    there are not tested against them (empty without a finite set)."""
    if not (ds.trainset_size.values < np.inf).any():
        return ""
    text = ("A finite set's plateau is a training loss, measured on the sequences its weights were fitted to: once a "
            "direction is fitted it is biased low, beside the sampling error of a mean over P sequences")
    if not finite_learned_plateaus(ds):
        return text + "; in this run no finite set rested at a saddle with a direction learned."
    return (text + ". At the later saddles this run measures neither, so the gaps there are not tested against them: "
            "the side a gap lies on is no evidence of the bias.")


def model_reach(ds) -> int | None:
    """The most directions the run's model can learn where that is fewer than D: H heads of rank R give a combined
    weight of rank at most H·R, so the saddles past ℳ_{H·R} are out of its reach; None where H·R ≥ D (settings
    missing from ``ds``: None)."""
    import json

    run = json.loads(ds.attrs.get("runs", "{}")).get(GD)
    D = ds.sizes["m"] - 1
    if not run:
        return None
    most = int(run["head_num"]) * int(run["rank"])
    return most if most < D else None


def reach_words(ds) -> str:
    """The page's sentence on how far each curve got (``directions_learned``: the drops it made, each passing the
    midpoint towards the next saddle level, ``loss_curves.drop_steps``): which curves make the last drop, to M_D,
    within the run, and where the others end; where the model has too few heads to learn every direction
    (:func:`model_reach`), that is said."""
    import json

    D, epoch = ds.sizes["m"] - 1, int(json.loads(ds.attrs["settings"])["epoch"])
    learned = {str(c): int(ds.directions_learned.sel(curve=c)) for c in ds.curve.values}
    short = [c for c, k in learned.items() if k < D]
    last = f"ℳ{subscript(D)}"
    if not short:
        return f"Within the {epoch} steps every curve makes the last drop, to {last}."
    ends = []
    for k in sorted({learned[c] for c in short}, reverse=True):
        group = [c for c in short if learned[c] == k]
        after = f"after the drop to {saddle(k)}" if k else "without a drop"
        ends.append(f"{_listed(group)} end{'s' if len(group) == 1 else ''} {after}, at "
                    + _listed([f"{float(ds.final_loss.sel(curve=c)):.3f}" for c in group]))
    made = [c for c, k in learned.items() if k == D]
    lead = (f"Within the {epoch} steps no curve makes the last drop, to {last} (L({last}) = "
            f"{float(ds.plateau_theory[-1]):.3f}): " if not made else
            f"Within the {epoch} steps {_listed(made)} make{'s' if len(made) == 1 else ''} the last drop, to "
            f"{last} (L({last}) = {float(ds.plateau_theory[-1]):.3f}), and ")
    most = model_reach(ds)
    beyond = (f" Nor can a longer run: the model's heads learn at most {most} of the {D} directions (a combined "
              f"weight of rank at most H·R = {most}), so no saddle past {saddle(most)} is within its reach."
              if most is not None and not made else "")
    return lead + "; ".join(ends) + "." + beyond


def flow_words(ds) -> str:
    """The page's sentence on population GD beside the flow, at matched levels (:func:`flow_lag`): the step of each
    drop of each, the lag of gradient descent behind the flow, and the largest gap between their plateau levels at
    the saddles both rest at (empty without the flow)."""
    lag = flow_lag(ds)
    if lag is None:
        return ""
    both = np.isfinite(lag.lag)
    d = np.flatnonzero(both) + 1
    text = "Population GD beside the flow, at matched levels: "
    if both.any():
        text += (f"GD makes its drops to {_listed([saddle(k) for k in d])} at steps "
                 f"{list_words([int(s) for s in lag.steps[both]])}, the flow at "
                 f"{list_words([int(s) for s in lag.reference_steps[both]])}, so gradient descent lags the flow by "
                 f"{_listed([f'{int(s)}'.replace('-', '−') for s in lag.lag[both]])} steps"
                 + (" (negative: ahead of it)" if (lag.lag[both] < 0).any() else ""))
    else:
        text += "neither makes a drop within the run"
    alone = [(k + 1, who, int(s)) for who, st, other in (("gradient descent", lag.steps, lag.reference_steps),
                                                         ("the flow", lag.reference_steps, lag.steps))
             for k, (s, o) in enumerate(zip(st, other)) if np.isfinite(s) and not np.isfinite(o)]
    text += "".join(f"; {who} alone makes the drop to {saddle(k)}, at step {s}" for k, who, s in alone)
    gaps = lag.level_gap[np.isfinite(lag.level_gap)]
    if gaps.size:
        text += f"; at the saddles both rest at, their plateau levels differ by at most {np.abs(gaps).max():.1g}"
    return text + "."


def numbers(ds) -> list[dict]:
    """``numbers.json``: each curve's plateau at each saddle it rested at beside the theory's level, and (with
    ``flow``) the step of each drop of population GD beside the flow's."""
    rows = []
    for c in ds.curve.values:
        for m in ds.m.values:
            level = float(ds.plateau_level.sel(curve=c, m=m))
            if np.isfinite(level):
                rows.append(dict(key=f"plateau.{_slug(str(c))}.M{m}", quantity=f"{c}: plateau L(M_{m})",
                                 theory=float(ds.plateau_theory.sel(m=m)), reproduced=level))
    lag = flow_lag(ds)
    if lag is not None:
        rows += [dict(key=f"drop_step.population_gd.d{d}", quantity=f"population GD: step of the drop to M_{d} "
                      "(theory: the flow's)", theory=int(b), reproduced=int(a))
                 for d, (a, b) in enumerate(zip(lag.steps, lag.reference_steps), 1) if np.isfinite(a + b)]
    return rows


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``)."""
    import json

    S = json.loads(ds.attrs["settings"])
    run = json.loads(ds.attrs["runs"])[GD]
    finite = [int(P) for P in ds.trainset_size.values if np.isfinite(P)]
    flow = FLOW in ds.curve.values
    sets = (f"on finite training sets of {len(finite)} sizes, P = {list_words(finite)}" if len(finite) > 1 else
            f"on a finite training set of P = {finite[0]} sequences" if finite else "")
    lead = "by gradient descent and by gradient flow" if flow else "by gradient descent"
    trained = f"{lead}, and {sets}" if sets else lead
    caption = ["gradient descent on the population loss (black)"]
    if flow:
        caption.append("gradient flow on the same loss (orange, dashed)")
    if finite:
        caption.append(f"gradient descent on P training sequences (P = {list_words(finite)})")
    samples = S["population_samples"]
    return dict(rank=run["rank"], seed=run["seed"], H=run["head_num"],
                where="at Figure 3a's settings" if ds.attrs["published"] else "at settings of our own",
                D=run["in_dim"], init=f"{run['init']:g}",
                lr=f"{run['lr']:g}", epoch=run["epoch"], trained=trained, n_ways=ds.sizes["curve"],
                caption=", ".join(caption[:-1]) + (" and " if len(caption) > 1 else "") + caption[-1],
                ways=", ".join(str(c) for c in ds.curve.values), finite_P=list_words(finite) if finite else "none",
                rest_tol=loss_curves.REST_TOL, tol=loss_curves.rest_band_words(ds.attrs["band"]),
                origin=origin_words(ds), fitted=fitted_words(ds), reach=reach_words(ds), flow=flow_words(ds),
                samples=f"estimated from {samples} fresh sequences" if samples else "exact", bias=bias_words(ds))


def plot(ds):
    """Every curve's training loss with the theory's population plateaus on a second axis."""
    import matplotlib.pyplot as plt

    from ..plotting import plateau_labels, theory_axis

    styles: dict[str, dict[str, Any]] = {GD: dict(color="black", linewidth=2.2),
                                         FLOW: dict(color="tab:orange", linestyle="--", linewidth=1.3)}
    finite = iter(["tab:blue", "tab:green", "tab:purple", "tab:red", "tab:brown", "tab:pink"])
    step, levels = ds.step.values, ds.plateau_theory.values
    fig, ax = plt.subplots(figsize=(6.4, 4.0), layout="constrained")
    for c in ds.curve.values:
        style: dict[str, Any] = styles.get(str(c)) or dict(color=next(finite, "0.4"), linewidth=1.1)
        ax.plot(step, ds.train_loss.sel(curve=c).values, label=str(c), **style)
    ax.set_xlim(step[0], step[-1])
    ax.set_ylim(0, 1.08 * levels[0])
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    fig.legend(loc="outside lower center", ncols=3)
    theory_axis(ax, levels, plateau_labels(len(levels)))
    return fig
