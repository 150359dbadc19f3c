"""The population page's rules on constructed cases: the standard error of a loss at zero weights
(``uncertainty.origin_loss_error``) against the spread of many drawn sets, two curves compared at matched levels
(``loss_curves.drop_lag``: flat, transit, shoulder, a drop only one makes), the page's rest rule (``saddle_stays``: a
flat rest, a transit, a shoulder off the level, a slow slope, a drifting rest either side of the cut) and the page's
sentences on the plateaus at ℳ₀ and at the fitted saddles, on the saddles passed through, on how far each curve got,
on each finite set beside population GD (one drawn set per size), on each set's rests beside its own loss at the
theory's weights (``own_verdict``, ``own_words``) and on gradient descent beside the flow, each from a dataset built by
hand.
The claims recomputed from the figure's own dataset are in test_claims_drop_alignment_subspace
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


def _ds(curves: dict, *, sizes: dict, origin_error: dict, epoch: int = 3000, levels=LEVELS, rest_se=None,
        rest_optimism=None, rest_own=None):
    """A population dataset built by hand: each curve's loss over the steps, its P, its error at ℳ₀ and (by curve,
    one value for every saddle or one per saddle; NaN where not given) the error of its training loss, the fit's drop
    and its training loss at the theory's weights at each saddle."""
    import xarray as xr

    names = list(curves)
    loss = np.stack([curves[c] for c in names])
    stays = [page.saddle_stays(L, levels) for L in loss]
    by_saddle = [np.full(len(levels), (given or {}).get(c, np.nan)) for given in (rest_se, rest_optimism, rest_own)
                 for c in names]
    return xr.Dataset(
        {"train_loss": (("curve", "step"), loss),
         "plateau_level": (("curve", "m"), [level for level, _ in stays]),
         "rest_drift": (("curve", "m"), [drift for _, drift in stays]),
         "origin_error": ("curve", [origin_error[c] for c in names]),
         "rest_se": (("curve", "m"), by_saddle[:len(names)]),
         "rest_optimism": (("curve", "m"), by_saddle[len(names):2 * len(names)]),
         "rest_own": (("curve", "m"), by_saddle[2 * len(names):]),
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
    assert page.origin_words(started_low) == "No curve of this run rests flat at ℳ₀."


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


# ---------------------------------------------------------------- the page's rest rule: flat, or only passing through


def _pieces(*parts):
    """A curve joined from pieces: each (level or (start, end) of a straight stretch, steps), joined by falls 2 steps
    wide (steeper than any stretch, so a slow stretch in a band is slow beside its drops)."""
    out = []
    for level, n in parts:
        a, b = level if isinstance(level, tuple) else (level, level)
        out.append(np.linspace(a, b, n))
    y = np.concatenate(out)
    step = np.arange(y.size, dtype=float)
    edges = np.cumsum([n for _, n in parts])[:-1]
    smooth = y.copy()
    for e in edges:  # a logistic fall across each join instead of a jump
        lo, hi = max(e - 12, 0), min(e + 12, y.size)
        w = 1 / (1 + np.exp(-(step[lo:hi] - e + 0.5) / 2.0))
        smooth[lo:hi] = y[e - 1] * (1 - w) + y[e] * w + (y[lo:hi] - np.where(step[lo:hi] < e, y[e - 1], y[e]))
    return smooth


BAND_M1 = np.subtract(*lc.rest_bands(LEVELS)[::-1])[1]  # the width of ℳ₁'s band


def test_a_flat_rest_reads_its_level_and_a_staircase_rests_flat_at_every_saddle():
    level, drift = page.saddle_stays(_staircase([400, 900, 1700, 2400]), LEVELS)
    np.testing.assert_allclose(level, LEVELS, atol=1e-6)
    assert (drift <= 1e-3 * BAND_M1).all()
    shifted = _pieces((1.0, 400), (0.62, 500), (0.35, 800), (0.2, 800))  # ℳ₁ 0.020 above its level
    level, drift = page.saddle_stays(shifted, LEVELS)
    assert level[1] == pytest.approx(0.62, abs=1e-6) and drift[1] < 1e-3
    assert page.gap_or_drift(level[1] - LEVELS[1], drift[1], 1) == "0.020 above L(ℳ₁)"


def test_a_transit_and_a_shoulder_off_the_level_are_passages_with_no_level():
    """A drop from L(ℳ₀) straight to L(ℳ₂) crosses ℳ₁'s band in a few steps; a pause at 0.70, in ℳ₁'s band but 0.10
    above its level, is a shoulder on the way: neither has a rest at ℳ₁, so neither a level nor a drift."""
    transit = _pieces((1.0, 400), (0.35, 800), (0.2, 800))
    shoulder = _pieces((1.0, 400), (0.70, 300), (0.35, 800), (0.2, 800))
    for curve in (transit, shoulder):
        level, drift = page.saddle_stays(curve, LEVELS)
        assert np.isnan(level[1]) and np.isnan(drift[1])
        assert np.isfinite(level[[0, 2, 3]]).all()


def test_a_slow_slope_through_a_band_is_a_passage_whatever_its_pace_beside_its_drops():
    """0.70 → 0.53 evenly over 600 steps, with falls of 2 steps either side: it is slow beside its drops (the shared
    rule finds a rest), but it drifts the whole band: the page reads no level there and says it passes through."""
    slope = _pieces((1.0, 400), ((0.70, 0.53), 600), (0.35, 800), (0.2, 800))
    m_of, _ = lc.saddle_rests(slope, LEVELS)
    assert 1 in m_of  # the shared rule alone takes it for a rest
    level, drift = page.saddle_stays(slope, LEVELS)
    assert np.isnan(level[1]) and drift[1] > 0.5 * BAND_M1
    ds = _ds({"P = 100": slope}, sizes={"P = 100": 100}, origin_error={"P = 100": 0.0})
    said = page.passes_words(ds)
    assert said.startswith("Every curve passes through ℳ₁ without resting flat there (P = 100 slows in ℳ₁'s band")
    assert f"drifts {drift[1]:.2g} there, {drift[1] / BAND_M1:.2g} of its width" in said
    assert "ℳ₁" not in page.fitted_words(ds)  # no level read at ℳ₁


@pytest.mark.parametrize("share, flat", [(0.08, True), (0.12, False)])
def test_a_drifting_rest_is_flat_below_the_cut_and_its_gap_is_read_only_beyond_its_drift(share, flat):
    """A rest at ℳ₁ drifting evenly by a share of its band over 600 steps, centred 0.001 above L(ℳ₁): flat below
    FLAT_SHARE (0.1), a passage above it; flat, its gap is smaller than its drift, so it is said to lie within it."""
    fall = share * BAND_M1
    mid = LEVELS[1] + 0.001
    curve = _pieces((1.0, 400), ((mid + fall / 2, mid - fall / 2), 600), (0.35, 800), (0.2, 800))
    level, drift = page.saddle_stays(curve, LEVELS)
    assert drift[1] == pytest.approx(fall, rel=0.1)
    assert np.isfinite(level[1]) == flat
    if flat:
        gap = level[1] - LEVELS[1]
        assert abs(gap) < drift[1] and not page.resolved(gap, drift[1])
        assert page.gap_or_drift(gap, drift[1], 1) == f"within its drift ({drift[1]:.1g}) of L(ℳ₁)"


def test_the_fitted_and_passes_sentences_on_a_built_dataset():
    """Population GD rests flat everywhere at the theory's levels; P = 100 rests 0.02 below L(ℳ₂) and slopes through
    ℳ₁; P = 1000 drifts at ℳ₁ but within the cut: the farthest each is known to lie, and who passes where."""
    gd = _staircase([400, 900, 1700])
    slope = _pieces((1.0, 400), ((0.70, 0.53), 600), (0.33, 800), (0.2, 1200))
    drifting = _pieces((1.0, 400), ((0.611, 0.591), 600), (0.35, 800), (0.2, 1200))
    ds = _ds({page.GD: gd, "P = 100": slope, "P = 1000": drifting},
             sizes={page.GD: np.inf, "P = 100": 100, "P = 1000": 1000}, origin_error=dict.fromkeys([page.GD, "P = 100",
                                                                                                   "P = 1000"], 0.0))
    fitted = page.fitted_words(ds)
    assert fitted.startswith("Where a curve rests flat at a saddle with a direction fitted, the farthest")
    assert "P = 100: 0.020 below L(ℳ₂)" in fitted
    d = float(ds.rest_drift.sel(curve="P = 1000", m=1))
    assert f"P = 1000: within its drift ({d:.1g}) of L(ℳ₁)" in fitted
    passes = page.passes_words(ds)
    assert passes.startswith("P = 100 passes through ℳ₁ without resting flat there (P = 100 slows")
    assert "population GD" not in passes and "P = 1000" not in passes
    assert page.passages(ds)[page.GD] == ([], [])
    flat_only = ds.sel(curve=[page.GD])
    assert page.passes_words(flat_only) == "Every curve rests flat at each saddle it leaves."
    assert "nan" not in fitted + passes


@pytest.mark.parametrize("se, optimism, said, verdict", [
    (0.02, 0.001, "its standard error 0.02, within the band of 2 (0.04)", "agrees"),
    (0.006, 0.01, "its standard error 0.006, below the band of 2 (0.012) but within the fit's further drop (0.01)",
     "cannot tell"),
    (0.006, 0.002, "its standard error 0.006, beyond the band of 2 (0.012) and the fit's further drop (0.002)",
     "differs")], ids=["within the band", "within the fit's drop", "beyond both"])
def test_a_finite_sets_gap_at_a_fitted_saddle_is_judged_by_its_error_and_the_fits_drop(se, optimism, said, verdict):
    """P = 100 rests 0.02 below L(ℳ₂): within two standard errors it agrees; beyond them but within the fit's further
    drop (a training loss below its level) it cannot tell; beyond both it differs, and only then does the bias
    sentence say a finite set's shift is resolved. The population curve has no error and no verdict."""
    slope = _pieces((1.0, 400), ((0.70, 0.53), 600), (0.33, 800), (0.2, 1200))
    ds = _ds({page.GD: _staircase([400, 900, 1700]), "P = 100": slope}, sizes={page.GD: np.inf, "P = 100": 100},
             origin_error={page.GD: 0.0, "P = 100": 0.0}, rest_se={"P = 100": se},
             rest_optimism={"P = 100": optimism})
    assert page.fitted_verdicts(ds) == {"P = 100": (se, 2 * se, optimism, verdict)}
    assert f"P = 100: 0.020 below L(ℳ₂), {said}." in page.fitted_words(ds)
    bias = page.bias_words(ds)
    assert ("cannot be resolved at these sizes" in bias) == (verdict != "differs")
    assert ("beyond both is resolved" in bias) == (verdict == "differs")
    # the same gap above the level: the fit's drop, which only lowers a training loss, widens nothing
    above = ds.assign(plateau_theory=("m", LEVELS - np.r_[0, 0, 0.04, 0, 0]))
    assert page.fitted_verdicts(above)["P = 100"][3] == ("agrees" if verdict == "agrees" else "differs")


def test_a_gap_within_its_drift_is_judged_at_the_drift():
    """A flat rest whose gap is no larger than its drift is known only to within the drift: the verdict is on the
    drift, on the gap's side (here within the band of a large error, beyond that of a tiny one)."""
    drifting = _pieces((1.0, 400), ((0.611, 0.591), 600), (0.35, 800), (0.2, 1200))
    ds = _ds({"P = 1000": drifting}, sizes={"P = 1000": 1000}, origin_error={"P = 1000": 0.0},
             rest_se={"P = 1000": 0.01}, rest_optimism={"P = 1000": 0.0})
    drift = float(ds.rest_drift.sel(curve="P = 1000", m=1))
    assert page.fitted_verdicts(ds)["P = 1000"][3] == ("agrees" if drift <= 0.02 else "differs")
    tiny = ds.assign(rest_se=ds.rest_se * 1e-4)
    assert page.fitted_verdicts(tiny)["P = 1000"][3] == "differs"
    # no error measured (a population curve): no verdict, and the bias sentence quotes none
    none = ds.assign(rest_se=ds.rest_se * np.nan)
    assert page.fitted_verdicts(none) == {} and "Each error above" not in page.bias_words(none)


def test_a_finite_sets_saddle_errors_are_its_training_loss_at_the_theorys_weights():
    """On a drawn training set (whitened task vectors): the mean per-sequence loss at the theory's weights of M_m is
    that of the predictor x_qᵀ A_m b (A_m = Σ_{d≤m} (λ_d c_d)⁻¹ e_d e_dᵀ, b the mean of y_n x_n over the context),
    its error the whitened set's (tests/whitened.py), and the fit's drop 0 at ℳ₀ and ≥ 0 past it."""
    from types import SimpleNamespace as Run

    from whitened import whitened_se

    from linattn import theory

    P, seq_len = 3000, 17
    seqs = linattn.sample_tasks(COV, P, seq_len, seed=4)
    data = Run(train=seqs, cov=COV)
    se, optimism, own = page.saddle_errors(Run(config=Run(trainset_size=P, seq_len=seq_len, normalize="sum"),
                                               datasets=data), 4)
    X, y = np.asarray(seqs.X, dtype=np.float64), np.asarray(seqs.y, dtype=np.float64)
    N, D = seq_len - 1, 4
    b = (X[:, :-1, :D] * X[:, :-1, D:]).mean(axis=1)
    per = np.column_stack([(y - np.einsum("pd,de,pe->p", X[:, -1, :D],
                                          theory.pcr_weights(COV, N, m, normalize="mean"), b)) ** 2
                           for m in range(D + 1)])
    np.testing.assert_allclose(se, whitened_se(per, X), rtol=1e-6)
    np.testing.assert_allclose(own, per.mean(axis=0), rtol=1e-9)  # the set's own loss at the theory's weights
    assert optimism[0] == 0 and (optimism[1:] > 0).all() and (optimism < se).all()
    pop = page.saddle_errors(Run(config=Run(trainset_size=None), datasets=None), 4)
    assert all(np.isnan(v).all() for v in pop)


# ---------------------------------------------------------------- each finite set beside population GD


def test_the_finite_sentence_gives_each_sets_drops_and_lags_in_steps_and_percent():
    gd = _staircase([400, 900, 1700])
    ds = _ds({page.GD: gd, "P = 100": _staircase([380, 990, 2550]), "P = 1000": _staircase([400, 950, 2000, 2700]),
              page.FLOW: _staircase([398, 897, 1690])},
             sizes={page.GD: np.inf, "P = 100": 100, "P = 1000": 1000, page.FLOW: np.inf},
             origin_error=dict.fromkeys([page.GD, "P = 100", "P = 1000", page.FLOW], 0.0))
    lags = page.finite_lags(ds)
    assert list(lags) == ["P = 100", "P = 1000"]  # the finite sets only, in the run's order
    np.testing.assert_array_equal(lags["P = 100"].lag[:3], [-20, 90, 850])
    said = page.finite_words(ds)
    assert said.startswith("Each finite training set beside population GD, from the same initial weights")
    assert ("P = 100 makes its drops to ℳ₁, ℳ₂ and ℳ₃ at steps 380, 990 and 2550, population GD at 400, 900 and "
            "1700, so P = 100 lags population GD by −20, 90 and 850 steps (−5, 10 and 50 % of population GD's step; "
            "negative: ahead of it)") in said
    assert ("P = 1000 makes its drops to ℳ₁, ℳ₂ and ℳ₃ at steps 400, 950 and 2000, so P = 1000 lags population GD by "
            "0, 50 and 300 steps (0, 6 and 18 % of population GD's step); P = 1000 alone makes the drop to ℳ₄, at "
            "step 2700") in said
    assert "flow" not in said and "nan" not in said and ".0" not in said
    # each size is one drawn set: the sentence says the lags are that set's, with no spread across sets
    assert said.endswith(". Each size is one drawn training set, so the lags are that set's: their spread across "
                         "sets is not measured.")
    one = page.finite_words(ds.sel(curve=[page.GD, "P = 100"]))
    assert one.endswith(". P = 100 is one drawn training set, so the lags are that set's: their spread across sets "
                        "is not measured.")
    assert page.finite_words(ds.sel(curve=[page.GD, page.FLOW])) == ""


# ---------------------------------------------------------------- the bias against a set's own loss


@pytest.mark.parametrize("bias, drift, optimism, verdict", [
    (-0.0027, 0.0008, 0.0029, page.ABOUT_FIT),  # below by about the fit's drop
    (-0.004, 0.0001, 0.002, page.ABOUT_FIT),  # twice the drop: still about it
    (-0.001, 0.0001, 0.002, page.ABOUT_FIT),  # half the drop: still about it
    (-0.0041, 0.0001, 0.002, page.MORE_THAN_FIT),
    (-0.0009, 0.0001, 0.002, page.LESS_THAN_FIT),
    (-0.001, 0.0001, 0.0, page.MORE_THAN_FIT),  # nothing to fit, yet below
    (0.003, 0.001, 0.003, page.ABOVE),  # the fit only lowers a training loss
    (-0.00022, 0.00064, 0.00021, None),  # within the rest's drift: not read
    (0.0005, 0.0005, 0.001, None)],  # a gap equal to the drift is not beyond it
    ids=["about", "twice", "half", "more", "less", "no drop", "above", "within drift", "at drift"])
def test_a_rests_bias_against_its_own_loss_is_judged_beside_the_fits_drop(bias, drift, optimism, verdict):
    assert page.own_verdict(bias, drift, optimism) == verdict


def _own_ds():
    """Population GD at the theory's levels; P = 100 rests 0.02, 0.02 and 0.01 below them at ℳ₁ … ℳ₃, P = 1600 0.002,
    0.001 and 0.0005 below; each set's own loss at the theory's weights is the theory's level (so the bias is the
    gap), its fit's drops as given."""
    gd = _staircase([400, 900, 1700])
    small = _staircase([400, 900, 1700], levels=LEVELS - np.array([0, 0.02, 0.02, 0.01, 0]))
    large = _staircase([400, 900, 1700], levels=LEVELS - np.array([0, 0.002, 0.001, 0.0005, 0]))
    return _ds({page.GD: gd, "P = 100": small, "P = 1600": large},
               sizes={page.GD: np.inf, "P = 100": 100, "P = 1600": 1600},
               origin_error={page.GD: 0.0, "P = 100": 0.01, "P = 1600": 0.003},
               rest_optimism={"P = 100": np.array([0, 0.02, 0.015, 0.03, 0.03]),
                              "P = 1600": np.array([0, 0.002, 0.002, 0.0005, 0.0005])},
               rest_own={"P = 100": LEVELS, "P = 1600": LEVELS})


def test_the_own_sentence_states_each_rests_bias_beside_the_fits_drop_and_what_two_sizes_show():
    ds = _own_ds()
    gaps = page.own_gaps(ds)
    assert list(gaps) == ["P = 100", "P = 1600"]  # the finite sets only, at the saddles with a direction fitted
    assert list(gaps["P = 100"]) == [1, 2, 3]
    np.testing.assert_allclose([gaps["P = 100"][m][0] for m in (1, 2, 3)], [-0.02, -0.02, -0.01], atol=1e-6)
    assert [gaps["P = 100"][m][3] for m in (1, 2, 3)] == [page.ABOUT_FIT, page.ABOUT_FIT, page.LESS_THAN_FIT]
    assert [gaps["P = 1600"][m][3] for m in (1, 2, 3)] == [page.ABOUT_FIT] * 3
    said = page.own_words(ds)
    assert said.startswith("A set's own loss, its training loss at the theory's weights of the saddle, is taken on "
                           "the very sequences its rest is, so no sampling error lies between the two. ")
    fit = "by which fitting the theory's directions to the set lowers it there"
    assert (f"P = 100 rests 0.020 and 0.020 below its own loss at ℳ₁ and ℳ₂, about the 0.020 and 0.015 {fit}; and "
            f"0.010 below it at ℳ₃, less than 1/2 of the 0.030 {fit}. P = 1600 rests 0.0020, 0.0010 and 0.00050 below "
            f"its own loss at ℳ₁, ℳ₂ and ℳ₃, about the 0.0020, 0.0020 and 0.00050 {fit}.") in said
    ratios = page.shrink_ratios(ds, gaps)
    assert list(ratios) == [("P = 100", "P = 1600")]
    np.testing.assert_allclose([ratios["P = 100", "P = 1600"][m] for m in (1, 2, 3)],
                               [(10, 10), (20, 7.5), (20, 60)], rtol=1e-3)
    assert said.endswith(" From P = 100 to P = 1600 (16 times the sequences) the bias at ℳ₁, ℳ₂ and ℳ₃ is 10, 20 "
                         "and 20 times smaller and the fit's drop 10, 8 and 60 times smaller: what these two sizes "
                         "show, one drawn set each.")
    assert "nan" not in said
    # one set: no sizes to set side by side; no finite set, or none resting flat past ℳ₀: nothing said
    assert page.own_words(ds.sel(curve=[page.GD, "P = 1600"])).endswith("there.")
    assert page.own_words(ds.sel(curve=[page.GD])) == ""
    only0 = _ds({"P = 100": np.full(3000, LEVELS[0])}, sizes={"P = 100": 100}, origin_error={"P = 100": 0.01},
                rest_optimism={"P = 100": 0.0}, rest_own={"P = 100": LEVELS})
    assert page.own_gaps(only0) == {} and page.own_words(only0) == ""
    # a set with no fit's drop at a saddle is not set beside another size there (no ratio to take)
    no_drop = ds.assign(rest_optimism=ds.rest_optimism.where(ds.m != 1, 0.0))
    assert list(page.shrink_ratios(no_drop, page.own_gaps(no_drop))["P = 100", "P = 1600"]) == [2, 3]


def test_a_rest_above_its_own_loss_or_within_its_drift_is_said_so_and_not_set_beside_another_size():
    """P = 1000 drifts at ℳ₁ by more than its gap to its own loss (within its drift), rests 0.010 above its own loss at
    ℳ₂ (the fit cannot raise a loss) and 0.050 below at ℳ₃, more than twice the fit's drop; P = 100 lies 0.010 below
    at every saddle: ℳ₃ alone has both sets below, and only there are the two sizes set side by side."""
    drifting = _pieces((1.0, 400), ((0.611, 0.591), 600), (0.35, 800), (0.2, 1200))
    ds = _ds({"P = 100": _staircase([400, 900, 1700], levels=LEVELS - 0.01), "P = 1000": drifting},
             sizes={"P = 100": 100, "P = 1000": 1000}, origin_error={"P = 100": 0.0, "P = 1000": 0.0},
             rest_optimism={"P = 100": 0.01, "P = 1000": 0.01},
             rest_own={"P = 100": LEVELS, "P = 1000": np.array([1.0, 0.605, 0.34, 0.25, 0.12])})
    drift = float(ds.rest_drift.sel(curve="P = 1000", m=1))
    gaps = page.own_gaps(ds)["P = 1000"]
    assert abs(gaps[1][0]) < drift and [gaps[m][3] for m in (1, 2, 3)] == [None, page.ABOVE, page.MORE_THAN_FIT]
    said = page.own_words(ds)
    assert (f"P = 1000 rests within its drift ({drift:.1g}) of its own loss at ℳ₁; 0.010 above it at ℳ₂, where "
            "fitting can only lower a training loss; and 0.050 below it at ℳ₃, more than 2 times the 0.010 by which "
            "fitting the theory's directions to the set lowers it there.") in said
    # P = 100 and P = 1000 both lie below at ℳ₃: that one saddle is set side by side
    assert page.shrink_ratios(ds, page.own_gaps(ds)) == {("P = 100", "P = 1000"): {3: pytest.approx((0.2, 1.0))}}
    assert said.endswith("the bias at ℳ₃ is 5 times larger and the fit's drop about as large: what these two sizes "
                         "show, one drawn set each.")
