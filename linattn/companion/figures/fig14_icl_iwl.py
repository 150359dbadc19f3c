"""Figure 14: in-context versus in-weight learning (paper appendix).

One ATTN_M run per in-context fraction c (``icl_values``): a fraction c of the training sequences carry a fresh random
task vector (solvable only in context), the rest share one fixed task vector (solvable from the weights alone). Each
run records its training loss and two test losses, on held-out sequences with the fixed task vector (in-weight) and
with fresh ones (in-context). The theory: the minimum L* (``theory.loss_star``; with white covariance
(D+1)/(N+D+1)), which the in-context test loss reaches when every sequence is in-context (c = 1). At the published
settings the landmarks read off the published panels (``PUBLISHED_READINGS``) are set beside ours
(:func:`compare_with_published`) and drawn on the panels (:func:`published_landmarks`).
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from ... import theory
from ...analysis import loss_curves
from .. import presets, published, uncertainty
from ..commands import train_command
from ..output import MarkdownTable, prose_text
from ..output import words as list_words
from ..plotting import panel_grid, theory_lines, top_title
from ..published.readings import Image, Reading
from .common import end_point, preset_blocks
from .common.attn_s_run import describe, join
from .common.frame import settings_attrs
from .common.trainer import trained

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    "quick": dict(preset_blocks.WHITE_ATTN_M, lr=1e-3, epoch=2500, trainset_size=500, testset_size=500,
                  icl_values=[0.0, 0.5, 1.0], seed=10),
    "paper": dict(preset_blocks.WHITE_ATTN_M, lr=5e-4, epoch=5000, trainset_size=5000, testset_size=5000,
                  icl_values=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0], seed=10),
}
# Settings of a reader's own the page must stay true at (each a few seconds at the quick preset).
KNOB_CASES = (dict(in_dim=3, head_num=4, icl_values=[0.0, 1.0], epoch=1501),
              dict(seed=3, trainset_size=300, testset_size=200, icl_values=[0.3, 0.7], epoch=1201))
# The README's "Reproduction at a glance" rows of this figure: (the paper's figure, what is shown, the keys of
# its numbers.json rows; a|b: the first that exists), checked by python -m linattn.companion.readme
README_ROWS = (
    ("14, c = 1", "final in-context test loss", ("final_test_icl.c_1",)),
)
TOLERANCES = [(r"final_test_icl\.c_1", "abs", preset_blocks.PLATEAU_TOLERANCE)]
# the names (in this module) of the published readings and the rules that compare and draw them
PUBLISHED = ("PUBLISHED_IMAGE", "PUBLISHED_READINGS", "compare_with_published", "published_landmarks")
CURVES = {"train": "train_loss_over_start", "iwl": "test_iwl", "icl": "test_icl"}  # plotting's names → variables



def runs(S: dict) -> dict:
    """One run per in-context fraction c (``icl_values``), in their order."""
    return preset_blocks.sweep(S)


def compute(S: dict):
    """Every run's curves over ``icl`` (the in-context fraction c) × ``step``: the training loss (``train_loss``) and
    the same divided by its first value (``train_loss_over_start``, what the figure draws), the in-weight and the
    in-context test loss (``test_iwl``, ``test_icl``); per c the same three losses at the least-squares end point
    of the run's own training set (``end_train_loss``, ``end_test_iwl``, ``end_test_icl``: t → ∞,
    ``common.end_point``; NaN where the training loss is flat); the theory's minimum ``loss_star``; the
    settings, seed, engine and each run's settings (by ``icl=<c>``) and command as attributes."""
    import xarray as xr

    done = trained(runs(S), S)  # one per c, in the order of icl_values
    train = np.array([r.history.train_loss for r in done])
    first = done[0]
    ends = [end_point.end_point(r) for r in done]
    ds = xr.Dataset(
        {"train_loss": (("icl", "step"), train),
         "train_loss_over_start": (("icl", "step"), train / train[:, :1]),
         "test_iwl": (("icl", "step"), np.array([r.history.test_iwl for r in done])),
         "test_icl": (("icl", "step"), np.array([r.history.test_icl for r in done])),
         "loss_star": theory.loss_star(first.datasets.cov, first.config.N),
         "standard_error": (("icl", "curve", "weights"), np.array([_standard_errors(r) for r in done])),
         **{f"end_{k}": ("icl", [np.nan if e[k] is None else e[k] for e in ends])
            for k in ("train_loss", "test_iwl", "test_icl")}},
        coords={"icl": [float(c) for c in S["icl_values"]], "step": first.history.step, "curve": list(CURVES),
                "weights": list(WEIGHTS)},
        attrs=settings_attrs(S, engine=first.engine, seeds=S["seed"],
                             runs={f"icl={r.config.icl:g}": r.config.to_dict() for r in done}))
    ds.attrs.update(published=int(presets.is_published(NAME, S)),
                    commands="\n".join(train_command(r.config) for r in done))
    ds.icl.attrs["description"] = "in-context fraction c: the share of training sequences with a fresh task vector"
    ds.test_iwl.attrs["description"] = "loss on held-out sequences with the fixed task vector (in-weight)"
    ds.test_icl.attrs["description"] = "loss on held-out sequences with fresh task vectors (in-context)"
    ds.end_test_iwl.attrs["description"] = ("in-weight test loss at the least-squares end point (t → ∞) of the "
                                            "training loss on ATTN_M's features (common.end_point)")
    ds.end_test_icl.attrs["description"] = "in-context test loss at the same end point"
    ds.end_train_loss.attrs["description"] = "training loss at the same end point"
    ds.standard_error.attrs["description"] = ("standard error of each loss (the training loss over its start as drawn) "
                                              "from its per-sequence losses at the initial and the final weights")
    return ds


WEIGHTS = ("start", "final")  # the weights whose per-sequence losses give a loss its standard error


def _standard_errors(result) -> list:
    """[[se at the start, se at the end] for train (over its first value), iwl, icl]: the standard error of each loss
    from its per-sequence losses by ``uncertainty.mean_loss_error`` (which takes out what the whitened task vectors of
    a set drawn at icl = 1 fix: the in-context test set's, and the training set's at c = 1); NaN for a set the run
    lacks."""
    first = float(result.history.train_loss[0])
    out = []
    for curve, which in (("train", "train"), ("iwl", "test_iwl"), ("icl", "test_icl")):
        scale = first if curve == "train" else 1.0
        if getattr(result.datasets, which, None) is None:
            out.append([np.nan, np.nan])
            continue
        seqs = getattr(result.datasets, which)
        out.append([uncertainty.mean_loss_error(loss, seqs) / scale for loss in _per_sequence_losses(result, which)])
    return out


def _per_sequence_losses(result, which: str) -> list[np.ndarray]:
    """The per-sequence losses of the run's set ``which`` at its initial and its final weights: for linear attention
    from the set's features, computed once for both (:func:`.common.end_point.per_sequence_losses`), else
    ``uncertainty.per_sequence_losses`` (the model's own prediction)."""
    from ...models import build_model

    cfg = result.config
    if cfg.model not in ("attnM", "attnS") or cfg.softmax or cfg.vary_len:
        return [uncertainty.per_sequence_losses(result, which, w) for w in ("init", "final")]
    seqs = getattr(result.datasets, which)
    T = end_point.sequence_features(seqs, cfg.normalize)
    return [end_point.per_sequence_losses(model, seqs, T)
            for model in (build_model(cfg.model, result.init), result.model)]


def sampling(ds) -> dict:
    """c → {curve: ``published.rules.Sampling``}: each curve's kind (the training loss is biased, the tests are not),
    its standard errors at the start and the end, as the published comparison takes them, and whether its test sets
    are the published ones (``same_draws``: a run with the authors' random numbers, ``draws="reference"``, draws the
    same sequences; our step-0 test losses then match the published ones to a few thousandths, far inside the √2·se
    two independent test sets would differ by)."""
    def known(x) -> float | None:
        return float(x) if np.isfinite(x) else None

    runs = _runs(ds)
    same = {float(json_run["icl"]): json_run.get("draws") == "reference" for json_run in runs.values()}
    return {float(c): {k: published.rules.Sampling("train" if k == "train" else "test",
                                                   **{w: known(ds.standard_error.sel(icl=c, curve=k, weights=w))
                                                      for w in WEIGHTS}, same_draws=same.get(float(c), False))
                       for k in CURVES} for c in ds.icl.values}


def curves(ds) -> dict:
    """The curves by c as the plotting and the published comparison take them: {c: {"train", "iwl", "icl"}}."""
    return {float(c): {k: ds[v].sel(icl=c).values for k, v in CURVES.items()} for c in ds.icl.values}


def _slug(c: float) -> str:
    return published.rules.slug(f"c={c:g}")


def comparison(ds) -> list[dict]:
    """Each published panel's landmarks beside ours (only at the published settings: [] otherwise)."""
    if not ds.attrs["published"]:
        return []
    return compare_with_published(curves(ds), ds.step.values, sampling(ds))


def numbers(ds) -> list[dict]:
    """``numbers.json``: per c the final training loss over its start and the final in-weight and in-context test
    losses (at c = 1 beside L*), then the comparison with the published panels."""
    rows = []
    for c in ds.icl.values:
        at, c = ds.sel(icl=c), float(c)
        rows += [dict(key=f"final_train_over_start.{_slug(c)}", quantity=f"c={c:g}: final training loss / start",
                      reproduced=at.train_loss_over_start[-1]),
                 dict(key=f"final_test_iwl.{_slug(c)}", quantity=f"c={c:g}: final in-weight test loss",
                      reproduced=at.test_iwl[-1]),
                 dict(key=f"final_test_icl.{_slug(c)}", quantity=f"c={c:g}: final in-context test loss",
                      theory=ds.loss_star if c == 1 else None, reproduced=at.test_icl[-1],
                      standard_error=float(at.standard_error.sel(curve="icl", weights="final")) if c == 1 else None)]
    return rows + published.page.number_rows(comparison(ds))


def end_at_loss_star(ds) -> str:
    """Where the in-context test loss of the all-in-context run (c = 1) ends beside L*, judged in twice its standard
    error (``uncertainty``: the theory has none); "" where this run has no c = 1."""
    ones = [c for c in ds.icl.values if np.isclose(float(c), 1.0)]
    if not ones:
        return ""
    at = ds.sel(icl=ones[0])
    end, se = float(at.test_icl[-1]), float(at.standard_error.sel(curve="icl", weights="final"))
    diff = end - float(ds.loss_star)
    judged = uncertainty.verdict(diff, uncertainty.difference_band(se))
    where = {uncertainty.AGREES: "within", uncertainty.DIFFERS: "beyond"}.get(judged, "at the edge of")
    return (f"At c = 1 the in-context test loss ends at {prose_text(end, 4)}, {prose_text(diff, 2)} from L*: "
            f"{where} twice its standard error on the test set (2 × {prose_text(se, 2)} = {prose_text(2 * se, 2)}).")


def run_table(ds) -> MarkdownTable:
    """Our run, panel by panel: the lowest in-weight test loss, where each curve ends, and each test loss at the
    least-squares end point of the run's training loss (t → ∞; "flat" where it is not unique)."""
    return MarkdownTable(
        [dict(c=float(c), train=float(ds.train_loss_over_start.sel(icl=c)[-1]),
              iwl_low=float(ds.test_iwl.sel(icl=c).min()), iwl_end=float(ds.test_iwl.sel(icl=c)[-1]),
              icl_end=float(ds.test_icl.sel(icl=c)[-1]), iwl_limit=_limit(ds.end_test_iwl.sel(icl=c)),
              icl_limit=_limit(ds.end_test_icl.sel(icl=c))) for c in ds.icl.values],
        {"c": "c", "train": "training loss / start, final", "iwl_low": "in-weight test loss, lowest",
         "iwl_end": "in-weight test loss, final", "icl_end": "in-context test loss, final",
         "iwl_limit": "in-weight test loss, t → ∞", "icl_limit": "in-context test loss, t → ∞"},
        {"c": "g", "train": ".3f", "iwl_low": ".3f", "iwl_end": ".3f", "icl_end": ".3f"})


def _limit(x) -> str:
    """An end-point loss to three decimals, or why there is none (a flat training loss has no unique end point)."""
    x = float(x)
    return f"{x:.3f}" if np.isfinite(x) else "none (flat training loss)"


def _runs(ds) -> dict:
    import json

    return json.loads(ds.attrs["runs"])


def in_weight_course(ds) -> str:
    """What the in-weight test loss does at each c, by ``loss_curves.learning_course`` (kept, transient, not
    learned), with its start, lowest and final value: "kept at c = 0 (1.04 → 0.06 → 0.06); transient at …"."""
    groups: dict[str, list] = {}
    for c in ds.icl.values:
        curve = ds.test_iwl.sel(icl=c).values
        groups.setdefault(loss_curves.learning_course(curve), []).append(
            f"c = {float(c):g} ({curve[0]:.2f} → {np.nanmin(curve):.2f} → {curve[-1]:.2f})")
    order = ("kept", "transient", "not learned")
    return "; ".join(f"{what} at {join(groups[what])}" for what in order if what in groups)


def words(ds) -> dict:
    """The values and sentences the page's prose quotes, by name (for ``output.glue``)."""
    run = next(iter(_runs(ds).values()))
    cs = [float(c) for c in ds.icl.values]
    landmark_note = ("Open circles: the landmarks read off the published panels (where a curve crosses a level, its "
                     "value at a step, its extremes and its end), with their ± or the range of steps they span as "
                     "horizontal bars; where our line passes through a circle, the reading agrees."
                     if ds.attrs["published"] else
                     "This run is not at the published settings, so no published reading is drawn.")
    return dict(n_panels=len(cs), landmark_note=landmark_note, end_at_loss_star=end_at_loss_star(ds),
                L_star=prose_text(float(ds.loss_star), 4),
                epoch=run["epoch"],
                iwl_course=in_weight_course(ds),
                caption_lead=published.page.caption_lead("Figure 14", bool(ds.attrs["published"])),
                paper_epoch=PRESETS["paper"]["epoch"], c_values=list_words(cs),
                settings=describe(run) + (", white input covariance" if run["white_cov"] else "")
                + f", test sets of {run['testset_size']} sequences each")


def commands(ds) -> str:
    """The commands that trained the curves, as Markdown: a sentence on the initialisation era, then one line each."""
    era = next(iter(_runs(ds).values()))["init_scheme"]
    note = ("`--init_scheme jan2025`: the authors' initialisation of January 2025, whose merged-model draws equal "
            "those of December 2024; the data recipe with `--icl` exists from January 2025 on" if era == "jan2025"
            else f"`--init_scheme {era}`")
    return (f"Every curve was trained with one of these commands ({note}):\n\n"
            + "\n".join(f"* `{c}`" for c in ds.attrs["commands"].splitlines()))


def plot(ds):
    """Figure 14 as the paper draws it: one panel per c with the training loss over its start (black), the
    in-weight (blue) and in-context (red) test losses and L* (dotted); at the published settings the published
    readings as open circles (:func:`plot_panels`)."""
    landmarks = published_landmarks() if ds.attrs["published"] else None
    fig, _ = plot_panels(ds.step.values, curves(ds), landmarks=landmarks, L_star=float(ds.loss_star))
    return fig


def plot_condensed(ds):
    """The same runs laid over each other, one panel per loss (training loss over its start, in-weight and
    in-context test loss), c as colour, L* dotted on the in-context panel."""
    import matplotlib.pyplot as plt

    step = ds.step.values
    fig, axes = plt.subplots(1, 3, figsize=(6.6, 3.3), sharex=True, sharey=True, layout="constrained")
    colours = plt.cm.viridis(np.linspace(0.0, 0.9, ds.sizes["icl"]))
    for colour, c in zip(colours, ds.icl.values):
        for ax, var in zip(axes, CURVES.values()):
            ax.plot(step, ds[var].sel(icl=c).values, color=colour, label=f"c = {float(c):g}")
    theory_lines(axes[2], [float(ds.loss_star)], ["$L^*$"])
    for ax, title in zip(axes, ["training loss / start", "in-weight test loss", "in-context test loss"]):
        top_title(ax, title)
        ax.set_xlabel("step")
        ax.set_xlim(step[0], step[-1])
        ax.set_ylim(0, 2.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=min(ds.sizes["icl"], 6))
    return fig


# ------------------------------------------------------------------- the published readings (ATTN_M, white, P 5000)
# Read off the authors' own plot of Figure 14: one pixel is 16.67 steps and 0.0099 in loss, the same in all six
# panels (axes 0–5000 steps, 0–2.29).
PUBLISHED_IMAGE = Image("Figure 14", 16.67, 0.0099)

# Curves: "train" (training loss / its first value), "iwl" (in-weight test loss), "icl" (in-context test loss). The
# black curve's first fall has a midpoint (between the plateau 1.002 and the level right after the fall); our curve
# is read where it crosses the same level.


def _panel(c: float, rows: list) -> list[Reading]:
    return [Reading(f"c = {c:g}", what, curve, how, value, unit, stated)
            for what, curve, how, value, unit, stated in rows]


_S, _L = "step", "loss"
PUBLISHED_READINGS = {
    0.0: _panel(0.0, [
        ("training loss below 0.537 (the fall's midpoint), step", "train", ("below", 0.537), 751, _S, 17),
        ("training loss below 0.5, step", "train", ("below", 0.5), 757, _S, 0),
        ("training loss, final", "train", ("final",), 0.071, _L, 0),
        ("in-weight test loss at step 0", "iwl", ("at", 0), 1.043, _L, 0),
        ("in-weight test loss, lowest (steps 870–5000)", "iwl", ("min", (870, 5000)), 0.070, _L, 0),
        ("in-weight test loss, final", "iwl", ("final",), 0.070, _L, 0),
        ("in-context test loss at step 0", "icl", ("at", 0), 0.961, _L, 0),
        ("in-context test loss above 1.60, step", "icl", ("above", 1.60), 811, _S, 17),
        ("in-context test loss, highest", "icl", ("max", None), 2.246, _L, 0),
        ("in-context test loss, final", "icl", ("final",), 2.246, _L, 0),
    ]),
    0.2: _panel(0.2, [
        ("training loss below 0.660 (the first fall's midpoint), step", "train", ("below", 0.660), 765, _S, 17),
        ("training loss below 0.5, step", "train", ("below", 0.5), 792, _S, 0),
        ("training loss, final", "train", ("final",), 0.130, _L, 0),
        ("in-weight test loss, lowest", "iwl", ("min", None), 0.261, _L, 0),
        ("in-weight test loss, step of its lowest", "iwl", ("argmin", None), (917, 967), _S, 0),
        ("in-weight test loss at step 2500", "iwl", ("at", 2500), 0.516, _L, 0),
        ("in-weight test loss at step 4000", "iwl", ("at", 4000), 1.018, _L, 0),
        ("in-weight test loss, final", "iwl", ("final",), 1.053, _L, 0),
        ("in-context test loss at step 0", "icl", ("at", 0), 0.982, _L, 0),
        ("in-context test loss, highest", "icl", ("max", None), 1.244, _L, 0),
        ("in-context test loss below 0.5, step", "icl", ("below", 0.5), 2729, _S, 27),
        ("in-context test loss, final", "icl", ("final",), 0.257, _L, 0),
    ]),
    0.4: _panel(0.4, [
        ("training loss below 0.745 (the first fall's midpoint), step", "train", ("below", 0.745), 994, _S, 17),
        ("training loss below 0.5, step", "train", ("below", 0.5), 1215, _S, 0),
        ("training loss at step 2500", "train", ("at", 2500), 0.161, _L, 0),
        ("training loss, final", "train", ("final",), 0.139, _L, 0),
        ("in-weight test loss, lowest", "iwl", ("min", None), 0.358, _L, 0),
        ("in-weight test loss, step of its lowest", "iwl", ("argmin", None), (1167, 1450), _S, 0),
        ("in-weight test loss, final", "iwl", ("final",), 1.084, _L, 0),
        ("in-context test loss, highest", "icl", ("max", None), 1.090, _L, 0),
        ("in-context test loss below 0.5, step", "icl", ("below", 0.5), 1980, _S, 20),
        ("in-context test loss at step 2500", "icl", ("at", 2500), 0.252, _L, 0),
        ("in-context test loss, final", "icl", ("final",), 0.167, _L, 0),
    ]),
    0.6: _panel(0.6, [
        ("training loss below 0.831 (the first fall's midpoint), step", "train", ("below", 0.831), 1383, _S, 19),
        ("training loss at step 1617 (the shoulder)", "train", ("at", 1617), 0.660, _L, 0),
        ("training loss below 0.574 (the whole fall's midpoint), step", "train", ("below", 0.574), 1776, _S, 21),
        ("training loss below 0.5, step", "train", ("below", 0.5), 1860, _S, 0),
        ("training loss, final", "train", ("final",), 0.146, _L, 0),
        ("in-weight test loss, lowest", "iwl", ("min", None), 0.468, _L, 0),
        ("in-weight test loss, step of its lowest", "iwl", ("argmin", None), (1600, 1750), _S, 0),
        ("in-weight test loss, final", "iwl", ("final",), 1.105, _L, 0),
        ("in-context test loss, highest (its start)", "icl", ("max", None), 0.982, _L, 0),
        ("in-context test loss, lowest before step 1500", "icl", ("min", (0, 1500)), 0.962, _L, 0),
        ("in-context test loss below 0.5, step", "icl", ("below", 0.5), 2008, _S, 18),
        ("in-context test loss, final", "icl", ("final",), 0.152, _L, 0),
    ]),
    0.8: _panel(0.8, [
        ("training loss below 0.584 (the fall's midpoint), step", "train", ("below", 0.584), 2362, _S, 18),
        ("training loss below 0.5, step", "train", ("below", 0.5), 2413, _S, 0),
        ("training loss, final", "train", ("final",), 0.146, _L, 0),
        ("in-weight test loss, lowest", "iwl", ("min", None), 0.645, _L, 0),
        ("in-weight test loss, step of its lowest", "iwl", ("argmin", None), (2250, 2267), _S, 0),
        ("in-weight test loss at step 3000", "iwl", ("at", 3000), 1.064, _L, 0),
        ("in-weight test loss, final", "iwl", ("final",), 1.105, _L, 0),
        ("in-context test loss, highest (its start)", "icl", ("max", None), 0.982, _L, 0),
        ("in-context test loss below 0.5, step", "icl", ("below", 0.5), 2454, _S, 18),
        ("in-context test loss, final", "icl", ("final",), 0.148, _L, 0),
    ]),
    1.0: _panel(1.0, [
        ("training loss below 0.580 (the fall's midpoint), step", "train", ("below", 0.580), 2901, _S, 17),
        ("training loss below 0.5, step", "train", ("below", 0.5), 2942, _S, 0),
        ("training loss, final", "train", ("final",), 0.146, _L, 0),
        ("in-weight test loss, lowest", "iwl", ("min", None), 1.025, _L, 0),
        ("in-weight test loss, step of its lowest", "iwl", ("argmin", None), (2567, 2950), _S, 0),
        ("in-weight test loss, final", "iwl", ("final",), 1.121, _L, 0),
        ("in-context test loss, highest (its start)", "icl", ("max", None), 0.982, _L, 0),
        ("in-context test loss below 0.5, step", "icl", ("below", 0.5), 2949, _S, 18),
        ("in-context test loss, final", "icl", ("final",), 0.148, _L, 0),
    ]),
}

PUBLISHED_LAST_STEP = 4983  # where the published curves end (the axis runs to 5000)
# Where a published extreme lies, for the readings that give its value only (the step of an in-weight minimum has a
# reading of its own): the steps over which the curve stays within a pixel of it (its start: step 0).
_PUBLISHED_EXTREME_STEPS = {
    (0.2, "icl", "max"): (900, 933), (0.4, "icl", "max"): (1117, 1183), (0.6, "icl", "max"): (0, 0),
    (0.6, "icl", "min"): (1370, 1370), (0.8, "icl", "max"): (0, 0), (1.0, "icl", "max"): (0, 0),
}


def published_landmarks() -> dict:
    """The published readings as points to draw on our panels: {c: [{"curve", "step", "loss",
    "step_pm"}]}, one per reading that names both a step and a loss: a crossing of a level (± its stated
    uncertainty), a value at a step, a final value (at the published curves' last step), and an extreme whose step
    is known (at the middle of its range, ± half of it). Extremes held over a long stretch (the flat end of c = 0)
    are left out: the final value marks them."""
    points = {}
    for c, readings in PUBLISHED_READINGS.items():
        # an argmin reading's value is the (low, high) range of its step
        steps_of = {(r.curve, "min"): cast(tuple, r.value) for r in readings if r.how[0] == "argmin"}
        steps_of.update({(curve, kind): span for (cc, curve, kind), span in _PUBLISHED_EXTREME_STEPS.items()
                         if cc == c})
        marks = []
        for r in readings:
            kind, value = r.how[0], cast(float, r.value)  # a number for each kind marked here (a range: argmin's)
            if kind in ("below", "above"):
                marks.append(dict(curve=r.curve, step=float(value), loss=float(r.how[1]), step_pm=float(r.stated)))
            elif kind == "at":
                marks.append(dict(curve=r.curve, step=float(r.how[1]), loss=float(value), step_pm=0.0))
            elif kind == "final":
                marks.append(dict(curve=r.curve, step=float(PUBLISHED_LAST_STEP), loss=float(value), step_pm=0.0))
            elif kind in ("min", "max") and (r.curve, kind) in steps_of:
                lo, hi = steps_of[(r.curve, kind)]
                marks.append(dict(curve=r.curve, step=(lo + hi) / 2, loss=float(value), step_pm=(hi - lo) / 2))
        points[c] = marks
    return points


def compare_with_published(curves: dict, steps=None, sampling=None) -> list[dict]:
    """Our panels beside the published ones, panel by panel (``curves``: c → {"train": training loss / its first
    value, "iwl", "icl"}; ``sampling``: c → {curve: ``published.rules.Sampling``}); panels we did not run are left
    out. The loss readings are judged after removing the offset of the image's loss scale
    (``published.rules.judged_after_offset``)."""
    rows = []
    for c, readings in PUBLISHED_READINGS.items():
        match = [k for k in curves if math.isclose(float(k), c)]
        if match:
            rows += published.rules.compare(readings, curves[match[0]], PUBLISHED_IMAGE, steps,
                                            (sampling or {}).get(match[0]))
    return published.rules.judged_after_offset(rows)


# ------------------------------------------------------------------------ the panels: one per in-context fraction

# The paper's Figure 14 draws each panel's three curves in these colours, black over red over blue.
ICL_CURVES: dict[str, dict[str, Any]] = {
    "iwl": dict(color="tab:blue", label="in-weight test loss", zorder=2.0),
    "icl": dict(color="tab:red", label="in-context test loss", zorder=2.1),
    "train": dict(color="black", label="training loss / its start", zorder=2.2),
}


def plot_panels(step, curves: dict, *, landmarks: dict | None = None, L_star: float | None = None,
                    ylim=(0.0, 2.3), width: float = 6.6, panel_height: float = 1.7, max_cols: int = 3):
    """The figure as the paper draws it: one panel per in-context fraction c (``curves``: {c: {"train": training loss
    divided by its first value, "iwl": in-weight test loss, "icl": in-context test loss}}, in the order given), each
    with its three curves in the paper's colours (:data:`ICL_CURVES`), laid out in a grid that adapts to the number
    of panels (``plotting.panel_grid``). ``landmarks`` ({c: [{"curve", "step", "loss", "step_pm"}]}, e.g. the published
    readings of a panel) are drawn as open circles in their curve's colour, with ``step_pm`` as a horizontal bar
    (those outside the panel's axes are left out); ``L_star`` adds a dotted line in every panel. Returns (fig, axes):
    ``axes`` holds one panel per c, in order."""
    import matplotlib.pyplot as plt

    cs = list(curves)
    nrows, ncols = panel_grid(len(cs), max_cols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(width, 0.75 + panel_height * nrows), sharex=True, sharey=True,
                             squeeze=False, layout="constrained")
    slots = list(grid.flat)
    axes = slots[:len(cs)]
    for ax in slots[len(cs):]:
        ax.set_visible(False)
    step = np.asarray(step, dtype=np.float64)
    for ax, c in zip(axes, cs):
        for key, style in ICL_CURVES.items():
            ax.plot(step, curves[c][key], color=style["color"], zorder=style["zorder"], linewidth=1.2)
        if L_star is not None:
            theory_lines(ax, [L_star], text=False)
            dotted = ax.get_lines()[-1]
        for mark in (landmarks or {}).get(c, []):
            if not (step[0] <= mark["step"] <= step[-1] and ylim[0] <= mark["loss"] <= ylim[1]):
                continue  # outside the panel (a shorter run): drawn unclipped, it would stretch the figure
            colour = ICL_CURVES[mark["curve"]]["color"]
            ax.errorbar(mark["step"], mark["loss"], xerr=mark.get("step_pm") or None, fmt="o", markersize=4.5,
                        markerfacecolor="white", markeredgecolor=colour, markeredgewidth=1.1, ecolor=colour,
                        elinewidth=1.0, capsize=0, zorder=3, clip_on=False)
        top_title(ax, f"$c = {c:.3g}$")
        ax.set_xlim(step[0], step[-1])
        ax.set_ylim(*ylim)
    for i, ax in enumerate(axes):
        if i + ncols >= len(cs):  # the lowest panel of its column: it carries the step axis
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_xlabel("step")
        if i % ncols == 0:
            ax.set_ylabel("loss")
    handles = [plt.Line2D([], [], color=ICL_CURVES[k]["color"], linewidth=1.2, label=ICL_CURVES[k]["label"])
               for k in ("train", "iwl", "icl")]
    if L_star is not None:
        handles.append(plt.Line2D([], [], color=dotted.get_color(), linestyle=dotted.get_linestyle(),
                                  linewidth=dotted.get_linewidth(), label="$L^*$ (theory)"))
    if any((landmarks or {}).get(c) for c in cs):
        handles.append(plt.Line2D([], [], color="0.3", marker="o", markerfacecolor="white", linestyle="none",
                                  markersize=4.5, label="published reading"))
    fig.legend(handles=handles, loc="outside lower center", ncols=3)
    return fig, axes
