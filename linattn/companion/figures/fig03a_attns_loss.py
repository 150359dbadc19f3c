"""Figure 3a: rank-one ATTN_S steps down through the saddles M_0 → M_1 → … → M_D, one eigen-direction of the input
covariance per drop, largest eigenvalue first (paper Section 5).

One run per seed over the published window (the settings' ``epoch``), carried on to ``epoch_extended`` steps
through the run store (the first ``epoch`` losses of the longer run are the window run's: gradient descent depends
on the weights alone; seed 0 is the run Figures 3b, 3c and the diagnostics and PCR pages read). The theory: the
saddle losses L(M_0) … L(M_D) (``theory.plateau_losses``) and an escape-time estimate of each drop's step
(``theory.attn_s_drop_steps``). Measured: the step of each drop (``loss_curves.drop_steps``: the first step below
the midpoint of two consecutive saddle losses), the flat stretches named by the saddle they sit at
(``loss_curves.saddle_levels``, the one rule), and, for comparison, the drop steps of the same settings drawn from
linattn's own random streams. Overlaid on the first seed: the scalar reduction's loss curve for each drop
(``loss_curves.scalar_ode_overlay``: one learning head, the heads of earlier drops at their fixed points, the rest
at zero), started where the run has made 5 % of the drop, drawn until the next drop's overlay starts.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ... import theory
from ...analysis import loss_curves
from .. import presets, published, runstore, uncertainty
from ..commands import train_command
from ..output import ESTIMATE, MarkdownTable, median_and_range, prose_text, step_number, step_text
from ..output import words as list_words
from ..published import rules
from ..published.readings import Crossing, Image, crossing_at
from .common import preset_blocks
from .common.attn_s_run import describe
from .common.frame import settings_attrs
from .common.trainer import train

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    # epoch_extended: the same runs carried on to this step (the published window is their first ``epoch`` steps);
    # epoch_streams: the horizon of the comparison runs with linattn's own streams (draws="streams"); at the
    # paper preset their slowest seed makes its fourth drop near step 11500 (measured: 6027-11523 over seeds 0-5)
    "quick": dict(preset_blocks.ATTN_S_QUICK, seeds=[0, 1], epoch_extended=10001, epoch_streams=10001,
                  snapshot_every=preset_blocks.SNAP_QUICK),
    "paper": dict(preset_blocks.ATTN_S_PAPER, seeds=[0, 1, 2, 3, 4, 5], epoch_extended=20001, epoch_streams=20001,
                  snapshot_every=preset_blocks.SNAP_PAPER),
}
# Settings a page must stay true at beyond the presets (tests/test_knob_cases.py builds each at the quick preset):
# more directions than the published window can take (D = 6, H = 7: the sixth drop comes late or not at all), and
# one seed with D = 3, H = 3 and a short run
KNOB_CASES = (dict(in_dim=6, head_num=7), dict(in_dim=3, head_num=3, seeds=[2], epoch=2001, epoch_extended=3001,
                                               epoch_streams=3001))
HELP = {
    "epoch_streams": "horizon of the comparison runs drawn from the streams of linattn",
}
# The README's "Reproduction at a glance" rows of this figure: (the paper's figure, what is shown, the keys of
# its numbers.json rows; a|b: the first that exists), checked by python -m linattn.companion.readme
README_ROWS = (
    ("3a", "plateaus L(M_0), …, L(M_3)", ("plateau.M0", "plateau.M1", "plateau.M2", "plateau.M3")),
    ("3a", "final loss (mean over seeds, extended run)", ("final_loss.extended",)),
)
TOLERANCES = [preset_blocks.PLATEAUS]
# the names (in this module) of the published readings and the rule it compares with
PUBLISHED = ("PUBLISHED_IMAGE", "PUBLISHED_PLATEAUS", "PUBLISHED_CROSSINGS", "PUBLISHED_SEED_0_CROSSINGS",
             "PUBLISHED_PLATEAU_READINGS", "PUBLISHED_STILL_ON_M3", "compare_with_published")



STREAMS = "streams"  # the label of the comparison runs drawn from linattn's own streams


def runs(S: dict) -> dict:
    """One run per seed in the published window (``epoch`` steps; the page carries each on to ``epoch_extended``),
    and per seed the comparison run drawn from linattn's own streams (``draws="streams"``) to ``epoch_streams``."""
    out = preset_blocks.sweep(S)
    for label, cfg in list(out.items()):
        out[f"{STREAMS} {label}"] = dataclasses.replace(cfg, draws="streams", epoch=max(S["epoch"], S["epoch_streams"]))
    return out


def compute(S: dict):
    """Every seed's training loss over the extended run (``train_loss``: seed × step; the published window is its
    first ``window`` steps) with what is measured on it: the step of each drop (``drop_step``: seed × direction,
    NaN where it never comes), the same for the runs drawn from linattn's streams (``drop_step_streams``), the
    level of the flat stretch at each saddle within the window (``plateau_level``: seed × m, NaN where none sits
    there), the directions learned within the window and the final loss; the theory's saddle losses
    (``plateau_theory``: m), eigenvalues, each seed's drop steps predicted by the population gradient descent from
    its own initial weights (``drop_step_predicted``: seed × direction, ``runstore.predicted_drop_steps``) and the
    closed-form escape-time estimates (``drop_step_theory``: direction, an order of magnitude)."""
    import xarray as xr

    window, horizon = S["epoch"], presets.horizons(S)
    declared = runs(S)
    done = train(declared, S)
    in_window = [cfg for label, cfg in declared.items() if not label.startswith(STREAMS)]  # the window's commands
    extended = [done[label].extended(horizon) for label in done if not label.startswith(STREAMS)]
    streams = [done[label] for label in done if label.startswith(STREAMS)]
    step, loss = extended[0].history.step, np.array([r.history.train_loss for r in extended])
    cfg, cov = extended[0].config, extended[0].datasets.cov
    levels = shared_levels([r.datasets.cov for r in extended + streams], cfg.N)
    D = len(levels) - 1
    estimate = theory.attn_s_drop_steps(cov, cfg.N, lr=cfg.lr, init=cfg.init, rank=cfg.rank, head_num=cfg.head_num,
                                        init_scheme=cfg.init_scheme, normalize=cfg.normalize)
    plateaus = [loss_curves.saddle_levels(L[:window], levels) for L in loss]
    ds = xr.Dataset(
        {"train_loss": (("seed", "step"), loss),
         "drop_step": (("seed", "direction"), [loss_curves.drop_steps(L, levels, step) for L in loss]),
         "drop_step_streams": (("seed", "direction"),
                               [loss_curves.drop_steps(r.history.train_loss, levels) for r in streams]),
         "plateau_level": (("seed", "m"), plateaus),
         "ode_loss": ("step", scalar_ode_curve(loss[0][:window], plateaus[0], cfg, cov, len(step))),
         "directions_learned": ("seed", [loss_curves.directions_learned(L[:window], levels, step[:window])
                                         for L in loss]),
         "final_loss": ("seed", loss[:, -1]),
         "directions_extended": ("seed", [loss_curves.directions_learned(L, levels, step) for L in loss]),
         "plateau_theory": ("m", levels),
         "eigenvalue": ("direction", theory.spectrum(cov)[0]),
         "drop_step_predicted": (("seed", "direction"), predicted_drop_steps(extended, horizon)),
         "drop_step_theory": ("direction", estimate)},
        coords={"seed": list(S["seeds"]), "step": step, "direction": np.arange(1, D + 1), "m": np.arange(D + 1)},
        attrs=settings_attrs(S, engine=extended[0].engine, seeds=S["seeds"],
                             runs={str(c.seed): c.to_dict() for c in in_window}))
    ds.attrs.update(window=int(window), horizon=int(horizon), band=loss_curves.REST_BAND,
                    published=int(presets.is_published(NAME, S)),
                    commands="\n".join(train_command(c) for c in in_window),
                    run_keys="\n".join(r.key for r in extended))  # the run store's entries, by seed
    ds.train_loss.attrs["description"] = "training loss; the published window is the first `window` steps"
    ds.drop_step.attrs["description"] = "first step below the midpoint of L(M_{d-1}) and L(M_d) (the extended run)"
    ds.plateau_level.attrs["description"] = (f"level of the first flat stretch at saddle M_m within the window "
                                             f"(loss_curves.saddle_levels, band {loss_curves.REST_BAND:.3g})")
    return ds


def shared_levels(covs, N: int) -> np.ndarray:
    """The saddle losses L(M_0) … L(M_D) (``theory.plateau_losses``) that every run's covariance in ``covs`` gives:
    they depend on Λ's eigenvalues alone, which the seeds share (each seed rotates Λ = Q diag(1..D) Qᵀ / tr by a Q of
    its own), so one set of levels reads every curve. Raises ValueError where two runs' levels differ."""
    each = np.array([theory.plateau_losses(c, N) for c in covs])
    if not np.allclose(each, each[0], rtol=1e-9, atol=1e-12):
        raise ValueError("fig03a_attns_loss: the seeds' covariances have different spectra; one set of saddle "
                         "losses cannot read their curves")
    return each[0]


def predicted_drop_steps(results, horizon: int) -> np.ndarray:
    """Each run's drop steps predicted from its own start (seed × direction): ``runstore.predicted_drop_steps``
    of run i with run i's configuration, initial weights and covariance Λ_i (each seed rotates Λ by its own draw, so
    one seed's Λ would predict another's drops wrongly)."""
    return np.array([runstore.predicted_drop_steps(r, horizon=horizon)
                     for r in results])


def scalar_ode_curve(loss, plateau_levels, cfg, cov, n: int) -> np.ndarray:
    """The scalar ODE's loss for each drop m → m+1 that one run's ``loss`` makes (``loss_curves.scalar_ode_overlay``,
    started from the run's own plateau level ``plateau_levels[m]``), each drawn from its start until the next drop's
    overlay starts or the run is halfway down its next drop; NaN elsewhere (length ``n``). A drop is left out where
    the run has no plateau at M_m (a start 5 %
    below the theory's level could lie on the plateau's own offset) or does not pass the drop's midpoint."""
    out = np.full(n, np.nan)
    levels = theory.plateau_losses(cov, cfg.N)
    drops = np.append(loss_curves.drop_steps(loss, levels), np.nan)  # the run's midpoint crossings; none after M_D
    made = int(np.isfinite(drops).sum())
    pieces = [(m, *loss_curves.scalar_ode_overlay(loss, cfg.lr, cov, cfg.N, m, level=plateau_levels[m],
                                                  normalize=cfg.normalize, model=cfg.model))
              for m in range(made) if np.isfinite(plateau_levels[m])]
    for k, (m, steps, pred) in enumerate(pieces):
        stop = min(pieces[k + 1][1][0] if k + 1 < len(pieces) else np.inf,  # the next drop's curve starts
                   drops[m + 1] if np.isfinite(drops[m + 1]) else np.inf)  # the run is halfway down the next drop
        keep = steps < stop
        out[steps[keep]] = pred[keep]
    return out


def _window_words(ds) -> str:
    """The first ``window`` steps as the page names them: the published window only at the published settings."""
    return "published window" if ds.attrs["published"] else f"first {ds.attrs['window']} steps"


def _median(values) -> float:
    """The median of the finite ``values``, NaN where none is (a drop no seed made within the run)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if v.size else float("nan")


def _mean(values) -> float:
    """The mean of the finite ``values``, NaN where none is (without numpy's warning on an empty slice)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else float("nan")


def comparison(ds) -> list[dict]:
    """Our drops beside the crossings of the published curves (seed 0 with its own double-ink crossing where the
    image ties it, the others paired one to one), the count still on M_3 at the window's end (restating the drop-4
    pairs) and the published curves' plateau levels (not the image's theory lines), judged with the sampling
    error of a level on the run's P training sequences (only at the published settings: [] otherwise)."""
    if not ds.attrs["published"]:
        return []
    drops = {int(s): ds.drop_step.sel(seed=s).values for s in ds.seed.values}
    twins = {int(s): ds.drop_step_predicted.sel(seed=s).values for s in ds.seed.values}
    return compare_with_published(drops, [ds.plateau_level.sel(m=m).values for m in ds.m.values], twins)


def numbers(ds) -> list[dict]:
    """``numbers.json``: each saddle's plateau level (mean over the seeds where one was found) and the final loss of
    the extended run beside the theory (the levels the paper states are these theory values, so they sit in the
    theory column; a "paper" value is only a count or reading off the published figure), the seeds that made
    every drop within the window, each drop's median step beside its escape-time estimate, and the comparison with
    the published curves."""
    paper = bool(ds.attrs["published"])
    D, window, n = ds.sizes["direction"], ds.attrs["window"], ds.sizes["seed"]
    rows = []
    for m in ds.m.values:
        vals = ds.plateau_level.sel(m=m).values
        seen = int(np.isfinite(vals).sum())
        rows.append(dict(key=f"plateau.M{m}",
                         quantity=f"plateau L(M_{m}) ({_window_words(ds)}; mean over {seen}/{n} seeds where detected)",
                         theory=ds.plateau_theory.sel(m=m),
                         reproduced=_mean(vals) if seen else None))
    rows.append(dict(key="seeds_with_every_drop.window",
                     quantity=f"seeds showing all {D} drops within the {_window_words(ds)}"
                              + (f" ({window} steps)" if paper else ""),
                     paper=n - PUBLISHED_STILL_ON_M3 if paper else None,
                     reproduced=int((ds.directions_learned == D).sum())))
    reached = ds.directions_extended.values.astype(int)
    rows.append(dict(key="final_loss.extended",
                     quantity="final loss, extended run (mean over all seeds; theory: the mean of L(M_m) at the last "
                              f"saddle each seed reached, m = {list_words(reached)})",
                     theory=float(ds.plateau_theory.values[reached].mean()),
                     reproduced=float(ds.final_loss.mean())))
    for d in ds.direction.values:
        t = ds.drop_step.sel(direction=d).values
        made = int(np.isfinite(t).sum())
        rows.append(dict(key=f"drop_step_predicted.median.d{d}",
                         quantity=f"step of drop {d}, median over the {made} seeds that made it (theory: population "
                                  "gradient descent from each seed's own initial weights, median over the seeds where "
                                  "it is predicted within the run)",
                         theory=step_number(_median(ds.drop_step_predicted.sel(direction=d))),
                         reproduced=step_number(_median(t))))
        rows.append(dict(key=f"drop_step.median.d{d}",
                         quantity=f"step of drop {d}, median over the {made} seeds that made it (theory: escape-time "
                                  f"estimate τ/(λ_{d}² v₀), an order of magnitude only)",
                         theory=step_number(ds.drop_step_theory.sel(direction=d)),
                         reproduced=step_number(_median(t)), verdict=ESTIMATE))
    return rows + published.page.number_rows(comparison(ds))


def _seed_0_words() -> str:
    """Where the image ties seed 0's crossings (:data:`PUBLISHED_SEED_0_CROSSINGS`), in words: "drop 2: 705 or 804;
    drop 3: 1250; …", and the drops where it does not."""
    tied = "; ".join(f"drop {d}: {' or '.join(f'{low:g}' for low, _ in c.where)}"
                     for d, c in PUBLISHED_SEED_0_CROSSINGS.items())
    free = [d for d in PUBLISHED_CROSSINGS if d not in PUBLISHED_SEED_0_CROSSINGS]
    return f"{tied}" + (f"; not at drop {list_words(free)}, whose bundle cannot be read for ink" if free else "")


def pairing_words() -> str:
    """How the page sets our drops beside the published crossings, in words (read before the comparison's own
    sentences)."""
    return (
        "The six published curves are all black, so most published crossings cannot be tied to a seed. Seed 0's can: "
        "the authors' plotting cell draws seed 0 twice, so its crossing carries double ink; a drop with one double-ink "
        "crossing has seed 0 there, a drop with two has it at one of them, the other holding two seeds "
        f"({_seed_0_words()}). Our seed 0 is set beside its own crossing there, the same seed on both sides; our other "
        "curves are paired with the remaining crossings one to one, drop by drop, by the assignment that makes the "
        "total distance smallest: each published crossing is used once, and a curve still on its plateau at the end of "
        "the published window counts as a crossing beyond it. Where seed 0 may be at either of two double-ink "
        "crossings, both ways are paired and the one with the smaller total over all six curves gives every row of "
        "that drop, so no crossing holds more curves than its ink. \"difference\" is ours minus the published step "
        "(0 inside the bundle of first drops; a bound, \"at least\", against the curve still on its plateau at the "
        "window's end), also in pixels of the published image; a pair agrees when it is within a pixel. The table "
        "also sets the published curves' plateau levels beside ours where the image shows them, at L(M_3) and L(M_4); "
        "above those the image shows only its dotted theory lines, which are not the published runs and are not "
        "compared.\n\n")


def summary(ds) -> str:
    """The page's sentences on how the run compares with the published curves: at the published settings how the
    pairing is made and what it finds, else that there is no published curve to compare with."""
    compared = comparison(ds)
    text = published.page.summary(compared, PUBLISHED_IMAGE)
    if compared:
        text = pairing_words() + text
        text += ("\n\nOne possible source of difference, not tested here: numpy draws the tokens through an SVD of "
                 "$\\Lambda$ whose singular-vector signs depend on the LAPACK library, so our data need not be the "
                 "published run's. No run with another sign pattern was made, so none of the differences above is "
                 "shown to come from it.")
    return text


def drop_table(ds) -> MarkdownTable:
    """Each drop's median step and range over the seeds, with the authors' draws and with linattn's streams,
    beside the prediction from each seed's own initial weights and the closed-form escape-time estimate."""
    return MarkdownTable(
        [dict(drop=int(d), reference=median_and_range(ds.drop_step.sel(direction=d)),
              predicted=median_and_range(ds.drop_step_predicted.sel(direction=d)),
              streams=median_and_range(ds.drop_step_streams.sel(direction=d)),
              estimate=step_text(ds.drop_step_theory.sel(direction=d))) for d in ds.direction.values],
        {"drop": "drop", "reference": "reference draws: median (range)",
         "predicted": "predicted, same starts: median (range)", "streams": "own streams: median (range)",
         "estimate": "escape-time estimate"})


def _streams_words(ds) -> str:
    """Which drop moves most between the authors' draws and linattn's streams, in words."""
    ref = np.array([_median(v) for v in ds.drop_step.values.T])
    own = np.array([_median(v) for v in ds.drop_step_streams.values.T])
    with np.errstate(divide="ignore", invalid="ignore"):  # a drop at step 0 or never: no relative move
        moved = np.abs(own - ref) / ref
    if not np.isfinite(moved).any():
        return "no drop is made with both kinds of draws within the runs, so their steps cannot be compared"
    if np.nanmax(moved) == 0:
        return "the drop steps are the same (these runs draw from linattn's streams already)"
    d = int(np.nanargmax(moved))
    lam = float(ds.eigenvalue.isel(direction=d))
    median = f"median step {step_text(ref[d])} with the authors' draws, {step_text(own[d])} with linattn's streams"
    if d == ds.sizes["direction"] - 1:
        return (f"the drop steps move, most of all the last ({median}): how long a free head takes to pick up the "
                f"smallest direction (λ = {lam:.3g}) depends on how much of its small random initial weight happens "
                "to lie along it")
    return (f"the drop steps move, most of all drop {d + 1} ({median}; the direction of λ = {lam:.3g}): how long a "
            "free head takes to pick up a direction depends on how much of its small random initial weight happens "
            "to lie along it")


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``)."""
    run = next(iter(_runs(ds).values()))
    estimate = ds.drop_step_theory.values
    return dict(H=run["head_num"], D=ds.sizes["direction"], n_seeds=ds.sizes["seed"],
                eigenvalues=list_words(np.round(ds.eigenvalue.values, 4)),
                settings=describe(run, seeds=[int(s) for s in ds.seed.values]),
                window=ds.attrs["window"], horizon=ds.attrs["horizon"],
                rest_tol=loss_curves.REST_TOL, tol=loss_curves.rest_band_words(ds.attrs["band"]),
                escape_ratio=float(estimate[-1] / estimate[0]), streams=_streams_words(ds),
                predicted=_predicted_words(ds),
                caption_lead=published.page.caption_lead("Figure 3a", bool(ds.attrs["published"])),
                window_words=_window_words(ds), reached=_reached_words(ds), ode=_ode_words(ds))


def _predicted_words(ds) -> str:
    """How each seed's drop steps compare with those predicted from its own initial weights, in words."""
    ratio = (ds.drop_step / ds.drop_step_predicted).values
    ratio = ratio[np.isfinite(ratio)]
    if not ratio.size:
        return "no drop was both made and predicted within the extended run"
    return (f"each seed's drops come at {prose_text(ratio.min(), 2)} to {prose_text(ratio.max(), 2)} times the steps "
            "predicted from its own initial weights")


def _reached_words(ds) -> str:
    """How many seeds made every drop by the end of the extended run, and where the others stopped."""
    D, reached = ds.sizes["direction"], ds.directions_extended.values.astype(int)
    done = int((reached == D).sum())
    text = f"{done} of {reached.size} seeds made all {D} drops by step {ds.attrs['horizon']}"
    short = [f"seed {int(s)} rests at M_{int(m)}" for s, m in zip(ds.seed.values, reached) if m < D]
    return text + (f" ({', '.join(short)})" if short else "")


def _ode_words(ds) -> str:
    """The largest gap between the first seed's loss and the scalar ODE overlaid on it, in words."""
    ode = ds.ode_loss.values
    run = ds.train_loss.isel(seed=0).values
    drawn = np.isfinite(ode)
    if not drawn.any():
        return "the first seed makes no drop within the window, so no scalar-ODE curve is drawn"
    gap = float(np.max(np.abs(ode[drawn] - run[drawn])))
    return (f"over the stretches where it is drawn the largest gap between the ODE and seed {int(ds.seed.values[0])}"
            f"'s loss is {gap:.3f}")


def _runs(ds) -> dict:
    import json

    return json.loads(ds.attrs["runs"])


def plot(ds):
    """Left: the training loss of every seed in the window (the published one at the published settings), with the
    scalar ODE of each drop overlaid on the first seed (dashed red); right: the same runs carried on, on a
    logarithmic step axis (dashed red: the window's end); dotted: the saddle losses L(M_0) … L(M_D)."""
    import matplotlib.pyplot as plt

    from ..plotting import log_axis_start, log_thin, loss_panel

    window, step, loss = ds.attrs["window"], ds.step.values, ds.train_loss.values
    levels = ds.plateau_theory.values
    fig, (ax, ax_ext) = plt.subplots(1, 2, figsize=(6.6, 3.4))
    loss_panel(ax, step[:window], loss[:, :window], levels, title=f"{_window_words(ds)} ({window} steps)"
               if ds.attrs["published"] else _window_words(ds))
    ax.plot(step[:window], ds.ode_loss.values[:window], color="tab:red", linestyle="--", linewidth=1.1)
    thin = log_thin(len(step))  # a log axis resolves a few thousand samples; this keeps the SVG/PDF small
    loss_panel(ax_ext, step[thin], loss[:, thin], levels, log_steps=True, mark_step=window - 1,
               title=f"extended run ({len(step)} steps)")
    ax_ext.set_xlim(left=log_axis_start(ds.drop_step.isel(direction=0).values, len(step)))
    ax.set_ylabel("training loss")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------- the published readings (seeds 0–5, P = 80000, dec2024)
# Read off the authors' own plot of Figure 3a: one pixel is 28.90 steps and 0.00383 in loss (axes 0–10000 steps,
# 0–1.10).
PUBLISHED_IMAGE = Image("Figure 3a", 28.90, 0.00383)
# The saddle losses L(M_0) … L(M_4) the paper states (eigenvalues 0.4, 0.3, 0.2, 0.1, N = 31): theory values, which
# the tests check theory.plateau_losses against; the page's rows give the theory's own in their theory column.
PUBLISHED_PLATEAUS = (1.000, 0.641, 0.377, 0.210, 0.136)
# Plateau levels of the published curves, m → L(M_m) as read: only at L(M_3) and L(M_4) do the black curves cover the
# dotted theory lines, so that a level read there is the curves' own. Higher up, what the image shows at a plateau is
# its dotted theory line (read 1.001, 0.641 and 0.381), a drawing of the theory and not of the published runs: it is
# not a reading of the curves and is not compared.
PUBLISHED_PLATEAU_READINGS = {3: 0.210, 4: 0.138}
PUBLISHED_LAST_STEP = 9966  # the published curves' last step (the window is 10001 steps)
BEYOND = (PUBLISHED_LAST_STEP, math.inf)  # a crossing after the window: the curve is still on its plateau at the end

# Drop d of a curve: its first step below the midpoint of L(M_{d-1}) and L(M_d) (``loss_curves.drop_steps``). Seed 0
# is drawn twice, so the image holds seven lines for six curves: a double-ink crossing is seed 0, or two seeds at
# one pixel. Where a drop has one double-ink crossing among six (drop 3: 1250) it is seed 0's; where it has two
# (drop 2: 705 and 804; drop 4: 4936 and 5729) seed 0 is one of them and the other holds two seeds. Drop 1's bundle
# of five crossings cannot be read for ink, so there seed 0 is not tied.
PUBLISHED_SEED_0_CROSSINGS = {2: crossing_at(705, 804, text="705 or 804 (seed 0, drawn twice)"),
                              3: crossing_at(1250, text="1250 (seed 0, drawn twice)"),
                              4: crossing_at(4936, 5729, text="4936 or 5729 (seed 0, drawn twice)")}
# The crossings of the curves not tied to a seed, six a drop where seed 0 is not tied, else the other five; "705 or
# 804": one of the two seeds at the double-ink crossing that is not seed 0's.
PUBLISHED_CROSSINGS = {
    1: tuple([Crossing(((370, 514),), "370–514 (a bundle of five)", 0.0)] * 5) + (crossing_at(563),),
    2: (crossing_at(557, stated=43), crossing_at(601, stated=43), crossing_at(1098), crossing_at(705, 804),
        crossing_at(705, 804)),
    3: (crossing_at(997), crossing_at(1069), crossing_at(1608), crossing_at(1718), crossing_at(1856)),
    4: (crossing_at(3601), crossing_at(6521), crossing_at(4936, 5729), crossing_at(4936, 5729),
        Crossing((BEYOND,), f"still on M_3 at {PUBLISHED_LAST_STEP}")),
}
PUBLISHED_STILL_ON_M3 = 1  # published curves without the fourth drop inside the window


def readings_of_drop(d: int) -> list[tuple]:
    """The readings of drop ``d``'s crossings that the image's ink allows, each ``(ties, crossings)`` for
    :func:`~linattn.companion.published.rules.match_with_ties`: one for each step seed 0's own double-ink crossing
    may be at (:data:`PUBLISHED_SEED_0_CROSSINGS`), seed 0 there and the two seeds that share the other double-ink
    crossing ("705 or 804") at the step seed 0 leaves; a drop where the image does not tie seed 0 has one reading,
    every crossing as read."""
    crossings = PUBLISHED_CROSSINGS[d]
    if d not in PUBLISHED_SEED_0_CROSSINGS:
        return [({}, crossings)]
    own = PUBLISHED_SEED_0_CROSSINGS[d]
    out = []
    for at in own.where:
        left = tuple(w for w in own.where if w != at)
        shared = Crossing(left, " or ".join(f"{low:g}" for low, _ in left) + " (the other double-ink crossing)")
        out.append(({0: Crossing((at,), f"{at[0]:g} (seed 0, drawn twice)")},
                    tuple(shared if c.where == own.where else c for c in crossings)))
    return out


def _deciding_the_count(fourth: list[dict]) -> list[dict]:
    """The drop-4 pairs that decide the count of curves still on M_3 at the window's end: each pair where ours or
    the published curve is still on M_3 there (every drop-4 pair where none is, since each then says its curve left
    M_3 inside the window). Each curve is in one pair, so the count is these rows' fact, restated."""
    def beyond(r):
        ours_left = r["reproduced"] is not None and r["reproduced"] <= PUBLISHED_LAST_STEP
        return not ours_left or r["published_beyond"]
    return [r for r in fourth if beyond(r)] or fourth


def compare_with_published(drops: dict, plateaus=None, twins=None) -> list[dict]:
    """Our drop steps (``drops``: seed → steps of drops 1…4, NaN where a drop never comes; steps past
    the published window count as beyond it) beside the published crossings, drop by drop: seed 0 with its own
    double-ink crossing where the image ties it (:data:`PUBLISHED_SEED_0_CROSSINGS`), the other seeds paired one to
    one with the rest, all by the one reading of the drop's ink (:func:`readings_of_drop`) with the smallest total
    distance (:func:`~linattn.companion.published.rules.match_with_ties`), each pair judged with its own
    seed's finite-P margin (``twins``: seed → the same drops of that seed's population twin,
    :func:`~linattn.companion.published.rules.finite_p_margin`); then the count of curves still on the M_3 plateau
    at the window's end, shown but marked as restating the drop-4 pairs that decide it (:func:`_deciding_the_count`,
    :func:`~linattn.companion.published.rules.restating`), and (``plateaus``: for each of L(M_0)…L(M_4)
    our seeds' levels, NaN where none was found) the plateau levels of the published curves
    (:data:`PUBLISHED_PLATEAU_READINGS`: only where the curves, not the theory's dotted lines, are read), ours the mean
    over seeds. A plateau level is a training loss, so it gets no sampling-error agreement
    (:mod:`linattn.companion.uncertainty`): beyond a pixel, but within 2·√(sd²/n + sd²) (sd: the spread of the n
    seeds' levels; our mean's error and that of the one published curve read) and the reading's own pixel, it
    *cannot tell*."""
    rows = []
    for d in PUBLISHED_CROSSINGS:
        for seed, step, crossing in rules.match_with_ties({s: float(t[d - 1]) for s, t in drops.items()},
                                                          readings_of_drop(d)):
            diff = rules.signed_distance(step, crossing)
            tol = max(PUBLISHED_IMAGE.steps_per_px, crossing.stated)
            twin = None if twins is None else float(twins[seed][d - 1])
            row = rules.check_row(PUBLISHED_IMAGE, f"drop {d} (M_{d - 1} → M_{d})", f"seed {seed}, step",
                                  crossing.text, rules.crossing_value(crossing), step, diff, "step", tol,
                                  unresolved=rules.finite_p_margin(step, twin), bound=rules.is_bound(step, crossing))
            row.update(drop=d, seed=seed, published_beyond=any(high == math.inf for _, high in crossing.where))
            rows.append(row)
    still = sum(1 for t in drops.values() if not float(t[3]) <= PUBLISHED_LAST_STEP)
    count = rules.check_row(PUBLISHED_IMAGE, "", f"curves still on the M_3 plateau at step {PUBLISHED_LAST_STEP}",
                            str(PUBLISHED_STILL_ON_M3), PUBLISHED_STILL_ON_M3, still, still - PUBLISHED_STILL_ON_M3,
                            "count", 0)
    rows.append(rules.restating(count, _deciding_the_count([r for r in rows if r["drop"] == 4])))
    for m, levels in enumerate(plateaus if plateaus is not None else ()):
        if m not in PUBLISHED_PLATEAU_READINGS:
            continue
        reading = PUBLISHED_PLATEAU_READINGS[m]
        found = np.asarray(levels, dtype=np.float64).ravel()
        found = found[np.isfinite(found)]
        ours = float(found.mean()) if found.size else math.nan
        sd = uncertainty.spread(found)
        margin = 0.0 if sd is None else uncertainty.difference_band(sd / math.sqrt(found.size), sd)
        rows.append(rules.check_row(PUBLISHED_IMAGE, "", f"plateau L(M_{m}) (ours: mean over seeds)",
                                    f"{reading:.3f}", reading, ours, rules.difference(ours, reading), "loss",
                                    PUBLISHED_IMAGE.loss_per_px, unresolved=margin))
    return rows
