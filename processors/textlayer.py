"""A PDF page's own text layer: extract its lines and judge whether they can replace OCR.

A page's text layer is *usable* when it is enough text, made of real characters, that reads
like words, and — on a page that is mostly a scanned image — covers enough of the page to be the
image's text rather than a stamp or a header. That rules out:

- pages with no text or a few characters (a page number on a scan);
- fonts without a usable ToUnicode map, which extract as U+FFFD, private-use or control
  characters;
- junk from a poor earlier OCR pass (punctuation and one-letter tokens: ``,' ; l I . :``).

The thresholds live in :class:`~ocrstream.processors.split_types.TextLayerPolicy` (with the
split's other types, so that splitting an image never imports PyMuPDF); the defaults are
deliberately strict, since a page wrongly answered from its text layer is never OCRed.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from ocrstream.processors.mupdf import pymupdf
from ocrstream.processors.ocr.types import Line, Point
from ocrstream.processors.split_types import DEFAULT_POLICY, TextLayerPolicy

__all__ = ["DEFAULT_POLICY", "TEXT_FLAGS", "TextLayerPolicy", "extract_lines", "text_quality"]

#: Text extraction flags: text only (never decode images), whitespace kept, clipped to the page.
TEXT_FLAGS = (
    pymupdf.TEXT_PRESERVE_WHITESPACE | pymupdf.TEXT_PRESERVE_LIGATURES | pymupdf.TEXT_MEDIABOX_CLIP
)

_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cn", "Cs"})


def _corners(bbox: Sequence[float], direction: Sequence[float]) -> tuple[Point, ...]:
    """The corners of a line's box in reading order: top-left, top-right, bottom-right,
    bottom-left as the text reads (for rotated text, not as the page is drawn)."""
    x0, y0, x1, y1 = bbox
    dx, dy = direction
    ux, uy = dy, -dx  # "up" of the text, in page space (y grows down)
    pts = [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]

    def along(p: Point) -> float:
        return p[0] * dx + p[1] * dy

    def up(p: Point) -> float:
        return p[0] * ux + p[1] * uy

    by_along = sorted(pts, key=along)
    start, end = by_along[:2], by_along[2:]
    top_left, bottom_left = sorted(start, key=up, reverse=True)
    top_right, bottom_right = sorted(end, key=up, reverse=True)
    return top_left, top_right, bottom_right, bottom_left


def _line_text(line: dict[str, Any]) -> str:
    return "".join(span.get("text", "") for span in line.get("spans", ())).strip()


def extract_lines(page: pymupdf.Page, to_pixels: pymupdf.Matrix) -> tuple[Line, ...]:
    """The page's text lines in reading order, polygons mapped to pixels by ``to_pixels``.

    ``to_pixels`` maps PyMuPDF's unrotated page coordinates (what text extraction returns) to
    the page image: ``page.rotation_matrix`` then the render zoom.
    """
    layout = page.get_text("dict", flags=TEXT_FLAGS, sort=True)
    lines: list[Line] = []
    for block in layout.get("blocks", ()):
        for line in block.get("lines", ()):
            text = _line_text(line)
            if not text:
                continue
            corners = _corners(line["bbox"], line.get("dir", (1.0, 0.0)))
            mapped = tuple(tuple(pymupdf.Point(p) * to_pixels) for p in corners)
            polygon = tuple((round(x, 1), round(y, 1)) for x, y in mapped)
            lines.append(Line(text=text, confidence=1.0, polygon=polygon))  # type: ignore[arg-type]
    return tuple(lines)


def text_quality(texts: Iterable[str], policy: TextLayerPolicy = DEFAULT_POLICY) -> bool:
    """Whether text reads like text: enough real characters, mostly letters, mostly words."""
    chars = [c for t in texts for c in t if not c.isspace()]
    if len(chars) < policy.min_chars:
        return False
    bad = sum(1 for c in chars if c == "\ufffd" or unicodedata.category(c) in _BAD_CATEGORIES)
    if bad > policy.max_bad_ratio * len(chars):
        return False
    alnum = sum(1 for c in chars if unicodedata.category(c)[0] in "LN")
    if alnum < policy.min_alnum_ratio * len(chars):
        return False
    tokens = [tok for t in texts for tok in t.split()]
    short = sum(1 for tok in tokens if len(tok) == 1)
    return short <= policy.max_short_token_ratio * len(tokens)


def unrotated_rect(page: pymupdf.Page) -> pymupdf.Rect:
    """The page box in the unrotated coordinates that text and image extraction return."""
    width, height = page.rect.width, page.rect.height
    if page.rotation % 180:
        width, height = height, width
    return pymupdf.Rect(0, 0, width, height)


def _area(bbox: Sequence[float], clip: pymupdf.Rect) -> float:
    rect = pymupdf.Rect(bbox) & clip
    return 0.0 if rect.is_empty else float(rect.width * rect.height)


def usable_lines(
    page: pymupdf.Page,
    to_pixels: pymupdf.Matrix,
    image_boxes: Sequence[Sequence[float]],
    policy: TextLayerPolicy = DEFAULT_POLICY,
) -> tuple[Line, ...] | None:
    """The page's text lines when its text layer can replace OCR, else None.

    ``image_boxes`` are the bounding boxes of the images drawn on the page (unrotated page
    coordinates, as ``page.get_image_info()`` gives them) — known without decoding any image.
    """
    lines = extract_lines(page, to_pixels)
    if not text_quality((line.text for line in lines), policy):
        return None
    clip = unrotated_rect(page)
    page_area = float(clip.width * clip.height) or 1.0
    image_cover = sum(_area(box, clip) for box in image_boxes) / page_area
    if image_cover >= policy.image_page_ratio:
        inverse = ~pymupdf.Matrix(to_pixels)
        text_cover = 0.0
        for line in lines:
            quad = pymupdf.Quad(*(pymupdf.Point(p) * inverse for p in line.polygon))
            text_cover += _area(quad.rect, clip)
        if text_cover / page_area < policy.min_text_cover_on_scan:
            return None
    return lines
