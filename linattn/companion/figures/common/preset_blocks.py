"""What several figures' presets share: the run knobs every training figure lists, the published settings several
figures start from, the knob help of knobs several figures have, the sweep rule that makes runs of swept settings,
and the tolerances of the quick figures' tests.

A figure module declares ``PRESETS = {"paper": {...}, "quick": {...}}`` from these blocks (``paper``: the
published settings; ``quick``: CI-sized, each notebook runs in seconds). Run settings use
:class:`linattn.config.RunConfig` names (``head_num``, ``init``, ``lr``, ``epoch``, ``trainset_size``, ...); every
training figure lists all of :data:`RUN_KNOBS`. What a figure varies has its own key (``seeds``, ``ranks``,
``icl_values``, ...; :data:`SWEEPS` says which RunConfig field each sets).

Every run uses the reference's own random draws (``draws="reference"``, the default) and names the initialisation
era its published figure was made with: dec2024 for Figures 1b and 3a–3c (ATTN_M's and the MLP's draws are the
same in dec2024 and jan2025), jan2025 for Figure 4, the rank appendix and Figure 14.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

# The settings every training figure lists, so that each is a knob of its parameters cell (RunConfig's default where
# a figure does not set one); ``rank`` only for ATTN_S.
RUN_KNOBS = ("model", "head_num", "rank", "in_dim", "seq_len", "trainset_size", "init", "lr", "epoch", "init_scheme",
             "draws", "dtype")


def run_settings(**settings) -> dict:
    """A run's settings: ``settings`` plus every :data:`RUN_KNOBS` entry it leaves out, at RunConfig's default."""
    from ....config import RunConfig

    defaults = RunConfig()
    out = {k: getattr(defaults, k) for k in RUN_KNOBS if k != "rank" or settings.get("model") == "attnS"}
    out.update(settings)
    return out


def without(settings: dict, *keys) -> dict:
    """``settings`` less ``keys``: a figure that sweeps a setting (``ranks``) has no single value of it (``rank``)."""
    return {k: v for k, v in settings.items() if k not in keys}


# Published settings shared by Figures 1b, 5 (ATTN_M), 14: D = 4, seq_len 32, P = 5000, default covariance.
ATTN_M_PAPER = run_settings(model="attnM", head_num=8, init=1e-6, in_dim=4, seq_len=32, trainset_size=5000, lr=1e-3,
                   epoch=6001, init_scheme="dec2024", draws="reference")

# Published settings of Figure 3a (rank-one ATTN_S, D = 4: the default covariance has the eigenvalues 0.4, 0.3, 0.2,
# 0.1) and Figure 4 (D = 8).
ATTN_S_PAPER = run_settings(model="attnS", head_num=5, rank=1, init=1e-2, lr=0.02, epoch=10001, trainset_size=80000,
                   in_dim=4, seq_len=32, init_scheme="dec2024", draws="reference")
ATTN_S_QUICK = dict(ATTN_S_PAPER, init=2e-2, epoch=6001, trainset_size=4000)
# Figures 3a, 3b, 3c and the diagnostics and PCR pages read the same seed-0 run: one snapshot interval, so the run
# store trains it once (a run's key includes its snapshot interval, not track_value)
SNAP_PAPER, SNAP_QUICK = 10, 20
SEED0_RUN = {"quick": dict(ATTN_S_QUICK, seed=0, snapshot_every=SNAP_QUICK),
             "paper": dict(ATTN_S_PAPER, seed=0, snapshot_every=SNAP_PAPER)}
LOW_RANK_PAPER = run_settings(model="attnS", head_num=9, rank=1, in_dim=8, seq_len=32, init=5e-3, lr=0.02, epoch=20001,
                     trainset_size=80000, init_scheme="jan2025", draws="reference")
LOW_RANK_QUICK = dict(LOW_RANK_PAPER, init=3e-2, epoch=3001, trainset_size=2000)
WHITE_ATTN_M = run_settings(model="attnM", head_num=8, init=1e-6, white_cov=True, init_scheme="jan2025", in_dim=4,
                   seq_len=32)

# What each knob several figures have means (the parameters cells are written from these:
# :func:`linattn.companion.runner.notebooks.parameters_source`); a run setting's own help is its declaration
# (:data:`linattn.config.SETTINGS`), a knob only one figure has is in that figure's ``HELP``.
HELP: dict[str, str] = {
    "seeds": "one run per seed",
    "ranks": "key-query ranks R, one run each",
    "icl_values": "in-context fractions c, one run each",
    "inits_s": "ATTN_S initialisation scales, one run each",
    "trainset_sizes": "P of each run or column (None: the population loss, infinite P; the population page needs it)",
    "snapshot_every": "record the weights every this many steps (shared runs share one interval)",
    "epoch_extended": ("the step the runs are carried on to (a dict: per rank, a rank left out taking the largest; "
                       "the phase diagram: the gradient-flow horizon in steps)"),
    "attn_m": "the ATTN_M run settings (a partial dict sets only those keys)",
    "attn_s": "the ATTN_S run settings (a partial dict sets only those keys)",
}

# The quick figures' tests (tests/test_figures.py) hold each figure's numbers.json rows to its ``TOLERANCES``: a list
# of (pattern matching whole row keys, kind, tolerance), kind "abs" or "rel" (the error against the row's theory
# value) or "below" (a bound on our value). Plateau and final losses are held to PLATEAU_TOLERANCE of L(M_m): twice
# the sampling error of a level near 1 on the quick preset's smaller sets (P = 1000-5000: 2·√(2/P) = 0.04-0.09), the
# classifier's own acceptance (loss_curves.REST_TOL), and the final losses' too. SETTLED bounds a loss change that
# counts as none (a settled cell, a drifting weight).
PLATEAU_TOLERANCE = 0.04
SETTLED = 0.02
PLATEAUS = (r"(.*\.)?(plateau|rest\d+|final_loss)(\..*)?", "abs", PLATEAU_TOLERANCE)  # a rest: at its saddle
EXACT = (r".*", "abs", 0.0)  # counts (schematics): equal to the theory


class Sweep(NamedTuple):
    """How one setting of a figure becomes runs: each of its values sets RunConfig ``field``."""

    field: str
    run: str | None = None  # the nested run it belongs to (``attn_m``, ``attn_s``); None: every run of the figure


# The settings figures sweep, and the RunConfig field each of their values sets: one run per value
# (``icl_values: [0.0, 0.5]`` -> runs with ``icl=0.0`` and ``icl=0.5``; several swept settings: every combination).
# A list (or a dict's values) is swept, a single value is one value. Horizons that a page only lengthens a run to
# (``epoch_extended``, ``epoch_streams``: max(epoch, value)) are not runs of their own.
SWEEPS: dict[str, Sweep] = {
    "seeds": Sweep("seed"),
    "icl_values": Sweep("icl"),
    "ranks": Sweep("rank"),
    "inits_m": Sweep("init", "attn_m"),
    "inits_s": Sweep("init", "attn_s"),
    "trainset_sizes": Sweep("trainset_size"),
}


def _values(value) -> list:
    """The values a swept setting takes: a list's or tuple's items, a dict's values, else the value itself."""
    if isinstance(value, dict):
        return list(value.values())
    return list(value) if isinstance(value, (list, tuple)) else [value]


def nested(s: dict) -> dict:
    """The runs settings ``s`` nest in sub-dicts that name a ``model`` (``attn_m``, ``attn_s``), else ``{None: s}``."""
    return {k: v for k, v in s.items() if isinstance(v, dict) and "model" in v} or {None: s}


def base_settings(s: dict, run: str | None = None) -> dict:
    """The RunConfig fields of settings ``s`` (of its nested run ``run``), with the figure's ``seed`` where the run
    has none, and a ``spectrum`` as a tuple fixing ``in_dim`` to its length unless the run sets ``in_dim``."""
    from ....config import RunConfig

    fields = set(RunConfig.field_names())
    own = s if run is None else s[run]
    base = {k: v for k, v in own.items() if k in fields}
    if run is not None and "seed" in s:
        base.setdefault("seed", s["seed"])
    if base.get("spectrum") is not None:
        base["spectrum"] = tuple(base["spectrum"])
        if "in_dim" not in own:
            base["in_dim"] = len(base["spectrum"])
    return base


def sweep(s: dict, run: str | None = None) -> dict:
    """``{label: RunConfig}`` of every run that the swept settings (:data:`SWEEPS`) of a figure's settings ``s``
    make, in a fixed order (nested runs in the order of ``s``, then every combination of the swept values in the
    order given); ``run`` keeps only the nested run of that key (``"attn_m"``). Labels: the nested run's key and the
    swept fields' values (``"attn_m init=0.001"``, ``"seed=10 rank=2"``). Not validated."""
    from ....config import RunConfig

    out = {}
    for label, _ in nested(s).items():
        if run is not None and label != run:
            continue
        base = base_settings(s, label)
        axes = [(sw.field, _values(s[key])) for key, sw in SWEEPS.items()
                if s.get(key) is not None and sw.run in (None, label)]
        for combo in itertools.product(*(vals for _, vals in axes)):
            words = [label or ""] + [f"{field}={v}" for (field, _), v in zip(axes, combo)]
            out[" ".join(w for w in words if w) or "run"] = RunConfig(
                **{**base, **{field: v for (field, _), v in zip(axes, combo)}})
    return out
