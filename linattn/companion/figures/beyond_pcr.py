"""Beyond the paper: on the plateau after m drops, the seed-0 ATTN_S run of Figure 3a computes principal component
regression on the top m components of the input covariance (paper Section 5).

The run is Figure 3a's seed 0 from the run store (:func:`~.common.attn_s_run.seed_run`), with the
weights recorded every ``snapshot_every`` steps. The learned in-context matrix A(t) is the sum of the heads' matrices
in the paper's normalisation (``diagnostics.snapshot_fn``); the theory's matrix at the saddle M_m is
A_m = Σ_{d≤m} (λ_d c_d)⁻¹ e_d e_dᵀ (``theory.pcr_weights``). Measured: the mean squared gap between the learned
predictor and each A_m's, E[(βᵀ(A − A_m) x_q)²] (``theory.predictor_distance``), relative to the mean square of
A_m's predictor (for M_0, whose predictor is zero, relative to E[y_q²] = tr Λ), at every snapshot; and A in the
eigenbasis of Λ in the middle of the first flat stretch of the loss at each saddle (``loss_curves.saddle_plateaus``,
the one rule).
"""

from __future__ import annotations

import numpy as np

from ... import theory
from ...analysis import diagnostics, loss_curves
from .. import presets
from .common import preset_blocks
from .common.attn_s_run import describe, seed_run
from .common.frame import settings_attrs

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {k: dict(v) for k, v in preset_blocks.SEED0_RUN.items()}
# other settings the page must stay true at, the same as the other pages on this run (one run each, shared): another
# D and H, and more heads from a smaller start over fewer steps
KNOB_CASES = (dict(in_dim=3, head_num=4), dict(head_num=6, init=0.005, epoch=1501))
TOLERANCES = [(r"gap\.M\d+", "abs", 0.05), (r"diagonal\..*", "rel", 0.05)]



def runs(S: dict) -> dict:
    """The one run: Figure 3a's seed-0 run (the same settings and snapshot interval on the five pages that read it,
    so the run store trains it once)."""
    return preset_blocks.sweep(S)


def compute(S: dict):
    """The relative gap between the learned predictor and each saddle's (``gap``: step × m, at the snapshots); for
    each saddle the curve rests at, the snapshot in the middle of its first flat stretch (``mid_step``: m, NaN where
    it never rests there), the learned A there and the theory's A_m in the eigenbasis of Λ (``A_learned``,
    ``A_theory``: m × row × col, rows and columns the eigen-directions from the largest), the diagonal eᵀ_d A e_d
    there (``diagonal``: m × direction) and the theory's 1/(λ_d c_d) (``diagonal_theory``: direction)."""
    import xarray as xr

    res = seed_run(runs(S), S)
    cfg, cov = res.config, res.datasets.cov
    N = cfg.N
    snapshots = res.snapshots_of(diagnostics.snapshot_fn(N, normalize=cfg.normalize), arrays=True)
    lam = theory.spectrum(cov)[0]
    D = len(lam)
    step = np.array([s for s, _ in snapshots])
    A_t = np.array([v["heads"].sum(axis=0) for _, v in snapshots])  # paper normalisation
    A_pcr = [theory.pcr_weights(cov, N, m, normalize="mean") for m in range(D + 1)]  # paper normalisation, like A_t
    zero = np.zeros((D, D))
    scale = [theory.predictor_distance(A, zero, cov, N, normalize="mean") for A in A_pcr]
    scale[0] = float(np.trace(cov))  # E[y_q²]: the scale for M_0, whose predictor is zero
    gap = np.array([[theory.predictor_distance(A, B, cov, N, normalize="mean") / scale[m]
                     for m, B in enumerate(A_pcr)] for A in A_t])
    sp = loss_curves.saddle_plateaus(res.history.train_loss, theory.plateau_losses(cov, N))
    mid = np.full(D + 1, np.nan)
    for m, a, b in zip(sp.m, sp.plateaus.starts, sp.plateaus.ends):
        if m is not None and np.isnan(mid[m]):  # the first stretch at M_m; the snapshot nearest its middle
            mid[m] = step[np.argmin(np.abs(step - (a + b) / 2))]
    learned, diagonal = np.full((D + 1, D, D), np.nan), np.full((D + 1, D), np.nan)
    for m in np.flatnonzero(np.isfinite(mid)):
        A = A_t[np.searchsorted(step, mid[m])]
        learned[m], diagonal[m] = diagnostics.in_eigenbasis(A, cov), diagnostics.mode_overlaps(A, cov)
    ds = xr.Dataset(
        {"gap": (("step", "m"), gap), "mid_step": ("m", mid),
         "A_learned": (("m", "row", "col"), learned),
         "A_theory": (("m", "row", "col"), [diagnostics.in_eigenbasis(A, cov) for A in A_pcr]),
         "diagonal": (("m", "direction"), diagonal),
         "diagonal_theory": ("direction", 1 / (lam * theory.c_d(cov, N))), "eigenvalue": ("direction", lam)},
        coords={"step": step, "m": np.arange(D + 1), "row": np.arange(1, D + 1), "col": np.arange(1, D + 1),
                "direction": np.arange(1, D + 1)},
        attrs=settings_attrs(S, engine=res.engine, seeds=S["seed"], runs={"attn_s": cfg.to_dict()}))
    ds.attrs["run_key"] = res.key  # the run store's entry: the same for the five pages on this run
    ds.attrs.update(band=loss_curves.REST_BAND, snapshot_every=int(S["snapshot_every"]),
                    published=int(presets.is_published(NAME, S)))
    ds.gap.attrs["description"] = ("E[(b^T(A - A_m) x_q)^2] relative to the mean square of A_m's predictor "
                                   "(M_0: relative to tr Lambda)")
    ds.A_learned.attrs["description"] = "E^T A E mid-plateau M_m, E the eigenvectors of Lambda (largest first)"
    ds.A_theory.attrs["description"] = "E^T A_m E: principal component regression on the top m components"
    return ds


def _rested(ds) -> list[int]:
    """The saddles m the run rested at, in order."""
    return [int(m) for m in ds.m.values if np.isfinite(float(ds.mid_step.sel(m=m)))]


def _gap_mid(ds, m: int) -> float:
    return float(ds.gap.sel(m=m, step=ds.mid_step.sel(m=m)))


def numbers(ds) -> list[dict]:
    """``numbers.json``: on each plateau the run rested at, the relative gap to the theory's predictor in its middle
    and the diagonal entries e_dᵀ A e_d of the directions learned, beside 1/(λ_d c_d)."""
    rows = []
    for m in _rested(ds):
        rows.append(dict(key=f"gap.M{m}", quantity=f"relative predictor gap to PCR(m={m}) mid-plateau M_{m}",
                         theory=0.0, reproduced=_gap_mid(ds, m)))
        for d in range(1, m + 1):
            rows.append(dict(key=f"diagonal.M{m}.e{d}", quantity=f"M_{m}: e_{d}ᵀ A e_{d} (theory 1/(λ_d c_d))",
                             theory=ds.diagonal_theory.sel(direction=d), reproduced=ds.diagonal.sel(m=m, direction=d)))
    return rows


def summary(ds) -> str:
    """The page's sentence on this run: the relative gap in the middle of each plateau it rested at."""
    gaps = "; ".join(f"$\\mathcal{{M}}_{{{m}}}$ (step {float(ds.mid_step.sel(m=m)):.0f}): {_gap_mid(ds, m):.2g}"
                     for m in _rested(ds))
    return "This run: " + (gaps or "no plateau was detected") + "."


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``)."""
    import json

    run = json.loads(ds.attrs["runs"])["attn_s"]
    return dict(rank=run["rank"], seed=run["seed"], snapshot_every=ds.attrs["snapshot_every"],
                settings=describe(run, snapshot_every=ds.attrs["snapshot_every"]), source=source(ds))


def source(ds) -> str:
    """Which run the page reads: Figure 3a's seed-0 run at the published settings, else Figure 3a's experiment at
    settings of our own (the paper's figure is not this run)."""
    if ds.attrs.get("published"):
        return "the seed-0 ATTN_S run of Figure 3a"
    return ("an ATTN_S run of Figure 3a's experiment at settings of our own (the paper's Figure 3a is its seed 0 at "
            "the published settings)")


def plot(ds):
    """Top: the learned A in the eigenbasis of Λ mid-plateau at each saddle the run rested at; middle: the theory's
    A_m; bottom: the relative gap to each saddle's predictor over the steps."""
    import matplotlib.pyplot as plt

    ms, D = _rested(ds), ds.sizes["direction"]
    vmax = max(float(np.abs(ds.A_theory.isel(m=-1)).max()), 1e-12)
    fig = plt.figure(figsize=(6.6, 6.6), layout="constrained")
    gs = fig.add_gridspec(3, max(len(ms), 1), height_ratios=[1, 1, 1.3])
    heat, ticks, im = [], [f"$e_{d}$" for d in range(1, D + 1)], None
    for j, m in enumerate(ms):
        for row, M in enumerate((ds.A_learned.sel(m=m).values, ds.A_theory.sel(m=m).values)):
            ax = fig.add_subplot(gs[row, j])
            heat.append(ax)
            im = ax.imshow(M, cmap="RdBu_r", vmin=-vmax, vmax=vmax)
            if row == 0:
                ax.set_title(f"$ℳ_{{{m}}}$")
            ax.set_xticks(range(D), ticks if row == 1 else [])
            ax.set_yticks(range(D), ticks if j == 0 else [])
            if j == 0:
                ax.set_ylabel(("learned $A$", "PCR (theory)")[row])
    if im is not None:
        fig.colorbar(im, ax=heat, shrink=0.8, location="right", label="$e_i^\\top A e_j$")
    ax = fig.add_subplot(gs[2, :])
    colors = plt.cm.viridis(np.linspace(0.0, 0.85, D + 1))
    step = ds.step.values
    for m in ds.m.values:
        ax.semilogy(step, np.maximum(ds.gap.sel(m=m).values, 1e-8), color=colors[m], label=f"to $ℳ_{{{m}}}$")
    ax.set_xlabel("step")
    ax.set_ylabel("relative predictor gap")
    ax.set_xlim(step[0], step[-1])
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig
