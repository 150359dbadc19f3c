"""The "Cite this figure" cell of every executed figure page, written from ``CITATION.cff``.

The citation metadata live in one file, ``CITATION.cff`` at the repository's root; a copy ships inside the package
(``linattn/companion/CITATION.cff``, package data) so that an installed copy cites the same thing, and a test holds
the two equal. The BibTeX entries are made from it: the paper from ``preferred-citation``, the companion from the
file's own title, authors and version.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

CFF_FILE = "CITATION.cff"


def cff_text() -> str:
    """The text of the packaged ``CITATION.cff``."""
    return (resources.files("linattn.companion") / CFF_FILE).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def cff() -> dict:
    """``CITATION.cff`` as parsed YAML."""
    import yaml

    return yaml.safe_load(cff_text())


def _people(authors: list[dict]) -> str:
    """BibTeX's ``author`` field: "Family, Given and …"; an organisation's ``name`` in double braces."""
    return " and ".join(f"{a['family-names']}, {a['given-names']}" if "family-names" in a else f"{{{a['name']}}}"
                        for a in authors)


def _entry(kind: str, key: str, fields: list[tuple[str, object]]) -> str:
    width = max(len(k) for k, _ in fields)
    body = ",\n".join(f"  {k.ljust(width)} = {{{v}}}" for k, v in fields if v is not None)
    return f"@{kind}{{{key},\n{body}\n}}"


def paper_bibtex() -> str:
    """The paper (``preferred-citation``) as a BibTeX ``@inproceedings`` entry."""
    p = cff()["preferred-citation"]
    arxiv = next((i["value"].split(":", 1)[1] for i in p.get("identifiers", [])
                  if str(i.get("value", "")).startswith("arXiv:")), None)
    family = p["authors"][0]["family-names"].lower()
    fields = [("title", p["title"]), ("author", _people(p["authors"])), ("booktitle", p.get("collection-title")),
              ("series", "Proceedings of Machine Learning Research"), ("volume", p.get("volume")),
              ("pages", f"{p['start']}--{p['end']}" if "start" in p else None), ("year", p.get("year")),
              ("eprint", arxiv), ("archivePrefix", "arXiv" if arxiv else None)]
    return _entry("inproceedings", f"{family}{p.get('year', '')}training", fields)


def software_bibtex(version: str) -> str:
    """The companion itself (the file's title and authors) at ``version`` as a BibTeX ``@software`` entry."""
    c = cff()
    title = c["title"].replace("'", "``", 1).replace("'", "''", 1)
    return _entry("software", "linattn_companion", [("author", _people(c["authors"])), ("title", title),
                                                    ("version", version)])


def cite_block(name: str, text: str = "", *, netcdf: bool = False, at_published: bool = True) -> str:
    """The "Cite this figure" markdown cell appended to every executed figure notebook (paths relative to
    ``<root>``, where the executed notebook lies). A page whose title names a figure of the paper ("# Figure 1b —
    …", the notebook's MyST ``text``) cites that figure by the paper's name where it ran at the published settings
    (``at_published``); a re-run at other settings says it is not that figure (``published.page.cite_words``)."""
    from ..._version import __version__
    from .. import published

    files = [("PDF", "pdf"), ("PNG", "png"), ("SVG", "svg"), ("CSV", "csv")] + [("NetCDF", "nc")] * netcdf
    links = [f"{{download}}`{label} <{name}/{name}.{ext}>`" for label, ext in files]
    links.append(f"{{download}}`provenance.json <{name}/provenance.json>`")
    links.append(f"{{download}}`runnable notebook <{name}/{name}.ipynb>`")
    title = next((line for line in text.splitlines() if line.startswith("# Figure ")), None)
    paper = published.page.paper_name(title) if title else None
    what = (published.page.cite_words(paper, at_published) if paper
            else "If you use it, please cite the paper whose result it builds on:")
    link = (paper if at_published else f"{paper}'s experiment") if paper else "this figure"
    return "\n".join([
        "## Cite this figure",
        "",
        f"This figure's anchor is `fig-{name}` (link to it with `` {{ref}}`{link} <fig-{name}>` ``).",
        f"Files: {' · '.join(links)}.",
        "",
        what,
        "",
        "```bibtex",
        paper_bibtex(),
        "```",
        "",
        f"and the companion that produced it: *{cff()['title']}*, version {__version__} (see `{CFF_FILE}` in the "
        "repository).",
        "",
        "```bibtex",
        software_bibtex(__version__),
        "```",
    ])
