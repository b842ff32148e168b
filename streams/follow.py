"""Following documents to their end on ``ocr.documents.v1`` and ``ocr.progress.v1``: the loop
under the SDK's ``wait_many`` and ``ocrstream reprocess``'s wait (each assigns its own consumer:
from the beginning, or from a time)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from ocrstream.errors import PoisonError
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import DocumentEvent


class _Polling(Protocol):
    def poll(self, timeout: float) -> Any: ...


def until_terminal(
    consumer: _Polling,
    codec: Codec,
    pending: set[str],
    deadline: float | None,
    *,
    accept: Callable[[Any], bool],
    on_update: Callable[[Any], None] | None = None,
) -> dict[str, DocumentEvent]:
    """Poll ``consumer`` until every doc_id in ``pending`` has a terminal event that ``accept``
    takes, or ``deadline`` (``time.monotonic()``) passes. Records of other documents, ones
    ``accept`` refuses and undecodable ones are skipped; each accepted record goes to
    ``on_update``. Found doc_ids leave ``pending`` (the caller's set). The callers poll through
    their consumer's :class:`~ocrstream.streams.fetch_watch.FetchWatch`."""
    found: dict[str, DocumentEvent] = {}
    while pending and (deadline is None or time.monotonic() < deadline):
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        try:
            record = codec.decode(msg.value() or b"")
        except PoisonError:
            continue
        if getattr(record, "doc_id", None) not in pending or not accept(record):
            continue
        if on_update is not None:
            on_update(record)
        if isinstance(record, DocumentEvent):
            found[record.doc_id] = record
            pending.discard(record.doc_id)
    return found
