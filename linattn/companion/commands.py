"""The ``linattn train`` command line of a run's settings, printed under every figure so a reader can re-run a curve."""

from __future__ import annotations

from ..config import RunConfig


def train_command(cfg: RunConfig) -> str:
    """``linattn train`` with every flag whose value differs from its default (flags are the settings' names)."""
    default, words = RunConfig(), ["linattn", "train"]
    for name in RunConfig.field_names():
        value = getattr(cfg, name)
        if name == "cov_matrix" or value == getattr(default, name):
            continue
        flag = f"--{name}"
        if isinstance(value, bool):
            words.append(flag)
        elif name == "trainset_size" and value is None:
            words += [flag, "inf"]
        elif isinstance(value, (tuple, list)):
            words += [flag, ",".join(f"{v:g}" for v in value)]
        else:
            words += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if cfg.cov_matrix is not None:
        words.append("# with a covariance matrix given in Python (cov_matrix), which the CLI does not take")
    return " ".join(words)
