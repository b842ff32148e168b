"""The searchable PDF: the source with an invisible text layer.

A PDF source keeps its own pages (:func:`graft_text_layer`, as OCRmyPDF does): each page that
OCR read gets its lines as a form XObject laid over it, and nothing of the source is rendered
or re-encoded. The rest of this docstring is about image sources (:class:`SearchablePdf`).

Each page is the very image the worker recognised — JPEG bytes are embedded as they are (no
re-encoding), PNG losslessly — on a page sized from the image's pixels and DPI
(points = pixels × 72 / DPI), turned by the rotation the engine applied so it reads upright.
Each recognised line is written in render mode 3 (invisible, as OCRmyPDF and Tesseract do)
in a font whose glyph box fills the line's box: the font size makes the glyphs as tall as the
line, a horizontal scale stretches the string to the line's width, and a rotation follows the
line's angle. Selecting or searching text in a viewer then highlights the words in place.

Fonts: a line whose characters are all in WinAnsiEncoding (Latin-1 and the Windows
punctuation: nearly every line of Western documents) is written straight into one content
stream per page in the standard Helvetica, not embedded — invisible text needs no glyph
outlines and every reader knows Helvetica's metrics — which costs a few string operations per
line (MuPDF's TextWriter merges resources on every call: 7x slower on a receipt page). Other
lines go through TextWriter: Helvetica (Nimbus Sans, embedded and subset) for Cyrillic and
Greek, Droid Sans Fallback (PyMuPDF's built-in CJK font, subset) for the rest. Text in scripts
neither font covers is placed but will not extract faithfully.

A page without an image (the splitter could not read it, or the image is gone) becomes a page
saying so in visible text, so page numbers stay those of the source.

Memory: images are fetched one page at a time, but MuPDF holds the output document until it
is written, so memory grows with the size of the output file (not with decoded pixels).
"""

from __future__ import annotations

import io
import logging
import math
import os
from collections.abc import Callable, Collection, Iterable, Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import Protocol

from PIL import Image

from ocrstream.processors.mupdf import pymupdf
from ocrstream.processors.ocr.types import Line, PageOCR
from ocrstream.processors.split_pdf import quiet_mupdf
from ocrstream.settings import LimitsSettings

log = logging.getLogger(__name__)

DEFAULT_DPI = 300.0
MAX_PAGE_PT = 14_400.0  # PDF's largest page: 200 inches
MIN_PAGE_PT = 3.0
LETTER_PT = (612.0, 792.0)
NOTE_COLOR = (0.35, 0.35, 0.35)


@dataclass(frozen=True, slots=True)
class PageImage:
    """An encoded page image and its resolution (``dpi`` 0: unknown, 300 is assumed)."""

    data: bytes
    dpi: float = 0.0


#: Returns the image of a page (1-based), or None when there is none.
ImageSource = Callable[[int], PageImage | None]


class _Fonts:
    def __init__(self) -> None:
        self.latin = pymupdf.Font("helv")
        self.cjk = pymupdf.Font("cjk")
        self._advance: dict[str, float] = {}

    def for_text(self, text: str) -> pymupdf.Font:
        latin = self.latin
        return latin if all(latin.has_glyph(ord(c)) for c in text) else self.cjk

    def latin_length(self, text: str) -> float:
        """The width of ``text`` in Helvetica at size 1 (cached per character)."""
        advance = self._advance
        total = 0.0
        for c in text:
            width = advance.get(c)
            if width is None:
                width = advance[c] = float(self.latin.glyph_advance(ord(c)))
            total += width
        return total


def _win_ansi(text: str) -> bytes | None:
    """``text`` as an escaped PDF string in WinAnsiEncoding, or None if it has other
    characters (those lines go through MuPDF's text writer and an embedded font)."""
    try:
        raw = text.encode("cp1252")
    except UnicodeEncodeError:
        return None
    out = bytearray(b"(")
    for byte in raw:
        if byte in b"()\\":
            out += b"\\" + bytes((byte,))
        elif 32 <= byte < 127:
            out.append(byte)
        else:
            out += b"\\%03o" % byte
    out += b")"
    return bytes(out)


@dataclass(frozen=True, slots=True)
class _Placement:
    """Where a line's glyphs go, in page space (points, y down): the baseline's start, the
    unit vector along it, the line's length, and the font size that makes the font's glyph
    box (ascender to descender) as tall as the line."""

    origin: pymupdf.Point
    along: tuple[float, float]
    length: float
    fontsize: float


def _image_size(data: bytes) -> tuple[int, int]:
    """The pixel size from the image header, without decoding the pixels."""
    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
    return int(width), int(height)


def _unskew(points: list[tuple[float, float]], skew: float, width: int, height: int) -> None:
    """Undo the engine's deskew (``skew`` degrees counter-clockwise about the centre)."""
    if not skew:
        return
    angle = math.radians(skew)  # the inverse of a CCW turn on screen (y down) is this rotation
    c, s = math.cos(angle), math.sin(angle)
    cx, cy = width / 2.0, height / 2.0
    for i, (x, y) in enumerate(points):
        dx, dy = x - cx, y - cy
        points[i] = (cx + c * dx - s * dy, cy + s * dx + c * dy)


def _quad(
    polygon: tuple[tuple[float, float], ...] | list[tuple[float, float]],
) -> list[tuple[float, float]]:
    """Four corners, clockwise from top-left; other polygons by their bounding box."""
    points = [(float(x), float(y)) for x, y in polygon]
    if len(points) == 4:
        return points
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return [(min(xs), min(ys)), (max(xs), min(ys)), (max(xs), max(ys)), (min(xs), max(ys))]


_LATIN_RESOURCE = "helv"  # PyMuPDF's name for the standard Helvetica, WinAnsiEncoding


def _show(where: _Placement, natural: float, page_height: float, text: bytes) -> bytes:
    """``Tf Tm Tj`` for one line: glyphs as tall as the line, stretched to its length, turned
    along it. PDF space has y up, so the page's y and the direction's y change sign."""
    fontsize = where.fontsize
    ux, uy = where.along[0], -where.along[1]
    stretch = where.length / (natural * fontsize)
    x, y = where.origin.x, page_height - where.origin.y
    return b"/%s %.3f Tf %.5f %.5f %.5f %.5f %.3f %.3f Tm %s Tj\n" % (
        _LATIN_RESOURCE.encode(),
        fontsize,
        stretch * ux,
        stretch * uy,
        -uy,
        ux,
        x,
        y,
        text,
    )


class SearchablePdf:
    """Builds a searchable PDF one page at a time; ``tobytes()`` or ``save()`` at the end."""

    def __init__(self, title: str | None = None) -> None:
        quiet_mupdf()
        self._doc = pymupdf.open()
        self._fonts = _Fonts()
        self.embeds_fonts = False  # a line went through TextWriter: its font wants subsetting
        self._doc.set_metadata(
            {"producer": "ocrstream", "creator": "ocrstream", "title": title or ""}
        )

    @property
    def page_count(self) -> int:
        return int(self._doc.page_count)

    def add_page(self, page_no: int, result: PageOCR | None, image: PageImage | None) -> None:
        """Append page ``page_no``: its image with ``result``'s lines, or a note."""
        size = None
        if image is not None:
            try:
                size = _image_size(image.data)
            except (OSError, ValueError, SyntaxError):
                size = None
        if image is None or size is None or min(size) <= 0:
            self._note_page(page_no, result)
            return
        rotation = round((result.rotation if result else 0) / 90) * 90 % 360
        width, height = (size[1], size[0]) if rotation in (90, 270) else size
        scale = 72.0 / (image.dpi if image.dpi > 0 else DEFAULT_DPI)
        scale = min(scale, MAX_PAGE_PT / max(width, height))
        page = self._doc.new_page(
            width=max(width * scale, MIN_PAGE_PT), height=max(height * scale, MIN_PAGE_PT)
        )
        try:
            page.insert_image(
                page.rect, stream=image.data, rotate=(-rotation) % 360, keep_proportion=False
            )
        except Exception:  # an image MuPDF cannot embed: the page says so instead
            log.warning("page %d: the image cannot be embedded", page_no, exc_info=True)
            self._doc.delete_page(-1)
            self._note_page(page_no, result)
            return
        if result is not None and result.lines and result.width > 0 and result.height > 0:
            to_page = pymupdf.Matrix(
                page.rect.width / result.width, 0, 0, page.rect.height / result.height, 0, 0
            )
            self._text_layer(page, result, to_page)

    def add_text_page(
        self, width: float, height: float, result: PageOCR, to_page: pymupdf.Matrix
    ) -> int | None:
        """Append a page of ``width`` × ``height`` points holding only ``result``'s invisible
        lines, mapped from its pixels by ``to_page``; its index, or None when no line was
        placed (the page is not kept)."""
        page = self._doc.new_page(width=width, height=height)
        self._text_layer(page, result, to_page)
        if not page.get_contents():
            self._doc.delete_page(-1)
            return None
        return int(page.number)

    @property
    def document(self) -> pymupdf.Document:
        return self._doc

    def _text_layer(self, page: pymupdf.Page, result: PageOCR, to_page: pymupdf.Matrix) -> None:
        """Lines in WinAnsi go into one content stream of the page, in the standard Helvetica
        (nothing embedded; a few string operations per line); any other line through
        MuPDF's TextWriter with an embedded, subset font (slower: a resource merge per line).
        ``to_page`` maps ``result``'s pixels to the page (points, y down)."""
        page_height = page.rect.height  # MuPDF bounds the page on every .rect
        latin = self._fonts.latin
        ops: list[bytes] = []
        for line in result.lines:
            text = line.text.strip()
            if not text:
                continue
            encoded = _win_ansi(text)
            if encoded is None:  # keep the reading order: what came before goes first
                if ops:
                    self._append_stream(page, b"".join(ops))
                    ops.clear()
                font = self._fonts.for_text(text)
                self._write_line(page, text, font, self._place(line, to_page, result, font))
                continue
            where = self._place(line, to_page, result, latin)
            natural = self._fonts.latin_length(text)
            if where is None or natural <= 0:
                continue
            ops.append(_show(where, natural, page_height, encoded))
        if ops:
            self._append_stream(page, b"".join(ops))

    @staticmethod
    def _place(
        line: Line, to_page: pymupdf.Matrix, result: PageOCR, font: pymupdf.Font
    ) -> _Placement | None:
        # plain floats: PyMuPDF's Point and Matrix arithmetic cost ~8 µs an operation, which
        # was half the time of a page's text layer
        points = _quad(line.polygon)
        _unskew(points, result.skew, result.width, result.height)
        a, b, c, d, e, f = to_page.a, to_page.b, to_page.c, to_page.d, to_page.e, to_page.f
        (ulx, uly), (urx, ury), (lrx, lry), (llx, lly) = (
            (a * x + c * y + e, b * x + d * y + f) for x, y in points
        )
        alx, aly = (urx - ulx + lrx - llx) * 0.5, (ury - uly + lry - lly) * 0.5
        length = math.hypot(alx, aly)
        left = math.hypot(ulx - llx, uly - lly)
        height = (left + math.hypot(urx - lrx, ury - lry)) * 0.5
        if length < 0.5 or height < 0.5:
            return None
        ascender, descender = font.ascender, font.descender
        fontsize = height / max(ascender - descender, 0.1)
        lift = -descender * fontsize / max(left, 1e-6)  # along the left edge, upwards
        origin = pymupdf.Point(llx + (ulx - llx) * lift, lly + (uly - lly) * lift)
        return _Placement(origin, (alx / length, aly / length), length, fontsize)

    def _write_line(
        self, page: pymupdf.Page, text: str, font: pymupdf.Font, where: _Placement | None
    ) -> None:
        if where is None:
            return
        fontsize = where.fontsize
        natural = font.text_length(text, fontsize=fontsize)
        if natural <= 0:
            return
        angle = math.degrees(math.atan2(where.along[1], where.along[0]))
        writer = pymupdf.TextWriter(page.rect)
        writer.append(where.origin, text, font=font, fontsize=fontsize)
        # morph works in PDF space (y up): a clockwise turn on the page is a negative angle
        stretch = pymupdf.Matrix(where.length / natural, 0, 0, 1, 0, 0) * pymupdf.Matrix(-angle)
        writer.write_text(page, render_mode=3, morph=(where.origin, stretch))
        self.embeds_fonts = True

    def _append_stream(self, page: pymupdf.Page, body: bytes) -> None:
        """Add ``body`` (text operators in /F_LATIN) as one more content stream of ``page``."""
        page.insert_font(fontname=_LATIN_RESOURCE, encoding=pymupdf.TEXT_ENCODING_LATIN)
        doc = self._doc
        xref = doc.get_new_xref()
        doc.update_object(xref, "<<>>")
        doc.update_stream(xref, b"q BT 3 Tr " + body + b"ET Q\n", compress=True)
        contents = " ".join(f"{x} 0 R" for x in (*page.get_contents(), xref))
        doc.xref_set_key(page.xref, "Contents", f"[{contents}]")

    def _note_page(self, page_no: int, result: PageOCR | None) -> None:
        if result is not None and result.width > 0 and result.height > 0:
            scale = min(72.0 / DEFAULT_DPI, MAX_PAGE_PT / max(result.width, result.height))
            width, height = result.width * scale, result.height * scale
        else:
            width, height = LETTER_PT
        page = self._doc.new_page(width=max(width, 240.0), height=max(height, 72.0))
        page.insert_text(
            (24, 36), f"page {page_no} could not be read", fontsize=12, color=NOTE_COLOR
        )
        if result is not None and result.error_code:
            page.insert_text((24, 54), f"reason: {result.error_code}", fontsize=9, color=NOTE_COLOR)

    def tobytes(self) -> bytes:
        """The finished PDF (fonts subset, unused objects dropped, streams compressed)."""
        if self.embeds_fonts:
            self._doc.subset_fonts()
        data: bytes = self._doc.tobytes(garbage=1, deflate=True)
        return data

    def save(self, path: str | os.PathLike[str]) -> None:
        if self.embeds_fonts:
            self._doc.subset_fonts()
        self._doc.save(os.fspath(path), garbage=1, deflate=True)

    def close(self) -> None:
        self._doc.close()

    def __enter__(self) -> SearchablePdf:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build_searchable_pdf(
    page_count: int,
    results: Mapping[int, PageOCR],
    get_image: ImageSource,
    *,
    title: str | None = None,
) -> bytes:
    """The searchable PDF of a document: pages 1..``page_count``, each image fetched lazily."""
    with SearchablePdf(title) as pdf:
        for page_no in range(1, page_count + 1):
            pdf.add_page(page_no, results.get(page_no), get_image(page_no))
        return pdf.tobytes()


class PageWithImage(Protocol):
    """What :func:`images_from_pages` needs of a page (a ``SplitPage`` has it)."""

    @property
    def page_no(self) -> int: ...
    @property
    def data(self) -> bytes: ...
    @property
    def dpi(self) -> float: ...


def images_from_pages(pages: Iterable[PageWithImage]) -> ImageSource:
    """An :data:`ImageSource` over pages in increasing order — such as
    :func:`ocrstream.processors.split.iter_pages` run on the source again, which yields the
    same bytes the worker recognised. Each call advances the iterator to the page asked for,
    so pages must be asked for in increasing order; a page never yielded, or without data,
    gives None."""
    iterator = iter(pages)
    current: list[PageWithImage] = []

    def get(page_no: int) -> PageImage | None:
        while not current or current[0].page_no < page_no:
            item = next(iterator, None)
            if item is None:
                return None
            current[:] = [item]
        item = current[0]
        if item.page_no != page_no or not item.data:
            return None
        return PageImage(item.data, float(item.dpi))

    return get


class UnfitSourceError(ValueError):
    """The source PDF has a page MuPDF cannot load (a broken page tree): grafting would keep
    it broken, so the searchable PDF is built from the page images instead."""


def _lay_over(page: pymupdf.Page, layers: pymupdf.Document, index: int) -> None:
    """Put layer page ``index`` over ``page``, both unrotated (show_pdf_page places the
    layer as if the page had no ``/Rotate``)."""
    if not page.is_wrapped:
        page.wrap_contents()  # the source's graphics state must not leak into the layer
    rotation = page.rotation
    if rotation:
        page.set_rotation(0)
    try:
        page.show_pdf_page(page.rect, layers, index, keep_proportion=False)
    finally:
        if rotation:
            page.set_rotation(rotation)


def graft_text_layer(
    source: str | os.PathLike[str],
    results: Mapping[int, PageOCR],
    *,
    dpi: int,
    limits: LimitsSettings,
) -> bytes:
    """document.pdf for a PDF source: the source itself, every page as it was (vector content,
    images in their own encoding, annotations, links, outline and metadata kept), with each
    page of ``results`` given its recognised lines as an invisible text layer, as OCRmyPDF
    does. Pages not in ``results`` (failed ones, those read from their own text layer) stay as
    they are.

    Each page's layer is built on a page of its own, in the page's unrotated coordinates
    (:meth:`~ocrstream.processors.split_pdf.PdfDocument.pixel_space` says where the image the
    worker read lies on the page, whatever its crop box and ``/Rotate``), then placed over the
    source page as a form XObject; fonts are subset once for the whole document. Nothing is
    decoded or rendered. Raises what the splitter raises on a source it cannot open, and
    :class:`UnfitSourceError` on one with a page that cannot be loaded at all."""
    from ocrstream.processors.split_pdf import PdfDocument
    from ocrstream.processors.textlayer import unrotated_rect

    pdf = PdfDocument(None, os.fspath(source), limits)
    layers = SearchablePdf()
    try:
        doc = pdf.document
        for number in range(pdf.page_count):
            try:
                doc.load_page(number)
            except Exception as e:  # a page MuPDF cannot even load: no viewer will show it
                raise UnfitSourceError(f"page {number + 1} cannot be loaded: {e}") from e
        placed: list[tuple[int, int]] = []
        for page_no in sorted(results):
            result = results[page_no]
            if not 1 <= page_no <= pdf.page_count or not result.lines:
                continue
            if result.width <= 0 or result.height <= 0:
                continue
            try:
                to_view, width, height = pdf.pixel_space(page_no - 1, dpi)
            except Exception:  # a page the splitter failed on too: it stays as it is
                log.warning("page %d: no text layer (the page cannot be read)", page_no,
                            exc_info=True)  # fmt: skip
                continue
            affine, source_w, source_h = result.to_source()
            to_source = pymupdf.Matrix(*affine)
            # the worker's image was split at this DPI too; if not, stretch it over the page
            fit = pymupdf.Matrix(width / source_w, 0, 0, height / source_h, 0, 0)
            # the layer is drawn unrotated: show_pdf_page places it on the page unturned
            page = doc.load_page(page_no - 1)
            to_unrotated = to_source * fit * to_view * page.derotation_matrix
            box = unrotated_rect(page)
            index = layers.add_text_page(box.width, box.height, result, to_unrotated)
            if index is not None:
                placed.append((page_no - 1, index))
        if layers.embeds_fonts:
            layers.document.subset_fonts()
        for page_index, layer_index in placed:
            try:
                _lay_over(doc.load_page(page_index), layers.document, layer_index)
            except Exception:  # a page MuPDF cannot edit keeps its content, without a layer
                log.warning("page %d: the text layer cannot be added", page_index + 1,
                            exc_info=True)  # fmt: skip
        data: bytes = doc.tobytes(garbage=1, deflate=True)
        return data
    finally:
        layers.close()
        pdf.close()


def source_searchable_pdf(
    source: str | os.PathLike[str],
    page_count: int,
    results: Mapping[int, PageOCR],
    *,
    own_text: Collection[int] = (),
    dpi: int,
    limits: LimitsSettings,
    title: str | None = None,
) -> bytes:
    """document.pdf of the file at ``source``, whatever its kind: a PDF gets the text layer
    grafted onto its own pages (:func:`graft_text_layer`; ``own_text``, the pages answered
    from their own text layer, are left as they are; a PDF with a page MuPDF cannot load is
    treated as an image source), an image source becomes a PDF of the
    very images the worker read, split again with the same ``dpi`` and ``limits``
    (:func:`build_searchable_pdf`)."""
    from ocrstream.processors.split import PDF, iter_pages, sniff

    with open(source, "rb") as fp:
        is_pdf = sniff(fp.read(1024)) == PDF
    if is_pdf:
        skip = set(own_text)
        recognised = {n: r for n, r in results.items() if n not in skip and r.status != "failed"}
        try:
            return graft_text_layer(source, recognised, dpi=dpi, limits=limits)
        except UnfitSourceError as e:
            log.warning("the searchable PDF is built from the page images: %s", e)
    pages = iter_pages(os.fspath(source), None, limits, dpi=dpi)
    with closing(pages):  # type: ignore[type-var]
        return build_searchable_pdf(page_count, results, images_from_pages(pages), title=title)
