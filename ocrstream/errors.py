"""One small hierarchy of errors.

- :class:`RetriableError`: try again later (a store or broker that is down, a timeout).
- :class:`PoisonError`: this input can never succeed; it goes to the DLQ or ends its
  document/page ``failed``, carrying a stable reason ``code``.
- :class:`FatalError`: the process cannot go on (a required GPU is missing, bad config); it
  exits non-zero and is restarted by its supervisor.

Third-party errors are wrapped at the boundary with ``raise ... from e``.
"""

from __future__ import annotations


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
