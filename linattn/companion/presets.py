"""The settings of every figure, at two sizes: ``paper`` (the published settings) and
``quick`` (CI-sized: each notebook runs in seconds).

    PRESETS["fig01b_attnm_loss"]["paper"]        # a dict of settings
    settings("fig01b_attnm_loss", "quick", seeds=[0, 1])

Keys are the figure names (= notebook stems in ``figures_src/``). Run settings use :class:`linattn.config.RunConfig`
names (``head_num``, ``init``, ``lr``, ``epoch``, ``trainset_size``, ...); ``seeds`` is a list; anything a figure
varies (``icl_values``, ``inits``, ...) has its own key. Where a quick value is smaller than the paper's, the notebook
header says so.
"""

from __future__ import annotations

import copy
import itertools
import warnings
from typing import NamedTuple

# Every run uses the reference's own random draws (``draws="reference"``, the default) and names the initialisation
# era its published figure was made with: dec2024 for Figures 1b and 3a–3c (ATTN_M's and the MLP's draws are the
# same in dec2024 and jan2025), jan2025 for Figure 4, the rank appendix and Figure 14.

# Published settings shared by Figures 1b, 5 (ATTN_M), 14: D = 4, seq_len 32, P = 5000, default covariance.
_ATTN_M_PAPER = dict(model="attnM", head_num=8, init=1e-6, in_dim=4, seq_len=32, trainset_size=5000, lr=1e-3,
                     epoch=6001, init_scheme="dec2024", draws="reference")

# Published settings of Figure 3a (rank-one ATTN_S, D = 4: the default covariance has the eigenvalues 0.4, 0.3, 0.2,
# 0.1) and Figure 4 (D = 8).
_ATTN_S_PAPER = dict(model="attnS", head_num=5, rank=1, init=1e-2, lr=0.02, epoch=10001, trainset_size=80000,
                     in_dim=4, seq_len=32, init_scheme="dec2024", draws="reference")
_ATTN_S_QUICK = dict(_ATTN_S_PAPER, init=2e-2, epoch=6001, trainset_size=4000)
# Figures 3a, 3b, 3c and the diagnostics and PCR pages read the same seed-0 run: one snapshot interval, so the run
# store trains it once (a run's key includes its snapshot interval)
_SNAP_PAPER, _SNAP_QUICK = 10, 20
_FIG3A_SEED0 = {"quick": dict(_ATTN_S_QUICK, seeds=[0], snapshot_every=_SNAP_QUICK),
                "paper": dict(_ATTN_S_PAPER, seeds=[0], snapshot_every=_SNAP_PAPER)}
_LOW_RANK_PAPER = dict(model="attnS", head_num=9, in_dim=8, seq_len=32, init=5e-3, lr=0.02, epoch=20001,
                       trainset_size=80000, init_scheme="jan2025", draws="reference")
_LOW_RANK_QUICK = dict(_LOW_RANK_PAPER, init=3e-2, epoch=3001, trainset_size=2000)

PRESETS: dict[str, dict[str, dict]] = {
    "fig01a_attnm_schematic": {
        "quick": dict(in_dim=3, head_num=4),
        "paper": dict(in_dim=3, head_num=4),
    },
    "fig01b_attnm_loss": {
        "quick": dict(_ATTN_M_PAPER, seeds=[10]),  # the exact engine makes the published run as cheap as any
        "paper": dict(_ATTN_M_PAPER, seeds=[10]),
    },
    "fig02_attns_schematic": {
        "quick": dict(in_dim=3, head_num=2),
        "paper": dict(in_dim=3, head_num=2),
    },
    "fig05_softmax": {
        # Published: the settings of Figures 1b and 3a plus --softmax. At small weights a softmax head attends
        # uniformly, so its prediction and every gradient carry a factor 1/n (n = seq_len = 32) that linear attention
        # does not: at the published learning rates neither model leaves its first plateau in the published steps
        # (measured: ATTN_M 1.0258 -> 1.0240 in 6001 steps, ATTN_S flat at 0.998 for 10001). The paper preset keeps
        # everything published (P, init, steps, era, the authors' draws) and multiplies the learning rate by n,
        # which undoes that factor; it trains in float32, as the authors' code does (the softmax engine's fast path).
        "quick": dict(attn_m=dict(model="attnM", head_num=8, init=1e-2, lr=0.02, epoch=601, trainset_size=100,
                                  in_dim=4, seq_len=32, init_scheme="jan2025"),
                      attn_s=dict(model="attnS", head_num=5, init=0.05, lr=0.05, epoch=1201, trainset_size=100,
                                  in_dim=4, seq_len=32, init_scheme="jan2025"),
                      seeds=[10]),
        "paper": dict(attn_m=dict(_ATTN_M_PAPER, lr=32 * 1e-3, dtype="float32"),
                      attn_s=dict(_ATTN_S_PAPER, lr=32 * 0.02, dtype="float32"),
                      seeds=[10]),
    },
    "fig14_icl_iwl": {
        "quick": dict(model="attnM", head_num=8, init=1e-6, white_cov=True, init_scheme="jan2025", lr=1e-3, epoch=2500, trainset_size=500,
                      testset_size=500, in_dim=4, seq_len=32, icl_values=[0.0, 0.5, 1.0], seeds=[10]),
        "paper": dict(model="attnM", head_num=8, init=1e-6, white_cov=True, init_scheme="jan2025", lr=5e-4, epoch=5000, trainset_size=5000,
                      testset_size=5000, in_dim=4, seq_len=32, icl_values=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0], seeds=[10]),
    },
    "figA_white_cov": {
        "quick": dict(model="attnM", head_num=8, init=1e-6, white_cov=True, init_scheme="jan2025", lr=1e-3, epoch=3001, trainset_size=1000,
                      in_dim=4, seq_len=32, seeds=[10]),
        "paper": dict(model="attnM", head_num=8, init=1e-6, white_cov=True, init_scheme="jan2025", lr=1e-3, epoch=3001,
                      trainset_size=5000, in_dim=4, seq_len=32, seeds=[10, 11, 12]),
    },
    "figA_init_scale": {
        "quick": dict(attn_m=dict(model="attnM", head_num=8, lr=1e-3, in_dim=4, seq_len=32, trainset_size=1000, init_scheme="jan2025",
                                  epoch=1501),
                      attn_s=dict(model="attnS", head_num=1, lr=0.02, in_dim=4, seq_len=32, trainset_size=1000, init_scheme="jan2025",
                                  epoch=2001),
                      inits_m=[1e-6, 1e-3, 0.3], inits_s=[1e-2, 2e-2, 0.3], seeds=[10]),
        "paper": dict(attn_m=dict(model="attnM", head_num=8, lr=1e-3, in_dim=4, seq_len=32, trainset_size=5000, init_scheme="jan2025",
                                  epoch=4001),
                      attn_s=dict(model="attnS", head_num=1, lr=0.02, in_dim=4, seq_len=32, trainset_size=5000, init_scheme="jan2025",
                                  epoch=20001),
                      inits_m=[1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 0.3], inits_s=[1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 0.3],
                      seeds=[10]),
    },
    # ---- ATTN_S, low rank, appendix and beyond-the-paper figures (fig03*, fig04, figA_ranks/inside_head/vary_len,
    # beyond_*); the quick presets use a larger init, fewer steps and a smaller P so that they run in seconds.
    "fig03a_attns_loss": {
        # epoch_extended: the same runs carried on to this step (the published window is their first ``epoch`` steps);
        # epoch_streams: the horizon of the comparison runs with linattn's own streams (draws="streams"), whose
        # slowest seed makes its fourth drop near step 24300
        "quick": dict(_ATTN_S_QUICK, seeds=[0, 1], epoch_extended=10001, epoch_streams=10001,
                      snapshot_every=_SNAP_QUICK),
        "paper": dict(_ATTN_S_PAPER, seeds=[0, 1, 2, 3, 4, 5], epoch_extended=20001, epoch_streams=40001,
                      snapshot_every=_SNAP_PAPER),
    },
    "fig03b_attns_values": copy.deepcopy(_FIG3A_SEED0),
    "fig03c_attns_alignment": copy.deepcopy(_FIG3A_SEED0),
    "fig04_low_rank": {
        # epoch_extended: per rank, the step the one run goes on to (the published window is its first ``epoch``
        # steps); a rank not listed gets the largest value. paper (seed 10, reference draws): R = 1's eighth drop comes
        # at step 147350, R = 2's at 99601, R = 4 and 8 learn all eight directions inside the window.
        "quick": dict(_LOW_RANK_QUICK, ranks=[1, 2, 4, 8], seeds=[10],
                      epoch_extended={1: 8001, 2: 8001, 4: 9001, 8: 5001}),
        "paper": dict(_LOW_RANK_PAPER, ranks=[1, 2, 4, 8], seeds=[10],
                      epoch_extended={1: 150001, 2: 120001, 4: 35001, 8: 20001}),
    },
    "figA_ranks": {
        "quick": dict(_LOW_RANK_QUICK, ranks=[3, 5, 6, 7], seeds=[10]),
        "paper": dict(_LOW_RANK_PAPER, ranks=[3, 5, 6, 7], seeds=[10]),
    },
    "figA_inside_head": {
        "quick": dict(_LOW_RANK_QUICK, rank=4, snapshot_every=20, seeds=[10]),
        "paper": dict(_LOW_RANK_PAPER, rank=4, snapshot_every=20, seeds=[10]),
    },
    "figA_vary_len": {
        # our choice (the appendix settings are unconfirmed): Figure 1b's ATTN_M and Figure 3a's ATTN_S with P = 5000;
        # --vary_len divides outputs by the prefix length n, which slows learning ~n-fold, so lr (ATTN_M: x30;
        # ATTN_S: x10) and the ATTN_S init (x3) are raised
        # (--vary_len exists from the jan2025 code on, so both runs use that era)
        "quick": dict(attn_m=dict(_ATTN_M_PAPER, lr=0.03, epoch=3001, trainset_size=1000, init_scheme="jan2025"),
                      attn_s=dict(_ATTN_S_PAPER, init=3e-2, lr=0.2, epoch=6001, trainset_size=1000,
                                  init_scheme="jan2025"), seeds=[10]),
        "paper": dict(attn_m=dict(_ATTN_M_PAPER, lr=0.03, init_scheme="jan2025"),
                      attn_s=dict(_ATTN_S_PAPER, init=3e-2, lr=0.2, epoch=20001, init_scheme="jan2025",
                                                                     trainset_size=5000), seeds=[10]),
    },
    "beyond_diagnostics": copy.deepcopy(_FIG3A_SEED0),
    "beyond_pcr": copy.deepcopy(_FIG3A_SEED0),
    "beyond_population": {
        # P = None is the population (infinite-data) objective, estimated from population_samples fresh sequences
        # linattn's own streams (draws="streams"): the initial weights stay the same as P changes, and P = ∞ has no
        # reference draws
        "quick": dict(_ATTN_S_QUICK, draws="streams", trainset_sizes=[None, 1000, 4000], population_samples=1 << 15, flow=True,
                      seeds=[0]),
        "paper": dict(_ATTN_S_PAPER, draws="streams", trainset_sizes=[None, 5000, 80000], population_samples=1 << 20, flow=True,
                      seeds=[0]),
    },
    "beyond_own_experiment": {
        # A reader's own experiment: rank-one ATTN_S on a spectrum of their choosing, from weights they give; the
        # first run stops before the last drop, so the continued run shows it.
        "quick": dict(spectrum=[0.5, 0.25, 0.15, 0.1], head_num=4, rank=1, init=0.03, lr=0.025, epoch=1000,
                      epoch_more=2000, trainset_size=20000, seq_len=32, seed=0),
        "paper": dict(spectrum=[0.5, 0.25, 0.15, 0.1], head_num=4, rank=1, init=0.03, lr=0.025, epoch=1000,
                      epoch_more=3000, trainset_size=80000, seq_len=32, seed=0),
    },
    "beyond_error_table": {
        "quick": dict(),
        "paper": dict(),
    },
}


def settings(name: str, preset: str = "quick", *, runs: dict | None = None, **overrides) -> dict:
    """A deep copy of ``PRESETS[name][preset]`` with ``overrides`` applied.

    Overrides whose value is None are ignored, so a notebook parameter left at None means "the preset's value".
    An unknown figure, preset or key raises (a typo never silently falls back to a default). ``runs`` holds
    run-level settings (``init``, ``lr``, ``epoch``, ...) for figures whose preset nests its runs in sub-dicts
    (``attn_m``, ``attn_s``): see :func:`apply_to_runs`.
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
        out[key] = copy.deepcopy(value)
    return apply_to_runs(out, runs or {})


def apply_to_runs(s: dict, runs: dict) -> dict:
    """``s`` with the run-level settings ``runs`` (:class:`linattn.config.RunConfig` names) set in every run it
    holds: each sub-dict that names a ``model`` (``attn_m``, ``attn_s``), or ``s`` itself when it has none.
    None values are ignored; a name that is not a RunConfig field raises."""
    from dataclasses import fields

    from ..config import RunConfig

    valid = {f.name for f in fields(RunConfig)}
    for key in runs:
        if key not in valid:
            raise KeyError(f"{key!r} is not a run setting (RunConfig fields: {', '.join(sorted(valid))})")
    targets = [v for v in s.values() if isinstance(v, dict) and "model" in v] or [s]
    for target in targets:
        target.update({k: copy.deepcopy(v) for k, v in runs.items() if v is not None})
    return s


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

# What a notebook sets on every run it trains besides its preset's settings (``RunConfig(softmax=True, ...)`` in
# fig05_softmax.md), so that a reader's overrides are checked against the runs the notebook really trains.
RUN_CONSTANTS: dict[str, dict] = {
    "fig03b_attns_values": dict(track_value=True),
    "fig05_softmax": dict(softmax=True),
    "figA_inside_head": dict(track_value=True),
    "figA_vary_len": dict(vary_len=True),
    "beyond_own_experiment": dict(model="attnS", draws="streams"),
}


def _values(value) -> list:
    """The values a swept setting takes: a list's or tuple's items, a dict's values, else the value itself."""
    if isinstance(value, dict):
        return list(value.values())
    return list(value) if isinstance(value, (list, tuple)) else [value]


def run_configs(name: str, preset: str = "quick", overrides: dict | None = None) -> list:
    """The :class:`linattn.config.RunConfig` of every run figure ``name`` trains at ``preset`` with a reader's
    ``overrides`` (its notebook's parameters, as ``linattn figures --param`` gives them), not validated.

    An override that is a setting of the preset replaces it (as :func:`settings` does); one that is a RunConfig
    field but not a top-level setting goes to every nested run (``settings(..., runs=...)``, as the notebooks with
    ``attn_m``/``attn_s`` do); others (drawing options) make no run. Each run takes the RunConfig fields of its
    settings, the notebook's :data:`RUN_CONSTANTS`, and one value of every swept setting (:data:`SWEEPS`; all
    combinations). A figure whose preset has neither ``seeds`` nor ``seed`` trains nothing (the schematics, the
    error table): ``[]``. A ``spectrum`` fixes ``in_dim`` to its length unless the run sets ``in_dim``."""
    from ..config import RunConfig

    fields = set(RunConfig.field_names())
    table = PRESETS[name][preset] if name in PRESETS and preset in PRESETS[name] else {}
    top = {k: v for k, v in (overrides or {}).items() if k in table}
    runs = {k: v for k, v in (overrides or {}).items() if k not in table and k in fields}
    s = settings(name, preset, runs=runs, **top)
    if "seeds" not in s and "seed" not in s:
        return []
    nested = {k: v for k, v in s.items() if isinstance(v, dict) and "model" in v} or {None: s}
    out = []
    for label, run in nested.items():
        base = {k: v for k, v in run.items() if k in fields}
        base.update(RUN_CONSTANTS.get(name, {}))
        if base.get("spectrum") is not None:
            base["spectrum"] = tuple(base["spectrum"])
            if "in_dim" not in run:
                base["in_dim"] = len(base["spectrum"])
        given = {key: sweep for key, sweep in SWEEPS.items()
                 if s.get(key) is not None and sweep.run in (None, label)}
        axes = [(sweep.field, _values(s[key])) for key, sweep in given.items() if not sweep.extra]
        for combo in itertools.product(*(vals for _, vals in axes)):
            run_ = {**base, **{field: v for (field, _), v in zip(axes, combo)}}
            variants = [run_] + [{**run_, sweep.field: v} for key, sweep in given.items() if sweep.extra
                                 for v in _values(s[key])]
            with warnings.catch_warnings():  # a deprecated era name warns in the notebook itself
                warnings.simplefilter("ignore")
                out.extend(RunConfig(**v) for v in variants)
    return out


def check_overrides(name: str, preset: str, overrides: dict) -> None:
    """Refuse a reader's ``overrides`` of figure ``name`` that would give a run :meth:`RunConfig.validate` refuses,
    before anything runs: :class:`linattn.config.ConfigError` with one line naming the figure, the parameter and
    the reason (validate's own message). The overrides are applied one at a time, so the parameter named is the
    first that makes a run invalid. Every figure draws its data, so a run with the reference's draws is also
    refused where they cannot make it (``RunConfig.reference_draws_refusal``, as ``linattn train`` asks up front).
    Figures without presets (a reader's own notebooks) are not checked."""
    from ..config import ConfigError

    if name not in PRESETS or not overrides:
        return
    applied = {}
    for key, value in overrides.items():
        applied[key] = value
        try:
            for cfg in run_configs(name, preset, applied):
                cfg.validate()
                if cfg.draws == "reference" and (reason := cfg.reference_draws_refusal()) is not None:
                    raise ConfigError(reason)
        except ConfigError as e:
            raise ConfigError(f"{name}: --param {key}={value!r} gives an invalid run: {e}") from None
        except (TypeError, ValueError) as e:  # e.g. a seed that is not a number
            raise ConfigError(f"{name}: --param {key}={value!r} gives an invalid run: not a valid value ({e})"
                              ) from None
