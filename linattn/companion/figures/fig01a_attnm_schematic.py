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
from ..plotting import FONT_PT, draw_arrow, draw_box, draw_edge, draw_node, node_column
from .common import preset_blocks
from .common.schematic import check_drawing, size_words

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    "quick": dict(in_dim=3, head_num=4),
    "paper": dict(in_dim=3, head_num=4),
}
TOLERANCES = [preset_blocks.EXACT]
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

    fig = plt.figure(figsize=(6.4, 5.6))  # at most 6.4 in wide: 10-pt labels stay legible in the book
    ax = fig.add_axes((0, 0, 1, 1))
    draw_attn_m_schematic(ax, in_dim=ds.attrs["in_dim"], head_num=ds.attrs["head_num"])
    return fig


def draw_attn_m_schematic(ax, in_dim: int = 3, head_num: int = 4) -> None:
    """The paper's Figure 1a: ATTN_M as a two-layer linear network on the cubic feature z = vec(β x_qᵀ) (D² inputs):
    first layer W₁ (row h = vec of head h's key-query block), H hidden units, second layer w₂ (values v_h)."""
    D, H = in_dim, head_num
    ax.set_xlim(-0.2, 10.4)
    ax.set_ylim(-1.6, 7.6)
    ax.set_aspect("equal")
    ax.axis("off")
    # the sequence and the feature map
    draw_box(ax, (1.0, 5.6), 1.9, 1.3, "context\n$(x_n, y_n)_{n\\leq N}$\nquery $x_q$")
    feature_map = "$\\beta = \\frac{1}{N}\\sum_n y_n x_n$\n\n$z = \\mathrm{vec}(\\beta\\, x_q^\\top)$"
    draw_box(ax, (1.0, 2.6), 1.9, 1.6, feature_map)
    draw_arrow(ax, (1.0, 4.9), (1.0, 3.45))
    z = node_column(D * D, 4.1, 6.6, 0.2)
    hidden = node_column(H, 6.6, 5.2, 1.6)
    out = (9.0, 3.4)
    draw_arrow(ax, (1.95, 2.6), (2.75, 2.6))  # ends left of the z labels
    for i, p in enumerate(z):
        a, b = divmod(i, D)
        draw_node(ax, p, 0.22, color="#dbe9f6")
        ax.text(p[0] - 0.32, p[1], f"$\\beta_{a + 1} x_{{q,{b + 1}}}$", ha="right", va="center")
        for q in hidden:
            draw_edge(ax, p, q, lw=0.5, alpha=0.8)
    for h, q in enumerate(hidden):
        draw_node(ax, q, 0.3, color="#fde0c5", text=f"{h + 1}")
        draw_edge(ax, q, out, color="0.25", lw=1.0)
    draw_node(ax, out, 0.36, color="#d5efcf", text="$\\hat y$", fontsize=FONT_PT)
    ax.text(4.1, 7.15, f"$z$ ($D^2 = {D * D}$)", ha="center", fontsize=FONT_PT)
    ax.text(6.6, 7.15, f"$H = {H}$ heads", ha="center", fontsize=FONT_PT)
    ax.text(5.3, -0.75, "$W_1$: row $h$ = vec of head $h$'s\nkey–query block $W_{KQ}^{(h)}$", ha="center",
            fontsize=FONT_PT)
    ax.text(7.9, -0.75, "$w_2$: values $v_h$", ha="center", fontsize=FONT_PT)
    ax.text(9.0, 2.6, "$\\hat y = w_2^\\top W_1 z$", ha="center", va="top", fontsize=FONT_PT)
