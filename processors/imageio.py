"""Decoding page images to the engine's input: an H×W×3 uint8 BGR array (OpenCV's order).

Bytes of JPEG, PNG, TIFF, BMP, WebP or GIF, or a numpy array, in any common pixel format:
grayscale, colour, with alpha (composited on white), palette, 16-bit, float, CMYK.

The pixel count is read from the header before anything is decoded. A page over the limit is
downscaled while decoding where the codec can do that cheaply (JPEG's DCT scaling in PIL's draft
mode: 1/2, 1/4 or 1/8 per side) and refused otherwise with ``LimitExceededError``
(``page_too_large``). Nothing of the full size is allocated first, so a decompression bomb (a
tiny PNG that claims 35,000 × 35,000 pixels) costs a few hundred bytes of header parsing.
"""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt
from PIL import Image, ImageOps, UnidentifiedImageError

from ocrstream.errors import LimitExceededError, PoisonError

ImageBGR = npt.NDArray[np.uint8]

_JPEG_SCALES = (2, 4, 8)
_PIL_FORMATS = frozenset({"JPEG", "PNG", "TIFF", "BMP", "WEBP", "GIF", "MPO", "PPM", "JPEG2000"})


class UndecodableImageError(PoisonError):
    code = "undecodable_image"


class PageTooLargeError(LimitExceededError):
    code = "page_too_large"


@dataclass(frozen=True, slots=True)
class ImageHeader:
    """What the header says, read without decoding the pixels."""

    format: str
    width: int
    height: int
    mode: str

    @property
    def pixels(self) -> int:
        return self.width * self.height


def probe(data: bytes, *, max_pixels: int) -> ImageHeader:
    """Read format and size from the header only (nothing is decoded).

    PIL's process-wide bomb guard (``Image.MAX_IMAGE_PIXELS``) is left as it is: other
    components rely on it, and changing it per call would loosen their guard behind their back.
    A JPEG it refuses is opened with the JPEG plugin directly, which reads the header the same
    way, so that it can still be shrunk while decoding.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with _open(data, bomb_check=True) as im:
                return ImageHeader(im.format or "?", im.width, im.height, im.mode)
    except Image.DecompressionBombError as e:
        if data[:3] == b"\xff\xd8\xff":
            try:
                with _open(data, bomb_check=False) as im:
                    return ImageHeader("JPEG", im.width, im.height, im.mode)
            except (OSError, ValueError, SyntaxError) as inner:
                raise UndecodableImageError(f"not a readable JPEG: {inner}") from inner
        raise PageTooLargeError(f"image is far over the limit of {max_pixels} pixels") from e
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise UndecodableImageError(f"not a readable image: {e}") from e


def _open(data: bytes, *, bomb_check: bool) -> Image.Image:
    """``Image.open``, or for a JPEG without PIL's bomb check, the JPEG plugin itself (our own
    pixel limit is checked from the header before anything is decoded)."""
    if bomb_check:
        return Image.open(io.BytesIO(data))
    from PIL import JpegImagePlugin

    return JpegImagePlugin.JpegImageFile(io.BytesIO(data))


def decode_image(
    data: bytes | bytearray | memoryview | npt.NDArray[np.generic],
    *,
    max_pixels: int,
    downscale: bool = True,
) -> ImageBGR:
    """Decode one page to uint8 BGR, downscaling (JPEG) or refusing pages over ``max_pixels``.

    Numpy arrays are taken as BGR(A) or grayscale, any integer or float dtype.
    """
    if isinstance(data, np.ndarray):
        return array_to_bgr(data, max_pixels=max_pixels)
    raw = bytes(data)
    if not raw:
        raise UndecodableImageError("empty image")
    header = probe(raw, max_pixels=max_pixels)
    if header.format not in _PIL_FORMATS:
        raise UndecodableImageError(f"unsupported image format {header.format}")
    if header.pixels > max_pixels:
        return _decode_reduced(raw, header, max_pixels, downscale)
    if header.format == "JPEG":
        # libjpeg-turbo through OpenCV: the fastest path, handles CMYK and EXIF orientation.
        bgr = cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR)
        if bgr is not None and bgr.size:
            return np.ascontiguousarray(bgr)
    return _decode_pil(raw, max_pixels)


def _decode_reduced(raw: bytes, header: ImageHeader, max_pixels: int, downscale: bool) -> ImageBGR:
    too_large = PageTooLargeError(
        f"page is {header.width}x{header.height} = {header.pixels} pixels, over the limit of "
        f"{max_pixels}"
    )
    if not downscale or header.format != "JPEG":
        raise too_large
    for scale in _JPEG_SCALES:
        w, h = math.ceil(header.width / scale), math.ceil(header.height / scale)
        if w * h <= max_pixels:
            break
    else:
        raise too_large
    try:
        with _open(raw, bomb_check=False) as im:
            im.draft("RGB", (w, h))
            if im.width * im.height > max_pixels:
                raise too_large
            return _pil_to_bgr(im)
    except (OSError, ValueError, SyntaxError) as e:
        raise UndecodableImageError(f"JPEG does not decode: {e}") from e


def _decode_pil(raw: bytes, max_pixels: int) -> ImageBGR:
    try:
        with Image.open(io.BytesIO(raw)) as im:
            im.seek(0)  # the first frame of a multi-page TIFF or GIF
            if im.width * im.height > max_pixels:
                raise PageTooLargeError(f"page is {im.width}x{im.height}, over {max_pixels}")
            return _pil_to_bgr(im)
    except Image.DecompressionBombError as e:
        raise PageTooLargeError(str(e)) from e
    except (OSError, ValueError, SyntaxError, EOFError) as e:
        raise UndecodableImageError(f"image does not decode: {e}") from e


def _pil_to_bgr(im: Image.Image) -> ImageBGR:
    im.load()
    transposed = ImageOps.exif_transpose(im)
    if transposed is not None:
        im = transposed
    mode = im.mode
    if mode in ("P", "PA"):
        im = im.convert("RGBA" if "transparency" in im.info or mode == "PA" else "RGB")
        mode = im.mode
    if mode in ("RGBA", "LA", "La", "RGBa"):
        rgba = np.asarray(im.convert("RGBA"))
        return _composite_on_white(np.ascontiguousarray(rgba[..., [2, 1, 0, 3]]))
    if mode.startswith("I") or mode == "F":
        return array_to_bgr(np.asarray(im), max_pixels=im.width * im.height)
    if mode in ("1", "L"):
        # Gray straight to BGR: going through a PIL RGB image and a copy of it costs twice the
        # final image on top (an 80-megapixel scan peaked at 900 MB, now 400 MB).
        gray = np.asarray(im if mode == "L" else im.convert("L"))
        return cv2.cvtColor(gray, cv2.COLOR_GRAY2BGR)  # type: ignore[return-value]
    if mode != "RGB":
        im = im.convert("RGB")  # CMYK, YCbCr, LAB, HSV
    rgb = np.array(im)  # writable: swapped to BGR in place
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR, dst=rgb)  # type: ignore[return-value]


def array_to_bgr(arr: npt.NDArray[np.generic], *, max_pixels: int) -> ImageBGR:
    """A numpy page (gray, BGR, BGRA; uint8/uint16/int/float) as contiguous uint8 BGR."""
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (1, 3, 4)):
        raise UndecodableImageError(f"an image array must be HxW, HxWx3 or HxWx4, not {arr.shape}")
    h, w = arr.shape[:2]
    if h == 0 or w == 0:
        raise UndecodableImageError("empty image array")
    if h * w > max_pixels:
        raise PageTooLargeError(f"page is {w}x{h} = {w * h} pixels, over the limit of {max_pixels}")
    img = _to_uint8(arr)
    if img.ndim == 2 or img.shape[2] == 1:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)  # type: ignore[return-value]
    if img.shape[2] == 4:
        return _composite_on_white(img)
    return np.ascontiguousarray(img)


def _to_uint8(arr: npt.NDArray[np.generic]) -> npt.NDArray[np.uint8]:
    if arr.dtype == np.uint8:
        return arr  # type: ignore[return-value]
    if arr.dtype == np.bool_:
        return arr.astype(np.uint8) * 255
    if np.issubdtype(arr.dtype, np.floating):
        f = np.nan_to_num(arr.astype(np.float32))
        if f.size and float(f.max()) <= 1.0:
            f = f * 255.0
        return np.clip(f + 0.5, 0, 255).astype(np.uint8)
    if arr.dtype == np.uint16:
        return (arr.astype(np.uint16) >> 8).astype(np.uint8)
    if np.issubdtype(arr.dtype, np.integer):
        i = arr.astype(np.int64)
        top = int(i.max()) if i.size else 0
        if top > 255:
            shift = max(0, top.bit_length() - 8)
            i = i >> shift
        return np.clip(i, 0, 255).astype(np.uint8)
    raise UndecodableImageError(f"unsupported image dtype {arr.dtype}")


def _composite_on_white(bgra: npt.NDArray[np.uint8]) -> ImageBGR:
    alpha = bgra[..., 3:4].astype(np.uint16)
    if int(alpha.min()) == 255:
        return np.ascontiguousarray(bgra[..., :3])
    bgr = bgra[..., :3].astype(np.uint16)
    out = (bgr * alpha + 255 * (255 - alpha) + 127) // 255
    return out.astype(np.uint8)


def encode_png(image: ImageBGR) -> bytes:
    ok, buf = cv2.imencode(".png", image)
    if not ok:
        raise UndecodableImageError("cannot encode PNG")
    return bytes(buf)
