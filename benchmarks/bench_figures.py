"""Each figure's CPU against the CPU of its training steps, from a finished build's records (on demand, not in CI).

    .venv/bin/python benchmarks/bench_figures.py                       # _build/figures/paper and _build/runs
    .venv/bin/python benchmarks/bench_figures.py --build DIR --runs DIR --json out.json
    LINATTN_KERNEL_ISA=avx2 .venv/bin/python benchmarks/bench_figures.py   # step times of the kernels without AVX-512

Run it after a cold build (``linattn figures --preset paper`` into an empty run store, as ``make book`` does): a
figure's CPU is the runner's record (``.run.json``'s ``cpu_seconds`` in ``<build>/<name>/``: the notebook's kernel
start, imports, training, predictions, plotting, writing), and the runs it trained are those the run store's log
(``<runs>/trainings.jsonl``) names it for, each with its steps and engine (``<runs>/<key>/run.json``). A figure's
training CPU is Σ steps × the step time of the run's engine at the run's settings, measured here, in this process:
the CPU (user + system, all threads) of gradient descent in ``linattn.run`` at the same settings for ``few + n``
steps less that for ``few`` steps, over n (what a run pays once cancels out), the median of three, after a first run
to warm up (a kernel's compile or load, lazy imports): n = 20 softmax steps, or for the engines whose steps are
microseconds the run's own count (at least 1000), raised to about 0.3 s of steps where the run has as many. Runs
alike but for seed and length share one measurement. A figure's data CPU is what its runs spend outside training
(drawing their data and test sets, for reference draws from the authors' random stream, reading the data's moments,
their initial weights), measured by training them all for a few steps as the run store does (those alike in shape in
one ``run_many``, which draws shared data and test sets once). A gradient-flow run (``dynamics = flow``) has no
fixed step: its recorded training time is taken as is, marked ``flow``, and its data counted as any run's. Printed
per figure: total, training steps, data, the rest (total − steps − data), the issue's ratio total / (steps + 2 s),
which the book's target holds ≤ 1.5, the same with the data counted as training (a run with microsecond steps on
80000 drawn sequences is mostly its draw), and as a cross-check the training time the build's runs recorded
(``train_time_s``, wall; a batch of runs trained together may record the batch's time on each). The step times use
the kernels of this process's setting (``$LINATTN_KERNEL_ISA``), while the totals are the build's: measure on the
machine and setting of the build, and on idle cores (under load a step's CPU grows).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLACK_S = 2.0  # the allowance for a notebook's kernel start and imports
FEW = {"softmax": 3, "exact": 20, "population": 20, "autograd": 3}  # steps before the measured ones
MEASURED = {"softmax": 20, "autograd": 10}  # measured steps; the others' steps are microseconds: the run's own count


def trained_runs(runs: Path) -> dict[str, list[dict]]:
    """Each figure's trained runs (the last log line of each key): settings, engine, steps, recorded train time."""
    last = {}
    for line in (runs / "trainings.jsonl").read_text().splitlines():
        entry = json.loads(line)
        last[entry["key"]] = entry
    by_figure = defaultdict(list)
    for key, entry in last.items():
        info = json.loads((runs / key / "run.json").read_text())
        by_figure[entry["figure"]].append(dict(settings=info["settings"], engine=info["engine"],
                                               steps=entry["trained_steps"], train_s=info["train_time_s"],
                                               snapshot_every=info.get("snapshot_every", 0)))
    return by_figure


def _class(run: dict) -> str:
    s = {k: v for k, v in run["settings"].items() if k not in ("seed", "epoch")}
    return json.dumps([s, run["engine"], run["snapshot_every"]], sort_keys=True)


def _settings(run: dict) -> dict:
    """The run's settings as RunConfig takes them (run.json writes an infinite set size as "inf")."""
    return {k: float(v) if v in ("inf", "Infinity") else v for k, v in run["settings"].items()}


def _runnable(run: dict) -> dict:
    """``run``'s settings to train here: its figure hands a run with a cov_matrix its data, drawn here from streams
    (a step, and the draw, cost the same)."""
    return dict(_settings(run), **({"draws": "streams"} if run["settings"]["cov_matrix"] is not None else {}))


def _config(run: dict, steps: int):
    """``run``'s RunConfig at ``steps`` steps (a flow run's listed steps kept up to that end)."""
    import linattn

    settings = dict(_runnable(run), epoch=steps)
    if isinstance(settings.get("record"), list):
        settings["record"] = [k for k in settings["record"] if k <= steps] or None
    return linattn.RunConfig(**settings)


def timed_runs(runs: list[dict], steps: int) -> tuple[float, float]:
    """(CPU of training ``runs`` at ``steps`` steps each as the figure does, CPU of their training alone: gradient
    descent or flow) (user + system, all threads of this process). The runs alike in shape and engine train in one
    ``linattn.run_many``, as the run store trains a figure's missing runs: those drawing the same data, or the same
    test sets, draw them once."""
    import linattn
    from linattn.training import batch, experiment

    spent = []
    trainers = {name: getattr(experiment, name) for name in ("gradient_descent", "gradient_flow")}

    def timed(train):
        def timed_train(*args, **kwargs):
            t = time.process_time()
            try:
                return train(*args, **kwargs)
            finally:
                spent.append(time.process_time() - t)
        return timed_train

    groups = defaultdict(list)
    for run in runs:
        groups[json.dumps([run["settings"].get(k) for k in batch.SHARED] + [run["engine"]])].append(run)
    for name, train in trainers.items():
        setattr(experiment, name, timed(train))
    start = time.process_time()
    try:
        for group in groups.values():
            every = min(group[0]["snapshot_every"], steps)
            linattn.run_many([_config(run, steps) for run in group], snapshot_every=every)
    finally:
        for name, train in trainers.items():
            setattr(experiment, name, train)
    return time.process_time() - start, sum(spent)


def data_cpu(runs: list[dict], repeats: int = 3) -> float:
    """CPU seconds a figure's ``runs`` spend outside training (gradient descent or flow): drawing their data (the
    authors' random stream, for reference draws) and test sets, reading the data's moments, their initial weights,
    their engines: the median of ``repeats`` trainings of a few steps each, after one to warm up."""
    def once() -> float:
        whole, training = timed_runs(runs, min(FEW[run["engine"]] for run in runs))
        return whole - training

    once()
    return statistics.median(once() for _ in range(repeats))


def step_cpu(run: dict, repeats: int = 3, measured_s: float = 0.3) -> float:
    """CPU seconds of one step of ``run``'s engine at its settings (differences of two runs, see the module)."""
    def cpu(steps: int) -> float:  # of gradient descent alone (the set-up, data and moments, left out)
        return timed_runs([run], steps)[1]

    few = FEW[run["engine"]]
    cpu(few)  # warms up: a kernel's compile or load, lazy imports
    n = MEASURED.get(run["engine"])
    if n is None:
        n = max(1000, run["steps"] - few)
    else:  # at least measured_s of steps, where the run has them
        n = max(n, min(run["steps"], round(measured_s / max(cpu(few + n) - cpu(few), 1e-9) * n)))
    return max(0.0, statistics.median((cpu(few + n) - cpu(few)) / n for _ in range(repeats)))


def figure_rows(build: Path, runs: Path, verbose: bool = False) -> list[dict]:
    by_figure = trained_runs(runs)
    step_of: dict[str, float] = {}
    rows = []
    for record in sorted(build.glob("*/.run.json")):
        name = record.parent.name
        total = json.loads(record.read_text())["cpu_seconds"]
        training, flow, n_runs, recorded = 0.0, 0.0, 0, 0.0
        for run in by_figure.get(name, []):
            n_runs += 1
            recorded += run["train_s"]
            if run["settings"]["dynamics"] == "flow":  # no fixed step: the recorded integration time
                flow += run["train_s"]
            else:
                c = _class(run)
                if c not in step_of:
                    step_of[c] = step_cpu(run)
                training += run["steps"] * step_of[c]
                if verbose:
                    print(f"  {run['engine']:<10} {run['settings']['model']:<5} {run['steps']:6d} steps × "
                          f"{step_of[c] * 1e6:9.1f} µs", file=sys.stderr)
        training += flow
        setup = data_cpu(by_figure[name]) if by_figure.get(name) else 0.0
        rows.append(dict(figure=name, total_s=total, training_s=training, flow_s=flow, runs=n_runs, recorded_s=recorded,
                         setup_s=setup, rest_s=total - training - setup, ratio=total / (training + SLACK_S),
                         ratio_with_data=total / (training + setup + SLACK_S)))
        print_row(rows[-1])
    return rows


def print_row(r: dict) -> None:
    flow = f"  (flow {r['flow_s']:.1f} s recorded)" if r["flow_s"] else ""
    print(f"{r['figure']:<26} total {r['total_s']:6.1f} s  steps {r['training_s']:6.1f} s ({r['runs']:3d} runs)  "
          f"data {r['setup_s']:5.1f} s  rest {r['rest_s']:6.1f} s  total/(steps + {SLACK_S:.0f} s) {r['ratio']:5.2f}"
          f"{' >' if r['ratio'] > 1.5 else '  '}  total/(steps + data + {SLACK_S:.0f} s) {r['ratio_with_data']:4.2f}"
          f"{' >' if r['ratio_with_data'] > 1.5 else '  '}  (recorded training {r['recorded_s']:5.1f} s){flow}",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", type=Path, default=ROOT / "_build" / "figures" / "paper",
                    help="the built figures (<build>/<name>/.run.json)")
    ap.add_argument("--runs", type=Path, default=ROOT / "_build" / "runs", help="the build's run store")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--verbose", action="store_true", help="print each run's steps and step time (stderr)")
    args = ap.parse_args()
    for where, what in ((args.build, "--build"), (args.runs / "trainings.jsonl", "--runs")):
        if not where.exists():
            ap.error(f"{what}: {where} does not exist (build the figures first)")
    sys.path.insert(0, str(ROOT))
    rows = figure_rows(args.build, args.runs, args.verbose)
    totals = {k: sum(r[k] for r in rows) for k in ("total_s", "training_s", "setup_s", "rest_s")}
    print(f"{'all':<26} total {totals['total_s']:6.1f} s  steps {totals['training_s']:6.1f} s {'':>11} "
          f"data {totals['setup_s']:5.1f} s  rest {totals['rest_s']:6.1f} s")
    for key, what in (("ratio", "steps + 2 s"), ("ratio_with_data", "steps + data + 2 s")):
        over = [r["figure"] for r in rows if r[key] > 1.5]
        print(f"over 1.5 × ({what}): {len(over)} of {len(rows)}: {', '.join(over) or 'none'}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
