"""Benchmark of the sweep engine (run on demand, not in CI): N runs one after another in one process, against the
same N runs through ``linattn.companion.sweeps.sweep`` on a local Dask cluster of 1 and of 2 worker processes.

    .venv/bin/python benchmarks/bench_sweep.py                 # N = 12 runs of the issue's ATTN_S setting
    .venv/bin/python benchmarks/bench_sweep.py --runs 6 --epoch 2001 --json out.json

Every variant does the same work per run (train, write the run folder, summarise), into a fresh folder: the
sequential loop calls :func:`linattn.companion.sweeps.cells.train_cell` for each run; the sweeps submit parts of the
grid to Dask, each part one :func:`~linattn.companion.sweeps.cells.train_cells` call (the runs through
``linattn.run_many``). The
cluster's start-up is timed on its own (``local_client``); the scheduler's overhead per run is the 1-worker sweep's
time past the sequential loop, divided by N.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import torch

from linattn import RunConfig
from linattn.companion.sweeps import cells, local_client, sweep
from linattn.training.keys import run_key


def sequential(base: RunConfig, seeds: list[int], root: Path) -> float:
    start = time.perf_counter()
    for seed in seeds:
        cfg = dataclasses.replace(base, seed=seed)
        result = cells.train_cell(cfg.to_dict(), str(root), run_key(cfg))
        assert result["status"] == "done", result
    return time.perf_counter() - start


def through_dask(base: RunConfig, seeds: list[int], root: Path, workers: int) -> tuple[float, float]:
    """(start-up of the local cluster, the sweep on it) in seconds."""
    start = time.perf_counter()
    with local_client(workers) as client:
        client.wait_for_workers(workers)
        ready = time.perf_counter()
        ds = sweep(base, {"seed": seeds}, client=client, out=root, progress=False)
        done = time.perf_counter()
    assert (ds.status == "done").all()
    return ready - start, done - ready


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=12, help="N, the number of runs (seeds 0 … N-1)")
    parser.add_argument("--epoch", type=int, default=4001)
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as in every worker
    base = RunConfig(model="attnS", head_num=5, init=1e-2, lr=0.02, epoch=args.epoch, trainset_size=4000)
    seeds = list(range(args.runs))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        seq = sequential(base, seeds, tmp / "sequential")
        start1, sweep1 = through_dask(base, seeds, tmp / "one", 1)
        start2, sweep2 = through_dask(base, seeds, tmp / "two", 2)
    n = len(seeds)
    numbers = {"runs": n, "epoch": args.epoch, "sequential_s": seq, "sweep1_startup_s": start1, "sweep1_s": sweep1,
               "sweep2_startup_s": start2, "sweep2_s": sweep2, "overhead_per_run_s": (sweep1 - seq) / n,
               "speedup_2_workers": seq / sweep2, "speedup_2_workers_with_startup": seq / (start2 + sweep2)}
    print(f"{n} runs of `linattn sweep --model attnS --head 5 --init 1e-2 --lr 0.02 --epoch {args.epoch} "
          f"--trainset_size 4000 --grid seed=0:{n}`")
    print(f"  one after another, one process   {seq:7.1f} s   ({seq / n:.2f} s a run)")
    print(f"  sweep, 1 worker                  {sweep1:7.1f} s   (+ {start1:.1f} s cluster start-up); "
          f"ratio {seq / sweep1:.2f}")
    print(f"  sweep, 2 workers                 {sweep2:7.1f} s   (+ {start2:.1f} s cluster start-up); "
          f"ratio {seq / sweep2:.2f} ({seq / (start2 + sweep2):.2f} with start-up)")
    print(f"  scheduler overhead per run       {numbers['overhead_per_run_s'] * 1000:7.0f} ms (1 worker vs the loop)")
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=2))


if __name__ == "__main__":
    main()
