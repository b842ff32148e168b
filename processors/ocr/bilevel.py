"""1-bit pages (fax, CCITT Group 4 TIFF, JBIG2 inside a PDF, a 1-bit PNG) smoothed into grey
before they are read.

PP-OCR's detector and recognisers learnt from grey and colour scans, where a stroke's edge
fades over a pixel or two. A 1-bit page has black and white only, and at low resolution its
strokes' edges are ragged steps: on 100-DPI receipts thresholded to 1 bit the engine made 3,103
edits where RapidOCR made 3,031, and 27 on 300-DPI small print where the grey pages gave 2
(docs/benchmarks.md, session 35). A Gaussian blur of the whole page gives the edges their fade
back. Its width has to follow the text's size, not the pixel count: σ 1.3 px helped the
300-DPI small print and hurt the 100-DPI receipts; σ as a share of the page's line height
(:func:`~ocrstream.processors.ocr.textsize.line_height`; 0.04: 0.64 px on a receipt's 16-px
lines, 1.6 px on small print's 41) helped both, up to 1.5 px (session 36).

A page counts as 1-bit when every pixel is black or white (:func:`is_bilevel`), whatever
carried it: the splitter's 1-bit PNGs, a TIFF, or an array a caller decoded. A page with no
line height to go by (blank, or a drawing) is left as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import cv2
import numpy as np
import numpy.typing as npt

from ocrstream.processors.imageio import decode_image
from ocrstream.processors.ocr.textsize import line_height

if TYPE_CHECKING:
    from ocrstream.settings import OcrSettings

ImageBGR = npt.NDArray[np.uint8]

SPARSE_ROWS = 32  # the first look: every 32nd row (0.2 ms on a 300-DPI A4 page)
HEIGHT_WORK_SIDE = 1024
# at most this σ, in page pixels: the share of a line that suits 300-DPI Latin print blurred
# the denser strokes of Chinese at the same size together (session 36: 20 dev pages of Chinese
# A4, 15 edits at σ 1.9, 13 capped at 1.5; small print 22 and 16)
MAX_SIGMA = 1.5


def decode_page(
    data: bytes | bytearray | memoryview | npt.NDArray[np.generic], settings: OcrSettings
) -> ImageBGR:
    """A page as the engine reads it (and the line rescue after it): decoded within
    ``settings.max_page_pixels`` (:func:`~ocrstream.processors.imageio.decode_image`, whose
    errors it raises) and, when 1-bit, blurred into grey (:func:`soften`)."""
    image = decode_image(data, max_pixels=settings.max_page_pixels)
    return soften(image, settings.bilevel_smoothing)


def is_bilevel(image: ImageBGR) -> bool:
    """Whether every pixel of ``image`` (BGR or grey, uint8) is black or white.

    A sparse look first: a grey or colour page shows a level in between within a few rows (the
    noise of paper, the anti-aliased edge of a glyph), so it costs such a page a fraction of a
    millisecond; a page that passes is checked whole (5 ms on 300-DPI A4).
    """
    return _bilevel_gray(image) is not None


def soften(image: ImageBGR, share: float) -> ImageBGR:
    """``image`` blurred by a Gaussian of ``share`` × its line height (at most ``MAX_SIGMA``
    px) when it is 1-bit and ``share`` > 0; otherwise ``image`` itself."""
    gray = _bilevel_gray(image) if share > 0 else None
    if gray is None:
        return image
    # measured on the page shrunk to 1,024 px (18 ms on 300-DPI A4, 40 at det's 2,048): the
    # blur's width needs the size roughly, and it came out within 10% of det's estimate
    height = line_height(gray, work_side=HEIGHT_WORK_SIDE)
    if height is None:
        return image
    smooth = cv2.GaussianBlur(gray, (0, 0), min(share * height, MAX_SIGMA))
    out = smooth if image.ndim == 2 else cv2.cvtColor(smooth, cv2.COLOR_GRAY2BGR)
    return np.asarray(out, np.uint8)


def _bilevel_gray(image: ImageBGR) -> npt.NDArray[np.uint8] | None:
    """The page's one channel when it is 1-bit (:func:`is_bilevel`), else None."""
    if image.dtype != np.uint8 or image.size == 0 or image.ndim not in (2, 3):
        return None
    if image.ndim == 3 and image.shape[2] != 3:
        return None
    sparse = image[::SPARSE_ROWS]
    first = sparse if image.ndim == 2 else sparse[:, :, 0]
    if cv2.countNonZero(cv2.inRange(first, 1, 254)):
        return None
    if image.ndim == 3 and (np.any(first != sparse[:, :, 1]) or np.any(first != sparse[:, :, 2])):
        return None  # colour
    # the channels alike in the rows looked at: the first speaks for the others
    gray = image if image.ndim == 2 else cv2.extractChannel(image, 0)
    if cv2.countNonZero(cv2.inRange(gray, 1, 254)):
        return None
    return np.asarray(gray, np.uint8)
