"""Appendix: ATTN_M with white input covariance beside the analytic time course (an appendix figure of the paper).

With Λ = I/D the theory gives ATTN_M's whole learning curve in closed form: ŷ = σ(t) βᵀx_q with a logistic σ(t)
rising to σ(∞) = D/c, c = 1 + (1+D)/N (``theory.white_sigma``), and the loss L(σ) = 1 − 2σ/D + cσ²/D²
(``theory.white_loss``). A random small start is mapped onto the closed form's balanced start through its effective
initial size a₀ (``diagnostics.attn_m_effective_a0``), with nothing fitted. One run per seed; σ = tr A / D is measured
on the recorded weight snapshots (``diagnostics.white_sigma``), time in the paper's units t/τ
(``theory.steps_to_time``). The half-drop of the run and of the analytic curve is one rule applied to each loss
curve (``loss_curves.half_drop_step``: the first step below the midpoint of its first and last value).
"""

from __future__ import annotations

import numpy as np

from ... import theory
from ...analysis import diagnostics, loss_curves
from ...weights import model_weights
from .. import presets
from ..commands import train_command
from ..output import MarkdownTable, by_sign, prose_text
from ..runstore import population_twin
from .common import preset_blocks
from .common.attn_s_run import describe
from .common.frame import settings_attrs
from .common.trainer import train

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    "quick": dict(preset_blocks.WHITE_ATTN_M, lr=1e-3, epoch=3001, trainset_size=1000, seeds=[10], snapshot_every=5),
    "paper": dict(preset_blocks.WHITE_ATTN_M, lr=1e-3, epoch=3001, trainset_size=5000, seeds=[10, 11, 12],
                  snapshot_every=5),
}
# Settings of a reader's own the page must stay true at (each a few seconds at the quick preset).
KNOB_CASES = (dict(in_dim=3, head_num=4, epoch=2001), dict(seeds=[3, 4], trainset_size=500, epoch=2501))
TOLERANCES = [preset_blocks.PLATEAUS, (r"final_sigma\..*", "rel", 0.05)]



def runs(S: dict) -> dict:
    """One run per seed (``seeds``), in their order."""
    return preset_blocks.sweep(S)


def compute(S: dict):
    """Every seed's training loss and the analytic loss from its own start (``train_loss``, ``loss_theory``: seed ×
    step), σ = tr A / D at the recorded snapshots (``sigma``: NaN between them) and the analytic σ
    (``sigma_theory``), with t/τ as a coordinate along ``step``; per seed the effective initial size ``a0``, the
    half-drop step of the run's loss and of the analytic loss (``half_drop_step``, ``half_drop_step_theory``: the
    same rule, ``loss_curves.half_drop_step``, on each curve), the final σ and loss, and the largest gap between the
    simulated and the analytic loss and its step (``max_gap``, ``max_gap_step``); the theory's levels
    ``plateau_theory`` (tr Λ = 1),
    ``loss_star`` (1 − 1/c) and ``sigma_final_theory`` (D/c)."""
    import xarray as xr

    done = list(train(runs(S), S).values())  # one per seed
    D, N = S["in_dim"], done[0].config.N
    kappa, c = 1.0 / D, theory.white_c(D, N)
    # the losses' steps and the snapshots' (the last snapshot holds the weights after the last step, whose loss is
    # not recorded: NaN there)
    snapshots = [r.snapshots_of(diagnostics.white_sigma, arrays=True, N=N, normalize=r.config.normalize)
                 for r in done]  # tr A/D
    trained = done[0].history.step
    step = np.union1d(trained, [s for snaps in snapshots for s, _ in snaps]).astype(trained.dtype)
    t = theory.steps_to_time(step, S["lr"], normalize="sum", model="attnM", N=N)
    at = {int(s): i for i, s in enumerate(step)}
    per_seed: dict[str, list] = {k: [] for k in ("loss", "loss_theory", "sigma_theory", "sigma", "a0", "final_sigma",
                                                 "drop", "drop_theory", "drop_population")}
    for r, snaps in zip(done, snapshots):
        cov, model = r.datasets.cov, model_weights("attnM", r.init)
        a0 = diagnostics.attn_m_effective_a0(model, cov, N, normalize="sum")
        sigma_theory = theory.white_sigma(t, D, N, np.sqrt(a0), kappa=kappa)
        loss, sigma = np.full(len(step), np.nan), np.full(len(step), np.nan)
        loss[[at[int(s)] for s in r.history.step]] = r.history.train_loss
        sigma[[at[int(s)] for s, _ in snaps]] = [v for _, v in snaps]
        loss_theory = np.asarray(theory.white_loss(sigma_theory, D, N, kappa=kappa))
        trained_at = [at[int(s)] for s in r.history.step]
        per_seed["loss"].append(loss)
        per_seed["loss_theory"].append(loss_theory)
        per_seed["sigma_theory"].append(sigma_theory)
        per_seed["sigma"].append(sigma)
        per_seed["a0"].append(a0)
        per_seed["final_sigma"].append(snaps[-1][1])
        per_seed["drop"].append(loss_curves.half_drop_step(r.history.train_loss, r.history.step))
        per_seed["drop_theory"].append(loss_curves.half_drop_step(loss_theory[trained_at], r.history.step))
        twin = population_twin(r).history  # the same model, start and steps on the population loss (P = ∞)
        per_seed["drop_population"].append(loss_curves.half_drop_step(twin.train_loss, twin.step))
    loss, loss_theory = np.array(per_seed["loss"]), np.array(per_seed["loss_theory"])
    gap = np.abs(loss - loss_theory)
    worst = np.argmax(np.where(np.isfinite(gap), gap, -np.inf), axis=1)
    ds = xr.Dataset(
        {"train_loss": (("seed", "step"), loss),
         "loss_theory": (("seed", "step"), loss_theory),
         "sigma": (("seed", "step"), np.array(per_seed["sigma"])),
         "sigma_theory": (("seed", "step"), np.array(per_seed["sigma_theory"])),
         "a0": ("seed", per_seed["a0"]),
         "half_drop_step": ("seed", per_seed["drop"]),
         "half_drop_step_theory": ("seed", per_seed["drop_theory"]),
         "half_drop_step_population": ("seed", per_seed["drop_population"]),
         "final_sigma": ("seed", per_seed["final_sigma"]),
         "final_loss": ("seed", [r.history.train_loss[-1] for r in done]),
         "max_gap": ("seed", np.nanmax(gap, axis=1)), "max_gap_step": ("seed", step[worst]),
         "plateau_theory": 1.0, "loss_star": 1 - 1 / c, "sigma_final_theory": D / c},
        coords={"seed": [r.config.seed for r in done], "step": step, "t_over_tau": ("step", t)},
        attrs=settings_attrs(S, engine=done[0].engine, seeds=S["seeds"],
                             runs={str(r.config.seed): r.config.to_dict() for r in done}))
    ds.attrs.update(published=int(presets.is_published(NAME, S)), snapshot_every=int(S["snapshot_every"]),
                    in_dim=int(D), N=int(N), commands="\n".join(train_command(r.config) for r in done))
    ds.train_loss.attrs["description"] = "training loss (NaN at the last snapshot: the weights after the last step)"
    ds.sigma.attrs["description"] = "tr A / D of the combined in-context matrix, at the recorded weight snapshots"
    ds.t_over_tau.attrs["description"] = "gradient-flow time in the paper's units (theory.steps_to_time)"
    ds.half_drop_step_population.attrs["description"] = ("half-drop step of the population twin: the same model "
                                                         "trained on the population loss from the run's start")
    return ds


def numbers(ds) -> list[dict]:
    """``numbers.json``, per seed: the half-drop step of the run beside that of the analytic loss from its start, the
    final σ beside D/c, the final loss beside L* = 1 − 1/c, and the largest gap between the simulated and the
    analytic loss (for information: no theory value). No row has a paper value: this appendix figure's numbers are
    unconfirmed, and L* is the theory's own (D+1)/(N+D+1), not a statement of the paper to check against."""
    rows = []
    for s in ds.seed.values:
        at, label = ds.sel(seed=s), f"seed {s}"
        drop = float(at.half_drop_step)
        twin = float(at.half_drop_step_population)
        rows += [dict(key=f"half_drop_step.seed{s}", quantity=f"{label}: half-drop step (loss midpoint)",
                      theory=float(at.half_drop_step_theory), reproduced=drop if np.isfinite(drop) else None),
                 dict(key=f"half_drop_step_population.seed{s}",
                      quantity=f"{label}: half-drop step of the population twin (the same start, P = ∞)",
                      theory=float(at.half_drop_step_theory), reproduced=twin if np.isfinite(twin) else None),
                 dict(key=f"final_sigma.seed{s}", quantity=f"{label}: final σ (σ(∞) = D/c)",
                      theory=ds.sigma_final_theory, reproduced=at.final_sigma),
                 dict(key=f"final_loss.seed{s}", quantity=f"{label}: final loss (L* = 1 − 1/c)",
                      theory=ds.loss_star,
                      reproduced=at.final_loss),
                 dict(key=f"max_gap.seed{s}", quantity=f"{label}: max |L_sim(t) − L_theory(t)| (for information: "
                      "from a random start the closed form is approximate)", reproduced=at.max_gap)]
    return rows


def seed_table(ds) -> MarkdownTable:
    """Per seed: the half-drop step predicted and found, the final loss, and the largest gap to the analytic loss."""
    rows = [dict(seed=int(s), drop_theory=float(ds.half_drop_step_theory.sel(seed=s)),
                 drop_population=float(ds.half_drop_step_population.sel(seed=s)),
                 drop_run=float(ds.half_drop_step.sel(seed=s)),
                 final_run=float(ds.final_loss.sel(seed=s)), gap=float(ds.max_gap.sel(seed=s)))
            for s in ds.seed.values]
    columns = {"seed": "seed", "drop_theory": "half-drop step, analytic loss",
               "drop_population": "half-drop step, population twin", "drop_run": "half-drop step, run",
               "final_run": "final loss, run",
               "gap": "max gap to the analytic loss"}
    return MarkdownTable(rows, columns, {"drop_theory": ".0f", "drop_population": ".0f", "drop_run": ".0f",
                                         "final_run": ".4f", "gap": ".4f"})


def _runs(ds) -> dict:
    import json

    return json.loads(ds.attrs["runs"])


def shift_words(steps, reference) -> str:
    """How far the half-drop ``steps`` lie from the ``reference`` steps, seed by seed, in one phrase: "2–117 steps
    (0.1–7.6 %) earlier", "6 steps (0.4 %) later", "at the same step", or, with both signs, "from 51 steps earlier to
    6 steps later"; "not within the run" where no seed has both. Steps are whole numbers, shares of the reference."""
    steps, reference = np.asarray(steps, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    known = np.isfinite(steps) & np.isfinite(reference)
    if not known.any():
        return "not within the run"
    d, ref = steps[known] - reference[known], reference[known]
    if (d < 0).any() and (d > 0).any():
        return f"from {-d.min():.0f} steps earlier to {d.max():.0f} steps later"
    size, share = np.abs(d), 100 * np.abs(d) / ref
    if not size.any():
        return "at the same step"
    lo, hi = int(np.argmin(size)), int(np.argmax(size))
    steps_text = f"{size[lo]:.0f}–{size[hi]:.0f} steps" if size[lo] != size[hi] else f"{size[hi]:.0f} steps"
    share_text = f"{share[lo]:.2g}–{share[hi]:.2g} %" if size[lo] != size[hi] else f"{share[hi]:.2g} %"
    return f"{steps_text} ({share_text}) {by_sign(d[hi], 'earlier', 'later', '')}"


def drop_shifts(ds) -> dict:
    """The half-drops of the runs and of their population twins (the same starts on the population loss), each
    against the analytic curve's from the same start (:func:`shift_words`): ``drop_shift``, ``twin_shift``."""
    theory_steps = ds.half_drop_step_theory.values
    return dict(drop_shift=shift_words(ds.half_drop_step.values, theory_steps),
                twin_shift=shift_words(ds.half_drop_step_population.values, theory_steps))


def largest_gap(ds) -> str:
    """Where the simulated and the analytic loss lie furthest apart: the gap, its seed and step, and whether that step
    lies on the drop, between the run's and the analytic half-drop (then it is the time shift between two falling
    curves, not a difference of level)."""
    s = ds.seed.values[int(np.nanargmax(ds.max_gap.values))]
    at = ds.sel(seed=s)
    step, run, th = float(at.max_gap_step), float(at.half_drop_step), float(at.half_drop_step_theory)
    on_drop = np.isfinite(run) and np.isfinite(th) and min(run, th) <= step <= max(run, th)
    return (f"{float(at.max_gap):.2g} (seed {s}, step {step:.0f}"
            + (", on the drop between the two half-drops: the shift in time of a steep curve" if on_drop else "")
            + ")")


def words(ds) -> dict:
    """The values and sentences the page's prose quotes, by name (for ``output.glue``)."""
    run = next(iter(_runs(ds).values()))
    return dict(**drop_shifts(ds),
                final_gap=f"{float(np.abs(ds.final_loss - ds.loss_star).max()):.2g}",
                max_gap=largest_gap(ds), D=ds.attrs["in_dim"],
                N=ds.attrs["N"], L_star=prose_text(float(ds.loss_star), 4),
                settings=describe(run, seeds=[int(s) for s in ds.seed.values],
                                  snapshot_every=ds.attrs["snapshot_every"])
                + (", white input covariance" if run["white_cov"] else ""))


def plot(ds):
    """Left: each seed's training loss (black) against the analytic loss from its own start (red, dashed), with tr Λ
    and L* dotted; right: σ = tr A / D at the snapshots against the analytic σ, rising to D/c; time in t/τ."""
    import matplotlib.pyplot as plt

    from ..plotting import theory_lines

    trained = np.isfinite(ds.train_loss.values).all(axis=0)  # the steps whose loss is recorded
    t = ds.t_over_tau.values[trained]
    fig, (ax_l, ax_s) = plt.subplots(1, 2, figsize=(6.6, 3.3))
    for i, s in enumerate(ds.seed.values):
        at = ds.sel(seed=s)
        sim, th = ("simulation", "theory") if i == 0 else (None, None)
        recorded = np.isfinite(at.sigma.values)
        ax_l.plot(t, at.train_loss.values[trained], color="black", alpha=0.8, label=sim)
        ax_l.plot(t, at.loss_theory.values[trained], color="tab:red", linestyle="--", linewidth=1.2, label=th)
        ax_s.plot(ds.t_over_tau.values[recorded], at.sigma.values[recorded], color="black", alpha=0.8, label=sim)
        ax_s.plot(t, at.sigma_theory.values[trained], color="tab:red", linestyle="--", linewidth=1.2, label=th)
    theory_lines(ax_l, [float(ds.plateau_theory), float(ds.loss_star)], ["$\\mathrm{tr}\\,\\Lambda$", "$L^*$"])
    theory_lines(ax_s, [float(ds.sigma_final_theory)], ["$D/c$"])
    for ax, ylabel in ((ax_l, "training loss"), (ax_s, "$\\sigma = \\mathrm{tr}\\,A / D$")):
        ax.set_xlabel("$t / \\tau$")
        ax.set_ylabel(ylabel)
        ax.set_xlim(t[0], t[-1])
        ax.legend(loc="center left")  # the curves stay flat there until the drop
    fig.tight_layout()
    return fig
