"""What the two schematic pages (Figures 1a and 2) share: how a drawing's size compares with the published one."""

from __future__ import annotations


def size_words(ds, paper: dict) -> str:
    """"the size of the published diagram" where the drawing's D and H (``ds.attrs``) are the paper preset's
    (``paper``), else which D and H the published diagram has."""
    if ds.attrs["published"]:
        return "the size of the published diagram"
    return f"not the size of the published diagram, which has D = {paper['in_dim']} and H = {paper['head_num']}"
