"""Beyond the paper: where in-context learning wins once training has finished — ATTN_M's final test losses over the
in-context fraction c and the number of training sequences P — and ATTN_S's escape times across initialisations and
seeds.

    from linattn.companion.figures import beyond_phase_diagram as page
    ds = page.compute(page.settings("quick"))
    ds.final_test_icl.sel(trainset_size=np.inf)       # the population column

**How the cells are trained.** Each cell of c × P (and P = ∞, the population moments of the mixed task) is a run
declared in :func:`runs`: ATTN_M by gradient flow (``dynamics="flow"``, the core's ``linattn.training.flow``, LSODA with
the loss's Hessian) on its exact training loss to step ``epoch_extended``, recording only the steps the page reads
(:func:`recorded`), through the run store (cached, listed in ``trainings.jsonl``; with a Dask client its workers
train the cells). Linattn's streams give every cell the same initial weights, test sets and fixed task. The flow's
relative tolerance is :data:`FLOW_RTOL`, chosen by measurement (one BLAS thread, CPU a cell): against rtol 1e-8,
rtol 1e-4 moves every recorded test loss by < 1.3e-4 (relative) at the quick preset's horizon 10⁸ (0.5 s against
1.8 s; 1e-5: < 3e-5 at 1.0 s) and by < 3.1e-4 at the paper's 10⁹ (P from 200 to ∞; 0.9 s against 2.4 s; 1e-3:
7e-3 at 0.8 s), and moves no verdict of the quick page.

**When is a cell finished, and who wins?** A cell is *settled* when its test losses moved less than ``TOLERANCE``
over the last ``WINDOW`` of its training; its end point, least squares on ATTN_M's features, checks it where it is
unique. In-context learning wins where the in-context test loss is below the midpoint between tr Λ and L* by more
than ``BAND_Z`` standard errors, each from the cell's per-sequence test losses at its final weights
(:func:`per_sequence_losses`) by ``uncertainty.mean_loss_error`` (the in-context test set's task vectors are whitened,
which fixes part of its loss; the in-weight one's sequences are independent: std over √n); within that band the test set
cannot tell, and a bracket in c spans such cells (:func:`.common.phase.banded_bracket`). The population crossings are
solved on the population test moments, free of sampling error. The count of directions left to fresh sequences is
the null space of the fixed task's E[TTᵀ] at the relative tolerance ``FLAT`` (:func:`.common.phase.free_directions`),
and the pure in-context column (c = 1 over ``column_sizes``) is set beside the rank of the fresh sequences' feature
covariance (:func:`.common.phase.feature_rank`), where minimum-norm least squares puts its peak. The rules are in
:mod:`.common.phase`, the page's words in :mod:`.common.phase_text`, its figures in :mod:`.common.phase_plots`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ... import theory
from ...analysis import diagnostics
from ...config import RunConfig
from ...objectives.population import mixture_moments
from .. import presets, runstore, uncertainty
from ..output import prose_text
from .common import end_point, phase, phase_text, preset_blocks
from .common.frame import settings_attrs
from .common.phase import BAND_Z, FLAT, TOLERANCE, WINDOW, triple  # noqa: F401 — BAND_Z: the verdicts' band
from .common.phase_plots import CAP, plot, plot_escape  # noqa: F401 — the page's figures
from .common.phase_text import TABLE_COLUMNS, numbers, size_label, switch_table  # noqa: F401 — the page's table
from .common.trainer import train

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    # attn_m: Figure 14's model, learning rate and horizon (epoch: the published 5000 steps), with linattn's own
    # streams, so that every cell of the c × P grid shares its initial weights, test sets and fixed task and P = ∞
    # exists; its icl and trainset_size are each cell's. Every cell is trained by gradient flow to epoch_extended
    # (steps at that learning rate), where all have settled. attn_s: the drop-step-vs-init figure, whose init is
    # each swept inits_s value and whose seeds are ``seeds``. workers: a local Dask cluster for the quick preset (so
    # the tests build the page through one); none for the paper preset, which make book runs beside another notebook
    # on the same cores (a cluster there cost ~13 s more CPU than training in the kernel, and no wall time)
    "quick": dict(attn_m=dict(preset_blocks.WHITE_ATTN_M, lr=5e-4, epoch=5000, trainset_size=2000, testset_size=500,
                              seed=10, draws="streams"),
                  attn_s=preset_blocks.run_settings(model="attnS", head_num=5, rank=1, in_dim=4, seq_len=32, lr=0.02,
                                             epoch=3001, trainset_size=1000, init_scheme="jan2025"),
                  icl_values=[0.0, 0.02, 0.2, 1.0], trainset_sizes=[200, 2000], epoch_extended=10**8,
                  column_sizes=[15, 30, 60, 120, 240],
                  inits_s=[0.08, 0.16], seeds=[0, 1], workers=2),
    "paper": dict(attn_m=dict(preset_blocks.WHITE_ATTN_M, lr=5e-4, epoch=5000, trainset_size=5000, testset_size=5000,
                              seed=10, draws="streams"),
                  attn_s=preset_blocks.run_settings(model="attnS", head_num=5, rank=1, in_dim=4, seq_len=32, lr=0.02,
                                             epoch=20001, trainset_size=4000, init_scheme="jan2025"),
                  icl_values=[0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0],
                  trainset_sizes=[200, 1000, 5000, 20000], epoch_extended=10**9,
                  column_sizes=[15, 30, 45, 60, 75, 120, 240],
                  inits_s=[0.02, 0.04, 0.08, 0.16], seeds=[0, 1, 2, 3], workers=0),
}
# other settings the page must stay true at (each cheap at the quick preset): another D and H (30 features, 6 free
# directions), and a shorter context with other grids of c, P and the column
KNOB_CASES = (dict(in_dim=3, head_num=4, epoch=1501, epoch_extended=10**7, column_sizes=[10, 20, 30, 45, 90],
                   workers=0),
              dict(seq_len=16, icl_values=[0.0, 0.05, 0.5, 1.0], trainset_sizes=[100, 1000], epoch=1501,
                   epoch_extended=10**7, column_sizes=[20, 40, 60, 80, 120], workers=0))
HELP = {
    "column_sizes": "P of each run of the pure in-context column (every task fresh), around the rank of the feature "
                    "covariance",
    "workers": "worker processes of a local Dask cluster for the runs (0: none, the notebook trains them itself)",
}
# the population column at c = 1 ends at L* (measured on finite test sets), and every cell has settled
TOLERANCES = [(r"final_test_icl\.Pinf\.c1", "abs", preset_blocks.PLATEAU_TOLERANCE),
              (r"settle\.max", "below", preset_blocks.SETTLED)]


def write_page(S: dict, frame):
    """The page's two datasets, the phase diagram and the escape-time sweep, trained on one local Dask cluster of
    ``S["workers"]`` workers and saved into ``frame`` with their figures: (the phase diagram, its numbers, the words
    of both) for :func:`linattn.companion.figures.common.frame.build`."""
    from ..sweeps.engine import local_client

    with local_client(S["workers"]) as client:
        ds = compute(S, client)
        escape = compute_escape(S, client)
        table = frame.save(ds, plot(ds), numbers(ds, escape))
        frame.save(escape, plot_escape(escape), stem=f"{NAME}_escape")
    return ds, table, words(ds, escape)


#: The flow integrator's relative tolerance of every cell (see the module docstring for the measurement).
FLOW_RTOL = 1e-4
CELL = "cell"  # the label prefix of the phase diagram's runs
COLUMN = "column"  # the label prefix of the pure in-context column's runs (c = 1 at small P)


def recorded(S: dict) -> tuple[int, ...]:
    """The steps a cell records: 0, :func:`.common.phase.record_steps` from the published epoch/10 to the horizon
    ``epoch_extended``, and ten steps of the last ``WINDOW`` of the training before it (the settled criterion)."""
    horizon = int(S["epoch_extended"])
    tail = np.round(np.linspace((1 - WINDOW) * horizon, horizon, 11)[:-1])
    steps = np.concatenate([[0], phase.record_steps(int(S["attn_m"]["epoch"]), horizon), tail])
    return tuple(int(k) for k in np.unique(steps))


def _grid(S: dict) -> tuple[list[float], list[float]]:
    """The values of c (sorted) and of P (the finite ones sorted, then ∞: the population column is always there)."""
    finite = sorted(int(P) for P in S["trainset_sizes"] if P is not None and np.isfinite(P))
    return sorted(float(c) for c in S["icl_values"]), [float(P) for P in finite] + [np.inf]


def runs(S: dict) -> dict:
    """What the page trains: the escape-time sweep's ATTN_S runs (one per seed of ``seeds`` and scale of
    ``inits_s``) and the phase diagram's cells, ATTN_M of ``attn_m`` by gradient flow to ``epoch_extended`` for every
    c of ``icl_values`` × P of ``trainset_sizes`` and ∞ (labelled "cell c=… P=…"). ValueError for an ``attn_m``
    the page cannot compare (not linear ATTN_M, not linattn's streams, no test sets)."""
    m = S["attn_m"]
    if m.get("model") != "attnM" or m.get("softmax") or m.get("vary_len"):
        raise ValueError("the phase diagram trains linear ATTN_M (attn_m: model='attnM', no softmax, no vary_len)")
    if m.get("draws") != "streams":
        raise ValueError("the phase diagram needs attn_m draws='streams': every cell then shares its initial weights, "
                         "test sets and fixed task, and P = ∞ exists")
    if not m.get("testset_size"):
        raise ValueError("the phase diagram needs test sets: give attn_m testset_size > 0")
    out = dict(preset_blocks.sweep(without_cells(S), run="attn_s"))
    flow = dict(m, dynamics="flow", epoch=int(S["epoch_extended"]), record=recorded(S), flow_rtol=FLOW_RTOL)
    icl, sizes = _grid(S)
    out.update({f"{CELL} c={c:g} P={size_label(P)}": RunConfig(**dict(
        flow, icl=c, trainset_size=int(P) if np.isfinite(P) else None)) for c in icl for P in sizes})
    out.update({f"{COLUMN} P={P}": RunConfig(**dict(flow, icl=1.0, trainset_size=P)) for P in _column(S)})
    return out


def _column(S: dict) -> list[int]:
    """The P of the pure in-context column (``column_sizes``), sorted; ValueError for one below 1."""
    sizes = sorted(int(P) for P in S.get("column_sizes") or [])
    if sizes and sizes[0] < 1:
        raise ValueError(f"column_sizes must be whole numbers ≥ 1, got {S['column_sizes']!r}")
    return sizes


def without_cells(S: dict) -> dict:
    """``S`` without the settings of the ATTN_M cells, leaving the drop-step sweep's (``attn_s``, ``inits_s``,
    ``seeds``)."""
    return {k: v for k, v in S.items() if k in ("attn_s", "inits_s", "seeds")}


def _parts(S: dict, kind: str | None) -> dict:
    """The runs of :func:`runs` whose label starts with ``kind`` (None: the escape-time sweep's)."""
    return {k: r for k, r in runs(S).items()
            if (k.startswith(kind) if kind else not k.startswith((CELL, COLUMN)))}


def per_sequence_losses(result, seqs, features: torch.Tensor | None = None) -> np.ndarray:
    """(ŷ − y)² of each sequence of ``seqs`` under ``result``'s final weights: the terms whose mean is the run's
    recorded loss on that set at its last step (:func:`.common.end_point.per_sequence_losses`; ``features``: the
    sequences' own, :func:`.common.end_point.sequence_features`, else computed here)."""
    if features is None:
        features = end_point.sequence_features(seqs, result.config.normalize)
    return end_point.per_sequence_losses(result.model, seqs, features)


def _cell(result, tests: dict, data, features: dict) -> dict:
    """A cell's losses at its recorded steps, their least-squares end points (None where the training loss is flat),
    E[TTᵀ]'s smallest eigenvalue relative to its largest, and each final test loss's standard error from its
    per-sequence losses (``uncertainty.mean_loss_error``) on the test sets ``data`` (linattn's streams give every
    cell the same ones; ``features``: theirs, by name)."""
    mom = end_point.train_moments(result)
    m_star, curvature = end_point.least_squares(mom)
    out: dict[str, Any] = {"curvature": curvature, "seconds": float(result.history.wall_time)}
    for name in tests:
        seqs = getattr(data, name)
        out[f"se_{name}"] = uncertainty.mean_loss_error(per_sequence_losses(result, seqs, features[name]), seqs)
    for name, moments in (("train_loss", mom), *tests.items()):
        out[name] = np.asarray(getattr(result.history, name), dtype=np.float64)
        out[f"limit_{name}"] = None if m_star is None else phase.quadratic_loss(m_star, moments)
    return out


def compute(S: dict, client=None):
    """The phase diagram at the settings ``S`` as an xarray Dataset over ``icl`` × ``trainset_size`` (× ``step``):
    the losses along the flow (``train_loss``, ``test_iwl``, ``test_icl``), at the horizon (``final_*``) with the
    standard error of each final test loss from its per-sequence losses (``se_test_*``), at the end point
    (``limit_*``; NaN where ``flat``), how much each test loss moved over the last ``WINDOW`` (``settle_*``,
    ``settled``), ``fresh`` (cP), ``cell_seconds``, the verdicts of :func:`.common.phase.verdicts`, the fixed task's
    free directions (:func:`.common.phase.free_directions` at the relative tolerance ``FLAT``, with
    :func:`.common.phase.null_space_gap`), and the pure in-context column (c = 1 over ``column_P``: ``column_*``,
    its peak and the rank of the fresh sequences' feature covariance, ``feature_rank``); its cells trained on
    ``client`` where given."""
    import xarray as xr

    done = train({**_parts(S, CELL), **_parts(S, COLUMN)}, S, client=client)
    results = {k: r for k, r in done.items() if k.startswith(CELL)}
    first = next(iter(results.values()))
    base, data = first.config, first.datasets
    tests = end_point.test_moments(first)
    icl, sizes = _grid(S)
    features = {name: end_point.sequence_features(getattr(data, name), base.normalize) for name in tests}
    cells = [_cell(r, tests, data, features) for r in results.values()]
    at, steps = first.history.step, phase.record_steps(int(S["attn_m"]["epoch"]), base.epoch)
    keep, last = np.searchsorted(at, steps), np.flatnonzero(at >= (1 - WINDOW) * base.epoch)[:-1]

    def grid(key):
        return np.array([np.nan if c[key] is None else c[key] for c in cells], dtype=np.float64).reshape(
            len(icl), len(sizes), -1)

    dims, data_vars = ("icl", "trainset_size"), {}
    for k in ("train_loss", "test_iwl", "test_icl"):
        curve = grid(k)
        data_vars.update({k: (dims + ("step",), curve[..., keep]), f"final_{k}": (dims, curve[..., -1]),
                          f"limit_{k}": (dims, grid(f"limit_{k}")[..., 0])})
        if k != "train_loss":
            change = np.abs(curve[..., last] - curve[..., -1:]).max(axis=-1) / np.abs(curve[..., -1])
            data_vars["settle_" + k.split("_")[1]] = (dims, change)
            data_vars[f"se_{k}"] = (dims, grid(f"se_{k}")[..., 0])
    fresh = np.floor(np.outer(icl, np.where(np.isfinite(sizes), sizes, 0.0)) + 1e-9)
    data_vars.update(flat=(dims, grid("curvature")[..., 0] < FLAT), cell_seconds=(dims, grid("seconds")[..., 0]),
                     fresh=(dims, np.where(np.isfinite(sizes), fresh, np.inf)))
    ds = xr.Dataset(data_vars, coords={"icl": icl, "trainset_size": np.array(sizes), "step": steps})
    L_origin, L_star = float(np.trace(data.cov)), theory.loss_star(data.cov, base.N)
    midpoint = (L_origin + L_star) / 2
    ds.attrs.update(L_origin=L_origin, L_star=L_star, midpoint=midpoint)
    ds["settled"] = (ds.settle_iwl < TOLERANCE) & (ds.settle_icl < TOLERANCE)
    fixed, fresh_m = phase.task_moments(data.cov, data.w_fix, seq_len=base.seq_len, normalize=base.normalize)
    ds = phase.verdicts(ds, midpoint, fixed, fresh_m, _population_tests(data, base, fresh_m))
    ds["free_directions"] = phase.free_directions(fixed[0])
    ds["null_flat"], ds["null_next"] = phase.null_space_gap(fixed[0])
    ds = _with_column(ds, {k: r for k, r in done.items() if k.startswith(COLUMN)}, fresh_m[0], data.test_icl,
                      features["test_icl"])
    ds.attrs.update(settings_attrs(S, engine="exact (gradient flow)", seeds=S["attn_m"]["seed"]))
    ds.attrs.update(tolerance=TOLERANCE, window=WINDOW, horizon=int(base.epoch), epoch=int(S["attn_m"]["epoch"]),
                    lr=float(base.lr), flow_rtol=FLOW_RTOL, published=int(presets.is_published(NAME, S)),
                    band_z=phase.BAND_Z, flat_tol=FLAT, n_test=int(len(data.test_icl.y)),
                    white_cov=int(bool(S["attn_m"].get("white_cov"))))
    return ds


def _population_tests(data, cfg, fresh: tuple) -> dict:
    """The population moments of the two test sets: the in-context test's sequences carry fresh tasks (``fresh``),
    the in-weight test's the fixed task with noise context labels (the c = 0 mixture)."""
    noise = triple(mixture_moments("attention", data.cov, cfg.seq_len, icl=0.0, w_fix=data.w_fix,
                                   normalize=cfg.normalize))
    return {"test_icl": fresh, "test_iwl": noise}


def _with_column(ds, column: dict, fresh_TT: np.ndarray, test_set, features: torch.Tensor):
    """``ds`` with the pure in-context column (c = 1 at the P of ``column``'s runs, coordinate ``column_P``): the
    final training and in-context test losses (``column_train_loss``, ``column_test_icl``) and the test loss's
    standard error (``column_se_icl``), the P of the peak of its test loss (``column_peak``: NaN where the grid
    shows none, :func:`.common.phase.sample_wise_peak`) and where least squares predicts it, the rank of the fresh
    sequences' feature covariance (``feature_rank``); ``features``: the test set's
    (:func:`.common.end_point.sequence_features`)."""
    sizes = [int(r.config.trainset_size) for r in column.values()]
    test = [float(r.history.test_icl[-1]) for r in column.values()]
    se = [uncertainty.mean_loss_error(per_sequence_losses(r, test_set, features), test_set) for r in column.values()]
    peak = phase.sample_wise_peak(test) if column else None
    return ds.assign(column_train_loss=("column_P", [float(r.history.train_loss[-1]) for r in column.values()]),
                     column_test_icl=("column_P", test), column_se_icl=("column_P", se),
                     column_peak=np.nan if peak is None else float(sizes[peak]),
                     feature_rank=phase.feature_rank(fresh_TT),
                     n_features=int(fresh_TT.shape[0])).assign_coords(column_P=np.array(sizes, dtype=float))


def compute_escape(S: dict, client=None):
    """ATTN_S's drops across the initialisation scales ``inits_s`` and ``seeds`` (the runs of :func:`runs` not in
    the phase diagram, through the run store, on ``client`` where given): ``drop_step`` (init × seed × direction,
    the sweep engine's summary of each run), the theory's escape time of each drop (``law``: init × direction,
    ``theory.attn_s_drop_steps``, one head: an order of magnitude), the drops predicted from each run's own initial
    weights, every head included (``predicted``, ``runstore.predicted_drop_steps``; ``predicted_ratio``: the
    median over every run of its simulated over predicted step of each drop), each seed's fitted exponent of each
    drop's step in the initialisation scale (``seed_exponent``) and their mean over seeds (``exponent``), and
    ``ratio``: the median over inits of each init's median over seeds of the simulated step, over the estimate."""
    import xarray as xr

    from ..sweeps.cells import summarise

    results = list(train(_parts(S, None), S, client=client).values())
    inits, seeds = sorted({r.config.init for r in results}), sorted({r.config.seed for r in results})
    base, cov = results[0].config, results[0].datasets.cov  # Λ's spectrum is the same for every seed
    D = base.in_dim
    drops, predicted = np.full((len(inits), len(seeds), D), np.nan), np.full((len(inits), len(seeds), D), np.nan)
    for r in results:
        i, s = inits.index(r.config.init), seeds.index(r.config.seed)
        found = summarise(r.history, r.datasets.cov, r.config)["drop_steps"]
        drops[i, s] = [np.nan if x is None else x for x in found][:D]
        predicted[i, s] = runstore.predicted_drop_steps(r)[:D]
    law = np.array([theory.attn_s_drop_steps(cov, base.N, lr=base.lr, init=i, rank=base.rank, head_num=base.head_num,
                                             init_scheme=base.init_scheme, normalize=base.normalize)[:D]
                    for i in inits])
    escape = xr.Dataset({"drop_step": (("init", "seed", "direction"), drops),
                         "predicted": (("init", "seed", "direction"), predicted),
                         "law": (("init", "direction"), law)},
                        coords={"init": inits, "seed": seeds, "direction": np.arange(1, D + 1)})
    ratio = (escape.drop_step / escape.predicted).transpose("direction", ...).values.reshape(D, -1)
    escape["predicted_ratio"] = ("direction", [_median(r) for r in ratio])
    escape["seed_exponent"] = (("seed", "direction"), np.array([[_exponent(escape.drop_step.sel(seed=s, direction=d))
                                                                  for d in escape.direction] for s in seeds]))
    escape["exponent"] = ("direction", [phase.exponent_verdict(escape.seed_exponent.sel(direction=d).values)[0]
                                        for d in escape.direction])
    escape["ratio"] = ("direction", [_median((escape.drop_step.sel(direction=d).median("seed")
                                              / escape.law.sel(direction=d)).values) for d in escape.direction])
    escape.attrs["head_num"] = base.head_num  # the escape-time estimate is for one head
    return escape


def _median(x) -> float:
    x = np.asarray(x, dtype=np.float64)
    return float(np.nanmedian(x)) if np.isfinite(x).any() else np.nan


def _exponent(steps) -> float:
    """``diagnostics.escape_law``'s exponent of one drop's steps in the initialisation scale (NaN: < 2 scales)."""
    x, y = steps.init.broadcast_like(steps).values.ravel(), steps.values.ravel()
    return diagnostics.escape_law("attnS", x, y) if len(set(x[np.isfinite(y)])) >= 2 else np.nan


def escape_command(S: dict) -> str:
    """``linattn sweep`` of the escape-time runs: the fixed settings' flags and one ``--grid`` per swept setting."""
    from ..commands import train_command

    flags = train_command(next(iter(_parts(S, None).values()))).split(" ", 2)[2]
    grid = " ".join(f"--grid {k}={','.join(f'{v:g}' for v in S[key])}" for k, key in (("init", "inits_s"),
                                                                                       ("seed", "seeds")))
    return f"linattn sweep {flags} {grid} --out sweeps/escape"


def words(ds, escape=None) -> dict:
    """The values and phrases the page's prose glues, by name (``output.glue``); every verdict phrase comes from a
    rule of :mod:`.common.phase` through :mod:`.common.phase_text`."""
    import json

    t = phase_text
    base = json.loads(ds.attrs["settings"]).get("attn_m", {}) if "settings" in ds.attrs else {}
    zero = ds.sel(icl=0.0) if 0.0 in ds.icl.values else None
    out = dict(n_cells=int(ds.settled.size), n_icl=int(ds.sizes["icl"]), n_P=int(ds.sizes["trainset_size"]),
               sizes=t._list([size_label(P) for P in ds.trainset_size.values]), horizon=t._steps(ds.horizon),
               epoch=int(ds.epoch), lr=f"{ds.lr:g}", head_num=base.get("head_num", "–"),
               init=f"{base.get('init', float('nan')):g}", in_dim=base.get("in_dim", "–"),
               tolerance=f"{ds.tolerance:.0%}", window=f"{ds.window:.0%}", midpoint=float(ds.midpoint),
               L_star=prose_text(float(ds.L_star), 4), L_origin=float(ds.L_origin), cap=f"{CAP:g}",
               flow_rtol=f"{ds.flow_rtol:g}",
               cells_seconds=f"{float(ds.cell_seconds.sum()):.0f} s",
               per_cell=f"{float(ds.cell_seconds.median()):.1f} s", free_directions=int(ds.free_directions),
               settled=t.settled_phrase(ds), icl_switch=t.switch_phrase(ds), band=t.band_phrase(ds),
               population_switch=t.crossing_phrase(ds.population_switch), iwl_wins=t.iwl_wins_phrase(ds),
               iwl_loses=t.switch_phrase(ds, "iwl_lo", "iwl_hi"), population_edge=t.crossing_phrase(ds.population_edge),
               exploded=t.exploded_phrase(ds), peaks=t.peak_phrase(ds), null_space=t.null_space_phrase(ds),
               column=t.column_phrase(ds), feature_rank=int(ds.feature_rank), n_features=int(ds.n_features),
               n_test=int(ds.n_test), limits=t.limit_phrase(ds),
               column_sizes=t._list(f"{int(P)}" for P in ds.column_P.values) or "none",
               covariance="white (Λ = I/D)" if ds.white_cov else "the run's own",
               zero_iwl="–" if zero is None else t._range(zero.final_test_iwl),
               zero_icl="–" if zero is None else t._range(zero.final_test_icl))
    if escape is not None:
        out.update(n_escape=int(escape.drop_step.isel(direction=0).size),
                   exponents=t.exponent_phrase(escape),
                   ratios=t._list([f"{x:.1f}" for x in escape.ratio.values if np.isfinite(x)]) or "–",
                   predicted_ratios=t._list([f"{x:.2f}" for x in escape.predicted_ratio.values if np.isfinite(x)])
                   or "–", heads_s=int(escape.attrs.get("head_num", 1)))
    return out
