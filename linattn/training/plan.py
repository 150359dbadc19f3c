"""A run checked once before any work (:func:`plan`, a :class:`Plan`), and the data and initial weights it draws
(:func:`draw`): linattn's streams or the reference's own random numbers, or what is given in their place.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from .. import data as data_mod
from .. import objectives
from ..config import ConfigError, RunConfig
from ..errors import named
from ..weights import check_weights, init_weights
from .memory import check_memory

if TYPE_CHECKING:
    from ..data import Datasets, Sequences


def draw(cfg: RunConfig) -> tuple[data_mod.Datasets, dict[str, np.ndarray]]:
    """The data sets and initial weights of ``cfg``, as :func:`~linattn.training.experiment.run` would train them: the
    reference's own random numbers (``draws="reference"``), or linattn's independent streams, one per purpose
    (``draws="streams"``).

    Returns ``(datasets, init)``: a :class:`~linattn.data.Datasets` and a dict in the layout of ``init.npz``.
    Both can be changed and handed back, ``run(cfg, init=init, data=datasets)``.

    Raises :class:`~linattn.errors.ConfigError` for invalid settings (:meth:`~linattn.config.RunConfig.validate`)
    and, with ``draws="reference"``, for options the authors' code never had
    (:meth:`~linattn.config.RunConfig.reference_draws_refusal`).
    """
    cfg.validate()
    if cfg.draws == "reference" and (reason := cfg.reference_draws_refusal()) is not None:
        raise ConfigError(reason, field="draws", value=cfg.draws)
    return draw_checked(cfg)


def draw_checked(cfg: RunConfig, shared: dict | None = None) -> tuple[data_mod.Datasets, dict[str, np.ndarray]]:
    """:func:`draw` for settings already checked. ``shared``: a dict that keeps each data draw by the arguments
    that decide it (:func:`_data_arguments`), so that runs drawing the same data (e.g. ranks or initial scales at one
    seed, in one ``run_many`` call) draw it once; their initial weights are then drawn as each would draw them
    alone (the runs then hold one and the same Datasets object)."""
    key = data_key(cfg)
    if shared is not None and key in shared:
        datasets, generators = shared[key]
    else:
        datasets, generators = _draw_data(cfg.draws, _data_arguments(cfg), shared)
        if shared is not None:
            shared[key] = datasets, generators
    if cfg.draws == "reference":
        from ..reference_draws import reference_init

        init = reference_init(generators, model=cfg.model, init_scheme=cfg.init_scheme, in_dim=cfg.in_dim,
                              head_num=cfg.head_num, rank=cfg.rank, init=cfg.init)
    else:
        init = init_weights(cfg.model, head_num=cfg.head_num, in_dim=cfg.in_dim, rank=cfg.rank, init=cfg.init,
                            init_scheme=cfg.init_scheme, rng=data_mod.streams(cfg.seed, data_mod.INIT))
    return datasets, init


def data_key(cfg: RunConfig) -> tuple:
    """What decides the data sets ``cfg`` draws, as a hashable value: runs with equal keys draw the same data."""
    args = sorted(_data_arguments(cfg).items())
    return cfg.draws, repr([(k, v.tolist() if isinstance(v, np.ndarray) else v) for k, v in args])


def _data_arguments(cfg: RunConfig) -> dict:
    """The arguments of ``cfg``'s data draw: all that decides its data sets (the same dict draws them)."""
    common = dict(in_dim=cfg.in_dim, seq_len=cfg.seq_len, trainset_size=cfg.trainset_size,
                  testset_size=cfg.testset_size, icl=cfg.icl, white_cov=cfg.white_cov, seed=cfg.seed)
    if cfg.draws == "reference":
        return dict(common, init_scheme=cfg.init_scheme)
    return dict(common, spectrum=cfg.spectrum, cov_matrix=cfg.cov_matrix)


def _draw_data(draws: str, args: dict, shared: dict | None = None):
    """(data sets, what the weights are drawn from next: the reference's generators, or None for the streams).
    ``shared``: what streams' test sets are kept in (``data.make_datasets``)."""
    if draws == "reference":
        from ..reference_draws import reference_data  # torch's generator

        return reference_data(**args)
    return data_mod.make_datasets(**args, shared=shared), None


def population_datasets(cfg: RunConfig) -> data_mod.Datasets:
    """What a population run with given initial weights needs of the data: Λ alone. With ``cov_matrix`` or
    ``white_cov`` nothing is drawn; otherwise Λ is drawn as :func:`draw` draws it (from linattn's streams; the
    reference has no population runs to draw it for, which :func:`plan` refuses)."""
    if cfg.draws == "streams":
        return draw_checked(cfg)[0]
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
    P, n, E = cast(data_mod.Sequences, datasets.train).X.shape  # both branches above hold a training set
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


#: What a run draws (:attr:`Plan.to_draw`): data and weights; the data (the weights are given); only Λ (a population
#: run from given weights); nothing (data and weights given).
EVERYTHING, DATA, COVARIANCE, NOTHING = "data and weights", "data", "covariance", "nothing"


@dataclass(frozen=True)
class Plan:
    """A run checked once, with everything decided before it starts; :func:`~linattn.training.experiment.run` carries it
    out without checking again. Made by :func:`plan`.

    Attributes:
        config: the settings (with given data, the data's P, seq_len and test-set size).
        engine, device: the engine that trains the run and the torch device it runs on.
        memory: the estimated peak memory in bytes (:func:`~linattn.training.memory.memory_estimate`), within the limit.
        to_draw: what is drawn: ``"data and weights"``, ``"data"`` (the weights are given), ``"covariance"`` (only
            Λ: a population run from given weights) or ``"nothing"``.
        init: the given initial weights (checked), or None; data: the given data as a Datasets, or None.
        start_step: the step the run continues from (0: a new run).
        drawn: the data sets a continued run drew before (``continued()``), or None: used as drawn, not given.
    """

    config: RunConfig
    engine: str
    device: str
    memory: int
    to_draw: str
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
        to_draw = NOTHING if self.data is not None or drawn is not None else \
            COVARIANCE if self.engine == "population" else DATA
        return dataclasses.replace(self, config=dataclasses.replace(self.config, epoch=epoch), init=weights,
                                   start_step=start_step, to_draw=to_draw, drawn=drawn)


def plan(cfg: RunConfig, *, init: dict | None = None, data: Datasets | Sequences | tuple | None = None,
         max_memory: int | str | None = None, start_step: int = 0, snapshot_every: int = 0) -> Plan:
    """Check a run of ``cfg`` (with the initial weights ``init`` and the data ``data`` given in place of drawn ones, as
    for :func:`~linattn.training.experiment.run`) once, before any work, and decide what follows from its settings: the
    engine, the device, the memory it needs and what is drawn. :func:`~linattn.training.experiment.run` calls it; call
    it yourself to check settings at a boundary (``linattn train`` does) and hand the :class:`Plan` to
    :func:`~linattn.training.experiment.run`. ``snapshot_every``: the snapshot interval the run will record, counted in
    its memory.

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
        to_draw = EVERYTHING  # with given data, the weights are drawn as for a run of the data's P and seq_len
    elif given is not None:
        to_draw = NOTHING
    else:
        to_draw = COVARIANCE if engine == "population" else DATA
    if cfg.draws == "reference" and to_draw != NOTHING:
        if (reason := cfg.reference_draws_refusal(covariance_only=to_draw == COVARIANCE)) is not None:
            raise ConfigError(reason, field="draws", value=cfg.draws)
    memory = check_memory(cfg, max_memory, draws_data=to_draw in (EVERYTHING, DATA), engine=engine,
                          snapshot_every=snapshot_every)
    return Plan(config=cfg, engine=engine, device=objectives.device_for(cfg.device, engine), memory=memory,
                to_draw=to_draw, init=init, data=given, start_step=start_step)


def check_threads(threads: int | None) -> None:
    """``threads`` (of :func:`~linattn.training.experiment.run`) is None or a positive integer, else a ConfigError
    naming it."""
    if threads is not None and not (isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1):
        raise ConfigError(f"{named('threads')} must be None (the engine's choice) or a positive integer, got "
                          f"{threads!r}", field="threads", value=threads)
