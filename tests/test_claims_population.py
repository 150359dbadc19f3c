"""The population page's rules on constructed cases: the standard error of a loss at zero weights
(``uncertainty.origin_loss_error``) against the spread of many drawn sets, two curves compared at matched levels
(``loss_curves.drop_lag``: flat, transit, shoulder, a drop only one makes), and the page's sentences on the plateaus at
ℳ₀, on how far each curve got and on gradient descent beside the flow, each from a dataset built by hand. The claims
recomputed from the figure's own dataset are in test_claims_drop_alignment_subspace
(test_population_gap_claims_by_a_second_route)."""

import json

import numpy as np
import pytest

import linattn
from linattn.analysis import loss_curves as lc
from linattn.companion import uncertainty
from linattn.companion.figures import beyond_population as page

COV = np.diag([0.4, 0.3, 0.2, 0.1])
LEVELS = np.array([1.0, 0.6, 0.35, 0.2, 0.12])


# ---------------------------------------------------------------- the standard error at ℳ₀, against drawn sets


@pytest.mark.parametrize("whitened", [True, False], ids=["training set", "fresh sequences"])
def test_the_origin_error_is_the_spread_of_the_loss_at_zero_weights_over_drawn_sets(whitened):
    """2000 sets of P = 200 sequences: the spread of their mean y² across the sets is the closed form's error (the
    spread of 2000 draws is itself known to about 1.6 %, hence 6 %). A training set's whitened task vectors leave
    less error than independent ones, by √(1 − 2 tr Λ²/(2 (tr Λ)² + 6 tr Λ²))."""
    P = 200
    means = np.array([np.mean(linattn.sample_tasks(COV, P, 9, seed=s, centre=whitened).y ** 2) for s in range(2000)])
    se = uncertainty.origin_loss_error(COV, P, whitened=whitened)
    assert means.std(ddof=1) == pytest.approx(se, rel=0.06)
    t1, t2 = np.trace(COV), np.trace(COV @ COV)
    ratio = uncertainty.origin_loss_error(COV, P, whitened=True) / uncertainty.origin_loss_error(COV, P, whitened=False)
    assert ratio == pytest.approx(np.sqrt(1 - 2 * t2 / (2 * t1 ** 2 + 6 * t2)))
    # four times the sequences, half the error
    assert uncertainty.origin_loss_error(COV, 4 * P, whitened=whitened) == pytest.approx(se / 2)
    with pytest.raises(ValueError, match="n must be"):
        uncertainty.origin_loss_error(COV, 0, whitened=whitened)


# ---------------------------------------------------------------- two curves at matched levels


def _staircase(drops, n=3000, levels=LEVELS, width=15.0):
    """A loss resting at each level and falling to the next at the given steps (logistic, centred half a step
    before each, so that the loss is first below the midpoint at that step)."""
    step = np.arange(n, dtype=float)
    loss = np.full(n, levels[0])
    for d, (a, b) in zip(drops, zip(levels[:-1], levels[1:])):
        loss -= (a - b) / (1 + np.exp(-(step - d + 0.5) / width))
    return loss


def test_a_transit_shifted_by_a_few_steps_is_a_lag_not_a_gap_in_level():
    ref = _staircase([400, 900, 1700])
    late = _staircase([405, 903, 1706])
    lag = lc.drop_lag(late, ref, LEVELS)
    np.testing.assert_array_equal(lag.lag[:3], [5, 3, 6])
    assert np.isnan(lag.lag[3]) and np.isnan(lag.steps[3]) and np.isnan(lag.reference_steps[3])  # no drop to M_4
    rested = np.isfinite(lag.level_gap)
    assert rested[:4].all() and np.abs(lag.level_gap[rested]).max() < 1e-9  # same levels: no gap at matched levels
    assert np.abs(late - ref).max() > 0.02  # while at one step the two differ by far more on the falls
    # a step axis other than the index: the steps are read off it
    steps = 10 * np.arange(ref.size)
    np.testing.assert_array_equal(lc.drop_lag(late, ref, LEVELS, steps).lag[:3], [50, 30, 60])


def test_flat_curves_have_no_drops_and_a_drop_only_one_makes_has_no_lag():
    flat = np.full(2000, LEVELS[0])
    lag = lc.drop_lag(flat, flat, LEVELS)
    assert np.isnan(lag.lag).all() and np.isnan(lag.steps).all()
    assert lag.level_gap[0] == 0 and np.isnan(lag.level_gap[1:]).all()
    one = lc.drop_lag(_staircase([300]), flat, LEVELS)
    assert one.steps[0] == 300 and np.isnan(one.reference_steps[0]) and np.isnan(one.lag[0])


def test_a_shoulder_between_two_saddles_is_no_level_to_compare():
    """A curve that pauses at 0.49, between L(M_1) = 0.6 and L(M_2) = 0.35 and in neither's band, rests at neither:
    no level gap at M_1, where the reference rests; its drops are still timed where it passes each midpoint."""
    ref = _staircase([400, 900, 1700])
    shoulder = _staircase([400, 900, 1700], levels=np.array([1.0, 0.49, 0.35, 0.2, 0.12]))
    lag = lc.drop_lag(shoulder, ref, LEVELS)
    assert np.isnan(lag.level_gap[1]) and abs(lag.level_gap[0]) < 1e-9 and abs(lag.level_gap[2]) < 1e-9
    assert np.isfinite(lag.lag[:3]).all() and lag.lag[0] < 0  # the deeper first fall passes 0.8 sooner
    assert lag.steps[1] == np.argmax(shoulder < (LEVELS[1] + LEVELS[2]) / 2) and lag.lag[2] == 0


# ---------------------------------------------------------------- the page's sentences on constructed datasets


def _ds(curves: dict, *, sizes: dict, origin_error: dict, epoch: int = 3000, levels=LEVELS):
    """A population dataset built by hand: each curve's loss over the steps, its P and its error at ℳ₀."""
    import xarray as xr

    names = list(curves)
    loss = np.stack([curves[c] for c in names])
    return xr.Dataset(
        {"train_loss": (("curve", "step"), loss),
         "plateau_level": (("curve", "m"), [lc.saddle_levels(L, levels) for L in loss]),
         "origin_error": ("curve", [origin_error[c] for c in names]),
         "directions_learned": ("curve", [lc.directions_learned(L, levels) for L in loss]),
         "final_loss": ("curve", loss[:, -1]), "plateau_theory": ("m", levels)},
        coords={"curve": names, "step": np.arange(loss.shape[1]), "m": np.arange(len(levels)),
                "trainset_size": ("curve", [sizes[c] for c in names])},
        attrs=dict(settings=json.dumps(dict(epoch=epoch))))


def test_the_origin_sentence_states_each_gap_in_standard_errors_and_its_band():
    below = _staircase([400, 900, 1700]) - 0.03  # rests 0.03 below L(M_0)
    ds = _ds({page.GD: _staircase([400, 900, 1700]), "P = 1000": below, "P = 100": below - 0.005},
             sizes={page.GD: np.inf, "P = 1000": 1000, "P = 100": 100},
             origin_error={page.GD: 0.0, "P = 1000": 0.02, "P = 100": 0.05})
    said = page.origin_words(ds)
    assert "P = 1000 lies 0.030 below L(ℳ₀), 1.5 standard errors, within the band of 2" in said
    assert "P = 100 lies 0.035 below L(ℳ₀), 0.7 standard errors, within the band of 2" in said
    assert "exact population loss has no sampling error" in said and "population GD" in said
    far = ds.assign(origin_error=("curve", [0.0, 0.01, 0.05]))
    assert "P = 1000 lies 0.030 below L(ℳ₀), 3.0 standard errors, beyond the band of 2" in page.origin_words(far)
    # the exact curve alone: no band, no count of standard errors
    alone = page.origin_words(ds.sel(curve=[page.GD]))
    assert alone.startswith("At ℳ₀, the exact population loss") and "standard errors" not in alone
    started_low = _ds({page.GD: np.full(100, 0.3)}, sizes={page.GD: np.inf}, origin_error={page.GD: 0.0})
    assert page.origin_words(started_low) == "No curve of this run rests at ℳ₀."


def test_the_reach_sentence_never_claims_a_level_the_run_did_not_reach():
    three = _staircase([400, 900, 1700])
    all4 = _staircase([400, 900, 1700, 2500])
    flat = np.full(3000, LEVELS[0])
    sizes = {page.GD: np.inf, "P = 500": 500, page.FLOW: np.inf}
    none = _ds({page.GD: three, "P = 500": three - 0.01, page.FLOW: flat}, sizes=sizes,
               origin_error=dict.fromkeys(sizes, 0.0), epoch=3001)
    said = page.reach_words(none)
    assert said.startswith("Within the 3001 steps no curve makes the last drop, to ℳ₄ (L(ℳ₄) = 0.120)")
    assert "population GD and P = 500 end after the drop to ℳ₃, at 0.200 and 0.190" in said
    assert "population flow ends without a drop, at 1.000" in said
    some = _ds({page.GD: all4, "P = 500": three, page.FLOW: all4}, sizes=sizes, origin_error=dict.fromkeys(sizes, 0.0))
    said = page.reach_words(some)
    assert "population GD and population flow make the last drop, to ℳ₄" in said
    assert "P = 500 ends after the drop to ℳ₃" in said and "no curve" not in said
    every = _ds({page.GD: all4}, sizes={page.GD: np.inf}, origin_error={page.GD: 0.0})
    assert page.reach_words(every) == "Within the 3000 steps every curve makes the last drop, to ℳ₄."
    assert page.model_reach(none) is None and "longer run" not in page.reach_words(none)  # no settings: not said


@pytest.mark.parametrize("heads, rank, most", [(2, 1, 2), (3, 1, 3), (4, 1, None), (2, 2, None), (5, 1, None)])
def test_a_model_with_too_few_heads_is_said_to_stop_short_of_the_last_saddle(heads, rank, most):
    """H heads of rank R learn at most H·R of the D = 4 directions: a run that stops at ℳ₂ with H = 2 is said to stop
    there for good; with H·R ≥ D nothing is added."""
    three = _staircase([400, 900])
    ds = _ds({page.GD: three}, sizes={page.GD: np.inf}, origin_error={page.GD: 0.0})
    ds.attrs["runs"] = json.dumps({page.GD: dict(head_num=heads, rank=rank)})
    assert page.model_reach(ds) == most
    said = page.reach_words(ds)
    assert ("Nor can a longer run" in said) == (most is not None)
    if most is not None:
        assert f"at most {most} of the 4 directions" in said and f"no saddle past ℳ{'₀₁₂₃₄'[most]}" in said


def test_the_flow_sentence_compares_at_matched_levels_in_whole_steps():
    gd, flow = _staircase([405, 903, 1706, 2400]), _staircase([400, 900, 1700])
    ds = _ds({page.GD: gd, page.FLOW: flow}, sizes={page.GD: np.inf, page.FLOW: np.inf},
             origin_error={page.GD: 0.0, page.FLOW: 0.0})
    said = page.flow_words(ds)
    assert "GD makes its drops to ℳ₁, ℳ₂ and ℳ₃ at steps 405, 903 and 1706, the flow at 400, 900 and 1700" in said
    assert "gradient descent lags the flow by 5, 3 and 6 steps" in said and "negative" not in said
    assert "gradient descent alone makes the drop to ℳ₄, at step 2400" in said
    assert "nan" not in said and ".0" not in said
    ahead = ds.assign(train_loss=(("curve", "step"), np.stack([_staircase([398, 900, 1700]), flow])))
    assert "lags the flow by −2, 0 and 0 steps (negative: ahead of it)" in page.flow_words(ahead)
    assert page.flow_words(ds.sel(curve=[page.GD])) == ""
    rows = {r["key"]: r for r in page.numbers(ds)}
    first = rows["drop_step.population_gd.d1"]
    assert (first["reproduced"], first["theory"]) == (405, 400)
    assert "drop_step.population_gd.d4" not in rows  # the flow makes no drop to ℳ₄: no step to set beside
