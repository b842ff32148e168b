"""Splitting a PDF into page images with PyMuPDF, one page at a time.

Per page, in this order, and before any pixel is decoded:

1. Every image the page uses is checked against ``max_page_pixels`` by the size its dictionary
   declares (``/Width`` × ``/Height``, soft masks included). A page that would need a bigger
   decode — a 35,000 × 35,000 JBIG2 page, a Flate bomb — fails with ``page_too_large``; the
   document goes on.
2. A page that is exactly one image covering the page (a scan: no visible text, no vector
   drawing, no annotation, no clip smaller than the page) is taken from that image:

   - an upright baseline JPEG in gray or RGB without masks is passed through byte for byte;
   - any other upright image without a mask (JBIG2, CCITT fax, Flate, JPEG 2000, CMYK,
     indexed …) is decoded once at its own resolution and stored as PNG — 1-bit where the source
     is 1-bit — or as JPEG where the source was already lossy;
   - a rotated or masked one is rendered at the image's own resolution.

3. Any other page is rendered at the requested DPI (lower if that would exceed
   ``max_page_pixels``), gray when it has no colour, as PNG (JPEG where a photograph dominates).

The page's ``/Rotate`` is always applied, so every image is upright as a viewer shows it.

PyMuPDF is not thread-safe: one document is used by one thread at a time (a generator may move
between executor threads, but two splits must not run at once in threads of one process).
"""

from __future__ import annotations

import io
import logging
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from ocrstream.errors import ReasonCode
from ocrstream.processors import split_encode
from ocrstream.processors.mupdf import pymupdf
from ocrstream.processors.split_types import (
    Origin,
    PageError,
    SplitPage,
    over_limit,
    unreadable,
)
from ocrstream.processors.textlayer import (
    DEFAULT_POLICY,
    TextLayerPolicy,
    unrotated_rect,
    usable_lines,
)
from ocrstream.settings import LimitsSettings

log = logging.getLogger(__name__)

FULL_PAGE_COVER = 0.95  # an image covering this much of the page (and not much more) is the page
LOSSY_FILTERS = frozenset({"DCTDecode", "JPXDecode"})
PASSTHROUGH_MODES = frozenset({"L", "RGB"})
_EXIF_ORIENTATION = 0x0112
#: MuPDF warnings that mean the page renders blank because its content is gone (a truncated or
#: damaged file); such a page fails instead of passing as an empty page.
LOST_CONTENT = ("cannot load content stream",)


def quiet_mupdf() -> None:
    """Keep MuPDF's messages off stderr; they are collected and logged per page instead."""
    pymupdf.TOOLS.mupdf_display_errors(False)
    pymupdf.TOOLS.mupdf_display_warnings(False)


def _drain_warnings(where: str) -> str:
    text: str = pymupdf.TOOLS.mupdf_warnings(reset=True) or ""
    if text:
        log.debug("MuPDF warnings (%s): %s", where, text.replace("\n", " | ")[:2000])
    return text


@dataclass(frozen=True, slots=True)
class _Image:
    """One image in a page's resources, as its dictionary declares it (nothing decoded)."""

    xref: int
    smask: int
    width: int
    height: int
    bpc: int
    filter: str

    @property
    def pixels(self) -> int:
        return self.width * self.height


@dataclass(frozen=True, slots=True)
class _Rendered:
    encoding: str
    data: bytes
    width: int
    height: int
    dpi: float
    origin: Origin
    to_pixels: pymupdf.Matrix  # unrotated page coordinates -> image pixels


@dataclass(frozen=True, slots=True)
class _Plan:
    """How a page becomes its image, decided before any pixel is decoded: taken from its one
    image (``image`` set) or rendered at ``dpi``; ``to_pixels`` maps PyMuPDF's unrotated page
    coordinates to the image's pixels."""

    to_pixels: pymupdf.Matrix
    dpi: float
    image: _Image | None = None
    zoom: float = 0.0  # rendered: pixels per point
    lossy: bool = False
    gray: bool = False
    bilevel: bool = False


def fit_zoom(width_pt: float, height_pt: float, zoom: float, max_pixels: int) -> float:
    """``zoom``, lowered where the page rendered at it would exceed ``max_pixels``."""

    def pixels(z: float) -> int:
        return math.ceil(width_pt * z) * math.ceil(height_pt * z)

    if pixels(zoom) <= max_pixels:
        return zoom
    z = zoom * math.sqrt(max_pixels / pixels(zoom))
    while z > 0 and pixels(z) > max_pixels:
        z *= 0.995
    return z


class PdfDocument:
    """An open PDF whose limits have been checked; yields its pages one at a time."""

    def __init__(
        self,
        data: bytes | None,
        path: str | None,
        limits: LimitsSettings,
        policy: TextLayerPolicy = DEFAULT_POLICY,
    ) -> None:
        self._limits = limits
        self._policy = policy
        quiet_mupdf()
        try:
            if path is not None:
                doc = pymupdf.open(os.fspath(path), filetype="pdf")
            else:
                doc = pymupdf.open(stream=data, filetype="pdf")
        except Exception as e:  # hostile bytes: any failure to open is "corrupt"
            _drain_warnings("open")
            raise unreadable(ReasonCode.CORRUPT_PDF, f"the PDF cannot be opened: {e}") from e
        self._doc = doc
        try:
            self.page_count = self._check()
        except BaseException:
            doc.close()
            raise
        finally:
            _drain_warnings("open")

    def _check(self) -> int:
        doc = self._doc
        if not doc.is_pdf:
            raise unreadable(ReasonCode.CORRUPT_PDF, "the bytes start like a PDF but are not one")
        if doc.needs_pass and not doc.authenticate(""):
            raise unreadable(ReasonCode.ENCRYPTED_PDF, "the PDF is encrypted with a password")
        try:
            count = int(doc.page_count)
        except Exception as e:  # a broken page tree, whatever MuPDF raises
            raise unreadable(ReasonCode.CORRUPT_PDF, f"the page tree cannot be read: {e}") from e
        if count <= 0:
            if doc.is_repaired:
                raise unreadable(ReasonCode.CORRUPT_PDF, "no page could be recovered from the PDF")
            raise unreadable(ReasonCode.ZERO_PAGES, "the PDF has no pages")
        if count > self._limits.max_pages:
            raise over_limit(
                ReasonCode.TOO_MANY_PAGES,
                f"the PDF has {count} pages, more than the limit of {self._limits.max_pages}",
            )
        return count

    def close(self) -> None:
        self._doc.close()

    def pages(self, dpi: int, use_text_layer: bool) -> Iterator[SplitPage]:
        for index in range(self.page_count):
            page = self.page(index, dpi, use_text_layer)
            if page.origin != "passthrough":
                # MuPDF caches decoded images (up to 256 MB); a page's are not needed again
                pymupdf.TOOLS.store_shrink(100)
            yield page

    def page(self, index: int, dpi: int, use_text_layer: bool) -> SplitPage:
        page_no = index + 1
        _drain_warnings("before page")
        try:
            page = self._page(index, dpi, use_text_layer)
            warnings = _drain_warnings(f"page {page_no}")
            if any(marker in warnings for marker in LOST_CONTENT):
                raise PageError(ReasonCode.CORRUPT_PDF, "the page's content cannot be loaded")
            return page
        except PageError as e:
            code, message = e.code, str(e)
        except pymupdf.mupdf.FzErrorLimit as e:
            code, message = ReasonCode.PAGE_TOO_LARGE, f"MuPDF refused the page: {e}"
        except MemoryError:
            code, message = ReasonCode.PAGE_TOO_LARGE, "out of memory rendering the page"
        except Exception as e:  # hostile bytes: any parser failure ends this page
            log.debug("page %d failed", page_no, exc_info=True)
            code, message = ReasonCode.CORRUPT_PDF, f"the page cannot be read: {e}"
        _drain_warnings(f"page {page_no}")
        log.info("page %d/%d unreadable: %s (%s)", page_no, self.page_count, code, message)
        return SplitPage.failed(page_no, self.page_count, code, message)

    # -- one page ---------------------------------------------------------------------------

    def pixel_space(self, index: int, dpi: int) -> tuple[pymupdf.Matrix, int, int]:
        """Where page ``index``'s image, as :meth:`page` makes it at ``dpi``, lies on the page:
        the matrix from its pixels to the page as a viewer shows it (PyMuPDF's ``page.rect``
        coordinates: the crop box, ``/Rotate`` applied), and the image's width and height.
        Nothing is decoded or rendered. Raises as :meth:`page` does on a page it cannot read
        (:class:`PageError` for its limits)."""
        page = self._doc.load_page(index)
        plan, _infos = self._plan(page, dpi)
        if plan.image is not None:
            width, height = plan.image.width, plan.image.height
        else:
            size = (page.rect * pymupdf.Matrix(plan.zoom, plan.zoom)).irect
            width, height = size.width, size.height
        return ~plan.to_pixels * page.rotation_matrix, int(width), int(height)

    @property
    def document(self) -> pymupdf.Document:
        """The open PyMuPDF document (one thread at a time; see the module docstring)."""
        return self._doc

    def _plan(self, page: pymupdf.Page, dpi: float) -> tuple[_Plan, list[dict[str, Any]]]:
        box = unrotated_rect(page)
        if box.width < 1 or box.height < 1:
            raise PageError(ReasonCode.CORRUPT_PDF, f"the page box is empty: {page.rect}")
        images = self._images(page)
        infos = page.get_image_info()  # placements; without hashes nothing is decoded
        for info in infos:  # inline images are not in the resources
            self._check_pixels(int(info["width"]) * int(info["height"]), "an inline image")
        single = self._single_image(page, box, images, infos)
        if single is None:
            lossy = self._photo_dominated(box, images, infos)
            return self._render_plan(page, box, dpi, lossy=lossy), infos
        image, info = single, infos[0]
        doc = self._doc
        bbox = pymupdf.Rect(info["bbox"])
        lossy = image.filter in LOSSY_FILTERS
        masked = bool(image.smask) or _key_type(doc, image.xref, "Mask") != "null"
        stencil = _key_type(doc, image.xref, "ImageMask") != "null"
        if not _upright(page, info["transform"]) or masked or stencil:
            zoom = math.sqrt(image.pixels / max(bbox.width * bbox.height, 1e-6))
            gray, bilevel = int(info["colorspace"]) == 1, image.bpc == 1 and not masked
            plan = self._render_plan(page, box, zoom * 72, lossy=lossy, gray=gray, bilevel=bilevel)
            return plan, infos
        to_pixels = pymupdf.Matrix(image.width / bbox.width, 0, 0, image.height / bbox.height, 0, 0)
        to_pixels = pymupdf.Matrix(1, 0, 0, 1, -bbox.x0, -bbox.y0) * to_pixels
        return _Plan(to_pixels, image.width * 72 / bbox.width, image=image, lossy=lossy), infos

    def _render_plan(
        self,
        page: pymupdf.Page,
        box: pymupdf.Rect,
        dpi: float,
        *,
        lossy: bool,
        gray: bool = False,
        bilevel: bool = False,
    ) -> _Plan:
        zoom = fit_zoom(box.width, box.height, dpi / 72, self._limits.max_page_pixels)
        to_pixels = page.rotation_matrix * pymupdf.Matrix(zoom, zoom)
        return _Plan(to_pixels, zoom * 72, zoom=zoom, lossy=lossy, gray=gray, bilevel=bilevel)

    def _page(self, index: int, dpi: int, use_text_layer: bool) -> SplitPage:
        page = self._doc.load_page(index)
        plan, infos = self._plan(page, dpi)
        if plan.image is not None:
            out = self._from_image(plan.image, plan)
        else:
            out = self._render(page, plan)
        lines = None
        rules: tuple[tuple[float, float, float, float], ...] = ()
        pictures: tuple[tuple[float, float, float, float], ...] = ()
        if use_text_layer:
            boxes = [info["bbox"] for info in infos]
            lines = usable_lines(page, out.to_pixels, boxes, self._policy)
            if lines is not None:
                rules = vector_rules(page, out.to_pixels)
                pictures = tuple(_mapped(info["bbox"], out.to_pixels) for info in infos)
        return SplitPage(
            page_no=index + 1,
            page_count=self.page_count,
            encoding=out.encoding,
            data=out.data,
            width=out.width,
            height=out.height,
            dpi=round(out.dpi, 2),
            origin=out.origin,
            text_lines=lines,
            text_rules=rules,
            text_images=pictures,
        )

    def _check_pixels(self, pixels: int, what: str) -> None:
        limit = self._limits.max_page_pixels
        if pixels > limit:
            raise PageError(
                ReasonCode.PAGE_TOO_LARGE,
                f"{what} declares {pixels} pixels, more than the limit of {limit}",
            )

    def _images(self, page: pymupdf.Page) -> list[_Image]:
        doc = self._doc
        found: list[_Image] = []
        for xref, smask, width, height, bpc, _cs, _alt, _name, filt, _ref in page.get_images(
            full=True
        ):
            image = _Image(int(xref), int(smask), int(width), int(height), int(bpc), str(filt))
            self._check_pixels(image.pixels, f"image {xref}")
            if image.smask:
                w = _int_key(doc, image.smask, "Width")
                h = _int_key(doc, image.smask, "Height")
                self._check_pixels(w * h, f"soft mask {image.smask}")
            found.append(image)
        return found

    def _single_image(
        self,
        page: pymupdf.Page,
        box: pymupdf.Rect,
        images: Sequence[_Image],
        infos: Sequence[dict[str, Any]],
    ) -> _Image | None:
        """The image when the page is one image covering it and nothing visible besides."""
        if len(images) != 1 or len(infos) != 1:
            return None
        image, info = images[0], infos[0]
        if (int(info["width"]), int(info["height"])) != (image.width, image.height):
            return None
        if page.first_annot is not None or page.first_widget is not None:
            return None
        kinds = [entry[0] for entry in page.get_bboxlog()]
        if kinds.count("fill-image") != 1 or set(kinds) - {"fill-image", "ignore-text"}:
            return None
        if not _covers(pymupdf.Rect(info["bbox"]), box):
            return None
        for drawing in page.get_drawings(extended=True):
            if drawing.get("type") != "clip" or not _covers(drawing["scissor"], box, loose=True):
                return None
        return image

    def _from_image(self, image: _Image, plan: _Plan) -> _Rendered:
        raw = self._plain_jpeg(image)
        if raw is not None:
            return _Rendered(
                "jpeg", raw, image.width, image.height, plan.dpi, "passthrough", plan.to_pixels
            )
        pix = pymupdf.Pixmap(self._doc, image.xref)
        try:
            if pix.alpha:
                pix = pymupdf.Pixmap(pix, 0)
            if pix.colorspace is None or pix.colorspace.n not in (1, 3):
                pix = pymupdf.Pixmap(pymupdf.csRGB, pix)
            pixels = _pixmap_array(pix)
            encoding, data = split_encode.encode(pixels, lossy=plan.lossy, bilevel=image.bpc == 1)
        finally:
            del pix
        return _Rendered(
            encoding, data, image.width, image.height, plan.dpi, "converted", plan.to_pixels
        )

    def _plain_jpeg(self, image: _Image) -> bytes | None:
        """The raw JPEG stream when a decoder outside PDF shows what a PDF viewer shows."""
        doc = self._doc
        if image.bpc != 8 or doc.xref_get_key(image.xref, "Filter") != ("name", "/DCTDecode"):
            return None
        if _key_type(doc, image.xref, "Decode") != "null":
            return None
        raw: bytes = doc.xref_stream_raw(image.xref)
        try:
            with Image.open(io.BytesIO(raw), formats=["JPEG"]) as im:
                if im.mode not in PASSTHROUGH_MODES or im.size != (image.width, image.height):
                    return None
                if im.getexif().get(_EXIF_ORIENTATION, 1) != 1:
                    return None
        except Exception:  # not a JPEG Pillow can parse: decode it instead
            log.debug("image %d is not a plain JPEG", image.xref, exc_info=True)
            return None
        return raw

    def _render(self, page: pymupdf.Page, plan: _Plan) -> _Rendered:
        zoom = plan.zoom
        colorspace = pymupdf.csGRAY if plan.gray else pymupdf.csRGB
        pix = page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), colorspace=colorspace)
        try:
            width, height = pix.width, pix.height
            encoding, data = split_encode.encode(
                _pixmap_array(pix), lossy=plan.lossy, bilevel=plan.bilevel
            )
        finally:
            del pix
        return _Rendered(encoding, data, width, height, plan.dpi, "rendered", plan.to_pixels)

    @staticmethod
    def _photo_dominated(
        box: pymupdf.Rect, images: Sequence[_Image], infos: Sequence[dict[str, Any]]
    ) -> bool:
        """A lossy photograph covers half the page: JPEG then suits the rendered page."""
        if not any(image.filter in LOSSY_FILTERS for image in images):
            return False
        area = box.width * box.height
        return any(_area(pymupdf.Rect(info["bbox"]) & box) >= 0.5 * area for info in infos)


def _area(rect: pymupdf.Rect) -> float:
    return 0.0 if rect.is_empty else float(rect.width * rect.height)


def _covers(rect: Any, box: pymupdf.Rect, *, loose: bool = False) -> bool:
    """Whether ``rect`` covers the page box (and, unless ``loose``, not much beyond it)."""
    rect = pymupdf.Rect(rect)
    area = _area(box)
    if _area(rect & box) < FULL_PAGE_COVER * area:
        return False
    return loose or _area(rect) <= area / FULL_PAGE_COVER


def _upright(page: pymupdf.Page, transform: Sequence[float]) -> bool:
    """An image drawn unrotated and unmirrored on a page without /Rotate."""
    a, b, c, d = (float(v) for v in transform[:4])
    tiny = 1e-3 * max(abs(a), abs(d), 1.0)
    return page.rotation == 0 and a > 0 and d > 0 and abs(b) <= tiny and abs(c) <= tiny


def _key_type(doc: pymupdf.Document, xref: int, key: str) -> str:
    return str(doc.xref_get_key(xref, key)[0])


def _int_key(doc: pymupdf.Document, xref: int, key: str) -> int:
    kind, value = doc.xref_get_key(xref, key)
    try:
        return int(float(value)) if kind == "int" or kind == "float" else 0
    except ValueError:
        return 0


def _pixmap_array(pix: pymupdf.Pixmap) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The pixmap's samples as ``H×W`` or ``H×W×3`` (a view: use it before the pixmap goes)."""
    samples = np.frombuffer(pix.samples_mv, dtype=np.uint8)
    rows = samples.reshape(pix.height, pix.stride)[:, : pix.width * pix.n]
    shape = (pix.height, pix.width) if pix.n == 1 else (pix.height, pix.width, pix.n)
    return rows.reshape(shape)


#: Drawing commands looked at per page for rules; a page with more is a drawing, not a form.
MAX_DRAWINGS = 20_000


def _mapped(bbox: Any, to_pixels: pymupdf.Matrix) -> tuple[float, float, float, float]:
    rect = pymupdf.Rect(bbox) * to_pixels
    return (round(rect.x0, 1), round(rect.y0, 1), round(rect.x1, 1), round(rect.y1, 1))


def vector_rules(
    page: pymupdf.Page, to_pixels: pymupdf.Matrix
) -> tuple[tuple[float, float, float, float], ...]:
    """The boxes of the page's straight strokes and rectangles, in pixels: what ruled tables
    are drawn with (:mod:`ocrstream.processors.layout.ruled` reads them)."""
    out: list[tuple[float, float, float, float]] = []
    seen = 0
    for path in page.get_cdrawings():
        for item in path.get("items", ()):
            seen += 1
            if seen > MAX_DRAWINGS:
                return ()
            kind = item[0]
            if kind == "l":
                (x0, y0), (x1, y1) = item[1], item[2]
                out.append(_mapped((min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)), to_pixels))
            elif kind == "re":
                out.append(_mapped(item[1], to_pixels))
    return tuple(out)
