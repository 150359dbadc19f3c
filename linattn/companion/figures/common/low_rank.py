"""What the low-rank pages share (Figure 4, the paper's Figures 11 and 12): the long plateaus of a rank-R curve
measured one way, as dataset variables, and a run's settings in words.

A rank-R ATTN_S curve is summarised by ``loss_curves.rank_summary``: its rests at the saddles M_m (the steps whose
loss lies in M_m's band, ``loss_curves.REST_BAND`` of the gap to the neighbouring level:
``loss_curves.saddle_plateaus``),
which complete ones are long (at least a tenth of the longest), the theory's long ones (m = 0, R, 2R, …:
``theory.long_plateaus``), the directions learned and the final loss. Several seeds per rank: the summaries are
kept per seed (dimension ``seed``).
"""

from __future__ import annotations

import numpy as np

from .... import loss_curves
from ...output import saddle, words


def summaries(losses, ranks, levels) -> dict:
    """``{R: loss_curves.RankSummary}`` of each curve of ``losses`` (rank × step) against ``levels``."""
    return {int(R): loss_curves.rank_summary(np.asarray(L), levels, int(R)) for R, L in zip(ranks, losses)}


def summaries_of(ds, variable: str = "train_loss", seed=None) -> dict:
    """The same summaries, of the curves ``ds[variable]`` (rank × step) of a page's dataset at ``seed`` (default:
    the first, the seed of the extended runs)."""
    curves = ds[variable].sel(seed=ds.seed.values[0] if seed is None else seed)
    return summaries(curves.values, ds["rank"].values, ds.plateau_theory.values)


def summary_variables(summary: list, D: int) -> dict:
    """Dataset variables of the summaries (one ``{R: RankSummary}`` per seed; dims ``seed``, ``rank`` and ``m``): the
    level of each saddle's first rest (``plateau_level``, NaN where the curve never rests there), its length in steps
    (``rest_steps``, NaN where it is not complete), which rests are long (``plateau_long``) and which the theory
    expects long (``plateau_long_theory``, up to the last complete one), the directions learned and the final loss."""
    shape = (len(summary), len(summary[0]), D + 1)
    level, length = np.full(shape, np.nan), np.full(shape, np.nan)
    long, expected = np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool)
    for i, by_rank in enumerate(summary):
        for j, s in enumerate(by_rank.values()):
            for m, lev in zip(s.plateaus.m, s.plateaus.plateaus.levels):
                if np.isnan(level[i, j, m]):
                    level[i, j, m] = lev
            for m, steps in s.plateaus.complete:
                length[i, j, m] = steps if np.isnan(length[i, j, m]) else length[i, j, m]
            long[i, j, list(s.plateaus.long)] = True
            expected[i, j, list(s.expected_long)] = True
    dims = ("seed", "rank", "m")
    return {"plateau_level": (dims, level), "rest_steps": (dims, length), "plateau_long": (dims, long),
            "plateau_long_theory": (dims, expected),
            "directions_learned": (dims[:2], [[s.learned for s in r.values()] for r in summary]),
            "final_loss": (dims[:2], [[s.final_loss for s in r.values()] for r in summary])}


def seed_runs(runs: dict, S: dict) -> list:
    """The runs a low-rank page declares (``runs``: its ``runs(S)``, one per seed and rank in
    :func:`.presets.sweep`'s order, seeds outer, ranks inner) from the run store, ``[i][j]``: seed ``S["seeds"][i]``,
    rank ``S["ranks"][j]``."""
    from .train import trained

    done, n = trained(runs, S), len(S["ranks"])
    return [done[i:i + n] for i in range(0, len(done), n)]


def predicted_rows(r, R: int, key: str, which: str) -> list[dict]:
    """``numbers.json`` rows of rank ``R``'s drops (``r``: the dataset at that rank, with ``drop_step`` and
    ``drop_step_predicted`` over ``direction``) beside those predicted from the run's own initial weights; ``key``
    prefixes each row's key, ``which`` names the run in the quantity."""
    return [dict(key=f"{key}.drop{d + 1}.predicted",
                 quantity=f"R={R}: step of drop {d + 1} (M_{d} → M_{d + 1}), {which}; theory: the population gradient "
                          "descent from the run's initial weights",
                 theory=None if np.isnan(pred_d) else pred_d, reproduced=None if np.isnan(run_d) else run_d)
            for d, (run_d, pred_d) in enumerate(zip(r.drop_step.values, r.drop_step_predicted.values))]


def gap_panel(ax, step, curves, levels, *, title: str | None = None):
    """The curves' distance to the last saddle level, L − L(M_D), on a log axis, with each saddle's own distance
    L(M_m) − L(M_D) dotted: the late saddles, crowded on a linear axis, stand apart. A curve at or below L(M_D) (a
    finite-P curve may end a little below it) leaves a gap."""
    final, gaps = levels[-1], np.asarray(levels[:-1]) - levels[-1]
    for curve in curves:
        ax.plot(step, np.where(curve - final > 0, curve - final, np.nan), color="black", linewidth=0.9)
    for g in gaps:
        ax.axhline(g, color="grey", linestyle=":", linewidth=0.7)
    ax.set_yscale("log")
    ax.set_ylim(0.3 * gaps[-1], 1.5 * gaps[0])
    ax.set_xlim(step[0], step[-1])
    if title:
        ax.set_title(title)


def describe(S: dict, *, ranks=None) -> str:
    """A low-rank run's settings in words, for a page's prose: ``"H = 9 heads of rank R = 1, 2, 4 and 8, D = 8,
    N + 1 = 32 tokens, P = 80000 training sequences, initialisation 0.005 (jan2025 scheme), learning rate 0.02,
    20001 steps, the authors' random draws, seeds 10, 11 and 12"`` (``ranks``: the list, else ``S["rank"]``)."""
    ranks = [S["rank"]] if ranks is None else list(ranks)
    P = S.get("trainset_size")
    parts = [f"H = {S['head_num']} heads of rank R = {words(ranks)}", f"D = {S['in_dim']}",
             f"N + 1 = {S['seq_len']} tokens",
             "the population loss (P = ∞)" if P is None else f"P = {P} training sequences",
             f"initialisation {S['init']:g} ({S['init_scheme']} scheme)", f"learning rate {S['lr']:g}",
             f"{S['epoch']} steps",
             "the authors' random draws" if S.get("draws", "reference") == "reference"
             else "linattn's own random streams"]
    if S.get("dtype", "float64") != "float64":
        parts.append(S["dtype"])
    seeds = S["seeds"] if "seeds" in S else [S["seed"]]
    return ", ".join(parts + [f"seed{'s' if len(seeds) > 1 else ''} {words(seeds)}"])


def long_words(ms) -> str:
    """The saddles of ``ms`` as the page writes them: ``"$\\mathcal{M}_{0}$, $\\mathcal{M}_{4}$"``, or None."""
    return ", ".join(f"$\\mathcal{{M}}_{{{m}}}$" for m in ms) or None


def extra_long_rests(ds) -> dict:
    """``{R: {seed: [m, …]}}``: the long rests in the window (``plateau_long``) that the theory does not expect long
    (``plateau_long_theory``), per rank and seed."""
    extra = ds.plateau_long & ~ds.plateau_long_theory
    return {int(R): {int(sd): [int(m) for m in ds.m.values if extra.sel(rank=R, seed=sd, m=m)]
                     for sd in ds.seed.values} for R in ds["rank"].values}


def after_last_expected(ds, R: int) -> bool:
    """Whether every extra long rest of rank ``R`` (:func:`extra_long_rests`, over the seeds) comes after the last
    plateau the theory expects long, i.e. once a head's value weight has grown; False when there is none."""
    extra = extra_long_rests(ds)[R]
    found = [(sd, m) for sd, ms in extra.items() for m in ms]
    if not found:
        return False
    last = {int(sd): max((int(m) for m in ds.m.values if ds.plateau_long_theory.sel(rank=R, seed=sd, m=m)),
                         default=0) for sd in ds.seed.values}
    return all(m > last[sd] for sd, m in found)


def rests_text(ds) -> str:
    """The page's sentences on the long rests the theory does not expect, from :func:`extra_long_rests` and
    :func:`after_last_expected`, with the longest such rest's length from the run."""
    lines = []
    for R, by_seed in extra_long_rests(ds).items():
        found = sorted({m for ms in by_seed.values() for m in ms})
        if not found:
            continue
        steps = ds.rest_steps.sel(rank=R).sel(m=found)
        longest = float(steps.max())
        m_long = int(found[int(np.nanargmax(steps.max("seed").values))])
        line = (f"R = {R} rests long at {saddles_words(found)}, where the theory expects short plateaus (in "
                f"{sum(bool(ms) for ms in by_seed.values())} of {len(by_seed)} seeds; the longest, at "
                f"{saddle(m_long)}, lasts {longest:.0f} steps)")
        if after_last_expected(ds, R):
            line += (": all of them after the last plateau the theory expects long, once a head's value weight has "
                     "grown. There the next direction escapes a two-factor strict saddle, in a time that still grows "
                     "as 1/λ², so the rests before the directions of smallest eigenvalue are long whatever R")
        lines.append(line + ".")
    return " ".join(lines) or "No rank rests long where the theory expects a short plateau."


def saddles_words(ms) -> str:
    return join([saddle(m) for m in ms])


def join(items) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
