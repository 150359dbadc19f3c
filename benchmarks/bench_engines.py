"""Benchmark of the training engines at the paper's published settings (run on demand, not in CI).

    .venv/bin/python benchmarks/bench_engines.py            # everything (about 10 min on 2 cores)
    .venv/bin/python benchmarks/bench_engines.py --quick    # about 1 min: fewer cases, steps, whole runs
    .venv/bin/python benchmarks/bench_engines.py --only floor|batch|threads|steps|runs|flow|population [--json out.json]

Seven parts:

* ``floor``: the exact step's marginal CPU time (the compiled loop, and the torch step) at Figures 3a's and 4's
  settings against one numpy F×F float64 matrix-vector product, the step's core, as a ratio (target ≤ 3×).
* ``batch``: sixteen Figure-3a runs (P 2000, 3001 steps, seeds 0–15, draws included) through one
  ``linattn.run_many`` against one ``linattn.run`` and sixteen (``bench_run_many.py``: runs a second on any device).
* ``threads``: ``linattn.run`` called at torch's default thread count against one thread.

* ``steps``: time per step (median over a few steps) of each engine on the same data and initial weights, its
  set-up time and the peak resident memory of a fresh process that ran only that measurement (ru_maxrss): the exact
  engine (its torch step, ``value_and_grad``; the compiled loop of whole steps is ``floor``'s) against the autograd
  engine (query row only) for Figures 1b, 3a, 4; for softmax (Figure 5) the
  query-row engine against the straightforward full-attention computation. Whole autograd runs would take hours to
  days, so their whole-run times are *extrapolated*: set-up + epochs × median step.
* ``runs``: wall time of every linear-model figure at its published settings, all seeds, through ``linattn.run``
  (exact engine): Figure 1b (ATTN_M and MLP), 3a (6 seeds), 4 (R = 1, 2, 4, 8), 14 (six icl values, test sets).
* ``flow``: gradient flow against GD at the published learning rates (Figures 1b and 3a): maximum relative loss
  difference and the shift, in steps, of the moments the loss crosses the midpoints between plateaus.
* ``population``: error of the Monte-Carlo population estimate (2²⁰ sequences) against the exact moments.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

import linattn
from linattn import RunConfig, draw, models, objectives, run, theory
from linattn.analysis.loss_curves import drop_steps
from linattn.training.flow import gradient_flow
from linattn.training.train import gradient_descent

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.full_attention import FullAttention  # noqa: E402  (the reference computation lives with the tests)

# the published settings, with the initialisation era each figure was made with (reference draws)
FIG1B = dict(model="attnM", head_num=8, init=1e-6, init_scheme="dec2024")
FIG3A = dict(model="attnS", head_num=5, init=1e-2, lr=0.02, epoch=10001, trainset_size=80000, seed=0,
             init_scheme="dec2024")
FIG4 = dict(model="attnS", head_num=9, rank=1, in_dim=8, seq_len=32, init=5e-3, trainset_size=80000, epoch=20001,
            lr=0.02, init_scheme="jan2025")
FIG5_M = dict(FIG1B, softmax=True)
FIG5_S = dict(FIG3A, softmax=True)
FIG14 = dict(model="attnM", head_num=8, testset_size=5000, init=1e-6, white_cov=True, lr=5e-4, epoch=5000,
             init_scheme="jan2025")

# (label, settings, engines to time): "exact", "autograd" (query row, autograd), "full" (full attention matrix)
STEP_CASES = [
    ("Fig 1b attnM", FIG1B, ("exact", "autograd", "full")),
    ("Fig 3a attnS R=1", FIG3A, ("exact", "autograd")),
    ("Fig 4 attnS R=1", FIG4, ("exact", "autograd")),
    ("Fig 4 attnS R=8", dict(FIG4, rank=8), ("exact", "autograd")),
    ("Fig 5 softmax attnM", FIG5_M, ("autograd", "full")),
    ("Fig 5 softmax attnS", FIG5_S, ("autograd", "full")),
]
QUICK_STEP_CASES = [STEP_CASES[0], STEP_CASES[2], STEP_CASES[4]]


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


THREADS = 1  # torch intra-op threads in every measurement (``--threads``; 1 is the CLI's default)


def measure_steps(settings: dict, engine: str, n_steps: int, threads: int = 1) -> dict:
    """Set-up time and median step time of one engine on one setting (meant to run in a fresh process)."""
    torch.set_num_threads(threads)
    cfg = RunConfig(**dict(settings, engine="exact" if engine == "exact" else "autograd")).validate()
    ds, w = draw(cfg)
    net = models.build_model(cfg.model, w, softmax=cfg.softmax)
    base = _peak_mb()
    t0 = time.perf_counter()
    if engine == "exact":
        obj = objectives.Exact.from_data(net, ds.train, chunk=cfg.chunk)
    elif engine == "autograd":
        obj = objectives.Autograd(ds.train, chunk=cfg.chunk)
    else:
        obj = FullAttention(ds.train, chunk=cfg.chunk)
    step = obj.value_and_grad
    setup = time.perf_counter() - t0
    times, losses = [], []
    for _ in range(n_steps):
        for p in net.parameters():
            p.grad = None
        t = time.perf_counter()
        losses.append(step(net))
        times.append(time.perf_counter() - t)
    return dict(engine=engine, setup_s=setup, step_s=statistics.median(times), loss=losses[0],
                grad_norm=float(sum((p.grad ** 2).sum() for p in net.parameters()) ** 0.5),
                peak_mb=_peak_mb(), data_mb=base, epochs=cfg.epoch, threads=torch.get_num_threads())


def _in_child(settings: dict, engine: str, n_steps: int) -> dict:
    code = ("import json, sys; sys.path.insert(0, 'benchmarks'); import bench_engines as b; "
            f"print(json.dumps(b.measure_steps({settings!r}, {engine!r}, {n_steps}, {THREADS})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_steps(quick: bool) -> list[dict]:
    rows = []
    for label, settings, engs in (QUICK_STEP_CASES if quick else STEP_CASES):
        res = {}
        for e in engs:
            n = {"exact": 2000, "autograd": 1 if quick else 3, "full": 1 if quick else 2}[e]
            res[e] = _in_child(settings, e, n)
        base = "exact" if "exact" in res else "autograd"
        for e, r in res.items():
            r.update(case=label, whole_run_s=r["setup_s"] + r["epochs"] * r["step_s"],
                     whole_run_kind="measured steps, extrapolated" if e != "exact" else "setup + epochs × step")
            if e != base:
                r["speedup_per_step"] = r["step_s"] / res[base]["step_s"]
                r["loss_rel_diff"] = abs(r["loss"] - res[base]["loss"]) / res[base]["loss"]
                r["grad_rel_diff"] = abs(r["grad_norm"] - res[base]["grad_norm"]) / res[base]["grad_norm"]
            rows.append(r)
        print_steps(rows[-len(res):])
    return rows


def print_steps(rows):
    for r in rows:
        extra = ""
        if "speedup_per_step" in r:
            extra = (f"  slower ×{r['speedup_per_step']:.0f} per step  (|Δloss|/loss {r['loss_rel_diff']:.1e}, "
                     f"|Δ‖grad‖|/‖grad‖ {r['grad_rel_diff']:.1e})")
        print(f"{r['case']:<22} {r['engine']:<9} setup {r['setup_s']:7.2f} s  step {r['step_s'] * 1e3:10.3f} ms  "
              f"whole run {r['whole_run_s']:10.1f} s  peak RSS {r['peak_mb']:7.0f} MB{extra}", flush=True)


def bench_runs(quick: bool) -> list[dict]:
    groups = [("Fig 1b", [FIG1B, dict(FIG1B, model="mlp", cubic_feat=True)]),
              ("Fig 3a", [dict(FIG3A, seed=s) for s in range(6)]),
              ("Fig 4", [dict(FIG4, rank=r) for r in (1, 2, 4, 8)]),
              ("Fig 14", [dict(FIG14, icl=c) for c in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)])]
    if quick:
        groups = [("Fig 1b", groups[0][1]), ("Fig 4 (R = 1 only)", groups[2][1][:1])]
    rows = []
    for label, cfgs in groups:
        t0 = time.perf_counter()
        parts = [run(RunConfig(**c), progress=False) for c in cfgs]
        total = time.perf_counter() - t0
        rows.append(dict(figure=label, runs=len(cfgs), total_s=total,
                         per_run_s=[round(p.wall_time, 2) for p in parts],
                         setup_s=[round(p.setup_time, 2) for p in parts],
                         final_loss=[round(float(p.history.train_loss[-1]), 4) for p in parts]))
        print(f"{label:<20} {len(cfgs)} runs  {total:7.1f} s  (per run {rows[-1]['per_run_s']}, "
              f"of which set-up {rows[-1]['setup_s']})", flush=True)
    print(f"all: {sum(r['total_s'] for r in rows):.1f} s")
    return rows


def _crossings(loss, levels):
    """The drop steps (``loss_curves.drop_steps``) between the plateau ``levels``, None for a drop not made."""
    return [None if np.isnan(s) else int(s) for s in drop_steps(loss, levels)]


def bench_flow(quick: bool) -> list[dict]:
    # plateau levels (the paper's theory): Figure 1b's one drop tr Λ → L*, Figure 3a's L(M_0) … L(M_4)
    cases = [("Fig 1b", FIG1B, [1.0, 0.1360]), ("Fig 3a seed 0", FIG3A, [1.0, 0.6406, 0.3774, 0.2098, 0.1360])]
    if quick:
        cases = cases[:1]
    rows = []
    for label, settings, levels in cases:
        cfg = RunConfig(**settings).validate()
        ds, w = draw(cfg)
        net = models.build_model(cfg.model, w)
        obj, _ = objectives.build(cfg, net, ds, "cpu")
        gd = gradient_descent(net, obj, lr=cfg.lr, epoch=cfg.epoch, progress=False)
        t0 = time.perf_counter()
        fl = gradient_flow(models.build_model(cfg.model, w), obj, lr=cfg.lr, epoch=cfg.epoch)
        flow_s = time.perf_counter() - t0
        rel = np.abs(gd.train_loss - fl.train_loss) / fl.train_loss
        cg, cf = _crossings(gd.train_loss, levels), _crossings(fl.train_loss, levels)
        rows.append(dict(case=label, lr=cfg.lr, max_rel_diff=float(rel.max()), at_step=int(rel.argmax()),
                         final_rel_diff=float(rel[-1]), gd_crossings=cg, flow_crossings=cf, flow_s=flow_s))
        print(f"{label:<14} lr {cfg.lr:g}: max |L_gd − L_flow|/L_flow = {rel.max():.3g} (step {rel.argmax()}), "
              f"final {rel[-1]:.2g}; drop midpoints GD {cg} vs flow {cf}; flow took {flow_s:.1f} s", flush=True)
    return rows


def bench_population() -> dict:
    """|L_MC − L_exact| at the ATTN_S fixed points M_0 … M_4 of the Figure 3a task (mean normalisation)."""
    cfg = RunConfig(**FIG3A)
    cov = draw(cfg)[0].cov
    net = models.build_model("attnS", models.init_weights("attnS", head_num=5, in_dim=4, init=0.01,
                                                           rng=np.random.default_rng(0)))
    t0 = time.perf_counter()
    exact = objectives.Population.of(net, cov=cov, seq_len=32, normalize="mean")
    t_exact = time.perf_counter() - t0
    t0 = time.perf_counter()
    mc = objectives.Population.of(net, cov=cov, seq_len=32, normalize="mean", samples=1 << 20, seed=1)
    t_mc = time.perf_counter() - t0
    errs = []
    for m in range(5):
        A = theory.pcr_weights(cov, 31, m, normalize="mean")  # the fixed point M_m
        M = torch.zeros(4, 5, 5, dtype=torch.float64)
        M[:, :4, 4] = torch.as_tensor(A).T
        mm = models.fold_combined(M)
        errs.append(abs(float(exact.moments.loss(mm)) - float(mc.moments.loss(mm))))
    out = dict(exact_s=t_exact, mc_s=t_mc, abs_loss_error_at_M0_to_M4=errs)
    print(f"population: exact moments {t_exact:.2f} s; Monte Carlo (2^20) {t_mc:.1f} s, loss error at "
          f"M_0..M_4 = {', '.join(f'{e:.1e}' for e in errs)}")
    return out


# ── the exact step against its arithmetic, runs in batches, threads ──────────────────────────────────────────────

DEFAULT_THREADS = torch.get_num_threads()  # torch's own default, before main() sets --threads
FLOOR_CASES = [("Fig 3a attnS R=1 (F = 60)", FIG3A), ("Fig 4 attnS R=1 (F = 360)", FIG4)]


def _best(fn, repeats: int = 5, clock=time.perf_counter) -> float:
    """The shortest of ``repeats`` timings of ``fn()`` on ``clock``."""
    times = []
    for _ in range(repeats):
        t = clock()
        fn()
        times.append(clock() - t)
    return min(times)


def marginal_step(net_of, objective, lr: float, short: int, long: int) -> float:
    """CPU seconds a step of ``gradient_descent``: (time of ``long`` steps − time of ``short``) / (long − short), each
    the best of a few repeats from the same weights (fixed costs, the call and the bookkeeping, cancel). CPU time of
    this process (one thread), so that other work on shared cores does not count."""
    run_for = lambda n: gradient_descent(net_of(), objective, lr=lr, epoch=n, progress=False)
    best = lambda n: _best(lambda: run_for(n), clock=time.process_time)
    return (best(long) - best(short)) / (long - short)


def matvec_floor(F: int) -> float:
    """CPU seconds of one numpy F×F float64 matrix-vector product (the best of several batches of 10000)."""
    A, x = np.random.default_rng(0).standard_normal((F, F)), np.ones(F)
    return _best(lambda: [A @ x for _ in range(10000)], repeats=7, clock=time.process_time) / 10000


def bench_floor(quick: bool) -> list[dict]:
    """The exact step (compiled loop and torch step) against its floor, one F×F matrix-vector product."""
    rows = []
    for label, settings in FLOOR_CASES:
        cfg = RunConfig(**dict(settings, trainset_size=2000)).validate()  # P sets the moments' cost, not a step's
        ds, w = draw(cfg)
        obj, _ = objectives.build(cfg, models.build_model(cfg.model, w), ds, "cpu")
        net_of = lambda: models.build_model(cfg.model, w)
        compiled = marginal_step(net_of, obj, cfg.lr, 2000, 12000)
        obj.kernel = "torch"
        eager = marginal_step(net_of, obj, cfg.lr, 200, 700 if quick else 1200)
        F = obj.moments.TT.shape[0]
        floor = matvec_floor(F)
        rows.append(dict(case=label, F=F, step_s=compiled, torch_step_s=eager, matvec_s=floor, ratio=compiled / floor))
        print(f"{label:<26} compiled step {compiled * 1e6:7.2f} µs, torch step {eager * 1e6:7.1f} µs, numpy F×F "
              f"matvec {floor * 1e6:6.2f} µs: step = {compiled / floor:.2f}× the matvec (target ≤ 3×)", flush=True)
    return rows


def _wall_cpu(fn, repeats: int) -> tuple[float, float]:
    """The shortest wall time and the shortest CPU time of this process over ``repeats`` calls of ``fn()``."""
    return _best(fn, repeats), _best(fn, repeats, clock=time.process_time)


def bench_batch(quick: bool) -> dict:
    """Sixteen Figure-3a runs (P = 2000, 3001 steps, seeds 0–15, draws included) through one run_many, against one
    linattn.run and sixteen: wall and CPU time (the CPU time is what a loaded machine does not blur)."""
    n = 4 if quick else 16
    cfgs = [RunConfig(**dict(FIG3A, trainset_size=2000, epoch=3001, seed=s)) for s in range(n)]
    run(cfgs[0], progress=False)  # compile the kernel, warm the caches
    one = _wall_cpu(lambda: run(cfgs[0], progress=False), 3)
    loop = _wall_cpu(lambda: [run(c, progress=False) for c in cfgs], 1)
    many = _wall_cpu(lambda: linattn.run_many(cfgs), 2)
    stacked = _wall_cpu(lambda: linattn.run_many(cfgs, batched=True), 1)
    # what no batching can share: each seed's own draws (the reference's generators, one number after another)
    # and each member's own steps (its own E[TTᵀ]), here the members' draws alone
    draws = _wall_cpu(lambda: [draw(c) for c in cfgs], 2)
    out = dict(runs=n, one_run_s=one, loop_s=loop, run_many_s=many, run_many_batched_cpu_s=stacked, draws_s=draws,
               ratio_to_one_run=many[1] / one[1], draws_ratio_to_one_run=draws[1] / one[1])
    w = lambda t: f"{t[0]:.3f} s wall / {t[1]:.3f} s CPU"
    print(f"{n} Fig-3a runs (P 2000, 3001 steps): one linattn.run {w(one)}; {n} runs one by one {w(loop)}; "
          f"run_many {w(many)} ({many[1] / one[1]:.1f}× one run's CPU; target ≤ 2×), of which the {n} seeds' draws "
          f"alone {w(draws)} ({draws[1] / one[1]:.1f}×); run_many batched=True on the CPU {w(stacked)}", flush=True)
    return out


def bench_threads(quick: bool) -> dict:
    """linattn.run of a Figure-3a run with torch's default thread count set by the caller, against one thread, and
    against forcing the default count into the run (what run did before it chose the engine's threads)."""
    cfg = RunConfig(**dict(FIG3A, trainset_size=2000, epoch=3001))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(DEFAULT_THREADS)
        default = _wall_cpu(lambda: run(cfg, progress=False), 5)
        forced = _wall_cpu(lambda: run(cfg, progress=False, threads=DEFAULT_THREADS), 5)
        torch.set_num_threads(1)
        single = _wall_cpu(lambda: run(cfg, progress=False), 5)
    finally:
        torch.set_num_threads(before)
    w = lambda t: f"{t[0]:.3f} s wall / {t[1]:.3f} s CPU"
    print(f"linattn.run, Fig 3a (P 2000, 3001 steps): caller at torch's default {DEFAULT_THREADS} threads "
          f"{w(default)}, "
          f"caller at 1 thread {w(single)} (wall {default[0] / single[0]:.2f}×, CPU {default[1] / single[1]:.2f}×; "
          f"target ≤ 1.2×); {DEFAULT_THREADS} threads forced into the run {w(forced)}", flush=True)
    return dict(default_threads=DEFAULT_THREADS, default_s=default, one_thread_s=single, forced_default_s=forced)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a 1–2 minute version")
    p.add_argument("--only", choices=("floor", "batch", "threads", "steps", "runs", "flow", "population"),
                   action="append")
    p.add_argument("--json", help="also write the measurements to this file")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads for every engine (default 1, as `linattn train`)")
    args = p.parse_args(argv)
    global THREADS
    THREADS = args.threads
    torch.set_num_threads(args.threads)
    parts = args.only or ["floor", "batch", "threads", "steps", "runs", "flow"] + ([] if args.quick else ["population"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; quick={args.quick}")
    out = {}
    for part in parts:
        print(f"\n== {part} ==")
        out[part] = {"floor": lambda: bench_floor(args.quick), "batch": lambda: bench_batch(args.quick),
                     "threads": lambda: bench_threads(args.quick), "steps": lambda: bench_steps(args.quick),
                     "runs": lambda: bench_runs(args.quick),
                     "flow": lambda: bench_flow(args.quick), "population": bench_population}[part]()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
