"""Figure 3b: each head's value weight in the seed-0 ATTN_S run of Figure 3a rises one head at a time, beside the
scalar ODE τ v̇ = λ² v² − c λ³ v⁵ of paper Section 5.

The run is Figure 3a's seed 0 from the run store (:func:`~.common.attn_s_run.seed_run`), with its
value weights recorded at every step. Values are put in the paper's normalisation (``theory.weight_scale_to_paper``;
each head's sign so that its final value is positive) and steps in units of τ (``theory.steps_to_time``). Which
head learned which direction is read off the trained weights (``diagnostics.head_direction``,
``events.value_learners``); each learning head's rise is set beside the ODE shifted to the head's own half-rise
(``events.scalar_ode_rise``, ``events.compare_rise``), which leaves the shape of the rise a prediction with no free
parameter; each rise proper (``events.rise_window``: from the last passage of 30 % of the final value to 90 %,
so that a shoulder a head sits on before its rise is not timed) over the ODE's is worded by ``events.rise_verdict``.
"""

from __future__ import annotations

import numpy as np

from ... import theory
from ...analysis import diagnostics, events
from ...weights import model_weights
from .. import presets, published
from ..output import MarkdownTable, step_number, subscript
from ..output import words as list_words
from .common import preset_blocks
from .common.attn_s_run import describe, join, seed_run
from .common.frame import settings_attrs

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {k: dict(v, track_value=True) for k, v in preset_blocks.SEED0_RUN.items()}
# Settings a page must stay true at beyond the presets (tests/test_knob_cases.py builds each at the quick preset):
# another seed, D and H (fewer heads than Figure 3a's five), and a run too short for every head to rise
KNOB_CASES = (dict(in_dim=3, head_num=4, seed=2, epoch=3001), dict(seed=5, epoch=801))
TOLERANCES = [(r"final_value\..*", "rel", 0.03), (r"in_order", "abs", 0.0),
              (r"max_gap\..*", "abs", 0.1)]
# the names (in this module) of the paper's numbers it compares with
PUBLISHED = ("PUBLISHED_FINAL_VALUES",)



def runs(S: dict) -> dict:
    """The one run: Figure 3a's seed-0 run (the same settings and snapshot interval on the five pages that read it,
    so the run store trains it once)."""
    return preset_blocks.sweep(S)


def compute(S: dict):
    """Every head's value weight (``value``: step × head, paper normalisation) with the shifted scalar ODE of each
    head that learned a direction (``value_ode``: NaN for the others and before the ODE starts), the time t/τ of
    each step, the direction each head ends up aligned with (``head_direction``: head), and per direction: the head
    that learned it (``learner``: 0 where none did), its final value beside the theory's (λ_d c_d)^{-1/3}, the step
    at which it reached half of it, and how its rise compares with the ODE's (largest gap relative to the final
    value, the rise proper in steps, ``events.rise_window``, the run's and the ODE's)."""
    import xarray as xr

    res = seed_run(runs(S), S)
    cfg, step = res.config, res.history.step
    cov, N = res.datasets.cov, cfg.N
    lam, c = theory.spectrum(cov)[0], theory.c_d(cov, N)
    D = len(lam)
    v_final = theory.final_value_weights(cov, N, normalize="mean")  # paper normalisation, decreasing λ
    t = theory.steps_to_time(step, cfg.lr, normalize=cfg.normalize, model=cfg.model, N=N)
    direction = diagnostics.head_direction(diagnostics.head_matrices(model_weights(cfg.model, res.weights)), cov)
    values = res.history.values * theory.weight_scale_to_paper(cfg.model, N, normalize=cfg.normalize)
    values = values * np.sign(values[-1])  # final value positive (v k qᵀ is unchanged when v and k both flip)
    H = values.shape[1]
    by_dir = events.value_learners(values[-1], direction, v_final)  # {direction: the head that learned it}
    ode = np.full(values.shape, np.nan)
    per_dir = {k: np.full(D, np.nan) for k in ("final", "half", "gap", "rise", "rise_ode")}
    learner = np.zeros(D, dtype=int)
    for d, h in by_dir.items():
        ode[:, h] = events.scalar_ode_rise(values[:, h], t, lam[d], c[d])
        rise = events.compare_rise(values[:, h], ode[:, h], step, v_final[d])
        learner[d] = h + 1
        per_dir["final"][d] = values[-1, h]
        per_dir["half"][d] = step[np.argmax(values[:, h] >= 0.5 * v_final[d])]  # the order the heads switch on in
        per_dir["gap"][d] = np.nan if rise.max_gap is None else rise.max_gap
        per_dir["rise"][d] = np.nan if rise.rise_steps is None else rise.rise_steps
        per_dir["rise_ode"][d] = np.nan if rise.rise_steps_ode is None else rise.rise_steps_ode
    half = [per_dir["half"][d] for d in by_dir]
    ds = xr.Dataset(
        {"value": (("step", "head"), values), "value_ode": (("step", "head"), ode), "time_over_tau": ("step", t),
         "head_direction": ("head", np.asarray(direction, dtype=int) + 1),
         "learner": ("direction", learner), "final_value": ("direction", per_dir["final"]),
         "final_value_theory": ("direction", v_final), "half_rise_step": ("direction", per_dir["half"]),
         "max_gap": ("direction", per_dir["gap"]), "rise_steps": ("direction", per_dir["rise"]),
         "rise_steps_ode": ("direction", per_dir["rise_ode"]), "eigenvalue": ("direction", lam)},
        coords={"step": step, "head": np.arange(1, H + 1), "direction": np.arange(1, D + 1)},
        attrs=settings_attrs(S, engine=res.engine, seeds=S["seed"], runs={"attn_s": cfg.to_dict()}))
    ds.attrs["run_key"] = res.key  # the run store's entry: the same for the five pages on this run
    ds.attrs.update(in_order=int(bool(np.all(np.diff(half) > 0))), published=int(presets.is_published(NAME, S)))
    ds.value.attrs["description"] = "value weight of each head, paper normalisation, sign so the final value is > 0"
    ds.value_ode.attrs["description"] = "scalar ODE shifted to the head's own half-rise (learning heads only)"
    ds.learner.attrs["description"] = "the head (1 … H) that learned the direction; 0: none did"
    return ds


def _learned(ds) -> list[tuple[int, int]]:
    """(direction, head) of each direction some head learned, both counted from 1."""
    return [(int(d), int(h)) for d, h in zip(ds.direction.values, ds.learner.values) if h > 0]


def numbers(ds) -> list[dict]:
    """``numbers.json``: the final value weight of each learning head beside the theory (the paper's stated values
    are the theory's (λ_d c_d)^(−1/3), so they sit in the theory column, never a "paper" one), the largest gap to the
    ODE during each rise and the rise times, and whether the heads switched on in order of decreasing eigenvalue."""
    learned = _learned(ds)
    rows = [dict(key=f"final_value.e{d}", quantity=f"final value weight, head learning e_{d}",
                 theory=ds.final_value_theory.sel(direction=d), reproduced=ds.final_value.sel(direction=d))
            for d, _ in learned]
    for d, _ in learned:
        gap = float(ds.max_gap.sel(direction=d))
        rise = float(ds.rise_steps.sel(direction=d))
        rows.append(dict(key=f"max_gap.e{d}", quantity=f"max |v − v_ODE| / v_final from 5 % to 95 % of v_final, e_{d}",
                         theory=0.0, reproduced=gap if np.isfinite(gap) else None))
        rows.append(dict(key=f"rise_steps.e{d}", quantity=f"rise time {_window()} (steps), e_{d}",
                         theory=step_number(ds.rise_steps_ode.sel(direction=d)), reproduced=step_number(rise)))
    rows.append(dict(key="in_order", quantity="heads switch on in order of decreasing eigenvalue (1 = yes)",
                     theory=1.0, reproduced=float(ds.attrs["in_order"])))
    return rows


def table(ds) -> MarkdownTable:
    """Which head learned each direction, its final value beside the theory's (the values the paper states are these
    theory values, so there is no "paper" column) and its half-rise step."""
    columns = {"direction": "direction", "head": "head", "theory": "theory, final value",
               "final": "this run, final value", "half": "this run, half-rise step"}
    return MarkdownTable(
        [dict(direction=f"$e_{d}$", head=h, theory=float(ds.final_value_theory.sel(direction=d)),
              final=float(ds.final_value.sel(direction=d)), half=step_number(ds.half_rise_step.sel(direction=d)))
         for d, h in _learned(ds)],
        columns, {"theory": ".3f", "final": ".3f"})


def _window() -> str:
    """The rise proper in words (``events.rise_window``)."""
    return (f"from the last passage of {100 * events.RISE_FROM:g} % of the final value to "
            f"{100 * events.RISE_TO:g} %")


def _e(d: int) -> str:
    """Direction d as plain text (glued text shows no math): e₁, e₂, …"""
    return "e" + subscript(d)


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``): the settings, which heads rose and in what
    order, and how the rises compare with the ODE, as sentences that say only what happened in this run."""
    import json

    run = json.loads(ds.attrs["runs"])["attn_s"]
    learned = _learned(ds)
    gaps = ds.max_gap.values
    with np.errstate(divide="ignore", invalid="ignore"):  # a rise the ODE does not make: no ratio
        ratios = ds.rise_steps.values / ds.rise_steps_ode.values
    H = ds.sizes["head"]
    if not learned:
        heads = f"none of the {H} heads rises to the final value of a direction"
    else:
        heads = (f"{len(learned)} of the {H} heads rise{'s' if len(learned) == 1 else ''}, learning "
                 + join([_e(d) for d, _ in learned]))
        if len(learned) > 1:
            heads += (", and they switch on in order of decreasing eigenvalue" if ds.attrs["in_order"]
                      else ", and they do not switch on in order of decreasing eigenvalue")
    if np.isfinite(gaps).any() and np.isfinite(ratios).any():
        by: dict[str, list[int]] = {}  # verdict → the directions it holds for, in order
        for d, _ in learned:
            if np.isfinite(ratios[d - 1]):
                by.setdefault(events.rise_verdict(ratios[d - 1]), []).append(d)
        each = [f"{join([_e(d) for d in dirs])} rise{'s' if len(dirs) == 1 else ''} in "
                f"{join([f'{ratios[d - 1]:.2f}' for d in dirs])} times the ODE's time ({verdict})"
                for verdict, dirs in by.items()]
        same = set(by) == {"as fast as the ODE"}
        shape = ("so the rises have the ODE's shape" if same
                 else "so not every rise has the ODE's shape (the shift pins each pair together at mid-rise, so the "
                      "gap alone cannot show the shape)")
        ode = (f"each ODE curve is moved in time to cross half its final value when its head does, one fitted shift "
               f"per head; so placed it stays within {100 * np.nanmax(gaps):.0f} % of the final value of the run's "
               f"curve from 5 % to 95 % of it, {'and' if same else 'but'} over the rise proper, {_window()}, "
               f"{join(each)}, {shape}")
    else:
        ode = "no rise was measured in this run, so there is none to set beside the ODE"
    return dict(rank=run["rank"], seed=run["seed"], heads=heads, ode=ode,
                caption_lead=published.page.caption_lead("Figure 3b", bool(ds.attrs["published"])),
                rise_factor=f"{events.RISE_FACTOR:g}", window=_window(),
                settings=describe(run), final_values=list_words(np.round(ds.final_value_theory.values, 3)))


def plot(ds):
    """Every head's value weight over the steps, coloured by the direction it learned (grey: unused), the shifted
    scalar ODE of each learning head (dashed) and the final values (λ_d c_d)^{-1/3} (dotted)."""
    import matplotlib.pyplot as plt

    step, D = ds.step.values, ds.sizes["direction"]
    colors = plt.cm.viridis(np.linspace(0.0, 0.85, max(D, 1)))
    learners = set(int(h) for h in ds.learner.values if h > 0)
    fig, ax = plt.subplots(figsize=(4.9, 3.6))
    for h in ds["head"].values:
        d = int(ds.head_direction.sel(head=h))
        grown = int(h) in learners
        ax.plot(step, ds.value.sel(head=h), color=colors[d - 1] if grown else "0.6", linewidth=1.6,
                label=f"head {h} → $e_{d}$" if grown else f"head {h} (unused)")
    for h in sorted(learners):
        ax.plot(step, ds.value_ode.sel(head=h), color="black", linestyle="--", linewidth=0.9)
    for v in ds.final_value_theory.values:
        ax.axhline(v, color="0.45", linestyle=":", linewidth=1.0, zorder=0)
    ax.plot([], [], color="black", linestyle="--", linewidth=0.9, label="scalar ODE (shifted)")
    ax.set_xlim(step[0], step[-1])
    ax.set_xlabel("step")
    ax.set_ylabel("value weight $v_i$ (paper normalisation)")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


# The heads' final values the paper states, (λ_d c_d)^{-1/3} in its normalisation, at the published setting: theory
# values, which the tests check theory.final_value_weights against (the page shows the theory's own).
PUBLISHED_FINAL_VALUES = (1.310, 1.430, 1.612, 1.947)
