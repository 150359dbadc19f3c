"""Beyond the paper: where in-context learning wins once training has finished — ATTN_M's final test losses over the
in-context fraction c and the number of training sequences P — and ATTN_S's escape times across initialisations and
seeds.

    from linattn.companion.figures import phase_diagram
    ds = phase_diagram.compute(phase_diagram.settings("quick"))
    ds.final_test_icl.sel(trainset_size=np.inf)       # the population column
    ds.switch.sel(step=5000)                           # where in-context learning wins after Figure 14's 5000 steps

**How the cells are trained.** Every cell trains ATTN_M by gradient flow on its exact training loss (the quadratic
form of ``objectives/exact.py``: ŷ = ⟨m, T⟩ with m = fold(Σ_h W_KQ[h] ⊗ v_h), ``models.AttnM.combined``), from the
same initial weights, on the step axis of gradient descent at the run's learning rate (dθ/dk = −lr ∇L, as
``linattn.flow``; GD at that rate follows the flow, as ``linattn.flow`` measures and a test checks here). Linattn's
streams give every cell the same initial weights, test sets and fixed task. With the gradient and the Hessian written
out, a stiff integrator reaches 10⁹ steps in about a second a cell. P = ∞ trains on the exact population moments of
the mixed task (``objectives.population.mixture_moments``).

**When is a cell finished?** It is *settled* when its test losses moved less than ``tolerance`` (relative to their
final value) over the last ``window`` of its training. The theory's t → ∞ end point checks it: from a small start the
flow of this two-layer linear network ends at the least-squares solution of its training loss over the features (H
heads carry any rank the features need), which needs no training. Where the training loss is flat in some direction
(E[TTᵀ] singular: few sequences with a fresh task make the features of the fixed task's sequences redundant) the
minima form a valley, that end point is not unique, and the flow stops where its initial weights lead.

**Where does in-context learning win?** Where the in-context test loss is below the midpoint between the loss at the
origin, tr Λ, and the population minimum L* (``theory.loss_star``); the in-weight solution wins where the in-weight
test loss is below the same midpoint. Only c > 0 is compared: at c = 0 the training sequences carry noise context
labels (the in-weight test's recipe), at c > 0 the fixed task's sequences carry consistent labels w_fixᵀx — another
task. :func:`bracket` gives the two grid values of c between which a verdict sets in for good (the grid says no
more); at P = ∞ both crossings are solved in c on the least-squares end point (:func:`population_crossing`). At
finite P the fresh sequences number cP, a whole number: the fixed task's sequences leave
:func:`free_directions` directions of the features to them, and the in-context test loss peaks where cP is about that
count (:func:`sample_wise_peak`), the sample-wise double descent of in-context regression (Lu et al. 2024,
arXiv:2405.11751).
"""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import torch

from ... import diagnostics, theory
from ...config import RunConfig
from ...experiment import draw
from ...models import build_model, fold_combined
from ...objectives import Exact
from ...objectives.population import mixture_moments
from .. import presets
from .common import presets as common
from .common.frame import settings_attrs

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    # attn_m: Figure 14's model, learning rate and horizon (epoch: the published 5000 steps), with linattn's own
    # streams, so that every cell of the c × P grid shares its initial weights, test sets and fixed task and P = ∞
    # exists; its icl and trainset_size are each cell's. Every cell is trained by gradient flow to epoch_extended
    # (steps at that learning rate), where all have settled. attn_s: the drop-step-vs-init figure, whose init is
    # each swept inits_s value and whose seeds are ``seeds``
    "quick": dict(attn_m=dict(common.WHITE_ATTN_M, lr=5e-4, epoch=5000, trainset_size=2000, testset_size=500, seed=10,
                              draws="streams"),
                  attn_s=common.run_settings(model="attnS", head_num=5, rank=1, in_dim=4, seq_len=32, lr=0.02,
                                             epoch=3001, trainset_size=1000, init_scheme="jan2025"),
                  icl_values=[0.0, 0.02, 0.2, 1.0], trainset_sizes=[200, 2000], epoch_extended=10**8,
                  inits_s=[0.08, 0.16], seeds=[0, 1], workers=2),
    "paper": dict(attn_m=dict(common.WHITE_ATTN_M, lr=5e-4, epoch=5000, trainset_size=5000, testset_size=5000, seed=10,
                              draws="streams"),
                  attn_s=common.run_settings(model="attnS", head_num=5, rank=1, in_dim=4, seq_len=32, lr=0.02,
                                             epoch=20001, trainset_size=4000, init_scheme="jan2025"),
                  icl_values=[0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0],
                  trainset_sizes=[200, 1000, 5000, 20000], epoch_extended=10**9,
                  inits_s=[0.02, 0.04, 0.08, 0.16], seeds=[0, 1, 2, 3], workers=2),
}
HELP = {
    "workers": "worker processes of the local Dask cluster the sweeps run on (make book runs a notebook beside it)",
}
# the population column at c = 1 ends at L* (measured on finite test sets), and every cell has settled
TOLERANCES = [(r"final_test_icl\.Pinf\.c1", "abs", common.PLATEAU_TOLERANCE),
              (r"settle\.max", "below", common.SETTLED)]

#: The settled criterion's defaults: a test loss moved less than TOLERANCE (relative to its final value) over the last
#: WINDOW of the training.
TOLERANCE, WINDOW = 0.02, 0.1

#: E[TTᵀ]'s smallest eigenvalue relative to its largest below which the training loss counts as flat in some
#: direction: its minima then form a valley and the least-squares end point is not unique. (Measured on Figure 14's
#: setting: such cells sit at 1e-16, the others above 1e-9.)
FLAT = 1e-12

#: The maps' colour scale ends at this multiple of tr Λ (the loss of predicting 0); a loss above it shows in the top
#: colour (the colour bar's arrow).
CAP = 10.0


def _triple(moments) -> tuple[np.ndarray, np.ndarray, float]:
    """(E[TTᵀ], E[yT], E[y²]) of ``objectives.Moments`` as float64 numpy arrays (small, and picklable)."""
    return (moments.TT.detach().cpu().numpy().astype(np.float64),
            moments.yT.detach().cpu().numpy().astype(np.float64), float(moments.yy))


def quadratic_loss(m: np.ndarray, moments: tuple) -> float:
    """L(m) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩ for the moments (E[TTᵀ], E[yT], E[y²])."""
    A, b, c = moments
    return float(c - 2 * b @ m + m @ A @ m)


class AttnMFlow:
    """Gradient flow of ATTN_M's loss L(m) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩ in its weights, with the gradient and
    the Hessian written out (numpy, float64): what a stiff integrator needs to reach long times cheaply.

    The state θ holds K = W_KQ[:, :D, :] (H, D·(D+1)) and v (H, D+1), the last row of each value matrix; the query's
    label row W_KQ[:, D, :] meets the zeroed label and never changes. M = Kᵀ v ((D·(D+1)) × (D+1)) and m = Φ vec(M),
    Φ the fold of ``models.fold_combined``, so that m is ``AttnM.combined()`` (a test checks it, and the gradient and
    Hessian against autograd).
    """

    def __init__(self, moments: tuple, lr: float, head_num: int, in_dim: int):
        self.moments = moments
        self.A, self.b, _ = moments
        self.lr, self.H, self.D = float(lr), head_num, in_dim
        E = in_dim + 1
        basis = torch.eye(in_dim * E * E, dtype=torch.float64).reshape(-1, in_dim, E, E)
        # Φ as an array (F, D·E, E): the fold applied to each unit matrix M (the core's own definition)
        self.Phi = torch.stack([fold_combined(M) for M in basis], dim=1).numpy().reshape(-1, in_dim * E, E)
        self.F = self.Phi.shape[0]

    @staticmethod
    def state(weights: dict) -> np.ndarray:
        """θ of ``weights`` (the layout of ``init.npz``: W_KQ (H, E, E), W_V (H, E, E))."""
        D = weights["W_KQ"].shape[1] - 1
        return np.concatenate([np.asarray(weights["W_KQ"])[:, :D, :].reshape(-1),
                               np.asarray(weights["W_V"])[:, -1].reshape(-1)]).astype(np.float64)

    def split(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = self.H * self.D * (self.D + 1)
        return theta[:n].reshape(self.H, -1), theta[n:].reshape(self.H, self.D + 1)

    def combined(self, theta: np.ndarray) -> np.ndarray:
        """m(θ): the model's combined weight, ŷ = ⟨m, T⟩."""
        K, v = self.split(theta)
        return np.einsum("fij,ij->f", self.Phi, K.T @ v)

    def loss(self, m: np.ndarray, moments: tuple | None = None) -> float:
        """L(m) on the training moments (or on ``moments``, e.g. a test set's)."""
        return quadratic_loss(m, self.moments if moments is None else moments)

    def _parts(self, theta):
        K, v = self.split(theta)
        g_m = 2.0 * (self.A @ self.combined(theta) - self.b)
        return K, v, np.einsum("f,fij->ij", g_m, self.Phi)  # G = ∂L/∂M

    def gradient(self, theta: np.ndarray) -> np.ndarray:
        """∇L(θ): ∂L/∂K_h = G v_h, ∂L/∂v_h = Gᵀ K_h with G = ∂L/∂M."""
        K, v, G = self._parts(theta)
        return np.concatenate([(v @ G.T).reshape(-1), (K @ G).reshape(-1)])

    def hessian(self, theta: np.ndarray) -> np.ndarray:
        """∇²L(θ) = 2 Bᵀ E[TTᵀ] B, B = ∂m/∂θ, plus G between each head's K_h and v_h."""
        K, v, G = self._parts(theta)
        H, DE, E = self.H, self.D * (self.D + 1), self.D + 1
        B = np.concatenate([np.einsum("fij,hj->fhi", self.Phi, v).reshape(self.F, H * DE),
                            np.einsum("fij,hi->fhj", self.Phi, K).reshape(self.F, H * E)], axis=1)
        out = 2.0 * B.T @ self.A @ B
        cross = np.kron(np.eye(H), G)  # (H·DE, H·E): the block of K_h and v_h of the same head
        out[:H * DE, H * DE:] += cross
        out[H * DE:, :H * DE] += cross.T
        return out

    def run(self, theta0: np.ndarray, steps, *, rtol: float = 1e-4, atol: float = 1e-12) -> np.ndarray:
        """θ at each of ``steps`` (increasing, > 0) of dθ/dk = −lr ∇L(θ) from ``theta0`` at k = 0: (len(steps), n).

        BDF with the exact Jacobian (stiff: the curvatures of E[TTᵀ] span several decades). ``atol`` is absolute on
        the weights: keep it well below the initialisation scale. (Measured on Figure 14's model: rtol 1e-4 moves the
        test losses by < 0.05 % from rtol 1e-5, at two thirds of the cost.)"""
        from scipy.integrate import solve_ivp  # here: only the gradient-flow cells need scipy

        steps = np.asarray(steps, dtype=np.float64)
        sol = solve_ivp(lambda _k, th: -self.lr * self.gradient(th), (0.0, steps[-1]), theta0, method="BDF",
                        t_eval=steps, rtol=rtol, atol=atol, jac=lambda _k, th: -self.lr * self.hessian(th))
        if not sol.success:
            raise RuntimeError(f"gradient flow integration failed: {sol.message}")
        return sol.y.T

    def least_squares(self) -> np.ndarray:
        """The t → ∞ end point m* = E[TTᵀ]⁺ E[yT] (least squares on the features; the minimum-norm one when E[TTᵀ]
        is singular, which is then only one of the minima)."""
        return np.linalg.lstsq(self.A, self.b, rcond=1e-12)[0]


def record_steps(first: int, horizon: int, per_decade: int = 4) -> np.ndarray:
    """The steps a cell's losses are kept at: ``first`` × 10^(k/``per_decade``) from ``first``/10 up to ``horizon``,
    and ``horizon`` itself (``first``, the published horizon, is one of them)."""
    top = int(np.floor(per_decade * np.log10(horizon / first) + 1e-9))
    grid = np.round(first * 10.0 ** (np.arange(-per_decade, top + 1) / per_decade))
    return np.unique(np.concatenate([grid[(grid >= 1) & (grid <= horizon)], [horizon]])).astype(np.int64)


def bracket(holds, icl) -> tuple[float, float]:
    """Where a condition sets in for good along the increasing grid ``icl``: (a, b) with b the smallest grid value
    from which ``holds`` is true at every larger one and a the grid value just before b — the condition sets in
    between a and b, and the grid says no more. a is NaN when it holds on the whole grid; (NaN, NaN) when it fails at
    the grid's last value."""
    holds, icl = np.asarray(holds, dtype=bool), np.asarray(icl, dtype=np.float64)
    if holds.size == 0 or not holds[-1]:
        return float("nan"), float("nan")
    fails = np.flatnonzero(~holds)
    if fails.size == 0:
        return float("nan"), float(icl[0])
    return float(icl[fails[-1]]), float(icl[fails[-1] + 1])


def sample_wise_peak(loss) -> int | None:
    """The index of the largest of ``loss`` (over increasing numbers of fresh sequences) where it is a peak: higher
    than at the first and the last point, so the loss rises to it and falls after it; None where the largest sits
    at an end of the grid (the grid does not show a peak)."""
    loss = np.asarray(loss, dtype=np.float64)
    if loss.size < 3 or not np.isfinite(loss).all():
        return None
    j = int(np.argmax(loss))
    return j if 0 < j < loss.size - 1 else None


def free_directions(TT: np.ndarray, tol: float | None = None) -> int:
    """The number of directions of the features that E[TTᵀ] leaves flat: its eigenvalues below ``tol`` (default
    :data:`FLAT`) times its largest. For the fixed task's sequences (context labels w_fixᵀx), the directions that only
    sequences with a fresh task determine."""
    ev = np.linalg.eigvalsh(np.asarray(TT, dtype=np.float64))
    return int(np.sum(ev < (FLAT if tol is None else tol) * ev[-1]))


def solve_in_c(loss_at, level: float, lo: float, hi: float) -> float:
    """The c in (``lo``, ``hi``) at which ``loss_at(c)`` equals ``level`` (Brent's method to 1e-9 relative); NaN
    without a sign change of loss_at − level between the ends."""
    from scipy.optimize import brentq

    if not 0 < lo < hi:
        raise ValueError(f"the interval in c must satisfy 0 < lo < hi, got ({lo}, {hi})")
    f_lo, f_hi = loss_at(lo) - level, loss_at(hi) - level
    if not np.isfinite(f_lo * f_hi) or f_lo * f_hi > 0:
        return float("nan")
    return float(brentq(lambda c: loss_at(c) - level, lo, hi, xtol=1e-12, rtol=1e-9))


def train_cell(settings: dict, icl: float, trainset_size: float, at, init: dict, tests: dict,
               population: dict) -> dict:
    """One cell: ATTN_M of ``settings`` (``RunConfig.to_dict()``) with ``icl`` and ``trainset_size`` (inf: the
    population moments of the mixture, from ``population`` = {cov, w_fix}), its flow from the weights ``init``
    evaluated at the steps ``at``:
    the training loss and the test losses on ``tests`` ({name: moments triple}) at each, their least-squares end
    points (None where the training loss is flat) and E[TTᵀ]'s smallest eigenvalue relative to its largest. A pure
    function of its arguments, so a Dask worker can run it."""
    start, threads = time.perf_counter(), torch.get_num_threads()
    torch.set_num_threads(1)  # a step is a few small products: one thread is fastest on shared cores
    try:
        base = RunConfig.from_dict(settings)
        if np.isfinite(trainset_size):
            cfg = RunConfig(**{**settings, "trainset_size": int(trainset_size), "icl": float(icl),
                               "testset_size": 0})
            model = build_model("attnM", init, dtype=torch.float64)
            train = _triple(Exact.from_data(model, draw(cfg)[0].train, normalize=base.normalize).moments)
        else:
            train = _triple(mixture_moments("attention", np.asarray(population["cov"]), base.seq_len,
                                            icl=float(icl), w_fix=np.asarray(population["w_fix"]),
                                            normalize=base.normalize))
        flow = AttnMFlow(train, base.lr, base.head_num, base.in_dim)
        ms = [flow.combined(th) for th in flow.run(AttnMFlow.state(init), at, atol=1e-5 * base.init)]
        curvature = np.linalg.eigvalsh(flow.A)
        ratio = float(curvature[0] / curvature[-1])
        m_star = flow.least_squares() if ratio >= FLAT else None
        out = {"curvature": ratio, "seconds": time.perf_counter() - start}
        for name, mom in (("train_loss", train), *tests.items()):
            out[name] = [quadratic_loss(m, mom) for m in ms]
            out[f"limit_{name}"] = None if m_star is None else quadratic_loss(m_star, mom)
        return out
    finally:
        torch.set_num_threads(threads)


def _check_base(base: RunConfig) -> RunConfig:
    base.validate()
    if base.model != "attnM" or base.softmax or base.vary_len:
        raise ValueError("the phase diagram trains linear ATTN_M (model='attnM', no softmax, no vary_len)")
    if base.draws != "streams":
        raise ValueError("the phase diagram needs draws='streams': every cell then shares its initial weights, test "
                         "sets and fixed task, and P = ∞ exists (the reference's draws change all three with P and c)")
    if not base.testset_size:
        raise ValueError("the phase diagram needs test sets: give testset_size > 0")
    return base


def task_moments(base: RunConfig, cov, w_fix) -> tuple[tuple, tuple]:
    """The population moments (E[TTᵀ], E[yT], E[y²]) of the sequences with the fixed task (context labels w_fixᵀx)
    and of those with a fresh task: the training mixture at any c > 0 is (1 − c)·fixed + c·fresh. (At c = 0 the
    training sequences carry noise context labels instead, another recipe.)"""
    fresh, half = (_triple(mixture_moments("attention", cov, base.seq_len, icl=c, w_fix=w_fix,
                                           normalize=base.normalize)) for c in (1.0, 0.5))
    fixed = tuple(2 * h - f for h, f in zip(half, fresh))  # the mixture's moments are linear in c
    return fixed, fresh


def population_end_point(fixed: tuple, fresh: tuple, c: float) -> np.ndarray:
    """The least-squares end point m*(c) = E_c[TTᵀ]⁺ E_c[yT] of the population training loss at in-context fraction
    c > 0 (the mixture (1 − c)·``fixed`` + c·``fresh``)."""
    A, b = (1 - c) * fixed[0] + c * fresh[0], (1 - c) * fixed[1] + c * fresh[1]
    return np.linalg.lstsq(A, b, rcond=None)[0]


def population_crossing(fixed: tuple, fresh: tuple, test: tuple, level: float, lo: float, hi: float) -> float:
    """The c in (``lo``, ``hi``) at which the population end point's test loss (on the moments ``test``) equals
    ``level``: :func:`solve_in_c` on c ↦ L_test(m*(c)), one least-squares solve per trial."""
    return solve_in_c(lambda c: quadratic_loss(population_end_point(fixed, fresh, c), test), level, lo, hi)


def phase_diagram(base: RunConfig, icl_values, trainset_sizes, *, horizon: int, population: bool = True,
                  per_decade: int = 4, tolerance: float = TOLERANCE, window: float = WINDOW, client=None):
    """ATTN_M's test losses over c = ``icl_values`` × P = ``trainset_sizes`` (and P = ∞ with ``population``, or where
    ``trainset_sizes`` holds None or inf), every
    cell trained by gradient flow from ``base``'s initial weights to step ``horizon`` (GD's steps at ``base.lr``),
    as an xarray Dataset. ``client``: a ``dask.distributed.Client`` to train the cells on (None: one after another
    here).

    Dimensions ``icl``, ``trainset_size`` (float; inf for the population) and ``step`` (:func:`record_steps` from
    ``base.epoch``/10 to ``horizon``; ``base.epoch``, the published horizon, is one of them). Variables:

    ========================================  ======================  =============================================
    train_loss, test_iwl, test_icl            icl, trainset_size,     the losses along the flow
                                              step
    final_train_loss, final_test_*            icl, trainset_size      at ``horizon``
    limit_train_loss, limit_test_*            icl, trainset_size      at the least-squares end point (t → ∞); NaN
                                                                      where it is not unique (``flat``)
    settle_iwl, settle_icl                    icl, trainset_size      the largest change of that test loss over the
                                                                      last ``window`` of the training, relative to
                                                                      its final value
    settled                                   icl, trainset_size      both below ``tolerance``
    flat                                      icl, trainset_size      E[TTᵀ] singular (to :data:`FLAT`)
    fresh                                     icl, trainset_size      training sequences with a fresh task
    cell_seconds                              icl, trainset_size      the wall time of the cell's training
    iwl_wins                                  icl, trainset_size      c > 0 and the final in-weight test loss below
                                                                      the midpoint
    switch_lo, switch_hi                      trainset_size, step     :func:`bracket` over c > 0 of ``test_icl``
                                                                      below the midpoint
    theory_lo, theory_hi                      trainset_size           the same of the end point's (NaN where its
                                                                      lower cell is flat)
    iwl_lo, iwl_hi                            trainset_size           :func:`bracket` of the final in-weight test
                                                                      loss above the midpoint
    peak_icl                                  trainset_size           the c of :func:`sample_wise_peak` of the final
                                                                      in-context test loss over c > 0 (NaN: none)
    population_switch, population_edge        (scalar)                at P = ∞ the in-context and in-weight
                                                                      crossings solved in c (NaN without P = ∞)
    free_directions                           (scalar)                :func:`free_directions` of the fixed task's
                                                                      population moments
    ========================================  ======================  =============================================

    The crossings are taken at ``midpoint`` = (tr Λ + L*)/2. Attributes: ``L_origin`` (tr Λ), ``L_star``,
    ``midpoint``, ``tolerance``, ``window``, ``horizon``, ``epoch`` (the published horizon), ``lr`` (the time
    unit), ``seconds`` and ``cpu_seconds`` (what it took here; with a ``client`` the workers' time is not in
    ``cpu_seconds``) and ``base`` (the run settings, JSON). It is fastest with one BLAS thread (the figure runner
    sets one): several threads on these 200 × 200 systems made it ~10× slower on two busy cores.
    """
    import xarray as xr

    start, cpu = time.perf_counter(), time.process_time()
    base = _check_base(base)
    icl = np.array(sorted(float(c) for c in icl_values))
    population = population or any(P is None or not np.isfinite(P) for P in trainset_sizes)  # None: P = ∞ too
    finite_sizes = sorted(int(P) for P in trainset_sizes if P is not None and np.isfinite(P))
    sizes = [float(P) for P in finite_sizes] + ([np.inf] if population else [])
    steps = record_steps(base.epoch, int(horizon), per_decade)
    tail = np.linspace((1 - window) * horizon, horizon, 11)[:-1]  # the last `window` of the training, before its end
    at = np.unique(np.concatenate([steps, tail]))
    settings = base.to_dict()
    datasets, init = draw(RunConfig(**{**settings, "trainset_size": 2}))  # the test sets, Λ and w_fix of every cell
    model = build_model("attnM", init, dtype=torch.float64)
    tests = {k: _triple(Exact.from_data(model, getattr(datasets, k), normalize=base.normalize).moments)
             for k in ("test_iwl", "test_icl")}
    pop = {"cov": datasets.cov, "w_fix": datasets.w_fix}
    tasks = [(settings, c, P, at, init, tests, pop) for c in icl for P in sizes]
    if client is None:
        results = [train_cell(*t) for t in tasks]
    else:
        results = client.gather(client.map(train_cell, *zip(*tasks), pure=False))
    shape = (len(icl), len(sizes))
    keep, last = np.searchsorted(at, steps), np.searchsorted(at, tail)

    def grid(key):
        values = [np.nan if r[key] is None else r[key] for r in results]
        return np.array(values, dtype=np.float64).reshape(shape + (-1,))

    cells = ("icl", "trainset_size")
    data = {}
    for k in ("train_loss", "test_iwl", "test_icl"):
        curve = grid(k)
        data[k] = (cells + ("step",), curve[..., keep])
        data[f"final_{k}"] = (cells, curve[..., -1])
        data[f"limit_{k}"] = (cells, grid(f"limit_{k}")[..., 0])
        if k != "train_loss":
            change = np.abs(curve[..., last] - curve[..., -1:]).max(axis=-1) / np.abs(curve[..., -1])
            data["settle_" + k.split("_")[1]] = (cells, change)
    flat = grid("curvature")[..., 0] < FLAT
    finite = np.isfinite(sizes)
    data.update(flat=(cells, flat), cell_seconds=(cells, grid("seconds")[..., 0]),
                fresh=(cells, np.where(finite, np.floor(np.outer(icl, np.where(finite, sizes, 0.0)) + 1e-9), np.inf)))
    ds = xr.Dataset(data, coords={"icl": icl, "trainset_size": np.array(sizes), "step": steps})
    L_origin = float(np.trace(datasets.cov))
    L_star = theory.loss_star(datasets.cov, base.N)
    midpoint = (L_origin + L_star) / 2
    ds["settled"] = (ds.settle_iwl < tolerance) & (ds.settle_icl < tolerance)
    fixed, fresh = task_moments(base, datasets.cov, datasets.w_fix)
    ds = _verdicts(ds, midpoint, fixed, fresh, tests)
    ds["free_directions"] = free_directions(fixed[0])
    ds.attrs.update(L_origin=L_origin, L_star=L_star, midpoint=midpoint, tolerance=tolerance, window=window,
                    horizon=int(horizon), epoch=int(base.epoch), lr=float(base.lr),
                    seconds=time.perf_counter() - start, cpu_seconds=time.process_time() - cpu,
                    base=json.dumps({k: v for k, v in settings.items() if k not in ("icl", "trainset_size")}))
    return ds


def _brackets(holds):
    """:func:`bracket` along ``icl`` for each other coordinate: two DataArrays (a, b)."""
    import xarray as xr

    return xr.apply_ufunc(lambda h, c: bracket(h, c), holds, holds.icl, input_core_dims=[["icl"], ["icl"]],
                          output_core_dims=[[], []], vectorize=True)


def _verdicts(ds, midpoint: float, fixed: tuple, fresh: tuple, tests: dict):
    """Where each solution wins, on the c > 0 branch only (c = 0 trains on noise context labels, another recipe):
    the brackets of :func:`bracket` (the in-context test loss below ``midpoint`` for good: ``switch_lo/hi`` per
    step, ``theory_lo/hi`` of the end point; the in-weight test loss above it for good: ``iwl_lo/hi``), the cells
    where the in-weight test loss is below it (``iwl_wins``), each finite P's :func:`sample_wise_peak` of the final
    in-context test loss (``peak_icl``: its c, NaN without one), and at P = ∞ both crossings solved in c
    (``population_switch``, ``population_edge``: :func:`population_crossing` inside the grid's bracket, or below its
    first c > 0 down to a millionth of it)."""
    pos = ds.sel(icl=ds.icl.values[ds.icl.values > 0])
    ds["switch_lo"], ds["switch_hi"] = _brackets(pos.test_icl < midpoint)
    lo, hi = _brackets(pos.limit_test_icl < midpoint)
    unique = ~pos.flat.sel(icl=lo.fillna(pos.icl[0]))  # the theory claims no bracket whose lower cell is flat
    ds["theory_lo"], ds["theory_hi"] = lo.where(unique), hi.where(unique)
    ds["iwl_lo"], ds["iwl_hi"] = _brackets(pos.final_test_iwl > midpoint)
    ds["iwl_wins"] = (ds.final_test_iwl < midpoint) & (ds.icl > 0)
    peaks = [sample_wise_peak(pos.final_test_icl.sel(trainset_size=P).values) if np.isfinite(P) else None
             for P in ds.trainset_size.values]
    ds["peak_icl"] = ("trainset_size", [np.nan if j is None else float(pos.icl[j]) for j in peaks])
    exact = {"population_switch": np.nan, "population_edge": np.nan}
    if np.isinf(ds.trainset_size.values[-1]):
        inf = ds.isel(trainset_size=-1)
        for key, (a, b), test in (("population_switch", (inf.theory_lo, inf.theory_hi), "test_icl"),
                                  ("population_edge", (inf.iwl_lo, inf.iwl_hi), "test_iwl")):
            a, b = float(a), float(b)
            if np.isfinite(b):
                exact[key] = population_crossing(fixed, fresh, tests[test], midpoint, a if np.isfinite(a) else b / 1e6,
                                                 b)
    return ds.assign(exact)


# ---------------------------------------------------------------- the page: settings, computations, numbers, words


def runs(S: dict) -> dict:
    """What the page trains, declared so that a reader's settings are planned before any work: the drop-step
    sweep's ATTN_S runs (one per seed of ``seeds`` and scale of ``inits_s``) and the phase diagram's ATTN_M cells
    (one per c of ``icl_values`` and finite P of ``trainset_sizes``; P = ∞ has no run of its own). The page trains
    them with its own engines, not from this declaration: the cells by the gradient flow of this module
    (:func:`phase_diagram`), the sweep by ``linattn sweep``'s engine (:func:`compute_escape`)."""
    base = RunConfig(**S["attn_m"])
    out = {label: cfg for label, cfg in common.sweep(without_cells(S), run="attn_s").items()}
    out.update({f"cell c={c} P={P}": dataclasses.replace(base, icl=float(c), trainset_size=int(P))
                for c in S["icl_values"] for P in S["trainset_sizes"] if P is not None and np.isfinite(P)})
    return out


def without_cells(S: dict) -> dict:
    """``S`` without the settings of the ATTN_M cells, leaving the drop-step sweep's (``attn_s``, ``inits_s``,
    ``seeds``)."""
    return {k: v for k, v in S.items() if k in ("attn_s", "inits_s", "seeds")}


def compute(S: dict, client=None):
    """The phase diagram of the page (:func:`phase_diagram`) at the settings ``S``: ``attn_m`` the base run (its
    ``epoch`` the published horizon), ``icl_values`` × ``trainset_sizes`` and the population, trained to
    ``epoch_extended``; the figure's settings as attributes."""
    ds = phase_diagram(RunConfig(**S["attn_m"]), S["icl_values"], S["trainset_sizes"], horizon=S["epoch_extended"],
                       client=client)
    ds.attrs.update(settings_attrs(S, engine="exact (gradient flow)", seeds=S["attn_m"]["seed"]))
    ds.attrs["published"] = int(presets.is_published(NAME, S))
    return ds


def compute_escape(S: dict, client=None, *, out=None):
    """ATTN_S's drops across the initialisation scales ``inits_s`` and ``seeds`` (``attn_s``), trained through
    ``linattn sweep``'s engine (``sweeps.sweep``, on ``client`` or a local cluster of ``workers`` processes; ``out``:
    its folder, by default in the run store), with the
    theory's escape time of each drop (``law``: init × direction, ``theory.attn_s_drop_steps``, one head: an order of
    magnitude), the drops predicted for each cell from its own initial weights, every head included (``predicted``:
    init × seed × direction, ``diagnostics.predicted_drop_steps``; ``predicted_ratio``: the median simulated over
    predicted step of each drop), the fitted exponent of each drop's step in the initialisation scale and the median
    ratio of simulated to the estimate's step."""
    from ..runstore import default_root
    from ..sweeps import sweep

    base = RunConfig(**S["attn_s"])
    inits = [float(i) for i in S["inits_s"]]
    escape = sweep(base, {"init": inits, "seed": list(S["seeds"])}, client=client, workers=S["workers"],
                   progress=False, out=out or default_root() / "sweeps" / f"{NAME}-escape")
    if not (escape.status == "done").all():
        raise RuntimeError(f"a cell of the escape-time sweep failed: {escape.message.values.ravel().tolist()}")
    cov = draw(base)[0].cov  # the spectrum of the covariance is the same for every seed
    law = np.array([theory.attn_s_drop_steps(cov, base.N, lr=base.lr, init=i, rank=base.rank,
                                             head_num=base.head_num, init_scheme=base.init_scheme,
                                             normalize=base.normalize) for i in inits])
    D = escape.sizes["direction"]
    escape["law"] = (("init", "direction"), law[:, :D])
    escape["predicted"] = (("init", "seed", "direction"), [[_predicted(base, i, s)[:D] for s in escape.seed.values]
                                                           for i in escape.init.values])
    escape["predicted_ratio"] = ("direction", [float(np.nanmedian(r)) if np.isfinite(r).any() else np.nan for r in
                                               (escape.drop_step / escape.predicted).transpose("direction", ...).values
                                               .reshape(D, -1)])
    exponent, ratio = [], []
    for d in escape.direction.values:
        steps = escape.drop_step.sel(direction=d)
        x = steps.init.broadcast_like(steps).values.ravel()
        ok = np.isfinite(steps.values.ravel())
        exponent.append(diagnostics.escape_law("attnS", x, steps.values.ravel()) if len(set(x[ok])) >= 2 else np.nan)
        median = steps.median("seed") / escape.law.sel(direction=d)
        ratio.append(float(np.nanmedian(median.values)) if np.isfinite(median.values).any() else np.nan)
    escape["exponent"] = ("direction", exponent)
    escape["ratio"] = ("direction", ratio)
    escape.attrs["head_num"] = base.head_num  # the escape-time estimate is for one head
    return escape


def _predicted(base: RunConfig, init: float, seed: int) -> np.ndarray:
    """The drops predicted for the escape sweep's cell (``init``, ``seed``) from its own initial weights."""
    cfg = dataclasses.replace(base, init=float(init), seed=int(seed))
    data, weights = draw(cfg)
    return diagnostics.predicted_drop_steps(cfg, weights, data.cov)


def escape_command(S: dict) -> str:
    """``linattn sweep`` of the escape-time runs: the fixed settings' flags and one ``--grid`` per swept setting."""
    from ..commands import train_command

    flags = train_command(RunConfig(**S["attn_s"])).split(" ", 2)[2]
    grid = " ".join(f"--grid {k}={','.join(f'{v:g}' for v in S[key])}" for k, key in (("init", "inits_s"),
                                                                                       ("seed", "seeds")))
    return f"linattn sweep {flags} {grid} --out sweeps/escape"


def _bracket_text(lo, hi) -> str:
    """A bracket as a table cell: "0.02–0.05", "≤ 0.02" (every trained c > 0 from the first), or "–" (none)."""
    lo, hi = float(lo), float(hi)
    if not np.isfinite(hi):
        return "–"
    return f"≤ {_c(hi)}" if not np.isfinite(lo) else f"{_c(lo)}–{_c(hi)}"


def switch_table(ds) -> list[dict]:
    """One row per P (verdicts on c > 0 only): where the in-weight test loss is below the midpoint, the bracket from
    which the in-context one is below it for good (finished, the theory's end point, at the published horizon), the
    sample-wise peak of the in-context test loss in fresh sequences, and how settled the cells are."""
    rows = []
    for P in ds.trainset_size.values:
        cell = ds.sel(trainset_size=P)
        wins = ds.icl.values[cell.iwl_wins.values]
        peak = float(cell.peak_icl)
        rows.append(dict(P=size_label(P), iwl=", ".join(_c(c) for c in wins) or "none",
                         icl=_bracket_text(cell.switch_lo.isel(step=-1), cell.switch_hi.isel(step=-1)),
                         theory=_bracket_text(cell.theory_lo, cell.theory_hi),
                         published=_bracket_text(cell.switch_lo.sel(step=ds.epoch), cell.switch_hi.sel(step=ds.epoch)),
                         peak="–" if not np.isfinite(peak) else
                         f"{_fresh(peak, P)} ({_loss(float(cell.final_test_icl.sel(icl=peak)))})",
                         settle=float(max(cell.settle_iwl.max(), cell.settle_icl.max()))))
    return rows


TABLE_COLUMNS = {"P": "P", "iwl": "in-weight wins at c > 0", "icl": "in-context wins from c between",
                 "theory": "theory (t → ∞)", "published": "the same at the epoch",
                 "peak": "in-context loss peaks at cP (loss)", "settle": "largest change over the last 10 %"}


def numbers(ds, escape=None) -> list[dict]:
    """``numbers.json``: the settled criterion, the in-context test loss at c = 1 in the population column beside
    L*, each P's in-context bracket (its upper end: the smallest trained c from which in-context learning wins for
    good) beside the theory's end point's, the population crossings solved in c, and the escape-time exponents and
    ratios."""
    rows = [dict(key="settle.max", quantity="largest relative change of a test loss over the last "
                 f"{ds.window:.0%} of training (settled below {ds.tolerance:g})",
                 reproduced=float(max(ds.settle_iwl.max(), ds.settle_icl.max())), tolerance=ds.tolerance,
                 verdict="agrees" if bool(ds.settled.all()) else "differs")]
    for P in ds.trainset_size.values:
        c = float(ds.switch_hi.sel(trainset_size=P).isel(step=-1))
        slug = f"{int(P)}" if np.isfinite(P) else "inf"
        rows.append(dict(key=f"switch.P{slug}", quantity=f"P={size_label(P)}: smallest trained c > 0 from which the "
                         "in-context test loss stays below the midpoint, finished",
                         theory=_finite(ds.theory_hi.sel(trainset_size=P)), reproduced=_finite(c)))
    for key, what in (("population_switch", "in-context"), ("population_edge", "in-weight")):
        if np.isfinite(float(ds[key])):
            rows.append(dict(key=f"{key}.Pinf", quantity=f"P=∞: c at which the least-squares end point's {what} "
                             "test loss crosses the midpoint, solved in c", theory=float(ds[key])))
    if np.isinf(ds.trainset_size.values[-1]) and ds.icl.values[-1] == 1.0:
        rows.append(dict(key="final_test_icl.Pinf.c1", quantity="P=∞, c=1: final in-context test loss",
                         theory=ds.L_star, reproduced=float(ds.final_test_icl.isel(trainset_size=-1, icl=-1))))
    for d in ([] if escape is None else escape.direction.values):
        rows.append(dict(key=f"escape.exponent.drop{d}", quantity=f"drop {d}: exponent of the drop step in the "
                         "initialisation scale", theory=-1.0, reproduced=_finite(escape.exponent.sel(direction=d))))
        rows.append(dict(key=f"escape.ratio.drop{d}", quantity=f"drop {d}: median simulated step / the one-head "
                         "escape-time estimate", reproduced=_finite(escape.ratio.sel(direction=d))))
        rows.append(dict(key=f"escape.predicted_ratio.drop{d}", quantity=f"drop {d}: median simulated step / the "
                         "step predicted from each run's own initial weights",
                         reproduced=_finite(escape.predicted_ratio.sel(direction=d))))
    return rows


def _finite(x):
    x = float(x)
    return x if np.isfinite(x) else None


def words(ds, escape=None) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``); ``findings`` is its generated Markdown."""
    base = json.loads(ds.attrs["base"])
    out = dict(n_cells=int(ds.settled.size), n_icl=int(ds.sizes["icl"]), n_P=int(ds.sizes["trainset_size"]),
               sizes=_list([size_label(P) for P in ds.trainset_size.values]), horizon=_steps(ds.horizon),
               epoch=int(ds.epoch), lr=f"{ds.lr:g}", head_num=base["head_num"], init=f"{base['init']:g}",
               in_dim=base["in_dim"], tolerance=f"{ds.tolerance:.0%}", window=f"{ds.window:.0%}",
               midpoint=float(ds.midpoint), L_star=float(ds.L_star), L_origin=float(ds.L_origin), cap=f"{CAP:g}",
               phase_seconds=f"{ds.seconds:.0f} s", per_cell=f"{float(ds.cell_seconds.median()):.1f} s")
    if escape is not None:
        out.update(n_escape=int(escape.status.size),
                   exponents=_list([f"{x:.2f}" for x in escape.exponent.values if np.isfinite(x)]) or "–",
                   ratios=_list([f"{x:.1f}" for x in escape.ratio.values if np.isfinite(x)]) or "–",
                   predicted_ratios=_list([f"{x:.2f}" for x in escape.predicted_ratio.values if np.isfinite(x)])
                   or "–",
                   heads_s=int(escape.attrs.get("head_num", 1)))
    out["free_directions"] = int(ds.free_directions)
    return out


def size_label(P) -> str:
    """P as the page writes it: a whole number, or ∞ for the population."""
    return "∞" if not np.isfinite(P) else f"{int(P)}"


def _c(c) -> str:
    return f"{c:.2g}"


def _list(items, last="and") -> str:
    items = list(items)
    if not items:
        return ""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def _steps(n) -> str:
    """A step count as prose: a power of ten as 10ᵏ, a count from 10⁴ on as 1.6·10⁵, else the whole number (no
    thousands separators: myst-nb reads a glued "5,000" as the tuple (5, 0))."""
    k = np.log10(n)
    if abs(k - round(k)) < 1e-12:
        return "10" + str(int(round(k))).translate(_SUPERSCRIPT)
    return _loss(float(n)) if n >= 1e4 else f"{int(n)}"


def settling_step(ds) -> dict:
    """Per P whose final in-context bracket exists, the first recorded step from which the bracket (``switch_lo``,
    ``switch_hi``) stays where it ends."""
    out = {}
    for P in ds.trainset_size.values:
        lo, hi = (ds[k].sel(trainset_size=P).values for k in ("switch_lo", "switch_hi"))
        if not np.isfinite(hi[-1]):
            continue
        same = (hi == hi[-1]) & ((lo == lo[-1]) | (np.isnan(lo) & np.isnan(lo[-1])))
        moved = np.flatnonzero(~same)
        out[float(P)] = int(ds.step.values[moved[-1] + 1 if moved.size else 0])
    return out


def _fresh(c, P) -> int:
    return int(np.floor(c * P + 1e-9))


def _between(lo, hi, P) -> str:
    """A bracket as prose: "between $c$ = 0.02 and 0.05 (4 to 10 fresh sequences)" at finite P."""
    if not np.isfinite(lo):
        return f"at every trained $c$ > 0 (from {_c(hi)})"
    fresh = f" ({_fresh(lo, P)} to {_fresh(hi, P)} fresh sequences)" if np.isfinite(P) else ""
    return f"between $c$ = {_c(lo)} and {_c(hi)}{fresh}"


def _per_P(pairs) -> str:
    """"between … at $P$ = 200 and between … at $P$ = ∞"."""
    return _list(f"{text} at $P$ = {size_label(P)}" for P, text in pairs)


def findings(ds) -> str:
    """What the dataset shows, as the page's Markdown: one sentence per case that occurs, none for one that does
    not."""
    out, sizes = [], ds.trainset_size.values
    n, settled = int(ds.settled.size), int(ds.settled.sum())
    worst = float(max(ds.settle_iwl.max(), ds.settle_icl.max()))
    if settled == n:
        out.append(f"Every one of the {n} cells has settled: over the last {ds.window:.0%} of its {_steps(ds.horizon)} "
                   f"steps no test loss moved by more than {worst:.1e} of its final value (the criterion: "
                   f"{ds.tolerance:.0%}).")
    else:
        bad = [f"$c$ = {_c(c)}, $P$ = {size_label(P)}" for c in ds.icl.values for P in sizes
               if not bool(ds.settled.sel(icl=c, trainset_size=P))]
        moving = float(np.fmax(ds.settle_iwl, ds.settle_icl).where(~ds.settled).max())
        out.append(f"{n - settled} of the {n} cells had not settled by step {_steps(ds.horizon)} ({_list(bad)}): a "
                   f"test loss still moved by up to {moving:.1%} of its final value over the last {ds.window:.0%} of "
                   "the training.")
    if 0.0 in ds.icl.values:
        zero = ds.sel(icl=0.0)
        out.append("At $c$ = 0 the training sequences carry noise context labels (the in-weight test's recipe), "
                   "another task than at any $c$ > 0, so the verdicts below use $c$ > 0 only; at $c$ = 0 the "
                   f"in-weight test loss ends at {_range(zero.final_test_iwl)} and the in-context one at "
                   f"{_range(zero.final_test_icl)}.")
    final = [(P, float(ds.switch_lo.sel(trainset_size=P).isel(step=-1)),
              float(ds.switch_hi.sel(trainset_size=P).isel(step=-1))) for P in sizes]
    found = [(P, _between(lo, hi, P)) for P, lo, hi in final if np.isfinite(hi)]
    if found:
        out.append(f"After the training, in-context learning wins for good (its test loss below the midpoint "
                   f"{ds.midpoint:.3f} there and at every larger $c$ trained) from {_per_P(found)}.")
    never = [P for P, _, hi in final if not np.isfinite(hi)]
    if never:
        out.append("At $P$ = " + _list(size_label(P) for P in never) + " the in-context test loss is above the "
                   "midpoint at the largest $c$ trained.")
    exact = float(ds.population_switch)
    if np.isfinite(exact):
        out.append(f"In the population limit the least-squares end point's in-context test loss crosses the midpoint "
                   f"at $c$ = {exact:.2g}, solved in $c$.")
    theory = [(P, float(ds.theory_lo.sel(trainset_size=P)), float(ds.theory_hi.sel(trainset_size=P)))
              for P in sizes]
    same = [P for (P, lo, hi), (_, rlo, rhi) in zip(theory, final) if np.isfinite(hi) and hi == rhi
            and (lo == rlo or (np.isnan(lo) and np.isnan(rlo)))]
    other = [(P, _between(lo, hi, P)) for (P, lo, hi), (_, _, rhi) in zip(theory, final)
             if np.isfinite(hi) and hi != rhi]
    if same:
        out.append("The theory's end point, least squares on ATTN_M's features, gives the same bracket at $P$ = "
                   + _list(size_label(P) for P in same) + ".")
    if other:
        out.append(f"It puts the switch {_per_P(other)} instead.")
    wins = [(P, ds.icl.values[ds.iwl_wins.sel(trainset_size=P).values]) for P in sizes]
    some = [(P, c) for P, c in wins if c.size]
    if some:
        out.append("Above $c$ = 0 the in-weight test loss is below the midpoint only at " + _list(
            f"$c$ = {_list(_c(x) for x in c)} at $P$ = {size_label(P)}"
            + (f" ({_list(str(_fresh(x, P)) for x in c)} fresh sequences)" if np.isfinite(P) else "")
            for P, c in some) + ".")
    none = [P for P, c in wins if not c.size]
    if none:
        out.append("At $P$ = " + _list(size_label(P) for P in none) + " the in-weight test loss is above the "
                   "midpoint at every trained $c$ > 0.")
    loses = [(P, _between(float(ds.iwl_lo.sel(trainset_size=P)), float(ds.iwl_hi.sel(trainset_size=P)), P))
             for P, c in some if np.isfinite(float(ds.iwl_hi.sel(trainset_size=P)))]
    if loses:
        out.append(f"The in-weight solution loses for good from {_per_P(loses)}.")
    edge = float(ds.population_edge)
    if np.isfinite(edge):
        out.append(f"In the population limit the end point's in-weight test loss rises above the midpoint at $c$ = "
                   f"{edge:.2g}, solved in $c$.")
    peaks = [(P, float(ds.peak_icl.sel(trainset_size=P))) for P in sizes]
    peaks = [(P, c, float(ds.final_test_icl.sel(trainset_size=P, icl=c))) for P, c in peaks if np.isfinite(c)]
    if peaks:
        k = int(ds.free_directions)
        out.append("The final in-context test loss peaks at " + _list(
            f"{_fresh(c, P)} fresh sequences at $P$ = {size_label(P)} ({_loss(loss)})" for P, c, loss in peaks)
            + f"; the fixed task's sequences leave {k} directions of ATTN_M's features to the fresh ones"
            + (", and every peak sits next to that count: the sample-wise double descent described below."
               if all(near_count(_grid_fresh(ds, P), _fresh(c, P), k) for P, c, _ in peaks) else "."))
    edge = [P for P in sizes if np.isfinite(P) and not np.isfinite(float(ds.peak_icl.sel(trainset_size=P)))
            and (ds.icl.values > 0).sum() > 1
            and int(np.argmax(ds.final_test_icl.sel(trainset_size=P).values[ds.icl.values > 0])) == 0]
    if edge:
        first = float(ds.icl.values[ds.icl.values > 0][0])
        out.append(f"At $P$ = {_list(size_label(P) for P in edge)} that loss is largest at the smallest $c$ > 0 "
                   f"trained ({_list(str(_fresh(first, P)) for P in edge)} fresh sequences: "
                   f"{_list(_loss(float(ds.final_test_icl.sel(trainset_size=P, icl=first))) for P in edge)}), so the "
                   "grid shows no rise to a peak there.")
    flat = ds.flat
    if bool(flat.any()):
        k = int(flat.sum())
        out.append(f"In {k} cell{'s' if k > 1 else ''} (at most {int(ds.fresh.where(flat).max())} training "
                   "sequences with a fresh task) the training loss has flat directions: its minima form a valley, the "
                   "least-squares end point is not unique, and the flow stops at the minimum its initial weights "
                   "lead to.")
    if bool((~flat).any()):
        rel = max(float((abs(ds[f"final_{k}"] - ds[f"limit_{k}"]) / ds[f"limit_{k}"]).where(~flat).max())
                  for k in ("test_iwl", "test_icl"))
        out.append(f"Where the end point is unique, the finished runs' test losses lie within {rel:.1e} (relative) "
                   "of it.")
    at_epoch = [(P, float(ds.switch_lo.sel(trainset_size=P, step=ds.epoch)),
                 float(ds.switch_hi.sel(trainset_size=P, step=ds.epoch))) for P in sizes]
    shown = [(P, _between(lo, hi, P)) for P, lo, hi in at_epoch if np.isfinite(hi)]
    if shown:
        out.append(f"After {ds.epoch} steps (the run's epoch) in-context learning wins for good from {_per_P(shown)}.")
    not_yet = [P for P, _, hi in at_epoch if not np.isfinite(hi)]
    if not_yet:
        out.append(f"After {ds.epoch} steps (the run's epoch) the in-context test loss is above the midpoint at the "
                   "largest $c$ at $P$ = " + _list(size_label(P) for P in not_yet) + ".")
    moved = [(P, hi, end) for (P, _, hi), (_, _, end) in zip(at_epoch, final) if np.isfinite(hi) and np.isfinite(end)]
    smaller = [P for P, hi, end in moved if end < hi]
    larger = [P for P, hi, end in moved if end > hi]
    if smaller:
        out.append("At $P$ = " + _list(size_label(P) for P in smaller) + " the finished runs switch at a smaller $c$ "
                   "than the runs stopped at the epoch: the boundary drawn there is a stage of training.")
    if larger:
        out.append("At $P$ = " + _list(size_label(P) for P in larger) + " the finished runs switch at a larger $c$ "
                   "than at the epoch: training goes on fitting the training set, and the in-context test "
                   "loss rises back above the midpoint.")
    steps = settling_step(ds)
    if steps:
        out.append("The in-context bracket reaches its final place at step "
                   + _list(f"{_steps(s)} at $P$ = {size_label(P)}" for P, s in steps.items()) + ".")
    return " ".join(out)


def near_count(fresh, peak: int, k: int) -> bool:
    """Whether a peak at ``peak`` fresh sequences sits next to ``k``: k lies between the grid's fresh counts on
    either side of the peak (``fresh``: the grid's counts at one P, increasing), so the grid cannot place the peak
    any closer to k."""
    fresh = np.asarray(fresh)
    j = int(np.flatnonzero(fresh == peak)[0])
    return 0 < j < fresh.size - 1 and fresh[j - 1] < k < fresh[j + 1]


def _grid_fresh(ds, P) -> np.ndarray:
    return np.array([_fresh(c, P) for c in ds.icl.values if c > 0])


def _range(x) -> str:
    lo, hi = float(x.min()), float(x.max())
    return _loss(lo) if np.isclose(lo, hi, rtol=0.05) else f"{_loss(lo)} to {_loss(hi)}"


def _loss(x: float) -> str:
    """A loss in prose: 3 significant digits, powers of ten as ·10ᵏ beyond 10⁴."""
    if abs(x) < 1e4:
        return f"{x:.3g}"
    k = int(np.floor(np.log10(abs(x))))
    return f"{x / 10 ** k:.2g}·10" + str(k).translate(_SUPERSCRIPT)


# ---------------------------------------------------------------- the figures

def _plain_numbers(axis) -> None:
    """Tick labels of a logarithmic axis as plain numbers (0.02, not 2×10⁻²): every power of ten, and 2× and 5× one
    between them."""
    from matplotlib.ticker import FuncFormatter

    def minor(x, _):
        mantissa = x / 10 ** np.floor(np.log10(x) + 1e-9)
        return f"{x:g}" if np.isclose(mantissa, 2) or np.isclose(mantissa, 5) else ""

    axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    axis.set_minor_formatter(FuncFormatter(minor))


def plot(ds):
    """The final in-weight and in-context test losses over (c, P) on one logarithmic colour scale (the c = 0 column,
    another recipe, set apart), with where each solution wins on c > 0; the in-context bracket against the horizon;
    and the final in-context test loss against the number of fresh sequences cP."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    fig = plt.figure(figsize=(6.8, 7.0), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 0.8])
    axes = dict(zip(("iwl", "icl"), top.subplots(1, 2, sharey=True)))
    axes.update(zip(("horizon", "fresh"), bottom.subplots(1, 2)))
    icl, sizes = ds.icl.values, ds.trainset_size.values
    maps = (ds.final_test_iwl, ds.final_test_icl)
    highest = max(float(m.max()) for m in maps)
    norm = LogNorm(vmin=min(float(m.min()) for m in maps), vmax=min(highest, CAP * ds.L_origin))
    rows, cols = np.arange(len(sizes)), np.arange(len(icl))
    won = {"iwl": ds.iwl_wins, "icl": (ds.final_test_icl < ds.midpoint) & (ds.icl > 0)}
    for key, loss, title in (("iwl", ds.final_test_iwl, "in-weight test loss"),
                             ("icl", ds.final_test_icl, "in-context test loss")):
        ax = axes[key]
        mesh = ax.pcolormesh(cols, rows, loss.transpose("trainset_size", "icl"), shading="nearest", cmap="viridis",
                             norm=norm)
        i, j = np.nonzero(won[key].transpose("trainset_size", "icl").values)
        ax.plot(j, i, "o", color="white", markeredgecolor="black", markersize=4)
        if icl[0] == 0:  # c = 0: noise context labels, another recipe
            ax.axvline(0.5, color="white", linewidth=3)
        ax.set_title(title)
        ax.set_xticks(cols, [f"{c:g}" + ("*" if c == 0 else "") for c in icl], rotation=90)
        ax.set_yticks(rows, [size_label(P) for P in sizes])
        ax.set_xlabel("in-context fraction c")
    axes["iwl"].set_ylabel("training sequences P")
    bar = top.colorbar(mesh, ax=[axes["iwl"], axes["icl"]], shrink=0.9, label="final test loss",
                       extend="max" if highest > norm.vmax else "neither")
    for level, style in ((ds.L_origin, "-"), (ds.midpoint, "--"), (ds.L_star, ":")):
        if norm.vmin <= level <= norm.vmax:
            bar.ax.axhline(level, color="tab:red", linestyle=style, linewidth=1.5)

    colours = dict(zip(sizes, plt.cm.viridis(np.linspace(0.0, 0.85, len(sizes)))))
    ax = axes["horizon"]
    for P in sizes:
        ax.step(ds.step, ds.switch_hi.sel(trainset_size=P), where="post", color=colours[P],
                label=f"P = {size_label(P)}")
    ax.axvline(ds.epoch, color="0.4", linestyle=":", linewidth=1.1, label=f"epoch ({ds.epoch} steps)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"training horizon (steps at lr {ds.lr:g})")
    ax.set_ylabel("in-context wins from c ≤")
    _plain_numbers(ax.yaxis)

    ax = axes["fresh"]
    for P in sizes[np.isfinite(sizes)]:
        cell = ds.sel(trainset_size=P, icl=icl[icl > 0])
        ax.plot(cell.fresh.clip(min=0.5), cell.final_test_icl, "o-", color=colours[P], markersize=3)
    ax.axhline(ds.midpoint, color="tab:red", linestyle="--", linewidth=1.0)
    ax.axvline(int(ds.free_directions), color="0.4", linestyle=":", linewidth=1.1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("fresh sequences cP (0 at 0.5)")
    ax.set_ylabel("final in-context test loss")
    bottom.legend(*axes["horizon"].get_legend_handles_labels(), loc="outside lower center", ncols=3, fontsize=8)
    return fig


def plot_escape(escape):
    """ATTN_S: the step of each drop (dots, one per seed) against the initialisation scale, and the theory's escape
    time of each direction (dashed), on log–log axes."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.4), layout="constrained")
    colours = plt.cm.plasma(np.linspace(0.0, 0.8, escape.sizes["direction"]))
    for colour, d in zip(colours, escape.direction.values):
        steps = escape.drop_step.sel(direction=d)
        ax.plot(steps.init.broadcast_like(steps).values.ravel(), steps.values.ravel(), "o", color=colour, alpha=0.7,
                markersize=4, label=f"drop {d}")
        ax.plot(escape.init, escape.law.sel(direction=d), "--", color=colour)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("initialisation scale (ATTN_S)")
    ax.set_ylabel("drop step")
    ax.set_xticks(escape.init.values, [f"{i:g}" for i in escape.init.values])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.legend(loc="lower left", ncols=4, handlelength=1.0)
    return fig
