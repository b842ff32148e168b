"""The wire format: Avro schemas (``*.avsc``), typed records and the codec.

This package is the only place that knows how records look as bytes. Released copies of the
schemas live in ``released/<version>/``; tests check that the current schemas read them.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from ocrstream.schemas.codec import Codec, SchemaSet
from ocrstream.schemas.errors import (
    MalformedRecordError,
    SchemaRegistryRejectedError,
    SchemaRegistryUnavailableError,
    UnencodableRecordError,
    UnknownSchemaError,
)
from ocrstream.schemas.records import (
    DeadLetter,
    DocumentEvent,
    DocumentProgress,
    DocumentStatus,
    Engine,
    ErrorInfo,
    Line,
    PageImage,
    PageResult,
    PageStatus,
    PageTask,
    Point,
    Record,
    ScanSource,
    ScanSubmitted,
    Timings,
    utc_now,
)


def document_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``document.json`` (draft 2020-12)."""
    text = resources.files(__name__).joinpath("document.schema.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


__all__ = [
    "Codec",
    "DeadLetter",
    "DocumentEvent",
    "DocumentProgress",
    "DocumentStatus",
    "Engine",
    "ErrorInfo",
    "Line",
    "MalformedRecordError",
    "PageImage",
    "PageResult",
    "PageStatus",
    "PageTask",
    "Point",
    "Record",
    "ScanSource",
    "ScanSubmitted",
    "SchemaRegistryRejectedError",
    "SchemaRegistryUnavailableError",
    "SchemaSet",
    "Timings",
    "UnencodableRecordError",
    "UnknownSchemaError",
    "document_json_schema",
    "utc_now",
]
