"""Build the companion book (Jupyter Book 1.x) from already-executed figure notebooks, and check the result.

The book never trains anything: ``_config.yml`` turns notebook execution off, and the figure pages are the
notebooks that ``linattn figures`` executed into ``book/figures/<name>.ipynb``. So before Sphinx runs,
:func:`check_figures` makes sure every figure notebook named in ``_toc.yml`` exists, has its image, finished without
error, and is not older than its source ``figures_src/<name>.md``; otherwise the build stops with a message naming
each missing or stale figure and the command that makes it.

Commands (``python -m linattn.book …``)::

    check   list missing/stale figure notebooks (exit 1 if any)
    build   check, then ``jupyter-book build <root> --all -W -n --keep-going`` (warnings are errors)
    links   check that every internal href/src in _build/html resolves (files and #anchors); offline
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from .provenance import PACKAGE_ROOT

REPO_ROOT = PACKAGE_ROOT.parent
FIGURES_DIR = "book/figures"
SOURCES_DIR = "figures_src"


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


def _staleness(name: str, root: Path, nb: Path) -> str | None:
    """Why the executed notebook of ``name`` is out of date, or None when it is current.

    The runner's cache key (a hash of the notebook text, the ``linattn`` code and the preset, stored in
    ``<name>/.cache-key``) is the authority: the notebook is current when the key matches the quick or the paper
    preset. Without the runner (or without a source notebook) the fallback compares modification times.
    """
    src = root / SOURCES_DIR / f"{name}.md"
    if not src.is_file():
        return None
    try:
        from . import figures as runner
        key_file = root / FIGURES_DIR / name / runner.CACHE_KEY
        text, sources = src.read_text(encoding="utf-8"), runner.source_hash()
        keys = {runner.cache_key(text, {"preset": p}, sources) for p in ("quick", "paper")}
    except (ImportError, AttributeError, TypeError):
        if src.stat().st_mtime > nb.stat().st_mtime:
            return f"stale: {src.relative_to(root)} is newer than {nb.relative_to(root)}"
        return None
    if not key_file.is_file():
        return f"stale: no cache key {key_file.relative_to(root)} (not made by `linattn figures`)"
    if key_file.read_text(encoding="utf-8").strip() not in keys:
        return f"stale: {src.relative_to(root)} or the linattn code changed since it ran"
    return None


def check_figure(name: str, root: Path = REPO_ROOT, *, stale_ok: bool = False) -> list[Problem]:
    """What keeps figure ``name`` from going into the book (empty list: it is ready)."""
    root = Path(root)
    nb = root / FIGURES_DIR / f"{name}.ipynb"
    png = root / FIGURES_DIR / name / f"{name}.png"
    if not nb.is_file():
        failed = root / FIGURES_DIR / f"{name}.failed.ipynb"
        hint = f" (its last run failed, see {failed.relative_to(root)})" if failed.is_file() else ""
        return [Problem(name, f"missing: {nb.relative_to(root)} does not exist{hint}")]
    problems = []
    stale = None if stale_ok else _staleness(name, root, nb)
    if stale:
        problems.append(Problem(name, stale))
    if not png.is_file():
        problems.append(Problem(name, f"missing image: {png.relative_to(root)}"))
    try:
        errors = _notebook_errors(nb)
    except (OSError, ValueError) as e:
        problems.append(Problem(name, f"unreadable notebook {nb.relative_to(root)}: {e}"))
    else:
        if errors:
            problems.append(Problem(name, f"notebook recorded an error: {errors[0]}"))
    return problems


def check_figures(root: Path = REPO_ROOT, names: list[str] | None = None, *, stale_ok: bool = False
                  ) -> list[Problem]:
    """Problems of every toc figure (or of ``names``)."""
    names = toc_figures(root) if names is None else names
    return [p for name in names for p in check_figure(name, root, stale_ok=stale_ok)]


def require_figures(root: Path = REPO_ROOT, *, stale_ok: bool = False) -> None:
    """Raise :class:`BookError` naming each missing/stale figure and the command that (re)makes it."""
    problems = check_figures(root, stale_ok=stale_ok)
    if problems:
        names = sorted({p.name for p in problems})
        lines = "\n".join(f"  - {p}" for p in problems)
        raise BookError(
            f"{len(names)} figure notebook(s) in _toc.yml are not ready:\n{lines}\n"
            f"Make them with `linattn figures --preset quick` (or --preset paper), "
            f"or only these: `linattn figures --only {' '.join(names)}`; the book never runs them itself.")


# --------------------------------------------------------------------------------------------- build

def build(root: Path = REPO_ROOT, *, strict: bool = True, full: bool = True, builder: str = "html",
          check: bool = True, stale_ok: bool = False) -> float:
    """Check the figures, run ``jupyter-book build``; return the wall time in seconds.

    ``strict``: ``-W -n --keep-going`` (every warning fails the build, after reporting all of them).
    ``full``: ``--all`` (rebuild every page, so warnings from unchanged pages are reported again).
    """
    root = Path(root)
    if check:
        require_figures(root, stale_ok=stale_ok)
    exe = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(root), "--builder", builder]
    if full:
        cmd.append("--all")
    if strict:
        cmd += ["-W", "-n", "--keep-going"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise BookError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}); see the warnings above")
    return wall


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
    parser = argparse.ArgumentParser(prog="python -m linattn.book", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="the book's root (holds _config.yml)")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="list missing or stale figure notebooks")
    b = sub.add_parser("build", help="check the figures, then build the HTML book (warnings are errors)")
    for p in (b, c):
        p.add_argument("--allow-stale", dest="stale_ok", action="store_true",
                       help="accept figure notebooks whose source or code changed since they ran")
    b.add_argument("--no-strict", dest="strict", action="store_false", help="let warnings pass")
    b.add_argument("--incremental", dest="full", action="store_false", help="only rebuild changed pages")
    sub.add_parser("links", help="check every internal link and image of the built HTML (offline)")
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            require_figures(args.root, stale_ok=args.stale_ok)
            print(f"all {len(toc_figures(args.root))} figure notebooks in _toc.yml are present and current")
        elif args.command == "build":
            wall = build(args.root, strict=args.strict, full=args.full, stale_ok=args.stale_ok)
            print(f"book built in {wall:.1f} s: {args.root / '_build' / 'html' / 'index.html'}")
        elif args.command == "links":
            html = Path(args.root) / "_build" / "html"
            broken = check_links(html)
            if broken:
                raise BookError(f"{len(broken)} broken internal link(s):\n" + "\n".join(f"  {b}" for b in broken))
            print(f"internal links OK in the pages of {html}")
    except BookError as e:
        print(f"linattn.book: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
