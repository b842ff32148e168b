"""Typed records of the wire format: frozen dataclasses that mirror the ``.avsc`` files.

Other code builds and reads these, never raw Avro dicts; :mod:`ocrstream.schemas.codec` turns
them into bytes and back. Field names and order follow the schemas one to one (a unit test
keeps the two in step). Timestamps are timezone-aware UTC datetimes with millisecond precision.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum, StrEnum
from typing import Any, ClassVar, Self

NAMESPACE = "io.ocrstream.v1"
DEFAULT_OUTPUTS: tuple[str, ...] = ("json", "txt", "pdf")
#: Parse modes: ``text`` (lines only) and ``layout`` (lines plus blocks, and document.md).
MODES: tuple[str, ...] = ("text", "layout")


def utc_now() -> datetime:
    """Now, in UTC, truncated to what timestamp-millis keeps."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


class PageStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"
    EMPTY = "empty"


class DocumentStatus(StrEnum):
    COMPLETED = "completed"
    PARTIAL = "partial"
    FAILED = "failed"


class _Avro:
    """Dict conversion shared by every record, compiled once per class from its type hints."""

    __slots__ = ()

    def to_avro(self) -> dict[str, Any]:
        return typing.cast(dict[str, Any], _encoder(type(self))(self))

    @classmethod
    def from_avro(cls, datum: Mapping[str, Any]) -> Self:
        return typing.cast(Self, _decoder(cls)(datum))


Convert = Callable[[Any], Any]
_ENCODERS: dict[Any, Convert] = {}
_DECODERS: dict[Any, Convert] = {}


def _identity(value: Any) -> Any:
    return value


def _unwrap_optional(tp: Any) -> Any | None:
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return inner
    return None


def _encoder(tp: Any) -> Convert:
    if tp not in _ENCODERS:
        _ENCODERS[tp] = _make_encoder(tp)
    return _ENCODERS[tp]


def _make_encoder(tp: Any) -> Convert:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if (inner := _unwrap_optional(tp)) is not None:
        enc = _encoder(inner)
        return lambda v: None if v is None else enc(v)
    if origin is tuple:
        enc = _encoder(args[0])
        return list if enc is _identity else lambda v: [enc(i) for i in v]
    if origin in (dict, Mapping):
        enc = _encoder(args[1])
        return dict if enc is _identity else lambda v: {k: enc(i) for k, i in v.items()}
    if isinstance(tp, type) and issubclass(tp, _Avro):
        hints = typing.get_type_hints(tp)
        fields = [(f.name, _encoder(hints[f.name])) for f in dataclasses.fields(tp)]  # type: ignore[arg-type]
        return lambda v: {name: enc(getattr(v, name)) for name, enc in fields}
    if isinstance(tp, type) and issubclass(tp, Enum):
        return lambda v: getattr(v, "value", v)
    return _identity


def _decoder(tp: Any) -> Convert:
    if tp not in _DECODERS:
        _DECODERS[tp] = _make_decoder(tp)
    return _DECODERS[tp]


def _make_decoder(tp: Any) -> Convert:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if (inner := _unwrap_optional(tp)) is not None:
        dec = _decoder(inner)
        return lambda v: None if v is None else dec(v)
    if origin is tuple:
        dec = _decoder(args[0])
        return tuple if dec is _identity else lambda v: tuple(dec(i) for i in v)
    if origin in (dict, Mapping):
        dec = _decoder(args[1])
        return dict if dec is _identity else lambda v: {k: dec(i) for k, i in v.items()}
    if isinstance(tp, type) and issubclass(tp, _Avro):
        hints = typing.get_type_hints(tp)
        fields = {f.name: _decoder(hints[f.name]) for f in dataclasses.fields(tp)}  # type: ignore[arg-type]
        return lambda v: tp(**{k: fields[k](i) for k, i in v.items() if k in fields})
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp
    return _identity


# --- nested records ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Point(_Avro):
    x: float
    y: float


@dataclass(frozen=True, slots=True)
class Line(_Avro):
    text: str
    confidence: float
    polygon: tuple[Point, ...] = ()


@dataclass(frozen=True, slots=True)
class ErrorInfo(_Avro):
    """Avro ``Error``: a stable reason code and a human message."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Engine(_Avro):
    backend: str
    model: str
    version: str


#: ``Engine.backend`` of a page read from the PDF's own text layer, not recognised.
TEXT_LAYER_BACKEND = "text-layer"


@dataclass(frozen=True, slots=True)
class Timings(_Avro):
    decode_ms: float = 0.0
    det_ms: float = 0.0
    rec_ms: float = 0.0
    total_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class Cell(_Avro):
    """A table cell: grid position, span, box ``[x0, y0, x1, y1]`` in page pixels, text."""

    row: int
    col: int
    rowspan: int = 1
    colspan: int = 1
    bbox: tuple[float, ...] = ()
    text: str = ""


@dataclass(frozen=True, slots=True)
class Block(_Avro):
    """A layout block: type, box ``[x0, y0, x1, y1]``, indices into the page's lines, text;
    ``html`` and ``cells`` for tables."""

    type: str
    bbox: tuple[float, ...] = ()
    lines: tuple[int, ...] = ()
    text: str = ""
    html: str | None = None
    cells: tuple[Cell, ...] = ()
    source: str | None = None  # tables: model | rules | geometry


@dataclass(frozen=True, slots=True)
class ScanSource(_Avro):
    """Where a submitted file is: ``uri`` (``s3://bucket/key``) or inline ``data``."""

    uri: str | None = None
    data: bytes | None = None


@dataclass(frozen=True, slots=True)
class PageImage(_Avro):
    """A page image: inline ``data``, or a claim-check ``uri`` when too big for a message."""

    encoding: str
    data: bytes | None = None
    uri: str | None = None


# --- top-level records (one per topic) -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScanSubmitted(_Avro):
    SCHEMA: ClassVar[str] = f"{NAMESPACE}.ScanSubmitted"

    doc_id: str
    source: ScanSource
    content_type: str
    sha256: str
    size_bytes: int
    submitted_at: datetime
    tenant: str = ""
    priority: int = 0
    languages: tuple[str, ...] = ()
    outputs: tuple[str, ...] = DEFAULT_OUTPUTS
    attributes: Mapping[str, str] = field(default_factory=dict)
    trace_id: str | None = None
    mode: str = "text"
    revision: int = 1
    # engine options: model (ocrstream reprocess --model), regions (key-field mode)
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PageTask(_Avro):
    SCHEMA: ClassVar[str] = f"{NAMESPACE}.PageTask"

    doc_id: str
    page_no: int
    page_count: int
    image: PageImage
    width: int
    height: int
    dpi: float = 0.0
    source_sha256: str = ""
    source_uri: str | None = None
    content_type: str = ""
    options: Mapping[str, str] = field(default_factory=dict)
    outputs: tuple[str, ...] = DEFAULT_OUTPUTS
    submitted_at: datetime = field(default_factory=utc_now)
    attempt: int = 0
    text_layer: tuple[Line, ...] | None = None
    trace_id: str | None = None
    priority: int = 0
    tenant: str = ""
    mode: str = "text"
    revision: int = 1
    text_layer_rules: tuple[tuple[float, ...], ...] = ()  # with text_layer: vector rules, px
    text_layer_images: tuple[tuple[float, ...], ...] = ()  # with text_layer: image boxes, px


@dataclass(frozen=True, slots=True)
class FieldRead(_Avro):
    """Key-field mode: what was read in one named region (``bbox`` in page pixels)."""

    name: str
    text: str = ""
    confidence: float = 0.0
    bbox: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class PageResult(_Avro):
    SCHEMA: ClassVar[str] = f"{NAMESPACE}.PageResult"

    doc_id: str
    page_no: int
    page_count: int
    status: PageStatus
    error: ErrorInfo | None = None
    width: int = 0
    height: int = 0
    rotation: int = 0
    lines: tuple[Line, ...] = ()
    engine: Engine | None = None
    timings: Timings = Timings()
    worker_id: str = ""
    source_sha256: str = ""
    source_uri: str | None = None
    content_type: str = ""
    outputs: tuple[str, ...] = DEFAULT_OUTPUTS
    submitted_at: datetime = field(default_factory=utc_now)
    completed_at: datetime | None = None
    attempt: int = 0
    trace_id: str | None = None
    tenant: str = ""
    mode: str = "text"
    blocks: tuple[Block, ...] | None = None
    cached: bool = False
    revision: int = 1
    provisional: bool = False
    pool: str = ""
    fields: tuple[FieldRead, ...] = ()  # key-field mode: one per region of the page


@dataclass(frozen=True, slots=True)
class DocumentProgress(_Avro):
    SCHEMA: ClassVar[str] = f"{NAMESPACE}.DocumentProgress"

    doc_id: str
    pages_done: int
    page_count: int
    updated_at: datetime
    pages_failed: int = 0
    trace_id: str | None = None
    revision: int = 1


@dataclass(frozen=True, slots=True)
class DocumentEvent(_Avro):
    SCHEMA: ClassVar[str] = f"{NAMESPACE}.DocumentEvent"

    doc_id: str
    status: DocumentStatus
    page_count: int
    pages_ok: int
    pages_failed: int
    outputs: Mapping[str, str] = field(default_factory=dict)
    error: ErrorInfo | None = None
    submitted_at: datetime = field(default_factory=utc_now)
    completed_at: datetime = field(default_factory=utc_now)
    source_sha256: str = ""
    missing_pages: tuple[int, ...] = ()
    failed_pages: tuple[int, ...] = ()
    attributes: Mapping[str, str] = field(default_factory=dict)
    trace_id: str | None = None
    tenant: str = ""
    pages_cached: int = 0
    revision: int = 1


@dataclass(frozen=True, slots=True)
class DeadLetter(_Avro):
    SCHEMA: ClassVar[str] = f"{NAMESPACE}.DeadLetter"

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Mapping[str, bytes] = field(default_factory=dict)
    stage: str = ""
    error_code: str = ""
    error_message: str = ""
    failed_at: datetime = field(default_factory=utc_now)
    timestamp: datetime | None = None
    trace_id: str | None = None


Record = ScanSubmitted | PageTask | PageResult | DocumentProgress | DocumentEvent | DeadLetter

RECORD_TYPES: dict[str, type[Record]] = {
    cls.SCHEMA: cls
    for cls in (ScanSubmitted, PageTask, PageResult, DocumentProgress, DocumentEvent, DeadLetter)
}
