"""The run store: every training run of a build, content-addressed under ``_build/runs/`` and trained once.

A run's key is :func:`linattn.training.keys.run_key` without the run's length: a hash of what decides its trajectory —
its settings except ``epoch`` and ``track_value``, its snapshot interval, the identity of initial weights or data
given in place of drawn ones, the versions of torch, numpy and scipy, and the code that computes a trajectory
(data and draws, models, objectives, training and flow), without comments and docstrings. Diagnostics, theory,
events, plotting and the companion are not in it: editing them retrains no run.

The number of steps is not in it. Gradient descent is a function of the weights alone, so a run of E steps is the
first E steps of any longer run from the same start: the store keeps one trajectory per key, the weights at every
step count ever asked for (checkpoints), and serves a new count by continuing from the nearest earlier checkpoint
(:func:`linattn.run <linattn.training.experiment.run>` of the run's :class:`~linattn.training.plan.Plan` continued).
Value weights are always recorded (they cost a copy of H numbers a step), so a run asked for with and without
``track_value`` is one run. Gradient-flow runs are kept whole (their ``epoch`` is in the key: an adaptive integrator
restarted does not give the same numbers).

An entry is a run folder (:func:`linattn.training.result.write_outputs`: ``loss.csv``, ``run.json``, ``init.npz``,
``weights.npz``, ``snapshots.npz``) of the whole trajectory, which :func:`linattn.load_run` reads, plus
``checkpoints.npz``: the weights at every earlier checkpoint (``run.json`` lists them all), and ``values.npy``: the
value weights v_h[D], one float64 row per step (H columns), which a run folder otherwise holds as ``loss.csv``'s
``value_h`` columns. ``loss.csv`` keeps the step and the losses, the numbers a reader looks at, as the shortest text
of each float64; the value weights (H of a row's 2 + H numbers, which the store records for every run and few
figures read) go binary, exactly, because writing a float as its shortest text costs about 0.5 µs (an entry of
150 001 steps of 9 heads: its ``loss.csv`` takes 0.69 s to write with them, 0.09 s without; ``values.npy`` 2 ms).
Each entry is written
into a temporary folder and renamed into place; a lock file per key makes notebooks that execute at the same time
wait for each other rather than train the same run twice. ``trainings.jsonl`` in the store logs every request and
whether it trained, so a build can say how many runs it trained.

An entry is checked before it is served. ``run.json`` lists the SHA-256 digest of every other file of the entry and
of its own content (``"digests"``, added under the key's lock before the entry is renamed into place); it must parse
and hold the fields the store reads (:func:`read_info`). An entry that is incomplete, unreadable, inconsistent
(its history shorter than its steps, a checkpoint missing) or whose digests do not match is set aside, moved to
``<store>/quarantine/<key>-<time>`` (never deleted), and its run is trained again; a
:class:`~linattn.objectives.native.KnownFallback` warning names the entry, which the figure runner says on the
figure's line rather than on the page. Every entry's ``run.json`` must also agree with its own ``loss.csv`` (its
``final_train_loss`` is the last row's train loss, exactly: both are written as the shortest text of the float).
An entry without digests is set aside too, whatever its files say: removing the field would otherwise make an
edited ``loss.csv`` pass for an entry written before digests existed, and one recorded loss cannot vouch for the
other rows. An entry that is a symbolic link (dangling, or to a folder the store did not write) is set aside whole,
as a link whose target is made absolute (it names the same place from the quarantine). A failure that remains
(an entry that cannot be set aside or written) raises :class:`StoreError`, which names the entry's folder or file.

A store that cannot be written to (a read-only shared store) is served read-only: its entries are read without a
lock and checked as ever, and only a run that must be trained or an entry that must be set aside fails, before any
training, with a :class:`StoreError` naming the store. A line that cannot be added to ``trainings.jsonl`` (a full
or read-only disk) does not fail the request: it is said once per store and process as a :class:`KnownFallback`,
which the figure runner puts on the figure's line and in its provenance, never on the page.

Retraining on request: where ``$LINATTN_RETRAIN`` is set (``linattn figures --retrain`` sets it to a token of its
own for the command's kernels), an entry not yet retrained under that token is trained again from its first step
and replaces the stored one, once per token: a run two figures share is retrained once.

    from linattn.companion.runstore import stored_run
    res = stored_run(RunConfig(...), snapshot_every=10)   # a linattn.RunResult: history, weights, model, …
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import time
import warnings
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .. import theory
from ..analysis.loss_curves import drop_steps
from ..config import RunConfig
from ..data import Datasets
from ..objectives.native import KnownFallback, fallback_reason
from ..records import jsonable, remove_stale_temps, temp_dir, write_json
from ..training.experiment import run
from ..training.keys import run_key
from ..training.plan import Plan, plan
from ..training.result import RunResult, load_run, run_info, write_run_files
from ..training.train import History
from .runner.paths import ENV_FIGURE, ENV_RETRAIN, run_store_dir

CHECKPOINTS = "checkpoints.npz"
#: The value weights of an entry's run (kept out of its ``loss.csv``, see the module's docstring).
VALUES = "values.npy"
INFO = "run.json"
#: The files every entry has besides ``run.json`` (``snapshots.npz`` too where the run records snapshots).
REQUIRED = ("loss.csv", "init.npz", "weights.npz", CHECKPOINTS)
#: The fields of an entry's ``run.json`` that the store reads, and their JSON types.
SCHEMA = {"settings": dict, "key": str, "snapshot_every": int, "checkpoints": list, "given": list, "task": dict}
QUARANTINE = "quarantine"


#: The logs (``trainings.jsonl``) of this process that could not be written, each said once.
_UNLOGGED: set[str] = set()


class StoreError(RuntimeError):
    """A run-store entry that can be neither served nor set aside and trained again; the message names its folder."""


class DamagedEntry(ValueError):
    """Why an entry cannot be served (raised while it is checked; the store then sets it aside)."""


def file_digest(path: Path) -> str:
    """The SHA-256 of the file at ``path``, in hexadecimal."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def info_digest(info: dict) -> str:
    """The SHA-256 of the content of ``run.json`` without its ``"digests"`` (as sorted, compact JSON): what stands
    for ``run.json`` itself in its digests."""
    rest = {k: v for k, v in info.items() if k != "digests"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()


def add_digests(folder: Path) -> dict:
    """Record in ``folder/run.json`` the digest of every other file of the entry and of its own content
    (:func:`with_digests`); return the updated content."""
    info = with_digests(folder, json.loads((folder / INFO).read_text(encoding="utf-8")))
    write_json(folder / INFO, info)
    return info


def with_digests(folder: Path, info: dict) -> dict:
    """``info``, the content of ``folder/run.json`` to be written (as JSON reads it back), with the digest of every
    other file of the entry and of its own content."""
    info = {k: v for k, v in info.items() if k != "digests"}
    digests = {p.name: file_digest(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != INFO}
    info["digests"] = {**digests, INFO: info_digest(info)}
    return info


def read_info(folder: Path, key: str) -> dict:
    """The entry's ``run.json``, parsed and checked against :data:`SCHEMA` (and its key against the folder's);
    :class:`DamagedEntry` says what is wrong."""
    try:
        info = json.loads((folder / INFO).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DamagedEntry(f"it has no {INFO}") from None
    except (OSError, ValueError) as err:
        raise DamagedEntry(f"{INFO} does not parse ({fallback_reason(err)})") from None
    if not isinstance(info, dict):
        raise DamagedEntry(f"{INFO} is not an object")
    for field, kind in SCHEMA.items():
        if not isinstance(info.get(field), kind):
            raise DamagedEntry(f"{INFO} has no {field} of type {kind.__name__}")
    if info["key"] != key:
        raise DamagedEntry(f"{INFO} names the key {info['key']!r}")
    if not info["checkpoints"] or not all(isinstance(c, int) and c > 0 for c in info["checkpoints"]):
        raise DamagedEntry(f"{INFO} lists no valid checkpoints")
    digests = info.get("digests")
    if digests is not None and not (isinstance(digests, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in digests.items())):
        raise DamagedEntry(f"{INFO} has malformed digests")
    return info


def check_digests(folder: Path, info: dict) -> None:
    """Every file of the entry is there, none is added, and each matches its recorded digest
    (:class:`DamagedEntry` otherwise)."""
    digests = info["digests"]
    needed = set(REQUIRED) | ({"snapshots.npz"} if info["snapshot_every"] else set())
    if missing := sorted(needed - digests.keys()):
        raise DamagedEntry(f"its digests leave out {', '.join(missing)}")
    present = {p.name for p in folder.iterdir() if p.is_file()}
    if extra := sorted(present - digests.keys()):
        raise DamagedEntry(f"it holds files its digests do not list: {', '.join(extra)}")
    for name, digest in digests.items():
        if name == INFO:
            ok = info_digest(info) == digest
        elif name not in present:
            raise DamagedEntry(f"{name} is missing")
        else:
            ok = file_digest(folder / name) == digest
        if not ok:
            raise DamagedEntry(f"{name} does not match its digest")


def check_summary(info: dict, res: RunResult) -> None:
    """The entry's ``run.json`` agrees with its ``loss.csv``: its ``final_train_loss`` is the history's last train
    loss, bit for bit (:class:`DamagedEntry` otherwise)."""
    recorded, last = info.get("final_train_loss"), float(res.history.train_loss[-1])
    if not isinstance(recorded, (int, float)) or not (recorded == last or (np.isnan(recorded) and np.isnan(last))):
        raise DamagedEntry(f"loss.csv's last train loss {last!r} is not {INFO}'s final_train_loss {recorded!r}")


def _link_words(link: Path) -> str:
    """Why a symbolic link is no entry, in words (its target, and whether it leads anywhere)."""
    target = os.readlink(link)
    return f"it is a symbolic link to {target}" + ("" if link.exists() else ", which does not exist")


def _named(err: OSError, tmp: Path | None, final: Path) -> Path:
    """The file ``err`` is about, as the entry ``final`` would hold it (not in its temporary folder ``tmp``)."""
    if tmp is None or not err.filename:
        return final
    try:
        return final / Path(err.filename).relative_to(tmp / "entry")
    except ValueError:
        return Path(err.filename)


def default_root() -> Path:
    """``$LINATTN_RUNS_DIR``, else ``_build/runs`` of the checkout (of the working directory when linattn is an
    installed copy: never site-packages; see :mod:`linattn.companion.runner.paths`), as an absolute path."""
    return run_store_dir()


def _final_weights(res: RunResult) -> dict[str, np.ndarray]:
    """The run's final weights, which every run the store trains or reads holds (a checkpoint's)."""
    if res.weights is None:
        raise DamagedEntry("the run's final weights are missing")
    return res.weights


def _check_values(folder: Path, history: History) -> None:
    """The entry's value weights, where they are in ``values.npy`` (:func:`linattn.load_run` reads them from there),
    are a float64 row of v_h[D] per head for each row of ``loss.csv`` (:class:`DamagedEntry` otherwise). An entry
    written before they moved there holds them in ``loss.csv``."""
    values = history.values
    if (folder / VALUES).is_file() and (values is None or values.dtype != np.float64 or values.ndim != 2
                                        or len(values) != len(history.step)):
        held = "nothing" if values is None else f"{values.dtype} of shape {values.shape}"
        raise DamagedEntry(f"{VALUES} holds {held}, not a float64 row for each of loss.csv's {len(history.step)} "
                           "rows")


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
        return cls(res, {res.config.epoch: _final_weights(res)})

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
        self.checkpoints[end] = _final_weights(res)

    def view(self, cfg: RunConfig, key: str, trained: int, given: Datasets | None, more) -> RunResult:
        """The run of ``cfg`` (its first ``cfg.epoch`` steps) as :func:`linattn.run` would have returned it
        (``given``: the data given in place of drawn ones, as the run's plan holds them)."""
        E, k, h = cfg.epoch, self.run.snapshot_every, self.run.history
        rows = h.step < E if cfg.dynamics == "gd" else h.step <= E  # a flow run may record its end, sparsely
        cut: dict[str, Any] = {name: None if getattr(h, name) is None else getattr(h, name)[rows]
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

    def save(self, folder: Path, retrained: str | None = None) -> None:
        """Write the entry into the new ``folder`` (renamed into place whole by the store: no file of it needs a
        temporary name of its own), ``run.json`` last, once, with the digests of the others and of itself
        (``retrained``: the retraining token it was trained under, see
        :data:`~linattn.companion.runner.paths.ENV_RETRAIN`)."""
        extra = {"checkpoints": sorted(self.checkpoints), **({"retrained": retrained} if retrained else {})}
        values = self.run.history.values
        run = dataclasses.replace(self.run, history=dataclasses.replace(self.run.history, values=None))
        folder.mkdir(parents=True, exist_ok=True)
        write_run_files(run, folder, atomic=False)
        if values is not None:
            np.save(folder / VALUES, np.asarray(values, dtype=np.float64))
        earlier = {f"{E}/{n}": a for E, w in self.checkpoints.items() if E != self.last for n, a in w.items()}
        np.savez(folder / CHECKPOINTS, **earlier)
        info = json.loads(json.dumps(run_info(run, extra), default=jsonable))  # as run.json reads back
        write_json(folder / INFO, with_digests(folder, info), atomic=False)

    @classmethod
    def load(cls, folder: Path) -> "_Entry":
        """Read the entry in ``folder`` whole (every row and array) and check that its parts agree: its history has
        one row per step (a flow run: increasing steps from 0 up to its end), its last checkpoint is its length, every
        checkpoint's weights (and, where it records snapshots, its snapshot) are there. Anything else raises
        (:class:`DamagedEntry`, or the reader's error)."""
        res = load_run(folder)
        check_summary(res.info, res)
        E, steps = res.config.epoch, res.history.step
        _check_values(folder, res.history)
        every_step = res.config.dynamics == "gd"  # a flow run may record fewer steps, in increasing order
        if not (np.array_equal(steps, np.arange(E)) if every_step else
                steps.size and steps[0] == 0 and np.all(np.diff(steps) > 0) and steps[-1] <= E):
            raise DamagedEntry(f"loss.csv has {len(steps)} rows of steps for a run of {E} steps")
        if max(res.info["checkpoints"]) != E:
            raise DamagedEntry(f"its last checkpoint is not its length {E}")
        if res.init is None or res.weights is None:
            raise DamagedEntry("its initial or final weights are missing")
        checkpoints: dict[int, dict[str, np.ndarray]] = {int(c): {} for c in res.info["checkpoints"]}
        with np.load(folder / CHECKPOINTS) as f:
            for name in f.files:
                step, _, n = name.partition("/")
                if int(step) not in checkpoints:
                    raise DamagedEntry(f"{CHECKPOINTS} holds step {step}, which run.json does not list")
                checkpoints[int(step)][n] = f[name]
        checkpoints[E] = res.weights
        if any(w.keys() != res.weights.keys() for w in checkpoints.values()):
            raise DamagedEntry(f"{CHECKPOINTS} lacks weights of a checkpoint")
        if res.snapshot_every and not set(checkpoints) <= {s for s, _ in res.history.snapshots}:
            raise DamagedEntry("snapshots.npz lacks a checkpoint's snapshot")
        return cls(res, checkpoints)


class RunStore:
    """Training runs by key under ``root`` (default ``default_root()``). ``retrain``: a token under which every
    entry asked for is trained again once (default ``$LINATTN_RETRAIN``; None: serve what is stored)."""

    def __init__(self, root=None, *, retrain: str | None = None):
        self.root = Path(root) if root is not None else default_root()
        self.retrain = retrain if retrain is not None else os.environ.get(ENV_RETRAIN) or None
        self.read_only: str | None = None  # why the store cannot be written, once a lock could not be made

    @contextmanager
    def _locked(self, key: str):
        """Hold ``key``'s lock (``<root>/.locks/<key>.lock``) for the block. Where the lock cannot be made (a
        read-only store) the block runs without it, reading only: :attr:`read_only` says why."""
        try:
            (self.root / ".locks").mkdir(parents=True, exist_ok=True)
            handle = open(self.root / ".locks" / f"{key}.lock", "w")
        except OSError as err:
            self.read_only, handle = err.strerror or fallback_reason(err), None
        if handle is None:
            yield
            return
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _writable(self, key: str) -> None:
        """Raise :class:`StoreError` before ``key``'s run is trained where the store cannot take it."""
        if self.read_only is not None:
            raise StoreError(f"run store {self.root} is read-only ({self.read_only}): run {key} is not stored "
                             "there, and cannot be trained into it; use a store you can write to "
                             "($LINATTN_RUNS_DIR)")

    def _write(self, key: str, entry: _Entry, retrained: str | None = None) -> None:
        """Write ``entry`` (digests included) into a temporary folder and rename it into place; a failure names the
        file that could not be written, as the entry would hold it."""
        tmp, final = None, self.root / key
        remove_stale_temps(self.root, key)  # what writers of this key killed meanwhile left (their process is gone)
        try:
            tmp = temp_dir(self.root, key)
            entry.save(tmp / "entry", retrained)
            if final.exists() or final.is_symlink():
                final.rename(tmp / "old")
            (tmp / "entry").rename(final)
        except OSError as err:
            raise StoreError(f"run store entry {final}: could not write {_named(err, tmp, final)} "
                             f"({err.strerror or fallback_reason(err)})") from err
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def _stored(self, key: str) -> tuple[_Entry | None, str | None]:
        """The checked entry of ``key`` (None where there is none or it was set aside) and the retraining token it
        was last trained under. An entry from before digests is given them once it has been read whole."""
        folder = self.root / key
        if folder.is_symlink():
            self._quarantine(folder, _link_words(folder))
            return None, None
        if not folder.exists():
            return None, None
        try:
            info = read_info(folder, key)
            if "digests" not in info:
                raise DamagedEntry(f"{INFO} has no digests (none of its files can be checked)")
            check_digests(folder, info)
            entry = _Entry.load(folder)
        except Exception as err:  # noqa: BLE001 — whatever makes an entry unreadable, it is set aside, not served
            reason = str(err) if isinstance(err, DamagedEntry) else fallback_reason(err)
            self._quarantine(folder, reason)
            return None, None
        return entry, info.get("retrained")

    def _quarantine(self, folder: Path, reason: str) -> Path:
        """Move the damaged entry ``folder`` to ``<root>/quarantine/<key>-<time>`` and warn, naming both. A symbolic
        link is moved as a link to the same place (its target made absolute)."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        dest = self.root / QUARANTINE / f"{folder.name}-{stamp}"
        n = 1
        while dest.exists() or dest.is_symlink():
            n += 1
            dest = self.root / QUARANTINE / f"{folder.name}-{stamp}-{n}"
        try:
            if self.read_only is not None:
                raise OSError(f"the store is read-only ({self.read_only})")
            dest.parent.mkdir(parents=True, exist_ok=True)
            if folder.is_symlink():
                dest.symlink_to(os.path.join(folder.parent.absolute(), os.readlink(folder)))
                folder.unlink()
            else:
                os.replace(folder, dest)
        except OSError as err:
            raise StoreError(f"run store entry {folder} is damaged ({reason}) and could not be set aside: "
                             f"{fallback_reason(err)}") from err
        self._log(key=folder.name, quarantined=str(dest), reason=reason)
        warnings.warn(f"run store: entry {folder} was damaged ({reason}); set aside in {dest}, its run trained "
                      "again", KnownFallback, stacklevel=5)
        return dest

    def _log(self, **row) -> None:
        """Add ``row`` to ``trainings.jsonl``. Where it cannot be added (a full or read-only disk), the request
        still succeeds: a :class:`KnownFallback` says so once per store and process (off the page, on the figure's
        line and in its provenance)."""
        row.update(figure=os.environ.get(ENV_FIGURE), time=round(time.time(), 3))
        path = self.root / "trainings.jsonl"
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
        except OSError as err:
            if str(path) not in _UNLOGGED:
                _UNLOGGED.add(str(path))
                warnings.warn(f"run store: requests are not logged in {path} ({err.strerror or fallback_reason(err)});"
                              " the runs served are as stored", KnownFallback, stacklevel=4)

    def get(self, cfg: RunConfig, *, snapshot_every: int = 0, init: dict | None = None, data=None,
            progress: bool = False) -> RunResult:
        """The run of ``cfg`` (with ``init``/``data`` given as for :func:`linattn.run
        <linattn.training.experiment.run>`, snapshots of the weights every ``snapshot_every`` steps), from the store,
        trained and stored first where needed; its ``trained_steps`` says how many steps this request trained,
        ``extended(epoch)`` carries it on."""
        return self._get(cfg, snapshot_every=snapshot_every, init=init, data=data, progress=progress)

    def _get(self, cfg: RunConfig, *, snapshot_every: int, init: dict | None, data, progress: bool,
             drawn=None) -> RunResult:
        """:meth:`get`; ``drawn``: the data sets this run drew when it was trained in this process (``extended``
        hands them on), so that carrying it on does not draw them again."""
        checked, key = self._checked(cfg, snapshot_every, init, data)
        with self._locked(key):
            started = time.perf_counter()  # the request's own time, not the wait for another's lock
            entry, trained, drawn, retrained = self._serve(key, checked, snapshot_every, progress, drawn)
            self._served(key, cfg, trained, retrained, started)
        return self._view(cfg, key, entry, trained, checked, snapshot_every, init, data, progress, drawn)

    def get_many(self, cfgs, *, snapshot_every: int = 0, progress: bool = False) -> list[RunResult]:
        """The runs of ``cfgs`` (drawn data and weights), each as :meth:`get` serves it; the runs missing from the store
        are trained first through :func:`linattn.run_many <linattn.training.batch.run_many>`, those of one model and
        shape in one call (so that runs drawing the same data draw it and read its moments once), and each is then
        stored under its own key. The keys are locked together (in sorted order, so that two such calls never wait on
        each other) while they are trained. A run that diverges raises its
        :class:`~linattn.training.train.TrainingDiverged` once the others are stored."""
        from ..training.batch import groups, run_many

        cfgs = list(cfgs)
        asked = [self._checked(cfg, snapshot_every, None, None) for cfg in cfgs]
        out, failed = {}, None
        with ExitStack() as held:
            for key in sorted({key for _, key in asked}):
                held.enter_context(self._locked(key))
            started = time.perf_counter()
            first: dict[str, Plan] = {}  # one training per key
            for checked, key in asked:
                first.setdefault(key, checked)
            entries = {key: self._stored(key) for key in first}
            new = [key for key, (entry, token) in entries.items() if entry is None or self._retrains(token)]
            for key in new:
                self._writable(key)
            plans = [first[key] for key in new]
            shared: dict = {}  # the draws and moments of the groups' members, across the groups
            for members in groups([p.config for p in plans]):
                results = run_many([plans[i] for i in members], snapshot_every=snapshot_every, shared=shared)
                for i, res in zip(members, results):
                    if isinstance(res, Exception):
                        failed = failed or res
                        continue
                    res.key, token = new[i], entries[new[i]][1]
                    out[new[i]] = _Entry.from_result(res), res.config.epoch, res.datasets, self._retrains(token)
                    self._write(new[i], out[new[i]][0], self._token(token))
            for key, checked in first.items():
                if key not in new:  # served from the entry just read (not read again)
                    out[key] = self._serve(key, checked, snapshot_every, progress, None, entries[key])
                if key in out:
                    self._served(key, checked.config, out[key][1], out[key][3], started)
        if failed is not None:
            raise failed
        return [self._view(cfg, key, out[key][0], out[key][1], checked, snapshot_every, None, None, progress,
                           out[key][2]) for cfg, (checked, key) in zip(cfgs, asked)]

    def held(self, cfg: RunConfig, *, snapshot_every: int = 0, init: dict | None = None, data=None) -> int:
        """How many steps of the run of ``cfg`` (``init``, ``data`` as for :meth:`get`) the store holds and serves
        as they are: its entry's last checkpoint, read from its ``run.json`` alone (nothing else read or checked);
        0 where there is none, it does not read, or it is to be retrained (:meth:`get` then deals with it)."""
        key = run_key(cfg, length=False, snapshot_every=snapshot_every, init=init, data=data)
        try:
            info = read_info(self.root / key, key)
        except DamagedEntry:
            return 0
        return 0 if self._retrains(info.get("retrained")) else max(info["checkpoints"])

    def _checked(self, cfg: RunConfig, snapshot_every: int, init, data):
        """(the run's plan, its key): the one check (of the run as stored: value weights recorded, its snapshots);
        every run the store trains carries it out. ``cfg`` is validated once (not again where it was already, e.g. by
        the figure runner), and so is the run as stored (:meth:`~linattn.config.RunConfig.replaced`)."""
        stored = cfg.validate().replaced(track_value=True)
        checked = plan(stored, init=init, data=data, snapshot_every=snapshot_every)
        return checked, run_key(cfg, length=False, snapshot_every=snapshot_every, init=init, data=data)

    def _retrains(self, token: str | None) -> bool:
        """Whether an entry last trained under the retraining ``token`` is trained again now."""
        return self.retrain is not None and self.retrain != token

    def _token(self, token: str | None) -> str | None:
        """The retraining token an entry trained now is written under, from the one it had."""
        return self.retrain if self._retrains(token) else token

    def _serve(self, key: str, checked, snapshot_every: int, progress: bool, drawn, stored=None):
        """Under ``key``'s lock: (its entry, the steps trained for this request, the data sets drawn in this process
        or None, whether it was retrained): the stored entry (``stored``: as :meth:`_stored` read it under this
        lock, else read now), trained or carried on (and written) where it is missing, retrained or short."""
        entry, token = self._stored(key) if stored is None else stored
        retrained = self._retrains(token)
        if retrained:
            entry = None
        E, trained = checked.config.epoch, 0
        if entry is None or E not in entry.checkpoints:
            self._writable(key)
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
            self._write(key, entry, self._token(token))
            drawn = res.datasets
        return entry, trained, drawn, retrained

    def _served(self, key: str, cfg: RunConfig, trained: int, retrained: bool, started: float) -> None:
        self._log(key=key, model=cfg.model, seed=cfg.seed, epoch=cfg.epoch, trained_steps=trained,
                  seconds=round(time.perf_counter() - started, 3), **({"retrained": True} if retrained else {}))

    def _view(self, cfg, key, entry, trained, checked, snapshot_every, init, data, progress, drawn) -> RunResult:
        """The run of ``cfg`` as :meth:`get` returns it, which ``extended(epoch)`` carries on: from ``entry`` as read
        or trained here where it holds that length (a checkpoint there; the store only ever adds steps to an entry),
        else through the store (:meth:`get`)."""
        def more(epoch: int) -> RunResult:  # the same run, longer: validated where the run is (RunConfig.replaced)
            longer = cfg.replaced(epoch=epoch)
            if epoch in entry.checkpoints:
                self._served(key, longer, 0, False, time.perf_counter())
                return self._view(longer, key, entry, 0, checked, snapshot_every, init, data, progress, drawn)
            return self._get(longer, snapshot_every=snapshot_every, init=init, data=data, progress=progress,
                             drawn=drawn)

        return entry.view(cfg, key, trained, checked.data, more)


def stored_run(cfg: RunConfig, *, snapshot_every: int = 0, init: dict | None = None, data=None,
               root=None) -> RunResult:
    """:meth:`RunStore.get` on the default store (or ``root``)."""
    return RunStore(root).get(cfg, snapshot_every=snapshot_every, init=init, data=data)


def _own_cov(result: RunResult) -> np.ndarray:
    """The run's own covariance Λ (``result.datasets.cov``); a run read back without its data has none (ValueError)."""
    if result.datasets is None:
        raise ValueError("the run holds no data, so not its covariance: it was given data that were not saved")
    return result.datasets.cov


def population_twin(result: RunResult, root=None) -> RunResult:
    """The run's model trained on the population loss (P → ∞, the ``population`` engine) from the run's own initial
    weights, on its covariance Λ, at its learning rate for its number of steps, from the store: the theory's loss
    curve from the same start, every head and every weight included, to set beside the run with the same rules
    (e.g. ``loss_curves.half_drop_step``). It costs about as much as the exact run of a small P (ATTN_M at D = 4,
    H = 8, 6001 steps: 2 s)."""
    return stored_run(result.config.on_population(_own_cov(result)), init=result.init, root=root)


def predicted_drop_steps(result: RunResult, *, horizon: int | None = None, chunk: int = 20000,
                         root=None) -> np.ndarray:
    """The step of each drop d = 1 … D that a rank-R ATTN_S run should make, predicted from its own initial weights
    with all its heads: the population (P = ∞) gradient descent of the same model from the run's ``init`` at the same
    learning rate, normalisation and precision, on the run's own Λ (``result.datasets.cov``), trained through the
    store (:func:`stored_run`, like :func:`population_twin`), with its drops read by the run's own rule
    (``loss_curves.drop_steps`` against ``theory.plateau_losses(cov, N)``). NaN where a drop is not made within
    ``horizon`` steps (default the run's ``epoch``).

    Unlike the closed-form escape time ``theory.attn_s_drop_steps`` (one head, from a typical scale), this knows
    which of the H heads starts with most weight along each direction: the first of H heads to escape is the fastest
    of H. It differs from the finite-P run only by the training set's sampling error. The store carries the run on
    ``chunk`` steps at a time, stopping once all D drops are made (each chunk continues the stored entry, which is
    written whole each time); the first chunk goes a quarter past the run's own last drop where the run made it
    (the prediction's comes near it), so that the entry is mostly written once. The drops read are the same whatever
    the chunks: each is the first step below its midpoint, and the run stops only once the last is made. It costs
    what the same number of exact steps costs (the population engine trains on moments of size
    D(D+1)² × D(D+1)², whatever P)."""
    config = result.config
    if config.model != "attnS" or config.vary_len:
        raise ValueError(f"predicted_drop_steps: the saddles L(M_m) are ATTN_S's without vary_len, not "
                         f"model={config.model!r}, vary_len={config.vary_len}")
    cov = np.asarray(_own_cov(result), dtype=np.float64)
    levels = theory.plateau_losses(cov, config.N)
    horizon = config.epoch if horizon is None else int(horizon)
    store = RunStore(root)
    own = drop_steps(result.history.train_loss, levels)[-1]  # the run's own last drop (NaN: not made)
    first = min(int(1.25 * own) + 1 if np.isfinite(own) else chunk, horizon)
    # validated once, then only lengthened (RunConfig.replaced)
    base = dataclasses.replace(config.on_population(cov), dynamics="gd", epoch=first).validate()
    held = min(store.held(base, init=result.init), horizon)  # what is stored is read once, not once per chunk
    start, loss, history = 0, np.empty(0), None
    while start < horizon:
        end = min(start + (first if start == 0 else chunk), horizon)
        if history is None or history.train_loss.size < end:
            history = store.get(base.replaced(epoch=max(end, held)), init=result.init).history
        loss = np.asarray(history.train_loss[:end])  # gradient descent: one row per step 0 … end − 1
        if np.isfinite(drop_steps(loss[start:], levels[-2:])[0]):
            break
        start = end
    return drop_steps(loss, levels)
