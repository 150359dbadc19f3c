"""What the low-rank pages share (Figure 4, the paper's Figures 11 and 12): the long plateaus of a rank-R curve
measured one way, as dataset variables, and a run's settings in words.

A rank-R ATTN_S curve is summarised by ``diagnostics.rank_summary``: its flat stretches named by the saddle M_m
they sit at (the drops made before a stretch, then within ``tol`` of L(M_m): ``diagnostics.saddle_plateaus``),
which complete ones are long (at least a tenth of the longest), the theory's long ones (m = 0, R, 2R, …:
``theory.long_plateaus``), the directions learned and the final loss.
"""

from __future__ import annotations

import numpy as np

from ... import diagnostics
from ..output import words

TOL = 0.02  # how far a flat stretch may lie from its saddle's loss L(M_m) (diagnostics.saddle_plateaus)


def summaries(losses, ranks, levels, *, tol: float = TOL) -> dict:
    """``{R: diagnostics.RankSummary}`` of each curve of ``losses`` (rank × step) against ``levels``."""
    return {int(R): diagnostics.rank_summary(np.asarray(L), levels, int(R), tol=tol) for R, L in zip(ranks, losses)}


def summaries_of(ds, variable: str = "train_loss") -> dict:
    """The same summaries, of the curves ``ds[variable]`` (rank × step) of a page's dataset."""
    return summaries(ds[variable].values, ds["rank"].values, ds.plateau_theory.values, tol=ds.attrs["tol"])


def summary_variables(summary: dict, D: int) -> dict:
    """Dataset variables of the summaries (dims ``rank`` and ``m``): the level of each saddle's first rest
    (``plateau_level``, NaN where the curve never rests there), which plateaus are long (``plateau_long``) and which
    the theory expects long (``plateau_long_theory``, up to the last complete one), the directions learned and the
    final loss."""
    level = np.full((len(summary), D + 1), np.nan)
    long, expected = np.zeros(level.shape, dtype=bool), np.zeros(level.shape, dtype=bool)
    for i, s in enumerate(summary.values()):
        for m, lev in zip(s.plateaus.m, s.plateaus.plateaus.levels):
            if m is not None and np.isnan(level[i, m]):
                level[i, m] = lev
        long[i, list(s.plateaus.long)] = True
        expected[i, list(s.expected_long)] = True
    return {"plateau_level": (("rank", "m"), level), "plateau_long": (("rank", "m"), long),
            "plateau_long_theory": (("rank", "m"), expected),
            "directions_learned": ("rank", [s.learned for s in summary.values()]),
            "final_loss": ("rank", [s.final_loss for s in summary.values()])}


def describe(S: dict, *, ranks=None) -> str:
    """A low-rank run's settings in words, for a page's prose: ``"H = 9 heads of rank R = 1, 2, 4 and 8, D = 8,
    N + 1 = 32 tokens, P = 80000 training sequences, initialisation 0.005 (jan2025 scheme), learning rate 0.02,
    20001 steps, the authors' random draws, seed 10"`` (``ranks``: the list, else ``S["rank"]``)."""
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
    return ", ".join(parts + [f"seed {S['seed']}"])


def long_words(ms) -> str:
    """The saddles of ``ms`` as the page writes them: ``"$\\mathcal{M}_{0}$, $\\mathcal{M}_{4}$"``, or None."""
    return ", ".join(f"$\\mathcal{{M}}_{{{m}}}$" for m in ms) or None
