"""The key of a run (:func:`run_key`): a hash of what decides its numbers — the settings, the given data and
weights, the numerical libraries and the code that computes a trajectory (:data:`TRAJECTORY_CODE`, without comments
and docstrings). The run store, sweeps and ``linattn train``'s default folder file runs under it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from .. import data as data_mod
from ..config import RunConfig
from ..records import PACKAGE_ROOT, library_versions

if TYPE_CHECKING:
    from ..data import Datasets, Sequences

#: The code that computes a trajectory, relative to the package: whole modules, or (after a colon) the top-level
#: definitions of one that decide a run. Diagnostics, theory, events, validation and the companion are not in it.
TRAJECTORY_CODE = ("data.py", "errors.py", "reference_draws.py", "normalization.py", "weights.py", "models.py",
                   "objectives/__init__.py", "objectives/declarations.py", "objectives/base.py", "objectives/exact.py",
                   "objectives/population.py", "objectives/softmax.py", "objectives/softmax_kernel.c",
                   "objectives/native.py", "objectives/exact_kernel.c", "objectives/autograd.py",
                   "training/train.py", "training/flow.py", "config.py:RunConfig.__post_init__,RunConfig.to_dict",
                   "training/plan.py:draw_checked,_data_arguments,_draw_data,population_datasets,_given_data,plan,Plan,"
                   "EVERYTHING",
                   "training/experiment.py:run,carry_out", "training/keys.py:run_key")
#: The libraries whose versions can change a trajectory's numbers.
NUMERICAL_LIBRARIES = ("torch", "numpy", "scipy")


def code_digest(source: str, names: Iterable[str] | None = None) -> str:
    """SHA-256 of Python ``source`` as the interpreter reads it: its syntax tree without docstrings (comments and
    layout never reach the tree), so only a change of code changes it. ``names``: only these top-level definitions
    (``"f"``, ``"Class"``, a method ``"Class.f"``, or an assignment's first target)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body and \
                isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) and \
                isinstance(node.body[0].value.value, str):
            node.body = node.body[1:] or [ast.Pass()]
    nodes = tree.body
    if names is not None:
        def named_nodes(body, prefix=""):
            for node in body:
                name = getattr(node, "name", None)
                if name is None and isinstance(node, ast.Assign):
                    target = node.targets[0]
                    name = cast(ast.Name, target.elts[0] if isinstance(target, ast.Tuple) else target).id
                if name is not None:
                    yield prefix + name, node
                if isinstance(node, ast.ClassDef):
                    yield from named_nodes(node.body, f"{node.name}.")
        found = dict(named_nodes(tree.body))
        missing = [n for n in names if n not in found]
        if missing:
            raise KeyError(f"no definition {', '.join(missing)} in the source")
        nodes = [found[n] for n in names]
    return hashlib.sha256("\n".join(ast.dump(n) for n in nodes).encode()).hexdigest()


@functools.cache
def trajectory_code_hash(package_root: Path | None = None) -> str:
    """One hash of :data:`TRAJECTORY_CODE` (each Python entry by :func:`code_digest`, the C kernel by its bytes) of the
    package at ``package_root`` (default: this one)."""
    root = Path(package_root) if package_root is not None else PACKAGE_ROOT
    h = hashlib.sha256()
    for entry in TRAJECTORY_CODE:
        path, _, names = entry.partition(":")
        source = (root / path).read_text(encoding="utf-8")
        digest = (code_digest(source, names.split(",") if names else None) if path.endswith(".py")
                  else hashlib.sha256(source.encode()).hexdigest())
        h.update(f"{entry}\0{digest}\0".encode())
    return h.hexdigest()


def _hash_arrays(h, arrays: dict) -> None:
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}\0".encode() + a.tobytes() + b"\0")


def run_key(cfg: RunConfig, *, length: bool = True, snapshot_every: int = 0, init: dict | None = None,
            data: Datasets | Sequences | tuple | None = None) -> str:
    """The address of the run of ``cfg`` (64 hex digits): a hash of what decides its numbers — the settings
    (``to_dict``), the snapshot interval, the arrays of initial weights or data given in place of drawn ones, the
    versions of ``NUMERICAL_LIBRARIES`` and the code that computes a trajectory (``trajectory_code_hash``).

    ``length=False`` leaves out what only says how much of a trajectory is recorded: ``track_value`` and, for
    gradient descent, ``epoch`` (a run of E steps is the first E steps of any longer one): the run store's key,
    one trajectory per key. A sweep's run folder and ``linattn train``'s default folder use the whole key."""
    settings = cfg.to_dict()
    if not length:
        settings.pop("track_value")
        if cfg.dynamics == "gd":
            settings.pop("epoch")
    h = hashlib.sha256(json.dumps({"settings": settings, "snapshot_every": snapshot_every,
                                   "code": trajectory_code_hash(),
                                   "libraries": library_versions(NUMERICAL_LIBRARIES)},
                                  sort_keys=True, default=str).encode())
    if init is not None:
        h.update(b"init\0")
        _hash_arrays(h, init)
    if data is not None:
        if isinstance(data, (tuple, list)) and len(data) == 2:
            data = data_mod.Sequences(*data)
        h.update(b"data\0")
        seqs = cast(data_mod.Sequences, data)  # a Datasets or, after the line above, a Sequences
        _hash_arrays(h, data.arrays() if isinstance(data, data_mod.Datasets) else {"X": seqs.X, "y": seqs.y})
    return h.hexdigest()
