"""The run store: every training run of a build, content-addressed under ``_build/runs/`` and trained once.

A run's key is a hash of what decides its trajectory:

* its settings (``RunConfig.to_dict()``) except ``epoch`` and ``track_value``, and its snapshot interval;
* the identity of initial weights or data given in place of drawn ones (a hash of their arrays);
* the science core's source (every module ``linattn.experiment`` imports, :mod:`linattn.companion.sources`) and the
  versions of the libraries that compute (``records.LIBRARIES``).

The number of steps is not in it. Gradient descent is a function of the weights alone, so a run of E steps is the
first E steps of any longer run from the same start: the store keeps one trajectory per key, the weights at every
step count ever asked for (checkpoints), and serves a new count by continuing from the nearest earlier checkpoint
(:func:`linattn.run <linattn.experiment.run>` with ``init`` and ``start_step``). Value weights are always recorded (they cost a copy of H
numbers a step), so a run asked for with and without ``track_value`` is one run. Gradient-flow runs are kept whole
(their ``epoch`` is in the key: an adaptive integrator restarted does not give the same numbers).

Each entry is written into a temporary folder and renamed into place; a lock file per key makes notebooks that
execute at the same time wait for each other rather than train the same run twice. ``trainings.jsonl`` in the store
logs every request and whether it trained, so a build can say how many runs it trained.

    from linattn.companion.runstore import stored_run
    res = stored_run(RunConfig(...), snapshot_every=10)   # a RunResult-like view: history, weights, model, …
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .. import records
from ..config import RunConfig
from ..data import Datasets, Sequences
from ..experiment import draw, run
from ..models import build_model
from ..train import History
from .paths import ENV_FIGURE, ENV_RUNS_DIR, runs_dir
from .sources import source_hash

COLUMNS = ("train_loss", "test_iwl", "test_icl")


def default_root() -> Path:
    """``$LINATTN_RUNS_DIR``, else ``_build/runs`` of the checkout (of the working directory when linattn is an
    installed copy: never site-packages; see :mod:`linattn.companion.paths`)."""
    return Path(os.environ.get(ENV_RUNS_DIR) or runs_dir())


@functools.cache
def core_hash() -> str:
    """The hash of the science core's sources (what ``linattn.experiment`` imports, transitively)."""
    return source_hash(["import linattn.experiment"])


def _hash_arrays(h, arrays: dict) -> None:
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}\0".encode() + a.tobytes() + b"\0")


def _data_arrays(data) -> dict:
    if data is None:
        return {}
    if isinstance(data, Datasets):
        out = {"cov": data.cov} if data.w_fix is None else {"cov": data.cov, "w_fix": data.w_fix}
        for key in ("train", "test_iwl", "test_icl"):
            s = getattr(data, key)
            if s is not None:
                out.update({f"{key}_X": s.X, f"{key}_y": s.y})
        return out
    if isinstance(data, (tuple, list)) and len(data) == 2:
        data = Sequences(*data)
    return {"X": data.X, "y": data.y}


def run_key(cfg: RunConfig, *, snapshot_every: int = 0, init: dict | None = None, data=None) -> str:
    """The store's address of the run of ``cfg`` (see the module docstring for what it covers)."""
    settings = cfg.to_dict()
    settings.pop("track_value")
    if cfg.dynamics == "gd":
        settings.pop("epoch")
    h = hashlib.sha256(json.dumps({"settings": settings, "snapshot_every": snapshot_every, "core": core_hash(),
                                   "libraries": records.library_versions()}, sort_keys=True, default=str).encode())
    if init is not None:
        h.update(b"init\0")
        _hash_arrays(h, init)
    if data is not None:
        h.update(b"data\0")
        _hash_arrays(h, _data_arrays(data))
    return h.hexdigest()


class StoredDatasets(Datasets):
    """The data of a stored run: ``cov`` and ``w_fix`` at once, the sequences drawn again on first use."""

    def __init__(self, cov, w_fix, load):
        self.cov, self.w_fix, self._load = cov, w_fix, load

    def __getattr__(self, name):
        if name in ("train", "test_iwl", "test_icl"):
            drawn = self._load()
            for key in ("train", "test_iwl", "test_icl"):
                setattr(self, key, getattr(drawn, key))
            return getattr(drawn, name)
        raise AttributeError(name)


@dataclasses.dataclass
class StoredRun:
    """A run served by the store; its attributes mean what :class:`~linattn.experiment.RunResult`'s do.

    ``trained_steps``: how many steps this request trained (0: all served from the store); ``key``: its address.
    """

    config: RunConfig
    history: History
    init: dict
    weights: dict
    engine: str
    device: str
    setup_time: float
    wall_time: float
    datasets: Datasets
    key: str
    trained_steps: int
    snapshot_every: int = 0

    def extended(self, epoch: int) -> "StoredRun":
        """The same run carried on to ``epoch`` steps (never shorter than it is), from the store: gradient descent
        depends on the weights alone, so its first steps are this run's."""
        if epoch <= self.config.epoch:
            return self
        return stored_run(dataclasses.replace(self.config, epoch=epoch), snapshot_every=self.snapshot_every)

    @functools.cached_property
    def model(self):
        """The trained model, rebuilt from ``weights`` (float64, CPU)."""
        return build_model(self.config.model, self.weights, softmax=self.config.softmax)

    def snapshots_of(self, fn, **kwargs) -> list:
        """``[(step, fn(model, **kwargs))]`` for each weight snapshot, the model rebuilt from it: what
        ``linattn.run(..., snapshot=fn)`` would have recorded."""
        return [(s, fn(build_model(self.config.model, w, softmax=self.config.softmax), **kwargs))
                for s, w in self.history.snapshots]


def _columns(history: History) -> dict:
    """step, the losses and ``values`` (steps, H) of a history: what an entry keeps of every step."""
    cols = {k: v for k, v in history.columns().items() if not k.startswith("value_")}
    cols["values"] = history.values
    return cols


class _Entry:
    """One key's trajectory: the settings, losses and values of every step up to ``last``, the snapshots (at multiples
    of the interval, and at every checkpoint: a run's last snapshot), and the weights at every checkpoint."""

    def __init__(self, info: dict, columns: dict, snapshots: dict, checkpoints: dict, init: dict, task: dict):
        self.info, self.columns, self.snapshots = info, columns, snapshots
        self.checkpoints, self.init, self.task = checkpoints, init, task

    @property
    def last(self) -> int:
        return max(self.checkpoints)

    @classmethod
    def from_result(cls, res, snapshot_every: int) -> "_Entry":
        cfg = res.config
        info = {"settings": cfg.to_dict(), "snapshot_every": snapshot_every, "engine": res.engine,
                "device": res.device, "setup_time": res.setup_time, "train_time": res.history.wall_time}
        columns = _columns(res.history)
        snaps = dict(res.history.snapshots)
        ds = res.datasets
        task = {"cov": ds.cov} if ds.w_fix is None else {"cov": ds.cov, "w_fix": ds.w_fix}
        return cls(info, columns, snaps, {cfg.epoch: res.weights}, res.init, task)

    def extend(self, res, start: int) -> None:
        """Add the continuation ``res`` (steps ``start`` … ``start + epoch``): its rows past ``last``, its snapshots
        and its end weights as a checkpoint."""
        end = start + res.config.epoch
        if end > self.last:
            new = res.history.step >= self.last
            for k, v in _columns(res.history).items():
                if v is not None:
                    self.columns[k] = np.concatenate([self.columns[k], v[new]])
        self.snapshots.update(res.history.snapshots)
        self.checkpoints[end] = res.weights
        self.info["train_time"] += res.history.wall_time

    def view(self, cfg: RunConfig, key: str, trained: int, load_data) -> StoredRun:
        E, k = cfg.epoch, self.info["snapshot_every"]
        cols = {n: (None if v is None else np.asarray(v)[:E]) for n, v in self.columns.items()}
        snaps = [(s, self.snapshots[s]) for s in sorted(self.snapshots) if s < E and s % k == 0] + (
            [(E, self.snapshots[E])] if k else [])
        history = History(step=cols["step"].astype(np.int64), train_loss=cols["train_loss"],
                          test_iwl=cols.get("test_iwl"), test_icl=cols.get("test_icl"),
                          values=cols["values"] if cfg.track_value else None, snapshots=snaps,
                          wall_time=self.info["train_time"] * E / self.last)
        stored = RunConfig.from_dict(self.info["settings"])
        config = dataclasses.replace(stored, epoch=E, track_value=cfg.track_value)
        datasets = StoredDatasets(self.task["cov"], self.task.get("w_fix"), load_data)
        return StoredRun(config=config, history=history, init=self.init, weights=self.checkpoints[E],
                         engine=self.info["engine"], device=self.info["device"], setup_time=self.info["setup_time"],
                         wall_time=self.info["setup_time"] + history.wall_time, datasets=datasets, key=key,
                         trained_steps=trained, snapshot_every=k)

    # ------------------------------------------------------------------ files

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True)
        info = dict(self.info, checkpoints=sorted(self.checkpoints), provenance=records.provenance())
        records.write_json(folder / "entry.json", info)
        np.savez(folder / "history.npz", **{k: v for k, v in self.columns.items() if v is not None})
        steps = sorted(self.snapshots)
        snaps = {"steps": np.array(steps, dtype=np.int64)}
        if steps:
            snaps.update({n: np.stack([self.snapshots[s][n] for s in steps]) for n in self.snapshots[steps[0]]})
        np.savez(folder / "snapshots.npz", **snaps)
        weights = {f"init/{n}": a for n, a in self.init.items()}
        weights.update({f"{E}/{n}": a for E, w in self.checkpoints.items() for n, a in w.items()})
        np.savez(folder / "weights.npz", **weights)
        np.savez(folder / "task.npz", **self.task)

    @classmethod
    def load(cls, folder: Path) -> "_Entry | None":
        if not (folder / "entry.json").is_file():
            return None
        info = json.loads((folder / "entry.json").read_text())
        with np.load(folder / "history.npz") as f:
            columns = {k: f[k] for k in f.files}
        columns.setdefault("values", None)
        with np.load(folder / "snapshots.npz") as f:
            # each array read once (an npz reads a member on every access; a view per snapshot would keep every
            # read alive: memory quadratic in the number of snapshots)
            arrays = {n: f[n] for n in f.files if n != "steps"}
            snaps = {int(s): {n: a[i] for n, a in arrays.items()} for i, s in enumerate(f["steps"])}
        init, checkpoints = {}, {int(E): {} for E in info["checkpoints"]}
        with np.load(folder / "weights.npz") as f:
            for name in f.files:
                which, _, n = name.partition("/")
                (init if which == "init" else checkpoints[int(which)])[n] = f[name]
        with np.load(folder / "task.npz") as f:
            task = {k: f[k] for k in f.files}
        return cls(info, columns, snaps, checkpoints, init, task)


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
            progress: bool = False) -> StoredRun:
        """The run of ``cfg`` (with ``init``/``data`` given as for :func:`linattn.run <linattn.experiment.run>`, snapshots of the weights every
        ``snapshot_every`` steps), from the store, trained and stored first where needed."""
        cfg.validate()
        key = run_key(cfg, snapshot_every=snapshot_every, init=init, data=data)
        E, started = cfg.epoch, time.perf_counter()

        def load_data():
            if data is None:
                return draw(cfg)[0]
            return data if isinstance(data, Datasets) else Datasets(
                Sequences(*data) if isinstance(data, (tuple, list)) else data, None, None, entry.task["cov"], None)

        with self._locked(key):
            entry = _Entry.load(self.root / key)
            trained = 0
            if entry is None:
                res = run(dataclasses.replace(cfg, track_value=True), init=init, data=data, progress=progress,
                          snapshot_every=snapshot_every)
                entry, trained = _Entry.from_result(res, snapshot_every), E
            elif E not in entry.checkpoints:
                start = max((c for c in entry.checkpoints if c < E), default=0)
                begin = entry.init if start == 0 else entry.checkpoints[start]
                res = run(dataclasses.replace(cfg, epoch=E - start, track_value=True), init=begin, data=data,
                          progress=progress, snapshot_every=snapshot_every, start_step=start)
                entry.extend(res, start)
                trained = E - start
            if trained:
                self._write(key, entry)
            self._log(key=key, model=cfg.model, seed=cfg.seed, epoch=E, trained_steps=trained,
                      seconds=round(time.perf_counter() - started, 3))
            return entry.view(cfg, key, trained, load_data)


def stored_run(cfg: RunConfig, *, snapshot_every: int = 0, init: dict | None = None, data=None,
               root=None) -> StoredRun:
    """:meth:`RunStore.get` on the default store (or ``root``)."""
    return RunStore(root).get(cfg, snapshot_every=snapshot_every, init=init, data=data)


def figure_runs(s: dict, run: str | None = None) -> list[StoredRun]:
    """Every run a figure's settings ``s`` make (:func:`linattn.companion.presets.configs`, in its order; ``run``:
    only the nested run of that key, e.g. ``"attn_m"``), from the run store, recorded every ``s["snapshot_every"]``
    steps where ``s`` sets it: the one call with which a figure notebook trains."""
    from .presets import configs

    return [stored_run(cfg, snapshot_every=s.get("snapshot_every", 0)) for cfg in configs(s, run)]
