"""Assembling page results: status, document.json against its schema, document.txt order."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest

from ocrstream.processors.assemble import (
    OUTPUT_FILES,
    assemble,
    page_from_mapping,
    page_text,
    render_outputs,
)
from ocrstream.processors.ocr.types import Line, PageOCR
from ocrstream.schemas import document_json_schema

ENGINE = {"backend": "onnxruntime", "model": "ppocrv6-small", "version": "1"}
VALIDATOR = jsonschema.Draft202012Validator(document_json_schema())


def box(x0: float, y0: float, x1: float, y1: float) -> tuple[tuple[float, float], ...]:
    return ((x0, y0), (x1, y0), (x1, y1), (x0, y1))


def line(text: str, x0: float, y0: float, x1: float, y1: float) -> Line:
    return Line(text, 0.9, box(x0, y0, x1, y1))  # type: ignore[arg-type]


def ok_page(*texts: str) -> PageOCR:
    lines = tuple(line(t, 100, 100 + 60 * i, 900, 140 + 60 * i) for i, t in enumerate(texts))
    return PageOCR(width=1000, height=1400, lines=lines)


def failed_page(code: str) -> PageOCR:
    return PageOCR(0, 0, (), status="failed", error_code=code, error_message="it broke")


def validated(doc_json: bytes) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(doc_json)
    VALIDATOR.validate(data)
    return data


def test_completed_document_json_and_text() -> None:
    results = {2: ok_page("second page"), 1: ok_page("first line", "second line")}
    doc = assemble(
        "doc-1",
        2,
        results,
        engine=ENGINE,
        source_sha256="ab" * 32,
        submitted_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
        completed_at=datetime(2025, 1, 2, 3, 4, 9, tzinfo=UTC),
    )
    assert (doc.status, doc.pages_ok, doc.pages_failed, doc.error_code) == ("completed", 2, 0, None)
    data = validated(doc.json_bytes())
    assert data["engine"] == ENGINE
    assert [p["page_no"] for p in data["pages"]] == [1, 2]
    assert data["pages"][0]["lines"][1] == {
        "text": "second line",
        "confidence": 0.9,
        "polygon": [[100.0, 160.0], [900.0, 160.0], [900.0, 200.0], [100.0, 200.0]],
    }
    assert "missing_pages" not in data
    assert "error" not in data
    assert doc.text() == "first line\nsecond line\n\fsecond page\n\f"


def test_partial_lists_failed_and_missing_pages() -> None:
    results = {1: ok_page("one"), 2: failed_page("page_too_large"), 4: ok_page("four")}
    doc = assemble("doc-2", 5, results, engine=ENGINE)
    assert doc.status == "partial"
    assert doc.missing_pages == (3, 5)
    assert doc.failed_pages == (2,)
    assert (doc.pages_ok, doc.pages_failed) == (2, 3)
    assert doc.error_code == "pages_failed"
    assert "2 failed" in (doc.error_message or "")
    assert "3, 5 never arrived" in (doc.error_message or "")
    data = validated(doc.json_bytes())
    assert data["status"] == "partial"
    assert data["missing_pages"] == [3, 5]
    assert data["pages"][1]["error"] == {"code": "page_too_large", "message": "it broke"}
    assert doc.text() == "one\n\f\f\ffour\n\f\f"


def test_failed_when_no_page_is_readable_with_the_common_reason() -> None:
    doc = assemble("doc-3", 2, {1: failed_page("corrupt_pdf"), 2: failed_page("corrupt_pdf")})
    assert (doc.status, doc.error_code) == ("failed", "corrupt_pdf")
    validated(doc.json_bytes())
    only_missing = assemble("doc-4", 3, {})
    assert (only_missing.status, only_missing.error_code) == ("failed", "pages_missing")
    assert only_missing.missing_pages == (1, 2, 3)
    assert only_missing.text() == "\f\f\f"


def test_empty_pages_count_as_read() -> None:
    empty = PageOCR(1000, 1400, (), status="empty")
    doc = assemble("doc-5", 2, {1: ok_page("text"), 2: empty}, engine=ENGINE)
    assert doc.status == "completed"
    assert doc.text() == "text\n\f\f"


def test_page_result_records_and_json_pages_are_accepted() -> None:
    avro_like = {
        "doc_id": "d",
        "page_no": 1,
        "status": "ok",
        "error": None,
        "width": 800,
        "height": 600,
        "rotation": 90,
        "lines": [
            {
                "text": "hello",
                "confidence": 0.5,
                "polygon": [{"x": 1, "y": 2}, {"x": 9, "y": 2}, {"x": 9, "y": 8}, {"x": 1, "y": 8}],
            }
        ],
        "engine": {"backend": "text-layer", "model": "pdf", "version": "1"},
    }
    json_page = ok_page("world").to_dict(2)
    json_page["engine"] = ENGINE
    doc = assemble("doc-6", 3, {1: avro_like, 2: json_page, 3: {"status": "mystery"}})
    assert doc.status == "partial"  # an unknown status reads as failed
    assert doc.failed_pages == (3,)
    first = doc.page(1)
    assert first is not None
    assert first.ocr.rotation == 90
    assert first.ocr.lines[0].polygon == ((1.0, 2.0), (9.0, 2.0), (9.0, 8.0), (1.0, 8.0))
    data = validated(doc.json_bytes())
    assert data["pages"][0]["engine"]["backend"] == "text-layer"
    ocr, engine = page_from_mapping(json_page)
    assert ocr == ok_page("world")
    assert engine == ENGINE


def test_ignores_pages_out_of_range() -> None:
    doc = assemble("doc-7", 1, {0: ok_page("x"), 1: ok_page("y"), 7: ok_page("z")})
    assert [p.page_no for p in doc.pages] == [1]
    assert doc.status == "completed"


def test_text_joins_pieces_of_one_row_and_keeps_the_engine_order() -> None:
    lines = (
        line("Total", 100, 100, 300, 140),
        line("amount", 340, 102, 600, 141),  # the same row, a word gap away: one text line
        line("1,250.00", 1500, 100, 1800, 140),  # the same row, far right: its own line
        line("Next row", 100, 200, 400, 240),
    )
    assert page_text(lines) == "Total amount\n1,250.00\nNext row"


def test_render_outputs_gives_every_requested_text_file() -> None:
    doc = assemble("doc-8", 2, {1: ok_page("alpha beta"), 2: ok_page("gamma")}, engine=ENGINE)
    outputs = render_outputs(doc)
    assert set(outputs) == {"json", "txt"}
    assert set(OUTPUT_FILES) == {"json", "txt", "pdf", "md"}
    assert outputs["txt"] == b"alpha beta\n\fgamma\n\f"
    assert json.loads(outputs["json"])["doc_id"] == "doc-8"
    # the PDF needs the source: searchable_pdf.source_searchable_pdf makes it
    assert set(render_outputs(doc, ["json", "pdf", "md"])) == {"json", "md"}


@pytest.mark.parametrize("page_count", [0, -1])
def test_a_document_without_pages_fails(page_count: int) -> None:
    doc = assemble("doc-9", page_count, {})
    assert (doc.status, doc.error_code, doc.page_count) == ("failed", "zero_pages", 0)
    validated(doc.json_bytes())
