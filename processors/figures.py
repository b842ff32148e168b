"""Figure crops of a layout-mode document: ``documents/{doc_id}/figures/p{page}-{i}.png``.

Each ``figure`` block of a page is cut out of the page image the worker read (the source split
again, as for the searchable PDF), turned upright as the worker turned it (``rotation``) and
scaled from the result's page size to the image's. ``i`` counts a page's figures from 1 in
reading order; :func:`~ocrstream.processors.layout.markdown.figure_path` is the name
document.md links to, relative to itself.
Pure but for the PNG encoding: blocks and images in, bytes out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from ocrstream.errors import PoisonError
from ocrstream.processors.imageio import decode_image
from ocrstream.processors.layout.blocks import Block
from ocrstream.processors.layout.markdown import page_figures
from ocrstream.processors.ocr.geometry import rotate_page
from ocrstream.processors.searchable_pdf import ImageSource

MAX_PIXELS = 80_000_000


@dataclass(frozen=True, slots=True)
class FigurePage:
    """What cropping needs of a page: its number, result size, rotation and blocks."""

    page_no: int
    width: int
    height: int
    rotation: int
    blocks: tuple[Block, ...] | None


def crop_figures(
    pages: Sequence[FigurePage], get_image: ImageSource
) -> Iterator[tuple[str, bytes]]:
    """(path, PNG bytes) of every figure, pages in increasing order (``get_image`` advances
    through the source). A page whose image is missing or unreadable gives no crops."""
    for page in sorted(pages, key=lambda p: p.page_no):
        refs = page_figures(page.page_no, page.blocks)
        if not refs:
            continue
        found = get_image(page.page_no)
        if found is None:
            continue
        try:
            image = decode_image(found.data, max_pixels=MAX_PIXELS)
        except PoisonError:
            continue
        image = rotate_page(image, page.rotation // 90)
        h, w = image.shape[:2]
        sx, sy = w / max(page.width, 1), h / max(page.height, 1)
        for ref in refs:
            x0, y0, x1, y1 = ref.bbox
            left, top = max(0, int(x0 * sx)), max(0, int(y0 * sy))
            right, bottom = min(w, int(np.ceil(x1 * sx))), min(h, int(np.ceil(y1 * sy)))
            if right - left < 1 or bottom - top < 1:
                continue
            ok, png = cv2.imencode(".png", image[top:bottom, left:right])
            if ok:
                yield ref.path, png.tobytes()
