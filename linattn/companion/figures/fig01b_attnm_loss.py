"""Figure 1b: ATTN_M and the MLP on the cubic feature learn with one abrupt drop (paper Section 4.1).

Three runs on the same settings: ATTN_M; the MLP on the cubic feature z from its own random weights (the
reference's ``mlp`` command); and the same MLP started from the weights that compute exactly what ATTN_M computes
at step 0 (``linattn.mlp_from_attn_m``), on ATTN_M's data. The theory: a plateau at tr Λ (the loss of the zero
predictor), one sigmoidal drop, and the end at L* (``theory.loss_star``, Eq. 8). The theory's loss curve from each
run's own start is the same model trained on the population loss from the same initial weights
(``runstore.population_twin``); one half-drop rule reads run and theory alike (``loss_curves.half_drop_step``).
The logistic growth along the top direction of E[y z] (``diagnostics.attn_m_drop_step``) is kept as an estimate: it
gives when the mode strength reaches half its final value, not the loss midpoint.
"""

from __future__ import annotations

import numpy as np

from ... import mlp_from_attn_m, theory
from ...analysis import diagnostics, loss_curves
from ...config import RunConfig
from ...weights import model_weights
from .. import presets, published, uncertainty
from ..commands import train_command
from ..output import by_sign, prose_text
from ..published.readings import Image, Reading
from ..runstore import population_twin
from .common import preset_blocks
from .common.frame import settings_attrs
from .common.runs import FromRun
from .common.trainer import train

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    "quick": dict(preset_blocks.ATTN_M_PAPER, seed=10),  # the exact engine makes the published run as cheap as any
    "paper": dict(preset_blocks.ATTN_M_PAPER, seed=10),
}
# The README's "Reproduction at a glance" rows of this figure: (the paper's figure, what is shown, the keys of
# its numbers.json rows; a|b: the first that exists), checked by python -m linattn.companion.readme
# Settings of a reader's own the page must stay true at (each a few seconds at the quick preset).
KNOB_CASES = (dict(in_dim=3, head_num=4, epoch=2001), dict(seed=3, init=1e-4, trainset_size=1000, epoch=1501))
README_ROWS = (
    ("1b", "plateau, final loss (ATTN_M)", ("plateau.attn_m", "final_loss.attn_m")),
    # the same two read off the published plot (median over steps 100–800, mean over 5600–6000), ours measured alike;
    # away from the published settings there is no reading, and the row falls back on the two above
    ("1b", "the same, as read off the published plot (ATTN_M)",
     ("published.attn_m_plateau_median_over_steps_100_800|plateau.attn_m",
      "published.attn_m_final_mean_over_steps_5600_6000|final_loss.attn_m")),
    ("1b", "half-drop step (ATTN_M)", ("half_drop_step.attn_m",)),
)
TOLERANCES = [preset_blocks.PLATEAUS, (r"half_drop_step\.attn_m", "rel", 0.1)]
# the names (in this module) of the published readings and the rule it compares with
PUBLISHED = ("PUBLISHED_IMAGE", "PUBLISHED_READINGS", "PUBLISHED_PLATEAU", "PUBLISHED_FINAL", "compare_with_published")
MODELS = ("attn_m", "mlp_own_init", "mlp_matched_init")
LABELS = {"attn_m": "ATTN_M", "mlp_own_init": "MLP, own init (reference)", "mlp_matched_init": "MLP, matched to ATTN_M"}



def runs(S: dict) -> dict:
    """The three runs: ATTN_M; the MLP on the cubic feature from its own random weights; and the same MLP started
    from the weights that compute what ATTN_M computes at step 0 (``linattn.mlp_from_attn_m``), on ATTN_M's data."""
    attn_m = RunConfig(**preset_blocks.base_settings(S))
    mlp = RunConfig(**dict(preset_blocks.base_settings(S), model="mlp", cubic_feat=True))
    return {"attn_m": attn_m, "mlp_own_init": mlp,
            "mlp_matched_init": FromRun(mlp, "attn_m", "initial", convert=mlp_from_attn_m, same_data=True)}


def compute(S: dict):
    """The three runs' training losses (``train_loss``: model × step) and the population loss of each model from
    the run's own initial weights (``loss_population``; the matched MLP shares ATTN_M's: the same function of the
    same start), with what is measured on them — the first plateau's level, the half-drop step of the run's loss
    and of the population loss (``half_drop_step``, ``half_drop_step_theory``: ``loss_curves.half_drop_step`` on
    each), the final loss, the logistic estimate of the step at which the top mode's strength is half grown
    (``half_drop_step_estimate``) — and the theory's levels ``plateau_theory`` (tr Λ) and ``loss_star`` (L*); the
    settings, seed, engine and each run's settings as attributes."""
    import xarray as xr

    done = train(runs(S), S)
    attn = done["attn_m"]
    cov, N = attn.datasets.cov, attn.config.N
    step = attn.history.step
    loss = np.stack([r.history.train_loss for r in done.values()])
    twins = {k: population_twin(done[k]).history.train_loss for k in ("attn_m", "mlp_own_init")}
    population = np.stack([twins.get(k, twins["attn_m"]) for k in MODELS])  # matched MLP: ATTN_M's start
    found = [loss_curves.detect_plateaus(L) for L in loss]
    estimate = [diagnostics.attn_m_drop_step(model_weights(r.config.model, r.init), cov, N, lr=S["lr"],
                                             normalize=attn.config.normalize) for r in done.values()]
    estimate[MODELS.index("mlp_matched_init")] = estimate[0]  # the same function of the same start
    ds = xr.Dataset(
        {"train_loss": (("model", "step"), loss), "loss_population": (("model", "step"), population),
         "plateau_level": ("model", [p.levels[0] for p in found]),
         "half_drop_step": ("model", [loss_curves.half_drop_step(L, step) for L in loss]),
         "half_drop_step_theory": ("model", [loss_curves.half_drop_step(L, step) for L in population]),
         "half_drop_step_estimate": ("model", estimate),
         "final_loss": ("model", loss[:, -1]),
         "plateau_theory": float(np.trace(cov)), "loss_star": theory.loss_star(cov, N),
         "standard_error": ("weights", [uncertainty.mean_loss_error(uncertainty.per_sequence_losses(
             attn, "train", w), attn.datasets.train) for w in ("init", "final")])},
        coords={"model": list(MODELS), "step": step, "weights": ["start", "final"]},
        attrs=settings_attrs(S, engine=attn.engine, seeds=S["seed"],
                             runs={k: r.config.to_dict() for k, r in done.items()}))
    ds.attrs["commands"] = "\n".join(train_command(done[k].config) for k in ("attn_m", "mlp_own_init"))
    ds.attrs["published"] = int(presets.is_published(NAME, S))
    ds.loss_population.attrs["description"] = "population loss (P = ∞) of the same model from the run's initial weights"
    ds.standard_error.attrs["description"] = ("standard error of ATTN_M's training loss from its per-sequence losses "
                                              "at the initial and the final weights (uncertainty.mean_loss_error: "
                                              "the part the whitened task vectors fix left out)")
    ds.half_drop_step_estimate.attrs["description"] = ("logistic estimate: the step at which the top mode of "
                                                       "E[y z] is half grown (not the loss midpoint)")
    return ds


def comparison(ds) -> list[dict]:
    """ATTN_M and the MLP (own initialisation) beside the landmarks read off the published image (only at the
    published settings: [] otherwise)."""
    if not ds.attrs["published"]:
        return []
    loss, se = ds.train_loss, ds.standard_error
    sampling = published.rules.Sampling("train", float(se.sel(weights="start")), float(se.sel(weights="final")))
    twins = [ds.loss_population.sel(model=m).values for m in ("attn_m", "mlp_own_init")]
    return compare_with_published(loss.sel(model="attn_m").values, loss.sel(model="mlp_own_init").values,
                                  float(ds.loss_star), ds.step.values, sampling, twins)


def numbers(ds) -> list[dict]:
    """``numbers.json``: plateau, final losses and half-drop steps beside the theory, the largest gap between ATTN_M
    and the matched MLP, and the published landmarks. The plateau and minimum the paper's text states (tr Λ and L*)
    are theory values, so they sit in the theory column; a "paper" value is only one read off the published figure
    (the landmarks' rows)."""
    m = ds.sel(model="attn_m")
    rows = [dict(key="plateau.attn_m", quantity="plateau loss (ATTN_M)", theory=ds.plateau_theory,
                 reproduced=m.plateau_level),
            dict(key="final_loss.attn_m", quantity="final loss (ATTN_M)", theory=ds.loss_star, reproduced=m.final_loss),
            dict(key="final_loss.mlp_own_init", quantity="final loss (MLP, own init)", theory=ds.loss_star,
                 reproduced=ds.final_loss.sel(model="mlp_own_init"))]
    for model, label in (("attn_m", "ATTN_M"), ("mlp_own_init", "MLP, own init")):
        step = float(ds.half_drop_step.sel(model=model))
        rows.append(dict(key=f"half_drop_step.{model}",
                         quantity=f"half-drop step ({label}; theory: the population loss from the same start)",
                         theory=ds.half_drop_step_theory.sel(model=model),
                         reproduced=step if np.isfinite(step) else None))
    gap = np.abs(ds.train_loss.sel(model="attn_m") - ds.train_loss.sel(model="mlp_matched_init")).max()
    rows.append(dict(key="max_gap.mlp_matched_init", quantity="max |ATTN_M − matched MLP| over training", theory=0.0,
                     reproduced=gap))
    return rows + published.page.number_rows(comparison(ds))


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``)."""
    runs = _runs(ds)
    attn = runs["attn_m"]
    return dict(head_num=attn["head_num"], init=f"{attn['init']:g}", in_dim=attn["in_dim"],
                trainset_size=attn["trainset_size"], epoch=attn["epoch"], seed=attn["seed"],
                half_drop_attn_m=_step(ds.half_drop_step.sel(model="attn_m")),
                half_drop_population=_step(ds.half_drop_step_theory.sel(model="attn_m")),
                half_drop_estimate=_step(ds.half_drop_step_estimate.sel(model="attn_m")),
                lag_matched=lag_behind_attn_m(ds, "mlp_matched_init"), lag_own=lag_behind_attn_m(ds, "mlp_own_init"),
                caption_lead=published.page.caption_lead("Figure 1b", bool(ds.attrs["published"])),
                gap_matched=prose_text(np.abs(ds.train_loss.sel(model="attn_m")
                                              - ds.train_loss.sel(model="mlp_matched_init")).max(), 2))


def _step(x):
    """A step for the prose: the whole step, or "not within the run" where the loss never crossed its midpoint."""
    x = float(x)
    return int(round(x)) if np.isfinite(x) else "not within the run"


def lag_behind_attn_m(ds, model: str) -> str:
    """How far ``model``'s half-drop lies from ATTN_M's, in words: "6 steps after", "19 steps before" or "at the
    same step as" (``output.by_sign``)."""
    lag = float(ds.half_drop_step.sel(model=model) - ds.half_drop_step.sel(model="attn_m"))
    if not np.isfinite(lag):
        return "– (no half-drop) relative to"
    return (f"{abs(lag):.0f} steps " if lag else "") + by_sign(lag, "before", "after", "at the same step as")


def _runs(ds) -> dict:
    import json

    return json.loads(ds.attrs["runs"])


def plot(ds):
    """Training loss of the three runs, ATTN_M's population loss from the same start (grey), and the theory's
    plateau tr Λ and minimum L* (dotted)."""
    import matplotlib.pyplot as plt

    from ..plotting import plot_loss_with_theory

    styles = {"attn_m": dict(color="black", linewidth=2.0), "mlp_own_init": dict(color="tab:blue", linestyle="--",
                                                                                 linewidth=1.2),
              "mlp_matched_init": dict(color="tab:orange", linestyle=":", linewidth=2.0)}
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    plot_loss_with_theory(ax, ds.step.values,
                          [(ds.train_loss.sel(model=m).values, LABELS[m], styles[m]) for m in MODELS]
                          + [(ds.loss_population.sel(model="attn_m").values, "ATTN_M, population loss (P = ∞)",
                              dict(color="0.55", linewidth=1.0))],
                          levels=[float(ds.plateau_theory), float(ds.loss_star)],
                          level_labels=["$\\mathrm{tr}\\,\\Lambda$", "$L^*$"], legend="center right")
    ax.set_ylim(0, 1.1 * max(float(ds.train_loss.sel(model="attn_m").max()), float(ds.plateau_theory)))
    return fig


# ---------------------------------------------------------------------------- the published readings (seed 10)
# Read off the authors' own plot of Figure 1b: one pixel is 21.83 steps and 0.00508 in loss (axes 0–6000 steps,
# 0–1.11).
PUBLISHED_IMAGE = Image("Figure 1b", 21.83, 0.00508)
# Numbers the paper states in its text: ATTN_M's plateau at tr Λ and the minimum L* (D = 4, N = 31). They are theory
# values (the tests check them against ``theory``), never set in a "paper" column: the page's rows give the theory's
# own.
PUBLISHED_PLATEAU, PUBLISHED_FINAL = 1.0, 0.136
# ATTN_M (H = 8, P = 5000, init 1e-6, lr 1e-3) and the MLP on the cubic feature (its own initialisation).
PUBLISHED_READINGS = [
    Reading("", "ATTN_M plateau (median over steps 100–800)", "attn_m", ("median", (100, 800)), 1.007, "loss", 0.005,
            on_start=True),
    *[Reading("", f"ATTN_M first below {level:g}, step", "attn_m", ("below", level), step, "step", 22)
      for level, step in ((0.9, 906), (0.7, 969), (0.5, 1019), (0.3, 1124))],
    Reading("", "ATTN_M at step 3000", "attn_m", ("at", 3000), 0.142, "loss"),
    Reading("", "ATTN_M final (mean over steps 5600–6000)", "attn_m", ("mean", (5600, 6000)), 0.135, "loss", 0.005),
    # the image's drawing of L* beside our theory's L*: a check that the image is read right, not counted as agreement
    Reading("", "dotted line L* (ours: theory)", "L_star", ("final",), 0.136, "loss", checks_reading=True),
    Reading("", "MLP's lag behind ATTN_M on the drop (mean over losses 0.22–0.89), steps", "mlp",
            ("lag", (0.22, 0.89)), 15, "step"),
]


def compare_with_published(attn_m, mlp, L_star: float, steps=None, sampling=None, population=None) -> list[dict]:
    """ATTN_M's plateau, crossings, late and final values, the theory's L* against the dotted line (a check of the
    reading, not counted as agreement: ``Reading.checks_reading``), and the MLP's
    (own initialisation) lag behind ATTN_M on the drop, beside :data:`PUBLISHED_READINGS`. ``sampling``: ATTN_M's
    training loss's ``published.rules.Sampling``; ``population``: the population twins (the same starts, P = ∞) of
    ATTN_M and the MLP, a pair of curves, whose crossings and lag give each step reading its finite-P margin."""
    curves = {"attn_m": attn_m, "mlp": mlp, "reference": attn_m, "L_star": [L_star]}
    twins = {} if population is None else dict(zip(("attn_m", "mlp"), population), reference=population[0])
    return published.rules.compare(PUBLISHED_READINGS, curves, PUBLISHED_IMAGE, steps,
                                   {"attn_m": sampling} if sampling else None, twins) if len(attn_m) else []
