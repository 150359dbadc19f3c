"""The softmax engine (hand-written gradient, one pass over the tokens) ≡ the query-row autograd engine."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import linattn
from linattn import data, models, objectives
from linattn.config import ConfigError, RunConfig
from linattn.objectives import Softmax, native
from linattn.objectives import softmax as se
from linattn.objectives.native import KnownFallback
from linattn.training.experiment import run
from linattn.training.keys import trajectory_code_hash
from linattn.training.train import gradient_descent

D, SEQ, H, R = 3, 6, 3, 2  # one D everywhere: D+1 is a static size of the native kernel (a new one compiles)
P, CHUNK = 600, 256        # 19 blocks of 32 sequences (the last padded), in 2 chunks where the kernel takes chunks
# native.load and the engine's _native without their per-process caches: a build for each call
_BUILD, _NATIVE = native.load.__wrapped__, se._native.__wrapped__


def _sequences(P=P, seed=0):
    """Random tokens (no task structure needed: the engines must agree on any data)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(P, SEQ, D + 1))
    y = X[:, -1, -1].copy()
    X[:, -1, -1] = 0.0
    return data.Sequences(X, y)


def _model(model, init=0.8, seed=1, softmax=True, dtype=torch.float64):
    """Random weights everywhere (init_weights' zero blocks filled too, so every entry enters the scores)."""
    rng = np.random.default_rng(seed)
    w = models.init_weights(model, head_num=H, in_dim=D, rank=R, init=init, rng=rng)
    w = {k: a + init / np.sqrt(D + 1) * rng.normal(size=a.shape) for k, a in w.items()}
    return models.build_model(model, w, softmax=softmax, dtype=dtype)


def _loss_and_grads(engine, net):
    for p in net.parameters():
        p.grad = None
    loss = engine.value_and_grad(net)
    return loss, [p.grad.clone() for p in net.parameters()]


def _rel(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("kernel", ["native", "eager"])
@pytest.mark.parametrize("vary_len", [False, True], ids=["full", "vary_len"])
@pytest.mark.parametrize("model", ["attnM", "attnS"])
def test_loss_and_gradient_equal_the_autograd_engine(model, vary_len, kernel):
    seqs = _sequences()
    ref_loss, ref_grads = _loss_and_grads(objectives.Autograd(seqs, vary_len=vary_len, chunk=100), _model(model))
    fast = Softmax(seqs, vary_len=vary_len, chunk=CHUNK, dtype=torch.float64, compile=kernel == "native")
    assert fast.kernel == kernel and len(fast.chunks) > 1
    net = _model(model)
    loss, grads = _loss_and_grads(fast, net)
    assert abs(loss - ref_loss) < 1e-10 * ref_loss
    assert abs(fast.value(net) - ref_loss) < 1e-10 * ref_loss
    for g, ref in zip(grads, ref_grads):
        assert ref.abs().max() > 0
        assert _rel(g, ref) < 1e-10
    # the gradient accumulates into .grad, as autograd's does
    fast.value_and_grad(net)
    for p, ref in zip(net.parameters(), grads):
        assert _rel(p.grad, 2 * ref) < 1e-12


@pytest.mark.parametrize("vary_len", [False, True], ids=["full", "vary_len"])
@pytest.mark.parametrize("model", ["attnM", "attnS"])
def test_float32_kernels_agree_with_the_float64_reference(model, vary_len):
    """The float32 arithmetic the figures train with: the native kernel and the eager one each within float32
    rounding of autograd in float64 (measured here: at most 3e-8 on the loss, 2.2e-7 on the gradient)."""
    seqs = _sequences()
    ref_loss, ref_grads = _loss_and_grads(objectives.Autograd(seqs, vary_len=vary_len, chunk=100), _model(model))
    for compile in (True, False):
        loss, grads = _loss_and_grads(Softmax(seqs, vary_len=vary_len, dtype=torch.float32, compile=compile),
                                      _model(model))
        assert abs(loss - ref_loss) < 1e-6 * ref_loss
        assert all(_rel(g, ref) < 2e-6 for g, ref in zip(grads, ref_grads))


@pytest.mark.parametrize("compile", [True, False], ids=["native", "eager"])
@pytest.mark.parametrize("model", ["attnM", "attnS"])
def test_large_scores_neither_overflow_nor_lose_accuracy(model, compile):
    """Scores in the hundreds (one key takes all the attention): the sums are computed again, shifted by the largest
    score, where the query's own score would let 2^z overflow."""
    seqs = _sequences(P=200)
    net = _model(model, init=40.0)
    ref_loss, ref_grads = _loss_and_grads(objectives.Autograd(seqs), net)
    assert net.query_weights(torch.as_tensor(seqs.X)).max() > 0.999
    W = net.key_query().detach()
    scores = torch.einsum("pa,hab,pnb->hpn", torch.as_tensor(seqs.X[:, -1]), W, torch.as_tensor(seqs.X))
    assert (scores - scores[..., -1:]).max() * se.LOG2E > se.SHIFT_LIMIT[torch.float64]  # the query's shift overflows
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-4)):
        loss, grads = _loss_and_grads(Softmax(seqs, dtype=dtype, compile=compile), _model(model, init=40.0))
        assert np.isfinite(loss) and abs(loss - ref_loss) < tol * ref_loss
        for g, ref in zip(grads, ref_grads):
            assert _rel(g, ref) < 10 * tol


def _huge_weight(model, value, dtype=torch.float64):
    """The test model with one weight of the scores set to ``value`` (ATTN_M: W_KQ[0][0, 0]; ATTN_S: W_Q[0][0, 0])."""
    net = _model(model, dtype=dtype)
    with torch.no_grad():
        (net.W_KQ if model == "attnM" else net.W_Q)[0, 0, 0] = value
    return net


def _engines(monkeypatch, seqs, dtype):
    """(name, engine) at ``dtype``: the native kernel built for each ``$LINATTN_KERNEL_ISA`` (``avx2`` only where the
    compiler targets x86), then the eager one."""
    for isa in ("native", "avx2", "portable"):
        monkeypatch.setenv("LINATTN_KERNEL_ISA", isa)
        monkeypatch.setattr(native, "load", _BUILD)  # a fresh build for this setting
        try:
            kernel = _NATIVE(D + 1, dtype == torch.float64)
        except RuntimeError:
            assert isa == "avx2", f"no {isa} build"
            continue
        monkeypatch.setattr(se, "_native", lambda dim, double, kernel=kernel: kernel)
        yield isa, Softmax(seqs, dtype=dtype)
    yield "eager", Softmax(seqs, dtype=dtype, compile=False)


@pytest.mark.parametrize("value", [1e30, -1e30])
@pytest.mark.parametrize("model", ["attnM", "attnS"])
def test_a_weight_of_1e30_gives_the_reference_loss_on_every_instruction_set(monkeypatch, tmp_path, model, value):
    """Scores of 10³⁰: one key takes all the attention, and a score's rounding (10²³ in float32) is far more than
    2^z spans, so the second pass must shift by the largest of the very scores it shifts. The torch reference
    (autograd, float64) is finite here, so every kernel must be: the native one built for AVX-512 (this CPU's),
    AVX2 and the compiler's baseline, and the eager one. ATTN_M's gradient agrees too; ATTN_S's reaches W_K through
    W_Q = 10³⁰, which multiplies the rounding of ∂L/∂W_KQ (exactly 0 in the reference) by 10³⁰: finite only."""
    monkeypatch.setenv("LINATTN_KERNEL_CACHE", str(tmp_path))
    try:
        native.compiler()
    except RuntimeError:
        pytest.skip("no C compiler")
    seqs = _sequences(P=200)
    ref_loss, ref_grads = _loss_and_grads(objectives.Autograd(seqs), _huge_weight(model, value))
    assert np.isfinite(ref_loss) and all(torch.isfinite(g).all() for g in ref_grads)
    W = _huge_weight(model, value).key_query().detach()
    scores = torch.einsum("pa,hab,pnb->hpn", torch.as_tensor(seqs.X[:, -1]), W, torch.as_tensor(seqs.X))
    assert scores.abs().max() > 1e29  # the regime: z's of 10³⁰
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 2e-6)):
        for name, engine in _engines(monkeypatch, seqs, dtype):
            loss, grads = _loss_and_grads(engine, _huge_weight(model, value, dtype))
            assert engine.kernel == ("eager" if name == "eager" else "native")
            assert abs(loss - ref_loss) <= tol * ref_loss, (name, dtype, loss, ref_loss)
            assert all(torch.isfinite(g).all() for g in grads), (name, dtype)
            if model == "attnM":
                assert all(_rel(g, ref) <= tol for g, ref in zip(grads, ref_grads)), (name, dtype)


def _run(engine, **kw):
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    settings = dict(model="attnS", head_num=H, rank=R, in_dim=D, seq_len=SEQ, trainset_size=300, testset_size=150,
                    epoch=200, init=1.0, lr=0.2, softmax=True, engine=engine, seed=4)
    settings.update(kw)
    if "draws" in fields:
        settings["draws"] = "streams"  # independent of the reference's random numbers (and of the default)
    return run(RunConfig(**settings), progress=False)


@pytest.mark.parametrize("model", ["attnM", "attnS"])
def test_whole_run_follows_the_autograd_engine(model):
    fast, slow = _run("auto", model=model), _run("autograd", model=model)
    assert fast.engine == "softmax" and slow.engine == "autograd"
    a, b = fast.history, slow.history
    assert a.train_loss[-1] < 0.7 * a.train_loss[0]  # the loss moves a lot over the 200 steps
    for x, ref in ((a.train_loss, b.train_loss), (a.test_iwl, b.test_iwl), (a.test_icl, b.test_icl)):
        assert np.max(np.abs(x - ref) / ref) < 1e-10


def test_float32_stays_close_to_float64():
    """float32 arithmetic with float64 sums. Measured here: loss 9e-9, gradient 6e-8 to 2e-7, 200-step loss curve
    4e-8 (asserted: 1e-7, 1e-6, 1e-6). Through the abrupt drops of a long run the difference peaks higher, up to a
    few 1e-6 (benchmarks/README.md), of which ~1e-6 comes from rounding the data alone."""
    seqs = data.make_datasets(in_dim=D, seq_len=SEQ, trainset_size=P, seed=3).train  # a task to learn
    runs = {}
    for dtype in (torch.float64, torch.float32):
        engine = Softmax(seqs, chunk=CHUNK, dtype=dtype, compile=True)
        net = _model("attnS", init=1.0)
        runs[dtype] = _loss_and_grads(engine, net), gradient_descent(net, engine, lr=0.2, epoch=200, progress=False)
    (l64, g64), h64 = runs[torch.float64]
    (l32, g32), h32 = runs[torch.float32]
    assert abs(l32 - l64) < 1e-7 * l64
    assert all(_rel(a, b) < 1e-6 for a, b in zip(g32, g64))
    assert h64.train_loss[-1] < 0.7 * h64.train_loss[0]
    assert np.max(np.abs(h32.train_loss - h64.train_loss) / h64.train_loss) < 1e-6


@pytest.mark.parametrize("model", ["attnM", "attnS", "mlp"])
def test_refuses_models_it_cannot_honour(model):
    """Linear attention and the MLP: a ValueError naming the model, not a wrong loss."""
    w = models.init_weights(model, head_num=H, in_dim=D, rank=R, rng=np.random.default_rng(0))
    net = models.build_model(model, w, softmax=False)
    engine = Softmax(_sequences(P=10))
    for call in (engine.value_and_grad, engine.value):
        with pytest.raises(ValueError, match=type(net).__name__):
            call(net)


def test_config_picks_the_softmax_engine():
    assert RunConfig(softmax=True).resolved_engine() == "softmax"
    assert RunConfig(softmax=True, engine="autograd").validate().resolved_engine() == "autograd"
    assert RunConfig().resolved_engine() == "exact"
    with pytest.raises(ConfigError, match="softmax attention only"):
        RunConfig(engine="softmax").validate()


def test_falls_back_to_eager_when_no_compiler_works(monkeypatch):
    def broken(dim, double):
        raise RuntimeError("no C compiler")

    monkeypatch.setattr(se, "_native", broken)
    monkeypatch.setattr(se, "_compile_failed", set())
    seqs = _sequences(P=200)
    ref_loss, ref_grads = _loss_and_grads(Softmax(seqs, dtype=torch.float64, compile=False), _model("attnS"))
    native = Softmax(seqs, dtype=torch.float64, compile=True)
    with pytest.warns(KnownFallback, match="no C compiler"):
        loss, grads = _loss_and_grads(native, _model("attnS"))
    assert native.kernel == "eager" and Softmax(seqs, dtype=torch.float64).kernel == "native"
    assert loss == ref_loss and all(torch.equal(a, b) for a, b in zip(grads, ref_grads))


@pytest.mark.parametrize("init", [0.8, 6.0], ids=["scores", "large-scores"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_kernel_without_avx512_gives_the_same_sums(monkeypatch, dtype, init):
    """The kernel's portable code (2^z from exponent bits, 256-bit vectors) against its AVX-512 code (vrndscale and
    vscalef, 512-bit vectors) on the same data: the same sums to the rounding of a different order of lanes. Where
    the CPU has no AVX-512 both builds take the portable code."""
    reference = _loss_and_grads(Softmax(_sequences(), dtype=dtype), _model("attnS", init=init, dtype=dtype))
    monkeypatch.setenv("CC", " ".join([*native.compiler(), "-mno-avx512f"]))
    monkeypatch.setattr(native, "load", native.load.__wrapped__)  # a fresh build with these flags
    try:
        portable = se._native.__wrapped__(D + 1, dtype == torch.float64)
    except RuntimeError:
        pytest.skip("the C compiler has no -mno-avx512f (not an x86 compiler)")
    monkeypatch.setattr(se, "_native", lambda dim, double: portable)
    loss, grads = _loss_and_grads(Softmax(_sequences(), dtype=dtype), _model("attnS", init=init, dtype=dtype))
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    assert abs(loss - reference[0]) <= tol * reference[0]
    assert all(_rel(g, ref) <= tol for g, ref in zip(grads, reference[1]))


def test_an_edit_of_the_native_kernel_changes_the_run_key(tmp_path):
    """The run store would serve stale softmax runs otherwise."""
    package = Path(linattn.__file__).parent
    same, edited = (tmp_path / name / "linattn" for name in ("same", "edited"))  # (the hash is cached by folder)
    for copy in (same, edited):
        shutil.copytree(package, copy, ignore=shutil.ignore_patterns("companion", "__pycache__"))
    kernel = edited / "objectives" / se.KERNEL_SOURCE.name
    kernel.write_text(kernel.read_text().replace("#define LANES 8", "#define LANES 16"))
    assert trajectory_code_hash(same) == trajectory_code_hash(package) != trajectory_code_hash(edited)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("vary_len", [False, True], ids=["full", "vary_len"])
@pytest.mark.parametrize("model", ["attnM", "attnS"])
def test_cuda_equals_cpu(model, vary_len):
    seqs = _sequences()
    ref_loss, ref_grads = _loss_and_grads(objectives.Autograd(seqs, vary_len=vary_len), _model(model))
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
        engine = Softmax(seqs, vary_len=vary_len, chunk=CHUNK, dtype=dtype, device="cuda", compile=True)
        loss, grads = _loss_and_grads(engine, _model(model).to("cuda"))
        assert abs(loss - ref_loss) < tol * ref_loss
        assert abs(engine.value(_model(model).to("cuda")) - ref_loss) < tol * ref_loss
        for g, ref in zip(grads, ref_grads):
            assert g.is_cuda and _rel(g.cpu(), ref) < 10 * tol
