"""Appendix: training on every context length at once (the reference's ``--vary_len``; an appendix figure of the
paper, its number and settings unconfirmed).

ATTN_M and ATTN_S trained with the loss averaged over every prefix of each sequence, so that one model predicts from
contexts of every length. The theory: the saddle losses L(M_0) … L(M_D) of the length-averaged loss
(``theory.vary_len_plateau_losses``), beside the fixed-length ones of Figures 1b and 3a (``theory.plateau_losses``)
for contrast. Measured: the rest at each saddle (``loss_curves.saddle_levels``, the one rule: the saddle
whose band, ``loss_curves.REST_BAND`` of the gap to the neighbouring level, holds the rest) and the final loss.
ATTN_M has no saddles between M_0 and M_D, so only those two are reported for it. Each rest, a training loss on
the run's P sequences, is judged against its level (:func:`rest_verdict`) with the errors of that training set
(:func:`rest_errors`): twice the standard error of the mean over the P sequences (``uncertainty.mean_loss_error``:
their whitened task vectors fix part of it), and below the level the further drop that fitting the saddle's weights to
them gives. Where a rest does not agree, the page gives the training loss at the theory's weights on the run's own set
beside it (:func:`draw_words`): how much of the gap is the draw of the training set (:func:`set_draw`).
"""

from __future__ import annotations

import math

import numpy as np

from ... import theory
from ...analysis import loss_curves
from .. import presets, uncertainty
from ..commands import train_command
from ..output import MarkdownTable, subscript
from ..output import words as list_words
from ..published import rules
from .common import preset_blocks
from .common.attn_s_run import describe, join
from .common.frame import padded, settings_attrs
from .common.rests import rest_errors, rest_verdict
from .common.trainer import train

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    # our choice (the appendix settings are unconfirmed): Figure 1b's ATTN_M and Figure 3a's ATTN_S with P = 5000;
    # --vary_len divides outputs by the prefix length n, which slows learning ~n-fold, so lr (ATTN_M: x30;
    # ATTN_S: x10) and the ATTN_S init (x3) are raised
    # (--vary_len exists from the jan2025 code on, so both runs use that era). ATTN_S's paper run is 40001 steps: at
    # seed 10 its fourth drop comes at step 23844 (in a 100001-step run), past a 20001-step run's end
    "quick": dict(attn_m=dict(preset_blocks.ATTN_M_PAPER, lr=0.03, epoch=3001, trainset_size=1000,
                              init_scheme="jan2025", vary_len=True),
                  attn_s=dict(preset_blocks.ATTN_S_PAPER, init=3e-2, lr=0.2, epoch=6001, trainset_size=1000,
                              init_scheme="jan2025", vary_len=True), seed=10),
    "paper": dict(attn_m=dict(preset_blocks.ATTN_M_PAPER, lr=0.03, init_scheme="jan2025", vary_len=True),
                  attn_s=dict(preset_blocks.ATTN_S_PAPER, init=3e-2, lr=0.2, epoch=40001, init_scheme="jan2025",
                              trainset_size=5000, vary_len=True), seed=10),
}
TOLERANCES = [preset_blocks.PLATEAUS]
# other settings the page must stay true at (each cheap at the quick preset): another D and H, and shorter contexts
KNOB_CASES = (dict(in_dim=3, head_num=4), dict(seq_len=12, epoch=2001))
MODELS = ("attn_m", "attn_s")
LABELS = {"attn_m": "ATTN_M", "attn_s": "ATTN_S"}



def runs(S: dict) -> dict:
    """The ATTN_M and the ATTN_S run (``attn_m``, ``attn_s``), each with ``vary_len``."""
    return preset_blocks.sweep(S)


def compute(S: dict):
    """Both runs' training losses, averaged over context lengths (``train_loss``: model × step; the shorter run NaN
    past its end), the theory's length-averaged saddle losses (``plateau_theory``: model × m) and the fixed-length
    ones (``plateau_theory_fixed``), the level of the flat stretch at each saddle (``plateau_level``: NaN where the
    run does not rest there), the final loss, and each run's eigenvalues (``eigenvalue``: model × direction)."""
    import xarray as xr

    done = train(runs(S), S)
    losses = [done[k].history.train_loss for k in MODELS]
    averaged = [theory.vary_len_plateau_losses(r.datasets.cov, r.config.seq_len, normalize=r.config.normalize)
                for r in done.values()]
    fixed = [theory.plateau_losses(r.datasets.cov, r.config.N) for r in done.values()]
    found = [loss_curves.saddle_levels(L, lv) for L, lv in zip(losses, averaged)]
    errors = [rest_errors(r.datasets.train, r.datasets.cov, r.config.seq_len, r.config.normalize)
              for r in done.values()]
    steps = max((r.history.step for r in done.values()), key=len)
    M = max(len(v) for v in averaged)
    ds = xr.Dataset(
        {"train_loss": (("model", "step"), padded(losses, len(steps))),
         "plateau_theory": (("model", "m"), padded(averaged, M)),
         "plateau_theory_fixed": (("model", "m"), padded(fixed, M)),
         "plateau_level": (("model", "m"), padded(found, M)),
         "rest_se": (("model", "m"), padded([e[0] for e in errors], M)),
         "rest_optimism": (("model", "m"), padded([e[1] for e in errors], M)),
         "rest_own": (("model", "m"), padded([e[2] for e in errors], M)),
         "rest_se_spread": (("model", "m"), padded([e[3] for e in errors], M)),
         "whitened": ("model", [int(uncertainty.whitened_task_vectors(r.datasets.train) is not None)
                                for r in done.values()]),
         "shared_set": int(np.array_equal(np.asarray(done[MODELS[0]].datasets.train.X),
                                          np.asarray(done[MODELS[1]].datasets.train.X))),
         "final_loss": ("model", [float(L[-1]) for L in losses]),
         "eigenvalue": (("model", "direction"),
                        padded([theory.spectrum(r.datasets.cov)[0] for r in done.values()], M - 1))},
        coords={"model": list(MODELS), "step": steps, "m": np.arange(M), "direction": np.arange(1, M)},
        attrs=settings_attrs(S, engine=done["attn_s"].engine, seeds=S["seed"],
                             runs={k: r.config.to_dict() for k, r in done.items()}))
    ds.attrs.update(band=loss_curves.REST_BAND, published=int(presets.is_published(NAME, S)),
                    commands="\n".join(train_command(done[k].config) for k in MODELS))
    ds.train_loss.attrs["description"] = "training loss averaged over prefix lengths (NaN past the shorter run's end)"
    ds.plateau_theory.attrs["description"] = "saddle losses L(M_m) of the length-averaged loss"
    ds.plateau_theory_fixed.attrs["description"] = "saddle losses L(M_m) at the full length (Figures 1b and 3a)"
    ds.plateau_level.attrs["description"] = (f"level of the first rest at saddle M_m (saddle_levels, band "
                                             f"{loss_curves.REST_BAND:.3g})")
    ds.rest_se.attrs["description"] = ("standard error of the training loss at saddle M_m about L(M_m): from the "
                                       "run's per-sequence losses (mean over prefixes) at the theory's weights there, "
                                       "the task vectors' whitening taken out (rest_errors)")
    ds.rest_se_spread.attrs["description"] = ("relative standard error of rest_se itself, from the same set "
                                              "(rest_errors)")
    ds.rest_own.attrs["description"] = ("training loss at the theory's weights of saddle M_m on the run's own "
                                        "training set (rest_errors)")
    ds.whitened.attrs["description"] = "1 where the run's training set has whitened task vectors, else 0"
    ds.shared_set.attrs["description"] = "1 where both runs train on the same sequences (one draw), else 0"
    ds.rest_optimism.attrs["description"] = ("how much fitting the saddle's weights to the run's training set lowers "
                                             "its loss there (rest_errors)")
    return ds


def by_the_draw(said: str | None, share: float | None) -> bool:
    """Whether a rest that does not agree with its level (``said``, :func:`rest_verdict`) lies off it by the draw of
    its training set: the training loss at the theory's weights on that same set makes at least half of the gap
    (``share``, :func:`set_draw`, ≥ ½), so the gap is the set's, not the run's weights' (the theory's weights sit
    there too). False for a rest that agrees or has no share."""
    return said not in (None, uncertainty.AGREES) and share is not None and share >= 0.5


def _verdicts(ds) -> dict:
    """(model, m) → (verdict, band, band with the fit's margin, whether by the set's draw) of every rest shown
    (:func:`rest_verdict`, :func:`by_the_draw`)."""
    out = {}
    for key in MODELS:
        at = ds.sel(model=key)
        for m in _shown(ds, key):
            se, opt = float(at.rest_se.sel(m=m)), float(at.rest_optimism.sel(m=m))
            rest, level = float(at.plateau_level.sel(m=m)), float(at.plateau_theory.sel(m=m))
            said = rest_verdict(rest, level, se, opt)
            if said is not None:
                band = uncertainty.difference_band(se)
                drawn = by_the_draw(said, set_draw(rest, level, float(at.rest_own.sel(m=m))))
                out[key, m] = (said, band, band + opt if rest < level else band, drawn)
    return out


def states_same_fact(a: dict, b: dict) -> bool:
    """Whether two rests state one fact, whatever their verdicts: they lie on the same training set (``set``) at one
    level (``level``) with one loss at the theory's weights on that set (``own``): the same number on the same
    sequences, as ATTN_M and ATTN_S at M_0 on a shared set (both at zero weights) or at M_4 (one predictor). Rests at
    different levels are different predictions, even where one draw of the set moves both (:func:`by_the_draw`: said
    apart, not merged). Levels and losses are the same where they agree to 1e-9 relative (one number computed
    twice)."""
    return a["set"] == b["set"] and all(math.isclose(a[k], b[k], rel_tol=1e-9) for k in ("level", "own"))


def _facts(ds, judged: dict) -> dict:
    """(model, m) → the (model, m) of the first rest that states its fact (:func:`states_same_fact`,
    ``rules.first_of_each_fact``), for every rest judged (:func:`_verdicts`), in the page's order."""
    rests = list(judged)
    said = [dict(set=_set_of(ds, k), level=float(ds.plateau_theory.sel(model=k, m=m)),
                 own=float(ds.rest_own.sel(model=k, m=m))) for k, m in rests]
    first = rules.first_of_each_fact(len(rests), lambda i, j: states_same_fact(said[i], said[j]))
    return {rest: rests[f] for rest, f in zip(rests, first)}


def _set_of(ds, key: str) -> str:
    """Which training set ``key`` trains on: one name for both runs where they share it (``shared_set``)."""
    return "shared" if int(ds.get("shared_set", 0)) else key


def _shown(ds, key: str) -> list[int]:
    """The saddles reported for ``key``: every m for ATTN_S, only M_0 and M_D for ATTN_M (no saddles between)."""
    D = int(np.isfinite(ds.plateau_theory.sel(model=key)).sum()) - 1
    return [0, D] if key == "attn_m" else list(range(D + 1))


def numbers(ds) -> list[dict]:
    """``numbers.json``: each plateau the run rests on beside its length-averaged level, and each final loss (ATTN_M's
    beside its minimum; ATTN_S's alone, as it need not have learned every direction); each plateau with its verdict
    (:func:`rest_verdict`) and the band it applied (``band``: 2 standard errors; ``unresolved``: the fit's margin
    below the level, where the rest lies below it; ``difference``: rest − level); rests that state one fact
    (:func:`states_same_fact`: at one level with one loss at the theory's weights on one training set) are counted
    once: the first, the others restate it (``restates``, not counted again), whatever their verdicts."""
    rows, judged = [], _verdicts(ds)
    facts, named = _facts(ds, judged), {}
    for key in MODELS:
        at, label = ds.sel(model=key), f"{LABELS[key]} vary_len"
        for m in _shown(ds, key):
            got = float(at.plateau_level.sel(m=m))
            if np.isfinite(got):
                drawn = judged[key, m][3]  # off its level by the draw of its training set
                row = dict(key=f"plateau.{key}.M{m}",
                           quantity=f"{label}: plateau L(M_{m})" + (", off its level by the training set's draw"
                                                                    if drawn else ""),
                           theory=at.plateau_theory.sel(m=m), reproduced=got, verdict=judged[key, m][0],
                           difference=got - float(at.plateau_theory.sel(m=m)), band=judged[key, m][1],
                           unresolved=judged[key, m][2] - judged[key, m][1], unit="loss")
                named[key, m] = row["quantity"]
                if facts[key, m] != (key, m):  # one fact counted once: the later rests restate the first
                    row.update(restates=[named[facts[key, m]]])
                rows.append(row)
        D = _shown(ds, key)[-1]
        rows.append(dict(key=f"final_loss.{key}", quantity=f"{label}: final loss",
                         theory=at.plateau_theory.sel(m=D) if key == "attn_m" else None, reproduced=at.final_loss))
    return rows


def table(ds) -> MarkdownTable:
    """Per model and saddle: the length-averaged and the fixed-length level, the training loss at the theory's weights
    on the run's own training set, the plateau this run settled on, and its band and verdict beside the
    length-averaged level (:func:`rest_verdict`; "–" where the run does not rest)."""
    judged = _verdicts(ds)

    def band(key, m):  # "0.0082", or "0.0082, cannot tell to 0.0090" where fitting widens it
        if (key, m) not in judged:
            return None
        _, b, wider, _ = judged[key, m]
        return f"{b:.4f}" + (f", cannot tell to {wider:.4f}" if wider > b else "")

    return MarkdownTable(
        [dict(model=LABELS[key], level=f"$L(\\mathcal{{M}}_{{{m}}})$",
              averaged=float(ds.plateau_theory.sel(model=key, m=m)),
              fixed=float(ds.plateau_theory_fixed.sel(model=key, m=m)),
              own=float(ds.rest_own.sel(model=key, m=m)),
              ours=float(ds.plateau_level.sel(model=key, m=m)), band=band(key, m),
              verdict=_verdict_words(judged.get((key, m)))) for key in MODELS for m in _shown(ds, key)],
        {"model": "model", "level": "level", "averaged": "theory, averaged over lengths",
         "fixed": "theory, fixed length", "own": "theory's weights, this training set", "ours": "this run",
         "band": "band (±)", "verdict": "verdict"},
        {"averaged": ".4f", "fixed": ".4f", "own": ".4f", "ours": ".4f"})


def _verdict_words(judged) -> str | None:
    """A table cell's verdict: "differs (the set's draw)" where the set's draw makes the gap (:func:`by_the_draw`)."""
    if judged is None:
        return None
    return f"{judged[0]} (the set's draw)" if judged[3] else judged[0]


def rest_verdict_words(ds) -> str:
    """The page's sentence on the table's verdicts (:func:`rest_verdict`): how many rests agree with their
    length-averaged levels, and which cannot tell or differ; empty where the run rests nowhere."""
    judged = _verdicts(ds)
    if not judged:
        return ""
    facts = _facts(ds, judged)
    counted = [k for k, first in facts.items() if first == k]
    by = {v: [f"{LABELS[k]} at M_{m}" for (k, m), (said, _, _, drawn) in judged.items() if said == v and not drawn]
          for v in uncertainty.VERDICTS}
    sizes = list_words(sorted({int(r["trainset_size"]) for r in _runs(ds).values()}))
    text = (f"Each rest is a training loss on its run's P sequences (P = {sizes}): its band is twice the standard "
            f"error of their mean (from their losses at the saddle's theory weights{_whitened_words(ds)}), widened "
            "below the level by what fitting the weights to them lowers the loss (cannot tell there); "
            f"{sum(judged[k][0] == uncertainty.AGREES for k in counted)} of {len(counted)} rests agree"
            + _restating_words(facts))
    for v in (uncertainty.CANNOT_TELL, uncertainty.DIFFERS):
        if by[v]:
            text += f"; {join(by[v])}: {v}"
    return text + _draw_count(ds, judged) + "."


def _restating_words(facts: dict) -> str:
    """The clause on the rests that restate the fact of an earlier one (:func:`_facts`): which, and whose; empty
    where each rest states a fact of its own."""
    later: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for rest, first in facts.items():
        if rest != first:
            later.setdefault(first, []).append(rest)
    if not later:
        return ""
    said = [f"{join([_rest_name(r) for r in rests])} restate{'s' if len(rests) == 1 else ''} {_rest_name(first)}"
            for first, rests in later.items()]
    return (f", each fact counted once ({'; '.join(said)}: a rest on the training set of an earlier one states "
            "its fact where both lie at one level with one loss at the theory's weights on that set)")


def _rest_name(rest: tuple[str, int]) -> str:
    """A rest as the page names it: "ATTN_S at M_3"."""
    return f"{LABELS[rest[0]]} at M_{rest[1]}"


def _draw_count(ds, judged) -> str:
    """The clause on the rests off their levels by the draw of their training set (:func:`by_the_draw`): how many,
    and by how many draws (one where they all lie on one set, ``shared_set``); empty where there are none."""
    drawn = [(k, m) for (k, m), (said, *_, by) in judged.items() if by]
    if not drawn:
        return ""
    sets = {_set_of(ds, k) for k, _ in drawn}
    said = {judged[k][0] for k in drawn}
    what = join(sorted(said)) if len(said) > 1 else said.pop()
    draws = ("one draw of the training set" + (" (both runs share it)" if sets == {"shared"} and
                                                len({k for k, _ in drawn}) > 1 else "")
             if len(sets) == 1 else f"the draws of {len(sets)} training sets")
    return (f"; {join([f'{LABELS[k]} at M_{m}' for k, m in drawn])}: {what}, {'all ' if len(drawn) > 1 else ''}"
            f"by {draws}, which makes at least half of {'each' if len(drawn) > 1 else 'the'} gap (next)")


def _whitened_words(ds) -> str:
    """The clause on the whitened task vectors of the runs' training sets (``whitened``): their fixed sample moments
    fix part of the loss, which the standard error leaves out (``uncertainty.mean_loss_error``); empty where no
    run's set is whitened."""
    white = [LABELS[k] for k in MODELS if int(ds.whitened.sel(model=k))]
    if not white:
        return ""
    whose = "" if len(white) == len(MODELS) else f" of {join(white)}"
    return (f"; the task vectors{whose} are whitened across the set, which fixes the part of the losses linear in "
            "their mean and covariance, so that part is left out")


def set_draw(rest: float, level: float, own: float) -> float | None:
    """The share of a rest's gap to its level, rest − L(M_m), that the draw of its training set makes: (own −
    L(M_m)) / (rest − L(M_m)), with ``own`` the training loss at the theory's weights of M_m on the run's own sequences
    (:func:`rest_errors`), whose population value is L(M_m). The remainder, rest − own, lies between the run's
    weights and the theory's on the same sequences (no sampling error between them). None where the run does not
    rest there (NaN) or rests exactly at the level."""
    if rest is None or not np.isfinite(rest) or rest == level:
        return None
    return float((own - level) / (rest - level))


def draw_words(ds) -> str:
    """The page's sentence on the rests that do not agree with their levels (:func:`rest_verdict`): the training
    loss at the theory's weights on the run's own set, in standard errors from the level, the share of each gap that
    this draw makes (:func:`set_draw`), how far the rests lie from that loss (:func:`upper_bound`) and how uncertain
    those standard errors are themselves (``rest_se_spread``). Empty where every rest agrees."""
    rows = []
    for (key, m), (said, *_) in _verdicts(ds).items():
        at = ds.sel(model=key, m=m)
        rest, level, own = (float(at[v]) for v in ("plateau_level", "plateau_theory", "rest_own"))
        share = set_draw(rest, level, own)  # a rest that does not agree lies off its level: a share
        if said != uncertainty.AGREES and share is not None:
            rows.append((f"{LABELS[key]} at M_{m}", own, (own - level) / float(at.rest_se), share, rest - own,
                         float(at.rest_se_spread)))
    if not rows:
        return ""
    listed = join([f"{where} {own:.4f} ({abs(k):.1f} standard errors {'below' if k < 0 else 'above'} its level)"
                   for where, own, k, *_ in rows])
    spreads = sorted(round(100 * r[-1]) for r in rows)
    spread = f"{spreads[0]} %" if spreads[0] == spreads[-1] else f"{spreads[0]}–{spreads[-1]} %"
    shares = sorted(round(100 * part) for *_, part, _, _ in rows)
    span = f"{shares[0]} %" if shares[0] == shares[-1] else f"{shares[0]}–{shares[-1]} %"
    return (f"Where a rest does not agree, the theory's weights themselves give, on the run's own training set, "
            f"{listed}: the draw of the training set makes {span} of "
            f"{'that gap' if len(rows) == 1 else 'those gaps'}, and each rest lies within "
            f"{upper_bound(max(abs(r[4]) for r in rows))} of that loss. Those standard errors come from this one set: "
            f"by the spread of its squared residuals they are themselves uncertain by about {spread}, and by more, as "
            "a set drawn low also estimates its own error low, so the counts of standard errors are rough.")


def upper_bound(x: float, digits: int = 4) -> str:
    """``x`` printed as a bound it does not exceed: rounded up (never to nearest) at ``digits`` decimals, ⌈x·10^k⌉/10^k
    (0.00054 → "0.0006"; a value already at that precision stays, 0.0005 → "0.0005")."""
    scale = 10 ** digits
    return f"{math.ceil(round(x * scale, 6)) / scale:.{digits}f}"


def _runs(ds) -> dict:
    import json

    return json.loads(ds.attrs["runs"])


def _rests(ds) -> str:
    """Where each run rests, in words: the saddles whose length-averaged level a flat stretch of the run sits at."""
    parts = []
    for key in MODELS:
        seen = [f"M_{m}" for m in _shown(ds, key) if np.isfinite(float(ds.plateau_level.sel(model=key, m=m)))]
        level = "the level" if len(seen) == 1 else "the levels"
        parts.append(f"{LABELS[key]} rests at {level} of {join(seen)}" if seen else
                     f"{LABELS[key]} rests at none of its levels "
                     f"(within {loss_curves.rest_band_words(ds.attrs['band'])})")
    return "In this run " + "; ".join(parts) + "."


def escape_estimate(first_drop: float, eigenvalues, d: int) -> float:
    """The step of drop d (direction e_d, 1-based) by escape times ∝ 1/λ_d², scaled from the run's own first drop:
    t_d ≈ t_1 · (λ_1/λ_d)² (an order of magnitude: the theory's escape-time law for rank-one heads)."""
    lam = np.asarray(eigenvalues, dtype=np.float64)
    return float(first_drop * (lam[0] / lam[d - 1]) ** 2)


def unlearned(ds) -> str:
    """What each run learned, in words, where it did not learn everything: the drops it made (``loss_curves.drop_steps``
    between its length-averaged levels, the page's one drop rule) and its last one; then, where the first unlearned
    direction's drop by :func:`escape_estimate` lies beyond the run's end, that estimate (the run may end before
    the drop), and otherwise that the direction is not learned within the run and no cause is tested. Empty where
    every run learned every direction it is shown with."""
    parts = []
    for key in MODELS:
        loss = ds.train_loss.sel(model=key).dropna("step")
        levels = ds.plateau_theory.sel(model=key).dropna("m").values[_shown(ds, key)]
        drops = loss_curves.drop_steps(loss.values, levels, loss.step.values)
        made, end = int(np.argmin(np.isfinite(drops))), int(loss.step.values[-1])  # the drops made, in order
        if np.isfinite(drops).all():
            continue
        if made == 0:
            parts.append(f"{LABELS[key]} makes no drop within its {end} steps")
            continue
        lam = ds.eigenvalue.sel(model=key).dropna("direction").values
        guess, nxt = escape_estimate(drops[0], lam, made + 1), f"e{subscript(made + 1)}"
        said = (f"{LABELS[key]} learns {made} of its {len(drops)} directions within its {end} steps, the last at "
                f"step {int(drops[made - 1])}")
        if guess > end:
            said += (f": escape times ∝ 1/λ_d², scaled from its first drop at step {int(drops[0])}, put the drop of "
                     f"{nxt} near step {guess:.0f}, beyond the run's end")
        else:
            said += f": {nxt} is not learned within the run, and no cause of that is tested here"
        parts.append(said)
    return ("In this run " + "; ".join(parts) + ".") if parts else ""


def words(ds) -> dict:
    """The values and sentences the page's prose quotes, by name (for ``output.glue``)."""
    runs = _runs(ds)
    m, s = runs["attn_m"], runs["attn_s"]
    return dict(rank_s=s["rank"], n_max=s["seq_len"], N_max=s["seq_len"] - 1,
                rest_tol=loss_curves.REST_TOL, tol=loss_curves.rest_band_words(ds.attrs["band"]),
                eigenvalues=list_words(np.round(ds.eigenvalue.sel(model="attn_s").dropna("direction").values, 4)),
                settings_m=describe(m), settings_s=describe(s), rests=_rests(ds), unlearned=unlearned(ds),
                judged=rest_verdict_words(ds), draw=draw_words(ds))


def plot(ds):
    """The training loss of each model (left ATTN_M, right ATTN_S) with the theory's length-averaged levels (grey,
    dotted, labelled on the right: tr Λ and L* for ATTN_M, every saddle for ATTN_S) and the fixed-length levels
    (faint blue) for comparison."""
    import matplotlib.pyplot as plt

    from ..plotting import plateau_labels, theory_axis

    runs = _runs(ds)
    fig, axes = plt.subplots(1, 2, figsize=(6.6, 3.3), sharey=True)
    titles = {"attn_m": "ATTN$_\\mathrm{M}$, vary_len",
              "attn_s": f"ATTN$_\\mathrm{{S}}$ (rank {runs['attn_s']['rank']}), vary_len"}
    for ax, key in zip(axes, MODELS):
        loss = ds.train_loss.sel(model=key).dropna("step")
        averaged = ds.plateau_theory.sel(model=key).dropna("m").values
        fixed = ds.plateau_theory_fixed.sel(model=key).dropna("m").values
        ax.plot(loss.step.values, loss.values, color="black", linewidth=1.4)
        ax.set_xlim(loss.step.values[0], loss.step.values[-1])
        ax.set_ylim(0, 1.08)
        ax.set_title(titles[key])
        ax.set_xlabel("step")
        for level in (fixed[1:] if key == "attn_s" else fixed[-1:]):
            ax.axhline(level, color="tab:blue", alpha=0.25, linewidth=0.8, zorder=0)
        if key == "attn_s":
            theory_axis(ax, averaged, plateau_labels(len(averaged)))
        else:
            theory_axis(ax, averaged[[0, -1]], ["$\\mathrm{tr}\\,\\Lambda$", "$L^*$"])
    axes[0].set_ylabel("training loss\n(mean over lengths)")
    fig.tight_layout()
    return fig
