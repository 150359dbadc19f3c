"""Benchmark of the softmax objective (``linattn.objectives.Softmax``) at the Figure 5 settings (on demand, not in CI).

    .venv/bin/python benchmarks/bench_softmax.py                 # everything, about 3 min on 2 cores
    .venv/bin/python benchmarks/bench_softmax.py --quick         # no full-attention ATTN_S step (16 s a step)
    .venv/bin/python benchmarks/bench_softmax.py --json out.json
    .venv/bin/python benchmarks/bench_softmax.py --device cuda --large   # on a GPU: adds ATTN_S at P = 10⁶

For each setting (softmax ATTN_M: P = 5000, H = 8; softmax ATTN_S: P = 80000, H = 5, R = 1; D = 4, seq_len = 32)
and engine, a fresh process builds the data and weights, then times the engine's steps with one torch thread (the
CLI's default). Engines: ``softmax`` (the softmax objective, float32 arithmetic with float64 sums: the native C
kernel on the CPU, torch.compile on CUDA; the row names its ``kernel``), ``softmax-f64`` (the same in float64),
``softmax-eager`` (float32, not compiled: the fallback when no compiler works), ``autograd``
(``objectives.Autograd``: query row, autograd, float64) and ``full`` (the same through ``full_attention``: every
head's n×n matrix, as the reference computes it); ``--engines`` picks some of them. Reported: set-up time, the
first step (it includes compiling the kernel: the C compiler's fraction of a second on the CPU, torch.compile's
seconds on CUDA, whose kernels are cached on disk for later processes), the median and fastest of the other steps,
and the process's peak resident memory (ru_maxrss; it includes the float64 data set, shown apart as "data"). Loss
and gradient are compared with the autograd engine's; ratios are of median steps measured in the same invocation.
A whole published-scale Figure 5 (ATTN_M 6001 steps + ATTN_S 10001 steps) is projected as set-up + first step +
(epochs − 1) × median step. ``--device cuda`` runs every engine on the GPU (steps are timed after a
synchronisation); ``--large`` adds softmax ATTN_S at P = 10⁶ (the softmax and autograd engines only: full
attention would need tens of GB), and each row also prints steps per second.

Each softmax row is followed by the memory floor: the bytes a step reads (``Softmax.step_bytes``: every term's context
tokens, queries and targets) and the time to stream as many bytes once (:func:`stream_floor`: the median of 7 copies
of an array of that size, numpy on the CPU, torch in GPU memory with ``--device cuda``), printed as "x ms vs floor
y ms = z× the floor".

Each CPU softmax row is then set against its compute floor: the multiply-adds a step needs at the least
(:func:`step_fmas`: P · H · seq_len · (4E + 8), E = D + 1) over one core's FMA throughput, measured in the same process
(:func:`fma_rate`: ``fma_peak.c``, chains of vector FMAs of the kernel's width, compiled with the kernel's flags, so
that an ``avx2`` build is held to the 256-bit rate and a ``portable`` one to SSE2's separate multiplies and adds), as
"x× it". Both sides are CPU time (the FMA rate the fastest of 15 runs in the thread's CPU time, the step the median
of its steps' process CPU time; the wall-clock ratio is printed beside it): on a shared machine a process the
scheduler interrupts would otherwise make the floor look lower or the step slower. ``LINATTN_KERNEL_ISA=avx2``
times the kernels (and the FMA rate) without AVX-512, as on a CPU without it.

Measured (2 shared cores at load 3.5–4.3, AMD EPYC (Zen 5) with AVX-512 at 130 G float32 multiply-adds a second
with 512-bit vectors, 65 G with 256-bit; ``--engines softmax --quick``, medians of 3 runs; ``benchmarks/README.md``):
default build ATTN_S 5.26 ms of CPU a step = 1.92× its compute floor of 2.77 ms and ATTN_M 0.544 ms = 1.94×;
``LINATTN_KERNEL_ISA=avx2`` ATTN_S 8.45 ms = 1.53× its floor of 5.52 ms and ATTN_M 0.864 ms = 1.54× (the kernel
before: 12.1 ms = 2.2× and 1.34 ms = 2.4×); ``portable`` 1.81× and 1.89×.

Measured before (2 cores under load 1.1, ``--quick``; the whole table, the H100's and the kernels before this one in
``benchmarks/README.md``): softmax ATTN_S 8.33 ms a step against autograd's 337 ms, 40×, and 8.3 ms vs floor
7.87 ms (51.5 MB a step) = 1.1× the floor; ATTN_M 1.08 ms against 34 ms, 32×. Alternating fresh processes, a step
of the kernel with token-major blocks takes 8.8 ms of CPU at ATTN_S against the kernel before's 12.5 ms, and
1.00 ms at ATTN_M against 1.42 ms (medians of rounds).
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from linattn import data, models
from linattn.objectives import Autograd, Softmax, native

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.full_attention import FullAttention  # noqa: E402  (the reference computation lives with the tests)

FIG5_M = dict(model="attnM", head_num=8, rank=1, in_dim=4, seq_len=32, trainset_size=5000, epoch=6001, init=1e-6,
              seed=10)
FIG5_S = dict(model="attnS", head_num=5, rank=1, in_dim=4, seq_len=32, trainset_size=80000, epoch=10001, init=1e-2,
              seed=0)
CASES = [("Fig 5 softmax attnM (P 5000, H 8)", FIG5_M), ("Fig 5 softmax attnS (P 80000, H 5, R 1)", FIG5_S)]
LARGE = ("softmax attnS (P 10^6, H 5, R 1)", dict(FIG5_S, trainset_size=1_000_000))
LARGE_ENGINES = ("softmax", "softmax-f64", "autograd")
ENGINES = ("softmax", "softmax-f64", "softmax-eager", "autograd", "full")
STEPS = {"softmax": 30, "softmax-f64": 20, "softmax-eager": 5, "autograd": 5, "full": 2}


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _objective(engine: str, seqs, device: str):
    if engine == "softmax":
        return Softmax(seqs, device=device).value_and_grad
    if engine == "softmax-f64":
        return Softmax(seqs, dtype=torch.float64, device=device).value_and_grad
    if engine == "softmax-eager":
        return Softmax(seqs, compile=False, device=device).value_and_grad
    return (Autograd if engine == "autograd" else FullAttention)(seqs, device=device).value_and_grad


def stream_floor(n_bytes: int, repeats: int = 7, device: str = "cpu") -> float:
    """Seconds to stream ``n_bytes`` once: the median time of a copy of an array of that size (numpy on the CPU; on
    a GPU a torch copy in its memory, timed between synchronisations)."""
    if device.startswith("cuda"):
        src = torch.ones(max(1, n_bytes // 8), dtype=torch.float64, device=device)
        dst = torch.empty_like(src)
        copy, sync = dst.copy_, torch.cuda.synchronize
    else:
        src = np.ones(max(1, n_bytes // 8))
        dst = np.empty_like(src)
        copy, sync = (lambda a: np.copyto(dst, a)), (lambda: None)
    copy(src)  # touch both once
    times = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        copy(src)
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


# multiply-adds a step needs at the least, for each sequence, head and token t of its seq_len (the n - 1 keys and the
# query's own term, lengths.full): the score q.x_t (E = D + 1), u_t = v.x_t (E), the weight e = 2^z by a degree-5
# polynomial (6, its range reduction not counted), e.u (1), Z += e (1), T += e x_t and TU += e.u x_t (2E); what is
# done once a sequence and head (the gradient from T, TU) is not counted, so the floor is a lower bound
def step_fmas(settings: dict) -> int:
    """Multiply-adds of one softmax step at ``settings``: P · H · seq_len · (4E + 8), E = in_dim + 1."""
    s = settings
    return s["trainset_size"] * s["head_num"] * s["seq_len"] * (4 * (s["in_dim"] + 1) + 8)


@functools.cache
def fma_rate(double: bool, repeats: int = 15) -> float:
    """Multiply-adds a second of one core in float64 (``double``) or float32 vectors of the kernels' width: the fastest
    of ``repeats`` runs of ``fma_peak.c`` (12 independent chains of vector FMAs), compiled with the kernels' flags
    (``native.isa_flags``: ``$LINATTN_KERNEL_ISA``) for this CPU."""
    src = Path(__file__).with_name("fma_peak.c")
    with tempfile.TemporaryDirectory(prefix="linattn-fma-") as tmp:
        lib = Path(tmp) / "fma_peak.so"
        for flags in native.isa_flags():
            cmd = [*native.compiler(), "-O3", "-ffp-contract=fast", "-shared", "-fPIC",
                   *(["-DUSE_DOUBLE"] * double), str(src), "-o", str(lib), *flags]
            if subprocess.run(cmd, capture_output=True).returncode == 0:
                break
        else:
            raise RuntimeError(f"could not compile {src.name}")
        peak = ctypes.CDLL(str(lib))
    real = ctypes.c_double if double else ctypes.c_float
    peak.fmas.argtypes, peak.fmas.restype = [ctypes.c_long, real, real], ctypes.c_double
    rounds, per_round = 20_000_000, 12 * peak.lanes()
    best = float("inf")
    for _ in range(repeats):
        t = time.thread_time()  # CPU time: a run the scheduler interrupts on a shared machine is not made slower
        peak.fmas(rounds, 0.999, 0.001)
        best = min(best, time.thread_time() - t)
    return rounds * per_round / best


def measure(settings: dict, engine: str, n_steps: int, device: str = "cpu") -> dict:
    """Set-up, first-step and step times of one engine on one setting (meant to run in a fresh process)."""
    torch.set_num_threads(1)
    s = settings
    ds = data.make_datasets(in_dim=s["in_dim"], seq_len=s["seq_len"], trainset_size=s["trainset_size"], seed=s["seed"])
    w = models.init_weights(s["model"], head_num=s["head_num"], in_dim=s["in_dim"], rank=s["rank"], init=s["init"],
                            rng=data.streams(s["seed"], data.INIT))
    net = models.build_model(s["model"], w, softmax=True, device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    data_mb = _peak_mb()
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    step = _objective(engine, ds.train, device)
    setup = time.perf_counter() - t0
    times, cpu = [], []
    for _ in range(n_steps + 1):
        for p in net.parameters():
            p.grad = None
        sync()
        t, c = time.perf_counter(), time.process_time()
        loss = step(net)
        sync()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    step_bytes = getattr(step.__self__, "step_bytes", None)
    floor = stream_floor(step_bytes, device=device) if step_bytes else None
    on_cpu = engine in ("softmax", "softmax-f64") and not device.startswith("cuda")
    rate = fma_rate(engine == "softmax-f64") if on_cpu else None
    return dict(engine=engine, setup_s=setup, first_s=times[0], step_s=statistics.median(times[1:]),
                step_min_s=min(times[1:]), step_cpu_s=statistics.median(cpu[1:]), loss=loss,
                grad=[p.grad.flatten().tolist() for p in net.parameters()],
                device=device, step_bytes=step_bytes, floor_s=floor, fmas=step_fmas(s) if rate else None,
                fma_rate=rate, compute_floor_s=step_fmas(s) / rate if rate else None,
                isa=os.environ.get("LINATTN_KERNEL_ISA") or "native",
                peak_mb=_peak_mb(), data_mb=data_mb, epochs=s["epoch"], load=load,
                kernel=getattr(step.__self__, "kernel", None))


def _in_child(settings: dict, engine: str, n_steps: int, device: str) -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    code = (f"import json, sys; sys.path.insert(0, {here!r}); import bench_softmax as b; "
            f"print(json.dumps(b.measure({settings!r}, {engine!r}, {n_steps}, {device!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _rel(a, b) -> float:
    num = sum((x - y) ** 2 for u, v in zip(a, b) for x, y in zip(u, v)) ** 0.5
    return num / sum(y ** 2 for v in b for y in v) ** 0.5


def bench(quick: bool, device: str = "cpu", large: bool = False, engines=ENGINES) -> list[dict]:
    rows = []
    for label, settings in CASES + ([LARGE] if large else []):
        res = {}
        for e in (LARGE_ENGINES if settings is LARGE[1] else ENGINES):
            if e not in engines or quick and e == "full" and settings is FIG5_S:
                continue
            res[e] = _in_child(settings, e, STEPS[e], device)
        base = res["autograd"]
        for e, r in res.items():
            r.update(case=label, setting=settings["model"], loss_rel_diff=abs(r["loss"] - base["loss"]) / base["loss"],
                     grad_rel_diff=_rel(r["grad"], base["grad"]), vs_autograd=base["step_s"] / r["step_s"],
                     vs_full=res["full"]["step_s"] / r["step_s"] if "full" in res else None,
                     whole_run_s=r["setup_s"] + r["first_s"] + (r["epochs"] - 1) * r["step_s"])
            rows.append(r)
        for r in res.values():
            del r["grad"]
            print_row(r)
    print("\nwhole published-scale Figure 5 (ATTN_M 6001 steps at P 5000 + ATTN_S 10001 steps at P 80000), projected:")
    for e in ENGINES:
        parts = [r for r in rows if r["engine"] == e and r["case"] != LARGE[0]]
        if len(parts) == len(CASES):
            total = sum(r["whole_run_s"] for r in parts)
            print(f"  {e:<14} {_duration(total):>10}   ({' + '.join(_duration(r['whole_run_s']) for r in parts)})")
    return rows


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def print_row(r):
    full = f"  {r['vs_full']:7.0f}× vs full" if r["vs_full"] else ""
    kernel = f" [{r['kernel']}]" if r.get("kernel") else ""
    print(f"{r['case']:<42} {r['engine'] + kernel:<22} setup {r['setup_s']:5.2f} s  first {r['first_s']:6.2f} s  "
          f"step {r['step_s'] * 1e3:9.2f} ms (min {r['step_min_s'] * 1e3:8.2f}; {1 / r['step_s']:7.1f} steps/s)  "
          f"{r['device']}  peak RSS {r['peak_mb']:5.0f} MB "
          f"(data {r['data_mb']:4.0f})  {r['vs_autograd']:6.1f}× vs autograd{full}  "
          f"|Δloss| {r['loss_rel_diff']:.0e}  |Δgrad| {r['grad_rel_diff']:.0e}  load {r['load']:.1f}", flush=True)
    if r.get("floor_s"):
        print(f"{'':<42} {r['engine']:<14} reads {r['step_bytes'] / 1e6:.1f} MB a step: {r['step_s'] * 1e3:.1f} ms vs "
              f"floor {r['floor_s'] * 1e3:.2f} ms (one copy of as many bytes on {r['device']}, median of 7) = "
              f"{r['step_s'] / r['floor_s']:.1f}× the floor", flush=True)
    if r.get("compute_floor_s"):
        print(f"{'':<42} {r['engine']:<14} {r['fmas'] / 1e6:.1f} M multiply-adds a step over "
              f"{r['fma_rate'] / 1e9:.1f} G/s (fma_peak.c, {r['isa']} flags, CPU time): compute floor "
              f"{r['compute_floor_s'] * 1e3:.2f} ms; the step's CPU time {r['step_cpu_s'] * 1e3:.2f} ms is "
              f"{r['step_cpu_s'] / r['compute_floor_s']:.2f}× it (wall {r['step_s'] / r['compute_floor_s']:.2f}×)",
              flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the full-attention ATTN_S step")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--device", default="cpu", help="torch device for every engine (cpu, cuda)")
    ap.add_argument("--large", action="store_true", help="add softmax ATTN_S at P = 10^6")
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help=f"comma-separated engines to time (default: all of {', '.join(ENGINES)}; autograd is always "
                         "timed, as every ratio's base)")
    args = ap.parse_args()
    engines = set(args.engines.split(",")) | {"autograd"}
    if engines - set(ENGINES):
        ap.error(f"--engines: unknown {', '.join(sorted(engines - set(ENGINES)))} (choose from {', '.join(ENGINES)})")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device here")
    rows = bench(args.quick, args.device, args.large, engines)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
