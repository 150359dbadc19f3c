"""The training objectives behind one registry: what each engine trains, where it prefers to run, how it is built.

* ``exact`` — the loss as a quadratic form in the combined weights; linear models, finite P; prefers the CPU.
* ``population`` — the same for P → ∞ (exact Gaussian moments); linear models, icl = 1; prefers the CPU.
* ``softmax`` — softmax attention, query row, gradient written out; prefers a GPU when there is one.
* ``autograd`` — the model's own forward pass on every sequence; every model, finite P; prefers a GPU.

Each engine declares ``name``, ``preferred_device``, ``linear_only``, ``refuses(cfg)`` (why it cannot train a
run's settings, or None) and ``trial_steps(step)`` (how long the stable-rate trial runs after a divergence are) in
``declarations.py``, which needs no torch; its class (which does) inherits them.
:class:`~linattn.config.RunConfig` validation, :func:`linattn.run <linattn.training.experiment.run>`, the CLI's
``--engine`` choices and ``engine="auto"`` all ask this registry (:data:`ENGINES`, :func:`engine_choices`,
:func:`resolve`, :func:`refusal`, :func:`device_for`, ``load``, :func:`build`); a new objective is one class and one
entry in :data:`ENGINES`. Importing this package imports no torch: the classes (``Exact``, ``Moments``, …) are imported
when first looked up (module ``__getattr__``), as ``load`` and :func:`build` do.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from .. import _lazy
from ..errors import named
from .declarations import AutogradEngine, Engine, ExactEngine, PopulationEngine, RunSettings, SoftmaxEngine

if TYPE_CHECKING:
    from ..data import Datasets
    from ..models import Model

#: The registered engines by name, each a declaration (``linattn.objectives.declarations.Engine``), or an
#: engine class (a subclass of :class:`~linattn.objectives.base.Objective`) registered as it is.
ENGINES = {cls.name: cls for cls in (ExactEngine, PopulationEngine, SoftmaxEngine, AutogradEngine)}

#: The names this package gives from its modules on first use (module ``__getattr__``): name → module.
_LAZY = {"Exact": "exact", "Population": "population", "population_moments": "population", "Softmax": "softmax",
         "Autograd": "autograd", "Moments": "base", "NotLinearError": "base", "check_linear": "base",
         "feature_batches": "base", "DEFAULT_CHUNK": "base",
         "thread_count": "base"}


def __getattr__(name: str):
    return _lazy.attribute(__name__, _LAZY, globals(), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def engine_choices() -> tuple[str, ...]:
    """What ``engine`` may be: ``"auto"`` or a registered name."""
    return ("auto", *ENGINES)


def get(name: str) -> type[Any]:
    """The engine registered as ``name`` (its declaration, or a registered class; ``load``: the class that
    trains it)."""
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f"engine must be one of {', '.join(map(repr, engine_choices()))}, got {name!r}") from None


def resolve(cfg: RunSettings) -> str:
    """The engine ``cfg`` trains with: ``cfg.engine``, or for ``"auto"`` population when the training set is
    infinite (``trainset_size=None``), softmax for softmax attention, else exact."""
    if cfg.engine != "auto":
        return cfg.engine
    if cfg.trainset_size is None:
        return PopulationEngine.name
    return SoftmaxEngine.name if cfg.softmax else ExactEngine.name


def refusal(cfg: RunSettings) -> str | None:
    """Why the engine of ``cfg`` (after :func:`resolve`) cannot train it, or None."""
    engine = get(resolve(cfg))
    reason = engine.refuses(cfg)
    if reason is None and cfg.trainset_size is None and engine.name != PopulationEngine.name:
        reason = (f"{named('trainset_size', None)} (the population objective) needs {named('engine')} 'population', "
                  f"not {engine.name!r}")
    return reason


def device_for(device: str, engine: str) -> str:
    """The torch device of a run: ``"auto"`` is the engine's preferred device (CUDA, when torch sees it, for engines
    that prefer an accelerator; else the CPU). An explicit device is returned as given (``RunConfig.validate``
    refuses unavailable CUDA devices)."""
    if device != "auto":
        return device
    if get(engine).preferred_device != "accelerator":
        return "cpu"
    import torch  # only here: asking for CUDA needs torch, choosing the CPU does not

    return "cuda" if torch.cuda.is_available() else "cpu"


def load(engine: str | type) -> type[Any]:
    """The class that trains ``engine`` (a registered name, or its :data:`ENGINES` entry): the class a declaration
    names, imported now (with torch), or the entry itself where an engine class was registered."""
    entry = get(engine) if isinstance(engine, str) else engine
    trains = vars(entry).get("trains")
    return getattr(sys.modules[__name__], trains) if trains else entry


def threads_for(engine: str, device: str) -> int | None:
    """torch's intra-op threads for a run of ``engine`` on ``device`` (None: the caller's setting): the engine's
    choice (``Objective.threads``) on the CPU; one on a GPU, where the host only launches kernels."""
    return get(engine).threads if str(device).split(":")[0] == "cpu" else 1


def build(cfg: RunSettings, model: Model, datasets: Datasets, device: str, *,
          shared: dict | None = None) -> tuple[Any, dict[str, Any]]:
    """(training objective, {"test_iwl"/"test_icl": test objective}) of a run of ``cfg`` on ``datasets``.

    Test sets are evaluated by the training engine, or by :class:`Exact` for the moment-based engines. ``shared``:
    a dict in which the exact engine keeps the moments of each data set it reads, for the runs after this one
    (``Exact.from_data``)."""
    import torch

    engine = load(resolve(cfg))
    opts = dict(vary_len=cfg.vary_len, normalize=cfg.normalize, chunk=cfg.chunk, device=device,
                dtype=getattr(torch, cfg.dtype))
    exact = load(ExactEngine)

    def objective(engine, seqs):
        return engine.for_data(model, seqs, **opts, **({"shared": shared} if engine is exact else {}))

    train = engine.for_run(model, datasets, cfg, **opts) if hasattr(engine, "for_run") else \
        objective(engine, datasets.train)
    test_engine = exact if engine.linear_only else engine
    tests = {key: objective(test_engine, getattr(datasets, key))
             for key in ("test_iwl", "test_icl") if getattr(datasets, key) is not None}
    return train, tests


__all__ = ["ENGINES", "engine_choices", "get", "resolve", "refusal", "device_for", "load", "build", "Engine", "Exact",
           "Population", "Softmax", "Autograd", "Moments", "NotLinearError", "check_linear", "feature_batches",
           "population_moments", "DEFAULT_CHUNK", "thread_count", "threads_for"]
