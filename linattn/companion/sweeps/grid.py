"""A sweep's grid: fixed settings (a :class:`~linattn.config.RunConfig`) and, for each swept setting, its values.

The cells are the Cartesian product of the swept values, in the order the settings were given (that order is the
order of the dataset's dimensions). Every cell is validated before anything runs: :meth:`Grid.validate` raises one
:class:`~linattn.errors.ConfigError` naming the setting as written in Python and the cell it came from.

    grid = Grid(RunConfig(model="attnS", head_num=5), {"seed": range(6), "init": [0.005, 0.01, 0.02]})
    grid.validate()
    [cell.label for cell in grid.cells()]   # "seed=0, init=0.005", …
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

import numpy as np

from ...config import ConfigError, RunConfig
from ...training.plan import plan

# what a grid value may be (one setting of one run); spectra and covariance matrices are fixed settings only
_SCALARS = (bool, int, float, str, np.bool_, np.integer, np.floating)


@dataclass(frozen=True)
class Cell:
    """One run of a sweep: its position in the grid (``index``, one integer per swept setting), the swept values
    (``values``, by setting) and the run's full settings (``config``)."""

    index: tuple[int, ...]
    values: dict
    config: RunConfig

    @property
    def label(self) -> str:
        """``seed=0, init=0.005``: the swept settings of this cell, as Python keywords."""
        return ", ".join(f"{k}={_show(v)}" for k, v in self.values.items())


def _show(value) -> str:
    return "inf" if value is None else repr(value) if isinstance(value, str) else f"{value:g}" if isinstance(
        value, float) else str(value)


def _plain(value):
    """A grid value as a plain Python value (numpy scalars become int/float/bool; an infinite training set None)."""
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        value = float(value)
    if isinstance(value, float) and math.isinf(value) and value > 0:
        return None  # trainset_size=inf: RunConfig's None
    return value


class Grid:
    """Fixed settings ``base`` and swept settings ``axes`` ({RunConfig field: values}).

    Raises ConfigError (a ValueError) on construction for a key that is not a RunConfig field, a value list that is
    empty, has repeats or holds something other than numbers, strings, booleans or None; :meth:`validate` checks
    the runs themselves.
    """

    def __init__(self, base: RunConfig, axes: dict):
        if not isinstance(base, RunConfig):
            raise ConfigError(f"base_config must be a linattn.RunConfig, got {type(base).__name__}")
        if not isinstance(axes, dict) or not axes:
            raise ConfigError("grid must be a non-empty dict {setting: [values]}, e.g. {'seed': range(6)}")
        fields = RunConfig.field_names()
        self.base = base
        self.axes: dict[str, tuple] = {}
        for key, values in axes.items():
            if key not in fields or key in ("cov_matrix", "spectrum"):
                known = ", ".join(f for f in fields if f not in ("cov_matrix", "spectrum"))
                raise ConfigError(f"grid: {key!r} is not a setting that can be swept (a RunConfig field: {known})")
            if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
                raise ConfigError(f"grid[{key!r}] must be a list of values, got {values!r}")
            values = tuple(_plain(v) for v in values)
            if not values:
                raise ConfigError(f"grid[{key!r}] has no values")
            bad = next((v for v in values if v is not None and not isinstance(v, _SCALARS)), None)
            if bad is not None:
                raise ConfigError(f"grid[{key!r}]: {bad!r} is not a number, a string or a boolean")
            if len(set(values)) != len(values):
                repeated = next(v for v in values if values.count(v) > 1)
                raise ConfigError(f"grid[{key!r}] lists {_show(repeated)} more than once")
            self.axes[key] = values

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(self.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.axes.values())

    def __len__(self) -> int:
        return math.prod(self.shape)

    def cells(self) -> list[Cell]:
        """Every cell, the last setting varying fastest."""
        out = []
        for index in itertools.product(*(range(n) for n in self.shape)):
            values = {k: self.axes[k][i] for k, i in zip(self.axes, index)}
            out.append(Cell(index, values, dataclasses.replace(self.base, **values)))
        return out

    def validate(self, *, max_memory=None) -> list[Cell]:
        """The cells, once the run of every one has been checked (:func:`linattn.training.plan.plan`: its settings,
        the reference's draws and its memory); else ConfigError ``cell seed=3, init=-1.0: init must be …`` for the
        first cell that fails (its ``field`` the setting)."""
        cells = self.cells()
        for cell in cells:
            try:
                plan(cell.config, max_memory=max_memory)
            except ConfigError as e:
                raise ConfigError(f"cell {cell.label}: {e.template}", field=e.field, value=e.value) from None
        return cells

    def coordinates(self) -> dict[str, np.ndarray]:
        """Each swept setting's values as an array for the dataset's coordinates (an infinite training set as inf)."""
        return {k: np.array([np.inf if v is None else v for v in vals]) for k, vals in self.axes.items()}

    def to_spec(self) -> dict:
        """The grid as JSON-ready data (``sweep.json``): the fixed settings and the swept values."""
        return {"settings": self.base.to_dict(), "grid": {k: list(v) for k, v in self.axes.items()}}

    @classmethod
    def from_spec(cls, spec: dict) -> "Grid":
        """The inverse of :meth:`to_spec`."""
        return cls(RunConfig.from_dict(spec["settings"]), spec["grid"])
