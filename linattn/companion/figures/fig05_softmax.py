"""Figure 5: softmax attention — separate keys and queries (ATTN_S) still learn in steps, merged ones (ATTN_M) in one
fall (paper Section 6).

Two runs, the settings of Figures 1b and 3a with a softmax over the attention scores (``softmax=True``: the
companion's softmax engine, ``linattn.objectives.softmax``). There is no theory for softmax attention: the
linear-attention saddle losses L(M_0) … L(M_D) of the same covariance (``theory.plateau_losses``) and its minimum L*
are drawn for reference only. Measured: the flat stretches and drops of each curve (``loss_curves.detect_plateaus``)
and where it ends; each model's drops counted from its fall rate by one rule, ATTN_S's at a resolution fine enough
to see a pause of a few tens of steps (:data:`ATTN_S_RATE_WINDOW`), and whether each run has settled by its end
(``loss_curves.count_drops``, which counts a fall still under way at the end). The runs keep no weights, so the page
does not say which directions a drop learns. ATTN_M is trained again at the ``check_seeds`` and at half the
learning rate for twice the steps (:func:`check_configs`), so that the page can say whether its drops survive another
draw and a smaller step. At the paper preset (published settings but n times the published learning rates) the
paper's text for ATTN_M, a single drop, is set beside the run as a claim judged at those scaled rates
(``single_drop_claim``, with the checks).
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import numpy as np

from ... import theory
from ...analysis import loss_curves
from .. import presets, published, uncertainty
from ..commands import train_command
from ..output import AGREES, CANNOT_TELL, DIFFERS, MarkdownTable, prose_text
from ..output import words as list_words
from ..published.rules import Claim
from .common import preset_blocks
from .common.attn_s_run import describe
from .common.frame import padded, settings_attrs
from .common.trainer import train

NAME = __name__.rsplit(".", 1)[-1]
PRESETS: dict[str, dict[str, Any]] = {
    # Published: the settings of Figures 1b and 3a plus --softmax. At small weights a softmax head attends
    # uniformly, so its prediction and every gradient carry a factor 1/n (n = seq_len = 32) that linear attention
    # does not (the linearisation of the softmax at small weights). The paper preset keeps everything published (P,
    # init, steps, era, the authors' draws) and multiplies the learning rate by n, which undoes that factor; it
    # trains in float32, as the authors' code does (the softmax engine's fast path).
    # check_seeds: ATTN_M again at each of these seeds (all its steps); half_lr_epoch: ATTN_M at half the learning
    # rate for this many steps, twice the 3001 steps within which the paper preset's two drops lie (627, 1659).
    # The three check runs: about 60 s of CPU at the paper preset (3.3 ms a step).
    "quick": dict(attn_m=preset_blocks.run_settings(model="attnM", head_num=8, init=1e-2, lr=0.02, epoch=601,
                                             trainset_size=100, in_dim=4, seq_len=32, init_scheme="jan2025",
                                             softmax=True),
                  attn_s=preset_blocks.run_settings(model="attnS", head_num=5, rank=1, init=0.05, lr=0.05, epoch=1201,
                                             trainset_size=100, in_dim=4, seq_len=32, init_scheme="jan2025",
                                             softmax=True),
                  seed=10, check_seeds=[11, 12], half_lr_epoch=1201),
    "paper": dict(attn_m=dict(preset_blocks.ATTN_M_PAPER, lr=32 * 1e-3, dtype="float32", softmax=True),
                  attn_s=dict(preset_blocks.ATTN_S_PAPER, lr=32 * 0.02, dtype="float32", softmax=True),
                  seed=10, check_seeds=[11, 12], half_lr_epoch=6001),
}
# Settings a page must stay true at beyond the presets (tests/test_knob_cases.py builds each at the quick preset):
# another D with one check seed and a short half-rate run, and another seed and H at a learning rate large enough
# for several drops within the quick steps, with no check run at all
# ATTN_S's fall rate is averaged over n/ATTN_S_RATE_WINDOW loss samples each side (loss_curves.fall_rate; 25 of the
# paper preset's 10001), fine enough to see a slow stretch of a few tens of steps between two fast falls (the default,
# n/120 samples, smooths one away)
ATTN_S_RATE_WINDOW = 400
KNOB_CASES = (dict(in_dim=3, check_seeds=[13], half_lr_epoch=601), dict(seed=4, head_num=3, lr=0.3, check_seeds=[]))
HELP = {
    "check_seeds": "ATTN_M run again at each of these seeds, to check its drops",
    "half_lr_epoch": "steps of the ATTN_M check run at half the learning rate",
}
# The README's "Reproduction at a glance" rows of this figure: (the paper's figure, what is shown, the keys of
# its numbers.json rows; a|b: the first that exists), checked by python -m linattn.companion.readme
README_ROWS = (
    ("5", "softmax ATTN_M, ATTN_S at 32× the published learning rates: drops", ("claim.figure_5|drops.attn_m",
                                                                               "drops.attn_s")),
)
TOLERANCES: list[tuple[str, str, float]] = []  # no theory of softmax attention to hold its numbers to
# the names (in this module) of the paper's number and the rule it compares with
PUBLISHED = ("PUBLISHED_ATTN_M_DROPS", "single_drop_claim")
MODELS = ("attn_m", "attn_s")
TITLES = {"attn_m": "softmax ATTN_M", "attn_s": "softmax ATTN_S"}
PAPER = {"attn_m": "one drop", "attn_s": "several drops"}  # what the paper's figure shows of each
HALF_LR = "half the learning rate"  # the label of the check run at lr/2 (the others: "seed <s>")


def runs(S: dict) -> dict:
    """The two runs (``attn_m``, ``attn_s``), then ATTN_M's check runs: for each of ``S["check_seeds"]`` the run's
    settings, all its steps, at that seed (``"seed <s>"``), then the run's own seed at half the learning rate for
    ``S["half_lr_epoch"]`` steps (:data:`HALF_LR`; gradient-flow time t/τ = 2η·step: 2k steps at η/2 are k steps
    at η)."""
    out = preset_blocks.sweep(S)
    cfg = out["attn_m"]
    out.update({f"seed {s}": dataclasses.replace(cfg, seed=int(s)) for s in S["check_seeds"]})
    out[HALF_LR] = dataclasses.replace(cfg, lr=cfg.lr / 2, epoch=int(S["half_lr_epoch"]))
    return out


def check_configs(S: dict) -> list[tuple]:
    """The ATTN_M check runs of :func:`runs`, ``(label, config)``."""
    return [(label, cfg) for label, cfg in runs(S).items() if label not in MODELS]


def compute(S: dict):
    """Both runs' training losses (``train_loss``: model × step; the shorter run is NaN past its end) with what the
    plateau detector finds in each — the level, first and last step of each flat stretch (``plateau_level``,
    ``plateau_start``, ``plateau_end``: model × plateau), the step of each drop (``drop_step``: model × drop), their
    number (``drops``) — the final loss with its standard error from the per-sequence training losses
    (``final_loss_se``) and the training's wall time; for reference, each model's
    linear-attention saddle losses (``plateau_theory``: model × m) and minimum (``loss_star``: model). For ATTN_M and
    each check run (``run``: ``attn_m``, ``attn_s``, then the checks; ATTN_S's fall rate averaged over
    n/:data:`ATTN_S_RATE_WINDOW` samples each side) its drops counted from the fall rate
    (``loss_curves.count_drops``): their number, steps and shares of the fall (``fall_drops``, ``fall_drop_step``,
    ``fall_share``), the slow stretches between them (``pause_step``, ``pause_loss``, ``pause_dip``) and whether the
    run settled (``settled``)."""
    import xarray as xr

    done = train(runs(S), S)
    checks = [(label, r) for label, r in done.items() if label not in MODELS]
    models = {k: done[k] for k in MODELS}
    losses = [models[k].history.train_loss for k in MODELS]
    counted = ([loss_curves.count_drops(models["attn_m"].history.train_loss),
                loss_curves.count_drops(models["attn_s"].history.train_loss, window=_attn_s_window(losses[1]))]
               + [loss_curves.count_drops(r.history.train_loss) for _, r in checks])
    n_fall = max([1] + [len(d) for d in counted])
    found = [loss_curves.detect_plateaus(L) for L in losses]
    levels = [theory.plateau_losses(r.datasets.cov, r.config.N) for r in models.values()]
    steps = max([r.history.step for r in models.values()] + [r.history.step for _, r in checks], key=len)
    n_plateaus = max(1, max(len(p.levels) for p in found))
    ds = xr.Dataset(
        {"train_loss": (("model", "step"), padded(losses, len(steps))),
         "plateau_level": (("model", "plateau"), padded([p.levels for p in found], n_plateaus)),
         "plateau_start": (("model", "plateau"), padded([p.starts for p in found], n_plateaus)),
         "plateau_end": (("model", "plateau"), padded([p.ends for p in found], n_plateaus)),
         "drop_step": (("model", "drop"), padded([p.drop_steps for p in found], n_plateaus - 1)),
         "drops": ("model", [len(p.drop_steps) for p in found]),
         "final_loss": ("model", [float(L[-1]) for L in losses]),
         "final_loss_se": ("model", [uncertainty.training_loss_error(uncertainty.per_sequence_losses(r, "train"),
                                                                     r.datasets.train) for r in models.values()]),
         "wall_time": ("model", [float(r.wall_time) for r in models.values()]),
         "plateau_theory": (("model", "m"), padded(levels, max(len(v) for v in levels))),
         "loss_star": ("model", [theory.loss_star(r.datasets.cov, r.config.N) for r in models.values()]),
         "check_loss": (("check", "step"), padded([r.history.train_loss for _, r in checks], len(steps))),
         "fall_drops": ("run", [len(d) for d in counted]),
         "fall_drop_step": (("run", "fall_drop"), padded([d.steps for d in counted], n_fall)),
         "fall_share": (("run", "fall_drop"), padded([d.shares for d in counted], n_fall)),
         "pause_step": (("run", "pause"), padded([d.pause_steps for d in counted], n_fall - 1)),
         "pause_loss": (("run", "pause"), padded([d.pause_losses for d in counted], n_fall - 1)),
         "pause_dip": (("run", "pause"), padded([d.pause_dips for d in counted], n_fall - 1)),
         "settled": ("run", [int(d.settled) for d in counted]),
         "check_seed": ("check", [r.config.seed for _, r in checks]),
         "check_lr": ("check", [r.config.lr for _, r in checks]),
         "check_epoch": ("check", [r.config.epoch for _, r in checks]),
         "check_wall_time": ("check", [float(r.wall_time) for _, r in checks])},
        coords={"model": list(MODELS), "step": steps, "plateau": np.arange(n_plateaus),
                "drop": np.arange(1, n_plateaus), "m": np.arange(max(len(v) for v in levels)),
                "d": np.arange(1, len(levels[0])),
                "check": [label for label, _ in checks], "run": ["attn_m", "attn_s"] + [label for label, _ in checks],
                "fall_drop": np.arange(1, n_fall + 1), "pause": np.arange(1, n_fall)},
        attrs=settings_attrs(S, engine=models["attn_m"].engine, seeds=S["seed"],
                             runs={k: r.config.to_dict() for k, r in models.items()}))
    ds.attrs.update(published=int(presets.is_published(NAME, S)),
                    commands="\n".join(train_command(models[k].config) for k in MODELS),
                    check_commands="\n".join(train_command(r.config) for _, r in checks))
    ds.check_loss.attrs["description"] = "ATTN_M's check runs: other seeds, and half the learning rate"
    ds.train_loss.attrs["description"] = "training loss (NaN past the end of the shorter run)"
    ds.plateau_theory.attrs["description"] = "linear attention's saddle losses L(M_m), for reference only"
    ds.final_loss_se.attrs["description"] = ("standard error of each model's final training loss, from its "
                                             "per-sequence losses at the final weights (uncertainty."
                                             "training_loss_error)")
    ds.fall_drops.attrs["description"] = ("each run's drops counted from the fall rate (loss_curves.count_drops; "
                                          "ATTN_S's rate averaged over window samples each side)")
    ds.fall_drops.attrs["window"] = _attn_s_window(losses[1])
    return ds


def _attn_s_window(loss) -> int:
    """The samples each side over which ATTN_S's fall rate is averaged: max(1, n / :data:`ATTN_S_RATE_WINDOW`)."""
    return max(1, len(loss) // ATTN_S_RATE_WINDOW)


def _runs(ds) -> dict:
    import json

    return json.loads(ds.attrs["runs"])


def _found(ds, model: str):
    """What the plateau detector found in ``model``'s loss, as ``loss_curves.detect_plateaus`` gives it."""
    m = ds.sel(model=model)
    n = int(np.isfinite(m.plateau_level).sum())
    return SimpleNamespace(levels=m.plateau_level.values[:n], starts=m.plateau_start.values[:n],
                           ends=m.plateau_end.values[:n], drop_steps=m.drop_step.values[:int(m.drops)])


def _fall(ds, run: str):
    """ATTN_M's, ATTN_S's (``run`` = ``"attn_m"``, ``"attn_s"``) or a check run's drops as ``loss_curves.count_drops``
    gives them."""
    r = ds.sel(run=run)
    n = int(r.fall_drops)
    k = max(n - 1, 0)
    return loss_curves.Drops(r.fall_drop_step.values[:n], r.fall_share.values[:n], r.pause_step.values[:k],
                             r.pause_loss.values[:k], r.pause_dip.values[:k], bool(r.settled))


def checks(ds) -> list[dict]:
    """ATTN_M's check runs as ``single_drop_claim`` takes them: label, drops counted
    (:func:`_fall`), their steps, whether the run settled, the step scale (the run's learning rate over the main
    run's) and the last loss."""
    lr = float(_runs(ds)["attn_m"]["lr"])
    return [dict(label=str(c), drops=len(_fall(ds, c)), drop_steps=_fall(ds, c).steps, settled=_fall(ds, c).settled,
                 pause_losses=_fall(ds, c).pause_losses,
                 step_scale=float(ds.check_lr.sel(check=c)) / lr,
                 final=float(ds.check_loss.sel(check=c).dropna("step")[-1])) for c in ds.check.values]


def lr_scale(ds, check=None) -> float:
    """ATTN_M's learning rate over the published one (n at the paper preset), or that of the ``check`` run."""
    lr = float(_runs(ds)["attn_m"]["lr"]) if check is None else float(ds.check_lr.sel(check=check))
    return lr / preset_blocks.ATTN_M_PAPER["lr"]


def claims(ds) -> list:
    """The paper's text set beside the run — softmax ATTN_M falls in a single drop — with a verdict and the reason
    in numbers from the run and its checks (only at the paper preset, judged at its scaled learning rates: []
    otherwise)."""
    if not ds.attrs["published"]:
        return []
    return [single_drop_claim(_fall(ds, "attn_m"), checks(ds), lr_scale=lr_scale(ds))]


def numbers(ds) -> list[dict]:
    """``numbers.json``: the drops detected and the final loss of each model (beside the linear-attention L*), and
    the drops of each ATTN_M check run; at the published settings ATTN_M's count is the paper's claim, with its
    verdict, in place of the plain row, and each check's count is the same claim at another seed or step size."""
    runs, rows = _runs(ds), []
    for key in MODELS:
        rows.append(dict(key=f"drops.{key}", quantity=_drops_quantity(ds, key), reproduced=_drop_count(ds, key)))
        rows.append(dict(key=f"final_loss.{key}",
                         quantity=f"{TITLES[key]}: final loss (P = {runs[key]['trainset_size']})",
                         theory=ds.loss_star.sel(model=key), reproduced=ds.final_loss.sel(model=key)))
    paper = PUBLISHED_ATTN_M_DROPS if ds.attrs["published"] else None
    for c in ds.check.values:  # at the paper preset each check is the paper's claim again, with its verdict
        n = len(_fall(ds, c))
        rows.append(dict(key=f"drops.attn_m.check.{published.rules.slug(str(c))}",
                         quantity=f"{TITLES['attn_m']}, {_check_words(ds, c)}: drops counted"
                                  + (f" at {lr_scale(ds, c):g}× the published learning rates (the paper's text: "
                                     "a single drop)" if paper else ""),
                         paper=paper, reproduced=n,
                         verdict=None if paper is None else single_drop_verdict(
                             n, _fall(ds, c).settled)))
    made = claims(ds)
    claimed = {c.counted for c in made}  # a count the paper's text states is written once: as its claim
    return [r for r in rows if r["quantity"] not in claimed] + [c.row() for c in made]


def _drop_count(ds, key: str) -> int:
    """A model's drops counted from its fall rate (:func:`_fall`)."""
    return len(_fall(ds, key))


def _drops_quantity(ds, key: str) -> str:
    """The ``numbers.json`` quantity of a model's drops (ATTN_M's as the claim counts them at the paper preset)."""
    if key == "attn_m":
        scaled = f" at {lr_scale(ds):g}× the published learning rates" if ds.attrs["published"] else ""
        return f"{TITLES[key]}{scaled}: drops counted"
    return f"{TITLES[key]}: drops counted"


def _check_words(ds, c) -> str:
    """A check run in words: "seed 11, 3001 steps" or "half the learning rate (0.016), 6001 steps"."""
    lr = float(ds.check_lr.sel(check=c))
    what = f"{c} ({prose_text(lr)})" if str(c) == HALF_LR else str(c)
    return f"{what}, {int(ds.check_epoch.sel(check=c))} steps"


def table(ds) -> MarkdownTable:
    """Each model's drops and final loss beside the linear-attention L* (and, at the published settings, what the
    paper's figure shows), then a row for each ATTN_M check run (its drops, their steps)."""
    rows = []
    for key in MODELS:
        final, L_star = float(ds.final_loss.sel(model=key)), float(ds.loss_star.sel(model=key))
        steps, se = _fall(ds, key).steps, float(ds.final_loss_se.sel(model=key))
        rows.append(dict(model=TITLES[key], paper=PAPER[key], drops=f"{_drop_count(ds, key)}{_unsettled(ds, key)}",
                         L_star=L_star, steps=list_words(np.round(steps)),
                         final=f"{final:.4f} ({final_vs_loss_star(final, L_star, se)})"))
    for c in ds.check.values:
        d = _fall(ds, c)
        rows.append(dict(model=f"{TITLES['attn_m']}, {_check_words(ds, c)}", paper=PAPER["attn_m"],
                         drops=f"{len(d)}{_unsettled(ds, c)}", steps=list_words(np.round(d.steps)),
                         final=f"{float(ds.check_loss.sel(check=c).dropna('step')[-1]):.4f}",
                         L_star=float(ds.loss_star.sel(model="attn_m"))))
    columns = {"model": "", "paper": "paper", "drops": "drops in this run", "steps": "at steps",
               "final": "final loss, this run", "L_star": "linear-attention $L^*$"}
    if not ds.attrs["published"]:
        del columns["paper"]
    return MarkdownTable(rows, columns)


def final_vs_loss_star(final: float, loss_star: float, se: float) -> str:
    """Where a final training loss ends beside linear attention's minimum L* (a reference, not a bound for softmax),
    in words: "at $L^*$ within its error" where |final − L*| ≤ ``uncertainty.difference_band(se)`` (COVERAGE
    standard errors ``se`` of the mean per-sequence loss; L* has none), else "below $L^*$" or "above $L^*$"."""
    if uncertainty.verdict(final - loss_star, uncertainty.difference_band(se)) == AGREES:
        return "at $L^*$ within its error"
    return "below $L^*$" if final < loss_star else "above $L^*$"


def final_rule_words() -> str:
    """The rule of :func:`final_vs_loss_star` in words, for the page."""
    return (f"a final loss within {uncertainty.COVERAGE:g} standard errors (of the mean of its per-sequence "
            "losses) of L* is said to be at L* within its error")


def _unsettled(ds, run: str):
    """", still falling at the end" where a run has not settled (:func:`_fall`), else nothing."""
    return "" if _fall(ds, run).settled else ", still falling at the end"


def _count(n: int, what: str) -> str:
    return {0: f"no {what}", 1: f"one {what}"}.get(n, f"{n} {what}s")


def _detected(ds, key: str) -> str:
    """One sentence: the drops counted from ``key``'s fall rate (:func:`_fall`, ``drops_words``; ATTN_S's at the
    resolution of :func:`_resolution`) and its last loss."""
    final, name, d = float(ds.final_loss.sel(model=key)), TITLES[key], _fall(ds, key)
    where = f" (averaged over {_resolution(ds)} steps)" if key == "attn_s" else ""
    near = near_cut_words(d)
    return (f"Counted from its fall rate{where}, the loss of {name} falls in {drops_words(d)}; its last "
            f"loss is {final:.3f}{'' if d.settled else ', and it is still falling at the end of the run'}."
            + (f" {near}" if near else ""))


def _resolution(ds) -> int:
    """The steps across which ATTN_S's fall rate is averaged: twice its window of loss samples."""
    loss = ds.train_loss.sel(model="attn_s").dropna("step")
    return int(round(2 * int(ds.fall_drops.attrs["window"]) * float(np.median(np.diff(loss.step.values)))))


def _shoulder(ds) -> bool:
    """Whether the run is at the paper preset and ATTN_M's fall comes in more than one drop (:func:`_fall`)."""
    return bool(ds.attrs["published"]) and len(_fall(ds, "attn_m")) > 1


def _reading(ds) -> str:
    """What the paper preset shows, in words (only there: "" otherwise)."""
    if not _shoulder(ds):
        return ""
    d = _fall(ds, "attn_m")
    linear = ds.plateau_theory.sel(model="attn_m").values
    off_saddles = all(np.nanmin(np.abs(linear - L)) > 0.02 for L in d.pause_losses)
    one = len(d.pause_losses) == 1
    text = ("**What the paper preset shows** (at n times the published learning rates). "
            + ("Softmax ATTN_S learns in a staircase, as the paper says. " if _drop_count(ds, "attn_s") > 1
               else "")
            + f"Softmax ATTN_M does not fall in one sigmoid: its fall slows nearly to a halt "
            f"{'once' if one else f'{len(d.pause_losses)} times'} (the fall rate dips to "
            f"{', '.join(f'{x:.0%}' for x in d.pause_dips)} of the peaks beside it), so it falls in {len(d)} drops "
            "where the paper describes one (the sentence under the table gives the steps).")
    if off_saddles:
        text += (f" {'The slow stretch is' if one else 'The slow stretches are'} not at any of linear attention's "
                 "saddle losses (none lies within 0.02 of one).")
    return text


def _directions_words(ds) -> str:
    """What the page does not read: which directions each of softmax ATTN_S's drops learns (the run keeps no
    weights, and linear attention's saddle losses do not apply to softmax)."""
    return (f"Which directions each of softmax ATTN_S's {_count(_drop_count(ds, 'attn_s'), 'drop')} learns is not "
            "read here: the runs keep no weights, and linear attention's saddle losses, drawn for reference, do not "
            "name softmax's plateaus.")


def _checks_words(ds) -> str:
    """What ATTN_M's check runs show and what they cost, in words."""
    if not ds.sizes["check"]:
        return ""
    claim = check_words(len(_fall(ds, "attn_m")), checks(ds))
    seconds = float(ds.check_wall_time.sum())
    return (f"{claim} The {_count(ds.sizes['check'], 'check run')} trained in {prose_text(seconds)} s in all on the "
            "machine that built this page.")


def _describe(run: dict) -> str:
    return describe(run) + ("" if run["softmax"] else ", without the softmax (linear attention)")


def words(ds) -> dict:
    """The values and sentences the page's prose quotes, by name (for ``output.glue``)."""
    runs = _runs(ds)
    m, s = _drop_count(ds, "attn_m"), _drop_count(ds, "attn_s")
    lead = (f"In this run, counted from the fall rate, the loss of ATTN_S, with separate keys and queries, falls in "
            f"{_count(s, 'drop')}, and that of ATTN_M, with merged key and query, in {_count(m, 'drop')}")
    if _shoulder(ds) and s > 1:
        lead += ("; at the published sizes, with n times the published learning rates, ATTN_S learns in a "
                 "staircase, as linear attention does, and ATTN_M's fall slows between drops (the paper describes "
                 "a single drop)")
        draws = {single_drop_verdict(c["drops"], c["settled"])
                 for c in checks(ds) if c["step_scale"] == 1}
        if draws == {AGREES}:
            lead += ", but at the other seeds checked it falls in a single drop: the extra drop belongs to this draw"
        elif draws == {DIFFERS}:
            lead += ", and at the other seeds checked it too falls in more than one drop"
    paper = PRESETS["paper"]
    return dict(lead_result=lead + ".", n=runs["attn_s"]["seq_len"], P_s=runs["attn_s"]["trainset_size"],
                ms_per_step=f"{1e3 * float(ds.wall_time.sel(model='attn_s')) / runs['attn_s']['epoch']:.2g} ms",
                settings_m=_describe(runs["attn_m"]), settings_s=_describe(runs["attn_s"]),
                paper_lrs=list_words([paper[k]["lr"] for k in MODELS]),
                detected=" ".join(_detected(ds, k) for k in MODELS), reading=_reading(ds),
                directions=_directions_words(ds), checks=_checks_words(ds),
                drop_rule=loss_curves.drop_rule_words(), final_rule=final_rule_words(),
                attn_s_span=f"1/{ATTN_S_RATE_WINDOW // 2}",
                lr_scale=f"{paper['attn_m']['lr'] / preset_blocks.ATTN_M_PAPER['lr']:g}",
                caption_lead=published.page.caption_lead("Figure 5", bool(ds.attrs["published"])))


def plot(ds):
    """The training loss of each model (left ATTN_M, right ATTN_S) with the linear-attention saddle losses of the
    same covariance, dotted, for reference; on the left, in grey, ATTN_M's check runs (other seeds solid, half the
    learning rate dashed and drawn at half its step: the same gradient-flow time)."""
    import matplotlib.pyplot as plt

    from ..plotting import plateau_labels, plot_loss_with_theory

    fig, axes = plt.subplots(1, 2, figsize=(6.6, 3.2))
    lr = float(_runs(ds)["attn_m"]["lr"])
    for ax, key in zip(axes, MODELS):
        loss = ds.train_loss.sel(model=key).dropna("step")
        levels = ds.plateau_theory.sel(model=key).dropna("m").values
        if key == "attn_m":
            for c in ds.check.values:
                check = ds.check_loss.sel(check=c).dropna("step")
                scale = float(ds.check_lr.sel(check=c)) / lr
                ax.plot(check.step.values * scale, check.values, color="0.6", linewidth=0.9,
                        linestyle="--" if scale != 1 else "-")
        plot_loss_with_theory(ax, loss.step.values, [(loss.values, None, dict(color="black"))], levels=levels,
                              level_labels=plateau_labels(len(levels)), legend=False)
        ax.set_title(TITLES[key])
        ax.set_ylim(0, 1.08 * max(float(loss.max()), levels[0]))  # every theory level stays in view
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------- the claim of the paper's text
# Figure 5 has no published image to read: the paper's text says softmax ATTN_M learns in "a single drop".
PUBLISHED_ATTN_M_DROPS = 1


def single_drop_verdict(drops: int, settled: bool) -> str:
    """The paper's "a single drop" against a count of drops (``loss_curves.count_drops``): more than one differs
    however the run ends (a drop made stays made); one agrees, and none differs, only in a run that has settled
    (else a later drop may still come: cannot tell)."""
    if drops > PUBLISHED_ATTN_M_DROPS:
        return DIFFERS
    if not settled:
        return CANNOT_TELL
    return AGREES if drops == PUBLISHED_ATTN_M_DROPS else DIFFERS


def drops_words(drops) -> str:
    """The drops of ``loss_curves.count_drops`` in words: their steps, shares of the fall and the slow stretches
    between them."""
    n = len(drops)
    if n == 0:
        return "no drop"
    if n == 1:
        return f"one drop, at step {drops.steps[0]:.0f}"
    shares = ", ".join(f"step {s:.0f} ({f:.0%} of the fall)" for s, f in zip(drops.steps, drops.shares))
    text = f"{n} drops, at {shares}"
    return text + ("; between them the fall rate dips to "
                   + ", ".join(f"{d:.0%} of the smaller peak beside it at step {s:.0f} (loss {L:.3f})"
                               for d, s, L in zip(drops.pause_dips, drops.pause_steps, drops.pause_losses)))


#: A split between two drops is *near the cut* when the fall rate between them dips to more than this fraction of
#: the cut (``loss_curves.DROP_DIP``): a slightly shallower dip would have merged them, so the count is marginal.
NEAR_CUT = 0.75


def near_cut_words(drops, dip: float = loss_curves.DROP_DIP) -> str:
    """A sentence on the splits of ``drops`` (``loss_curves.count_drops``) whose dip d is near the cut ``dip``
    (d > :data:`NEAR_CUT` · ``dip``, still below it): at their steps the count rests on a dip close to the cut, so
    it is marginal; "" where no split is near the cut."""
    near = [(s, d) for s, d in zip(drops.pause_steps, drops.pause_dips) if NEAR_CUT * dip < d < dip]
    if not near:
        return ""
    splits = "; ".join(f"at step {s:.0f} it dips to {d:.0%}" for s, d in near)
    return (f"The count is marginal: {'a split rests' if len(near) == 1 else 'splits rest'} on a dip of the fall "
            f"rate near the cut of {dip:.0%} of the smaller peak ({splits}); a slightly shallower dip would have "
            f"merged {'those drops' if len(near) > 1 else 'the two drops'}.")


def single_drop_claim(drops, checks=(), *, lr_scale: float = 1.0) -> Claim:
    """The paper's claim for softmax ATTN_M: its loss falls in a single drop. ``drops``: what
    ``loss_curves.count_drops`` found in our training loss (the count, each drop's step and share of the fall, the
    slow stretches between drops, whether the run settled); the verdict is :func:`single_drop_verdict`.
    ``lr_scale``: our learning rate over the published one (the claim is then judged at scaled rates, and says so).
    ``checks``: the same model run again (other seeds, a smaller learning rate), each ``{"label", "drops",
    "drop_steps", "settled", "step_scale"[, "final"]}`` (``step_scale``: the run's learning rate over the main
    run's, so that step × scale is the same gradient-flow time; ``final``: its last loss); the reason then says what
    the checks show (:func:`check_words`)."""
    paper, ours = PUBLISHED_ATTN_M_DROPS, len(drops)
    scaled = f" at {lr_scale:g}× the published learning rates" if lr_scale != 1 else ""
    claim, counted = "a single drop", f"softmax ATTN_M{scaled}: drops counted"
    verdict = single_drop_verdict(ours, drops.settled)
    reason = (f"Counted from the fall rate, the loss falls in {drops_words(drops)}"
              + ("." if drops.settled else "; it is still falling at the end of the run.")
              + (f" The run trains at {lr_scale:g} times the published learning rates, so this verdict is one on "
                 "that run, not at the published settings." if lr_scale != 1 else ""))
    if checks:
        reason += " " + check_words(ours, checks)
    return Claim("Figure 5", claim, counted, paper, ours, verdict, reason)


def drop_count_holds(ours: int, checks) -> str:
    """Whether the check runs find the main run's count of drops ``ours``: :data:`DIFFERS` where one makes more, or
    fewer and has settled; else :data:`CANNOT_TELL` where one has not settled (a drop may still come); else
    :data:`AGREES` (the count is then no accident of one draw or of the step size)."""
    def one(c) -> str:
        n = int(c["drops"])
        if n > ours or (n < ours and c["settled"]):
            return DIFFERS
        return AGREES if c["settled"] else CANNOT_TELL

    found = {one(c) for c in checks}
    return DIFFERS if DIFFERS in found else CANNOT_TELL if CANNOT_TELL in found else AGREES


def check_words(ours: int, checks) -> str:
    """Sentences on the check runs: the drops each finds and where (a run at another learning rate also in the main
    run's steps, step × scale, the same gradient-flow time), whether it is still falling at its end, and whether the
    main run's count holds (:func:`drop_count_holds`), said apart for another step size and for other draws."""
    def one(c) -> str:
        n, steps = int(c["drops"]), np.asarray(c["drop_steps"], dtype=np.float64)
        where = f" at step{'s' if steps.size > 1 else ''} {list_words(np.round(steps))}" if steps.size else ""
        if steps.size and c["step_scale"] != 1:
            where += f" ({list_words(np.round(steps * c['step_scale']))} in the main run's steps)"
        final = f", ending at {c['final']:.3f}" if c.get("final") is not None else ""
        pauses = np.asarray(c.get("pause_losses", ()), dtype=np.float64)
        if pauses.size:
            where += f", pausing at loss {', '.join(f'{x:.2f}' for x in pauses)}"
        return f"{c['label']}, {n} drop{'' if n == 1 else 's'}{where}{final}" + (
            "" if c["settled"] else " and still falling")

    plural = "s" if ours != 1 else ""
    text = []
    for kind, group in (("step", [c for c in checks if c["step_scale"] != 1]),
                        ("draw", [c for c in checks if c["step_scale"] == 1])):
        if not group:
            continue
        holds = drop_count_holds(ours, group)
        what = "a smaller step" if kind == "step" else "other draws"
        single = "; ".join(f"{c['label']} {single_drop_verdict(int(c['drops']), c['settled'])}" for c in group)
        text.append(f"Run again with {what}, ATTN_M shows: {'; '.join(one(c) for c in group)} (against the paper's "
                    f"single drop: {single}). "
                    + {AGREES: f"So the count of {ours} drop{plural} holds with {what}.",
                       DIFFERS: f"So the count of {ours} drop{plural} does not hold with {what}.",
                       CANNOT_TELL: f"A run still falling at its end may make another drop, so whether the count of "
                                    f"{ours} drop{plural} holds with {what} cannot be told from these runs."}[holds])
    return " ".join(text)
