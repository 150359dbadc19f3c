"""The paper's Figure 11 (appendix F.4): inside a rank-R ATTN_S head whose value weight has grown, the next
key-query directions are learned quickly, which is why only the plateaus at multiples of the rank are long.

Figure 4's run of one rank (``rank``) through the run store, with its value weights at every step and its weights
every ``snapshot_every`` steps. For every head h and eigen-direction e_d of the input covariance, the fraction of the
fixed point's weight on e_d the head carries, f_{h,d} = λ_d c_d · e_dᵀ A_h e_d (``events.direction_fractions``,
paper normalisation; rotation-free, so meaningful for any rank); a head has learned a direction when it carries more
than half of it (``events.first_crossings``, ``events.heads_in_order``). Values in the paper's normalisation
(``theory.weight_scale_to_paper``), each head's sign so that its final value is positive.
"""

from __future__ import annotations

import numpy as np

from ... import theory
from ...analysis import diagnostics, events, loss_curves
from .. import presets, published
from ..output import MarkdownTable
from ..output import words as list_words
from .common import preset_blocks
from .common.frame import settings_attrs
from .common.low_rank import describe, describe_rests, rest_arrays, rest_classes
from .common.trainer import train

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {
    "quick": dict(preset_blocks.LOW_RANK_QUICK, rank=4, track_value=True, snapshot_every=20, seed=10),
    "paper": dict(preset_blocks.LOW_RANK_PAPER, rank=4, track_value=True, snapshot_every=20, seed=10),
}
TOLERANCES = [preset_blocks.PLATEAUS]
THRESHOLD = 0.5  # a head has learned a direction when it carries more than this fraction of it
# settings of a reader's own the page must stay true at (each cheap at the quick preset)
KNOB_CASES = (dict(in_dim=4, head_num=3, rank=2, epoch=1501, snapshot_every=10),
              dict(in_dim=5, head_num=4, rank=3, epoch=1501, snapshot_every=10))



def runs(S: dict) -> dict:
    """The one run (rank ``rank``, its value weights and snapshots recorded)."""
    return preset_blocks.sweep(S)


def compute(S: dict):
    """The run's training loss (``train_loss``: step), every head's value weight (``value``: step × head), the
    fraction of each direction every head carries at each weight snapshot (``fraction``: snapshot × head ×
    direction; the ``snapshot`` coordinate is the step), the step at which each head first carries more than half
    of each direction (``learn_step``: head × direction, NaN where it never does), the directions learned by the
    end (from the loss) and the theory's saddle losses (``plateau_theory``: m) and eigenvalues."""
    import xarray as xr

    res, = train(runs(S), S).values()
    cfg, step, loss = res.config, res.history.step, res.history.train_loss
    cov, N = res.datasets.cov, cfg.N
    snapshots = res.snapshots_of(diagnostics.snapshot_fn(N, normalize=cfg.normalize), arrays=True)
    snap_steps = np.array([s for s, _ in snapshots])
    heads = np.array([v["heads"] for _, v in snapshots])  # (snapshots, H, D, D), paper normalisation
    fraction = events.direction_fractions(heads, cov, N)
    values = res.history.values * theory.weight_scale_to_paper(cfg.model, N, normalize=cfg.normalize)
    values = values * np.sign(values[-1])  # final value positive (v k qᵀ is unchanged when v and k both flip)
    H, D = fraction.shape[1], fraction.shape[2]
    learn_step = np.full((H, D), np.nan)
    for (h, d), s in events.first_crossings(fraction, THRESHOLD, snap_steps).items():
        learn_step[h, d] = s
    levels = theory.plateau_losses(cov, N)
    found = loss_curves.subset_rests(loss, cov, N, steps=step,
                                     learned=events.learned_directions(events.learned_share(fraction)),
                                     learned_steps=snap_steps)
    rests = {k: ("rest", v) for k, v in rest_arrays(found, max(1, len(found))).items()}
    ds = xr.Dataset(
        {**rests, "train_loss": ("step", loss), "value": (("step", "head"), values),
         "fraction": (("snapshot", "head", "direction"), fraction),
         "learn_step": (("head", "direction"), learn_step),
         "directions_learned": loss_curves.directions_learned(loss, levels),
         "plateau_theory": ("m", levels), "eigenvalue": ("direction", theory.spectrum(cov)[0])},
        coords={"step": step, "snapshot": snap_steps, "head": np.arange(1, H + 1), "direction": np.arange(1, D + 1),
                "m": np.arange(len(levels))},
        attrs=settings_attrs(S, engine=res.engine, seeds=S["seed"], runs={"attn_s": cfg.to_dict()}))
    ds.attrs.update(threshold=THRESHOLD, published=int(presets.is_published(NAME, S)))
    ds.value.attrs["description"] = "value weight of each head, paper normalisation, sign so the final value is > 0"
    ds.fraction.attrs["description"] = "f_{h,d} = λ_d c_d e_dᵀ A_h e_d: the share of direction d head h carries"
    ds.snapshot.attrs["description"] = "the step of each weight snapshot"
    ds.learn_step.attrs["description"] = f"first snapshot step at which the head carries more than {THRESHOLD} of it"
    ds["learned_share"] = (("snapshot", "direction"), events.learned_share(fraction))
    describe_rests(ds)
    return ds


def learners(ds) -> list[tuple[int, list[int], list[int]]]:
    """Every head that learned a direction: (head, its directions in the order it learned them, the step of each),
    heads in the order of their first one; heads and directions counted from 1 as in the dataset."""
    crossings = {(int(h), int(d)): int(ds.learn_step.sel(head=h, direction=d))
                 for h in ds["head"].values for d in ds.direction.values
                 if np.isfinite(ds.learn_step.sel(head=h, direction=d))}
    return events.heads_in_order(crossings)


def numbers(ds) -> list[dict]:
    """``numbers.json``: per learning head, its directions in order, the step of its first and how long its later
    ones took relative to the first wait; the final loss beside the saddle of the directions learned."""
    rows: list[dict] = []
    for h, dirs, s in learners(ds):
        rows.append(dict(key=f"head{h}.directions", quantity=f"head {h}: directions learned (in order)",
                         reproduced=" ".join(str(d) for d in dirs)))
        rows.append(dict(key=f"head{h}.first_step", quantity=f"head {h}: step its first direction is learned",
                         reproduced=s[0]))
        if len(s) > 1:
            rows.append(dict(key=f"head{h}.later_span",
                             quantity=f"head {h}: steps from its first to its last direction "
                                      f"(relative to the first delay; theory: short)",
                             reproduced=(s[-1] - s[0]) / max(s[0], 1)))
    for k, c in enumerate(rest_classes(ds, words(ds)["R"])):
        rows.append(dict(key=f"rest{k + 1}", quantity=f"rest {k + 1}, at the saddle {c['name']} (steps {c['start']}–"
                                                     f"{c['end']}); theory: L of that saddle",
                         theory=c["theory"], reproduced=c["level"]))
    learned = int(ds.directions_learned)
    rows.append(dict(key="final_loss",
                     quantity=f"final loss (theory: L(M_{learned}), the saddle after the {learned} directions learned)",
                     theory=ds.plateau_theory.sel(m=learned), reproduced=ds.train_loss.isel(step=-1)))
    return rows


def head_table(ds):
    """Per learning head: its directions in order, the step of the first and the steps from the first to the last
    (None when it learned no direction: the page says so instead)."""
    found = learners(ds)
    if not found:
        return None
    return MarkdownTable([dict(head=h, dirs=", ".join(f"$e_{d}$" for d in dirs), first=steps[0],
                               span=steps[-1] - steps[0] if len(steps) > 1 else None) for h, dirs, steps in found],
                         {"head": "head", "dirs": "directions learned, in order", "first": "step of the first",
                          "span": "steps from the first to the last"}, {"first": ".0f", "span": ".0f"})


def summary(ds) -> str:
    """The page's sentences on the claim: how many heads learned something, which learned more than one direction
    quickly after their first, and which did not (with, at the published settings, our reading of why)."""
    found, H = learners(ds), ds.sizes["head"]
    several = [(h, dirs, steps) for h, dirs, steps in found if len(steps) > 1]
    fast = [h for h, _, steps in several if steps[-1] - steps[0] < steps[0]]
    slow = [(h, dirs, steps) for h, dirs, steps in several if steps[-1] - steps[0] >= steps[0]]
    text = (f"In this run {len(found)} of the {H} heads {'carries' if len(found) == 1 else 'carry'} more than half "
            f"of some direction, and {len(several)} {'learns' if len(several) == 1 else 'learn'} more than one. ")
    if fast:
        text += (f"The claim holds for head{'s' if len(fast) > 1 else ''} {list_words(fast)}: "
                 f"{'their' if len(fast) > 1 else 'its'} later directions all follow within less than the wait for "
                 f"{'their' if len(fast) > 1 else 'its'} first. ")
    text += "".join(f"Head {h}'s last direction, $e_{dirs[-1]}$, comes {steps[-1] - steps[0]} steps after its first, "
                    f"not sooner than its first wait of {steps[0]} steps. " for h, dirs, steps in slow)
    if slow and ds.attrs["published"]:
        text += ("Such a late direction is one of small eigenvalue: a grown value weight makes its saddle a strict one "
                 "(two factors left to grow, not three), but the growth rate along a direction is still proportional "
                 "to $\\lambda^2$, so a direction of small eigenvalue is learned slowly even by a grown head.")
    return text.strip()


def rests_words(ds) -> str:
    """The page's sentence on where the loss rests, each rest's saddle named by what the heads carry there
    (:func:`~.common.low_rank.rest_classes`), with the out-of-order ones said as such."""
    classes = rest_classes(ds, words(ds)["R"])
    text = ("The loss rests at " + ", ".join(f"{c['name']} (steps {c['start']}–{c['end']}, loss {c['level']:.3f})"
                                              for c in classes) + "."
            if classes else "The loss does not rest at any saddle in this run.")
    first = events.learned_steps(ds.learned_share.values, ds.snapshot.values)
    for d, e in events.out_of_order(first):
        subset = [int(k) for k in np.flatnonzero(first <= first[e])]  # what is learned once e is
        when = f"step {first[d]:.0f}" if np.isfinite(first[d]) else "not within the run"
        text += (f" The heads together learn e{_sub(e + 1)} (more than half of it carried from step {first[e]:.0f}) "
                 f"before e{_sub(d + 1)} ({when}): from step {first[e]:.0f} they carry "
                 "{" + ", ".join(f"e{_sub(k + 1)}" for k in subset) + "}"
                 f", the saddle with L = {theory.fixed_point_loss(_cov_of(ds), _N_of(ds), subset):.3f}, not "
                 f"ℳ{_sub(len(subset))} (L = {float(ds.plateau_theory.sel(m=len(subset))):.3f}).")
    for c in (c for c in classes if not c["in_order"]):
        missing = sorted(set(range(max(c["subset"]) + 1)) - set(c["subset"]))
        text += (f" At {c['name']} the heads carry e{_sub(max(c['subset']) + 1)} but not "
                 + ", ".join(f"e{_sub(d + 1)}" for d in missing)
                 + f": a saddle out of the order of the eigenvalues, with L = {c['theory']:.3f}, not "
                 f"L(ℳ{_sub(len(c['subset']))}) = {float(ds.plateau_theory.sel(m=len(c['subset']))):.3f}, "
                 "though its level lies in that saddle's band.")
    return text


def _cov_of(ds) -> np.ndarray:
    """The run's covariance in its eigenbasis (the losses of the saddles depend on its eigenvalues alone)."""
    return np.diag(ds.eigenvalue.values)


def _N_of(ds) -> int:
    import json

    return int(json.loads(ds.attrs["settings"])["seq_len"]) - 1


def _sub(n: int) -> str:
    from ..output import subscript

    return subscript(n)


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``)."""
    import json

    S = json.loads(ds.attrs["settings"])
    return dict(R=S["rank"], H=ds.sizes["head"], D=ds.sizes["direction"], settings=describe(S),
                snapshot_every=S["snapshot_every"],
                caption_lead=published.page.caption_lead("Figure 11", bool(ds.attrs["published"])),
                setting_note=("These are Figure 4's published settings for this rank." if ds.attrs["published"]
                              else "These are not Figure 4's published settings."))


def plot(ds):
    """Top: the training loss with the saddle losses. Below, one row per head that learned a direction: the
    fraction of each direction it carries (those it ever carries more than a fifth of) and its value weight
    (dashed, scaled to its maximum)."""
    import matplotlib.pyplot as plt

    from ..plotting import plateau_labels, theory_axis

    R, H, D = words(ds)["R"], ds.sizes["head"], ds.sizes["direction"]
    levels, step = ds.plateau_theory.values, ds.step.values
    active = [h for h, _, _ in learners(ds)]
    colors = plt.cm.viridis(np.linspace(0.0, 0.9, D))
    n = max(1, len(active))
    fig, axes = plt.subplots(1 + n, 1, figsize=(6.2, 2.4 + 1.3 * n), sharex=True, layout="constrained",
                             gridspec_kw=dict(height_ratios=[1.6] + [1] * n))
    ax = axes[0]
    ax.plot(step, ds.train_loss.values, color="black", linewidth=1.3)
    ax.set_ylim(0, 1.08 * levels[0])
    ax.set_ylabel("loss")
    ax.set_title(f"ATTN$_\\mathrm{{S}}$, rank $R = {R}$, $H = {H}$, $D = {D}$")
    theory_axis(ax, levels, plateau_labels(len(levels)))
    for ax, h in zip(axes[1:], active):
        for i, d in enumerate(ds.direction.values):
            f = ds.fraction.sel(head=h, direction=d).values
            if f.max() > 0.2:
                ax.plot(ds.snapshot.values, f, color=colors[i], linewidth=1.3, label=f"$e_{d}$")
        v = ds.value.sel(head=h).values
        ax.plot(step, v / v.max(), color="0.3", linestyle="--", linewidth=0.9, label="$v_h$ / max")
        ax.set_ylim(-0.05, 1.15)
        ax.set_ylabel(f"head {h}")
    axes[-1].set_xlabel("step")
    axes[-1].set_xlim(step[0], step[-1])
    # one legend for all heads: a direction has the same colour in every row
    handles = [plt.Line2D([], [], color=colors[i], linewidth=1.3, label=f"$e_{d}$")
               for i, d in enumerate(ds.direction.values)]
    handles.append(plt.Line2D([], [], color="0.3", linestyle="--", linewidth=0.9, label="$v_h$ / max"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 5))
    return fig
