"""How ours compare with the published readings (:mod:`linattn.companion.published.readings`): measuring the same
quantity on our curves, the difference and its verdict, Figure 3a's one-to-one pairing, and the claims of the
paper's text.

Every comparison row carries its difference (ours minus the reading, 0 inside a range), that difference in pixels of
the image, its tolerance (one pixel, or the reading's own ±), its band and a verdict by
:mod:`linattn.companion.uncertainty` (ours and the published curve need not come from the same sample, since numpy's
draw of the tokens goes through an SVD whose signs depend on the LAPACK library):

* a **test loss** whose per-sequence losses we have (at the start or the end of the run) is judged in the band
  tolerance + 2·√(se² + se²): ours and the published test set, as large, each with the standard error of our
  per-sequence losses;
* a **training loss** gets no sampling-error agreement (it is biased): its band is the tolerance; beyond it, but within
  the spread two independent training sets would show (:func:`~linattn.companion.uncertainty.training_loss_margin`),
  it *cannot tell*;
* a **step** is judged in its tolerance; beyond it, but within the shift the finite training set alone gives that step
  (ours against the population twin of our run, where the page has one), it *cannot tell*;
* every reading carries one more pixel, the ± of placing the published point itself
  (:func:`reading_margin`): beyond the band but within it, a difference *cannot tell*;
* a digitisation **offset** shared by many readings (:func:`~linattn.companion.uncertainty.systematic_offset`) is
  measured, stated, and removed before the difference is judged.

Figure 3a draws six seeds in one colour (and seed 0 twice), so its published crossings cannot be tied to seeds: our
curves are paired with them one to one by an optimal assignment (:func:`match_one_to_one`), each published crossing
used once.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ...analysis.loss_curves import first_step_below
from ..output import words
from ..uncertainty import (
    AGREES,
    CANNOT_TELL,
    DIFFERS,
    difference_band,
    spread,
    systematic_offset,
    training_loss_margin,
    verdict,
)
from .readings import (
    FIG1B,
    FIG1B_IMAGE,
    FIG3A_CROSSINGS,
    FIG3A_IMAGE,
    FIG3A_LAST_STEP,
    FIG3A_PLATEAU_READINGS,
    FIG3A_STILL_ON_M3,
    FIG4_R1_PLATEAUS,
    FIG5_ATTN_M_DROPS,
    FIG14,
    FIG14_IMAGE,
    Crossing,
    Image,
    Reading,
)

# ----------------------------------------------------------------------------------------------- measuring ours

def _window(steps: np.ndarray, span) -> np.ndarray:
    if span is None:
        return np.ones(steps.size, dtype=bool)
    return (steps >= span[0]) & (steps <= span[1])


def measure(curves: dict, how: tuple, curve: str, steps=None) -> float:
    """Our value of a reading's ``how`` (see :class:`Reading`) on ``curves[curve]``; NaN where the event does not
    happen (a level never crossed). ``steps`` (default 0, 1, 2, …) is the step of each sample."""
    y = np.atleast_1d(np.asarray(curves[curve], dtype=np.float64))
    x = np.arange(y.size) if steps is None else np.asarray(steps)
    kind, arg = how[0], (how[1] if len(how) > 1 else None)
    if kind == "below":
        return first_step_below(y, arg, x)
    if kind == "above":
        return first_step_below(-y, -arg, x)
    if kind == "at":
        hit = np.flatnonzero(x == arg)
        return float(y[hit[0]]) if hit.size else math.nan
    if kind == "final":
        return float(y[-1])
    if kind == "lag":
        return _crossing_lag(y, np.asarray(curves["reference"], dtype=np.float64), *arg, steps=x)
    inside = _window(x, arg)
    if not inside.any():
        return math.nan
    if kind in ("mean", "median", "min", "max"):
        return float(getattr(np, kind)(y[inside]))
    if kind == "argmin":
        return float(x[inside][np.argmin(y[inside])])
    raise ValueError(f"unknown reading kind {kind!r}")


def _crossing_lag(curve, reference, low: float, high: float, steps=None, levels: int = 50) -> float:
    """The mean over ``levels`` loss levels evenly spaced in [low, high] of (the first step ``curve`` is below the
    level) − (the first step ``reference`` is): positive when ``curve`` falls later. NaN if either never gets there."""
    grid = np.linspace(low, high, levels)
    return float(np.mean([first_step_below(curve, v, steps) - first_step_below(reference, v, steps) for v in grid]))


def difference(ours: float, value) -> float:
    """Ours minus the reading: 0 inside a ``(low, high)`` range, else the signed distance to it. NaN when ours is
    missing."""
    if ours is None or not math.isfinite(ours):
        return math.nan
    if isinstance(value, tuple):
        low, high = value
        return 0.0 if low <= ours <= high else ours - (low if ours < low else high)
    return float(ours - value)


def pixels(x: float, unit: str, image: Image) -> float:
    """``x`` in pixels of ``image``: only a step or a loss has a pixel (NaN for a count, or a missing ``x``)."""
    return x / image.pixel(unit) if unit in ("step", "loss") and x is not None and math.isfinite(x) else math.nan


def reading_margin(unit: str, image: Image) -> float:
    """The ± of a reading itself: a value read off ``image`` is placed to within one pixel, on top of the band that
    the comparison grants (its resolution and sampling error); a difference beyond the band but within this further
    pixel *cannot tell*. 0 for a count (counted, not read off an axis)."""
    return image.pixel(unit) if unit in ("step", "loss") else 0.0


def judged_difference(row: dict) -> float:
    """The difference a row's verdict judges: ours − the reading, less the ``offset`` removed first (NaN where
    missing). The page's table, ``numbers.json`` and the report read it from here."""
    d = row.get("difference")
    d = math.nan if d is None else float(d)
    return d - float(row.get("offset") or 0.0)


def _check_row(image: Image, panel: str, what: str, published: str, paper, ours, diff: float, unit: str,
               tolerance: float, standard_error=None, unresolved=0.0, offset=0.0) -> dict:
    """One comparison row: the reading and ours, their difference in the unit and in pixels of ``image``, the
    tolerance, the standard error of the difference where the quantity has one (its band is then tolerance + 2 ×
    it), the ``unresolved`` margin beyond the band (*cannot tell* there: the given margin plus the reading's own
    pixel, :func:`reading_margin`), the ``offset`` removed before judging, and the verdict
    (:func:`linattn.companion.uncertainty.verdict` of :func:`judged_difference`). Rows of this shape feed the page's
    table, its prose (:func:`summary`) and ``numbers.json`` (:func:`number_rows`)."""
    band = difference_band(standard_error, resolution=tolerance)
    row = dict(figure=image.name, panel=panel, what=what, published=published, paper=paper,
               reproduced=None if ours is None or not math.isfinite(ours) else float(ours),
               difference=diff, pixels=pixels(diff, unit, image), unit=unit, tolerance=tolerance,
               standard_error=standard_error, band=band, unresolved=unresolved + reading_margin(unit, image),
               offset=offset)
    return dict(row, verdict=verdict(judged_difference(row), band, row["unresolved"]))


@dataclass(frozen=True)
class Sampling:
    """What is known of one curve's sampling error: ``kind`` "test" (a held-out set: unbiased) or "train" (the fitted
    set: biased), and the standard error of its loss from the per-sequence losses at the ``start`` and at the
    ``final`` weights (None where not measured), in the curve's own units."""

    kind: str
    start: float | None = None
    final: float | None = None


def _errors(r: Reading, ours: float, sampling: dict, twins: dict, last_step) -> tuple:
    """(standard error of the difference, unresolved margin) of reading ``r`` (see the module's docstring)."""
    if r.unit == "step":
        twin = twins.get(r.curve)
        return None, (abs(ours - twin) if twin is not None and math.isfinite(ours) and math.isfinite(twin) else 0.0)
    s = sampling.get(r.curve)
    where = r.sampled(last_step)
    se = getattr(s, where) if s is not None and where else None
    if se is None or isinstance(r.value, tuple):
        return None, 0.0
    if s.kind == "train":
        return None, training_loss_margin(se)
    return math.sqrt(2.0) * se, 0.0  # ours and an independent published test set of the same size


def compare(readings: list[Reading], curves: dict, image: Image, steps=None, sampling=None,
            twins=None) -> list[dict]:
    """Every reading beside ours, one ``_check_row`` each. ``curves`` maps each reading's ``curve`` to an array;
    ``sampling``: curve → :class:`Sampling` (the loss readings' sampling errors; missing: judged by the tolerance);
    ``twins``: curve → the same curve of the population twin (a step reading's finite-P margin is the shift between
    ours and the twin's)."""
    sampling, twins = sampling or {}, twins or {}
    x = np.arange(len(np.atleast_1d(next(iter(curves.values()))))) if steps is None else np.asarray(steps)
    rows = []
    for r in readings:
        ours = measure(curves, r.how, r.curve, steps)
        twin = measure(twins, r.how, r.curve, steps) if r.curve in twins and r.unit == "step" else None
        se, margin = _errors(r, ours, sampling, {r.curve: twin} if twin is not None else {}, x[-1])
        rows.append(_check_row(image, r.panel, r.what, r.text(), r.value if not isinstance(r.value, tuple)
                               else r.text(), ours, difference(ours, r.value), r.unit, r.tolerance(image), se,
                               margin))
    return rows


def judged_after_offset(rows: list[dict]) -> list[dict]:
    """``rows`` with every loss reading judged after removing the offset of the image's loss scale: the line
    ours − published ≈ value + slope × published fitted to all of them
    (:func:`linattn.companion.uncertainty.systematic_offset`), taken off each reading's difference at its level; the
    other rows as they are."""
    loss = [i for i, r in enumerate(rows) if r["unit"] == "loss" and isinstance(r["paper"], float)
            and math.isfinite(r["difference"])]
    shared = systematic_offset([rows[i]["difference"] for i in loss], [rows[i]["paper"] for i in loss])
    if shared is None:
        return rows
    out = list(rows)
    for i in loss:
        r = rows[i]
        judged = dict(r, offset=shared.at(r["paper"]), scale_offset=shared)
        out[i] = dict(judged, verdict=verdict(judged_difference(judged), r["band"], r["unresolved"]))
    return out


def offset_of(rows: list[dict]):
    """The offset of the loss scale the ``rows`` were judged after (:func:`judged_after_offset`), a
    :class:`linattn.companion.uncertainty.Offset`, or None."""
    return next((r["scale_offset"] for r in rows if "scale_offset" in r), None)


# ----------------------------------------------------------------------------------- Figure 3a: one-to-one pairs

def crossing_distance(step: float, crossing: Crossing) -> float:
    """How far ``step`` lies from a published crossing: 0 inside one of its intervals, else the distance to the
    nearest. A step that never comes (NaN or inf) lies at infinity: 0 from a crossing beyond the window."""
    x = math.inf if step is None or not math.isfinite(step) else float(step)
    best = math.inf
    for low, high in crossing.where:
        if x == math.inf:
            d = 0.0 if high == math.inf else math.inf
        else:
            d = 0.0 if low <= x <= high else (low - x if x < low else x - high)
        best = min(best, d)
    return best


def signed_distance(step: float, crossing: Crossing) -> float:
    """Ours minus the nearest point of the crossing (0 inside an interval); NaN for a step that never comes."""
    if step is None or not math.isfinite(step):
        return 0.0 if any(high == math.inf for _, high in crossing.where) else math.nan
    x = float(step)
    options = [0.0 if low <= x <= high else (x - low if x < low else x - high) for low, high in crossing.where]
    return min(options, key=abs)


def match_one_to_one(ours: dict, crossings) -> list[tuple]:
    """Pair our curves' steps (``ours``: key → step; NaN for a drop that never comes) with the published crossings
    one to one, minimising the total distance (:func:`crossing_distance`) with
    :func:`scipy.optimize.linear_sum_assignment`; every crossing is used at most once (exactly once when there are
    as many curves as crossings). Returns ``(key, step, crossing)`` in the order of ``ours``."""
    from scipy.optimize import linear_sum_assignment  # here: most pages never need scipy.optimize's import

    keys = list(ours)
    big = 1e12  # a finite stand-in for "cannot pair": a step that never comes vs a crossing inside the window
    cost = np.array([[min(crossing_distance(ours[k], c), big) for c in crossings] for k in keys])
    rows, cols = linear_sum_assignment(cost)
    pairs = {keys[i]: crossings[j] for i, j in zip(rows, cols)}
    return [(k, ours[k], pairs[k]) for k in keys if k in pairs]


def fig3a_comparison(drops: dict, plateaus=None) -> list[dict]:
    """Figure 3a: our drop steps (``drops``: seed → steps of drops 1…4, NaN where a drop never comes; steps past
    the published window count as beyond it) paired one to one with the published crossings, drop by drop; then
    the count of curves still on the M_3 plateau at the window's end, and (``plateaus``: for each of L(M_0)…L(M_4)
    our seeds' levels, NaN where none was found) the plateau levels of the published curves
    (:data:`FIG3A_PLATEAU_READINGS`: only where the curves, not the theory's dotted lines, are read), ours the mean
    over seeds. A plateau level is a training loss, so it gets no sampling-error agreement
    (:mod:`linattn.companion.uncertainty`): beyond a pixel, but within 2·√(sd²/n + sd²) (sd: the spread of the n
    seeds' levels; our mean's error and that of the one published curve read) and the reading's own pixel, it
    *cannot tell*."""
    rows = []
    for d, crossings in FIG3A_CROSSINGS.items():
        for seed, step, crossing in match_one_to_one({s: float(t[d - 1]) for s, t in drops.items()}, crossings):
            diff = signed_distance(step, crossing)
            tol = max(FIG3A_IMAGE.steps_per_px, crossing.stated)
            row = _check_row(FIG3A_IMAGE, f"drop {d} (M_{d - 1} → M_{d})", f"seed {seed}, step", crossing.text,
                            _crossing_value(crossing), step, diff, "step", tol)
            row.update(drop=d, seed=seed)
            rows.append(row)
    still = sum(1 for t in drops.values() if not float(t[3]) <= FIG3A_LAST_STEP)
    rows.append(_check_row(FIG3A_IMAGE, "", f"curves still on the M_3 plateau at step {FIG3A_LAST_STEP}",
                          str(FIG3A_STILL_ON_M3), FIG3A_STILL_ON_M3, still, still - FIG3A_STILL_ON_M3, "count", 0))
    for m, levels in enumerate(plateaus if plateaus is not None else ()):
        if m not in FIG3A_PLATEAU_READINGS:
            continue
        reading = FIG3A_PLATEAU_READINGS[m]
        found = np.asarray(levels, dtype=np.float64).ravel()
        found = found[np.isfinite(found)]
        ours = float(found.mean()) if found.size else math.nan
        sd = spread(found)
        margin = 0.0 if sd is None else difference_band(sd / math.sqrt(found.size), sd)
        rows.append(_check_row(FIG3A_IMAGE, "", f"plateau L(M_{m}) (ours: mean over seeds)", f"{reading:.3f}",
                               reading, ours, difference(ours, reading), "loss", FIG3A_IMAGE.loss_per_px,
                               unresolved=margin))
    return rows


def _crossing_value(crossing: Crossing):
    """A crossing as ``numbers.json`` holds it: its step, or its text where it is a range or a choice."""
    (low, high), *rest = crossing.where
    return float(low) if low == high and not rest else crossing.text


def fig1b_comparison(attn_m, mlp, L_star: float, steps=None, sampling=None, population=None) -> list[dict]:
    """Figure 1b: ATTN_M's plateau, crossings, late and final values, the theory's L* against the dotted line, and
    the MLP's (own initialisation) lag behind ATTN_M on the drop. ``sampling``: ATTN_M's training loss's
    :class:`Sampling`; ``population``: the population twins (the same starts, P = ∞) of ATTN_M and the MLP, a pair
    of curves, whose crossings and lag give each step reading its finite-P margin."""
    curves = {"attn_m": attn_m, "mlp": mlp, "reference": attn_m, "L_star": [L_star]}
    twins = {} if population is None else dict(zip(("attn_m", "mlp"), population), reference=population[0])
    return compare(FIG1B, curves, FIG1B_IMAGE, steps, {"attn_m": sampling} if sampling else None,
                   twins) if len(attn_m) else []


def fig14_comparison(curves: dict, steps=None, sampling=None) -> list[dict]:
    """Figure 14, panel by panel (``curves``: c → {"train": training loss / its first value, "iwl", "icl"};
    ``sampling``: c → {curve: :class:`Sampling`}); panels we did not run are left out. The loss readings are judged
    after removing the offset of the image's loss scale (:func:`judged_after_offset`)."""
    rows = []
    for c, readings in FIG14.items():
        match = [k for k in curves if math.isclose(float(k), c)]
        if match:
            rows += compare(readings, curves[match[0]], FIG14_IMAGE, steps, (sampling or {}).get(match[0]))
    return judged_after_offset(rows)


# ------------------------------------------------------------------------------- claims of the paper's text
# Figures 4 and 5 have no published image to read; what the paper's text says of them is set beside our run as a
# claim: a count, ours, a verdict (agrees or differs, no tolerance: a count agrees only when it is met) and why,
# with numbers from the run.


@dataclass(frozen=True)
class Claim:
    """One claim of the paper's text beside our run: the ``figure`` it is about, the ``claim`` in brief, what is
    ``counted`` (the quantity of our run's row of that count), the number the paper states (``paper``) and ours,
    the ``verdict`` and the ``reason``, a sentence with numbers from the run."""

    figure: str
    claim: str
    counted: str
    paper: float
    ours: float
    verdict: str
    reason: str

    @property
    def quantity(self) -> str:
        return f"{self.counted} (the paper's text: {self.claim})"

    def row(self) -> dict:
        """The claim as a ``numbers.json`` row: a verdict and no tolerance, which the report counts as a claim. Its
        quantity starts with ``counted``, so it takes the place of a plain row of the same count."""
        return dict(key=f"claim.{slug(self.figure)}", quantity=self.quantity, paper=self.paper, reproduced=self.ours,
                    verdict=self.verdict)


def fig4_plateau_claim(drops, window: int, escape_steps, *,
                       predicted: str = "The theory's escape-time estimates τ/(λ_d² v₀)",
                       horizon: int | None = None) -> Claim:
    """Figure 4's rank-one claim: the loss rests on the :data:`FIG4_R1_PLATEAUS` plateaus L(M_0) … L(M_7) within
    the published ``window``. ``drops``: the step of each drop d = 1 … D of our rank-one run (NaN: not made; it may
    run past the window), ``escape_steps``: the theory's escape-time estimate of each (``theory.attn_s_drop_steps``),
    or another prediction of the drop steps named by ``predicted`` (e.g. ``runstore.predicted_drop_steps``, NaN
    where the prediction run of ``horizon`` steps does not make the drop: said in words, and beyond the window).
    Ours counts the levels L(M_0) … L(M_{D−1}) the loss reaches inside the window; the reason gives the estimates for
    the directions not learned inside it, and when our run learned them."""
    drops, escape = np.asarray(drops, dtype=np.float64), np.asarray(escape_steps, dtype=np.float64)
    made = drops < window
    inside = int(made.sum())
    reached = min(inside + 1, len(drops))
    paper = FIG4_R1_PLATEAUS
    claim = f"plateaus at the {paper} values L(M_0) … L(M_{paper - 1})"
    counted = f"R=1: plateaus reached within the published window ({window} steps)"
    reason = (f"{inside} of the {len(drops)} drops come inside the {window}-step window"
              + (f" (at step{'s' if inside > 1 else ''} {words(np.round(drops[made]))})" if inside else "")
              + f", so the loss reaches L(M_0) … L(M_{reached - 1}) there.")
    missing = np.flatnonzero(~made)
    if missing.size:
        beyond = [d for d in missing if not escape[d] < window]  # a prediction not made at all is beyond it too
        never = ("beyond the prediction run's " + (f"{int(horizon)} steps" if horizon is not None else "steps"))
        reason += (f" {predicted[0].upper()}{predicted[1:]} for the directions not learned inside it: "
                   + ", ".join(f"drop {d + 1} ≈ step {escape[d]:.0f}" if np.isfinite(escape[d])
                               else f"drop {d + 1} {never}" for d in missing)
                   + f" ({len(beyond)} of {missing.size} beyond the window).")
        late = [d for d in missing if np.isfinite(drops[d])]
        if late:
            reason += (f" Carried on, our run made {'it' if len(late) == 1 else 'them'} at "
                       f"step{'s' if len(late) > 1 else ''} {words(np.round(drops[late]))}.")
    return Claim("Figure 4", claim, counted, paper, reached, AGREES if reached >= paper else DIFFERS, reason)


def single_drop_verdict(drops: int, settled: bool) -> str:
    """The paper's "a single drop" against a count of drops (``loss_curves.count_drops``): more than one differs
    however the run ends (a drop made stays made); one agrees, and none differs, only in a run that has settled
    (else a later drop may still come: cannot tell)."""
    if drops > FIG5_ATTN_M_DROPS:
        return DIFFERS
    if not settled:
        return CANNOT_TELL
    return AGREES if drops == FIG5_ATTN_M_DROPS else DIFFERS


def drops_words(drops) -> str:
    """The drops of ``loss_curves.count_drops`` in words: their steps, shares of the fall and the slow stretches
    between them."""
    n = len(drops)
    if n == 0:
        return "no drop"
    if n == 1:
        return f"one drop, at step {drops.steps[0]:.0f}"
    shares = ", ".join(f"step {s:.0f} ({f:.0%} of the fall)" for s, f in zip(drops.steps, drops.shares))
    text = f"{n} drops, at {shares}"
    return text + ("; between them the fall rate dips to "
                   + ", ".join(f"{d:.0%} of the smaller peak beside it at step {s:.0f} (loss {L:.3f})"
                               for d, s, L in zip(drops.pause_dips, drops.pause_steps, drops.pause_losses)))


def fig5_single_drop_claim(drops, checks=(), *, lr_scale: float = 1.0) -> Claim:
    """Figure 5's claim for softmax ATTN_M: its loss falls in a single drop. ``drops``: what
    ``loss_curves.count_drops`` found in our training loss (the count, each drop's step and share of the fall, the
    slow stretches between drops, whether the run settled); the verdict is :func:`single_drop_verdict`.
    ``lr_scale``: our learning rate over the published one (the claim is then judged at scaled rates, and says so).
    ``checks``: the same model run again (other seeds, a smaller learning rate), each ``{"label", "drops",
    "drop_steps", "settled", "step_scale"[, "final"]}`` (``step_scale``: the run's learning rate over the main
    run's, so that step × scale is the same gradient-flow time; ``final``: its last loss); the reason then says what
    the checks show (:func:`check_words`)."""
    paper, ours = FIG5_ATTN_M_DROPS, len(drops)
    scaled = f" at {lr_scale:g}× the published learning rates" if lr_scale != 1 else ""
    claim, counted = "a single drop", f"softmax ATTN_M{scaled}: drops counted"
    verdict = single_drop_verdict(ours, drops.settled)
    reason = (f"Counted from the fall rate, the loss falls in {drops_words(drops)}"
              + ("." if drops.settled else "; it is still falling at the end of the run.")
              + (f" The run trains at {lr_scale:g} times the published learning rates, so this verdict is one on "
                 "that run, not at the published settings." if lr_scale != 1 else ""))
    if checks:
        reason += " " + check_words(ours, checks)
    return Claim("Figure 5", claim, counted, paper, ours, verdict, reason)


def drop_count_holds(ours: int, checks) -> str:
    """Whether the check runs find the main run's count of drops ``ours``: :data:`DIFFERS` where one makes more, or
    fewer and has settled; else :data:`CANNOT_TELL` where one has not settled (a drop may still come); else
    :data:`AGREES` (the count is then no accident of one draw or of the step size)."""
    def one(c) -> str:
        n = int(c["drops"])
        if n > ours or (n < ours and c["settled"]):
            return DIFFERS
        return AGREES if c["settled"] else CANNOT_TELL

    found = {one(c) for c in checks}
    return DIFFERS if DIFFERS in found else CANNOT_TELL if CANNOT_TELL in found else AGREES


def check_words(ours: int, checks) -> str:
    """Sentences on the check runs: the drops each finds and where (a run at another learning rate also in the main
    run's steps, step × scale, the same gradient-flow time), whether it is still falling at its end, and whether the
    main run's count holds (:func:`drop_count_holds`), said apart for another step size and for other draws."""
    def one(c) -> str:
        n, steps = int(c["drops"]), np.asarray(c["drop_steps"], dtype=np.float64)
        where = f" at step{'s' if steps.size > 1 else ''} {words(np.round(steps))}" if steps.size else ""
        if steps.size and c["step_scale"] != 1:
            where += f" ({words(np.round(steps * c['step_scale']))} in the main run's steps)"
        final = f", ending at {c['final']:.3f}" if c.get("final") is not None else ""
        return f"{c['label']}, {n} drop{'' if n == 1 else 's'}{where}{final}" + (
            "" if c["settled"] else " and still falling")

    plural = "s" if ours != 1 else ""
    text = []
    for kind, group in (("step", [c for c in checks if c["step_scale"] != 1]),
                        ("draw", [c for c in checks if c["step_scale"] == 1])):
        if not group:
            continue
        holds = drop_count_holds(ours, group)
        what = "a smaller step" if kind == "step" else "other draws"
        single = "; ".join(f"{c['label']} {single_drop_verdict(int(c['drops']), c['settled'])}" for c in group)
        text.append(f"Run again with {what}, ATTN_M shows: {'; '.join(one(c) for c in group)} (against the paper's "
                    f"single drop: {single}). "
                    + {AGREES: f"So the count of {ours} drop{plural} holds with {what}.",
                       DIFFERS: f"So the count of {ours} drop{plural} does not hold with {what}.",
                       CANNOT_TELL: f"A run still falling at its end may make another drop, so whether the count of "
                                    f"{ours} drop{plural} holds with {what} cannot be told from these runs."}[holds])
    return " ".join(text)


def slug(text: str) -> str:
    """``text`` as a part of a ``numbers.json`` key: lower case, runs of other characters as one ``_``
    ("Figure 1b" → ``figure_1b``, "c = 0.2" → ``c_0_2``)."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def in_tolerances(error, tolerance) -> float:
    """|error| / tolerance: ≤ 1 where a check agrees; inf for a non-zero error against a zero tolerance (a count);
    NaN without an error."""
    if error is None or isinstance(error, str) or not math.isfinite(error):
        return math.nan
    if tolerance == 0:
        return 0.0 if error == 0 else math.inf
    return abs(error) / tolerance
