import numpy as np
import pytest
import torch

from linattn import data, normalization, objectives
from linattn.models import build_model, init_weights, mlp_from_attn_m
from linattn.training.train import gradient_descent

D, H, R, SEQ = 3, 4, 2, 7


@pytest.fixture(scope="module")
def seqs():
    return data.make_datasets(in_dim=D, seq_len=SEQ, trainset_size=64, seed=1).train


def random_weights(model, rng):
    """Dense random weights (no zeroed blocks) so every entry of the closed forms is exercised."""
    w = init_weights(model, head_num=H, in_dim=D, rank=R, init=0.5, rng=rng)
    return {k: rng.normal(0, 0.5, v.shape) for k, v in w.items()}


def closed_form(model, w, X, scale):
    """The issue's formulas, evaluated with numpy one sequence at a time."""
    out = np.zeros(X.shape[0])
    for p, seq in enumerate(X):
        S = scale * sum(np.outer(t, t) for t in seq)
        xq = seq[-1]
        if model == "mlp":
            b = scale * sum(t[D] * t[:D] for t in seq[:-1])
            z = np.outer(b, xq[:D]).reshape(-1)
            out[p] = w["w2"] @ (w["W1"] @ z)
        else:
            for h in range(H):
                W_KQ = w["W_KQ"][h] if model == "attnM" else w["W_Q"][h].T @ w["W_K"][h]
                out[p] += xq @ W_KQ @ S @ w["W_V"][h][D]
    return out


@pytest.mark.parametrize("model", ["attnM", "attnS", "mlp"])
@pytest.mark.parametrize("scale", [1.0, 1 / (SEQ - 1)])
def test_query_output_matches_closed_form(model, scale, seqs):
    w = random_weights(model, np.random.default_rng(0))
    net = build_model(model, w)
    X = torch.as_tensor(seqs.X)
    expected = closed_form(model, w, seqs.X, scale)
    assert np.allclose(net(X, scale).detach().numpy(), expected, rtol=1e-10, atol=1e-12)
    # the model is linear in its fixed feature: the exact engine's view of the same output
    via_features = (net.features(X, scale) @ net.combined()).detach().numpy()
    assert np.allclose(via_features, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("model", ["attnM", "attnS"])
def test_softmax_rows_sum_to_one(model, seqs):
    net = build_model(model, random_weights(model, np.random.default_rng(3)), softmax=True)
    a = net.query_weights(torch.as_tensor(seqs.X))
    assert a.shape == (64, H, SEQ)
    assert torch.all(a > 0)
    assert torch.allclose(a.sum(-1), torch.ones(64, H, dtype=a.dtype))


@pytest.mark.parametrize("model", ["attnM", "attnS", "mlp"])
def test_paper_normalisation_divides_output_by_N(model, seqs):
    net = build_model(model, random_weights(model, np.random.default_rng(4)))
    X = torch.as_tensor(seqs.X)
    s_sum, s_mean = (normalization.token_scale(SEQ, normalize, vary_len=False) for normalize in ("sum", "mean"))
    assert torch.allclose(net(X, s_mean), net(X, s_sum) / (SEQ - 1))


def test_init_zeroed_blocks_and_scales():
    rng = np.random.default_rng(5)
    Dl, Hl, Rl, init = 6, 40, 3, 0.1
    m = init_weights("attnM", head_num=Hl, in_dim=Dl, init=init, rng=rng)
    assert np.all(m["W_KQ"][:, :Dl, Dl] == 0) and np.all(m["W_V"][:, Dl, :Dl] == 0)
    assert np.all(m["W_KQ"][:, Dl, :] != 0) and np.all(m["W_V"][:, Dl, Dl] != 0)
    assert abs(m["W_KQ"][:, :Dl, :Dl].std() / init - 1) < 0.05
    s = init_weights("attnS", head_num=Hl, in_dim=Dl, rank=Rl, init=init, init_scheme="jan2025", rng=rng)
    assert np.all(s["W_K"][:, :, Dl] == 0) and np.all(s["W_V"][:, Dl, :Dl] == 0)
    assert abs(s["W_Q"].std() / (init / np.sqrt(Rl * (Dl + 1))) - 1) < 0.05
    assert abs(s["W_V"][:, :Dl].std() / init - 1) < 0.05
    c = init_weights("attnS", head_num=Hl, in_dim=Dl, rank=Rl, init=init, init_scheme="dec2025", rng=rng)
    assert abs(c["W_Q"].std() / (init / np.sqrt(Hl * Rl * (Dl + 1))) - 1) < 0.05
    assert abs(c["W_V"][:, :Dl].std() / (init / np.sqrt(Hl) / (Dl + 1)) - 1) < 0.05
    old = init_weights("attnS", head_num=Hl, in_dim=Dl, rank=Rl, init=init, init_scheme="dec2024", rng=rng)
    assert abs(old["W_K"].std() / init - 1) < 0.05 and np.all(old["W_K"][:, :, Dl] != 0)  # label column kept
    expected_v = np.zeros((Hl, Dl + 1, Dl + 1))
    expected_v[:, Dl, Dl] = init  # every head starts with v_h = (0, …, 0, init)
    assert np.array_equal(old["W_V"], expected_v)
    p = init_weights("mlp", head_num=Hl, in_dim=Dl, init=init, rng=rng)
    assert p["W1"].shape == (Hl, Dl * Dl) and p["w2"].shape == (Hl,)


def antithetic(seqs):
    """Each sequence twice, the second with every label negated (task −w): odd moments in y vanish exactly."""
    X2 = seqs.X.copy()
    X2[..., -1] *= -1
    return data.Sequences(np.concatenate([seqs.X, X2]), np.concatenate([seqs.y, -seqs.y]))


@pytest.mark.parametrize("engine", ["exact", "autograd"])
def test_attn_m_and_cubic_mlp_share_the_loss_trajectory(engine):
    """Paper Section 4.1: with its zero blocks at zero ATTN_M is the two-layer MLP on z. On a data set symmetric
    under w → −w the zero blocks get exactly zero gradient, so the identity holds for the whole run."""
    ds = data.make_datasets(in_dim=3, seq_len=9, trainset_size=100, seed=7)
    seqs = antithetic(ds.train)
    w = init_weights("attnM", head_num=4, in_dim=3, init=0.1, rng=np.random.default_rng(8))
    curves = []
    for model, weights in (("attnM", w), ("mlp", mlp_from_attn_m(w))):
        net = build_model(model, weights)
        obj = (objectives.Exact.from_data(net, seqs, normalize="mean") if engine == "exact"
               else objectives.Autograd(seqs, normalize="mean"))
        curves.append(gradient_descent(net, obj, lr=0.1, epoch=300, progress=False).train_loss)
    a, m = curves
    assert a[-1] < 0.5 * a[0]  # the run goes through the drop, not only the plateau
    assert np.max(np.abs(a - m) / a) < 1e-6


@pytest.mark.parametrize("model, rank", [("attnM", 1), ("attnS", 1), ("attnS", R), ("attnS", D)])
def test_combined_with_vjp_gives_combined_and_its_gradient(model, rank):
    """The hand-written backward of combined() (the exact engine's step) equals autograd's, for dense random
    weights, including the label row of W_KQ that combined() leaves out (its gradient is zero); the value beside it
    is combined()."""
    rng = np.random.default_rng(3)
    w = {k: rng.normal(0, 0.5, v.shape)
         for k, v in init_weights(model, head_num=H, in_dim=D, rank=rank, init=0.5, rng=rng).items()}
    net = build_model(model, w)
    g = torch.as_tensor(rng.normal(size=net.combined().numel()))
    (net.combined() @ g).backward()
    expected = [p.grad.clone() for p in net.parameters()]
    m, vjp = net.combined_with_vjp()
    assert torch.equal(m, net.combined())
    got = vjp(g)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a.shape == b.shape
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-13 * float(b.abs().max()))


@pytest.mark.parametrize("model", ["attnM", "attnS"])
def test_the_exact_step_without_autograd_matches_the_autograd_step(model, seqs):
    """Exact.value_and_grad through combined_with_vjp and through autograd give the same loss and gradients, and add to
    gradients already there as autograd does."""
    rng = np.random.default_rng(4)
    net = build_model(model, random_weights(model, rng))
    engine = objectives.Exact.from_data(net, seqs, normalize="sum")
    loss = engine.moments.loss(net.combined())
    loss.backward()
    expected = [p.grad.clone() for p in net.parameters()]
    for p in net.parameters():
        p.grad = None
    assert engine.value_and_grad(net) == pytest.approx(loss.item(), rel=1e-14)
    for p, b in zip(net.parameters(), expected):
        np.testing.assert_allclose(p.grad.numpy(), b.numpy(), rtol=0, atol=1e-13 * float(b.abs().max()))
    engine.value_and_grad(net)  # a second call accumulates, as backward() would
    for p, b in zip(net.parameters(), expected):
        np.testing.assert_allclose(p.grad.numpy(), 2 * b.numpy(), rtol=0, atol=1e-13 * float(b.abs().max()))
