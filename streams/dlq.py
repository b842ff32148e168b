"""Dead letters: a record that can never be processed goes to ``ocr.dlq.v1`` with its origin.

The DLQ keeps the original key, value bytes and headers unchanged, so a fixed consumer can
replay it; the key of the dead letter is the original key. A record too big for a dead letter
to carry (the topics accept more than ocrstream's producers send: ``max_bytes``) is
dead-lettered without its value — then without its key and headers if still too big — and
the message says so; the record itself stays at its origin for the topic's retention.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from ocrstream.errors import OcrstreamError
from ocrstream.schemas.records import DeadLetter, utc_now

OVERHEAD_BYTES = 64 * 1024  # the error text, the topic name, framing


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
    max_bytes: int | None = None,
) -> DeadLetter:
    """The dead letter for one record that failed in ``stage`` with ``exc``; with ``max_bytes``
    (the producers' message limit) what doesn't fit is left out and named in the message."""
    ts = (
        datetime.fromtimestamp(timestamp_ms / 1000, UTC)
        if timestamp_ms is not None and timestamp_ms > 0
        else None
    )
    key_b, value_b, headers_d = _as_bytes(key), _as_bytes(value), _headers(headers)
    message = f"{type(exc).__name__}: {exc}"[:4000]
    if max_bytes is not None:
        room = max(0, max_bytes - OVERHEAD_BYTES)
        left_out = []
        if _size(key_b, value_b, headers_d) > room and value_b is not None:
            left_out.append(f"value ({len(value_b)} bytes)")
            value_b = None
        if _size(key_b, value_b, headers_d) > room:
            left_out.append(f"key and headers ({_size(key_b, None, headers_d)} bytes)")
            key_b, headers_d = None, {}
        if left_out:
            message += (
                f" [left out: {', '.join(left_out)}, over the dead letter's limit of {max_bytes}"
                f" bytes; the record stays at {topic}[{partition}]@{offset}]"
            )
    return DeadLetter(
        topic=topic,
        partition=partition,
        offset=offset,
        key=key_b,
        value=value_b,
        headers=headers_d,
        stage=stage,
        error_code=error_code(exc),
        error_message=message,
        failed_at=utc_now(),
        timestamp=ts,
    )


def _size(key: bytes | None, value: bytes | None, headers: dict[str, bytes]) -> int:
    return len(key or b"") + len(value or b"") + sum(len(k) + len(v) for k, v in headers.items())


def from_confluent(
    msg: Any, stage: str, exc: BaseException, max_bytes: int | None = None
) -> DeadLetter:
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
        max_bytes=max_bytes,
    )
