"""The phase diagram of finished runs (``linattn.companion.figures.beyond_phase_diagram``) and the population moments
of the mixed task it trains P = ∞ on (``objectives.population.mixture_moments``), at tiny sizes the paper never used."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from numpy.polynomial.hermite_e import hermegauss

xr = pytest.importorskip("xarray")

import linattn  # noqa: E402
from linattn import RunConfig, draw, models  # noqa: E402
from linattn.objectives import Exact  # noqa: E402
from linattn.objectives.population import mixture_moments, population_moments  # noqa: E402
from linattn.companion.figures import beyond_phase_diagram as pd_  # noqa: E402

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


# ---------------------------------------------------------------- the flow

TINY = dict(model="attnM", head_num=3, in_dim=2, seq_len=8, init=1e-3, lr=0.01, epoch=200, white_cov=True,
            testset_size=300, draws="streams", init_scheme="jan2025", seed=3)


def test_the_flow_computes_the_models_loss_gradient_and_hessian():
    cfg = RunConfig(**dict(TINY, trainset_size=60, icl=0.4))
    datasets, _ = draw(cfg)
    rng = np.random.default_rng(1)
    weights = {k: rng.normal(size=v.shape) for k, v in draw(cfg)[1].items()}
    model = models.build_model("attnM", weights, dtype=torch.float64)
    objective = Exact.from_data(model, datasets.train)
    flow = pd_.AttnMFlow(pd_._triple(objective.moments), cfg.lr, cfg.head_num, cfg.in_dim)
    theta = flow.state(weights)
    np.testing.assert_allclose(flow.combined(theta), model.combined().detach().numpy(), atol=1e-13)
    loss = objective.value_and_grad(model)
    assert abs(flow.loss(flow.combined(theta)) - loss) < 1e-10 * abs(loss)
    D = cfg.in_dim
    autograd = np.concatenate([model.W_KQ.grad[:, :D, :].reshape(-1).numpy(), model.v.grad.reshape(-1).numpy()])
    np.testing.assert_allclose(flow.gradient(theta), autograd, rtol=1e-10, atol=1e-10)
    assert float(model.W_KQ.grad[:, D, :].abs().max()) == 0.0  # the query's label row never moves
    eps = 1e-6
    fd = np.stack([(flow.gradient(theta + eps * e) - flow.gradient(theta - eps * e)) / (2 * eps)
                   for e in np.eye(theta.size)], axis=1)
    np.testing.assert_allclose(flow.hessian(theta), fd, atol=1e-6 * np.abs(fd).max())


def test_gradient_descent_follows_the_flow():
    """The flow is on GD's step axis: a GD run (linattn.run, exact engine) from the same weights and data has the same
    losses, up to GD's shift of first order in the learning rate."""
    cfg = RunConfig(**dict(TINY, trainset_size=80, icl=0.5, epoch=600))
    gd = linattn.run(cfg, progress=False)
    flow = pd_.AttnMFlow(pd_._triple(Exact.from_data(gd.model, gd.datasets.train).moments), cfg.lr, cfg.head_num,
                         cfg.in_dim)
    steps = np.arange(1, 600)
    thetas = flow.run(flow.state(gd.init), steps, rtol=1e-7, atol=1e-10)
    losses = np.array([flow.loss(flow.combined(th)) for th in thetas])
    ref = gd.history.train_loss[steps]
    assert losses[-1] < 0.5 * losses[0]  # it learns within the window
    level = (ref[0] + ref[-1]) / 2  # the drop happens at the same step, give or take GD's shift
    assert abs(np.argmax(losses < level) - np.argmax(ref < level)) <= 3
    plateau, after = steps < 30, steps > 200  # and on the plateau and after the drop the losses agree
    np.testing.assert_allclose(losses[plateau | after], ref[plateau | after], rtol=0.01)


# ---------------------------------------------------------------- the phase diagram

@pytest.fixture(scope="module")
def tiny():
    return pd_.phase_diagram(RunConfig(**TINY), [0.0, 0.05, 0.2, 1.0], [40], horizon=10**5)


def test_every_cell_settles_and_reaches_the_theorys_end_point(tiny):
    ds = tiny
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


def test_the_verdicts_are_brackets_on_the_c_positive_branch(tiny):
    ds = tiny
    for P in ds.trainset_size.values:
        loss = ds.final_test_icl.sel(trainset_size=P).values
        lo, hi = (float(ds[k].sel(trainset_size=P).isel(step=-1)) for k in ("switch_lo", "switch_hi"))
        assert hi > 0 and np.all(loss[ds.icl.values >= hi] < ds.midpoint)  # wins from hi on, for good
        assert np.isnan(lo) or (lo > 0 and loss[ds.icl.values == lo][0] >= ds.midpoint)  # c = 0 is never a bound
        assert not bool(ds.iwl_wins.sel(trainset_size=P, icl=0.0))  # c = 0 is another recipe
    assert bool((ds.iwl_wins == ((ds.final_test_iwl < ds.midpoint) & (ds.icl > 0))).all())
    # the theory's bracket is the end point's: the same rule on limit_test_icl
    np.testing.assert_array_equal(ds.switch_hi.isel(step=-1), ds.theory_hi)
    # at P = ∞ both crossings are roots in c of the least-squares end point's test losses
    base = RunConfig(**TINY)
    datasets, init = draw(RunConfig(**dict(TINY, trainset_size=2)))
    model = models.build_model("attnM", init)
    fixed, fresh = pd_.task_moments(base, datasets.cov, datasets.w_fix)
    assert int(ds.free_directions) == pd_.free_directions(fixed[0]) > 0
    for key, test in (("population_switch", "test_icl"), ("population_edge", "test_iwl")):
        c = float(ds[key])
        if np.isnan(c):
            continue
        assert 0 < c <= 1
        mom = pd_._triple(Exact.from_data(model, getattr(datasets, test)).moments)
        gaps = [pd_.quadratic_loss(pd_.population_end_point(fixed, fresh, x), mom) - ds.midpoint
                for x in (c * 0.95, c * 1.05)]
        assert gaps[0] * gaps[1] < 0, key
    # the c > 0 mixture's moments are (1 − c)·fixed + c·fresh: the sampled moments at c = 0.2 agree
    mix = pd_._triple(mixture_moments("attention", datasets.cov, base.seq_len, icl=0.2, w_fix=datasets.w_fix,
                                      normalize="sum"))
    np.testing.assert_allclose(mix[0], 0.8 * fixed[0] + 0.2 * fresh[0], rtol=1e-10, atol=1e-12)


def test_one_colour_scale_for_both_maps_and_prose_only_for_what_occurs(tiny):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import QuadMesh

    fig = pd_.plot(tiny)
    maps = [ax for ax in fig.axes if ax.get_title().endswith("test loss")]
    meshes = [c for ax in maps for c in ax.collections if isinstance(c, QuadMesh)]
    assert len(maps) == 2 and len(meshes) == 2 and meshes[0].norm is meshes[1].norm
    low = min(float(tiny.final_test_iwl.min()), float(tiny.final_test_icl.min()))
    assert meshes[0].norm.vmin == pytest.approx(low)
    plt.close(fig)
    text = pd_.findings(tiny)
    assert "nan" not in text.lower() and "Every one of the 8 cells has settled" in text
    assert ("flat directions" in text) == bool(tiny.flat.any())
    assert "had not settled" not in text and "At $c$ = 0 the training sequences carry noise context labels" in text
    assert "between $c$ = 0 and" not in text and "$c$ = 0 at $P$" not in text  # no verdict reaches across c = 0
    # a constructed peak in the fresh sequences: at P = 40 the c > 0 cells hold 2, 8 and 40 of them, and the tiny
    # model's fixed task leaves free_directions = 3 directions, which lies between 2 and 40
    peaked = tiny.copy()
    peaked["final_test_icl"] = peaked.final_test_icl.copy()
    peaked.final_test_icl.loc[dict(trainset_size=40.0)] = [2.0, 5.0, 300.0, 0.1]
    peaked["peak_icl"] = peaked.peak_icl.where(peaked.trainset_size != 40, 0.2)
    assert int(peaked.free_directions) == 3
    assert ("peaks at 8 fresh sequences at $P$ = 40 (300); the fixed task's sequences leave 3 directions of ATTN_M's "
            "features to the fresh ones, and every peak sits next to that count") in pd_.findings(peaked)
    # a case that does not occur in this run gets its sentence once it does
    stalled = tiny.copy()
    stalled["settled"] = stalled.settled.where((stalled.icl != 0.2) | (stalled.trainset_size != 40), False)
    stalled["switch_hi"] = stalled.switch_hi.where(stalled.trainset_size != 40)
    other = pd_.findings(stalled)
    assert "1 of the 8 cells had not settled" in other
    assert "At $P$ = 40 the in-context test loss is above the midpoint at the largest $c$ trained" in other


def test_record_steps():
    steps = pd_.record_steps(5000, 10**9)
    assert steps[0] == 500 and 5000 in steps and steps[-1] == 10**9 and np.all(np.diff(steps) > 0)


def test_bracket_gives_the_grid_values_between_which_a_verdict_sets_in_for_good():
    icl = [0.01, 0.1, 0.5, 1.0]
    assert pd_.bracket([False, False, True, True], icl) == (0.1, 0.5)
    assert pd_.bracket([True, False, True, True], icl) == (0.1, 0.5)  # an early win that does not last
    lo, hi = pd_.bracket([True, True, True, True], icl)
    assert np.isnan(lo) and hi == 0.01
    assert all(np.isnan(pd_.bracket([True, True, True, False], icl)))


def test_sample_wise_peak_and_the_count_it_sits_next_to():
    assert pd_.sample_wise_peak([3.0, 5.0, 300.0, 2.0, 0.5]) == 2
    assert pd_.sample_wise_peak([300.0, 5.0, 2.0]) is None  # largest at an end: the grid shows no peak
    assert pd_.sample_wise_peak([1.0, 2.0, 3.0]) is None
    assert pd_.sample_wise_peak([1.0, np.nan, 3.0, 1.0]) is None
    fresh = [0, 1, 2, 4, 10, 20, 40]
    assert pd_.near_count(fresh, 10, 10) and pd_.near_count(fresh, 10, 12)
    assert not pd_.near_count(fresh, 10, 25) and not pd_.near_count(fresh, 40, 40)


def test_free_directions_counts_the_flat_eigenvalues():
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(6, 6)))[0]
    TT = basis @ np.diag([0, 0, 0, 1e-3, 1, 4.0]) @ basis.T  # rank 3 by construction
    assert pd_.free_directions(TT) == 3
    assert pd_.free_directions(np.eye(4)) == 0


def test_solve_in_c_and_the_population_crossing_on_a_constructed_case():
    assert pd_.solve_in_c(lambda c: c**2, 0.25, 0.1, 1.0) == pytest.approx(0.5, rel=1e-8)
    assert np.isnan(pd_.solve_in_c(lambda c: c**2, 4.0, 0.1, 1.0))
    with pytest.raises(ValueError, match="lo"):
        pd_.solve_in_c(lambda c: c, 0.5, 0.0, 1.0)
    # one feature: the fixed task's moments pull m to 1, the fresh ones to 0, so m*(c) = 1 − c, and on test moments
    # (E[TTᵀ], E[yT], E[y²]) = (1, 0, 1) the loss is 1 + (1 − c)²: it equals 1.25 at c = 1/2
    fixed, fresh, test = ((np.eye(1), np.ones(1), 1.0), (np.eye(1), np.zeros(1), 1.0), (np.eye(1), np.zeros(1), 1.0))
    np.testing.assert_allclose(pd_.population_end_point(fixed, fresh, 0.3), [0.7])
    assert pd_.population_crossing(fixed, fresh, test, 1.25, 0.01, 0.9) == pytest.approx(0.5, rel=1e-8)


def test_prose_numbers_are_read_back_as_written():
    """myst-nb reads glued text with ast.literal_eval: a step count must not come out as a tuple."""
    import ast

    for n, text in ((5000, "5000"), (10**9, "10⁹"), (158114, "1.6·10⁵")):
        assert pd_._steps(n) == text
        try:
            back = ast.literal_eval(text)
        except (SyntaxError, ValueError):
            back = text
        assert not isinstance(back, tuple)


def test_the_phase_diagram_refuses_what_it_cannot_compare():
    with pytest.raises(ValueError, match="streams"):
        pd_.phase_diagram(RunConfig(**dict(TINY, draws="reference")), [0.0], [40], horizon=1000)
    with pytest.raises(ValueError, match="test sets"):
        pd_.phase_diagram(RunConfig(**dict(TINY, testset_size=0)), [0.0], [40], horizon=1000)


def test_the_presets_give_a_finished_phase_diagram_worth_the_name():
    """The paper preset: ≥ 6 values of c in (0, 0.3] and the rest of [0, 1]; P from ≤ 200 to ≥ 20000 (and the
    population, which the page always adds); Figure 14's model and horizon."""
    from linattn.companion import presets

    S = presets.PRESETS[pd_.NAME]["paper"]
    c = np.array(S["icl_values"])
    assert ((c > 0) & (c <= 0.3)).sum() >= 6 and c.min() == 0 and c.max() == 1 and (c > 0.3).sum() >= 2
    assert min(S["trainset_sizes"]) <= 200 and max(S["trainset_sizes"]) >= 20000
    fig14 = presets.PRESETS["fig14_icl_iwl"]["paper"]
    assert all(S["attn_m"][k] == fig14[k] for k in ("head_num", "in_dim", "init", "lr", "epoch", "white_cov"))
    assert S["epoch_extended"] >= 1000 * S["attn_m"]["epoch"]
