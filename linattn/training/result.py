"""The one record of a run: :class:`RunResult` — what :func:`~linattn.training.experiment.run` returns — and its folder,
written by :func:`write_outputs` and read back by :func:`load_run` (whatever wrote it: ``linattn train``, a sweep, the
run store).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

import numpy as np

from .. import data as data_mod
from ..config import RunConfig
from ..records import provenance, write_csv, write_file, write_json
from ..weights import model_weights
from .plan import draw_checked
from .train import History

if TYPE_CHECKING:
    import torch


@dataclass
class RunResult:
    """One run: what :func:`~linattn.training.experiment.run` returns, what :func:`load_run` reads back from a run
    folder (whatever wrote it: ``linattn train --out``, :func:`write_outputs`, a sweep, the run store), and what the run
    store serves.

    Attributes:
        config: the settings of the run (with given ``data``, its P and seq_len).
        history: the losses, one per step recorded before the step (:class:`~linattn.training.train.History`: ``step``,
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
        key: the run's key (:func:`~linattn.training.keys.run_key`) where a run store or a sweep filed it under one,
        else None. trained_steps: how many steps were trained to give this result (the run store: 0 when all were
        stored). path: the folder it was read from (None for a run just trained); info: its ``run.json`` (settings,
            versions, git commit, timings).
        carry_on: ``(result, epoch) -> RunResult``, how :meth:`extended` carries the run on: set by whoever made
            the result (:func:`~linattn.training.experiment.run`: :func:`~linattn.training.experiment.continued`; the
            run store: its own, from a checkpoint); None for a run read back.
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
    carry_on: Callable | None = field(default=None, repr=False, compare=False)
    _model: torch.nn.Module | None = field(default=None, repr=False, compare=False)

    @property
    def model(self) -> torch.nn.Module | None:
        """The model after training: the module that trained (on ``device``), else rebuilt from ``weights`` on first use
        (float64, CPU); None without weights."""
        from ..models import build_model  # torch: imported where a model is built, not with linattn

        if self._model is None and self.weights is not None:
            self._model = build_model(self.config.model, self.weights, softmax=self.config.softmax)
        return self._model

    def snapshots_of(self, fn: Callable, /, *, arrays: bool = False, **kwargs: Any) -> list:
        """``[(step, fn(model, **kwargs))]`` for each weight snapshot, the model rebuilt from it: what
        ``linattn.run(..., snapshot=fn)`` would have recorded. With ``arrays=True`` ``fn`` is handed the snapshot's
        weights instead (``weights.model_weights``: numpy arrays and what is read off them, e.g. the in-context
        matrices and conserved quantities of ``analysis.diagnostics``), which needs no torch; the same numbers as of
        the torch model, up to the order of a sum's terms (about 1e-16 relative)."""
        if arrays:
            return [(s, fn(model_weights(self.config.model, w), **kwargs)) for s, w in self.history.snapshots]
        from ..models import build_model

        return [(s, fn(build_model(self.config.model, w, softmax=self.config.softmax), **kwargs))
                for s, w in self.history.snapshots]

    def extended(self, epoch: int) -> "RunResult":
        """The same run carried on to ``epoch`` steps (never shorter than it is): gradient descent depends on the
        weights alone, so its first steps are this run's. Done by :attr:`carry_on`: a run that
        :func:`~linattn.training.experiment.run` returned trains the remaining steps from its final weights
        (:func:`~linattn.training.experiment.continued`), a run the run store served continues from its nearest
        checkpoint; a run read back by :func:`load_run` has none (ValueError: carry it on with
        ``linattn.training.experiment.continued(result, epoch)``)."""
        if epoch <= self.config.epoch:
            return self
        if self.carry_on is None:
            raise ValueError("this run was read back from its folder and knows no way to carry on: call "
                             "linattn.training.experiment.continued(result, epoch), or serve it from the run store")
        return self.carry_on(self, epoch)


class _DrawnOnUse(data_mod.Datasets):
    """The data sets of a run read back: the task (``cov``, ``w_fix``) at once, the sequences drawn again from the
    settings on first use (:func:`draw` draws the same numbers for the same settings)."""

    def __init__(self, config: RunConfig, cov, w_fix):
        self.cov, self.w_fix, self._config = cov, w_fix, config

    def __getattr__(self, name):
        if name in ("train", "test_iwl", "test_icl"):
            drawn = draw_checked(self._config)[0]
            for key in ("train", "test_iwl", "test_icl"):
                setattr(self, key, getattr(drawn, key))
            return getattr(drawn, name)
        raise AttributeError(name)


def write_outputs(result: RunResult, out_dir: str | os.PathLike[str], *, save_data: bool = False,
                  extra: dict | None = None, atomic: bool = True) -> None:
    """Write ``result`` into the folder ``out_dir`` in the one format of a run, each file atomically (``atomic=False``:
    straight into place, for a new folder that is itself renamed into place whole):

    * ``loss.csv``: the history, one row per step (``step``, ``train_loss``, the test losses, ``value_h``), every
      number as the shortest text that reads back to the same float64;
    * ``run.json``: the provenance (versions, git commit, date), the settings, engine, device, timings, what was
      given in place of drawn, the task (Λ and the fixed task vector), the key and snapshot interval, and
      ``extra`` (``run_info``);
    * ``init.npz`` and ``weights.npz``: the initial and the final weights (layout of ``init.npz``);
    * ``snapshots.npz`` when weight snapshots were recorded (``steps`` and each weight stacked over them);
    * with ``save_data``, ``data.npz``: the data sets and the task (``Datasets.arrays``).

    ``linattn train --out``, sweeps and the run store write through here; :func:`load_run` reads any of them.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_run_files(result, out, save_data=save_data, atomic=atomic)
    write_json(out / "run.json", run_info(result, extra), atomic=atomic)


def write_run_files(result: RunResult, out: Path, *, save_data: bool = False, atomic: bool = True) -> None:
    """The files of :func:`write_outputs` but ``run.json``, into the existing folder ``out``; ``atomic``: each file
    through a temporary one (``records.write_file``; False for a folder renamed into place whole, a run-store
    entry)."""
    write_csv(out / "loss.csv", result.history.columns(), exact=True, atomic=atomic)
    for name, arrays in (("init.npz", result.init), ("weights.npz", result.weights)):
        if arrays is not None:
            write_file(out / name, lambda f, a=arrays: np.savez(f, **a), binary=True, atomic=atomic)
    snaps = result.history.snapshots
    if snaps and all(isinstance(w, dict) and w.keys() == snaps[0][1].keys() for _, w in snaps):
        stacked: dict[str, Any] = {"steps": np.array([s for s, _ in snaps], dtype=np.int64)}
        stacked.update({n: np.stack([np.asarray(w[n]) for _, w in snaps]) for n in snaps[0][1]})
        write_file(out / "snapshots.npz", lambda f: np.savez(f, **stacked), binary=True, atomic=atomic)
    ds = result.datasets
    if save_data and ds is not None:
        data_arrays: dict[str, Any] = ds.arrays()
        write_file(out / "data.npz", lambda f: np.savez_compressed(f, **data_arrays), binary=True, atomic=atomic)


def run_info(result: RunResult, extra: dict | None = None) -> dict:
    """The content of a run folder's ``run.json`` (:func:`write_outputs`), ``extra`` added."""
    ds = result.datasets
    task = {} if ds is None else {k: v for k, v in (("cov", ds.cov), ("w_fix", ds.w_fix)) if v is not None}
    info = provenance()
    info.update(settings=result.config.to_dict(), engine=result.engine, device=result.device,
                dtype=result.config.dtype, seed=result.config.seed, setup_time_s=round(result.setup_time, 3),
                train_time_s=round(result.history.wall_time, 3), wall_time_s=round(result.wall_time, 3),
                final_train_loss=float(result.history.train_loss[-1]), given=list(result.given), key=result.key,
                snapshot_every=result.snapshot_every,
                task={k: {"dtype": np.asarray(v).dtype.str, "values": np.asarray(v)} for k, v in task.items()},
                **(extra or {}))
    return info


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


def load_run(out_dir: str | os.PathLike[str]) -> RunResult:
    """Read a run folder back into a :class:`RunResult`: what ``linattn train --out``, :func:`write_outputs`, a
    sweep's run or a run-store entry holds (:func:`write_outputs` says what each file is).

    ``loss.csv`` and ``run.json`` must be there (FileNotFoundError otherwise); the weights, snapshots, the value
    weights of a run-store entry (``values.npy``, in place of ``loss.csv``'s ``value_h`` columns) and
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
    if (out / "values.npy").is_file():  # a run store entry's value weights, kept out of its loss.csv
        history.values = np.load(out / "values.npy", allow_pickle=False)
    if (out / "snapshots.npz").is_file():
        history.snapshots = _read_snapshots(out / "snapshots.npz")
    task = {k: np.asarray(v["values"], dtype=v["dtype"]) for k, v in info.get("task", {}).items()}
    given = tuple(info.get("given", ()))
    if (out / "data.npz").is_file():
        datasets = data_mod.Datasets.from_arrays(cast(dict, _arrays(out / "data.npz")))  # the file is there
    elif "data" in given:
        datasets = None  # given data that were not saved
    elif info.get("engine") == "population":  # no data sets: the task alone
        datasets = data_mod.Datasets(train=None, test_iwl=None, test_icl=None, cov=cast(np.ndarray, task.get("cov")),
                                     w_fix=task.get("w_fix"))
    else:
        datasets = _DrawnOnUse(cfg, task.get("cov"), task.get("w_fix"))
    return RunResult(config=cfg, history=history, init=_arrays(out / "init.npz"),
                     weights=_arrays(out / "weights.npz"), engine=info.get("engine"), device=info.get("device"),
                     setup_time=info.get("setup_time_s", 0.0), wall_time=info.get("wall_time_s", 0.0),
                     datasets=datasets, given=given, snapshot_every=info.get("snapshot_every", 0),
                     key=info.get("key"), path=out, info=info)
