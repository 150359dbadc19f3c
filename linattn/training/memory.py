"""The memory a run needs, estimated from its settings before anything is drawn (:func:`memory_estimate`), and the
refusal of a run that cannot fit (:func:`check_memory`, a ConfigError naming ``max_memory``).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from .. import objectives
from ..errors import ConfigError, is_int, named

if TYPE_CHECKING:
    from ..config import RunConfig

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(size: Any) -> int:
    """A number of bytes from an int or a string such as ``"8G"``, ``"500M"``, ``"1.5GiB"`` or ``"4096"``
    (K, M, G, T: powers of 1024). ConfigError (a ValueError) naming ``max_memory`` for anything else."""
    if is_int(size) and size > 0:
        return int(size)
    m = None
    if isinstance(size, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([KMGT]?)(?:i?B)?\s*", size, re.IGNORECASE)
    if m is None or float(m.group(1)) <= 0:
        raise ConfigError(f"{named('max_memory')} must be a number of bytes, or a size such as '8G' or '500M', got "
                          f"{size!r}", field="max_memory", value=size)
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def format_size(n: float) -> str:
    """Bytes for people: ``"1.5 GiB"``, ``"300 MiB"``."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = _UNITS[unit[0]]
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def available_memory() -> int | None:
    """Bytes this process can still allocate without swapping: ``MemAvailable`` of /proc/meminfo where there is
    one (Linux), else the physical memory (``os.sysconf``); None where neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def memory_parts(cfg: RunConfig, *, draws_data: bool = True, engine: str | None = None,
                 snapshot_every: int = 0) -> dict[str, int]:
    """What holds the memory of a run of ``cfg`` (trained by ``engine``; None: ``objectives.resolve(cfg)``;
    a weight snapshot every ``snapshot_every`` steps), in bytes (rough; :func:`memory_estimate` adds them up).
    E = in_dim + 1 numbers per token, n = seq_len tokens per sequence."""
    D, n, E = cfg.in_dim, cfg.seq_len, cfg.in_dim + 1
    engine = engine or objectives.resolve(cfg)
    sets: list = [] if engine == "population" else [cfg.trainset_size] + [cfg.testset_size] * 2 * bool(cfg.testset_size)
    tokens = sum(sets) * n
    parts = {}
    if draws_data and sets:
        # kept for the whole run: every set, float32 (reference) or float64 (streams)
        parts["the drawn data sets"] = (4 if cfg.draws == "reference" else 8) * tokens * E
        # while the largest set is drawn: its inputs in float64 and two more copies (reference: the float64 draw,
        # its float32 cast, the centred cast; streams: the Gaussian draw, its rotation, the concatenation)
        parts["drawing the largest set"] = 16 * max(sets) * n * D
    F = D * D if cfg.model == "mlp" else D * E * (E + 1) // 2  # the feature the exact engine's moments are of
    if engine == "exact" or (engine == "population" and cfg.population_samples):
        # one chunk of sequences in float64 and its features (population: Monte-Carlo samples, drawn chunk by chunk)
        chunk = min(cfg.chunk, max(sets, default=cfg.chunk))
        copies = 3 if engine == "population" else 1  # a sample is drawn (inputs, rotation, sequences); data copied
        parts["the engine's moments"] = 2 * 8 * F * F + 8 * chunk * (copies * n * E + 2 * F)
    elif engine == "population":
        # the Gaussian moment tensors up to order 6 (objectives/population.py) and 64 probe sequences (check_linear)
        parts["the engine's moments"] = 2 * 8 * F * F + 4 * 8 * E**6 + 3 * 8 * 64 * n * E
    if (heads := _head_activations(cfg, engine, sets)):
        parts["the per-head activations"] = heads
    if engine in ("autograd", "softmax"):
        # a copy of every set in the run's dtype (softmax: padded to blocks, converted, then re-laid out: ~3 copies)
        copies = 1 if engine == "autograd" else 3
        parts["the engine's copy of the data"] = copies * (4 if cfg.dtype == "float32" else 8) * tokens * E
    weights = _weights(cfg) // 4  # one copy of the weights in float64
    parts["the weights"] = 4 * weights
    # one row a step, float64: the step, the loss, the two test losses, each head's value weight (train.Records)
    row = 2 + 2 * bool(cfg.testset_size) + cfg.head_num * cfg.track_value
    steps = cfg.recorded_steps()
    rows = cfg.epoch if steps is None else len(steps)
    parts["the recorded history"] = 8 * row * rows
    snapshots = cfg.epoch // snapshot_every + 2 if snapshot_every else 0
    if snapshot_every:
        parts["the weight snapshots"] = weights * snapshots
    if cfg.dynamics == "flow":  # solve_ivp returns the weights at every evaluated step before the losses are
        parts["the integrated trajectory"] = weights * (rows + snapshots + 1)
    return parts


def _weights(cfg) -> int:
    """Bytes of four float64 copies of the weights of ``cfg``'s model: the weights, their gradient, the initial and
    the final weights."""
    D, E = cfg.in_dim, cfg.in_dim + 1
    shapes = {"attnM": 2 * E * E, "attnS": 2 * cfg.rank * E + E * E, "mlp": D * D + 1}
    return 4 * 8 * cfg.head_num * shapes.get(cfg.model, 0)


# sequences on which the exact engine compares features() @ combined() with forward() (objectives.exact.CHECK_ROWS),
# and the probe sequences of the population engine's check (objectives.population)
_CHECK_ROWS, _PROBE_ROWS = 256, 64
# (P, H, n) tensors alive at once while the attention models' forward() runs: without a graph (the check: the
# tokens' values, the scores, the scaled scores, their product) and with autograd's saved tensors and gradients
_FORWARD_COPIES, _AUTOGRAD_COPIES = 4, 8


def _head_activations(cfg, engine: str, sets: list) -> int:
    """Bytes of the attention models' per-head activations at their largest: (rows, H, n) tensors of the forward
    pass (models._Attention.forward: every token's value v_h·x̃_m and its score, per sequence and head).

    exact: ``forward()`` once, on the first ``_CHECK_ROWS`` sequences of each set (check_linear, float64); population:
    on 64 probe sequences; autograd: a chunk of ``chunk`` sequences with its graph, every step, in the run's dtype
    (``vary_len``: twice, its prefixes); softmax: the largest scores, one per sequence and head (the native kernel
    keeps the rest in a few KB). The MLP has no heads."""
    if cfg.model == "mlp":
        return 0
    H, n, largest = cfg.head_num, cfg.seq_len, max(sets, default=0)
    item = 4 if cfg.dtype == "float32" else 8
    if engine == "exact":
        return _FORWARD_COPIES * min(largest, _CHECK_ROWS) * H * n * 8
    if engine == "population":
        return _FORWARD_COPIES * _PROBE_ROWS * H * n * 8
    if engine == "autograd":
        return _AUTOGRAD_COPIES * (1 + cfg.vary_len) * min(largest, cfg.chunk) * H * n * item
    if engine == "softmax":
        return 2 * largest * H * item
    return 0


def memory_estimate(cfg: RunConfig, *, draws_data: bool = True, engine: str | None = None,
                    snapshot_every: int = 0) -> int:
    """The peak memory of a run of ``cfg`` in bytes, roughly (within a factor of ~2):

        peak = data sets + weights + history + snapshots + max(drawing the largest set, the engine's copy or
               moments, the per-head activations, gradient flow's trajectory)

    The drawn training and test sets hold P·seq_len·(in_dim+1) numbers each (float32 with ``draws="reference"``,
    float64 with ``"streams"``); drawing a set briefly holds its inputs in float64 and two more copies; the engine
    copies the data (autograd, softmax) or holds its moments (exact: two F×F float64 matrices, F the length of the
    model's feature, and one chunk; population: no data, the moment tensors). The attention models' forward pass
    holds a few (rows, H, n) tensors, per sequence, head and token (the per-head activations: the exact engine's check
    on 256 sequences, autograd's graph of a chunk): with many heads the largest part. The history holds one float64 row
    a recorded step (step, loss, test losses, value weights with ``track_value``; every step, or the ``record``
    steps of a flow), every ``snapshot_every`` steps a copy of the weights is kept, and gradient flow holds the
    weights at every recorded step while it evaluates the losses.
    ``draws_data=False``: the data are given, nothing is drawn (they are counted where the engine copies them).
    """
    return _peak(memory_parts(cfg, draws_data=draws_data, engine=engine, snapshot_every=snapshot_every))


# what the run keeps from start to end; every other part is held for a while, the largest of them at the peak
_KEPT = ("the drawn data sets", "the weights", "the recorded history", "the weight snapshots")


def _peak(parts: dict[str, int]) -> int:
    transient = [n for name, n in parts.items() if name not in _KEPT]
    return sum(parts.get(name, 0) for name in _KEPT) + max(transient, default=0)


def _smaller(part: str, engine: str) -> str:
    """The settings that make ``part`` of :func:`memory_parts` smaller."""
    if part in ("the recorded history", "the weight snapshots", "the integrated trajectory"):
        return f"a smaller {named('epoch')} (or, for a flow, fewer {named('record')} steps)"
    if part == "the per-head activations":
        chunk = f", or a smaller {named('chunk')}" if engine == "autograd" else ""
        return f"a smaller {named('head_num')} or {named('seq_len')}{chunk}"
    if part == "the weights":
        return f"a smaller {named('head_num')} or {named('in_dim')}"
    return (f"a smaller {named('trainset_size')}, {named('testset_size')} or {named('seq_len')} (or "
            f"{named('in_dim')})")


def check_memory(cfg: RunConfig, max_memory: int | str | None = None, *, draws_data: bool = True,
                 engine: str | None = None, snapshot_every: int = 0) -> int:
    """The estimate of :func:`memory_estimate` if it is within ``max_memory`` (bytes, or a size such as ``"8G"``; None:
    ``available_memory()``, no check where that is unknown), else :class:`~linattn.errors.ConfigError` naming it, with
    the settings that shrink its largest part."""
    parts = memory_parts(cfg, draws_data=draws_data, engine=engine, snapshot_every=snapshot_every)
    return _within(cfg, parts, max_memory, engine or objectives.resolve(cfg))


def check_weights_memory(cfg: RunConfig, max_memory: int | str | None = None) -> int:
    """:func:`check_memory` for a figure that only draws ``cfg``'s initial weights (a schematic) and trains nothing:
    the weights and the copies made of them (``mlp_from_attn_m``) against ``max_memory``."""
    return _within(cfg, {"the weights": _weights(cfg)}, max_memory, "exact")


def _within(cfg, parts: dict[str, int], max_memory, engine: str) -> int:
    """The peak of ``parts`` if it is within ``max_memory``, else the ConfigError of :func:`check_memory`."""
    need = _peak(parts)
    limit = available_memory() if max_memory is None else parse_size(max_memory)
    if limit is not None and need > limit:
        largest = max(parts, key=lambda part: parts[part])
        what = "memory available now" if max_memory is None else "the limit given"
        raise ConfigError(f"this run needs about {format_size(need)} of memory (largest part: {largest}, "
                          f"{format_size(parts[largest])}), more than {named('max_memory')}: {format_size(limit)} "
                          f"({what}); use {_smaller(largest, engine)}, or a larger "
                          f"{named('max_memory')}",
                          field="max_memory", value=max_memory)
    return need
