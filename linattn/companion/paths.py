"""Where the companion reads and writes: the checkout's figure sources, and everything a build makes under ``_build``.

    _build/figures/<preset>/<name>/   a figure's files        _build/html, _build/quick/html   the books
    _build/runs/                      the run store
"""

from __future__ import annotations

from pathlib import Path

from ..records import PACKAGE_ROOT

REPO_ROOT = PACKAGE_ROOT.parent
SRC_DIR = REPO_ROOT / "figures_src"
BUILD_DIR = REPO_ROOT / "_build"
RUNS_DIR = BUILD_DIR / "runs"
ENV_RUNS_DIR = "LINATTN_RUNS_DIR"  # moves the run store
ENV_FIGURE = "LINATTN_FIGURE"  # set by the figure runner for each notebook: the run store logs which figure asked


def preset_root(preset: str) -> Path:
    """Where ``linattn figures --preset <preset>`` writes, and where the book of that preset reads from."""
    return BUILD_DIR / "figures" / preset
