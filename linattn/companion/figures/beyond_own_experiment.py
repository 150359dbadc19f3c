"""Your own experiment: ATTN_S on an input covariance of your choosing, from initial weights you give, trained
further from the weights the first run returned — with the public API only (``linattn.draw``, ``linattn.run``,
``linattn.theory``), so the recipe can be copied into a notebook of your own.

:func:`runs`, :func:`example_weights` and :func:`by_hand` are the recipe (the page shows their code, :func:`recipe`, and
a test runs it); :func:`compute` packs what it trained into a labelled dataset beside the theory's plateau losses L(M_0)
… L(M_D) of your covariance (``theory.plateau_losses``), and the flat stretches of the loss are named by the saddle they
sit at (``loss_curves.saddle_levels``, the one rule). Pass ``weights=`` your own arrays (the layout of ``init.npz``:
``linattn.models.weight_shapes``) to start from them.
"""

from __future__ import annotations

import numpy as np

import linattn

from .. import presets
from ..output import words as list_words
from .common import preset_blocks
from .common.frame import settings_attrs
from .common.runs import FromRun
from .common.trainer import train

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    # A reader's own experiment: rank-one ATTN_S on a spectrum of their choosing, from weights they give; the
    # first run stops before the last drop, so the continued run shows it. Options the authors' code never had
    # (an explicit spectrum) need linattn's own random streams.
    "quick": dict(model="attnS", spectrum=[0.5, 0.25, 0.15, 0.1], head_num=4, rank=1, init=0.03, lr=0.025,
                  epoch=1000, epoch_more=2000, trainset_size=20000, seq_len=32, seed=0, draws="streams"),
    "paper": dict(model="attnS", spectrum=[0.5, 0.25, 0.15, 0.1], head_num=4, rank=1, init=0.03, lr=0.025,
                  epoch=1000, epoch_more=3000, trainset_size=80000, seq_len=32, seed=0, draws="streams"),
}
# Settings a page must stay true at beyond the presets (tests/test_knob_cases.py builds each at the quick preset):
# three directions and heads, and another seed with runs too short to reach every saddle
KNOB_CASES = (dict(spectrum=[0.6, 0.3, 0.1], head_num=3), dict(seed=3, epoch=300, epoch_more=500))
HELP = {
    "epoch_more": "steps of the continued run, from the final weights of the first run",
}
TOLERANCES = [preset_blocks.PLATEAUS]



def runs(S: dict) -> dict:
    """The two runs: the first (``epoch`` steps, from the weights you give), with
    your spectrum on the diagonal of the input covariance (any symmetric
    positive-definite matrix works as ``cov_matrix``; options the authors' code
    never had need linattn's own random streams, ``draws="streams"``), and its
    continuation: ``epoch_more`` steps from the weights the first returned, on
    the same training set."""
    first = linattn.RunConfig(
        model=S["model"], in_dim=len(S["spectrum"]), head_num=S["head_num"],
        rank=S["rank"], seq_len=S["seq_len"], trainset_size=S["trainset_size"],
        lr=S["lr"], epoch=S["epoch"], seed=S["seed"], draws=S["draws"],
        cov_matrix=np.diag(S["spectrum"]).tolist())
    more = linattn.RunConfig(**{**first.to_dict(), "epoch": S["epoch_more"]})
    return {"first": first,
            "continued": FromRun(more, "first", "final", same_data=True)}


def example_weights(S: dict) -> dict:
    """Initial weights given in Python, in the layout of ``init.npz``: for
    ATTN_S, W_Q and W_K (H, R, D+1) drawn N(0, init²) and W_V (H, D+1, D+1)
    zero but for each head's label entry W_V[h][D, D] = init (only the last row
    of each W_V[h] enters the prediction). Other models: linattn.init_weights."""
    D, H, R = len(S["spectrum"]), S["head_num"], S["rank"]
    rng = np.random.default_rng(S["seed"])
    if S["model"] != "attnS":
        return linattn.init_weights(S["model"], head_num=H, in_dim=D, rank=R,
                                    init=S["init"], rng=rng)
    weights = {"W_Q": S["init"] * rng.standard_normal((H, R, D + 1)),
               "W_K": S["init"] * rng.standard_normal((H, R, D + 1)),
               "W_V": np.zeros((H, D + 1, D + 1))}
    weights["W_V"][:, D, D] = S["init"]
    return weights


def by_hand(S: dict, weights: dict) -> tuple:
    """The two runs trained with the public API alone: the first from
    ``weights`` on the data drawn from your covariance, the second from the
    weights the first returned, on the same data. (The page trains the same
    runs through the companion's run store, which keeps them.)"""
    declared = runs(S)
    first = linattn.run(declared["first"], init=weights)
    more = declared["continued"].config
    continued = linattn.run(more, init=first.weights, data=first.datasets)
    return first, continued


def recipe() -> str:
    """The code of :func:`runs`, :func:`example_weights` and :func:`by_hand`, as a Markdown code block."""
    import inspect

    code = "\n\n".join(inspect.getsource(f) for f in (runs, example_weights, by_hand))
    imports = "import numpy as np\nimport linattn\nfrom linattn.companion.figures.common.runs import FromRun"
    return f"```python\n{imports}\n\n\n{code}\n\nfirst, continued = by_hand(S, example_weights(S))\n```"


def compute(S: dict, weights: dict | None = None):
    """The training loss of both runs, end to end (``train_loss`` over ``step``; the coordinate ``run`` says which:
    "first" or "continued"), the level of the first flat stretch at each saddle (``plateau_level``: m, NaN where the
    loss never rests there) beside the theory's ``plateau_theory`` of your covariance, the eigenvalues given
    (``spectrum``: direction), the first run's last loss and the continued run's first; settings and both runs'
    settings as attributes. ``weights``: your initial weights (None: :func:`example_weights`)."""
    import xarray as xr

    done = train(runs(S), S, given={"first": example_weights(S) if weights is None else weights})
    first, more = done["first"], done["continued"]
    datasets = first.datasets
    loss = np.concatenate([first.history.train_loss, more.history.train_loss])
    levels = linattn.theory.plateau_losses(datasets.cov, first.config.N)
    ds = xr.Dataset(
        {"train_loss": ("step", loss),
         "plateau_level": ("m", linattn.loss_curves.saddle_levels(loss, levels)),
         "plateau_theory": ("m", levels),
         "spectrum": ("direction", np.asarray(S["spectrum"], dtype=float)),
         "first_end_loss": float(first.history.train_loss[-1]),
         "continued_start_loss": float(more.history.train_loss[0])},
        coords={"step": np.arange(loss.size), "m": np.arange(len(levels)),
                "direction": np.arange(1, len(S["spectrum"]) + 1),
                "run": ("step", ["first"] * first.history.train_loss.size
                        + ["continued"] * more.history.train_loss.size)},
        attrs=settings_attrs(S, engine=first.engine, seeds=S["seed"],
                             runs={"first": first.config.to_dict(), "continued": more.config.to_dict()}))
    ds.attrs.update(epoch=int(first.history.train_loss.size), band=linattn.loss_curves.REST_BAND,
                    weights="given" if weights is not None else "example_weights",
                    published=int(presets.is_published(NAME, S)))
    ds.plateau_level.attrs["description"] = (f"level of the first flat stretch at saddle M_m "
                                             f"(loss_curves.saddle_levels, band {linattn.loss_curves.REST_BAND:.3g})")
    return ds


def numbers(ds) -> list[dict]:
    """``numbers.json``: each saddle the loss rested at, beside the theory's level for your spectrum, and the final
    loss of the continued run beside the last saddle's."""
    rows = [dict(key=f"plateau.M{m}", quantity=f"plateau L(M_{m}) (your spectrum)",
                 theory=float(ds.plateau_theory.sel(m=m)), reproduced=float(ds.plateau_level.sel(m=m)))
            for m in ds.m.values if np.isfinite(ds.plateau_level.sel(m=m))]
    rows.append(dict(key="final_loss.continued", quantity="final loss (continued run)",
                     theory=float(ds.plateau_theory.isel(m=-1)), reproduced=float(ds.train_loss[-1])))
    return rows


def summary(ds) -> str:
    """The page's sentences (Markdown, with math) on the plateaus found and where the continued run starts."""
    found = [(float(ds.plateau_level.sel(m=m)), int(m), float(ds.plateau_theory.sel(m=m)))
             for m in ds.m.values if np.isfinite(ds.plateau_level.sel(m=m))]
    text = ", ".join(f"{lv:.4f} (theory $L(\\mathcal M_{{{m}}})$ = {th:.4f})" for lv, m, th in found)
    return ((f"Plateaus found: {text}." if found else "No plateau found at a saddle of this spectrum.")
            + f" The continued run starts at {float(ds.continued_start_loss):.6f}, the loss the first run's final "
              f"weights give on the same data (its last step started at {float(ds.first_end_loss):.6f}).")


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``)."""
    import json

    first = json.loads(ds.attrs["runs"])["first"]
    return dict(H=first["head_num"], R=first["rank"], spectrum=list_words(ds.spectrum.values),
                epoch=ds.attrs["epoch"], epoch_more=int((ds.run == "continued").sum()),
                rest_tol=linattn.loss_curves.REST_TOL, tol=linattn.loss_curves.rest_band_words(ds.attrs["band"]))


def plot(ds):
    """The loss of both runs end to end with your spectrum's plateau losses; a dashed line where the second run
    starts from the weights the first returned."""
    import matplotlib.pyplot as plt

    from ..plotting import plateau_labels, plot_loss_with_theory

    levels = ds.plateau_theory.values
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    plot_loss_with_theory(ax, ds.step.values, [(ds.train_loss.values, None, dict(color="black"))], levels=levels,
                          level_labels=plateau_labels(len(levels)), legend=False)
    ax.axvline(ds.attrs["epoch"], color="tab:red", ls="--", lw=1)
    ax.text(ds.attrs["epoch"], 1.02, " continued from the returned weights", color="tab:red", va="bottom",
            transform=ax.get_xaxis_transform())
    fig.tight_layout()
    return fig
