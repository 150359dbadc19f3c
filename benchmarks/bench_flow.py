"""Benchmark of gradient flow on the phase diagram's cells (run on demand, not in CI).

    .venv/bin/python benchmarks/bench_flow.py                  # paper preset, every 6th of the 60 cells (~1 min)
    .venv/bin/python benchmarks/bench_flow.py --preset quick --every 1

Each chosen cell of ``beyond_phase_diagram`` (ATTN_M, H = 8, D = 4, 10⁹ steps at the paper preset, LSODA with the
loss's Hessian, the page's rtol) is integrated twice from the same weights on the same exact engine, in one process
at one thread: ``numpy`` — ``gradient_flow`` as it runs (the 200 moving weights, ``flow.BilinearLoss``'s gradient
and Hessian) — and ``torch`` — the same model without its declarations (``fixed_entries``, ``bilinear_map``), so
every one of its 240 weights is integrated through the engine's torch step and ``flow.loss_hessian``, the path
every other model takes. It prints each cell's CPU seconds of the integration alone (draws and moments excluded),
their ratio, and the largest relative difference of the recorded test losses between the two (the integrator's
tolerance allows ~3e-4).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from linattn import draw, models, objectives
from linattn.companion import presets
from linattn.companion.figures import beyond_phase_diagram as page
from linattn.training.flow import gradient_flow


class _AllWeights(models.AttnM):
    """ATTN_M without its declarations: the generic flow (every weight, the engine's torch step)."""

    def fixed_entries(self):
        return [None, None]

    def bilinear_map(self):
        return None


def _flow(cfg, cls):
    """(CPU seconds of gradient_flow, recorded test losses (2, steps)) of the run ``cfg`` with model class ``cls``."""
    datasets, init = draw(cfg)
    net = cls(torch.as_tensor(init["W_KQ"]), torch.as_tensor(init["W_V"]))
    train, tests = objectives.build(cfg, net, datasets, "cpu")
    start = time.process_time()
    h = gradient_flow(net, train, lr=cfg.lr, epoch=cfg.epoch, tests=tests, record=cfg.recorded_steps(),
                      jacobian=True, rtol=cfg.flow_rtol)
    return time.process_time() - start, np.stack([h.test_iwl, h.test_icl])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="paper", choices=["paper", "quick"])
    ap.add_argument("--every", type=int, default=6, help="take every k-th cell (default 6)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    runs = page.runs(presets.resolve(page.NAME, args.preset))
    cells = [label for label in runs if label.startswith(page.CELL)][::args.every]
    _flow(runs[cells[0]], models.AttnM)  # imports and first calls
    fast, slow = [], []
    print(f"{'cell':<24} {'numpy s':>8} {'torch s':>8} {'ratio':>6} {'max rel diff':>13}")
    for label in cells:
        cfg = runs[label]
        (t_fast, a), (t_slow, b) = _flow(cfg, models.AttnM), _flow(cfg, _AllWeights)
        fast.append(t_fast)
        slow.append(t_slow)
        print(f"{label:<24} {t_fast:8.3f} {t_slow:8.3f} {t_slow / t_fast:6.1f} {np.max(np.abs(a - b) / b):13.1e}")
    print(f"median CPU a cell: numpy {statistics.median(fast):.3f} s, torch {statistics.median(slow):.3f} s "
          f"({statistics.median(slow) / statistics.median(fast):.1f}×); total {sum(fast):.2f} s against "
          f"{sum(slow):.2f} s over {len(cells)} cells")


if __name__ == "__main__":
    main()
