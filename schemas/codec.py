"""The wire format: typed records to Avro bytes and back.

Default framing is Avro single-object encoding: ``C3 01``, the writer schema's 8-byte
little-endian CRC-64-AVRO fingerprint, then the Avro body. Any consumer can tell the schema
without a registry. With ``OCRSTREAM_SCHEMA_REGISTRY_URL`` set, records are written in the
Confluent wire format instead (``00``, 4-byte big-endian schema id, body) and schemas are
registered under ``<topic>-value``. Decoding accepts both.

Messages written with any released schema (``released/*/*.avsc``) are resolved into the
current schema. Bytes that are not a known schema raise :class:`UnknownSchemaError`; bodies
that don't parse raise :class:`MalformedRecordError`. Both are poison: they go to the DLQ.
"""

from __future__ import annotations

import functools
import io
import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import fastavro
from fastavro.schema import fingerprint as _fingerprint
from fastavro.schema import to_parsing_canonical_form
from fastavro.validation import ValidationError, validate

from ocrstream.schemas.errors import (
    MalformedRecordError,
    UnencodableRecordError,
    UnknownSchemaError,
)
from ocrstream.schemas.records import RECORD_TYPES, Record
from ocrstream.schemas.registry import SchemaRegistryClient
from ocrstream.settings import KafkaSettings

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
CONFLUENT_MAGIC = b"\x00"
_HEADER = 10  # magic + fingerprint

R = TypeVar("R", bound=Record)


def _head(data: bytes, n: int = 16) -> str:
    more = "…" if len(data) > n else ""
    return f"{data[:n].hex(' ')}{more} ({len(data)} bytes)"


@dataclass(frozen=True)
class WriterSchema:
    """One Avro schema: its full name, parsed form, JSON text and fingerprint."""

    name: str
    parsed: Any
    text: str
    fingerprint: bytes
    origin: str

    @classmethod
    def from_json(cls, schema: Mapping[str, Any], origin: str) -> WriterSchema:
        parsed: Any = fastavro.parse_schema(dict(schema))
        fp = bytes.fromhex(_fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))
        name = str(parsed["name"])
        return cls(name, parsed, json.dumps(schema, separators=(",", ":")), fp, origin)


class SchemaSet:
    """The current schemas (readers) and every known writer schema, by fingerprint."""

    def __init__(self, current: Iterable[WriterSchema], released: Iterable[WriterSchema]) -> None:
        self.current = {s.name: s for s in current}
        self.by_fingerprint: dict[bytes, WriterSchema] = {}
        for s in [*released, *self.current.values()]:
            self.by_fingerprint[s.fingerprint] = s

    @classmethod
    def load(cls, released_dir: Path | None = None) -> SchemaSet:
        """The packaged schemas, plus released copies from ``released_dir`` (default: packaged)."""
        root = resources.files("ocrstream.schemas")
        current = [
            WriterSchema.from_json(json.loads(p.read_text(encoding="utf-8")), f"current/{p.name}")
            for p in sorted(root.iterdir(), key=lambda p: p.name)
            if p.name.endswith(".avsc")
        ]
        released: list[WriterSchema] = []
        base = released_dir if released_dir is not None else Path(str(root / "released"))
        for path in sorted(base.glob("*/*.avsc")):
            origin = f"{path.parent.name}/{path.name}"
            released.append(
                WriterSchema.from_json(json.loads(path.read_text(encoding="utf-8")), origin)
            )
        return cls(current, released)


@functools.cache
def default_schemas() -> SchemaSet:
    return SchemaSet.load()


class Codec:
    """Encode and decode ocrstream records. One instance per process; thread-safe for use."""

    def __init__(
        self,
        kafka: KafkaSettings | None = None,
        *,
        schemas: SchemaSet | None = None,
        registry: SchemaRegistryClient | None = None,
    ) -> None:
        self.schemas = schemas or default_schemas()
        url = kafka.schema_registry_url if kafka is not None else None
        self.registry = registry or (SchemaRegistryClient(url) if url else None)

    # --- encode ---------------------------------------------------------------------------

    def encode(self, record: Record, topic: str | None = None) -> bytes:
        """Avro bytes for ``record``.

        With a registry, ``topic`` (the full name, ``KafkaSettings.topic(...)``) names the
        subject ``<topic>-value``; registry errors are retriable or fatal, see ``registry``.
        """
        schema = self.schemas.current[record.SCHEMA]
        buf = io.BytesIO()
        if self.registry is None:
            buf.write(SINGLE_OBJECT_MAGIC + schema.fingerprint)
        else:
            if topic is None:
                raise ValueError("a topic is needed to encode with a schema registry")
            schema_id = self.registry.register(f"{topic}-value", schema.text)
            buf.write(CONFLUENT_MAGIC + struct.pack(">I", schema_id))
        datum = record.to_avro()
        try:
            validate(datum, schema.parsed, raise_errors=True)  # also checks int/long ranges
            fastavro.schemaless_writer(buf, schema.parsed, datum, strict=True)
        except (ValidationError, TypeError, ValueError, OverflowError, struct.error) as e:
            raise UnencodableRecordError(f"{schema.name} does not fit its schema: {e}") from e
        return buf.getvalue()

    # --- decode ---------------------------------------------------------------------------

    def decode(self, data: bytes) -> Record:
        """The typed record in ``data``; raises a :class:`PoisonError` subclass if it can't."""
        data = bytes(data)
        if not data:
            raise MalformedRecordError("empty value: no Avro framing")
        if data.startswith(SINGLE_OBJECT_MAGIC):
            if len(data) < _HEADER:
                raise MalformedRecordError(f"truncated single-object header: {_head(data)}")
            fp = data[2:_HEADER]
            writer = self.schemas.by_fingerprint.get(fp)
            if writer is None:
                raise UnknownSchemaError(
                    f"unknown schema fingerprint {fp.hex()} in single-object message {_head(data)}"
                )
            return self._read(writer, data, _HEADER)
        if data[:1] == CONFLUENT_MAGIC and len(data) >= 5:
            (schema_id,) = struct.unpack(">I", data[1:5])
            if self.registry is None:
                raise UnknownSchemaError(
                    f"Confluent-framed message with schema id {schema_id} but no schema "
                    f"registry is configured: {_head(data)}"
                )
            return self._read(self._registry_schema(schema_id, data), data, 5)
        raise UnknownSchemaError(f"not an ocrstream Avro message: {_head(data)}")

    def decode_as(self, data: bytes, cls: type[R]) -> R:
        """Like :meth:`decode`, but the record must be a ``cls``."""
        record = self.decode(data)
        if not isinstance(record, cls):
            raise UnknownSchemaError(f"expected {cls.SCHEMA}, got {record.SCHEMA}: {_head(data)}")
        return record

    def _registry_schema(self, schema_id: int, data: bytes) -> WriterSchema:
        assert self.registry is not None
        text = self.registry.schema_by_id(schema_id)
        if text is None:
            raise UnknownSchemaError(f"schema id {schema_id} is not in the registry: {_head(data)}")
        try:
            return _parse_registry_schema(text, f"registry/{schema_id}")
        except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as e:
            raise UnknownSchemaError(f"schema id {schema_id} does not parse: {e}") from e

    def _read(self, writer: WriterSchema, data: bytes, offset: int) -> Record:
        what = f"{writer.name} ({writer.origin})"
        reader = self.schemas.current.get(writer.name)
        cls = RECORD_TYPES.get(writer.name)
        if reader is None or cls is None:
            raise UnknownSchemaError(f"schema {what} is not an ocrstream record")
        resolve_into = None if reader.fingerprint == writer.fingerprint else reader.parsed
        fo = io.BytesIO(data)
        fo.seek(offset)
        try:
            datum = fastavro.schemaless_reader(fo, writer.parsed, resolve_into)
            record = cls.from_avro(datum)  # type: ignore[arg-type]
        except fastavro.read.SchemaResolutionError as e:
            raise UnknownSchemaError(f"writer schema {what} can't be read as current: {e}") from e
        except (EOFError, ValueError, TypeError, KeyError, IndexError, OverflowError) as e:
            reason = f"{type(e).__name__}: {e or 'truncated'}"
            raise MalformedRecordError(f"{what} does not decode ({reason}): {_head(data)}") from e
        rest = len(data) - fo.tell()
        if rest:
            raise MalformedRecordError(f"{what} has {rest} trailing bytes: {_head(data)}")
        return record


@functools.lru_cache(maxsize=256)
def _parse_registry_schema(text: str, origin: str) -> WriterSchema:
    return WriterSchema.from_json(json.loads(text), origin)
