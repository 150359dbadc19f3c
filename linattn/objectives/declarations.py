"""What each engine declares to the registry, without torch: its name, where it prefers to run, which models it
trains, which settings it refuses and how long its stable-rate trials are.

:class:`~linattn.config.RunConfig` validation and the CLI's ``--engine`` choices read these declarations only, so
checking a run's settings never imports torch. Each engine class (``exact.py``, ``population.py``, ``softmax.py``,
``autograd.py``, all of which import torch) inherits its declaration, so a rule is written once; the registry
(``linattn.objectives.ENGINES``) holds the declarations and ``objectives.load`` imports the class that trains.
"""

from __future__ import annotations

from typing import Protocol

from ..errors import named


class RunSettings(Protocol):
    """What an engine reads of a run's settings (:class:`linattn.config.RunConfig` has them all): the engines are
    typed against this, so that they need not import the configuration, which imports them to validate a run."""

    @property
    def engine(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def softmax(self) -> bool: ...
    @property
    def seq_len(self) -> int: ...
    @property
    def trainset_size(self) -> int | None: ...
    @property
    def testset_size(self) -> int: ...
    @property
    def icl(self) -> float: ...
    @property
    def seed(self) -> int: ...
    @property
    def cov_matrix(self) -> list | None: ...
    @property
    def draws(self) -> str: ...
    @property
    def normalize(self) -> str: ...
    @property
    def vary_len(self) -> bool: ...
    @property
    def dtype(self) -> str: ...
    @property
    def chunk(self) -> int: ...
    @property
    def population_samples(self) -> int: ...


class Engine:
    """What every engine declares, with the common defaults.

    ``name``: the engine's name; ``preferred_device``: "cpu" or "accelerator" (CUDA when torch sees one);
    ``linear_only``: trains only models whose prediction is linear in a fixed feature. A training set of infinitely
    many sequences (``trainset_size=None``) is refused by the registry for every engine but ``population``.
    ``trains``: the name in ``linattn.objectives`` of the class that trains this declaration (set on declarations
    only: an engine class trains itself). ``threads``: torch's intra-op threads during a run on the CPU (None: the
    caller's setting; ``objectives.threads_for``).
    """

    name: str
    preferred_device = "cpu"
    linear_only = False
    trains: str | None = None
    threads: int | None = None

    @staticmethod
    def refuses(cfg: RunSettings) -> str | None:
        """Why this engine cannot train a run of ``cfg`` (None: it can)."""
        return None

    @staticmethod
    def trial_steps(diverged_at: int) -> int:
        """Steps of the trial runs that look for a stable learning rate after a divergence at ``diverged_at``."""
        return 20


class ExactEngine(Engine):
    """The exact objective's declaration (:class:`~linattn.objectives.Exact`)."""

    name = "exact"
    preferred_device = "cpu"  # a step is a few small matrix products: faster than a GPU kernel launch
    linear_only = True
    trains = "Exact"
    threads = 1  # a step is microseconds: more threads only add a fork/join to each small product

    @staticmethod
    def refuses(cfg: RunSettings) -> str | None:
        """Why this objective cannot train ``cfg`` (None: it can)."""
        if cfg.softmax:
            return (f"{named('engine')} 'exact' covers linear attention only; {named('softmax')} needs "
                    f"{named('engine')} 'autograd' or 'softmax'")
        return None

    @staticmethod
    def trial_steps(diverged_at: int) -> int:
        """Steps of the trial runs that look for a stable learning rate: a step costs microseconds, so as many as the
        diverged run lasted (20 to 200)."""
        return max(20, min(diverged_at + 1, 200))


class PopulationEngine(ExactEngine):
    """The population objective's declaration (:class:`~linattn.objectives.Population`)."""

    name = "population"
    trains = "Population"

    @staticmethod
    def refuses(cfg: RunSettings) -> str | None:
        """Why this objective cannot train ``cfg`` (None: it can)."""
        if cfg.softmax:
            return (f"{named('engine')} 'population' covers linear attention only; {named('softmax')} needs "
                    f"{named('engine')} 'autograd' or 'softmax'")
        streams = cfg.draws == "streams" and cfg.cov_matrix is None
        if cfg.icl != 1.0 and not (streams and cfg.model == "attnM" and not cfg.vary_len and not
                                   cfg.population_samples):
            return (f"the population engine ({named('trainset_size', None)}) supports {named('icl')} < 1 only for "
                    f"linear {named('model', 'attnM')} with {named('draws', 'streams')} (the fixed task w_fix is "
                    f"drawn from them), exact moments and no vary_len; else {named('icl')} = 1 only")
        if cfg.testset_size and not streams:
            return (f"the population engine ({named('trainset_size', None)}) draws test sets only with "
                    f"{named('draws', 'streams')}: use {named('testset_size', 0)}")
        return None


class SoftmaxEngine(Engine):
    """The softmax objective's declaration (:class:`~linattn.objectives.Softmax`)."""

    name = "softmax"
    preferred_device = "accelerator"
    trains = "Softmax"

    @staticmethod
    def refuses(cfg: RunSettings) -> str | None:
        """Why this objective cannot train ``cfg`` (None: it can)."""
        if not cfg.softmax:
            return (f"{named('engine')} 'softmax' covers softmax attention only (set {named('softmax', True)}, or use "
                    f"{named('engine')} 'exact' or 'autograd')")
        return None


class AutogradEngine(Engine):
    """The autograd objective's declaration (:class:`~linattn.objectives.Autograd`)."""

    name = "autograd"
    preferred_device = "accelerator"  # CUDA when torch sees one: the per-sequence work parallelises
    trains = "Autograd"
