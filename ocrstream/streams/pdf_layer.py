"""A searchable PDF: the original pages, untouched, with an invisible text layer on each
recognised line (PDF text render mode 3), so the text can be selected and searched.

Line polygons are in the pixel space of the page image as it was recognised
(``width`` × ``height``, upright); they are scaled onto the visible page and mapped back
through the page's rotation. Image sources (JPEG, PNG, TIFF …) become one PDF page per frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pymupdf

from ocrstream.schemas.records import PageResult, PageStatus

FONT = "helv"


def _open_as_pdf(source: Path) -> pymupdf.Document:
    src = pymupdf.open(source)
    if src.is_pdf:
        return src
    try:
        return pymupdf.open("pdf", src.convert_to_pdf())
    finally:
        src.close()


def add_text_layer(page: pymupdf.Page, result: PageResult) -> int:
    """Place every line of ``result`` invisibly on ``page``; returns how many were placed."""
    if result.status is PageStatus.FAILED or not result.width or not result.height:
        return 0
    visible = page.rect  # the page as shown, rotation applied
    sx, sy = visible.width / result.width, visible.height / result.height
    derotate = page.derotation_matrix
    placed = 0
    for line in result.lines:
        text = line.text.strip()
        if not text or not line.polygon:
            continue
        xs = [p.x * sx for p in line.polygon]
        ys = [p.y * sy for p in line.polygon]
        x0, y0, x1, y1 = min(xs), min(ys), max(xs), max(ys)
        height = y1 - y0
        if height <= 0 or x1 <= x0:
            continue
        fontsize = max(1.0, height * 0.85)
        natural = pymupdf.get_text_length(text, fontname=FONT, fontsize=fontsize)
        stretch = (x1 - x0) / natural if natural > 0 else 1.0
        baseline = pymupdf.Point(x0, y1 - height * 0.2) * derotate
        page.insert_text(
            baseline,
            text,
            fontname=FONT,
            fontsize=fontsize,
            render_mode=3,  # invisible
            rotate=page.rotation,
            morph=(baseline, pymupdf.Matrix(stretch, 1)),
        )
        placed += 1
    return placed


def searchable_pdf(source: Path, results: Sequence[PageResult], dpi: int = 200) -> bytes:
    """The source with a text layer from ``results`` (pages without a result stay as they are)."""
    doc = _open_as_pdf(source)
    try:
        for result in results:
            if 1 <= result.page_no <= doc.page_count:
                add_text_layer(doc[result.page_no - 1], result)
        return bytes(doc.tobytes(garbage=3, deflate=True))
    finally:
        doc.close()
