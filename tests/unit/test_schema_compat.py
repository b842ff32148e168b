"""Schema evolution: every current schema reads what every released schema wrote.

The compatibility check must be able to fail, so it is also shown catching incompatible
changes. The JSON Schema of document.json is checked against a full example document (the
shorter one in docs/architecture.md is checked by test_architecture.py).
"""

from __future__ import annotations

import copy
import io
import json
import shutil
from pathlib import Path
from typing import Any

import fastavro
import jsonschema
import pytest

import ocrstream.schemas
from ocrstream.schemas import Codec, PageResult, PageStatus, SchemaSet, document_json_schema
from ocrstream.schemas.compat import check_backward_compatible, samples
from ocrstream.schemas.records import RECORD_TYPES

SCHEMAS = Path(ocrstream.schemas.__path__[0])
RELEASED = sorted(SCHEMAS.glob("released/*/*.avsc"))
CURRENT = {p.stem: json.loads(p.read_text()) for p in SCHEMAS.glob("*.avsc")}


def test_there_is_a_released_copy_of_every_record() -> None:
    assert {p.stem for p in SCHEMAS.glob("released/v1.0/*.avsc")} == set(CURRENT)
    assert {f"io.ocrstream.v1.{name}" for name in CURRENT} == set(RECORD_TYPES)


@pytest.mark.parametrize("released", RELEASED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_current_schema_reads_every_released_one(released: Path) -> None:
    assert check_backward_compatible(json.loads(released.read_text()), CURRENT[released.stem]) == []


@pytest.mark.parametrize("released", RELEASED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_codec_decodes_messages_written_with_released_schemas(released: Path) -> None:
    codec = Codec()
    schema = json.loads(released.read_text())
    writer = codec.schemas.by_fingerprint
    parsed = fastavro.parse_schema(schema)
    fp = _fingerprint(parsed)
    assert fp in writer
    for datum in samples(schema):
        buf = io.BytesIO()
        buf.write(b"\xc3\x01" + fp)
        fastavro.schemaless_writer(buf, parsed, datum)
        record = codec.decode(buf.getvalue())
        assert type(record) is RECORD_TYPES[f"io.ocrstream.v1.{released.stem}"]


def _fingerprint(parsed: Any) -> bytes:
    canonical = fastavro.schema.to_parsing_canonical_form(parsed)
    return bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))


def _without(schema: dict[str, Any], *names: str) -> dict[str, Any]:
    older = copy.deepcopy(schema)
    older["fields"] = [f for f in older["fields"] if f["name"] not in names]
    return older


def test_an_older_release_is_resolved_into_the_current_schema(tmp_path: Path) -> None:
    """A writer without trace_id/worker_id (an imagined v0.9): readers get the defaults."""
    shutil.copytree(SCHEMAS / "released", tmp_path, dirs_exist_ok=True)
    older = _without(CURRENT["PageResult"], "trace_id", "worker_id", "completed_at")
    (tmp_path / "v0.9").mkdir()
    (tmp_path / "v0.9" / "PageResult.avsc").write_text(json.dumps(older))
    codec = Codec(schemas=SchemaSet.load(tmp_path))
    parsed = fastavro.parse_schema(older)
    fp = _fingerprint(parsed)
    assert codec.schemas.by_fingerprint[fp].origin == "v0.9/PageResult.avsc"
    current = PageResult(doc_id="d-1", page_no=2, page_count=3, status=PageStatus.EMPTY)
    kept = {f["name"] for f in older["fields"]}
    datum = {k: v for k, v in current.to_avro().items() if k in kept}
    buf = io.BytesIO(b"\xc3\x01" + fp)
    buf.seek(10)
    fastavro.schemaless_writer(buf, parsed, datum)
    got = codec.decode(buf.getvalue())
    assert got == current  # trace_id None, worker_id "", completed_at None: the defaults
    # Without the released copy the same bytes are refused, not guessed at.
    with pytest.raises(ocrstream.schemas.UnknownSchemaError, match=fp.hex()):
        Codec().decode(buf.getvalue())


# --- the check can fail ----------------------------------------------------------------------


def _edit(name: str, change: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    old = CURRENT[name]
    new = copy.deepcopy(old)
    change(new)
    return old, new


def _field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in schema["fields"] if f["name"] == name)


def _drop_status_empty(schema: dict[str, Any]) -> None:
    enum = _field(schema, "status")["type"]
    enum["symbols"] = ["ok", "failed"]
    del enum["default"]


INCOMPATIBLE = {
    "field-added-without-default": (
        "PageResult",
        lambda s: s["fields"].append({"name": "lang", "type": "string"}),
        "lang",
    ),
    "enum-symbol-removed-without-default": ("PageResult", _drop_status_empty, "empty"),
    "type-narrowed": ("PageTask", lambda s: _field(s, "dpi").update(type="int", default=0), ""),
    "field-renamed-without-alias": (
        "DocumentProgress",
        lambda s: _field(s, "pages_done").update(name="done"),
        "done",
    ),
    "optional-made-required": (
        "ScanSubmitted",
        lambda s: _field(s, "source")["type"]["fields"][0].update(type="string", default=""),
        "",
    ),
    "nested-record-field-added": (
        "PageResult",
        lambda s: _field(s, "lines")["type"]["items"]["fields"].append(
            {"name": "words", "type": {"type": "array", "items": "string"}}
        ),
        "words",
    ),
}


@pytest.mark.parametrize("case", sorted(INCOMPATIBLE))
def test_incompatible_changes_are_detected(case: str) -> None:
    name, change, mention = INCOMPATIBLE[case]
    old, new = _edit(name, change)
    problems = check_backward_compatible(old, new)
    assert problems, f"{case} was not detected"
    assert mention in " ".join(problems)


COMPATIBLE = {
    "field-added-with-default": (
        "PageResult",
        lambda s: s["fields"].append({"name": "lang", "type": "string", "default": ""}),
    ),
    "enum-symbol-added": (
        "DocumentEvent",
        lambda s: _field(s, "status")["type"]["symbols"].append("cancelled"),
    ),
    "int-widened-to-long": ("PageTask", lambda s: _field(s, "attempt").update(type="long")),
    "field-removed": ("DeadLetter", lambda s: s["fields"].remove(_field(s, "trace_id"))),
    "renamed-with-alias": (
        "DocumentProgress",
        lambda s: _field(s, "pages_done").update(name="done", aliases=["pages_done"]),
    ),
}


@pytest.mark.parametrize("case", sorted(COMPATIBLE))
def test_compatible_changes_pass(case: str) -> None:
    name, change = COMPATIBLE[case]
    old, new = _edit(name, change)
    assert check_backward_compatible(old, new) == []


def test_a_new_schema_that_does_not_parse_is_a_problem_not_a_crash() -> None:
    old, new = _edit("PageTask", lambda s: _field(s, "attempt").update(type="boolean"))
    assert "does not parse" in check_backward_compatible(old, new)[0]


def test_samples_cover_every_union_branch_and_enum_symbol() -> None:
    statuses = {d["status"] for d in samples(CURRENT["PageResult"])}
    assert statuses == {"ok", "failed", "empty"}
    errors = [d["error"] for d in samples(CURRENT["PageResult"])]
    assert None in errors
    assert any(e is not None for e in errors)


# --- document.json ---------------------------------------------------------------------------

DOCUMENT = {
    "doc_id": "invoice-42",
    "status": "completed",
    "page_count": 2,
    "engine": {"backend": "onnxruntime", "model": "ppocrv6-small", "version": "1"},
    "pages": [
        {
            "page_no": 1, "status": "ok", "width": 2480, "height": 3508, "rotation": 0,
            "lines": [{"text": "Total", "confidence": 0.97,
                       "polygon": [[10, 20], [110, 20], [110, 60], [10, 60]]}],
        },
        {
            "page_no": 2, "status": "failed", "width": 0, "height": 0, "rotation": 0,
            "lines": [], "error": {"code": "decode_failed", "message": "not an image"},
        },
    ],
}  # fmt: skip


def test_document_json_schema_accepts_the_design_example() -> None:
    jsonschema.Draft202012Validator.check_schema(document_json_schema())
    jsonschema.validate(DOCUMENT, document_json_schema())


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("doc_id",), "../etc"),
        (("status",), "done"),
        (("pages", 0, "lines", 0, "polygon", 0), [1, 2, 3]),
        (("pages", 0, "lines", 0, "confidence"), 1.5),
        (("pages", 0, "page_no"), 0),
    ],
)
def test_document_json_schema_refuses_bad_documents(path: tuple[Any, ...], value: Any) -> None:
    doc = copy.deepcopy(DOCUMENT)
    target: Any = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, document_json_schema())
