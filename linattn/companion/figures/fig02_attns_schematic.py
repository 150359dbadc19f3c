"""Figure 2: ATTN_S with rank-one heads is a sum of H three-layer linear networks on the cubic feature z, each
convolutional in its first layer (paper Section 5).

A schematic: nothing is trained. The drawing is the network at the figure's ``in_dim`` D and ``head_num`` H; the
numbers count one head's free weights — the query q_h, shared across the D blocks of z, then the key k_h and the
value v_h — in the layout of ``linattn.init_weights("attnS", rank=1)`` (the x-parts of W_Q[h] and W_K[h] and the
label's entry of W_V[h], the only entries that enter the prediction while the theory's zero blocks stay zero),
beside D and 2D + 1.
"""

from __future__ import annotations

import json

import numpy as np

from ... import init_weights
from .. import presets
from ..plotting import FONT_PT, draw_edge, draw_node, node_column
from .common import preset_blocks
from .common.schematic import check_drawing, size_words

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    "quick": dict(in_dim=3, head_num=2),
    "paper": dict(in_dim=3, head_num=2),
}
TOLERANCES = [preset_blocks.EXACT]
# settings of a reader's own the page must stay true at (a drawing: any D and H)
KNOB_CASES = (dict(in_dim=5, head_num=4), dict(in_dim=2, head_num=1))
LAYERS = ("z", "blocks", "head", "output")



def check(S: dict) -> None:
    """Refuse a drawing too large to draw (``presets.check_overrides`` calls it before anything runs): per head, D²
    inputs and their edges, D block units and their edges, the head's unit and its edge to the output."""
    D, H = S["in_dim"], S["head_num"]
    check_drawing(S, H * (2 * D * D + 2 * D + 2) + 1)


def compute(S: dict):
    """One head's network, layer by layer (``layer``: z, blocks, head, output): its ``units_per_head`` and the
    ``free_weights_in`` entering each layer (the query q_h once, shared by the D blocks; the key k_h; the value
    v_h), taken from rank-one ATTN_S weights with D = ``in_dim`` and H = ``head_num``; the settings as attributes."""
    import xarray as xr

    D, H = S["in_dim"], S["head_num"]
    w = init_weights("attnS", head_num=H, in_dim=D, rank=1, rng=np.random.default_rng(0))
    q, k, v = w["W_Q"][0, 0, :D], w["W_K"][0, 0, :D], w["W_V"][0, D, D:]
    return xr.Dataset({"units_per_head": ("layer", [D * D, D, 1, 1]),
                       "free_weights_in": ("layer", [0, q.size, k.size, v.size])},
                      coords={"layer": list(LAYERS)},
                      attrs={"settings": json.dumps(S, sort_keys=True), "in_dim": D, "head_num": H,
                             "published": int(presets.is_published(NAME, S))})


def numbers(ds) -> list[dict]:
    """``numbers.json``: a head's free first-layer weights and all its free weights, counted, beside D and 2D + 1."""
    D = ds.attrs["in_dim"]
    return [dict(key="weights_per_head.first_layer", quantity="free first-layer weights per head (shared q_h)",
                 theory=D, reproduced=int(ds.free_weights_in.sel(layer="blocks"))),
            dict(key="weights_per_head", quantity="weights per head (q_h, k_h, v_h)", theory=2 * D + 1,
                 reproduced=int(ds.free_weights_in.sum()))]


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``), and how the drawing's size compares with
    the published diagram's (the paper preset's D and H)."""
    D, H = ds.attrs["in_dim"], ds.attrs["head_num"]
    size = size_words(ds, PRESETS["paper"])
    return dict(D=D, H=H, D2=D * D, per_head=int(ds.free_weights_in.sum()), size=size)


def plot(ds):
    """The schematic: H heads, each a three-layer network on z whose first layer shares the query's weights."""
    import matplotlib.pyplot as plt

    H = ds.attrs["head_num"]
    fig = plt.figure(figsize=(6.4, 3.6 * H))  # the drawing fills the width; the saved figure is cropped
    ax = fig.add_axes((0, 0, 1, 1))
    draw_attn_s_schematic(ax, in_dim=ds.attrs["in_dim"], head_num=H)
    return fig


def draw_attn_s_schematic(ax, in_dim: int = 3, head_num: int = 2) -> None:
    """The paper's Figure 2: ATTN_S (rank one) as a sum of H three-layer linear networks on z, each convolutional in its
    first layer: the query q_h acts on every group (β_i x_q,1..D) with the same weights (colours show the sharing),
    the key k_h combines the D group outputs β_i (q_hᵀx_q), and the value v_h scales the head's output."""
    D, H = in_dim, head_num
    shared = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
    ax.set_xlim(-0.4, 11.2)
    gap = 0.46  # between the z nodes: room for one 10-pt label at the figure's scale
    height = H * (D * D * gap + 1.0)
    ax.set_aspect("equal")
    ax.axis("off")
    out = (10.2, height / 2)
    draw_node(ax, out, 0.4, color="#d5efcf", text="$\\hat y$", fontsize=FONT_PT)
    ax.text(out[0], out[1] - 0.65, "$\\sum_h$", ha="center", va="top", fontsize=FONT_PT)
    for h in range(H):
        top = height - h * (D * D * gap + 1.0) - 0.3
        bottom = top - (D * D - 1) * gap
        z = node_column(D * D, 1.6, top, bottom)
        mid = [(4.6, np.mean([z[i * D + j][1] for j in range(D)])) for i in range(D)]
        head = (7.4, (top + bottom) / 2)
        for i in range(D):
            for j in range(D):
                p = z[i * D + j]
                draw_node(ax, p, 0.2, color="#dbe9f6")
                ax.text(p[0] - 0.3, p[1], f"$\\beta_{i + 1} x_{{q,{j + 1}}}$", ha="right", va="center",
                        fontsize=FONT_PT)
                draw_edge(ax, p, mid[i], color=shared[j % len(shared)], lw=1.1)
        for i, m in enumerate(mid):
            draw_node(ax, m, 0.25, color="#fde0c5")
            draw_edge(ax, m, head, color="0.35", lw=0.9)
        draw_node(ax, head, 0.3, color="#f6d5e8", text=f"{h + 1}")
        draw_edge(ax, head, out, color="0.15", lw=1.3)
        ax.text(3.1, top + 0.35, f"$q_{h + 1}$ (shared)", ha="center", fontsize=FONT_PT)
        ax.text(6.0, top + 0.35, f"$k_{h + 1}$", ha="center", fontsize=FONT_PT)
        ax.text(8.8, (head[1] + out[1]) / 2 + 0.25, f"$v_{h + 1}$", ha="center", fontsize=FONT_PT)
    low = bottom - 0.55  # the captions of the layers, under the last head
    ax.text(1.0, low, f"$z = \\mathrm{{vec}}(\\beta x_q^\\top)$, $D = {D}$", ha="center", va="top")
    ax.text(4.6, low, "$\\beta_i\\,(q_h^\\top x_q)$", ha="center", va="top")
    ax.text(7.4, low, "$(k_h^\\top\\beta)(q_h^\\top x_q)$", ha="center", va="top")
    ax.set_ylim(low - 0.7, height + 0.6)
