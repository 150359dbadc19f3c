"""One experiment: a training run from a :class:`~linattn.config.RunConfig` — data, initial weights, objective,
gradient descent or flow — and its output folder.

    result = run(RunConfig(model="attnM", head_num=8, init=1e-6))
    result.history.train_loss      # one value per step, recorded before the step
    result.weights                 # the final weights, in the layout of init.npz
    write_outputs(result, "runs/fig1")   # loss.csv, run.json, init.npz, weights.npz (data.npz if asked)
    load_run("runs/fig1")          # the same, read back (from whatever wrote it: train, a sweep, the run store)

A run's key (:func:`run_key`) hashes what decides its numbers: the settings, the given data and weights, the
numerical libraries and the code that computes a trajectory (:data:`TRAJECTORY_CODE`, without comments and
docstrings).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import data as data_mod
from . import objectives
from .config import ConfigError, RunConfig, check_memory
from .data import named
from .flow import gradient_flow
from .weights import check_weights, init_weights
from .records import atomic_write, library_versions, provenance, write_csv, write_json
from .train import History, TrainingDiverged, gradient_descent, weights_of


@dataclass
class RunResult:
    """One run: what :func:`run` returns, what :func:`load_run` reads back from a run folder (whatever wrote it:
    ``linattn train --out``, :func:`write_outputs`, a sweep, the run store), and what the run store serves.

    Attributes:
        config: the settings of the run (with given ``data``, its P and seq_len).
        history: the losses, one per step recorded before the step (:class:`~linattn.train.History`: ``step``,
            ``train_loss``, ``test_iwl``, ``test_icl``, ``values`` — v_h[D] per head with ``track_value`` —,
            ``snapshots``).
        init: the initial weights, in the layout of ``init.npz`` (``models.weight_shapes``).
        weights: the final weights in the same layout: ``build_model(config.model, weights)`` rebuilds the
            trained model.
        engine, device: the engine and device that trained it.
        setup_time, wall_time: seconds spent before training, and in all.
        datasets: the training and test sets and the task (:class:`~linattn.data.Datasets`). Read back: from
            ``data.npz`` when it was saved, else drawn again on first use where the run drew them (the task, Λ
            and the fixed task vector, at once from ``run.json``); None where given data were not saved.
        given: what was given in place of drawn: ``"init"``, ``"data"``.
        snapshot_every: the interval of ``history.snapshots`` (0: none).
        key: the run's key (:func:`run_key`) where a run store or a sweep filed it under one, else None.
        trained_steps: how many steps were trained to give this result (the run store: 0 when all were stored).
        path: the folder it was read from (None for a run just trained); info: its ``run.json`` (settings,
            versions, git commit, timings).
        model: the trained model (on ``device``; read back: rebuilt from ``weights``, float64, CPU).
    """

    config: RunConfig
    history: History
    init: dict[str, np.ndarray] | None
    weights: dict[str, np.ndarray] | None
    engine: str
    device: str
    setup_time: float
    wall_time: float
    datasets: data_mod.Datasets | None = None
    given: tuple[str, ...] = ()
    snapshot_every: int = 0
    key: str | None = None
    trained_steps: int | None = None
    path: Path | None = None
    info: dict = field(default_factory=dict)
    _model: torch.nn.Module | None = field(default=None, repr=False, compare=False)
    _more: Callable | None = field(default=None, repr=False, compare=False)  # epoch -> the run carried on

    @property
    def model(self) -> torch.nn.Module | None:
        """The model after training: the module that trained (on ``device``), else rebuilt from ``weights`` on first use
        (float64, CPU); None without weights."""
        from .models import build_model  # torch: imported where a model is built, not with linattn

        if self._model is None and self.weights is not None:
            self._model = build_model(self.config.model, self.weights, softmax=self.config.softmax)
        return self._model

    def snapshots_of(self, fn, **kwargs) -> list:
        """``[(step, fn(model, **kwargs))]`` for each weight snapshot, the model rebuilt from it: what
        ``linattn.run(..., snapshot=fn)`` would have recorded."""
        from .models import build_model

        return [(s, fn(build_model(self.config.model, w, softmax=self.config.softmax), **kwargs))
                for s, w in self.history.snapshots]

    def extended(self, epoch: int) -> "RunResult":
        """The same run carried on to ``epoch`` steps (never shorter than it is): gradient descent depends on the
        weights alone, so its first steps are this run's. Only a run served by the run store
        (``linattn.companion.runstore``) can be carried on; it continues from its nearest checkpoint."""
        if epoch <= self.config.epoch:
            return self
        if self._more is None:
            raise ValueError("only a run served by the run store can be carried on (linattn.companion.runstore."
                             "stored_run); otherwise run(cfg, init=result.weights, start_step=...) continues it")
        return self._more(epoch)


class _DrawnOnUse(data_mod.Datasets):
    """The data sets of a run read back: the task (``cov``, ``w_fix``) at once, the sequences drawn again from the
    settings on first use (:func:`draw` draws the same numbers for the same settings)."""

    def __init__(self, config: RunConfig, cov, w_fix):
        self.cov, self.w_fix, self._config = cov, w_fix, config

    def __getattr__(self, name):
        if name in ("train", "test_iwl", "test_icl"):
            drawn = _draw(self._config)[0]
            for key in ("train", "test_iwl", "test_icl"):
                setattr(self, key, getattr(drawn, key))
            return getattr(drawn, name)
        raise AttributeError(name)


def draw(cfg: RunConfig) -> tuple[data_mod.Datasets, dict[str, np.ndarray]]:
    """The data sets and initial weights of ``cfg``, as :func:`run` would train them: the reference's own random
    numbers (``draws="reference"``), or linattn's independent streams, one per purpose (``draws="streams"``).

    Returns ``(datasets, init)``: a :class:`~linattn.data.Datasets` and a dict in the layout of ``init.npz``.
    Both can be changed and handed back, ``run(cfg, init=init, data=datasets)``.

    Raises :class:`~linattn.config.ConfigError` for invalid settings (:meth:`~linattn.config.RunConfig.validate`)
    and, with ``draws="reference"``, for options the authors' code never had
    (:meth:`~linattn.config.RunConfig.reference_draws_refusal`).
    """
    cfg.validate()
    if cfg.draws == "reference" and (reason := cfg.reference_draws_refusal()) is not None:
        raise ConfigError(reason, field="draws", value=cfg.draws)
    return _draw(cfg)


def _draw(cfg: RunConfig) -> tuple[data_mod.Datasets, dict[str, np.ndarray]]:
    """:func:`draw` for settings already checked."""
    if cfg.draws == "reference":
        from .reference_draws import reference_draws  # torch's generator

        return reference_draws(model=cfg.model, init_scheme=cfg.init_scheme, in_dim=cfg.in_dim, seq_len=cfg.seq_len,
                               trainset_size=cfg.trainset_size, testset_size=cfg.testset_size, icl=cfg.icl,
                               white_cov=cfg.white_cov, head_num=cfg.head_num, rank=cfg.rank, init=cfg.init,
                               seed=cfg.seed)
    datasets = data_mod.make_datasets(in_dim=cfg.in_dim, seq_len=cfg.seq_len, trainset_size=cfg.trainset_size,
                                      testset_size=cfg.testset_size, icl=cfg.icl, white_cov=cfg.white_cov,
                                      spectrum=cfg.spectrum, cov_matrix=cfg.cov_matrix, seed=cfg.seed)
    init = init_weights(cfg.model, head_num=cfg.head_num, in_dim=cfg.in_dim, rank=cfg.rank, init=cfg.init,
                        init_scheme=cfg.init_scheme, rng=data_mod.streams(cfg.seed, data_mod.INIT))
    return datasets, init


def _population_datasets(cfg: RunConfig) -> data_mod.Datasets:
    """What a population run with given initial weights needs of the data: Λ alone. With ``cov_matrix`` or
    ``white_cov`` nothing is drawn; otherwise Λ is drawn as :func:`draw` draws it (from linattn's streams; the
    reference has no population runs to draw it for, which :func:`plan` refuses)."""
    if cfg.draws == "streams":
        return _draw(cfg)[0]
    if cfg.cov_matrix is not None:
        cov = data_mod.check_covariance(cfg.cov_matrix, cfg.in_dim)
    else:  # white_cov: plan() refuses the reference's draws in any other case
        cov = np.eye(cfg.in_dim) / cfg.in_dim
    return data_mod.Datasets(train=None, test_iwl=None, test_icl=None, cov=cov, w_fix=None)


def _given_data(cfg: RunConfig, data) -> tuple[RunConfig, data_mod.Datasets]:
    """``data`` (Sequences, (X, y) or Datasets) as Datasets, and ``cfg`` with the data's P, seq_len, test size."""
    if isinstance(data, data_mod.Datasets):
        datasets = data
        if not isinstance(datasets.train, data_mod.Sequences):
            raise ValueError("data: a Datasets given to run() needs a training set (Datasets.train)")
    else:
        if isinstance(data, (tuple, list)) and len(data) == 2:
            data = data_mod.Sequences(*data)
        if not isinstance(data, data_mod.Sequences):
            raise ValueError(f"data must be a linattn.Sequences, a pair (X, y) of arrays or a linattn.Datasets, "
                             f"got {type(data).__name__}")
        if cfg.testset_size:
            raise ConfigError(f"with a training set given as data there are no test sets: pass "
                              f"{named('testset_size', 0)}, or give the test sets too in a linattn.Datasets",
                              field="testset_size", value=cfg.testset_size)
        x = data.X[..., :-1].reshape(-1, data.X.shape[-1] - 1).astype(np.float64)
        datasets = data_mod.Datasets(train=data, test_iwl=None, test_icl=None, cov=x.T @ x / x.shape[0], w_fix=None)
    P, n, E = datasets.train.X.shape
    for name in ("test_iwl", "test_icl"):
        s = getattr(datasets, name)
        if s is not None and s.X.shape[1:] != (n, E):
            raise ValueError(f"data: {name} has sequences of shape {s.X.shape[1:]}, the training set {(n, E)}")
    if E != cfg.in_dim + 1:
        raise ValueError(f"data has D = {E - 1} input coordinates (X.shape[2] = D+1 = {E}), but in_dim = "
                         f"{cfg.in_dim}: set RunConfig(in_dim={E - 1})")
    if cfg.trainset_size is None or objectives.resolve(cfg) == "population":
        raise ConfigError(f"the population engine ({named('trainset_size', None)}) trains on no data set: with data "
                          f"given, use a finite {named('trainset_size')} (it is taken from the data)",
                          field="trainset_size", value=cfg.trainset_size)
    tests = next((s for s in (datasets.test_iwl, datasets.test_icl) if s is not None), None)
    cfg = dataclasses.replace(cfg, trainset_size=P, seq_len=n, testset_size=0 if tests is None else len(tests))
    return cfg, datasets


def stable_lr(cfg: RunConfig, init: dict, objective, device: str, *, lr: float, steps: int,
              max_halvings: int = 20) -> tuple[float | None, int]:
    """The first of lr/2, lr/4, … (at most ``max_halvings`` halvings) for which ``steps`` steps of gradient descent
    from ``init`` on ``objective`` keep the loss finite and end below the initial loss; ``(lr, halvings)``, or
    ``(None, max_halvings)`` when none does."""
    import torch

    from .models import build_model

    dtype = getattr(torch, cfg.dtype)
    for k in range(1, max_halvings + 1):
        trial = lr / 2**k
        model = build_model(cfg.model, init, softmax=cfg.softmax, dtype=dtype, device=device)
        try:
            first = gradient_descent(model, objective, lr=trial, epoch=steps, progress=False).train_loss[0]
        except TrainingDiverged:
            continue
        last = objective.value(model)  # after the last update
        if np.isfinite(last) and last < first:
            return trial, k
    return None, max_halvings


#: What a run draws (:attr:`Plan.draws`): data and weights; the data (the weights are given); only Λ (a population
#: run from given weights); nothing (data and weights given).
EVERYTHING, DATA, COVARIANCE, NOTHING = "data and weights", "data", "covariance", "nothing"


@dataclass(frozen=True)
class Plan:
    """A run checked once, with everything decided before it starts; :func:`run` carries it out without checking
    again. Made by :func:`plan`.

    Attributes:
        config: the settings (with given data, the data's P, seq_len and test-set size).
        engine, device: the engine that trains the run and the torch device it runs on.
        memory: the estimated peak memory in bytes (:func:`~linattn.config.memory_estimate`), within the limit.
        draws: what is drawn: ``"data and weights"``, ``"data"`` (the weights are given), ``"covariance"`` (only
            Λ: a population run from given weights) or ``"nothing"``.
        init: the given initial weights (checked), or None; data: the given data as a Datasets, or None.
        start_step: the step the run continues from (0: a new run).
        drawn: the data sets a continued run drew before (``continued()``), or None: used as drawn, not given.
    """

    config: RunConfig
    engine: str
    device: str
    memory: int
    draws: str
    init: dict | None = None
    data: data_mod.Datasets | None = None
    start_step: int = 0
    drawn: data_mod.Datasets | None = None

    def continued(self, weights: dict, start_step: int, epoch: int,
                  datasets: data_mod.Datasets | None = None) -> "Plan":
        """The plan of ``epoch`` more steps of this run from ``weights``, its weights at ``start_step`` (weights
        that a run of these settings returned: not checked again). ``datasets``: the data sets the run drew, where
        the caller still holds them (``RunResult.datasets`` of a run of these settings): not drawn again."""
        drawn = datasets if self.data is None else None
        draws = NOTHING if self.data is not None or drawn is not None else \
            COVARIANCE if self.engine == "population" else DATA
        return dataclasses.replace(self, config=dataclasses.replace(self.config, epoch=epoch), init=weights,
                                   start_step=start_step, draws=draws, drawn=drawn)


def plan(cfg: RunConfig, *, init: dict | None = None, data=None, max_memory=None, start_step: int = 0,
         snapshot_every: int = 0) -> Plan:
    """Check a run of ``cfg`` (with the initial weights ``init`` and the data ``data`` given in place of drawn ones,
    as for :func:`run`) once, before any work, and decide what follows from its settings: the engine, the device,
    the memory it needs and what is drawn. :func:`run` calls it; call it yourself to check settings at a boundary
    (``linattn train`` does) and hand the :class:`Plan` to :func:`run`. ``snapshot_every``: the snapshot interval the
    run will record, counted in its memory.

    Raises:
        ConfigError: an invalid setting (:meth:`~linattn.config.RunConfig.validate`), options the reference's draws
            do not have where something is drawn with ``draws="reference"``, or a run too large for
            ``max_memory`` (None: the memory available now).
        ValueError: ``init`` or ``data`` of the wrong keys, shapes or values, or a ``start_step`` without ``init``.
    """
    cfg.validate()
    if start_step and (cfg.dynamics != "gd" or init is None):
        raise ValueError("start_step continues a gradient-descent run from given weights: it needs dynamics='gd' and "
                         "init (the weights at that step)")
    given = None
    if data is not None:
        cfg, given = _given_data(cfg, data)
    if init is not None:
        init = check_weights(cfg.model, init, head_num=cfg.head_num, in_dim=cfg.in_dim, rank=cfg.rank)
    engine = objectives.resolve(cfg)
    if init is None:
        draws = EVERYTHING  # with given data, the weights are drawn as for a run of the data's P and seq_len
    elif given is not None:
        draws = NOTHING
    else:
        draws = COVARIANCE if engine == "population" else DATA
    if cfg.draws == "reference" and draws != NOTHING:
        if (reason := cfg.reference_draws_refusal(covariance_only=draws == COVARIANCE)) is not None:
            raise ConfigError(reason, field="draws", value=cfg.draws)
    memory = check_memory(cfg, max_memory, draws_data=draws in (EVERYTHING, DATA), engine=engine,
                          snapshot_every=snapshot_every)
    return Plan(config=cfg, engine=engine, device=objectives.device_for(cfg.device, engine), memory=memory,
                draws=draws, init=init, data=given, start_step=start_step)


def check_threads(threads) -> None:
    """``threads`` (of :func:`run`) is None or a positive integer, else a ConfigError naming it."""
    if threads is not None and not (isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1):
        raise ConfigError(f"{named('threads')} must be None (the engine's choice) or a positive integer, got "
                          f"{threads!r}", field="threads", value=threads)


def run(cfg: RunConfig | Plan, *, init: dict | None = None, data=None, progress: bool | None = None,
        snapshot_every: int = 0, snapshot=None, start_step: int = 0, max_memory=None,
        threads: int | None = None) -> RunResult:
    """Check ``cfg`` (:func:`plan`), draw or take data and weights, build the engine, train, and return a
    :class:`RunResult`.

    Args:
        cfg: the settings (:class:`~linattn.config.RunConfig`), or a :class:`Plan` made of them by :func:`plan`,
            which holds ``init``, ``data``, ``start_step`` and the memory check (then not given here).
        init: initial weights replacing the drawn ones: a dict in the layout of ``init.npz``, for ``cfg``'s model,
            ``head_num`` H, ``in_dim`` D and ``rank`` R (E = D + 1): ATTN_M ``W_KQ`` (H, E, E), ``W_V`` (H, E, E);
            ATTN_S ``W_Q`` (H, R, E), ``W_K`` (H, R, E), ``W_V`` (H, E, E); MLP ``W1`` (H, D²), ``w2`` (H,).
            Only the last row of each ``W_V[h]`` enters the model.
        data: the data, replacing the drawn ones: a :class:`~linattn.data.Sequences` or a pair ``(X, y)`` (X of
            shape (P, seq_len, D+1) with the query's label zeroed, y (P,); validated as a Sequences), or a whole
            :class:`~linattn.data.Datasets` (training set, test sets and covariance, e.g. from :func:`draw`). The
            run's P, seq_len and test-set size are those of the data (``result.config`` records them; ``cfg``'s
            are not used). A training set alone comes with no test sets (``cfg.testset_size`` must be 0), no fixed
            task (``datasets.w_fix`` is None), and as ``datasets.cov`` the second moment of its inputs x over all
            tokens, Σ x xᵀ / (P · seq_len), in place of a drawn Λ. Without ``init`` the initial weights are still
            drawn from ``cfg`` as for a run with the data's P and seq_len (with ``draws="reference"``, the
            authors' weights for that command; the sequences drawn alongside are discarded); with ``init`` nothing
            is drawn. The population engine takes no data; given ``init`` it needs only Λ, which with
            ``cov_matrix`` or ``white_cov`` is not drawn at all (so ``draws="reference"`` works there too).
        progress: a progress bar (None: only when attached to a terminal).
        snapshot_every: store a snapshot in ``history.snapshots`` every k steps and at the end (0: none).
        snapshot: what a snapshot is, ``snapshot(model)``; default: the weights, in the layout of ``init.npz``.
        start_step: continue a gradient-descent run whose weights at that step are ``init``: the ``cfg.epoch``
            steps are numbered from ``start_step`` on, so history and snapshots line up with the run continued.
        max_memory: the most memory the run may take, in bytes or as a size such as ``"8G"`` or ``"500M"``; None
            (default): the memory available now (``config.available_memory``). A run whose estimated peak
            (:func:`~linattn.config.memory_estimate`) exceeds it is refused before anything is drawn.
        threads: torch's intra-op threads while the run trains; None (default): the engine's choice
            (``objectives.threads_for``: one for the exact and population engines, the caller's setting for the
            autograd and softmax engines). The caller's setting is restored afterwards, also on an exception.

    Raises:
        ConfigError: an invalid setting (a ValueError naming it), options the reference's draws do not have
            where something is drawn with ``draws="reference"``, or a run too large for ``max_memory``; all
            before any work (:func:`plan`).
        ValueError: ``init`` or ``data`` of the wrong keys, shapes or values, before any training.
        TrainingDiverged: the loss became NaN or infinite. For gradient descent its message suggests a learning
            rate that trial runs from the same initial weights found stable (:func:`stable_lr`): 20 steps, or as
            many as the diverged run lasted up to 200 for the exact and population engines.
    """
    check_threads(threads)
    if isinstance(cfg, Plan):
        if init is not None or data is not None or start_step or max_memory is not None:
            raise TypeError("a Plan holds the run's init, data, start_step and memory check: give them to plan()")
        p = cfg
    else:
        p = plan(cfg, init=init, data=data, max_memory=max_memory, start_step=start_step,
                 snapshot_every=snapshot_every)
    with objectives.thread_count(objectives.threads_for(p.engine, p.device) if threads is None else threads):
        return _carry_out(p, progress=progress, snapshot_every=snapshot_every, snapshot=snapshot)


def _carry_out(p: Plan, *, progress, snapshot_every: int, snapshot) -> RunResult:
    """:func:`run` of a checked plan: draw or take data and weights, build the engine, train."""
    cfg, device = p.config, p.device
    start = time.perf_counter()
    datasets, init = p.data if p.data is not None else p.drawn, p.init
    if p.draws == COVARIANCE:
        datasets = _population_datasets(cfg)
    elif p.draws != NOTHING:
        drawn_data, drawn_init = _draw(cfg)
        datasets = drawn_data if datasets is None else datasets
        init = drawn_init if init is None else init
    import torch

    from .models import build_model

    model = build_model(cfg.model, init, softmax=cfg.softmax, dtype=getattr(torch, cfg.dtype), device=device)
    train, tests = objectives.build(cfg, model, datasets, device)
    setup = time.perf_counter() - start
    try:
        if cfg.dynamics == "flow":
            history = gradient_flow(model, train, lr=cfg.lr, epoch=cfg.epoch, tests=tests,
                                    track_value=cfg.track_value, snapshot_every=snapshot_every, snapshot=snapshot,
                                    record=cfg.recorded_steps(), jacobian=hasattr(train, "moments"))
        else:
            history = gradient_descent(model, train, lr=cfg.lr, epoch=cfg.epoch, tests=tests,
                                       track_value=cfg.track_value, snapshot_every=snapshot_every, snapshot=snapshot,
                                       progress=progress, start_step=p.start_step)
    except TrainingDiverged as e:
        if cfg.dynamics == "gd":
            steps = objectives.get(p.engine).trial_steps(e.step)
            lr, halvings = stable_lr(cfg, init, train, device, lr=cfg.lr, steps=steps)
            e.suggest(lr, halvings=halvings, steps=steps)
        raise
    return RunResult(config=cfg, history=history, init=init, weights=weights_of(model, like=init), engine=train.name,
                     device=device, setup_time=setup, wall_time=time.perf_counter() - start, datasets=datasets,
                     given=tuple(k for k, v in (("init", p.init), ("data", p.data)) if v is not None),
                     snapshot_every=snapshot_every, trained_steps=cfg.epoch, _model=model)


def write_outputs(result: RunResult, out_dir, *, save_data: bool = False, extra: dict | None = None) -> None:
    """Write ``result`` into the folder ``out_dir`` in the one format of a run, each file atomically:

    * ``loss.csv``: the history, one row per step (``step``, ``train_loss``, the test losses, ``value_h``), every
      number as the shortest text that reads back to the same float64;
    * ``run.json``: the provenance (versions, git commit, date), the settings, engine, device, timings, what was
      given in place of drawn, the task (Λ and the fixed task vector), the key and snapshot interval, and
      ``extra``;
    * ``init.npz`` and ``weights.npz``: the initial and the final weights (layout of ``init.npz``);
    * ``snapshots.npz`` when weight snapshots were recorded (``steps`` and each weight stacked over them);
    * with ``save_data``, ``data.npz``: the data sets and the task (``Datasets.arrays``).

    ``linattn train --out``, sweeps and the run store write through here; :func:`load_run` reads any of them.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "loss.csv", result.history.columns(), exact=True)
    for name, arrays in (("init.npz", result.init), ("weights.npz", result.weights)):
        if arrays is not None:
            atomic_write(out / name, lambda f, a=arrays: np.savez(f, **a), binary=True)
    snaps = result.history.snapshots
    if snaps and all(isinstance(w, dict) and w.keys() == snaps[0][1].keys() for _, w in snaps):
        stacked = {"steps": np.array([s for s, _ in snaps], dtype=np.int64)}
        stacked.update({n: np.stack([np.asarray(w[n]) for _, w in snaps]) for n in snaps[0][1]})
        atomic_write(out / "snapshots.npz", lambda f: np.savez(f, **stacked), binary=True)
    ds = result.datasets
    if save_data and ds is not None:
        arrays = ds.arrays()
        atomic_write(out / "data.npz", lambda f: np.savez_compressed(f, **arrays), binary=True)
    task = {} if ds is None else {k: v for k, v in (("cov", ds.cov), ("w_fix", ds.w_fix)) if v is not None}
    info = provenance()
    info.update(settings=result.config.to_dict(), engine=result.engine, device=result.device,
                dtype=result.config.dtype, seed=result.config.seed, setup_time_s=round(result.setup_time, 3),
                train_time_s=round(result.history.wall_time, 3), wall_time_s=round(result.wall_time, 3),
                final_train_loss=float(result.history.train_loss[-1]), given=list(result.given), key=result.key,
                snapshot_every=result.snapshot_every,
                task={k: {"dtype": np.asarray(v).dtype.str, "values": np.asarray(v)} for k, v in task.items()},
                **(extra or {}))
    write_json(out / "run.json", info)


def _read_history(path: Path, wall_time: float) -> History:
    with open(path, encoding="utf-8") as f:
        names = f.readline().strip().split(",")
    table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    cols = dict(zip(names, table.T))
    values = [cols[k] for k in names if k.startswith("value_")]
    return History(step=cols["step"].astype(np.int64), train_loss=cols["train_loss"], test_iwl=cols.get("test_iwl"),
                   test_icl=cols.get("test_icl"), values=np.column_stack(values) if values else None,
                   wall_time=wall_time)


def _read_snapshots(path: Path) -> list:
    """``[(step, {name: array})]`` from ``snapshots.npz``: each array read once, every snapshot a view of it (an
    npz reads a member on every access; a copy per snapshot would make memory grow with their square)."""
    with np.load(path) as f:
        arrays = {n: f[n] for n in f.files if n != "steps"}
        steps = f["steps"]
    return [(int(s), {n: a[i] for n, a in arrays.items()}) for i, s in enumerate(steps)]


def _arrays(path: Path) -> dict | None:
    if not path.is_file():
        return None
    with np.load(path) as f:
        return dict(f)


def load_run(out_dir) -> RunResult:
    """Read a run folder back into a :class:`RunResult`: what ``linattn train --out``, :func:`write_outputs`, a
    sweep's run or a run-store entry holds (:func:`write_outputs` says what each file is).

    ``loss.csv`` and ``run.json`` must be there (FileNotFoundError otherwise); the weights, snapshots and
    ``data.npz`` are read when present (``init``, ``weights`` None when not). ``datasets`` come from ``data.npz``,
    or are drawn again on first use where the run drew them; ``model`` is rebuilt from ``weights`` when asked for.
    """
    out = Path(out_dir)
    for name in ("loss.csv", "run.json"):
        if not (out / name).is_file():
            raise FileNotFoundError(f"{out} is not a linattn run folder: it has no {name}")
    info = json.loads((out / "run.json").read_text(encoding="utf-8"))
    cfg = RunConfig.from_dict(info["settings"])
    history = _read_history(out / "loss.csv", info.get("train_time_s", 0.0))
    if (out / "snapshots.npz").is_file():
        history.snapshots = _read_snapshots(out / "snapshots.npz")
    task = {k: np.asarray(v["values"], dtype=v["dtype"]) for k, v in info.get("task", {}).items()}
    given = tuple(info.get("given", ()))
    if (out / "data.npz").is_file():
        datasets = data_mod.Datasets.from_arrays(_arrays(out / "data.npz"))
    elif "data" in given:
        datasets = None  # given data that were not saved
    elif info.get("engine") == "population":  # no data sets: the task alone
        datasets = data_mod.Datasets(train=None, test_iwl=None, test_icl=None, cov=task.get("cov"),
                                     w_fix=task.get("w_fix"))
    else:
        datasets = _DrawnOnUse(cfg, task.get("cov"), task.get("w_fix"))
    return RunResult(config=cfg, history=history, init=_arrays(out / "init.npz"),
                     weights=_arrays(out / "weights.npz"), engine=info.get("engine"), device=info.get("device"),
                     setup_time=info.get("setup_time_s", 0.0), wall_time=info.get("wall_time_s", 0.0),
                     datasets=datasets, given=given, snapshot_every=info.get("snapshot_every", 0),
                     key=info.get("key"), path=out, info=info)


# ── the key of a run ─────────────────────────────────────────────────────────────────────────────────────────────

#: The code that computes a trajectory, relative to the package: whole modules, or (after a colon) the top-level
#: definitions of one that decide a run. Diagnostics, theory, events, validation and the companion are not in it.
TRAJECTORY_CODE = ("data.py", "reference_draws.py", "normalization.py", "weights.py", "models.py",
                   "objectives/__init__.py", "objectives/declarations.py", "objectives/base.py", "objectives/exact.py",
                   "objectives/population.py", "objectives/softmax.py", "objectives/softmax_kernel.c",
                   "objectives/native.py", "objectives/exact_kernel.c", "objectives/autograd.py", "train.py", "flow.py",
                   "config.py:RunConfig.__post_init__,RunConfig.to_dict",
                   "experiment.py:_draw,_population_datasets,_given_data,plan,Plan,run,_carry_out,run_key,EVERYTHING")
#: The libraries whose versions can change a trajectory's numbers.
NUMERICAL_LIBRARIES = ("torch", "numpy", "scipy")


def code_digest(source: str, names=None) -> str:
    """SHA-256 of Python ``source`` as the interpreter reads it: its syntax tree without docstrings (comments and
    layout never reach the tree), so only a change of code changes it. ``names``: only these top-level definitions
    (``"f"``, ``"Class"``, a method ``"Class.f"``, or an assignment's first target)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body and \
                isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) and \
                isinstance(node.body[0].value.value, str):
            node.body = node.body[1:] or [ast.Pass()]
    nodes = tree.body
    if names is not None:
        def named_nodes(body, prefix=""):
            for node in body:
                name = getattr(node, "name", None)
                if name is None and isinstance(node, ast.Assign):
                    target = node.targets[0]
                    name = (target.elts[0] if isinstance(target, ast.Tuple) else target).id
                if name is not None:
                    yield prefix + name, node
                if isinstance(node, ast.ClassDef):
                    yield from named_nodes(node.body, f"{node.name}.")
        found = dict(named_nodes(tree.body))
        missing = [n for n in names if n not in found]
        if missing:
            raise KeyError(f"no definition {', '.join(missing)} in the source")
        nodes = [found[n] for n in names]
    return hashlib.sha256("\n".join(ast.dump(n) for n in nodes).encode()).hexdigest()


@functools.cache
def trajectory_code_hash(package_root: Path | None = None) -> str:
    """One hash of :data:`TRAJECTORY_CODE` (each Python entry by :func:`code_digest`, the C kernel by its bytes) of the
    package at ``package_root`` (default: this one)."""
    root = Path(package_root) if package_root is not None else Path(__file__).resolve().parent
    h = hashlib.sha256()
    for entry in TRAJECTORY_CODE:
        path, _, names = entry.partition(":")
        source = (root / path).read_text(encoding="utf-8")
        digest = (code_digest(source, names.split(",") if names else None) if path.endswith(".py")
                  else hashlib.sha256(source.encode()).hexdigest())
        h.update(f"{entry}\0{digest}\0".encode())
    return h.hexdigest()


def _hash_arrays(h, arrays: dict) -> None:
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}\0".encode() + a.tobytes() + b"\0")


def run_key(cfg: RunConfig, *, length: bool = True, snapshot_every: int = 0, init: dict | None = None,
            data=None) -> str:
    """The address of the run of ``cfg`` (64 hex digits): a hash of what decides its numbers — the settings
    (``to_dict``), the snapshot interval, the arrays of initial weights or data given in place of drawn ones, the
    versions of ``NUMERICAL_LIBRARIES`` and the code that computes a trajectory (``trajectory_code_hash``).

    ``length=False`` leaves out what only says how much of a trajectory is recorded: ``track_value`` and, for
    gradient descent, ``epoch`` (a run of E steps is the first E steps of any longer one): the run store's key,
    one trajectory per key. A sweep's run folder and ``linattn train``'s default folder use the whole key."""
    settings = cfg.to_dict()
    if not length:
        settings.pop("track_value")
        if cfg.dynamics == "gd":
            settings.pop("epoch")
    h = hashlib.sha256(json.dumps({"settings": settings, "snapshot_every": snapshot_every,
                                   "code": trajectory_code_hash(),
                                   "libraries": library_versions(NUMERICAL_LIBRARIES)},
                                  sort_keys=True, default=str).encode())
    if init is not None:
        h.update(b"init\0")
        _hash_arrays(h, init)
    if data is not None:
        if isinstance(data, (tuple, list)) and len(data) == 2:
            data = data_mod.Sequences(*data)
        h.update(b"data\0")
        _hash_arrays(h, data.arrays() if isinstance(data, data_mod.Datasets) else {"X": data.X, "y": data.y})
    return h.hexdigest()
