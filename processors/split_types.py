"""The splitter's record, :class:`SplitPage`, and the errors it raises."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from ocrstream.errors import LimitExceededError, ReasonCode, UnreadableDocumentError
from ocrstream.processors.ocr.types import Line

#: A document: its bytes, or a path to it.
Source = bytes | bytearray | memoryview | str | os.PathLike[str]

#: How a page image was made: the original encoded image passed through untouched, an embedded
#: image decoded once into a lossless or compact form, or the page rendered at a DPI.
Origin = Literal["passthrough", "converted", "rendered", "none"]


@dataclass(frozen=True, slots=True)
class TextLayerPolicy:
    """When a PDF page's own text is good enough to skip OCR
    (:mod:`~ocrstream.processors.textlayer`)."""

    min_chars: int = 20  # non-space characters on the page
    max_bad_ratio: float = 0.02  # U+FFFD, control, private-use, unassigned
    min_alnum_ratio: float = 0.6  # letters and digits among non-space characters
    max_short_token_ratio: float = 0.5  # one-character tokens among all tokens
    image_page_ratio: float = 0.5  # images covering this much of the page make it a scan …
    min_text_cover_on_scan: float = 0.05  # … whose text must then cover this much of it


DEFAULT_POLICY = TextLayerPolicy()


@dataclass(frozen=True, slots=True)
class SplitPage:
    """One page of a document, ready for a PageTask (or a PageResult when it failed or
    was answered from the PDF's own text layer).

    ``data`` is the encoded page image (``encoding`` ``jpeg`` or ``png``), ``width`` × ``height``
    pixels, already upright (the PDF page rotation applied). ``dpi`` is 0 when unknown (an
    image without resolution metadata). ``text_lines`` is set only when the caller asked for the
    text layer and the page has a usable one: the page then needs no OCR, and ``data`` is still
    its image (for the searchable PDF). A page that cannot be read has ``error_code`` set and
    no image; the rest of the document goes on.
    """

    page_no: int
    page_count: int
    encoding: str
    data: bytes
    width: int
    height: int
    dpi: float
    origin: Origin = "rendered"
    text_lines: tuple[Line, ...] | None = None
    # with text_lines: the page's vector rules and image placements, boxes in page pixels
    # (ruled tables and figures of born-digital pages in layout mode)
    text_rules: tuple[tuple[float, float, float, float], ...] = ()
    text_images: tuple[tuple[float, float, float, float], ...] = ()
    error_code: str | None = None
    error_message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_code is None

    @classmethod
    def failed(cls, page_no: int, page_count: int, code: str, message: str) -> SplitPage:
        return cls(
            page_no=page_no,
            page_count=page_count,
            encoding="",
            data=b"",
            width=0,
            height=0,
            dpi=0.0,
            origin="none",
            error_code=str(code),
            error_message=message,
        )

    def __repr__(self) -> str:  # never print megabytes of image bytes in a log line
        state = f"error={self.error_code}" if self.error_code else f"{len(self.data)} B"
        return (
            f"SplitPage({self.page_no}/{self.page_count} {self.origin} {self.encoding} "
            f"{self.width}x{self.height}@{self.dpi:g} {state})"
        )


class PageError(Exception):
    """Internal: one page cannot be produced; becomes a failed :class:`SplitPage`."""

    def __init__(self, code: ReasonCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def unreadable(code: ReasonCode, message: str) -> UnreadableDocumentError:
    return UnreadableDocumentError(message, code=str(code))


def over_limit(code: ReasonCode, message: str) -> LimitExceededError:
    return LimitExceededError(message, code=str(code))
