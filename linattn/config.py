"""One training run's settings, with the reference's names and defaults, and their validation.

The CLI (``linattn train``), the figure notebooks and the Python API all go through :class:`RunConfig`;
:meth:`RunConfig.validate` raises :class:`ConfigError` with one clear sentence for any invalid setting, naming the
field as it is written in Python (``head_num must be a positive integer, got 0``; the CLI translates the names to
its flags). :func:`memory_estimate` and :func:`check_memory` refuse a run whose data cannot fit before it starts.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from . import objectives
from .data import check_choice, check_covariance, check_int, check_spectrum, is_int, is_number
from .models import check_weight_settings
from .normalization import NORMALIZATIONS

DYNAMICS = ("gd", "flow")
DTYPES = ("float64", "float32")
DRAWS = ("reference", "streams")
# The fields by the type validate() requires (a bool is not an int here: True is no size).
INT_FIELDS = ("head_num", "rank", "in_dim", "seq_len", "testset_size", "epoch", "seed", "population_samples",
              "chunk")
NUMBER_FIELDS = ("icl", "init", "lr")
BOOL_FIELDS = ("white_cov", "vary_len", "cubic_feat", "softmax", "track_value")
STR_FIELDS = ("model", "init_scheme", "draws", "normalize", "engine", "dynamics", "dtype", "device")


class ConfigError(ValueError):
    """An invalid setting; the message names it and says what is allowed."""


@dataclass
class RunConfig:
    """The settings of one run: the fields are the flags of ``linattn train`` (``linattn train --help`` says what
    each means), with the reference's names and defaults, then linattn's own. ``trainset_size=None`` is the CLI's
    ``inf`` (the population objective); ``trainset_size=float("inf")`` is turned into None on construction.
    Nothing else is checked on construction; :meth:`validate` checks everything and
    :func:`~linattn.experiment.run` calls it first.
    """

    # the reference's flags, same names and defaults
    model: str = "attnM"
    head_num: int = 1
    rank: int = 1
    in_dim: int = 4
    seq_len: int = 32
    trainset_size: int | None = 5000  # None: infinite (population engine)
    testset_size: int = 0
    icl: float = 1.0
    white_cov: bool = False
    vary_len: bool = False
    cubic_feat: bool = False
    softmax: bool = False
    init: float = 0.01
    lr: float = 1e-3
    epoch: int = 6001
    seed: int = 10
    track_value: bool = False
    # ours
    spectrum: tuple[float, ...] | None = None
    cov_matrix: list | None = field(default=None, repr=False)
    init_scheme: str = "dec2025"  # the initialisation era: dec2024, jan2025 or dec2025 (models.init_weights)
    draws: str = "reference"  # reference: the authors' random numbers (reference_draws.py); streams: data.streams
    normalize: str = "sum"
    engine: str = "auto"
    dynamics: str = "gd"  # gd: full-batch gradient descent; flow: gradient flow at t/τ = 2·lr·step (flow.py)
    dtype: str = "float64"
    device: str = "auto"
    population_samples: int = 0  # 0: exact population moments; > 0: Monte-Carlo estimate of that size
    chunk: int = 4096

    def __post_init__(self):
        if isinstance(self.trainset_size, (float, np.floating)) and self.trainset_size == math.inf:
            self.trainset_size = None  # the same population objective, so the same settings, keys and run.json

    @property
    def N(self) -> int:
        """Context pairs before the query."""
        return self.seq_len - 1

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The settings, in order (every field)."""
        return tuple(f.name for f in fields(cls))

    def resolved_engine(self) -> str:
        """The engine that trains this run (``objectives.resolve``: ``auto`` is exact for linear models, population
        when the training set is infinite, softmax for softmax attention)."""
        return objectives.resolve(self)

    def to_dict(self) -> dict:
        """Every setting by name (``trainset_size`` None as ``"inf"``): ``run.json``'s ``settings``."""
        d = asdict(self)
        d["trainset_size"] = "inf" if self.trainset_size is None else self.trainset_size
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        """The inverse of :meth:`to_dict` (e.g. ``run.json``'s ``settings``); unknown keys raise ConfigError."""
        unknown = sorted(set(d) - set(cls.field_names()))
        if unknown:
            raise ConfigError(f"unknown settings {', '.join(unknown)} (from another linattn version?)")
        d = dict(d)
        if d.get("trainset_size") == "inf":
            d["trainset_size"] = None
        if d.get("spectrum") is not None:
            d["spectrum"] = tuple(d["spectrum"])
        return cls(**d)

    def validate(self) -> "RunConfig":
        """``self`` if every setting has the right type, is valid and they fit together, else :class:`ConfigError`
        naming the first problem in one sentence, with the field as written in Python (the CLI translates it to its
        flag). Also refuses an unavailable CUDA ``device``. Whether the reference's draws exist for the settings is
        checked where something is drawn (:meth:`reference_draws_refusal`)."""
        try:
            self._check_types()
            self._check_values()
        except ConfigError:
            raise
        except ValueError as e:  # the checks shared with data.py and models.py raise plain ValueErrors
            raise ConfigError(str(e)) from None
        return self

    def _check_types(self) -> None:
        for name in INT_FIELDS:
            if not is_int(value := getattr(self, name)):
                raise ConfigError(f"{name} must be an integer, got {value!r}")
        if not (self.trainset_size is None or is_int(self.trainset_size)):
            raise ConfigError(f"trainset_size must be an integer, or None (or float('inf')) for the population "
                              f"objective, got {self.trainset_size!r}")
        for name in NUMBER_FIELDS:
            if not is_number(value := getattr(self, name)):
                raise ConfigError(f"{name} must be a number, got {value!r}")
        for name in BOOL_FIELDS:
            if not isinstance(value := getattr(self, name), (bool, np.bool_)):
                raise ConfigError(f"{name} must be True or False, got {value!r}")
        for name in STR_FIELDS:
            if not isinstance(value := getattr(self, name), str):
                raise ConfigError(f"{name} must be a string, got {value!r}")

    def _check_values(self) -> None:
        def bad(msg):
            raise ConfigError(msg)

        check_int("population_samples", self.population_samples, low=0, what="an integer >= 0 (0: exact moments)")
        check_weight_settings(model=self.model, head_num=self.head_num, in_dim=self.in_dim, rank=self.rank,
                              init=self.init, init_scheme=self.init_scheme)
        check_int("epoch", self.epoch)
        check_int("chunk", self.chunk)
        if self.trainset_size is not None:
            check_int("trainset_size", self.trainset_size,
                      what="a positive integer (trainset_size=None: the population objective)")
        check_int("testset_size", self.testset_size, low=0, what="an integer >= 0")
        # the drawn sets are centred across their sequences (the reference's recipe): one sequence becomes all zeros
        for name in ("trainset_size", "testset_size"):
            if getattr(self, name) == 1:
                bad(f"{name}=1 is refused: the inputs are centred across the sequences of a set, which sets every "
                    "input of a single sequence to zero; use at least 2")
        check_int("seed", self.seed, low=0, high=2**32, what="an integer in [0, 2^32)")
        check_int("seq_len", self.seq_len, low=2, what="at least 2 (one context pair and the query)")
        if not (0.0 <= self.icl <= 1.0):
            bad(f"icl must lie in [0, 1], got {self.icl}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            bad(f"lr must be a positive finite number, got {self.lr}")
        if self.model == "mlp" and not self.cubic_feat:
            bad('model="mlp" needs cubic_feat=True (the MLP acts on the cubic feature)')
        if self.cubic_feat and self.model != "mlp":
            bad('cubic_feat=True only applies to model="mlp"')
        if self.softmax and self.model == "mlp":
            bad('softmax=True applies to the attention models, not to model="mlp"')
        check_choice("draws", self.draws, DRAWS)
        check_choice("normalize", self.normalize, NORMALIZATIONS)
        check_choice("dynamics", self.dynamics, DYNAMICS)
        check_choice("engine", self.engine, objectives.engine_choices())
        check_choice("dtype", self.dtype, DTYPES)
        if self.device not in ("auto", "cpu") and not re.fullmatch(r"cuda(:\d+)?", self.device):
            bad(f"device must be 'auto', 'cpu' or 'cuda[:k]', got {self.device!r}")
        if self.device.startswith("cuda"):
            import torch

            index = int(self.device.partition(":")[2] or 0)
            if not torch.cuda.is_available():
                bad(f'device="{self.device}": torch {torch.__version__} sees no CUDA device here; use device="cpu" '
                    'or device="auto"')
            if index >= torch.cuda.device_count():
                bad(f'device="{self.device}": torch sees {torch.cuda.device_count()} CUDA device(s), numbered from 0')
        if (reason := objectives.refusal(self)) is not None:
            bad(reason)
        if self.spectrum is not None:
            if self.white_cov:
                bad("spectrum and white_cov=True are mutually exclusive")
            check_spectrum(self.spectrum, self.in_dim)
        if self.cov_matrix is not None:
            try:
                check_covariance(self.cov_matrix, self.in_dim)
            except ValueError as e:
                bad(f"cov_matrix: {e}")

    def reference_draws_refusal(self, *, covariance_only: bool = False) -> str | None:
        """Why the reference's own random numbers (``draws="reference"``) cannot make what a run of these settings
        draws, or None: options the authors' code never had (``draws="streams"`` has them). ``covariance_only``:
        only Λ is drawn (a population run with given initial weights), which needs no draw with ``cov_matrix`` or
        ``white_cov``. :func:`~linattn.experiment.draw` and :func:`~linattn.experiment.run` ask this where they
        draw; ``linattn train`` (which always draws) asks it up front."""
        if covariance_only:
            drawn = self.cov_matrix is None and not self.white_cov
            never = [("spectrum", drawn and self.spectrum is not None), ("trainset_size=None", drawn),
                     ("population_samples > 0", self.population_samples > 0)]
        else:
            never = [("spectrum", self.spectrum is not None), ("cov_matrix", self.cov_matrix is not None),
                     ("trainset_size=None", self.trainset_size is None),
                     ('normalize="mean"', self.normalize == "mean"),
                     ("population_samples > 0", self.population_samples > 0)]
        for option, given in never:
            if given:
                return (f"{option} has no reference draws (the authors' code has no such option); add "
                        'draws="streams"')
        if not covariance_only and self.init_scheme == "dec2024" and self.icl != 1.0:
            return ('init_scheme="dec2024" with draws="reference" needs icl=1 (the Dec 2024 code had no icl option); '
                    'use another init_scheme, or add draws="streams"')
        return None


# ── memory ───────────────────────────────────────────────────────────────────────────────────────────────────────

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(size) -> int:
    """A number of bytes from an int or a string such as ``"8G"``, ``"500M"``, ``"1.5GiB"`` or ``"4096"``
    (K, M, G, T: powers of 1024). ValueError naming ``max_memory`` for anything else."""
    if is_int(size) and size > 0:
        return int(size)
    m = None
    if isinstance(size, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([KMGT]?)(?:i?B)?\s*", size, re.IGNORECASE)
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"max_memory must be a number of bytes, or a size such as '8G' or '500M', got {size!r}")
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


def memory_parts(cfg: RunConfig, *, draws_data: bool = True) -> dict[str, int]:
    """What holds the memory of a run of ``cfg``, in bytes (rough; :func:`memory_estimate` adds them up).
    E = in_dim + 1 numbers per token, n = seq_len tokens per sequence."""
    D, n, E = cfg.in_dim, cfg.seq_len, cfg.in_dim + 1
    engine = objectives.resolve(cfg)
    sets = [] if engine == "population" else [cfg.trainset_size] + [cfg.testset_size] * 2 * bool(cfg.testset_size)
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
    if engine in ("autograd", "softmax"):
        # a copy of every set in the run's dtype (softmax: padded to blocks, converted, then re-laid out: ~3 copies)
        copies = 1 if engine == "autograd" else 3
        parts["the engine's copy of the data"] = copies * (4 if cfg.dtype == "float32" else 8) * tokens * E
    shapes = {"attnM": 2 * E * E, "attnS": 2 * cfg.rank * E + E * E, "mlp": D * D + 1}
    parts["the weights"] = 4 * 8 * cfg.head_num * shapes.get(cfg.model, 0)  # weights, gradient, initial, final
    return parts


def memory_estimate(cfg: RunConfig, *, draws_data: bool = True) -> int:
    """The peak memory of a run of ``cfg`` in bytes, roughly (within a factor of ~2):

        peak = data sets + weights + max(drawing the largest set, the engine's copy or moments)

    The drawn training and test sets hold P·seq_len·(in_dim+1) numbers each (float32 with ``draws="reference"``,
    float64 with ``"streams"``); drawing a set briefly holds its inputs in float64 and two more copies; the engine
    copies the data (autograd, softmax) or holds its moments (exact: two F×F float64 matrices, F the length of the
    model's feature, and one chunk; population: no data, the moment tensors). ``draws_data=False``: the data are
    given, nothing is drawn (they are counted where the engine copies them).
    """
    parts = memory_parts(cfg, draws_data=draws_data)
    transient = parts.pop("drawing the largest set", 0)
    kept = parts.pop("the drawn data sets", 0) + parts.pop("the weights")
    return kept + max([transient, *parts.values()])


def check_memory(cfg: RunConfig, max_memory=None, *, draws_data: bool = True) -> int:
    """The estimate of :func:`memory_estimate` if it is within ``max_memory`` (bytes, or a size such as ``"8G"``;
    None: ``available_memory()``, no check where that is unknown), else :class:`ConfigError` naming it."""
    parts = memory_parts(cfg, draws_data=draws_data)
    need = memory_estimate(cfg, draws_data=draws_data)
    limit = available_memory() if max_memory is None else parse_size(max_memory)
    if limit is not None and need > limit:
        largest = max(parts, key=parts.get)
        what = "memory available now" if max_memory is None else "the limit given"
        raise ConfigError(f"this run needs about {format_size(need)} of memory (largest part: {largest}, "
                          f"{format_size(parts[largest])}), more than max_memory: {format_size(limit)} ({what}); "
                          "use a smaller trainset_size, testset_size or seq_len (or in_dim), or a larger max_memory")
    return need
