"""Diagnostics and the plateau detector, checked against the theory on population runs (exact moments)."""

import numpy as np
import pytest
import torch

from linattn import diagnostics as dg
from linattn import theory
from linattn.config import RunConfig
from linattn.models import init_weights, build_model
from linattn.data import streams
from linattn.run import run

N = 31
SPEC4 = (0.4, 0.3, 0.2, 0.1)


@pytest.fixture(scope="module")
def rank_one():
    """Figure 3a's rank-one ATTN_S (H = 5, reference lr 0.02 and init 0.01), run in the paper's normalisation.

    Seed 7: its initial heads give four separated drops (for some seeds two drops fall together, since escape times
    1/(λ²v0) depend on each direction's largest initial head).
    """
    lr, init = theory.to_paper_normalisation("attnS", N, lr=0.02, init=0.01)
    cfg = RunConfig(model="attnS", head_num=5, in_dim=4, spectrum=SPEC4, trainset_size=None, epoch=20000,
                    lr=lr, init=init, normalize="mean", seed=7,
                    draws="streams", init_scheme="jan2025")
    result = run(cfg, snapshot_every=20, snapshot=dg.snapshot_fn(N))
    table = dg.tidy(result.history.snapshots, result.datasets.cov, N, lr=lr)
    return result, table, dg.detect_plateaus(result.history.train_loss), lr


def test_plateaus_match_theory_in_eigenvalue_order(rank_one):
    result, table, plateaus, _ = rank_one
    cov = result.datasets.cov
    levels = theory.plateau_losses(cov, N)
    assert len(plateaus) == 5
    assert np.abs(plateaus.levels - levels).max() < 0.01  # measured 1e-5 with exact population moments
    target = 1.0 / (np.array(SPEC4) * theory.c_d(cov, N))
    for m, (a, b) in enumerate(zip(plateaus.starts, plateaus.ends)):
        i = np.searchsorted(table["step"], (a + b) // 2)
        overlaps = np.array([table[f"overlap_{d + 1}"][i] for d in range(4)])
        # on plateau m exactly the m largest directions are learned, each at 1/(λ_d c_d)
        assert np.allclose(overlaps[:m], target[:m], rtol=0.01)
        assert np.all(np.abs(overlaps[m:]) < 0.01 * target[m:])
        assert table["plateau"][i] == m
        assert table["pcr_dist_rel"][i] < 1e-3 or m == 0


def test_one_head_per_direction_with_the_predicted_value_weight(rank_one):
    result, _, _, _ = rank_one
    cov = result.datasets.cov
    heads = dg.head_matrices(result.model)
    align = dg.head_alignment(heads, cov)
    v = result.model.value_weights().detach().numpy()
    expected = theory.final_value_weights(cov, N)
    for d in range(4):
        h = int(np.argmax(np.abs(align[:, d])))
        assert abs(align[h, d]) > 0.99
        assert abs(v[h]) == pytest.approx(expected[d], rel=0.05)  # measured within 0.06 %


def test_effective_rank_grows_by_about_one_per_drop(rank_one):
    _, table, plateaus, _ = rank_one
    er, nr = [], []
    for a, b in zip(plateaus.starts[1:], plateaus.ends[1:]):
        i = np.searchsorted(table["step"], (a + b) // 2)
        er.append(table["eff_rank"][i])
        nr.append(table["numerical_rank"][i])
    assert nr == [1, 2, 3, 4]
    assert er[0] == pytest.approx(1.0, abs=1e-3)
    steps = np.diff(er)  # measured 0.98, 0.92, 0.70: below 1 because the singular values 1/(λc) are unequal
    assert np.all(steps > 0.5) and np.all(steps <= 1.0 + 1e-9)
    assert np.allclose(table["marginal_eff_rank"][-1], table["eff_rank"][-1], atol=0.02)


def test_conservation_drift_small_at_paper_rate(rank_one):
    _, table, _, _ = rank_one
    assert table["drift_max"].max() < 5e-3  # measured 8.5e-4 at η = 0.197 (paper normalisation)


def test_scalar_ode_overlays_each_drop(rank_one):
    result, _, plateaus, lr = rank_one
    loss = result.history.train_loss
    cov = result.datasets.cov
    sizes = -np.diff(theory.plateau_losses(cov, N))
    # measured max |ΔL| / drop size: 0.036, 0.024, 0.012, 0.0006 (earlier drops: other heads not yet at zero)
    for m in range(4):
        steps, pred = dg.scalar_ode_overlay(loss, lr, cov, N, m, level=plateaus.levels[m])
        window = steps < plateaus.starts[m + 1]
        err = np.abs(pred[window] - loss[steps[window]]).max()
        assert err < 0.06 * sizes[m], (m, err)


def test_subspace_measures(rank_one):
    _, table, plateaus, _ = rank_one
    # the final top direction (e_4, weight 1/(λ_4 c_4)) is only present after the last drop
    last = plateaus.starts[-1]
    assert np.all(table["subspace_dist"][table["step"] >= last + 1000] < 1e-3)
    assert np.all(table["subspace_dist"][(table["step"] > plateaus.starts[1]) & (table["step"] < plateaus.ends[3])] > 0.9)
    on_plateau = np.zeros(table["step"].size, bool)
    for a, b in zip(plateaus.starts[1:], plateaus.ends[1:]):
        on_plateau |= (table["step"] > a + 100) & (table["step"] < b - 100)
    # the learned subspace moves during drops (measured max 0.036 per 20 steps) and stands still on plateaus
    assert table["subspace_change"].max() > 10 * table["subspace_change"][on_plateau].max()


def test_rank_two_long_plateaus_only_at_even_m():
    lam8 = np.arange(1, 9) / 36
    levels = theory.plateau_losses(lam8, N)
    _, init = theory.to_paper_normalisation("attnS", N, lr=0.02, init=5e-3)
    found = {}
    for R, epochs in ((2, 14000), (1, 5000)):
        cfg = RunConfig(model="attnS", head_num=4, rank=R, in_dim=8, trainset_size=None, epoch=epochs, lr=0.4,
                        init=init, normalize="mean", seed=10, draws="streams", init_scheme="jan2025")
        p = dg.detect_plateaus(run(cfg).history.train_loss, min_length=500)
        ms = [int(np.argmin(np.abs(levels - lv))) for lv in p.levels]
        assert np.abs(levels[ms] - p.levels).max() < 0.01
        found[R] = ms
    assert found[2] == theory.long_plateaus(8, 2)  # [0, 2, 4, 6]; M_5 shows as a 163-step blip
    assert any(m % 2 for m in found[1])  # rank one: an odd plateau (M_1) is long too


def test_detect_plateaus_on_synthetic_curves():
    levels = np.array([1.0, 0.64, 0.38, 0.21, 0.136])
    drops = np.array([1000, 2500, 5000, 9000])
    t = np.arange(12000.0)
    curve = levels[-1] + sum((levels[i] - levels[i + 1]) / (1 + np.exp((t - drops[i]) / 40)) for i in range(4))
    p = dg.detect_plateaus(curve)
    assert np.allclose(p.levels, levels, atol=2e-3)
    assert np.allclose(p.drop_steps, drops, atol=5)
    rng = np.random.default_rng(0)
    p = dg.detect_plateaus(curve + 0.003 * rng.standard_normal(t.size), smooth=51)
    assert np.allclose(p.levels, levels, atol=5e-3)
    assert np.allclose(p.drop_steps, drops, atol=30)
    logt = np.unique(np.geomspace(1, 11999, 600).astype(int))
    p = dg.detect_plateaus(curve[logt], logt, min_length=10)
    assert np.allclose(p.levels, levels, atol=5e-3)
    assert np.allclose(p.drop_steps, drops, rtol=0.05)


def test_head_matrices_reproduce_the_model_output():
    rng = streams(1, 0)
    X = torch.as_tensor(rng.standard_normal((6, N + 1, 5)))
    X[:, -1, -1] = 0
    for model_name in ("attnS", "attnM"):
        w = init_weights(model_name, heads=3, in_dim=4, init=0.7, rng=rng)
        model = build_model(model_name, w)
        A = dg.combined_A(model)
        beta = torch.einsum("pn,pnd->pd", X[:, :-1, 4], X[:, :-1, :4]).numpy() / N
        pred = np.einsum("pi,ij,pj->p", beta, A, X[:, -1, :4].numpy())
        assert np.allclose(model(X, 1.0 / N).detach().numpy(), pred, rtol=1e-9, atol=1e-12)
    assert dg.effective_rank(np.diag([1.0, 1.0, 0.0])) == pytest.approx(2.0)
    assert dg.effective_rank(np.zeros((3, 3))) == 0.0


def test_drop_steps_finds_each_midpoint_crossing_and_nan_when_unreached():
    levels = np.array([1.0, 0.6, 0.3, 0.1])
    loss = np.concatenate([np.full(100, 1.0), np.full(50, 0.6), np.full(70, 0.3)])  # never reaches 0.1
    steps = 10 * np.arange(loss.size)
    out = dg.drop_steps(loss, levels, steps)
    assert np.array_equal(out[:2], [1000.0, 1500.0]) and np.isnan(out[2])
    assert np.array_equal(dg.drop_steps(loss, levels)[:2], [100.0, 150.0])
