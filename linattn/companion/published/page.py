"""What a figure page and the reproduction report show of the comparison rows
(:mod:`linattn.companion.published.rules`): the tables, the sentences that say where ours and the published curves
agree and differ, the ``numbers.json`` rows, how the report files a row, and how a page names its figure.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..output import AGREES, CONSISTENT, DIFFERS, ESTIMATE, WITHIN_NOISE, MarkdownTable
from .readings import Image
from .rules import Claim, slug


def claims_table(claims: list[Claim]) -> MarkdownTable:
    """The claims as the page's table: the paper's text, what is counted, the paper's count, ours, the verdict and
    why."""
    return MarkdownTable([dict(claim=c.claim, counted=c.counted, paper=c.paper, ours=c.ours, verdict=c.verdict,
                               reason=c.reason) for c in claims],
                         {"claim": "the paper's text", "counted": "counted", "paper": "paper", "ours": "ours",
                          "verdict": "verdict", "reason": "why"}, {"paper": "g", "ours": "g"})


REPORT_GROUPS = ("reading", "claim", "check", "estimate", "other")


def report_group(row: dict) -> str:
    """How the reproduction report files a ``numbers.json`` row (its verdict as :func:`output.compare_row` gives
    it): *reading* (a value read off a published image, judged within its tolerance), *claim* (a claim of the
    paper's text, judged without a tolerance), *check* (a verdict on our own run with no published value beside
    it, such as the phase diagram's settling criterion), *estimate* (an order-of-magnitude theory value, not
    judged) or *other*."""
    judged = row.get("verdict")
    if judged in (AGREES, WITHIN_NOISE, DIFFERS):
        if row.get("paper") is None:
            return "check"
        return "reading" if row.get("tolerance") is not None else "claim"
    return "estimate" if judged == ESTIMATE else "other"


# ---------------------------------------------------------------------------------- what the page shows and says

_COLUMNS = {"panel": "", "what": "quantity", "published": "published", "reproduced": "ours",
           "difference": "difference", "pixels": "pixels", "verdict": "verdict"}


def table(rows: list[dict]) -> MarkdownTable:
    """The comparison rows as the page's table (steps in whole numbers, losses to three decimals, pixels to one)."""
    shown = [dict(r, reproduced=_shown(r["reproduced"], r["unit"]), difference=_signed(r["difference"], r["unit"]))
             for r in rows]
    return MarkdownTable(shown, _COLUMNS, {"pixels": "+.1f"})


def _shown(x, unit) -> str | None:
    if x is None or not math.isfinite(x):
        return None
    return f"{x:.3f}" if unit == "loss" else f"{x:.0f}"


def _signed(x, unit) -> str | None:
    if x is None or not math.isfinite(x):
        return None
    return f"{x:+.3f}" if unit == "loss" else f"{x:+.0f}"


def counts(rows: list[dict]) -> tuple[int, int]:
    """(rows that agree or are within sampling error, rows with a verdict)."""
    judged = [r for r in rows if r["verdict"] in (AGREES, WITHIN_NOISE, DIFFERS)]
    return sum(r["verdict"] in CONSISTENT for r in judged), len(judged)


def summary(rows: list[dict], image: Image) -> str:
    """The sentences that say where ours and the published curves agree and differ, made from the rows themselves:
    the count that agree within their tolerance and, for each row that differs, both values and the difference."""
    if not rows:
        return ("These settings are not the published ones, so there is no published curve to set beside this "
                "run.")
    agree, total = counts(rows)
    noise = sum(r["verdict"] == WITHIN_NOISE for r in rows)
    head = (f"**{image.name}: {agree} of {total} readings agree** with ours within their tolerance (one pixel of the "
            f"published image, {image.steps_per_px:g} steps or {image.loss_per_px:g} in loss, or the reading's own ± "
            "where it is larger)"
            + (f" or, {noise} of them, within the sampling error of a loss on the training set"
               if noise else "") + ".")
    differ = [r for r in rows if r["verdict"] == DIFFERS]
    if not differ:
        return head + " None differs."
    items = [f"{_where(r)}: published {r['published']}, ours {_shown(r['reproduced'], r['unit']) or 'none'}"
             + (f" ({_signed(r['difference'], r['unit'])}, {r['pixels']:+.1f} px)" if math.isfinite(r["pixels"])
                else "") for r in differ]
    return head + f" {'These differ' if len(differ) > 1 else 'This one differs'}:\n\n" + "\n".join(
        f"* {item}" for item in items)


def _where(r: dict) -> str:
    return f"{r['panel']}, {r['what']}" if r["panel"] else r["what"]


def number_rows(rows: list[dict]) -> list[dict]:
    """The comparison rows as ``numbers.json`` rows (key, quantity, paper, reproduced, abs_error, tolerance,
    verdict); the key names the published reading: ``published.<panel>.<what>``."""
    return [dict(key=".".join(["published"] + [slug(t) for t in (r["panel"], r["what"]) if t]),
                 quantity=f"published {r['figure']}" + (f", {r['panel']}" if r["panel"] else "") + f": {r['what']}",
                 paper=r["paper"], reproduced=r["reproduced"],
                 abs_error=abs(r["difference"]) if math.isfinite(r["difference"]) else None,
                 tolerance=r["tolerance"], standard_error=r.get("standard_error"), verdict=r["verdict"])
            for r in rows]


# The one place that says whether a page is the paper's figure. A page is the paper's figure only at its published
# settings (``presets.is_published``); a re-run at any other knob (the quick preset included) runs that figure's
# experiment and says so in its title, caption, prose and cite block.

def experiment_name(figure: str, at_published: bool) -> str:
    """What a page shows: "the paper's Figure 3a" at the published settings, else "Figure 3a's experiment at settings
    of our own"."""
    return f"the paper's {figure}" if at_published else f"{figure}'s experiment at settings of our own"


def caption_lead(figure: str, at_published: bool) -> str:
    """How a figure's caption begins, for every figure page: "The paper's Figure 3a, reproduced" only at the published
    settings (``presets.is_published``), else "Figure 3a's experiment at settings of our own" (a re-run at other
    knobs is not the paper's figure)."""
    name = experiment_name(figure, at_published)
    return f"{name[0].upper()}{name[1:]}" + (", reproduced" if at_published else "")


def reproduces(figure: str, at_published: bool) -> str:
    """The sentence a page's prose glues where it says what it shows: "This page reproduces the paper's Figure 1b"
    at the published settings, else "This page runs Figure 1b's experiment at settings of our own; the paper's
    figure is Figure 1b"."""
    if at_published:
        return f"This page reproduces {experiment_name(figure, True)}"
    return f"This page runs {experiment_name(figure, False)}; the paper's figure is {figure}"


def page_title(title: str, at_published: bool) -> str:
    """A page's title line as a re-run shows it: "# Figure 1b — ATTN_M …" unchanged at the published settings, else
    "# Figure 1b's experiment at settings of our own — ATTN_M …" (a title that names no figure of the paper is kept)."""
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
    """The paper's name of a figure from its page title ("Figure 1b — …" → "Figure 1b"); pages beyond the paper
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
