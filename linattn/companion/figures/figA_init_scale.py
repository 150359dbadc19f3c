"""The subject of an appendix figure of the paper (its content unconfirmed), tested against the theory's escape
times: how long the first plateau lasts depends on the initialisation scale, logarithmically for ATTN_M and as a
power law for ATTN_S; and whether a large scale shows a plateau at all.

One run per initialisation scale of each model (``inits_m`` for the ``attn_m`` run settings, ``inits_s`` for
``attn_s``) through the run store. Measured: the step of each curve's first drop (``loss_curves.first_drop_step``:
the first step below the midpoint of its start and end; none where it falls at once, and none where it never falls
by ``loss_curves.MIN_FALL`` of its start, which ``loss_curves.first_drop_course`` words), and the law fitted to the
small scales with a drop (``diagnostics.escape_law``: steps per unit of ln(1/init) for ATTN_M, the exponent for
ATTN_S). The theory, for both models: the same rule on the population loss of the same model from each run's own
initial weights (``runstore.population_twin``, every head included); beside it for ATTN_M the slope τ/s
(``theory.attn_m_mode``), for ATTN_S the one-head escape time τ/(λ₁² v₀) of ``theory.attn_s_drop_steps`` (v₀ the
geometric mean of a head's starting value and key/query scales for the run's initialisation era; exponent −1), an
order of magnitude: it knows neither the number of heads nor the random start's direction.
"""

from __future__ import annotations

import numpy as np

from ... import theory
from ...analysis import diagnostics, loss_curves
from ...weights import model_weights
from .. import presets
from ..output import ESTIMATE, MarkdownTable
from ..output import words as list_words
from ..plotting import top_title
from ..published.rules import slug
from ..runstore import population_twin
from .common import preset_blocks
from .common.frame import settings_attrs
from .common.trainer import train

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    # the init of each run is the swept inits_m / inits_s value
    "quick": dict(attn_m=preset_blocks.run_settings(model="attnM", head_num=8, lr=1e-3, in_dim=4, seq_len=32,
                                             trainset_size=1000, init_scheme="jan2025", epoch=1501),
                  attn_s=preset_blocks.run_settings(model="attnS", head_num=1, rank=1, lr=0.02, in_dim=4, seq_len=32,
                                             trainset_size=1000, init_scheme="jan2025", epoch=2001),
                  inits_m=[1e-6, 1e-3, 0.3], inits_s=[1e-2, 2e-2, 0.3], seed=10),
    "paper": dict(attn_m=preset_blocks.run_settings(model="attnM", head_num=8, lr=1e-3, in_dim=4, seq_len=32,
                                             trainset_size=5000, init_scheme="jan2025", epoch=4001),
                  attn_s=preset_blocks.run_settings(model="attnS", head_num=1, rank=1, lr=0.02, in_dim=4, seq_len=32,
                                             trainset_size=5000, init_scheme="jan2025", epoch=20001),
                  inits_m=[1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 0.3], inits_s=[1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 0.3],
                  seed=10),
}
#: Other settings the page must stay true at (built at the quick preset by the suite): another D and H, and a
#: smallest ATTN_S scale too small to leave its plateau within the run (no drop, no law point)
KNOB_CASES = (dict(in_dim=3, head_num=2, inits_s=[0.005, 0.01, 0.3], inits_m=[1e-4, 1e-2, 0.3]),
              dict(inits_s=[1e-4, 0.01, 0.02, 0.3]))
HELP = {
    "inits_m": "ATTN_M initialisation scales, one run each",
}
TOLERANCES = [(r"law\.attn_s", "abs", 0.1), (r"law\.attn_m", "rel", 0.15)]
SMALL = 0.1  # scales below this are "small" (the regime of the escape-time laws); larger ones are not fitted
MODELS = {"attn_m": "attnM", "attn_s": "attnS"}  # the settings' run → the model it trains
LABELS = {"attn_m": "ATTN_M", "attn_s": "ATTN_S"}
_INITS = {"attn_m": "inits_m", "attn_s": "inits_s"}



def runs(S: dict) -> dict:
    """One ATTN_M run per scale of ``inits_m``, then one ATTN_S run per scale of ``inits_s``."""
    return preset_blocks.sweep(S)


def compute(S: dict):
    """Every run's training loss (``train_loss``: model × init × step, over the scales of both models and the
    longer run's steps; NaN where a model was not run at a scale, and past a shorter run's end), which runs were
    trained (``trained``), each run's first-drop step (``drop_step``: NaN where it has no plateau or no drop; which of
    the two in ``drop_course``, ``loss_curves.first_drop_course``) beside the
    theory's from the same start where the theory gives a loss curve (``drop_step_theory``: the population
    loss, the same rule) and the closed-form estimate (``drop_step_estimate``: ATTN_M's logistic
    mode strength at half its final value, ATTN_S's one-head escape time), and per model the law fitted to the small
    scales (``law``: NaN when fewer than two have a plateau) beside the theory's (``law_theory``)."""
    import xarray as xr

    done = train(runs(S), S)
    by_init = {k: dict(zip(S[_INITS[k]], [r for label, r in done.items() if label.split()[0] == k]))
               for k in MODELS}
    some = next(iter(by_init["attn_m"].values()))
    cov, N = some.datasets.cov, some.config.N
    inits = sorted({float(i) for k in MODELS for i in S[_INITS[k]]})
    steps = max(len(r.history.train_loss) for k in MODELS for r in by_init[k].values())
    loss = np.full((len(MODELS), len(inits), steps), np.nan)
    trained = np.zeros((len(MODELS), len(inits)), dtype=bool)
    drop, drop_theory, estimate = (np.full(trained.shape, np.nan) for _ in range(3))
    course = np.full(trained.shape, "not run", dtype=object)
    law, law_theory = np.full(len(MODELS), np.nan), np.zeros(len(MODELS))
    for i, (k, model) in enumerate(MODELS.items()):
        lr = S[k]["lr"]
        for init, r in by_init[k].items():
            j = inits.index(float(init))
            L = r.history.train_loss
            loss[i, j, :len(L)], trained[i, j] = L, True
            drop[i, j], course[i, j] = _first_drop(L), loss_curves.first_drop_course(L)
            drop_theory[i, j] = _first_drop(population_twin(r).history.train_loss)
            if model == "attnM":
                th = diagnostics.attn_m_drop_step(model_weights("attnM", r.init), cov, N, lr=lr,
                                                  normalize=r.config.normalize)
            else:
                c = r.config
                th = theory.attn_s_drop_steps(cov, N, lr=lr, init=init, rank=c.rank, head_num=c.head_num,
                                              init_scheme=c.init_scheme, normalize=c.normalize)[0]
            estimate[i, j] = np.nan if th is None else float(th)
        x = np.array(inits)
        ok = trained[i] & np.isfinite(drop[i]) & (x < SMALL)  # only the small-scale regime the theory describes
        if ok.sum() >= 2:
            law[i] = diagnostics.escape_law(model, x[ok], drop[i, ok])
        law_theory[i] = (float(theory.time_to_steps(1.0 / theory.attn_m_mode(cov, N)[0], lr, normalize="sum",
                                                    model="attnM", N=N)) if model == "attnM" else -1.0)
    ds = xr.Dataset(
        {"train_loss": (("model", "init", "step"), loss), "trained": (("model", "init"), trained),
         "drop_step": (("model", "init"), drop), "drop_course": (("model", "init"), course.astype(str)),
         "drop_step_theory": (("model", "init"), drop_theory),
         "drop_step_estimate": (("model", "init"), estimate),
         "law": ("model", law), "law_theory": ("model", law_theory), "cov": (("row", "col"), cov)},
        coords={"model": list(MODELS), "init": inits, "step": np.arange(steps)},
        attrs=settings_attrs(S, engine=some.engine, seeds=S["seed"],
                             runs={f"{k}_init{init:g}": r.config.to_dict() for k in MODELS
                                   for init, r in by_init[k].items()}))
    ds.attrs.update(small=SMALL, min_fall=loss_curves.MIN_FALL, published=int(presets.is_published(NAME, S)))
    ds.cov.attrs["description"] = "the input covariance Λ of every run"
    ds.drop_step.attrs["description"] = ("first step below the midpoint of the curve's start and end (NaN: no plateau, "
                                         "or no fall of loss_curves.MIN_FALL of its start: see drop_course)")
    ds.drop_step_theory.attrs["description"] = "the same rule on the population loss from the same start"
    ds.drop_step_estimate.attrs["description"] = ("closed-form estimate: ATTN_M's logistic mode strength at half its "
                                                  "final value; ATTN_S's one-head escape time tau/(lambda_1^2 v0), "
                                                  "theory.attn_s_drop_steps (order of magnitude)")
    ds.law.attrs["description"] = ("fitted to the scales below `small`: ATTN_M, steps per unit of ln(1/init); "
                                   "ATTN_S, the exponent of the drop step in the scale")
    return ds


def _first_drop(loss) -> float:
    """The first drop's step of a loss curve, ``loss_curves.first_drop_step`` (NaN where it has no plateau)."""
    step = loss_curves.first_drop_step(loss)
    return np.nan if step is None else float(step)


def _scales(ds, k: str) -> list[float]:
    """The scales model ``k`` was run at, in the order of its settings."""
    import json

    return [float(i) for i in json.loads(ds.attrs["settings"])[_INITS[k]]]


def numbers(ds) -> list[dict]:
    """``numbers.json``: each run's first-drop step beside the theory's (the same rule on the population loss from
    the same start; ATTN_S also beside the one-head escape time, an estimate), and each model's fitted law beside
    the theory's."""
    rows = []
    for k, model in MODELS.items():
        for init in _scales(ds, k):
            cell = ds.sel(model=k, init=init)
            sim = float(cell.drop_step)
            th = float(cell.drop_step_theory)
            what = (" (theory: population loss, same start)" if np.isfinite(sim) else f" ({cell.drop_course.item()})")
            rows.append(dict(key=f"drop_step.{k}.init_{slug(f'{init:g}')}",
                             quantity=f"{model} init {init:g}: drop step{what}",
                             theory=None if np.isnan(th) else th, reproduced=None if np.isnan(sim) else sim))
            if model == "attnS" and np.isfinite(float(cell.drop_step_estimate)):
                rows.append(dict(key=f"drop_step_estimate.{k}.init_{slug(f'{init:g}')}",
                                 quantity=f"{model} init {init:g}: drop step (one-head escape estimate)",
                                 theory=float(cell.drop_step_estimate), reproduced=None if np.isnan(sim) else sim,
                                 verdict=ESTIMATE))
    for k, quantity in (("attn_m", "attnM: steps per unit of ln(1/init)"),
                        ("attn_s", "attnS: exponent of drop step vs init")):
        if np.isfinite(ds.law.sel(model=k)):
            rows.append(dict(key=f"law.{k}", quantity=quantity, theory=ds.law_theory.sel(model=k),
                             reproduced=ds.law.sel(model=k)))
    return rows


def _with_course(ds, k: str, course: str) -> list[float]:
    """The scales of model ``k`` whose first drop did ``course`` (``loss_curves.first_drop_course``)."""
    return [i for i in _scales(ds, k) if ds.drop_course.sel(model=k, init=i).item() == course]


def claims_table(ds) -> MarkdownTable:
    """What is tested beside the theory and this run: the fitted law of each model, the scales with no plateau
    and the scales whose run never left its plateau."""
    rows: list[dict] = []
    for k, what, claim, fmt in (("attn_m", "ATTN_M: drop step per unit of ln(1/init)", "logarithmic in the scale",
                                 ".0f"),
                                ("attn_s", "ATTN_S: exponent of the drop step in the scale", "power law", ".2f")):
        law = float(ds.law.sel(model=k))
        rows.append(dict(what=what, claim=claim, theory=f"{float(ds.law_theory.sel(model=k)):.0f}",
                         ours=format(law, fmt) if np.isfinite(law) else "not fitted (fewer than two drops)"))
    rows += [dict(what=f"{LABELS[k]}: scales with no plateau", claim="a large scale", theory=None,
                  ours=", ".join(f"{i:g}" for i in _with_course(ds, k, "no plateau")) or "none") for k in MODELS]
    rows += [dict(what=f"{LABELS[k]}: scales with no drop within the run", claim=None, theory=None,
                  ours=", ".join(f"{i:g}" for i in _with_course(ds, k, "no drop within the run")) or "none")
             for k in MODELS]
    return MarkdownTable(rows, {"what": "", "claim": "expected", "theory": "theory", "ours": "this run"})


def ratio_range(ratio) -> str:
    """A set of ratios in words: "0.88 times" when they agree to two decimals, else "0.85 to 0.91 times"."""
    lo, hi = f"{np.min(ratio):.2f}", f"{np.max(ratio):.2f}"
    return f"{lo} times" if lo == hi else f"{lo} to {hi} times"


def summary(ds) -> str:
    """The page's sentence on how the run follows each law, which runs never left their plateau, and where ATTN_S's
    drop comes at its largest scale."""
    import json

    parts = []
    law_m, law_s = float(ds.law.sel(model="attn_m")), float(ds.law.sel(model="attn_s"))
    if np.isfinite(law_m):
        theory_m = float(ds.law_theory.sel(model="attn_m"))
        parts.append(f"In this run ATTN_M's drop steps follow the logarithmic law ({law_m:.0f} steps per unit of "
                     f"$\\ln(1/\\mathrm{{init}})$ against the theory's {theory_m:.0f}).")
    else:
        parts.append("In this run fewer than two of ATTN_M's small scales have a drop, so no law is fitted.")
    S = json.loads(ds.attrs["settings"])
    for k in MODELS:
        stuck = _with_course(ds, k, "no drop within the run")
        if stuck:
            parts.append(f"{LABELS[k]} from init {list_words([f'{i:g}' for i in stuck])} does not leave its plateau "
                         f"within the {S[k]['epoch']} steps (its loss never falls by "
                         f"{100 * ds.attrs['min_fall']:g} % of its start), so it has no drop and is not fitted.")
    for k in MODELS:
        m = ds.sel(model=k, init=_scales(ds, k))
        both = np.isfinite(m.drop_step.values) & np.isfinite(m.drop_step_theory.values)
        if both.any():
            ratio = m.drop_step.values[both] / m.drop_step_theory.values[both]
            parts.append(f"Each {LABELS[k]} run with a drop drops at {ratio_range(ratio)} the step at which the "
                         "population loss of the same model from the same initial weights crosses its own midpoint "
                         "(the same rule on both curves).")
    s = ds.sel(model="attn_s")
    scales = _scales(ds, "attn_s")
    sim, th = (np.array([float(v.sel(init=i)) for i in scales]) for v in (s.drop_step, s.drop_step_estimate))
    small = (np.array(scales) < SMALL) & np.isfinite(sim)
    course = s.drop_course.sel(init=scales[-1]).item()
    last = (f"at its largest scale ({scales[-1]:g}) "
            + (f"the first drop comes at step {sim[-1]:.0f}" if course == "drop" else
               "it shows no plateau" if course == "no plateau" else "it does not drop within the run"))
    if np.isfinite(law_s):
        late = float(np.median(sim[small] / th[small]))
        parts.append(f"ATTN_S's drops follow a power law (fitted exponent {law_s:.2f} against the theory's "
                     f"{float(ds.law_theory.sel(model='attn_s')):.0f}) "
                     + (f"but come a median {late:.1f} times later than" if late > 1 else
                        f"and come at a median {late:.1f} times")
                     + " the leading-order estimate $\\tau/(\\lambda_1^2 v_0)$, with $v_0$ the geometric mean of a "
                     "head's starting value and key and query scales as its initialisation sets them, which is an "
                     "order of magnitude only: it assumes one head started along $e_1$ with "
                     f"$v = \\lVert k\\rVert = \\lVert q\\rVert = v_0$, which a random start is not; {last}.")
    else:
        parts.append(f"Fewer than two of ATTN_S's small scales have a drop, so no law is fitted; {last}.")
    return " ".join(parts)


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``)."""
    import json

    S = json.loads(ds.attrs["settings"])
    run_m, run_s = S["attn_m"], S["attn_s"]

    def both(key, none="–"):
        m, s = (none if v is None else str(v) for v in (run_m[key], run_s[key]))
        return m if m == s else f"{m} (ATTN_M), {s} (ATTN_S)"

    largest = []
    for k in MODELS:
        i = _scales(ds, k)[-1]
        sim = float(ds.drop_step.sel(model=k, init=i))
        course = ds.drop_course.sel(model=k, init=i).item()
        largest.append(f"{LABELS[k]} (init {i:g}) " + (f"drops at step {sim:.0f}" if course == "drop" else
                                                       "shows no plateau" if course == "no plateau" else
                                                       "does not drop within the run"))
    return dict(small=ds.attrs["small"], H_m=run_m["head_num"], H_s=run_s["head_num"], R_s=run_s["rank"],
                heads_s=f"{run_s['head_num']} head{'s' if run_s['head_num'] > 1 else ''}",
                D=run_m["in_dim"], seq_len=run_m["seq_len"], lr_m=run_m["lr"], lr_s=run_s["lr"],
                steps_m=run_m["epoch"], steps_s=run_s["epoch"], seed=S["seed"],
                inits_m=list_words(_scales(ds, "attn_m")), inits_s=list_words(_scales(ds, "attn_s")),
                era=both("init_scheme"),
                P=both("trainset_size", none="∞ (the population loss)"),
                largest=" and ".join(largest))


def plot(ds):
    """Top: the training loss of every scale (colour), ATTN_M left and ATTN_S right, on log–log axes. Bottom: the
    first-drop step (dots) against the scale with the theory's: ATTN_M's population loss from the same start (red,
    dashed, both models) and ATTN_S's one-head escape-time estimate (red, dotted)."""
    import matplotlib.pyplot as plt

    said = words(ds)
    fig, axes = plt.subplots(2, 2, figsize=(6.6, 6.0))
    for col, k in enumerate(MODELS):
        ax = axes[0, col]
        scales = _scales(ds, k)
        for colour, init in zip(plt.cm.plasma(np.linspace(0.0, 0.85, len(scales))), scales):
            L = ds.train_loss.sel(model=k, init=init).values
            ran = np.isfinite(L)  # a shorter run's curve ends in NaN
            ax.plot(ds.step.values[ran] + 1, L[ran], color=colour, label=f"init {init:g}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss")
        top_title(ax, "ATTN_M" if k == "attn_m" else f"ATTN_S ({said['heads_s']}, rank {said['R_s']})")
        ax.legend(loc="upper right" if k == "attn_m" else "lower left", ncols=2, handlelength=1.2,
                  columnspacing=0.8)
        ax = axes[1, col]
        cell = ds.sel(model=k, init=scales)
        ax.plot(scales, cell.drop_step.values, "o", color="black", label="simulation")
        ax.plot(scales, cell.drop_step_theory.values, "--", color="tab:red", label="population loss, same start")
        if k == "attn_s":
            ax.plot(scales, cell.drop_step_estimate.values, ":", color="tab:red", label="one-head estimate")
        ax.set_xscale("log")
        if k == "attn_s":
            ax.set_yscale("log")
        ax.set_xlabel("initialisation scale")
        ax.set_ylabel("drop step")
        ax.legend(loc="lower left")  # the dots fall from upper left to lower right
    fig.tight_layout()
    return fig
