"""Many runs of one model and shape as one call: :func:`run_many`.

    results = run_many([RunConfig(model="attnS", head_num=5, seed=s) for s in range(16)])

The runs may differ in anything that leaves the model's shape alone — seed, initial weights, data, in-context
fraction, learning rate, length, rank (ATTN_S) — and each result is what ``linattn.run`` returns for that run alone
(the same draws; the same losses to rounding). Two ways to train them:

* **member by member** (the default on the CPU): each run's steps in the exact engine's compiled loop
  (``objectives/exact_kernel.c``), one run after the other. A member's step reads its own E[TTᵀ] (its own data), so
  members share no arithmetic to batch; one at a time keeps that matrix in cache for all of its steps (at F = 360 it
  is 1 MB: cycling through 16 members each step would stream 16 MB a step), and a member leaves by ending its loop.
  What the call shares is the checking of every member before any work, the thread setting, and the data: members
  whose settings draw the same data sets (say the ranks or initial scales of one seed) draw them once and hold the
  same :class:`~linattn.data.Datasets` object, and the exact engine reads the moments of a data set once for all
  members with the same features (``objectives.build``'s ``shared``). Each member's initial weights are drawn as
  its run alone draws them, so every result is still its run's.
* **batched** (the default on CUDA, ``batched=True`` anywhere): the weights of all members stacked along a first
  axis and one step of all of them as a few batched products (``bmm``/``einsum``), so a GPU trains thousands at once.
  Smaller ranks are padded with zero key and query rows: their gradients are products with those zero rows, so
  gradient descent keeps them at exactly zero and the padded member trains as its own rank. A member that reaches its
  length or diverges leaves the stack (its rows are dropped); the others go on.

A member whose loss becomes NaN or infinite does not stop the others: its place in the returned list holds the
:class:`~linattn.training.train.TrainingDiverged` exception (with the learning rate trial runs found stable, as ``run``
raises it), every other place a :class:`~linattn.training.result.RunResult`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, named

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..data import Datasets
    from .plan import Plan

# settings every member must share (the shape of the stacked weights and what trains them)
SHARED = ("model", "head_num", "in_dim", "seq_len", "dtype", "engine", "device", "dynamics", "softmax")


def run_many(configs: Sequence[RunConfig | Plan], *, inits: Sequence[dict | None] | None = None,
             datasets: Sequence[Datasets | None] | None = None, snapshot_every: int = 0,
             snapshot: Callable | None = None, threads: int | None = None, max_memory: int | str | None = None,
             batched: bool | None = None, on_result: Callable[[int, Any], object] | None = None,
             shared: dict | None = None) -> list:
    """Train the runs of ``configs`` (RunConfigs of one model and shape, or Plans made of them by
    :func:`~linattn.training.plan.plan`, which hold their own init and data) as one: a list with, for each member in
    order, its :class:`~linattn.training.result.RunResult` (what ``linattn.run(configs[i], init=inits[i],
    data=datasets[i])`` returns) or, for a member that diverged, its :class:`~linattn.training.train.TrainingDiverged`.

    ``inits``, ``datasets``: None or one entry (None: drawn) per member. ``snapshot_every``, ``snapshot``,
    ``threads``, ``max_memory``: as for ``linattn.run``, for every member. ``batched``: stack the members' weights
    and train them in one loop of batched products (None: on CUDA only; the module docstring says why), which needs
    the exact or population engine and gradient descent. ``on_result``: called as ``on_result(i, result)`` with each
    member's place and result as soon as that member is done (member by member: after each one; batched: once the
    loop ends), e.g. to store each run while the others train. ``shared``: the dict in which members' data draws and
    moments are kept (member by member), for calls after this one to share them too (the run store hands one dict to
    the calls of one request: e.g. the test sets of one seed, drawn once for runs of two engines); None: this
    call's own.

    Every member is checked before any work (``plan.plan``); a bad one raises ConfigError naming the setting
    and the member, ``configs[i]``. Members must agree on ``SHARED`` (the engine and device after "auto" resolved)
    and, when batched, on whether they have test sets.
    """
    from .. import objectives  # torch, only once runs are asked for
    from . import plan

    configs = list(configs)
    plan.check_threads(threads)
    plans = _plans(configs, inits, datasets, max_memory)
    batched = plans[0].device.startswith("cuda") if batched is None else batched
    if batched:
        _check_batchable(plans)
    engine_threads = objectives.threads_for(plans[0].engine, plans[0].device)
    with objectives.thread_count(engine_threads if threads is None else threads):
        if batched:
            from ._stacked import train_stacked  # torch's batched loop, only where it runs
            results = train_stacked(plans, snapshot_every=snapshot_every, snapshot=snapshot)
            for i, result in enumerate(results):
                _report(on_result, i, result)
            return results
        shared = {} if shared is None else shared  # draws and moments the members share
        return [_report(on_result, i, _alone(p, snapshot_every, snapshot, shared)) for i, p in enumerate(plans)]


def _report(on_result, i: int, result):
    if on_result is not None:
        on_result(i, result)
    return result


def _per_member(name: str, given, n: int) -> list:
    if given is None:
        return [None] * n
    given = list(given)
    if len(given) != n:
        raise ConfigError(f"run_many: {name} must have one entry per config ({n}), got {len(given)}", field=name)
    return given


def _plans(configs, inits, datasets, max_memory) -> list:
    """Each member's checked plan; a ConfigError names the member (``configs[i]``) and the setting."""
    from . import plan

    if not configs:
        raise ConfigError("run_many: configs is empty; give at least one RunConfig", field="configs")
    inits = _per_member("inits", inits, len(configs))
    datasets = _per_member("datasets", datasets, len(configs))
    plans = []
    for i, (cfg, init, data) in enumerate(zip(configs, inits, datasets)):
        if isinstance(cfg, plan.Plan):
            if init is not None or data is not None or max_memory is not None:
                raise TypeError(f"configs[{i}] is a Plan, which holds its run's init, data and memory check: give "
                                "them to plan()")
            plans.append(cfg)
            continue
        try:
            plans.append(plan.plan(cfg, init=init, data=data, max_memory=max_memory))
        except ConfigError as e:
            raise ConfigError(f"configs[{i}]: {e.template}", field=e.field, value=e.value) from None
        except (ValueError, TypeError, AttributeError) as e:
            raise ConfigError(f"configs[{i}]: {e}") from None
    first = _shared(plans[0])
    for i, p in enumerate(plans[1:], 1):
        for name, value in _shared(p).items():
            if value != first[name]:
                raise ConfigError(f"configs[{i}]: run_many trains runs of one model and shape, but its "
                                  f"{named(name, value)} differs from configs[0]'s {first[name]!r}",
                                  field=name, value=value)
    return plans


def groups(configs: Sequence[RunConfig], *, by_data: bool = False) -> list[list[int]]:
    """The positions of ``configs`` (RunConfigs or Plans) in groups that one :func:`run_many` call can train: equal
    ``SHARED`` settings (engine and device resolved) and test sets in all or none, in order of first appearance.
    ``by_data``: groups of runs that also draw the same data (``plan.data_key``), e.g. one task each on a cluster."""
    from .. import objectives
    from . import plan

    out: dict[tuple, list[int]] = {}
    for i, cfg in enumerate(configs):
        cfg = cfg.config if isinstance(cfg, plan.Plan) else cfg
        engine = objectives.resolve(cfg)
        shape = {name: getattr(cfg, name) for name in SHARED}
        shape.update(engine=engine, device=objectives.device_for(cfg.device, engine), tests=bool(cfg.testset_size))
        if by_data:
            shape.update(data=plan.data_key(cfg))
        out.setdefault(tuple(shape.items()), []).append(i)
    return list(out.values())


def _shared(p) -> dict:
    values = {name: getattr(p.config, name) for name in SHARED}
    values.update(engine=p.engine, device=p.device)
    return values


def _check_batchable(plans) -> None:
    from .. import objectives

    p = plans[0]
    if not objectives.get(p.engine).linear_only or p.config.dynamics != "gd":
        raise ConfigError(f"run_many: batched=True stacks gradient descent on the exact or population engine, not "
                          f"{named('engine', p.engine)} with {named('dynamics', p.config.dynamics)}", field="engine",
                          value=p.engine)
    has_tests = bool(p.config.testset_size)
    for i, q in enumerate(plans):
        if bool(q.config.testset_size) != has_tests:
            raise ConfigError(f"configs[{i}]: batched members must all have test sets or all have none; its "
                              f"{named('testset_size', q.config.testset_size)} differs", field="testset_size",
                              value=q.config.testset_size)


def _alone(p, snapshot_every: int, snapshot, shared: dict):
    """One member through ``run``'s own path (the compiled loop where it applies); its divergence as a value."""
    from . import experiment

    try:
        return experiment.carry_out(p, progress=False, snapshot_every=snapshot_every, snapshot=snapshot,
                                     shared=shared)
    except experiment.TrainingDiverged as e:
        return e


__all__ = ["run_many", "groups"]
