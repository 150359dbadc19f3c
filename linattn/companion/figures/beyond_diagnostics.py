"""Beyond the paper: the effective rank of the in-context matrix A(t), the stability of its top singular subspace and
the drift of the quantities gradient flow conserves, over the seed-0 ATTN_S run of Figure 3a.

The run is Figure 3a's seed 0 from the run store (:func:`~.common.attn_s_run.seed_run`), with the
weights recorded every ``snapshot_every`` steps. The measures are those of Mainali & Teixeira (2025), computed on
each snapshot by ``diagnostics.snapshot_fn`` and ``diagnostics.tidy`` from A(t) = Σ_i v_i k_i q_iᵀ (paper
normalisation) and the weights. What the theory implies for them: on the plateau after m drops the model sits near
the saddle M_m, where A has exactly m non-zero singular values (numerical rank m; effective rank that of the PCR
matrix, ``theory.pcr_weights``; on M_0 both are relative to a near-zero A and say nothing, so there A's size against
the final A is given instead, ``diagnostics.size_against_final``); a learned subspace never moves again;
gradient flow conserves v_i² − ‖k_i‖² and ‖k_i‖² − ‖q_i‖² exactly. Each flat stretch of the loss is named by the
saddle it sits at
(``loss_curves.saddle_plateaus``, the one rule), and the measures are taken as their median over its core, its
slowest steps (``loss_curves.rest_core``).
"""

from __future__ import annotations

import numpy as np

from ... import theory
from ...analysis import diagnostics, loss_curves
from .. import presets
from .common import preset_blocks
from .common.attn_s_run import describe, seed_run, which_run
from .common.frame import settings_attrs

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {k: dict(v) for k, v in preset_blocks.SEED0_RUN.items()}
#: Other settings the page must stay true at (built at the quick preset by the suite): another D and H, and a
#: smaller start with more heads in a shorter run (the cases of Figure 3c: the pages share their runs)
KNOB_CASES = (dict(in_dim=3, head_num=4), dict(head_num=6, init=0.005, epoch=1501))
# the effective rank exp(entropy) counts what a finite start leaves in the other directions: a second singular
# value at 2 % of the first adds 0.1 (the quick preset's larger start; the paper's reads 1.016 on M_1)
# (A's size on M_0, size.M0, is not held here: the quick preset's short run has no rest at M_0 to read it on)
TOLERANCES = [(r"numerical_rank\..*", "abs", 0.0), (r"eff_rank\..*", "abs", 0.1),
              (r"drift_max", "abs", preset_blocks.SETTLED)]
MEASURES = ("time", "eff_rank", "marginal_eff_rank", "numerical_rank", "subspace_dist", "drift_max", "loss_theory",
            "size")



def runs(S: dict) -> dict:
    """The one run: Figure 3a's seed-0 run (the same settings and snapshot interval on the five pages that read it,
    so the run store trains it once)."""
    return preset_blocks.sweep(S)


def compute(S: dict):
    """The measures at every snapshot (``eff_rank``, ``numerical_rank``, ``subspace_dist``, ``drift_max``, …:
    along ``step``) and the in-context matrix itself (``A``: step × row × col) with the eigenvectors of Λ
    (``eigenvectors``: row × direction), the training loss at every step (``train_loss`` along ``loss_step``), the
    theory's effective rank and loss at each saddle (``eff_rank_theory``, ``plateau_theory``: m), and each flat
    stretch of the loss (``plateau``: its saddle ``plateau_m``, -1 where it sits at none, its first and last step,
    the medians of the numerical and effective rank and of ``subspace_dist`` over the snapshots inside it, and how
    far its learned subspace lies outside those learned later, ``subspace_moved_after``)."""
    import xarray as xr

    res = seed_run(runs(S), S)
    cfg, cov = res.config, res.datasets.cov
    N, D = cfg.N, cov.shape[0]
    snapshots = res.snapshots_of(diagnostics.snapshot_fn(N, normalize=cfg.normalize), arrays=True)
    tab = diagnostics.tidy(snapshots, cov, N, lr=cfg.lr, normalize=cfg.normalize, model=cfg.model)
    levels = theory.plateau_losses(cov, N)
    loss = res.history.train_loss
    sp = loss_curves.saddle_plateaus(loss, levels)
    A = np.array([v["heads"].sum(axis=0) for _, v in snapshots])
    tab["size"] = diagnostics.size_against_final(A)
    medians: dict[str, list] = {"numerical_rank": [], "eff_rank": [], "subspace_dist": [], "size": []}
    moved, read = [], []
    step = res.history.step
    for m, a, b in zip(sp.m, sp.plateaus.starts, sp.plateaus.ends):
        on = (step >= a) & (step <= b)
        core = step[on][loss_curves.rest_core(loss[on])]  # the rest's slowest steps, nearest the saddle
        inside = (tab["step"] >= core.min()) & (tab["step"] <= core.max())
        if not inside.any():  # a core shorter than the snapshot interval: the snapshot nearest its middle
            inside = np.abs(tab["step"] - np.median(core)) == np.abs(tab["step"] - np.median(core)).min()
        for k in medians:
            medians[k].append(float(np.median(tab[k][inside])))
        middle = np.flatnonzero(inside)[np.count_nonzero(inside) // 2]  # the rest's learned subspace, read here
        moved.append(diagnostics.learned_subspace_moved(A[middle], A[middle + 1:], m) if m > 0 else np.nan)
        read.append(tab["step"][middle])
    ds = xr.Dataset(
        {**{k: ("step", np.asarray(tab[k], dtype=float)) for k in MEASURES},
         "train_loss": ("loss_step", loss),
         "A": (("step", "row", "col"), A), "eigenvectors": (("row", "direction"), theory.spectrum(cov)[1]),
         "eff_rank_theory": ("m", [diagnostics.effective_rank(theory.pcr_weights(cov, N, m, normalize="mean"))
                                   for m in range(D + 1)]),
         "plateau_theory": ("m", levels),
         "plateau_m": ("plateau", [-1 if m is None else m for m in sp.m]),
         "plateau_start": ("plateau", sp.plateaus.starts), "plateau_end": ("plateau", sp.plateaus.ends),
         "plateau_level": ("plateau", sp.plateaus.levels),
         "numerical_rank_on_plateau": ("plateau", medians["numerical_rank"]),
         "eff_rank_on_plateau": ("plateau", medians["eff_rank"]),
         "size_on_plateau": ("plateau", medians["size"]),
         "subspace_dist_on_plateau": ("plateau", medians["subspace_dist"]),
         "subspace_moved_after": ("plateau", moved), "subspace_read_step": ("plateau", read)},
        coords={"step": tab["step"], "loss_step": res.history.step, "m": np.arange(D + 1),
                "plateau": np.arange(len(sp.m))},
        attrs=settings_attrs(S, engine=res.engine, seeds=S["seed"], runs={"attn_s": cfg.to_dict()}))
    ds.attrs["run_key"] = res.key  # the run store's entry: the same for the five pages on this run
    ds.attrs.update(band=loss_curves.REST_BAND, snapshot_every=int(S["snapshot_every"]),
                    published=int(presets.is_published(NAME, S)))
    ds.A.attrs["description"] = "the in-context matrix A(t) = sum of the heads' A_h, paper normalisation"
    ds.eigenvectors.attrs["description"] = "eigenvectors e_d of the covariance, by decreasing eigenvalue"
    ds.eff_rank.attrs["description"] = "exp of the entropy of the normalised singular values of A(t)"
    ds.numerical_rank.attrs["description"] = "singular values of A(t) above 5 % of the largest"
    ds.size.attrs["description"] = "largest singular value of A(t) over that of the last snapshot's A"
    ds.subspace_dist.attrs["description"] = ("distance of A(t)'s learned subspace (top-r singular subspace, r its "
                                             "numerical rank) from span(e_1..e_r) "
                                             "(diagnostics.learned_subspace_distance)")
    ds.subspace_read_step.attrs["description"] = "the snapshot at which a rest's learned subspace is read"
    ds.subspace_moved_after.attrs["description"] = ("largest distance of a rest's learned subspace from those learned "
                                                    "later while A is not yet full rank "
                                                    "(diagnostics.learned_subspace_moved); NaN: M_0, or none later")
    ds.drift_max.attrs["description"] = "largest relative drift of the conserved quantities over heads"
    ds.plateau_m.attrs["description"] = "the saddle M_m the stretch sits at (loss_curves.saddle_plateaus), -1: none"
    return ds


def _plateaus(ds) -> list[tuple[int, int]]:
    """(plateau index, m) of the flat stretches at a saddle after the first drop with snapshots inside them (on
    M_0, A is the tiny random start: its rank says nothing)."""
    return [(int(p), int(m)) for p, m in zip(ds.plateau.values, ds.plateau_m.values)
            if m > 0 and np.isfinite(float(ds.numerical_rank_on_plateau.sel(plateau=p)))]


def _start_plateaus(ds) -> list[int]:
    """The plateau indices of the flat stretches at M_0 with snapshots inside them."""
    return [int(p) for p, m in zip(ds.plateau.values, ds.plateau_m.values)
            if m == 0 and np.isfinite(float(ds.size_on_plateau.sel(plateau=p)))]


def start_words(ds) -> str:
    """What is measured on M_0, in words: A's size there against its learned (final) size, and why its rank is not
    given there (a relative count of singular values reads the shape of a near-zero random start, not a rank)."""
    sizes = [float(ds.size_on_plateau.sel(plateau=p)) for p in _start_plateaus(ds)]
    if not sizes:
        return "No plateau at $\\mathcal{M}_0$ was detected."
    ranks = [float(ds.numerical_rank_on_plateau.sel(plateau=p)) for p in _start_plateaus(ds)]
    return ("On the first plateau, $\\mathcal{M}_0$ (where the theory's $A$ is 0), $A$'s largest singular value is "
            f"{'; '.join(f'{x:.2g}' for x in sizes)} of the final $A$'s: $A$ is the small random start, and its "
            "numerical rank there "
            f"({'; '.join(f'{r:g}' for r in ranks)}), a count relative to its own largest singular value, describes "
            "the start's shape, not a learned rank, so the rank is compared from $\\mathcal{M}_1$ on.")


def numbers(ds) -> list[dict]:
    """``numbers.json``: the numerical and effective rank of A on each plateau beside the theory's at its saddle,
    the distance of its learned subspace from the theory's and how far it later moves, and the largest conservation
    drift."""
    rows: list[dict] = []
    seen: dict[int, int] = {}  # saddle m → how many of its plateaus so far
    for p in _start_plateaus(ds):
        rows.append(dict(key="size.M0" + ("" if not rows else f".{len(rows) + 1}"),
                         quantity="largest singular value of A on plateau M_0 over the final A's (A = 0 at M_0)",
                         theory=0.0, reproduced=ds.size_on_plateau.sel(plateau=p)))
    for p, m in _plateaus(ds):
        seen[m] = seen.get(m, 0) + 1
        again = "" if seen[m] == 1 else f".{seen[m]}"  # a saddle the curve rests at twice (a stretch cut in two)
        rows.append(dict(key=f"numerical_rank.M{m}{again}", quantity=f"numerical rank of A on plateau M_{m}",
                         theory=m, reproduced=ds.numerical_rank_on_plateau.sel(plateau=p)))
        rows.append(dict(key=f"eff_rank.M{m}{again}", quantity=f"effective rank of A on plateau M_{m}",
                         theory=ds.eff_rank_theory.sel(m=m), reproduced=ds.eff_rank_on_plateau.sel(plateau=p)))
        if m < ds.sizes["m"] - 1:  # on M_D the learned subspace is all of R^D: nothing to compare
            rows.append(dict(key=f"subspace_dist.M{m}{again}",
                             quantity=f"learned subspace of A on plateau M_{m} vs span(e_1..e_{m})", theory=0.0,
                             reproduced=ds.subspace_dist_on_plateau.sel(plateau=p)))
        moved = float(ds.subspace_moved_after.sel(plateau=p))
        if np.isfinite(moved):
            rows.append(dict(key=f"subspace_moved.M{m}{again}",
                             quantity=f"largest later move of the subspace learned on plateau M_{m}", theory=0.0,
                             reproduced=moved))
    rows.append(dict(key="drift_max", quantity="max relative conservation drift over the run (gradient flow: 0)",
                     theory=0.0, reproduced=float(ds.drift_max.max())))
    return rows


def summary(ds) -> str:
    """The page's sentence on this run: the numerical rank on each plateau it settled on, the learned subspace there
    against the theory's and how far it moves later, and the largest drift."""
    rests = _plateaus(ds)
    found = "; ".join(f"$\\mathcal{{M}}_{{{m}}}$: {float(ds.numerical_rank_on_plateau.sel(plateau=p)):g} (theory {m})"
                      for p, m in rests)
    learned = "; ".join(f"$\\mathcal{{M}}_{{{m}}}$: {float(ds.subspace_dist_on_plateau.sel(plateau=p)):.2g}"
                        for p, m in rests if m < ds.sizes["m"] - 1)
    moved = [(m, float(ds.subspace_moved_after.sel(plateau=p))) for p, m in rests]
    moved_words = "; ".join(f"$\\mathcal{{M}}_{{{m}}}$: {x:.2g}" for m, x in moved if np.isfinite(x))
    drift = float(ds.drift_max.max())
    text = start_words(ds) + " Numerical rank of $A$ on the plateaus from $\\mathcal{M}_1$ on that it settled on: " + (
        found or "no plateau after the first was detected") + "."
    if learned:
        text += (" Distance of the subspace $A$ has learned there (its top singular subspace of that rank) from "
                 f"$\\mathrm{{span}}(e_1, \\dots, e_m)$, the theory's (0 at the saddle; $\\mathcal{{M}}_D$ is left "
                 f"out, where it is all of $\\mathbb{{R}}^D$): {learned}.")
    if moved_words:
        text += (" Largest distance of that subspace from the subspaces learned later, while $A$ is not yet of full "
                 f"rank: {moved_words}.")
    return text + f" Largest relative conservation drift over the run: {drift:.2g}."


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``)."""
    import json

    run = json.loads(ds.attrs["runs"])["attn_s"]
    return dict(rank=run["rank"], seed=run["seed"], snapshot_every=ds.attrs["snapshot_every"],
                **which_run(bool(ds.attrs["published"])),
                settings=describe(run, snapshot_every=ds.attrs["snapshot_every"]))


def plot(ds):
    """(a) effective and numerical rank of A(t) with the loss behind and the theory's effective rank at each saddle
    (dotted); (b) distance of the learned subspace from the theory's span(e_1..e_r); (c) the largest relative
    conservation drift."""
    import matplotlib.pyplot as plt

    s, L = ds.loss_step.values, ds.train_loss.values
    step = ds.step.values
    fig, axes = plt.subplots(3, 1, figsize=(6.4, 6.6), sharex=True)
    ax = axes[0]
    ax.plot(step, ds.eff_rank, color="black", label="effective rank of $A$")
    ax.plot(step, ds.numerical_rank, color="tab:orange", linestyle="--", label="numerical rank")
    for e in ds.eff_rank_theory.values:
        ax.axhline(e, color="0.45", linestyle=":", linewidth=1.0, zorder=0)
    ax.set_ylabel("rank")
    ax.set_title("(a) spectral rank of $A(t)$")
    ax.legend(loc="lower right")
    ax2 = ax.twinx()
    ax2.plot(s, L, color="tab:blue", alpha=0.35, linewidth=1.0)
    ax2.set_ylabel("loss", color="tab:blue")
    ax2.spines["right"].set_visible(True)
    ax = axes[1]
    ax.plot(step, ds.subspace_dist, color="black")
    ax.set_ylabel("learned subspace vs\nspan$(e_1..e_r)$")
    ax.set_title("(b) the learned subspace against the theory's")
    ax = axes[2]
    ax.semilogy(step, np.maximum(ds.drift_max.values, 1e-8), color="black")
    ax.set_ylim(bottom=1e-8)
    ax.set_ylabel("max relative\nconservation drift")
    ax.set_title("(c) conservation-law drift")
    for ax in axes:
        ax.set_xlim(s[0], s[-1])
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    return fig
