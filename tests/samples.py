"""Small "scanned" documents with known text, generated on the fly.

Each page is text drawn with PyMuPDF (Helvetica), rasterised at a scanner's DPI, lightly
speckled with noise, encoded as JPEG or PNG and placed as one full-page image on a PDF page —
what a document scanner produces. The text of every page is known, so a test can measure the
character error rate of whatever read it.

    >>> sample = scanned_pdf(pages=3, seed=1)
    >>> sample.data[:5], sample.texts[0].splitlines()[0]
    (b'%PDF-', '…')
"""

from __future__ import annotations

import io
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np
import pymupdf
from numpy.typing import NDArray
from PIL import Image

Gray = NDArray[np.uint8]

LETTER = (612.0, 792.0)
A4 = (595.0, 842.0)

_VOCABULARY = (
    "invoice account balance payment order number date total amount customer supplier "
    "contract agreement section clause party notice period delivery address street city "
    "country postal code reference signature witness schedule annex page report quarter "
    "revenue expense tax rate interest loan credit debit transfer bank branch office archive "
    "record file folder letter memo minutes meeting board director manager the of and to in "
    "for on with by from at as is are was be this that these those"
)
_WORDS = tuple(_VOCABULARY.split())


@dataclass(frozen=True)
class Sample:
    """A generated document: its bytes, its media type and the text of each page."""

    data: bytes
    content_type: str
    lines: tuple[tuple[str, ...], ...]

    @property
    def texts(self) -> tuple[str, ...]:
        """The text of each page, lines joined by newlines."""
        return tuple("\n".join(page) for page in self.lines)

    @property
    def page_count(self) -> int:
        return len(self.lines)


def sample_lines(n: int, seed: int = 0, words: tuple[int, int] = (4, 8)) -> tuple[str, ...]:
    """``n`` deterministic lines of business-like words with numbers, for known-text tests."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        line = [rng.choice(_WORDS) for _ in range(rng.randint(*words))]
        line[0] = line[0].capitalize()
        if rng.random() < 0.5:
            line.insert(rng.randrange(len(line) + 1), str(rng.randint(10, 99999)))
        out.append(" ".join(line))
    return tuple(out)


def page_lines(pages: int, lines_per_page: int, seed: int) -> tuple[tuple[str, ...], ...]:
    return tuple(sample_lines(lines_per_page, seed * 1000 + p) for p in range(pages))


def text_page_pdf(
    lines: Sequence[str], size: tuple[float, float] = LETTER, fontsize: float = 14.0
) -> pymupdf.Document:
    """A one-page PDF with the lines as real (vector) text, 72 pt margins, 2 line heights apart."""
    doc = pymupdf.open()
    page = doc.new_page(width=size[0], height=size[1])
    for i, line in enumerate(lines):
        page.insert_text((72, 72 + fontsize + i * fontsize * 2), line, fontsize=fontsize)
    return doc


def render_lines(
    lines: Sequence[str],
    *,
    dpi: int = 300,
    size: tuple[float, float] = LETTER,
    fontsize: float = 14.0,
    noise: float = 8.0,
    skew: float = 0.0,
    seed: int = 0,
) -> Gray:
    """The lines as a gray scan: rendered at ``dpi``, speckled, optionally skewed (degrees)."""
    with text_page_pdf(lines, size, fontsize) as doc:
        pix = doc[0].get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY)
        gray = np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width).copy()
    if skew:
        h, w = gray.shape
        matrix = cv2.getRotationMatrix2D((w / 2, h / 2), skew, 1.0)
        warped = cv2.warpAffine(gray, matrix, (w, h), borderValue=255, flags=cv2.INTER_LINEAR)
        gray = np.asarray(warped, dtype=np.uint8)
    if noise:
        rng = np.random.default_rng(seed)
        speckle = rng.normal(0, noise, gray.shape).astype(np.int16)
        gray = np.clip(gray.astype(np.int16) + speckle, 0, 255).astype(np.uint8)
    return gray


def encode_image(
    pixels: NDArray[np.uint8], fmt: str = "jpeg", dpi: int = 300, quality: int = 85
) -> bytes:
    """Pixels as an image file with its DPI recorded (JPEG, PNG, TIFF, BMP, WEBP, JPEG2000)."""
    image = Image.fromarray(pixels)
    out = io.BytesIO()
    fmt = fmt.upper()
    if fmt in ("JPEG", "JPG"):
        image.save(out, "JPEG", quality=quality, dpi=(dpi, dpi))
    elif fmt == "WEBP":
        image.save(out, "WEBP", quality=quality)
    elif fmt == "JPEG2000":
        image.save(out, "JPEG2000", quality_mode="rates", quality_layers=[20])
    else:
        image.save(out, fmt, dpi=(dpi, dpi))
    return out.getvalue()


def _image_pdf(images: Sequence[bytes], size: tuple[float, float], rotate: int = 0) -> bytes:
    doc = pymupdf.open()
    for data in images:
        width, height = (size[1], size[0]) if rotate % 180 else size
        page = doc.new_page(width=width, height=height)
        page.insert_image(page.rect, stream=data, keep_proportion=False)
        if rotate:
            page.set_rotation(rotate)
    out: bytes = doc.tobytes(garbage=1, deflate=True)
    doc.close()
    return out


@lru_cache(maxsize=32)
def scanned_pdf(
    pages: int = 3,
    *,
    lines_per_page: int = 8,
    dpi: int = 300,
    fmt: str = "jpeg",
    seed: int = 0,
    size: tuple[float, float] = LETTER,
    rotate: int = 0,
    skew: float = 0.0,
    fontsize: float = 14.0,
) -> Sample:
    """A scanned PDF: each page one full-page ``fmt`` image of known text.

    ``rotate`` stores each scan sideways with a ``/Rotate`` that turns it upright again (what a
    scanner does with a landscape original): viewers — and the splitter — show it upright.
    """
    lines = page_lines(pages, lines_per_page, seed)
    images = []
    for p, page in enumerate(lines):
        gray = render_lines(page, dpi=dpi, size=size, skew=skew, seed=seed + p, fontsize=fontsize)
        if rotate:
            gray = np.ascontiguousarray(np.rot90(gray, k=rotate // 90))
        images.append(encode_image(gray, fmt, dpi))
    return Sample(_image_pdf(images, size, rotate), "application/pdf", lines)


@lru_cache(maxsize=8)
def text_pdf(pages: int = 2, *, lines_per_page: int = 8, seed: int = 0) -> Sample:
    """A born-digital PDF: real text on each page (no images)."""
    lines = page_lines(pages, lines_per_page, seed)
    doc = pymupdf.open()
    for page in lines:
        with text_page_pdf(page) as one:
            doc.insert_pdf(one)
    data: bytes = doc.tobytes(garbage=1, deflate=True)
    doc.close()
    return Sample(data, "application/pdf", lines)


@lru_cache(maxsize=8)
def scanned_image(
    fmt: str = "jpeg", *, lines: int = 6, dpi: int = 200, seed: int = 0, mode: str = "L"
) -> Sample:
    """One scanned page as an image file (``mode`` L, RGB, 1, P, RGBA …)."""
    text = sample_lines(lines, seed)
    gray = render_lines(text, dpi=dpi, seed=seed)
    image = Image.fromarray(gray).convert(mode)
    out = io.BytesIO()
    if fmt.upper() == "JPEG":
        image.save(out, "JPEG", quality=85, dpi=(dpi, dpi))
    else:
        image.save(out, fmt.upper(), dpi=(dpi, dpi))
    return Sample(out.getvalue(), f"image/{fmt.lower()}", (text,))


@lru_cache(maxsize=8)
def scanned_tiff(
    pages: int = 3, *, lines_per_page: int = 6, dpi: int = 200, seed: int = 0, bilevel: bool = True
) -> Sample:
    """A multi-page TIFF scan, CCITT Group 4 when ``bilevel`` (a fax), else LZW gray."""
    lines = page_lines(pages, lines_per_page, seed)
    frames = []
    for p, page in enumerate(lines):
        gray = render_lines(page, dpi=dpi, seed=seed + p, noise=0 if bilevel else 8)
        image = Image.fromarray(gray)
        frames.append(image.point(lambda v: 255 if v >= 128 else 0, mode="1") if bilevel else image)
    out = io.BytesIO()
    frames[0].save(
        out,
        "TIFF",
        save_all=True,
        append_images=frames[1:],
        compression="group4" if bilevel else "tiff_lzw",
        dpi=(dpi, dpi),
    )
    return Sample(out.getvalue(), "image/tiff", lines)


# -- a minimal PDF writer: long documents in well under a second ----------------------------


def pdf_stream(entries: bytes, data: bytes) -> bytes:
    """The body of a stream object."""
    return b"<< %s /Length %d >>\nstream\n%s\nendstream" % (entries, len(data), data)


def write_pdf(objects: Sequence[bytes], root: int = 1) -> bytes:
    """A PDF whose object ``i + 1`` has the body ``objects[i]`` (such as ``b"<< ... >>"``)."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    trailer = b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n"
    out += trailer % (len(objects) + 1, root, xref)
    return bytes(out)


def long_pdf(
    pages: int,
    scans: Sequence[bytes] = (),
    *,
    text_every: int = 1,
    size: tuple[float, float] = LETTER,
) -> bytes:
    """A PDF of ``pages`` distinct pages that share a few objects, so it is cheap to build.

    Page ``i`` (0-based) is vector text ("Page i+1") when ``i % text_every == 0`` or there are
    no ``scans``; otherwise it shows one of the gray JPEG ``scans`` (cycling) over the page.
    """
    w, h = size
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    font = len(objects) + 1
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    image_objs = []
    for jpeg in scans:
        with Image.open(io.BytesIO(jpeg)) as im:
            iw, ih = im.size
            cs = b"/DeviceGray" if im.mode == "L" else b"/DeviceRGB"
        entries = b"/Type /XObject /Subtype /Image /Width %d /Height %d /BitsPerComponent 8 " % (
            iw,
            ih,
        )
        objects.append(pdf_stream(entries + b"/ColorSpace " + cs + b" /Filter /DCTDecode", jpeg))
        image_objs.append(len(objects))
    draw = b"q %g 0 0 %g 0 0 cm /Im0 Do Q" % (w, h)
    image_content = len(objects) + 1
    objects.append(pdf_stream(b"", draw))
    first_page = len(objects) + 1
    for i in range(pages):
        if scans and i % text_every:
            image = image_objs[i % len(image_objs)]
            contents = b"%d 0 R" % image_content
            resources = b"<< /XObject << /Im0 %d 0 R >> >>" % image
            objects.append(_page(w, h, contents, resources))
        else:
            text = b"BT /F1 24 Tf 72 %g Td (Page %d) Tj ET" % (h - 96, i + 1)
            objects.append(pdf_stream(b"", text))
            resources = b"<< /Font << /F1 %d 0 R >> >>" % font
            objects.append(_page(w, h, b"%d 0 R" % len(objects), resources))
    kids = [
        n
        for n in range(first_page, len(objects) + 1)
        if objects[n - 1].startswith(b"<< /Type /Page ")
    ]
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids),
        len(kids),
    )
    return write_pdf(objects)


def _page(w: float, h: float, contents: bytes, resources: bytes) -> bytes:
    return b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %g %g] /Contents %s /Resources %s >>" % (
        w,
        h,
        contents,
        resources,
    )


# -- layout ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayoutSample:
    """A scanned page with structure: its PNG and what a reader should find on it."""

    data: bytes
    title: str
    paragraphs: tuple[str, ...]  # in reading order: the left column's, then the right's
    footer: str


TWO_COLUMN_TITLE = "Rivers of the North"
# Each paragraph as its printed lines; a line ending in "-" continues its word on the next.
_LEFT = (
    ("Alpha rivers begin in the hills", "and run down to the lakes in", "the spring."),
    ("Beta bridges cross the water", "where the banks are low and", "the towns are old."),
)
_RIGHT = (
    ("Gamma boats carry timber and", "grain to the harbour in sum-", "mer and in autumn."),
    ("Delta farms line the valley", "floor from the mountains to", "the sea."),
)


def _two_column_doc() -> pymupdf.Document:
    doc = pymupdf.open()
    page = doc.new_page(width=A4[0], height=A4[1])
    page.insert_text((60, 90), TWO_COLUMN_TITLE, fontsize=26, fontname="helv")
    for x, paragraphs in ((50, _LEFT), (315, _RIGHT)):
        y = 150.0
        for paragraph in paragraphs:
            for line in paragraph:
                page.insert_text((x, y), line, fontsize=11, fontname="helv")
                y += 16
            y += 22
    page.insert_text((290, 815), "7", fontsize=10, fontname="helv")
    return doc


def _flowed(lines: Sequence[str]) -> str:
    text = ""
    for line in lines:
        text = text[:-1] + line if text.endswith("-") else (f"{text} {line}" if text else line)
    return text


def two_column_scan(dpi: int = 150, noise: float = 6.0) -> LayoutSample:
    """An A4 page scanned at ``dpi``: a title across the top, two columns of two paragraphs
    each (one word hyphenated across a line end), and a page number as the footer."""
    doc = _two_column_doc()
    pix = doc[0].get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY)
    gray = np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width).copy()
    doc.close()
    speckle = np.random.default_rng(0).normal(0, noise, gray.shape).astype(np.int16)
    gray = np.clip(gray.astype(np.int16) + speckle, 0, 255).astype(np.uint8)
    return LayoutSample(
        data=encode_image(gray, "png", dpi=dpi),
        title=TWO_COLUMN_TITLE,
        paragraphs=tuple(_flowed(p) for p in (*_LEFT, *_RIGHT)),
        footer="7",
    )


def two_column_pdf() -> LayoutSample:
    """The page of :func:`two_column_scan` born digital: a PDF with its text as text."""
    doc = _two_column_doc()
    data = doc.tobytes()
    doc.close()
    return LayoutSample(
        data=data,
        title=TWO_COLUMN_TITLE,
        paragraphs=tuple(_flowed(p) for p in (*_LEFT, *_RIGHT)),
        footer="7",
    )


# -- tables ---------------------------------------------------------------------------------

SALES_CAPTION = "Table 1. Sales by region"
#: The spanning table of :func:`table_doc`: (row, col, rowspan, colspan, text), HTML grid.
SALES_CELLS = (
    (0, 0, 2, 1, "Region"),
    (0, 1, 1, 2, "Sales"),
    (1, 1, 1, 1, "2024"),
    (1, 2, 1, 1, "2025"),
    (2, 0, 1, 1, "North"),
    (2, 1, 1, 1, "1200"),
    (2, 2, 1, 1, "1500"),
    (3, 0, 1, 1, "South"),
    (3, 1, 1, 1, "900"),
    (3, 2, 1, 1, "1100"),
    (4, 0, 1, 1, "East"),
    (4, 1, 1, 1, "700"),
    (4, 2, 1, 1, "800"),
)


def draw_table(
    page: pymupdf.Page,
    cells: Sequence[tuple[int, int, int, int, str]],
    origin: tuple[float, float],
    col_w: float = 110.0,
    row_h: float = 24.0,
    fontsize: float = 11.0,
) -> tuple[float, float, float, float]:
    """Draw a ruled table of (row, col, rowspan, colspan, text) cells; its box in points."""
    x0, y0 = origin
    rows = max(r + rs for r, _, rs, _, _ in cells)
    cols = max(c + cs for _, c, _, cs, _ in cells)
    shape = page.new_shape()
    for r, c, rs, cs, text in cells:
        rect = pymupdf.Rect(
            x0 + c * col_w, y0 + r * row_h, x0 + (c + cs) * col_w, y0 + (r + rs) * row_h
        )
        shape.draw_rect(rect)
        baseline = rect.y0 + rect.height / 2 + fontsize * 0.35
        page.insert_text((rect.x0 + 8, baseline), text, fontsize=fontsize, fontname="helv")
    shape.finish(color=(0, 0, 0), width=0.8)
    shape.commit()
    return x0, y0, x0 + cols * col_w, y0 + rows * row_h


@dataclass(frozen=True)
class StructuredSample:
    """A two-page document: page 1 the two-column page of :func:`two_column_scan`, page 2 a
    heading, a paragraph, the spanning sales table under its caption, a page number."""

    data: bytes
    title: str
    paragraphs: tuple[str, ...]  # page 1, in reading order
    heading: str
    table_intro: str
    cells: tuple[tuple[int, int, int, int, str], ...]
    footers: tuple[str, str]


TABLE_HEADING = "Trade in the Valley"
TABLE_INTRO = "The towns sold more grain each year."
FIGURE_CAPTION = "Figure 1. Grain shipped by year"


def _photo(page: pymupdf.Page, rect: pymupdf.Rect) -> None:
    """A photograph-like picture: hills under a sky, shaded and grainy, no text."""
    h, w = 300, 480
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    sky = 200 - 60 * yy / h
    hills = h * 0.55 + 40 * np.sin(xx / 45.0) + 25 * np.sin(xx / 17.0 + 1.0)
    image = np.where(yy > hills, 70 + 40 * np.sin(xx / 9.0) * np.cos(yy / 7.0), sky)
    image += np.random.default_rng(1).normal(0, 12, image.shape)
    gray = np.clip(image, 0, 255).astype(np.uint8)
    page.insert_image(rect, stream=encode_image(gray, "png"), keep_proportion=False)


def _structured_doc() -> pymupdf.Document:
    doc = _two_column_doc()
    page = doc.new_page(width=A4[0], height=A4[1])
    page.insert_text((60, 150), TABLE_HEADING, fontsize=18, fontname="helv")
    page.insert_text((60, 190), TABLE_INTRO, fontsize=11, fontname="helv")
    page.insert_text((60, 235), SALES_CAPTION, fontsize=11, fontname="helv")
    draw_table(page, SALES_CELLS, (60, 250))
    _photo(page, pymupdf.Rect(80, 440, 400, 640))
    page.insert_text((80, 665), FIGURE_CAPTION, fontsize=11, fontname="helv")
    page.insert_text((290, 815), "8", fontsize=10, fontname="helv")
    return doc


def structured_scan_pdf(dpi: int = 150, noise: float = 6.0) -> StructuredSample:
    """:class:`StructuredSample` scanned: each page a noisy gray image in a PDF."""
    doc = _structured_doc()
    images = []
    rng = np.random.default_rng(0)
    for page in doc:
        pix = page.get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY)
        gray = np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width)
        speckle = rng.normal(0, noise, gray.shape).astype(np.int16)
        gray = np.clip(gray.astype(np.int16) + speckle, 0, 255).astype(np.uint8)
        images.append(encode_image(gray, "png", dpi=dpi))
    doc.close()
    return _structured(_image_pdf(images, A4))


def structured_pdf() -> StructuredSample:
    """:class:`StructuredSample` born digital: text as text, the table's rules as vectors."""
    doc = _structured_doc()
    data = doc.tobytes()
    doc.close()
    return _structured(data)


def _structured(data: bytes) -> StructuredSample:
    return StructuredSample(
        data=data,
        title=TWO_COLUMN_TITLE,
        paragraphs=tuple(_flowed(p) for p in (*_LEFT, *_RIGHT)),
        heading=TABLE_HEADING,
        table_intro=TABLE_INTRO,
        cells=SALES_CELLS,
        footers=("7", "8"),
    )


# -- receipts (key-field mode) --------------------------------------------------------------

RECEIPT_SIZE = (227.0, 420.0)  # 80 mm wide


@dataclass(frozen=True)
class ReceiptSample:
    """A scanned till receipt and its named fields: boxes in fractions of the page (as
    ``options.regions`` takes them) and the text printed in each."""

    data: bytes
    regions: tuple[dict[str, object], ...]
    fields: dict[str, str]


def receipt(seed: int = 0, dpi: int = 200, noise: float = 6.0) -> ReceiptSample:
    """A receipt: shop, date, a dozen items with prices, the total; scanned at ``dpi``."""
    rng = np.random.default_rng(seed)
    shop = ("CORNER GROCERY", "VALLEY MARKET", "HARBOUR DELI", "NORTH BAKERY")[seed % 4]
    date = f"2026-{1 + seed % 12:02d}-{1 + (7 * seed) % 28:02d}"
    items = [(f"Item {chr(65 + i)}{seed}", int(rng.integers(100, 2000))) for i in range(12)]
    total = f"{sum(p for _, p in items) / 100:.2f}"
    w, h = RECEIPT_SIZE
    doc = pymupdf.open()
    page = doc.new_page(width=w, height=h)
    page.insert_text((40, 36), shop, fontsize=13, fontname="hebo")
    page.insert_text((20, 62), f"Date {date}", fontsize=10, fontname="cour")
    y = 90.0
    for name, price in items:
        page.insert_text((20, y), name, fontsize=10, fontname="cour")
        page.insert_text((160, y), f"{price / 100:.2f}", fontsize=10, fontname="cour")
        y += 20
    y += 10
    page.insert_text((20, y), "TOTAL", fontsize=12, fontname="cobo")
    page.insert_text((150, y), total, fontsize=12, fontname="cobo")
    pix = page.get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY)
    gray = np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width).copy()
    doc.close()
    speckle = rng.normal(0, noise, gray.shape).astype(np.int16)
    gray = np.clip(gray.astype(np.int16) + speckle, 0, 255).astype(np.uint8)

    def box(x0: float, y0: float, x1: float, y1: float) -> list[float]:
        return [round(x0 / w, 4), round(y0 / h, 4), round(x1 / w, 4), round(y1 / h, 4)]

    regions = (
        {"name": "shop", "page": 1, "bbox": box(10, 18, 217, 44)},
        {"name": "date", "page": 1, "bbox": box(10, 50, 217, 68)},
        {"name": "total", "page": 1, "bbox": box(140, y - 16, 222, y + 6)},
    )
    return ReceiptSample(
        data=encode_image(gray, "png", dpi=dpi),
        regions=regions,
        fields={"shop": shop, "date": f"Date {date}", "total": total},
    )
