"""Encoding of page pixels for the splitter: PNG for line art and text, JPEG for photographs.

Pixels arrive as numpy arrays, ``H×W`` (gray) or ``H×W×3`` (RGB, 8-bit). The encoders are
OpenCV's (libpng and libjpeg-turbo: the fastest here) except 1-bit PNG, which Pillow writes.

Why PNG for rendered pages: text edges are what OCR reads, and JPEG rings around them; a
rendered page of text is mostly flat, so PNG stays small (about 0.4 MB for a 300 DPI letter page
of text). JPEG (quality 90) is used only where the source was already lossy (a DCT or JPEG 2000
photograph), so re-encoding it losslessly would multiply the size and add nothing.
"""

from __future__ import annotations

import io

import cv2
import numpy as np
from numpy.typing import NDArray
from PIL import Image

Pixels = NDArray[np.uint8]

PNG_LEVEL = 3  # zlib level: level 6 saves ~10% more for twice the time
JPEG_QUALITY = 90


def is_gray(rgb: Pixels) -> bool:
    """True when every pixel of an ``H×W×3`` array has R == G == B."""
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    return bool(np.array_equal(r, g) and np.array_equal(g, b))


def squeeze_gray(pixels: Pixels) -> Pixels:
    """An RGB array whose channels are all equal, as one gray channel; other arrays unchanged."""
    if pixels.ndim == 3 and pixels.shape[2] == 3 and is_gray(pixels):
        return pixels[..., 0]
    return pixels


def _bgr(pixels: Pixels) -> Pixels:
    return pixels[..., ::-1] if pixels.ndim == 3 else pixels


def encode_png(pixels: Pixels) -> bytes:
    ok, buf = cv2.imencode(".png", _bgr(pixels), [cv2.IMWRITE_PNG_COMPRESSION, PNG_LEVEL])
    if not ok:  # pragma: no cover - libpng refuses only impossible shapes
        raise ValueError(f"PNG encoder refused an array of shape {pixels.shape}")
    return buf.tobytes()


def encode_jpeg(pixels: Pixels, quality: int = JPEG_QUALITY) -> bytes:
    ok, buf = cv2.imencode(".jpg", _bgr(pixels), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:  # pragma: no cover
        raise ValueError(f"JPEG encoder refused an array of shape {pixels.shape}")
    return buf.tobytes()


def encode_bilevel_png(gray: Pixels) -> bytes:
    """A 1-bit PNG of a gray array thresholded at 128: the compact form of a fax or JBIG2 scan."""
    image = Image.fromarray(np.ascontiguousarray(gray)).point(
        lambda v: 255 if v >= 128 else 0, mode="1"
    )
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=False)
    return out.getvalue()


def encode(pixels: Pixels, *, lossy: bool, bilevel: bool = False) -> tuple[str, bytes]:
    """Encode page pixels; returns ``(encoding, bytes)``. Gray pixels are stored as gray."""
    pixels = squeeze_gray(pixels)
    if bilevel and pixels.ndim == 2:
        return "png", encode_bilevel_png(pixels)
    if lossy:
        return "jpeg", encode_jpeg(pixels)
    return "png", encode_png(pixels)
