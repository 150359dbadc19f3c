"""Is every text of a figure SVG legible at the width the book shows it?

The book's content column is about :data:`CONTENT_WIDTH_PX` = 650 CSS px wide (1280-px window). A figure SVG that
is included as an image shows at its natural size (the SVG ``width``, in pt, × 4/3 px per pt) or shrunk to the
column, whichever is narrower. A text of font size ``s`` (pt, i.e. SVG user units of a matplotlib SVG) therefore
reads at::

    s × rendered_px / width_pt,     rendered_px = min(650, width_pt × 4/3)

CSS pixels, and the rule is that this is at least :data:`MIN_TEXT_PX` = 9 px for every text: tick labels,
titles, legends, theory labels, and also mathtext sub- and superscripts (matplotlib draws them at 0.7× the size).

Matplotlib writes text either as ``<text>``/``<tspan>`` elements (``svg.fonttype: none``, the style of
:mod:`linattn.companion.plotting`) or as glyph paths (``<use xlink:href="#DejaVuSans-…">`` inside ``scale(s -s)``
groups, font size = 100·s); both are measured, with the scale of every enclosing ``transform`` applied.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

CONTENT_WIDTH_PX = 650.0
MIN_TEXT_PX = 9.0
PX_PER_PT = 4.0 / 3.0
GLYPH_UNITS = 100.0  # matplotlib's text-as-path glyphs are drawn at font size 100 and scaled by size / 100

_SVG = "{http://www.w3.org/2000/svg}"
_XLINK = "{http://www.w3.org/1999/xlink}href"
_UNITS_PT = {"pt": 1.0, "px": 0.75, "in": 72.0, "cm": 72.0 / 2.54, "mm": 72.0 / 25.4, "": 0.75}
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_MARKER_ID = re.compile(r"^m[0-9a-f]{10}$")  # matplotlib's ids of markers, not glyphs


@dataclass(frozen=True)
class TextSize:
    """One piece of text in an SVG: its characters, its size in SVG user units (= pt for matplotlib) and how
    many CSS px it reads at in the book."""

    text: str
    size_units: float
    px: float
    as_path: bool = False

    def __str__(self) -> str:
        kind = "glyph path" if self.as_path else "text"
        return f"{kind} {self.text!r}: {self.size_units:.2f} pt → {self.px:.2f} px"


@dataclass
class SvgReport:
    """The measurements of one SVG file against the rule."""

    path: str
    width_pt: float
    rendered_px: float
    texts: list
    min_px: float = MIN_TEXT_PX

    @property
    def too_small(self) -> list:
        return [t for t in self.texts if t.px < self.min_px - 1e-9]

    @property
    def as_paths(self) -> list:
        return [t for t in self.texts if t.as_path]

    @property
    def private_use(self) -> list:
        """Texts with a Unicode private-use character (matplotlib's non-Unicode math glyphs, e.g. ``\\mathcal``
        with the STIX fonts): a browser cannot show them."""
        return [t for t in self.texts if any(0xE000 <= ord(c) <= 0xF8FF for c in t.text)]

    @property
    def ok(self) -> bool:
        return not self.too_small

    def summary(self) -> str:
        smallest = min((t.px for t in self.texts), default=float("nan"))
        head = (f"{self.path}: width {self.width_pt:.0f} pt, shown {self.rendered_px:.0f} px, {len(self.texts)} "
                f"texts, smallest {smallest:.2f} px (rule: ≥ {self.min_px:g} px)")
        bad = self.too_small
        if not bad:
            return head
        shown = sorted(bad, key=lambda t: t.px)[:8]
        more = f"\n  … and {len(bad) - len(shown)} more" if len(bad) > len(shown) else ""
        return head + "\n" + "\n".join(f"  {t}" for t in shown) + more


def text_px(font_size_pt: float, width_pt: float, content_px: float = CONTENT_WIDTH_PX) -> float:
    """How many CSS px a ``font_size_pt`` text reads at in a figure ``width_pt`` wide shown in the book."""
    rendered = min(content_px, width_pt * PX_PER_PT)
    return font_size_pt * rendered / width_pt


def _length_pt(value: str | None) -> float | None:
    if not value:
        return None
    m = re.fullmatch(rf"\s*({_NUMBER})\s*([a-z%]*)\s*", value)
    if not m or m.group(2) not in _UNITS_PT:
        return None
    return float(m.group(1)) * _UNITS_PT[m.group(2)]


def _transform_scale(transform: str | None) -> float:
    """The linear size factor of an SVG ``transform`` list (sqrt of |det|; rotations and translations give 1)."""
    if not transform:
        return 1.0
    factor = 1.0
    for name, args in re.findall(r"(\w+)\s*\(([^)]*)\)", transform):
        nums = [float(x) for x in re.findall(_NUMBER, args)]
        if name == "scale" and nums:
            sx, sy = nums[0], nums[1] if len(nums) > 1 else nums[0]
            factor *= math.sqrt(abs(sx * sy))
        elif name == "matrix" and len(nums) == 6:
            a, b, c, d = nums[:4]
            factor *= math.sqrt(abs(a * d - b * c))
    return factor


def _font_size(el) -> float | None:
    """The font size an element sets itself (``style`` font-size or font shorthand, else the attribute)."""
    style = el.get("style") or ""
    m = re.search(rf"font-size\s*:\s*({_NUMBER})\s*(px|pt)?", style)
    if m is None:
        m = re.search(rf"(?:^|;)\s*font\s*:[^;]*?({_NUMBER})\s*(px|pt)", style)
    if m is not None:
        return float(m.group(1)) * (PX_PER_PT if m.group(2) == "pt" else 1.0)  # user units (px of the viewBox)
    attr = el.get("font-size")
    if attr:
        m = re.match(rf"\s*({_NUMBER})\s*(px|pt)?", attr)
        if m:
            return float(m.group(1)) * (PX_PER_PT if m.group(2) == "pt" else 1.0)
    return None


def measure_svg(svg, content_px: float = CONTENT_WIDTH_PX, min_px: float = MIN_TEXT_PX) -> SvgReport:
    """Every text of ``svg`` (a path, or the SVG source as a string starting with ``<``) with the CSS px it reads
    at in the book's column."""
    if isinstance(svg, bytes):
        svg = svg.decode("utf-8")
    if isinstance(svg, str) and svg.lstrip().startswith("<"):
        root, name = ET.fromstring(svg), "<svg>"
    else:
        root, name = ET.parse(svg).getroot(), str(svg)
    width_pt = _length_pt(root.get("width"))
    box = [float(x) for x in re.findall(_NUMBER, root.get("viewBox") or "")]
    if width_pt is None:
        if len(box) != 4:
            raise ValueError(f"{name}: the SVG has neither a width nor a viewBox")
        width_pt = box[2] * 0.75
    units_to_pt = width_pt / box[2] if len(box) == 4 and box[2] > 0 else 1.0
    rendered = min(content_px, width_pt * PX_PER_PT)
    px_per_unit = rendered / width_pt * units_to_pt
    glyphs = {el.get("id") for el in root.iter(f"{_SVG}path") if el.get("id")}

    texts: list[TextSize] = []

    def walk(el, scale: float, size: float | None):
        tag = el.tag.replace(_SVG, "")
        if tag == "defs":
            return  # glyph outlines and markers: measured where they are used
        scale = scale * _transform_scale(el.get("transform"))
        own = _font_size(el)
        size = own if own is not None else size
        if tag in ("text", "tspan"):
            chars = (el.text or "").strip()
            if chars:
                s = (size if size is not None else 16.0) * scale  # 16 px: the CSS default size
                texts.append(TextSize(chars, s * units_to_pt, s * px_per_unit))
            for child in el:
                walk(child, scale, size)
            return
        if tag == "use":
            ref = (el.get(_XLINK) or el.get("href") or "").lstrip("#")
            if ref in glyphs and "-" in ref and not _MARKER_ID.match(ref):
                s = GLYPH_UNITS * scale
                texts.append(TextSize(ref, s * units_to_pt, s * px_per_unit, as_path=True))
            return
        for child in el:
            walk(child, scale, size)

    walk(root, 1.0, None)
    return SvgReport(name, width_pt, rendered, texts, min_px)


def check_svg(svg, content_px: float = CONTENT_WIDTH_PX, min_px: float = MIN_TEXT_PX) -> list:
    """The texts of ``svg`` that read below ``min_px`` in the book (empty: the figure passes)."""
    return measure_svg(svg, content_px, min_px).too_small


def problems(svg, content_px: float = CONTENT_WIDTH_PX, min_px: float = MIN_TEXT_PX) -> list[str]:
    """Everything that keeps ``svg`` from being legible in the book, as messages (empty: none): text below
    ``min_px``, text drawn as glyph paths instead of ``<text>`` (``svg.fonttype`` is not ``none``), and characters
    from the Unicode private-use area, which a browser shows as empty boxes."""
    report = measure_svg(svg, content_px, min_px)
    out = []
    if report.too_small:
        out.append(report.summary())
    if report.as_paths:
        out.append(f"{report.path}: {len(report.as_paths)} glyphs drawn as paths, not as <text> "
                   "(set svg.fonttype to 'none', e.g. through linattn.companion.plotting.use_style)")
    if report.private_use:
        shown = ", ".join(repr(t.text) for t in report.private_use[:5])
        out.append(f"{report.path}: private-use characters a browser cannot show: {shown}")
    return out


def figure_svgs(root) -> list[Path]:
    """Every SVG of every figure folder under the output ``root`` of ``linattn figures``: ``<root>/<name>/<name>.svg``
    and a page's further figures beside it (``<root>/<name>/<stem>.svg``), in the folders that hold the first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(svg for p in root.iterdir() if p.is_dir() and (p / f"{p.name}.svg").is_file()
                  for svg in p.glob("*.svg"))
