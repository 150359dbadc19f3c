"""The training objectives behind one registry: what each engine trains, where it prefers to run, how it is built.

* ``exact`` — the loss as a quadratic form in the combined weights; linear models, finite P; prefers the CPU.
* ``population`` — the same for P → ∞ (exact Gaussian moments); linear models, icl = 1; prefers the CPU.
* ``softmax`` — softmax attention, query row, gradient written out; prefers a GPU when there is one.
* ``autograd`` — the model's own forward pass on every sequence; every model, finite P; prefers a GPU.

Each engine class declares ``name``, ``preferred_device``, ``linear_only``, ``refuses(cfg)`` (why it cannot train a
run's settings, or None) and ``trial_steps(step)`` (how long the stable-rate trial runs after a divergence are).
:class:`~linattn.config.RunConfig` validation, :func:`linattn.run <linattn.experiment.run>`, the CLI's ``--engine``
choices and ``engine="auto"`` all ask this registry (:data:`ENGINES`, :func:`engine_choices`, :func:`resolve`,
:func:`refusal`, :func:`device_for`, :func:`build`); a new objective is one class and one entry in :data:`ENGINES`.
"""

from __future__ import annotations

import torch

from ..data import named
from .autograd import Autograd
from .base import DEFAULT_CHUNK, Moments, NotLinearError, check_linear, feature_batches, thread_count
from .exact import Exact
from .population import Population, population_moments
from .softmax import Softmax

#: The registered engines by name, each an :class:`~linattn.objectives.base.Objective` class.
ENGINES = {cls.name: cls for cls in (Exact, Population, Softmax, Autograd)}


def engine_choices() -> tuple[str, ...]:
    """What ``engine`` may be: ``"auto"`` or a registered name."""
    return ("auto", *ENGINES)


def get(name: str):
    """The engine class registered as ``name``."""
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f"engine must be one of {', '.join(map(repr, engine_choices()))}, got {name!r}") from None


def resolve(cfg) -> str:
    """The engine ``cfg`` trains with: ``cfg.engine``, or for ``"auto"`` population when the training set is
    infinite (``trainset_size=None``), softmax for softmax attention, else exact."""
    if cfg.engine != "auto":
        return cfg.engine
    if cfg.trainset_size is None:
        return Population.name
    return Softmax.name if cfg.softmax else Exact.name


def refusal(cfg) -> str | None:
    """Why the engine of ``cfg`` (after :func:`resolve`) cannot train it, or None."""
    engine = get(resolve(cfg))
    reason = engine.refuses(cfg)
    if reason is None and cfg.trainset_size is None and engine is not Population:
        reason = (f"{named('trainset_size', None)} (the population objective) needs {named('engine')} 'population', "
                  f"not {engine.name!r}")
    return reason


def device_for(device: str, engine: str) -> str:
    """The torch device of a run: ``"auto"`` is the engine's preferred device (CUDA, when torch sees it, for engines
    that prefer an accelerator; else the CPU). An explicit device is returned as given (``RunConfig.validate``
    refuses unavailable CUDA devices)."""
    if device != "auto":
        return device
    wants_gpu = get(engine).preferred_device == "accelerator"
    return "cuda" if wants_gpu and torch.cuda.is_available() else "cpu"


def threads_for(engine: str, device: str) -> int | None:
    """torch's intra-op threads for a run of ``engine`` on ``device`` (None: the caller's setting): the engine's
    choice (``Objective.threads``) on the CPU; one on a GPU, where the host only launches kernels."""
    return get(engine).threads if torch.device(device).type == "cpu" else 1


def build(cfg, model, datasets, device: str):
    """(training objective, {"test_iwl"/"test_icl": test objective}) of a run of ``cfg`` on ``datasets``.

    Test sets are evaluated by the training engine, or by :class:`Exact` for the moment-based engines."""
    engine = get(resolve(cfg))
    opts = dict(vary_len=cfg.vary_len, normalize=cfg.normalize, chunk=cfg.chunk, device=device,
                dtype=getattr(torch, cfg.dtype))
    if hasattr(engine, "for_run"):
        train = engine.for_run(model, datasets, cfg, **opts)
    else:
        train = engine.for_data(model, datasets.train, **opts)
    test_engine = Exact if engine.linear_only else engine
    tests = {key: test_engine.for_data(model, getattr(datasets, key), **opts)
             for key in ("test_iwl", "test_icl") if getattr(datasets, key) is not None}
    return train, tests


__all__ = ["ENGINES", "engine_choices", "get", "resolve", "refusal", "device_for", "build", "Exact", "Population",
           "Softmax", "Autograd", "Moments", "NotLinearError", "check_linear", "feature_batches", "population_moments",
           "DEFAULT_CHUNK", "thread_count", "threads_for"]
