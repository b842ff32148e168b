"""Ruled tables of born-digital pages from their vector lines, and the page's blocks from them."""

from __future__ import annotations

from ocrstream.processors.layout.ruled import ruled_tables, segments
from ocrstream.processors.layout.structure import text_layer_blocks
from ocrstream.processors.ocr.types import Line
from ocrstream.processors.split import iter_pages
from ocrstream.settings import LimitsSettings
from tests import samples


def _rect(x0: float, y0: float, x1: float, y1: float) -> tuple[float, float, float, float]:
    return (x0, y0, x1, y1)


def test_cell_rectangles_make_a_grid_with_spans_where_a_rule_is_missing() -> None:
    # A 3 x 3 grid of 100 px cells whose top-left cell spans two rows and the top-right two
    # cells of the first row are one (drawn as one rectangle each).
    boxes = [
        _rect(0, 0, 100, 200),  # rowspan 2
        _rect(100, 0, 300, 100),  # colspan 2
        _rect(100, 100, 200, 200), _rect(200, 100, 300, 200),
        _rect(0, 200, 100, 300), _rect(100, 200, 200, 300), _rect(200, 200, 300, 300),
    ]  # fmt: skip
    (table,) = ruled_tables(boxes)
    assert table.bbox == (0, 0, 300, 300)
    assert [(c.row, c.col, c.rowspan, c.colspan) for c in table.cells] == [
        (0, 0, 2, 1), (0, 1, 1, 2), (1, 1, 1, 1), (1, 2, 1, 1),
        (2, 0, 1, 1), (2, 1, 1, 1), (2, 2, 1, 1),
    ]  # fmt: skip
    assert table.cells[1].bbox == (100, 0, 300, 100)


def test_strokes_make_a_grid_and_lone_rules_or_frames_do_not() -> None:
    h = [_rect(0, y, 300, y + 1) for y in (0, 50, 100)]  # thin: one rule each
    v = [_rect(x, 0, x + 1, 100) for x in (0, 150, 300)]
    (table,) = ruled_tables(h + v)
    assert len(table.cells) == 4
    assert ruled_tables([_rect(0, 40, 500, 41)]) == []  # an underline
    assert ruled_tables([_rect(0, 0, 500, 300)]) == []  # a frame round a picture
    assert segments([_rect(0, 0, 5, 2)]) == []  # a glyph-sized stroke


def _line(text: str, box: tuple[float, float, float, float]) -> Line:
    x0, y0, x1, y1 = box
    return Line(text, 1.0, ((x0, y0), (x1, y0), (x1, y1), (x0, y1)))


def test_a_born_digital_page_gets_its_ruled_table_and_figure_from_its_own_drawing() -> None:
    sample = samples.structured_pdf()
    pages = list(iter_pages(sample.data, None, LimitsSettings(), 150, use_text_layer=True))
    page = pages[1]
    assert page.text_lines is not None
    blocks = text_layer_blocks(
        page.text_lines, page.width, page.height, page.text_rules, page.text_images
    )
    (table,) = [b for b in blocks if b.type == "table"]
    assert table.source == "rules"
    assert {(c.row, c.col, c.rowspan, c.colspan, c.text) for c in table.cells} == set(sample.cells)
    assert [b.type for b in blocks].count("figure") == 1
    assert blocks[-1].type == "footer"
    # Page 1 has neither: no rules, no images, no table.
    assert pages[0].text_rules == ()
    assert pages[0].text_images == ()
