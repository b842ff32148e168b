"""The codec: round trips of every record (hypothesis), framing, and every error path."""

from __future__ import annotations

import dataclasses
import io
import json
import struct
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ocrstream.errors import FatalError, PoisonError, RetriableError
from ocrstream.schemas import (
    Codec,
    DeadLetter,
    DocumentEvent,
    DocumentProgress,
    DocumentStatus,
    Engine,
    ErrorInfo,
    Line,
    MalformedRecordError,
    PageImage,
    PageResult,
    PageStatus,
    PageTask,
    Point,
    ScanSource,
    ScanSubmitted,
    SchemaRegistryRejectedError,
    SchemaRegistryUnavailableError,
    Timings,
    UnencodableRecordError,
    UnknownSchemaError,
)
from ocrstream.schemas.records import RECORD_TYPES
from ocrstream.schemas.registry import SchemaRegistryClient
from ocrstream.settings import KafkaSettings
from tests.fakes.schema_registry import FakeSchemaRegistry

# --- strategies ------------------------------------------------------------------------------

text = st.text(max_size=20)
short = st.text(max_size=6)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
f32 = st.floats(width=32, allow_nan=False)
blob = st.binary(max_size=64)
timestamps = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))
str_map = st.dictionaries(short, short, max_size=3)
words = st.lists(short, max_size=3).map(tuple)
maybe_text = st.none() | text

points = st.builds(Point, x=f32, y=f32)
lines = st.builds(Line, text=text, confidence=f32, polygon=st.lists(points, max_size=5).map(tuple))
line_tuples = st.lists(lines, max_size=4).map(tuple)
errors = st.none() | st.builds(ErrorInfo, code=short, message=text)

scans = st.builds(
    ScanSubmitted, doc_id=text, content_type=short, sha256=short, size_bytes=int64,
    source=st.builds(ScanSource, uri=maybe_text, data=st.none() | blob),
    submitted_at=timestamps, tenant=short, priority=int32, languages=words, outputs=words,
    attributes=str_map, trace_id=maybe_text,
)  # fmt: skip
tasks = st.builds(
    PageTask, doc_id=text, page_no=int32, page_count=int32, width=int32, height=int32, dpi=f32,
    image=st.builds(PageImage, encoding=short, data=st.none() | blob, uri=maybe_text),
    source_sha256=short, source_uri=maybe_text, content_type=short, options=str_map,
    outputs=words, submitted_at=timestamps, attempt=int32,
    text_layer=st.none() | line_tuples, trace_id=maybe_text,
)  # fmt: skip
results = st.builds(
    PageResult, doc_id=text, page_no=int32, page_count=int32, status=st.sampled_from(PageStatus),
    error=errors, width=int32, height=int32, rotation=int32, lines=line_tuples,
    engine=st.none() | st.builds(Engine, backend=short, model=short, version=short),
    timings=st.builds(Timings, decode_ms=f32, det_ms=f32, rec_ms=f32, total_ms=f32),
    worker_id=short, source_sha256=short, source_uri=maybe_text, content_type=short,
    outputs=words, submitted_at=timestamps, completed_at=st.none() | timestamps,
    attempt=int32, trace_id=maybe_text,
)  # fmt: skip
progress = st.builds(
    DocumentProgress, doc_id=text, pages_done=int32, page_count=int32, updated_at=timestamps,
    pages_failed=int32, trace_id=maybe_text,
)  # fmt: skip
documents = st.builds(
    DocumentEvent, doc_id=text, status=st.sampled_from(DocumentStatus), page_count=int32,
    pages_ok=int32, pages_failed=int32, outputs=str_map, error=errors,
    submitted_at=timestamps, completed_at=timestamps, source_sha256=short,
    missing_pages=st.lists(int32, max_size=5).map(tuple),
    failed_pages=st.lists(int32, max_size=5).map(tuple), attributes=str_map,
    trace_id=maybe_text,
)  # fmt: skip
dead_letters = st.builds(
    DeadLetter, topic=short, partition=int32, offset=int64, key=st.none() | blob,
    value=st.none() | blob, headers=st.dictionaries(short, blob, max_size=3), stage=short,
    error_code=short, error_message=text, failed_at=timestamps,
    timestamp=st.none() | timestamps, trace_id=maybe_text,
)  # fmt: skip
any_record = st.one_of(scans, tasks, results, progress, documents, dead_letters)

codec = Codec()


def example_result() -> PageResult:
    return PageResult(
        doc_id="invoice-42",
        page_no=3,
        page_count=7,
        status=PageStatus.OK,
        width=2480,
        height=3508,
        lines=(Line("Total 42.00 EUR", 0.5, (Point(1, 2), Point(3, 2), Point(3, 4), Point(1, 4))),),
        engine=Engine("onnxruntime", "ppocrv6-small", "1"),
        submitted_at=datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
    )


# --- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "strategy",
    [scans, tasks, results, progress, documents, dead_letters],
    ids=["ScanSubmitted", "PageTask", "PageResult", "DocumentProgress", "DocumentEvent", "DLQ"],
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_record_round_trips(strategy: st.SearchStrategy, data: st.DataObject) -> None:
    record = data.draw(strategy)
    encoded = codec.encode(record)
    assert encoded[:2] == b"\xc3\x01"
    assert codec.decode(encoded) == record
    assert codec.decode_as(encoded, type(record)) == record


def test_single_object_header_is_the_schema_fingerprint() -> None:
    encoded = codec.encode(example_result())
    with open(_schema_path("PageResult.avsc")) as f:
        parsed = fastavro.parse_schema(json.load(f))
    canonical = fastavro.schema.to_parsing_canonical_form(parsed)
    # Avro spec: 8-byte little-endian CRC-64-AVRO (Rabin) of the parsing canonical form.
    assert encoded[2:10] == _rabin64(canonical.encode()).to_bytes(8, "little")
    body: Any = fastavro.schemaless_reader(io.BytesIO(encoded[10:]), parsed)
    assert body["doc_id"] == "invoice-42"


def _rabin64(data: bytes) -> int:
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for b in data:
        fp = (fp >> 8) ^ table[(fp ^ b) & 0xFF]
    return fp


def _schema_path(name: str) -> str:
    import ocrstream.schemas

    return f"{ocrstream.schemas.__path__[0]}/{name}"


def test_records_match_their_schemas_field_for_field() -> None:
    for name, cls in RECORD_TYPES.items():
        schema = codec.schemas.current[name]
        avsc = [f["name"] for f in json.loads(schema.text)["fields"]]
        assert avsc == [f.name for f in dataclasses.fields(cls)], name


def test_unknown_enum_symbol_from_a_newer_writer_reads_as_the_default() -> None:
    newer = json.loads(codec.schemas.current[PageResult.SCHEMA].text)
    newer["fields"][3]["type"]["symbols"].append("skipped")
    parsed = fastavro.parse_schema(newer)
    buf = io.BytesIO()
    datum = {**example_result().to_avro(), "status": "skipped"}
    fastavro.schemaless_writer(buf, parsed, datum)
    reader = codec.schemas.current[PageResult.SCHEMA].parsed
    got = fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), parsed, reader)
    assert PageResult.from_avro(got).status is PageStatus.FAILED  # type: ignore[arg-type]


# --- error paths -----------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_are_poison_never_a_crash(data: bytes) -> None:
    with pytest.raises(PoisonError) as info:
        codec.decode(data)
    assert info.value.code in ("unknown_schema", "malformed_record")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(RECORD_TYPES)), st.binary(max_size=200))
def test_random_body_behind_a_known_header_is_a_record_or_malformed(name: str, body: bytes) -> None:
    header = b"\xc3\x01" + codec.schemas.current[name].fingerprint
    try:
        record = codec.decode(header + body)
    except (MalformedRecordError, UnknownSchemaError):
        return
    assert isinstance(record, RECORD_TYPES[name])


def test_every_truncation_is_malformed() -> None:
    encoded = codec.encode(example_result())
    for n in range(len(encoded)):
        with pytest.raises(PoisonError) as info:
            codec.decode(encoded[:n])
        expected = "malformed_record" if n == 0 or n >= 2 else "unknown_schema"
        assert info.value.code == expected, n


def test_trailing_garbage_is_malformed() -> None:
    with pytest.raises(MalformedRecordError, match="1 trailing bytes"):
        codec.decode(codec.encode(example_result()) + b"\x00")


def test_wrong_magic_says_what_was_seen() -> None:
    with pytest.raises(UnknownSchemaError, match=r"not an ocrstream Avro message: 7b 22 64 6f"):
        codec.decode(b'{"doc_id": "x"}')
    encoded = bytearray(codec.encode(example_result()))
    encoded[1] = 0x02
    with pytest.raises(UnknownSchemaError, match="c3 02"):
        codec.decode(bytes(encoded))


def test_unknown_fingerprint_is_named_in_the_error() -> None:
    encoded = b"\xc3\x01" + bytes.fromhex("0123456789abcdef") + b"\x02x"
    with pytest.raises(UnknownSchemaError, match="unknown schema fingerprint 0123456789abcdef"):
        codec.decode(encoded)


def test_confluent_framing_without_a_registry_is_unknown_schema() -> None:
    with pytest.raises(UnknownSchemaError, match="schema id 7 but no schema registry"):
        codec.decode(b"\x00\x00\x00\x00\x07\x02x")


def test_decode_as_the_wrong_type_is_poison() -> None:
    with pytest.raises(UnknownSchemaError, match=r"expected io\.ocrstream\.v1\.PageTask"):
        codec.decode_as(codec.encode(example_result()), PageTask)


@pytest.mark.parametrize(
    "record",
    [
        PageResult(doc_id="d", page_no=2**40, page_count=1, status=PageStatus.OK),
        PageResult(doc_id=None, page_no=1, page_count=1, status=PageStatus.OK),  # type: ignore[arg-type]
        PageResult(doc_id="d", page_no=1, page_count=1, status="weird"),  # type: ignore[arg-type]
    ],
    ids=["int-overflow", "none-for-string", "unknown-status"],
)
def test_records_that_dont_fit_are_refused_on_encode(record: PageResult) -> None:
    with pytest.raises(UnencodableRecordError):
        codec.encode(record)


# --- Confluent wire format with a (fake) registry --------------------------------------------


@pytest.fixture
def registry() -> Iterator[FakeSchemaRegistry]:
    with FakeSchemaRegistry() as fake:
        yield fake


def test_confluent_framing_registers_topic_value_subjects(registry: FakeSchemaRegistry) -> None:
    producer = Codec(KafkaSettings(schema_registry_url=registry.url))
    record = example_result()
    encoded = producer.encode(record, topic="ocr.page-results.v1")
    assert encoded[0] == 0
    (schema_id,) = struct.unpack(">I", encoded[1:5])
    assert registry.subjects == {"ocr.page-results.v1-value": [schema_id]}
    producer.encode(record, topic="ocr.page-results.v1")
    assert len([r for r in registry.requests if r[0] == "POST"]) == 1  # cached

    consumer = Codec(KafkaSettings(schema_registry_url=registry.url))  # a fresh cache
    assert consumer.decode(encoded) == record
    assert consumer.decode(encoded) == record
    assert len([r for r in registry.requests if r[0] == "GET"]) == 1  # cached
    # A registry consumer still reads single-object messages.
    assert consumer.decode(codec.encode(record)) == record


def test_confluent_unknown_id_and_registry_errors(registry: FakeSchemaRegistry) -> None:
    consumer = Codec(KafkaSettings(schema_registry_url=registry.url))
    with pytest.raises(UnknownSchemaError, match="schema id 99 is not in the registry"):
        consumer.decode(b"\x00\x00\x00\x00\x63\x02x")
    with pytest.raises(ValueError, match="topic"):
        consumer.encode(example_result())
    registry.fail_with = 503
    with pytest.raises(SchemaRegistryUnavailableError) as info:
        consumer.encode(example_result(), topic="t")
    assert isinstance(info.value, RetriableError)
    registry.fail_with = 409
    with pytest.raises(SchemaRegistryRejectedError) as rejected:
        consumer.encode(example_result(), topic="t")
    assert isinstance(rejected.value, FatalError)


def test_registry_credentials_go_in_a_header_never_in_messages(
    registry: FakeSchemaRegistry,
) -> None:
    url = registry.url.replace("http://", "http://svc:p%40ss@")
    client = SchemaRegistryClient(url)
    assert "p@ss" not in client.url
    assert "svc" not in client.url
    client.register("s-value", '"string"')
    assert registry.requests[-1][2] == "Basic c3ZjOnBAc3M="  # base64("svc:p@ss")
    registry.fail_with = 500
    with pytest.raises(SchemaRegistryUnavailableError) as info:
        client.schema_by_id(1234)
    assert "p@ss" not in str(info.value)


def test_unreachable_registry_is_retriable() -> None:
    client = SchemaRegistryClient("http://127.0.0.1:9", timeout_s=1)
    with pytest.raises(SchemaRegistryUnavailableError):
        client.schema_by_id(1)
