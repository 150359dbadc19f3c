"""What a figure page and the reproduction report show of the comparison rows
(:mod:`linattn.companion.published.rules`): the tables, the sentences that say where ours and the published curves
agree and differ, the ``numbers.json`` rows, how the report files a row, and how a page names its figure.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..output import ESTIMATE, MarkdownTable, by_sign
from ..uncertainty import AGREES, CANNOT_TELL, DIFFERS, VERDICTS, verdict
from .readings import Image
from .rules import Claim, judged_difference, offset_of, pixels, slug, where


def claims_table(claims: list[Claim]) -> MarkdownTable:
    """The claims as the page's table: the paper's text, what is counted, the paper's count, ours, the verdict and
    why."""
    return MarkdownTable([dict(claim=c.claim, counted=c.counted, paper=c.paper, ours=c.ours, verdict=c.verdict,
                               reason=c.reason) for c in claims],
                         {"claim": "the paper's text", "counted": "counted", "paper": "paper", "ours": "ours",
                          "verdict": "verdict", "reason": "why"}, {"paper": "g", "ours": "g"})


REPORT_GROUPS = ("reading", "claim", "robustness", "check", "estimate", "other")
ROBUSTNESS_KEY = "check"  # a key part that marks a run of ours repeated at another seed or step size


def report_group(row: dict) -> str:
    """How the reproduction report files a ``numbers.json`` row (its verdict as :func:`output.compare_row` gives
    it): *reading* (a value read off a published image, judged in its band), *claim* (a claim of the paper's text,
    judged without a tolerance), *robustness* (the same claim on a run of ours repeated at another seed or step size,
    its key holding the part ``check``: not a claim of the paper, counted apart), *check* (a verdict on our own run
    with no published value beside it, such as the phase diagram's settling criterion), *estimate* (an
    order-of-magnitude theory value, not judged) or *other*."""
    judged = row.get("verdict")
    if judged in VERDICTS:
        if row.get("paper") is None:
            return "check"
        if row.get("tolerance") is not None:
            return "reading"
        return "robustness" if ROBUSTNESS_KEY in str(row.get("key") or "").split(".") else "claim"
    return "estimate" if judged == ESTIMATE else "other"


# ---------------------------------------------------------------------------------- what the page shows and says

_COLUMNS = {"panel": "", "what": "quantity", "published": "published", "reproduced": "ours",
           "difference": "difference", "pixels": "pixels", "band": "band (±)", "verdict": "verdict"}


def table(rows: list[dict]) -> MarkdownTable:
    """The comparison rows as the page's table (steps in whole numbers, losses to three decimals, pixels to one): the
    difference, its band (:mod:`linattn.companion.uncertainty`; "+ offset" where a shared offset was removed first,
    "to <band + margin>: cannot tell" where a further margin applies) and the verdict."""
    shown = [dict(r, reproduced=_shown(r["reproduced"], r["unit"]), difference=difference_text(r),
                  pixels=_pixels_text(r, r["pixels"]), band=band_text(r), verdict=verdict_text(r))
             for r in rows]
    return MarkdownTable(shown, _COLUMNS, {"pixels": "+.1f"})


def band_text(r: dict) -> str | None:
    """A row's band as it was applied, for the page's table and the report's: ``0.018``, ``0.010 after −0.009``
    (an offset removed first), ``22, cannot tell to 64`` (a further margin). ``r``: a comparison row, or its
    ``numbers.json`` row (the same ``band``, ``offset``, ``unresolved`` and ``unit``)."""
    if r.get("band") is None:
        return None
    band = _shown(r.get("band"), r["unit"])
    if band is None:
        return None
    if r.get("offset"):
        band += f" after {_signed(r['offset'], r['unit'])}"
    if r.get("unresolved"):
        band += f", cannot tell to {_shown(r['band'] + r['unresolved'], r['unit'])}"
    return band


def _shown(x, unit) -> str | None:
    """A band or bound as the tables show it: a step or count whole, a loss to 3 decimals, or below 0.01 to 2
    significant digits, a trailing zero kept (a band of 0.0070 and its margin to 0.0072 would both read 0.007)."""
    if x is None or not math.isfinite(x):
        return None
    if unit != "loss":
        return f"{x:.0f}"
    return f"{x:.3f}" if abs(x) >= 0.01 or x == 0 else f"{x:#.2g}"


# how a bound on ours − published reads, by unit: (the word where ours lies below, above)
_BOUND_SIDES = {"step": ("earlier", "later"), "loss": ("lower", "higher"), "count": ("fewer", "more")}


def difference_text(r: dict) -> str | None:
    """A row's difference as the page and the report show it: signed (``+12``, ``-0.004``), or, where the reading is
    only bounded (``bound``: the published value is known only to lie beyond a step), in words as the bound it is:
    "at least 316 earlier" (ours lies 316 or more before the published step)."""
    x = r["difference"]
    if not r.get("bound") or x is None or not math.isfinite(x):
        return _signed(x, r["unit"])
    below, above = _BOUND_SIDES.get(r["unit"], ("below", "above"))
    return f"at least {_shown(abs(x), r['unit'])} {by_sign(x, below, above, 'from it')}"


def _pixels_text(r: dict, px: float, suffix: str = "") -> str | float | None:
    """A row's difference in pixels: the number, or "at least 10.9" where the difference is only a bound."""
    if not r.get("bound") or px is None or not math.isfinite(px):
        return px
    return f"at least {abs(px):.1f}{suffix}"


def _signed(x, unit) -> str | None:
    if x is None or not math.isfinite(x):
        return None
    return f"{x:+.3f}" if unit == "loss" else f"{x:+.0f}"


def counted(row: dict) -> bool:
    """Whether a row's verdict counts as evidence of agreement or difference: it has one, it is not a check of the
    reading (``checks_reading``: the image's drawn theory beside our theory tests the reading, not the run) and it
    does not restate the fact of other rows (``restates``, :func:`linattn.companion.published.rules.restating`).
    ``row``: a comparison row or its ``numbers.json`` row (the same keys)."""
    return row.get("verdict") in VERDICTS and not row.get("checks_reading") and not row.get("restates")


def verdict_text(r: dict) -> str | None:
    """A row's verdict as the page's and the report's tables show it: the verdict, and for a row that is not
    counted (:func:`counted`) why: "agrees (a check of the reading, not counted)", "differs (the same fact as drop
    4, seed 2; not counted again)"."""
    judged = r.get("verdict")
    if r.get("checks_reading"):
        return f"{judged} (a check of the reading, not counted)"
    if r.get("restates"):
        return f"{judged} (the same fact as {'; '.join(r['restates'])}; not counted again)"
    return judged


def counts(rows: list[dict], offset_removed: bool = True) -> tuple[int, int]:
    """(rows that agree, rows with a verdict), of the rows that count (:func:`counted`); with ``offset_removed``
    False, each row judged as if no offset of the image's scale had been removed first
    (:func:`verdict_without_offset`)."""
    judged = [r for r in rows if counted(r)]
    said = [r["verdict"] if offset_removed else verdict_without_offset(r) for r in judged]
    return sum(v == AGREES for v in said), len(judged)


def verdict_without_offset(r: dict) -> str:
    """A row's verdict had no offset been removed: ``uncertainty.verdict`` of its raw ``difference`` (ours − the
    reading) in the same ``band`` and ``unresolved`` margin; the row's own verdict where it removed none. ``r``: a
    comparison row or its ``numbers.json`` row (the same keys)."""
    if not r.get("offset"):
        return r["verdict"]
    return verdict(r.get("difference"), r.get("band"), r.get("unresolved") or 0.0)


def has_offset(rows: list[dict]) -> bool:
    """Whether any of ``rows`` was judged after removing an offset of the image's scale."""
    return any(r.get("offset") for r in rows)


def summary(rows: list[dict], image: Image) -> str:
    """The sentences that say where ours and the published curves agree and differ, made from the rows themselves:
    the count that agree, the bands they were judged in (:mod:`linattn.companion.uncertainty`), the shared offset
    removed first (if any), the count that cannot tell, the rows whose verdict is not counted (:func:`counted`: a
    check of the reading, a row that restates others) and, for each counted row that differs, both values and the
    difference."""
    if not rows:
        return ("These settings are not the published ones, so there is no published curve to set beside this "
                "run.")
    agree, total = counts(rows)
    unsure = sum(r["verdict"] == CANNOT_TELL for r in rows if counted(r))
    text = [f"**{image.name}: {agree} of {total} readings agree** with ours. Each is judged in a band (the table's "
            f"last columns): one pixel of the published image ({image.steps_per_px:g} steps or "
            f"{image.loss_per_px:g} in loss) or the reading's own ± where it is larger"
            + (", and for a test loss whose per-sequence losses we have (at the start or the end), twice the standard "
               "error of the difference of two independent test sets, ours and the published one, as large"
               if any(r.get("standard_error") for r in rows) else "")
            + (". A test loss gets no sampling-error term: our test sets are drawn with the published run's random "
               "numbers, the same sequences, so their sampling error is common to ours and the published loss and "
               "cancels in the difference" if any(r.get("same_test_set") for r in rows) else "") + "."]
    offset = offset_of(rows)
    if offset is not None:
        px = [offset.at(x) / image.loss_per_px for x in (0.1, 1.0)]
        text.append(f"All {offset.n} loss readings share one offset of the image's loss scale: ours − published ≈ "
                    f"{offset.value:.4f} {'+' if offset.slope >= 0 else '−'} {abs(offset.slope):.4f} × loss "
                    f"({px[0]:+.1f} px at a loss of 0.1, {px[1]:+.1f} px at 1), scatter {offset.scatter:.4f} about it. "
                    "It is a reading of the scale, not of the curves, so each loss is judged after removing it; "
                    "as it is fitted to the same readings it corrects, judged without it "
                    f"{counts(rows, offset_removed=False)[0]} of {total} readings agree.")
    if unsure:
        text.append(f"{unsure} cannot tell: beyond the band, but within a further margin the band cannot cover: one "
                    "more pixel, the ± of reading the published point itself, and where it applies what the draw of "
                    "the training set alone moves (a training loss, biased on the set it was fitted to, gets no "
                    "sampling-error agreement; a step, the shift between our run and its population twin).")
    text += _set_aside(rows)
    differ = [r for r in rows if r["verdict"] == DIFFERS and counted(r)]
    if not differ:
        return " ".join(text) + " None differs."
    items = [f"{where(r)}: published {r['published']}, ours {_shown(r['reproduced'], r['unit']) or 'none'}"
             + _off_by(r, image) for r in differ]
    return " ".join(text) + f" {'These differ' if len(differ) > 1 else 'This one differs'}:\n\n" + "\n".join(
        f"* {item}" for item in items)


def _off_by(r: dict, image: Image) -> str:
    """How far a row that differs is off: its difference and, where an offset was removed, what is left, in pixels."""
    if not math.isfinite(r["difference"]):
        return ""
    left = judged_difference(r)
    judged = f", {_signed(left, r['unit'])} after the scale's offset" if r.get("offset") else ""
    px = pixels(left, r["unit"], image)
    if r.get("bound"):  # a bound, said as one
        return f" ({difference_text(r)}" + (f", {_pixels_text(r, px, ' px')})" if math.isfinite(px) else ")")
    return f" ({_signed(r['difference'], r['unit'])}{judged}" + (f", {px:+.1f} px)" if math.isfinite(px) else ")")


def _set_aside(rows: list[dict]) -> list[str]:
    """The sentences on the rows with a verdict that is not counted (:func:`counted`): each check of the reading,
    and each row that restates the fact of others, with its verdict."""
    text = []
    for r in rows:
        if r.get("verdict") not in VERDICTS or counted(r):
            continue
        if r.get("checks_reading"):
            text.append(f"Not counted: {where(r)}, published {r['published']}, ours "
                        f"{_shown(r['reproduced'], r['unit']) or 'none'} ({r['verdict']}), sets the image's drawing of "
                        "a theory value beside our theory value: a check that the image is read right, not a result "
                        "of the run.")
        else:
            text.append(f"Not counted again: {where(r)} ({r['verdict']}) restates the fact of "
                        f"{'; '.join(r['restates'])}.")
    return text


def number_rows(rows: list[dict]) -> list[dict]:
    """The comparison rows as ``numbers.json`` rows (key, quantity, paper, reproduced, abs_error, tolerance,
    verdict, and what the verdict applied: the signed ``difference``, the ``band``, the ``offset`` removed first, the
    ``unresolved`` margin and the ``unit``, so that the report shows the band that was used; ``checks_reading`` and
    ``restates`` where the row is not counted, :func:`counted`); the key names the published reading:
    ``published.<panel>.<what>``."""
    return [dict(key=".".join(["published"] + [slug(t) for t in (r["panel"], r["what"]) if t]),
                 quantity=f"published {r['figure']}" + (f", {r['panel']}" if r["panel"] else "") + f": {r['what']}",
                 paper=r["paper"], reproduced=r["reproduced"],
                 abs_error=abs(r["difference"]) if math.isfinite(r["difference"]) else None,
                 tolerance=r["tolerance"], standard_error=r.get("standard_error"), verdict=r["verdict"],
                 difference=r["difference"], band=r["band"], offset=r.get("offset") or 0.0,
                 unresolved=r.get("unresolved") or 0.0, unit=r["unit"], **({"bound": True} if r.get("bound") else {}),
                 **({"checks_reading": True} if r.get("checks_reading") else {}),
                 **({"restates": r["restates"]} if r.get("restates") else {}))
            for r in rows]


# The one place that says whether a page is the paper's figure. A page is the paper's figure only at its published
# settings (``presets.is_published``); a re-run at any other knob (the quick preset included) runs that figure's
# experiment and says so in its title, caption, prose and cite block.

def experiment_name(figure: str, at_published: bool) -> str:
    """What a page shows: "the paper's Figure X" at the published settings, else "Figure X's experiment at settings
    of our own"."""
    return f"the paper's {figure}" if at_published else f"{figure}'s experiment at settings of our own"


def caption_lead(figure: str, at_published: bool) -> str:
    """How a figure's caption begins, for every figure page: "The paper's Figure X, reproduced" only at the published
    settings (``presets.is_published``), else "Figure X's experiment at settings of our own" (a re-run at other
    knobs is not the paper's figure)."""
    name = experiment_name(figure, at_published)
    return f"{name[0].upper()}{name[1:]}" + (", reproduced" if at_published else "")


def reproduces(figure: str, at_published: bool) -> str:
    """The sentence a page's prose glues where it says what it shows: "This page reproduces the paper's Figure X"
    at the published settings, else "This page runs Figure X's experiment at settings of our own; the paper's
    figure is Figure X"."""
    if at_published:
        return f"This page reproduces {experiment_name(figure, True)}"
    return f"This page runs {experiment_name(figure, False)}; the paper's figure is {figure}"


def page_title(title: str, at_published: bool) -> str:
    """A page's title line as a re-run shows it: "# Figure X — ATTN_M …" unchanged at the published settings, else
    "# Figure X's experiment at settings of our own — ATTN_M …" (a title that names no figure of the paper is kept)."""
    if at_published or not title.startswith("# Figure "):
        return title
    figure, _, rest = title[2:].partition(" — ")
    return f"# {experiment_name(figure.strip(), False)}" + (f" — {rest}" if rest else "")


def cite_words(figure: str, at_published: bool) -> str:
    """The cite block's sentence before the paper's BibTeX: cite the paper's figure by its name at the published
    settings; a re-run names the figure whose experiment it ran and asks to cite the paper, not to call it that
    figure."""
    if at_published:
        return (f"It reproduces **{figure}** of Zhang, Singh, Latham and Saxe (ICML 2025); cite that figure by its "
                "name and the paper:")
    return (f"It runs {experiment_name(figure, False)}, so it is not the published {figure} of Zhang, Singh, Latham "
            "and Saxe (ICML 2025); the paper's figure is that one. If you use this run, cite the paper:")


def paper_name(title: str) -> str:
    """The paper's name of a figure from its page title ("Figure X — …" → "Figure X"); pages beyond the paper
    keep their whole title's first part ("Beyond the paper", "Appendix: …")."""
    return title.lstrip("# ").split(" — ")[0].strip()


def page_name(path) -> str:
    """How the report names a page: the paper's name of the figure it reproduces (:func:`paper_name` of a title
    "# Figure …"), else the notebook's own name (pages beyond the paper, the appendix)."""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("# Figure "):
            return paper_name(line)
    return Path(path).stem


def short_quantity(quantity: str, page: str) -> str:
    """A ``numbers.json`` quantity without its ``published <page>`` prefix (for a table that is already per page)."""
    prefix = f"published {page}"
    return quantity[len(prefix):].lstrip(",: ") if quantity.startswith(prefix) else quantity
