"""How fast the `linattn` command answers when it does no work: `--help`, `--version`, `train --help` and a refused
`train --seed -1`, each against `python -c "import numpy"` (the floor: every command needs numpy), as the median
wall time of several fresh interpreters and its ratio to the floor. The target (issue 38): within 2x the floor.

    python benchmarks/bench_startup.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c 'import numpy'": [sys.executable, "-c", "import numpy"],
    "python -c 'import linattn'": [sys.executable, "-c", "import linattn"],
    "linattn --help": [sys.executable, "-m", "linattn", "--help"],
    "linattn --version": [sys.executable, "-m", "linattn", "--version"],
    "linattn train --help": [sys.executable, "-m", "linattn", "train", "--help"],
    "linattn train --seed -1 (refused)": [sys.executable, "-m", "linattn", "train", "--seed", "-1"],
}
TARGET = 2.0


def wall_time(cmd: list[str]) -> float:
    """Seconds from start to exit of one fresh process (its output discarded)."""
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def measure(repeat: int) -> dict[str, float]:
    """The median wall time of each command; the commands take turns, so a change of load hits them alike."""
    times = {name: [] for name in COMMANDS}
    for name, cmd in COMMANDS.items():
        wall_time(cmd)  # warm the file cache and the bytecode
    for _ in range(repeat):
        for name, cmd in COMMANDS.items():
            times[name].append(wall_time(cmd))
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="runs of each command (default 7; the median is shown)")
    args = ap.parse_args()
    medians = measure(args.repeat)
    floor = medians["python -c 'import numpy'"]
    print(f"median of {args.repeat} fresh processes each; floor: python -c 'import numpy' = {floor * 1e3:.0f} ms")
    print(f"{'command':40s} {'ms':>7s} {'x floor':>8s}")
    for name, t in medians.items():
        flag = "" if name.startswith("python") or t <= TARGET * floor else f"  (above {TARGET:g}x)"
        print(f"{name:40s} {t * 1e3:7.0f} {t / floor:8.2f}{flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
