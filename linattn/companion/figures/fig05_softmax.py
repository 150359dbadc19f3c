"""Figure 5: softmax attention — separate keys and queries (ATTN_S) still learn in steps, merged ones (ATTN_M) in one
fall (paper Section 6).

Two runs, the settings of Figures 1b and 3a with a softmax over the attention scores (``softmax=True``: the
companion's softmax engine, ``linattn.objectives.softmax``). There is no theory for softmax attention: the
linear-attention saddle losses L(M_0) … L(M_D) of the same covariance (``theory.plateau_losses``) and its minimum L*
are drawn for reference only. Measured: each curve's drops, counted from its fall rate by one rule
(``loss_curves.count_drops``, which counts a fall still under way at the end; ATTN_S's at a resolution fine enough
to see a pause of a few tens of steps, :data:`ATTN_S_RATE_WINDOW`), the count again with both of the rule's cuts
moved by :data:`NEAR_CUT` (so that the page says where the count rests on a cut), where each run ends and whether
it has settled by its end. The runs keep no weights, so the page
does not say which directions a drop learns. ATTN_M is trained again at the ``check_seeds`` and at half the
learning rate for twice the steps (:func:`check_configs`), so that the page can say whether its drops survive another
draw, and how the run at a smaller step compares with the main run at the same gradient-flow time
(:func:`matched_time`). At the paper preset (published settings but n times the published learning rates) the
paper's text for ATTN_M, a single drop, is set beside the run as a claim judged at those scaled rates
(``single_drop_claim``, with the checks).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

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
    ("5", "the same, with both cuts of the count a quarter stricter", ("drops.attn_m.stricter",
                                                                       "drops.attn_s.stricter")),
    ("5", "the same, with both cuts a quarter looser", ("drops.attn_m.looser", "drops.attn_s.looser")),
)
TOLERANCES: list[tuple[str, str, float]] = []  # no theory of softmax attention to hold its numbers to
# the names (in this module) of the paper's number and the rule it compares with
PUBLISHED = ("PUBLISHED_ATTN_M_DROPS", "single_drop_claim")
MODELS = ("attn_m", "attn_s")
TITLES = {"attn_m": "softmax ATTN_M", "attn_s": "softmax ATTN_S"}
LOSS_STAR_REFERENCE = "linear attention's L*"  # what a final loss is set beside: a reference, not its theory
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
    """Both runs' training losses (``train_loss``: model × step; the shorter run is NaN past its end), the final loss
    with its standard error from the per-sequence training losses (``final_loss_se``) and the training's wall time;
    for reference, each model's linear-attention saddle losses (``plateau_theory``: model × m) and minimum
    (``loss_star``: model). For ATTN_M, ATTN_S and each check run (``run``: ``attn_m``, ``attn_s``, then the checks;
    ATTN_S's fall rate averaged over n/:data:`ATTN_S_RATE_WINDOW` samples each side) its drops counted from the fall
    rate (``loss_curves.count_drops``), the one count of drops the page gives: their number, steps and shares of the
    fall (``fall_drops``, ``fall_drop_step``, ``fall_share``), the slow stretches between them (``pause_step``,
    ``pause_loss``, ``pause_dip``), whether the run settled (``settled``), and the count again with both cuts moved
    by :data:`NEAR_CUT` (``fall_drops_stricter``, ``fall_drops_looser``: :func:`moved_cut_counts`)."""
    import xarray as xr

    done = train(runs(S), S)
    checks = [(label, r) for label, r in done.items() if label not in MODELS]
    models = {k: done[k] for k in MODELS}
    losses = [models[k].history.train_loss for k in MODELS]
    curves = [(losses[0], None), (losses[1], _attn_s_window(losses[1]))] + [(r.history.train_loss, None)
                                                                          for _, r in checks]
    counted = [loss_curves.count_drops(L, window=w) for L, w in curves]
    moved = [moved_cut_counts(L, window=w) for L, w in curves]
    n_fall = max([1] + [len(d) for d in counted])
    levels = [theory.plateau_losses(r.datasets.cov, r.config.N) for r in models.values()]
    steps = max([r.history.step for r in models.values()] + [r.history.step for _, r in checks], key=len)
    ds = xr.Dataset(
        {"train_loss": (("model", "step"), padded(losses, len(steps))),
         "final_loss": ("model", [float(L[-1]) for L in losses]),
         "final_loss_se": ("model", [uncertainty.mean_loss_error(uncertainty.per_sequence_losses(r, "train"),
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
         "fall_drops_stricter": ("run", [m[0] for m in moved]),
         "fall_drops_looser": ("run", [m[1] for m in moved]),
         "check_seed": ("check", [r.config.seed for _, r in checks]),
         "check_lr": ("check", [r.config.lr for _, r in checks]),
         "check_epoch": ("check", [r.config.epoch for _, r in checks]),
         "check_wall_time": ("check", [float(r.wall_time) for _, r in checks])},
        coords={"model": list(MODELS), "step": steps, "m": np.arange(max(len(v) for v in levels)),
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
                                             "mean_loss_error)")
    ds.fall_drops.attrs["description"] = ("each run's drops counted from the fall rate (loss_curves.count_drops; "
                                          "ATTN_S's rate averaged over window samples each side)")
    ds.fall_drops.attrs["window"] = _attn_s_window(losses[1])
    for name, way in (("fall_drops_stricter", "stricter"), ("fall_drops_looser", "looser")):
        ds[name].attrs["description"] = (f"the drops counted with both cuts of count_drops {way} by {NEAR_CUT:g} "
                                         "(the dip cut times it or over it, the least share over it or times it)")
    return ds


def moved_cut_counts(loss, *, window: int | None = None, margin: float | None = None) -> tuple[int, int]:
    """The drops of ``loss`` counted by ``loss_curves.count_drops`` with both of its cuts moved by ``margin``
    (default :data:`NEAR_CUT`): stricter (dip cut × margin, least share / margin: fewer splits) and looser (dip cut /
    margin, least share × margin). Where either differs from the count at the rule's own cuts, the count rests on
    where a cut lies."""
    margin = NEAR_CUT if margin is None else margin
    dip, share = loss_curves.DROP_DIP, loss_curves.DROP_SHARE
    return (len(loss_curves.count_drops(loss, window=window, dip=dip * margin, share=share / margin)),
            len(loss_curves.count_drops(loss, window=window, dip=dip / margin, share=share * margin)))


def _attn_s_window(loss) -> int:
    """The samples each side over which ATTN_S's fall rate is averaged: max(1, n / :data:`ATTN_S_RATE_WINDOW`)."""
    return max(1, len(loss) // ATTN_S_RATE_WINDOW)


def _runs(ds) -> dict:
    import json

    return json.loads(ds.attrs["runs"])


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
    run's), the last loss, the counts with both cuts moved (``moved``: :func:`moved_cut_counts`) and, for a run at
    another learning rate, its comparison with the main run at the same
    gradient-flow time (``matched``: :func:`matched_time`)."""
    lr = float(_runs(ds)["attn_m"]["lr"])
    main = ds.train_loss.sel(model="attn_m").dropna("step")
    out = []
    for c in ds.check.values:
        d, loss, scale = _fall(ds, c), ds.check_loss.sel(check=c).dropna("step"), float(ds.check_lr.sel(check=c)) / lr
        one = dict(label=str(c), drops=len(d), drop_steps=d.steps, settled=d.settled, pause_losses=d.pause_losses,
                   step_scale=scale, final=float(loss[-1]), moved=_moved(ds, c))
        if scale != 1:
            one["matched"] = matched_time(main.step.values, main.values, _fall(ds, "attn_m"),
                                          loss.step.values, loss.values, d, scale)
        out.append(one)
    return out


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
    return [single_drop_claim(_fall(ds, "attn_m"), checks(ds), lr_scale=lr_scale(ds), moved=_moved(ds, "attn_m"))]


def numbers(ds) -> list[dict]:
    """``numbers.json``: the drops counted and the final loss of each model (beside the linear-attention L*, marked
    ``reference_only``: it is no theory of softmax attention, so the report gives the loss no error against it), the
    count again with both cuts stricter and looser (:func:`moved_cut_counts`), and the drops of each ATTN_M check
    run; at the published settings ATTN_M's count is the paper's claim, with its verdict, in place of the plain row,
    and each check's count is the same claim at another seed or step size."""
    runs, rows = _runs(ds), []
    for key in MODELS:
        rows.append(dict(key=f"drops.{key}", quantity=_drops_quantity(ds, key), reproduced=_drop_count(ds, key)))
        for way, n in zip(("stricter", "looser"), _moved(ds, key)):
            rows.append(dict(key=f"drops.{key}.{way}", reproduced=n,
                             quantity=f"{TITLES[key]}: drops counted with both cuts moved by "
                                      f"{_fraction(1 - NEAR_CUT)}, {way}"))
        rows.append(dict(key=f"final_loss.{key}",
                         quantity=f"{TITLES[key]}: final loss (P = {runs[key]['trainset_size']})",
                         theory=ds.loss_star.sel(model=key), reproduced=ds.final_loss.sel(model=key),
                         reference_only=LOSS_STAR_REFERENCE))
    paper = PUBLISHED_ATTN_M_DROPS if ds.attrs["published"] else None
    for c in ds.check.values:  # at the paper preset each check is the paper's claim again, with its verdict
        n = len(_fall(ds, c))
        rows.append(dict(key=f"drops.attn_m.check.{published.rules.slug(str(c))}",
                         quantity=f"{TITLES['attn_m']}, {_check_words(ds, c)}: drops counted"
                                  + (f" at {lr_scale(ds, c):g}× the published learning rates (the paper's text: "
                                     "a single drop)" if paper else ""),
                         paper=paper, reproduced=n,
                         verdict=None if paper is None else single_drop_verdict(
                             n, _fall(ds, c).settled, _moved(ds, c))))
    made = claims(ds)
    claimed = {c.counted for c in made}  # a count the paper's text states is written once: as its claim
    return [r for r in rows if r["quantity"] not in claimed] + [c.row() for c in made]


def _drop_count(ds, key: str) -> int:
    """A model's drops counted from its fall rate (:func:`_fall`)."""
    return len(_fall(ds, key))


def _moved(ds, run: str) -> tuple[int, int]:
    """A run's drops counted with both cuts stricter and looser (:func:`moved_cut_counts`)."""
    return int(ds.fall_drops_stricter.sel(run=run)), int(ds.fall_drops_looser.sel(run=run))


def _fewest(ds, run: str) -> int:
    """The fewest drops a run's count gives at its own cuts or with them moved (:func:`moved_cut_counts`)."""
    return min(len(_fall(ds, run)), *_moved(ds, run))


def _range(ds, run: str) -> str:
    """" (2 to 4 with both cuts moved by a quarter)" where a run's count rests on its cuts
    (:func:`count_range_words`), else nothing."""
    moved = count_range_words(len(_fall(ds, run)), *_moved(ds, run))
    return f" ({moved})" if moved else ""


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
        rows.append(dict(model=TITLES[key], paper=PAPER[key],
                         drops=f"{_drop_count(ds, key)}{_range(ds, key)}{_unsettled(ds, key)}",
                         L_star=L_star, steps=list_words(np.round(steps)),
                         final=f"{final:.4f} ({final_vs_loss_star(final, L_star, se)})"))
    for c in ds.check.values:
        d = _fall(ds, c)
        rows.append(dict(model=f"{TITLES['attn_m']}, {_check_words(ds, c)}", paper=PAPER["attn_m"],
                         drops=f"{len(d)}{_range(ds, c)}{_unsettled(ds, c)}", steps=list_words(np.round(d.steps)),
                         final=f"{float(ds.check_loss.sel(check=c).dropna('step')[-1]):.4f}",
                         L_star=float(ds.loss_star.sel(model="attn_m"))))
    columns = {"model": "", "paper": "paper", "drops": "drops in this run", "steps": "at steps",
               "final": "final loss, this run", "L_star": "linear-attention $L^*$"}
    if not ds.attrs["published"]:
        del columns["paper"]
    return MarkdownTable(rows, columns)


def final_vs_loss_star(final: float, loss_star: float, se: float) -> str:
    """Where a final training loss ends beside linear attention's minimum L* (a reference, not a bound for softmax),
    in words, by :mod:`~linattn.companion.uncertainty`'s rule for a training loss (as fig01b judges its final
    training loss): fitted to its own set, it gets no sampling-error agreement, so its band is the resolution alone
    (none: L* is exact) and within ``uncertainty.difference_band(se)`` of L* (COVERAGE standard errors ``se`` of the
    mean per-sequence loss: what the draw of the training set alone moves) the verdict is *cannot tell*:
    "cannot tell from $L^*$"; beyond it "below $L^*$" or "above $L^*$" (and "at $L^*$" only where they are equal)."""
    said = uncertainty.verdict(final - loss_star, uncertainty.difference_band(resolution=0.0),
                               uncertainty.difference_band(se))
    if said == AGREES:
        return "at $L^*$"
    if said == CANNOT_TELL:
        return "cannot tell from $L^*$"
    return "below $L^*$" if final < loss_star else "above $L^*$"


def final_rule_words() -> str:
    """The rule of :func:`final_vs_loss_star` in words, for the page."""
    return ("a final training loss, fitted to its own training set, is never said to agree with L* by its sampling "
            f"error: within {uncertainty.COVERAGE:g} standard errors (of the mean of its per-sequence losses) of L* "
            "it is \"cannot tell from L*\", beyond them below or above L*")


def _unsettled(ds, run: str):
    """", still falling at the end" where a run has not settled (:func:`_fall`), else nothing."""
    return "" if _fall(ds, run).settled else ", still falling at the end"


def _count(n: int, what: str) -> str:
    return {0: f"no {what}", 1: f"one {what}"}.get(n, f"{n} {what}s")


def _detected(ds, key: str) -> str:
    """One sentence: the drops counted from ``key``'s fall rate (:func:`_fall`, ``drops_words``; ATTN_S's at the
    resolution of :func:`_resolution`) and its last loss, then where the count rests on a cut
    (:func:`near_cut_words`)."""
    final, name, d = float(ds.final_loss.sel(model=key)), TITLES[key], _fall(ds, key)
    where = f" (averaged over {_resolution(ds)} steps)" if key == "attn_s" else ""
    near = near_cut_words(d, *_moved(ds, key))
    return (f"Counted from its fall rate{where}, the loss of {name} falls in {drops_words(d)}; its last "
            f"loss is {final:.3f}{'' if d.settled else ', and it is still falling at the end of the run'}."
            + (f" {near}" if near else ""))


def _resolution(ds) -> int:
    """The steps across which ATTN_S's fall rate is averaged: twice its window of loss samples."""
    loss = ds.train_loss.sel(model="attn_s").dropna("step")
    return int(round(2 * int(ds.fall_drops.attrs["window"]) * float(np.median(np.diff(loss.step.values)))))


def _shoulder(ds) -> bool:
    """Whether the run is at the paper preset and ATTN_M's fall comes in more than one drop at its cuts and with them
    moved (:func:`_fewest`)."""
    return bool(ds.attrs["published"]) and _fewest(ds, "attn_m") > 1


def _reading(ds) -> str:
    """What the paper preset shows, in words (only there: "" otherwise)."""
    if not _shoulder(ds):
        return ""
    d = _fall(ds, "attn_m")
    linear = ds.plateau_theory.sel(model="attn_m").values
    off_saddles = all(np.nanmin(np.abs(linear - L)) > 0.02 for L in d.pause_losses)
    one = len(d.pause_losses) == 1
    text = ("**What the paper preset shows** (at n times the published learning rates). "
            + ("Softmax ATTN_S learns in a staircase, as the paper says. " if _fewest(ds, "attn_s") > 1
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
    """What ATTN_M's check runs show and what they cost, in words; where the paper's claim is set beside the run
    (:func:`claims`), its reason already says what they show (:func:`single_drop_claim`), so only their cost."""
    if not ds.sizes["check"]:
        return ""
    runs, seconds = _count(ds.sizes["check"], "check run"), prose_text(float(ds.check_wall_time.sum()))
    if claims(ds):
        return (f"The {runs}, whose drops the claim's reason above gives, trained in {seconds} s in all on the machine "
                "that built this page.")
    return (f"{check_words(len(_fall(ds, 'attn_m')), checks(ds))} The {runs} trained in {seconds} s in all on the "
            "machine that built this page.")


def _describe(run: dict) -> str:
    return describe(run) + ("" if run["softmax"] else ", without the softmax (linear attention)")


def words(ds) -> dict:
    """The values and sentences the page's prose quotes, by name (for ``output.glue``)."""
    runs = _runs(ds)
    m, s = _drop_count(ds, "attn_m"), _drop_count(ds, "attn_s")
    lead = (f"In this run, counted from the fall rate, the loss of ATTN_S, with separate keys and queries, falls in "
            f"{_count(s, 'drop')}{_range(ds, 'attn_s')}, and that of ATTN_M, with merged key and query, in "
            f"{_count(m, 'drop')}{_range(ds, 'attn_m')}")
    if _shoulder(ds) and _fewest(ds, "attn_s") > 1:
        lead += ("; at the published sizes, with n times the published learning rates, ATTN_S learns in a "
                 "staircase, as linear attention does, and ATTN_M's fall slows between drops (the paper describes "
                 "a single drop)")
        draws = {single_drop_verdict(c["drops"], c["settled"], c.get("moved", ()))
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


def single_drop_verdict(drops: int, settled: bool, moved=()) -> str:
    """The paper's "a single drop" against a count of drops (``loss_curves.count_drops``): more than one differs
    however the run ends (a drop made stays made); one agrees, and none differs, only in a run that has settled
    (else a later drop may still come: cannot tell). ``moved``: the counts with the rule's cuts moved
    (:func:`moved_cut_counts`); where one of them would give another verdict, the verdict rests on where a cut lies:
    cannot tell."""
    def one(n: int) -> str:
        if n > PUBLISHED_ATTN_M_DROPS:
            return DIFFERS
        if not settled:
            return CANNOT_TELL
        return AGREES if n == PUBLISHED_ATTN_M_DROPS else DIFFERS

    found = {one(int(n)) for n in (drops, *moved)}
    return found.pop() if len(found) == 1 else CANNOT_TELL


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


#: A cut of ``loss_curves.count_drops`` is *near* where a value lies within this factor of it: a split whose dip d of
#: the fall rate is above NEAR_CUT × the dip cut (``loss_curves.DROP_DIP``), still below it, and a drop whose share f
#: of the fall is below the least share (``loss_curves.DROP_SHARE``) / NEAR_CUT; the count is then marginal
NEAR_CUT = 0.75


def near_cuts(drops, dip: float = loss_curves.DROP_DIP, share: float = loss_curves.DROP_SHARE,
              margin: float = NEAR_CUT) -> tuple[list, list]:
    """The splits and drops of ``drops`` (``loss_curves.count_drops``) that lie near their cut (:data:`NEAR_CUT`):
    ``(splits, small)``, each split as (its step, its dip d: margin · ``dip`` < d < ``dip``), each small drop as (its
    step, its share f: f < ``share`` / margin). A slightly shallower dip would merge a split's two drops, and a
    slightly larger least share would join a small drop to its neighbour."""
    splits = [(s, d) for s, d in zip(drops.pause_steps, drops.pause_dips) if margin * dip < d < dip]
    small = [(s, f) for s, f in zip(drops.steps, drops.shares) if f < share / margin]
    return splits, small


def count_range_words(n: int, stricter: int, looser: int, margin: float = NEAR_CUT) -> str:
    """The count ``n`` of drops beside the counts with both cuts moved by ``margin`` (:func:`moved_cut_counts`),
    when either differs from it: "2 to 4 with both cuts moved by a quarter"; "" where the count does not move."""
    lo, hi = min(n, stricter, looser), max(n, stricter, looser)
    if lo == hi:
        return ""
    return f"{lo} to {hi} with both cuts moved by {_fraction(1 - margin)}"


def _and(items: list[str]) -> str:
    """["a", "b", "c"] → "a, b and c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _fraction(x: float) -> str:
    """A fraction in words where it has a name ("a quarter"), else as a percentage."""
    return {0.25: "a quarter", 0.5: "a half", 0.1: "a tenth", 0.2: "a fifth"}.get(round(x, 6), f"{x:.0%}")


def near_cut_words(drops, stricter: int, looser: int, dip: float = loss_curves.DROP_DIP,
                   share: float = loss_curves.DROP_SHARE) -> str:
    """A sentence on where the count of ``drops`` (``loss_curves.count_drops``) rests on a cut: each split and each
    drop near its cut (:func:`near_cuts`), named with its step and value against the cut, and the counts with both
    cuts moved (``stricter``, ``looser``: :func:`moved_cut_counts`, :func:`count_range_words`); "" where no value is
    near its cut and the count does not move."""
    splits, small = near_cuts(drops, dip, share)
    moved = count_range_words(len(drops), stricter, looser)
    if not (splits or small or moved):
        return ""
    named = ([f"the split at step {s:.0f} (the fall rate dips to {d:.0%} of the smaller peak beside it, against "
              f"the cut of {dip:.0%})" for s, d in splits]
             + [f"the drop at step {s:.0f} ({f:.1%} of the fall, against the least share of {share:.0%})"
                for s, f in small])
    parts = [f"{_and(named)} lie{'s' if len(named) == 1 else ''} near {'its' if len(named) == 1 else 'their'} "
             f"cut{'' if len(named) == 1 else 's'}"] if named else []
    parts += [f"the rule counts {moved}"] if moved else []
    return f"The count is marginal: {', and '.join(parts)}."


def single_drop_claim(drops, checks=(), *, lr_scale: float = 1.0, moved=()) -> Claim:
    """The paper's claim for softmax ATTN_M: its loss falls in a single drop. ``drops``: what
    ``loss_curves.count_drops`` found in our training loss (the count, each drop's step and share of the fall, the
    slow stretches between drops, whether the run settled); the verdict is :func:`single_drop_verdict`.
    ``lr_scale``: our learning rate over the published one (the claim is then judged at scaled rates, and says so).
    ``checks``: the same model run again (other seeds, a smaller learning rate), each ``{"label", "drops",
    "drop_steps", "settled", "step_scale"[, "final"]}`` (``step_scale``: the run's learning rate over the main
    run's, so that step × scale is the same gradient-flow time; ``final``: its last loss); the reason then says what
    the checks show (:func:`check_words`). ``moved``: the counts with both cuts moved (:func:`moved_cut_counts`);
    the reason then says where the count is marginal (:func:`near_cut_words`)."""
    paper, ours = PUBLISHED_ATTN_M_DROPS, len(drops)
    scaled = f" at {lr_scale:g}× the published learning rates" if lr_scale != 1 else ""
    claim, counted = "a single drop", f"softmax ATTN_M{scaled}: drops counted"
    verdict = single_drop_verdict(ours, drops.settled, moved)
    near = near_cut_words(drops, *moved) if moved else ""
    reason = (f"Counted from the fall rate, the loss falls in {drops_words(drops)}"
              + ("." if drops.settled else "; it is still falling at the end of the run.")
              + (f" {near}" if near else "")
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


class MatchedTime(NamedTuple):
    """A check run at another learning rate beside the main run at the same gradient-flow time t/τ = 2η·step (the
    check's step × its learning rate over the main run's, in the main run's steps), as far as both runs go
    (:func:`matched_time`)."""

    reach: float  # the last main-run step both runs cover
    steps: np.ndarray  # the main run's drops up to the reach
    check_steps: np.ndarray  # the check's own drops up to the reach, in the main run's steps (counted, not compared)
    levels: np.ndarray  # the loss at which each of the main run's drops up to the reach is placed (drop_levels)
    crossings: np.ndarray  # the first main-run step at which the main run is below each level
    check_crossings: np.ndarray  # the same for the check read on the main run's steps (NaN: not by the reach)
    pauses: np.ndarray  # (step, loss) of each of the main run's pauses up to the reach
    check_pauses: np.ndarray  # the same for the check, its steps in the main run's
    loss: float  # the main run's loss at the reach
    check_loss: float  # the check's loss there
    later: np.ndarray  # the main run's drops after the reach
    end: float  # the main run's last step
    check_settled: bool  # whether the check settled by its end (loss_curves.count_drops)


def drop_levels(loss, drops) -> np.ndarray:
    """The loss at which each drop of ``drops`` (``loss_curves.count_drops`` of ``loss``) is placed: the midpoint
    (start + end)/2 of its own stretch, which starts at loss[0] or the pause before it and ends at the pause after it
    or at loss[-1]. Each run's drops are placed at its own levels (its own pauses and final loss), so two runs' drop
    steps are one quantity only when both are read at the same levels (:func:`matched_time`)."""
    y = np.asarray(loss, dtype=np.float64)
    ends = np.concatenate([[y[0]], np.asarray(drops.pause_losses, dtype=np.float64), [y[-1]]])
    return ((ends[:-1] + ends[1:]) / 2)[:len(drops)]


def matched_time(steps, loss, drops, check_steps, check_loss, check_drops, scale: float) -> MatchedTime:
    """The main run (``steps``, ``loss``, its ``drops`` from ``loss_curves.count_drops``) and a check run at
    ``scale`` times its learning rate (``check_steps``, ``check_loss``, ``check_drops``) at the same gradient-flow
    time: the check's step k stands at the main run's step k·scale (t/τ = 2η·step). Both are read only up to the
    reach, the last main-run step both cover: min(last main step, last check step × scale); the losses there
    interpolated on each run's own steps.

    The drops are compared at the same levels, the main run's (:func:`drop_levels`: where its drops are placed): for
    each, the first main-run step ≤ reach at which each run is below it (``loss_curves.first_step_below``), the
    check read on the main run's steps (linear interpolation; at scale ½ its even steps exactly), so that both steps
    are integers of one grid and one quantity. The check's own drops (its own levels, its own final loss) are
    only counted."""
    steps, check_at = np.asarray(steps, dtype=np.float64), np.asarray(check_steps, dtype=np.float64) * scale
    loss = np.asarray(loss, dtype=np.float64)
    reach = float(min(steps[-1], check_at[-1]))

    def upto(x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return x[x <= reach]

    def pauses(d, k: float) -> np.ndarray:
        at = np.asarray(d.pause_steps, dtype=np.float64) * k
        return np.array([(s, L) for s, L in zip(at, d.pause_losses) if s <= reach]).reshape(-1, 2)

    def crossings(curve) -> np.ndarray:
        return np.array([loss_curves.first_step_below(curve, L, grid) for L in levels])

    main_steps = np.asarray(drops.steps, dtype=np.float64)
    grid = steps[steps <= reach]
    levels = drop_levels(loss, drops)[:upto(main_steps).size]
    return MatchedTime(reach=reach, steps=upto(main_steps), check_steps=upto(np.asarray(check_drops.steps) * scale),
                       levels=levels, crossings=crossings(loss[steps <= reach]),
                       check_crossings=crossings(np.interp(grid, check_at, np.asarray(check_loss, dtype=np.float64))),
                       pauses=pauses(drops, 1.0), check_pauses=pauses(check_drops, scale),
                       loss=float(np.interp(reach, steps, loss)),
                       check_loss=float(np.interp(reach, check_at, check_loss)),
                       later=main_steps[main_steps > reach], end=float(steps[-1]),
                       check_settled=bool(check_drops.settled))


def step_size_holds(m: MatchedTime) -> str:
    """Whether the main run's drops hold at a smaller step, from :func:`matched_time` (only as far as both runs go):
    :data:`DIFFERS` where the check makes more drops by the reach, or fewer and has settled; :data:`CANNOT_TELL`
    where it makes fewer and is still falling (the drop may come later at the smaller step), or where the main run
    makes a drop after the reach (the check does not get that far); else :data:`AGREES`."""
    n, k = len(m.steps), len(m.check_steps)
    if k > n or (k < n and m.check_settled):
        return DIFFERS
    return CANNOT_TELL if k < n or m.later.size else AGREES


def _step(x: float) -> str:
    """A step in the main run's steps as an integer, a half-step rounded up (a check at half the rate lands there)."""
    return f"{np.floor(x + 0.5):.0f}"


def lead_words(main, check) -> str:
    """How far the check crosses each level before the main run, from the two runs' crossing steps of the same
    levels: "1 and 4 steps earlier", "2 steps earlier and 1 step later", "at the same steps"; a level the check does
    not reach (NaN) is left out ("" where none is reached)."""
    def one(d: float) -> str:
        return f"{abs(d):.0f} step{'' if abs(d) == 1 else 's'} {'earlier' if d > 0 else 'later'}" if d else ""

    diffs = [int(round(a - b)) for a, b in zip(main, check) if np.isfinite(b)]
    if diffs and (all(d > 0 for d in diffs) or all(d < 0 for d in diffs)):
        return f"{_and([str(abs(d)) for d in diffs])} step{'' if diffs in ([1], [-1]) else 's'} " + (
            "earlier" if diffs[0] > 0 else "later")
    if diffs and not any(diffs):
        return f"at the same step{'s' if len(diffs) > 1 else ''}"
    return _and([one(d) or "at the same step" for d in diffs]) if diffs else ""


def matched_time_words(label: str, m: MatchedTime, ours: int) -> str:
    """Sentences on a check run at a smaller step beside the main run at the same gradient-flow time
    (:func:`matched_time`), as far as both go: the drops each makes there, the steps at which each first falls below
    the losses at which the main run's drops are placed (one quantity for both runs, :func:`lead_words`), the pauses
    and losses of each there, and whether the main run's count of ``ours`` drops holds (:func:`step_size_holds`)."""
    def at(x) -> str:
        return f"at {'step' if len(x) == 1 else 'steps'} {list_words([_step(s) for s in x])}" if len(x) else ""

    def paused(p) -> str:
        return _and([f"{L:.3f} at {_step(s)}" for s, L in p]) if len(p) else "nowhere"

    n, k = len(m.steps), len(m.check_steps)
    text = (f"At the same gradient-flow time (learning rate × step), as far as both runs go (the main run's step "
            f"{_step(m.reach)}), {label} makes {_count(k, 'drop')} against the main run's {_count(n, 'drop')}")
    if n:
        found = np.isfinite(m.check_crossings)
        theirs = (f"at step{'s' if n > 1 else ''} {_and([_step(c) for c in m.check_crossings])}" if found.all() else
                  _and([f"at step {_step(c)}" if ok else f"not by step {_step(m.reach)}"
                        for c, ok in zip(m.check_crossings, found)]))
        lead = lead_words(m.crossings, m.check_crossings)
        text += (f"; read on the main run's steps, it first falls below the loss{'es' if n > 1 else ''} at which the "
                 f"main run's drop{'s are' if n > 1 else ' is'} placed ({_and([f'{L:.3f}' for L in m.levels])}) "
                 f"{theirs} against the main run's {_and([_step(c) for c in m.crossings])}"
                 + (f" ({lead})" if lead else ""))
    if len(m.pauses) or len(m.check_pauses):
        text += f", pauses at loss {paused(m.check_pauses)} against {paused(m.pauses)}"
    text += f", and is at loss {m.check_loss:.3f} where the main run is at {m.loss:.3f}."
    verdict, plural = step_size_holds(m), "s" if ours != 1 else ""
    if verdict == AGREES:
        rest = (f"; the main run goes on to step {_step(m.end)} and makes no further drop" if m.reach < m.end else "")
        return text + f" So the count of {ours} drop{plural} holds with a smaller step as far as that run goes{rest}."
    if verdict == DIFFERS:
        return text + f" So the count of {ours} drop{plural} does not hold with a smaller step."
    if k < n:
        return text + (f" It is still falling, so whether it makes the main run's drop{'s' if n - k > 1 else ''} "
                       f"{at(m.steps[k:])} with the smaller step cannot be told from these runs.")
    return text + (f" The main run's drop{'s' if m.later.size > 1 else ''} {at(m.later)} "
                   f"come{'' if m.later.size > 1 else 's'} later than that, so whether the smaller step makes "
                   f"{'them' if m.later.size > 1 else 'it'} cannot be told from these runs.")


def check_words(ours: int, checks) -> str:
    """Sentences on the check runs: the drops each finds and where, whether it is still falling at its end, and
    whether the main run's count holds: for a run at a smaller step compared with the main run at the same
    gradient-flow time (its ``matched``, :func:`matched_time_words`), for other draws by :func:`drop_count_holds`."""
    def one(c) -> str:
        n, steps = int(c["drops"]), np.asarray(c["drop_steps"], dtype=np.float64)
        where = f" at step{'s' if steps.size > 1 else ''} {list_words(np.round(steps))}" if steps.size else ""
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
        what = "a smaller step" if kind == "step" else "other draws"
        single = "; ".join(f"{c['label']} {single_drop_verdict(int(c['drops']), c['settled'], c.get('moved', ()))}"
                           for c in group)
        said = (f"Run again with {what}, ATTN_M shows: {'; '.join(one(c) for c in group)} (against the paper's "
                f"single drop: {single}). ")
        if kind == "step":
            text.append(said + " ".join(matched_time_words(c["label"], c["matched"], ours) for c in group))
            continue
        holds = drop_count_holds(ours, group)
        text.append(said + {AGREES: f"So the count of {ours} drop{plural} holds with {what}.",
                            DIFFERS: f"So the count of {ours} drop{plural} does not hold with {what}.",
                            CANNOT_TELL: f"A run still falling at its end may make another drop, so whether the "
                                         f"count of {ours} drop{plural} holds with {what} cannot be told from these "
                                         "runs."}[holds])
    return " ".join(text)
