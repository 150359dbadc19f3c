"""Gradient flow on the training objective, on the same step axis as gradient descent.

The paper's dynamics are the flow τ dθ/dt = −½ ∂L/∂θ (loss without ½). Full-batch GD with rate η is its forward
Euler discretisation with Δt/τ = 2η, so GD step k sits at t/τ = 2η·k. :func:`gradient_flow` integrates the same flow
written on GD's step axis, dθ/dk = −η ∂L/∂θ (k continuous), with scipy's ``solve_ivp`` (adaptive, error-controlled),
and reports the loss at the integer k = 0 … epoch−1 that GD records, so a flow curve, a GD curve and a theory curve
share one axis (``theory.steps_to_time`` turns k into the paper's t/τ).

When does GD track the flow? At the published learning rates GD is the flow shifted slightly in time: measured
(``benchmarks/bench_engines.py --only flow``, ``benchmarks/README.md``) the maximum relative loss difference is 4.1%
for Figure 1b (lr 1e-3) and 8.7% for Figure 3a (lr 0.02), both in the middle of a drop (drops shifted by ≤ 10
steps out of thousands), and ≤ 2e-6 on the plateaus and at the end. The shift is first order in η (forward Euler);
GD departs from the flow when η times the largest Hessian eigenvalue is no longer small.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from .train import History, TrainingDiverged, weights_of

_METHODS = ("RK45", "DOP853", "LSODA", "Radau", "BDF")


class _Vectorised:
    """The model's parameters as one float64 numpy vector, and the flow's right-hand side −η ∇L in that form."""

    def __init__(self, model, objective, lr: float):
        self.model, self.objective, self.lr = model, objective, lr
        self.params = list(model.parameters())
        self.evaluations = 0

    def get(self) -> np.ndarray:
        import torch
        from torch.nn.utils import parameters_to_vector

        return parameters_to_vector(self.params).detach().cpu().to(torch.float64).numpy().copy()

    def set(self, theta: np.ndarray) -> None:
        import torch
        from torch.nn.utils import vector_to_parameters

        ref = self.params[0]
        with torch.no_grad():
            vector_to_parameters(torch.as_tensor(theta, dtype=ref.dtype, device=ref.device), self.params)

    def rhs(self, _t, theta: np.ndarray) -> np.ndarray:
        import torch
        from torch.nn.utils import parameters_to_vector

        self.set(theta)
        for p in self.params:
            p.grad = None
        loss = self.objective.value_and_grad(self.model)
        self.evaluations += 1
        if not np.isfinite(loss):
            raise TrainingDiverged(self.evaluations, loss, self.lr)
        grad = parameters_to_vector([p.grad for p in self.params])
        return -self.lr * grad.detach().cpu().to(torch.float64).numpy()


def gradient_flow(model, objective, *, lr: float, epoch: int, tests: dict | None = None,
                  track_value: bool = False, snapshot_every: int = 0, snapshot: Callable | None = None,
                  method: str = "LSODA", rtol: float = 1e-8, atol: float = 1e-13) -> History:
    """Integrate dθ/dk = −lr ∂L/∂θ (the flow τ dθ/dt = −½ ∂L/∂θ at t/τ = 2·lr·k) from the model's current weights to
    k = epoch, leaving the model there.

    Returns a :class:`~linattn.train.History` like ``gradient_descent``'s: row k holds the loss (and test losses,
    value weights) at step k = 0 … epoch−1; ``snapshot_every`` stores ``snapshot(model)`` at those
    rows and at k = epoch. ``objective`` is any engine with ``value_and_grad(model)`` and ``value(model)``;
    with the exact or population engine a paper-size flow takes seconds. ``method``, ``rtol``, ``atol`` go to
    ``scipy.integrate.solve_ivp`` (``atol`` is absolute on the weights, so keep it well below the
    initialisation scale).
    """
    from scipy.integrate import solve_ivp  # here: importing scipy.integrate costs every run that never needs it

    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    start = time.perf_counter()
    vec = _Vectorised(model, objective, lr)
    theta0 = vec.get()
    k_eval = np.arange(epoch + 1, dtype=np.float64)  # the last point is where GD's last step lands
    sol = solve_ivp(vec.rhs, (0.0, k_eval[-1]), theta0, method=method, t_eval=k_eval, rtol=rtol, atol=atol)
    if not sol.success:
        raise RuntimeError(f"gradient flow integration failed: {sol.message}")
    thetas = sol.y
    losses = np.empty(epoch)
    test_rows = {k: np.empty(epoch) for k in (tests or {})}
    values = None
    snaps = []
    take = snapshot or weights_of
    for k in range(epoch):
        vec.set(thetas[:, k])
        losses[k] = objective.value(model)
        for key, obj in (tests or {}).items():
            test_rows[key][k] = obj.value(model)
        if track_value:
            v = model.value_weights().detach().cpu().numpy()
            if values is None:
                values = np.empty((epoch, v.size))
            values[k] = v
        if snapshot_every and k % snapshot_every == 0:
            snaps.append((k, take(model)))
    vec.set(thetas[:, -1])
    if snapshot_every:
        snaps.append((epoch, take(model)))
    if not np.all(np.isfinite(losses)):
        bad = int(np.argmin(np.isfinite(losses)))
        raise TrainingDiverged(bad, float(losses[bad]), lr)
    return History(step=np.arange(epoch), train_loss=losses, test_iwl=test_rows.get("test_iwl"),
                   test_icl=test_rows.get("test_icl"), values=values, snapshots=snaps,
                   wall_time=time.perf_counter() - start)
