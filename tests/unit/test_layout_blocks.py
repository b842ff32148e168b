"""Layout blocks: their document.json shape, the PageResult record, and the assembler."""

from __future__ import annotations

import json

import jsonschema

from ocrstream.processors.assemble import assemble
from ocrstream.processors.layout.blocks import Block, Cell, spans, table_html
from ocrstream.processors.ocr.types import Line, PageOCR
from ocrstream.schemas import Codec, document_json_schema
from ocrstream.schemas.records import Engine, PageImage, PageStatus, PageTask
from ocrstream.streams.ocr_batch import PreparedPage, engine_result

VALIDATOR = jsonschema.Draft202012Validator(document_json_schema())


def _line(text: str, x0: float, y0: float, x1: float, y1: float) -> Line:
    return Line(text, 0.9, ((x0, y0), (x1, y0), (x1, y1), (x0, y1)))


LINES = (
    _line("A Title", 100, 50, 500, 90),
    _line("Body text here.", 100, 120, 500, 140),
    _line("Name", 100, 200, 200, 220),
    _line("Qty", 300, 200, 360, 220),
)
TABLE = Block(
    "table",
    (90.0, 190.0, 400.0, 260.0),
    (2, 3),
    "Name Qty",
    cells=(
        Cell(0, 0, bbox=(100, 200, 200, 220), text="Name"),
        Cell(0, 1, bbox=(300, 200, 360, 220), text="Qty"),
        Cell(1, 0, colspan=2, bbox=(100, 230, 360, 250), text="a & b"),
    ),
)
BLOCKS = (
    Block("title", (100.0, 50.0, 500.0, 90.0), (0,), "A Title"),
    Block("text", (100.0, 120.0, 500.0, 140.0), (1,), "Body text here."),
    TABLE,
)


def test_a_table_renders_as_html_with_spans_only_where_cells_span() -> None:
    assert spans(TABLE.cells)
    assert table_html(TABLE.cells) == (
        '<table><tr><td>Name</td><td>Qty</td></tr><tr><td colspan="2">a &amp; b</td></tr></table>'
    )
    assert not spans(TABLE.cells[:2])


def test_a_block_survives_its_dict_and_only_tables_carry_cells() -> None:
    for block in BLOCKS:
        back = Block.from_mapping(json.loads(json.dumps(block.to_dict())))
        assert back.type == block.type
        assert back.lines == block.lines
        assert back.cells == tuple(
            Cell(c.row, c.col, c.rowspan, c.colspan, tuple(map(float, c.bbox)), c.text)  # type: ignore[arg-type]
            for c in block.cells
        )
    assert "cells" not in BLOCKS[0].to_dict()
    assert BLOCKS[2].to_dict()["html"].startswith("<table>")
    assert Block.from_mapping({"type": "sidebar", "bbox": [0, 0, 1, 1]}).type == "text"


def _layout_result() -> bytes:
    task = PageTask(doc_id="d1", page_no=1, page_count=1, image=PageImage("png", b"p"),
                    width=600, height=800, mode="layout")  # fmt: skip
    ocr = PageOCR(600, 800, LINES, blocks=BLOCKS)
    result = engine_result(PreparedPage(task), ocr, Engine("onnxruntime", "m", "1"))
    assert result.status is PageStatus.OK
    return Codec().encode(result)


def test_blocks_travel_on_the_page_result_and_reach_document_json_in_order() -> None:
    result = Codec().decode(_layout_result())
    assert [b.type for b in result.blocks] == ["title", "text", "table"]
    assert result.blocks[2].cells[2].colspan == 2
    doc = assemble("d1", 1, {1: result.to_avro()}).to_dict()
    VALIDATOR.validate(doc)
    page = doc["pages"][0]
    assert [b["type"] for b in page["blocks"]] == ["title", "text", "table"]
    assert page["blocks"][0]["lines"] == [0]
    assert page["lines"][page["blocks"][1]["lines"][0]]["text"] == "Body text here."
    assert page["blocks"][2]["cells"][2] == {
        "row": 1, "col": 0, "rowspan": 1, "colspan": 2,
        "bbox": [100.0, 230.0, 360.0, 250.0], "text": "a & b",
    }  # fmt: skip
    assert 'colspan="2"' in page["blocks"][2]["html"]


def test_a_text_mode_page_has_no_blocks_in_document_json() -> None:
    task = PageTask(doc_id="d1", page_no=1, page_count=1, image=PageImage("png", b"p"),
                    width=600, height=800)  # fmt: skip
    result = engine_result(PreparedPage(task), PageOCR(600, 800, LINES), Engine("o", "m", "1"))
    assert result.blocks is None
    decoded = Codec().decode(Codec().encode(result))
    doc = assemble("d1", 1, {1: decoded.to_avro()}).to_dict()
    VALIDATOR.validate(doc)
    assert "blocks" not in doc["pages"][0]
