"""Figure 3c: in the seed-0 ATTN_S run of Figure 3a each head's key and query turn to one eigenvector of the input
covariance, largest eigenvalue first, one per drop of the loss (paper Section 5).

The run is Figure 3a's seed 0 from the run store (:func:`~.common.attn_s_run.seed_run`), with the
weights recorded every ``snapshot_every`` steps. Measured on each snapshot: the overlap of every head's key and query
with each eigenvector, |e_dᵀ k_h| / ‖k_h‖ (``events.vector_alignment``); a direction counts as learned at the first
snapshot where some head's key and query both overlap it by more than :data:`ALIGNED`
(``events.first_crossings``, ``events.first_learner``), and is set beside the step of the loss's drop
(``loss_curves.drop_steps``). The theory puts the alignment before the drop: in the scalar reduction the learning
head already points along its direction during the plateau, while its size is still small (silent alignment), so
the lag, step aligned − step of the drop, is negative (:func:`alignment_timing` words it).
"""

from __future__ import annotations

import numpy as np

from ... import events, loss_curves, theory
from .. import presets, published
from ..output import MarkdownTable, by_sign
from .common import presets as common
from .common.attn_s_run import describe, seed_run
from .common.frame import settings_attrs

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {k: dict(v) for k, v in common.SEED0_RUN.items()}
TOLERANCES = [(r"learned\.\d+", "abs", 0.0)]
ALIGNED = 0.9  # a head has learned e_d when its key's and its query's overlaps with e_d both exceed this



def runs(S: dict) -> dict:
    """The one run: Figure 3a's seed-0 run (the same settings and snapshot interval on the five pages that read it,
    so the run store trains it once)."""
    return common.sweep(S)


def compute(S: dict):
    """The overlaps of every head's key and query with each eigenvector (``key_alignment``, ``query_alignment``:
    step × head × direction, at the snapshots), and per direction: the step of the loss's drop that learns it
    (``drop_step``, NaN where it never comes), the head that first aligned with it and when (``aligned_head``: 0
    where none did; ``aligned_step``), the order in which it was learned (``learned_order``: 1 for the first; 0:
    never) and its best final alignment over heads (``final_alignment``: the smaller of key and query)."""
    import xarray as xr

    res = seed_run(runs(S), S)
    cfg, cov = res.config, res.datasets.cov
    D = cov.shape[0]
    levels = theory.plateau_losses(cov, cfg.N)
    snaps = res.history.snapshots
    step = np.array([s for s, _ in snaps])
    key = np.array([events.vector_alignment(w["W_K"], cov) for _, w in snaps])  # (snapshots, H, D)
    query = np.array([events.vector_alignment(w["W_Q"], cov) for _, w in snaps])
    both = np.minimum(key, query)  # a head is aligned with e_d when its key and its query are
    first = events.first_learner(events.first_crossings(both, ALIGNED, step))  # {direction: (head, step)}
    order = [d for _, d in sorted((s, d) for d, (_, s) in first.items())]  # by the step aligned
    aligned_head, aligned_step, learned_order = np.zeros(D, dtype=int), np.full(D, np.nan), np.zeros(D, dtype=int)
    for i, d in enumerate(order):
        aligned_head[d], aligned_step[d], learned_order[d] = first[d][0] + 1, first[d][1], i + 1
    H = key.shape[1]
    ds = xr.Dataset(
        {"key_alignment": (("step", "head", "direction"), key),
         "query_alignment": (("step", "head", "direction"), query),
         "drop_step": ("direction", loss_curves.drop_steps(res.history.train_loss, levels)),
         "aligned_head": ("direction", aligned_head), "aligned_step": ("direction", aligned_step),
         "learned_order": ("direction", learned_order), "final_alignment": ("direction", both[-1].max(axis=0)),
         "eigenvalue": ("direction", theory.spectrum(cov)[0])},
        coords={"step": step, "head": np.arange(1, H + 1), "direction": np.arange(1, D + 1)},
        attrs=settings_attrs(S, engine=res.engine, seeds=S["seed"], runs={"attn_s": cfg.to_dict()}))
    ds.attrs["run_key"] = res.key  # the run store's entry: the same for the five pages on this run
    ds.attrs.update(aligned=ALIGNED, snapshot_every=int(S["snapshot_every"]),
                    published=int(presets.is_published(NAME, S)))
    ds.key_alignment.attrs["description"] = "|e_d^T k_h| / |k_h|: the key of head h against eigenvector e_d"
    ds.query_alignment.attrs["description"] = "|e_d^T q_h| / |q_h|: the query of head h against eigenvector e_d"
    ds.drop_step.attrs["description"] = "drop d of the loss: first step below the midpoint of L(M_{d-1}), L(M_d)"
    return ds


def _order(ds) -> list[int]:
    """The directions (from 1) in the order they were learned."""
    learned = [(int(o), int(d)) for d, o in zip(ds.direction.values, ds.learned_order.values) if o > 0]
    return [d for _, d in sorted(learned)]


def numbers(ds) -> list[dict]:
    """``numbers.json``: which direction was learned i-th (theory: the i-th largest), how far each alignment lies
    from the matching drop of the loss, and each direction's best final alignment."""
    rows = []
    drops = ds.drop_step.values
    for i, d in enumerate(_order(ds)):
        h, s = int(ds.aligned_head.sel(direction=d)), float(ds.aligned_step.sel(direction=d))
        rows.append(dict(key=f"learned.{i + 1}", quantity=f"direction learned {i + 1}. (1 = largest eigenvalue)",
                         theory=i + 1, reproduced=d))
        if i < len(drops) and np.isfinite(drops[i]):
            rows.append(dict(key=f"aligned_minus_drop.{i + 1}",
                             quantity=f"step head {h} aligns with e_{d} − step of drop {i + 1} (theory: before, < 0)",
                             reproduced=s - int(drops[i])))
    for d in ds.direction.values:
        rows.append(dict(key=f"final_alignment.e{d}",
                         quantity=f"final alignment with e_{d}, best head (min of key, query)", theory=1.0,
                         reproduced=float(ds.final_alignment.sel(direction=d))))
    return rows


def alignment_timing(lag: float, resolution: int) -> str:
    """A lag (step aligned − step of the drop) in words: "N steps before the drop" (the theory's order: the key and
    query turn during the plateau, before the value weight grows), "N steps after the drop", or "within the snapshot
    interval of the drop" when |lag| is below the ``resolution`` at which the weights were recorded."""
    if not np.isfinite(lag):
        return "–"
    if abs(lag) < resolution:
        return "within the snapshot interval of the drop"
    return f"{abs(lag):.0f} steps {by_sign(lag, 'before', 'after', 'at')} the drop"


def lags(ds) -> list[float]:
    """Per direction in the order learned, step aligned − step of the matching drop (NaN where the drop never
    comes)."""
    drops = ds.drop_step.values
    return [float(ds.aligned_step.sel(direction=d)) - float(drops[i]) if i < len(drops) else np.nan
            for i, d in enumerate(_order(ds))]


def table(ds):
    """The order in which the directions were learned, the head that took each, the step it aligned and the step
    of the matching drop of the loss (a sentence where none aligned)."""
    from IPython.display import Markdown

    order, drops = _order(ds), ds.drop_step.values
    if not order:
        return Markdown(f"*(No direction reached an overlap of {ds.attrs['aligned']:g} in this run.)*")
    return MarkdownTable(
        [dict(order=f"{i + 1}.", direction=f"$e_{d}$", head=int(ds.aligned_head.sel(direction=d)),
              aligned=float(ds.aligned_step.sel(direction=d)),
              drop=float(drops[i]) if i < len(drops) and np.isfinite(drops[i]) else None,
              timing=alignment_timing(lag, ds.attrs["snapshot_every"]))
         for i, (d, lag) in enumerate(zip(order, lags(ds)))],
        {"order": "learned", "direction": "direction", "head": "head", "aligned": "step aligned",
         "drop": "step of the loss drop", "timing": "aligned"}, {"aligned": ".0f", "drop": ".0f"})


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``): the settings, and what the heads beyond
    the directions do, as a clause that says only what applies at these H and D."""
    import json

    run = json.loads(ds.attrs["runs"])["attn_s"]
    H, D = ds.sizes["head"], ds.sizes["direction"]
    spare = H - D
    if spare == 1:
        heads = "while the one spare head stays unaligned"
    elif spare > 1:
        heads = f"while the {spare} spare heads stay unaligned"
    elif spare == 0:
        heads = "one head for each direction"
    else:
        heads = f"until the heads run out: {H} heads can learn only the first {H} of the {D} directions"
    lag = lags(ds)
    timing = [alignment_timing(x, ds.attrs["snapshot_every"]) if np.isfinite(x) else
              f"at step {float(ds.aligned_step.sel(direction=d)):.0f}, its drop not reached"
              for x, d in zip(lag, _order(ds))]
    lag_words = (", ".join(f"{t} ({_nth(i + 1)})" for i, t in enumerate(timing)) if timing
                 else "at no step: no direction was aligned, so there is no lag to measure")
    before = sum(t.endswith("before the drop") for t in timing)
    return dict(rank=run["rank"], seed=run["seed"], H=H, D=D, spare=heads, aligned=ds.attrs["aligned"],
                lags=lag_words, before=f"{before} of the {int(np.isfinite(lag).sum())}",
                caption_lead=published.page.caption_lead("Figure 3c", bool(ds.attrs.get("published"))),
                settings=describe(run, snapshot_every=ds.attrs["snapshot_every"]))


def _nth(i: int) -> str:
    """1 → "1st", 2 → "2nd", 3 → "3rd", 4 → "4th" (up to 20, enough for the directions of a page)."""
    return f"{i}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(i if i < 20 else i % 10, 'th')}"


def plot(ds):
    """One row per head: the overlaps of its key (left) and query (right) with each eigenvector over the steps;
    dotted vertical lines at the drops of the loss."""
    import matplotlib.pyplot as plt

    step, H, D = ds.step.values, ds.sizes["head"], ds.sizes["direction"]
    colors = plt.cm.viridis(np.linspace(0.0, 0.85, D))
    drops = [s for s in ds.drop_step.values if np.isfinite(s)]
    fig, axes = plt.subplots(H, 2, figsize=(6.4, 0.9 + 1.2 * H), sharex=True, sharey=True, squeeze=False,
                             layout="constrained")
    for i, h in enumerate(ds["head"].values):
        for col, (var, name) in enumerate((("key_alignment", "key: $|e_d^\\top k_i| / \\|k_i\\|$"),
                                           ("query_alignment", "query: $|e_d^\\top q_i| / \\|q_i\\|$"))):
            ax = axes[i, col]
            for j, d in enumerate(ds.direction.values):
                ax.plot(step, ds[var].sel(head=h, direction=d), color=colors[j], linewidth=1.2, label=f"$e_{d}$")
            for s in drops:
                ax.axvline(s, color="0.6", linestyle=":", linewidth=0.8, zorder=0)
            ax.set_ylim(0, 1.05)
            if i == 0:
                ax.set_title(name)
            if col == 0:
                ax.set_ylabel(f"head {h}")
            if i == H - 1:
                ax.set_xlabel("step")
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside lower center", ncols=D)
    return fig
