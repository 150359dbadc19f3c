"""The declaration of what a figure trains.

A figure module's ``runs(S)`` returns ``{label: run}``: each run a :class:`linattn.config.RunConfig`, or a
:class:`FromRun` for a run that starts from another run of the same figure (its initial or final weights, or its
training set). It is the one declaration of the figure's runs: ``presets.check_overrides`` plans every run of it
before anything trains, and ``compute(S)`` trains it with :func:`.train.train`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from ....config import RunConfig

STARTS = ("initial", "final")


@dataclasses.dataclass(frozen=True)
class FromRun:
    """A run that starts from the run labelled ``source`` (declared before it): from that run's ``start`` weights
    ("initial" or "final"; None: its own draw), passed through ``convert`` where the model differs (e.g.
    ``linattn.mlp_from_attn_m``), and on the source's training set when ``same_data``."""

    config: RunConfig
    source: str
    start: str | None = "initial"
    convert: Callable | None = None
    same_data: bool = False

    def __post_init__(self):
        if self.start not in STARTS + (None,):
            raise ValueError(f"FromRun.start={self.start!r}: choose from {', '.join(STARTS)} or None")


def config_of(run) -> RunConfig:
    """The run settings of a declared run (a RunConfig, or a FromRun's ``config``)."""
    return run.config if isinstance(run, FromRun) else run


def configs(runs: dict) -> list[RunConfig]:
    """The RunConfig of every declared run, in declaration order."""
    return [config_of(r) for r in runs.values()]
