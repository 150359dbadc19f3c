"""What the two schematic pages (Figures 1a and 2) share: how a drawing's size compares with the published one."""

from __future__ import annotations


def size_words(ds, paper: dict) -> str:
    """"the size of the published diagram" where the drawing's D and H (``ds.attrs``) are the paper preset's
    (``paper``), else which D and H the published diagram has."""
    if ds.attrs["published"]:
        return "the size of the published diagram"
    return f"not the size of the published diagram, which has D = {paper['in_dim']} and H = {paper['head_num']}"


# the most nodes and edges a schematic draws: a few seconds of matplotlib; the published diagrams draw about 50
MAX_DRAWN = 5000


def check_drawing(S: dict, drawn: int) -> None:
    """Refuse the settings ``S`` (``in_dim``, ``head_num``) of a schematic that would draw ``drawn`` nodes and edges,
    more than :data:`MAX_DRAWN` (matplotlib draws each as an artist of its own: a million heads took gigabytes and
    minutes), before anything runs: :class:`linattn.errors.ConfigError` naming ``head_num``."""
    from ....config import ConfigError
    from ....errors import named

    if drawn > MAX_DRAWN:
        raise ConfigError(f"{named('in_dim')} = {S['in_dim']} and {named('head_num')} = {S['head_num']} make a "
                          f"schematic of {drawn:,} nodes and edges, more than the {MAX_DRAWN:,} one drawing can show; "
                          f"use a smaller {named('head_num')} or {named('in_dim')}", field="head_num",
                          value=S["head_num"])
