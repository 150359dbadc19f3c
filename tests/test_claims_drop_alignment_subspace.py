"""Events that happened (issue 44, findings 2, 3, 4 and 11): the drop rule with a stated minimum fall, alignment read
against the weights' growth and subspace stability at the rank learned, each on constructed cases (flat, creeping,
transit, shoulder, out of order); and the claims of the four pages that use them (initialisation scale, diagnostics,
Figure 3c, population), recomputed from each figure's dataset by a second route (numpy on the stored curves and
weights, never the rule that wrote the claim), at the quick preset and at each page's knob cases."""

import json

import numpy as np
import pytest

import linattn
from linattn import theory
from linattn.analysis import diagnostics as dg
from linattn.analysis import events
from linattn.analysis import loss_curves as lc
from linattn.companion import presets
from linattn.companion.figures import beyond_diagnostics, beyond_population, fig03c_attns_alignment, figA_init_scale

# ---------------------------------------------------------------- the drop rule on constructed curves


def _logistic(step, centre, start, final, width=20.0):
    return final + (start - final) / (1 + np.exp((step - centre) / width))


def test_a_flat_or_creeping_curve_has_no_drop():
    """The referee's case: ATTN_S from init 0.001 creeps down by 1e-8 of its level and never drops; its midpoint
    crossing (step 18577) was an event that never happened."""
    step = np.arange(20001)
    creep = 1.0257691496786647 - 1e-8 * step / step[-1]
    assert np.isnan(lc.half_drop_step(creep))
    assert lc.first_drop_step(creep) is None and lc.first_drop_course(creep) == "no drop within the run"
    assert np.isnan(lc.drop_steps(creep, [creep[0], creep[-1]])[0])
    flat = np.full(500, 0.7)
    assert np.isnan(lc.half_drop_step(flat)) and lc.first_drop_course(flat) == "no drop within the run"


def test_the_minimum_fall_is_a_fraction_of_the_level_left():
    step = np.arange(1000)
    small = _logistic(step, 500.0, 1.0, 1.0 - 0.5 * lc.MIN_FALL)  # half the least fall: no drop
    large = _logistic(step, 500.0, 1.0, 1.0 - 2 * lc.MIN_FALL)  # twice it: a drop, at the midpoint crossing
    assert np.isnan(lc.half_drop_step(small))
    crossing = int(np.argmax(large < (large[0] + large[-1]) / 2))
    assert crossing in (500, 501) and lc.half_drop_step(large) == crossing and lc.first_drop_course(large) == "drop"
    assert np.isfinite(lc.half_drop_step(small, min_fall=0.0))  # with no least fall the small one would count
    with pytest.raises(ValueError, match="min_fall"):
        lc.drop_steps(large, [1.0, 0.5], min_fall=1.5)


def test_every_saddle_gap_the_package_draws_is_a_drop():
    """The stated reason for 1 %: the smallest relative gap between neighbouring saddle levels, L(M_7) − L(M_8) at
    D = 8, N = 15 on an evenly spread spectrum, is 2.2 % of L(M_7), so no true drop is dropped."""
    for D in (2, 4, 8):
        for N in (15, 31):
            levels = theory.plateau_losses(np.diag(np.arange(D, 0, -1.0) / D), N)
            assert np.all(-np.diff(levels) >= lc.MIN_FALL * levels[:-1]), (D, N)


def test_a_transit_through_a_level_counts_both_drops_at_their_crossings():
    levels = np.array([1.0, 0.6, 0.3])
    step = np.arange(1000)
    transit = _logistic(step, 400.0, 1.0, 0.3, width=10.0)  # no rest at 0.6: straight from L_0 to L_2
    found = lc.drop_steps(transit, levels)
    assert found[0] == np.argmax(transit < 0.8) and found[1] == np.argmax(transit < 0.45)
    assert found[0] <= found[1]


def test_a_shoulder_above_the_midpoint_is_no_drop():
    """A curve that slows at 0.5, above the midpoint 0.45 of L_1 = 0.6 and L_2 = 0.3, makes drop 1 only."""
    step = np.arange(1000)
    shoulder = _logistic(step, 300.0, 1.0, 0.5, width=10.0)
    found = lc.drop_steps(shoulder, [1.0, 0.6, 0.3])
    assert np.isfinite(found[0]) and np.isnan(found[1])


def test_out_of_order_a_dip_that_comes_back_counts_its_first_passage():
    """A curve that dips to L_2, returns to L_1 and falls again: the drops are its first passages below each
    midpoint, in order, whatever came after."""
    loss = np.concatenate([np.full(100, 1.0), np.full(50, 0.3), np.full(100, 0.6), np.full(50, 0.3)])
    assert list(lc.drop_steps(loss, [1.0, 0.6, 0.3])) == [100.0, 100.0]
    # a curve that rises has no drop, and a curve that starts below its midpoint falls at once: no plateau
    assert np.isnan(lc.half_drop_step(loss[::-1].copy()))
    at_once = np.concatenate([[1.0], np.full(200, 0.2)])
    assert lc.first_drop_course(at_once) == "no plateau" and lc.first_drop_step(at_once) is None


# ---------------------------------------------------------------- alignment against growth, constructed


def test_alignment_against_growth_on_constructed_heads():
    step = 10 * np.arange(100)
    grows = np.concatenate([np.full(50, 0.01), np.linspace(0.01, 1.0, 50)])  # grows from index 50 on
    early = np.concatenate([np.linspace(0.2, 0.95, 30), np.full(70, 0.99)])  # aligned at index ≈ 28
    late = np.concatenate([np.full(80, 0.3), np.full(20, 0.99)])  # aligned at index 80, long after it grew
    start = np.full(100, 0.95)
    never = np.full(100, 0.5)
    g = events.alignment_against_growth(early, grows, step, aligned=0.9)
    assert g.verdict(0.9) == "aligned while small" and g.size_when_aligned == pytest.approx(0.01)
    assert g.growth_when_aligned == pytest.approx(1.0)  # it had not grown from its start either
    g = events.alignment_against_growth(late, grows, step, aligned=0.9)
    assert g.verdict(0.9) == "grew before it aligned" and g.overlap_when_grown == 0.3
    assert g.grown_step == step[np.argmax(grows >= 0.1)] and g.aligned_step == 800
    assert events.alignment_against_growth(start, grows, step, aligned=0.9).verdict(0.9) == "aligned from the start"
    assert events.alignment_against_growth(never, grows, step, aligned=0.9).verdict(0.9) == "not aligned"
    assert events.alignment_against_growth(never, grows, step, aligned=0.9).growth_when_aligned is None
    # small against its largest, yet 500 times its start: the verdict is "while small", the growth factor says the rest
    risen = np.concatenate([np.geomspace(1e-6, 5e-4, 30), np.linspace(5e-4, 1.0, 70)])
    g = events.alignment_against_growth(early, risen, step, aligned=0.9)
    assert g.verdict(0.9) == "aligned while small" and g.size_when_aligned < 0.1
    assert g.growth_when_aligned == pytest.approx(risen[g.aligned_step // 10] / 1e-6) and g.growth_when_aligned > 100
    assert events.alignment_against_growth(early, np.where(step == 0, 0.0, risen), step,
                                           aligned=0.9).growth_when_aligned is None  # no multiple of a zero start
    # the referee's head of e₁: 0.88 at the start, past the 0.9 cut at 1.4 × its starting output scale — aligned from
    # nearly the start; the same start past the cut only after growing 500-fold is aligned while small; a head that
    # turns from far off (0.2) before it grows at all aligned while small too: it did turn
    near = np.concatenate([np.linspace(0.88, 0.99, 12), np.full(88, 0.99)])  # past 0.9 at index 3 (0.91)
    slow = np.concatenate([np.linspace(1e-3, 1.4e-3, 5), np.geomspace(1.4e-3, 1.0, 95)])
    g = events.alignment_against_growth(near, slow, step, aligned=0.9)
    assert g.aligned_step == 30 and g.growth_when_aligned < 2 and g.verdict(0.9) == "aligned from nearly the start"
    late_near = np.concatenate([np.full(25, 0.88), np.full(75, 0.99)])  # past the cut at index 25, grown by then
    g = events.alignment_against_growth(late_near, risen, step, aligned=0.9)
    assert g.growth_when_aligned > 2 and g.verdict(0.9) == "aligned while small"
    g = events.alignment_against_growth(early, grows, step, aligned=0.9)  # 0.2 → 0.95 at its starting size
    assert g.growth_when_aligned < 2 and g.verdict(0.9) == "aligned while small"
    # at the edges: an overlap just under 0.9 × the cut, or an output just at twice its start, is not "nearly"
    edge = np.concatenate([[0.8099], np.full(99, 0.99)])
    assert events.alignment_against_growth(edge, slow, step, aligned=0.9).verdict(0.9) == "aligned while small"
    doubled = np.concatenate([[1.0], np.full(98, 2.0), [100.0]])  # twice its start from index 1, then grows
    assert events.alignment_against_growth(near, doubled, step, aligned=0.9).verdict(0.9) == "aligned while small"
    assert events.alignment_against_growth(near, doubled * 0.999 + 0.001, step, aligned=0.9).verdict(0.9) == (
        "aligned from nearly the start")
    # a head that grows and then hands its direction over (shrinks) is measured against its largest size
    handed = np.concatenate([grows, np.full(20, 0.05)])
    assert np.nanmax(events.scale_fraction(handed[:, None])) == 1.0


# ---------------------------------------------------------------- subspace stability, constructed


def _rotated_cov(seed=0):
    q = np.linalg.qr(np.random.default_rng(seed).standard_normal((4, 4)))[0]
    return q @ np.diag([0.4, 0.3, 0.2, 0.1]) @ q.T, q


def test_the_learned_subspace_of_each_saddle_is_the_theorys_and_the_final_top_direction_is_not():
    cov, q = _rotated_cov()
    for m in range(1, 4):
        A = theory.pcr_weights(cov, 31, m, normalize="mean")
        assert dg.numerical_rank(A) == m and dg.learned_subspace_distance(A, cov) < 1e-12
    # the final matrix's top singular direction is e_4 (its largest value 1/(λ_4 c_4)): comparing k = 1 with it, as
    # the page did, jumps at every drop
    final = theory.pcr_weights(cov, 31, 4, normalize="mean")
    assert abs(dg.top_subspace(final, 1)[:, 0] @ q[:, 3]) == pytest.approx(1.0)
    wrong = np.outer(q[:, 1], q[:, 1])  # rank one, but along e_2
    assert dg.learned_subspace_distance(wrong, cov) == pytest.approx(1.0)


def test_a_learned_subspace_that_stays_does_not_move_and_one_that_is_swapped_does():
    cov, q = _rotated_cov(1)
    M1, M2 = (theory.pcr_weights(cov, 31, m, normalize="mean") for m in (1, 2))
    assert dg.learned_subspace_moved(M1, [M1, M2, M2], 1) < 1e-12
    swapped = np.outer(q[:, 1], q[:, 1]) + np.outer(q[:, 2], q[:, 2])  # rank two without e_1
    assert dg.learned_subspace_moved(M1, [M2, swapped], 1) == pytest.approx(1.0)
    assert np.isnan(dg.learned_subspace_moved(M1, [theory.pcr_weights(cov, 31, 4, normalize="mean")], 1))


# ---------------------------------------------------------------- the pages, by a second route


def _cases(module):
    return [dict()] + [dict(c) for c in module.KNOB_CASES]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("hdrop_runs")


def _build(module, case, store, monkeypatch):
    monkeypatch.setenv("LINATTN_RUNS_DIR", str(store))
    return module.compute(presets.resolve(module.NAME, "quick", case))


def _numpy_drop(L, min_step=10):
    """The first drop of a curve by numpy: none unless it falls by 1 % of its start; the first index below the
    midpoint of its start and end; too early is no plateau."""
    L = L[np.isfinite(L)]
    if L[0] - L[-1] < 0.01 * abs(L[0]) or not (L < (L[0] + L[-1]) / 2).any():
        return "no drop within the run", np.nan
    k = int(np.argmax(L < (L[0] + L[-1]) / 2))
    return ("drop", float(k)) if k >= min_step else ("no plateau", np.nan)


@pytest.mark.slow
@pytest.mark.parametrize("case", _cases(figA_init_scale), ids=str)
def test_init_scale_claims_by_a_second_route(case, store, monkeypatch):
    page = figA_init_scale
    ds = _build(page, case, store, monkeypatch)
    S = json.loads(ds.attrs["settings"])
    summary, table = page.summary(ds), page.claims_table(ds).rows
    for k, model in page.MODELS.items():
        scales = [float(i) for i in S[page._INITS[k]]]
        course, drop = zip(*[_numpy_drop(ds.train_loss.sel(model=k, init=i).values) for i in scales])
        np.testing.assert_array_equal(ds.drop_step.sel(model=k, init=scales).values, drop)
        assert list(ds.drop_course.sel(model=k, init=scales).values) == list(course)
        stuck = [i for i, c in zip(scales, course) if c == "no drop within the run"]
        at_once = [i for i, c in zip(scales, course) if c == "no plateau"]
        row = next(r for r in table if r["what"] == f"{page.LABELS[k]}: scales with no plateau")
        assert row["ours"] == (", ".join(f"{i:g}" for i in at_once) or "none")
        last = {"drop": f"drops at step {drop[-1]:.0f}", "no plateau": "shows no plateau",
                "no drop within the run": "does not drop within the run"}[course[-1]]
        assert f"{page.LABELS[k]} (init {scales[-1]:g}) {last}" in page.words(ds)["largest"]
        row = next(r for r in table if r["what"] == f"{page.LABELS[k]}: scales with no drop within the run")
        assert row["ours"] == (", ".join(f"{i:g}" for i in stuck) or "none")
        assert (f"{page.LABELS[k]} from init" in summary) == bool(stuck)
        # the fitted law: only the small scales that drop
        x, y = np.array(scales), np.array(drop)
        ok = np.isfinite(y) & (x < page.SMALL)
        law = float(ds.law.sel(model=k))
        if ok.sum() >= 2:
            fit = (np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0] if model == "attnS"
                   else np.polyfit(-np.log(x[ok]), y[ok], 1)[0])
            assert law == pytest.approx(fit, rel=1e-9)
        else:
            assert np.isnan(law)
        # the ratio sentence: run over population twin, over the runs where both drop
        th = ds.drop_step_theory.sel(model=k, init=scales).values
        both = np.isfinite(y) & np.isfinite(th)
        if both.any():
            r = y[both] / th[both]
            lo, hi = f"{r.min():.2f}", f"{r.max():.2f}"
            assert f"drops at {lo} times" in summary if lo == hi else f"drops at {lo} to {hi} times" in summary
    # the escape estimate is τ/(λ_1² v_0), v_0 the geometric mean of v = init and k = q = init/√(R(D+1)) (jan2025)
    run = S["attn_s"]
    D, R, N = run["in_dim"], run["rank"], run["seq_len"] - 1
    lam1 = float(np.linalg.eigvalsh(ds.cov.values)[-1])
    for init in S["inits_s"]:
        _, init_p = theory.to_paper_normalisation("attnS", N, lr=run["lr"], init=init)
        v0 = init_p / (R * (D + 1)) ** (1 / 3)
        expected = theory.time_to_steps(1 / (lam1**2 * v0), run["lr"], normalize="sum", model="attnS", N=N)
        assert float(ds.drop_step_estimate.sel(model="attn_s", init=init)) == pytest.approx(float(expected))
    # the median ratio of the small scales' drops to that estimate, as the summary words it
    sim = ds.drop_step.sel(model="attn_s", init=S["inits_s"]).values
    est = ds.drop_step_estimate.sel(model="attn_s", init=S["inits_s"]).values
    small = (np.array(S["inits_s"]) < page.SMALL) & np.isfinite(sim)
    if np.isfinite(float(ds.law.sel(model="attn_s"))):
        assert f"median {np.median(sim[small] / est[small]):.1f} times" in summary
    assert "v_0$ = init" not in summary and "nan" not in summary


def _own_distance(U, V):
    """sqrt(mean sin²θ) over the principal angles, by the cosines (the singular values of UᵀV)."""
    if not U.shape[1] or not V.shape[1]:
        return 0.0
    c = np.clip(np.linalg.svd(U.T @ V, compute_uv=False), 0, 1)
    return float(np.sqrt(np.mean(1 - c**2)))


def _own_rank(A):
    s = np.linalg.svd(A, compute_uv=False)
    return int((s > 0.05 * s[0]).sum()) if s[0] > 0 else 0


@pytest.mark.slow
@pytest.mark.parametrize("case", _cases(beyond_diagnostics), ids=str)
def test_diagnostics_subspace_claims_by_a_second_route(case, store, monkeypatch):
    page = beyond_diagnostics
    ds = _build(page, case, store, monkeypatch)
    A, E = ds.A.values, ds.eigenvectors.values
    D = E.shape[0]
    ranks = [_own_rank(a) for a in A]
    assert list(ds.numerical_rank.values) == ranks
    own = [_own_distance(np.linalg.svd(a)[0][:, :r], E[:, :r]) for a, r in zip(A, ranks)]
    np.testing.assert_allclose(ds.subspace_dist.values, own, atol=1e-6)
    rows = {r["key"]: r for r in page.numbers(ds)}
    assert "subspace_dist.final" not in rows and not any(k.startswith(f"subspace_dist.M{D}") for k in rows)
    summary = page.summary(ds)
    steps = ds.step.values
    for p, m in page._plateaus(ds):
        i = int(np.flatnonzero(steps == int(ds.subspace_read_step.sel(plateau=p)))[0])
        U = np.linalg.svd(A[i])[0][:, :m]
        later = [_own_distance(U, np.linalg.svd(b)[0][:, :r]) for b, r in zip(A[i + 1:], ranks[i + 1:]) if m <= r < D]
        moved = float(ds.subspace_moved_after.sel(plateau=p))
        if later:
            assert moved == pytest.approx(max(later), abs=1e-6)
            assert f"{moved:.2g}" in summary
        else:
            assert np.isnan(moved)
        on = (steps >= ds.plateau_start.sel(plateau=p).item()) & (steps <= ds.plateau_end.sel(plateau=p).item())
        median = float(ds.subspace_dist_on_plateau.sel(plateau=p))
        if on.any():  # a median over the rest's core lies within the rest's own range
            assert min(np.array(own)[on]) - 1e-9 <= median <= max(np.array(own)[on]) + 1e-9
    assert "final one" not in summary and "nan" not in summary
    # on M_0 the size of A against the final A's, not its rank: numpy's own σ₁ ratio over the rest's snapshots
    size = np.linalg.svd(A, compute_uv=False)[:, 0] / np.linalg.svd(A[-1], compute_uv=False)[0]
    np.testing.assert_allclose(ds["size"].values, size, rtol=1e-9)
    starts = [p for p, m in zip(ds.plateau.values, ds.plateau_m.values) if m == 0]
    assert ("No plateau at" in summary) == (not starts)
    for p in starts:
        on = (steps >= ds.plateau_start.sel(plateau=p).item()) & (steps <= ds.plateau_end.sel(plateau=p).item())
        said_size = float(ds.size_on_plateau.sel(plateau=p))
        if on.any():
            assert size[on].min() - 1e-12 <= said_size <= size[on].max() + 1e-12
        assert f"{said_size:.2g} of the final" in summary and rows["size.M0"]["theory"] == 0.0
        assert not any(k.startswith(("numerical_rank.M0", "eff_rank.M0")) for k in rows)  # no rank compared at M_0
    said = page.words(ds)["run"]
    assert ("Figure 3a" in said and "our own" not in said) == presets.is_published(page.NAME,
                                                                                   json.loads(ds.attrs["settings"]))


@pytest.mark.slow
@pytest.mark.parametrize("case", _cases(fig03c_attns_alignment), ids=str)
def test_alignment_claims_by_a_second_route(case, store, monkeypatch):
    page = fig03c_attns_alignment
    ds = _build(page, case, store, monkeypatch)
    both = np.minimum(ds.key_alignment.values, ds.query_alignment.values)
    out = np.abs(ds.value.values) * ds.key_norm.values * ds.query_norm.values  # |v|‖k‖‖q‖, the head's output scale
    size = out / out.max(axis=0)
    steps, words = ds.step.values, page.words(ds)["growth"]
    aligned, grown = ds.attrs["aligned"], ds.attrs["grown"]
    verdicts: dict[str, list] = {}
    when = np.nan_to_num(ds.aligned_step.values, nan=np.inf)  # checked against the overlaps below
    for d in sorted(ds.direction.values, key=lambda d: (when[d - 1], d)):  # the order learned, as the page lists them
        h = int(ds.aligned_head.sel(direction=d)) - 1
        if h < 0:
            assert ds.growth_verdict.sel(direction=d).item() == "not aligned"
            continue
        o, v = both[:, h, d - 1], size[:, h]
        a, g = int(np.argmax(o > aligned)), int(np.argmax(v >= grown))
        assert steps[a] == float(ds.aligned_step.sel(direction=d))
        assert float(ds.overlap_at_start.sel(direction=d)) == o[0]
        assert float(ds.overlap_when_grown.sel(direction=d)) == o[g]
        assert float(ds.size_when_aligned.sel(direction=d)) == pytest.approx(v[a])
        assert float(ds.growth_when_aligned.sel(direction=d)) == pytest.approx(out[a, h] / out[0, h])
        nearly = o[0] >= ds.attrs["nearly_aligned"] * aligned and out[a, h] / out[0, h] < ds.attrs["ungrown"]
        verdict = ("aligned from the start" if o[0] > aligned else "aligned from nearly the start" if nearly else
                   "aligned while small" if a <= g else "grew before it aligned")
        assert ds.growth_verdict.sel(direction=d).item() == verdict
        verdicts[verdict] = verdicts.get(verdict, []) + [(o, v, a, g, out[a, h] / out[0, h])]
    late = verdicts.get("grew before it aligned", [])
    for o, v, a, g, f in late:
        assert f"{o[g]:.2g}" in words
    for o, v, a, g, f in verdicts.get("aligned from the start", []):
        assert f"{o[0]:.2f}" in words
    for o, v, a, g, f in verdicts.get("aligned from nearly the start", []):  # its start, its step, its growth
        assert f"{o[0]:.2f} (key" in words and f"{steps[a]:.0f}" in words and f"{f:.2g}" in words
        assert "aligned from nearly the start" in words
    early = verdicts.get("aligned while small", [])

    def listed(x: list) -> str:  # each head's value in the order learned, two significant digits, whole from 10
        said = [f"{y:.2g}" if y < 10 else f"{y:.0f}" for y in x]
        return said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]

    if early:  # the output scales at alignment, in percent of each head's largest and as multiples of its start
        assert f"at {listed([100 * v[a] for o, v, a, g, f in early])} % of" in words
        assert f"by then {listed([f for o, v, a, g, f in early])} times" in words
        grown_overlaps = [o[g] for o, v, a, g, f in early]  # their overlaps when their output reached the grown mark
        lo, hi = f"{min(grown_overlaps):.2f}", f"{max(grown_overlaps):.2f}"
        assert (f"overlaps are {lo} to {hi}" if lo != hi else f" {lo}") in words
    for gone in ("before its output grew", "before their output grows", "scalar reduction", "silent",
                 "before the drop"):
        assert gone not in words
    said = page.words(ds)["run"]
    assert ("Figure 3a" in said and "our own" not in said) == presets.is_published(page.NAME,
                                                                                   json.loads(ds.attrs["settings"]))


def _measured_origin_error(ds, curve) -> float | None:
    """The standard error of a curve's loss at zero weights, measured on sequences drawn again (not the closed form
    of the page's rule): a training set's own sequences, each one's y² less its mean given its task vector (recovered
    from its context by least squares: the labels are exact, the whitened task vectors fix the set's mean), over √P;
    the sd of y² over √n on n fresh sequences for a Monte-Carlo population; None for the exact population loss."""
    S = json.loads(ds.attrs["settings"])
    cov, P = ds.input_cov.values, float(ds.trainset_size.sel(curve=curve))
    if np.isfinite(P):
        seqs = linattn.sample_tasks(cov, int(P), S["seq_len"], seed=S["seed"])
        D = cov.shape[0]
        x, labels = seqs.X[:, :-1, :D], seqs.X[:, :-1, D]
        w = np.linalg.solve(np.einsum("pnd,pne->pde", x, x), np.einsum("pnd,pn->pd", x, labels)[..., None])[..., 0]
        resid = seqs.y ** 2 - np.einsum("pd,de,pe->p", w, cov, w)
        return float(resid.std(ddof=1) / np.sqrt(P))
    n = S["population_samples"]
    if not n:
        return None
    y = linattn.sample_tasks(cov, n, S["seq_len"], seed=S["seed"] + 1, centre=False).y
    return float((y ** 2).std(ddof=1) / np.sqrt(n))


def _measured_saddle_losses(ds, curve) -> tuple[np.ndarray, np.ndarray] | None:
    """A finite set's training loss at the theory's weights of each saddle, measured on its sequences drawn again (not
    the page's rule): ``(se, own)``, own the mean over the sequences of the per-sequence losses of the predictor
    x_qᵀ A_m b (A_m = Σ_{d≤m} (λ_d c_d)⁻¹ e_d e_dᵀ, ``theory.pcr_weights``; b the mean of y_n x_n over the context) and
    se the whitened set's error of it (tests/whitened.py); None for a population curve."""
    from whitened import whitened_se

    S = json.loads(ds.attrs["settings"])
    cov, P = ds.input_cov.values, float(ds.trainset_size.sel(curve=curve))
    if not np.isfinite(P):
        return None
    seqs = linattn.sample_tasks(cov, int(P), S["seq_len"], seed=S["seed"])
    X, D = np.asarray(seqs.X, dtype=np.float64), cov.shape[0]
    b = (X[:, :-1, :D] * X[:, :-1, D:]).mean(axis=1)
    per = np.column_stack([(seqs.y - np.einsum("pd,de,pe->p", X[:, -1, :D],
                                               theory.pcr_weights(cov, S["seq_len"] - 1, m, normalize="mean"), b)) ** 2
                           for m in range(D + 1)])
    return whitened_se(per, X), per.mean(axis=0)


def _own_text(rows) -> str:
    """One set's rests beside its own loss as the page must state them, from ``[(m, bias, drift, drop)]`` by saddle:
    grouped by how each lies (within its drift; above; below by about, more than twice or less than half the drop)."""
    def sig(x):
        return f"{x:#.2g}".rstrip(".")

    def listed(xs):
        return ", ".join(xs[:-1]) + " and " + xs[-1] if len(xs) > 1 else xs[0]

    def how(bias, drift, drop):
        if abs(bias) <= drift:
            return "drift"
        return "above" if bias > 0 else "more" if -bias > 2 * drop else "less" if -bias < drop / 2 else "about"

    groups: dict = {}
    for m, bias, drift, drop in rows:
        groups.setdefault(how(bias, drift, drop), []).append((m, bias, drift, drop))
    parts = []
    for kind, g in groups.items():
        at, own = listed([f"ℳ{'₀₁₂₃₄₅₆₇₈₉'[m]}" for m, *_ in g]), "it" if parts else "its own loss"
        if kind == "drift":
            parts.append(f"within its drift ({listed([f'{d:.1g}' for _, _, d, _ in g])}) of {own} at {at}")
        elif kind == "above":
            parts.append(f"{listed([sig(b) for _, b, _, _ in g])} above {own} at {at}, where fitting can only lower "
                         "a training loss")
        else:
            lead = {"about": "about", "more": "more than 2 times", "less": "less than 1/2 of"}[kind]
            parts.append(f"{listed([sig(-b) for _, b, _, _ in g])} below {own} at {at}, {lead} the "
                         f"{listed([sig(o) for *_, o in g])} by which fitting the theory's directions to the set "
                         "lowers it there")
    return parts[0] if len(parts) == 1 else "; ".join(parts[:-1]) + "; and " + parts[-1]


def _numpy_drop_steps(L, levels):
    """The first index below the midpoint of each pair of neighbouring levels (None where never)."""
    out = []
    for a, b in zip(levels[:-1], levels[1:]):
        below = np.flatnonzero(L < (a + b) / 2)
        out.append(int(below[0]) if below.size and a - b >= 0.01 * a else None)
    return out


def _numpy_stays(L, levels):
    """Each saddle's stay by numpy, not the page's rule: the first unbroken run of the curve in the band a third of
    the way to each neighbouring level, its slowest tenth of samples (by abs(Δ) per sample), the median fall per step
    over them times the steps of the run (the drift), and their median loss (the level); flat where the drift is at
    most a tenth of the band's width and the level within 0.04 of the saddle's. ``{m: (level, drift, width, flat)}``
    for each saddle the curve is in the band of for at least 3 samples."""
    gaps = -np.diff(levels)
    out = {}
    for m, lv in enumerate(levels):
        lo, hi = lv - np.r_[gaps, gaps[-1]][m] / 3, lv + np.r_[gaps[0], gaps][m] / 3
        inside = (L >= lo) & (L <= hi)
        if inside.sum() < 3:
            continue
        a = int(np.argmax(inside))
        b = a + (int(np.argmin(inside[a:])) if not inside[a:].all() else inside.size - a) - 1
        speed = np.abs(np.gradient(L[a:b + 1]))
        core = speed <= np.quantile(speed, 0.1)
        drift, level = float(np.median(speed[core]) * (b - a)), float(np.median(L[a:b + 1][core]))
        out[m] = (level, drift, hi - lo, drift <= 0.1 * (hi - lo) and abs(level - lv) <= 0.04)
    return out


def _gap_text(gap, drift, m):
    """A flat rest's gap as the page must state it: to the third decimal where it exceeds the drift, else within it."""
    sub = "₀₁₂₃₄₅₆₇₈₉"[m]
    if abs(gap) <= drift:
        return f"within its drift ({drift:.1g}) of L(ℳ{sub})"
    return f"{abs(gap):.3f} " + ("at" if f"{abs(gap):.3f}" == "0.000" else "below" if gap < 0 else "above") \
        + f" L(ℳ{sub})"


@pytest.mark.slow
@pytest.mark.parametrize("case", _cases(beyond_population), ids=str)
def test_population_gap_claims_by_a_second_route(case, store, monkeypatch):
    """Each sentence of the population page, recomputed with numpy from its dataset and from sequences drawn again:
    the gaps at ℳ₀ in standard errors measured on the sequences, the largest gap at the fitted saddles, how far each
    curve got, gradient descent beside the flow at matched levels, and each finite set's rests beside its own loss at
    the theory's weights (that loss measured on the sequences drawn again, checked against ``rest_own``)."""
    import re

    page = beyond_population
    ds = _build(page, case, store, monkeypatch)
    words = page.words(ds)
    levels = ds.plateau_theory.values
    stays = {str(c): _numpy_stays(ds.train_loss.sel(curve=c).values, levels) for c in ds.curve.values}
    # at ℳ₀: each sampled curve's gap in standard errors as measured, where it exceeds the drift of the rest
    for c in ds.curve.values:
        level, drift, _, flat = stays[str(c)].get(0, (np.nan, np.nan, np.nan, False))
        if not flat:
            assert f"{c} lies" not in words["origin"] and f"{c} within" not in words["origin"]
            continue
        gap = level - levels[0]
        se = _measured_origin_error(ds, c)
        if se is None:
            assert "exact population loss has no sampling error" in words["origin"]
            assert (f"{c} {abs(gap):.1g}" if abs(gap) > drift else f"{c} within its drift ({drift:.1g})") in words[
                "origin"]
            continue
        if abs(gap) <= drift:
            assert f"{c} lies within its drift ({drift:.1g}) of L(ℳ₀)" in words["origin"]
            continue
        said = re.search(rf"{re.escape(str(c))} lies (\d\.\d+) (below|above) L\(ℳ₀\), (\d+\.\d) standard errors, "
                         r"(within|beyond) the band of 2", words["origin"])
        assert said, (c, words["origin"])
        assert said[1] == f"{abs(gap):.3f}" and said[2] == ("below" if gap < 0 else "above")
        assert float(said[3]) == pytest.approx(abs(gap) / se, rel=0.1, abs=0.06)
        assert said[4] == ("within" if float(said[3]) <= 2 else "beyond")
    # the fitted saddles: where each curve rests flat, the farthest its plateau is known to lie (a gap no larger than
    # the drift said as within it); a finite set's error there measured on its sequences, and the verdict on the
    # farthest it is known to lie: within two errors, or below them within the fit's further drop, else beyond
    verdicts = []
    for c in ds.curve.values:
        flat = {m: (lv - levels[m], d) for m, (lv, d, _, f) in stays[str(c)].items() if f and m >= 1}
        if not flat:
            assert f"{c}:" not in words["fitted"]
            continue
        m = max((abs(g) if abs(g) > d else d, m) for m, (g, d) in flat.items())[1]
        said = f"{c}: {_gap_text(*flat[m], m)}"
        measured = _measured_saddle_losses(ds, c)
        if measured is None:
            assert said + ";" in words["fitted"] or said + "." in words["fitted"], (c, words["fitted"])
            continue
        se = measured[0]
        gap, drift = flat[m]
        far, band, drop = gap if abs(gap) > drift else np.copysign(drift, gap), 2 * se[m], float(
            ds.rest_optimism.sel(curve=c, m=m))
        verdict = ("within" if abs(far) <= band else "below" if far < 0 and abs(far) <= band + drop else "beyond")
        verdicts.append(verdict)
        assert f"{said}, its standard error {se[m]:.2g}, {verdict} the band of 2 ({band:.2g})" in words["fitted"], (
            c, words["fitted"])
    # the saddles passed through: left (the next midpoint passed) without a flat stay, and no other
    said_passed = {str(c): set() for c in ds.curve.values}
    for clause in words["passes"].split(" (")[0].rstrip(".").split("; "):
        if " through " not in clause:
            continue
        who, rest = clause.split(" pass", 1)
        names = list(said_passed) if who == "Every curve" else re.split(r", | and ", who)
        for name in names:
            said_passed[name] |= set(re.findall("ℳ.", rest.split(" without")[0]))
    for c in ds.curve.values:
        left = sum(s is not None for s in _numpy_drop_steps(ds.train_loss.sel(curve=c).values, levels))
        passed = [m for m in range(left) if not stays[str(c)].get(m, (0, 0, 0, False))[3]]
        assert said_passed[str(c)] == {f"ℳ{'₀₁₂₃₄₅₆₇₈₉'[m]}" for m in passed}, (c, words["passes"])
        for m in passed:  # a stay that slowed to a rest but drifts: its drift beside the band's width
            if f"{c} slows in ℳ{'₀₁₂₃₄₅₆₇₈₉'[m]}'s band" in words["passes"]:
                _, d, w, _ = stays[str(c)][m]
                assert f"drifts {d:.2g} there, {d / w:.2g} of its width" in words["passes"]
    # how far each curve got: the drops it made, counted with numpy; no level the run did not reach is claimed
    D = len(levels) - 1
    made = {str(c): sum(s is not None for s in _numpy_drop_steps(ds.train_loss.sel(curve=c).values, levels))
            for c in ds.curve.values}
    if all(k < D for k in made.values()):
        assert "no curve makes the last drop" in words["reach"]
        run = json.loads(ds.attrs["runs"])[page.GD]
        assert ("Nor can a longer run" in words["reach"]) == (run["head_num"] * run["rank"] < D)
    for c, k in made.items():
        final = f"{float(ds.train_loss.sel(curve=c)[-1]):.3f}"
        if k < D:
            assert final in words["reach"] and (f"the drop to ℳ{'₀₁₂₃₄₅₆₇₈₉'[k]}" in words["reach"] if k else True)
    # gradient descent beside the flow: the step of each drop of each, and the lag, as whole steps
    if page.FLOW in ds.curve.values:
        gd = _numpy_drop_steps(ds.train_loss.sel(curve=page.GD).values, levels)
        flow = _numpy_drop_steps(ds.train_loss.sel(curve=page.FLOW).values, levels)
        both = [(a, b) for a, b in zip(gd, flow) if a is not None and b is not None]
        if both:
            listed = [str(a) for a, _ in both]
            steps = ", ".join(listed[:-1]) + " and " + listed[-1] if len(listed) > 1 else listed[0]
            assert f"at steps {steps}," in words["flow"]
            lags = [str(a - b).replace("-", "−") for a, b in both]
            assert "lags the flow by " + (", ".join(lags[:-1]) + " and " + lags[-1] if len(lags) > 1 else lags[0]) \
                in words["flow"]
        assert "differ by" not in words["flow"]  # no gap between levels each known only to within its drift
    else:
        assert words["flow"] == ""
    # each finite set beside population GD: the step of each drop of each, the lag in steps and in percent
    gd = _numpy_drop_steps(ds.train_loss.sel(curve=page.GD).values, levels)
    finite = [str(c) for c, P in zip(ds.curve.values, ds.trainset_size.values) if np.isfinite(P)]
    if not finite:
        assert words["finite"] == ""

    def listed(xs):
        xs = [str(x).replace("-", "−") for x in xs]
        return ", ".join(xs[:-1]) + " and " + xs[-1] if len(xs) > 1 else xs[0]

    for c in finite:
        own = _numpy_drop_steps(ds.train_loss.sel(curve=c).values, levels)
        both = [(a, b) for a, b in zip(own, gd) if a is not None and b is not None]
        if both:
            assert f"{c} makes its drops to " in words["finite"]
            assert f"at steps {listed([a for a, _ in both])}, " in words["finite"]
            assert f"so {c} lags population GD by {listed([a - b for a, b in both])} steps" in words["finite"]
            percent = [int(np.round(100 * (a - b) / b)) for a, b in both]
            assert f"({listed(percent)} % of population GD's step" in words["finite"]
        for k, (a, b) in enumerate(zip(own, gd), 1):
            if a is not None and b is None:
                assert f"{c} alone makes the drop to ℳ{'₀₁₂₃₄₅₆₇₈₉'[k]}, at step {a}" in words["finite"]
    for text in words.values():
        assert "nan" not in str(text) and "max |" not in str(text)
    assert "Figure 3a" not in words["caption"]
    # the bias sentence: with the finite sets' flat plateaus at ℳ₁ … (found with numpy), whether any gap reaches
    # beyond its error and the fit's drop; never a count of plateaus by side
    if not finite:
        assert words["bias"] == ""
    elif any(f for c in finite for m, (_, _, _, f) in stays[c].items() if m >= 1):
        assert "biased low" in words["bias"] and "not tested" not in words["bias"]
        assert ("cannot be resolved at these sizes" in words["bias"]) == ("beyond" not in verdicts)
        assert not any(ch.isdigit() for ch in words["bias"])
    else:
        assert "no finite set rested at a saddle with a direction learned" in words["bias"]
    # the bias against each set's own loss at the theory's weights, that loss measured on its sequences drawn again:
    # each flat rest past ℳ₀ (found with numpy) minus it, beside its drift and the fit's drop; and where two sets lie
    # below at a saddle, the smallest's bias and drop over the largest's
    below: dict = {}
    for c in finite:
        se, own = _measured_saddle_losses(ds, c)
        np.testing.assert_allclose(ds.rest_own.sel(curve=c).values, own, rtol=1e-9)
        rows = [(m, level - own[m], drift, float(ds.rest_optimism.sel(curve=c, m=m)))
                for m, (level, drift, _, f) in sorted(stays[c].items()) if f and m >= 1]
        if rows:
            assert f"{c} rests {_own_text(rows)}." in words["own"], (c, words["own"])
        else:
            assert f"{c} rests" not in words["own"]
        for m, bias, drift, drop in rows:
            if bias < -drift:
                below.setdefault(m, []).append((float(ds.trainset_size.sel(curve=c)), bias, drop))
    for m, sets in below.items():
        if len(sets) >= 2:
            (p, b1, d1), (q, b2, d2) = min(sets), max(sets)
            assert f"From P = {int(p)} to P = {int(q)} ({q / p:.3g} times the sequences)" in words["own"]
            for r in (b1 / b2, d1 / d2):  # to the nearest whole number, or about as large
                said = words["own"].split(": what")[0]
                k = max(r, 1 / r)
                assert f"{k:.0f} times" in said or (round(k) == 1 and "about as large" in said)
    if not below or all(len(v) < 2 for v in below.values()):
        assert "what these two sizes show" not in words["own"]
    # each size is one drawn set: the lags are that set's
    if finite:
        assert words["finite"].endswith("so the lags are that set's: their spread across sets is not measured.")
    assert "wall_time" not in ds and "timings" not in words  # a stacked run's clock is not its own time
    assert (words["where"] == "at Figure 3a's settings") == presets.is_published(page.NAME,
                                                                                json.loads(ds.attrs["settings"]))
