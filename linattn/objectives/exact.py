"""The exact objective of the linear models: the loss as a quadratic form in their combined weights.

For ATTN_M, ATTN_S and the MLP the prediction is linear in a fixed feature T of a sequence once the weights are
combined, ŷ = ⟨m(θ), T⟩ (``models.py``: ``features()`` and ``combined()``), so over P sequences

    L(θ) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩,   m = m(θ).

One chunked pass over the data builds the three moments (float64); a step afterwards costs O(F²) whatever P and N are,
and its gradient goes back through ``combined()`` by the model's own ``combined_with_vjp`` (attention), else by
autograd. ``vary_len`` averages the prefixes' moments.

The compiled loop (``Exact.kernel == "native"``). A step is some 30 small products, and as torch operations each
pays a few microseconds of dispatch: ~100 µs a step at F = 60 for ~1 µs of arithmetic. For the paper's three model
classes (ATTN_M, ATTN_S of any rank, the MLP; chosen by *exact* type, so a subclass, which may change the model,
keeps the generic path) in float64 on the CPU, :meth:`Exact.compiled_steps` hands ``train.gradient_descent`` the
loop of ``exact_kernel.c``: many whole steps a call (combine, loss and test losses, gradient back through the
combination as ``combined_with_vjp`` writes it, update), returning to Python only at snapshots, a non-finite loss
or the end. Why C: it needs no new dependency (numba would be one, with its own release cycle against numpy's), it
is built and loaded like the softmax kernel (``native.py``: the system's compiler, once per process), and a step of
microseconds needs a compiled loop over steps, which neither a Python loop of numpy calls nor a captured torch graph
(one launch a step) gives. Where no C compiler works the engine warns once and keeps the torch step (the same
numbers to rounding); float32 and other devices keep it too.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from ..models import MLP, AttnM, AttnS
from ..normalization import prefix_terms
from . import native
from .autograd import Autograd
from .base import DEFAULT_CHUNK, Moments, NotLinearError, Objective, check_linear, chunks
from .declarations import ExactEngine
from .native import KnownFallback, fallback_reason

if TYPE_CHECKING:
    from ..data import Sequences
    from ..models import Model

KERNEL_SOURCE = Path(__file__).with_name("exact_kernel.c")
# the model classes the compiled loop knows, by exact type, with its code for each
_KINDS = {AttnM: 0, AttnS: 1, MLP: 2}
_compile_failed = False  # the compiler failed once in this process: the torch step from then on
CHECK_ROWS = 256  # sequences on which from_data compares features() @ combined() with forward()


@functools.cache
def _kernel():
    """``exact_steps`` of ``exact_kernel.c``, compiled and loaded once per process (raises where no compiler works)."""
    fn = native.load(KERNEL_SOURCE.name).exact_steps
    P, i = ctypes.c_void_p, ctypes.c_int
    fn.argtypes = [i, i, i, i, ctypes.c_long, ctypes.c_double, ctypes.c_double, P, P, i, P, P, P, P, P, P, P, P, P]
    fn.restype = ctypes.c_long
    return fn


def _pointers(values, kind=ctypes.c_void_p):
    return (kind * max(1, len(values)))(*values)


class CompiledSteps:
    """Steps of gradient descent on one model through ``exact_kernel.c``, updating its parameters in place.

    ``steps(first, n, lr, losses, tests, values)`` trains up to ``n`` steps and writes step ``first + i``'s loss to
    ``losses[first + i]``, each test objective's loss to ``tests[k][first + i]`` and the value weights to
    ``values[first + i]`` (``values`` None: not recorded); it returns how many steps it made: ``n``, or fewer when
    step ``first + returned`` had a non-finite loss (written, not applied).
    """

    def __init__(self, fn, model, train: "Exact", tests: list):
        self.fn, self.model = fn, model
        self.kind = _KINDS[type(model)]
        self.params = list(model.parameters())
        self.sizes = (len(model.value_weights()), model.in_dim, model.W_Q.shape[1] if self.kind == 1 else 1)
        self.train, self.tests = train.moments, [t.moments for t in tests]
        self._t_yy = _pointers([m.yy for m in self.tests], ctypes.c_double)
        self._t_yT = _pointers([m.yT.data_ptr() for m in self.tests])
        self._t_TT = _pointers([m.TT.data_ptr() for m in self.tests])

    def __call__(self, first: int, n: int, lr: float, losses, tests: list, values=None) -> int:
        p = [q.data_ptr() for q in self.params] + [None] * (3 - len(self.params))
        rows = _pointers([row.ctypes.data + 8 * first for row in tests])
        vals = None if values is None else values.ctypes.data + values.strides[0] * first
        m = self.train
        done = self.fn(self.kind, *self.sizes, n, lr, m.yy, m.yT.data_ptr(), m.TT.data_ptr(), len(self.tests),
                       self._t_yy, self._t_yT, self._t_TT, *p, losses.ctypes.data + 8 * first, rows, vals)
        if done < 0:
            raise MemoryError("the exact kernel could not allocate its buffers")
        return done


def _float64_cpu(*tensors) -> bool:
    return all(t.dtype == torch.float64 and t.device.type == "cpu" and t.is_contiguous() for t in tensors)


class Exact(ExactEngine, Objective):
    """The mean squared error through the data's moments: identical in exact arithmetic to
    :class:`~linattn.objectives.Autograd`.

    A step computes m = combined(θ) and L(m) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩ (one F×F matrix-vector
    product); the gradient goes back through ``combined()`` by ``model.combined_with_vjp`` where the model has it, else
    by autograd, so every model and option shares this path.
    That is only the model's loss if ``features(X) @ combined()`` is its ``forward(X)``: :meth:`from_data` checks
    this once, on the first chunk (:func:`check_linear`).
    """

    def __init__(self, moments: Moments, dtype=torch.float64, kernel: str = "native"):
        # the compiled loop reads E[yT] and E[TTᵀ] as dense arrays (the population moments come as a transposed view)
        moments.yT, moments.TT = moments.yT.contiguous(), moments.TT.contiguous()
        self.moments = moments
        self.dtype = dtype
        self.kernel = kernel  # "native": gradient descent may take compiled_steps(); "torch": value_and_grad only

    @classmethod
    def from_data(cls, model: Model, seqs: Sequences, *, vary_len: bool = False, normalize: str = "sum",
                  chunk: int = DEFAULT_CHUNK, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float64,
                  fallback: bool = False, shared: dict | None = None) -> "Exact | Autograd":
        """The objective on ``seqs`` after one pass over them for the moments.

        On the first ``CHECK_ROWS`` full-length sequences it first checks that ``model.features() @ model.combined()``
        is ``model.forward()`` (:func:`check_linear`). If not, it raises :class:`NotLinearError` (a ValueError), or
        with ``fallback=True`` warns and returns the :class:`~linattn.objectives.Autograd` objective on the same data
        (autograd through ``forward()``, so correct for any model, at a cost per step that grows with P·N).
        ``shared``: a dict keeping the moments by data set and feature map, so that models with the same features
        (ATTN_M and ATTN_S of any rank) trained on the same ``seqs`` object read them once (each model still checked).
        """
        if getattr(model, "softmax", False):
            raise ValueError("the exact engine covers linear models only; softmax needs engine 'autograd' or 'softmax'")
        n_tok = seqs.X.shape[1]

        def batches(rows=None):
            checked = False
            X, y = (seqs.X, seqs.y) if rows is None else (seqs.X[:rows], seqs.y[:rows])
            for Xc, yc in chunks(X, y, chunk, device, torch.float64):
                for Xn, yn, scale in prefix_terms(Xc, yc, vary_len=vary_len, normalize=normalize):
                    T = model.features(Xn, scale)
                    if not checked and Xn.shape[1] == n_tok:  # a few sequences show a different forward()
                        check_linear(model, Xn[:CHECK_ROWS], scale, features=T[:CHECK_ROWS])
                        checked = True
                    yield T, yn

        key = (id(seqs), type(model).features, vary_len, normalize, chunk, str(device))
        kept = None if shared is None else shared.get(key)
        try:
            with torch.no_grad():
                if kept is None:
                    mom = Moments.accumulate(batches())
                else:
                    for _ in batches(CHECK_ROWS):  # the check alone
                        pass
                    mom = kept[1]
        except NotLinearError as e:
            if not fallback:
                raise
            warnings.warn(f"{str(e).split(';')[0]}; falling back to the autograd engine", stacklevel=2)
            return Autograd(seqs, vary_len=vary_len, normalize=normalize, chunk=chunk, dtype=dtype, device=device)
        if shared is not None and kept is None:
            shared[key] = seqs, mom  # seqs kept alive: its id is the key
        return cls(dataclasses.replace(mom, yT=mom.yT.to(dtype), TT=mom.TT.to(dtype)), dtype)

    @classmethod
    def for_data(cls, model: Model, seqs: Sequences, **opts: Any) -> Exact | Autograd:
        """:meth:`from_data` (the registry's name for it)."""
        return cls.from_data(model, seqs, **opts)

    def value_and_grad(self, model: Model) -> float:
        """The loss; its gradient is accumulated into the parameters' ``.grad``: through the model's own
        ``combined_with_vjp`` where it has one (the attention models: no autograd graph, about three times faster a
        step), else by autograd through ``combined()``."""
        if not hasattr(model, "combined_with_vjp"):
            loss = self.moments.loss(model.combined())
            loss.backward()
            return loss.item()
        with torch.no_grad():
            m, vjp = cast("AttnM | AttnS", model).combined_with_vjp()  # the attention models have it
            loss, g = self.moments.loss_and_grad(m)
            for p, grad in zip(model.parameters(), vjp(g)):
                grad = grad.to(p.dtype)
                p.grad = grad if p.grad is None else p.grad + grad
        return loss.item()

    def value(self, model: Model) -> float:
        with torch.no_grad():
            return self.moments.loss(model.combined()).item()

    def compiled_steps(self, model: Model, tests: Sequence = ()) -> CompiledSteps | None:
        """The compiled loop of ``model`` with the test objectives ``tests`` (:class:`CompiledSteps`), or None where
        it does not apply: ``kernel`` is not "native", the model is not exactly ATTN_M, ATTN_S or the MLP (a subclass
        may change what it computes), or the weights, data moments or a test objective are not float64 exact
        objectives on the CPU. Where no C compiler works it warns once per process and returns None from then on."""
        global _compile_failed
        m = self.moments
        if self.kernel != "native" or _compile_failed or type(model) not in _KINDS or getattr(model, "softmax", False):
            return None
        if not _float64_cpu(*model.parameters(), m.yT, m.TT) or not all(
                type(t) is Exact and _float64_cpu(t.moments.yT, t.moments.TT) for t in tests):
            return None
        try:
            fn = _kernel()
        except Exception as err:  # no C compiler
            _compile_failed = True
            warnings.warn(f"the exact engine's C kernel could not be built ({fallback_reason(err)}); it takes the "
                          "torch step (same result, slower)", KnownFallback, stacklevel=3)
            return None
        return CompiledSteps(fn, model, self, list(tests))
