"""The reproduction report: every figure page's ``numbers.json`` gathered and sorted by kind of comparison.

Each row is filed by what it carries, never by its wording (:func:`linattn.companion.published.page.report_group`):
a *reading* of a published image (a verdict and a tolerance), a *claim* of the paper's text (a verdict, no
tolerance), a *robustness* run (the same claim on a run of ours at another seed or step size: not a claim of the paper,
counted apart), a *check* of our own run (a verdict with no published value beside it: the phase diagram's settling
criterion), an *estimate* (an order-of-magnitude theory value, not judged) or *other*; every row gets an error
(:func:`linattn.companion.output.compare_row`). The report's own rows are keyed ``<figure>.<the row's key>``. A reading
that checks the reading itself (the image's drawn theory beside our theory) or restates another row's fact is shown
with its verdict but left out of every count of agreement (:func:`linattn.companion.published.page.counted`); the
checks of our own runs are counted the same way, so that a row shown as restating another is left out of a count the
page shows. A row whose theory value is only a reference for its model (``reference_only``: linear attention's L*
beside a softmax run's final loss) gets no error and no relative error (``output.compare_row``: not comparable), and
the table names the reference beside the quantity, not as a theory (:func:`beside_reference`).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from .. import published
from ..output import NOT_COMPARABLE, NUMBER_FIELDS, MarkdownTable, compare_row
from ..runner.notebooks import discover
from ..uncertainty import AGREES, CANNOT_TELL, DIFFERS, VERDICTS, difference_band

NAME = __name__.rsplit(".", 1)[-1]
PRESETS: dict[str, dict] = {
    "quick": dict(),
    "paper": dict(),
}
KNOB_CASES = ()  # no parameter of its own (it reads the other pages' outputs): nothing for a reader to vary
TOLERANCES: list[tuple[str, str, float]] = []  # it copies the other figures' rows, each held by its own figure
# the names in linattn.companion.published it compares with
PUBLISHED = ("REPORT_GROUPS",)


def write_page(S: dict, frame):
    """The page, which trains nothing: every other page's rows collected from the output folder of ``frame``, saved
    as its CSV, figure and numbers, with the figures read and missing in its provenance; (the report, its tables by
    section, no words) for :func:`linattn.companion.figures.common.frame.build`."""
    found = collect(frame.out.root)
    frame.out.save_rows([csv_row(r) for r in found["rows"]], COLUMNS)
    frame.provenance.update(figures_read=sorted({r["figure"] for r in found["rows"]}), figures_missing=found["missing"])
    frame.save(None, plot(found), numbers(found))
    return found, tables(found), {}
COLUMNS = ["figure", "page", "group", "key", *NUMBER_FIELDS, "reference", "reference_only", "tolerance", "verdict",
           "counted", "restates", "checks_reading", "relative_error"]
# what a reading's verdict applied, carried from its page's numbers.json (published.page.number_rows)
APPLIED = ("standard_error", "difference", "band", "offset", "unresolved", "unit", "no_value", "bound",
           "checks_reading", "restates", "reference_only")


def collect(root) -> dict:
    """Every row of the other figures' ``numbers.json`` under ``root`` (one preset's figures), each with its
    figure, page name, error and group; ``{"rows", "missing", "pages_read", "groups"}``."""
    sources = {n: p for n, p in discover().items() if n != NAME}
    rows, missing = [], []
    for name, source in sources.items():
        path = Path(root) / name / "numbers.json"
        if not path.exists():
            missing.append(name)
            continue
        page = published.page.page_name(source)
        for r in json.loads(path.read_text(encoding="utf-8")):
            row = {"figure": name, "page": page, "key": r.get("key"), "tolerance": r.get("tolerance"),
                   "verdict": r.get("verdict"), **{k: r.get(k) for k in NUMBER_FIELDS},
                   **{k: r[k] for k in APPLIED if k in r}}
            row.update(compare_row(row))
            row.update(abs_error=row["error"], relative_error=row["relative"], group=published.page.report_group(row),
                       quantity=published.page.short_quantity(row["quantity"], page))
            rows.append(row)
    groups = {g: [r for r in rows if r["group"] == g] for g in published.page.REPORT_GROUPS}
    return {"rows": rows, "missing": missing, "pages_read": len(sources) - len(missing), "groups": groups}


def csv_row(r: dict) -> dict:
    """A collected row as ``beyond_error_table.csv`` holds it, so that the page's counts recount from the CSV alone:
    a value that is only a reference for the row's model (``reference_only``) in ``reference``, not in ``theory``
    (as the page's table shows it, :func:`beside_reference`); for a row with a verdict, whether it is ``counted``
    (``published.page.counted``: "yes"/"no"), the rows it ``restates`` and whether it ``checks_reading``."""
    out = dict(r, restates="; ".join(r.get("restates") or []) or None,
               checks_reading="yes" if r.get("checks_reading") else None,
               counted=("yes" if published.page.counted(r) else "no") if r.get("verdict") in VERDICTS else None)
    if r.get("reference_only"):
        out.update(reference=r.get("theory"), theory=None)
    return out


def numbers(report: dict) -> list[dict]:
    """The report's own ``numbers.json``: every collected row, keyed by its figure and its own key."""
    return [dict(key=f"{r['figure']}.{r['key']}" if r["key"] else None, quantity=f"{r['page']}: {r['quantity']}",
                 tolerance=r["tolerance"], verdict=r["verdict"], **{k: r[k] for k in NUMBER_FIELDS if k != "quantity"},
                 **({"reference_only": r["reference_only"]} if r.get("reference_only") else {}))
            for r in report["rows"]]


def reading_pages(report: dict) -> list[str]:
    return list(dict.fromkeys(r["page"] for r in report["groups"]["reading"]))


def summary(report: dict, preset: str) -> str:
    """The page's opening: readings per published figure, each claim, all verdicts, our own checks, estimates and
    the rest."""
    groups, lines = report["groups"], []
    for page in reading_pages(report):
        rows = [r for r in groups["reading"] if r["page"] == page]
        agree, total = published.page.counts(rows)
        unsure = sum(r["verdict"] == CANNOT_TELL for r in rows if published.page.counted(r))
        raw = (f" ({published.page.counts(rows, offset_removed=False)[0]} of {total} without the offset of the "
               "image's loss scale, fitted to the same readings)" if published.page.has_offset(rows) else "")
        lines.append(f"* **{page}: {agree} of {total} readings agree** with ours in their band (the page states it)"
                     + raw
                     + (f"; {unsure} cannot tell" if unsure else "")
                     + f"; {total - agree - unsure} differ{'s' if total - agree - unsure == 1 else ''}"
                     + _not_counted(rows) + ".")
    if not groups["reading"]:
        lines.append("* No figure ran at the published settings of Figures 1b, 3a and 14, so no published reading is "
                     "compared at this preset.")
    for r in groups["claim"]:
        outcome = {AGREES: "agrees with ours", CANNOT_TELL: "cannot be told from ours"}.get(r["verdict"],
                                                                                            "differs from ours")
        lines.append(f"* **{r['page']}: the paper's claim {outcome}**: {r['quantity']}; the paper {r['paper']:g}, ours "
                     f"{r['reproduced']:g}.")
    if not groups["claim"]:
        lines.append("* No figure ran at the published settings of Figures 4 and 5, so no claim of the paper's text is "
                     "judged at this preset.")
    runs = groups["robustness"]
    if runs:
        held, unsure = (sum(r["verdict"] == v for r in runs) for v in (AGREES, CANNOT_TELL))
        lines.append(f"* Robustness runs (a claim repeated on runs of ours at other seeds or step sizes, not claims of "
                     f"the paper): the claim holds in {held} of {len(runs)}"
                     + (f"; {unsure} cannot tell (the run ends before it settles)" if unsure else "") + ".")
    judged = groups["reading"] + groups["claim"]
    if judged:
        agree, total = published.page.counts(judged)
        readings = published.page.counts(groups["reading"])[1]
        aside = len(judged) - total
        lines.append(f"* **In all, {agree} of {total} verdicts agree** ({_count(readings, 'reading')} and "
                     f"{_count(total - readings, 'claim')}"
                     + (f"; {aside} more not counted: a check of a reading or a row restating another's fact"
                        if aside else "") + ").")
    checks = groups["check"]
    if checks:
        agree, total = published.page.counts(checks)
        lines.append(f"* Checks of our own runs (a criterion of ours, not the paper's): **{agree} of {total} agree**"
                     + "".join(f"; {n} {v if n == 1 else PLURAL[v]}" for v, n in _tally(checks, (CANNOT_TELL, DIFFERS))
                               if n)
                     + _not_counted(checks) + ":")
    for r in checks:
        lines.append(f"  * {r['page']}: {r['quantity']} — {published.page.verdict_text(r)}.")
    other = [r for r in groups["other"] if r["kind"] != NOT_COMPARABLE]
    lines.append(f"* {_count(len(groups['estimate']), 'estimate')} (order of magnitude only) listed apart, not "
                 "judged.")
    beside = sum(bool(r.get("reference_only")) and r["kind"] == NOT_COMPARABLE for r in groups["other"])
    lines.append(f"* {_count(len(other), 'other number')} {'has' if len(other) == 1 else 'have'} a theory or paper "
                 "value without a stated tolerance (their "
                 f"relative errors: right panel of the figure); {len(groups['other']) - len(other)} more are "
                 "reported for information only"
                 + (f", {beside} of them beside a reference that is not their model's theory (such as linear "
                    "attention's L* beside softmax attention's final loss), which gives them no error"
                    if beside else "") + ".")
    return (f"At the `{preset}` preset, {len(report['rows'])} numbers from {report['pages_read']} pages:\n\n"
            + "\n".join(lines))


def _not_counted(rows: list[dict]) -> str:
    """The rows of a page's readings whose verdict is not counted (``published.page.counted``), in words: "; 1
    more checks the reading (not counted)", "; 1 more restates another row's fact (not counted again)"."""
    checks = sum(bool(r.get("checks_reading")) for r in rows)
    restated = sum(bool(r.get("restates")) and not r.get("checks_reading") for r in rows)
    return ((f"; {checks} more {'checks' if checks == 1 else 'check'} the reading (the image's drawn theory beside "
             "our theory; not counted)" if checks else "")
            + (f"; {restated} more {'restates' if restated == 1 else 'restate'} another row's fact (not counted "
               "again)" if restated else ""))


PLURAL = {AGREES: "agree", CANNOT_TELL: "cannot tell", DIFFERS: "differ"}  # a verdict said of several rows


def _tally(rows: list[dict], verdicts) -> list[tuple[str, int]]:
    """(verdict, how many of the counted ``rows`` have it) for each of ``verdicts`` (``published.page.counted``)."""
    return [(v, sum(r["verdict"] == v for r in rows if published.page.counted(r))) for v in verdicts]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def tables(report: dict) -> dict:
    """The page's tables by section: ``readings`` (title → table, one per published figure), ``claims`` (None where
    there is none), ``own_runs`` (title → table: the robustness runs and the checks of our own runs, each a sentence
    where there is none), ``unjudged`` (title → table: the estimates and every other number) and ``counts`` (how many
    rows of each kind, and why the rest are not comparable)."""
    groups = report["groups"]
    reading_columns = {"quantity": "quantity", "paper": "published", "reproduced": "ours",
                       "error": "difference (ours − published)", "band": "band applied", "verdict": "verdict"}
    readings = {page: MarkdownTable([dict(r, band=_band_applied(r), error=_difference(r),
                                          verdict=published.page.verdict_text(r))
                                     for r in groups["reading"] if r["page"] == page], reading_columns)
                for page in reading_pages(report)}
    claims = MarkdownTable(groups["claim"], {"page": "page", "quantity": "quantity", "paper": "paper",
                                             "reproduced": "ours", "verdict": "verdict"},
                           {"paper": "g", "reproduced": "g"})
    estimates = MarkdownTable([dict(r, ratio=r["reproduced"] / r["theory"] if r["reproduced"] and r["theory"] else None)
                               for r in groups["estimate"]],
                              {"page": "page", "quantity": "quantity", "theory": "estimate", "reproduced": "ours",
                               "ratio": "ours / estimate"}, {"ratio": ".2f"})
    other = MarkdownTable([beside_reference(r) for r in groups["other"]],
                          {"page": "page", "quantity": "quantity", "paper": "paper",
                                            "theory": "theory", "reproduced": "ours", "error": "error",
                                            "relative": "relative"}, {"relative": ".2g"})
    checks = MarkdownTable([dict(r, band=_band_applied(r), verdict=published.page.verdict_text(r))
                            for r in groups["check"]],
                           {"page": "page", "quantity": "quantity", "theory": "level", "reproduced": "ours",
                            "band": "band applied", "verdict": "verdict"})
    robustness = MarkdownTable(groups["robustness"], {"page": "page", "quantity": "quantity", "paper": "paper",
                                                      "reproduced": "ours", "verdict": "verdict"},
                               {"paper": "g", "reproduced": "g"})
    own_runs = {title: table if groups[group] else f"*(no {noun} at this preset)*"
                for title, table, group, noun in (("Robustness runs", robustness, "robustness", "robustness run"),
                                                  ("Checks of our own runs", checks, "check", "check"))}
    return {"readings": readings, "claims": claims if groups["claim"] else None, "own_runs": own_runs,
            "unjudged": {"Estimates": estimates, "Every other number": other}, "counts": _counts(report)}


def beside_reference(r: dict) -> dict:
    """A row as the report's table of other numbers shows it: unchanged, or where its theory value is only a
    reference for its model (``reference_only``: linear attention's L* beside a softmax run's loss), that value named
    in its quantity and not in the theory column ("final loss (P = 5000), beside linear attention's L* …: 0.136"), so
    that it does not read as the model's theory; its error says why there is none (``output.compare_row``)."""
    if not r.get("reference_only") or r.get("theory") is None:
        return r
    return dict(r, theory=None, quantity=f"{r['quantity']}, beside {r['reference_only']}: {r['theory']:.4g}")


def _difference(r: dict):
    """A reading's difference as its page shows it: the number, or in words where it is only a bound
    (:func:`published.page.difference_text`: "at least 316 earlier")."""
    if r.get("bound") and r.get("unit"):
        return published.page.difference_text(r)
    return r.get("difference", r["error"])


def _band_applied(r: dict) -> str | None:
    """The band a row's verdict used, as its page shows it (:func:`published.page.band_text`: the band, the
    offset removed first, the further margin); a row from a page that states no band: its tolerance, else, where it
    gives the standard error of the compared value, twice that (``uncertainty.difference_band``, the band its page
    judged it in)."""
    if r.get("band") is not None and r.get("unit"):
        return published.page.band_text(r)
    if r.get("tolerance") is not None:
        return f"{r['tolerance']:.4g}"
    se = r.get("standard_error")
    return None if se is None else f"{difference_band(se):#.2g} (2 standard errors)"


def judged_in_bands(r: dict) -> float:
    """|the difference the verdict judged| / the band it used (:func:`published.rules.judged_difference`); a row
    without them: |error| / tolerance (:func:`published.rules.in_tolerances`)."""
    if r.get("band") is not None and r.get("difference") is not None:
        return published.rules.in_tolerances(published.rules.judged_difference(r), r["band"])
    return published.rules.in_tolerances(r["error"], r["tolerance"])


def _counts(report: dict) -> MarkdownTable:
    groups, rows = report["groups"], report["rows"]
    reasons = Counter(r["error"].split(" (")[0] for r in groups["other"] if r["kind"] == NOT_COMPARABLE)
    evidence = [r for r in groups["reading"] if published.page.counted(r)]
    aside = [r for r in groups["reading"] if not published.page.counted(r)]
    counted = [("readings that agree", sum(r["verdict"] == AGREES for r in evidence)),
               ("readings we cannot tell", sum(r["verdict"] == CANNOT_TELL for r in evidence)),
               ("readings that differ", sum(r["verdict"] == DIFFERS for r in evidence)),
               ("checks of a reading (the image's drawn theory beside our theory; not counted)",
                sum(bool(r.get("checks_reading")) for r in aside)),
               ("readings restating another row's fact (not counted again)",
                sum(not r.get("checks_reading") for r in aside)),
               ("claims of the paper's text that agree", sum(r["verdict"] == AGREES for r in groups["claim"])),
               ("claims of the paper's text that differ", sum(r["verdict"] == DIFFERS for r in groups["claim"])),
               ("robustness runs (not claims of the paper)", len(groups["robustness"])),
               *((f"checks of our own runs (no published value) that {PLURAL[v]}", n)
                 for v, n in _tally(groups["check"], (AGREES, CANNOT_TELL, DIFFERS))),
               ("checks of our own runs restating another row's fact (not counted again)",
                sum(not published.page.counted(r) for r in groups["check"])),
               ("estimates (not judged)", len(groups["estimate"])),
               ("other numbers with a relative error", sum(r["kind"] == "relative" for r in groups["other"])),
               ("other numbers with an absolute error only", sum(r["kind"] == "absolute" for r in groups["other"]))]
    counted += reasons.most_common()
    assert sum(n for _, n in counted) == len(rows), "every row is counted once"
    counted.append((f"**all rows** ({len({r['figure'] for r in rows})} pages; missing: "
                    f"{', '.join(report['missing']) or 'none'})", len(rows)))
    return MarkdownTable([dict(what=w, n=n) for w, n in counted], {"what": "rows of the report", "n": "count"})


def plot(report: dict):
    """Left: each reading's difference in units of its tolerance, per published figure; right: the relative error
    of every other number with a non-zero theory (else paper) value, per page. Fixed axes at every preset."""
    import matplotlib.pyplot as plt

    groups = report["groups"]
    pages = reading_pages(report)
    readings = {p: np.array([judged_in_bands(r) for r in groups["reading"] if r["page"] == p]) for p in pages}
    others = [r for r in groups["other"] if r["kind"] == "relative"]
    other_pages = list(dict.fromkeys(r["page"] for r in others))
    relative = {p: np.array([max(r["relative"], 1e-7) for r in others if r["page"] == p]) for p in other_pages}
    height = 0.3 * max(len(pages), len(other_pages), 1) + 1.6
    fig, (ax_r, ax_o) = plt.subplots(1, 2, figsize=(6.6, height), gridspec_kw={"width_ratios": [1, 1.3]})
    jitter = np.random.default_rng(0)  # fixed: only spreads overlapping dots vertically
    for ax, data, floor, cap in ((ax_r, readings, 1e-2, 1e2), (ax_o, relative, 1e-7, 1e2)):
        labels = list(data)[::-1]
        for i, key in enumerate(labels):
            x = np.clip(data[key], floor, cap)
            ax.scatter(x, i + jitter.uniform(-0.18, 0.18, x.size), s=12, color="black", alpha=0.6, linewidths=0)
            ax.plot([np.median(x)] * 2, [i - 0.3, i + 0.3], color="tab:red", linewidth=1.6)
        ax.set_yticks(range(len(labels)), labels)
        ax.set_ylim(-0.6, max(len(labels), 1) - 0.4)
        ax.set_xscale("log")
        ax.set_xlim(floor / 2, cap * 2)
    ax_r.axvline(1.0, color="0.6", linestyle=":", linewidth=1.0, zorder=0)
    ax_r.set_xlabel("|ours − published| / band applied")
    ax_r.set_title("readings of the published images")
    ax_o.axvline(0.01, color="0.6", linestyle=":", linewidth=1.0, zorder=0)
    ax_o.set_xlabel("relative error vs theory (else paper)")
    ax_o.set_title("other numbers")
    fig.tight_layout()
    return fig
