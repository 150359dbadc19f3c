"""``$LINATTN_KERNEL_ISA``: the kernels built for another instruction set than this CPU's whole one (``avx2``: no
AVX-512, as on a CPU without it), kept in the cache apart from the default build, with the same sums."""

import json
import os
import subprocess
import sys

import pytest

from linattn.objectives import native

# a fresh process: counts and records its compiler calls, then prints them with the softmax engine's loss and
# gradient in float32 and float64 on fixed random tokens and weights (ATTN_S, D = 3, H = 3, R = 2, P = 600)
PROBE = """
import json, subprocess, numpy as np, torch
import linattn.objectives.native as n
from linattn import data, models
from linattn.objectives import Softmax
calls = []; run = subprocess.run
n.subprocess.run = lambda c, **k: calls.append(c) or run(c, **k)
rng = np.random.default_rng(0)
X = rng.normal(size=(600, 6, 4)); y = X[:, -1, -1].copy(); X[:, -1, -1] = 0.0
w = models.init_weights("attnS", head_num=3, in_dim=3, rank=2, init=0.8, rng=np.random.default_rng(1))
w = {k: a + 0.4 * rng.normal(size=a.shape) for k, a in w.items()}
out = {}
for dtype in (torch.float32, torch.float64):
    net = models.build_model("attnS", w, softmax=True, dtype=dtype)
    engine = Softmax(data.Sequences(X, y), dtype=dtype)
    loss = engine.value_and_grad(net)
    assert engine.kernel == "native"
    out[str(dtype)] = [float(loss), [p.grad.flatten().tolist() for p in net.parameters()]]
print(json.dumps(dict(calls=calls, out=out)))
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LINATTN_KERNEL_CACHE", str(tmp_path))
    try:
        native.compiler()
    except RuntimeError:
        pytest.skip("no C compiler")
    return tmp_path


def _fresh(isa: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "LINATTN_KERNEL_ISA"}
    if isa is not None:
        env["LINATTN_KERNEL_ISA"] = isa
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", PROBE], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _defines(command: list[str]) -> str:
    """The macros the compiler predefines under ``command``'s flags (its -D, -o and source left out)."""
    flags = [a for a in command[1:] if a.startswith(("-m", "-O"))]
    return subprocess.run([command[0], *flags, "-dM", "-E", "-x", "c", os.devnull], capture_output=True,
                          text=True, check=True).stdout


def _rel(a: list[list[float]], b: list[list[float]]) -> float:
    num = sum((x - y) ** 2 for u, v in zip(a, b) for x, y in zip(u, v)) ** 0.5
    return num / sum(y ** 2 for v in b for y in v) ** 0.5


def test_the_avx2_setting_builds_without_avx512_apart_in_the_cache_with_the_same_sums(cache):
    default = _fresh(None)
    if "__x86_64__" not in _defines(default["calls"][0]):
        pytest.skip("not an x86-64 compiler")
    avx2 = _fresh("avx2")
    assert len(default["calls"]) == len(avx2["calls"]) == 2  # float32 and float64: one build each, none shared
    for command in avx2["calls"]:
        macros = _defines(command)
        assert "__AVX2__" in macros and "__FMA__" in macros and "__AVX512F__" not in macros
    assert len(list(cache.glob("softmax_kernel-*.so"))) == 4
    assert _fresh("avx2")["calls"] == [] and _fresh(None)["calls"] == []  # each served its own kept build
    for dtype, tol in (("torch.float32", 2e-6), ("torch.float64", 1e-12)):
        (loss, grads), (ref_loss, ref_grads) = avx2["out"][dtype], default["out"][dtype]
        assert abs(loss - ref_loss) <= tol * ref_loss
        assert _rel(grads, ref_grads) <= tol


@pytest.mark.parametrize("isa, first", [("native", ["-march=native"]), ("portable", []), ("", ["-march=native"])])
def test_each_setting_names_its_flags(monkeypatch, isa, first):
    monkeypatch.setenv("LINATTN_KERNEL_ISA", isa)
    assert native.isa_flags()[0] == first


def test_an_unknown_setting_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("LINATTN_KERNEL_ISA", "avx3")
    with pytest.raises(ValueError, match="LINATTN_KERNEL_ISA='avx3'.*native, avx2, portable"):
        native.load.__wrapped__("exact_kernel.c")
