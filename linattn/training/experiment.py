"""One experiment: a training run from a :class:`~linattn.config.RunConfig` — data, initial weights, objective,
gradient descent or flow — and its output folder.

    result = run(RunConfig(model="attnM", head_num=8, init=1e-6))
    result.history.train_loss      # one value per recorded step, recorded before the step
    result.weights                 # the final weights, in the layout of init.npz
    write_outputs(result, "runs/fig1")   # loss.csv, run.json, init.npz, weights.npz (data.npz if asked)
    load_run("runs/fig1")          # the same, read back (from whatever wrote it: train, a sweep, the run store)

This module trains (:func:`run`); the run is checked and its data drawn in :mod:`linattn.training.plan`, its record is
:mod:`linattn.training.result`, its key :mod:`linattn.training.keys`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .. import objectives
from ..config import RunConfig
from .flow import gradient_flow
from .plan import COVARIANCE, NOTHING, Plan, check_threads, draw_checked, plan, population_datasets
from .result import RunResult
from .train import History, TrainingDiverged, gradient_descent, weights_of

if TYPE_CHECKING:
    from ..data import Datasets, Sequences
    from ..objectives.base import Objective


def stable_lr(cfg: RunConfig, init: dict, objective: Objective, device: str, *, lr: float, steps: int,
              max_halvings: int = 20) -> tuple[float | None, int]:
    """The first of lr/2, lr/4, … (at most ``max_halvings`` halvings) for which ``steps`` steps of gradient descent
    from ``init`` on ``objective`` keep the loss finite and end below the initial loss; ``(lr, halvings)``, or
    ``(None, max_halvings)`` when none does."""
    import torch

    from ..models import build_model

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


def run(cfg: RunConfig | Plan, *, init: dict | None = None, data: Datasets | Sequences | tuple | None = None,
        progress: bool | None = None, snapshot_every: int = 0, snapshot: Callable | None = None, start_step: int = 0,
        max_memory: int | str | None = None, threads: int | None = None) -> RunResult:
    """Check ``cfg`` (:func:`~linattn.training.plan.plan`), draw or take data and weights, build the engine, train, and
    return a :class:`~linattn.training.result.RunResult`.

    Args:
        cfg: the settings (:class:`~linattn.config.RunConfig`), or a :class:`~linattn.training.plan.Plan` made of them
        by
            :func:`~linattn.training.plan.plan`, which holds ``init``, ``data``, ``start_step`` and the memory check
            (then not given here).
        init: initial weights replacing the drawn ones: a dict in the layout of ``init.npz``, for ``cfg``'s model,
            ``head_num`` H, ``in_dim`` D and ``rank`` R (E = D + 1): ATTN_M ``W_KQ`` (H, E, E), ``W_V`` (H, E, E);
            ATTN_S ``W_Q`` (H, R, E), ``W_K`` (H, R, E), ``W_V`` (H, E, E); MLP ``W1`` (H, D²), ``w2`` (H,).
            Only the last row of each ``W_V[h]`` enters the model.
        data: the data, replacing the drawn ones: a :class:`~linattn.data.Sequences` or a pair ``(X, y)`` (X of shape
            (P, seq_len, D+1) with the query's label zeroed, y (P,); validated as a Sequences), or a whole
            :class:`~linattn.data.Datasets` (training set, test sets and covariance, e.g. from
            :func:`~linattn.training.plan.draw`). The run's P, seq_len and test-set size are those of the data
            (``result.config`` records them; ``cfg``'s are not used). A training set alone comes with no test sets
            (``cfg.testset_size`` must be 0), no fixed task (``datasets.w_fix`` is None), and as ``datasets.cov`` the
            second moment of its inputs x over all tokens, Σ x xᵀ / (P · seq_len), in place of a drawn Λ. Without
            ``init`` the initial weights are still drawn from ``cfg`` as for a run with the data's P and seq_len (with
            ``draws="reference"``, the authors' weights for that command; the sequences drawn alongside are discarded);
            with ``init`` nothing is drawn. The population engine takes no data; given ``init`` it needs only Λ, which
            with ``cov_matrix`` or ``white_cov`` is not drawn at all (so ``draws="reference"`` works there too).
        progress: a progress bar on a terminal, plain lines every few seconds elsewhere (None: the bar on a
            terminal only; False: nothing; ``train.progress_bar``).
        snapshot_every: store a snapshot in ``history.snapshots`` every k steps and at the end (0: none).
        snapshot: what a snapshot is, ``snapshot(model)``; default: the weights, in the layout of ``init.npz``.
        start_step: continue a gradient-descent run whose weights at that step are ``init``: the ``cfg.epoch``
            steps are numbered from ``start_step`` on, so history and snapshots line up with the run continued.
        max_memory: the most memory the run may take, in bytes or as a size such as ``"8G"`` or ``"500M"``; None
            (default): the memory available now (``memory.available_memory``). A run whose estimated peak
            (:func:`~linattn.training.memory.memory_estimate`) exceeds it is refused before anything is drawn.
        threads: torch's intra-op threads while the run trains; None (default): the engine's choice
            (``objectives.threads_for``: one for the exact and population engines, the caller's setting for the
            autograd and softmax engines). The caller's setting is restored afterwards, also on an exception.

    Raises:
        ConfigError: an invalid setting (a ValueError naming it), options the reference's draws do not have
            where something is drawn with ``draws="reference"``, or a run too large for ``max_memory``; all
            before any work (:func:`~linattn.training.plan.plan`).
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
        return carry_out(p, progress=progress, snapshot_every=snapshot_every, snapshot=snapshot)


def carry_out(p: Plan, *, progress, snapshot_every: int, snapshot, shared: dict | None = None) -> RunResult:
    """:func:`run` of a checked plan: draw or take data and weights, build the engine, train. ``shared``: a dict
    that runs trained one after the other share, so that those drawing the same data draw it once and those training
    on the same data sets with the same features read their moments once (``run_many``)."""
    cfg, device = p.config, p.device
    start = time.perf_counter()
    datasets, init = p.data if p.data is not None else p.drawn, p.init
    if p.to_draw == COVARIANCE:
        datasets = population_datasets(cfg)
    elif p.to_draw != NOTHING:
        drawn_data, drawn_init = draw_checked(cfg, shared)
        datasets = drawn_data if datasets is None else datasets
        init = drawn_init if init is None else init
    init = cast(dict, init)  # the plan or the draw above holds the initial weights
    import torch

    from ..models import build_model

    model = build_model(cfg.model, init, softmax=cfg.softmax, dtype=getattr(torch, cfg.dtype), device=device)
    train, tests = objectives.build(cfg, model, cast("Datasets", datasets), device, shared=shared)
    setup = time.perf_counter() - start
    try:
        if cfg.dynamics == "flow":
            history = gradient_flow(model, train, lr=cfg.lr, epoch=cfg.epoch, tests=tests,
                                    track_value=cfg.track_value, snapshot_every=snapshot_every, snapshot=snapshot,
                                    record=cfg.recorded_steps(), jacobian=hasattr(train, "moments"),
                                    rtol=cfg.flow_rtol)
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
                     snapshot_every=snapshot_every, trained_steps=cfg.epoch, carry_on=continued, _model=model)


def continued(result: RunResult, epoch: int) -> RunResult:
    """``result``'s gradient-descent run carried on to ``epoch`` steps: the remaining ones trained from its final
    weights on its own data (``Plan.continued``; drawn again only where the result no longer holds
    them), its history and weight snapshots joined to the new ones (GD is a function of the weights alone, so this is
    the run of ``epoch`` steps). ValueError for a flow run or a run without final weights."""
    cfg = result.config
    if cfg.dynamics != "gd" or result.weights is None:
        raise ValueError("only a gradient-descent run with its final weights can be carried on (a flow run: train "
                         "it again with the longer epoch)")
    given = result.datasets if "data" in result.given else None
    if "data" in result.given and given is None:
        raise ValueError("this run was trained on given data that were not saved: it cannot be carried on")
    p = plan(cfg, data=given, snapshot_every=result.snapshot_every)
    drawn = None if given is not None else result.datasets  # read back: drawn again on first use
    more = run(p.continued(result.weights, cfg.epoch, epoch - cfg.epoch, drawn), snapshot_every=result.snapshot_every)
    h, k = result.history, more.history
    join: dict[str, Any] = {
        name: None if getattr(h, name) is None else np.concatenate([getattr(h, name), getattr(k, name)])
        for name in ("step", "train_loss", "test_iwl", "test_icl", "values")}
    snaps = dict(h.snapshots) | dict(k.snapshots)
    history = History(**join, snapshots=sorted(snaps.items(), key=lambda s: s[0]),
                      wall_time=h.wall_time + k.wall_time)
    return dataclasses.replace(result, config=dataclasses.replace(cfg, epoch=epoch), history=history,
                               weights=more.weights, wall_time=result.wall_time + more.wall_time, key=None,
                               trained_steps=epoch - cfg.epoch, path=None, info={}, carry_on=continued,
                               _model=more.model)
