"""The standard error of a mean loss over a drawn set with whitened task vectors (``uncertainty.mean_loss_error``): on
constructed sets with a known error, against its closed form at zero weights (``origin_loss_error``), against the
spread of the loss over many drawn training sets, and on the test sets the pages read."""

from __future__ import annotations

import math

import numpy as np
import pytest
from whitened import whitened_se

import linattn
from linattn.companion import presets, uncertainty
from linattn.companion.figures import fig01b_attnm_loss, fig14_icl_iwl
from linattn.companion.figures.common.trainer import train, trained
from linattn.data import Sequences, _whiten

COV = np.diag([0.4, 0.3, 0.2, 0.1])


def _set(w, rng, seq_len=12, cov=COV):
    """A set of sequences with the task vectors ``w`` (P, D): inputs N(0, cov), labels wᵀx, the query's zeroed."""
    x = rng.standard_normal((len(w), seq_len, len(cov))) @ np.sqrt(cov)
    labels = np.einsum("pnd,pd->pn", x, w)
    X = np.concatenate([x, labels[..., None]], axis=-1)
    y = X[:, -1, -1].copy()
    X[:, -1, -1] = 0.0
    return Sequences(X, y)


def _products(w):
    D = w.shape[1]
    return np.column_stack([w[:, i] * w[:, j] for i in range(D) for j in range(i, D)])


def test_the_task_vectors_are_recovered_from_each_context():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((50, 4))
    np.testing.assert_allclose(uncertainty.task_vectors(_set(w, rng)), w, rtol=1e-9, atol=1e-9)
    assert uncertainty.task_vectors(_set(w, rng, seq_len=4)) is None  # N = 3 context tokens < D = 4
    noisy = _set(w, rng)
    noisy.X[:, :-1, -1] += 0.1 * rng.standard_normal(noisy.X[:, :-1, -1].shape)  # no w fits these labels
    assert uncertainty.task_vectors(noisy) is None


def test_whitened_sets_are_told_from_independent_draws():
    rng = np.random.default_rng(1)
    raw = rng.standard_normal((2000, 4))
    assert uncertainty.is_whitened(_whiten(raw)) and not uncertainty.is_whitened(raw)
    assert uncertainty.is_whitened(_whiten(raw) * math.sqrt(1999 / 2000))  # the divisor P − 1 (the reference's)
    assert not uncertainty.is_whitened(_whiten(raw) + 0.01)  # a mean off zero
    assert not uncertainty.is_whitened(_whiten(raw[:4]))  # P ≤ D: nothing is whitened
    seqs = linattn.sample_tasks(COV, 500, 9, seed=3)  # a drawn training set (icl = 1): whitened
    assert uncertainty.whitened_task_vectors(seqs) is not None
    assert uncertainty.whitened_task_vectors(linattn.sample_tasks(COV, 500, 9, seed=3, centre=False)) is None
    assert uncertainty.whitened_task_vectors(linattn.sample_tasks(COV, 500, 9, seed=3, icl=0.5)) is None


def test_a_loss_with_a_known_error_beyond_the_whitened_part():
    """ℓ_p = 1 + bᵀw_p + cᵀvech(w_p w_pᵀ) + e_p with e_p ~ N(0, σ²) independent of w: on a whitened set the mean of
    the first parts is fixed, so the error is σ/√P; on independent w the plain standard error, which is larger."""
    rng = np.random.default_rng(2)
    P, sigma = 4000, 0.3
    w = _whiten(rng.standard_normal((P, 4)))
    b, c = rng.standard_normal(4), rng.standard_normal(10)
    loss = 1 + w @ b + _products(w) @ c + sigma * rng.standard_normal(P)
    seqs = _set(w, rng)
    assert uncertainty.mean_loss_error(loss, seqs) == pytest.approx(sigma / math.sqrt(P), rel=0.05)
    assert uncertainty.standard_error(loss) > 5 * sigma / math.sqrt(P)
    exact = 1 + w @ b + _products(w) @ c  # all of it fixed by the whitening: no error left
    assert uncertainty.mean_loss_error(exact, seqs) < 1e-12
    raw = rng.standard_normal((P, 4))  # independent task vectors: the plain standard error, exactly
    loss = 1 + raw @ b + _products(raw) @ c + sigma * rng.standard_normal(P)
    assert uncertainty.mean_loss_error(loss, _set(raw, rng)) == uncertainty.standard_error(loss)


def test_several_losses_a_sequence_give_one_error_each():
    """An (n, k) array of losses (k weights on the same sequences): each column's error is the one it has alone, on a
    whitened set and on independent task vectors alike."""
    rng = np.random.default_rng(6)
    for w in (_whiten(rng.standard_normal((500, 4))), rng.standard_normal((500, 4))):
        seqs = _set(w, rng)
        losses = np.column_stack([1 + w @ rng.standard_normal(4) + rng.standard_normal(500) for _ in range(3)])
        np.testing.assert_allclose(uncertainty.mean_loss_error(losses, seqs),
                                   [uncertainty.mean_loss_error(ell, seqs) for ell in losses.T], rtol=1e-12)
    np.testing.assert_allclose(uncertainty.mean_loss_error(losses[:, :1], seqs), [uncertainty.standard_error(
        losses[:, 0])])


def test_bad_input_is_refused():
    w = _whiten(np.random.default_rng(4).standard_normal((100, 4)))
    with pytest.raises(ValueError, match="w must have shape"):
        uncertainty.whitened_standard_error(np.ones(99), w)
    with pytest.raises(ValueError, match="more than 16"):
        uncertainty.whitened_standard_error(np.ones(16), w[:16])
    with pytest.raises(ValueError, match="one loss a sequence"):
        uncertainty.mean_loss_error(np.ones(99), _set(w, np.random.default_rng(5)))
    with pytest.raises(ValueError, match="one loss a sequence"):
        uncertainty.mean_loss_error(np.ones((100, 2, 2)), _set(w, np.random.default_rng(5)))


def test_at_zero_weights_it_is_the_closed_form():
    """ℓ_p = y_p² (the loss at zero weights) on drawn training sets of P = 20000: the error measured on each set is
    ``origin_loss_error``'s whitened closed form √(2 ((tr Λ)² + 2 tr Λ²)/P), within the few per cent a sample's own
    estimate carries; the plain standard error is the one for independent task vectors."""
    P = 20000
    for seed in range(3):
        seqs = linattn.sample_tasks(COV, P, 9, seed=seed)
        assert uncertainty.mean_loss_error(seqs.y ** 2, seqs) == pytest.approx(
            uncertainty.origin_loss_error(COV, P, whitened=True), rel=0.08)
        assert uncertainty.standard_error(seqs.y ** 2) == pytest.approx(
            uncertainty.origin_loss_error(COV, P, whitened=False), rel=0.08)


def _prefix_loss(seqs, v):
    """Each sequence's mean over its context tokens of (y_n − vᵀx_n)²: a loss averaged over many terms (as under
    ``vary_len``), whose task-vector part the whitening fixes: a mean and a covariance term in w."""
    X = seqs.X[:, :-1]
    return np.mean((X[..., -1] - X[..., :-1] @ v) ** 2, axis=1)


def test_it_is_the_spread_of_the_training_loss_over_drawn_sets():
    """500 drawn training sets (P = 500, 32 tokens): the spread of the training loss at fixed weights (zero, and a
    linear predictor v) across the sets is the rule's error, measured on each set (rms over sets; the spread of 500
    draws is itself known to 3 %, and the rule runs a few per cent low at so small a P, its terms of order 1/P), and
    less than half the plain sd/√P, the error the sets would have with independent task vectors."""
    v = np.array([0.5, -0.3, 0.2, 0.1])
    means, rule, plain = [], [], []
    for seed in range(500):
        seqs = linattn.sample_tasks(COV, 500, 32, seed=seed)
        losses = [_prefix_loss(seqs, 0 * v), _prefix_loss(seqs, v)]
        means.append([ell.mean() for ell in losses])
        rule.append([uncertainty.mean_loss_error(ell, seqs) for ell in losses])
        plain.append([uncertainty.standard_error(ell) for ell in losses])
    spread = np.std(means, axis=0, ddof=1)
    np.testing.assert_allclose(np.sqrt(np.mean(np.square(rule), axis=0)), spread, rtol=0.12)
    assert np.all(np.sqrt(np.mean(np.square(plain), axis=0)) > 2 * spread)


def test_fig01b_errors_by_a_second_route():
    """Figure 1b's stored errors of ATTN_M's training loss (at the start and at the end), recomputed from the run's
    own training set (the reference's draws, whitened): its per-sequence losses at those weights, the whitened part
    projected out apart from the library's rule."""
    S = presets.resolve(fig01b_attnm_loss.NAME, "quick", {})
    ds = fig01b_attnm_loss.compute(S)
    attn = train(fig01b_attnm_loss.runs(S), S)["attn_m"]
    for weights, name in (("init", "start"), ("final", "final")):
        per = uncertainty.per_sequence_losses(attn, "train", weights)
        assert float(ds.standard_error.sel(weights=name)) == pytest.approx(
            float(whitened_se(per, attn.datasets.train.X)), rel=1e-6)


def test_fig14_training_errors_by_a_second_route():
    """Figure 14's stored errors of the training loss (over its first value), recomputed from each run's own training
    set: whitened at c = 1 (the whitened part projected out apart from the library's rule), the plain sd/√P where
    some sequences share the fixed task vector (c < 1)."""
    S = presets.resolve(fig14_icl_iwl.NAME, "quick", {})
    ds = fig14_icl_iwl.compute(S)
    for c, r in zip(ds.icl.values, trained(fig14_icl_iwl.runs(S), S)):
        first = float(r.history.train_loss[0])
        for weights, name in (("init", "start"), ("final", "final")):
            per = uncertainty.per_sequence_losses(r, "train", weights)
            want = (float(whitened_se(per, r.datasets.train.X)) if c == 1
                    else per.std(ddof=1) / math.sqrt(per.size))
            assert float(ds.standard_error.sel(icl=c, curve="train", weights=name)) * first == pytest.approx(
                want, rel=1e-6)


@pytest.mark.parametrize("draws", ["streams", "reference"])
def test_the_in_context_test_set_is_whitened_and_the_in_weight_one_is_not(draws):
    """The test sets the pages read (linattn's streams and the reference's draws): the in-context one, drawn at
    icl = 1, has task vectors (each context's least-squares fit, by numpy's pinv) with a sample mean of 0 and a
    sample covariance ∝ I to float32 rounding, so the rule takes the whitening out; the in-weight one carries noise
    context labels (no task vector fits them), so the rule is the plain sd/√n there."""
    cfg = linattn.RunConfig(model="attnM", in_dim=3, seq_len=16, trainset_size=40, testset_size=400, draws=draws)
    data, _ = linattn.draw(cfg)
    test_icl, test_iwl = data.test_icl, data.test_iwl
    w = np.einsum("pdn,pn->pd", np.linalg.pinv(test_icl.X[:, :-1, :-1].astype(np.float64)), test_icl.X[:, :-1, -1])
    cov = np.cov(w.T, bias=True)
    assert np.abs(w.mean(axis=0)).max() < 1e-5 and np.abs(cov / cov[0, 0] - np.eye(3)).max() < 1e-5
    loss = (test_icl.y - 0.3 * test_icl.X[:, :-1, -1].mean(axis=1)) ** 2  # a predictor's per-sequence losses
    assert uncertainty.mean_loss_error(loss, test_icl) == pytest.approx(float(whitened_se(loss, test_icl.X)),
                                                                        rel=1e-6)
    assert uncertainty.mean_loss_error(loss, test_icl) < uncertainty.standard_error(loss)
    noise = test_iwl.y ** 2
    assert uncertainty.mean_loss_error(noise, test_iwl) == uncertainty.standard_error(noise)


def test_the_error_s_own_spread_on_constructed_sets():
    """``mean_loss_error_spread``: Gaussian losses (r² a χ²₁ sample) give about 1/√(2P); the scatter of the rule's
    error across 300 independent sets matches the spread each set estimates (heavy-tailed losses: larger, and still
    matched); on a whitened set the residuals after the whitened part are what count."""
    rng = np.random.default_rng(6)
    P = 2000
    w = rng.standard_normal((P, 4))
    gauss = uncertainty.mean_loss_error_spread(rng.standard_normal(P), _set(w, rng))
    assert gauss == pytest.approx(1 / math.sqrt(2 * P), rel=0.1)
    for draw in (rng.standard_normal, lambda n: rng.standard_t(5, n)):  # t₅: heavy tails
        ses, said = [], []
        for _ in range(300):
            loss = draw(P)
            seqs = Sequences(np.zeros((P, 2, 2)), np.zeros(P))  # no task vectors: independent losses
            ses.append(uncertainty.mean_loss_error(loss, seqs))
            said.append(uncertainty.mean_loss_error_spread(loss, seqs))
        assert np.std(ses, ddof=1) / np.mean(ses) == pytest.approx(np.mean(said), rel=0.2)
    assert np.mean(said) > 1.5 / math.sqrt(2 * P)  # the heavy tails make one set's error less sure
    white = _whiten(rng.standard_normal((P, 4)))
    noise = 0.3 * rng.standard_normal(P)
    fixed = 1 + white @ rng.standard_normal(4) + _products(white) @ rng.standard_normal(10)
    assert uncertainty.mean_loss_error_spread(fixed + noise, _set(white, rng)) == pytest.approx(
        uncertainty.mean_loss_error_spread(noise, _set(rng.standard_normal((P, 4)), rng)), rel=0.1)
    with pytest.raises(ValueError, match="one loss a sequence"):
        uncertainty.mean_loss_error_spread(np.ones(99), _set(w, rng))
