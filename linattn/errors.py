"""The errors of bad settings, and the checks of single settings that raise them.

:class:`ConfigError` is an invalid setting, found before any work; :func:`named` marks a setting in its message so
that each reader words it its own way (Python: ``lr``; ``linattn train``: ``--lr``). The checks (:func:`check_int`,
:func:`check_positive`, :func:`check_choice`) are shared by ``RunConfig.validate``, ``weights.init_weights`` and the
data's own checks (one rule, not two copies).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# Checks of single settings, shared by ``RunConfig.validate`` and ``models.init_weights`` (one rule, not two copies).
# Each returns the value when it is valid and otherwise raises one ConfigError about the setting ``name``.

_OPEN, _SEP, _CLOSE = "\x02", "\x1f", "\x03"  # around a setting named in a message: never typed in text
ALONE = object()  # named(name): the setting alone, no value


def named(name: str, value: Any = ALONE) -> str:
    """A setting named in a :class:`ConfigError` message, with a value (``named("model", "mlp")``) or alone
    (``named("lr")``): each reader of the message words it its own way (:meth:`ConfigError.words`)."""
    return f"{_OPEN}{name}{_CLOSE}" if value is ALONE else f"{_OPEN}{name}{_SEP}{json.dumps(value)}{_CLOSE}"


def python_words(name: str, value: Any = ALONE) -> str:
    """A setting as Python writes it: ``lr``, ``model="mlp"``, ``cubic_feat=True``, ``trainset_size=None``."""
    if value is ALONE:
        return name
    return f"{name}={json.dumps(value) if isinstance(value, str) else repr(value)}"


class ConfigError(ValueError):
    """An invalid setting, before any work: ``field`` names the setting it is about (None: several at once),
    ``value`` is the value given. ``str(error)`` names settings as Python does (``lr must be a number, got 'fast'``);
    ``words()`` names them another way (``linattn train`` says ``--lr``). ``template`` is the message with the
    settings marked (``named()``), to compose a longer message from."""

    def __init__(self, template: str, *, field: str | None = None, value=None):
        self.template, self.field, self.value = template, field, value
        super().__init__(self.words(python_words))

    def words(self, word: Callable[..., str]) -> str:
        """The message with each setting it names written by ``word(name)`` or ``word(name, value)``."""
        parts = self.template.split(_OPEN)
        out = [parts[0]]
        for part in parts[1:]:
            ref, _, rest = part.partition(_CLOSE)
            name, sep, value = ref.partition(_SEP)
            out.append((word(name, json.loads(value)) if sep else word(name)) + rest)
        return "".join(out)


def is_int(value: Any) -> bool:
    """An integer (Python or numpy), and not a bool: True is not a size."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    """A real number (int or float, Python or numpy), and not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def check_int(name: str, value: Any, *, low: int = 1, high: int | None = None, what: str = "a positive integer") -> int:
    """``value`` if it is an integer with low <= value (< high when given), else ConfigError
    ``"<name> must be <what>, got <value>"``."""
    if not is_int(value) or value < low or (high is not None and value >= high):
        raise ConfigError(f"{named(name)} must be {what}, got {value!r}", field=name, value=value)
    return int(value)


def check_positive(name: str, value: Any) -> float:
    """``value`` if it is a finite number > 0, else ConfigError naming ``name``."""
    if not is_number(value) or not (value > 0 and np.isfinite(value)):
        raise ConfigError(f"{named(name)} must be a positive finite number, got {value!r}", field=name, value=value)
    return float(value)


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` if it is one of the strings ``choices``, else ConfigError naming ``name`` and listing them."""
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{named(name)} must be one of {', '.join(map(repr, choices))}, got {value!r}", field=name,
                          value=value)
    return value
