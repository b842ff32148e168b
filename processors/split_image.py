"""Image files as documents: JPEG, PNG, TIFF (one page per frame), BMP, WebP, GIF, JPEG 2000.

Pillow opens a file lazily: the header gives the frame's size and mode before any pixel is
decoded, so ``max_page_pixels`` is checked first. Then, per frame:

- an 8-bit gray or RGB JPEG or PNG (one frame, no EXIF rotation, no transparency) is passed
  through byte for byte;
- a JPEG over the pixel limit is decoded straight at 1/2, 1/4 or 1/8 scale (libjpeg's DCT
  scaling, so the full image is never allocated) when that fits;
- anything else is decoded once and normalised to 8-bit gray or RGB (CMYK, palette, alpha over
  white, 16-bit scaled down, 1-bit kept 1-bit) and stored as PNG, or as JPEG when the source was
  lossy (JPEG, WebP, JPEG 2000). EXIF orientation is applied.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from ocrstream.errors import ReasonCode
from ocrstream.processors import split_encode
from ocrstream.processors.split_types import (
    Origin,
    PageError,
    SplitPage,
    over_limit,
    unreadable,
)
from ocrstream.settings import LimitsSettings

log = logging.getLogger(__name__)

#: media type -> the Pillow format allowed to parse it (never let Pillow guess)
PIL_FORMATS = {
    "image/jpeg": "JPEG",
    "image/png": "PNG",
    "image/tiff": "TIFF",
    "image/bmp": "BMP",
    "image/webp": "WEBP",
    "image/gif": "GIF",
    "image/jp2": "JPEG2000",
}
LOSSY_TYPES = frozenset({"image/jpeg", "image/webp", "image/jp2"})
_EXIF_ORIENTATION = 0x0112
_DPI_RANGE = (36.0, 4800.0)


class ImageDocument:
    """An image file opened lazily; yields one page per frame."""

    def __init__(
        self, data: bytes | None, path: str | None, media_type: str, limits: LimitsSettings
    ) -> None:
        self._limits = limits
        self._media_type = media_type
        self._data = data
        self._path = path
        fmt = PIL_FORMATS[media_type]
        try:
            fp: Any = os.fspath(path) if path is not None else io.BytesIO(data or b"")
            self._image = Image.open(fp, formats=[fmt])
        except Image.DecompressionBombError as e:
            raise over_limit(ReasonCode.PAGE_TOO_LARGE, f"the image is too large: {e}") from e
        except Exception as e:  # hostile bytes: any parser failure
            raise unreadable(ReasonCode.UNREADABLE_IMAGE, f"the image cannot be read: {e}") from e
        try:
            self.page_count = self._count()
        except BaseException:
            self._image.close()
            raise

    def _count(self) -> int:
        try:
            count = int(getattr(self._image, "n_frames", 1))
        except Exception as e:  # a broken frame chain
            raise unreadable(ReasonCode.UNREADABLE_IMAGE, f"the frames cannot be read: {e}") from e
        if count <= 0:
            raise unreadable(ReasonCode.ZERO_PAGES, "the image has no frames")
        if count > self._limits.max_pages:
            raise over_limit(
                ReasonCode.TOO_MANY_PAGES,
                f"the image has {count} frames, more than the limit of {self._limits.max_pages}",
            )
        return count

    def close(self) -> None:
        self._image.close()

    def pages(self) -> Iterator[SplitPage]:
        for index in range(self.page_count):
            yield self.page(index)

    def page(self, index: int) -> SplitPage:
        page_no = index + 1
        try:
            return self._page(index)
        except PageError as e:
            code, message = e.code, str(e)
        except (MemoryError, Image.DecompressionBombError) as e:
            code, message = ReasonCode.PAGE_TOO_LARGE, f"the frame is too large: {e}"
        except Exception as e:  # hostile bytes: any decoder failure ends the page
            log.debug("frame %d failed", page_no, exc_info=True)
            code, message = ReasonCode.UNREADABLE_IMAGE, f"the frame cannot be decoded: {e}"
        log.info("page %d/%d unreadable: %s (%s)", page_no, self.page_count, code, message)
        return SplitPage.failed(page_no, self.page_count, code, message)

    def _page(self, index: int) -> SplitPage:
        im = self._image
        if index:
            im.seek(index)
        width, height = im.size
        dpi = _dpi(im.info)
        limit = self._limits.max_page_pixels
        scale = 1
        if width * height > limit:
            scale = self._jpeg_scale(width, height)
            im.draft(im.mode, (width // scale, height // scale))
        passthrough = self._passthrough() if scale == 1 else None
        if passthrough is not None:
            encoding = "jpeg" if im.format == "JPEG" else "png"
            return self._split_page(index, encoding, passthrough, width, height, dpi, "passthrough")
        pixels, bilevel = _normalise(im)
        lossy = self._media_type in LOSSY_TYPES and not bilevel
        encoding, data = split_encode.encode(pixels, lossy=lossy, bilevel=bilevel)
        height, width = pixels.shape[:2]
        return self._split_page(index, encoding, data, width, height, dpi / scale, "converted")

    def _jpeg_scale(self, width: int, height: int) -> int:
        limit = self._limits.max_page_pixels
        if self._image.format == "JPEG":
            for scale in (2, 4, 8):
                if -(-width // scale) * -(-height // scale) <= limit:
                    return scale
        raise PageError(
            ReasonCode.PAGE_TOO_LARGE,
            f"the image is {width}x{height} pixels, more than the limit of {limit}",
        )

    def _passthrough(self) -> bytes | None:
        """The file itself when it is one plain 8-bit gray or RGB JPEG or PNG."""
        im = self._image
        if self.page_count != 1 or im.format not in ("JPEG", "PNG") or im.mode not in ("L", "RGB"):
            return None
        if "transparency" in im.info or im.getexif().get(_EXIF_ORIENTATION, 1) != 1:
            return None
        if im.format == "PNG" and not _png_is_8bit(self._head()):
            return None
        return self._bytes()

    def _head(self) -> bytes:
        return self._bytes(64)

    def _bytes(self, limit: int = -1) -> bytes:
        """The file's own bytes (all, or the first ``limit``). Read from the path, not from PIL's
        file object: PIL closes the file it opened by name once a single-frame image is loaded,
        which made every plain PNG given by path ``unreadable_image``."""
        if self._data is not None:
            return bytes(self._data if limit < 0 else self._data[:limit])
        assert self._path is not None
        with open(self._path, "rb") as f:
            return f.read(limit)

    def _split_page(
        self,
        index: int,
        encoding: str,
        data: bytes,
        width: int,
        height: int,
        dpi: float,
        origin: Origin,
    ) -> SplitPage:
        return SplitPage(
            page_no=index + 1,
            page_count=self.page_count,
            encoding=encoding,
            data=data,
            width=width,
            height=height,
            dpi=round(dpi, 2),
            origin=origin,
        )


def _png_is_8bit(head: bytes) -> bool:
    """IHDR bit depth 8, colour type gray (0) or RGB (2), not interlaced."""
    return len(head) >= 29 and head[24] == 8 and head[25] in (0, 2) and head[28] == 0


def _dpi(info: Mapping[Any, Any]) -> float:
    value = info.get("dpi")
    try:
        dpi = float(value[0]) if isinstance(value, tuple) else float(value or 0)
    except (TypeError, ValueError):
        return 0.0
    return dpi if _DPI_RANGE[0] <= dpi <= _DPI_RANGE[1] else 0.0


def _normalise(im: Image.Image) -> tuple[np.ndarray[Any, np.dtype[np.uint8]], bool]:
    """Decode a frame to 8-bit gray or RGB pixels, upright; ``True`` when it is 1-bit."""
    if im.getexif().get(_EXIF_ORIENTATION, 1) != 1:
        im = ImageOps.exif_transpose(im)
    mode = im.mode
    if mode == "1":
        return np.asarray(im.convert("L")), True
    if mode in ("L", "RGB"):
        return np.asarray(im), False
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        values = np.asarray(im, dtype=np.float64)
        top = 65535.0 if mode.startswith("I") and values.max(initial=0) > 255 else 255.0
        if mode == "F":
            top = max(float(values.max(initial=0)), 1.0)
        return np.clip(values * (255.0 / top), 0, 255).astype(np.uint8), False
    if mode in ("P", "PA"):
        im = im.convert("RGBA" if mode == "PA" or "transparency" in im.info else "RGB")
        mode = im.mode
    if mode in ("LA", "La", "RGBA", "RGBa"):
        rgba = im.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return np.asarray(Image.alpha_composite(white, rgba).convert("RGB")), False
    if mode == "RGB":
        return np.asarray(im), False
    return np.asarray(im.convert("RGB")), False
