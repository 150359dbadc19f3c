"""One training run's settings, with the reference's names and defaults, and their validation.

The CLI (``linattn train``), the figure notebooks and the Python API all go through :class:`RunConfig`;
:meth:`RunConfig.validate` raises :class:`ConfigError` with one clear sentence for any invalid setting.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import InitVar, asdict, dataclass, field, fields


from . import objectives
from ._compat import warn_renamed
from .data import check_covariance, check_spectrum
from .models import INIT_SCHEME_ALIASES, INIT_SCHEMES, MODELS
from .normalization import NORMALIZATIONS  # noqa: F401  (re-exported: the CLI's --normalize choices)

DYNAMICS = ("gd", "flow")
DTYPES = ("float64", "float32")
DRAWS = ("reference", "streams")


class ConfigError(ValueError):
    """An invalid setting; the message names it and says what is allowed."""


@dataclass
class RunConfig:
    """The settings of one run: the fields are the flags of ``linattn train`` (``linattn train --help`` says what
    each means), with the reference's names and defaults, then linattn's own. ``trainset_size=None`` is the CLI's
    ``inf`` (the population objective). Nothing is checked on construction; :meth:`validate` checks everything
    and :func:`~linattn.experiment.run` calls it first.
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
    out_dim: InitVar[int | None] = None  # deprecated: the paper's models predict a scalar, so it was always 1

    def __post_init__(self, out_dim):
        if out_dim is not None:
            warn_renamed("RunConfig(out_dim=…)", "nothing (the output is a scalar; the field is gone)")
            if out_dim != 1:
                raise ConfigError(f"out_dim must be 1 (the paper's models predict a scalar), got {out_dim}")
        if self.init_scheme in INIT_SCHEME_ALIASES:
            era = INIT_SCHEME_ALIASES[self.init_scheme]
            warnings.warn(f"init_scheme={self.init_scheme!r} is deprecated and will be removed in the next release; "
                          f"use {era!r} (the same initialisation)", FutureWarning, stacklevel=3)
            self.init_scheme = era

    @property
    def N(self) -> int:
        """Context pairs before the query."""
        return self.seq_len - 1

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The settings, in order (every field; the deprecated ``out_dim`` is not one)."""
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
        unknown = sorted(set(d) - set(cls.field_names()) - {"out_dim"})
        if unknown:
            raise ConfigError(f"unknown settings {', '.join(unknown)} (from another linattn version?)")
        d = dict(d)
        if d.get("out_dim", 1) == 1:
            d.pop("out_dim", None)  # written by earlier linattn versions
        if d.get("trainset_size") == "inf":
            d["trainset_size"] = None
        if d.get("spectrum") is not None:
            d["spectrum"] = tuple(d["spectrum"])
        return cls(**d)

    def validate(self) -> "RunConfig":
        """``self`` if every setting is valid and they fit together, else :class:`ConfigError` naming the first
        problem in one sentence (with the CLI's flag names). Also refuses an unavailable CUDA ``device``."""

        def bad(msg):
            raise ConfigError(msg)

        if self.population_samples < 0:
            bad(f"--population_samples must be >= 0 (0: exact moments), got {self.population_samples}")
        for name in ("head_num", "in_dim", "epoch", "chunk"):
            if getattr(self, name) <= 0:
                bad(f"--{name} must be a positive integer, got {getattr(self, name)}")
        if self.trainset_size is not None and self.trainset_size <= 0:
            bad(f"--trainset_size must be a positive integer or 'inf', got {self.trainset_size}")
        if self.testset_size < 0:
            bad(f"--testset_size must be >= 0, got {self.testset_size}")
        # the drawn sets are centred across their sequences (the reference's recipe): one sequence becomes all zeros
        for name in ("trainset_size", "testset_size"):
            if getattr(self, name) == 1:
                bad(f"--{name} 1 is refused: the inputs are centred across the sequences of a set, which sets every "
                    "input of a single sequence to zero; use at least 2")
        if not 0 <= self.seed < 2**32:
            bad(f"--seed must be an integer in [0, 2^32), got {self.seed}")
        if self.seq_len < 2:
            bad(f"--seq_len must be at least 2 (one context pair and the query), got {self.seq_len}")
        if not 1 <= self.rank <= self.in_dim:
            bad(f"--rank must be between 1 and --in_dim = {self.in_dim}, got {self.rank}")
        if not (0.0 <= self.icl <= 1.0):
            bad(f"--icl must lie in [0, 1], got {self.icl}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            bad(f"--lr must be a positive number, got {self.lr}")
        if not (self.init > 0 and math.isfinite(self.init)):
            bad(f"--init must be a positive number, got {self.init}")
        if self.model not in MODELS:
            bad(f"--model must be one of {', '.join(MODELS)}, got {self.model!r}")
        if self.model == "mlp" and not self.cubic_feat:
            bad("--model mlp needs --cubic_feat (the MLP acts on the cubic feature)")
        if self.cubic_feat and self.model != "mlp":
            bad("--cubic_feat only applies to --model mlp")
        if self.softmax and self.model == "mlp":
            bad("--softmax applies to the attention models, not to --model mlp")
        if self.init_scheme not in INIT_SCHEMES:
            bad(f"--init_scheme must be one of {', '.join(INIT_SCHEMES)}, got {self.init_scheme!r}")
        if self.draws not in DRAWS:
            bad(f"--draws must be one of {', '.join(DRAWS)}, got {self.draws!r}")
        if self.draws == "reference":
            self._check_reference_draws(bad)
        if self.normalize not in NORMALIZATIONS:
            bad(f"--normalize must be one of {', '.join(NORMALIZATIONS)}, got {self.normalize!r}")
        if self.dynamics not in DYNAMICS:
            bad(f"--dynamics must be one of {', '.join(DYNAMICS)}, got {self.dynamics!r}")
        if self.engine not in objectives.engine_choices():
            bad(f"--engine must be one of {', '.join(objectives.engine_choices())}, got {self.engine!r}")
        if self.dtype not in DTYPES:
            bad(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.device not in ("auto", "cpu") and not re.fullmatch(r"cuda(:\d+)?", self.device):
            bad(f"--device must be auto, cpu or cuda[:k], got {self.device!r}")
        if self.device.startswith("cuda"):
            import torch

            index = int(self.device.partition(":")[2] or 0)
            if not torch.cuda.is_available():
                bad(f"--device {self.device}: torch {torch.__version__} sees no CUDA device here; use --device cpu "
                    "or auto")
            if index >= torch.cuda.device_count():
                bad(f"--device {self.device}: torch sees {torch.cuda.device_count()} CUDA device(s), numbered from 0")
        if (reason := objectives.refusal(self)) is not None:
            bad(reason)
        if self.spectrum is not None:
            if self.white_cov:
                bad("--white_cov and --spectrum are mutually exclusive")
            try:
                check_spectrum(self.spectrum, self.in_dim)
            except ValueError as e:
                bad(f"--{e}")
        if self.cov_matrix is not None:
            try:
                check_covariance(self.cov_matrix, self.in_dim)
            except ValueError as e:
                bad(str(e))
        return self

    def _check_reference_draws(self, bad) -> None:
        """Options the reference never had have no reference draws: refuse them (``--draws streams`` has them)."""
        never = [("--spectrum", self.spectrum is not None), ("--cov_matrix", self.cov_matrix is not None),
                 ("--trainset_size inf", self.trainset_size is None), ("--normalize mean", self.normalize == "mean"),
                 ("--population_samples", self.population_samples > 0)]
        for flag, given in never:
            if given:
                bad(f"{flag} has no reference draws (the authors' code has no such option); add --draws streams")
        if self.init_scheme == "dec2024" and self.icl != 1.0:
            bad("--init_scheme dec2024 with --draws reference needs --icl 1 (the Dec 2024 code had no --icl flag)")
