"""Gradient flow on the training objective, on the same step axis as gradient descent.

The paper's dynamics are the flow τ dθ/dt = −½ ∂L/∂θ (loss without ½). Full-batch GD with rate η is its forward
Euler discretisation with Δt/τ = 2η, so GD step k sits at t/τ = 2η·k. :func:`gradient_flow` integrates the same flow
written on GD's step axis, dθ/dk = −η ∂L/∂θ (k continuous), with scipy's ``solve_ivp`` (adaptive, error-controlled),
and reports the loss at the integer k = 0 … epoch−1 that GD records, so a flow curve, a GD curve and a theory curve
share one axis (``theory.steps_to_time`` turns k into the paper's t/τ) — or only at chosen steps (``record``), so that
a flow of 10⁹ steps is the few hundred points it recorded. On the exact and population engines the loss is the
quadratic form L(m) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩ of the combined weight m(θ), and its Hessian in θ is
written out (:func:`loss_hessian`): the Jacobian a stiff integrator (BDF, LSODA, Radau) needs to take long steps on
the plateaus, where E[TTᵀ]'s curvatures span several decades.

What is integrated. Only the weights that move: a model declares the entries whose gradient is zero for all data and
weights (``fixed_entries()``: ATTN_M's label row of W_KQ, ATTN_S's label column of W_Q, which meet the query's zeroed
label), and they stay where they start (200 of ATTN_M's 240 weights at H = 8, D = 4 are integrated). Where the
combined weight is bilinear in those weights (``bilinear_map()``: ATTN_M, the MLP) and the engine is the exact or
population one in float64, the right-hand side and the Hessian are ``BilinearLoss``'s, written out on the
moments once per flow (numpy, no torch call a right-hand side); any other model or engine goes through the engine's
``value_and_grad`` and :func:`loss_hessian` (``benchmarks/bench_flow.py`` compares the two on the phase diagram's
cells).

When does GD track the flow? At the published learning rates GD is the flow shifted slightly in time: measured
(``benchmarks/bench_engines.py --only flow``, ``benchmarks/README.md``) the maximum relative loss difference is 4.1%
for Figure 1b (lr 1e-3) and 8.7% for Figure 3a (lr 0.02), both in the middle of a drop (drops shifted by ≤ 10
steps out of thousands), and ≤ 2e-6 on the plateaus and at the end. The shift is first order in η (forward Euler);
GD departs from the flow when η times the largest Hessian eigenvalue is no longer small.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Callable

import numpy as np
from numpy.typing import ArrayLike

from ..errors import ConfigError
from .train import History, Records, TrainingDiverged, weights_of

if TYPE_CHECKING:
    from ..models import Model
    from ..objectives.base import Moments, Objective

_METHODS = ("RK45", "DOP853", "LSODA", "Radau", "BDF")
_IMPLICIT = ("LSODA", "Radau", "BDF")  # the methods that use a Jacobian


def moving_entries(model: Model) -> np.ndarray:
    """Boolean (n,) in ``parameters_to_vector``'s layout: False on the entries the model declares fixed
    (``model.fixed_entries()``: their gradient is zero for all data and weights), True on the others, which the flow
    integrates. Every entry of a model without the declaration."""
    params = list(model.parameters())
    fixed = getattr(model, "fixed_entries", lambda: [None] * len(params))()
    return np.concatenate([np.ones(p.numel(), dtype=bool) if f is None else ~f.reshape(-1).cpu().numpy()
                           for p, f in zip(params, fixed)]) if params else np.zeros(0, dtype=bool)


class _Vectorised:
    """The model's moving weights (:func:`moving_entries`) as one float64 numpy vector θ, and the flow's right-hand
    side −η ∇L and its Jacobian −η ∇²L in that form, through the engine (``value_and_grad``) and
    :func:`loss_hessian`. The fixed entries keep the values they had when this was built."""

    def __init__(self, model, objective, lr: float):
        import torch
        from torch.nn.utils import parameters_to_vector

        self.model, self.objective, self.lr = model, objective, lr
        self.params = list(model.parameters())
        self.moving = moving_entries(model)
        self.full = parameters_to_vector(self.params).detach().cpu().to(torch.float64).numpy().copy()
        self.evaluations = 0

    def get(self) -> np.ndarray:
        return self.full[self.moving].copy()

    def set(self, theta: np.ndarray) -> None:
        import torch
        from torch.nn.utils import vector_to_parameters

        full = self.full.copy()
        full[self.moving] = theta
        ref = self.params[0]
        with torch.no_grad():
            vector_to_parameters(torch.as_tensor(full, dtype=ref.dtype, device=ref.device), self.params)

    def _check(self, loss: float) -> None:
        self.evaluations += 1
        if not math.isfinite(loss):
            raise TrainingDiverged(self.evaluations, loss, self.lr)

    def rhs(self, _t: float, theta: np.ndarray) -> np.ndarray:
        import torch
        from torch.nn.utils import parameters_to_vector

        self.set(theta)
        for p in self.params:
            p.grad = None
        self._check(self.objective.value_and_grad(self.model))
        grad = parameters_to_vector([p.grad for p in self.params])
        return -self.lr * grad.detach().cpu().to(torch.float64).numpy()[self.moving]

    def jac(self, _t: float, theta: np.ndarray) -> np.ndarray:
        """∂(−η ∇L)/∂θ = −η ∇²L (:func:`loss_hessian`, its rows and columns of the moving entries)."""
        self.set(theta)
        return -self.lr * loss_hessian(self.model, self.objective.moments)[np.ix_(self.moving, self.moving)]


class BilinearLoss:
    """The exact loss L(m) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩ of a model whose combined weight is bilinear in its
    moving weights θ = (a, b) (``model.bilinear_map()``: m = Φ vec(M), M = Σ_h a_hᵀ b_h, a (H, n_a), b (H, n_b)),
    with its gradient and Hessian in θ written out — set up once per flow, a few small products a call. With
    G = ∂L/∂M = Σ_f g_f Φ[f] (n_a, n_b), g = ∂L/∂m = 2 (E[TTᵀ] m − E[yT]):

        ∂L/∂a_h = G b_h,   ∂L/∂b_h = Gᵀ a_h,
        ∇²L = 2 Kᵀ Q K + (G between a_h and b_h of the same head),   Q = Φᵀ E[TTᵀ] Φ,   K = ∂vec(M)/∂θ,

    Q (n_a n_b × n_a n_b) computed once, and Kᵀ Q K contracted block by block with a and b (K is a ⊗ b's
    derivative: ∂M[i, j]/∂a_h[i'] = δ_ii' b_h[j], ∂M[i, j]/∂b_h[j'] = δ_jj' a_h[i]), some n·n_a·n_b·(n_a + n_b)
    flops instead of Jᵀ E[TTᵀ] J's n²·F.

    The gradient is numpy float64 (products of at most F×F: one thread, no torch dispatch). The Hessian's products
    are larger, and numpy's BLAS would spread them over every core and spin between calls (measured on two busy
    cores: 11 ms a Hessian instead of 0.2 ms), so they go through torch, whose thread count ``linattn.run`` sets
    (one for the exact engine).
    """

    def __init__(self, Phi: np.ndarray, heads: int, moments):
        import torch

        F, self.na, self.nb = Phi.shape
        self.H = heads
        self.Phi = np.ascontiguousarray(Phi.reshape(F, -1), dtype=np.float64)  # m = Phi @ vec(M)
        self.TT = moments.TT.detach().cpu().numpy().astype(np.float64)
        self.yT = moments.yT.detach().cpu().numpy().astype(np.float64)
        self.yy = float(moments.yy)
        Q = torch.as_tensor(2.0 * self.Phi.T @ self.TT @ self.Phi).reshape(self.na, self.nb, self.na, self.nb)
        # 2Q[i, j, i', j'] laid out for the Hessian's blocks: (contracted with x, kept, kept, contracted with y)
        self._Q_aa = Q.permute(1, 0, 2, 3).reshape(-1, self.nb)  # x = b over j, y = b over j'
        self._Q_ab = Q.permute(1, 0, 3, 2).reshape(-1, self.na)  # x = b over j, y = a over i'
        self._Q_bb = Q.permute(0, 1, 3, 2).reshape(-1, self.na)  # x = a over i, y = a over i'
        self._out = self._buffer()  # the Hessian's buffer and its views

    def split(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = self.H * self.na
        return theta[:n].reshape(self.H, self.na), theta[n:].reshape(self.H, self.nb)

    def combined(self, theta: np.ndarray) -> np.ndarray:
        """m(θ) = Φ vec(Σ_h a_hᵀ b_h), the model's ``combined()``."""
        a, b = self.split(theta)
        return self.Phi @ (a.T @ b).reshape(-1)

    def _parts(self, theta):
        """(a, b, m, r, G): r = E[TTᵀ] m − E[yT], G = ∂L/∂M = Σ_f 2 r_f Φ[f]. Written out rather than through
        :meth:`split` and :meth:`combined`: the integrator calls it ~10⁵ times a phase diagram, where a call's own
        overhead is a fair part of the microseconds it takes."""
        n = self.H * self.na
        a, b = theta[:n].reshape(self.H, self.na), theta[n:].reshape(self.H, self.nb)
        m = self.Phi @ (a.T @ b).reshape(-1)
        r = self.TT @ m - self.yT
        return a, b, m, r, (2.0 * r @ self.Phi).reshape(self.na, self.nb)

    def loss_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """(L(θ), ∇L(θ)), θ = (vec a, vec b); L = E[y²] + ⟨m, r − E[yT]⟩."""
        a, b, m, r, G = self._parts(theta)
        return float(self.yy + m @ (r - self.yT)), np.concatenate([(b @ G.T).reshape(-1), (a @ G).reshape(-1)])

    def hessian(self, theta: np.ndarray) -> np.ndarray:
        """∇²L(θ) (n, n), rows and columns in θ's order (a_h[i] at h·n_a + i, then b_h[j] at H·n_a + h·n_b + j)."""
        return self._hessian(theta).numpy().copy()

    def _hessian(self, theta: np.ndarray):
        """:meth:`hessian` as a torch tensor that the next call overwrites (its blocks are written into views of one
        buffer made with the loss: a Hessian is a few small products, and a fresh buffer and its views cost a tenth
        of it)."""
        import torch

        out, aa, ab, ab_diag, bb, ab2, ba = self._out
        a, b, _, _, G = self._parts(theta)
        H, na, nb = self.H, self.na, self.nb
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)

        def block(x, Q, y, rows):  # [h, r, h', c] = Σ_kl x_h[k] Q[k, r, c, l] y_h'[l], Q as (k·r·c, l)
            inner = torch.mm(Q, y.T).reshape(x.shape[1], -1)
            return torch.mm(x, inner).view(H, rows, -1, H).permute(0, 1, 3, 2)

        aa.copy_(block(tb, self._Q_aa, tb, na))
        ab.copy_(block(tb, self._Q_ab, ta, na))
        ab_diag.add_(torch.from_numpy(G)[..., None])  # ∂²⟨g, m⟩/∂a_h[i]∂b_h[j] = G[i, j]
        bb.copy_(block(ta, self._Q_bb, ta, nb))
        ba.copy_(ab2.T)
        return out

    def _buffer(self) -> tuple:
        """(the Hessian's buffer, its views: the a–a and a–b blocks by head (and the a–b block's same-head diagonal),
        the b–b block by head, the a–b and b–a blocks as matrices)."""
        import torch

        H, na, nb = self.H, self.na, self.nb
        out = torch.empty(H * (na + nb), H * (na + nb), dtype=torch.float64)
        ab2 = out[:H * na, H * na:]
        ab = ab2.view(H, na, H, nb)
        return (out, out[:H * na, :H * na].view(H, na, H, na), ab, ab.diagonal(dim1=0, dim2=2),
                out[H * na:, H * na:].view(H, nb, H, nb), ab2, out[H * na:, :H * na])


class _Bilinear(_Vectorised):
    """:class:`_Vectorised` with the right-hand side and Jacobian of :class:`BilinearLoss` (no torch a call)."""

    def __init__(self, model, objective, lr: float, Phi: np.ndarray):
        super().__init__(model, objective, lr)
        self.loss = BilinearLoss(Phi, len(model.value_weights()), objective.moments)

    def rhs(self, _t: float, theta: np.ndarray) -> np.ndarray:
        loss, grad = self.loss.loss_and_grad(theta)
        self._check(loss)
        return -self.lr * grad

    def jac(self, _t: float, theta: np.ndarray) -> np.ndarray:
        return -self.lr * self.loss._hessian(theta).numpy()


def _vectorised(model, objective, lr: float) -> _Vectorised:
    """:class:`_Bilinear` where its numbers are the engine's: an exact or population engine (whose loss is its
    moments' quadratic form) in float64, a float64 model on the CPU with a ``bilinear_map()``; else the engine's own
    gradient (:class:`_Vectorised`)."""
    import torch

    from ..objectives.exact import Exact

    Phi = getattr(model, "bilinear_map", lambda: None)()
    params = list(model.parameters())
    if (Phi is None or not isinstance(objective, Exact) or objective.moments.TT.dtype != torch.float64
            or not all(p.dtype == torch.float64 and p.device.type == "cpu" for p in params)):
        return _Vectorised(model, objective, lr)
    return _Bilinear(model, objective, lr, Phi)


def loss_hessian(model: Model, moments: Moments) -> np.ndarray:
    """∇²L(θ) (n, n) of the quadratic loss L = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩ of the model's combined weight
    m(θ), θ its parameters in ``parameters()`` order:

        ∇²L = 2 Jᵀ E[TTᵀ] J + ∂²⟨g, m⟩/∂θ²,   J = ∂m/∂θ,   g = ∂L/∂m = 2 (E[TTᵀ] m − E[yT])

    (``model.combined_jacobian()``, ``model.combined_curvature(g)``: written out for ATTN_M, autograd otherwise).
    ``moments``: the exact or population engine's (``objectives.Moments``). Float64 numpy."""
    import torch

    with torch.no_grad():
        m = model.combined().to(moments.TT.dtype)
        TT = moments.TT
        g = 2.0 * (TT @ m - moments.yT)
    J = model.combined_jacobian().to(TT.dtype)
    out = 2.0 * J.T @ TT @ J + model.combined_curvature(g).to(TT.dtype)
    return out.detach().cpu().numpy().astype(np.float64)


def check_flow(objective: Objective, *, method: str, jacobian: bool, record: ArrayLike | None = None,
               epoch: int) -> np.ndarray:
    """The recorded steps (``record``; None: every step 0 … epoch−1) as an int64 array, after checking what
    :func:`gradient_flow` is asked: ConfigError for a method that is not solve_ivp's, a Jacobian for an explicit
    method or for an objective without moments (only the exact and population engines have them), or recorded steps
    that are not increasing integers in [0, epoch]."""
    if method not in _METHODS:
        raise ConfigError(f"method must be one of {_METHODS}, got {method!r}", field="method", value=method)
    if jacobian and method not in _IMPLICIT:
        raise ConfigError(f"an analytic Jacobian needs an implicit method ({', '.join(_IMPLICIT)}); {method} uses "
                          "none", field="method", value=method)
    if jacobian and getattr(objective, "moments", None) is None:
        name = getattr(objective, "name", type(objective).__name__)
        raise ConfigError(f"the analytic Jacobian is the Hessian of the loss's moments: the {name} engine has none "
                          "(use the exact or population engine, or jacobian=False)", field="engine", value=name)
    if record is None:
        return np.arange(epoch, dtype=np.int64)
    steps = np.asarray(record)
    if steps.ndim != 1 or steps.size == 0 or not np.issubdtype(steps.dtype, np.integer):
        raise ConfigError(f"record must be a non-empty 1-d array of integer steps, got {record!r}", field="record",
                          value=record)
    if steps[0] < 0 or steps[-1] > epoch or np.any(np.diff(steps) <= 0):
        raise ConfigError(f"record must be strictly increasing steps in [0, epoch = {epoch}]", field="record",
                          value=record)
    return steps.astype(np.int64)


def gradient_flow(model: Model, objective: Objective, *, lr: float, epoch: int, tests: dict | None = None,
                  track_value: bool = False, snapshot_every: int = 0, snapshot: Callable | None = None,
                  record: ArrayLike | None = None, jacobian: bool = False, method: str = "LSODA", rtol: float = 1e-8,
                  atol: float = 1e-13) -> History:
    """Integrate dθ/dk = −lr ∂L/∂θ (the flow τ dθ/dt = −½ ∂L/∂θ at t/τ = 2·lr·k) from the model's current weights to
    k = epoch, leaving the model there.

    Integrated are the weights that move (``model.fixed_entries()``; the others keep their values), through
    ``flow.BilinearLoss`` where the model has a ``bilinear_map()`` and the engine is the exact or population one in
    float64, else through the engine (see the module's docstring).

    Returns a :class:`~linattn.training.train.History` like ``gradient_descent``'s: row i holds the loss (and test
    losses, value weights) at step ``history.step[i]``: every k = 0 … epoch−1 by default, or the increasing integer
    steps ``record`` (any in [0, epoch]; epoch is where the run ends), the only points the integrator is evaluated at.
    ``snapshot_every`` stores ``snapshot(model)`` at the multiples of it and at k = epoch. ``objective`` is any
    engine with ``value_and_grad(model)`` and ``value(model)``; with the exact or population engine a paper-size flow
    takes seconds. ``jacobian``: hand the integrator ∂(−lr ∇L)/∂θ = −lr ∇²L (:func:`loss_hessian`; needs an implicit
    ``method`` and an engine with moments). ``method``, ``rtol``, ``atol`` go to ``scipy.integrate.solve_ivp``
    (``atol`` is absolute on the weights, so keep it well below the initialisation scale).

    Raises ConfigError (``check_flow``) before any work for what it cannot honour.
    """
    steps = check_flow(objective, method=method, jacobian=jacobian, record=record, epoch=epoch)
    from scipy.integrate import solve_ivp  # here: importing scipy.integrate costs every run that never needs it

    start = time.perf_counter()
    vec = _vectorised(model, objective, lr)
    snap_steps = np.arange(0, epoch + 1, snapshot_every) if snapshot_every else np.zeros(0, dtype=np.int64)
    # every point evaluated: the records, the snapshots and the end (where GD's last step lands)
    k_eval = np.union1d(np.union1d(steps, snap_steps), [epoch])
    sol = solve_ivp(vec.rhs, (0.0, float(epoch)), vec.get(), method=method, t_eval=k_eval.astype(np.float64),
                    rtol=rtol, atol=atol, jac=vec.jac if jacobian else None)
    if not sol.success:
        raise RuntimeError(f"gradient flow integration failed: {sol.message}")
    at = dict(zip(k_eval.tolist(), sol.y.T))
    tests = tests or {}
    rec = Records(len(steps), tests, len(model.value_weights()) if track_value else 0)
    for i, k in enumerate(steps.tolist()):
        vec.set(at[k])
        rec.losses[i] = objective.value(model)
        for key, obj in tests.items():
            rec.tests[key][i] = obj.value(model)
        if rec.values is not None:
            rec.values[i] = model.value_weights().detach().cpu().numpy()
    take = snapshot or weights_of
    snaps = []
    for k in snap_steps.tolist():
        vec.set(at[k])
        snaps.append((k, take(model)))
    if snapshot_every and snap_steps[-1] != epoch:
        vec.set(at[epoch])
        snaps.append((epoch, take(model)))
    vec.set(at[epoch])
    if not np.all(np.isfinite(rec.losses)):
        bad = int(np.argmin(np.isfinite(rec.losses)))
        raise TrainingDiverged(int(steps[bad]), float(rec.losses[bad]), lr)
    return History(step=steps, train_loss=rec.losses, test_iwl=rec.tests.get("test_iwl"),
                   test_icl=rec.tests.get("test_icl"), values=rec.values, snapshots=snaps,
                   wall_time=time.perf_counter() - start)
