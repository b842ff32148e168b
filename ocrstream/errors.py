"""One small hierarchy of errors.

- :class:`RetriableError`: try again later (a store or broker that is down, a timeout).
- :class:`PoisonError`: this input can never succeed; it goes to the DLQ or ends its
  document/page ``failed``, carrying a stable reason ``code``.
- :class:`FatalError`: the process cannot go on (a required GPU is missing, bad config); it
  exits non-zero and is restarted by its supervisor.

Third-party errors are wrapped at the boundary with ``raise ... from e``.
"""

from __future__ import annotations

from enum import StrEnum


class OcrstreamError(Exception):
    """Base of every error ocrstream raises on purpose."""

    code: str = "internal_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


class RetriableError(OcrstreamError):
    """A transient failure: the same call may succeed later."""

    code = "retriable"


class PoisonError(OcrstreamError):
    """Input that can never be processed; it carries a stable reason code."""

    code = "poison"


class FatalError(OcrstreamError):
    """The process cannot continue (configuration, missing hardware)."""

    code = "fatal"


class InvalidDocIdError(PoisonError):
    code = "invalid_doc_id"


class LimitExceededError(PoisonError):
    code = "limit_exceeded"


class ReasonCode(StrEnum):
    """Stable reason codes for documents and pages that cannot be read (DocumentEvent.error.code,
    PageResult.error.code). Consumers may switch on them; never rename one."""

    CORRUPT_PDF = "corrupt_pdf"
    ENCRYPTED_PDF = "encrypted_pdf"
    ZERO_PAGES = "zero_pages"
    TOO_MANY_PAGES = "too_many_pages"
    FILE_TOO_LARGE = "file_too_large"
    PAGE_TOO_LARGE = "page_too_large"
    UNSUPPORTED_TYPE = "unsupported_type"
    UNREADABLE_IMAGE = "unreadable_image"
    PAGES_FAILED = "pages_failed"
    PAGES_MISSING = "pages_missing"


class UnreadableDocumentError(PoisonError):
    """A source that cannot be opened or split (corrupt, encrypted, empty, unknown type)."""

    code = ReasonCode.CORRUPT_PDF
