"""One training run from a :class:`~linattn.config.RunConfig`: data, initial weights, engine, gradient descent.

    result = run(RunConfig(model="attnM", head_num=8, init=1e-6))
    result.history.train_loss      # one value per step, recorded before the step
    write_outputs(result, "runs/fig1")   # loss.csv and run.json (and data.npz/init.npz if asked)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from . import data as data_mod
from . import engines
from .config import RunConfig
from .models import build_model, init_weights
from .reference_draws import reference_draws
from .provenance import atomic_write, provenance, write_csv, write_json
from .train import History, gradient_descent


@dataclass
class RunResult:
    config: RunConfig
    history: History
    datasets: data_mod.Datasets
    init: dict[str, np.ndarray]
    model: torch.nn.Module
    engine: str
    device: str
    setup_time: float
    wall_time: float


def pick_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for but torch sees no CUDA device")
    return device


def objectives(cfg: RunConfig, model, datasets: data_mod.Datasets, device: str):
    """The training objective and the test objectives (dict) of ``cfg``'s engine."""
    engine = cfg.resolved_engine()
    dtype = getattr(torch, cfg.dtype)
    opts = dict(vary_len=cfg.vary_len, normalize=cfg.normalize, chunk=cfg.chunk, device=device, dtype=dtype)
    if engine == "population":
        train = engines.population(model, cov=datasets.cov, seq_len=cfg.seq_len, samples=cfg.population_samples,
                                   seed=cfg.seed, **opts)
    elif engine == "exact":
        train = engines.Exact.from_data(model, datasets.train, **opts)
    else:
        train = engines.PerSample(datasets.train, **opts)
    tests = {}
    for key in ("test_iwl", "test_icl"):
        seqs = getattr(datasets, key)
        if seqs is not None:
            tests[key] = (engines.PerSample(seqs, **opts) if engine == "autograd"
                          else engines.Exact.from_data(model, seqs, **opts))
    return train, tests


def draw(cfg: RunConfig) -> tuple[data_mod.Datasets, dict[str, np.ndarray]]:
    """The data sets and initial weights of ``cfg``: the reference's own random numbers (``draws="reference"``),
    or linattn's independent streams, one per purpose (``draws="streams"``)."""
    if cfg.draws == "reference":
        return reference_draws(model=cfg.model, era=cfg.init_scheme, in_dim=cfg.in_dim, seq_len=cfg.seq_len,
                               trainset_size=cfg.trainset_size, testset_size=cfg.testset_size, icl=cfg.icl,
                               white_cov=cfg.white_cov, head_num=cfg.head_num, rank=cfg.rank, init=cfg.init,
                               seed=cfg.seed)
    datasets = data_mod.make_datasets(in_dim=cfg.in_dim, seq_len=cfg.seq_len, trainset_size=cfg.trainset_size,
                                      testset_size=cfg.testset_size, icl=cfg.icl, white_cov=cfg.white_cov,
                                      spectrum=cfg.spectrum, cov_matrix=cfg.cov_matrix, seed=cfg.seed)
    init = init_weights(cfg.model, heads=cfg.head_num, in_dim=cfg.in_dim, rank=cfg.rank, init=cfg.init,
                        scheme=cfg.init_scheme, rng=data_mod.streams(cfg.seed, data_mod.INIT))
    return datasets, init


def run(cfg: RunConfig, *, init: dict | None = None, data: data_mod.Sequences | None = None,
        progress: bool | None = None, snapshot_every: int = 0, snapshot=None) -> RunResult:
    """Validate ``cfg``, build data, weights and engine, and train. Raises ConfigError before any work.

    ``init`` (a dict in the layout of ``init.npz``) replaces the drawn initial weights, and ``data`` (a
    :class:`~linattn.data.Sequences`) the drawn training set; everything else still comes from ``cfg``.
    """
    cfg.validate()
    start = time.perf_counter()
    device = pick_device(cfg.device)
    datasets, drawn = draw(cfg)
    if data is not None:
        datasets.train = data
    init = drawn if init is None else {k: np.asarray(v) for k, v in init.items()}
    model = build_model(cfg.model, init, softmax=cfg.softmax, dtype=getattr(torch, cfg.dtype), device=device)
    train, tests = objectives(cfg, model, datasets, device)
    setup = time.perf_counter() - start
    if cfg.dynamics == "flow":
        from .flow import gradient_flow
        history = gradient_flow(model, train, lr=cfg.lr, epochs=cfg.epoch, tests=tests,
                                track_value=cfg.track_value, snapshot_every=snapshot_every, snapshot=snapshot)
    else:
        history = gradient_descent(model, train, lr=cfg.lr, epochs=cfg.epoch, tests=tests,
                                   track_value=cfg.track_value, snapshot_every=snapshot_every, snapshot=snapshot,
                                   progress=progress)
    return RunResult(cfg, history, datasets, init, model, train.name, device, setup,
                     time.perf_counter() - start)


def write_outputs(result: RunResult, out_dir, *, save_data: bool = False) -> None:
    """``loss.csv`` and ``run.json`` (and ``data.npz``, ``init.npz`` with ``save_data``), each written atomically."""
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if save_data:
        ds = result.datasets
        arrays = {"cov": ds.cov, "w_fix": ds.w_fix}
        if ds.train is not None:
            arrays.update(X=ds.train.X, y=ds.train.y)
        for key in ("test_iwl", "test_icl"):
            s = getattr(ds, key)
            if s is not None:
                arrays.update({f"{key}_X": s.X, f"{key}_y": s.y})
        atomic_write(out / "data.npz", lambda f: np.savez_compressed(f, **arrays), binary=True)
        atomic_write(out / "init.npz", lambda f: np.savez(f, **result.init), binary=True)
    write_csv(out / "loss.csv", result.history.columns())
    info = provenance()
    info.update(settings=result.config.to_dict(), engine=result.engine, device=result.device,
                dtype=result.config.dtype, seed=result.config.seed, setup_time_s=round(result.setup_time, 3),
                train_time_s=round(result.history.wall_time, 3), wall_time_s=round(result.wall_time, 3),
                final_train_loss=float(result.history.train_loss[-1]))
    write_json(out / "run.json", info)
