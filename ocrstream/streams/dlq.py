"""Dead letters: a record that can never be processed goes to ``ocr.dlq.v1`` with its origin.

The DLQ keeps the original key, value bytes and headers unchanged, so a fixed consumer can
replay it; the key of the dead letter is the original key.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from ocrstream.errors import OcrstreamError
from ocrstream.schemas.records import DeadLetter, utc_now


def _as_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode()


def _headers(headers: Iterable[tuple[str, Any]] | dict[str, Any] | None) -> dict[str, bytes]:
    if not headers:
        return {}
    items = headers.items() if isinstance(headers, dict) else headers
    return {str(k): _as_bytes(v) or b"" for k, v in items}


def error_code(exc: BaseException) -> str:
    return exc.code if isinstance(exc, OcrstreamError) else "internal_error"


def dead_letter(
    *,
    topic: str,
    partition: int,
    offset: int,
    key: Any,
    value: Any,
    headers: Iterable[tuple[str, Any]] | dict[str, Any] | None,
    stage: str,
    exc: BaseException,
    timestamp_ms: int | None = None,
) -> DeadLetter:
    """The dead letter for one record that failed in ``stage`` with ``exc``."""
    ts = (
        datetime.fromtimestamp(timestamp_ms / 1000, UTC)
        if timestamp_ms is not None and timestamp_ms > 0
        else None
    )
    return DeadLetter(
        topic=topic,
        partition=partition,
        offset=offset,
        key=_as_bytes(key),
        value=_as_bytes(value),
        headers=_headers(headers),
        stage=stage,
        error_code=error_code(exc),
        error_message=f"{type(exc).__name__}: {exc}"[:4000],
        failed_at=utc_now(),
        timestamp=ts,
    )


def from_confluent(msg: Any, stage: str, exc: BaseException) -> DeadLetter:
    """The dead letter of a confluent-kafka ``Message``."""
    _, ts = msg.timestamp()
    return dead_letter(
        topic=msg.topic(),
        partition=msg.partition(),
        offset=msg.offset(),
        key=msg.key(),
        value=msg.value(),
        headers=msg.headers(),
        stage=stage,
        exc=exc,
        timestamp_ms=ts,
    )
