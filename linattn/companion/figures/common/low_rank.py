"""What the low-rank pages share (Figure 4, the paper's Figures 11 and 12): each curve's rests, the saddle each sits
at named by WHAT IS LEARNED there, which rests are long, as dataset variables, and a run's settings in words.

A rest (``loss_curves.subset_rests``) is time spent in a saddle's band, not a passage through it; its saddle is the
subset S of eigen-directions the heads carry together at its slowest steps (``events.learned_share`` on the weight
snapshots: ``M_m`` when S is the m largest, else the set, e.g. {1,2,3,5}), and it is long when it lasts at least
``loss_curves.LONG_FRACTION`` of the same curve's own rest at M_0 (``loss_curves.classify_long``), a yardstick
every curve carries inside its window. The paper's claim for rank-R heads is a long rest exactly where the number
of directions learned is a multiple of R (``theory.long_plateaus``): a qualitative claim, not a dwell the theory
computes, so the pages call it the paper's expectation. One function (:func:`rest_classes`) reads all of
it back from the dataset; the tables, the counts and the prose all come from it.
"""

from __future__ import annotations

import numpy as np

from .... import theory
from ....analysis import diagnostics, events, loss_curves
from ...output import saddle, words

NOT_CLASSIFIED = -1  # rest_long: a rest cut by the end of the run, or a curve with no rest at M_0 to time it by


def learned_share(result, window: int):
    """The snapshot steps below ``window`` and, at each, the share of each direction the heads of ``result`` carry
    together (``events.learned_share``; the run's own covariance and N): (steps, snapshot × direction)."""
    steps, heads = diagnostics.snapshot_heads(result, before=window)
    return steps, events.learned_share(events.direction_fractions(heads, result.datasets.cov, result.config.N))


def mask(subset) -> int:
    """A subset of directions (0-based) as one integer, bit d set for direction d (the dataset's ``rest_subset``)."""
    return int(sum(1 << int(d) for d in subset))


def subset_of(bits: int) -> tuple:
    return tuple(d for d in range(int(bits).bit_length()) if int(bits) >> d & 1)


def rest_variables(loss, results, window: int) -> tuple[dict, np.ndarray]:
    """Dataset variables of every curve's rests (``loss``: seed × rank × step, the window; ``results``: the runs,
    ``[seed][rank]``): ``learned_share`` (seed × rank × snapshot × direction) and, over a ``rest`` dimension padded
    with −1 / NaN, each rest's saddle (``rest_subset``, :func:`mask`), first and last step, level, the saddle's loss
    L(A_S), the yardstick (its curve's M_0 rest) and whether it is long (1), short (0) or not classified (−1); and the
    snapshot steps (the ``snapshot`` coordinate)."""
    grid = [[learned_share(r, window) for r in by_rank] for by_rank in results]
    snap = grid[0][0][0]
    share = np.array([[sh for _, sh in by_rank] for by_rank in grid])
    found = [[loss_curves.subset_rests(L, r.datasets.cov, r.config.N, learned=events.learned_directions(sh),
                                       learned_steps=snap)
              for L, r, (_, sh) in zip(by_L, by_r, by_g)] for by_L, by_r, by_g in zip(loss, results, grid)]
    n = max(1, max(len(f) for by_rank in found for f in by_rank))
    arrays = [[rest_arrays(rests, n) for rests in by_rank] for by_rank in found]
    variables: dict[str, tuple[tuple[str, ...], np.ndarray]] = {
        k: (("seed", "rank", "rest"), np.array([[a[k] for a in by_rank] for by_rank in arrays])) for k in arrays[0][0]}
    variables["learned_share"] = (("seed", "rank", "snapshot", "direction"), share)
    return variables, snap


def rest_arrays(rests, n: int) -> dict:
    """One curve's rests (``loss_curves.subset_rests``) as arrays of length ``n`` padded with −1 / NaN: the saddle
    (``rest_subset``, :func:`mask`), first and last step, level, the saddle's loss, expected dwell and
    ``rest_long`` (1 long, 0 short, −1 not classified)."""
    out = {k: np.full(n, -1, dtype=np.int64) for k in ("rest_subset", "rest_start", "rest_end", "rest_long")}
    out.update({k: np.full(n, np.nan) for k in ("rest_level", "rest_theory", "rest_expected")})
    for k, r in enumerate(rests):
        out["rest_subset"][k], out["rest_start"][k], out["rest_end"][k] = mask(r.subset), r.start, r.end
        out["rest_long"][k] = NOT_CLASSIFIED if r.long is None else int(r.long)
        out["rest_level"][k], out["rest_theory"][k] = r.level, r.theory
        out["rest_expected"][k] = np.nan if r.expected is None else r.expected
    return out


def curve_variables(loss, levels) -> dict:
    """The directions learned (``loss_curves.directions_learned``) and the final loss of each curve of ``loss``
    (seed × rank × step)."""
    return {"directions_learned": (("seed", "rank"), [[loss_curves.directions_learned(L, levels) for L in by_rank]
                                                      for by_rank in loss]),
            "final_loss": (("seed", "rank"), [[float(L[-1]) for L in by_rank] for by_rank in loss])}


def saddle_words(subset) -> str:
    """A saddle as the page writes it: ℳ₄ for the four largest directions, {e₁, e₂, e₃, e₅} otherwise."""
    from ...output import subscript

    subset = tuple(subset)
    if list(subset) == list(range(len(subset))):
        return saddle(len(subset))
    return "{" + ", ".join("e" + subscript(d + 1) for d in subset) + "}"


def rest_classes(ds, R: int, seed: int | None = None) -> list[dict]:
    """The rests of rank ``R`` at ``seed``, as the dataset holds them, each a dict: its saddle (``subset``, ``name``),
    whether it is in order, first and last step, dwell, level and the saddle's loss, whether it is long (True, False,
    or None: not classified), the yardstick (its M_0 rest), whether it is cut by the end of the window (``cut``:
    its dwell is then a lower bound), and whether the paper expects it long (the number of
    directions learned a multiple of R: ``theory.long_plateaus``). The one reading of the rests: the table, the counts
    and the prose all use it."""
    r = ds.sel({k: v for k, v in (("rank", R), ("seed", seed)) if k in ds.rest_subset.dims})
    D, last = ds.sizes["direction"], int(ds.step.values[-1])
    out = []
    for k in range(ds.sizes["rest"]):
        bits = int(r.rest_subset.values[k])
        if bits < 0:
            continue
        sub, verdict = subset_of(bits), int(r.rest_long.values[k])
        start, end = int(r.rest_start.values[k]), int(r.rest_end.values[k])
        out.append(dict(subset=sub, name=saddle_words(sub), in_order=list(sub) == list(range(len(sub))),
                        start=start, end=end, dwell=end - start, level=float(r.rest_level.values[k]),
                        theory=float(r.rest_theory.values[k]),
                        long=None if verdict == NOT_CLASSIFIED else bool(verdict),
                        expected=float(r.rest_expected.values[k]), cut=end >= last,
                        expected_long=len(sub) in theory.long_plateaus(D, R)))
    return out


def long_names(ds, R: int, seed: int) -> list[str]:
    """The saddles of the long rests of rank ``R`` at ``seed`` (:func:`rest_classes`), in order."""
    return [c["name"] for c in rest_classes(ds, R, seed) if c["long"]]


def rest_counts(ds, R: int) -> dict:
    """Per saddle (by name, in order of first appearance), over the seeds: the seeds where a classified rest there is
    long and those where it is short, and whether the paper expects it long (:func:`rest_classes`)."""
    out: dict[str, dict] = {}
    for sd in ds.seed.values:
        for c in rest_classes(ds, R, int(sd)):
            if c["long"] is None:
                continue
            e = out.setdefault(c["name"], dict(long=[], short=[], expected_long=c["expected_long"], dwell={}))
            e["long" if c["long"] else "short"].append(int(sd))
            e["dwell"][int(sd)] = c["dwell"]
    return out


def missing_rests(ds, R: int) -> dict:
    """{k: [seed, …]}: for each number k > 0 of directions after which the paper expects a long rest (a multiple of
    R), the seeds whose curve learned more than k directions in the window without resting anywhere after k
    (:func:`rest_classes`)."""
    D, out = ds.sizes["direction"], {}
    for k in theory.long_plateaus(D, R)[1:]:
        seeds = [int(sd) for sd in ds.seed.values
                 if int(ds.directions_learned.sel(rank=R, seed=sd)) > k
                 and not any(len(c["subset"]) == k for c in rest_classes(ds, R, int(sd)))]
        if seeds:
            out[k] = seeds
    return out


def rests_text(ds) -> str:
    """The page's sentences on the rests, per rank, from :func:`rest_counts` and :func:`missing_rests`: the saddles
    where a rest is long though the paper expects it short, and short though it expects it long, each "in n of the
    m seeds with a classified rest there"; the counts of directions after which a long rest is expected but none
    came; the out-of-order saddles a curve rested at."""
    lines = []
    for R in (int(x) for x in ds["rank"].values):
        counts, parts = rest_counts(ds, R), []
        for kind, wanted, word in (("long", False, "long where the paper expects a short rest"),
                                   ("short", True, "short where the paper expects a long rest")):
            found = [(name, e) for name, e in counts.items() if e["expected_long"] == wanted and e[kind]]
            if found:
                parts.append(f"{word}: " + join([
                    f"{name} in {len(e[kind])} of the {len(e['long']) + len(e['short'])} seeds with a classified "
                    f"rest there ({_dwells(e, kind)})" for name, e in found]))
        for k, seeds in missing_rests(ds, R).items():
            parts.append(f"nowhere after {k} direction{'s' if k > 1 else ''} learned, where the paper expects a "
                         f"long rest, at seed{'s' if len(seeds) > 1 else ''} {words(seeds)}")
        parts += cut_rests_parts(ds, R)
        odd = sorted({c["name"] for sd in ds.seed.values for c in rest_classes(ds, R, int(sd)) if not c["in_order"]})
        if odd:
            parts.append("out of order (a later direction learned before an earlier one) at " + join(odd))
        if parts:
            lines.append(f"R = {R} rests " + "; ".join(parts) + ".")
    return " ".join(lines) or "Every classified rest is long or short where the paper expects it."


def cut_rests_parts(ds, R: int) -> list[str]:
    """Phrases on rank ``R``'s rests cut by the end of the window at a saddle where the paper expects a long rest
    (:func:`rest_classes`), one per saddle: "end on ℳ₆, where the paper expects a long rest, from step 4037 at seed
    10, … to the end of the window: at least 15963, … steps", and which of them already count as long."""
    by_name: dict[str, list] = {}
    for sd in (int(x) for x in ds.seed.values):
        for c in rest_classes(ds, R, sd):
            if c["cut"] and c["expected_long"] and c["subset"]:
                by_name.setdefault(c["name"], []).append((sd, c))
    out = []
    for name, found in by_name.items():
        starts = join([f"step {c['start']} at seed {sd}" for sd, c in found])
        dwells = join([str(c["dwell"]) for _, c in found])
        long = [sd for sd, c in found if c["long"]]
        verdict = (f"; already long at seed{'s' if len(long) > 1 else ''} {words(long)}" if long
                   else f"; none yet {loss_curves.LONG_FRACTION:g} times as long as its curve's rest at ℳ₀, so the "
                        "window cannot tell whether it will be long")
        out.append(f"end on {name}, where the paper expects a long rest, from {starts} to the end of the window: "
                   f"at least {dwells} steps{verdict}")
    return out


def _dwells(e: dict, kind: str) -> str:
    return ", ".join(f"{e['dwell'][sd]} steps at seed {sd}" for sd in e[kind])


def describe_rests(ds) -> None:
    """The descriptions of :func:`rest_variables`' variables, in the dataset's attributes."""
    for k, text in (("learned_share", "Σ_h f_{h,d}: the share of direction d's fixed-point weight the heads carry"),
                    ("rest_subset", "the saddle of each rest: bit d set when direction d+1 is learned; -1: none"),
                    ("rest_start", "first step of each rest (-1: none)"), ("rest_end", "last step of each rest"),
                    ("rest_level", "the rest's loss, median over its slowest steps"),
                    ("rest_theory", "L(A_S) of the rest's saddle (theory.fixed_point_loss)"),
                    ("rest_expected", "the yardstick: the dwell of the curve's own rest at M_0 (classify_long)"),
                    ("rest_long", "1 long, 0 short, -1 not classified (cut by the end, or no rest at M_0)")):
        ds[k].attrs["description"] = text


def rest_rows(ds, R: int, key: str, where: str) -> list[dict]:
    """``numbers.json`` rows of rank ``R``'s rests at every seed (:func:`rest_classes`): each rest's level beside
    its saddle's loss L(A_S), and the long rests beside those the paper expects long (its claim, in the ``theory``
    column, since the ``paper`` column is kept for the published settings) among the classified ones
    (``key`` prefixes each key, ``where`` is added to each quantity)."""
    rows = []
    for sd in (int(x) for x in ds.seed.values):
        classes = rest_classes(ds, R, sd)
        for k, c in enumerate(classes):
            rows.append(dict(key=f"{key}.seed{sd}.rest{k + 1}",
                             quantity=f"R={R}: rest {k + 1}{where}, seed {sd}, at the saddle {c['name']} (steps "
                                      f"{c['start']}–{c['end']}); theory: L of that saddle",
                             theory=c["theory"], reproduced=c["level"]))
        judged = [c for c in classes if c["long"] is not None]
        rows.append(dict(key=f"{key}.seed{sd}.long_plateaus",
                         quantity=f"R={R}: long rests among the classified ones{where}, seed {sd} (theory column: the "
                                  "paper's claim, those after a multiple of R directions)",
                         theory=" ".join(c["name"] for c in judged if c["expected_long"]) or "none",
                         reproduced=" ".join(c["name"] for c in judged if c["long"]) or "none"))
    return rows


def long_cell(ds, R: int) -> str:
    """A table cell: each seed's long rests (:func:`long_names`), "none" where it has none, seeds separated by ;."""
    return "; ".join(", ".join(long_names(ds, R, int(sd))) or "none" for sd in ds.seed.values)


def expected_cell(ds, R: int) -> str:
    """A table cell: the saddles ℳ_k the paper expects long (k = 0, R, 2R, …: ``theory.long_plateaus``) that some
    seed's curve reached within the run (k at most its directions learned), whether or not it rested there: m = 0,
    R, 2R, … and the last, smaller group's ℳ when R does not divide D."""
    reached = int(ds.directions_learned.sel(rank=R).max())
    return ", ".join(saddle(k) for k in theory.long_plateaus(ds.sizes["direction"], R) if k <= reached) or "none"


def seed_runs(runs: dict, S: dict) -> list:
    """The runs a low-rank page declares (``runs``: its ``runs(S)``, one per seed and rank in
    :func:`.presets.sweep`'s order, seeds outer, ranks inner) from the run store, ``[i][j]``: seed ``S["seeds"][i]``,
    rank ``S["ranks"][j]``."""
    from .trainer import trained

    done, n = trained(runs, S), len(S["ranks"])
    return [done[i:i + n] for i in range(0, len(done), n)]


def drop_words(d: int) -> str:
    """Drop ``d`` (1-based) named by the loss level it crosses, "drop 4 (loss below the midpoint of L(M_3) and
    L(M_4))", not by a passage M_{d−1} → M_d: the heads may learn a later direction before an earlier one, so the
    crossing need not be the learning of direction d (``loss_curves.drop_steps``)."""
    return f"drop {d} (loss below the midpoint of L(M_{d - 1}) and L(M_{d}))"


def predicted_rows(r, R: int, key: str, which: str) -> list[dict]:
    """``numbers.json`` rows of rank ``R``'s drops (``r``: the dataset at that rank, with ``drop_step`` and
    ``drop_step_predicted`` over ``direction``) beside those predicted from the run's own initial weights; ``key``
    prefixes each row's key, ``which`` names the run in the quantity."""
    return [dict(key=f"{key}.drop{d + 1}.predicted",
                 quantity=f"R={R}: step of {drop_words(d + 1)}, {which}; theory: the population gradient "
                          "descent from the run's initial weights",
                 theory=None if np.isnan(pred_d) else pred_d, reproduced=None if np.isnan(run_d) else run_d)
            for d, (run_d, pred_d) in enumerate(zip(r.drop_step.values, r.drop_step_predicted.values))]


def gap_panel(ax, step, curves, levels, *, title: str | None = None):
    """The curves' distance to the last saddle level, L − L(M_D), on a log axis, with each saddle's own distance
    L(M_m) − L(M_D) dotted: the late saddles, crowded on a linear axis, stand apart. A curve at or below L(M_D) (a
    finite-P curve may end a little below it) leaves a gap."""
    final, gaps = levels[-1], np.asarray(levels[:-1]) - levels[-1]
    for curve in curves:
        ax.plot(step, np.where(curve - final > 0, curve - final, np.nan), color="black", linewidth=0.9)
    for g in gaps:
        ax.axhline(g, color="grey", linestyle=":", linewidth=0.7)
    ax.set_yscale("log")
    ax.set_ylim(0.3 * gaps[-1], 1.5 * gaps[0])
    ax.set_xlim(step[0], step[-1])
    if title:
        ax.set_title(title)


def describe(S: dict, *, ranks=None) -> str:
    """A low-rank run's settings in words, for a page's prose: ``"H = 9 heads of rank R = 1, 2, 4 and 8, D = 8,
    N + 1 = 32 tokens, P = 80000 training sequences, initialisation 0.005 (jan2025 scheme), learning rate 0.02,
    20001 steps, the authors' random draws, seeds 10, 11 and 12"`` (``ranks``: the list, else ``S["rank"]``)."""
    ranks = [S["rank"]] if ranks is None else list(ranks)
    P = S.get("trainset_size")
    parts = [f"H = {S['head_num']} heads of rank R = {words(ranks)}", f"D = {S['in_dim']}",
             f"N + 1 = {S['seq_len']} tokens",
             "the population loss (P = ∞)" if P is None else f"P = {P} training sequences",
             f"initialisation {S['init']:g} ({S['init_scheme']} scheme)", f"learning rate {S['lr']:g}",
             f"{S['epoch']} steps",
             "the authors' random draws" if S.get("draws", "reference") == "reference"
             else "linattn's own random streams"]
    if S.get("dtype", "float64") != "float64":
        parts.append(S["dtype"])
    seeds = S["seeds"] if "seeds" in S else [S["seed"]]
    return ", ".join(parts + [f"seed{'s' if len(seeds) > 1 else ''} {words(seeds)}"])


def saddles_words(ms) -> str:
    return join([saddle(m) for m in ms])


def join(items) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
