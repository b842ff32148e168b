"""The web UI's image of a page: small, turned as the engine read it, JPEG. Pure: no store.

The viewer draws document.json's line polygons over this image. The polygons are pixels of the
page image as it was recognised: the split page (:func:`ocrstream.processors.split.one_page`)
turned by the page's ``rotation`` (quarter turns clockwise, found by the engine's orientation
step). So the image is turned the same way; its size may differ (it is scaled down to
``max_side``), and the viewer scales the boxes to it by the page's ``width`` and ``height``.
Deskew's small turn is not in document.json and is not applied: on a deskewed page the boxes
are off by that angle (a degree or two).
"""

from __future__ import annotations

import io

from PIL import Image

from ocrstream.processors.split_types import SplitPage

#: Clockwise quarter turns → PIL's transposition (PIL's ROTATE_90 turns counter-clockwise).
_TURNS = {1: Image.Transpose.ROTATE_270, 2: Image.Transpose.ROTATE_180,
          3: Image.Transpose.ROTATE_90}  # fmt: skip


def viewer_image(page: SplitPage, rotation: int = 0, *, max_side: int = 1600,
                 quality: int = 82) -> bytes:  # fmt: skip
    """The JPEG of ``page`` turned by ``rotation`` degrees clockwise (rounded to quarter
    turns), its longest side at most ``max_side`` pixels."""
    if not page.ok:
        raise ValueError(f"page {page.page_no} has no image: {page.error_code}")
    if max_side < 1:
        raise ValueError(f"max_side must be positive, not {max_side}")
    with Image.open(io.BytesIO(page.data)) as opened:
        opened.draft("RGB", (max_side, max_side))  # a JPEG decodes at a reduced scale
        image: Image.Image = opened
        if opened.mode not in ("L", "RGB"):
            image = opened.convert("L" if opened.mode in ("1", "LA", "I", "I;16") else "RGB")
        image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        turns = round(rotation / 90) % 4
        if turns:
            image = image.transpose(_TURNS[turns])
        out = io.BytesIO()
        image.save(out, format="JPEG", quality=quality, optimize=True)
    return out.getvalue()
