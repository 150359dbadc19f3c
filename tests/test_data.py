import numpy as np
import pytest
import torch

from linattn import data, normalization


def make(**kw):
    args = dict(in_dim=4, seq_len=9, trainset_size=400, testset_size=0, icl=1.0, seed=3)
    args.update(kw)
    return data.make_datasets(**args)


def test_shapes_and_zeroed_query_label():
    ds = make(testset_size=50)
    assert ds.train.X.shape == (400, 9, 5) and ds.train.y.shape == (400,)
    for s in (ds.train, ds.test_iwl, ds.test_icl):
        assert np.all(s.X[:, -1, -1] == 0.0)
        assert s.X.shape[1:] == (9, 5)
    assert ds.test_iwl.X.shape[0] == ds.test_icl.X.shape[0] == 50


def test_labels_follow_a_linear_task_per_sequence():
    ds = make()
    X, y = ds.train.X, ds.train.y
    # recover each sequence's w from its context and check the query target obeys it too
    for p in range(5):
        w, *_ = np.linalg.lstsq(X[p, :-1, :4], X[p, :-1, 4], rcond=None)
        assert np.allclose(X[p, :-1, :4] @ w, X[p, :-1, 4])
        assert np.isclose(X[p, -1, :4] @ w, y[p])


def test_default_covariance_spectrum_and_trace():
    ds = make(in_dim=5)
    evals = np.linalg.eigvalsh(ds.cov)
    assert np.isclose(np.trace(ds.cov), 1.0)
    assert np.allclose(evals, np.arange(1, 6) / 15)
    assert not np.allclose(ds.cov, np.diag(np.diag(ds.cov)))  # randomly rotated


def test_white_and_given_spectrum():
    assert np.allclose(make(white_cov=True).cov, np.eye(4) / 4)
    cov = make(spectrum=(0.4, 0.3, 0.2, 0.1)).cov
    assert np.allclose(np.sort(np.linalg.eigvalsh(cov)), [0.1, 0.2, 0.3, 0.4])


@pytest.mark.parametrize("bad", [np.array([[1.0, 2.0], [0.0, 1.0]]), np.array([[1.0, 2.0], [2.0, 1.0]]), np.ones(3)])
def test_covariance_must_be_spd(bad):
    with pytest.raises(ValueError):
        data.make_covariance(bad.shape[0], np.random.default_rng(0), matrix=bad)


def test_inputs_centred_and_distributed_with_cov():
    ds = make(trainset_size=20000, seq_len=3)
    x = ds.train.X[..., :4]
    assert np.abs(x.mean(axis=0)).max() < 1e-12
    emp = np.einsum("pnd,pne->de", x, x) / (x.shape[0] * x.shape[1])
    assert np.abs(emp - ds.cov).max() < 0.02


def test_task_vectors_whitened_for_icl_one():
    ds = make(trainset_size=300)
    X = ds.train.X
    W = np.stack([np.linalg.lstsq(X[p, :-1, :4], X[p, :-1, 4], rcond=None)[0] for p in range(300)])
    assert np.abs(W.mean(axis=0)).max() < 1e-8
    assert np.allclose(W.T @ W / 300, np.eye(4), atol=1e-8)


def test_icl_fraction_uses_fixed_task_of_norm_sqrt_d():
    ds = make(icl=0.25, trainset_size=200)
    X = ds.train.X
    assert np.isclose(np.linalg.norm(ds.w_fix), 2.0)
    W = np.stack([np.linalg.lstsq(X[p, :-1, :4], X[p, :-1, 4], rcond=None)[0] for p in range(200)])
    assert np.allclose(W[50:], ds.w_fix)                       # the last 75 % share w_fix
    assert np.linalg.norm(W[:50] - ds.w_fix, axis=1).min() > 1e-3  # the first 25 % do not


def test_in_weight_recipe_has_noise_context_and_fixed_target():
    ds = make(testset_size=2000)
    s = ds.test_iwl
    assert np.allclose(s.X[:, -1, :4] @ ds.w_fix, s.y)
    ctx_pred = s.X[:, :-1, :4] @ ds.w_fix
    assert abs(np.corrcoef(ctx_pred.ravel(), s.X[:, :-1, 4].ravel())[0, 1]) < 0.05
    assert abs(s.X[:, :-1, 4].std() - 1.0) < 0.05
    # the in-context test set is the icl = 1 recipe: labels follow the (fresh) task of each sequence
    t = ds.test_icl
    w0 = np.linalg.lstsq(t.X[0, :-1, :4], t.X[0, :-1, 4], rcond=None)[0]
    assert np.isclose(t.X[0, -1, :4] @ w0, t.y[0])


def test_same_seed_same_arrays_other_seed_differs():
    a, b, c = make(testset_size=10), make(testset_size=10), make(testset_size=10, seed=4)
    for key in ("train", "test_iwl", "test_icl"):
        assert np.array_equal(getattr(a, key).X, getattr(b, key).X)
        assert not np.allclose(getattr(a, key).X, getattr(c, key).X)
    assert np.array_equal(a.cov, b.cov) and not np.allclose(a.cov, c.cov)


def test_training_set_does_not_depend_on_test_sets():
    assert np.array_equal(make(testset_size=0).train.X, make(testset_size=30).train.X)


@pytest.mark.parametrize("as_tensor", [False, True])
def test_prefix_moves_the_query_and_keeps_its_label_as_target(as_tensor):
    ds = make()
    X, y = ds.train.X, ds.train.y
    if as_tensor:
        X, y = torch.as_tensor(X), torch.as_tensor(y)
    Xn, yn = normalization.cut_prefix(X, y, 4)
    Xn, yn = np.asarray(Xn), np.asarray(yn)
    assert Xn.shape == (400, 4, 5)
    assert np.all(Xn[:, -1, -1] == 0)
    assert np.array_equal(yn, ds.train.X[:, 3, -1])
    assert np.array_equal(Xn[:, :3], ds.train.X[:, :3])
    assert np.all(np.asarray(X)[:, 3, -1] == ds.train.X[:, 3, -1])  # the input is not changed
    queries, targets = normalization.prefix_queries(torch.as_tensor(ds.train.X), torch.as_tensor(ds.train.y), [4, 9])
    assert np.array_equal(queries[:, 0].numpy(), Xn[:, -1]) and np.array_equal(targets[:, 0].numpy(), yn)
    assert np.array_equal(targets[:, 1].numpy(), ds.train.y)  # the whole sequence's target
