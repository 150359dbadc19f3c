"""The batched loop of :func:`linattn.run_many`: gradient descent of B runs of one shape as stacked tensors.

The step of each member is the exact engine's (``objectives/exact.py``, the models' ``combined_with_vjp``), with a
batch axis b in front of every weight and moment:

    m_b = combined(θ_b),   r_b = E_b[TTᵀ] m_b − E_b[yT],   L_b = E_b[y²] + m_b·(r_b − E_b[yT]),   g_b = 2 r_b,
    θ_b ← θ_b − lr_b · vjp_b(g_b)

ATTN_M: W (B,H,E,E), v (B,H,E); ATTN_S: W_Q, W_K (B,H,R,E) with R the largest rank (zero rows below), v; MLP: W1
(B,H,D²), w2 (B,H). Losses are written into device buffers and looked at every ``CHECK_EVERY`` steps, at snapshots
and when a member ends, so a GPU is not synchronised every step.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from .. import objectives
from ..models import build_model, fold_matrix
from . import experiment, plan, result
from .train import History, TrainingDiverged, weights_of

# steps between the loop's checks for members that diverged or ended (one device synchronisation each)
CHECK_EVERY = 256


def _params(model, R: int) -> list[torch.Tensor]:
    """The model's parameters, ATTN_S's W_Q and W_K padded with zero rows to rank ``R``."""
    out = []
    for name, p in model.named_parameters():
        p = p.detach()
        if name in ("W_Q", "W_K") and p.shape[1] < R:
            p = torch.nn.functional.pad(p, (0, 0, 0, R - p.shape[1]))
        out.append(p)
    return out


class _Stack:
    """The members still training: their stacked weights, moments and learning rates, and their indices."""

    def __init__(self, kind: str, params, moments, tests: dict, lr, members):
        self.kind, self.params, self.lr, self.members = kind, params, lr, members
        self.yy, self.yT, self.TT = moments
        self.tests = tests  # key -> (yy, yT, TT) stacked

    def keep(self, rows: torch.Tensor) -> None:
        """Only the members at positions ``rows`` go on."""
        self.params = [p[rows] for p in self.params]
        self.yy, self.yT, self.TT, self.lr = self.yy[rows], self.yT[rows], self.TT[rows], self.lr[rows]
        self.tests = {k: tuple(x[rows] for x in v) for k, v in self.tests.items()}
        self.members = self.members[rows]

    def combined(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(m (B, F), what the gradient needs)."""
        if self.kind == "mlp":
            W1, w2 = self.params
            return torch.einsum("bhi,bh->bi", W1, w2), None
        v = self.params[-1]
        B, H, E = v.shape
        D = E - 1
        if self.kind == "attnM":
            A = self.params[0][:, :, :D]
        else:
            Q, K = self.params[0], self.params[1]
            A = torch.einsum("bhra,bhrc->bhac", Q[..., :D], K)
        A = A.reshape(B, H, D * E)
        M = torch.einsum("bhi,bhc->bic", A, v).reshape(B, D, E * E)
        return torch.matmul(M, fold_matrix(D, v.dtype, v.device)).reshape(B, -1), A

    def grads(self, g: torch.Tensor, A: torch.Tensor | None) -> list[torch.Tensor]:
        """∂L/∂θ of every member from g = ∂L/∂m (B, F), through the combination (``combined_with_vjp``)."""
        if self.kind == "mlp":
            W1, w2 = self.params
            return [w2[..., None] * g[:, None, :], torch.einsum("bhi,bi->bh", W1, g)]
        v = self.params[-1]
        B, H, E = v.shape
        D = E - 1
        G = torch.matmul(g.reshape(B, D, -1), fold_matrix(D, g.dtype, g.device).T).reshape(B, D * E, E)
        dv = torch.einsum("bhi,bic->bhc", A, G)
        gW = torch.einsum("bic,bhc->bhi", G, v).reshape(B, H, D, E)
        if self.kind == "attnM":
            return [torch.nn.functional.pad(gW, (0, 0, 0, 1)), dv]
        Q, K = self.params[0], self.params[1]
        dQ = torch.nn.functional.pad(torch.einsum("bhrc,bhac->bhra", K, gW), (0, 1))
        dK = torch.einsum("bhra,bhac->bhrc", Q[..., :D], gW)
        return [dQ, dK, dv]

    @staticmethod
    def quadratic(moments: tuple[torch.Tensor, torch.Tensor, torch.Tensor], m: torch.Tensor) -> tuple[torch.Tensor,
                  torch.Tensor]:
        """(L (B,), r = E[TTᵀ] m − E[yT] (B, F)) of each member."""
        yy, yT, TT = moments
        r = torch.bmm(TT, m[..., None])[..., 0] - yT
        return yy + (m * (r - yT)).sum(-1), r

    def step(self, t: int, losses: torch.Tensor, tests: dict, values: torch.Tensor | None) -> None:
        """One step of every member; step t's losses (and value weights) written into the buffers."""
        m, ctx = self.combined()
        loss, r = self.quadratic((self.yy, self.yT, self.TT), m)
        losses[self.members, t] = loss
        for k, mom in self.tests.items():
            tests[k][self.members, t] = self.quadratic(mom, m)[0]
        if values is not None:
            values[self.members, t] = self.params[-1] if self.kind == "mlp" else self.params[-1][..., -1]
        lr = self.lr
        for p, d in zip(self.params, self.grads(2.0 * r, ctx)):
            p -= lr.reshape(-1, *[1] * (p.dim() - 1)) * d


def _moments(objs: list) -> tuple:
    return (torch.tensor([o.moments.yy for o in objs], dtype=torch.float64, device=objs[0].moments.TT.device),
            torch.stack([o.moments.yT for o in objs]), torch.stack([o.moments.TT for o in objs]))


def _setup(p, shared: dict):
    """A member's data, initial weights, model and exact objectives, as ``run`` builds them. ``shared``: the draws and
    moments of the members before it (``linattn.training.experiment.carry_out``'s), which members of the same data
    share."""
    start = time.perf_counter()
    cfg = p.config
    datasets, init = p.data if p.data is not None else p.drawn, p.init
    if p.to_draw == plan.COVARIANCE:
        datasets = plan.population_datasets(cfg)
    elif p.to_draw != plan.NOTHING:
        drawn_data, drawn_init = plan.draw_checked(cfg, shared)
        datasets = drawn_data if datasets is None else datasets
        init = drawn_init if init is None else init
    model = build_model(cfg.model, init, dtype=getattr(torch, cfg.dtype), device=p.device)
    train, tests = objectives.build(cfg, model, datasets, p.device, shared=shared)
    return dict(datasets=datasets, init=init, model=model, train=train, tests=tests,
                setup=time.perf_counter() - start)


def _load(model, stack: _Stack, row: int) -> None:
    """Copy the stacked weights of position ``row`` into the member's own model (dropping ATTN_S's padding)."""
    with torch.no_grad():
        for q, p in zip(model.parameters(), stack.params):
            q.copy_(p[row][tuple(slice(0, n) for n in q.shape)])


def train_stacked(plans: list, *, snapshot_every: int = 0, snapshot: Callable | None = None) -> list:
    """Train the members of ``plans`` (checked by ``batch.run_many``) in one batched loop; see
    :mod:`linattn.training.batch`."""
    start = time.perf_counter()
    shared: dict = {}
    members = [_setup(p, shared) for p in plans]
    cfg0, device = plans[0].config, plans[0].device
    R = max(p.config.rank for p in plans)
    keys = list(members[0]["tests"])
    lengths = np.array([p.config.epoch for p in plans])
    f64 = dict(dtype=torch.float64, device=device)
    tests_moments = {k: _moments([m["tests"][k] for m in members]) for k in keys}
    stack = _Stack(cfg0.model, [torch.stack(ps).clone() for ps in zip(*(_params(m["model"], R) for m in members))],
                   _moments([m["train"] for m in members]), tests_moments,
                   torch.tensor([p.config.lr for p in plans], dtype=getattr(torch, cfg0.dtype), device=device),
                   torch.arange(len(plans), device=device))
    T = int(lengths.max())
    losses = torch.empty(len(plans), T, **f64)
    tests = {k: torch.empty(len(plans), T, **f64) for k in keys}
    heads = cfg0.head_num
    values = torch.empty(len(plans), T, heads, **f64) if any(p.config.track_value for p in plans) else None
    take = snapshot or weights_of
    snaps: list[list] = [[] for _ in plans]
    results: list = [None] * len(plans)
    t = 0
    with torch.no_grad():
        while len(stack.members):
            rows = stack.members.cpu().numpy()
            if snapshot_every and t % snapshot_every == 0:
                for j, i in enumerate(rows):
                    _load(members[i]["model"], stack, j)
                    snaps[i].append((t, take(members[i]["model"])))
            end = min(int(lengths[rows].min()), t + CHECK_EVERY)
            if snapshot_every:
                end = min(end, (t // snapshot_every + 1) * snapshot_every)
            for s in range(t, end):
                stack.step(s, losses, tests, values)
            done = ~torch.isfinite(losses[stack.members, t:end]).all(1)
            finished = torch.as_tensor(lengths[rows] == end, device=device) | done
            t_end = end
            for j in torch.nonzero(finished).flatten().tolist():
                i = int(rows[j])
                results[i] = _leave(plans[i], members[i], stack, j, losses[i], tests, values, snaps[i], t_end,
                                    snapshot_every, take, start)
            stack.keep(torch.nonzero(~finished).flatten())
            t = end
    return results


def _leave(p, member, stack: _Stack, row: int, losses, tests, values, snaps, end: int, snapshot_every, take, start):
    """A member's result as it leaves the stack at step ``end``: its RunResult, or its TrainingDiverged."""
    model, cfg = member["model"], p.config
    loss = losses[:end].cpu().numpy()
    bad = np.flatnonzero(~np.isfinite(loss))
    if len(bad):
        e = TrainingDiverged(int(bad[0]), float(loss[bad[0]]), cfg.lr)
        steps = objectives.get(p.engine).trial_steps(e.step)
        lr, halvings = experiment.stable_lr(cfg, member["init"], member["train"], p.device, lr=cfg.lr, steps=steps)
        e.suggest(lr, halvings=halvings, steps=steps)
        return e
    _load(model, stack, row)
    if snapshot_every:
        snaps.append((end, take(model)))
    i = int(stack.members[row])
    history = History(step=np.arange(end), train_loss=loss,
                      test_iwl=tests["test_iwl"][i, :end].cpu().numpy() if "test_iwl" in tests else None,
                      test_icl=tests["test_icl"][i, :end].cpu().numpy() if "test_icl" in tests else None,
                      values=values[i, :end].cpu().numpy() if values is not None and cfg.track_value else None,
                      snapshots=snaps, wall_time=time.perf_counter() - start)
    return _member_result(p, history=history, init=member["init"], weights=weights_of(model, like=member["init"]),
                         datasets=member["datasets"], model=model, setup=member["setup"],
                         wall=time.perf_counter() - start, snapshot_every=snapshot_every)


def _member_result(p, *, history, init, weights, datasets, model, setup: float, wall: float, snapshot_every: int):
    """The RunResult of a member trained in a stack (what ``experiment.carry_out`` returns for one run)."""
    return result.RunResult(
        config=p.config, history=history, init=init, weights=weights, engine=p.engine, device=p.device,
        setup_time=setup, wall_time=wall, datasets=datasets,
        given=tuple(k for k, v in (("init", p.init), ("data", p.data)) if v is not None),
        snapshot_every=snapshot_every, trained_steps=p.config.epoch, _model=model)
