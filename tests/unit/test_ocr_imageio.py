"""Page decoding: formats and pixel modes to uint8 BGR; limits before any large allocation."""

from __future__ import annotations

import io
import struct
import tracemalloc
import zlib

import numpy as np
import pytest
from PIL import Image

from ocrstream.processors.imageio import (
    PageTooLargeError,
    UndecodableImageError,
    array_to_bgr,
    decode_image,
    probe,
)

LIMIT = 10_000_000


def _gradient(w: int = 64, h: int = 48) -> np.ndarray:
    """An RGB test card: smooth enough that JPEG keeps it close."""
    x = np.linspace(0, 255, w, dtype=np.float32)[None, :].repeat(h, 0)
    y = np.linspace(0, 255, h, dtype=np.float32)[:, None].repeat(w, 1)
    return np.stack([x, y, 255 - x], axis=2).astype(np.uint8)


def _encode(im: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


RGB = _gradient()
BGR = RGB[..., ::-1]


@pytest.mark.parametrize("fmt", ["PNG", "TIFF", "BMP", "WEBP"])
def test_lossless_formats_decode_exactly_to_bgr(fmt: str):
    kw = {"lossless": True} if fmt == "WEBP" else {}
    out = decode_image(_encode(Image.fromarray(RGB), fmt, **kw), max_pixels=LIMIT)
    assert out.dtype == np.uint8
    assert out.shape == (48, 64, 3)
    np.testing.assert_array_equal(out, BGR)


def test_jpeg_and_cmyk_jpeg_decode_close():
    for im in (Image.fromarray(RGB), Image.fromarray(RGB).convert("CMYK")):
        out = decode_image(_encode(im, "JPEG", quality=95), max_pixels=LIMIT)
        assert out.shape == (48, 64, 3)
        assert np.abs(out.astype(int) - BGR).mean() < 6


def test_pixel_modes():
    gray = Image.fromarray(RGB).convert("L")
    g = np.asarray(gray)
    out = decode_image(_encode(gray, "PNG"), max_pixels=LIMIT)
    np.testing.assert_array_equal(out, np.repeat(g[..., None], 3, axis=2))

    palette = Image.fromarray(RGB).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    out = decode_image(_encode(palette, "PNG"), max_pixels=LIMIT)
    np.testing.assert_array_equal(out, np.asarray(palette.convert("RGB"))[..., ::-1])

    sixteen = Image.fromarray(g.astype(np.uint16) * 257)  # mode I;16
    out = decode_image(_encode(sixteen, "PNG"), max_pixels=LIMIT)
    np.testing.assert_array_equal(out[..., 0], g)

    cmyk = Image.fromarray(RGB).convert("CMYK")
    out = decode_image(_encode(cmyk, "TIFF"), max_pixels=LIMIT)
    np.testing.assert_array_equal(out, np.asarray(cmyk.convert("RGB"))[..., ::-1])

    bilevel = Image.fromarray(RGB).convert("1")
    out = decode_image(_encode(bilevel, "TIFF"), max_pixels=LIMIT)
    assert set(np.unique(out)) <= {0, 255}


def test_alpha_is_composited_on_white():
    rgba = np.zeros((10, 10, 4), np.uint8)  # black, fully transparent...
    rgba[2:5, 2:5] = (0, 0, 0, 255)  # ...but for an opaque black square
    rgba[6:8, 6:8] = (0, 0, 0, 128)
    out = decode_image(_encode(Image.fromarray(rgba, "RGBA"), "PNG"), max_pixels=LIMIT)
    assert out[0, 0].tolist() == [255, 255, 255]
    assert out[3, 3].tolist() == [0, 0, 0]
    assert 120 <= out[7, 7, 0] <= 135
    la = Image.fromarray(rgba[..., 3]).convert("LA")
    assert decode_image(_encode(la, "PNG"), max_pixels=LIMIT).shape == (10, 10, 3)


def test_arrays():
    np.testing.assert_array_equal(array_to_bgr(BGR, max_pixels=LIMIT), BGR)
    assert array_to_bgr(BGR[..., 0], max_pixels=LIMIT).shape == (48, 64, 3)
    bgra = np.dstack([BGR, np.full(BGR.shape[:2], 255, np.uint8)])
    np.testing.assert_array_equal(decode_image(bgra, max_pixels=LIMIT), BGR)
    as16 = BGR.astype(np.uint16) * 257
    np.testing.assert_array_equal(decode_image(as16, max_pixels=LIMIT), BGR)
    as_float = BGR.astype(np.float32) / 255.0
    np.testing.assert_array_equal(decode_image(as_float, max_pixels=LIMIT), BGR)
    with pytest.raises(UndecodableImageError):
        decode_image(np.zeros((4, 4, 2), np.uint8), max_pixels=LIMIT)
    with pytest.raises(PageTooLargeError):
        decode_image(np.zeros((100, 100), np.uint8), max_pixels=9_999)


def test_garbage_and_truncated_bytes_are_undecodable():
    for data in (b"", b"not an image at all", _encode(Image.fromarray(RGB), "PNG")[:60]):
        with pytest.raises(UndecodableImageError) as err:
            decode_image(data, max_pixels=LIMIT)
        assert err.value.code == "undecodable_image"


def _png_claiming(width: int, height: int) -> bytes:
    """A small real PNG whose IHDR is patched to claim another size (CRC fixed up)."""
    data = bytearray(_encode(Image.new("L", (16, 16), 255), "PNG"))
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def test_decompression_bomb_is_refused_from_the_header():
    bomb = _png_claiming(35_000, 35_000)
    with pytest.raises(PageTooLargeError):
        probe(bomb, max_pixels=80_000_000)
    assert probe(_png_claiming(9_000, 9_000), max_pixels=80_000_000).pixels == 81_000_000
    tracemalloc.start()
    try:
        with pytest.raises(PageTooLargeError) as err:
            decode_image(bomb, max_pixels=80_000_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.value.code == "page_too_large"
    assert peak < 5_000_000  # nothing near 1.2 GB was allocated


def test_huge_jpeg_is_downscaled_while_decoding():
    big = Image.new("L", (6000, 4000), 255)
    data = _encode(big, "JPEG", quality=50)
    out = decode_image(data, max_pixels=3_000_000)  # 24 Mpx → 1/4 per side = 1.5 Mpx
    assert out.shape == (1000, 1500, 3)
    with pytest.raises(PageTooLargeError):
        decode_image(data, max_pixels=3_000_000, downscale=False)
    with pytest.raises(PageTooLargeError):
        decode_image(data, max_pixels=300_000)  # even 1/8 is too big: refused


def test_multi_frame_tiff_decodes_its_first_page():
    frames = [Image.fromarray(RGB), Image.new("RGB", (10, 10), (255, 0, 0))]
    buf = io.BytesIO()
    frames[0].save(buf, "TIFF", save_all=True, append_images=frames[1:])
    np.testing.assert_array_equal(decode_image(buf.getvalue(), max_pixels=LIMIT), BGR)


def _jpeg_claiming(width: int, height: int) -> bytes:
    data = bytearray(_encode(Image.new("L", (16, 16), 255), "JPEG"))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def test_pils_global_guard_is_left_alone_and_huge_jpeg_headers_still_probe():
    before = Image.MAX_IMAGE_PIXELS
    header = probe(_jpeg_claiming(30_000, 20_000), max_pixels=80_000_000)
    assert (header.format, header.width, header.height) == ("JPEG", 30_000, 20_000)
    with pytest.raises(PageTooLargeError):  # 1/8 per side is still 9.4 Mpx
        decode_image(_jpeg_claiming(30_000, 20_000), max_pixels=5_000_000)
    with pytest.raises(PageTooLargeError):
        decode_image(_png_claiming(35_000, 35_000), max_pixels=10**12)  # PIL's guard holds
    assert before == Image.MAX_IMAGE_PIXELS
