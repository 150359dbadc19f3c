"""``loss_curves.count_drops`` on constructed curves: a single drop, a drop + shoulder + drop, a drop + slow
stretch + a fall still under way at the end, a flat curve, a fall that only slows, and a small wiggle."""

from __future__ import annotations

import numpy as np
import pytest

from linattn import loss_curves

STEP = np.arange(6000)


def _sigmoid(centre: float, width: float) -> np.ndarray:
    return 1 / (1 + np.exp((STEP - centre) / width))


def test_a_single_drop_is_one_drop_and_settled():
    d = loss_curves.count_drops(0.13 + 0.87 * _sigmoid(1000, 30))
    assert len(d) == 1 and d.settled and d.shares == pytest.approx([1.0])
    assert d.steps[0] == pytest.approx(1000, abs=2) and d.pause_steps.size == 0


def test_drop_shoulder_drop_is_two_drops_parted_at_the_shoulder():
    y = 0.13 + 0.5 * _sigmoid(1000, 30) + 0.37 * _sigmoid(2500, 30)
    d = loss_curves.count_drops(y)
    assert len(d) == 2 and d.settled
    assert d.steps == pytest.approx([1000, 2500], abs=2)
    assert d.shares == pytest.approx([0.5 / 0.87, 0.37 / 0.87], abs=0.01)
    assert 1100 < d.pause_steps[0] < 2400 and d.pause_losses[0] == pytest.approx(0.5, abs=0.01)
    assert d.pause_dips[0] < loss_curves.DROP_DIP


def test_a_second_fall_still_under_way_at_the_end_counts_and_the_run_has_not_settled():
    """Drop, a slow stretch, then a second fall whose middle is 60 steps before the end: no plateau follows it, yet
    it is a drop, and the run has not settled."""
    y = 0.13 + 0.5 * _sigmoid(1000, 30) + 0.37 * _sigmoid(5940, 60)
    d = loss_curves.count_drops(y)
    assert len(d) == 2 and not d.settled
    assert d.steps[1] > 5800


def test_one_drop_cut_off_by_the_end_has_not_settled():
    d = loss_curves.count_drops(0.13 + 0.87 * _sigmoid(5600, 300))
    assert len(d) == 1 and not d.settled


def test_a_flat_curve_has_no_drop():
    noise = np.random.default_rng(0).standard_normal(STEP.size)
    d = loss_curves.count_drops(1 + 1e-4 * noise)
    assert len(d) == 0 and d.settled


def test_a_fall_that_only_slows_is_one_drop():
    """Two overlapping falls whose rate dips to well above a third of the peaks between them: one drop."""
    y = 0.13 + 0.45 * _sigmoid(1000, 100) + 0.42 * _sigmoid(1300, 100)
    d = loss_curves.count_drops(y)
    assert len(d) == 1


def test_a_small_second_fall_is_no_drop():
    """A fall of 5 % of the whole after a rest is below DROP_SHARE: it joins the drop before it."""
    y = 0.1 + 0.95 * _sigmoid(1000, 30) + 0.05 * _sigmoid(3000, 30)
    d = loss_curves.count_drops(y)
    assert len(d) == 1 and d.shares == pytest.approx([1.0])


def test_the_rule_in_words_names_its_constants():
    text = loss_curves.drop_rule_words()
    assert f"{loss_curves.DROP_SHARE:.0%}" in text and "1/3" in text and "settled" in text
