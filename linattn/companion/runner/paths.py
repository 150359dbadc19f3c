"""Where the companion reads and writes: the figure sources, and everything a build makes under ``_build``.

linattn runs either from a checkout of the repository (``pip install -e .``, or straight from the source tree) or
from an installed copy (``pip install .``, a wheel). :data:`IS_CHECKOUT` tells them apart: the package's parent holds
``pyproject.toml`` and ``figures_src/``.

In a checkout everything lives in the repository::

    figures_src/<name>.md             the figure notebooks
    _build/figures/<preset>/<name>/   a figure's files        _build/html, _build/quick/html   the books
    _build/runs/                      the run store

An installed copy reads the notebooks that travel inside it (``linattn/figures_src/``, the same files) and writes
the same layout under the current working directory (``./_build/figures/<preset>``, ``./_build/runs``), never into
site-packages. The book needs a checkout (its pages, ``_config.yml`` and ``_toc.yml`` are not installed).
"""

from __future__ import annotations

import contextlib
import os
import sysconfig
import tempfile
import time
from pathlib import Path

from ...records import PACKAGE_ROOT

REPO_ROOT = PACKAGE_ROOT.parent
IS_CHECKOUT = (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "figures_src").is_dir()
# the notebooks: a checkout's own figures_src/ first, else the copy installed with the package (package data)
SRC_DIR = REPO_ROOT / "figures_src" if IS_CHECKOUT else PACKAGE_ROOT / "figures_src"
ENV_RUNS_DIR = "LINATTN_RUNS_DIR"  # moves the run store
ENV_FIGURE = "LINATTN_FIGURE"  # set by the figure runner for each notebook: the run store logs which figure asked
ENV_RETRAIN = "LINATTN_RETRAIN"  # a token: the run store retrains each run asked for once under it (--retrain)
CHECKOUT_NEEDED = ("building the book needs a checkout of the repository (git clone it, then `make book`); "
                   "this linattn is an installed copy")


def _build_dir() -> Path:
    """``_build`` of the checkout, or ``./_build`` (of the working directory, at call time) for an installed copy."""
    return REPO_ROOT / "_build" if IS_CHECKOUT else Path.cwd() / "_build"


def runs_dir() -> Path:
    """The run store's default root: ``<build_dir>/runs`` (``$LINATTN_RUNS_DIR`` overrides it, see the run store)."""
    return _build_dir() / "runs"


def run_store_dir() -> Path:
    """The run store's root as an absolute path: ``$LINATTN_RUNS_DIR`` (a relative one taken from the current
    folder, where the command ran), else :func:`runs_dir`. The figure runner resolves it before its kernels start,
    since they run in the output folder."""
    return Path(os.environ.get(ENV_RUNS_DIR) or runs_dir()).expanduser().absolute()


@contextlib.contextmanager
def environment(values: dict):
    """Within the block the process environment holds ``values`` (what starts inside inherits them); afterwards each
    variable is as it was before (removed where it was unset)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def retraining(on: bool):
    """With ``on``, set :data:`ENV_RETRAIN` to a token of this call (process and time) for what starts inside (the
    figure runner's workers and kernels inherit it): the run store then trains every run asked for again, once.
    The variable is restored afterwards. Without ``on``, nothing changes."""
    return environment({ENV_RETRAIN: f"{os.getpid()}-{time.time_ns()}"}) if on else contextlib.nullcontext()


class UnusableFolder(ValueError):
    """A folder the command needs (the run store) cannot be used: one sentence saying why."""


def preset_root(preset: str) -> Path:
    """Where ``linattn figures --preset <preset>`` writes, and where the book of that preset reads from."""
    return _build_dir() / "figures" / preset


def _install_dirs() -> list[Path]:
    """The folders packages are installed into (site-packages of this interpreter, and of the user scheme)."""
    found = set()
    for key in ("purelib", "platlib"):
        for scheme in (None, f"{os.name}_user"):
            try:
                path = sysconfig.get_paths(scheme)[key] if scheme else sysconfig.get_paths()[key]
            except KeyError:
                continue
            found.add(Path(path).resolve())
    return sorted(found)


def unusable_output_dir(path) -> str | None:
    """Why ``path`` cannot be an output folder (one sentence), or None when it can: an existing folder that takes
    a new file, or a missing one whose first existing parent is a folder that takes a new folder. Folders of
    installed packages (site-packages) are refused: a reinstall would delete the outputs. The check writes a probe
    and removes it at once, so it leaves nothing behind; it does not create ``path``."""
    path = Path(path).expanduser().absolute()
    resolved = path.resolve()
    for lib in _install_dirs():
        if resolved == lib or lib in resolved.parents:
            return f"{path} is inside the installed packages ({lib}); choose a folder of your own"
    if not IS_CHECKOUT and (resolved == PACKAGE_ROOT or PACKAGE_ROOT in resolved.parents):
        return f"{path} is inside the installed linattn package; choose a folder of your own"
    if {"site-packages", "dist-packages"} & set(resolved.parts):
        return f"{path} is inside a site-packages folder; choose a folder of your own"
    probe_in = resolved
    while not probe_in.exists():
        if probe_in.parent == probe_in:
            return f"{path} cannot be created (no part of it exists)"
        probe_in = probe_in.parent
    if not probe_in.is_dir():
        where = "is a file" if probe_in == resolved else f"lies under {probe_in}, which is a file"
        return f"{path} {where}, not a folder"
    try:  # the only reliable test (root passes os.access checks; /proc refuses new entries anyway)
        if probe_in == resolved:
            fd, probe = tempfile.mkstemp(dir=probe_in, prefix=".linattn-probe-")
            os.close(fd)
            os.unlink(probe)
        else:
            os.rmdir(tempfile.mkdtemp(dir=probe_in, prefix=".linattn-probe-"))
    except OSError as e:
        what = "is not writable" if probe_in == resolved else f"cannot be created in {probe_in}"
        return f"{path} {what} ({e.strerror or e})"
    return None

