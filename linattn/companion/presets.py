"""The settings of every figure, at two sizes: ``paper`` (the published settings) and ``quick`` (CI-sized: each
notebook runs in seconds). This table is the one source of a figure's knobs and of the runs it trains.

    PRESETS["fig04_low_rank"]["paper"]                       # every setting of the figure: its knobs
    resolve("fig04_low_rank", "quick", {"head_num": 12})     # what the runner gives the parameters cell
    configs(resolve("fig04_low_rank", "paper"))              # the RunConfig of each run it trains

Keys are the figure names (= notebook stems in ``figures_src/``). Run settings use :class:`linattn.config.RunConfig`
names (``head_num``, ``init``, ``lr``, ``epoch``, ``trainset_size``, ...); every training figure lists all of
:data:`RUN_KNOBS`. What a figure varies has its own key (``seeds``, ``ranks``, ``icl_values``, ...; :data:`SWEEPS`
says which RunConfig field each sets). The notebooks' parameters cells are written from the ``paper`` entries with
the :data:`HELP` texts (:func:`linattn.companion.notebooks.parameters_source`).
"""

from __future__ import annotations

import copy
import itertools
from typing import NamedTuple

from ..config import SETTINGS

# Every run uses the reference's own random draws (``draws="reference"``, the default) and names the initialisation
# era its published figure was made with: dec2024 for Figures 1b and 3a–3c (ATTN_M's and the MLP's draws are the
# same in dec2024 and jan2025), jan2025 for Figure 4, the rank appendix and Figure 14.

# The settings every training figure lists, so that each is a knob of its parameters cell (RunConfig's default where
# a figure does not set one); ``rank`` only for ATTN_S.
RUN_KNOBS = ("model", "head_num", "rank", "in_dim", "seq_len", "trainset_size", "init", "lr", "epoch", "init_scheme",
             "draws", "dtype")


def _run(**settings) -> dict:
    """A run's settings: ``settings`` plus every :data:`RUN_KNOBS` entry it leaves out, at RunConfig's default."""
    from ..config import RunConfig

    defaults = RunConfig()
    out = {k: getattr(defaults, k) for k in RUN_KNOBS if k != "rank" or settings.get("model") == "attnS"}
    out.update(settings)
    return out


def _without(settings: dict, *keys) -> dict:
    """``settings`` less ``keys``: a figure that sweeps a setting (``ranks``) has no single value of it (``rank``)."""
    return {k: v for k, v in settings.items() if k not in keys}


# Published settings shared by Figures 1b, 5 (ATTN_M), 14: D = 4, seq_len 32, P = 5000, default covariance.
_ATTN_M_PAPER = _run(model="attnM", head_num=8, init=1e-6, in_dim=4, seq_len=32, trainset_size=5000, lr=1e-3,
                     epoch=6001, init_scheme="dec2024", draws="reference")

# Published settings of Figure 3a (rank-one ATTN_S, D = 4: the default covariance has the eigenvalues 0.4, 0.3, 0.2,
# 0.1) and Figure 4 (D = 8).
_ATTN_S_PAPER = _run(model="attnS", head_num=5, rank=1, init=1e-2, lr=0.02, epoch=10001, trainset_size=80000,
                     in_dim=4, seq_len=32, init_scheme="dec2024", draws="reference")
_ATTN_S_QUICK = dict(_ATTN_S_PAPER, init=2e-2, epoch=6001, trainset_size=4000)
# Figures 3a, 3b, 3c and the diagnostics and PCR pages read the same seed-0 run: one snapshot interval, so the run
# store trains it once (a run's key includes its snapshot interval, not track_value)
_SNAP_PAPER, _SNAP_QUICK = 10, 20
_FIG3A_SEED0 = {"quick": dict(_ATTN_S_QUICK, seed=0, snapshot_every=_SNAP_QUICK),
                "paper": dict(_ATTN_S_PAPER, seed=0, snapshot_every=_SNAP_PAPER)}
_LOW_RANK_PAPER = _run(model="attnS", head_num=9, rank=1, in_dim=8, seq_len=32, init=5e-3, lr=0.02, epoch=20001,
                       trainset_size=80000, init_scheme="jan2025", draws="reference")
_LOW_RANK_QUICK = dict(_LOW_RANK_PAPER, init=3e-2, epoch=3001, trainset_size=2000)
_WHITE_ATTN_M = _run(model="attnM", head_num=8, init=1e-6, white_cov=True, init_scheme="jan2025", in_dim=4,
                     seq_len=32)

PRESETS: dict[str, dict[str, dict]] = {
    "fig01a_attnm_schematic": {
        "quick": dict(in_dim=3, head_num=4),
        "paper": dict(in_dim=3, head_num=4),
    },
    "fig01b_attnm_loss": {
        "quick": dict(_ATTN_M_PAPER, seed=10),  # the exact engine makes the published run as cheap as any
        "paper": dict(_ATTN_M_PAPER, seed=10),
    },
    "fig02_attns_schematic": {
        "quick": dict(in_dim=3, head_num=2),
        "paper": dict(in_dim=3, head_num=2),
    },
    "fig05_softmax": {
        # Published: the settings of Figures 1b and 3a plus --softmax. At small weights a softmax head attends
        # uniformly, so its prediction and every gradient carry a factor 1/n (n = seq_len = 32) that linear attention
        # does not: at the published learning rates neither model leaves its first plateau in the published steps
        # (the page's "published learning rates" runs show it). The paper preset keeps everything published (P,
        # init, steps, era, the authors' draws) and multiplies the learning rate by n, which undoes that factor; it
        # trains in float32, as the authors' code does (the softmax engine's fast path).
        # check_seeds: ATTN_M again at each of these seeds (all its steps); half_lr_epoch: ATTN_M at half the learning
        # rate for this many steps, twice the 3001 steps within which the paper preset's two drops lie (627, 1659).
        # The three check runs: about 60 s of CPU at the paper preset (3.3 ms a step).
        "quick": dict(attn_m=_run(model="attnM", head_num=8, init=1e-2, lr=0.02, epoch=601, trainset_size=100,
                                  in_dim=4, seq_len=32, init_scheme="jan2025", softmax=True),
                      attn_s=_run(model="attnS", head_num=5, rank=1, init=0.05, lr=0.05, epoch=1201,
                                  trainset_size=100, in_dim=4, seq_len=32, init_scheme="jan2025", softmax=True),
                      seed=10, check_seeds=[11, 12], half_lr_epoch=1201),
        "paper": dict(attn_m=dict(_ATTN_M_PAPER, lr=32 * 1e-3, dtype="float32", softmax=True),
                      attn_s=dict(_ATTN_S_PAPER, lr=32 * 0.02, dtype="float32", softmax=True),
                      seed=10, check_seeds=[11, 12], half_lr_epoch=6001),
    },
    "fig14_icl_iwl": {
        "quick": dict(_WHITE_ATTN_M, lr=1e-3, epoch=2500, trainset_size=500, testset_size=500,
                      icl_values=[0.0, 0.5, 1.0], seed=10),
        "paper": dict(_WHITE_ATTN_M, lr=5e-4, epoch=5000, trainset_size=5000, testset_size=5000,
                      icl_values=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0], seed=10),
    },
    "figA_white_cov": {
        "quick": dict(_WHITE_ATTN_M, lr=1e-3, epoch=3001, trainset_size=1000, seeds=[10], snapshot_every=5),
        "paper": dict(_WHITE_ATTN_M, lr=1e-3, epoch=3001, trainset_size=5000, seeds=[10, 11, 12], snapshot_every=5),
    },
    "figA_init_scale": {
        # the init of each run is the swept inits_m / inits_s value
        "quick": dict(attn_m=_run(model="attnM", head_num=8, lr=1e-3, in_dim=4, seq_len=32, trainset_size=1000,
                                  init_scheme="jan2025", epoch=1501),
                      attn_s=_run(model="attnS", head_num=1, rank=1, lr=0.02, in_dim=4, seq_len=32,
                                  trainset_size=1000, init_scheme="jan2025", epoch=2001),
                      inits_m=[1e-6, 1e-3, 0.3], inits_s=[1e-2, 2e-2, 0.3], seed=10),
        "paper": dict(attn_m=_run(model="attnM", head_num=8, lr=1e-3, in_dim=4, seq_len=32, trainset_size=5000,
                                  init_scheme="jan2025", epoch=4001),
                      attn_s=_run(model="attnS", head_num=1, rank=1, lr=0.02, in_dim=4, seq_len=32,
                                  trainset_size=5000, init_scheme="jan2025", epoch=20001),
                      inits_m=[1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 0.3], inits_s=[1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 0.3],
                      seed=10),
    },
    # ---- ATTN_S, low rank, appendix and beyond-the-paper figures (fig03*, fig04, figA_ranks/inside_head/vary_len,
    # beyond_*); the quick presets use a larger init, fewer steps and a smaller P so that they run in seconds.
    "fig03a_attns_loss": {
        # epoch_extended: the same runs carried on to this step (the published window is their first ``epoch`` steps);
        # epoch_streams: the horizon of the comparison runs with linattn's own streams (draws="streams"); at the
        # paper preset their slowest seed makes its fourth drop near step 11500 (measured: 6027-11523 over seeds 0-5)
        "quick": dict(_ATTN_S_QUICK, seeds=[0, 1], epoch_extended=10001, epoch_streams=10001,
                      snapshot_every=_SNAP_QUICK),
        "paper": dict(_ATTN_S_PAPER, seeds=[0, 1, 2, 3, 4, 5], epoch_extended=20001, epoch_streams=20001,
                      snapshot_every=_SNAP_PAPER),
    },
    "fig03b_attns_values": {k: dict(v, track_value=True) for k, v in _FIG3A_SEED0.items()},
    "fig03c_attns_alignment": copy.deepcopy(_FIG3A_SEED0),
    "fig04_low_rank": {
        # epoch_extended: per rank, the step the one run goes on to (the published window is its first ``epoch``
        # steps); a rank not listed gets the largest value. The values of both presets let every rank learn all
        # eight directions (the page gives the steps; at the quick preset rank one's last drop comes near step 8500).
        # seeds: every rank in the published window at each (the spread); only the first is carried on
        "quick": dict(_without(_LOW_RANK_QUICK, "rank"), ranks=[1, 2, 4, 8], seeds=[10, 11, 12],
                      epoch_extended={1: 9001, 2: 9001, 4: 9001, 8: 5001}),
        "paper": dict(_without(_LOW_RANK_PAPER, "rank"), ranks=[1, 2, 4, 8], seeds=[10, 11, 12],
                      epoch_extended={1: 150001, 2: 120001, 4: 35001, 8: 20001}),
    },
    "figA_ranks": {
        "quick": dict(_without(_LOW_RANK_QUICK, "rank"), ranks=[3, 5, 6, 7], seeds=[10, 11, 12]),
        "paper": dict(_without(_LOW_RANK_PAPER, "rank"), ranks=[3, 5, 6, 7], seeds=[10, 11, 12]),
    },
    "figA_inside_head": {
        "quick": dict(_LOW_RANK_QUICK, rank=4, track_value=True, snapshot_every=20, seed=10),
        "paper": dict(_LOW_RANK_PAPER, rank=4, track_value=True, snapshot_every=20, seed=10),
    },
    "figA_vary_len": {
        # our choice (the appendix settings are unconfirmed): Figure 1b's ATTN_M and Figure 3a's ATTN_S with P = 5000;
        # --vary_len divides outputs by the prefix length n, which slows learning ~n-fold, so lr (ATTN_M: x30;
        # ATTN_S: x10) and the ATTN_S init (x3) are raised
        # (--vary_len exists from the jan2025 code on, so both runs use that era)
        "quick": dict(attn_m=dict(_ATTN_M_PAPER, lr=0.03, epoch=3001, trainset_size=1000, init_scheme="jan2025",
                                  vary_len=True),
                      attn_s=dict(_ATTN_S_PAPER, init=3e-2, lr=0.2, epoch=6001, trainset_size=1000,
                                  init_scheme="jan2025", vary_len=True), seed=10),
        "paper": dict(attn_m=dict(_ATTN_M_PAPER, lr=0.03, init_scheme="jan2025", vary_len=True),
                      attn_s=dict(_ATTN_S_PAPER, init=3e-2, lr=0.2, epoch=20001, init_scheme="jan2025",
                                  trainset_size=5000, vary_len=True), seed=10),
    },
    "beyond_diagnostics": copy.deepcopy(_FIG3A_SEED0),
    "beyond_pcr": copy.deepcopy(_FIG3A_SEED0),
    "beyond_population": {
        # P = None is the population (infinite-data) objective, estimated from population_samples fresh sequences
        # linattn's own streams (draws="streams"): the initial weights stay the same as P changes, and P = ∞ has no
        # reference draws
        "quick": dict(_without(_ATTN_S_QUICK, "trainset_size"), draws="streams", trainset_sizes=[None, 1000, 4000], population_samples=1 << 15,
                      flow=True, seed=0),
        "paper": dict(_without(_ATTN_S_PAPER, "trainset_size"), draws="streams", trainset_sizes=[None, 5000, 80000],
                      population_samples=1 << 20, flow=True, seed=0),
    },
    "beyond_own_experiment": {
        # A reader's own experiment: rank-one ATTN_S on a spectrum of their choosing, from weights they give; the
        # first run stops before the last drop, so the continued run shows it. Options the authors' code never had
        # (an explicit spectrum) need linattn's own random streams.
        "quick": dict(model="attnS", spectrum=[0.5, 0.25, 0.15, 0.1], head_num=4, rank=1, init=0.03, lr=0.025,
                      epoch=1000, epoch_more=2000, trainset_size=20000, seq_len=32, seed=0, draws="streams"),
        "paper": dict(model="attnS", spectrum=[0.5, 0.25, 0.15, 0.1], head_num=4, rank=1, init=0.03, lr=0.025,
                      epoch=1000, epoch_more=3000, trainset_size=80000, seq_len=32, seed=0, draws="streams"),
    },
    "beyond_phase_diagram": {
        # attn_m: Figure 14's model, learning rate and horizon (epoch: the published 5000 steps), with linattn's own
        # streams, so that every cell of the c × P grid shares its initial weights, test sets and fixed task and P = ∞
        # exists; its icl and trainset_size are each cell's. Every cell is trained by gradient flow to epoch_extended
        # (steps at that learning rate), where all have settled. attn_s: the drop-step-vs-init figure, whose init is
        # each swept inits_s value and whose seeds are ``seeds``
        "quick": dict(attn_m=dict(_WHITE_ATTN_M, lr=5e-4, epoch=5000, trainset_size=2000, testset_size=500, seed=10,
                                  draws="streams"),
                      attn_s=_run(model="attnS", head_num=5, rank=1, in_dim=4, seq_len=32, lr=0.02, epoch=3001,
                                  trainset_size=1000, init_scheme="jan2025"),
                      icl_values=[0.0, 0.02, 0.2, 1.0], trainset_sizes=[200, 2000], epoch_extended=10**8,
                      inits_s=[0.08, 0.16], seeds=[0, 1], workers=2),
        "paper": dict(attn_m=dict(_WHITE_ATTN_M, lr=5e-4, epoch=5000, trainset_size=5000, testset_size=5000, seed=10,
                                  draws="streams"),
                      attn_s=_run(model="attnS", head_num=5, rank=1, in_dim=4, seq_len=32, lr=0.02, epoch=20001,
                                  trainset_size=4000, init_scheme="jan2025"),
                      icl_values=[0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0],
                      trainset_sizes=[200, 1000, 5000, 20000], epoch_extended=10**9,
                      inits_s=[0.02, 0.04, 0.08, 0.16], seeds=[0, 1, 2, 3], workers=2),
    },
    "beyond_error_table": {
        "quick": dict(),
        "paper": dict(),
    },
}

# What each knob means, one text per name for every figure (the parameters cells are written from these:
# :func:`linattn.companion.notebooks.parameters_source`): a run setting's own help (its declaration,
# :data:`linattn.config.SETTINGS`), then the knobs that only figures have.
FIGURE_HELP: dict[str, str] = {
    "seeds": "one run per seed",
    "ranks": "key-query ranks R, one run each",
    "icl_values": "in-context fractions c, one run each",
    "inits_m": "ATTN_M initialisation scales, one run each",
    "inits_s": "ATTN_S initialisation scales, one run each",
    "trainset_sizes": "P of each run or column (None: the population loss, infinite P; the population page needs it)",
    "flow": "also integrate the gradient flow of the population loss",
    "snapshot_every": "record the weights every this many steps (shared runs share one interval)",
    "epoch_extended": ("the step the runs are carried on to (a dict: per rank, a rank left out taking the largest; "
                       "the phase diagram: the gradient-flow horizon in steps)"),
    "epoch_streams": "horizon of the comparison runs drawn from the streams of linattn",
    "epoch_more": "steps of the continued run, from the final weights of the first run",
    "workers": "worker processes of the local Dask cluster the sweeps run on (make book runs a notebook beside it)",
    "attn_m": "the ATTN_M run settings (a partial dict sets only those keys)",
    "check_seeds": "ATTN_M run again at each of these seeds, to check its drops",
    "half_lr_epoch": "steps of the ATTN_M check run at half the learning rate",
    "attn_s": "the ATTN_S run settings (a partial dict sets only those keys)",
}
HELP: dict[str, str] = {**{name: s.describe() for name, s in SETTINGS.items()}, **FIGURE_HELP}


def settings(name: str, preset: str = "quick", *, runs: dict | None = None, **overrides) -> dict:
    """A deep copy of ``PRESETS[name][preset]`` with ``overrides`` applied.

    Overrides whose value is None are ignored. A dict given for a dict setting (a nested run ``attn_m``, or
    ``epoch_extended``) updates it key by key, so ``attn_m={"lr": 0.1}`` changes one setting of that run. An unknown
    figure, preset or key raises (a typo never silently falls back to a default). ``runs`` holds run-level settings
    (``init``, ``lr``, ``epoch``, ...) for figures whose preset nests its runs in sub-dicts (``attn_m``,
    ``attn_s``): see :func:`apply_to_runs`.
    """
    if name not in PRESETS:
        raise KeyError(f"no presets for figure {name!r}; known: {', '.join(sorted(PRESETS))}")
    if preset not in PRESETS[name]:
        raise KeyError(f"figure {name!r} has no preset {preset!r}; choose from {', '.join(PRESETS[name])}")
    out = copy.deepcopy(PRESETS[name][preset])
    for key, value in overrides.items():
        if value is None:
            continue
        if key not in out:
            raise KeyError(f"{key!r} is not a setting of figure {name!r} (settings: {', '.join(out)})")
        if isinstance(value, dict) and isinstance(out[key], dict):
            out[key].update(copy.deepcopy(value))
        else:
            out[key] = copy.deepcopy(value)
    out = apply_to_runs(out, runs or {})
    check_model(name, out)
    return out


def check_model(name: str, s: dict) -> None:
    """Refuse settings ``s`` of figure ``name`` whose ``model`` (or a nested run's) is not the one its page is about:
    a page's theory, plot and prose are of one model (ATTN_M's closed forms, ATTN_S's saddles), so the model is a
    setting a reader sees but cannot change there (:class:`linattn.config.ConfigError` naming the setting)."""
    from ..config import ConfigError
    from ..data import named

    paper = PRESETS[name]["paper"]
    places = [(None, paper, s)] + [(k, v, s.get(k)) for k, v in paper.items() if isinstance(v, dict) and "model" in v]
    for run, fixed, given in places:
        if "model" in fixed and isinstance(given, dict) and given.get("model", fixed["model"]) != fixed["model"]:
            field = "model" if run is None else f"{run}.model"
            subject = f"figure {name}" if run is None else f"the {run} run of figure {name}"
            raise ConfigError(f"{named(field, given['model'])}: {subject} is {fixed['model']} (the page's theory, "
                              f"plot and text are that model's), so {named(field)} stays {fixed['model']!r}",
                              field=field, value=given["model"])


def apply_to_runs(s: dict, runs: dict) -> dict:
    """``s`` with the run-level settings ``runs`` (:class:`linattn.config.RunConfig` names) set in every run it
    holds: each sub-dict that names a ``model`` (``attn_m``, ``attn_s``), or ``s`` itself when it has none.
    None values are ignored; a name that is not a RunConfig field raises."""
    from ..config import RunConfig

    valid = set(RunConfig.field_names())
    for key in runs:
        if key not in valid:
            raise KeyError(f"{key!r} is not a run setting (RunConfig fields: {', '.join(sorted(valid))})")
    targets = [v for v in s.values() if isinstance(v, dict) and "model" in v] or [s]
    for target in targets:
        target.update({k: copy.deepcopy(v) for k, v in runs.items() if v is not None})
    return s


def nested_runs(name: str) -> tuple[str, ...]:
    """The keys of the runs figure ``name`` nests in sub-dicts (``("attn_m", "attn_s")``), else ``()``."""
    table = PRESETS.get(name, {}).get("paper", {})
    return tuple(k for k, v in table.items() if isinstance(v, dict) and "model" in v)


def resolve(name: str, preset: str, overrides: dict | None = None) -> dict:
    """Every setting of figure ``name`` at ``preset`` with a reader's ``overrides`` (``linattn figures --param``):
    the values the runner gives the notebook's parameters cell. An override that is a setting of the figure
    replaces it (a dict updates it); for a figure with nested runs, a run-level setting (``lr=0.1``) goes to every
    nested run."""
    table = PRESETS[name][preset]
    overrides = overrides or {}
    top = {k: v for k, v in overrides.items() if k in table}
    runs = {k: v for k, v in overrides.items() if k not in table}
    return settings(name, preset, runs=runs, **top)


def parameters(name: str, namespace: dict) -> dict:
    """Figure ``name``'s settings as its notebook's parameters cell (and the runner's injected values) left them in
    ``namespace`` (the notebook's ``globals()``): ``{key: namespace[key]}`` for every setting of the figure, deep
    copied, and checked like ``settings`` (a page's model is fixed: ``check_model``). The one line a
    notebook calls after its parameters cell."""
    out = {k: copy.deepcopy(namespace[k]) for k in PRESETS[name]["paper"]}
    check_model(name, out)
    return out


def horizons(s: dict):
    """The step a figure's runs are carried on to, from its settings ``s``: ``max(epoch, epoch_extended)``; for a
    per-rank ``epoch_extended`` (``{rank: steps}``) a dict ``{rank: steps}`` over ``s["ranks"]``, a rank it does not
    list taking its largest value."""
    ext = s["epoch_extended"]
    if isinstance(ext, dict):
        ext = {int(R): steps for R, steps in ext.items()}  # a notebook's injected dict has JSON's text keys
        return {R: max(s["epoch"], int(ext.get(R, max(ext.values())))) for R in s["ranks"]}
    return max(s["epoch"], int(ext))


def is_published(name: str, s: dict) -> bool:
    """Whether the settings ``s`` of figure ``name`` are the published ones (its paper preset), horizons that only
    lengthen the runs (``epoch_extended``, ``epoch_streams``) and ``snapshot_every`` aside: only then does a page
    set its run beside the published figure."""
    ignore = ("epoch_extended", "epoch_streams", "snapshot_every")
    paper = PRESETS[name]["paper"]
    return {k: v for k, v in s.items() if k not in ignore} == {k: v for k, v in paper.items() if k not in ignore}


# ---------------------------------------------------------------- the runs a figure trains (to check overrides)

class Sweep(NamedTuple):
    """How one setting of a figure becomes runs: each of its values sets RunConfig ``field``."""

    field: str
    run: str | None = None  # the nested run it belongs to (``attn_m``, ``attn_s``); None: every run of the figure
    extra: bool = False  # False: the values replace the field (one run per value); True: one more run per value


# The settings a figure sweeps, and the RunConfig field each of their values sets: the notebook trains one run per
# value (``icl_values: [0.0, 0.5]`` -> runs with ``icl=0.0`` and ``icl=0.5``; several swept settings: every
# combination). A list (or a dict's values) is swept, a single value is one value. An ``extra`` setting adds runs
# beside the others (``epoch_more``: the continued run of ``beyond_own_experiment``). This is the one place that
# says how a figure's settings become RunConfigs; :func:`run_configs` reads it. Horizons that a notebook only
# lengthens a run to (``epoch_extended``, ``epoch_streams``: max(epoch, value)) are not runs of their own.
SWEEPS: dict[str, Sweep] = {
    "seeds": Sweep("seed"),
    "icl_values": Sweep("icl"),
    "ranks": Sweep("rank"),
    "inits_m": Sweep("init", "attn_m"),
    "inits_s": Sweep("init", "attn_s"),
    "trainset_sizes": Sweep("trainset_size"),
    "epoch_more": Sweep("epoch", extra=True),
}

def _values(value) -> list:
    """The values a swept setting takes: a list's or tuple's items, a dict's values, else the value itself."""
    if isinstance(value, dict):
        return list(value.values())
    return list(value) if isinstance(value, (list, tuple)) else [value]


def run_configs(name: str, preset: str = "quick", overrides: dict | None = None) -> list:
    """The :class:`linattn.config.RunConfig` of every run figure ``name`` trains at ``preset`` with a reader's
    ``overrides`` (its notebook's parameters, as ``linattn figures --param`` gives them), not validated.

    The overrides are applied as the runner applies them (:func:`resolve`; others, such as drawing options, make
    no run), and the runs are those :func:`configs` makes of the result, the very runs the notebook trains through
    :func:`linattn.companion.runstore.figure_runs`. A figure whose preset has neither ``seeds`` nor ``seed`` trains
    nothing (the schematics, the error table): ``[]``. A ``spectrum`` fixes ``in_dim`` to its length unless the run
    sets ``in_dim``."""
    from ..config import RunConfig

    fields = set(RunConfig.field_names())
    table = PRESETS[name][preset] if name in PRESETS and preset in PRESETS[name] else {}
    s = resolve(name, preset, {k: v for k, v in (overrides or {}).items() if k in table or k in fields})
    return configs(s)


def configs(s: dict, run: str | None = None) -> list:
    """The :class:`linattn.config.RunConfig` of every run that a figure's settings ``s`` (as :func:`resolve` or
    :func:`parameters` give them) make, in a fixed order (nested runs in the order of ``s``, then every
    combination of the swept values in the order given); ``run`` keeps only the nested run of that key
    (``"attn_m"``). Not validated."""
    from ..config import RunConfig

    fields = set(RunConfig.field_names())
    if "seeds" not in s and "seed" not in s:
        return []
    nested = {k: v for k, v in s.items() if isinstance(v, dict) and "model" in v} or {None: s}
    out = []
    for label, settings_ in nested.items():
        if run is not None and label != run:
            continue
        base = {k: v for k, v in settings_.items() if k in fields}
        if label is not None and "seed" in s:
            base.setdefault("seed", s["seed"])
        if base.get("spectrum") is not None:
            base["spectrum"] = tuple(base["spectrum"])
            if "in_dim" not in settings_:
                base["in_dim"] = len(base["spectrum"])
        given = {key: sweep for key, sweep in SWEEPS.items()
                 if s.get(key) is not None and sweep.run in (None, label)}
        axes = [(sweep.field, _values(s[key])) for key, sweep in given.items() if not sweep.extra]
        for combo in itertools.product(*(vals for _, vals in axes)):
            run_ = {**base, **{field: v for (field, _), v in zip(axes, combo)}}
            variants = [run_] + [{**run_, sweep.field: v} for key, sweep in given.items() if sweep.extra
                                 for v in _values(s[key])]
            out.extend(RunConfig(**v) for v in variants)
    return out


def _param_words(name: str, *value) -> str:
    """A figure's setting as ``linattn figures`` names it: ``--param model='attnS'``, or the bare name."""
    return f"--param {name}={value[0]!r}" if value else name


def check_overrides(name: str, preset: str, overrides: dict) -> None:
    """Refuse a reader's ``overrides`` of figure ``name`` that would give a run :func:`linattn.experiment.plan`
    refuses (its settings, the reference's draws, its memory), before anything runs: :class:`linattn.config.ConfigError`
    with one line naming the figure, the parameter and the reason (plan's own message). The overrides are applied
    one at a time, so the parameter named is the first that makes a run invalid. Figures without presets (a reader's
    own notebooks) are not checked."""
    from ..config import ConfigError
    from ..experiment import plan

    if name not in PRESETS or not overrides:
        return
    applied = {}
    for key, value in overrides.items():
        applied[key] = value
        try:
            for cfg in run_configs(name, preset, applied):
                plan(cfg)
        except ConfigError as e:
            if e.field in (key, f"{key}.model") and e.field.endswith("model"):  # check_model: the page's own model
                raise ConfigError(f"{name}: {e.words(_param_words)}", field=e.field, value=e.value) from None
            raise ConfigError(f"{name}: --param {key}={value!r} gives an invalid run: {e}") from None
        except (TypeError, ValueError) as e:  # e.g. a seed that is not a number
            raise ConfigError(f"{name}: --param {key}={value!r} gives an invalid run: not a valid value ({e})"
                              ) from None
