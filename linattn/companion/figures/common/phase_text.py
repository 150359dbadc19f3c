"""The phase diagram page's words: numbers and brackets as the page writes them, its table, and the phrases the
notebook glues into its sentences. Every verdict in them comes from a rule of
:mod:`.phase`."""

from __future__ import annotations

import numpy as np

from .phase import CANNOT_TELL, exponent_verdict, near_count


def _bracket_text(lo, hi) -> str:
    """A bracket as a table cell: "0.02–0.05", "≤ 0.02" (every trained c > 0 from the first), or "–" (none)."""
    lo, hi = float(lo), float(hi)
    if not np.isfinite(hi):
        return "–"
    return f"≤ {_c(hi)}" if not np.isfinite(lo) else f"{_c(lo)}–{_c(hi)}"


def switch_table(ds) -> list[dict]:
    """One row per P (verdicts on c > 0 only, each by the band of :func:`.phase.verdict`): where the in-weight test
    loss is clearly below the midpoint, the bracket from which the in-context one is clearly below it for good, the
    c > 0 where the in-context test loss lies within the band (cannot tell), the grid's bracket of the sample-wise
    peak of the in-context test loss in fresh sequences, and how settled the cells are."""
    rows = []
    for P in ds.trainset_size.values:
        cell = ds.sel(trainset_size=P)
        rows.append(dict(P=size_label(P), iwl=", ".join(_c(c) for c in ds.icl.values[cell.iwl_wins.values]) or "none",
                         icl=_bracket_text(cell.switch_lo, cell.switch_hi),
                         unsure=", ".join(_c(c) for c in _cannot_tell(ds, P)) or "none",
                         peak=_peak_text(ds, P),
                         settle=float(max(cell.settle_iwl.max(), cell.settle_icl.max()))))
    return rows


TABLE_COLUMNS = {"P": "P", "iwl": "in-weight wins at c > 0", "icl": "in-context wins from c between",
                 "unsure": "in-context: cannot tell at c", "peak": "in-context loss peaks between cP (largest loss)",
                 "settle": "largest change over the last 10 %"}


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


def _between(lo, hi, P, first=None, more=()) -> str:
    """A bracket as prose: "between c = 0.02 and 0.05 (4 to 10 fresh sequences)" at finite P; where no cell below
    the upper end clearly fails, "at every trained c > 0" (the upper end is ``first``, the first c > 0) or "from c =
    0.02 on"; ``more``: notes added inside the parentheses."""
    if not np.isfinite(lo):
        return "at every trained c > 0" if hi == first else f"from c = {_c(hi)} on (no smaller c clearly otherwise)"
    notes = ([f"{_fresh(lo, P)} to {_fresh(hi, P)} fresh sequences"] if np.isfinite(P) else []) + list(more)
    return f"between c = {_c(lo)} and {_c(hi)}" + (f" ({'; '.join(notes)})" if notes else "")


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
    """The range of the losses ``x`` in prose, "2.01 to 2.08"; one value only where both ends print alike."""
    lo, hi = _loss(float(x.min())), _loss(float(x.max()))
    return lo if lo == hi else f"{lo} to {hi}"


def _loss(x: float) -> str:
    """A loss in prose: 3 significant digits, powers of ten as ·10ᵏ beyond 10⁴."""
    if abs(x) < 1e3:
        return f"{x:.3g}"
    if abs(x) < 1e4:
        return f"{x:.0f}"
    k = int(np.floor(np.log10(abs(x))))
    return f"{x / 10 ** k:.2g}·10" + str(k).translate(_SUPERSCRIPT)


# ---------------------------------------------------------------- the figures


def _positive(ds) -> np.ndarray:
    return ds.icl.values[ds.icl.values > 0]


def _cannot_tell(ds, P) -> np.ndarray:
    """The c > 0 at which the in-context test loss at P lies within the band of the midpoint."""
    state = ds.icl_state.sel(trainset_size=P)
    return np.array([c for c in _positive(ds) if int(state.sel(icl=c)) == CANNOT_TELL])


def _peak_bracket(ds, P) -> tuple[int, int, int]:
    """The fresh counts of the grid's neighbours on either side of P's peak, and the peak's own."""
    fresh, peak = _grid_fresh(ds, P), _fresh(float(ds.peak_icl.sel(trainset_size=P)), P)
    j = int(np.flatnonzero(fresh == peak)[0])
    return int(fresh[j - 1]), peak, int(fresh[j + 1])


def _peak_text(ds, P) -> str:
    """A peak as a table cell: "4–20 (10: 288)", or "–" where the grid shows none."""
    c = float(ds.peak_icl.sel(trainset_size=P))
    if not np.isfinite(c):
        return "–"
    lo, at, hi = _peak_bracket(ds, P)
    return f"{lo}–{hi} ({at}: {_loss(float(ds.final_test_icl.sel(trainset_size=P, icl=c)))})"


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


def band_phrase(ds) -> str:
    """The band the verdicts use: z standard errors of the mean over the test sequences, and the SE's range at the
    cells whose in-context test loss lies within a factor 2 of the midpoint."""
    near = ds.se_test_icl.where((ds.final_test_icl < 2 * ds.midpoint) & (ds.final_test_icl > ds.midpoint / 2))
    out = (f"{ds.band_z:g} standard errors of the mean over the {int(ds.n_test)} test sequences (each SE from the "
           "per-sequence losses, less the part the in-context test set's whitened task vectors fix)")
    if bool(near.notnull().any()):
        lo, hi = _sig(float(near.min())), _sig(float(near.max()))
        out += f"; near the midpoint the SE is {lo if lo == hi else f'{lo} to {hi}'}"
    return out


def _sig(x: float) -> str:
    return f"{x:.2g}"


def switch_phrase(ds, lo: str = "switch_lo", hi: str = "switch_hi") -> str:
    """Per P, where the banded bracket ``lo``/``hi`` puts a verdict that holds for good, and the c inside it at which
    the in-context test loss cannot tell: "between c = 0.005 and 0.02 (100 to 400 fresh sequences; cannot tell at c
    = 0.01) at P = 20000"."""
    first = _positive(ds)[0]

    def text(P):
        a, b = float(ds[lo].sel(trainset_size=P)), float(ds[hi].sel(trainset_size=P))
        if not np.isfinite(b):
            return "at no trained c"
        unsure = [c for c in _cannot_tell(ds, P) if c < b and (not np.isfinite(a) or c > a)] if lo == "switch_lo" \
            else []
        return _between(a, b, P, first, [f"cannot tell at c = {_list(_c(c) for c in unsure)}"] if unsure else [])

    return _per_P((P, text(P)) for P in ds.trainset_size.values)


def iwl_wins_phrase(ds) -> str:
    """At which trained c > 0 the in-weight test loss is clearly below the midpoint, per P."""
    parts = []
    for P in ds.trainset_size.values:
        c = ds.icl.values[ds.iwl_wins.sel(trainset_size=P).values]
        fresh = f" ({_list(str(_fresh(x, P)) for x in c)} fresh sequences)" if c.size and np.isfinite(P) else ""
        parts.append((P, f"at c = {_list(_c(x) for x in c)}{fresh}" if c.size else "at no trained c > 0"))
    return _per_P(parts)


def exploded_phrase(ds) -> str:
    """The cells where both test losses lie clearly above tr Λ, per P, and the largest such in-weight test loss."""
    parts = []
    for P in ds.trainset_size.values:
        c = [x for x in _positive(ds) if bool(ds.exploded.sel(icl=x, trainset_size=P))]
        if c:
            parts.append(f"c = {_list(_c(x) for x in c)} at P = {size_label(P)}")
    if not parts:
        return "No cell with c > 0 has both test losses clearly above tr Λ."
    worst = ds.final_test_iwl.where(ds.exploded)
    at = worst.where(worst == worst.max(), drop=True)
    most = (f", the in-weight one up to {_loss(float(worst.max()))} at c = {_c(float(at.icl[0]))}, P = "
            f"{size_label(float(at.trainset_size[0]))}" if int(ds.exploded.sum()) > 1 else "")
    return (f"At {_list(parts)} both test losses lie clearly above tr Λ, the loss of predicting zero{most}: there "
            "the in-weight verdict reports a blown-up fit, not a solution that lost to another.")


def crossing_phrase(value) -> str:
    """A crossing solved in c, or why there is none."""
    value = float(value)
    return f"at c = {value:.3g}" if np.isfinite(value) else "at no c along the grid"


def peak_phrase(ds) -> str:
    """Where the grid brackets the peak of the final in-context test loss in the fresh sequences
    (:func:`.phase.sample_wise_peak`), and whether the count of free directions lies inside every bracket
    (:func:`.phase.near_count`)."""
    k = int(ds.free_directions)
    peaks = [P for P in ds.trainset_size.values if np.isfinite(float(ds.peak_icl.sel(trainset_size=P)))]
    if not peaks:
        return f"shows no peak inside the grid at any finite P, where the count of free directions is {k}"
    where = _list("between {} and {} fresh sequences at P = {} (the largest loss at {}: {})".format(
        *_peak_bracket(ds, P)[::2], size_label(P), _peak_bracket(ds, P)[1],
        _loss(float(ds.final_test_icl.sel(trainset_size=P, icl=ds.peak_icl.sel(trainset_size=P))))) for P in peaks)
    near = all(near_count(_grid_fresh(ds, P), _peak_bracket(ds, P)[1], k) for P in peaks)
    return (f"peaks {where}; the grid places a peak only between its neighbours, and the count of free directions, "
            f"{k}, {'lies inside every' if near else 'does not lie inside every'} such bracket")


def null_space_phrase(ds) -> str:
    """The count of free directions as computed: E[TTᵀ]'s eigenvalues below the tolerance, and the gap around it."""
    k = int(ds.free_directions)
    below, above = float(ds.null_flat), float(ds.null_next)
    gap = f"the largest of them {below:.1e} of the top one" if np.isfinite(below) else "none of them"
    nxt = f", the next {above:.1e}" if np.isfinite(above) else ""
    return (f"{k} of the {int(ds.n_features)} eigenvalues of the fixed task's E[TTᵀ] lie below {ds.flat_tol:g} of "
            f"the largest ({gap}{nxt})")


def column_phrase(ds) -> str:
    """The pure in-context column: where its test loss peaks over P, beside the rank that least squares puts the
    peak at (:func:`.phase.feature_rank`)."""
    if "column_P" not in ds.coords or ds.sizes.get("column_P", 0) == 0:
        return "was not trained"
    r, sizes = int(ds.feature_rank), ds.column_P.values.astype(int)
    peak = float(ds.column_peak)
    if not np.isfinite(peak):
        return (f"over P = {_list(str(P) for P in sizes)} shows no peak inside the grid (least squares puts it "
                f"at P = {r}, the rank of the fresh sequences' feature covariance)")
    P = int(peak)
    at = float(ds.column_test_icl.sel(column_P=peak))
    where = ("at that P" if P == r else "next to it (between the grid's neighbours)" if near_count(sizes, P, r)
             else "away from it")
    return (f"over P = {_list(str(P) for P in sizes)} peaks at P = {P} (test loss {_loss(at)}); least squares puts "
            f"the peak at P = {r}, the rank of the fresh sequences' feature covariance, and the grid's peak lies "
            f"{where}")


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


def exponent_phrase(escape, law: float = -1.0) -> str:
    """Each drop's exponent of its step in the initialisation scale, as the mean ± standard error over seeds of each
    seed's own log–log slope, with the verdict against the ``law`` of :func:`.phase.exponent_verdict` (2 SE):
    "-1.21 ± 0.05 (drop 1: differs), … and -0.88 ± 0.07 (drop 4: agrees)"; a drop without a fit is said in words."""
    parts = []
    for d in escape.direction.values:
        mean, se, said = exponent_verdict(escape.seed_exponent.sel(direction=d).values, law)
        if not np.isfinite(mean):
            parts.append(f"none for drop {d} (reached at fewer than two scales)")
        else:
            parts.append(f"{mean:.2f} (drop {d}: one seed only, {said})" if se is None
                         else f"{mean:.2f} ± {se:.2f} (drop {d}: {said})")
    return _list(parts) or "–"


def numbers(ds, escape=None) -> list[dict]:
    """``numbers.json``: the settled criterion, the in-context test loss at c = 1 in the population column beside
    L*, each P's banded in-context bracket (its upper end: the smallest trained c from which in-context learning
    clearly wins for good), the population crossings solved in c, the pure in-context column's peak beside the
    feature rank, and the escape-time exponents and ratios."""
    rows = [dict(key="settle.max", quantity="largest relative change of a test loss over the last "
                 f"{ds.window:.0%} of training (settled below {ds.tolerance:g})",
                 reproduced=float(max(ds.settle_iwl.max(), ds.settle_icl.max())), tolerance=ds.tolerance,
                 verdict="agrees" if bool(ds.settled.all()) else "differs")]
    for P in ds.trainset_size.values:
        slug = f"{int(P)}" if np.isfinite(P) else "inf"
        rows.append(dict(key=f"switch.P{slug}", quantity=f"P={size_label(P)}: smallest trained c > 0 from which the "
                         f"in-context test loss stays below the midpoint by more than {ds.band_z:g} SE, finished",
                         reproduced=_finite(ds.switch_hi.sel(trainset_size=P))))
    for key, what in (("population_switch", "in-context"), ("population_edge", "in-weight")):
        if np.isfinite(float(ds[key])):
            rows.append(dict(key=f"{key}.Pinf", quantity=f"P=∞: c at which the least-squares end point's {what} "
                             "population test loss crosses the midpoint, solved in c", theory=float(ds[key]),
                             no_value="the runs give a bracket on the grid of c, the P = ∞ row of the page's table, "
                             "not a solved c"))
    if "column_P" in ds.coords and ds.sizes["column_P"]:
        rows.append(dict(key="column.peak", quantity="c=1: P of the largest final in-context test loss (theory: the "
                         "rank of the feature covariance)", theory=float(ds.feature_rank),
                         reproduced=_finite(ds.column_peak)))
    if np.isinf(ds.trainset_size.values[-1]) and ds.icl.values[-1] == 1.0:
        rows.append(dict(key="final_test_icl.Pinf.c1", quantity="P=∞, c=1: final in-context test loss",
                         theory=ds.L_star, reproduced=float(ds.final_test_icl.isel(trainset_size=-1, icl=-1))))
    for d in ([] if escape is None else escape.direction.values):
        mean, se, said = exponent_verdict(escape.seed_exponent.sel(direction=d).values)
        rows.append(dict(key=f"escape.exponent.drop{d}", quantity=f"drop {d}: exponent of the drop step in the "
                         "initialisation scale, mean over seeds of each seed's log–log slope (± its standard error)",
                         theory=-1.0, reproduced=_finite(mean), standard_error=se, verdict=said))
        rows.append(dict(key=f"escape.ratio.drop{d}", quantity=f"drop {d}: median over inits of each init's median "
                         "over seeds of the simulated step / the one-head escape-time estimate",
                         reproduced=_finite(escape.ratio.sel(direction=d))))
        rows.append(dict(key=f"escape.predicted_ratio.drop{d}", quantity=f"drop {d}: median over every run of its "
                         "simulated step / the step predicted from its own initial weights",
                         reproduced=_finite(escape.predicted_ratio.sel(direction=d))))
    return rows


def _finite(x):
    x = float(x)
    return x if np.isfinite(x) else None
