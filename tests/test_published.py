"""The published-vs-reproduced comparisons and the commands printed on the figure pages."""

import math

import numpy as np
import pytest

from linattn.companion import published
from linattn.cli import build_parser, config_from_args
from linattn.companion.commands import train_command
from linattn.config import RunConfig


def test_gap_is_zero_inside_a_range_and_signed_outside():
    assert published.gap(500, (376, 578)) == 0
    assert published.gap(600, (376, 578)) == 22
    assert published.gap(300, (376, 578)) == -76
    assert published.gap(4950, (3605, 4940, 5734)) == 10  # nearest of several crossings
    assert published.gap(0.13, 0.14) == pytest.approx(-0.01)
    assert math.isnan(published.gap(float("nan"), (1, 2)))


def test_fig3a_comparison_has_a_row_per_seed_and_drop_and_counts_missing_drops():
    drops = {s: np.array([450.0, 700.0, 1100.0, 5000.0]) for s in range(5)}
    drops[5] = np.array([450.0, 700.0, 1100.0, np.nan])  # no fourth drop
    table, rows = published.fig3a_comparison(drops, window=10001)
    assert len(rows) == 6 * 4 + 1
    assert rows[-1]["reproduced"] == 1 and rows[-1]["paper"] == published.FIG3A_STILL_ON_M3
    fourth = [r for r in rows if "drop 4" in r["quantity"]]
    assert fourth[0]["abs_error"] == 60 and fourth[-1]["reproduced"] is None  # 5000 vs the nearest, 4940
    assert "| drop 1" in table._repr_markdown_()


def test_fig1b_comparison_reads_crossings_from_the_curve():
    step = np.arange(3000)
    curve = np.where(step < 970, 1.0, 0.135)  # one sharp drop at step 970
    mlp = np.where(step < 1010, 1.0, 0.135)  # 40 steps later: more than a pixel (29 steps)
    _, rows = published.fig1b_comparison(curve, mlp)
    crossings = [r["reproduced"] for r in rows[:2]]
    assert crossings == [970, 970]
    assert rows[0]["abs_error"] == 0 and rows[1]["abs_error"] == 30  # 0.7: 960–980; 0.5: 1000–1050
    assert rows[-1]["reproduced"] == 40 and rows[-1]["abs_error"] == 40 - published.PIXEL_STEPS


@pytest.mark.parametrize("cfg", [
    RunConfig(model="attnS", head_num=5, init=1e-2, lr=0.02, epoch=10001, trainset_size=80000, seed=3,
              init_scheme="dec2024"),
    RunConfig(model="mlp", cubic_feat=True, head_num=8, init=1e-6, white_cov=True, icl=0.4, testset_size=64),
    RunConfig(trainset_size=None, draws="streams", spectrum=(0.5, 0.3, 0.1, 0.1), normalize="mean", vary_len=True),
])
def test_train_command_runs_the_same_configuration(cfg):
    words = train_command(cfg).split()
    assert words[:2] == ["linattn", "train"]
    assert config_from_args(build_parser().parse_args(words[1:])) == cfg


def test_fig14_comparison_shows_steps_in_full():
    """A drop near step 1075 reads as a whole step in the page's table, not "1.08e+03"; losses keep three digits."""
    t = np.arange(5000.0)
    train = 0.13 + 0.87 / (1 + np.exp((t - 1075) / 30))
    curves = {c: {"train": train, "iwl": np.full(5000, 1.0), "icl": np.full(5000, 0.5)} for c in published.FIG14}
    table, _ = published.fig14_comparison(curves)
    shown = {row[0]: row[2] for row in table.rows}
    step = shown["c = 0.4: training loss drops at step"]
    assert step.isdigit() and abs(int(step) - 1075) <= 1, step
    assert shown["c = 0.4: training loss at the end"] == "0.13"
