"""A figure's declared runs (:mod:`.runs`) trained through the run store, in declaration order."""

from __future__ import annotations

from .runs import FromRun


def _start(run: FromRun, source) -> dict | None:
    """The initial weights ``run`` starts from, given its source's result."""
    if run.start is None:
        return None
    weights = source.init if run.start == "initial" else source.weights
    return run.convert(weights) if run.convert is not None else weights


def train(runs: dict, S: dict | None = None, *, given: dict | None = None) -> dict:
    """``{label: RunResult}`` of the declared ``runs``, each from the run store (recorded every
    ``S["snapshot_every"]`` steps where the figure's settings ``S`` set it), in declaration order. ``given``: initial
    weights from outside for runs by label (a reader's own weights); a :class:`FromRun` starts from its source's
    result."""
    from ...runstore import stored_run

    every, given, out = (S or {}).get("snapshot_every", 0), given or {}, {}
    for label, run in runs.items():
        if isinstance(run, FromRun):
            if run.source not in out:
                raise ValueError(f"run {label!r} starts from {run.source!r}, which is not declared before it")
            source = out[run.source]
            out[label] = stored_run(run.config, snapshot_every=every, init=_start(run, source),
                                    data=source.datasets.train if run.same_data else None)
        else:
            out[label] = stored_run(run, snapshot_every=every, init=given.get(label))
    return out


def trained(runs: dict, S: dict | None = None, *, given: dict | None = None) -> list:
    """The results of :func:`train`, as a list in declaration order."""
    return list(train(runs, S, given=given).values())
