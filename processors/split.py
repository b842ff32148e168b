"""Splitting a scanned document into page images: pure, no Kafka, no store.

    >>> limits = LimitsSettings()
    >>> page_count = probe(data, "application/pdf", limits)   # or raises a PoisonError
    >>> for page in iter_pages(data, "application/pdf", limits, dpi=300):
    ...     send(page)                                          # one page in memory at a time

What a document is comes from its first bytes, never from its name or declared content type
(which is only quoted in messages). Limits are checked in the order that keeps allocations
small: the file size (from ``stat`` or ``len``) before it is opened, the page count before
any page is loaded, each page's pixels before it is decoded or rendered.

A document that cannot be split raises a :class:`~ocrstream.errors.PoisonError` subclass whose
``code`` is a :class:`~ocrstream.errors.ReasonCode` — from :func:`probe`, or from
:func:`iter_pages` before its first page: :class:`~ocrstream.errors.UnreadableDocumentError`
(``corrupt_pdf``, ``encrypted_pdf``, ``zero_pages``, ``unsupported_type``,
``unreadable_image``) or :class:`~ocrstream.errors.LimitExceededError` (``file_too_large``,
``too_many_pages``, ``page_too_large`` for an image file that is one huge image). A page that
cannot be produced is a :class:`SplitPage` with ``error_code`` set (``page_too_large``,
``corrupt_pdf``, ``unreadable_image``) and the document goes on. Nothing else escapes.

PyMuPDF is imported with the first PDF (:mod:`~ocrstream.processors.split_pdf`), not with this
module: an image file does not pay its ~0.1-0.2 s import (``ocrstream ocr page.png``).

The work is CPU-bound and synchronous: call it from a worker thread (one split at a time per
process — MuPDF is not thread-safe) or a process, never on an event loop.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import closing
from typing import TYPE_CHECKING, TypeAlias

from ocrstream.errors import ReasonCode
from ocrstream.processors.split_image import ImageDocument
from ocrstream.processors.split_types import (
    DEFAULT_POLICY,
    Source,
    SplitPage,
    TextLayerPolicy,
    over_limit,
    unreadable,
)
from ocrstream.settings import LimitsSettings

if TYPE_CHECKING:
    from ocrstream.processors.split_pdf import PdfDocument

__all__ = ["MEDIA_TYPES", "ReasonCode", "SplitPage", "iter_pages", "one_page", "probe", "sniff"]

PDF = "application/pdf"
#: The media types accepted as documents.
MEDIA_TYPES = (
    PDF,
    "image/jpeg",
    "image/png",
    "image/tiff",
    "image/bmp",
    "image/webp",
    "image/gif",
    "image/jp2",
)
_HEAD = 1024  # a PDF header may follow up to 1 KiB of junk, as readers allow


def sniff(head: bytes) -> str | None:
    """The media type of a document from its first bytes (1 KiB is enough), or None."""
    if head[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return "image/png"
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return "image/tiff"
    if head[:2] == b"BM" and len(head) >= 26:
        return "image/bmp"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:12] == b"\x00\x00\x00\x0cjP  \r\n\x87\n" or head[:4] == b"\xff\x4f\xff\x51":
        return "image/jp2"
    if b"%PDF-" in head[:_HEAD]:
        return PDF
    return None


_Document: TypeAlias = "PdfDocument | ImageDocument"


def _open(
    source: Source,
    content_type: str | None,
    limits: LimitsSettings,
    policy: TextLayerPolicy,
) -> _Document:
    data: bytes | None = None
    path: str | None = None
    if isinstance(source, bytes | bytearray | memoryview):
        data = source if isinstance(source, bytes) else bytes(source)
        size, head = len(data), data[:_HEAD]
    else:
        path = os.fspath(source)
        try:
            size = os.stat(path).st_size
            with open(path, "rb") as fp:
                head = fp.read(_HEAD)
        except OSError as e:
            raise unreadable(ReasonCode.UNSUPPORTED_TYPE, f"the file cannot be read: {e}") from e
    if size > limits.max_file_bytes:
        raise over_limit(
            ReasonCode.FILE_TOO_LARGE,
            f"the file is {size} bytes, more than the limit of {limits.max_file_bytes}",
        )
    media_type = sniff(head)
    if media_type is None:
        declared = f" (declared {content_type})" if content_type else ""
        what = "the file is empty" if size == 0 else "the bytes are not a PDF or an image"
        raise unreadable(ReasonCode.UNSUPPORTED_TYPE, f"{what}{declared}")
    if media_type == PDF:
        from ocrstream.processors.split_pdf import PdfDocument

        return PdfDocument(data, path, limits, policy)
    return ImageDocument(data, path, media_type, limits)


def probe(
    source: Source,
    content_type: str | None,
    limits: LimitsSettings,
) -> int:
    """The document's page count, after every document-level check; nothing is rendered.

    Raises a :class:`~ocrstream.errors.PoisonError` subclass with a reason code instead.
    """
    doc = _open(source, content_type, limits, DEFAULT_POLICY)
    try:
        return doc.page_count
    finally:
        doc.close()


def iter_pages(
    source: Source,
    content_type: str | None,
    limits: LimitsSettings,
    dpi: int = 300,
    use_text_layer: bool = False,
    *,
    text_policy: TextLayerPolicy = DEFAULT_POLICY,
) -> Iterator[SplitPage]:
    """The document's pages, one at a time, in order; the document is opened once.

    The document-level checks run on the first ``next()``: a bad document raises there, before
    any page. ``dpi`` applies to pages that are rendered (a page that is one scanned image keeps
    its own resolution). With ``use_text_layer``, pages whose own text layer is usable carry it
    in ``text_lines`` (PDF only).
    """
    if dpi <= 0:
        raise ValueError(f"dpi must be positive, not {dpi}")
    doc = _open(source, content_type, limits, text_policy)
    with closing(doc):
        if not isinstance(doc, ImageDocument):
            yield from doc.pages(dpi, use_text_layer)
        else:
            yield from doc.pages()


def one_page(
    source: Source,
    content_type: str | None,
    limits: LimitsSettings,
    page_no: int,
    dpi: int = 300,
) -> SplitPage:
    """Page ``page_no`` (from 1) alone, as :func:`iter_pages` yields it (no text layer): the
    document-level checks run first; a number past the last page raises ``IndexError``."""
    if dpi <= 0:
        raise ValueError(f"dpi must be positive, not {dpi}")
    doc = _open(source, content_type, limits, DEFAULT_POLICY)
    with closing(doc):
        if not 1 <= page_no <= doc.page_count:
            raise IndexError(f"page {page_no} of a document of {doc.page_count} pages")
        if not isinstance(doc, ImageDocument):
            return doc.page(page_no - 1, dpi, False)
        return doc.page(page_no - 1)
