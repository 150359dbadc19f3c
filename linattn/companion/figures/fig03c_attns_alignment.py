"""Figure 3c: in the seed-0 ATTN_S run of Figure 3a each head's key and query turn to one eigenvector of the input
covariance, largest eigenvalue first, one per drop of the loss (paper Section 5).

The run is Figure 3a's seed 0 from the run store (:func:`~.common.attn_s_run.seed_run`), with the
weights recorded every ``snapshot_every`` steps. Measured on each snapshot: the overlap of every head's key and query
with each eigenvector, |e_dᵀ k_h| / ‖k_h‖ (``events.vector_alignment``); a direction counts as learned at the first
snapshot where some head's key and query both overlap it by more than :data:`ALIGNED`
(``events.first_crossings``, ``events.first_learner``), and is set beside the step of the loss's drop
(``loss_curves.drop_steps``). Alignment is read against the head's growth (``events.alignment_against_growth``),
its size being its output scale |v|·‖k‖·‖q‖ (``events.output_scale``): its overlap at step 0 and when its size first
reaches ``events.GROWN`` of its largest, and its size when its overlap first passes :data:`ALIGNED`. The scalar
reduction of the theory starts a head along its direction, so
that only its size grows (the analogue of Atanasov et al. 2022's silent alignment: directions found while the
weights are small, growth after); whether a head of this run did so is :meth:`events.GrowthAlignment.verdict`, read
off the data.
"""

from __future__ import annotations

import numpy as np

from ... import theory
from ...analysis import events, loss_curves
from .. import presets, published
from ..output import MarkdownTable, subscript
from .common import preset_blocks
from .common.attn_s_run import describe, seed_run, which_run
from .common.frame import settings_attrs

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {k: dict(v) for k, v in preset_blocks.SEED0_RUN.items()}
TOLERANCES = [(r"learned\.\d+", "abs", 0.0)]
#: Other settings the page must stay true at (built at the quick preset by the suite): another D and H, and more
#: heads than the paper's with a smaller start
KNOB_CASES = (dict(in_dim=3, head_num=4), dict(head_num=6, init=0.005, epoch=1501))
ALIGNED = 0.9  # a head has learned e_d when its key's and its query's overlaps with e_d both exceed this



def runs(S: dict) -> dict:
    """The one run: Figure 3a's seed-0 run (the same settings and snapshot interval on the five pages that read it,
    so the run store trains it once)."""
    return preset_blocks.sweep(S)


def compute(S: dict):
    """The overlaps of every head's key and query with each eigenvector (``key_alignment``, ``query_alignment``:
    step × head × direction, at the snapshots), and per direction: the step of the loss's drop that learns it
    (``drop_step``, NaN where it never comes), the head that first aligned with it and when (``aligned_head``: 0
    where none did; ``aligned_step``), the order in which it was learned (``learned_order``: 1 for the first; 0:
    never), its best final alignment over heads (``final_alignment``: the smaller of key and query), and the
    aligned head's alignment against its growth (``events.alignment_against_growth``): ``overlap_at_start``,
    ``overlap_when_grown`` and ``grown_step`` (its output scale at ``events.GROWN`` of its largest),
    ``size_when_aligned`` (output scale over its largest at ``aligned_step``), ``growth_when_aligned`` (output scale
    at ``aligned_step`` over its value at step 0) and ``growth_verdict``. Each head's
    value weight on the label (``value``) and the norms of its key and query rows (``key_norm``, ``query_norm``, the
    x-part as in the overlaps): step × head, their product the output scale."""
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
    value = np.array([w["W_V"][:, -1, -1] for _, w in snaps])  # v_h, each head's value weight on the label
    key_norm = np.array([_x_norm(w["W_K"], D) for _, w in snaps])
    query_norm = np.array([_x_norm(w["W_Q"], D) for _, w in snaps])
    scale = events.output_scale(value, key_norm, query_norm)
    growth = {name: np.full(D, np.nan) for name in ("overlap_at_start", "overlap_when_grown", "grown_step",
                                                    "size_when_aligned", "growth_when_aligned")}
    verdict = np.full(D, "not aligned", dtype=object)
    for i, d in enumerate(order):
        h = first[d][0]
        aligned_head[d], aligned_step[d], learned_order[d] = h + 1, first[d][1], i + 1
        g = events.alignment_against_growth(both[:, h, d], scale[:, h], step, aligned=ALIGNED)
        for name in growth:
            growth[name][d] = np.nan if getattr(g, name) is None else getattr(g, name)
        verdict[d] = g.verdict(ALIGNED)
    H = key.shape[1]
    ds = xr.Dataset(
        {"key_alignment": (("step", "head", "direction"), key),
         "query_alignment": (("step", "head", "direction"), query),
         "drop_step": ("direction", loss_curves.drop_steps(res.history.train_loss, levels)),
         "aligned_head": ("direction", aligned_head), "aligned_step": ("direction", aligned_step),
         "learned_order": ("direction", learned_order), "final_alignment": ("direction", both[-1].max(axis=0)),
         "eigenvalue": ("direction", theory.spectrum(cov)[0]),
         "value": (("step", "head"), value), "key_norm": (("step", "head"), key_norm),
         "query_norm": (("step", "head"), query_norm), "growth_verdict": ("direction", verdict.astype(str)),
         **{name: ("direction", x) for name, x in growth.items()}},
        coords={"step": step, "head": np.arange(1, H + 1), "direction": np.arange(1, D + 1)},
        attrs=settings_attrs(S, engine=res.engine, seeds=S["seed"], runs={"attn_s": cfg.to_dict()}))
    ds.attrs["run_key"] = res.key  # the run store's entry: the same for the five pages on this run
    ds.attrs.update(aligned=ALIGNED, grown=events.GROWN, nearly_aligned=events.NEARLY_ALIGNED,
                    ungrown=events.UNGROWN, snapshot_every=int(S["snapshot_every"]),
                    published=int(presets.is_published(NAME, S)))
    ds.key_alignment.attrs["description"] = "|e_d^T k_h| / |k_h|: the key of head h against eigenvector e_d"
    ds.query_alignment.attrs["description"] = "|e_d^T q_h| / |q_h|: the query of head h against eigenvector e_d"
    ds.drop_step.attrs["description"] = "drop d of the loss: first step below the midpoint of L(M_{d-1}), L(M_d)"
    ds.key_norm.attrs["description"] = "|k_h|: the norm of the x-part of head h's key row"
    ds.query_norm.attrs["description"] = "|q_h|: the norm of the x-part of head h's query row"
    return ds


def _x_norm(W, D: int) -> np.ndarray:
    """(H,): ‖W[h, 0, :D]‖, the norm of the x-part of each rank-one key or query row (as ``events.vector_alignment``
    reads its direction)."""
    return np.linalg.norm(np.asarray(W, dtype=np.float64)[:, 0, :D], axis=1)


def _order(ds) -> list[int]:
    """The directions (from 1) in the order they were learned."""
    learned = [(int(o), int(d)) for d, o in zip(ds.direction.values, ds.learned_order.values) if o > 0]
    return [d for _, d in sorted(learned)]


def numbers(ds) -> list[dict]:
    """``numbers.json``: which direction was learned i-th (theory: the i-th largest), how far each alignment lies
    from the matching drop of the loss, the aligned head's overlap when its output scale had grown to
    ``events.GROWN`` of its largest and its output scale when it aligned, and each direction's best final alignment."""
    rows = []
    drops = ds.drop_step.values
    for i, d in enumerate(_order(ds)):
        h, s = int(ds.aligned_head.sel(direction=d)), float(ds.aligned_step.sel(direction=d))
        rows.append(dict(key=f"learned.{i + 1}", quantity=f"direction learned {i + 1}. (1 = largest eigenvalue)",
                         theory=i + 1, reproduced=d))
        if i < len(drops) and np.isfinite(drops[i]):
            rows.append(dict(key=f"aligned_minus_drop.{i + 1}",
                             quantity=f"step head {h} aligns with e_{d} − step of drop {i + 1}",
                             reproduced=s - int(drops[i])))
        for name, what in (("overlap_when_grown", f"overlap of head {h} with e_{d} when its output scale reached "
                                                  f"{ds.attrs['grown']:g} of its largest"),
                           ("size_when_aligned", f"output scale of head {h} over its largest when it aligned with "
                                                 f"e_{d}")):
            x = float(ds[name].sel(direction=d))
            if np.isfinite(x):
                rows.append(dict(key=f"{name}.e{d}", quantity=what, reproduced=x))
    for d in ds.direction.values:
        rows.append(dict(key=f"final_alignment.e{d}",
                         quantity=f"final alignment with e_{d}, best head (min of key, query)", theory=1.0,
                         reproduced=float(ds.final_alignment.sel(direction=d))))
    return rows


def table(ds):
    """Per direction in the order learned, one column each (the table is transposed so that it stays narrow however
    long its quantities' names): the head that took it, its overlap at step 0, the step it aligned and its size then,
    its overlap when it had grown, the step of the matching drop of the loss and how alignment and growth came (a
    sentence where none aligned)."""
    from IPython.display import Markdown

    order, drops = _order(ds), ds.drop_step.values
    if not order:
        return Markdown(f"*(No direction reached an overlap of {ds.attrs['aligned']:g} in this run.)*")
    cell = {d: ds.sel(direction=d) for d in order}

    def num(name, fmt, scale=None):  # the row of one variable over the directions, "–" where it is NaN
        xs = [float(cell[d][name]) for d in order]
        return [None if not np.isfinite(x) else _percent(scale * x) if scale else format(x, fmt) for x in xs]

    drop = [f"{drops[i]:.0f}" if i < len(drops) and np.isfinite(drops[i]) else "not within the run"
            for i in range(len(order))]
    rows = [("head", [str(int(cell[d].aligned_head)) for d in order]),
            ("overlap at step 0", num("overlap_at_start", ".3f")),
            (f"step overlap > {ds.attrs['aligned']:g}", num("aligned_step", ".0f")),
            ("output scale then, % of its largest", num("size_when_aligned", "", 100)),
            ("output scale then, × its value at step 0", num("growth_when_aligned", "", 1)),
            (f"overlap when the output scale reached {100 * ds.attrs['grown']:g} % of its largest",
             num("overlap_when_grown", ".3f")),
            ("step of the loss drop", drop),
            ("alignment and growth", [str(cell[d].growth_verdict.item()) for d in order])]
    columns = {"quantity": "direction, in the order learned:"}
    columns |= {f"d{d}": f"{i + 1}. $e_{d}$" for i, d in enumerate(order)}
    return MarkdownTable([dict(quantity=label, **{f"d{d}": v for d, v in zip(order, values)})
                          for label, values in rows], columns)


def growth_words(ds) -> str:
    """The page's sentence on alignment against growth (each head's output scale |v|·‖k‖·‖q‖): the learned heads
    grouped by ``growth_verdict``, with the overlaps and sizes that show it: for a head aligned from nearly the
    start, the overlaps (key, query) it started at and its size when it passed the cut as a multiple of its start;
    for a head that aligned while small, its size then both as a fraction of its largest and as a multiple of its
    size at step 0."""
    order = _order(ds)
    if not order:
        return "no head aligned, so there is no growth to read it against"
    by: dict[str, list[int]] = {}
    for d in order:
        by.setdefault(str(ds.growth_verdict.sel(direction=d).item()), []).append(d)
    aligned, grown = f"{ds.attrs['aligned']:g}", f"{100 * ds.attrs['grown']:g} %"

    def at(name: str, dirs: list[int], fmt: str = ".2f") -> str:
        return _and([f"{float(ds[name].sel(direction=d)):{fmt}}" for d in dirs])

    def heads(dirs: list[int]) -> str:
        return f"the head{'' if len(dirs) == 1 else 's'} of {_and([f'e{subscript(d)}' for d in dirs])}"

    parts = []
    if start := by.get("aligned from the start", []):
        parts.append(f"{heads(start)} start{'s' if len(start) == 1 else ''} aligned by the random draw (overlap "
                     f"{at('overlap_at_start', start)} at step 0)")
    if near := by.get("aligned from nearly the start", []):
        one = len(near) == 1
        its = "its" if one else "their"
        parts.append(f"{heads(near)} start{'s' if one else ''} nearly aligned by the random draw: from "
                     f"overlap{'' if one else 's'} {_start_overlaps(ds, near)} at step 0 "
                     f"{'it passes' if one else 'they pass'} {aligned} at step{'' if one else 's'} "
                     f"{at('aligned_step', near, '.0f')}, at {_times(ds, near)} (under {ds.attrs['ungrown']:g}: "
                     f"before {its} output had grown): aligned from nearly the start, parted only by the cut of "
                     f"{aligned} from a head aligned from the start")
    if early := by.get("aligned while small", []):
        one = len(early) == 1
        its = "its" if one else "their"
        parts.append(f"{heads(early)} align{'s' if one else ''} while {its} output is small against {its} largest: "
                     f"from overlap{'' if one else 's'} {at('overlap_at_start', early)} at step 0 "
                     f"{'it passes' if one else 'they pass'} {aligned} at {_each_percent(ds, early)} of {its} largest "
                     f"output scale, by then {_times(ds, early)}, and at {grown} of it "
                     f"{'its overlap is' if one else 'their overlaps are'} {_range(ds, 'overlap_when_grown', early)}")
    if late := by.get("grew before it aligned", []):
        one = len(late) == 1
        parts.append(f"{heads(late)} grow{'s' if one else ''} while pointing elsewhere: "
                     f"{'its overlap' if one else 'their overlaps'} with that direction {'is' if one else 'are'} "
                     f"{at('overlap_when_grown', late, '.2g')} when {'its' if one else 'their'} output scale reaches "
                     f"{grown} of its largest, and {'it passes' if one else 'they pass'} {aligned} only at "
                     f"{_percents(ds, late)} of it")
    return "; ".join(parts)


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
    return dict(rank=run["rank"], seed=run["seed"], H=H, D=D, spare=heads, aligned=ds.attrs["aligned"],
                growth=growth_words(ds), grown=f"{100 * ds.attrs['grown']:g} %",
                nearly=f"{100 * (1 - ds.attrs['nearly_aligned']):g} %", ungrown=f"{ds.attrs['ungrown']:g}",
                **which_run(bool(ds.attrs.get("published"))),
                caption_lead=published.page.caption_lead("Figure 3c", bool(ds.attrs.get("published"))),
                settings=describe(run, snapshot_every=ds.attrs["snapshot_every"]))


def _and(items: list[str]) -> str:
    """["a", "b", "c"] → "a, b and c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _start_overlaps(ds, dirs: list[int]) -> str:
    """Each direction's aligned head's overlap at step 0, the smaller of its key's and its query's, with both:
    "0.88 (key 0.88, query 0.95)"."""
    def one(d: int) -> str:
        h, cell = int(ds.aligned_head.sel(direction=d)), dict(step=ds.step.values[0], direction=d)
        key = float(ds.key_alignment.sel(head=h, **cell))
        query = float(ds.query_alignment.sel(head=h, **cell))
        return f"{float(ds.overlap_at_start.sel(direction=d)):.2f} (key {key:.2f}, query {query:.2f})"

    return _and([one(d) for d in dirs])


def _range(ds, name: str, dirs: list[int]) -> str:
    """The finite values of ``ds[name]`` over the directions ``dirs`` as "0.97" or "0.97 to 1.00" (two decimals)."""
    x = [float(ds[name].sel(direction=d)) for d in dirs]
    x = [v for v in x if np.isfinite(v)]
    if not x:
        return "not reached"
    lo, hi = f"{min(x):.2f}", f"{max(x):.2f}"
    return lo if lo == hi else f"{lo} to {hi}"


def _percent(x: float) -> str:
    """A percentage to two significant digits, whole above 10: 0.0042, 1.4, 64, 100."""
    return f"{x:.2g}" if x < 10 else f"{x:.0f}"


def _percents(ds, dirs: list[int]) -> str:
    """The aligned heads' output scales over their largest when they aligned, as one percent or a range:
    "1.4 %", "0.0042 to 1.6 %" (:func:`_percent`)."""
    values = [100 * float(ds.size_when_aligned.sel(direction=d)) for d in dirs]
    lo, hi = _percent(min(values)), _percent(max(values))
    return f"{lo} %" if lo == hi else f"{lo} to {hi} %"


def _each_percent(ds, dirs: list[int]) -> str:
    """Each aligned head's output scale over its largest when it aligned, in the order of ``dirs``: "0.0042, 0.5 and
    1.6 %" (:func:`_percent`)."""
    return f"{_and([_percent(100 * float(ds.size_when_aligned.sel(direction=d))) for d in dirs])} %"


def _times(ds, dirs: list[int]) -> str:
    """Each aligned head's output scale when it aligned over its own at step 0, in the order of ``dirs``: "1.4, 739
    and 951 times their output scale at step 0" (:func:`_percent`; "not defined" for a head whose scale was 0)."""
    x = [float(ds.growth_when_aligned.sel(direction=d)) for d in dirs]
    said = _and([_percent(v) if np.isfinite(v) else "not defined" for v in x])
    return f"{said} times {'its' if len(dirs) == 1 else 'their'} output scale at step 0"


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
