"""Figure 1a: ATTN_M is a two-layer linear network on the cubic feature z = vec(β x_qᵀ) (paper Section 4.1).

A schematic: nothing is trained. The drawing is the network at the figure's ``in_dim`` D and ``head_num`` H — D²
inputs, one hidden unit per head, one output — and the numbers count the layers of the network that
``linattn.mlp_from_attn_m`` builds from ATTN_M weights of that size, beside the counts the identity predicts
(D² inputs, H·D² weights in the first layer).
"""

from __future__ import annotations

import json

import numpy as np

from ... import init_weights, mlp_from_attn_m
from .. import presets
from .common import preset_blocks as common
from .common.schematic import check_drawing, size_words

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    "quick": dict(in_dim=3, head_num=4),
    "paper": dict(in_dim=3, head_num=4),
}
TOLERANCES = [common.EXACT]
# settings of a reader's own the page must stay true at (a drawing: any D and H)
KNOB_CASES = (dict(in_dim=5, head_num=2), dict(in_dim=2, head_num=7))
LAYERS = ("z", "hidden", "output")



def check(S: dict) -> None:
    """Refuse a drawing too large to draw (``presets.check_overrides`` calls it before anything runs): D² inputs,
    D²·H edges into the H hidden units, H edges out of them and the output."""
    D, H = S["in_dim"], S["head_num"]
    check_drawing(S, D * D + D * D * H + 2 * H + 1)


def compute(S: dict):
    """The network drawn, layer by layer (``layer``: z, hidden, output): its ``units`` and the ``weights_in`` that
    enter each layer, counted on the MLP weights ``linattn.mlp_from_attn_m`` makes of ATTN_M weights with D = ``in_dim``
    and H = ``head_num`` (any values do: the count is of shapes); the settings as attributes."""
    import xarray as xr

    D, H = S["in_dim"], S["head_num"]
    attn_m = init_weights("attnM", head_num=H, in_dim=D, rng=np.random.default_rng(0))
    mlp = mlp_from_attn_m(attn_m)
    W1, w2 = np.atleast_2d(mlp["W1"]), np.ravel(mlp["w2"])
    units = [W1.shape[1], W1.shape[0], 1]
    return xr.Dataset({"units": ("layer", units), "weights_in": ("layer", [0, W1.size, w2.size])},
                      coords={"layer": list(LAYERS)},
                      attrs={"settings": json.dumps(S, sort_keys=True), "in_dim": D, "head_num": H,
                             "published": int(presets.is_published(NAME, S))})


def numbers(ds) -> list[dict]:
    """``numbers.json``: the inputs of the network and the weights of its first layer, counted, beside D² and H·D²."""
    D, H = ds.attrs["in_dim"], ds.attrs["head_num"]
    return [dict(key="inputs", quantity="inputs of the network (D²)", theory=D * D,
                 reproduced=int(ds.units.sel(layer="z"))),
            dict(key="weights.W1", quantity="weights in W₁ (H·D²)", theory=H * D * D,
                 reproduced=int(ds.weights_in.sel(layer="hidden")))]


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``), and how the drawing's size compares with
    the published diagram's (the paper preset's D and H)."""
    D, H = ds.attrs["in_dim"], ds.attrs["head_num"]
    size = size_words(ds, PRESETS["paper"])
    return dict(D=D, H=H, D2=int(ds.units.sel(layer="z")), HD2=int(ds.weights_in.sel(layer="hidden")), size=size)


def plot(ds):
    """The schematic: the sequence, β and z, the D² inputs, H hidden units (one per head) and the output."""
    import matplotlib.pyplot as plt

    from ..plotting import draw_attn_m_schematic

    fig = plt.figure(figsize=(6.4, 5.6))  # at most 6.4 in wide: 10-pt labels stay legible in the book
    ax = fig.add_axes((0, 0, 1, 1))
    draw_attn_m_schematic(ax, in_dim=ds.attrs["in_dim"], head_num=ds.attrs["head_num"])
    return fig
