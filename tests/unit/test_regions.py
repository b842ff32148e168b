"""Key-field mode: named regions parsed and checked, given to each page, read alone by the real
engine, and gathered into document.json's ``fields``."""

from __future__ import annotations

import json

import pytest

from ocrstream.processors.assemble import assemble
from ocrstream.processors.ocr.engine import OcrEngine
from ocrstream.processors.ocr.types import RegionsPage
from ocrstream.processors.regions import (
    InvalidRegionsError,
    Region,
    decode,
    encode,
    for_page,
    parse_regions,
)
from ocrstream.schemas import document_json_schema
from ocrstream.settings import OcrSettings
from tests import samples

BOXES = [
    {"name": "total", "page": 1, "bbox": [0.5, 0.8, 1.0, 0.9]},
    {"name": "stamp", "bbox": [0.0, 0.0, 0.2, 0.1]},  # every page
]


def test_regions_are_boxes_or_a_template_and_each_page_gets_its_own() -> None:
    regions = parse_regions(json.dumps(BOXES))
    assert regions == (
        Region("total", 1, (0.5, 0.8, 1.0, 0.9)),
        Region("stamp", 0, (0.0, 0.0, 0.2, 0.1)),
    )
    assert parse_regions({"template": "receipt"}, {"receipt": BOXES}) == regions
    assert [r.name for r in for_page(regions, 1)] == ["total", "stamp"]
    assert [r.name for r in for_page(regions, 2)] == ["stamp"]
    assert decode(encode(regions)) == regions
    assert regions[0].pixels(1000, 2000) == (500, 1600, 1000, 1800)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("not json", "not JSON"),
        ([], "non-empty list"),
        ({"template": "nope"}, "unknown regions template 'nope'"),
        ([{"bbox": [0, 0, 1, 1]}], "needs a name"),
        ([{"name": "a", "bbox": [0, 0, 2, 1]}], "fractions of the page"),
        ([{"name": "a", "bbox": [0.5, 0, 0.2, 1]}], "x0 < x1"),
        ([{"name": "a", "page": -1, "bbox": [0, 0, 1, 1]}], "page must be"),
        ([{"name": "a", "bbox": [0, 0, 1, 1]}] * 201, "more than 200"),
    ],
)
def test_bad_regions_are_refused_with_the_reason(spec: object, says: str) -> None:
    with pytest.raises(InvalidRegionsError, match=says):
        parse_regions(spec if isinstance(spec, str) else json.dumps(spec))


def test_the_engine_reads_only_the_named_regions_of_a_receipt() -> None:
    sample = samples.receipt(seed=3)
    regions = parse_regions(list(sample.regions))
    engine = OcrEngine(OcrSettings(backend="onnxruntime", threads=2))
    try:
        [page, full] = engine.recognize([RegionsPage(sample.data, regions), sample.data])
    finally:
        engine.close()
    assert page.fields is not None
    assert {f.name: f.text for f in page.fields} == sample.fields
    assert all(f.confidence > 0.5 for f in page.fields)
    # Only the regions were read: their lines, on the page's own coordinates.
    assert len(page.lines) == 3 < len(full.lines)
    total = next(f for f in page.fields if f.name == "total")
    (line,) = [line for line in page.lines if line.text == sample.fields["total"]]
    x0, y0, x1, y1 = total.bbox
    assert all(x0 - 1 <= x <= x1 + 1 and y0 - 1 <= y <= y1 + 1 for x, y in line.polygon)
    assert (page.width, page.height) == (full.width, full.height)


def test_document_json_gathers_the_fields_of_its_pages() -> None:
    page = {
        "status": "ok", "width": 100, "height": 200, "lines": [],
        "fields": [{"name": "total", "text": "12.50", "confidence": 0.97,
                    "bbox": [50.0, 160.0, 100.0, 180.0]},
                   {"name": "stamp", "text": "", "confidence": 0.0, "bbox": [0, 0, 20, 20]}],
    }  # fmt: skip
    second = {**page, "fields": [{"name": "stamp", "text": "PAID", "confidence": 0.9,
                                  "bbox": [0, 0, 20, 20]}]}  # fmt: skip
    doc = assemble("d1", 2, {1: page, 2: second})
    out = doc.to_dict()
    assert out["fields"] == {
        "total": {"text": "12.50", "confidence": 0.97, "page": 1, "bbox": [50, 160, 100, 180]},
        "stamp": {"text": "PAID", "confidence": 0.9, "page": 2, "bbox": [0, 0, 20, 20]},
    }
    import jsonschema

    jsonschema.validate(out, document_json_schema())
