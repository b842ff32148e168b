"""Hostile and odd inputs, generated on the fly, with what the splitter must make of them.

Every builder returns the bytes of one document. :data:`CASES` lists them with the outcome the
pipeline owes the user: ``doc_error`` — the reason code the document fails with as a whole —
or, when it opens, ``page_count`` and the reason code of each page that fails
(``page_errors``). The unit tests of the splitter and the reliability tests on the real stack
both iterate :data:`CASES`.

The bombs are tiny files that declare enormous images: a 35,000 × 35,000 JBIG2 page (valid
MMR-coded all-white data, 4 KiB), the same as a Flate image and as a PNG (150 KiB of zlib).
Nothing here decodes them; the generators cost well under a second each and are cached.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pikepdf
import pymupdf
from PIL import Image

from tests import samples
from tests.samples import pdf_stream, write_pdf

BOMB_SIDE = 35_000
PDF = "application/pdf"


# -- cheap documents with exactly the objects we want (see samples.write_pdf) ------------------


def image_page_pdf(
    image_entries: bytes, image_data: bytes, size: tuple[int, int] = (612, 792)
) -> bytes:
    """One page showing one image XObject over the whole page."""
    w, h = size
    content = b"q %d 0 0 %d 0 0 cm /Im0 Do Q" % (w, h)
    return write_pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Contents 4 0 R "
            b"/Resources << /XObject << /Im0 5 0 R >> >> >>" % (w, h),
            pdf_stream(b"", content),
            pdf_stream(b"/Type /XObject /Subtype /Image " + image_entries, image_data),
        ]
    )


# -- documents that cannot be read ---------------------------------------------------------------


def not_a_pdf() -> bytes:
    """A zip archive (an office document) that someone named ``scan.pdf``."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("word/document.xml", "<w:document/>")
    return out.getvalue()


def html_named_pdf() -> bytes:
    return b"<!DOCTYPE html><html><body><p>Not a scan</p></body></html>\n"


def empty_file() -> bytes:
    return b""


def header_then_eof() -> bytes:
    return b"%PDF-1.7\n%%EOF\n"


def corrupt_pdf() -> bytes:
    """A PDF header followed by deterministic garbage."""
    rng = np.random.default_rng(7)
    return b"%PDF-1.4\n" + rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()


def truncated_pdf() -> bytes:
    """A scanned PDF cut off in the middle of its second page image (no xref, no trailer)."""
    data = samples.scanned_pdf(3, dpi=100, seed=3).data
    return data[: len(data) // 2]


def zero_page_pdf() -> bytes:
    return write_pdf(
        [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"]
    )


def encrypted_pdf(user_password: str = "secret") -> bytes:
    """AES-256 with a user password; with ``user_password=""`` only an owner password."""
    source = samples.scanned_pdf(1, dpi=100, seed=5).data
    with pikepdf.open(io.BytesIO(source)) as pdf:
        out = io.BytesIO()
        pdf.save(out, encryption=pikepdf.Encryption(user=user_password, owner="owner-pw", R=6))
    return out.getvalue()


def cyclic_page_tree_pdf() -> bytes:
    """A page tree whose /Kids refer back to itself."""
    return write_pdf(
        [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [2 0 R] /Count 1 >>"]
    )


@lru_cache(maxsize=2)
def many_pages_pdf(count: int = 30_000) -> bytes:
    """Tens of thousands of (tiny, distinct) pages: over the default page limit."""
    return samples.long_pdf(count)


# -- decompression bombs ---------------------------------------------------------------------


def _jbig2_segment(number: int, kind: int, data: bytes) -> bytes:
    # segment header: number, flags (type; 1-byte page association), no referred segments, page 1
    return struct.pack(">IBBBI", number, kind, 0, 1, len(data)) + data


def jbig2_white(width: int, height: int) -> bytes:
    """An embedded JBIG2 stream of an all-white page: one MMR-coded generic region.

    With MMR (T.6) coding an all-white row against an all-white reference row is one vertical
    mode V0 code, the bit ``1`` — so the data is ``height`` one-bits, whatever the width.
    """
    page_info = struct.pack(">IIIIBH", width, height, 0, 0, 0, 0)
    region = struct.pack(">IIIIB", width, height, 0, 0, 0) + b"\x01" + b"\xff" * (-(-height // 8))
    return (
        _jbig2_segment(0, 48, page_info)  # page information
        + _jbig2_segment(1, 38, region)  # immediate generic region
        + _jbig2_segment(2, 49, b"")  # end of page
    )


@lru_cache(maxsize=2)
def jbig2_bomb_pdf(side: int = BOMB_SIDE) -> bytes:
    """A page that is a ``side`` × ``side`` JBIG2 image (1.2 gigapixels at 35,000)."""
    entries = b"/Width %d /Height %d /BitsPerComponent 1 /ColorSpace /DeviceGray " % (side, side)
    return image_page_pdf(entries + b"/Filter /JBIG2Decode", jbig2_white(side, side))


@lru_cache(maxsize=2)
def _zlib_bilevel_rows(side: int) -> bytes:
    """zlib data of ``side`` PNG-filtered rows of ``side`` white 1-bit pixels."""
    row = b"\x00" + b"\xff" * (-(-side // 8))
    z = zlib.compressobj(6)
    chunk = row * 256
    parts = [z.compress(chunk) for _ in range(side // 256)]
    parts.append(z.compress(row * (side % 256)))
    parts.append(z.flush())
    return b"".join(parts)


def flate_bomb_pdf(side: int = BOMB_SIDE) -> bytes:
    """A page that is a ``side`` × ``side`` Flate image (PNG predictors), 150 KiB of zlib."""
    entries = (
        b"/Width %d /Height %d /BitsPerComponent 1 /ColorSpace /DeviceGray /Filter /FlateDecode "
        b"/DecodeParms << /Predictor 15 /Colors 1 /BitsPerComponent 1 /Columns %d >>"
        % (side, side, side)
    )
    return image_page_pdf(entries, _zlib_bilevel_rows(side))


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bytes(width: int, height: int, bit_depth: int, colour_type: int, idat: bytes) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", idat)
        + _png_chunk(b"IEND", b"")
    )


def png_bomb(side: int = BOMB_SIDE) -> bytes:
    """A ``side`` × ``side`` 1-bit PNG file: 150 KiB on disk, 1.2 gigapixels decoded."""
    return png_bytes(side, side, 1, 0, _zlib_bilevel_rows(side))


def bomb_then_scan_pdf() -> bytes:
    """Two pages: a JBIG2 bomb, then an ordinary scan — the second must still be read."""
    with pymupdf.open(stream=jbig2_bomb_pdf(), filetype="pdf") as doc:
        with pymupdf.open(stream=samples.scanned_pdf(1, dpi=100, seed=9).data) as scan:
            doc.insert_pdf(scan)
        return bytes(doc.tobytes())


def huge_page_pdf() -> bytes:
    """A vector page of 200 × 200 inches: at 300 DPI that would be 3.6 gigapixels."""
    doc = pymupdf.open()
    page = doc.new_page(width=14_400, height=14_400)
    page.insert_text((72, 200), "A very large page", fontsize=120)
    data: bytes = doc.tobytes()
    doc.close()
    return data


# -- odd images ----------------------------------------------------------------------------------


def _scan_gray(seed: int = 11, dpi: int = 100) -> samples.Gray:
    return samples.render_lines(samples.sample_lines(5, seed), dpi=dpi, seed=seed)


def _save(image: Image.Image, fmt: str, **params: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **params)
    return out.getvalue()


def cmyk_jpeg() -> bytes:
    return _save(Image.fromarray(_scan_gray()).convert("CMYK"), "JPEG", quality=85)


def palette_png() -> bytes:
    return _save(Image.fromarray(_scan_gray()).convert("RGB").convert("P"), "PNG")


def alpha_png() -> bytes:
    """Black text on a transparent background: composited over white it must stay readable."""
    gray = _scan_gray()
    rgba = np.zeros((*gray.shape, 4), np.uint8)
    rgba[..., 3] = 255 - gray
    return _save(Image.fromarray(rgba, "RGBA"), "PNG")


def gray16_png() -> bytes:
    gray16 = _scan_gray().astype(np.uint16) * 257
    return _save(Image.fromarray(gray16), "PNG")


def rgb48_png() -> bytes:
    """16 bits per channel RGB, written by hand (Pillow cannot)."""
    gray16 = _scan_gray().astype(">u2") * 257
    rgb = np.repeat(gray16[..., None], 3, axis=2)
    rows = b"".join(b"\x00" + row.tobytes() for row in rgb)
    h, w = gray16.shape
    return png_bytes(w, h, 16, 2, zlib.compress(rows, 6))


def jpeg2000() -> bytes:
    return _save(
        Image.fromarray(_scan_gray()), "JPEG2000", quality_mode="rates", quality_layers=[20]
    )


def cmyk_jpeg_pdf() -> bytes:
    return _image_pdf(cmyk_jpeg())


def jpx_pdf() -> bytes:
    return _image_pdf(jpeg2000())


def palette_png_pdf() -> bytes:
    return _image_pdf(palette_png())


def _image_pdf(data: bytes) -> bytes:
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_image(page.rect, stream=data, keep_proportion=False)
    out: bytes = doc.tobytes()
    doc.close()
    return out


def rotated_scan_pdf() -> bytes:
    return samples.scanned_pdf(1, dpi=100, seed=13, rotate=90).data


def skewed_scan_pdf() -> bytes:
    return samples.scanned_pdf(1, dpi=100, seed=17, skew=3.0).data


def blank_page_pdf() -> bytes:
    """A scanned blank page: white with scanner noise, no text."""
    gray = np.clip(np.random.default_rng(19).normal(245, 4, (1100, 850)), 0, 255).astype(np.uint8)
    return _image_pdf(samples.encode_image(gray, "jpeg", 100))


# -- the catalogue ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A hostile input and what must come of it."""

    name: str
    build: Callable[[], bytes]
    content_type: str = PDF
    doc_error: str | None = None  # the document fails as a whole with this code …
    page_count: int | None = None  # … or opens with this many pages,
    page_errors: Mapping[int, str] = field(default_factory=dict)  # these failing.
    note: str = ""

    @property
    def data(self) -> bytes:
        return self.build()


CASES: tuple[Case, ...] = (
    Case("not_a_pdf", not_a_pdf, doc_error="unsupported_type", note="zip named .pdf"),
    Case("html_named_pdf", html_named_pdf, doc_error="unsupported_type"),
    Case("empty_file", empty_file, doc_error="unsupported_type"),
    Case("header_then_eof", header_then_eof, doc_error="corrupt_pdf"),
    Case("corrupt_pdf", corrupt_pdf, doc_error="corrupt_pdf"),
    Case(
        "truncated_pdf",
        truncated_pdf,
        page_count=3,
        page_errors={2: "corrupt_pdf"},
        note="MuPDF repairs it: page 1 whole, page 2 lost, page 3 an empty page",
    ),
    Case("zero_page_pdf", zero_page_pdf, doc_error="zero_pages"),
    Case("encrypted_pdf", encrypted_pdf, doc_error="encrypted_pdf"),
    Case("owner_password_pdf", lambda: encrypted_pdf(""), page_count=1, note="opens without one"),
    Case(
        "cyclic_page_tree_pdf",
        cyclic_page_tree_pdf,
        page_count=1,
        page_errors={1: "corrupt_pdf"},
        note="counts one page that cannot be loaded",
    ),
    Case("many_pages_pdf", many_pages_pdf, doc_error="too_many_pages"),
    Case("jbig2_bomb_pdf", jbig2_bomb_pdf, page_count=1, page_errors={1: "page_too_large"}),
    Case("flate_bomb_pdf", flate_bomb_pdf, page_count=1, page_errors={1: "page_too_large"}),
    Case("bomb_then_scan_pdf", bomb_then_scan_pdf, page_count=2, page_errors={1: "page_too_large"}),
    Case("png_bomb", png_bomb, "image/png", doc_error="page_too_large"),
    Case("huge_page_pdf", huge_page_pdf, page_count=1, note="rendered below 300 DPI"),
    Case("cmyk_jpeg", cmyk_jpeg, "image/jpeg", page_count=1),
    Case("cmyk_jpeg_pdf", cmyk_jpeg_pdf, page_count=1),
    Case("palette_png", palette_png, "image/png", page_count=1),
    Case("palette_png_pdf", palette_png_pdf, page_count=1),
    Case("alpha_png", alpha_png, "image/png", page_count=1),
    Case("gray16_png", gray16_png, "image/png", page_count=1),
    Case("rgb48_png", rgb48_png, "image/png", page_count=1),
    Case("jpeg2000", jpeg2000, "image/jp2", page_count=1),
    Case("jpx_pdf", jpx_pdf, page_count=1),
    Case("rotated_scan_pdf", rotated_scan_pdf, page_count=1),
    Case("skewed_scan_pdf", skewed_scan_pdf, page_count=1),
    Case("blank_page_pdf", blank_page_pdf, page_count=1),
)


def case(name: str) -> Case:
    return next(c for c in CASES if c.name == name)
