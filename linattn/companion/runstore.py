"""The run store: every training run of a build, content-addressed under ``_build/runs/`` and trained once.

A run's key is :func:`linattn.experiment.run_key` without the run's length: a hash of what decides its trajectory —
its settings except ``epoch`` and ``track_value``, its snapshot interval, the identity of initial weights or data
given in place of drawn ones, the versions of torch, numpy and scipy, and the code that computes a trajectory
(data and draws, models, objectives, training and flow), without comments and docstrings. Diagnostics, theory,
events, plotting and the companion are not in it: editing them retrains no run.

The number of steps is not in it. Gradient descent is a function of the weights alone, so a run of E steps is the
first E steps of any longer run from the same start: the store keeps one trajectory per key, the weights at every
step count ever asked for (checkpoints), and serves a new count by continuing from the nearest earlier checkpoint
(:func:`linattn.run <linattn.experiment.run>` of the run's :class:`~linattn.experiment.Plan` continued). Value weights
are always recorded (they cost a copy of H numbers a step), so a run asked for with and without ``track_value`` is
one run. Gradient-flow runs are kept whole (their ``epoch`` is in the key: an adaptive integrator restarted does not
give the same numbers).

An entry is a run folder (:func:`linattn.experiment.write_outputs`: ``loss.csv``, ``run.json``, ``init.npz``,
``weights.npz``, ``snapshots.npz``) of the whole trajectory, which :func:`linattn.load_run` reads, plus
``checkpoints.npz``: the weights at every earlier checkpoint (``run.json`` lists them all). Each entry is written
into a temporary folder and renamed into place; a lock file per key makes notebooks that execute at the same time
wait for each other rather than train the same run twice. ``trainings.jsonl`` in the store logs every request and
whether it trained, so a build can say how many runs it trained.

    from linattn.companion.runstore import stored_run
    res = stored_run(RunConfig(...), snapshot_every=10)   # a linattn.RunResult: history, weights, model, …
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..config import RunConfig
from ..data import Datasets
from ..experiment import RunResult, load_run, plan, run, run_key, write_outputs
from ..train import History
from .paths import ENV_FIGURE, run_store_dir

CHECKPOINTS = "checkpoints.npz"


def default_root() -> Path:
    """``$LINATTN_RUNS_DIR``, else ``_build/runs`` of the checkout (of the working directory when linattn is an
    installed copy: never site-packages; see :mod:`linattn.companion.paths`), as an absolute path."""
    return run_store_dir()


class _Entry:
    """One key's trajectory: the run of every step up to ``last`` (its history, the snapshots at multiples of the
    interval and at every checkpoint, its initial and last weights) and the weights at every checkpoint."""

    def __init__(self, run: RunResult, checkpoints: dict[int, dict]):
        self.run, self.checkpoints = run, checkpoints

    @property
    def last(self) -> int:
        return max(self.checkpoints)

    @classmethod
    def from_result(cls, res: RunResult) -> "_Entry":
        return cls(res, {res.config.epoch: res.weights})

    def extend(self, res: RunResult, start: int) -> None:
        """Add the continuation ``res`` (steps ``start`` … ``start + epoch``): its rows past ``last``, its snapshots
        and its end weights as a checkpoint."""
        end, h = start + res.config.epoch, self.run.history
        if end > self.last:
            new = res.history.step >= self.last
            for name in ("step", "train_loss", "test_iwl", "test_icl", "values"):
                mine, more = getattr(h, name), getattr(res.history, name)
                if mine is not None and more is not None:
                    setattr(h, name, np.concatenate([mine, more[new]]))
            self.run.config = dataclasses.replace(self.run.config, epoch=end)
            self.run.weights = res.weights
        h.snapshots = sorted(dict(h.snapshots + res.history.snapshots).items())
        h.wall_time += res.history.wall_time
        self.run.wall_time += res.history.wall_time
        self.checkpoints[end] = res.weights

    def view(self, cfg: RunConfig, key: str, trained: int, given: Datasets | None, more) -> RunResult:
        """The run of ``cfg`` (its first ``cfg.epoch`` steps) as :func:`linattn.run` would have returned it
        (``given``: the data given in place of drawn ones, as the run's plan holds them)."""
        E, k, h = cfg.epoch, self.run.snapshot_every, self.run.history
        cut = {name: None if getattr(h, name) is None else getattr(h, name)[:E]
               for name in ("step", "train_loss", "test_iwl", "test_icl", "values")}
        snaps = dict(h.snapshots)
        history = History(**{**cut, "values": cut["values"] if cfg.track_value else None},
                          snapshots=[(s, snaps[s]) for s in sorted(snaps) if s < E and s % k == 0] + (
                              [(E, snaps[E])] if k else []),
                          wall_time=h.wall_time * E / self.last)
        config = dataclasses.replace(self.run.config, epoch=E, track_value=cfg.track_value)
        return dataclasses.replace(self.run, config=config, history=history, weights=self.checkpoints[E],
                                   wall_time=self.run.setup_time + history.wall_time,
                                   datasets=self.run.datasets if given is None else given, key=key,
                                   trained_steps=trained, _model=None, carry_on=lambda _run, epoch: more(epoch))

    def save(self, folder: Path) -> None:
        write_outputs(self.run, folder, extra={"checkpoints": sorted(self.checkpoints)})
        earlier = {f"{E}/{n}": a for E, w in self.checkpoints.items() if E != self.last for n, a in w.items()}
        np.savez(folder / CHECKPOINTS, **earlier)

    @classmethod
    def load(cls, folder: Path) -> "_Entry | None":
        if not (folder / "run.json").is_file():
            return None
        res = load_run(folder)
        checkpoints = {int(E): {} for E in res.info["checkpoints"]}
        with np.load(folder / CHECKPOINTS) as f:
            for name in f.files:
                step, _, n = name.partition("/")
                checkpoints[int(step)][n] = f[name]
        checkpoints[res.config.epoch] = res.weights
        return cls(res, checkpoints)


class RunStore:
    """Training runs by key under ``root`` (default ``default_root()``)."""

    def __init__(self, root=None):
        self.root = Path(root) if root is not None else default_root()

    @contextmanager
    def _locked(self, key: str):
        locks = self.root / ".locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / f"{key}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _write(self, key: str, entry: _Entry) -> None:
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}.", dir=self.root))
        try:
            entry.save(tmp / "entry")
            old = self.root / key
            if old.exists():
                old.rename(tmp / "old")
            (tmp / "entry").rename(old)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _log(self, **row) -> None:
        row.update(figure=os.environ.get(ENV_FIGURE), time=round(time.time(), 3))
        with open(self.root / "trainings.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    def get(self, cfg: RunConfig, *, snapshot_every: int = 0, init: dict | None = None, data=None,
            progress: bool = False) -> RunResult:
        """The run of ``cfg`` (with ``init``/``data`` given as for :func:`linattn.run <linattn.experiment.run>`,
        snapshots of the weights every ``snapshot_every`` steps), from the store, trained and stored first where
        needed; its ``trained_steps`` says how many steps this request trained, ``extended(epoch)`` carries it on."""
        return self._get(cfg, snapshot_every=snapshot_every, init=init, data=data, progress=progress)

    def _get(self, cfg: RunConfig, *, snapshot_every: int, init: dict | None, data, progress: bool,
             drawn=None) -> RunResult:
        """:meth:`get`; ``drawn``: the data sets this run drew when it was trained in this process (``extended``
        hands them on), so that carrying it on does not draw them again."""
        # the one check (of the run as stored: value weights recorded, its snapshots); every run below carries it out
        checked = plan(dataclasses.replace(cfg, track_value=True), init=init, data=data, snapshot_every=snapshot_every)
        key = run_key(cfg, length=False, snapshot_every=snapshot_every, init=init, data=data)
        E, started = cfg.epoch, time.perf_counter()

        with self._locked(key):
            entry = _Entry.load(self.root / key)
            trained = 0
            if entry is None:
                res = run(checked, progress=progress, snapshot_every=snapshot_every)
                res.key = key
                entry, trained = _Entry.from_result(res), E
            elif E not in entry.checkpoints:
                start = max((c for c in entry.checkpoints if c < E), default=0)
                begin = entry.run.init if start == 0 else entry.checkpoints[start]
                res = run(checked.continued(begin, start, E - start, datasets=drawn), progress=progress,
                          snapshot_every=snapshot_every)
                entry.extend(res, start)
                trained = E - start
            if trained:
                self._write(key, entry)
                drawn = res.datasets
            self._log(key=key, model=cfg.model, seed=cfg.seed, epoch=E, trained_steps=trained,
                      seconds=round(time.perf_counter() - started, 3))

        def more(epoch: int) -> RunResult:
            return self._get(dataclasses.replace(cfg, epoch=epoch), snapshot_every=snapshot_every, init=init,
                             data=data, progress=progress, drawn=drawn)

        return entry.view(cfg, key, trained, checked.data, more)


def stored_run(cfg: RunConfig, *, snapshot_every: int = 0, init: dict | None = None, data=None,
               root=None) -> RunResult:
    """:meth:`RunStore.get` on the default store (or ``root``)."""
    return RunStore(root).get(cfg, snapshot_every=snapshot_every, init=init, data=data)


def population_twin(result: RunResult, root=None) -> RunResult:
    """The run's model trained on the population loss (P → ∞, the ``population`` engine) from the run's own initial
    weights, on its covariance Λ, at its learning rate for its number of steps, from the store: the theory's loss
    curve from the same start, every head and every weight included, to set beside the run with the same rules
    (e.g. ``diagnostics.half_drop_step``). It costs about as much as the exact run of a small P (ATTN_M at D = 4,
    H = 8, 6001 steps: 2 s)."""
    return stored_run(result.config.on_population(result.datasets.cov), init=result.init, root=root)


def figure_runs(s: dict, run: str | None = None) -> list[RunResult]:
    """Every run a figure's settings ``s`` make (:func:`linattn.companion.presets.configs`, in its order; ``run``:
    only the nested run of that key, e.g. ``"attn_m"``), from the run store, recorded every ``s["snapshot_every"]``
    steps where ``s`` sets it: the one call with which a figure notebook trains."""
    from .presets import configs

    return [stored_run(cfg, snapshot_every=s.get("snapshot_every", 0)) for cfg in configs(s, run)]
