"""The one module of uncertainty (linattn.companion.uncertainty), checked against Monte-Carlo draws: the standard
error measured on the sequences scatters as the means do, a band of two errors holds equal quantities 95 % of the
time, and a difference from an independent sample needs both errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from linattn.companion.uncertainty import (
    AGREES,
    CANNOT_TELL,
    COVERAGE,
    DIFFERS,
    difference_band,
    per_sequence_losses,
    spread,
    standard_error,
    systematic_offset,
    training_loss_margin,
    verdict,
)


def _losses(rng, shape, kurtosis_source="gauss"):
    """Per-sequence squared residuals: Gaussian residuals (κ = 3) or heavy-tailed ones (a Gaussian times a random
    scale, κ > 3)."""
    r = rng.standard_normal(shape)
    if kurtosis_source == "heavy":
        r = r * np.sqrt(rng.exponential(1.0, shape))
    return r ** 2


@pytest.mark.parametrize("tails", ["gauss", "heavy"])
def test_the_measured_standard_error_is_the_scatter_of_the_means(tails):
    """2000 samples of 2000 sequences: the standard error measured on each sample agrees with the scatter of the
    sample means within 5 %, whatever the tails (a formula with κ = 3 would be wrong by √(κ−1)/√2 on heavy ones)."""
    rng = np.random.default_rng(1)
    x = _losses(rng, (2000, 2000), tails)
    measured = np.array([standard_error(row) for row in x])
    assert np.median(measured) == pytest.approx(x.mean(axis=1).std(ddof=1), rel=0.05)
    if tails == "heavy":  # κ = 3·E[s²] = 6 here: L·√(2/P) undercounts by √(5/2)
        assert np.median(measured) > 1.4 * x.mean() * math.sqrt(2 / 2000)


def test_a_band_of_two_errors_holds_equal_quantities_95_percent_of_the_time():
    """Two independent test sets of the same model (the same mean): judged in 2·√(se₁² + se₂²) they agree about 95 %
    of the time; judged with one error only (2·se₁) they would 'differ' about 16 % of the time."""
    rng = np.random.default_rng(2)
    a, b = _losses(rng, (4000, 500), "heavy"), _losses(rng, (4000, 500), "heavy")
    ses_a = a.std(axis=1, ddof=1) / math.sqrt(500)
    ses_b = b.std(axis=1, ddof=1) / math.sqrt(500)
    d = a.mean(axis=1) - b.mean(axis=1)
    both = np.mean([verdict(x, difference_band(sa, sb)) == AGREES for x, sa, sb in zip(d, ses_a, ses_b)])
    one = np.mean([verdict(x, difference_band(sa)) == AGREES for x, sa in zip(d, ses_a)])
    assert 0.93 < both < 0.97
    assert 0.80 < one < 0.88


def test_a_real_difference_of_four_errors_differs_almost_always():
    """Means apart by 4·√2·se: the band of two errors calls it 'differs' in most samples (power ≈ 98 %)."""
    rng = np.random.default_rng(3)
    a = _losses(rng, (2000, 1000), "gauss")
    se = math.sqrt(2 / 1000)
    b = _losses(rng, (2000, 1000), "gauss") + 4 * math.sqrt(2) * se
    verdicts = [verdict(x.mean() - y.mean(), difference_band(standard_error(x), standard_error(y)))
                for x, y in zip(a, b)]
    assert verdicts.count(DIFFERS) / len(verdicts) > 0.95


def test_verdicts_on_constructed_cases():
    """agrees inside the band (either sign, on its edge), cannot tell beyond it but inside the margin, differs
    beyond both; no band: cannot tell; no difference (the event did not happen): differs."""
    assert verdict(0.02, 0.02) == AGREES and verdict(-0.02, 0.02) == AGREES
    assert verdict(0.03, 0.02, unresolved=0.01) == CANNOT_TELL and verdict(0.031, 0.02, unresolved=0.01) == DIFFERS
    assert verdict(0.03, 0.02) == DIFFERS and verdict(0.01, None) == CANNOT_TELL
    assert verdict(None, 1.0) == DIFFERS and verdict(float("nan"), 1.0) == DIFFERS
    assert difference_band(0.003, 0.004, resolution=0.01) == pytest.approx(0.01 + COVERAGE * 0.005)
    assert difference_band(None, 0.004) == pytest.approx(0.008) and difference_band() == 0.0
    assert training_loss_margin(0.01) == pytest.approx(2 * math.sqrt(2) * 0.01) and training_loss_margin(None) is None


def test_offset_and_spread():
    """The shared offset is the mean of the differences, its scatter their standard deviation, its error that over
    √n; NaN is skipped; fewer than two values give None."""
    o = systematic_offset([-0.008, -0.010, -0.009, np.nan])
    assert o.value == pytest.approx(-0.009) and o.scatter == pytest.approx(0.001) and o.n == 3
    assert o.standard_error == pytest.approx(0.001 / math.sqrt(3))
    assert systematic_offset([0.1]) is None and spread([3.0]) is None
    assert spread([1.0, 3.0, np.nan]) == pytest.approx(math.sqrt(2))
    with pytest.raises(ValueError, match="two or more"):
        standard_error([1.0])


def test_per_sequence_losses_average_to_the_recorded_loss():
    """The per-sequence losses of a run's training set at its initial weights average to the first recorded
    training loss; those of a test set at the final weights to within a step of the last recorded test loss (the
    history records the loss before each step). Bad arguments are refused by name."""
    import linattn

    cfg = linattn.RunConfig(model="attnM", in_dim=3, head_num=2, seq_len=12, trainset_size=60, testset_size=50,
                            epoch=30, lr=1e-2, init=1e-2, seed=4)
    r = linattn.run(cfg)
    start = per_sequence_losses(r, "train", "init")
    assert start.shape == (60,) and start.mean() == pytest.approx(r.history.train_loss[0], rel=1e-10)
    end = per_sequence_losses(r, "test_icl")
    assert end.shape == (50,) and end.mean() == pytest.approx(r.history.test_icl[-1], rel=0.02)
    with pytest.raises(ValueError, match="which"):
        per_sequence_losses(r, "validation")
    with pytest.raises(ValueError, match="weights"):
        per_sequence_losses(r, "train", "middle")


def test_an_offset_along_the_scale_is_recovered_from_noisy_readings():
    """Readings off by 0.009 − 0.0065 × level plus a pixel-sized scatter (sd 0.002), 40 at a time: the fitted line
    comes back within its stated standard error 95 % of the time (Monte-Carlo over 500 sets)."""
    rng = np.random.default_rng(5)
    hits = 0
    for _ in range(500):
        level = rng.uniform(0.05, 2.2, 40)
        d = 0.009 - 0.0065 * level + rng.normal(0, 0.002, 40)
        o = systematic_offset(d, level)
        hits += abs(o.value - 0.009) <= 2 * o.standard_error
        assert o.at(1.0) == pytest.approx(o.value + o.slope)
    assert 0.92 < hits / 500 < 0.98
