"""Beyond the paper: infinite data (the population loss, by gradient descent and by gradient flow) beside finite
training sets, from the same initial weights.

The paper's theory is derived for the population loss under gradient flow; its simulations use gradient descent on
P training sequences. One run per value of ``trainset_sizes`` (None: the population loss, ``RunConfig(
trainset_size=None)``, its moments exact or estimated from ``population_samples`` fresh sequences), and, with
``flow``, the population run again as a gradient flow (``dynamics="flow"``, read at t/τ = 2·lr·step so it shares
the step axis). Measured: the level of the first flat stretch at each saddle M_0 … M_D
(:func:`saddle_stays`: a rest of ``loss_curves.saddle_rests`` that is flat, its drift small against its band; a curve
that is not flat there only passes through), beside the theory's population levels L(M_m) (``theory.plateau_losses``),
a finite set's gap at a saddle with a direction fitted judged by the error of its training loss there
(:func:`saddle_errors`), its bias measured against the set's own training loss at the theory's weights on the same
sequences (:func:`own_gaps`), and the step of each drop of each curve beside population GD's
(``loss_curves.drop_lag``).
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
from .common.rests import rest_errors, rest_verdict
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
#: A curve rests *flat* at a saddle when its drift there (:func:`rest_drift`: its slowest fall per step times the steps
#: it stays in the band) is at most this fraction of the band's width (``loss_curves.rest_bands``); else it only passes
#: through, and no level is read there. The drift over the width is about the curve's slowest pace over its mean pace
#: across the band: near 0 at a saddle, 1 on an even slope. Why a tenth, from this page's curves: at the paper preset
#: the rests drift 0.005 of their band, P = 5000's stay at M_1 (falling 0.659 → 0.604 over steps 600-760) 0.20; at the
#: quick preset and the knob cases the values run from 0.02 to 0.14 with no clean gap, so the cut is a choice, and
#: either side of it the page stays true: a level is read only to within its drift (:func:`gap_or_drift`).
FLAT_SHARE = 0.1
#: A flat rest below its set's own training loss at the theory's weights is said to lie there by *about* the fit's
#: drop (``rest_optimism``) within this factor of it either way (:func:`own_verdict`). The drop is the least loss over
#: the weights of the theory's learned span; a run may fit the set's own directions a little further, or not yet all
#: of the way, so only the size is compared. At the paper preset the rests lie 0.91–1.1 of their drops below; at the
#: quick preset and its knob cases 0.73–1.1, but for seed 3's P = 4000 at ℳ₁, 2.2.
ABOUT = 2.0
ABOUT_FIT, MORE_THAN_FIT, LESS_THAN_FIT, ABOVE = "about the fit", "more than the fit", "less than the fit", "above"


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


def saddle_errors(result, D: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The error of a training loss resting at each saddle M_0 … M_D, from a finite set's own P sequences
    (``common.rests.rest_errors`` at the fixed length: the per-sequence losses at the theory's weights of M_m, whose
    population loss is L(M_m)): ``(se, optimism, own)``, se the standard error of their mean
    (``uncertainty.mean_loss_error``, the whitening of the task vectors taken out), optimism how much fitting the
    saddle's weights to the set lowers it further, and own their mean, the set's training loss at the theory's weights.
    NaN for the population loss (no training set)."""
    cfg = result.config
    if cfg.trainset_size is None:
        return np.full(D + 1, np.nan), np.full(D + 1, np.nan), np.full(D + 1, np.nan)
    se, optimism, own, _ = rest_errors(result.datasets.train, result.datasets.cov, cfg.seq_len, cfg.normalize,
                                       vary_len=False)
    return se, optimism, own


def rest_drift(loss, steps) -> float:
    """The drift of a curve over a stay in a saddle's band (``loss``, ``steps``: the stay's samples): its slowest
    fall per step, the median abs(ΔL/Δstep) over the stay's core (``loss_curves.rest_core``, as
    ``loss_curves.is_slow`` reads it), times the steps the stay lasts. A level read on the stay is known only to within
    it: on a slope the loss changes by at least about this much while it is in the band."""
    y, x = np.asarray(loss, dtype=np.float64), np.asarray(steps, dtype=np.float64)
    if y.size < 2:
        return 0.0
    rate = np.abs(np.gradient(y, x))
    return float(np.median(rate[loss_curves.rest_core(y)]) * (x[-1] - x[0]))


def saddle_stays(loss, levels, steps=None) -> tuple[np.ndarray, np.ndarray]:
    """The page's rest rule. For each saddle M_0 … M_D (``levels``: L(M_0) … L(M_D)), the first rest of ``loss``
    there (``loss_curves.saddle_rests``): ``(level, drift)``, its level (the median over its core) and its drift
    (:func:`rest_drift`), NaN where the curve has none. The level is NaN too where the rest is not flat, its drift
    above :data:`FLAT_SHARE` of the band's width (``loss_curves.rest_bands``): the curve slows there but only passes
    through, and no level is read."""
    y = np.asarray(loss, dtype=np.float64)
    x = np.arange(y.size) if steps is None else np.asarray(steps)
    lo, hi = loss_curves.rest_bands(levels)
    level, drift = np.full(len(lo), np.nan), np.full(len(lo), np.nan)
    m_of, p = loss_curves.saddle_rests(y, levels, steps=x)
    for m, a, b, lv in zip(m_of, p.starts, p.ends, p.levels):
        if np.isfinite(drift[m]):
            continue  # a saddle's first rest only (a curve may come back near it)
        on = (x >= a) & (x <= b)
        drift[m] = rest_drift(y[on], x[on])
        if drift[m] <= FLAT_SHARE * (hi[m] - lo[m]):
            level[m] = lv
    return level, drift


def compute(S: dict):
    """Every curve's training loss (``train_loss``: curve × step; ``curve``: "population GD", "P = 1000", …,
    "population flow", with its ``trainset_size`` (inf: the population) and ``dynamics`` as coordinates), the level
    of its first flat rest at each saddle and the drift of its first rest there (``plateau_level``, ``rest_drift``:
    curve × m, :func:`saddle_stays`; NaN where it has none), the standard error of each curve's loss at zero weights
    about L(M_0) (``origin_error``, :func:`origin_error`), each finite set's error of a training loss at each saddle
    and its training loss at the theory's weights there (``rest_se``, ``rest_optimism``, ``rest_own``: curve × m,
    :func:`saddle_errors`; NaN for the population curves), the drops each made (``directions_learned``,
    ``loss_curves.directions_learned``) and the final loss; the theory's population levels (``plateau_theory``: m)
    and the run's input covariance Λ (``input_cov``). The settings, the engines and the runs' settings as attributes.
    (No training times: runs trained together in one stack share one clock, so a run's recorded time is not its
    own.)"""
    import xarray as xr

    curves = train(runs(S), S)
    pop = curves[GD]
    levels = theory.plateau_losses(pop.datasets.cov, pop.config.N)
    loss = np.stack([r.history.train_loss for r in curves.values()])
    stays = [saddle_stays(L, levels) for L in loss]
    errors = [saddle_errors(r, len(levels) - 1) for r in curves.values()]
    engines = list(dict.fromkeys("flow" if r.config.dynamics == "flow" else r.engine for r in curves.values()))
    ds = xr.Dataset(
        {"train_loss": (("curve", "step"), loss),
         "plateau_level": (("curve", "m"), [level for level, _ in stays]),
         "rest_drift": (("curve", "m"), [drift for _, drift in stays]),
         "origin_error": ("curve", [origin_error(r.config, pop.datasets.cov) for r in curves.values()]),
         "rest_se": (("curve", "m"), [se for se, _, _ in errors]),
         "rest_optimism": (("curve", "m"), [optimism for _, optimism, _ in errors]),
         "rest_own": (("curve", "m"), [own for _, _, own in errors]),
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
    ds.plateau_level.attrs["description"] = (f"level of the first flat rest at saddle M_m (saddle_stays: a rest of "
                                             f"loss_curves.saddle_rests, band {loss_curves.REST_BAND:.3g}, drifting "
                                             f"at most {FLAT_SHARE:g} of the band's width)")
    ds.rest_drift.attrs["description"] = ("drift of the first rest at saddle M_m: its slowest fall per step times the "
                                          "steps it lasts (rest_drift)")
    ds.origin_error.attrs["description"] = "standard error of the loss at zero weights about L(M_0) (0: exact)"
    ds.rest_se.attrs["description"] = ("standard error of a finite set's training loss at the theory's weights of "
                                       "M_m about L(M_m), the task vectors' whitening taken out (saddle_errors)")
    ds.rest_optimism.attrs["description"] = ("how much fitting M_m's weights to a finite set lowers its training loss "
                                             "there (saddle_errors)")
    ds.rest_own.attrs["description"] = ("a finite set's training loss at the theory's weights of M_m, on its own "
                                        "sequences (saddle_errors)")
    return ds


def flow_lag(ds) -> loss_curves.DropLag | None:
    """Population GD beside the population flow at matched levels (``loss_curves.drop_lag``: the step of each drop
    of each and the lag in steps); None when the flow was not integrated."""
    if FLOW not in ds.curve.values:
        return None
    return loss_curves.drop_lag(ds.train_loss.sel(curve=GD).values, ds.train_loss.sel(curve=FLOW).values,
                                ds.plateau_theory.values, ds.step.values)


def finite_lags(ds) -> dict:
    """Each finite training set beside population GD from the same initial weights, at matched levels
    (``loss_curves.drop_lag``: the step of each drop of each, and the set's lag behind population GD), by curve."""
    gd = ds.train_loss.sel(curve=GD).values
    return {str(c): loss_curves.drop_lag(ds.train_loss.sel(curve=c).values, gd, ds.plateau_theory.values,
                                         ds.step.values)
            for c, P in zip(ds.curve.values, ds.trainset_size.values) if np.isfinite(P)}


def gap_words(gap: float, m: int) -> str:
    """A signed gap at saddle m in words: "0.038 below L(ℳ₀)", "0.039 above L(ℳ₁)", "0.000 at L(ℳ₂)" (to the
    third decimal)."""
    side = "at" if f"{abs(gap):.3f}" == "0.000" else "below" if gap < 0 else "above"
    return f"{abs(gap):.3f} {side} L({saddle(m)})"


def resolved(gap: float, drift: float) -> bool:
    """Whether a rest's gap from its saddle's level is read: it is larger than the rest's drift (:func:`rest_drift`),
    the least the level is uncertain by; a smaller gap is no gap the curve shows, only that it lies within its drift."""
    return bool(abs(gap) > drift)


def gap_or_drift(gap: float, drift: float, m: int) -> str:
    """A flat rest's gap in words where it is :func:`resolved` (:func:`gap_words`), else "within its drift, 7e-04,
    of L(ℳ₂)"."""
    return gap_words(gap, m) if resolved(gap, drift) else f"within its drift ({drift:.1g}) of L({saddle(m)})"


def origin_gaps(ds) -> dict:
    """For each curve that rested flat at M_0: ``(gap, se, verdict, drift)``, gap = plateau level − L(M_0), se its
    ``origin_error``, the verdict of ``uncertainty.verdict`` on the band of ``uncertainty.COVERAGE`` standard errors
    (None for the exact population loss, which has no sampling error, and where the gap is no larger than the rest's
    drift: :func:`resolved`) and the drift."""
    out = {}
    for c in ds.curve.values:
        gap = float(ds.plateau_level.sel(curve=c, m=0) - ds.plateau_theory.sel(m=0))
        se, drift = float(ds.origin_error.sel(curve=c)), float(ds.rest_drift.sel(curve=c, m=0))
        if np.isfinite(gap):
            band = uncertainty.difference_band(se)
            out[str(c)] = (gap, se, uncertainty.verdict(gap, band) if se > 0 and resolved(gap, drift) else None, drift)
    return out


def _listed(texts) -> str:
    """``["a", "b", "c"]`` → ``"a, b and c"`` (texts; :func:`~linattn.companion.output.words` writes numbers)."""
    texts = list(texts)
    return texts[0] if len(texts) == 1 else f"{', '.join(texts[:-1])} and {texts[-1]}"


def origin_words(ds) -> str:
    """The page's sentence on the plateaus at M_0 (:func:`origin_gaps`): each sampled curve's gap from L(M_0) in its
    standard errors, within or beyond the band; the exact population curves' gaps as they are; a gap no larger than
    the rest's drift as lying within it (:func:`gap_or_drift`)."""
    gaps = origin_gaps(ds)
    if not gaps:
        return "No curve of this run rests flat at ℳ₀."
    two = f"{uncertainty.COVERAGE:g}"
    sampled = [f"{c} lies {gap_words(g, 0)}, {abs(g) / se:.1f} standard errors, "
               + ("within" if v == uncertainty.AGREES else "beyond") + f" the band of {two}"
               if v is not None else f"{c} lies {gap_or_drift(g, drift, 0)}"
               for c, (g, se, v, drift) in gaps.items() if se > 0]
    exact = [f"{c} {abs(g):.1g} {'below' if g < 0 else 'above'}" if resolved(g, drift) else
             f"{c} within its drift ({drift:.1g})"
             for c, (g, se, v, drift) in gaps.items() if se == 0]
    parts = ["At ℳ₀, " + "; ".join(sampled) + "."] if sampled else []
    if exact:
        parts.append(("The" if sampled else "At ℳ₀, the") + " exact population loss has no sampling error; its "
                     "curves' gaps from L(ℳ₀): " + _listed(exact) + ".")
    return " ".join(parts)


def plateau_gaps(ds) -> dict:
    """For each curve that rested flat at a saddle with a direction fitted (m ≥ 1), the farthest its plateau is
    known to lie from the theory's level: ``(gap, drift, m)`` at the saddle m ≥ 1 where the larger of abs(gap) (if
    :func:`resolved`) or the drift (if not) is largest, gap = plateau level − L(M_m) (signed: < 0 below)."""
    out = {}
    for c in ds.curve.values:
        gaps = (ds.plateau_level - ds.plateau_theory).sel(curve=c).values
        drifts = ds.rest_drift.sel(curve=c).values
        far = [(abs(g) if resolved(g, d) else d, m) for m, (g, d) in enumerate(zip(gaps, drifts))
               if m >= 1 and np.isfinite(g)]
        if far:
            m = max(far)[1]
            out[str(c)] = (float(gaps[m]), float(drifts[m]), m)
    return out


def fitted_verdicts(ds) -> dict:
    """For each finite set in :func:`plateau_gaps`: ``(se, band, margin, verdict)`` at its saddle m, se its
    ``rest_se`` there, band ``uncertainty.COVERAGE`` standard errors, margin the fit's further drop (``rest_optimism``)
    and the verdict of ``common.rests.rest_verdict`` on the farthest the plateau is known to lie: the gap where it is
    :func:`resolved`, else the drift on the gap's side (a training loss *agrees* within the band; below it, within the
    band and the margin, it *cannot tell*: the fit only lowers it; else it *differs*)."""
    out = {}
    for c, (gap, drift, m) in plateau_gaps(ds).items():
        se, optimism = float(ds.rest_se.sel(curve=c, m=m)), float(ds.rest_optimism.sel(curve=c, m=m))
        if np.isfinite(se):
            far = gap if resolved(gap, drift) else float(np.copysign(drift, gap))
            level = float(ds.plateau_theory.sel(m=m))
            out[c] = (se, uncertainty.difference_band(se), optimism, rest_verdict(level + far, level, se, optimism))
    return out


def _verdict_words(se: float, band: float, margin: float, said: str) -> str:
    """A finite set's error and verdict in words: "its standard error 0.0066, within the band of 2 (0.013)"."""
    two = f"{uncertainty.COVERAGE:g}"
    text = f"its standard error {se:.2g}, "
    if said == uncertainty.AGREES:
        return text + f"within the band of {two} ({band:.2g})"
    if said == uncertainty.CANNOT_TELL:
        return text + f"below the band of {two} ({band:.2g}) but within the fit's further drop ({margin:.2g})"
    return text + f"beyond the band of {two} ({band:.2g}) and the fit's further drop ({margin:.2g})"


def fitted_words(ds) -> str:
    """The page's sentence on the flat rests at the saddles with directions fitted: the farthest each curve's plateau
    is known to lie from the theory's level (:func:`plateau_gaps`, :func:`gap_or_drift`) and, for a finite set, the
    error of its training loss there and the verdict (:func:`fitted_verdicts`)."""
    gaps, judged = plateau_gaps(ds), fitted_verdicts(ds)
    if not gaps:
        return "No curve of this run rests flat at a saddle with a direction fitted."
    return ("Where a curve rests flat at a saddle with a direction fitted, the farthest its plateau lies from the "
            "theory's level: " + "; ".join(f"{c}: {gap_or_drift(g, d, m)}"
                                           + (f", {_verdict_words(*judged[c])}" if c in judged else "")
                                           for c, (g, d, m) in gaps.items()) + ".")


def passages(ds) -> dict:
    """For each curve, the saddles it only passes through: those it leaves (it makes the drop beyond them,
    ``directions_learned``) without a flat rest there (:func:`saddle_stays`), and those of them where it slows to a
    rest of ``loss_curves.saddle_rests`` that drifts too far to be flat: ``{curve: (passed, sloped)}``."""
    out = {}
    for c in ds.curve.values:
        left = range(int(ds.directions_learned.sel(curve=c)))
        level, drift = ds.plateau_level.sel(curve=c).values, ds.rest_drift.sel(curve=c).values
        passed = [m for m in left if not np.isfinite(level[m])]
        out[str(c)] = (passed, [m for m in passed if np.isfinite(drift[m])])
    return out


def passes_words(ds) -> str:
    """The page's sentence on the saddles a curve only passes through (:func:`passages`), and the drift of each stay
    that slowed to a rest but was not flat, beside its band's width (:data:`FLAT_SHARE`)."""
    passed = passages(ds)
    groups: dict[tuple, list] = {}
    for c, (ms, _) in passed.items():
        if ms:
            groups.setdefault(tuple(ms), []).append(c)
    if not groups:
        return "Every curve rests flat at each saddle it leaves."
    names = [_listed([saddle(m) for m in ms]) for ms in groups]
    if len(groups) == 1 and len(next(iter(groups.values()))) == len(passed):
        text = f"Every curve passes through {names[0]} without resting flat there"
    else:
        text = "; ".join(f"{_listed(cs)} pass{'es' if len(cs) == 1 else ''} through {n} without resting flat there"
                         for cs, n in zip(groups.values(), names))
    lo, hi = loss_curves.rest_bands(ds.plateau_theory.values)
    sloped = [f"{c} slows in {saddle(m)}'s band, but drifts {d:.2g} there, {d / (hi[m] - lo[m]):.2g} of its width"
              for c, (_, ms) in passed.items() for m in ms
              for d in [float(ds.rest_drift.sel(curve=c, m=m))]]
    return text + (f" ({'; '.join(sloped)})" if sloped else "") + "."


def finite_learned_plateaus(ds) -> int:
    """How many plateaus the finite training sets rested on at a saddle with a direction fitted (ℳ₁ … ℳ_D: finite-P
    curves × saddles m ≥ 1 with a ``plateau_level``)."""
    finite = ds.trainset_size.values < np.inf
    return int(np.isfinite(ds.plateau_level.values[finite][:, 1:]).sum())


def bias_words(ds) -> str:
    """The page's sentence on a training loss's bias and error at the saddles with directions fitted: a finite set's
    plateau is biased low, beside the sampling error of a mean over P sequences (:func:`saddle_errors`: the standard
    error of the training loss at the theory's weights, and the fit's further drop); from the verdicts of
    :func:`fitted_verdicts`, whether the finite sets' shifts of the plateaus are resolved at these sizes (empty
    without a finite set)."""
    if not (ds.trainset_size.values < np.inf).any():
        return ""
    text = ("A finite set's plateau is a training loss, measured on the sequences its weights were fitted to: once a "
            "direction is fitted it is biased low, beside the sampling error of a mean over P sequences")
    if not finite_learned_plateaus(ds):
        return text + "; in this run no finite set rested at a saddle with a direction learned."
    said = [v for *_, v in fitted_verdicts(ds).values()]
    if not said:
        return text + "."
    text += (". Each error above is that of the set's own training loss at the theory's weights of the saddle, whose "
             "population loss is the level (linattn.companion.uncertainty.mean_loss_error, the whitening of the "
             "task vectors taken out), and the fit's further drop how much fitting those weights to the set lowers it")
    if uncertainty.DIFFERS in said:
        return text + ": a finite set's shift of a plateau beyond both is resolved at these sizes."
    return (text + ": no finite set's gap reaches beyond them, so against the population level the finite-P shifts "
            "of the plateaus cannot be resolved at these sizes.")


def own_verdict(bias: float, drift: float, optimism: float) -> str | None:
    """The verdict on a flat rest's bias, ``bias`` = its level − the set's own training loss at the theory's weights
    of the saddle (``rest_own``, on the very same sequences: no sampling error between the two), beside the fit's drop
    ``optimism`` (``rest_optimism``, how far fitting the saddle's weights to the set can lower that loss): None where
    abs(bias) is no larger than the rest's drift (:func:`resolved`: not read); :data:`ABOVE` above that loss (the fit
    only lowers it); below it, :data:`ABOUT_FIT` within a factor :data:`ABOUT` of the drop either way, else
    :data:`MORE_THAN_FIT` or :data:`LESS_THAN_FIT`."""
    if not resolved(bias, drift):
        return None
    if bias > 0:
        return ABOVE
    if -bias > ABOUT * optimism:
        return MORE_THAN_FIT
    return LESS_THAN_FIT if -bias < optimism / ABOUT else ABOUT_FIT


def own_gaps(ds) -> dict:
    """For each finite set, at each saddle m ≥ 1 where it rests flat (``plateau_level``): ``{curve: {m: (bias, drift,
    optimism, verdict)}}``, bias = plateau level − ``rest_own``, its drift, ``rest_optimism`` and
    :func:`own_verdict`. Sets with no such rest are left out."""
    out = {}
    for c, P in zip(ds.curve.values, ds.trainset_size.values):
        if not np.isfinite(P):
            continue
        at = ds.sel(curve=c)
        rows = {int(m): (float(at.plateau_level.sel(m=m) - at.rest_own.sel(m=m)), float(at.rest_drift.sel(m=m)),
                         float(at.rest_optimism.sel(m=m)))
                for m in ds.m.values if m >= 1 and np.isfinite(float(at.plateau_level.sel(m=m)))}
        if rows:
            out[str(c)] = {m: (*row, own_verdict(*row)) for m, row in rows.items()}
    return out


def _sig(x: float) -> str:
    """Two significant digits, trailing zeros kept: 0.002 → "0.0020"."""
    return f"{x:#.2g}".rstrip(".")


def _own_clause(rests: dict) -> str:
    """One set's rests (:func:`own_gaps`, by saddle) beside its own loss at the theory's weights, grouped by verdict:
    "0.0027 and 0.0020 below its own loss at ℳ₂ and ℳ₃, about the 0.0029 and 0.0022 by which …; and …"."""
    groups: dict = {}
    for m, (bias, drift, optimism, said) in rests.items():
        groups.setdefault(said, []).append((m, bias, drift, optimism))
    parts: list[str] = []
    for said, rows in groups.items():
        own = "it" if parts else "its own loss"
        at = _listed([saddle(m) for m, *_ in rows])
        size, drops = _listed([_sig(abs(b)) for _, b, _, _ in rows]), _listed([_sig(o) for *_, o in rows])
        if said is None:
            parts.append(f"within its drift ({_listed([f'{d:.1g}' for _, _, d, _ in rows])}) of {own} at {at}")
        elif said == ABOVE:
            parts.append(f"{size} above {own} at {at}, where fitting can only lower a training loss")
        else:
            how = {ABOUT_FIT: "about", MORE_THAN_FIT: f"more than {ABOUT:g} times",
                   LESS_THAN_FIT: f"less than 1/{ABOUT:g} of"}[said]
            parts.append(f"{size} below {own} at {at}, {how} the {drops} by which fitting the theory's "
                         "directions to the set lowers it there")
    return parts[0] if len(parts) == 1 else "; ".join(parts[:-1]) + "; and " + parts[-1]


def shrink_ratios(ds, gaps: dict) -> dict:
    """The smallest set's bias over the largest's at each saddle where two or more sets lie resolved below their own
    loss (:func:`own_gaps`) with a fit's drop there, and the same for the fit's drops: ``{(small, large): {m: (bias
    ratio, drop ratio)}}``, the sets by curve name (what two sizes show, no law in P)."""
    size = {str(c): float(P) for c, P in zip(ds.curve.values, ds.trainset_size.values)}
    out: dict = {}
    for m in sorted({m for rests in gaps.values() for m in rests}):
        below = sorted((size[c], c) for c, rests in gaps.items()
                       if m in rests and rests[m][3] not in (None, ABOVE) and rests[m][2] > 0)
        if len(below) >= 2:
            small, large = below[0][1], below[-1][1]
            out.setdefault((small, large), {})[m] = tuple(gaps[small][m][k] / gaps[large][m][k] for k in (0, 2))
    return out


def _times(ratios) -> str:
    """Ratios of a smaller set's values to a larger set's in words, to the nearest whole number (each is one drawn
    set's, and a rest's drift moves its bias by a tenth or so: no finer digit is meant): [9.94, 20] → "10 and 20 times
    smaller", [0.5] → "2 times larger", [1.02] → "about as large"; each worded alone where they go different ways."""
    ratios = list(ratios)
    if all(round(max(r, 1 / r)) == 1 for r in ratios):
        return "about as large"
    if all(r > 1 for r in ratios):
        return _listed([f"{r:.0f}" for r in ratios]) + " times smaller"
    if all(r < 1 for r in ratios):
        return _listed([f"{1 / r:.0f}" for r in ratios]) + " times larger"
    return _listed([_times([r]) for r in ratios])


def _shrink_words(ds, gaps: dict) -> str:
    """:func:`shrink_ratios` in words: "From P = 5000 to P = 80000 (16 times the sequences) the bias at ℳ₃ is 10
    times smaller and the fit's drop 12 times smaller: what these two sizes show, one drawn set each." (empty where no
    saddle has two)."""
    size = {str(c): float(P) for c, P in zip(ds.curve.values, ds.trainset_size.values)}
    parts = [f"from {small} to {large} ({size[large] / size[small]:.3g} times the sequences) the bias at "
             f"{_listed([saddle(m) for m in at])} is {_times(b for b, _ in at.values())} and the fit's drop "
             f"{_times(d for _, d in at.values())}"
             for (small, large), at in shrink_ratios(ds, gaps).items()]
    if not parts:
        return ""
    joined = "; ".join(parts)
    return f" {joined[0].upper()}{joined[1:]}: what these two sizes show, one drawn set each."


def own_words(ds) -> str:
    """The page's sentence on the bias measured without sampling error: each finite set's flat rests at the saddles
    with a direction fitted beside the set's own training loss at the theory's weights there (:func:`own_gaps`,
    :func:`own_verdict`), and, where two sizes lie below it at one saddle, how the bias and the fit's drop change from
    the smallest to the largest (:func:`shrink_ratios`: what those two sizes show; empty without such a rest)."""
    gaps = own_gaps(ds)
    if not gaps:
        return ""
    text = ("A set's own loss, its training loss at the theory's weights of the saddle, is taken on the very sequences "
            "its rest is, so no sampling error lies between the two. "
            + " ".join(f"{c} rests {_own_clause(r)}." for c, r in gaps.items()))
    return text + _shrink_words(ds, gaps)


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


def _signed(values) -> list[str]:
    """Whole numbers with a true minus sign: ``[-4, 46]`` → ``["−4", "46"]``."""
    return [f"{int(v)}".replace("-", "−") for v in values]


def lag_words(lag: loss_curves.DropLag, who: str, name: str, ref: str, *, share: bool = False,
              ref_steps: bool = True) -> str:
    """Two curves at matched levels in words (:class:`~linattn.analysis.loss_curves.DropLag`): the step of each
    drop both make, of ``who`` (short name) and (with ``ref_steps``) of ``ref``, the lag of ``name`` (the same curve
    as the sentence names it again) behind ``ref`` in whole steps (with ``share``, also in percent of ``ref``'s step),
    and each drop only one of them makes."""
    both = np.isfinite(lag.lag)
    if both.any():
        lags = lag.lag[both]
        text = (f"{who} makes its drops to {_listed([saddle(int(k)) for k in np.flatnonzero(both) + 1])} at steps "
                f"{list_words([int(s) for s in lag.steps[both]])}, "
                + (f"{ref} at {list_words([int(s) for s in lag.reference_steps[both]])}, " if ref_steps else "")
                + f"so {name} lags {ref} by {_listed(_signed(lags))} steps")
        ref_at = lag.reference_steps[both]
        notes = ([f"{_listed(_signed(np.round(100 * lags / ref_at)))} % of {ref}'s step"]
                 if share and (ref_at > 0).all() else []) + (["negative: ahead of it"] if (lags < 0).any() else [])
        text += f" ({'; '.join(notes)})" if notes else ""
    else:
        text = f"{who} and {ref} make no drop in common within the run"
    alone = [(k + 1, whose, int(s)) for whose, st, other in ((name, lag.steps, lag.reference_steps),
                                                             (ref, lag.reference_steps, lag.steps))
             for k, (s, o) in enumerate(zip(st, other)) if np.isfinite(s) and not np.isfinite(o)]
    return text + "".join(f"; {whose} alone makes the drop to {saddle(k)}, at step {s}" for k, whose, s in alone)


def flow_words(ds) -> str:
    """The page's sentence on population GD beside the flow, at matched levels (:func:`flow_lag`, :func:`lag_words`):
    the step of each drop of each and the lag of gradient descent behind the flow (empty without the flow)."""
    lag = flow_lag(ds)
    if lag is None:
        return ""
    return "Population GD beside the flow, at matched levels: " + lag_words(lag, "GD", "gradient descent",
                                                                            "the flow") + "."


def finite_words(ds) -> str:
    """The page's sentence on each finite training set beside population GD, from the same initial weights and at
    matched levels (:func:`finite_lags`, :func:`lag_words`): the step of each drop of each, and the set's lag in
    steps and in percent of population GD's step; each size is one drawn set, so the lags are that set's and their
    spread across sets is not measured, which the sentence says (empty without a finite set)."""
    lags = finite_lags(ds)
    if not lags:
        return ""
    one = "Each size is one drawn training set" if len(lags) > 1 else f"{next(iter(lags))} is one drawn training set"
    return ("Each finite training set beside population GD, from the same initial weights and at matched levels: "
            + "; and ".join(lag_words(lag, c, c, GD, share=True, ref_steps=not k)
                            for k, (c, lag) in enumerate(lags.items()))
            + f". {one}, so the lags are that set's: their spread across sets is not measured.")


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
                origin=origin_words(ds), fitted=fitted_words(ds), passes=passes_words(ds), reach=reach_words(ds),
                flow=flow_words(ds), finite=finite_words(ds), own=own_words(ds), flat_share=f"{FLAT_SHARE:g}",
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
