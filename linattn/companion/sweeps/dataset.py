"""A sweep's results as one labelled xarray Dataset, rebuilt from its run folders.

Dimensions: one per swept setting (coordinates: its values, in the grid's order), ``step`` for the curves,
``m`` for the saddles M_0 … M_D and ``direction`` for the drops 1 … D (D the largest ``in_dim`` of the grid; a
smaller D leaves the rest NaN). Variables::

    train_loss, test_iwl, test_icl   (…, step)       the curves of loss.csv (test curves when the runs have test sets)
    status, message                  (…)             done, diverged, failed or missing (not run yet); the error
    wall_time                        (…)             seconds of the run (run.json; a failed cell: until it failed)
    final_train_loss, final_test_iwl, final_test_icl (…)
    directions_learned, first_drop_step             (…)
    drop_step                        (…, direction)  step of drop d: the loss first below the midpoint of
                                                     L(M_{d-1}) and L(M_d) (NaN: not reached)
    plateau_level, theory_level      (…, m)          the plateau found at M_m and the theory's L(M_m)

(the per-run summaries are those of ``linattn.companion.sweeps.cells.summarise``). A step a run did not reach, or a
cell that has no finished run, is NaN. The attributes hold the fixed settings and the grid as JSON.

Saved as NetCDF-4 (HDF5, through h5netcdf): one self-describing file that ``xarray.open_dataset`` reads and any
netCDF tool opens, which keeps 64-bit integers and variable-length text such as the error messages (the netCDF-3
writer that comes with scipy has neither). A sweep's dataset is written once, at the end, from the run folders, so
Zarr's chunked parallel writes would buy nothing here.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..._version import __version__
from ...records import atomic_path
from ...training.keys import run_key
from ...training.result import load_run
from .cells import DONE, MISSING, failure_file, is_finished, run_folder
from .grid import Grid

DATASET, SPEC = "sweep.nc", "sweep.json"
CURVES = ("train_loss", "test_iwl", "test_icl")
SCALARS = ("final_train_loss", "final_test_iwl", "final_test_icl", "directions_learned", "first_drop_step")


def read_spec(root) -> Grid:
    """The grid last swept into ``root`` (its ``sweep.json``); FileNotFoundError when there is none."""
    path = Path(root) / SPEC
    if not path.is_file():
        raise FileNotFoundError(f"{root} is not a sweep folder: it has no {SPEC}")
    return Grid.from_spec(json.loads(path.read_text(encoding="utf-8")))


def build_dataset(grid: Grid, root, keys: list[str] | None = None):
    """The dataset of ``grid`` from the run folders under ``root`` (``keys``: the cells' folder names, in the
    order of ``grid.cells()``; computed when not given)."""
    import xarray as xr

    cells = grid.cells()
    keys = keys or [run_key(c.config) for c in cells]
    shape, dims = grid.shape, grid.dims
    D = max(c.config.in_dim for c in cells)
    status = np.full(shape, MISSING, dtype=object)
    message = np.full(shape, "", dtype=object)
    wall = np.full(shape, np.nan)
    scalars = {k: np.full(shape, np.nan) for k in SCALARS}
    drops, plateaus, levels = (np.full(shape + (n,), np.nan) for n in (D, D + 1, D + 1))
    curves: dict[tuple, dict] = {}
    for cell, key in zip(cells, keys):
        i, folder = cell.index, run_folder(root, key)
        if is_finished(folder):
            saved = load_run(folder)
            summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
            status[i], wall[i] = DONE, saved.wall_time
            curves[i] = {k: getattr(saved.history, k) for k in CURVES if getattr(saved.history, k) is not None}
            for k in SCALARS:
                scalars[k][i] = np.nan if summary.get(k) is None else summary[k]
            for target, name in ((drops, "drop_steps"), (plateaus, "plateau_levels"), (levels, "theory_levels")):
                values = np.array([np.nan if v is None else v for v in summary[name]], dtype=np.float64)
                target[i][:len(values)] = values
        elif failure_file(root, key).is_file():
            record = json.loads(failure_file(root, key).read_text(encoding="utf-8"))
            status[i], message[i], wall[i] = record["status"], record["message"], record["wall_time_s"]
    steps = max((len(c["train_loss"]) for c in curves.values()), default=0)
    data = {}
    for name in CURVES:
        if any(name in c for c in curves.values()):
            arr = np.full(shape + (steps,), np.nan)
            for i, c in curves.items():
                if name in c:
                    arr[i][:len(c[name])] = c[name]
            data[name] = (dims + ("step",), arr)
    data.update(status=(dims, status.astype(str)), message=(dims, message.astype(str)), wall_time=(dims, wall),
                drop_step=(dims + ("direction",), drops), plateau_level=(dims + ("m",), plateaus),
                theory_level=(dims + ("m",), levels))
    data.update({k: (dims, v) for k, v in scalars.items()})
    coords = dict(grid.coordinates(), step=np.arange(steps), direction=np.arange(1, D + 1), m=np.arange(D + 1))
    spec = grid.to_spec()
    fixed = {k: v for k, v in spec["settings"].items() if k not in spec["grid"]}  # a swept setting is a coordinate
    attrs = {"settings": json.dumps(fixed), "grid": json.dumps(spec["grid"]),
             "linattn_version": __version__}
    ds = xr.Dataset(data, coords=coords, attrs=attrs)
    ds["wall_time"].attrs["units"] = "s"
    return ds


def save_dataset(ds, root) -> Path:
    """Write ``ds`` as ``root/sweep.nc`` (NetCDF-4 via h5netcdf), atomically: a temporary file renamed into place."""
    path = Path(root) / DATASET
    with atomic_path(path) as tmp:
        ds.to_netcdf(tmp, engine="h5netcdf")
    return path


def collect(root):
    """Rebuild the dataset of the grid last swept into ``root`` from its run folders, write it to
    ``root/sweep.nc`` and return it (what ``linattn sweep --collect DIR`` does)."""
    ds = build_dataset(read_spec(root), root)
    save_dataset(ds, root)
    return ds
