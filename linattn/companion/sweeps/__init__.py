"""Sweeps: many runs of a grid of settings on Dask, resumable, gathered into one labelled xarray Dataset.

    grid      the fixed settings and the swept values; every cell validated before anything runs
    cells     one cell on disk (a content-addressed run folder) and the task that trains it
    dataset   the run folders as one xarray Dataset, saved as NetCDF
    engine    the cells on a Dask cluster (a local one by default), with a progress bar

    from linattn.companion.sweeps import sweep
    ds = sweep(linattn.RunConfig(model="attnS", head_num=5, init=1e-2, lr=0.02, epoch=4001, trainset_size=4000),
               {"seed": range(6), "init": [0.005, 0.01, 0.02]}, out="sweeps/attns")
    ds.train_loss.sel(init=0.01).plot.line(x="step")

``linattn sweep`` is the same from the command line. Needs the ``sweep`` extra (Dask, xarray, h5netcdf).
"""

from .dataset import build_dataset, collect, read_spec
from .engine import check_out, local_client, plan, sweep
from .grid import Cell, Grid

__all__ = ["sweep", "local_client", "collect", "plan", "Grid", "Cell", "build_dataset", "read_spec", "check_out"]
