"""Every number and comparison on the phase-diagram, vary_len and PCR pages, recomputed from the figure's dataset by
a second route: this code forms the verdicts, brackets, peaks, ranks, crossings and levels with numpy of its own and
never calls the rule that wrote the sentence or row (``common.phase``'s rules, ``phase_text``, ``theory``'s level
formulas, ``loss_curves``; the pages' ``words``/``numbers``/``switch_table`` are only read). Each page is checked at
the quick preset and at one of its knob cases (``KNOB_CASES``).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from whitened import whitened_residuals, whitened_se

from linattn import RunConfig, draw, models
from linattn.companion import presets
from linattn.companion.figures import beyond_pcr, beyond_phase_diagram, figA_vary_len


def _settings(module, case: dict | None) -> dict:
    return presets.resolve(module.NAME, "quick", case or {})


def _c(c) -> str:
    return f"{c:.2g}"


# ------------------------------------------------------------------------------------------------ the phase diagram

PHASE_CASES = [None, beyond_phase_diagram.KNOB_CASES[0]]


@pytest.fixture(scope="module", params=PHASE_CASES, ids=["quick", "knob"])
def phase_page(request):
    S = _settings(beyond_phase_diagram, dict(request.param or {}, workers=0))
    return S, beyond_phase_diagram.compute(S)


def _positive(ds):
    return ds.icl.values[ds.icl.values > 0]


def _states(loss, se, level, z):
    """+1 clearly below ``level``, −1 clearly above, 0 within z standard errors."""
    loss, se = np.asarray(loss), np.asarray(se)
    return np.where(loss < level - z * se, 1, np.where(loss > level + z * se, -1, 0))


def _bracket(states, icl):
    """(last clearly failing c below b, b = first c from which every cell clearly holds), by a plain loop."""
    b = None
    for j in range(len(states) - 1, -1, -1):
        if states[j] != 1:
            break
        b = j
    if b is None:
        return np.nan, np.nan
    lo = np.nan
    for j in range(b):
        if states[j] == -1:
            lo = icl[j]
    return lo, icl[b]


def _interior_max(values):
    j = int(np.argmax(values))
    return j if 0 < j < len(values) - 1 and np.isfinite(values).all() else None


def _features(S, *, fresh: bool, n: int = 3000, seed: int = 0):
    """ATTN_M's features of ``n`` sequences drawn here (fixed task w_fix of the page's run, or a fresh task per
    sequence), x ~ N(0, Λ), the query's label zeroed."""
    cfg = RunConfig(**dict(S["attn_m"], trainset_size=2, icl=0.5))
    data = draw(cfg)[0]
    rng = np.random.default_rng(seed)
    D, L = cfg.in_dim, cfg.seq_len
    x = rng.standard_normal((n, L, D)) @ np.linalg.cholesky(data.cov).T
    w = rng.standard_normal((n, D)) if fresh else np.broadcast_to(data.w_fix, (n, D))
    y = np.einsum("pld,pd->pl", x, w)
    X = np.concatenate([x, y[..., None]], axis=-1)
    X[:, -1, -1] = 0.0
    return models.attention_features(torch.as_tensor(X), 1.0).numpy(), data


def _rank(T):
    s = np.linalg.svd(T / np.sqrt(len(T)), compute_uv=False)
    return int(np.sum(s > 1e-6 * s[0]))


def test_phase_verdicts_brackets_and_table_by_a_second_route(phase_page):
    S, ds = phase_page
    mid, z, pos = float(ds.midpoint), float(ds.band_z), _positive(ds)
    assert mid == pytest.approx((float(ds.L_origin) + float(ds.L_star)) / 2)
    rows = beyond_phase_diagram.switch_table(ds)
    for row, P in zip(rows, ds.trainset_size.values):
        cell = ds.sel(trainset_size=P, icl=pos)
        icl_state = _states(cell.final_test_icl, cell.se_test_icl, mid, z)
        iwl_state = _states(cell.final_test_iwl, cell.se_test_iwl, mid, z)
        lo, hi = _bracket(icl_state, pos)
        want = "–" if not np.isfinite(hi) else (f"≤ {_c(hi)}" if not np.isfinite(lo) else f"{_c(lo)}–{_c(hi)}")
        assert row["icl"] == want
        assert row["iwl"] == (", ".join(_c(c) for c, s in zip(pos, iwl_state) if s == 1) or "none")
        assert row["unsure"] == (", ".join(_c(c) for c, s in zip(pos, icl_state) if s == 0) or "none")
        j = _interior_max(cell.final_test_icl.values) if np.isfinite(P) else None
        if j is None:
            assert row["peak"] == "–"
        else:
            fresh = np.floor(pos * P + 1e-9).astype(int)
            assert row["peak"].startswith(f"{fresh[j - 1]}–{fresh[j + 1]} ({fresh[j]}: ")
        assert row["settle"] == pytest.approx(float(max(cell.settle_iwl.max(), ds.sel(trainset_size=P).settle_icl.max(),
                                                        ds.sel(trainset_size=P).settle_iwl.max())))


def test_phase_prose_recomputed(phase_page):
    S, ds = phase_page
    words = beyond_phase_diagram.words(ds)
    mid, z, pos = float(ds.midpoint), float(ds.band_z), _positive(ds)
    assert all("nan" not in str(v).lower() for v in words.values())
    for P in ds.trainset_size.values:
        cell = ds.sel(trainset_size=P, icl=pos)
        lo, hi = _bracket(_states(cell.final_test_icl, cell.se_test_icl, mid, z), pos)
        label = "∞" if np.isinf(P) else f"{int(P)}"
        if np.isfinite(lo):
            assert f"between c = {_c(lo)} and {_c(hi)}" in words["icl_switch"]
        elif np.isfinite(hi) and hi == pos[0]:
            assert "at every trained c > 0" in words["icl_switch"]
        assert f"P = {label}" in words["icl_switch"] or "at every P" in words["icl_switch"]
    # the band: the SE near the midpoint, from the dataset's per-cell SE
    near = ds.se_test_icl.values[(ds.final_test_icl.values < 2 * mid) & (ds.final_test_icl.values > mid / 2)]
    if near.size:
        assert f"{near.min():.2g}" in words["band"] and f"{near.max():.2g}" in words["band"]
    assert f"over the {int(ds.n_test)} test sequences" in words["band"]
    # cells where both test losses lie clearly above tr Λ
    origin = float(ds.L_origin)
    both = [(c, P) for P in ds.trainset_size.values for c in pos
            if _states(ds.final_test_iwl.sel(icl=c, trainset_size=P), ds.se_test_iwl.sel(icl=c, trainset_size=P),
                       origin, z) == -1
            and _states(ds.final_test_icl.sel(icl=c, trainset_size=P), ds.se_test_icl.sel(icl=c, trainset_size=P),
                        origin, z) == -1]
    assert words["exploded"].startswith("No cell") == (not both)
    for c, P in both:
        assert f"P = {'∞' if np.isinf(P) else int(P)}" in words["exploded"] and _c(c) in words["exploded"]
    # flat cells: fewer fresh sequences than free directions leave some of them undetermined (c > 0, finite P)
    finite = ds.sel(icl=pos, trainset_size=ds.trainset_size.values[np.isfinite(ds.trainset_size.values)])
    np.testing.assert_array_equal(finite.flat.values, finite.fresh.values < int(ds.free_directions))
    unique = ~ds.flat.values
    rel = max(np.max(np.abs(ds[f"final_{k}"].values - ds[f"limit_{k}"].values)[unique]
                     / ds[f"limit_{k}"].values[unique]) for k in ("test_iwl", "test_icl"))
    assert words["limits"].startswith(f"{int((~unique).sum())} of the {unique.size} cells")
    assert words["limits"].endswith(f"within {rel:.1e} (relative) of theirs")
    settle = float(np.fmax(ds.settle_iwl, ds.settle_icl).max())
    if bool((np.fmax(ds.settle_iwl, ds.settle_icl) < ds.tolerance).all()):
        assert words["settled"] == f"all {ds.settled.size} cells (the largest change: {settle:.1e})"


def _population_crossing(S, data, ds, test_icl: bool) -> float:
    """The c at which the population end point's test loss crosses the midpoint for the last time along the grid, by
    bisection of our own on the mixture's moments (least squares on E_c[TTᵀ], E_c[yT])."""
    from linattn.objectives.population import mixture_moments

    cfg = RunConfig(**dict(S["attn_m"], trainset_size=2, icl=0.5))

    def mom(c):
        m = mixture_moments("attention", data.cov, cfg.seq_len, icl=c, w_fix=data.w_fix, normalize=cfg.normalize)
        return m.TT.numpy(), m.yT.numpy(), float(m.yy)

    test = mom(1.0 if test_icl else 0.0)
    fresh, half = mom(1.0), mom(0.5)

    def loss(c):
        A = [(1 - c) * (2 * h - f) + c * f for h, f in zip(half[:2], fresh[:2])]
        m = np.linalg.lstsq(A[0], A[1], rcond=None)[0]
        return test[2] - 2 * test[1] @ m + m @ test[0] @ m - float(ds.midpoint)

    grid = np.concatenate([[_positive(ds)[0] / 1e6], _positive(ds)])
    f = np.array([loss(c) for c in grid])
    change = np.flatnonzero(np.sign(f[:-1]) != np.sign(f[1:]))
    if not change.size:
        return np.nan
    a, b = grid[change[-1]], grid[change[-1] + 1]
    for _ in range(60):
        m = (a + b) / 2
        a, b = (m, b) if np.sign(loss(m)) == np.sign(loss(a)) else (a, m)
    return (a + b) / 2


def test_phase_population_crossings_null_space_and_column_by_a_second_route(phase_page):
    S, ds = phase_page
    words = beyond_phase_diagram.words(ds)
    T_fixed, data = _features(S, fresh=False)
    T_fresh, _ = _features(S, fresh=True)
    F = T_fixed.shape[1]
    assert int(ds.n_features) == F
    # the null space of the fixed task's features: the rank of a drawn feature matrix, by SVD
    assert int(ds.free_directions) == F - _rank(T_fixed)
    assert int(ds.feature_rank) == _rank(T_fresh)
    assert words["null_space"].startswith(f"{F - _rank(T_fixed)} of the {F} eigenvalues")
    for key, icl in (("population_switch", True), ("population_edge", False)):
        ours = _population_crossing(S, data, ds, icl)
        assert words[key] == ("at no c along the grid" if np.isnan(ours) else f"at c = {ours:.3g}")
    # the pure in-context column: its peak is the largest interior test loss, beside the feature rank
    sizes, loss = ds.column_P.values.astype(int), ds.column_test_icl.values
    assert list(sizes) == sorted(S["column_sizes"])
    j = _interior_max(loss)
    if j is None:
        assert "shows no peak" in words["column"]
    else:
        assert f"peaks at P = {sizes[j]} " in words["column"]
        assert words["column"].endswith("lies at that P") == (sizes[j] == _rank(T_fresh))
    # the peaks over cP, and whether the count of free directions lies inside each bracket
    k, inside = F - _rank(T_fixed), []
    for P in ds.trainset_size.values[np.isfinite(ds.trainset_size.values)]:
        cell = ds.sel(trainset_size=P, icl=_positive(ds)).final_test_icl.values
        j = _interior_max(cell)
        if j is not None:
            fresh = np.floor(_positive(ds) * P + 1e-9).astype(int)
            assert f"between {fresh[j - 1]} and {fresh[j + 1]} fresh sequences at P = {int(P)}" in words["peaks"]
            inside.append(fresh[j - 1] < k < fresh[j + 1])
    if inside:
        assert ("lies inside every" in words["peaks"]) == all(inside)
    else:
        assert "shows no peak" in words["peaks"]


def test_phase_escape_numbers_by_a_second_route(phase_page):
    S, _ = phase_page
    escape = beyond_phase_diagram.compute_escape(S)
    words = beyond_phase_diagram.words(beyond_phase_diagram.compute(S), escape)
    x = np.log(escape.init.values)
    for d in escape.direction.values:
        steps = escape.drop_step.sel(direction=d).transpose("seed", "init").values
        slopes = []
        for y in np.log(steps):  # each seed's own log–log slope
            ok = np.isfinite(y)
            if ok.sum() >= 2:
                slopes.append(np.polyfit(x[ok], y[ok], 1)[0])
        if not slopes:
            assert f"none for drop {d} " in words["exponents"]
        elif len(slopes) == 1:
            assert f"{slopes[0]:.2f} (drop {d}: one seed only, cannot tell)" in words["exponents"]
        else:
            mean, se = np.mean(slopes), np.std(slopes, ddof=1) / np.sqrt(len(slopes))
            said = ("differs" if abs(mean + 1) > 2 * se else "cannot tell" if abs(mean) <= 2 * se else "agrees")
            assert f"{mean:.2f} ± {se:.2f} (drop {d}: {said})" in words["exponents"]
        ratio = (escape.drop_step.sel(direction=d).median("seed") / escape.law.sel(direction=d)).values
        if np.isfinite(ratio).any():
            assert f"{np.nanmedian(ratio):.1f}" in words["ratios"]


# ------------------------------------------------------------------------------------------------ vary_len

VARY_CASES = [None, *figA_vary_len.KNOB_CASES]


@pytest.fixture(scope="module", params=VARY_CASES, ids=["quick", "knob0", "knob1"])
def vary(request):
    return figA_vary_len.compute(_settings(figA_vary_len, request.param))


def _c_d(lam, N):
    """c_d = 1 + (1 + tr Λ/λ_d)/N (the paper's normalisation)."""
    return 1 + (1 + lam.sum() / lam) / N


def _vary_levels(lam, seq_len, normalize):
    """tr Λ − Σ_{d≤m} λ_d ⟨s⟩²/⟨s² c_d⟩ over N = 1 … seq_len − 1, written out with a loop over N."""
    num, den = 0.0, np.zeros_like(lam)
    Ns = range(1, seq_len)
    for N in Ns:
        s = N / (N + 1.0) if normalize == "sum" else 1.0
        num += s / len(Ns)
        den += s**2 * _c_d(lam, N) / len(Ns)
    return lam.sum() - np.concatenate([[0.0], np.cumsum(lam * num**2 / den)])


def test_vary_len_levels_table_and_rests_by_a_second_route(vary):
    ds = vary
    runs = json.loads(ds.attrs["runs"])
    words = figA_vary_len.words(ds)
    for key in ("attn_m", "attn_s"):
        run = runs[key]
        lam = np.sort(ds.eigenvalue.sel(model=key).dropna("direction").values)[::-1]
        averaged = _vary_levels(lam, run["seq_len"], run.get("normalize", "sum"))
        fixed = lam.sum() - np.concatenate([[0.0], np.cumsum(lam / _c_d(lam, run["seq_len"] - 1))])
        np.testing.assert_allclose(ds.plateau_theory.sel(model=key).dropna("m").values, averaged, rtol=1e-10)
        np.testing.assert_allclose(ds.plateau_theory_fixed.sel(model=key).dropna("m").values, fixed, rtol=1e-10)
        assert np.all(averaged[1:] > fixed[1:])  # "the levels sit above the fixed-length ones"
        loss = ds.train_loss.sel(model=key).dropna("step").values
        assert float(ds.final_loss.sel(model=key)) == loss[-1]
        shown = [0, len(lam)] if key == "attn_m" else list(range(len(lam) + 1))
        rested = []
        for m in shown:
            level = float(ds.plateau_level.sel(model=key, m=m))
            if np.isfinite(level):  # a rest: the run's level near the theory's, and the curve there
                rested.append(f"M_{m}")
                assert abs(level - averaged[m]) <= 0.05 * max(averaged[0] - averaged[-1], 1e-12) + 0.05
                assert np.min(np.abs(loss - level)) < 0.05
        label = figA_vary_len.LABELS[key]
        assert (f"{label} rests at none" in words["rests"]) == (not rested)
        for r in rested:
            assert r in words["rests"].split(label)[1].split(";")[0]
    s = runs["attn_s"]
    assert words["n_max"] == s["seq_len"] and words["N_max"] == s["seq_len"] - 1
    # each eigenvalue, in the page's order, to the digits printed (3 significant: 1/3 reads 0.333)
    printed = [float(x) for x in re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?", words["eigenvalues"])]
    lams = ds.eigenvalue.sel(model="attn_s").dropna("direction").values
    assert len(printed) == len(lams)
    np.testing.assert_allclose(printed, lams, rtol=5e-3)
    rows = {r["key"]: r for r in figA_vary_len.numbers(ds)}
    assert float(rows["final_loss.attn_m"]["theory"]) == pytest.approx(ds.plateau_theory.sel(model="attn_m").dropna(
        "m").values[-1])


def _prefix_losses(X, y, lam, vecs, normalize):
    """Per sequence, the mean over its prefixes n = 2 … seq_len of (y_n − ŷ_n)² at the theory's weights of every
    saddle M_0 … M_D (columns), written out: ŷ_n = x_qᵀ A (scale · Σ y_i x_i) with A = Σ_{d≤m} a_d e_d e_dᵀ and
    a_d = ⟨s⟩/(λ_d ⟨s² c_d⟩); and each prefix's rows for a least-squares fit whose query side lies in e_1 … e_m:
    the query's coordinates along e_1 … e_D times the upper triangle of scale · Σ x̃ x̃ᵀ (the query's label zeroed)."""
    P, L, E = X.shape
    D = E - 1
    Ns = np.arange(1, L)
    s = Ns / (Ns + 1.0) if normalize == "sum" else np.ones(len(Ns))
    c = np.array([_c_d(lam, N) for N in Ns])
    a = s.mean() / (lam * np.mean(s[:, None] ** 2 * c, axis=0))
    per, rows, targets = np.zeros((P, D + 1)), [], []
    iu = np.triu_indices(E)
    for n in range(2, L + 1):
        Xn = X[:, :n].copy()
        yn = Xn[:, -1, -1].copy() if n < L else y
        Xn[:, -1, -1] = 0.0
        scale = 1.0 / n if normalize == "sum" else 1.0 / (n - 1)
        b = scale * np.einsum("pi,pia->pa", Xn[:, :, D], Xn[:, :, :D])
        along_q, along_b = Xn[:, -1, :D] @ vecs, b @ vecs
        pred = np.cumsum(np.concatenate([np.zeros((P, 1)), a * along_q * along_b], axis=1), axis=1)
        per += (yn[:, None] - pred) ** 2 / (L - 1)
        S = scale * np.einsum("pia,pib->pab", Xn, Xn)[:, iu[0], iu[1]]
        rows.append(np.einsum("pj,pk->pjk", along_q, S))
        targets.append(yn)
    return per, np.concatenate(rows), np.concatenate(targets)


def said_words(ds) -> str:
    return figA_vary_len.words(ds)["judged"]


def test_vary_len_rest_bands_and_verdicts_by_a_second_route(vary):
    """Each rest's band and verdict, recomputed from its run's own training set (re-drawn from the run's settings):
    the standard error of the per-sequence losses at the theory's weights (the whitened task vectors' part taken
    out), the drop a least-squares fit of the saddle's family gives, and the verdict |rest − level| ≤ 2 se (agrees),
    ≤ 2 se + that drop (cannot tell), else differs, as the table, numbers.json and the sentence say."""
    ds, runs = vary, json.loads(vary.attrs["runs"])
    table = figA_vary_len.table(ds)
    rows = {r["key"]: r for r in figA_vary_len.numbers(ds)}
    off, drawn, sets, rests = [], [], {}, []
    for key in figA_vary_len.MODELS:
        cfg = RunConfig.from_dict(runs[key])
        data = draw(cfg)[0]
        sets[key] = np.asarray(data.train.X)
        lam, vecs = np.linalg.eigh(data.cov)
        lam, vecs = lam[::-1], vecs[:, ::-1]
        per, design, target = _prefix_losses(data.train.X, data.train.y, lam, vecs, cfg.normalize)
        se = whitened_se(per, data.train.X)
        assert np.all(se < per.std(axis=0, ddof=1) / np.sqrt(per.shape[0]))  # whitening only takes error away
        np.testing.assert_allclose(ds.rest_se.sel(model=key).dropna("m").values, se, rtol=1e-6)
        np.testing.assert_allclose(ds.rest_own.sel(model=key).dropna("m").values, per.mean(axis=0), rtol=1e-6)
        squares = whitened_residuals(per, data.train.X)[0] ** 2  # the error's own spread: the delta method on r²
        spread = 0.5 * squares.std(axis=0, ddof=1) / (squares.mean(axis=0) * np.sqrt(len(squares)))
        np.testing.assert_allclose(ds.rest_se_spread.sel(model=key).dropna("m").values, spread, rtol=1e-5)
        assert int(ds.whitened.sel(model=key)) == 1
        for m in range(len(lam) + 1):
            if m == 0:
                drop = 0.0
            else:
                fit = design[:, :m].reshape(len(design), -1)
                coef, *_ = np.linalg.lstsq(fit, target, rcond=None)
                drop = per[:, m].mean() - np.mean((target - fit @ coef) ** 2)
            assert float(ds.rest_optimism.sel(model=key, m=m)) == pytest.approx(drop, rel=1e-6, abs=1e-12)
        shown = [0, len(lam)] if key == "attn_m" else list(range(len(lam) + 1))
        for m in shown:
            rest, level = float(ds.plateau_level.sel(model=key, m=m)), float(ds.plateau_theory.sel(model=key, m=m))
            row = next(r for r in table.rows if r["model"] == figA_vary_len.LABELS[key] and f"{{{m}}}" in r["level"])
            if not np.isfinite(rest):
                assert row["verdict"] is None and f"plateau.{key}.M{m}" not in rows
                continue
            gap, band = abs(rest - level), 2 * se[m]
            opt = float(ds.rest_optimism.sel(model=key, m=m))
            fitted = opt if rest < level else 0.0  # fitting only lowers a training loss
            want = "agrees" if gap <= band else "cannot tell" if gap <= band + fitted else "differs"
            own = per[:, m].mean()
            by_set = want != "agrees" and (own - level) / (rest - level) >= 0.5  # the set's own loss: most of the gap
            assert row["verdict"] == want + (" (the set's draw)" if by_set else "")
            assert rows[f"plateau.{key}.M{m}"]["verdict"] == want
            assert row["band"].startswith(f"{band:.4f}")
            # numbers.json carries the band it applied, for the report's table of checks
            said = rows[f"plateau.{key}.M{m}"]
            assert said["band"] == pytest.approx(band, rel=1e-6) and said["unit"] == "loss"
            assert said["unresolved"] == pytest.approx(fitted, rel=1e-6, abs=1e-12)
            assert said["difference"] == pytest.approx(rest - level, rel=1e-9)
            rests.append(dict(key=key, m=m, row=rows[f"plateau.{key}.M{m}"], verdict=want, drawn=by_set,
                              level=level, own=own))
            if by_set:
                drawn.append((key, m, rows[f"plateau.{key}.M{m}"]))
            if want != "agrees":  # beside it, the theory's weights on the run's own set: the draw of the set
                off.append((f"{figA_vary_len.LABELS[key]} at M_{m} {own:.4f} ({abs(own - level) / se[m]:.1f} "
                            f"standard errors {'below' if own < level else 'above'} its level)",
                            round(100 * (own - level) / (rest - level)), abs(rest - own), round(100 * spread[m])))
    shared = np.array_equal(sets["attn_m"], sets["attn_s"])
    assert int(ds.shared_set) == int(shared)
    # one fact counted once, whatever its verdict: rests on one set at one level with one loss at the theory's weights
    # on that set (recomputed above); grouped here by merging until nothing joins
    groups = [[r] for r in rests]
    joined = True
    while joined:
        joined = False
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                if any((x["key"] == y["key"] or shared) and np.isclose(x["level"], y["level"], rtol=1e-8)
                       and np.isclose(x["own"], y["own"], rtol=1e-6) for x in groups[a] for y in groups[b]):
                    groups[a] += groups.pop(b)
                    joined = True
                    break
            if joined:
                break
    order = [(r["key"], r["m"]) for r in rests]
    counted = {"agrees": 0, "cannot tell": 0, "differs": 0}
    for group in groups:
        first, *later = sorted(group, key=lambda r: order.index((r["key"], r["m"])))
        counted[first["verdict"]] += 1
        assert not first["row"].get("restates")
        assert all(r["row"]["restates"] == [first["row"]["quantity"]] for r in later)
        if later:  # the page's sentence names them, and whose fact they restate
            clause = said_words(ds).split("each fact counted once (")[1]
            named = [f"{figA_vary_len.LABELS[r['key']]} at M_{r['m']}" for r in (*later, first)]
            assert all(n in clause.split(": a rest on")[0] for n in named)
    if shared:  # ATTN_M and ATTN_S at M_0 on one set: the same loss at zero weights, one fact
        assert float(ds.rest_own.sel(model="attn_m", m=0)) == pytest.approx(float(ds.rest_own.sel(model="attn_s", m=0)))
        assert rows["plateau.attn_s.M0"].get("restates") or "plateau.attn_m.M0" not in rows
    facts = {"one" if shared else key for key, _, _ in drawn}
    said = figA_vary_len.words(ds)["judged"]
    if drawn:
        assert ("all by " if len(drawn) > 1 else "by ") + ("one draw" if len(facts) == 1 else "the draws") in said
        assert ("(both runs share it)" in said) == (shared and len({k for k, _, _ in drawn}) > 1)
        assert "which makes at least half of " + ("each" if len(drawn) > 1 else "the") + " gap" in said
    drawn = figA_vary_len.words(ds)["draw"]
    assert (drawn == "") == (not off)
    for listed, *_ in off:
        assert listed in drawn
    if off:
        low, high = min(o[1] for o in off), max(o[1] for o in off)
        assert (f"{low} %" if low == high else f"{low}–{high} %") in drawn
        bound = max(o[2] for o in off)
        said_bound = float(drawn.split("lies within ")[1].split(" of that loss")[0])
        assert bound <= said_bound < bound + 1e-4  # a bound, rounded up at the printed precision
        low, high = min(o[3] for o in off), max(o[3] for o in off)
        assert f"uncertain by about {f'{low} %' if low == high else f'{low}–{high} %'}" in drawn
    assert "task vectors are whitened" in said
    assert f"{counted['agrees']} of {sum(counted.values())} rests agree" in said
    said_of = {r["verdict"] for r in rests}  # the sentence names every rest that cannot tell or differs
    assert ("cannot tell" in said.split("(cannot tell there)")[1]) == ("cannot tell" in said_of)
    assert ("differs" in said) == ("differs" in said_of)


def test_set_draw_on_constructed_cases():
    """The share of a rest's gap that its training set's draw makes: all of it where the rest sits at the theory's
    weights' loss on its set, half where halfway, none where the set lies at the level, negative where the set lies
    on the other side; no share without a rest or without a gap."""
    share = figA_vary_len.set_draw
    assert share(0.310, 0.320, 0.310) == pytest.approx(1.0)
    assert share(0.310, 0.320, 0.315) == pytest.approx(0.5)
    assert share(0.310, 0.320, 0.320) == pytest.approx(0.0)
    assert share(0.310, 0.320, 0.325) == pytest.approx(-0.5)
    assert share(0.330, 0.320, 0.328) == pytest.approx(0.8)  # above the level alike
    assert share(float("nan"), 0.32, 0.31) is None and share(0.32, 0.32, 0.31) is None


def test_states_same_fact_on_constructed_cases():
    """Two rests state one fact where they lie on one training set at one level with one loss at the theory's weights
    on that set (whatever their verdicts); not on two sets, nor at one level with different losses, nor at two levels
    even where the set's draw moves both (two predictions sharing a cause)."""
    same = figA_vary_len.states_same_fact

    def rest(set_="shared", level=1.0, own=1.00211):
        return dict(set=set_, level=level, own=own)

    assert same(rest(), rest())  # ATTN_M and ATTN_S at M_0 on one set: the loss at zero weights, twice
    assert same(rest(), rest(own=1.00211 * (1 + 1e-12)))  # the same number computed twice
    assert not same(rest(set_="attn_m"), rest(set_="attn_s"))  # two draws: two facts
    assert not same(rest(), rest(own=1.003))
    assert not same(rest(), rest(level=0.9, own=1.00211))
    assert not same(rest(level=0.369, own=0.362), rest(level=0.321, own=0.3137))  # one cause, two predictions
    assert same(rest(level=0.321, own=0.3137), rest(level=0.321, own=0.3137))  # ATTN_M and ATTN_S at M_4
    assert not same(rest("attn_m", 0.321, 0.3137), rest("attn_s", 0.321, 0.3137))


def test_by_the_draw_on_constructed_cases():
    """A rest off its level is the set's draw where the set's own loss at the theory's weights makes half or more of
    the gap; not where it makes less, where the rest agrees, or where there is no share."""
    drawn = figA_vary_len.by_the_draw
    assert drawn("differs", 0.95) and drawn("cannot tell", 0.5) and drawn("differs", 1.3)
    assert not drawn("differs", 0.49) and not drawn("differs", -0.5)
    assert not drawn("agrees", 0.95) and not drawn(None, 0.95) and not drawn("differs", None)


def test_upper_bound_rounds_up():
    """A bound is never printed below the value it bounds: 0.00054 → 0.0006 (not 0.0005), a value at the precision
    stays, a hair above it goes up, and other precisions alike."""
    bound = figA_vary_len.upper_bound
    assert bound(0.00054) == "0.0006" and bound(0.0005) == "0.0005" and bound(0.00050001) == "0.0006"
    assert bound(0.00041) == "0.0005" and bound(0.0) == "0.0000" and bound(0.123, 2) == "0.13"
    for x in np.random.default_rng(0).uniform(0, 0.01, 200):
        assert x <= float(bound(x)) < x + 1e-4


def test_rest_verdict_on_constructed_cases():
    """Within 2 se of the level: agrees (either side); below it by more, within the fit's drop: cannot tell; above it
    by more, or below beyond the drop: differs; no rest: no verdict."""
    verdict = figA_vary_len.rest_verdict
    assert verdict(0.3110, 0.32, 0.005, 0.0) == "agrees" and verdict(0.3290, 0.32, 0.005, 0.0) == "agrees"
    assert verdict(0.3050, 0.32, 0.005, 0.006) == "cannot tell"
    assert verdict(0.3350, 0.32, 0.005, 0.006) == "differs"  # above the level: the fit cannot have raised it
    assert verdict(0.3000, 0.32, 0.005, 0.006) == "differs"
    assert verdict(float("nan"), 0.32, 0.005, 0.006) is None


def test_rest_errors_on_a_constructed_training_set():
    """At M_0 (no weights) each sequence's loss is the mean of its prefixes' squared labels, so the standard error is
    theirs, written out here; nothing is fitted there (no drop), and a fit never raises the loss."""
    from linattn.data import Sequences

    rng = np.random.default_rng(3)
    P, L, D = 200, 6, 2
    cov = np.diag([0.7, 0.3])
    x = rng.standard_normal((P, L, D)) @ np.sqrt(cov)
    labels = np.einsum("pld,pd->pl", x, rng.standard_normal((P, D)))
    X = np.concatenate([x, labels[..., None]], axis=-1)
    X[:, -1, -1] = 0.0
    se, drop, own, spread = figA_vary_len.rest_errors(Sequences(X, labels[:, -1]), cov, L, "sum")
    per = np.mean(labels[:, 1:] ** 2, axis=1)  # prefixes n = 2 … L: targets are tokens 2 … L's labels
    # independent task vectors (not whitened): the plain standard error of the mean
    assert se[0] == pytest.approx(per.std(ddof=1) / np.sqrt(P), rel=1e-10) and own[0] == pytest.approx(per.mean())
    assert drop[0] == 0 and np.all(drop >= 0) and np.all(se > 0) and se.shape == drop.shape == (D + 1,)
    squares = (per - per.mean()) ** 2
    assert spread[0] == pytest.approx(0.5 * squares.std(ddof=1) / (squares.mean() * np.sqrt(P)), rel=1e-10)


def test_vary_len_unlearned_directions_by_a_second_route(vary):
    """The sentence on directions not learned within the run: each drop re-found as the first step below the midpoint
    of two neighbouring length-averaged levels, and the escape estimate t_1·(λ_1/λ_d)² written out."""
    said = figA_vary_len.words(vary)["unlearned"]
    for key in ("attn_m", "attn_s"):
        loss = vary.train_loss.sel(model=key).dropna("step")
        y, step = loss.values, loss.step.values
        lv = vary.plateau_theory.sel(model=key).dropna("m").values
        lv = lv[[0, -1]] if key == "attn_m" else lv
        found = []
        for a, b in zip(lv[:-1], lv[1:]):
            below = np.flatnonzero(y < (a + b) / 2)
            if below.size == 0:
                break
            found.append(int(step[below[0]]))
        label = figA_vary_len.LABELS[key]
        if len(found) == len(lv) - 1:
            assert label not in said  # everything learned: nothing said
            continue
        part = said.split(label)[1].split(";")[0]
        end = int(step[-1])
        if not found:
            assert f"no drop within its {end} steps" in part
            continue
        lam = np.sort(vary.eigenvalue.sel(model=key).dropna("direction").values)[::-1]
        k = len(found)
        said_made = f"learns {k} of its {len(lv) - 1} directions within its {end} steps, the last at step {found[-1]}"
        assert said_made in part
        guess = found[0] * (lam[0] / lam[k]) ** 2  # the escape estimate, t_1·(λ_1/λ_d)², written out
        # a cause is offered only where the data make it one: the estimated drop lies beyond the run's end
        assert (f"near step {guess:.0f}, beyond the run's end" in part) == (guess > end)
        assert ("no cause of that is tested here" in part) == (guess <= end)
        assert "although" not in part


# ------------------------------------------------------------------------------------------------ PCR

PCR_CASES = [None, beyond_pcr.KNOB_CASES[0]]


@pytest.fixture(scope="module", params=PCR_CASES, ids=["quick", "knob"])
def pcr(request):
    return beyond_pcr.compute(_settings(beyond_pcr, request.param))


def _distance(B, lam, N):
    """E[(βᵀ B x_q)²] for B in Λ's eigenbasis (paper normalisation, β = (1/N) Σ y_i x_i, w ~ N(0, I)):
    Σ_ij B_ij² λ_i² c_i λ_j, from E[ββᵀ] = Λ² + (tr Λ Λ + Λ²)/N."""
    return float(np.sum(B**2 * (lam**2 * _c_d(lam, N))[:, None] * lam[None, :]))


def test_pcr_gaps_and_diagonals_by_a_second_route(pcr):
    ds = pcr
    run = json.loads(ds.attrs["runs"])["attn_s"]
    N, lam = run["seq_len"] - 1, ds.eigenvalue.values
    np.testing.assert_allclose(ds.diagonal_theory.values, 1 / (lam * _c_d(lam, N)), rtol=1e-10)
    rows = {r["key"]: r for r in beyond_pcr.numbers(ds)}
    summary = beyond_pcr.summary(ds)
    rested = [int(m) for m in ds.m.values if np.isfinite(float(ds.mid_step.sel(m=m)))]
    assert (summary == "This run: no plateau was detected.") == (not rested)
    for m in rested:
        theory = ds.A_theory.sel(m=m).values
        np.testing.assert_allclose(np.diag(theory)[:m], 1 / (lam * _c_d(lam, N))[:m], rtol=1e-10)
        learned = ds.A_learned.sel(m=m).values
        scale = _distance(theory, lam, N) if m else lam.sum()
        gap = _distance(learned - theory, lam, N) / scale
        assert float(ds.gap.sel(m=m, step=ds.mid_step.sel(m=m))) == pytest.approx(gap, rel=1e-6, abs=1e-12)
        assert rows[f"gap.M{m}"]["reproduced"] == pytest.approx(gap, rel=1e-6, abs=1e-12)
        step = int(ds.mid_step.sel(m=m))
        assert f"(step {step}): {gap:.2g}" in summary
        for d in range(1, m + 1):
            assert float(rows[f"diagonal.M{m}.e{d}"]["reproduced"]) == pytest.approx(learned[d - 1, d - 1])


def test_phase_c0_ranges_and_bracketed_crossings_by_a_second_route(phase_page):
    """The c = 0 column's end points are printed as the range they span, both ends to three significant digits
    (one value only where both ends print alike: 2.012 to 2.084 is "2.01 to 2.08", not "2.01"); a population
    crossing has no reproduced value because the runs give a bracket, and its numbers.json row says so."""
    from linattn.companion.figures.common import phase_text

    S, ds = phase_page
    words = beyond_phase_diagram.words(ds)
    if 0.0 in ds.icl.values:
        for key, var in (("zero_icl", "final_test_icl"), ("zero_iwl", "final_test_iwl")):
            v = ds[var].sel(icl=0.0).values
            lo, hi = f"{v.min():.3g}", f"{v.max():.3g}"
            assert words[key] == (lo if lo == hi else f"{lo} to {hi}")
    rows = {r["key"]: r for r in phase_text.numbers(ds)}
    for key in ("population_switch.Pinf", "population_edge.Pinf"):
        if key in rows:
            assert "reproduced" not in rows[key] and "bracket" in rows[key]["no_value"]


# ------------------------------------------------------------------------------------------------ the end point


def test_end_point_least_squares_on_constructed_moments():
    """The least-squares end point on moments built by hand: a full-rank quadratic gives its minimiser A⁻¹b (its
    loss c − bᵀA⁻¹b); a quadratic flat in one direction (a valley of minima) gives none."""
    from linattn.companion.figures.common import end_point

    rng = np.random.default_rng(0)
    F = rng.normal(size=(200, 5))
    y = F @ np.array([1.0, -2.0, 0.5, 0.0, 3.0]) + 0.1 * rng.normal(size=200)
    mom = (F.T @ F / 200, F.T @ y / 200, float(y @ y / 200))
    m, curvature = end_point.least_squares(mom)
    np.testing.assert_allclose(m, np.linalg.solve(mom[0], mom[1]), rtol=1e-10)
    assert curvature == pytest.approx(np.linalg.eigvalsh(mom[0])[0] / np.linalg.eigvalsh(mom[0])[-1])
    F2 = np.column_stack([F, F[:, 0]])  # a repeated feature: the loss is flat along (e_0 − e_5)
    flat = (F2.T @ F2 / 200, F2.T @ y / 200, float(y @ y / 200))
    assert end_point.least_squares(flat)[0] is None
