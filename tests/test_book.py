"""The book as a reader gets it: the built HTML pages open in a headless browser, their equations are typeset,
their figures load, every figure of the toc is there with its caption; plus the build's own guards (missing/stale
figure notebooks, the offline link check) and the citation metadata.

The rendering tests (marked ``book``) read the book of ``$LINATTN_BOOK_PRESET`` (default ``quick``: the one
``make test`` builds into ``_build/quick/html`` from ``_build/figures/quick``; ``$LINATTN_BOOK_HTML`` points them
elsewhere) and skip when it has not been built (``make test``, or ``linattn figures --preset quick && python -m
linattn.companion.book build --preset quick``); the browser tests also skip when no Chromium is installed (Debian:
``apt-get install -y chromium``). Under ``LINATTN_REQUIRE_BROWSER=1`` (CI) they fail instead
(``conftest.require_built``). The guards and configuration tests at the end need no build.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import numpy as np
import pytest
import yaml
from conftest import require_built

from linattn.companion import book
from linattn.companion.runner import notebooks

ROOT = book.REPO_ROOT
PRESET = os.environ.get("LINATTN_BOOK_PRESET", "quick")
HTML = Path(os.environ.get("LINATTN_BOOK_HTML", book.html_dir(PRESET)))
FIGURES = book.figures_dir(PRESET)  # the executed notebooks that book was built from
SHOTS = HTML.parent / "screenshots"

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--mute-audio"]
# Error markers a reader must never see in a page's main content.
ERROR_TEXT = re.compile(r"Traceback|\bError\b|Exception|Math input error|image not found|Unknown directive|"
                        r"Unknown interpreted text role|undefined label")


READER_WINDOW = (1280, 2400)
FIRST_VIEW_PX = 1200  # a figure page's first figure must start within this many pixels of the top


def built():
    if not (HTML / "index.html").is_file():
        require_built(f"the {PRESET} book is not built ({HTML / 'index.html'} missing): run `make test` (or "
                      f"`linattn figures --preset {PRESET} && "
                      f"python -m linattn.companion.book build --preset {PRESET}`)")


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    require_built("no Chromium found: install it (Debian: `apt-get install -y chromium`) to run the browser tests")


# ------------------------------------------------------------------------------------------- a local web server

# Injected into a page served with ?linattn-check: once MathJax has typeset the page (or failed), it records what
# the reader sees — each image's natural width and the MathJax output — in a hidden <div id="linattn-check">.
CHECK_SCRIPT = b"""<script>
window.addEventListener('load', function () {
  function report() {
    var imgs = Array.prototype.slice.call(document.images).map(function (i) {
      return {src: i.getAttribute('src'), naturalWidth: i.naturalWidth, complete: i.complete};
    });
    // the reader's first view: where the first figure image starts, and whether any table comes before it
    var fig = document.querySelector('main figure img, main figure object');
    var tables = Array.prototype.slice.call(document.querySelectorAll('main table'));
    var before = fig ? tables.filter(function (t) {
      return t.compareDocumentPosition(fig) & Node.DOCUMENT_POSITION_FOLLOWING; }).length : null;
    var out = {images: imgs,
               width: window.innerWidth,
               figureTop: fig ? fig.getBoundingClientRect().top + window.scrollY : null,
               figureSrc: fig ? (fig.getAttribute('src') || fig.getAttribute('data')) : null,
               tablesBeforeFigure: before,
               mjx: document.querySelectorAll('mjx-container').length,
               mjxErrors: document.querySelectorAll('mjx-merror').length,
               mathSources: document.querySelectorAll('.math').length};
    var div = document.createElement('div');
    div.id = 'linattn-check';
    div.hidden = true;
    div.textContent = JSON.stringify(out);
    document.body.appendChild(div);
  }
  var mj = window.MathJax;
  if (mj && mj.startup && mj.startup.promise) { mj.startup.promise.then(report, report); }
  else { setTimeout(report, 0); }
});
</script>"""


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass

    def send_head(self):
        if "linattn-check" not in self.path or not self.path.split("?")[0].endswith(".html"):
            return super().send_head()
        path = Path(self.translate_path(self.path.split("?")[0]))
        if not path.is_file():
            self.send_error(404)
            return None
        body = path.read_bytes().replace(b"</body>", CHECK_SCRIPT + b"</body>")
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        import io

        return io.BytesIO(body)


@pytest.fixture(scope="module")
def server():
    built()
    handler = functools.partial(_Handler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def run_chromium(args, tmp_path, timeout=120) -> subprocess.CompletedProcess:
    exe = chromium()
    profile = tmp_path / "chromium-profile"
    cmd = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def rendered(url, tmp_path) -> tuple[str, dict]:
    """The DOM after load and typesetting, and the check record the injected script left in it."""
    proc = run_chromium(["--virtual-time-budget=20000", "--run-all-compositor-stages-before-draw", "--dump-dom",
                         f"--window-size={READER_WINDOW[0]},{READER_WINDOW[1]}", f"{url}?linattn-check"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    m = re.search(r'<div id="linattn-check"[^>]*>(.*?)</div>', dom, re.S)
    assert m, f"the page never finished loading: no check record in the DOM of {url}"
    import html

    return dom, json.loads(html.unescape(m.group(1)))


class _Text(HTMLParser):
    """Visible text of the page's main article (no scripts, styles or MathJax's own markup)."""

    def __init__(self):
        super().__init__()
        self.depth, self.skip, self.parts = 0, 0, []

    def handle_starttag(self, tag, attrs):
        if tag == "main" or (tag == "article" and self.depth == 0):
            self.depth += 1
        elif self.depth and tag in ("script", "style", "mjx-container", "pre"):
            self.skip += 1

    def handle_endtag(self, tag):
        if self.depth and tag in ("script", "style", "mjx-container", "pre") and self.skip:
            self.skip -= 1
        elif tag == "main" and self.depth:
            self.depth -= 1

    def handle_data(self, data):
        if self.depth and not self.skip:
            self.parts.append(data)


def main_text(dom: str) -> str:
    p = _Text()
    p.feed(dom)
    return " ".join(p.parts)


def non_blank(png: Path) -> float:
    """Fraction of pixels that differ visibly from the page's most common colour."""
    import matplotlib.image

    img = matplotlib.image.imread(png)[..., :3]
    flat = (img.reshape(-1, 3) * 255).round().astype(np.int64)
    codes = flat[:, 0] * 65536 + flat[:, 1] * 256 + flat[:, 2]
    background = np.bincount(codes).argmax()
    bg = np.array([background // 65536, background // 256 % 256, background % 256])
    return float((np.abs(flat - bg).sum(axis=1) > 30).mean())


# ------------------------------------------------------------------------------------------- (a) the reader's view

ATTN_S_PAGES = ["book/attn_s.html", "book/figures/fig03a_attns_loss.html"]


@pytest.mark.book
@pytest.mark.parametrize("page", ATTN_S_PAGES)
def test_page_renders_in_browser(page, server, tmp_path):
    """Equations typeset by the bundled MathJax (offline), every image decoded, no error text on the page."""
    built()
    if not (HTML / page).is_file():
        require_built(f"{page} is not in the book built at {HTML}")
    dom, check = rendered(f"{server}/{page}", tmp_path)
    if "figures/" not in page:  # the chapter is written in equations; a figure page may have none
        assert check["mathSources"] > 10, "the chapter has (almost) no math to typeset"
    assert check["mjx"] >= check["mathSources"], f"MathJax typeset {check['mjx']} of {check['mathSources']} formulas"
    assert check["mjxErrors"] == 0, "MathJax reported errors in formulas"
    broken = [i["src"] for i in check["images"] if not i["complete"] or i["naturalWidth"] == 0]
    assert not broken, f"images that did not load: {broken}"
    if "figures/" in page:
        assert any("fig03a_attns_loss" in (i["src"] or "") for i in check["images"]), "the figure image is absent"
    text = main_text(dom)
    assert len(text) > 500, "the page's main content is (nearly) empty"
    found = ERROR_TEXT.findall(text)
    assert not found, f"error text on the page: {sorted(set(found))}"
    assert 'class="problematic"' not in dom and "system-message" not in dom


def _toc_figure_pages():
    return [f"book/figures/{n}.html" for n in book.toc_figures(ROOT)]


@pytest.mark.book
@pytest.mark.parametrize("page", _toc_figure_pages())
def test_figure_page_leads_with_its_figure(page, server, tmp_path):
    """Figure first: in a 1280-px-wide window the page's first figure image starts within the first 1,200 px,
    and no table comes before it."""
    built()
    name = Path(page).stem
    _, check = rendered(f"{server}/{page}", tmp_path)
    assert check["width"] == READER_WINDOW[0]
    assert check["figureTop"] is not None, f"{name}: no figure image on the page"
    assert name in (check["figureSrc"] or ""), f"{name}: the first figure is {check['figureSrc']}, not its own"
    assert check["figureTop"] <= FIRST_VIEW_PX, (f"{name}: the figure starts {check['figureTop']:.0f} px down "
                                                  f"(limit {FIRST_VIEW_PX})")
    assert check["tablesBeforeFigure"] == 0, f"{name}: {check['tablesBeforeFigure']} table(s) before the figure"


@pytest.mark.book
def test_screenshot_of_attn_s_chapter(server, tmp_path):
    """A full-height screenshot of the ATTN_S chapter (kept under _build/screenshots/) that is not blank."""
    built()
    SHOTS.mkdir(parents=True, exist_ok=True)
    for page, name in [("book/attn_s.html", "attn_s.png"), ("book/figures/fig03a_attns_loss.html", "fig03a.png")]:
        if not (HTML / page).is_file():
            require_built(f"{page} is not in the book built at {HTML}")
        shot = SHOTS / name
        shot.unlink(missing_ok=True)
        proc = run_chromium(["--virtual-time-budget=20000", "--window-size=1280,2400", f"--screenshot={shot}",
                             f"{server}/{page}"], tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert shot.is_file() and shot.stat().st_size > 20_000, f"screenshot {shot} missing or tiny"
        import matplotlib.image

        assert matplotlib.image.imread(shot).shape[:2] == (2400, 1280)
        assert non_blank(shot) > 0.02, f"screenshot {shot} is (nearly) blank"


# ------------------------------------------------------------------------------------------- (b) every toc figure

class _Figures(HTMLParser):
    """<figure id=...> elements: their <img src> and caption text."""

    def __init__(self):
        super().__init__()
        self.figures: dict[str, dict] = {}
        self.current = None
        self.in_caption = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure" and a.get("id"):
            self.current = self.figures.setdefault(a["id"], {"src": [], "caption": ""})
        elif self.current is not None and tag == "img":
            self.current["src"].append(a.get("src"))
        elif self.current is not None and tag == "figcaption":
            self.in_caption += 1

    def handle_endtag(self, tag):
        if tag == "figcaption" and self.in_caption:
            self.in_caption -= 1
        elif tag == "figure":
            self.current = None

    def handle_data(self, data):
        if self.current is not None and self.in_caption:
            self.current["caption"] += data


GLUED = " \x00 "  # where a notebook's caption takes a value glued in from the run


def notebook_caption(nb_path: Path, name: str) -> str:
    """The caption text of the notebook's ```{figure}``` directive (whitespace-normalised, markup dropped, each glued
    value marked :data:`GLUED`)."""
    nb = nbformat.read(nb_path, as_version=4)
    for cell in reversed(nb.cells):
        m = re.search(r"```\{figure\}[^\n]*\n(.*?)```", cell.source, re.S)
        if cell.cell_type == "markdown" and m and f"fig-{name}" in m.group(1):
            body = "\n".join(ln for ln in m.group(1).splitlines() if not ln.startswith(":"))
            body = re.sub(r"\{glue(:\w+)?\}`[^`]*`", GLUED, body)  # a value glued in from the run, not its markup
            return " ".join(body.split())
    raise AssertionError(f"{nb_path} has no figure directive named fig-{name}")


def html_id(label: str) -> str:
    """The HTML id docutils gives a label: lower case, every run of other characters one hyphen."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]{4,}", text)


RERUN = "'s experiment at settings of our own"  # what a re-run's title and caption add to the paper's figure


@pytest.mark.book
@pytest.mark.parametrize("name", book.toc_figures(ROOT))
def test_toc_figure_in_html(name):
    """The figure's page exists, holds the figure fig-<name> with a resolving image and its caption (no book number;
    a figure of the paper named as the paper names it), and ends with the "Cite this figure" block."""
    built()
    page = HTML / "book" / "figures" / f"{name}.html"
    assert page.is_file(), f"{page} missing: is {name} in _toc.yml and was the book built after the figures?"
    html = page.read_text(encoding="utf-8")
    parser = _Figures()
    parser.feed(html)
    fig = parser.figures.get(html_id(f"fig-{name}"))
    assert fig is not None, f"no <figure id='{html_id(f'fig-{name}')}'> (label fig-{name}) on {page.name}"
    assert fig["src"], f"fig-{name} has no image"
    for src in fig["src"]:
        target = (page.parent / src).resolve()
        assert target.is_file() and target.stat().st_size > 1000, f"fig-{name}: image {src} does not resolve"
    assert not re.search(r"\b(Fig\.|Figure) \d+\.\d+", fig["caption"]), f"fig-{name} carries a book number"
    title = re.search(r"<h1>(.*?)<", html, re.S).group(1)
    if title.startswith("Figure "):  # a figure of the paper: its caption names it as the paper does, and calls it the
        # paper's figure only at the published settings (published.page.caption_lead, page_title), as its title does
        head = title.replace("’", "'").split(" — ")[0]  # Sphinx's smart quotes
        rerun = head.endswith(RERUN)
        paper = head.removesuffix(RERUN)
        caption = fig["caption"].replace("’", "'")
        want = f"{paper}{RERUN}" if rerun else f"The paper's {paper},"
        assert want in caption, f"fig-{name}: the caption does not name {paper} as its title does ({want!r})"
    nb = FIGURES / f"{name}.ipynb"
    if nb.is_file():
        # the caption's own words, in the notebook's order: each stretch between two glued values whole
        got, at = " ".join(_words(fig["caption"])), 0
        stretches = [" ".join(_words(part)) for part in notebook_caption(nb, name).split(GLUED.strip())]
        assert any(stretches), f"fig-{name}: the notebook's caption has no words of its own"
        for want in filter(None, stretches):
            at = got.find(want, at)
            assert at >= 0, f"fig-{name}: caption differs from the notebook's ({want!r})"
    assert "Cite this figure" in html, f"{page.name} lacks the 'Cite this figure' block"


def test_prose_references_every_toc_figure():
    """Every figure in the toc is referenced from a chapter page (a {ref} to its figure or a link to its page), so
    none is left unexplained."""
    prose = " ".join(p.read_text(encoding="utf-8") for p in (ROOT / "book").glob("*.md"))
    missing = [n for n in book.toc_figures(ROOT) if f"fig-{n}" not in prose and f"figures/{n}" not in prose]
    assert not missing, f"figures never referenced from the chapters: {missing}"


@pytest.mark.book
def test_internal_links_resolve():
    built()
    broken = book.check_links(HTML)
    assert not broken, "\n".join(broken[:20])


# ------------------------------------------------------------------------------------------- the build's guards

def _tiny_book(tmp_path: Path, names: list[str]) -> Path:
    (tmp_path / "_toc.yml").write_text(yaml.safe_dump({
        "format": "jb-book", "root": "book/intro",
        "chapters": [{"file": "book/chapter", "sections": [{"file": f"book/figures/{n}"} for n in names]}]}))
    (tmp_path / "book").mkdir()
    book.figures_dir("paper", tmp_path).mkdir(parents=True)
    (tmp_path / "figures_src").mkdir()
    return tmp_path


def _executed(root: Path, name: str, error: bool = False, preset: str = "paper", source: str | None = None):
    """An executed figure as the runner leaves it (notebook, image, run record and cache key)."""
    from linattn.companion.runner import cachekey

    figs = book.figures_dir(preset, root)
    nb = nbformat.v4.new_notebook()
    out = (nbformat.v4.new_output("error", ename="ValueError", evalue="boom", traceback=[]) if error
           else nbformat.v4.new_output("stream", name="stdout", text="ok\n"))
    nb.cells = [nbformat.v4.new_code_cell("1", outputs=[out])]
    nbformat.write(nb, figs / f"{name}.ipynb")
    (figs / name).mkdir()
    (figs / name / f"{name}.svg").write_text("<svg/>")
    src = root / "figures_src" / f"{name}.md"
    src.write_text(source or f"# {name}\n")
    (figs / name / cachekey.RUN_INFO).write_text(json.dumps({"preset": preset, "overrides": {}, "date": "2026-01-01"}))
    key = cachekey.figure_key(name, src.read_text(), {"preset": preset}, root=figs, reads=[])
    (figs / name / cachekey.CACHE_KEY).write_text(key + "\n")


def test_toc_figures_are_read_from_toc(tmp_path):
    root = _tiny_book(tmp_path, ["figX_one", "figY_two"])
    assert book.toc_figures(root) == ["figX_one", "figY_two"]


def test_missing_failed_stale_and_mixed_figures_are_named(tmp_path):
    root = _tiny_book(tmp_path, ["ready", "absent", "broken", "changed", "quick_one"])
    for name in ("ready", "changed"):
        _executed(root, name)
    _executed(root, "broken", error=True)
    book.figures_dir("quick", root).mkdir(parents=True)
    _executed(root, "quick_one", preset="quick")
    shutil.move(book.figures_dir("quick", root) / "quick_one", book.figures_dir("paper", root) / "quick_one")
    shutil.move(book.figures_dir("quick", root) / "quick_one.ipynb", book.figures_dir("paper", root))
    (root / "figures_src" / "changed.md").write_text("# a source the runner never ran\n")
    (book.figures_dir("paper", root) / "absent.failed.ipynb").write_text("{}")
    problems = {p.name: p.reason for p in book.check_figures(root)}
    assert set(problems) == {"absent", "broken", "changed", "quick_one"}
    assert "missing" in problems["absent"] and "absent.failed.ipynb" in problems["absent"]
    assert "ValueError: boom" in problems["broken"]
    assert "stale" in problems["changed"]
    assert "'quick' preset, not 'paper'" in problems["quick_one"]
    assert "changed" not in {p.name for p in book.check_figures(root, stale_ok=True)}
    with pytest.raises(book.BookError, match="absent.*\n.*broken.*\n.*changed"):
        book.require_figures(root)


def test_a_figure_is_current_until_its_source_changes(tmp_path):
    root = _tiny_book(tmp_path, ["keyed"])
    _executed(root, "keyed")
    assert book.check_figures(root) == []
    assert [p.name for p in book.check_figures(root, preset="quick")] == ["keyed"]  # nothing in the quick folder
    (root / "figures_src" / "keyed.md").write_text("# keyed, edited\n")
    assert [p.name for p in book.check_figures(root)] == ["keyed"]


def test_staging_copies_the_sources_and_one_presets_figures(tmp_path):
    root = _tiny_book(tmp_path, ["one"])
    _executed(root, "one")
    (root / "_config.yml").write_text("title: t\n")
    (root / "book" / "intro.md").write_text("# intro\n")
    figs = book.figures_dir("paper", root)
    (figs / ".previous").mkdir()
    (figs / "two.failed.ipynb").write_text("{}")
    staged = book.stage(root, figs, tmp_path / "stage")
    assert (staged / "book" / "intro.md").is_file() and (staged / "_toc.yml").is_file()
    assert (staged / "book" / "figures" / "one.ipynb").is_file()
    assert (staged / "book" / "figures" / "one" / "one.svg").is_file()
    assert not (staged / "book" / "figures" / ".previous").exists()
    assert not (staged / "book" / "figures" / "two.failed.ipynb").exists()


def test_html_of_each_preset_has_its_own_folder(tmp_path):
    assert book.html_dir("paper", tmp_path) == tmp_path / "_build" / "html"
    assert book.html_dir("quick", tmp_path) == tmp_path / "_build" / "quick" / "html"
    assert book.figures_dir("quick", tmp_path) != book.figures_dir("paper", tmp_path)


def test_link_check_finds_missing_files_and_anchors(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "img.png").write_bytes(b"x")
    (tmp_path / "index.html").write_text(
        '<a href="sub/page.html#here">ok</a><img src="img.png"><a href="https://example.org/x">external</a>'
        '<a href="sub/page.html#nowhere">bad anchor</a><img src="gone.png"><a href="#top">self</a><p id="top"></p>')
    (tmp_path / "sub" / "page.html").write_text('<h1 id="here">x</h1><a href="../index.html">back</a>')
    broken = book.check_links(tmp_path)
    assert len(broken) == 2
    assert any("#nowhere" in b and "no anchor" in b for b in broken)
    assert any("gone.png" in b and "no such file" in b for b in broken)


# ------------------------------------------------------------------------------------------- configuration

def test_config_never_executes_and_builds_only_the_toc():
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cfg["execute"]["execute_notebooks"] == "off"
    assert cfg["execute"]["raise_on_error"] is True
    assert cfg["only_build_toc_files"] is True
    for pattern in (".venv", "figures_src", "tests", "runs", "benchmarks", "linattn", "_build", "**.failed.ipynb"):
        assert pattern in cfg["exclude_patterns"]
    static = ROOT / cfg["sphinx"]["config"]["html_static_path"][0] / cfg["sphinx"]["config"]["mathjax_path"]
    assert static.is_file(), f"bundled MathJax missing: {static}"
    for page in book.toc_files(ROOT):
        if not page.startswith(book.FIGURES_DIR + "/"):
            assert (ROOT / f"{page}.md").is_file(), f"toc page {page}.md missing"


def test_citation_cff_points_at_the_paper():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    paper = cff["preferred-citation"]
    assert paper["title"] == "Training Dynamics of In-Context Learning in Linear Attention"
    assert [a["family-names"] for a in paper["authors"]] == ["Zhang", "Singh", "Latham", "Saxe"]
    assert paper in cff["references"]
    bib = (ROOT / "book" / "references.bib").read_text()
    assert paper["title"] in bib and "2501.16265" in bib
    cffconvert = shutil.which("cffconvert")
    if cffconvert:
        proc = subprocess.run([cffconvert, "--validate", "-i", str(ROOT / "CITATION.cff")], capture_output=True,
                              text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


# Numbers that only the paper-preset runs produce (Figure 4's late drops, the softmax runs at the published learning
# rates, Figure 3a's seed-by-seed drift): a page that quotes them by hand would show them beside quick-preset curves.
PAPER_ONLY_NUMBERS = ("147350", "99601", "70160", "435000", "711000", "1.0258", "1.0240", "3125")


@pytest.mark.book
def test_quick_book_quotes_no_paper_preset_number():
    """Every number a page's prose quotes from a run comes from that run (myst-nb glue or Markdown written by the
    notebook), so the quick book, built from quick runs, shows none of the paper preset's numbers."""
    if PRESET == "paper":
        pytest.skip("this checks the quick book")
    built()
    found = {}
    for page in sorted(HTML.rglob("*.html")):
        text = re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8"))
        hits = [n for n in PAPER_ONLY_NUMBERS if re.search(rf"(?<![\d.]){re.escape(n)}(?!\d)", text)]
        if hits:
            found[str(page.relative_to(HTML))] = hits
    assert not found, f"paper-preset numbers in the quick book: {found}"


@pytest.mark.book
def test_executed_notebooks_print_no_warnings():
    """A warning printed by a figure notebook (a library's import-time notice, a deprecation) would show on its page:
    none of the executed notebooks has one in its outputs."""
    if not FIGURES.is_dir():
        require_built(f"{FIGURES} is missing: run `make test`")
    noisy = {path.stem: printed for path in sorted(FIGURES.glob("*.ipynb"))
             if (printed := notebooks.printed_warnings(nbformat.read(path, as_version=4)))}
    assert not noisy, noisy


@pytest.mark.book
def test_no_page_shows_a_path_of_the_machine_that_built_it():
    """A cell whose last value is a path (``PosixPath('/…/provenance.json')``), a temporary folder or the checkout's
    own location means nothing to a reader: no built page's text contains one."""
    built()
    checkout = str(book.REPO_ROOT)
    found = {}
    for page in sorted(HTML.rglob("*.html")):
        text = re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8"))
        hits = [marker for marker in ("PosixPath(", "WindowsPath(", "/tmp/", checkout) if marker in text]
        if hits:
            found[str(page.relative_to(HTML))] = hits
    assert not found, f"machine paths in the book: {found}"


# ------------------------------------------------------------------------------------ the paper's figure names

# The paper's appendix figures are 6–13; its text confirms the numbers of two of them, and our pages for those two.
CONFIRMED_APPENDIX = {"figA_inside_head": "Figure 11", "figA_ranks": "Figure 12"}
UNNUMBERED = "an appendix figure of the paper"  # said without a number (a caveat about the number quotes nothing)


def _figure_numbers(text: str) -> set[int]:
    """Every figure number the text names: "Figure 4", "Figures 11 and 12", "Figures 6–13", "Figure 1b"."""
    found = set()
    for m in re.finditer(r"\bFigures?\s+(\d+[a-z]?(?:\s*(?:,|and|–|-)\s*\d+[a-z]?)*)", text):
        found |= {int(n) for n in re.findall(r"\d+", m.group(1))}
    return found


def test_only_figures_11_and_12_of_the_appendix_are_named_by_number():
    """A page names an appendix figure by its number only where the paper's text confirms it (Figures 11 and 12),
    never with a guess ("probably"); every other appendix page calls it an appendix figure, with no number. The cite
    block names the two confirmed figures from their pages' titles."""
    from linattn.companion import published
    from linattn.companion.runner import citation

    sources = notebooks.discover()
    texts = {path: path.read_text(encoding="utf-8") for path in
             [*sources.values(), *sorted((ROOT / "book").glob("*.md")), ROOT / "_toc.yml", ROOT / "README.md"]}
    for path, text in texts.items():
        guessed = {n for n in _figure_numbers(text) if 6 <= n <= 13} - {11, 12}
        assert not guessed, f"{path.name} names appendix figure(s) {sorted(guessed)}, whose numbers are not confirmed"
        assert not re.search(r"probably[^.]*\bFigure|\bFigure[^.]*probably|probably \(?\d", text), path.name
    for name, path in sources.items():
        if not name.startswith("figA_"):
            continue
        text = texts[path]
        if name in CONFIRMED_APPENDIX:
            paper = CONFIRMED_APPENDIX[name]
            assert published.page.page_name(path) == paper
            assert f"reproduces **{paper}**" in citation.cite_block(name, text)
            assert UNNUMBERED not in text
        else:
            assert published.page.page_name(path) == name and UNNUMBERED in text, name
    assert _figure_numbers("Figures 11 and 12, Figure 1b, Figures 6–13") == {1, 6, 11, 12, 13}
