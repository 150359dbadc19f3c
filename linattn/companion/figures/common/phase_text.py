"""The phase diagram page's words: numbers and brackets as the page writes them, its table, and the phrases the
notebook glues into its sentences. Every verdict in them comes from a rule of
:mod:`.phase`."""

from __future__ import annotations

import numpy as np

from .phase import near_count, settling_step


def _bracket_text(lo, hi) -> str:
    """A bracket as a table cell: "0.02–0.05", "≤ 0.02" (every trained c > 0 from the first), or "–" (none)."""
    lo, hi = float(lo), float(hi)
    if not np.isfinite(hi):
        return "–"
    return f"≤ {_c(hi)}" if not np.isfinite(lo) else f"{_c(lo)}–{_c(hi)}"


def switch_table(ds) -> list[dict]:
    """One row per P (verdicts on c > 0 only): where the in-weight test loss is below the midpoint, the bracket from
    which the in-context one is below it for good (finished, the theory's end point, at the published horizon), the
    sample-wise peak of the in-context test loss in fresh sequences, and how settled the cells are."""
    rows = []
    for P in ds.trainset_size.values:
        cell = ds.sel(trainset_size=P)
        wins = ds.icl.values[cell.iwl_wins.values]
        peak = float(cell.peak_icl)
        rows.append(dict(P=size_label(P), iwl=", ".join(_c(c) for c in wins) or "none",
                         icl=_bracket_text(cell.switch_lo.isel(step=-1), cell.switch_hi.isel(step=-1)),
                         theory=_bracket_text(cell.theory_lo, cell.theory_hi),
                         published=_bracket_text(cell.switch_lo.sel(step=ds.epoch), cell.switch_hi.sel(step=ds.epoch)),
                         peak="–" if not np.isfinite(peak) else
                         f"{_fresh(peak, P)} ({_loss(float(cell.final_test_icl.sel(icl=peak)))})",
                         settle=float(max(cell.settle_iwl.max(), cell.settle_icl.max()))))
    return rows


TABLE_COLUMNS = {"P": "P", "iwl": "in-weight wins at c > 0", "icl": "in-context wins from c between",
                 "theory": "theory (t → ∞)", "published": "the same at the epoch",
                 "peak": "in-context loss peaks at cP (loss)", "settle": "largest change over the last 10 %"}


def size_label(P) -> str:
    """P as the page writes it: a whole number, or ∞ for the population."""
    return "∞" if not np.isfinite(P) else f"{int(P)}"


def _c(c) -> str:
    return f"{c:.2g}"


def _list(items, last="and") -> str:
    items = list(items)
    if not items:
        return ""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def _steps(n) -> str:
    """A step count as prose: a power of ten as 10ᵏ, a count from 10⁴ on as 1.6·10⁵, else the whole number (no
    thousands separators: myst-nb reads a glued "5,000" as the tuple (5, 0))."""
    k = np.log10(n)
    if abs(k - round(k)) < 1e-12:
        return "10" + str(int(round(k))).translate(_SUPERSCRIPT)
    return _loss(float(n)) if n >= 1e4 else f"{int(n)}"


def _fresh(c, P) -> int:
    return int(np.floor(c * P + 1e-9))


def _between(lo, hi, P) -> str:
    """A bracket as prose: "between c = 0.02 and 0.05 (4 to 10 fresh sequences)" at finite P."""
    if not np.isfinite(lo):
        return f"at every trained c > 0 (from {_c(hi)})"
    fresh = f" ({_fresh(lo, P)} to {_fresh(hi, P)} fresh sequences)" if np.isfinite(P) else ""
    return f"between c = {_c(lo)} and {_c(hi)}{fresh}"


def _per_P(pairs, every: bool = True) -> str:
    """"between … at P = 200 and between … at P = ∞"; one phrase "… at every P" where all say the same and
    ``every`` (the pairs cover every P of the grid)."""
    pairs = list(pairs)
    if every and len(pairs) > 1 and len({text for _, text in pairs}) == 1:
        return f"{pairs[0][1]} at every P"
    return _list(f"{text} at P = {size_label(P)}" for P, text in pairs)


def _grid_fresh(ds, P) -> np.ndarray:
    return np.array([_fresh(c, P) for c in ds.icl.values if c > 0])


def _range(x) -> str:
    lo, hi = float(x.min()), float(x.max())
    return _loss(lo) if np.isclose(lo, hi, rtol=0.05) else f"{_loss(lo)} to {_loss(hi)}"


def _loss(x: float) -> str:
    """A loss in prose: 3 significant digits, powers of ten as ·10ᵏ beyond 10⁴."""
    if abs(x) < 1e4:
        return f"{x:.3g}"
    k = int(np.floor(np.log10(abs(x))))
    return f"{x / 10 ** k:.2g}·10" + str(k).translate(_SUPERSCRIPT)


# ---------------------------------------------------------------- the figures


def _final(ds, key: str, P) -> float:
    return float(ds[key].sel(trainset_size=P).isel(step=-1))


def settled_phrase(ds) -> str:
    """"all 8 cells (largest change 3.1e-05)", or which cells still moved and by how much."""
    n, settled = int(ds.settled.size), int(ds.settled.sum())
    change = np.fmax(ds.settle_iwl, ds.settle_icl)
    if settled == n:
        return f"all {n} cells (the largest change: {float(change.max()):.1e})"
    bad = [f"c = {_c(c)}, P = {size_label(P)}" for c in ds.icl.values for P in ds.trainset_size.values
           if not bool(ds.settled.sel(icl=c, trainset_size=P))]
    return (f"{settled} of the {n} cells; {_list(bad)} still moved by up to "
            f"{float(change.where(~ds.settled).max()):.1%} of its final value")


def switch_phrase(ds, lo: str = "switch_lo", hi: str = "switch_hi", step=None) -> str:
    """Per P, where the bracket ``lo``/``hi`` (at ``step``; None: the last) puts a verdict that holds for good:
    "between c = 0.02 and 0.05 (4 to 10 fresh sequences) at P = 200 and at no trained c at P = ∞"."""
    def at(key, P):
        x = ds[key].sel(trainset_size=P)
        if "step" not in x.dims:
            return float(x)
        return float(x.isel(step=-1) if step is None else x.sel(step=step))

    return _per_P((P, _between(at(lo, P), at(hi, P), P) if np.isfinite(at(hi, P)) else "at no trained c")
                  for P in ds.trainset_size.values)


def theory_phrase(ds) -> str:
    """Where the theory's bracket (the least-squares end point's) is the finished runs' one, and where not."""
    same, other = [], []
    for P in ds.trainset_size.values:
        run = (_final(ds, "switch_lo", P), _final(ds, "switch_hi", P))
        end = (float(ds.theory_lo.sel(trainset_size=P)), float(ds.theory_hi.sel(trainset_size=P)))
        (same if np.allclose(run, end, equal_nan=True) else other).append(P)
    out = "the same bracket at P = " + _list(size_label(P) for P in same) if same else "no bracket of the runs"
    if other:
        out += "; at P = " + _list(size_label(P) for P in other) + " it differs (the table's theory column)"
    return out


def iwl_wins_phrase(ds) -> str:
    """At which trained c > 0 the in-weight test loss is below the midpoint, per P."""
    parts = []
    for P in ds.trainset_size.values:
        c = ds.icl.values[ds.iwl_wins.sel(trainset_size=P).values]
        fresh = f" ({_list(str(_fresh(x, P)) for x in c)} fresh sequences)" if c.size and np.isfinite(P) else ""
        parts.append((P, f"at c = {_list(_c(x) for x in c)}{fresh}" if c.size else "at no trained c > 0"))
    return _per_P(parts)


def crossing_phrase(value) -> str:
    """A crossing solved in c, or why there is none."""
    value = float(value)
    return f"at c = {value:.2g}" if np.isfinite(value) else "at no c found in the grid's bracket"


def peak_phrase(ds) -> str:
    """Where the final in-context test loss peaks in the fresh sequences (:func:`.phase.sample_wise_peak`), and
    whether every peak sits next to the count of free directions (:func:`.phase.near_count`)."""
    k = int(ds.free_directions)
    peaks = [(P, float(ds.peak_icl.sel(trainset_size=P))) for P in ds.trainset_size.values]
    peaks = [(P, c) for P, c in peaks if np.isfinite(c)]
    if not peaks:
        return f"shows no peak inside the grid at any finite P (the count of free directions: {k})"
    where = _list(f"{_fresh(c, P)} fresh sequences at P = {size_label(P)} "
                  f"({_loss(float(ds.final_test_icl.sel(trainset_size=P, icl=c)))})" for P, c in peaks)
    near = all(near_count(_grid_fresh(ds, P), _fresh(c, P), k) for P, c in peaks)
    return (f"peaks at {where}; the fixed task's sequences leave {k} directions of ATTN_M's features to the fresh "
            f"ones, and {'every peak sits next to that count' if near else 'not every peak sits next to that count'}")


def limit_phrase(ds) -> str:
    """How many cells are flat (no unique end point), and how close the others end to their end point."""
    flat, unique = int(ds.flat.sum()), ~ds.flat
    out = (f"{flat} of the {int(ds.flat.size)} cells {'has' if flat == 1 else 'have'} a flat training loss (no "
           "unique end point)")
    if bool(unique.any()):
        rel = max(float((abs(ds[f"final_{k}"] - ds[f"limit_{k}"]) / ds[f"limit_{k}"]).where(unique).max())
                  for k in ("test_iwl", "test_icl"))
        out += f", and the others' test losses end within {rel:.1e} (relative) of theirs"
    return out


def stage_phrase(ds) -> str:
    """Per P, whether the finished runs switch at a smaller, the same or a larger c than at the epoch."""
    parts = []
    for P in ds.trainset_size.values:
        end, then = _final(ds, "switch_hi", P), float(ds.switch_hi.sel(trainset_size=P, step=ds.epoch))
        if not (np.isfinite(end) and np.isfinite(then)):
            continue
        parts.append((P, "at the same c as at the epoch" if end == then else
                      f"at a {'smaller' if end < then else 'larger'} c than at the epoch"))
    if not parts:
        return "nowhere both switch on the grid"
    return _per_P(parts, every=len(parts) == ds.sizes["trainset_size"])


def settling_phrase(ds) -> str:
    """Per P, the first recorded step from which the in-context bracket stays where it ends."""
    steps = settling_step(ds)
    return _list(f"{_steps(s)} at P = {size_label(P)}" for P, s in steps.items()) or "never (no final bracket)"


def numbers(ds, escape=None) -> list[dict]:
    """``numbers.json``: the settled criterion, the in-context test loss at c = 1 in the population column beside
    L*, each P's in-context bracket (its upper end: the smallest trained c from which in-context learning wins for
    good) beside the theory's end point's, the population crossings solved in c, and the escape-time exponents and
    ratios."""
    rows = [dict(key="settle.max", quantity="largest relative change of a test loss over the last "
                 f"{ds.window:.0%} of training (settled below {ds.tolerance:g})",
                 reproduced=float(max(ds.settle_iwl.max(), ds.settle_icl.max())), tolerance=ds.tolerance,
                 verdict="agrees" if bool(ds.settled.all()) else "differs")]
    for P in ds.trainset_size.values:
        c = float(ds.switch_hi.sel(trainset_size=P).isel(step=-1))
        slug = f"{int(P)}" if np.isfinite(P) else "inf"
        rows.append(dict(key=f"switch.P{slug}", quantity=f"P={size_label(P)}: smallest trained c > 0 from which the "
                         "in-context test loss stays below the midpoint, finished",
                         theory=_finite(ds.theory_hi.sel(trainset_size=P)), reproduced=_finite(c)))
    for key, what in (("population_switch", "in-context"), ("population_edge", "in-weight")):
        if np.isfinite(float(ds[key])):
            rows.append(dict(key=f"{key}.Pinf", quantity=f"P=∞: c at which the least-squares end point's {what} "
                             "test loss crosses the midpoint, solved in c", theory=float(ds[key])))
    if np.isinf(ds.trainset_size.values[-1]) and ds.icl.values[-1] == 1.0:
        rows.append(dict(key="final_test_icl.Pinf.c1", quantity="P=∞, c=1: final in-context test loss",
                         theory=ds.L_star, reproduced=float(ds.final_test_icl.isel(trainset_size=-1, icl=-1))))
    for d in ([] if escape is None else escape.direction.values):
        rows.append(dict(key=f"escape.exponent.drop{d}", quantity=f"drop {d}: exponent of the drop step in the "
                         "initialisation scale", theory=-1.0, reproduced=_finite(escape.exponent.sel(direction=d))))
        rows.append(dict(key=f"escape.ratio.drop{d}", quantity=f"drop {d}: median simulated step / the one-head "
                         "escape-time estimate", reproduced=_finite(escape.ratio.sel(direction=d))))
        rows.append(dict(key=f"escape.predicted_ratio.drop{d}", quantity=f"drop {d}: median simulated step / the "
                         "step predicted from each run's own initial weights",
                         reproduced=_finite(escape.predicted_ratio.sel(direction=d))))
    return rows


def _finite(x):
    x = float(x)
    return x if np.isfinite(x) else None
