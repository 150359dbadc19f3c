"""A new figure's files, written by ``python -m linattn.companion.runner.notebooks --new NAME``.

A figure is three things (ARCHITECTURE.md, "How to add a figure"): its notebook ``figures_src/NAME.md`` (prose
around the one call :func:`linattn.companion.figures.common.frame.build`), its module
``linattn/companion/figures/NAME.py`` (the names of :class:`linattn.companion.figures.figure_contract.Figure`) and
its line in ``_toc.yml``, with a ``{ref}`` to it from the chapter it sits in (``book/beyond.md``).
:func:`new_figure` writes all of them: a module that trains one small ATTN_M run per seed through the run store and
plots its loss, which builds at the quick preset as it is, and a notebook of prose placeholders, so that the author
edits two files that already run.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path

CHAPTER = "book/beyond"  # the chapter a new figure is a section of, until its author moves it
NAME_RULE = re.compile(r"[a-z][a-z0-9_]*")

MODULE = '''"""{name}: what this figure shows, in a sentence (write it), and the paper's equation it reads, if any.

Written by ``python -m linattn.companion.runner.notebooks --new {name}``: one ATTN_M run per seed, trained through
the run store (``runs(S)``), and its training loss; replace the runs, the dataset and the numbers with the figure's.
"""

from __future__ import annotations

import json

import numpy as np

from .. import presets
from ..commands import train_command
from .common import preset_blocks
from .common.attn_s_run import describe
from .common.frame import settings_attrs
from .common.trainer import train

NAME = __name__.rsplit(".", 1)[-1]
PRESETS = {{
    "quick": preset_blocks.run_settings(model="attnM", head_num=2, in_dim=3, seq_len=16, trainset_size=200,
                                        init=1e-2, lr=0.01, epoch=301, seeds=[0], snapshot_every=0),
    "paper": preset_blocks.run_settings(model="attnM", head_num=2, in_dim=3, seq_len=16, trainset_size=1000,
                                        init=1e-2, lr=0.01, epoch=2001, seeds=[0, 1], snapshot_every=0),
}}
# Settings of a reader's own the page must stay true at (each a few seconds at the quick preset).
KNOB_CASES = (dict(in_dim=2, head_num=3), dict(seeds=[1, 2], epoch=201))
# what its quick build's numbers must show: (key pattern, "abs" or "rel", tolerance)
TOLERANCES: list[tuple[str, str, float]] = []


def runs(S: dict) -> dict:
    """One run per seed (``seeds``), in their order."""
    return preset_blocks.sweep(S)


def compute(S: dict):
    """Every seed's training loss (``train_loss``: seed × step) and its final value (``final_loss``: seed); the
    settings as attributes."""
    import xarray as xr

    done = list(train(runs(S), S).values())
    step = np.asarray(done[0].history.step)
    ds = xr.Dataset({{"train_loss": (("seed", "step"), np.stack([r.history.train_loss for r in done])),
                     "final_loss": ("seed", [float(r.history.train_loss[-1]) for r in done])}},
                    coords={{"seed": [r.config.seed for r in done], "step": step}},
                    attrs=settings_attrs(S, engine=done[0].engine, seeds=S["seeds"],
                                         runs={{str(r.config.seed): r.config.to_dict() for r in done}}))
    ds.attrs.update(published=int(presets.is_published(NAME, S)),
                    commands="\\n".join(train_command(r.config) for r in done))
    return ds


def numbers(ds) -> list[dict]:
    """``numbers.json``: each seed's final training loss (no paper or theory value beside it yet)."""
    return [dict(key=f"final_loss.seed{{int(s)}}", quantity=f"seed {{int(s)}}: final training loss",
                 reproduced=float(ds.final_loss.sel(seed=s))) for s in ds.seed.values]


def words(ds) -> dict:
    """The values the page's prose quotes, by name (for ``output.glue``)."""
    run = next(iter(json.loads(ds.attrs["runs"]).values()))
    return dict(settings=describe(run, seeds=[int(s) for s in ds.seed.values]),
                final_loss=float(ds.final_loss.min()))


def plot(ds):
    """Each seed's training loss against the step."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    for s in ds.seed.values:
        ax.plot(ds.step, ds.train_loss.sel(seed=s), color="black", lw=1)
    ax.set(xlabel="step", ylabel="training loss", yscale="log")
    return fig
'''

NOTEBOOK = '''---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  name: python3
---

# {name} — the finding in one line (write it)

What the figure shows and why it matters, in at most 150 words before the figure (write it). This run:
{{glue:text}}`settings`. The computation is `linattn.companion.figures.{name}`.

```{{code-cell}} ipython3
:tags: [parameters]

{parameters}
```

```{{code-cell}} ipython3
import linattn.companion.figures.{name} as fig, linattn.companion.figures.common.frame as frame

page = frame.build(fig, globals())
```

```{{figure}} {name}/{name}.svg
:name: fig-{name}
:alt: Training loss of each seed against the step

Training loss of each seed against the step (describe the panels); the lowest final loss is {{glue:text}}`final_loss`.
```

## Details

Every sentence that compares or interprets comes from one rule of the module, quoted through its glued values
(write them). The "Cite this figure" block is added by the runner when the page is built; the chapter
`{chapter}.md` refers to this figure as {{ref}}`fig-{name}` (move both where the figure belongs).

```{{code-cell}} ipython3
page.table
```
'''


def check_name(name: str, root: Path) -> None:
    """Refuse a ``name`` that is no new figure's: not lower-case letters, digits and underscores starting with a
    letter, a Python keyword, a module of the figures package, or a notebook or module already there (ValueError,
    one line)."""
    from ..figures import NOT_FIGURES

    if not NAME_RULE.fullmatch(name) or keyword.iskeyword(name):
        raise ValueError(f"{name!r} is not a figure name: lower-case letters, digits and _, starting with a letter")
    if name in NOT_FIGURES:
        raise ValueError(f"{name!r} is a module of the figures package, not a free figure name")
    for path in paths(name, root)[:2]:
        if path.exists():
            raise ValueError(f"{name!r} exists already: {path.relative_to(root)}")


def paths(name: str, root: Path) -> tuple[Path, Path, Path, Path]:
    """The files a new figure ``name`` writes or edits: notebook, module, ``_toc.yml`` and its chapter."""
    return (root / "figures_src" / f"{name}.md", root / "linattn" / "companion" / "figures" / f"{name}.py",
            root / "_toc.yml", root / f"{CHAPTER}.md")


def _toc_with(toc: str, name: str) -> str:
    """``toc`` with ``book/figures/<name>`` as the last section of :data:`CHAPTER`."""
    lines = toc.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if line.strip() == f"- file: {CHAPTER}"), None)
    if at is None:
        raise ValueError(f"_toc.yml has no chapter {CHAPTER}")
    indent = len(lines[at]) - len(lines[at].lstrip())
    end = at + 1
    while end < len(lines) and len(lines[end]) - len(lines[end].lstrip()) > indent:
        end += 1
    entry = " " * (indent + 4) + f"- file: book/figures/{name}\n"
    if lines[at + 1:end] and lines[at + 1].strip() == "sections:":
        return "".join(lines[:end] + [entry] + lines[end:])
    return "".join(lines[:at + 1] + [" " * (indent + 2) + "sections:\n", entry] + lines[at + 1:])


def new_figure(name: str, root: Path, parameters_source) -> list[Path]:
    """Write figure ``name``'s module and notebook (its parameters cell ``parameters_source(name)``, from the
    module's presets), add its line to ``_toc.yml`` and a reference from its chapter; refuse a bad ``name`` before
    writing anything. Returns the paths written."""
    import importlib

    root = Path(root)
    check_name(name, root)
    notebook, module, toc, chapter = paths(name, root)
    new_toc = _toc_with(toc.read_text(encoding="utf-8"), name)
    module.write_text(MODULE.format(name=name), encoding="utf-8")
    importlib.invalidate_caches()
    try:
        notebook.write_text(NOTEBOOK.format(name=name, chapter=CHAPTER, parameters=parameters_source(name)),
                            encoding="utf-8")
    except BaseException:
        module.unlink()
        raise
    toc.write_text(new_toc, encoding="utf-8")
    with chapter.open("a", encoding="utf-8") as f:
        f.write(f"\n{{ref}}`fig-{name}` is a figure of our own (say what it adds).\n")
    return [notebook, module, toc, chapter]
