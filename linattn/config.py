"""One training run's settings, each declared once, and their validation.

Every field of :class:`RunConfig` carries its ``Setting`` (field metadata): its type, default, allowed values
or range, what it means, the paper's symbol and its ``linattn train`` flag (with the reference's alias). Validation
(:meth:`RunConfig.validate`), the flags and ``--help`` of ``linattn train`` and ``linattn sweep``, and the figures'
knob help (``linattn.companion.presets.knob_help``, hence the notebooks' parameters cells) are all read from
``SETTINGS``.

:meth:`RunConfig.validate` raises :class:`~linattn.errors.ConfigError` with one sentence for any invalid setting;
``error.field`` names the setting, and the message names it as Python writes it (``head_num must be a positive
integer, got 0``) or, through :meth:`ConfigError.words`, as another caller does (``linattn train`` says ``--head_num``).
:func:`~linattn.training.memory.memory_estimate` and :func:`~linattn.training.memory.check_memory` (in
:mod:`linattn.training.memory`, re-exported here) refuse a run whose data cannot fit before it starts.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Callable, cast

import numpy as np
from numpy.typing import ArrayLike

from . import objectives
from .data import check_covariance, check_spectrum
from .errors import ConfigError, check_choice, check_int, check_positive, is_int, is_number, named
from .normalization import NORMALIZATIONS
from .weights import INIT_SCHEMES, MODELS, check_weight_settings

DYNAMICS = ("gd", "flow")
DTYPES = ("float64", "float32")
DRAWS = ("reference", "streams")
FLOW_RTOL = 1e-8  # the flow integrator's default relative tolerance


@dataclass(frozen=True)
class Setting:
    """One setting of a run, declared once beside its :class:`RunConfig` field.

    ``kind``: the type :meth:`RunConfig.validate` requires — ``int``, ``size`` (an int, or None for the population
    objective), ``number``, ``bool``, ``str``, ``numbers`` (a sequence of numbers or None), ``matrix`` (None or a
    matrix) or ``record`` (None, an int or a sequence of ints); a bool is no int or number here (True is no size).
    ``choices``: the allowed strings (a callable where
    they are registered elsewhere, e.g. the engines). ``check``: the rule for one valid-typed value,
    ``check(name, value)``, raising ConfigError; the range of an integer is ``low``, ``high`` and its wording
    ``what`` (:func:`~linattn.errors.check_int`). The settings that shape the initial weights (model, head_num, in_dim,
    rank, init, init_scheme) are checked by ``weights.check_weight_settings``, the rule ``init_weights`` shares; rules
    across settings are in :meth:`RunConfig.validate`. ``help`` says what the setting means, with ``symbol`` the
    paper's name for it; ``flags`` are its ``linattn train`` flags, the first its name and the others the
    reference's aliases (none: not a flag); ``reference``: one of the reference's flags, with its name and default.
    """

    kind: str
    help: str
    symbol: str | None = None
    flags: tuple[str, ...] = ()
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None
    low: int | None = None
    high: int | None = None
    what: str | None = None
    check: Callable | None = None
    reference: bool = False
    name: str = ""
    default: object = None

    def allowed(self) -> tuple[str, ...] | None:
        """The allowed values of a string setting (None: any)."""
        return self.choices() if callable(self.choices) else self.choices

    def describe(self) -> str:
        """What the setting means, after the paper's symbol: ``"H, the number of heads"``."""
        return f"{self.symbol}, {self.help}" if self.symbol else self.help

    def check_type(self, value: Any) -> None:
        """ConfigError unless ``value`` has this setting's type."""
        ok, wanted = _KINDS[self.kind]
        if not ok(value):
            raise ConfigError(f"{named(self.name)} must be {wanted}, got {value!r}", field=self.name, value=value)

    def check_value(self, value: Any) -> None:
        """ConfigError unless ``value`` (of the right type) is allowed: its range, choices and rule."""
        if self.low is not None and value is not None:
            check_int(self.name, value, low=self.low, high=self.high, what=self.what or "a positive integer")
        if self.choices is not None:
            check_choice(self.name, value, cast(tuple, self.allowed()))  # not None: choices are set
        if self.check is not None:
            self.check(self.name, value)


_KINDS = {
    "int": (is_int, "an integer"),
    "size": (lambda v: v is None or is_int(v), "an integer, or None (or float('inf')) for the population objective"),
    "number": (is_number, "a number"),
    "bool": (lambda v: isinstance(v, (bool, np.bool_)), "True or False"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "numbers": (lambda v: True, "a sequence of numbers"),  # checked with in_dim (validate)
    "matrix": (lambda v: True, "a matrix"),
    "record": (lambda v: v is None or is_int(v) or (isinstance(v, (tuple, list)) and all(is_int(k) for k in v)),
               "None (every step), a number of steps per decade, or a sequence of integer steps"),
}


def _setting(default, kind: str, help: str, **declared):
    """A RunConfig field with its ``Setting``."""
    return field(default=default, repr=kind != "matrix", metadata={"setting": Setting(kind, help, **declared)})


def _within_0_1(name, value):
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{named(name)} must lie in [0, 1], got {value}", field=name, value=value)


def _device(name, value):
    if value not in ("auto", "cpu") and not re.fullmatch(r"cuda(:\d+)?", value):
        raise ConfigError(f"{named(name)} must be 'auto', 'cpu' or 'cuda[:k]', got {value!r}", field=name, value=value)
    if value.startswith("cuda"):
        import torch

        index = int(value.partition(":")[2] or 0)
        if not torch.cuda.is_available():
            raise ConfigError(f"{named(name, value)}: torch {torch.__version__} sees no CUDA device here; use "
                              f"{named(name, 'cpu')} or {named(name, 'auto')}", field=name, value=value)
        if index >= torch.cuda.device_count():
            raise ConfigError(f"{named(name, value)}: torch sees {torch.cuda.device_count()} CUDA device(s), numbered "
                              "from 0", field=name, value=value)


def _record(name, value):
    if is_int(value) and value < 1:
        raise ConfigError(f"{named(name)} as a number of steps per decade must be >= 1, got {value}", field=name,
                          value=value)
    if isinstance(value, (tuple, list)) and (len(value) == 0 or value[0] < 0 or
                                             any(b <= a for a, b in zip(value, value[1:]))):
        raise ConfigError(f"{named(name)} as steps must be a non-empty, strictly increasing sequence of steps >= 0, "
                          f"got {value!r}", field=name, value=value)


def log_steps(epoch: int, per_decade: int) -> np.ndarray:
    """0, the steps round(10^(j/``per_decade``)) for j = 0, 1, … below ``epoch``, and ``epoch``: a grid even on a
    log axis whose steps do not depend on ``epoch`` (a longer run records the shorter one's, and more)."""
    top = int(np.floor(per_decade * np.log10(max(epoch, 1)) + 1e-9))
    grid = np.round(10.0 ** (np.arange(top + 1) / per_decade)).astype(np.int64)
    return np.unique(np.concatenate([[0], grid[grid < epoch], [epoch]])).astype(np.int64)


@dataclass
class RunConfig:
    """The settings of one run, with the reference's names and defaults, then linattn's own; each field's
    ``Setting`` (``SETTINGS``) says what it means and what it may be (``linattn train --help`` lists them).
    ``trainset_size=None`` is the CLI's ``inf`` (the population objective); ``trainset_size=float("inf")`` is
    turned into None on construction. Nothing else is checked on construction: :meth:`validate` checks everything,
    and :func:`linattn.training.plan.plan` (which :func:`~linattn.training.experiment.run` calls) calls it.
    """

    # the reference's flags, same names and defaults
    model: str = _setting("attnM", "str", "attnM (ATTN_M, merged key-query), attnS (ATTN_S, separate key and query "
                          "of rank R) or mlp (the MLP on the cubic feature)", flags=("--model",), choices=MODELS,
                          reference=True)
    head_num: int = _setting(1, "int", "the number of heads", symbol="H", flags=("--head_num", "--head"),
                             reference=True)
    rank: int = _setting(1, "int", "the key-query rank of every ATTN_S head, 1 to D", symbol="R",
                         flags=("--rank", "--KQ_dim"), reference=True)
    in_dim: int = _setting(4, "int", "the input dimension", symbol="D", flags=("--in_dim",), reference=True)
    seq_len: int = _setting(32, "int", "tokens per sequence, the query included", symbol="N + 1",
                            flags=("--seq_len",), low=2, what="at least 2 (one context pair and the query)",
                            reference=True)
    trainset_size: int | None = _setting(
        5000, "size", "training sequences (inf, or None in Python: the population loss)", symbol="P",
        flags=("--trainset_size",), low=1, what=f"a positive integer ({named('trainset_size', None)}: the population "
        "objective)", reference=True)
    testset_size: int = _setting(0, "int", "sequences in each test set, in-weight and in-context (0: none)",
                                 flags=("--testset_size",), low=0, what="an integer >= 0", reference=True)
    icl: float = _setting(1.0, "number", "fraction of sequences with a fresh task vector, in [0, 1] (the rest share "
                          "one fixed task)", symbol="c", flags=("--icl",), check=_within_0_1, reference=True)
    white_cov: bool = _setting(False, "bool", "white input covariance I/D instead of the default spectrum",
                               flags=("--white_cov",), reference=True)
    vary_len: bool = _setting(False, "bool", "average the loss over every prefix length of a sequence (outputs "
                              "divided by the prefix length)", flags=("--vary_len",), reference=True)
    cubic_feat: bool = _setting(False, "bool", "feed the MLP the cubic feature (with model mlp)",
                                flags=("--cubic_feat",), reference=True)
    softmax: bool = _setting(False, "bool", "softmax attention in place of linear attention", flags=("--softmax",),
                             reference=True)
    init: float = _setting(0.01, "number", "initialisation scale", flags=("--init",), reference=True)
    lr: float = _setting(1e-3, "number", "learning rate", flags=("--lr",), check=check_positive,
                         reference=True)
    epoch: int = _setting(6001, "int", "steps of full-batch gradient descent", flags=("--epoch",), low=1,
                          reference=True)
    seed: int = _setting(10, "int", "seed of every random draw (data and initial weights)", flags=("--seed",), low=0,
                         high=2**32, what="an integer in [0, 2^32)", reference=True)
    track_value: bool = _setting(False, "bool", "record the value weight of every head at every step",
                                 flags=("--track_value",), reference=True)
    # ours
    spectrum: tuple[float, ...] | None = _setting(
        None, "numbers", "eigenvalues of the input covariance, in any order (rotated randomly, not rescaled; "
        "comma-separated on the command line)", flags=("--spectrum",))
    cov_matrix: list | None = _setting(None, "matrix", "the input covariance itself, a D×D symmetric positive "
                                       "definite matrix (used as given)")
    init_scheme: str = _setting("dec2025", "str", "the reference's initialisation era: dec2024 (published Figures 1b "
                                "and 3a-3c), jan2025 (Figure 4), dec2025 (the authors' current code)",
                                flags=("--init_scheme",), choices=INIT_SCHEMES)
    draws: str = _setting("reference", "str", "reference: the authors' random numbers for this seed (the same "
                          "command gives the same data, weights and losses); streams: linattn's independent streams, "
                          "one per purpose (changing P or the test sets leaves the initial weights unchanged)",
                          flags=("--draws",), choices=DRAWS)
    normalize: str = _setting("sum", "str", "sum: the reference's Σ over tokens; mean: the paper's 1/N",
                              flags=("--normalize",), choices=NORMALIZATIONS)
    engine: str = _setting("auto", "str", "auto: exact for the linear models, population for an infinite training "
                           "set, softmax for softmax attention; autograd: the model's forward pass on every sequence "
                           "(any model)", flags=("--engine",), choices=objectives.engine_choices)
    dynamics: str = _setting("gd", "str", "gd: full-batch gradient descent; flow: gradient flow (scipy solve_ivp) "
                             "at t/τ = 2·lr·step", flags=("--dynamics",), choices=DYNAMICS)
    record: int | tuple[int, ...] | None = _setting(
        None, "record", "the steps whose losses are recorded: None, every step 0 … epoch−1; n > 0, n per decade, "
        "round(10^(j/n)) for j = 0, 1, … below epoch, with step 0 and the end, epoch; or the increasing steps "
        "themselves, in [0, epoch]. Other than None only with dynamics=flow (gradient descent records every step)",
        check=_record)
    flow_rtol: float = _setting(
        FLOW_RTOL, "number", "the relative tolerance of the gradient flow's integrator (scipy solve_ivp's rtol; LSODA "
        "with the loss's Hessian on the exact and population engines); other than its default only with dynamics=flow",
        check=check_positive)
    dtype: str = _setting("float64", "str", "the precision of the training: float64 or float32", flags=("--dtype",),
                          choices=DTYPES)
    device: str = _setting("auto", "str", "auto: the CPU for the exact and population engines, CUDA when available "
                           "for autograd and softmax; cpu; or cuda[:k] (refused when torch sees no such device)",
                           flags=("--device",), check=_device)
    population_samples: int = _setting(0, "int", "0: exact population moments; N > 0: a Monte-Carlo estimate from N "
                                       "fresh sequences", flags=("--population_samples",), low=0,
                                       what="an integer >= 0 (0: exact moments)")
    chunk: int = _setting(4096, "int", "sequences per chunk (bounds memory)", flags=("--chunk",), low=1)

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

    def on_population(self, cov: ArrayLike) -> "RunConfig":
        """The same run on the population loss (P → ∞, the ``population`` engine) of inputs of covariance ``cov``
        (the run's own Λ, drawn or given, passed as ``cov_matrix``): no training or test sets, so nothing is drawn
        but what the run is given. Trained from the run's own initial weights, it is the theory's loss curve from the
        same start, every head included (the companion's ``runstore.predicted_drop_steps`` and
        ``runstore.population_twin``)."""
        return replace(self, trainset_size=None, testset_size=0, engine="population",
                       cov_matrix=np.asarray(cov, dtype=np.float64).tolist(), white_cov=False, spectrum=None,
                       population_samples=0)

    def recorded_steps(self) -> np.ndarray | None:
        """The steps the run records (``record``): None for every step 0 … epoch−1, else an increasing int64
        array (:func:`log_steps` for a number per decade)."""
        if self.record is None:
            return None
        if is_int(self.record):
            return log_steps(self.epoch, int(cast(int, self.record)))
        return np.asarray(self.record, dtype=np.int64)

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
        for name in ("spectrum", "record"):  # a JSON list back to the tuple it was
            if isinstance(d.get(name), list):
                d[name] = tuple(d[name])
        return cls(**d)

    def validate(self) -> "RunConfig":
        """``self`` if every setting has its type (``Setting.kind``), is allowed (its range, choices and
        rule) and they fit together; else :class:`~linattn.errors.ConfigError` about the first problem, in one
        sentence, with ``.field`` the setting. Also refuses an unavailable CUDA ``device``. Whether the reference's
        draws exist for the settings is asked where something is drawn (:meth:`reference_draws_refusal`).

        A run is checked once: it remembers that it passed (``validated``; a copy of it too, pickled or
        deep-copied), and is not checked again while none of its settings changes, nor the engines registered (at the
        boundary where its settings came in, e.g. the figure runner; then not in the kernel's run store)."""
        if not self.validated:
            self._check_all()
            self._passed = self._values()
        return self

    def _check_all(self) -> None:
        """:meth:`validate`'s checks: each setting's type, the weights' settings, each setting's value, the rules
        across settings."""
        for s in SETTINGS.values():
            s.check_type(getattr(self, s.name))
        check_weight_settings(model=self.model, head_num=self.head_num, in_dim=self.in_dim, rank=self.rank,
                              init=self.init, init_scheme=self.init_scheme)
        for s in SETTINGS.values():
            s.check_value(getattr(self, s.name))
        self._check_together()

    @property
    def validated(self) -> bool:
        """Whether :meth:`validate` passed on these very settings, checked against the same registries (none
        changed since: a setting, or the engines registered)."""
        return getattr(self, "_passed", None) == self._values()

    def _values(self) -> tuple:
        """Every setting's value (lists and arrays as tuples) and the registered choices they are checked against
        (the engines): what ``validated`` compares."""
        def frozen(value):
            if isinstance(value, np.ndarray):
                value = value.tolist()
            return tuple(frozen(v) for v in value) if isinstance(value, (list, tuple)) else value

        registered = tuple(s.allowed() for s in SETTINGS.values() if callable(s.choices))
        return tuple(frozen(getattr(self, name)) for name in self.field_names()) + (registered,)

    def replaced(self, **changes) -> "RunConfig":
        """``dataclasses.replace(self, **changes)``, still ``validated`` where ``self`` is and every change
        keeps a valid run valid by itself: ``track_value`` (which no rule across settings reads) or a longer
        ``epoch`` (the one rule that reads it, ``record``'s last step, only loosens), each checked alone (its type and
        range). Any other change gives a copy to validate."""
        out = replace(self, **changes)
        alone = all(k == "track_value" or (k == "epoch" and is_int(v) and v >= self.epoch) for k, v in changes.items())
        if self.validated and alone:
            for k, v in changes.items():
                SETTINGS[k].check_type(v)
                SETTINGS[k].check_value(v)
            out._passed = out._values()
        return out

    def _check_together(self) -> None:
        """The rules across settings."""
        def bad(message, field, value):
            raise ConfigError(message, field=field, value=value)

        # the drawn sets are centred across their sequences (the reference's recipe): one sequence becomes all zeros
        for name in ("trainset_size", "testset_size"):
            if getattr(self, name) == 1:
                bad(f"{named(name, 1)} is refused: the inputs are centred across the sequences of a set, which sets "
                    "every input of a single sequence to zero; use at least 2", name, 1)
        if self.model == "mlp" and not self.cubic_feat:
            bad(f"{named('model', 'mlp')} needs {named('cubic_feat', True)} (the MLP acts on the cubic feature)",
                "model", self.model)
        if self.cubic_feat and self.model != "mlp":
            bad(f"{named('cubic_feat', True)} only applies to {named('model', 'mlp')}", "cubic_feat", True)
        if self.softmax and self.model == "mlp":
            bad(f"{named('softmax', True)} applies to the attention models, not to {named('model', 'mlp')}",
                "softmax", True)
        if (reason := objectives.refusal(self)) is not None:
            bad(reason, "engine", self.engine)
        if self.record is not None:
            if self.dynamics != "flow":
                bad(f"{named('record')} other than None needs {named('dynamics', 'flow')} (gradient descent records "
                    "every step)", "record", self.record)
            if isinstance(self.record, (tuple, list)) and self.record[-1] > self.epoch:
                bad(f"{named('record')}: step {self.record[-1]} is after the run's end, {named('epoch')} = "
                    f"{self.epoch}", "record", self.record)
        if self.flow_rtol != FLOW_RTOL and self.dynamics != "flow":
            bad(f"{named('flow_rtol')} other than {FLOW_RTOL:g} needs {named('dynamics', 'flow')} (gradient "
                "descent has no integrator tolerance)", "flow_rtol", self.flow_rtol)
        if self.spectrum is not None:
            if self.white_cov:
                bad(f"{named('spectrum')} and {named('white_cov', True)} are mutually exclusive", "spectrum",
                    self.spectrum)
            check_spectrum(self.spectrum, self.in_dim)
        if self.cov_matrix is not None:
            try:
                check_covariance(self.cov_matrix, self.in_dim)
            except ValueError as e:
                bad(f"{named('cov_matrix')}: {e}", "cov_matrix", self.cov_matrix)

    def reference_draws_refusal(self, *, covariance_only: bool = False) -> str | None:
        """Why the reference's own random numbers (``draws="reference"``) cannot make what a run of these settings
        draws, or None: options the authors' code never had (``draws="streams"`` has them). ``covariance_only``:
        only Λ is drawn (a population run with given initial weights), which needs no draw with ``cov_matrix`` or
        ``white_cov``. :func:`~linattn.training.plan.plan` asks this where something is drawn (the message names the
        settings for :class:`~linattn.errors.ConfigError`)."""
        if covariance_only:
            drawn = self.cov_matrix is None and not self.white_cov
            never = [(named("spectrum"), drawn and self.spectrum is not None),
                     (named("trainset_size", None), drawn),
                     (f"{named('population_samples')} > 0", self.population_samples > 0)]
        else:
            never = [(named("spectrum"), self.spectrum is not None), (named("cov_matrix"), self.cov_matrix is not None),
                     (named("trainset_size", None), self.trainset_size is None),
                     (named("normalize", "mean"), self.normalize == "mean"),
                     (f"{named('population_samples')} > 0", self.population_samples > 0)]
        for option, given in never:
            if given:
                return f"{option} has no reference draws (the authors' code has no such option); add " \
                       f"{named('draws', 'streams')}"
        if not covariance_only and self.init_scheme == "dec2024" and self.icl != 1.0:
            return (f"{named('init_scheme', 'dec2024')} with {named('draws', 'reference')} needs {named('icl', 1)} "
                    f"(the Dec 2024 code had no {named('icl')} option); use another {named('init_scheme')}, or add "
                    f"{named('draws', 'streams')}")
        return None


#: Every setting of a run by field name, in the order of :class:`RunConfig`: the one declaration.
SETTINGS: dict[str, Setting] = {f.name: replace(f.metadata["setting"], name=f.name, default=f.default)
                                for f in fields(RunConfig)}
