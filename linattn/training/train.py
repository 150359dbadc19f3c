"""Full-batch gradient descent, the reference's way: plain SGD on the whole set, loss recorded before each step.

    θ ← θ − lr · ∇L(θ),  L = mean over sequences of (y − ŷ)²  (no ½)

In the paper's time units a step is Δt/τ = 2·lr (gradient flow τ θ̇ = −½ ∇L), see ``theory.steps_to_time``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, cast

import numpy as np

if TYPE_CHECKING:
    from ..models import Model
    from ..objectives.base import Objective


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite.

    ``suggested_lr`` is None unless a caller tried smaller rates (:meth:`suggest`; ``experiment.run`` does).
    """

    def __init__(self, step: int, loss: float, lr: float):
        self.step, self.loss, self.lr = step, loss, lr
        self.suggested_lr: float | None = None
        super().__init__(f"the training loss became {loss} at step {step} (lr = {lr:g}); "
                         f"try a smaller learning rate, e.g. --lr {lr / 4:g}")

    def suggest(self, lr: float | None, *, halvings: int, steps: int) -> None:
        """Replace the generic hint by the outcome of trial runs of ``steps`` steps at lr/2, lr/4, …: ``lr`` is
        the first that kept the loss finite and lowered it (None: none of ``halvings`` halvings did)."""
        self.suggested_lr = lr
        head = f"the training loss became {self.loss} at step {self.step} (lr = {self.lr:g}); "
        if lr is None:
            self.args = (head + f"no smaller learning rate down to lr/2^{halvings} kept the loss finite and lowered "
                         f"it over a {steps}-step trial from the same initial weights; check --init and the data",)
        else:
            self.args = (head + f"try a smaller learning rate, --lr {lr!r}: halved {halvings} time(s), it kept the "
                         f"loss finite and lowered it over a {steps}-step trial run from the same initial weights",)


@dataclass
class History:
    """What a run recorded: one row per step (before the update), plus optional diagnostics every k steps."""

    step: np.ndarray
    train_loss: np.ndarray
    test_iwl: np.ndarray | None = None
    test_icl: np.ndarray | None = None
    values: np.ndarray | None = None  # (steps, H): v_h[D] per head
    snapshots: list = field(default_factory=list)  # (step, {name: array}) from ``snapshot_every``
    wall_time: float = 0.0

    def columns(self) -> dict[str, np.ndarray]:
        """The columns of ``loss.csv``, in order: step, train_loss, [test_iwl, test_icl], [value_0 …]."""
        cols = {"step": self.step, "train_loss": self.train_loss}
        for name in ("test_iwl", "test_icl"):  # a run may have either test set alone
            if getattr(self, name) is not None:
                cols[name] = getattr(self, name)
        if self.values is not None:
            for h in range(self.values.shape[1]):
                cols[f"value_{h}"] = self.values[:, h]
        return cols


def weights_of(model: Model, like: dict | None = None) -> dict[str, np.ndarray]:
    """The model's current weights in the layout of ``init.npz`` (float64 numpy copies), so that
    ``build_model(name, weights_of(model))`` rebuilds it.

    Every parameter is copied under its own name, except the attention models' value rows v (H, D+1): they become
    W_V (H, D+1, D+1) with W_V[h][D] = v_h, the only row that enters the prediction. The other rows are taken from
    ``like["W_V"]`` when given (e.g. the initial weights, which training never changes there), else zero.
    """
    return WeightsOf(model)(model, like)


class WeightsOf:
    """:func:`weights_of` for one model: its named parameters listed once, and where they are float64 on the CPU, a
    numpy view of each made once and copied on each call. ``named_parameters()`` walks the module tree and hashes
    every tensor, and a tensor's conversion to numpy costs a few calls more: most of what a snapshot of a small
    model costs, and a run snapshotted every 10 steps takes thousands. Training updates the weights in place (the
    views see it); a parameter whose storage was replaced since (``.data`` set) gets a new view."""

    def __init__(self, model: Model):
        import torch  # in the functions that use it: importing linattn (and checking settings) needs no torch

        self.params = list(model.named_parameters())
        self.plain = all(p.dtype == torch.float64 and p.device.type == "cpu" for _, p in self.params)
        self._views: list | None = None
        self._ptrs: list[int] | None = None

    def _arrays(self) -> list:
        """(name, numpy view) of each parameter, made again where a parameter's storage moved."""
        ptrs = [p.data_ptr() for _, p in self.params]
        if ptrs != self._ptrs:
            self._views, self._ptrs = [(k, p.detach().numpy()) for k, p in self.params], ptrs
        return cast(list, self._views)

    def __call__(self, _model: Model | None = None, like: dict | None = None) -> dict[str, np.ndarray]:
        """The weights now (``_model``: the model this was made for, so that it stands where ``snapshot(model)``
        does)."""
        import torch

        if self.plain:
            out = {k: a.copy() for k, a in self._arrays()}
        else:
            out = {k: p.detach().to("cpu", torch.float64).numpy().copy() for k, p in self.params}
        if "v" in out:
            v = out.pop("v")
            W_V = np.zeros(v.shape[:1] + (v.shape[1], v.shape[1])) if like is None else \
                np.array(like["W_V"], dtype=np.float64)
            W_V[:, -1] = v
            out["W_V"] = W_V
        return out


def gradient_descent(model: Model, objective: Objective, *, lr: float, epoch: int, tests: dict | None = None,
                     track_value: bool = False, snapshot_every: int = 0, snapshot: Callable | None = None,
                     progress: bool | None = None, start_step: int = 0) -> History:
    """Train ``model`` in place for ``epoch`` steps of full-batch GD on ``objective``.

    ``objective`` is any engine object with ``value_and_grad(model)`` and ``value(model)`` (``linattn.objectives``);
    ``tests`` maps "test_iwl"/"test_icl" to such objects, evaluated (without gradients) before every step.
    ``snapshot_every`` > 0 stores ``snapshot(model)`` (default: the weights) every k steps and at the end.
    ``progress``: a tqdm bar on a terminal, and elsewhere (a log) a plain line every ``PROGRESS_EVERY_S``
    seconds on stderr; None: the bar on a terminal, nothing elsewhere; False: nothing. ``start_step``: the number of
    the first step, for a run that continues another from its weights at that step (the history's ``step`` and the
    snapshots then line up with a run that never stopped: GD is a function of the weights alone).

    Where the objective offers a compiled loop for this model and these tests (``objective.compiled_steps``: the
    exact engine's C kernel), the steps run there, many a call; otherwise one Python step at a time through
    ``value_and_grad``. Both record the same rows, and both report to the bar in blocks of about ``CALL_S``
    seconds (the C loop returns between them, so a signal is heard there too).
    """
    tests = tests or {}
    rec = Records(epoch, tests, len(model.value_weights()) if track_value else 0)
    take = snapshot or WeightsOf(model)
    snaps = []
    start = time.perf_counter()
    bar = progress_bar(epoch, progress)
    compiled = getattr(objective, "compiled_steps", None)
    steps = compiled(model, list(tests.values())) if compiled is not None else None
    block = 16  # steps of the next call: grown to about CALL_S seconds a call
    test_rows = list(rec.tests.values())
    try:
        t = 0
        while t < epoch:
            if snapshot_every and (start_step + t) % snapshot_every == 0:
                snaps.append((start_step + t, take(model)))  # the weights before step t's update
            n = epoch - t if not snapshot_every else min(epoch - t, snapshot_every - (start_step + t) % snapshot_every)
            n, called = min(n, block), time.perf_counter()
            done = steps(t, n, lr, rec.losses, test_rows, rec.values) if steps is not None else \
                _torch_steps(model, objective, tests, rec, t, n, lr)
            block = _next_block(block, done, time.perf_counter() - called)
            bar.update(done)
            if done < n:
                raise TrainingDiverged(start_step + t + done, float(rec.losses[t + done]), lr)
            t += n
    finally:
        bar.close()
    if snapshot_every:
        snaps.append((start_step + epoch, take(model)))
    return History(step=np.arange(start_step, start_step + epoch), train_loss=rec.losses,
                   test_iwl=rec.tests.get("test_iwl"), test_icl=rec.tests.get("test_icl"), values=rec.values,
                   snapshots=snaps, wall_time=time.perf_counter() - start)


# seconds between two plain progress lines (a run whose output is no terminal), and of a block of steps
PROGRESS_EVERY_S, CALL_S = 10.0, 0.25


def _next_block(block: int, done: int, seconds: float) -> int:
    """The steps of the next block: as many as take about CALL_S seconds at the rate of the last one."""
    rate = done / seconds if seconds > 0 else 2 * block / CALL_S  # too quick to time: twice as many
    return int(min(max(16, rate * CALL_S), 1 << 24))


def progress_bar(total: int, progress: bool | None, desc: str = "training") -> Any:
    """What counts a run's steps (``update(n)``, ``close()``): a tqdm bar on a terminal (stderr), else with
    ``progress`` True :class:`ProgressLines`; nothing with ``progress`` False, or None off a terminal."""
    import sys

    from tqdm import tqdm  # the text bar: tqdm.auto warns in a kernel without ipywidgets

    if progress and not sys.stderr.isatty():
        return ProgressLines(total, desc)
    return tqdm(total=total, desc=desc, unit="step", disable=(None if progress is None else not progress),
                mininterval=1.0, leave=False)


class ProgressLines:
    """Progress for a log: ``"training: step 1,200 of 6,001 (20%), 10 s"`` on stderr every PROGRESS_EVERY_S
    seconds (a bar's redraws would pile up there), nothing for a run shorter than that."""

    def __init__(self, total: int, desc: str, every: float | None = None):
        self.total, self.desc, self.n = total, desc, 0
        self.every = PROGRESS_EVERY_S if every is None else every
        self.start = time.monotonic()
        self.next = self.start + self.every

    def update(self, n: int) -> None:
        import sys

        self.n += n
        now = time.monotonic()
        if now >= self.next and self.n < self.total:
            self.next = now + self.every
            print(f"{self.desc}: step {self.n:,} of {self.total:,} ({100 * self.n // max(1, self.total)}%), "
                  f"{now - self.start:.0f} s", file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


class Records:
    """The rows a run records, one per recorded step: the loss, each test loss, the value weights (``heads`` > 0)."""

    def __init__(self, epoch: int, tests: dict, heads: int):
        self.losses = np.empty(epoch)
        self.tests = {k: np.empty(epoch) for k in tests}
        self.values = np.empty((epoch, heads)) if heads else None


def _torch_steps(model, objective, tests: dict, rec: Records, first: int, n: int, lr: float) -> int:
    """Steps ``first`` … ``first + n − 1`` one at a time through ``objective.value_and_grad``; how many were made
    (fewer than ``n`` when a loss was not finite: that step's loss is recorded, its update not made)."""
    import torch

    params = list(model.parameters())
    for t in range(first, first + n):
        for p in params:
            p.grad = None
        loss = objective.value_and_grad(model)
        rec.losses[t] = loss
        if not math.isfinite(loss):
            return t - first
        for k, obj in tests.items():
            rec.tests[k][t] = obj.value(model)
        if rec.values is not None:
            rec.values[t] = model.value_weights().detach().cpu().numpy()
        with torch.no_grad():
            for p in params:
                p -= lr * p.grad
    return n
