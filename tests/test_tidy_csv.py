"""FigureOutput.save_dataset's tidy CSV: floats written as pandas writes them with the same float_format."""

from __future__ import annotations

import io

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
xr = pytest.importorskip("xarray")

from linattn.companion.output import CSV_FLOAT, FigureOutput, csv_floats  # noqa: E402

EDGES = np.array([0.0, -0.0, 1.0, -2.5, 1e-300, 5e-324, 1.23456789012e22, np.inf, -np.inf, np.nan, 0.1 + 0.2,
                  123456789.0, 1e-5, 2.0 ** 60])


def _pandas_text(values) -> list[str]:
    """Each value's cell as pandas' own ``to_csv(float_format=CSV_FLOAT)`` writes it."""
    text = pd.DataFrame({"x": values}).to_csv(index=False, float_format=CSV_FLOAT, lineterminator="\n")
    return text.split("\n")[1:-1]


def test_csv_floats_are_pandas_cells():
    rng = np.random.default_rng(0)
    values = np.concatenate([EDGES, rng.standard_normal(200) * 10.0 ** rng.integers(-12, 12, 200)])
    ours = list(csv_floats(values))
    theirs = _pandas_text(values)
    assert ours == [c.strip('"') for c in theirs] and "" in ours  # NaN: an empty cell (pandas quotes none here)


def test_the_tidy_csv_is_pandas_own(tmp_path):
    loss = np.array([[1.0, 0.5, np.nan], [2.0, np.nan, np.nan]])
    ds = xr.Dataset({"train_loss": (("init", "step"), loss), "law": ("init", [0.25, np.nan])},
                    coords={"init": [1e-8, 0.3], "step": np.arange(3), "model": ("init", ["a", "b,c"])})
    text = FigureOutput("demo", tmp_path).save_dataset(ds).read_text()
    table = ds[["train_loss"]].to_dataframe().dropna(how="all").reset_index()
    buf = io.StringIO()
    table.to_csv(buf, index=False, float_format=CSV_FLOAT, lineterminator="\n")
    assert text == buf.getvalue()
