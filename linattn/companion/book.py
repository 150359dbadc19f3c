"""Build the companion book (Jupyter Book 1.x) from one preset's executed figure notebooks, and check the result.

The book never trains anything: ``_config.yml`` turns notebook execution off, and the figure pages are the notebooks
that ``linattn figures --preset P`` executed into ``_build/figures/P/``. A build of preset ``P``:

1. checks every figure named in ``_toc.yml`` (:func:`check_figures`): its executed notebook exists, recorded no
   error, has its image, ran at preset ``P`` (a figure of another preset in that folder is refused: one preset per
   book), and its cache key still matches its notebook, the ``linattn`` code, the library versions and, for the
   report, the numbers it read. Otherwise the build stops naming each figure and the command that remakes it;
2. stages the book's sources (``_config.yml``, ``_toc.yml``, ``book/``) with those figures as ``book/figures/`` in a
   temporary folder under ``_build/``, writes the generated includes (``book/_generated/knobs.md``: every figure's
   knobs, :func:`linattn.companion.runner.notebooks.knobs_markdown`) and runs ``jupyter-book build`` there (warnings are
   errors);
3. on success renames the HTML into place: ``_build/html`` for the paper preset, ``_build/<P>/html`` otherwise. So
   ``make test`` (the quick book) never touches the paper book that ``make book`` made, and a failed build leaves the
   previous HTML as it was.

Commands (``python -m linattn.companion.book …``)::

    check [--preset P]   list missing/stale/mixed figure notebooks (exit 1 if any)
    build [--preset P]   check, stage, ``jupyter-book build --all -W -n --keep-going``, rename into place
    links [--preset P]   check that every internal href/src of the built HTML resolves (files and #anchors); offline

Every command needs a checkout of the repository (the book's pages, ``_config.yml`` and ``_toc.yml`` are not
installed with the package): from an installed linattn it says so in one line and exits with code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from .runner import cachekey, notebooks, publish
from .runner.paths import CHECKOUT_NEEDED, IS_CHECKOUT, REPO_ROOT

FIGURES_DIR = "book/figures"  # where the figure pages sit in the book (and in _toc.yml)
_SOURCES_DIR = "figures_src"
_BOOK_SOURCES = ("_config.yml", "_toc.yml", "book")  # what a build stages besides the figures


def html_dir(preset: str, root: Path = REPO_ROOT) -> Path:
    """Where the built HTML of ``preset`` lands: ``_build/html`` for the paper book, ``_build/<preset>/html`` else."""
    return Path(root) / "_build" / ("html" if preset == "paper" else f"{preset}/html")


def figures_dir(preset: str, root: Path = REPO_ROOT) -> Path:
    """The executed figures a book of ``preset`` is built from (what ``linattn figures --preset`` writes)."""
    return Path(root) / "_build" / "figures" / preset


class BookError(Exception):
    """The book cannot be built as asked (missing or stale figures, a failed Sphinx run, broken links)."""


# --------------------------------------------------------------------------------------------- the toc's figures

def _toc_files(node) -> list[str]:
    files = []
    if isinstance(node, dict):
        for key in ("root", "file"):
            if isinstance(node.get(key), str):
                files.append(node[key])
        for key in ("parts", "chapters", "sections"):
            for child in node.get(key, []) or []:
                files.extend(_toc_files(child))
    elif isinstance(node, list):
        for child in node:
            files.extend(_toc_files(child))
    return files


def toc_files(root: Path = REPO_ROOT) -> list[str]:
    """Every ``file:`` entry of ``<root>/_toc.yml`` (and its root page), in reading order, without suffix."""
    import yaml

    toc = yaml.safe_load((Path(root) / "_toc.yml").read_text(encoding="utf-8"))
    return [re.sub(r"\.(md|ipynb)$", "", f) for f in _toc_files(toc)]


def toc_figures(root: Path = REPO_ROOT) -> list[str]:
    """Names of the figure notebooks the toc includes (entries ``book/figures/<name>``), in reading order."""
    prefix = FIGURES_DIR + "/"
    return [f[len(prefix):] for f in toc_files(root) if f.startswith(prefix)]


# --------------------------------------------------------------------------------------------- figure checks

@dataclass(frozen=True)
class Problem:
    name: str
    reason: str

    def __str__(self) -> str:
        return f"{self.name}: {self.reason}"


def _notebook_errors(nb_path: Path) -> list[str]:
    """Names of the errors recorded in an executed notebook's outputs (papermill keeps them on failure)."""
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    errors = []
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) or []:
            if out.get("output_type") == "error":
                errors.append(f"{out.get('ename', 'Error')}: {out.get('evalue', '')}".strip())
    return errors


def _staleness(name: str, root: Path, figures: Path, preset: str) -> str | None:
    """Why the executed figure ``name`` in ``figures`` cannot go into the book of ``preset`` (None: it can).

    The runner's record is the authority: ``<name>/.run.json`` says which preset (and overrides) it ran with, and
    ``<name>/.cache-key`` must equal the key that notebook text, the ``linattn`` code, the library versions and
    (for the report) the numbers it read give now.
    """
    src = root / _SOURCES_DIR
    if not (src / f"{name}.md").is_file():
        return None
    info = cachekey.run_info(figures, name)
    if info is None:
        return f"stale: no run record {name}/{cachekey.RUN_INFO} (not made by `linattn figures`)"
    if info.get("preset") != preset:
        return (f"ran at the {info.get('preset')!r} preset, not {preset!r}: a book shows one preset (re-run it with "
                f"`linattn figures --preset {preset} --only {name}`)")
    key = cachekey.expected_key(name, figures, src)
    if not cachekey.is_current(figures, name, key):
        return f"stale: {_SOURCES_DIR}/{name}.md, the linattn code, a library or its inputs changed since it ran"
    return None


def _check_figure(name: str, root: Path = REPO_ROOT, *, preset: str = "paper", figures: Path | None = None,
                 stale_ok: bool = False) -> list[Problem]:
    """What keeps figure ``name`` from going into the book of ``preset`` (empty list: it is ready)."""
    root = Path(root)
    figures = Path(figures) if figures is not None else figures_dir(preset, root)
    nb = figures / f"{name}.ipynb"
    if not nb.is_file():
        failed = figures / f"{name}.failed.ipynb"
        hint = f" (its last run failed, see {failed})" if failed.is_file() else ""
        return [Problem(name, f"missing: no executed notebook {name}.ipynb in {figures}{hint}")]
    problems = []
    stale = None if stale_ok else _staleness(name, root, figures, preset)
    if stale:
        problems.append(Problem(name, stale))
    if not any((figures / name / f"{name}.{ext}").is_file() for ext in ("svg", "png")):
        problems.append(Problem(name, f"missing image: {name}/{name}.svg"))
    try:
        errors = _notebook_errors(nb)
    except (OSError, ValueError) as e:
        problems.append(Problem(name, f"unreadable notebook {nb}: {e}"))
    else:
        if errors:
            problems.append(Problem(name, f"notebook recorded an error: {errors[0]}"))
    return problems


def check_figures(root: Path = REPO_ROOT, names: list[str] | None = None, *, preset: str = "paper",
                  figures: Path | None = None, stale_ok: bool = False) -> list[Problem]:
    """Problems of every toc figure (or of ``names``)."""
    names = toc_figures(root) if names is None else names
    return [p for name in names for p in _check_figure(name, root, preset=preset, figures=figures, stale_ok=stale_ok)]


def require_figures(root: Path = REPO_ROOT, *, preset: str = "paper", figures: Path | None = None,
                    stale_ok: bool = False) -> None:
    """Raise :class:`BookError` naming each missing/stale/mixed figure and the command that (re)makes it."""
    problems = check_figures(root, preset=preset, figures=figures, stale_ok=stale_ok)
    if problems:
        names = sorted({p.name for p in problems})
        lines = "\n".join(f"  - {p}" for p in problems)
        raise BookError(
            f"{len(names)} figure notebook(s) in _toc.yml are not ready for the {preset} book:\n{lines}\n"
            f"Make them with `linattn figures --preset {preset}` (or only these: `linattn figures --preset {preset} "
            f"--only {' '.join(names)}`); the book never runs them itself.")


# --------------------------------------------------------------------------------------------- build

def _ignore_bookkeeping(folder, names):
    """What staging leaves out of a figures folder: superseded and failed runs, the runner's locks and the stages
    of figures still executing (:mod:`linattn.companion.runner.publish`)."""
    return [n for n in names if n in (publish.PREVIOUS, publish.LOCKS) or n.startswith(publish.STAGE_PREFIX)
            or n.endswith(".failed.ipynb") or (n.startswith(".") and n.endswith(".ipynb"))]


def stage(root: Path, figures: Path, into: Path) -> Path:
    """Copy the book's sources from ``root`` and the executed ``figures`` (as ``book/figures``) into ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    for item in _BOOK_SOURCES:
        src = Path(root) / item
        if src.is_dir():
            shutil.copytree(src, into / item, ignore=shutil.ignore_patterns("figures", "_build"))
        else:
            shutil.copy2(src, into / item)
    shutil.copytree(figures, into / FIGURES_DIR, ignore=_ignore_bookkeeping)
    generated = into / "book" / "_generated"  # pages written from the code, included by the book's own pages
    generated.mkdir(exist_ok=True)
    (generated / "knobs.md").write_text(notebooks.knobs_markdown(), encoding="utf-8")
    return into


def _replace_dir(new: Path, dest: Path) -> None:
    """Put ``new`` at ``dest`` by renames only (the old tree is removed after the new one is in place)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        os.replace(dest, old)
    os.replace(new, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def build(root: Path = REPO_ROOT, *, preset: str = "paper", figures: Path | None = None, strict: bool = True,
          builder: str = "html", check: bool = True, stale_ok: bool = False, quiet: bool = True) -> float:
    """Check the figures of ``preset``, build the book in a staged copy, rename its HTML into
    :func:`html_dir`; return the wall time in seconds. ``strict``: ``-W -n --keep-going`` (every warning fails
    the build, after reporting all of them)."""
    root = Path(root)
    figures = Path(figures) if figures is not None else figures_dir(preset, root)
    if check:
        require_figures(root, preset=preset, figures=figures, stale_ok=stale_ok)
    exe = Path(sys.executable).with_name("jupyter-book")
    (root / "_build").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f".stage-{preset}-", dir=root / "_build") as tmp:
        staged = stage(root, figures, Path(tmp))
        cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(staged), "--builder", builder, "--all"]
        if strict:
            cmd += ["-W", "-n", "--keep-going"]
        if quiet:
            cmd.append("--quiet")
        # jupyter-book's closing banner names the staging folder, which is gone afterwards: keep its stdout for
        # failures only (warnings and errors arrive on stderr either way)
        proc = subprocess.run(cmd, cwd=staged, stdout=subprocess.PIPE if quiet else None, text=True)
        if proc.returncode != 0:
            if quiet:
                print(proc.stdout, end="")
            raise BookError(f"jupyter-book build of the {preset} book failed (exit {proc.returncode}); see the "
                            f"warnings above (the previous HTML in {html_dir(preset, root)} is unchanged)")
        _replace_dir(staged / "_build" / builder, html_dir(preset, root) if builder == "html"
                     else root / "_build" / preset / builder)
    return time.perf_counter() - t0


# --------------------------------------------------------------------------------------------- offline link check

class _Refs(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.refs: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name"):
            if a.get(key) and (key == "id" or tag == "a"):
                self.ids.add(a[key])
        for key in ("href", "src"):
            if a.get(key) is not None and not (tag == "link" and a.get("rel") in ("preconnect", "dns-prefetch")):
                self.refs.append((tag, a[key]))


def _parse(path: Path) -> _Refs:
    p = _Refs()
    p.feed(path.read_text(encoding="utf-8", errors="replace"))
    return p


def check_links(html_dir: Path) -> list[str]:
    """Every internal ``href``/``src`` in ``html_dir`` that does not resolve: a missing file, or a ``#anchor``
    that the target page does not define. External URLs (with a scheme or ``//``) are skipped: the check runs
    offline. Returns one line per broken reference."""
    html_dir = Path(html_dir).resolve()
    # pages only: the theme's template snippets under _static/ are not served as pages
    pages = sorted(p for p in html_dir.rglob("*.html") if "_static" not in p.relative_to(html_dir).parts)
    if not pages:
        raise BookError(f"no HTML pages under {html_dir}; build the book first")
    parsed = {p: _parse(p) for p in pages}
    broken = []
    for page, refs in parsed.items():
        for tag, ref in refs.refs:
            parts = urlsplit(ref)
            if parts.scheme or ref.startswith("//") or ref.startswith("data:"):
                continue
            target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            where = f"{page.relative_to(html_dir)}: <{tag}> {ref}"
            if html_dir not in target.parents and target != html_dir:
                broken.append(f"{where} (points outside the site)")
            elif not target.exists():
                broken.append(f"{where} (no such file)")
            elif parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{where} (no anchor #{parts.fragment})")
    return broken


# --------------------------------------------------------------------------------------------- command line

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m linattn.companion.book", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="the book's root (holds _config.yml)")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="list missing, stale or mixed figure notebooks")
    b = sub.add_parser("build", help="check the figures, then build the HTML book (warnings are errors)")
    ln = sub.add_parser("links", help="check every internal link and image of the built HTML (offline)")
    for p in (b, c, ln):
        p.add_argument("--preset", choices=("paper", "quick"), default="paper",
                       help="which preset's figures (_build/figures/<preset>) the book shows (default paper)")
    for p in (b, c):
        p.add_argument("--allow-stale", dest="stale_ok", action="store_true",
                       help="accept figure notebooks whose source or code changed since they ran")
    b.add_argument("--no-strict", dest="strict", action="store_false", help="let warnings pass")
    b.add_argument("--verbose", dest="quiet", action="store_false", help="Sphinx's full log")
    args = parser.parse_args(argv)
    if not (Path(args.root) / "_config.yml").is_file():  # an installed linattn has no book sources: say so, once
        why = CHECKOUT_NEEDED if not IS_CHECKOUT and Path(args.root) == REPO_ROOT else \
            f"{args.root} holds no _config.yml (--root must be the book's root, a checkout of the repository)"
        print(f"linattn book: error: {why}", file=sys.stderr)
        return 2
    try:
        if args.command == "check":
            require_figures(args.root, preset=args.preset, stale_ok=args.stale_ok)
            count = len(toc_figures(args.root))
            print(f"all {count} figure notebooks in _toc.yml are ready for the {args.preset} book")
        elif args.command == "build":
            wall = build(args.root, preset=args.preset, strict=args.strict, stale_ok=args.stale_ok, quiet=args.quiet)
            print(f"{args.preset} book built in {wall:.0f} s: open {html_dir(args.preset, args.root) / 'index.html'}")
        elif args.command == "links":
            html = html_dir(args.preset, args.root)
            broken = check_links(html)
            if broken:
                raise BookError(f"{len(broken)} broken internal link(s):\n" + "\n".join(f"  {b}" for b in broken))
            print(f"internal links OK in the pages of {html}")
    except BookError as e:
        print(f"linattn book: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
