"""The published readings (pinned: they are facts read off the authors' images), the one-to-one pairing of Figure
3a's drops, the verdicts, and the commands printed on the figure pages."""

import math
from collections import Counter

import ink
import numpy as np
import pytest

from linattn import theory
from linattn.analysis import loss_curves
from linattn.cli import build_parser, config_from_args
from linattn.companion import published
from linattn.companion.commands import train_command
from linattn.companion.figures import fig01b_attnm_loss as f1b
from linattn.companion.figures import fig03a_attns_loss as f3a
from linattn.companion.figures import fig04_low_rank as f4
from linattn.companion.figures import fig05_softmax as f5
from linattn.companion.figures import fig14_icl_iwl as f14
from linattn.companion.output import AGREES, CANNOT_TELL, DIFFERS, VERDICTS, NumbersTable, number_row
from linattn.companion.published import readings, rules
from linattn.config import RunConfig


def _values(readings):
    return [(r.what, r.value, r.stated) for r in readings]


# ------------------------------------------------------------------------------------------ the readings, pinned

def test_each_image_has_its_own_pixel_scale():
    assert (f1b.PUBLISHED_IMAGE.steps_per_px, f1b.PUBLISHED_IMAGE.loss_per_px) == (21.83, 0.00508)
    assert (f3a.PUBLISHED_IMAGE.steps_per_px, f3a.PUBLISHED_IMAGE.loss_per_px) == (28.90, 0.00383)
    assert (f14.PUBLISHED_IMAGE.steps_per_px, f14.PUBLISHED_IMAGE.loss_per_px) == (16.67, 0.0099)
    assert [i.name for i in (f1b.PUBLISHED_IMAGE, f3a.PUBLISHED_IMAGE, f14.PUBLISHED_IMAGE)] == [
        "Figure 1b", "Figure 3a", "Figure 14"]


def test_figure_1b_readings():
    by_what = {r.what: r.value for r in f1b.PUBLISHED_READINGS}
    assert by_what["ATTN_M plateau (median over steps 100–800)"] == 1.007
    assert [by_what[f"ATTN_M first below {v}, step"] for v in (0.9, 0.7, 0.5, 0.3)] == [906, 969, 1019, 1124]
    assert by_what["ATTN_M at step 3000"] == 0.142
    assert by_what["ATTN_M final (mean over steps 5600–6000)"] == 0.135
    assert by_what["dotted line L* (ours: theory)"] == 0.136
    lag = [r for r in f1b.PUBLISHED_READINGS if r.how[0] == "lag"]
    assert len(lag) == 1 and lag[0].value == 15 and lag[0].how[1] == (0.22, 0.89)  # the MLP lies after ATTN_M


def test_figure_3a_crossings_count_seed_0_once():
    """Six curves per drop (seed 0's doubled line counted once): seed 0's own double-ink crossing where the image ties
    it (drop 3's one double-ink crossing; one of drop 2's and drop 4's two), the other five (six at drop 1) beside
    it; the fourth drop has one curve beyond the window."""
    crossings, seed_0 = f3a.PUBLISHED_CROSSINGS, f3a.PUBLISHED_SEED_0_CROSSINGS
    assert {d: len(c) + (d in seed_0) for d, c in crossings.items()} == {1: 6, 2: 6, 3: 6, 4: 6}
    assert [c.where for c in crossings[1]] == [((370, 514),)] * 5 + [((563, 563),)]
    assert {d: c.where for d, c in seed_0.items()} == {2: ((705, 705), (804, 804)), 3: ((1250, 1250),),
                                                       4: ((4936, 4936), (5729, 5729))}
    assert [c.where for c in crossings[2]] == [((557, 557),), ((601, 601),), ((1098, 1098),),
                                               ((705, 705), (804, 804)), ((705, 705), (804, 804))]
    assert [c.where[0][0] for c in crossings[3]] == [997, 1069, 1608, 1718, 1856]
    assert [c.where for c in crossings[4]] == [((3601, 3601),), ((6521, 6521),), ((4936, 4936), (5729, 5729)),
                                               ((4936, 4936), (5729, 5729)), ((9966, math.inf),)]


def test_figure_3a_plateau_readings_lie_on_the_theory_within_a_pixel():
    """The curves' plateau levels read off Figure 3a's image (L(M_3) and L(M_4), where the black curves cover the
    dotted theory lines) lie within one pixel of the theory's levels for its setting (eigenvalues 0.4, 0.3, 0.2, 0.1,
    N = 31), and the values its text states are those levels to three decimals: a misread or mistyped reading fails
    here."""
    levels = theory.plateau_losses(np.diag([0.4, 0.3, 0.2, 0.1]), 31)
    assert sorted(f3a.PUBLISHED_PLATEAU_READINGS) == [3, 4]
    for m, read in f3a.PUBLISHED_PLATEAU_READINGS.items():
        assert abs(read - levels[m]) <= f3a.PUBLISHED_IMAGE.loss_per_px
    assert np.all(np.abs(np.array(f3a.PUBLISHED_PLATEAUS) - levels) <= 5e-4)


def test_figure_1b_numbers_the_text_states_are_the_theorys_and_never_a_paper_value(monkeypatch):
    """The plateau and final loss Figure 1b's text states are tr Λ and L* = L(M_D) at its setting (eigenvalues 0.4,
    0.3, 0.2, 0.1, N = 31), theory values: the page's rows at the published settings give them in the theory column
    only, and the README's "paper" column for 1b holds the values read off the published plot."""
    levels = theory.plateau_losses(np.diag([0.4, 0.3, 0.2, 0.1]), 31)
    assert abs(f1b.PUBLISHED_PLATEAU - levels[0]) <= 5e-4 and abs(f1b.PUBLISHED_FINAL - levels[-1]) <= 5e-4
    xr = pytest.importorskip("xarray")
    ds = xr.Dataset({"plateau_theory": levels[0], "loss_star": levels[-1], "plateau_level": ("model", [1.02, 0, 0]),
                     "final_loss": ("model", [0.13, 0.131, 0.132]), "half_drop_step": ("model", [900.0, 950.0, 990.0]),
                     "half_drop_step_theory": ("model", [1000.0, 990.0, 995.0]),
                     "train_loss": (("model", "step"), np.ones((3, 4)))},
                    coords={"model": list(f1b.MODELS)}, attrs={"published": 1})
    monkeypatch.setattr(f1b, "comparison", lambda ds: [])  # the published readings need the published run
    rows = {r["key"]: number_row(**r) for r in f1b.numbers(ds)}
    stated = [rows[k] for k in ("plateau.attn_m", "final_loss.attn_m", "final_loss.mlp_own_init")]
    assert all(r["paper"] is None and r["theory"] is not None for r in stated)
    read = [k for _, what, keys in f1b.README_ROWS if "read off" in what for k in keys]
    assert read and all(k.startswith("published.") for k in read)


def test_figure_5s_paper_preset_trains_at_n_times_the_published_rates_and_nothing_else():
    """The page says its paper-preset runs are the published ones at n = seq_len times the learning rate (a step at
    n times the rate being a step at the published rate on n times the loss): each run's settings are the published
    run's with only ``lr`` (times n), ``dtype`` and ``softmax`` changed."""
    from linattn.companion.figures.common import preset_blocks

    for key, published_run in (("attn_m", preset_blocks.ATTN_M_PAPER), ("attn_s", preset_blocks.ATTN_S_PAPER)):
        run = f5.PRESETS["paper"][key]
        n = run["seq_len"]
        assert run["lr"] == pytest.approx(n * published_run["lr"], rel=1e-12)
        changed = {k for k in set(run) | set(published_run) if run.get(k) != published_run.get(k)}
        assert changed == {"lr", "dtype", "softmax"}


def test_figure_3b_final_values_the_paper_states_are_the_theorys():
    """The heads' final values Figure 3b's text states are (λ_d c_d)^(−1/3) at Figure 3a's setting (eigenvalues 0.4,
    0.3, 0.2, 0.1, N = 31), the theory column's values, to three decimals."""
    from linattn.companion.figures import fig03b_attns_values as f3b

    ours = theory.final_value_weights(np.diag([0.4, 0.3, 0.2, 0.1]), 31, normalize="mean")
    assert np.all(np.abs(np.array(f3b.PUBLISHED_FINAL_VALUES) - ours) <= 5e-4)


def test_figure_3a_compares_no_theory_line_as_a_published_plateau():
    """Only the published curves' own plateaus are compared: the image's dotted theory lines (read at L(M_0) …
    L(M_2)) are a drawing of the theory, so no row sets our levels beside them and none counts among the readings."""
    drops = {s: np.array([450.0, 700.0, 1100.0, 5000.0]) for s in range(6)}
    levels = [[0.999], [0.6385], [0.3774], [0.2094], [0.1358]]
    plateau_rows = [r for r in f3a.compare_with_published(drops, levels) if r["what"].startswith("plateau")]
    assert [r["what"] for r in plateau_rows] == ["plateau L(M_3) (ours: mean over seeds)",
                                                 "plateau L(M_4) (ours: mean over seeds)"]
    assert [r["paper"] for r in plateau_rows] == [0.210, 0.138]


def test_a_reading_within_a_further_pixel_of_its_band_cannot_tell():
    """A value read off a published plot is itself placed to ±1 pixel: a step 29 after the published 563 (band one
    pixel, 28.90 steps) cannot tell; 60 after (beyond 2 pixels) differs; 28 after agrees. A count has no pixel."""
    from linattn.companion.uncertainty import AGREES, CANNOT_TELL

    def first_drop_of_the_late_curve(step):
        drops = {s: np.array([450.0, 700.0, 1100.0, 5000.0]) for s in range(5)}
        drops[5] = np.array([step, 700.0, 1100.0, 5000.0])
        rows = f3a.compare_with_published(drops)
        return next(r for r in rows if r.get("drop") == 1 and r["seed"] == 5)

    late = {d: first_drop_of_the_late_curve(563.0 + d) for d in (28, 29, 57, 60)}
    assert {d: r["verdict"] for d, r in late.items()} == {28: AGREES, 29: CANNOT_TELL, 57: CANNOT_TELL, 60: DIFFERS}
    assert late[29]["band"] == pytest.approx(28.90) and late[29]["unresolved"] == pytest.approx(28.90)
    still = next(r for r in f3a.compare_with_published({s: np.full(4, np.nan) for s in range(6)})
                 if r["unit"] == "count")
    assert still["unresolved"] == 0 and still["verdict"] == DIFFERS
    assert "one more pixel" in published.page.summary([late[29]], f3a.PUBLISHED_IMAGE)


def test_a_count_that_differs_is_not_given_in_pixels():
    """The summary gives a difference in pixels only for a step or a loss: the count of curves still on M_3 is said
    as a count, never divided by the loss scale."""
    rows = f3a.compare_with_published({s: np.array([450.0, 700.0, 1100.0, 5000.0]) for s in range(6)})
    rows = [{k: v for k, v in r.items() if k != "restates"} for r in rows]  # the count as a row of its own
    text = published.page.summary(rows, f3a.PUBLISHED_IMAGE)
    line = next(x for x in text.splitlines() if "curves still on" in x)
    assert line.endswith("published 1, ours 0 (-1)") and "px" not in line
    step_line = next(x for x in text.splitlines() if "drop 4" in x and "px" in x)
    assert step_line


def test_figure_14_has_six_panels_with_the_corrected_readings():
    fig14 = f14.PUBLISHED_READINGS
    assert sorted(fig14) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    mid = {c: next(r for r in rs if "midpoint" in r.what) for c, rs in fig14.items()}
    assert {c: (r.how[1], r.value, r.stated) for c, r in mid.items()} == {
        0.0: (0.537, 751, 17), 0.2: (0.660, 765, 17), 0.4: (0.745, 994, 17), 0.6: (0.831, 1383, 19),
        0.8: (0.584, 2362, 18), 1.0: (0.580, 2901, 17)}
    below_half = {c: next(r.value for r in rs if r.curve == "train" and r.how == ("below", 0.5))
                  for c, rs in fig14.items()}
    assert below_half == {0.0: 757, 0.2: 792, 0.4: 1215, 0.6: 1860, 0.8: 2413, 1.0: 2942}
    whole = [r for r in fig14[0.6] if "whole fall" in r.what]
    assert [(r.how[1], r.value, r.stated) for r in whole] == [(0.574, 1776, 21)]
    # c = 0: the in-context test loss is flat at 2.246 inside the axes, not off them
    c0 = {r.what: r.value for r in fig14[0.0]}
    assert c0["in-context test loss, highest"] == 2.246 == c0["in-context test loss, final"]
    iwl_low = {c: next(r.value for r in rs if r.curve == "iwl" and r.how[0] == "min") for c, rs in fig14.items()}
    assert iwl_low == {0.0: 0.070, 0.2: 0.261, 0.4: 0.358, 0.6: 0.468, 0.8: 0.645, 1.0: 1.025}
    finals = {c: {r.curve: r.value for r in rs if r.how == ("final",)} for c, rs in fig14.items()}
    assert finals == {0.0: {"train": 0.071, "iwl": 0.070, "icl": 2.246},
                      0.2: {"train": 0.130, "iwl": 1.053, "icl": 0.257},
                      0.4: {"train": 0.139, "iwl": 1.084, "icl": 0.167},
                      0.6: {"train": 0.146, "iwl": 1.105, "icl": 0.152},
                      0.8: {"train": 0.146, "iwl": 1.105, "icl": 0.148},
                      1.0: {"train": 0.146, "iwl": 1.121, "icl": 0.148}}


def test_tolerance_is_one_pixel_or_the_readings_own_error():
    step = readings.Reading("", "x", "train", ("below", 0.5), 751, "step", 17)
    assert step.tolerance(f14.PUBLISHED_IMAGE) == 17  # ±17 is larger than 16.67
    assert step.tolerance(f3a.PUBLISHED_IMAGE) == 28.90  # one pixel is larger than ±17
    loss = readings.Reading("", "x", "train", ("final",), 0.1, "loss")
    assert loss.tolerance(f14.PUBLISHED_IMAGE) == 0.0099
    assert step.text() == "751 ± 17" and loss.text() == "0.100"


# ---------------------------------------------------------------------------------------- measuring and judging

def test_measure_reads_each_kind_of_landmark():
    step = np.arange(100)
    y = np.where(step < 40, 1.0, 0.2) + 0.001 * step
    curves = {"y": y, "reference": np.where(step < 30, 1.0, 0.2)}
    assert rules.measure(curves, ("below", 0.5), "y") == 40
    assert rules.measure(curves, ("above", 0.25), "y") == 0  # 1.0 > 0.25 from the start
    assert rules.measure(curves, ("at", 10), "y") == pytest.approx(1.01)
    assert rules.measure(curves, ("final",), "y") == pytest.approx(0.299)
    assert rules.measure(curves, ("min", (50, 99)), "y") == pytest.approx(0.25)
    assert rules.measure(curves, ("argmin", None), "y") == 40
    assert rules.measure(curves, ("max", None), "y") == pytest.approx(1.039)
    assert rules.measure(curves, ("median", (0, 39)), "y") == pytest.approx(1.0195)
    assert rules.measure(curves, ("lag", (0.3, 0.9)), "y") == 10  # y falls 10 steps after the reference
    assert math.isnan(rules.measure(curves, ("below", 0.1), "y"))
    assert rules.measure(curves, ("below", 0.5), "y", steps=10 * step) == 400


def test_compare_gives_difference_pixels_tolerance_and_verdict():
    step = np.arange(3000)
    late = np.where(step < 790, 1.0, 0.07)  # crosses 0.537 at 790: 39 steps after the reading 751 ± 17
    rows = rules.compare(f14.PUBLISHED_READINGS[0.0][:1], {"train": late}, f14.PUBLISHED_IMAGE)
    (row,) = rows
    assert row["reproduced"] == 790 and row["difference"] == 39
    assert row["pixels"] == pytest.approx(39 / 16.67) and row["tolerance"] == 17 and row["verdict"] == DIFFERS
    on_time = np.where(step < 760, 1.0, 0.07)
    on_row, = rules.compare(f14.PUBLISHED_READINGS[0.0][:1], {"train": on_time}, f14.PUBLISHED_IMAGE)
    assert on_row["verdict"] == AGREES


def test_a_range_reading_is_met_anywhere_inside_it():
    assert rules.difference(939, (917, 967)) == 0
    assert rules.difference(900, (917, 967)) == -17
    assert rules.difference(1000, (917, 967)) == 33
    assert math.isnan(rules.difference(float("nan"), 5))


# ------------------------------------------------------------------------------------- Figure 3a: one to one

def test_one_to_one_matching_differs_from_nearest_matching():
    """Two of our curves are both nearest to 4936; one to one, the second takes the other published crossing."""
    crossings = (readings.crossing_at(4936), readings.crossing_at(5729))
    ours = {"a": 4940.0, "b": 4990.0}
    nearest = {k: min(crossings, key=lambda c: rules.crossing_distance(v, c)) for k, v in ours.items()}
    assert nearest["a"] is nearest["b"]  # nearest matching uses 4936 twice
    pairs = {k: c for k, _, c in rules.match_one_to_one(ours, crossings)}
    assert pairs["a"].where == ((4936, 4936),) and pairs["b"].where == ((5729, 5729),)


def test_a_curve_still_on_its_plateau_pairs_with_the_crossing_beyond_the_window():
    crossings = (readings.crossing_at(3601), readings.Crossing((f3a.BEYOND,), "beyond"))
    pairs = rules.match_one_to_one({0: float("nan"), 1: 3700.0}, crossings)
    assert {k: c.text for k, _, c in pairs} == {0: "beyond", 1: "3601"}
    assert rules.signed_distance(float("nan"), crossings[1]) == 0
    assert rules.signed_distance(9650, crossings[1]) == 9650 - 9966


def test_fig3a_comparison_uses_each_published_crossing_once():
    ours = {0: [395, 725, 1310, 5181], 1: [592, 1074, 1426, 4597], 2: [505, 627, 1872, 9650],
            3: [433, 800, 1657, 3744], 4: [495, 571, 1014, 6532], 5: [463, 813, 1084, 4947]}
    rows = f3a.compare_with_published({s: np.array(t, dtype=float) for s, t in ours.items()})
    for d in f3a.PUBLISHED_CROSSINGS:
        pairs = [r for r in rows if r.get("drop") == d]
        assert len(pairs) == 6
        steps = Counter(r["published"].split(" ")[0] for r in pairs)
        double = ink.IMAGE[d][0] or ()
        seed_0 = next(r for r in pairs if r["seed"] == 0)["published"].split(" ")[0]
        for step in double:  # seed 0's double-ink crossing holds seed 0 alone; the other, two seeds
            assert steps[f"{step}"] == (1 if f"{step}" == seed_0 else 2 if len(double) == 2 else 0)
        assert all(n == 1 for step, n in steps.items() if step not in {f"{x}" for x in double} | {"370–514"})
    fourth = {r["seed"]: r for r in rows if r.get("drop") == 4}
    assert fourth[2]["published"].startswith("still on M_3")  # the slowest seed takes the curve left on M_3
    assert fourth[2]["difference"] == 9650 - 9966 and fourth[2]["verdict"] == DIFFERS
    assert fourth[5]["difference"] == 11 and fourth[5]["pixels"] == pytest.approx(11 / 28.90)
    still = [r for r in rows if r["what"].startswith("curves still on")]
    assert still[0]["reproduced"] == 0 and still[0]["paper"] == 1 and still[0]["verdict"] == DIFFERS


def test_a_curve_tied_to_its_own_crossing_is_compared_with_it_alone():
    """Constructed cases: a curve the image ties to a crossing is set beside that one even where another crossing
    lies nearer; the others are paired one to one with the rest; a tie for a curve we do not have is unused; the
    order of ours is kept; with no tie the pairing is the one-to-one pairing."""
    crossings = (readings.crossing_at(100), readings.crossing_at(200))
    own = readings.crossing_at(300, text="300 (a)")
    pairs = rules.match_with_ties({"b": 190.0, "a": 110.0, "c": 105.0}, [({"a": own, "z": own}, crossings)])
    assert [(k, step, c.text) for k, step, c in pairs] == [("b", 190.0, "200"), ("a", 110.0, "300 (a)"),
                                                           ("c", 105.0, "100")]
    untied = rules.match_with_ties({"a": 110.0, "b": 190.0}, [({}, crossings)])
    assert [(k, c.text) for k, _, c in untied] == [(k, c.text) for k, _, c in rules.match_one_to_one(
        {"a": 110.0, "b": 190.0}, crossings)] == [("a", "100"), ("b", "200")]
    never = rules.match_with_ties({"a": math.nan, "b": 150.0}, [({"a": own}, crossings)])
    assert [(k, c.text) for k, _, c in never] == [("a", "300 (a)"), ("b", "100")]


def _ink_readings(a_at: tuple) -> list[tuple]:
    """Constructed image: curve "a" drawn twice at one of the double-ink crossings 100 and 200 (in the order
    ``a_at``), the two other curves both at the other."""
    return [({"a": readings.crossing_at(x, text=f"{x} (a)")}, (readings.crossing_at(y, text=f"{y}"),) * 2)
            for x, y in (a_at, a_at[::-1])]


def test_a_tie_whose_nearer_crossing_would_overfill_it_takes_the_smaller_total():
    """Constructed case: "a" lies nearer 100 (40 away, 60 from 200), but with "a" at 100 the curves "b" (110) and "c"
    (95) must both take 200 (total 40 + 90 + 105 = 235), while with "a" at 200 they share 100 (60 + 10 + 5 = 75):
    every pair comes from the smaller total, "a" at 200, and no crossing holds more curves than its ink (the nearer
    option for "a" would put three at 100). Equal totals keep the first reading; a far "a" takes its nearer."""
    ours = {"a": 140.0, "b": 110.0, "c": 95.0}
    pairs = rules.match_with_ties(ours, _ink_readings((100, 200)))
    assert [(k, c.text) for k, _, c in pairs] == [("a", "200 (a)"), ("b", "100"), ("c", "100")]
    assert [rules.signed_distance(step, c) for _, step, c in pairs] == [-60.0, 10.0, -5.0]
    assert rules.match_with_ties(ours, _ink_readings((200, 100))) == pairs  # not the order of the readings
    level = {"a": 150.0, "b": 150.0, "c": 150.0}  # every reading totals 150: the first is kept
    assert rules.match_with_ties(level, _ink_readings((100, 200)))[0][2].text == "100 (a)"
    assert rules.match_with_ties(level, _ink_readings((200, 100)))[0][2].text == "200 (a)"
    far = rules.match_with_ties({"a": 90.0, "b": 210.0, "c": 190.0}, _ink_readings((200, 100)))
    assert [(k, c.text) for k, _, c in far] == [("a", "100 (a)"), ("b", "200"), ("c", "200")]


def test_fig3a_sets_seed_0_beside_its_own_double_ink_crossing():
    """Second route, from the drop steps of the reference draws at the published settings: seed 0's line is drawn
    twice, so at drop 3 it is the one double-ink crossing (1250) and at drop 4 one of the two (4936 or 5729), the
    other holding two seeds. Every row of a drop comes from the ink-consistent assignment with the smallest total,
    recomputed here by brute force (``ink``): at drop 4 seed 0 at 5729 (5181 − 5729 = −548, −19.0 px) and seeds 1
    and 5 at 4936 (−340, +11), total 899 against 2160 with seed 0 at the nearer 4936; a seed 0 nearer another
    crossing is still set beside its own. Drop 1 does not tie it."""
    ours = {0: [395, 725, 1310, 5181], 1: [592, 1074, 1426, 4596], 2: [505, 627, 1872, 9650],
            3: [433, 800, 1657, 3745], 4: [495, 571, 1014, 6532], 5: [463, 813, 1084, 4947]}
    rows = f3a.compare_with_published({s: np.array(t, dtype=float) for s, t in ours.items()})
    seed_0 = {r["drop"]: r for r in rows if r.get("seed") == 0}
    for d in f3a.PUBLISHED_CROSSINGS:
        (by_hand,) = ink.smallest_total({s: float(t[d - 1]) for s, t in ours.items()}, d)
        assert {r["seed"]: r["difference"] for r in rows if r.get("drop") == d} == by_hand
        assert seed_0[d]["pixels"] == pytest.approx(by_hand[0] / 28.90)
        assert ("seed 0, drawn twice" in seed_0[d]["published"]) == (d != 1)
    fourth = {r["seed"]: r["difference"] for r in rows if r.get("drop") == 4}
    assert (fourth[0], fourth[1], fourth[5]) == (-548, -340, 11) and round(seed_0[4]["pixels"], 1) == -19.0
    assert seed_0[4]["published"].startswith("5729") and seed_0[4]["verdict"] == DIFFERS
    assert "seed 0" not in seed_0[1]["published"]  # drop 1's bundle is not read for ink
    early = {s: np.array(t, dtype=float) for s, t in ours.items()}
    early[0][2] = 1000.0  # three steps from 997, but seed 0's own crossing at drop 3 is 1250
    row = next(r for r in f3a.compare_with_published(early) if r.get("drop") == 3 and r["seed"] == 0)
    assert row["published"].startswith("1250") and row["difference"] == -250
    assert "Seed 0's can" in f3a.pairing_words() and "drop 3: 1250" in f3a.pairing_words()
    assert "each pair alone" not in f3a.pairing_words() and "smaller total over all six" in f3a.pairing_words()


def test_a_row_restating_others_keeps_its_verdict_but_is_not_counted():
    """Constructed rows: a row marked as restating another keeps its verdict in the table, with the row it restates
    named, but is left out of the page's count, its list of rows that differ and its count that cannot tell, and
    is said once as not counted again; numbers.json carries the mark."""
    image = readings.Image("constructed", 10.0, 0.01)
    pair = rules.check_row(image, "drop 4", "seed 2, step", "beyond 100", "beyond 100", 60.0, -40.0, "step", 10.0)
    agree = rules.check_row(image, "drop 4", "seed 1, step", "50", 50.0, 52.0, 2.0, "step", 10.0)
    count = rules.check_row(image, "", "curves left", "1", 1, 0, -1, "count", 0)
    restated = rules.restating(count, [pair])
    assert (pair["verdict"], count["verdict"], restated["verdict"]) == (DIFFERS, DIFFERS, DIFFERS)
    assert restated["restates"] == ["drop 4, seed 2, step"] and "restates" not in count
    assert published.page.counted(pair) and not published.page.counted(restated)
    assert published.page.counts([pair, agree, restated]) == (1, 2)
    assert published.page.counts([pair, agree, count]) == (1, 3)  # unmarked, the count is a row of its own
    text = published.page.summary([pair, agree, restated], image)
    assert "1 of 2 readings agree" in text and text.count("\n* ") == 1 and "curves left: published" not in text
    assert "Not counted again: curves left (differs) restates the fact of drop 4, seed 2, step." in text
    shown = published.page.table([restated])._repr_markdown_()
    assert "differs (the same fact as drop 4, seed 2, step; not counted again)" in shown
    kept = number_row(**published.page.number_rows([restated])[0])
    assert kept["restates"] == ["drop 4, seed 2, step"] and not published.page.counted(kept)
    assert "restates" not in published.page.number_rows([pair])[0]


def test_fig3a_count_still_on_m3_restates_the_drop_4_pairs_that_decide_it():
    """Constructed cases: the count of curves still on M_3 at the window's end is the drop-4 pairs' fact, so it is
    marked as restating the pairs where ours or the published curve is still on M_3 there (a seed that drops at 9650
    against the published curve left on M_3; two seeds left on M_3, one of them against a crossing inside the window),
    or every drop-4 pair where none is; it keeps its verdict and is never counted."""
    base = {0: 5181.0, 1: 4596.0, 2: 9650.0, 3: 3745.0, 4: 6532.0, 5: 4947.0}

    def count_row(fourth):
        drops = {s: np.array([450.0, 700.0, 1100.0, t]) for s, t in fourth.items()}
        rows = f3a.compare_with_published(drops)
        return next(r for r in rows if r["unit"] == "count"), [r for r in rows if r.get("drop") == 4]

    row, _ = count_row(base)
    assert row["verdict"] == DIFFERS and row["restates"] == ["drop 4 (M_3 → M_4), seed 2, step"]
    row, _ = count_row({**base, 2: math.nan})  # seed 2 left on M_3 like the published curve: the count agrees
    assert row["verdict"] == AGREES and row["restates"] == ["drop 4 (M_3 → M_4), seed 2, step"]
    row, fourth = count_row({**base, 2: math.nan, 4: 12000.0})  # two left on M_3: one against 6521
    assert row["verdict"] == DIFFERS and row["reproduced"] == 2
    assert sorted(row["restates"]) == [f"drop 4 (M_3 → M_4), seed {s}, step" for s in (2, 4)]
    assert next(r for r in fourth if r["seed"] == 4)["verdict"] == DIFFERS  # that pair states the fact already
    for case in (base, {**base, 2: math.nan}):
        rows = f3a.compare_with_published({s: np.array([450.0, 700.0, 1100.0, t]) for s, t in case.items()})
        assert published.page.counts(rows)[1] == len(rows) - 1


def test_a_check_of_the_reading_keeps_its_verdict_but_is_not_counted():
    """Constructed cases: a reading marked ``checks_reading`` (the image's drawn theory line beside our theory
    value) is judged like any other, but it is shown as a check of the reading and left out of every count: an
    agreeing check adds no agreement, a differing one no difference. Figure 1b's dotted line at L* is one."""
    image = readings.Image("constructed", 10.0, 0.01)
    marked = [readings.Reading("", "drawn line", "theory", ("final",), 0.5, "loss", checks_reading=True),
              readings.Reading("", "level", "y", ("final",), 0.3, "loss")]
    for theory_value, said in ((0.503, AGREES), (0.6, DIFFERS)):
        rows = rules.compare(marked, {"theory": [theory_value], "y": [0.3]}, image)
        assert [r["verdict"] for r in rows] == [said, AGREES] and rows[0]["checks_reading"]
        assert published.page.counts(rows) == (1, 1)
        text = published.page.summary(rows, image)
        assert "1 of 1 readings agree" in text and "None differs." in text
        assert f"Not counted: drawn line, published 0.500, ours {theory_value:.3f} ({said})" in text
        shown = published.page.table(rows)._repr_markdown_()
        assert f"{said} (a check of the reading, not counted)" in shown
        assert number_row(**published.page.number_rows(rows)[0])["checks_reading"] is True
    assert [r.what for r in f1b.PUBLISHED_READINGS if r.checks_reading] == ["dotted line L* (ours: theory)"]
    t = np.linspace(1, 0.1, 7000)
    rows = f1b.compare_with_published(t, t, 0.136)
    assert published.page.counts(rows)[1] == len(rows) - 1


def test_a_difference_to_a_reading_known_only_beyond_a_step_is_said_as_a_bound():
    """Constructed cases: a step before a crossing open above (a curve still on its plateau at the window's end) is
    only bounded, ours − published ≤ the distance, and is said as one ("at least … earlier"); a step inside it, a
    step never made, a closed interval or one step are values, signed as before."""
    beyond = readings.Crossing(((9966, math.inf),), "still on M_3 at 9966")
    assert rules.is_bound(9650, beyond) and not rules.is_bound(9970, beyond)
    assert not rules.is_bound(float("nan"), beyond) and not rules.is_bound(None, beyond)
    assert not rules.is_bound(300, readings.Crossing(((370, 514),), "bundle")) and not rules.is_bound(
        3000, readings.crossing_at(3601))
    assert rules.is_bound(20.0, readings.Crossing(((-math.inf, 10.0),), "below 10"))
    image = readings.Image("constructed", 10.0, 0.01)
    row = rules.check_row(image, "", "step", "still on M_3 at 9966", "still on M_3 at 9966", 9650.0, -316.0, "step",
                          10.0, bound=True)
    assert published.page.difference_text(row) == "at least 316 earlier"
    assert published.page.difference_text(dict(row, difference=0.004, unit="loss")) == "at least 0.0040 higher"
    assert published.page.difference_text(dict(row, bound=False)) == "-316"
    shown = published.page.table([row])._repr_markdown_().splitlines()[-1]
    assert "at least 316 earlier" in shown and "at least 31.6" in shown and "-316" not in shown
    said = published.page.summary([row], image)
    assert "(at least 316 earlier, at least 31.6 px)" in said and "-316" not in said
    kept = number_row(**published.page.number_rows([row])[0])
    assert kept["bound"] is True and "| at least 316 |" in NumbersTable([kept])._repr_markdown_()  # numbers.json too
    assert "bound" not in published.page.number_rows([dict(row, bound=False)])[0]


def test_fig3a_says_the_curve_left_on_m3_as_a_bound():
    """Second route, from Figure 3a's pairing: the seed paired with the curve still on M_3 at the window's end
    (published step ≥ 9966) has a difference known only as a bound, 9966 − its step or more, and the page's table
    says it in words; every other pair's difference is a value."""
    ours = {0: [395, 725, 1310, 5181], 1: [592, 1074, 1426, 4597], 2: [505, 627, 1872, 9650],
            3: [433, 800, 1657, 3744], 4: [495, 571, 1014, 6532], 5: [463, 813, 1084, 4947]}
    rows = f3a.compare_with_published({s: np.array(t, dtype=float) for s, t in ours.items()})
    bounded = [r for r in rows if r.get("bound")]
    assert [(r["drop"], r["seed"]) for r in bounded] == [(4, 2)]
    assert bounded[0]["published"].startswith("still on M_3") and ours[2][3] < f3a.PUBLISHED_LAST_STEP
    table = published.page.table(rows)._repr_markdown_()
    assert f"at least {f3a.PUBLISHED_LAST_STEP - ours[2][3]} earlier" in table


def test_summary_is_made_from_the_rows():
    rows = f3a.compare_with_published({s: np.array([450.0, 700.0, 1100.0, np.nan]) for s in range(6)})
    text = published.page.summary(rows, f3a.PUBLISHED_IMAGE)
    agree, total = published.page.counts(rows)
    assert f"{agree} of {total} readings agree" in text
    counted = [r for r in rows if not r.get("restates")]  # the count of curves still on M_3 restates drop 4's pairs
    assert len(counted) == len(rows) - 1 and total == len(counted)
    assert text.count("\n* ") == sum(r["verdict"] == DIFFERS for r in counted)  # one line per counted row that differs
    assert "not the published ones" in published.page.summary([], f3a.PUBLISHED_IMAGE)


def test_number_rows_carry_tolerance_and_verdict():
    rows = f1b.compare_with_published(np.linspace(1, 0.1, 7000), np.linspace(1, 0.1, 7000), 0.136)
    out = published.page.number_rows(rows)
    assert len(out) == len(f1b.PUBLISHED_READINGS)
    assert all(r["quantity"].startswith("published Figure 1b: ") and r["verdict"] in VERDICTS
               and r["tolerance"] > 0 for r in out)


def test_number_rows_carry_the_band_and_offset_the_verdict_applied():
    """Figure 14 rows judged after the scale's offset, in bands wider than a pixel: each numbers.json row carries the
    band, the offset and the margin its verdict applied, and re-judging |difference − offset| in them (by hand, not
    by the verdict rule) gives its verdict; the table text shows the band with its offset."""
    t = np.linspace(1, 0.1, 5000)
    rows = f14.compare_with_published({c: {"train": t, "iwl": t + 0.02, "icl": t - 0.01}
                                       for c in f14.PUBLISHED_READINGS},
                                      np.arange(5000), {c: {"icl": rules.Sampling("test", final=0.005)}
                                                        for c in f14.PUBLISHED_READINGS})
    out = published.page.number_rows(rows)
    assert any(r["band"] > r["tolerance"] for r in out) and any(r["offset"] != 0 for r in out)
    for r, n in zip(rows, out):
        assert (n["band"], n["offset"], n["unresolved"]) == (r["band"], r.get("offset") or 0.0, r["unresolved"])
        left = abs(n["difference"] - n["offset"])
        assert n["verdict"] == (AGREES if left <= n["band"] else CANNOT_TELL
                                if left <= n["band"] + n["unresolved"] else DIFFERS)
        if r["unit"] == "loss":  # 3 decimals, or 2 significant digits below 0.01 (a trailing zero kept)
            band = f"{n['band']:.3f}" if n["band"] >= 0.01 else f"{n['band']:#.2g}"
            assert published.page.band_text(n).startswith(f"{band} after {n['offset']:+.3f}")


def test_paper_names_come_from_page_titles(tmp_path):
    assert published.page.paper_name("# Figure 1b — ATTN_M learns in one drop") == "Figure 1b"
    page = tmp_path / "beyond_x.md"
    page.write_text("# Beyond the paper — something\n")
    assert published.page.page_name(page) == "beyond_x"
    assert published.page.short_quantity("published Figure 14, c = 0.2: final", "Figure 14") == "c = 0.2: final"


# ------------------------------------------------------------------------------------ commands on the pages

@pytest.mark.parametrize("cfg", [
    RunConfig(model="attnS", head_num=5, init=1e-2, lr=0.02, epoch=10001, trainset_size=80000, seed=3,
              init_scheme="dec2024"),
    RunConfig(model="mlp", cubic_feat=True, head_num=8, init=1e-6, white_cov=True, icl=0.4, testset_size=64),
    RunConfig(trainset_size=None, draws="streams", spectrum=(0.5, 0.3, 0.1, 0.1), normalize="mean", vary_len=True),
])
def test_train_command_runs_the_same_configuration(cfg):
    words = train_command(cfg).split()
    assert words[:2] == ["linattn", "train"]
    assert config_from_args(build_parser().parse_args(words[1:])) == cfg


# ------------------------------------------------------------------------- Figure 14's landmarks, drawn on our panels

def test_figure_14_landmarks_are_the_readings_that_name_a_step_and_a_loss():
    """Every crossing, value at a step and final value of a published panel becomes one point of that panel, in the
    reading's own step and loss; an extreme becomes one only where its step is known (at the middle of its range)."""
    marks = f14.published_landmarks()
    assert sorted(marks) == sorted(f14.PUBLISHED_READINGS)
    for c, panel in f14.PUBLISHED_READINGS.items():
        points = {(m["curve"], m["step"], m["loss"]) for m in marks[c]}
        for r in panel:
            kind = r.how[0]
            if kind in ("below", "above"):
                assert (r.curve, r.value, r.how[1]) in points
            elif kind == "at":
                assert (r.curve, r.how[1], r.value) in points
            elif kind == "final":
                assert (r.curve, f14.PUBLISHED_LAST_STEP, r.value) in points
            elif kind == "argmin":
                low = next(x for x in panel if x.curve == r.curve and x.how[0] == "min")
                assert (r.curve, sum(r.value) / 2, low.value) in points
        for m in marks[c]:
            assert m["curve"] in ("train", "iwl", "icl") and 0 <= m["step"] <= 5000 and 0 <= m["loss"] <= 2.29
            assert 0 <= m["step_pm"] <= 200


# ----------------------------------------------------------------------------- claims of the paper's text

def _fig4_escape():
    """The theory's escape-time estimates for Figure 4's rank-one run at the published settings (D = 8)."""
    from linattn import theory

    cov = np.diag(np.arange(8, 0, -1) / 36)
    return theory.attn_s_drop_steps(cov, 31, lr=0.02, init=5e-3, rank=1, head_num=9, init_scheme="jan2025",
                                    normalize="sum")


def test_figure_4_claim_counts_the_plateau_levels_the_extended_run_reaches():
    """The paper states eight levels, not a window: seven drops reach L(M_0) … L(M_7) wherever they fall; the README
    command's window is said in the reason, as the levels it reaches (drop d reaches L(M_d))."""
    window = 20001
    escape = _fig4_escape()
    every = f4.plateau_claim(np.linspace(1000, 19000, 8), window, escape)
    assert (every.paper, every.ours, every.verdict) == (8, 8, AGREES)
    drops = np.array([3000, 5000, 7000, 9000, 18000, 30000, 90000, np.nan])
    seven = f4.plateau_claim(drops, window, escape)
    assert (seven.ours, seven.verdict) == (1 + 7, AGREES)  # drops 1–7 made: L(M_7) reached
    in_window = 1 + int(np.sum(drops < window))
    assert f"that command reaches {in_window} of the 8 levels" in seven.reason
    for d in (6, 7, 8):  # the drops after the window, with the theory's estimate of each
        assert f"drop {d} ≈ step {escape[d - 1]:.0f}" in seven.reason
    assert "drop 5 ≈" not in seven.reason and "30000 and 90000" in seven.reason
    beyond = int(np.sum(escape[5:] >= window))
    assert f"({beyond} of 3 beyond the window)" in seven.reason
    short = f4.plateau_claim(np.array([3000, 5000, 7000, 9000, 18000] + [np.nan] * 3), window, escape)
    assert (short.ours, short.verdict) == (6, DIFFERS)  # the extended run itself stops at L(M_5)
    row = number_row(**short.row())
    assert row["quantity"].startswith(short.counted) and row["verdict"] == DIFFERS and "tolerance" not in row


def _two_stage(shoulder: bool, second_at: float = 2500):
    step = np.arange(6000)
    first = 1 / (1 + np.exp((step - 1000) / 30))
    if not shoulder:
        return 0.13 + 0.87 * first
    second = 1 / (1 + np.exp((step - second_at) / 30))
    return 0.13 + 0.5 * first + 0.37 * second


def test_figure_5_claim_is_one_drop_and_names_the_pause():
    one = f5.single_drop_claim(loss_curves.count_drops(_two_stage(False)))
    assert (one.paper, one.ours, one.verdict) == (1, 1, AGREES) and "one drop, at step 1001" in one.reason
    found = loss_curves.count_drops(_two_stage(True))
    two = f5.single_drop_claim(found, lr_scale=32)
    assert (two.ours, two.verdict) == (2, DIFFERS)
    assert "2 drops, at step 1001 (57% of the fall), step 2501 (43% of the fall)" in two.reason
    assert f"at step {found.pause_steps[0]:.0f} (loss {found.pause_losses[0]:.3f})" in two.reason
    assert "32 times the published learning rates" in two.reason  # the claim says it is judged at scaled rates
    assert number_row(**two.row())["quantity"].startswith("softmax ATTN_M at 32× the published learning rates")
    assert "published" not in f5.single_drop_claim(found).counted


def _drops(dips, steps=(700, 800, 900, 1000)):
    n = len(dips) + 1
    return loss_curves.Drops(np.array(steps[:n], float), np.full(n, 1 / n), np.array(steps[:n - 1], float) + 50,
                             np.linspace(0.6, 0.2, n - 1), np.array(dips, float), True)


def test_figure_5_near_cut_caveat_only_for_a_split_close_to_the_cut():
    """A split whose dip lies between 3/4 of the cut and the cut is named, with its step and dip; a deep dip, a
    single drop and a far-apart two-stage curve (dip near 0) get no caveat (the counts at moved cuts unchanged)."""
    cut = loss_curves.DROP_DIP

    def said(d) -> str:
        return f5.near_cut_words(d, len(d), len(d))

    near = said(_drops([0.05, 0.29, 0.1]))
    assert "marginal" in near and "the split at step 850 (the fall rate dips to 29%" in near and "750" not in near
    assert "33%" in near and "lies near its cut" in near
    both = said(_drops([0.30, 0.26]))
    assert "lie near their cuts" in both and "step 750" in both and "step 850" in both
    assert said(_drops([0.74 * cut])) == ""  # deep enough: the split is clear
    assert said(_drops([])) == ""  # one drop: no split
    apart = loss_curves.count_drops(_two_stage(True))
    assert len(apart) == 2 and apart.pause_dips[0] < 0.1 and said(apart) == ""


def test_figure_5_final_loss_beside_loss_star_is_a_training_loss():
    """A final training loss never agrees with L* by its sampling error: within 2 SE of L* (either side) it is
    "cannot tell from L*", never "at L*" nor "below"; beyond, below or above; "at L*" only where equal, and a zero SE
    leaves no margin."""
    assert f5.final_vs_loss_star(0.1330, 0.1360, 0.0016) == "cannot tell from $L^*$"  # 0.003 ≤ 2 × 0.0016
    assert f5.final_vs_loss_star(0.1390, 0.1360, 0.0016) == "cannot tell from $L^*$"
    assert f5.final_vs_loss_star(0.1330, 0.1360, 0.0014) == "below $L^*$"  # 0.003 > 2 × 0.0014
    assert f5.final_vs_loss_star(0.1465, 0.1360, 0.002) == "above $L^*$"
    assert f5.final_vs_loss_star(0.1360, 0.1360, 0.0016) == "at $L^*$"
    assert f5.final_vs_loss_star(0.1359, 0.1360, 0.0) == "below $L^*$"
    assert "2 standard errors" in f5.final_rule_words() and "never said to agree" in f5.final_rule_words()


def test_figure_5_claim_cannot_tell_a_single_drop_in_a_run_still_falling():
    """One drop in a run that ends while the loss still falls fast cannot confirm a single drop; a second drop under
    way at the end refutes it although no plateau follows it."""
    step = np.arange(6000)
    falling = 0.13 + 0.87 / (1 + np.exp((step - 5600) / 300))  # one drop, its second half cut off by the end
    unsettled = f5.single_drop_claim(loss_curves.count_drops(falling))
    assert (unsettled.ours, unsettled.verdict) == (1, CANNOT_TELL) and "still falling" in unsettled.reason
    under_way = f5.single_drop_claim(loss_curves.count_drops(_two_stage(True, second_at=5950)))
    assert (under_way.ours, under_way.verdict) == (2, DIFFERS) and "still falling" in under_way.reason


def test_figure_5_checks_say_what_each_run_shows_of_the_single_drop():
    checks = [dict(label="seed 11", drops=2, drop_steps=[850, 5230], settled=False, step_scale=1),
              dict(label="seed 12", drops=1, drop_steps=[1010], settled=False, step_scale=1),
              dict(label="half", drops=2, drop_steps=[1250, 3300], settled=True, step_scale=0.5)]
    # the half-rate run beside the main run at the same gradient-flow time: both drops by the main run's step 3000
    checks[2]["matched"] = f5.MatchedTime(reach=3000.0, steps=np.array([628.0, 1664.0]),
                                          check_steps=np.array([625.0, 1650.0]), levels=np.array([0.887, 0.4405]),
                                          crossings=np.array([628.0, 1664.0]),
                                          check_crossings=np.array([627.0, 1660.0]),
                                          pauses=np.array([[1111.0, 0.748]]),
                                          check_pauses=np.array([[1110.0, 0.748]]), loss=0.156, check_loss=0.156,
                                          later=np.array([]), end=6000.0, check_settled=True)
    text = f5.check_words(2, checks)
    assert "pauses at loss 0.748 at 1110 against 0.748 at 1111" in text
    assert "(0.887 and 0.441) at steps 627 and 1660 against the main run's 628 and 1664 (1 and 4 steps earlier)" in text
    assert "the main run goes on to step 6000 and makes no further drop" in text
    assert "seed 11, 2 drops at steps 850 and 5230 and still falling" in text
    assert "(against the paper's single drop: seed 11 differs; seed 12 cannot tell)" in text
    assert "(against the paper's single drop: half differs)" in text and "holds with a smaller step" in text
    assert "cannot be told from these runs" in text  # seed 12 may still make its second drop
    assert f5.drop_count_holds(2, checks[:1]) == CANNOT_TELL  # two so far, still falling: a third may come
    assert f5.drop_count_holds(2, [dict(checks[1], settled=True)]) == DIFFERS
    assert f5.drop_count_holds(1, checks[:1]) == DIFFERS  # more drops than the main run however it ends
    assert f5.drop_count_holds(2, checks[2:]) == AGREES


def test_the_report_counts_claims_apart_from_readings_and_estimates():
    """A claim (a verdict, no tolerance), a reading (a verdict and its tolerance), an estimate, a plain number and a
    check of our own run (a verdict with no published value: the phase diagram's settling criterion) each fall in
    their own group of the report, and the two claims count among its verdicts."""
    from linattn.companion.output import ESTIMATE, compare_row

    claims = [f4.plateau_claim(np.full(8, np.nan), 20001, _fig4_escape()),
              f5.single_drop_claim(loss_curves.count_drops(_two_stage(True)))]
    readings = published.page.number_rows(f1b.compare_with_published(np.linspace(1, 0.1, 7000),
                                                                 np.linspace(1, 0.1, 7000), 0.136))
    rows = [number_row(**r) for r in [c.row() for c in claims] + readings
            + [dict(quantity="escape", theory=900.0, reproduced=1000.0, verdict=ESTIMATE),
               dict(quantity="plain", theory=1.0, reproduced=1.1),
               dict(quantity="settled", reproduced=0.004, tolerance=0.01, verdict="agrees"),  # our own criterion
               dict(key="drops.attn_m.check.seed_11", quantity="again", paper=1, reproduced=1, verdict="agrees")]]
    groups = [published.page.report_group({**r, **compare_row(r)}) for r in rows]
    assert groups == ["claim"] * 2 + ["reading"] * len(readings) + ["estimate", "other", "check", "robustness"]
    assert set(groups) == set(published.page.REPORT_GROUPS)


@pytest.mark.slow
def test_the_report_notebook_counts_the_claims_among_its_verdicts(tmp_path):
    """The reproduction report (figures_src/beyond_error_table.md), run on the numbers of Figures 4 and 5 at the
    published settings, files their two claims as claims and counts them among its verdicts."""
    import csv
    import json

    import nbformat

    from linattn.companion.runner import schedule

    claims = {"fig04_low_rank": f4.plateau_claim(np.full(8, np.nan), 20001, _fig4_escape()),
              "fig05_softmax": f5.single_drop_claim(loss_curves.count_drops(_two_stage(True)))}
    for name, claim in claims.items():
        (tmp_path / name).mkdir()
        rows = [number_row(**claim.row()), number_row("a plain number", theory=1.0, reproduced=1.1)]
        (tmp_path / name / "numbers.json").write_text(json.dumps(rows))
    (result,) = schedule.run_figures(preset="paper", only=["beyond_error_table"], out=tmp_path, jobs=1, progress=False)
    assert result.status == "ran", result.error
    with open(tmp_path / "beyond_error_table" / "beyond_error_table.csv", encoding="utf-8") as f:
        report = list(csv.DictReader(f))
    filed = {r["page"]: r for r in report if r["group"] == "claim"}
    assert sorted(filed) == ["Figure 4", "Figure 5"]
    assert all(filed[f"Figure {n}"]["verdict"] == DIFFERS for n in (4, 5))
    shown = " ".join(o.get("data", {}).get("text/markdown", "") for c in
                     nbformat.read(tmp_path / "beyond_error_table.ipynb", as_version=4).cells
                     for o in c.get("outputs", []))
    assert "In all, 0 of 2 verdicts agree" in shown and "claims of the paper's text that differ | 2" in shown


def test_every_published_row_has_its_own_key():
    """Each comparison row of Figures 1b, 3a and 14 becomes a numbers.json row with a key of its own (the report,
    the README and the tests find rows by key)."""
    t = np.linspace(1, 0.1, 7000)
    fig3a = f3a.compare_with_published({s: np.array([450.0, 700.0, 1100.0, 5000.0 + s]) for s in range(6)})
    fig14 = f14.compare_with_published({c: {"train": t, "iwl": t, "icl": t} for c in f14.PUBLISHED_READINGS})
    for rows in (f1b.compare_with_published(t, t, 0.136), fig3a, fig14):
        keys = [r["key"] for r in published.page.number_rows(rows)]
        assert len(rows) > 3 and len(set(keys)) == len(keys) and all(k.startswith("published.") for k in keys)


def test_fig3a_step_reading_is_judged_with_its_own_seeds_twin_shift():
    """Figure 3a's drop-3 pair 100 steps (3.5 px) from its published crossing differs on the tolerance and the
    reading's pixel alone (2 × 28.9 = 57.8 steps); with its seed's population twin 50 steps away the margin is
    57.8 + 50 = 107.8, so it cannot tell; with the twin 30 steps away (87.8) it still differs. Another seed's twin
    shift does not count, and a twin not within the run adds nothing (the margin recomputed here by hand)."""
    drops = {s: np.array([450.0, 700.0, c, 5000.0]) for s, c in enumerate((1250.0, 997.0, 1956.0, 1069.0, 1608.0,
                                                                           1718.0))}  # seed 0 at its own 1250

    def drop3(twins):
        rows = f3a.compare_with_published(drops, twins=twins)
        return next(r for r in rows if r.get("drop") == 3 and r.get("seed") == 2)

    def twins(shift, seed=2):
        return {s: t - (shift if s == seed else 0.0) for s, t in drops.items()}

    assert drop3(None)["verdict"] == DIFFERS and drop3(None)["difference"] == 100.0
    row = drop3(twins(50.0))
    assert row["verdict"] == CANNOT_TELL and row["unresolved"] == pytest.approx(28.90 + 50.0)
    assert drop3(twins(30.0))["verdict"] == DIFFERS
    assert drop3(twins(500.0, seed=3))["verdict"] == DIFFERS
    unknown = {s: np.array([450.0, 700.0, np.nan, 5000.0]) for s in drops}
    assert drop3(unknown)["verdict"] == DIFFERS


def test_one_finite_p_margin_rule_serves_figures_1b_and_3a():
    """The shift between ours and the twin is the one rule: |ours − twin|, 0 where either is missing."""
    assert rules.finite_p_margin(926.0, 898.0) == 28.0 and rules.finite_p_margin(-25.0, -19.0) == 6.0
    assert rules.finite_p_margin(926.0, math.nan) == 0.0 and rules.finite_p_margin(None, 3.0) == 0.0


def test_a_plateau_level_is_a_training_loss_and_never_agrees_by_sampling_error():
    """Figure 3a's plateau L(M_1) = 0.641 against seeds' levels around 0.651 (2.6 pixels off): no sampling-error
    agreement (a training loss is biased); within 2·√(sd²/n + sd²) of the seeds' spread it cannot tell, beyond it it
    differs; within a pixel it agrees; a step reading has no standard error."""
    from linattn.companion.uncertainty import AGREES, CANNOT_TELL, DIFFERS

    drops = {s: np.full(4, np.nan) for s in range(6)}

    def level_row(m3):
        levels = [[1.001], [0.641], [0.381], m3, [0.138]]
        return next(r for r in f3a.compare_with_published(drops, levels) if "L(M_3)" in r["what"])

    px = f3a.PUBLISHED_IMAGE.loss_per_px
    m3 = np.array([0.210, 0.230, 0.220, 0.215, 0.225, 0.220])
    wide = level_row(m3)  # sd 0.0071: margin 2·√(sd²/6 + sd²) = 0.0153, + the reading's pixel
    assert wide["verdict"] == CANNOT_TELL and wide["reproduced"] == pytest.approx(0.220)
    assert wide["unresolved"] == pytest.approx(2 * m3.std(ddof=1) * math.sqrt(7 / 6) + px)
    # sd 0.0005: 0.010 is beyond 0.0038 + 0.0012 + 0.0038
    assert level_row([0.2195, 0.2205, 0.220])["verdict"] == DIFFERS
    assert level_row([0.220])["verdict"] == DIFFERS  # one seed: no spread, the pixel and the reading's pixel alone
    assert level_row([0.212, np.nan])["verdict"] == AGREES  # 0.002 off, within the pixel 0.00383
    steps = [r for r in f3a.compare_with_published(drops, [[0.651]] * 5) if r["unit"] == "step"]
    assert steps and all(r["standard_error"] is None for r in steps)


def test_figure_14_judges_its_losses_after_the_offset_of_its_loss_scale():
    """Constructed Figure 14 rows whose every loss reading is off by −0.0099 + 0.005 × its level (a scale read a
    pixel off at low losses), judged beforehand in a band of half a pixel: the line is measured (value −0.0099, slope
    0.005, no scatter), stated, removed, and they all agree; one reading off by 3 pixels more still differs."""
    from linattn.companion.uncertainty import AGREES, DIFFERS

    flat = {c: {k: np.full(5000, 0.5) for k in ("train", "iwl", "icl")} for c in f14.PUBLISHED_READINGS}
    rows = [dict(r, difference=-0.0099 + 0.005 * r["paper"], band=0.0049, unresolved=0.0, verdict=DIFFERS)
            if r["unit"] == "loss" else r for r in f14.compare_with_published(flat, np.arange(5000))]
    judged = rules.judged_after_offset(rows)
    loss = [r for r in judged if r["unit"] == "loss"]
    assert len(loss) == sum(1 for rs in f14.PUBLISHED_READINGS.values() for x in rs if x.unit == "loss") > 30
    assert all(r["verdict"] == AGREES for r in loss)
    stated = rules.offset_of(judged)
    assert (stated.value, stated.slope) == (pytest.approx(-0.0099), pytest.approx(0.005))
    assert stated.scatter == pytest.approx(0, abs=1e-12) and stated.n == len(loss)
    assert "-0.0099 + 0.0050 × loss" in published.page.summary(judged, f14.PUBLISHED_IMAGE)
    # without the offset each loss is judged on its raw difference in the same band (by hand, not the verdict rule)
    raw = sum(abs(r["difference"]) <= r["band"] if r["unit"] == "loss" else r["verdict"] == AGREES
              for r in judged if r["verdict"] in VERDICTS)
    assert raw < sum(r["verdict"] == AGREES for r in judged)
    assert published.page.counts(judged, offset_removed=False) == (raw, len(judged))
    assert (f"judged without it {raw} of {len(judged)} readings agree"
            in published.page.summary(judged, f14.PUBLISHED_IMAGE))
    i = next(i for i, r in enumerate(rows) if r["unit"] == "loss")
    rows[i] = dict(rows[i], difference=rows[i]["difference"] - 0.03)
    assert rules.judged_after_offset(rows)[i]["verdict"] == DIFFERS


def test_a_test_loss_on_the_published_draws_carries_no_sampling_term():
    """The same final test-loss reading 0.018 above ours (se 0.004): with an independent published test set the band
    is 0.0099 + 2·√2·0.004 = 0.0212 and it agrees; on the same draws the sampling error cancels, the band is the pixel
    0.0099 and the difference, beyond it but within one more pixel (0.0198), cannot tell; a difference of 0.025 then
    differs. The page says why the term is absent."""
    r_test = readings.Reading("", "final", "icl", ("final",), 0.148, "loss")

    def row(ours, same):
        curve = np.r_[np.ones(100), np.full(100, ours)]
        return rules.compare([r_test], {"icl": curve}, f14.PUBLISHED_IMAGE,
                             sampling={"icl": rules.Sampling("test", final=0.004, same_draws=same)})[0]

    independent, same = row(0.130, False), row(0.130, True)
    assert independent["band"] == pytest.approx(0.0099 + 2 * math.sqrt(2) * 0.004) and independent["verdict"] == AGREES
    assert same["band"] == pytest.approx(0.0099) and same["standard_error"] is None and same["verdict"] == CANNOT_TELL
    assert row(0.123, True)["verdict"] == DIFFERS
    said = published.page.summary([same], f14.PUBLISHED_IMAGE)
    assert "no sampling-error term" in said and "two independent test sets" not in said
    assert "no sampling-error term" not in published.page.summary([independent], f14.PUBLISHED_IMAGE)


def test_a_test_loss_band_carries_both_samples_and_a_step_its_finite_p_margin():
    """A final test-loss reading with per-sequence standard error se is judged in pixel + 2·√2·se; a training-loss
    reading in the pixel alone, with the spread of two training sets as a cannot-tell margin; a step reading with a
    population twin gets the twin's shift as its margin."""
    from linattn.companion.uncertainty import AGREES, CANNOT_TELL

    r_test = readings.Reading("", "final", "icl", ("final",), 0.148, "loss")
    r_train = readings.Reading("", "final", "train", ("final",), 0.148, "loss")
    r_step = readings.Reading("", "below 0.5", "train", ("below", 0.5), 1000, "step")
    curve = np.r_[np.ones(1050), np.full(950, 0.130)]
    twin = np.r_[np.ones(1100), np.full(900, 0.125)]
    rows = rules.compare([r_test, r_train, r_step], {"icl": curve, "train": curve}, f14.PUBLISHED_IMAGE,
                         sampling={"icl": rules.Sampling("test", final=0.004),
                                   "train": rules.Sampling("train", final=0.004)}, twins={"train": twin})
    test_row, train_row, step_row = rows
    assert test_row["band"] == pytest.approx(0.0099 + 2 * math.sqrt(2) * 0.004) and test_row["verdict"] == AGREES
    assert train_row["band"] == pytest.approx(0.0099) and train_row["verdict"] == CANNOT_TELL
    assert train_row["unresolved"] == pytest.approx(2 * math.sqrt(2) * 0.004 + 0.0099)  # + the reading's pixel
    assert step_row["difference"] == 50 and step_row["unresolved"] == pytest.approx(50 + 16.67)
    assert step_row["verdict"] == CANNOT_TELL



def test_first_of_each_fact_on_constructed_cases():
    """Rows that state one fact, whatever their verdicts, point to the first of them: none alike (each its own), two
    alike (the later points to the earlier, either way the test is put), a chain (a~b, b~c: one fact, though a and c
    are not alike) and two facts interleaved."""
    first = rules.first_of_each_fact
    assert first(3, lambda i, j: False) == [0, 1, 2]
    assert first(0, lambda i, j: True) == []
    assert first(3, lambda i, j: {i, j} == {0, 2}) == [0, 1, 0]
    assert first(3, lambda i, j: (i, j) == (2, 0)) == [0, 1, 0]  # asked only one way round: the same fact
    assert first(3, lambda i, j: {i, j} in ({0, 1}, {1, 2})) == [0, 0, 0]  # a chain is one fact
    facts = "xyxyz"
    assert first(5, lambda i, j: facts[i] == facts[j]) == [0, 1, 0, 1, 4]
    assert first(4, lambda i, j: {i, j} in ({1, 3}, {0, 3})) == [0, 0, 2, 0]  # a later row joins two earlier facts
