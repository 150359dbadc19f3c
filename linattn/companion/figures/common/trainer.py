"""A figure's declared runs (:mod:`.runs`) trained through the run store, in declaration order."""

from __future__ import annotations

from .runs import FromRun


def _start(run: FromRun, source) -> dict | None:
    """The initial weights ``run`` starts from, given its source's result."""
    if run.start is None:
        return None
    weights = source.init if run.start == "initial" else source.weights
    return run.convert(weights) if run.convert is not None else weights


def _store(cfgs: list, every: int, root: str) -> None:
    """Train ``cfgs`` into the run store at ``root`` (on a Dask worker: the store's per-key locks make it safe beside
    the others)."""
    from ...runstore import RunStore

    RunStore(root).get_many(cfgs, snapshot_every=every)


def on_cluster(runs: dict, S: dict | None, client) -> None:
    """Train the declared ``runs`` that start from nothing given (plain RunConfigs) into the run store on the Dask
    ``client``'s workers, one task for each group of runs that draw the same data (``linattn.training.batch.groups``);
    those already stored are only read there."""
    from ....training.batch import groups
    from ...runstore import default_root

    every, root = (S or {}).get("snapshot_every", 0), str(default_root())
    todo = [r for r in runs.values() if not isinstance(r, FromRun)]
    tasks = [[todo[i] for i in members] for members in groups(todo, by_data=True)]
    client.gather(client.map(_store, tasks, every=every, root=root, pure=False))


def train(runs: dict, S: dict | None = None, *, given: dict | None = None, client=None) -> dict:
    """``{label: RunResult}`` of the declared ``runs``, each from the run store (recorded every
    ``S["snapshot_every"]`` steps where the figure's settings ``S`` set it), in declaration order; the plain runs
    missing from the store are trained together first (``RunStore.get_many``: runs of one data draw share it).
    ``given``: initial weights from outside for runs by label (a reader's own weights); a :class:`FromRun` starts
    from its source's result. ``client``: a ``dask.distributed.Client`` whose workers train the plain runs first
    (:func:`on_cluster`); they are then read from the store here."""
    from ...runstore import RunStore, stored_run

    if client is not None:
        on_cluster({k: r for k, r in runs.items() if k not in (given or {})}, S, client)
    every, given = (S or {}).get("snapshot_every", 0), given or {}
    drawn = [label for label, run in runs.items() if not isinstance(run, FromRun) and label not in given]
    out = dict(zip(drawn, RunStore().get_many([runs[label] for label in drawn], snapshot_every=every)))
    for label, run in runs.items():
        if isinstance(run, FromRun):
            if run.source not in out:
                raise ValueError(f"run {label!r} starts from {run.source!r}, which is not declared before it")
            source = out[run.source]
            out[label] = stored_run(run.config, snapshot_every=every, init=_start(run, source),
                                    data=source.datasets.train if run.same_data else None)
        elif label in given:
            out[label] = stored_run(run, snapshot_every=every, init=given[label])
    return {label: out[label] for label in runs}


def trained(runs: dict, S: dict | None = None, *, given: dict | None = None) -> list:
    """The results of :func:`train`, as a list in declaration order."""
    return list(train(runs, S, given=given).values())
