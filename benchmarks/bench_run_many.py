"""Runs a second of ``linattn.run_many`` at Figure 3a's setting, for given batch sizes and device (run on demand).

    .venv/bin/python benchmarks/bench_run_many.py --device cuda --batch 1 16 256 4096
    .venv/bin/python benchmarks/bench_run_many.py --device cpu --batch 1 16 --member-by-member
    .venv/bin/python benchmarks/bench_run_many.py --device cuda --batch 4096 --shared-draw   # the loop alone

Figure 3a's runs (ATTN_S, H = 5, R = 1, D = 4, N = 31, init 1e-2, lr 0.02, the reference's draws) with P = 2000 and
3001 steps by default, seeds 0 … B−1. A run's draws (the authors' random numbers, per seed) and its data moments
are made on the CPU whatever the device; ``--shared-draw`` draws seed 0 once and gives every member the same data
and initial weights, so that what is timed is the moments and the batched loop alone.
"""

from __future__ import annotations

import argparse
import time

import linattn

FIG3A = dict(model="attnS", head_num=5, rank=1, in_dim=4, seq_len=32, init=1e-2, lr=0.02, init_scheme="dec2024",
             draws="reference")


def measure(batches, *, device: str = "cpu", trainset_size: int = 2000, epoch: int = 3001, batched: bool | None = None,
            shared_draw: bool = False) -> list[dict]:
    """One ``run_many`` call per batch size: {batch, seconds, runs_per_s}."""
    rows = []
    for B in batches:
        cfgs = [linattn.RunConfig(**FIG3A, trainset_size=trainset_size, epoch=epoch, seed=s, device=device)
                for s in range(B)]
        start = time.perf_counter()
        inits = datasets = None
        if shared_draw:
            data, init = linattn.draw(cfgs[0])
            cfgs = [cfgs[0]] * B
            inits, datasets = [init] * B, [data] * B
        results = linattn.run_many(cfgs, inits=inits, datasets=datasets, batched=batched)
        if device.startswith("cuda"):
            import torch
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        assert all(isinstance(r, linattn.RunResult) for r in results)
        rows.append(dict(batch=B, seconds=seconds, runs_per_s=B / seconds))
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--trainset-size", type=int, default=2000)
    ap.add_argument("--epoch", type=int, default=3001)
    ap.add_argument("--member-by-member", action="store_true", help="not batched (the default on the CPU)")
    ap.add_argument("--batched", action="store_true", help="the stacked torch loop (the default on CUDA)")
    ap.add_argument("--shared-draw", action="store_true", help="one draw for every member: time the loop alone")
    args = ap.parse_args(argv)
    batched = True if args.batched else False if args.member_by_member else None
    linattn.run_many([linattn.RunConfig(**FIG3A, trainset_size=100, epoch=3, device=args.device)], batched=batched)
    print(f"device {args.device}, P = {args.trainset_size}, {args.epoch} steps, batched = {batched}, "
          f"shared draw = {args.shared_draw}")
    for row in measure(args.batch, device=args.device, trainset_size=args.trainset_size, epoch=args.epoch,
                       batched=batched, shared_draw=args.shared_draw):
        print(f"batch {row['batch']:5d}: {row['seconds']:8.2f} s, {row['runs_per_s']:9.1f} runs/s")


if __name__ == "__main__":
    main()
