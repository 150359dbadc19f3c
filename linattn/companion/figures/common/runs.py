"""The declaration of what a figure trains.

A figure module's ``runs(S)`` returns ``{label: run}``: each run a :class:`linattn.config.RunConfig`, or a
:class:`FromRun` for a run that starts from another run of the same figure (its initial or final weights, or its
training set). It is the one declaration of the figure's runs: ``presets.prepare`` plans every run of it
before anything trains, and ``compute(S)`` trains it with :func:`.trainer.train`. The figure contract makes it a
:class:`Once` (built once per settings), which a build's kernel is given the runner's runs through.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
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


class Once:
    """A figure module's ``runs(S)``, built once for the settings it was last asked for: a page asks for its runs in
    ``compute`` (and some again in a helper), the runner for its checks; every call with equal settings gets the
    same runs (a new dict of them) without building them again. :meth:`give` hands it runs built elsewhere (the
    runner's, passed to the kernel as data). :func:`linattn.companion.figures.figure_contract.of_module` puts it in
    place of the module's ``runs``, so the module's own calls go through it."""

    def __init__(self, function: Callable):
        functools.update_wrapper(self, function)
        self.function = function
        self._settings: dict | None = None
        self._built: dict | None = None

    def __call__(self, S: dict) -> dict:
        if self._built is None or not _equal(S, self._settings):
            built = self.function(S)
            self.give(S, built)
            return dict(built)
        return dict(self._built)

    def give(self, S: dict, runs: dict) -> None:
        """Take ``runs`` as the runs of settings ``S`` (their own copy: a later change to ``S`` is a new request)."""
        self._settings, self._built = copy.deepcopy(S), dict(runs)


def _equal(a, b) -> bool:
    """Whether settings ``a`` and ``b`` are equal; settings holding arrays (a reader's own) count as different."""
    try:
        return bool(a == b)
    except (ValueError, TypeError):
        return False
