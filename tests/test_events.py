"""Learning events (linattn.events): which head learns which direction and when, on constructed weights and on a
population run of rank-one ATTN_S, where the theory says what must happen."""

import numpy as np
import pytest

from linattn import theory
from linattn.analysis import diagnostics as dg
from linattn.analysis import events
from linattn.config import RunConfig
from linattn.training.experiment import run

N = 31
SPEC4 = (0.4, 0.3, 0.2, 0.1)


def test_vector_alignment_reads_rotated_eigenvectors():
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    cov = q @ np.diag(SPEC4) @ q.T
    W = np.zeros((3, 1, 5))
    W[0, 0, :4] = 2.5 * q[:, 1]                       # along e_2
    W[1, 0, :4] = -(q[:, 0] + q[:, 3]) / np.sqrt(2)   # between e_1 and e_4
    W[2, 0, :4], W[2, 0, 4] = q[:, 2], 7.0            # the label column does not count
    a = events.vector_alignment(W, cov)
    np.testing.assert_allclose(a[0], [0, 1, 0, 0], atol=1e-12)
    np.testing.assert_allclose(a[1], [2**-0.5, 0, 0, 2**-0.5], atol=1e-12)
    np.testing.assert_allclose(a[2], [0, 0, 1, 0], atol=1e-12)


def test_direction_fractions_are_one_at_the_fixed_point():
    """A head holding the fixed point's weight 1/(λ_d c_d) on e_d carries fraction 1 of it, and nothing else."""
    A_star = theory.pcr_weights(SPEC4, N, 2, normalize="mean")   # M_2: directions 1 and 2
    heads = np.stack([A_star, np.zeros((4, 4))])
    np.testing.assert_allclose(events.direction_fractions(heads, np.diag(SPEC4), N), [[1, 1, 0, 0], [0, 0, 0, 0]],
                               atol=1e-12)


def test_first_crossings_learner_and_order():
    steps = np.array([0, 10, 20, 30])
    series = np.zeros((4, 3, 2))
    series[2:, 1, 0] = 1.0     # head 1 crosses on direction 0 at step 20
    series[1:, 2, 0] = 1.0     # head 2 crosses on direction 0 at step 10 (first)
    series[3:, 1, 1] = 1.0     # head 1, direction 1 at step 30
    c = events.first_crossings(series, 0.5, steps)
    assert c == {(1, 0): 20, (2, 0): 10, (1, 1): 30}
    assert events.first_learner(c) == {0: (2, 10), 1: (1, 30)}
    assert events.heads_in_order(c) == [(2, [0], [10]), (1, [0, 1], [20, 30])]


def test_value_learners_keep_one_head_per_direction():
    v_final = np.array([1.3, 1.4, 1.6, 1.9])
    # head 0 and 3 both on e_1 (the larger keeps it), head 1 too small to count, head 2 on e_3
    learners = events.value_learners([1.0, 0.5, 1.5, 1.2], [0, 1, 2, 0], v_final)
    assert learners == {0: 3, 2: 2}


def test_scalar_ode_rise_is_the_ode_itself_when_the_run_is_the_ode():
    lam, c = 0.4, theory.c_d(SPEC4, N)[0]
    v_inf = (lam * c) ** (-1 / 3)
    t = np.linspace(0, 3000, 3001)
    v = theory.scalar_ode(lam, c, 5e-3 * v_inf, t)
    ode = events.scalar_ode_rise(v, t, lam, c)
    rise = (v > 0.05 * v_inf) & (v < 0.95 * v_inf)
    assert rise.sum() > 20 and np.nanmax(np.abs(ode[rise] - v[rise])) < 5e-3 * v_inf  # the shape is the ODE's
    cmp = events.compare_rise(v, ode, t, v_inf)
    assert cmp.max_gap < 5e-3 and cmp.rise_steps == pytest.approx(cmp.rise_steps_ode, rel=0.01)
    late = events.compare_rise(np.interp(t - 50, t, v), ode, t, v_inf)   # 50 steps late
    assert late.max_gap > 0.1 and late.rise_steps == pytest.approx(cmp.rise_steps, rel=0.01)


@pytest.fixture(scope="module")
def rank_one_population():
    lr, init = theory.to_paper_normalisation("attnS", N, lr=0.02, init=0.01)
    cfg = RunConfig(model="attnS", head_num=5, in_dim=4, spectrum=SPEC4, trainset_size=None, epoch=20000, lr=lr,
                    init=init, normalize="mean", seed=7, draws="streams", init_scheme="jan2025", track_value=True)
    return run(cfg, snapshot_every=20, snapshot=dg.snapshot_fn(N, normalize="mean"))


@pytest.mark.slow
def test_a_population_run_learns_each_direction_once_largest_first(rank_one_population):
    """The theory's story on a real run: D of the H heads each end up with one direction, in order of decreasing
    eigenvalue, and each such head carries that whole direction (f → 1) and its value v → (λ_d c_d)^{-1/3}."""
    res = rank_one_population
    cov = res.datasets.cov
    assert res.history.train_loss[-1] == pytest.approx(theory.plateau_losses(cov, N)[-1], abs=1e-3)  # all learned
    steps = np.array([s for s, _ in res.history.snapshots])
    heads = np.array([v["heads"] for _, v in res.history.snapshots])
    frac = events.direction_fractions(heads, cov, N)
    learners = events.first_learner(events.first_crossings(frac, 0.5, steps))
    assert sorted(learners) == [0, 1, 2, 3]
    assert len({h for h, _ in learners.values()}) == 4                      # four different heads
    assert [learners[d][1] for d in range(4)] == sorted(learners[d][1] for d in range(4))  # largest first
    np.testing.assert_allclose([frac[-1, learners[d][0], d] for d in range(4)], 1.0, atol=0.02)
    values = res.history.values[-1] * np.sign(res.history.values[-1])
    by_dir = events.value_learners(values, dg.head_direction(heads[-1], cov),
                                   theory.final_value_weights(cov, N, normalize="mean"))
    assert by_dir == {d: learners[d][0] for d in range(4)}
