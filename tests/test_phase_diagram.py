"""The phase diagram of finished runs (``linattn.companion.figures.beyond_phase_diagram``) and the population moments
of the mixed task it trains P = ∞ on (``objectives.population.mixture_moments``), at tiny sizes the paper never used."""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest
import torch
from numpy.polynomial.hermite_e import hermegauss

xr = pytest.importorskip("xarray")

from whitened import whitened_se  # noqa: E402

import linattn  # noqa: E402
from linattn import RunConfig, draw, models  # noqa: E402
from linattn.companion.figures import beyond_phase_diagram as pd_  # noqa: E402
from linattn.companion.figures.common import phase, phase_text  # noqa: E402
from linattn.objectives import Exact  # noqa: E402
from linattn.objectives.population import mixture_moments, population_moments  # noqa: E402

COV = np.array([[0.6, 0.15], [0.15, 0.4]])
W_FIX = np.array([1.1, -0.6])


# ---------------------------------------------------------------- the population moments of the mixed task

def _quadrature(seq_len: int, *, noise: bool):
    """E[y²], E[yT], E[TTᵀ] of the sequences with the task W_FIX (context labels W_FIXᵀx, or N(0, 1) noise) by
    Gauss–Hermite quadrature over every Gaussian variable: exact for these polynomials, independent of the closed
    form."""
    D = COV.shape[0]
    nodes, wts = hermegauss(4)
    wts = wts / wts.sum()
    n_noise = seq_len - 1 if noise else 0
    grid = np.array(list(itertools.product(range(4), repeat=D * seq_len + n_noise)))
    u, weight = nodes[grid], np.prod(wts[grid], axis=1)
    x = u[:, :D * seq_len].reshape(-1, seq_len, D) @ np.linalg.cholesky(COV).T
    labels = x @ W_FIX
    if noise:
        labels[:, :-1] = u[:, D * seq_len:]
    X = np.concatenate([x, labels[..., None]], axis=-1)
    y = X[:, -1, D].copy()
    X[:, -1, D] = 0.0
    T = models.attention_features(torch.as_tensor(X), 1.0).numpy()
    return weight @ y**2, T.T @ (weight * y), T.T @ (weight[:, None] * T)


@pytest.mark.parametrize("icl", [0.0, 0.3])
def test_mixture_moments_equal_exact_quadrature(icl):
    mom = mixture_moments("attention", COV, 3, icl=icl, w_fix=W_FIX, normalize="sum")
    yy, yT, TT = _quadrature(3, noise=icl == 0.0)
    if icl > 0:  # the fresh tasks' share: the icl = 1 moments, themselves checked by quadrature in test_engines
        fresh = population_moments("attention", COV, 3, normalize="sum")
        yy, yT, TT = ((1 - icl) * a + icl * b for a, b in zip((yy, yT, TT), (fresh.yy, fresh.yT.numpy(),
                                                                               fresh.TT.numpy())))
    assert abs(mom.yy - yy) < 1e-12
    np.testing.assert_allclose(mom.yT.numpy(), yT, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(mom.TT.numpy(), TT, rtol=1e-10, atol=1e-12)


def test_mixture_moments_at_icl_1_are_the_population_moments():
    one = mixture_moments("attention", COV, 5, icl=1.0, w_fix=W_FIX, normalize="mean")
    ref = population_moments("attention", COV, 5, normalize="mean")
    assert one.yy == ref.yy and torch.equal(one.TT, ref.TT) and torch.equal(one.yT, ref.yT)
    with pytest.raises(ValueError, match="icl"):
        mixture_moments("attention", COV, 5, icl=1.5, w_fix=W_FIX, normalize="sum")


# ---------------------------------------------------------------- the population engine at c < 1

TINY = dict(model="attnM", head_num=3, in_dim=2, seq_len=8, init=1e-3, lr=0.01, epoch=200, white_cov=True,
            testset_size=300, draws="streams", init_scheme="jan2025", seed=3)


def test_the_population_engine_trains_the_mixture_whose_moments_large_P_approaches():
    """At c < 1 the population engine trains on the mixture's moments with the run's own fixed task (drawn from the
    streams): a drawn training set's moments approach them as P grows (the error falls like 1/√P), and the run's
    training loss at its initial weights is that quadratic form."""
    cfg = RunConfig(**dict(TINY, trainset_size=None, icl=0.3, epoch=5))
    res = linattn.run(cfg, progress=False)
    assert res.engine == "population" and res.history.test_icl is not None  # its test sets, from the streams
    mix = phase.triple(mixture_moments("attention", res.datasets.cov, cfg.seq_len, icl=0.3, w_fix=res.datasets.w_fix,
                                     normalize="sum"))
    model = models.build_model("attnM", res.init, dtype=torch.float64)
    m0 = model.combined().detach().numpy()
    assert res.history.train_loss[0] == pytest.approx(phase.quadratic_loss(m0, mix), rel=1e-10)
    errors = []
    for P in (500, 8000):
        big = draw(RunConfig(**dict(TINY, trainset_size=P, icl=0.3)))[0]
        TT = Exact.from_data(model, big.train).moments.TT.numpy()
        errors.append(np.abs(TT - mix[0]).max() / np.abs(mix[0]).max())
    assert errors[1] < errors[0] / 2
    with pytest.raises(linattn.ConfigError, match="icl"):
        RunConfig(**dict(TINY, trainset_size=None, icl=0.3, draws="reference", testset_size=0)).validate()


def test_gradient_descent_follows_a_cell_of_the_page():
    """A cell is the core's flow on GD's step axis: GD at the run's learning rate from the same weights and data
    (the same run with dynamics="gd") drops at the same step, give or take GD's shift, and agrees on the plateau
    and after the drop."""
    cfg = RunConfig(**dict(TINY, trainset_size=80, icl=0.5, epoch=600))
    gd = linattn.run(cfg, progress=False)
    steps = tuple(range(0, 600))
    flow = linattn.run(dataclasses.replace(cfg, dynamics="flow", record=steps, flow_rtol=pd_.FLOW_RTOL))
    losses, ref = flow.history.train_loss[1:], gd.history.train_loss[1:]
    assert losses[-1] < 0.5 * losses[0]
    level = (ref[0] + ref[-1]) / 2
    assert abs(np.argmax(losses < level) - np.argmax(ref < level)) <= 3
    step = np.arange(1, 600)
    plateau, after = step < 30, step > 200
    np.testing.assert_allclose(losses[plateau | after], ref[plateau | after], rtol=0.01)


# ---------------------------------------------------------------- the phase diagram

def _settings(**more):
    return {"attn_m": dict(TINY, trainset_size=40), "icl_values": [0.0, 0.05, 0.2, 1.0], "trainset_sizes": [40],
            "epoch_extended": 10**5, "workers": 1, **more}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("runs")
    mp.setenv("LINATTN_RUNS_DIR", str(root))
    try:
        S = _settings(attn_s=dict(model="attnS", head_num=2, rank=1, in_dim=2, seq_len=8, lr=0.05, epoch=50,
                                  trainset_size=50, init_scheme="jan2025"), inits_s=[0.05], seeds=[0],
                      column_sizes=[6, 12, 24])
        ds = pd_.compute(S)
        again = pd_.compute(S)  # read back from the store: the sparse records (the horizon among them) as stored
        xr.testing.assert_identical(ds.drop_vars("cell_seconds"), again.drop_vars("cell_seconds"))
        yield ds, root
    finally:
        mp.undo()


def test_every_cell_is_a_stored_run_that_settles_at_the_theorys_end_point(tiny):
    ds, root = tiny
    trainings = [json.loads(line) for line in (root / "trainings.jsonl").read_text().splitlines()]
    # 4 c × (40, ∞) and the column's 3 cells
    assert sum(t["model"] == "attnM" and t["trained_steps"] == 10**5 for t in trainings) == 11
    assert sum(t.get("trained_steps") == 0 for t in trainings) == 11 and not any("quarantined" in t for t in trainings)
    assert list(ds.trainset_size.values) == [40.0, np.inf] and ds.sizes["icl"] == 4
    assert bool(ds.settled.all()) and float(max(ds.settle_iwl.max(), ds.settle_icl.max())) < ds.tolerance
    unique = ~ds.flat
    assert bool(unique.sel(trainset_size=np.inf).all())  # the population column always has one end point
    for k in ("train_loss", "test_iwl", "test_icl"):
        gap = abs(ds[f"final_{k}"] - ds[f"limit_{k}"]) / ds[f"limit_{k}"]
        assert float(gap.where(unique).max()) < 1e-4, k
        assert bool(ds[f"limit_{k}"].where(ds.flat).isnull().all())  # no end point is claimed where it is not one
    assert int(ds.fresh.sel(icl=0.05, trainset_size=40)) == 2 and np.isinf(ds.fresh.sel(trainset_size=np.inf)).all()
    assert ds.step.values[0] == TINY["epoch"] // 10 and ds.epoch in ds.step.values and ds.step.values[-1] == 10**5


def _per_sequence_se(ds, P, c, which):
    """The SE of a cell's final test loss on ``which`` recomputed from its stored run: the features of the test set
    (drawn again from the streams) times the final combined weight (not the model's forward pass); the in-context
    set's task vectors are whitened, their part projected out (``tests/whitened.py``), the in-weight set's sequences
    independent, std/√n."""
    from linattn.companion.runstore import RunStore

    res = RunStore().get_many([pd_.runs(_settings())[f"cell c={c:g} P={phase_text.size_label(P)}"]])[0]
    test = getattr(draw(RunConfig(**dict(TINY, trainset_size=2)))[0], which)  # the streams: every cell's test set
    m = res.model.combined().detach()
    per = ((models.attention_features(torch.as_tensor(test.X), 1.0) @ m).numpy() - test.y) ** 2
    return float(whitened_se(per, test.X)) if which == "test_icl" else np.sqrt(np.var(per, ddof=1) / per.size)


def test_the_verdicts_are_banded_brackets_on_the_c_positive_branch(tiny):
    ds, _ = tiny
    mid, z = ds.midpoint, ds.band_z
    for P in ds.trainset_size.values:
        cell = ds.sel(trainset_size=P, icl=ds.icl.values[ds.icl.values > 0])
        wins = (cell.final_test_icl < mid - z * cell.se_test_icl).values
        loses = (cell.final_test_icl > mid + z * cell.se_test_icl).values
        lo, hi = float(ds.switch_lo.sel(trainset_size=P)), float(ds.switch_hi.sel(trainset_size=P))
        if np.isfinite(hi):  # wins clearly from hi on, for good; lo the last cell below that clearly loses
            assert wins[cell.icl.values >= hi].all() and not wins[cell.icl.values < hi][-1:].all()
            below = loses & (cell.icl.values < hi)
            assert (np.isnan(lo) and not below.any()) or lo == cell.icl.values[below][-1]
        else:
            assert not wins[-1]
        assert not bool(ds.iwl_wins.sel(trainset_size=P, icl=0.0))  # c = 0 is another recipe
    assert bool((ds.iwl_wins == ((ds.final_test_iwl < mid - z * ds.se_test_iwl) & (ds.icl > 0))).all())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LINATTN_RUNS_DIR", str(tiny[1]))
        for (P, c), which in itertools.product(((40.0, 0.2), (np.inf, 1.0)), ("test_icl", "test_iwl")):
            assert float(ds[f"se_{which}"].sel(trainset_size=P, icl=c)) == pytest.approx(
                _per_sequence_se(ds, P, c, which), rel=1e-6)
    base = RunConfig(**dict(TINY, trainset_size=2))
    datasets, _ = draw(base)
    fixed, fresh = phase.task_moments(datasets.cov, datasets.w_fix, seq_len=base.seq_len, normalize="sum")
    assert int(ds.free_directions) == phase.free_directions(fixed[0]) > 0
    noise = phase.triple(mixture_moments("attention", datasets.cov, base.seq_len, icl=0.0, w_fix=datasets.w_fix,
                                         normalize="sum"))
    for key, test in (("population_switch", fresh), ("population_edge", noise)):
        c = float(ds[key])
        if np.isnan(c):
            continue
        assert 0 < c <= 1
        gaps = [phase.quadratic_loss(phase.population_end_point(fixed, fresh, x), test) - ds.midpoint
                for x in (c * 0.95, c * 1.05)]
        assert gaps[0] * gaps[1] < 0, key
    mix = phase.triple(mixture_moments("attention", datasets.cov, base.seq_len, icl=0.2, w_fix=datasets.w_fix,
                                     normalize="sum"))
    np.testing.assert_allclose(mix[0], 0.8 * fixed[0] + 0.2 * fresh[0], rtol=1e-10, atol=1e-12)


def test_the_pure_in_context_column_interpolates_up_to_the_rank_of_the_feature_covariance(tiny):
    """D = 2: 12 features; at c = 1 the fresh sequences' feature covariance has full rank (no fixed task), so the
    flow interpolates P ≤ 12 training sequences (training loss 0) and not 24; the column's phrase says where its
    test loss peaks, beside that rank, in each case (a constructed peak at 12, one elsewhere, none)."""
    ds, _ = tiny
    assert int(ds.n_features) == 12 and int(ds.feature_rank) == 12
    assert list(ds.column_P.values) == [6.0, 12.0, 24.0]
    train = ds.column_train_loss.values
    assert np.all(np.abs(train[:2]) < 1e-9) and train[2] > 1e-3
    assert np.all(ds.column_se_icl > 0)
    for loss, text in (([1.0, 9.0, 0.5], "peaks at P = 12 (test loss 9); least squares puts the peak at P = 12"),
                       ([9.0, 1.0, 0.5], "shows no peak inside the grid"), ([1.0, 2.0, 9.0], "no peak")):
        built = ds.assign(column_test_icl=("column_P", loss), column_peak=np.nan)
        j = phase.sample_wise_peak(loss)
        built["column_peak"] = np.nan if j is None else float(ds.column_P[j])
        assert text in phase_text.column_phrase(built)
    moved = ds.assign(column_test_icl=("column_P", [1.0, 9.0, 0.5]), column_peak=12.0, feature_rank=40)
    assert phase_text.column_phrase(moved).endswith("lies away from it")


def test_one_colour_scale_for_both_maps_and_phrases_true_to_the_data(tiny):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import QuadMesh

    ds, _ = tiny
    fig = pd_.plot(ds)
    maps = [ax for ax in fig.axes if ax.get_title().endswith("test loss")]
    meshes = [c for ax in maps for c in ax.collections if isinstance(c, QuadMesh)]
    assert len(maps) == 2 and len(meshes) == 2 and meshes[0].norm is meshes[1].norm
    low = min(float(ds.final_test_iwl.min()), float(ds.final_test_icl.min()))
    assert meshes[0].norm.vmin == pytest.approx(low)
    plt.close(fig)
    words = pd_.words(ds)
    assert all("nan" not in str(v).lower() for v in words.values())
    assert words["settled"].startswith("all 8 cells") and "c = 0 and" not in words["icl_switch"]
    assert words["limits"].startswith(f"{int(ds.flat.sum())} of the 8 cells")
    # a constructed peak in the fresh sequences: at P = 40 the c > 0 cells hold 2, 8 and 40 of them, and the tiny
    # model's fixed task leaves free_directions = 3 directions, which lies between 2 and 40
    peaked = ds.copy()
    peaked["final_test_icl"] = peaked.final_test_icl.copy()
    peaked.final_test_icl.loc[dict(trainset_size=40.0)] = [2.0, 5.0, 300.0, 0.1]
    peaked["peak_icl"] = peaked.peak_icl.where(peaked.trainset_size != 40, 0.2)
    assert int(peaked.free_directions) == 3
    assert phase_text.peak_phrase(peaked) == ("peaks between 2 and 40 fresh sequences at P = 40 (the largest loss at "
                                              "8: 300); the grid places a peak only between its neighbours, and the "
                                              "count of free directions, 3, lies inside every such bracket")
    stalled = ds.copy()
    stalled["settled"] = stalled.settled.where((stalled.icl != 0.2) | (stalled.trainset_size != 40), False)
    stalled["switch_hi"] = stalled.switch_hi.where(stalled.trainset_size != 40)
    assert phase_text.settled_phrase(stalled).startswith("7 of the 8 cells; c = 0.2, P = 40 still moved")
    assert phase_text.switch_phrase(stalled).startswith("at no trained c at P = 40")
    assert phase_text._per_P([(40.0, "at no c"), (np.inf, "at no c")]) == "at no c at every P"
    assert phase_text._per_P([(40.0, "at no c")], every=False) == "at no c at P = 40"


def test_record_steps():
    steps = phase.record_steps(5000, 10**9)
    assert steps[0] == 500 and 5000 in steps and steps[-1] == 10**9 and np.all(np.diff(steps) > 0)


def test_bracket_gives_the_grid_values_between_which_a_verdict_sets_in_for_good():
    icl = [0.01, 0.1, 0.5, 1.0]
    assert phase.bracket([False, False, True, True], icl) == (0.1, 0.5)
    assert phase.bracket([True, False, True, True], icl) == (0.1, 0.5)  # an early win that does not last
    lo, hi = phase.bracket([True, True, True, True], icl)
    assert np.isnan(lo) and hi == 0.01
    assert all(np.isnan(phase.bracket([True, True, True, False], icl)))


def test_sample_wise_peak_and_the_count_it_sits_next_to():
    assert phase.sample_wise_peak([3.0, 5.0, 300.0, 2.0, 0.5]) == 2
    assert phase.sample_wise_peak([300.0, 5.0, 2.0]) is None  # largest at an end: the grid shows no peak
    assert phase.sample_wise_peak([1.0, 2.0, 3.0]) is None
    assert phase.sample_wise_peak([1.0, np.nan, 3.0, 1.0]) is None
    fresh = [0, 1, 2, 4, 10, 20, 40]
    assert phase.near_count(fresh, 10, 10) and phase.near_count(fresh, 10, 12)
    assert not phase.near_count(fresh, 10, 25) and not phase.near_count(fresh, 40, 40)


def _seed_slopes(exponent, scatter, seeds=4, rng_seed=0):
    """Each seed's log–log slope of steps t = 100·init^exponent·exp(noise) drawn at five scales, by polyfit."""
    rng, inits = np.random.default_rng(rng_seed), np.logspace(-3, -1, 5)
    steps = 100 * inits[None] ** exponent * np.exp(scatter * rng.normal(size=(seeds, inits.size)))
    return [np.polyfit(np.log(inits), np.log(s), 1)[0] for s in steps]


def test_exponent_verdict_on_constructed_cases():
    mean, se, said = phase.exponent_verdict(_seed_slopes(-1.0, 0.0))  # an exact power law
    assert mean == pytest.approx(-1.0) and se == pytest.approx(0.0, abs=1e-12) and said == "agrees"
    mean, se, said = phase.exponent_verdict(_seed_slopes(-1.3, 0.01))  # another slope, small scatter
    assert mean == pytest.approx(-1.3, abs=0.02) and said == "differs"
    mean, se, said = phase.exponent_verdict([0.5, -2.5, 0.2, -2.2])  # large scatter: the band holds −1 and 0 alike
    assert mean == pytest.approx(-1.0) and 2 * se > 1.0 and said == "cannot tell"
    assert phase.exponent_verdict([-1.3])[1:] == (None, "cannot tell")  # one seed: no standard error
    assert np.isnan(phase.exponent_verdict([np.nan, np.nan])[0])
    # the band is 2 SE: a mean 1.9 SE from the law agrees, one 2.1 SE from it differs
    base = np.array([-1.0, 1.0, -1.0, 1.0]) * 0.1  # SE = 0.1·2/√3/2 of these four
    se = base.std(ddof=1) / 2
    assert phase.exponent_verdict(-1 + 1.9 * se + base)[2] == "agrees"
    assert phase.exponent_verdict(-1 + 2.1 * se + base)[2] == "differs"


def test_free_directions_counts_the_flat_eigenvalues():
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(6, 6)))[0]
    TT = basis @ np.diag([0, 0, 0, 1e-3, 1, 4.0]) @ basis.T  # rank 3 by construction
    assert phase.free_directions(TT) == 3
    assert phase.free_directions(np.eye(4)) == 0


def test_solve_in_c_and_the_population_crossing_on_a_constructed_case():
    assert phase.solve_in_c(lambda c: c**2, 0.25, 0.1, 1.0) == pytest.approx(0.5, rel=1e-8)
    assert np.isnan(phase.solve_in_c(lambda c: c**2, 4.0, 0.1, 1.0))
    with pytest.raises(ValueError, match="lo"):
        phase.solve_in_c(lambda c: c, 0.5, 0.0, 1.0)
    # one feature: the fixed task's moments pull m to 1, the fresh ones to 0, so m*(c) = 1 − c, and on test moments
    # (E[TTᵀ], E[yT], E[y²]) = (1, 0, 1) the loss is 1 + (1 − c)²: it equals 1.25 at c = 1/2
    fixed, fresh, test = ((np.eye(1), np.ones(1), 1.0), (np.eye(1), np.zeros(1), 1.0), (np.eye(1), np.zeros(1), 1.0))
    np.testing.assert_allclose(phase.population_end_point(fixed, fresh, 0.3), [0.7])
    assert phase.population_crossing(fixed, fresh, test, 1.25, 0.01, 0.9) == pytest.approx(0.5, rel=1e-8)


def test_prose_numbers_are_read_back_as_written():
    """myst-nb reads glued text with ast.literal_eval: a step count must not come out as a tuple."""
    import ast

    for n, text in ((5000, "5000"), (10**9, "10⁹"), (158114, "1.6·10⁵")):
        assert phase_text._steps(n) == text
        try:
            back = ast.literal_eval(text)
        except (SyntaxError, ValueError):
            back = text
        assert not isinstance(back, tuple)


def test_the_phase_diagram_refuses_what_it_cannot_compare():
    with pytest.raises(ValueError, match="streams"):
        pd_.runs(_settings(attn_m=dict(TINY, draws="reference")))
    with pytest.raises(ValueError, match="test sets"):
        pd_.runs(_settings(attn_m=dict(TINY, testset_size=0)))


def test_the_presets_give_a_finished_phase_diagram_worth_the_name():
    """The paper preset: ≥ 6 values of c in (0, 0.3] and the rest of [0, 1]; P from ≤ 200 to ≥ 20000 (and the
    population, which the page always adds); Figure 14's model and horizon."""
    from linattn.companion import presets

    S = pd_.PRESETS["paper"]
    c = np.array(S["icl_values"])
    assert ((c > 0) & (c <= 0.3)).sum() >= 6 and c.min() == 0 and c.max() == 1 and (c > 0.3).sum() >= 2
    assert min(S["trainset_sizes"]) <= 200 and max(S["trainset_sizes"]) >= 20000
    fig14 = presets.table("fig14_icl_iwl")["paper"]
    assert all(S["attn_m"][k] == fig14[k] for k in ("head_num", "in_dim", "init", "lr", "epoch", "white_cov"))
    assert S["epoch_extended"] >= 1000 * S["attn_m"]["epoch"]


def test_verdicts_use_the_band_and_brackets_span_the_cells_that_cannot_tell():
    W, L, U = phase.WINS, phase.LOSES, phase.CANNOT_TELL
    np.testing.assert_array_equal(phase.verdict([0.50, 0.56, 0.58, 0.70], [0.01, 0.01, 0.01, 0.01], 0.57),
                                  [W, U, U, L])
    icl = [0.01, 0.1, 0.5, 1.0]
    assert phase.banded_bracket([L, L, W, W], icl) == (0.1, 0.5)          # a clean switch
    assert phase.banded_bracket([L, U, W, W], icl) == (0.01, 0.5)         # cannot tell at 0.1: the bracket widens
    assert phase.banded_bracket([W, L, U, W], icl) == (0.1, 1.0)          # an early win that does not last
    lo, hi = phase.banded_bracket([U, U, W, W], icl)                       # nothing below clearly loses
    assert np.isnan(lo) and hi == 0.5
    assert all(np.isnan(phase.banded_bracket([L, W, W, U], icl)))         # undecided at the end: no verdict


def test_the_null_space_count_its_gap_and_the_rank():
    rng = np.random.default_rng(1)
    basis = np.linalg.qr(rng.normal(size=(6, 6)))[0]
    TT = basis @ np.diag([0, 0, 1e-5, 1e-3, 1, 4.0]) @ basis.T
    assert phase.free_directions(TT) == 2 and phase.feature_rank(TT) == 4
    flat, nxt = phase.null_space_gap(TT)
    assert flat < 1e-14 and nxt == pytest.approx(1e-5 / 4, rel=1e-6)
    assert phase.free_directions(TT, tol=1e-4) == 3  # the count follows the stated tolerance
    assert np.isnan(phase.null_space_gap(np.eye(3))[0])


def test_last_crossing_finds_the_crossing_that_holds_for_good():
    # (c − 0.3)(c − 0.7) + 0.1 crosses 0.1 at 0.3 and 0.7: the last is 0.7
    assert phase.last_crossing(lambda c: (c - 0.3) * (c - 0.7) + 0.1, 0.1, [0.2, 0.5, 1.0]) == pytest.approx(0.7)
    assert np.isnan(phase.last_crossing(lambda c: c, 5.0, [0.2, 0.5, 1.0]))
