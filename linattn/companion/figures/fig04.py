"""Figure 4: ATTN_S with key-query rank R passes the saddles M_0 … M_D of rank one, but only the plateaus after
0, R, 2R, … learned directions are long (paper Section 6).

One run per rank, carried on to its own horizon (``epoch_extended``: a dict by rank) through the run store; the
published window is the first ``epoch`` steps of each (gradient descent depends on the weights alone, and the loss
is recorded before each step, so the window is exactly the published-length run). Measured in the window: each
curve's plateaus named by their saddle and which are long (:mod:`~linattn.companion.figures.low_rank`); in the
extended run: the step of each drop (``diagnostics.drop_steps``: the first step below the midpoint of two
consecutive saddle losses) and the directions learned. The theory: the saddle losses L(M_0) … L(M_D)
(``theory.plateau_losses``), the long plateaus m = 0, R, 2R, … (``theory.long_plateaus``) and, for rank one, an
escape-time estimate of each drop's step (``theory.attn_s_drop_steps``).
"""

from __future__ import annotations

import functools

import numpy as np

from ... import diagnostics, theory
from .. import presets, published
from ..output import ESTIMATE, MarkdownTable, words as list_words
from ..runstore import figure_runs
from .frame import settings_attrs
from .low_rank import TOL, describe, summaries, summaries_of, summary_variables

NAME = "fig04_low_rank"


def settings(preset: str = "paper", **overrides) -> dict:
    """The figure's settings at ``preset`` with ``overrides`` (any knob of its parameters cell)."""
    return presets.settings(NAME, preset, **overrides)


def compute(S: dict):
    """Each rank's training loss in the published window (``train_loss``: rank × step) and over its extended run,
    sampled evenly in log(step) (``train_loss_extended``: rank × step_log, NaN past the rank's ``horizon``), with
    what is measured on them: in the window, each saddle's plateau level, which plateaus are long (and which the
    theory expects long), the directions learned and the final loss; in the extended run, the step of each drop
    (``drop_step``: rank × direction, NaN where it never comes), the directions learned and the final loss. The
    theory: the saddle losses (``plateau_theory``: m), the eigenvalues and the rank-one escape-time estimate of each
    drop (``drop_step_theory``: direction)."""
    import xarray as xr

    from ..plotting import log_thin

    window, horizon, ranks = S["epoch"], presets.horizons(S), [int(R) for R in S["ranks"]]
    runs = [r.extended(horizon[R]) for R, r in zip(ranks, figure_runs(S))]
    cfg, cov = runs[0].config, runs[0].datasets.cov
    levels = theory.plateau_losses(cov, cfg.N)
    D = len(levels) - 1
    full = [r.history.train_loss for r in runs]
    loss = np.array([L[:window] for L in full])
    # the extended curves on one log-spaced step axis: every step any rank's own log sampling keeps
    step_log = functools.reduce(np.union1d, [log_thin(len(L)) for L in full])
    extended = np.full((len(ranks), step_log.size), np.nan)
    for i, L in enumerate(full):
        inside = step_log < len(L)
        extended[i, inside] = L[step_log[inside]]
    learned_ext = [diagnostics.directions_learned(L, levels) for L in full]
    estimate = theory.attn_s_drop_steps(cov, cfg.N, lr=cfg.lr, init=cfg.init, rank=1, head_num=cfg.head_num,
                                        init_scheme=cfg.init_scheme, normalize=cfg.normalize)
    ds = xr.Dataset(
        {"train_loss": (("rank", "step"), loss),
         "train_loss_extended": (("rank", "step_log"), extended),
         "horizon": ("rank", [len(L) for L in full]),
         "drop_step": (("rank", "direction"), [diagnostics.drop_steps(L, levels) for L in full]),
         **summary_variables(summaries(loss, ranks, levels, tol=TOL), D),
         "directions_learned_extended": ("rank", learned_ext),
         "final_loss_extended": ("rank", [L[-1] for L in full]),
         "plateau_theory": ("m", levels),
         "eigenvalue": ("direction", theory.spectrum(cov)[0]),
         "drop_step_theory": ("direction", estimate)},
        coords={"rank": ranks, "step": np.arange(window), "step_log": step_log,
                "direction": np.arange(1, D + 1), "m": np.arange(D + 1)},
        attrs=settings_attrs(S, engine=runs[0].engine, seeds=S["seed"],
                             runs={str(R): r.config.to_dict() for R, r in zip(ranks, runs)}))
    ds.attrs.update(window=int(window), tol=TOL, published=int(presets.is_published(NAME, S)))
    ds.train_loss.attrs["description"] = "training loss in the published window (the first `window` steps)"
    ds.train_loss_extended.attrs["description"] = "training loss of the extended run at log-spaced steps"
    ds.drop_step.attrs["description"] = "first step below the midpoint of L(M_{d-1}) and L(M_d) (the extended run)"
    ds.drop_step_theory.attrs["description"] = "escape-time estimate τ/(λ_d² v₀) for rank-one heads, in steps"
    ds.plateau_level.attrs["description"] = (f"level of the first flat stretch at saddle M_m within the window "
                                             f"(diagnostics.saddle_plateaus, tol {TOL})")
    return ds


def claims(ds) -> list:
    """The paper's rank-one claim (eight plateaus within the published window) beside the run, only at the
    published settings ([] otherwise)."""
    if not ds.attrs["published"] or 1 not in ds["rank"].values:
        return []
    return [published.fig4_plateau_claim(ds.drop_step.sel(rank=1).values, ds.attrs["window"],
                                         ds.drop_step_theory.values)]


def _plateau_durations(drops) -> np.ndarray:
    """How long each plateau M_0 … M_{D−1} lasts: from drop m to drop m + 1 (drop 0 at step 0)."""
    return np.diff(np.concatenate([[0.0], np.asarray(drops, dtype=float)]))


def numbers(ds) -> list[dict]:
    """``numbers.json``: per rank, the window's rows of its rank summary (long plateaus, directions learned, each
    saddle's plateau level, final loss), the directions learned in the extended run, the step of its last drop
    (when every direction was learned) and its final loss; for rank one, each drop's step beside its escape-time
    estimate and how often a later plateau lasts longer; the paper's claim at the published settings."""
    paper, window, D = bool(ds.attrs["published"]), ds.attrs["window"], ds.sizes["direction"]
    levels, rows = ds.plateau_theory.values, []
    for R, s in summaries_of(ds).items():
        r, h = ds.sel(rank=R), int(ds.horizon.sel(rank=R))
        learned = int(r.directions_learned_extended)
        rows += s.rows(f" within the published window ({window} steps)", key="window")
        rows.append(dict(key=f"R{R}.extended.learned",
                         quantity=f"R={R}: directions learned in the extended run ({h} steps)",
                         paper=D if R == 1 and paper else None, theory=D, reproduced=learned))
        if learned == D:
            rows.append(dict(key=f"R{R}.extended.last_drop",
                             quantity=f"R={R}: step of the last drop (all {D} directions learned), extended run",
                             reproduced=float(r.drop_step.isel(direction=-1))))
        rows.append(dict(key=f"R{R}.extended.final_loss", quantity=f"R={R}: final loss, extended run",
                         reproduced=r.final_loss_extended, theory=levels[learned]))
    if 1 in ds["rank"].values:
        t1, estimate = ds.drop_step.sel(rank=1).values, ds.drop_step_theory.values
        for d in range(D):
            rows.append(dict(key=f"R1.extended.drop{d + 1}",
                             quantity=f"R=1: step of drop {d + 1} (M_{d} → M_{d + 1}), extended run; theory: escape "
                                      f"time τ/(λ_{d + 1}² v₀)",
                             theory=estimate[d], reproduced=None if np.isnan(t1[d]) else t1[d], verdict=ESTIMATE))
        dur, dur_th = _plateau_durations(t1), _plateau_durations(estimate)
        ok = np.isfinite(dur[1:]) & np.isfinite(dur[:-1])
        if ok.any():
            rows.append(dict(key="R1.extended.later_plateau_longer",
                             quantity=f"R=1: fraction of the {ok.sum()} consecutive plateau pairs (M_m−1, M_m) where "
                                      "the later one is longer, extended run (theory: the escape-time estimate's "
                                      "fraction)",
                             theory=float(np.mean((dur_th[1:] > dur_th[:-1])[ok])),
                             reproduced=float(np.mean((dur[1:] > dur[:-1])[ok]))))
    return rows + [c.row() for c in claims(ds)]


def rank_table(ds) -> MarkdownTable:
    """Per rank: the directions learned in the published window and in the extended run, the step of the last drop
    and the long plateaus found in the window beside the theory's."""
    D, rows = ds.sizes["direction"], []
    for R, s in summaries_of(ds).items():
        r = ds.sel(rank=R)
        learned = int(r.directions_learned_extended)
        rows.append(dict(rank=f"$R = {R}$", window=f"{s.learned} of {D}",
                         extended=f"{learned} of {D} ({int(r.horizon)} steps)",
                         last=float(np.nanmax(r.drop_step)) if learned else None,
                         long=f"{list_words(s.plateaus.long)} ({list_words(s.expected_long)})"))
    return MarkdownTable(rows, {"rank": "rank", "window": "directions learned in the published window",
                                "extended": "in the extended run", "last": "step of the last drop",
                                "long": "long plateaus in the window: found (theory)"}, {"last": ".0f"})


def _r1_last(ds) -> str:
    last = float(ds.drop_step.sel(rank=1).isel(direction=-1))
    return f"step {last:.0f}" if np.isfinite(last) else f"none by step {int(ds.horizon.sel(rank=1))}"


def drops_text(ds) -> str:
    """The page's lines on where each rank's drops come: how many inside the published window, the later ones,
    those never made; for rank one the escape-time estimate beside the run, and at the published settings what
    other random draws do."""
    window, D, lines = ds.attrs["window"], ds.sizes["direction"], []
    for R in ds["rank"].values:
        t = ds.drop_step.sel(rank=R).values
        inside, later = t[t < window], t[(t >= window) & np.isfinite(t)]
        line = f"* $R = {R}$: {inside.size} of {D} drops inside the published window"
        line += f" (at step{'s' if inside.size > 1 else ''} {list_words(inside)})" if R == 1 and inside.size else ""
        line += (f", then {later.size} more in the extended run, at step{'s' if later.size > 1 else ''} "
                 f"{list_words(later)}" if later.size else "")
        missing = int(np.sum(~np.isfinite(t)))
        line += f"; {missing} not reached by step {int(ds.horizon.sel(rank=R))}" if missing else ""
        lines.append(line + ".")
    if 1 in ds["rank"].values:
        lam, estimate = ds.eigenvalue.values, ds.drop_step_theory.values
        lines.append(f"\nThe theory's escape time $\\tau/(\\lambda_d^2 v_0)$ grows as $1/\\lambda_d^2$: the smallest "
                     f"direction ($\\lambda$ = {lam[-1]:.4g}) needs {estimate[-1] / estimate[0]:.0f} times as long as "
                     f"the largest ($\\lambda$ = {lam[0]:.4g}). For $R = 1$ the estimate puts the last drop at step ≈ "
                     f"{estimate[-1]:.0f}, against {_r1_last(ds)} in this run: an order of magnitude only, since "
                     "each direction is picked up by whichever free head happens to start with most weight along it.")
    if ds.attrs["published"]:
        lines.append("\nThese are the published settings. The late drops depend strongly on the draw: with linattn's "
                     "own random streams (`draws='streams'`) the eighth drop of the same setting came only after "
                     "several hundred thousand steps.")
    return "\n".join(lines)


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``); ``r1_in_window`` and ``r1_last_drop``
    (quoted by the low-rank chapter) only when rank one is among the ranks."""
    S, D = _settings(ds), ds.sizes["direction"]
    ranks = [int(R) for R in ds["rank"].values]
    short = [R for R in ranks if int(ds.directions_learned_extended.sel(rank=R)) < D]
    out = dict(H=S["head_num"], D=D, ranks=list_words(ranks), window=ds.attrs["window"], tol=ds.attrs["tol"],
               init_scheme=S["init_scheme"], settings=describe(S, ranks=ranks),
               horizons=_join([f"{int(ds.horizon.sel(rank=R))} steps for R = {R}" for R in ranks]),
               enough=(f"long enough for every rank to learn all {D} directions" if not short else
                       f"not long enough for R = {list_words(short)} to learn all {D} directions"),
               setting_note=("These are the published settings (seed 10 is the reference's default seed; the paper "
                             "does not say which seed it used)." if ds.attrs["published"] else
                             "These are not the published settings, so the paper's claim is not set beside them."))
    if 1 in ranks:
        out.update(r1_in_window=str(int(np.sum(ds.drop_step.sel(rank=1).values < ds.attrs["window"]))),
                   r1_last_drop=_r1_last(ds))
    return out


def _join(items) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _settings(ds) -> dict:
    import json

    return json.loads(ds.attrs["settings"])


def plot(ds):
    """One row per rank: the published window (left) and the extended run on a logarithmic step axis (right; the
    dashed red line is the window's end), with the saddle losses L(M_0) … L(M_D) dotted."""
    import matplotlib.pyplot as plt

    from ..plotting import log_axis_start, log_thin, loss_panel

    window, levels, ranks = ds.attrs["window"], ds.plateau_theory.values, list(ds["rank"].values)
    nrows = len(ranks)
    fig = plt.figure(figsize=(6.6, 0.5 + 1.75 * nrows), layout="constrained")
    left, right = fig.subfigures(1, 2, wspace=0.02)
    left.suptitle(f"published window ({window} steps)", fontsize=10.5)
    right.suptitle("extended runs (log step axis)", fontsize=10.5)
    axes = left.subplots(nrows, 1, sharex=True, squeeze=False)
    axes_ext = right.subplots(nrows, 1, squeeze=False)
    x_from = log_axis_start(ds.drop_step.isel(direction=0).values, int(ds.horizon.max()))
    for ax, ax_ext, R in zip(axes.flat, axes_ext.flat, ranks):
        r = ds.sel(rank=R)
        h = int(r.horizon)
        loss_panel(ax, ds.step.values, [r.train_loss.values], levels, title=f"$R = {R}$", linewidth=1.2)
        ext = r.train_loss_extended.sel(step_log=log_thin(h))  # this rank's own log sampling
        loss_panel(ax_ext, ext.step_log.values, [ext.values], levels, log_steps=True, mark_step=window - 1,
                   title=f"$R = {R}$ ({h} steps)", linewidth=1.2)
        ax_ext.set_xlim(left=x_from)
    for ax in list(axes[:-1].flat) + list(axes_ext[:-1].flat):
        ax.set_xlabel("")
    for ax in axes[:, 0]:
        ax.set_ylabel("training loss")
    return fig
