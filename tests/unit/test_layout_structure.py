"""Layout: detections and lines to blocks — class mapping, line assignment, headers and
footers, tables from geometry, reading order across columns; the pinned model's decoding."""

from __future__ import annotations

import numpy as np

from ocrstream.processors.layout.model import INPUT_HW, REG_BINS, Detection, decode, nms
from ocrstream.processors.layout.structure import build_blocks, reading_order
from ocrstream.processors.ocr.types import Line

W, H = 1240, 1754  # A4 at 150 DPI


def _line(text: str, x0: float, y0: float, x1: float, y1: float) -> Line:
    return Line(text, 0.95, ((x0, y0), (x1, y0), (x1, y1), (x0, y1)))


def _column(x0: float, x1: float, y0: float, texts: list[str], step: float = 30) -> list[Line]:
    return [_line(t, x0, y0 + i * step, x1, y0 + i * step + 20) for i, t in enumerate(texts)]


def _two_column_page() -> tuple[list[Detection], list[Line]]:
    title = [_line("Rivers of the North", 200, 120, 1000, 180)]
    left = _column(100, 580, 300, ["L1 first para", "L2 first para", "L3 first para"])
    left += _column(100, 580, 450, ["L4 second para", "L5 second para"])
    right = _column(660, 1140, 300, ["R1 first para", "R2 first para", "R3 first para"])
    right += _column(660, 1140, 450, ["R4 second para", "R5 second para"])
    footer = [_line("7", 610, 1690, 630, 1710)]
    detections = [
        Detection("title", 0.9, (190, 110, 1010, 190)),
        Detection("text", 0.9, (95, 295, 585, 375)),
        Detection("text", 0.9, (95, 445, 585, 495)),
        Detection("text", 0.9, (655, 295, 1145, 375)),
        Detection("text", 0.9, (655, 445, 1145, 495)),
    ]  # the model missed the page number: position finds it
    return detections, title + left + right + footer


def test_two_columns_are_read_left_column_first_then_right_with_title_first_footer_last() -> None:
    detections, lines = _two_column_page()
    blocks = build_blocks(detections, lines, W, H)
    assert [b.type for b in blocks] == ["title", "text", "text", "text", "text", "footer"]
    assert [b.text.split("\n")[0] for b in blocks] == [
        "Rivers of the North", "L1 first para", "L4 second para",
        "R1 first para", "R4 second para", "7",
    ]  # fmt: skip
    # lines point into the page's lines; every line is in exactly one block
    assert sorted(i for b in blocks for i in b.lines) == list(range(len(lines)))
    assert [lines[i].text for i in blocks[2].lines] == ["L4 second para", "L5 second para"]


def test_reading_order_keeps_a_spanning_block_between_the_column_sections_it_separates() -> None:
    boxes = [
        (100, 100, 580, 300),  # 0 left, top section
        (660, 100, 1140, 300),  # 1 right, top section
        (100, 350, 1140, 400),  # 2 a full-width figure caption
        (100, 450, 580, 700),  # 3 left, bottom section
        (660, 450, 1140, 700),  # 4 right, bottom section
        (100, 20, 1140, 60),  # 5 header
    ]
    types = ["text", "text", "caption", "text", "text", "header"]
    assert reading_order(boxes, types) == [5, 0, 1, 2, 3, 4]


def test_single_column_reads_top_to_bottom() -> None:
    boxes = [(100, 500, 1100, 600), (100, 100, 1100, 200), (100, 300, 1100, 400)]
    assert reading_order(boxes) == [1, 2, 0]


def test_lines_in_no_region_become_paragraphs_when_the_model_finds_nothing() -> None:
    lines = _column(100, 1100, 300, ["one", "two"]) + _column(100, 1100, 600, ["three"])
    blocks = build_blocks([], lines, W, H)
    assert [b.type for b in blocks] == ["text", "text"]
    assert [b.text for b in blocks] == ["one\ntwo", "three"]


def test_headers_and_footers_by_position_and_page_numbers() -> None:
    lines = [
        _line("Journal of Rivers, vol. 3", 100, 30, 700, 60),  # in the top band
        _line("Body of the page", 100, 400, 900, 430),
        _line("Page 4 of 9", 100, 1600, 300, 1630),  # a page number near the bottom
        _line("Not a page number 4", 100, 1500, 500, 1530),
    ]
    by_text = {b.text: b.type for b in build_blocks([], lines, W, H)}
    assert by_text == {
        "Journal of Rivers, vol. 3": "header",
        "Body of the page": "text",
        "Page 4 of 9": "footer",
        "Not a page number 4": "text",
    }


def test_cdla_classes_map_to_block_types_and_containers_win_lines() -> None:
    lines = [
        _line("Item", 120, 820, 300, 850),
        _line("Qty", 700, 820, 800, 850),
        _line("Pen", 120, 870, 300, 900),
        _line("2", 700, 870, 740, 900),
        _line("Table 1: stock", 120, 780, 500, 805),
        _line("1. first", 120, 300, 500, 330),
        _line("2. second", 120, 340, 500, 370),
    ]
    detections = [
        Detection("text", 0.8, (100, 760, 1000, 920)),  # a text box around the table too
        Detection("table", 0.9, (110, 815, 900, 910)),
        Detection("table_caption", 0.9, (110, 775, 510, 810)),
        Detection("text", 0.9, (110, 290, 510, 380)),
        Detection("figure", 0.9, (100, 1000, 600, 1400)),
    ]
    blocks = build_blocks(detections, lines, W, H)
    assert [b.type for b in blocks] == ["list", "caption", "table", "figure"]
    table = blocks[2]
    assert [(c.row, c.col, c.text) for c in table.cells] == [
        (0, 0, "Item"), (0, 1, "Qty"), (1, 0, "Pen"), (1, 1, "2"),
    ]  # fmt: skip
    assert table.to_dict()["html"] == (
        "<table><tr><td>Item</td><td>Qty</td></tr><tr><td>Pen</td><td>2</td></tr></table>"
    )
    assert blocks[3].lines == ()


def test_only_a_heading_with_big_letters_near_the_top_is_the_title() -> None:
    lines = [
        _line("Big Title", 100, 100, 900, 160),  # 60 px letters
        _line("Methods", 100, 900, 300, 930),  # a section heading, body-sized
        _line("body text one", 100, 950, 900, 975),
        _line("body text two", 100, 985, 900, 1010),
    ]
    detections = [
        Detection("title", 0.9, (90, 90, 910, 170)),
        Detection("title", 0.9, (90, 895, 310, 935)),
        Detection("text", 0.9, (90, 945, 910, 1015)),
    ]
    assert [b.type for b in build_blocks(detections, lines, W, H)] == ["title", "heading", "text"]


def test_decode_turns_one_confident_anchor_into_a_box_in_page_pixels() -> None:
    labels = ("text", "title", "figure", "figure_caption", "table", "table_caption",
              "header", "footer", "reference", "equation")  # fmt: skip
    anchors = sum(-(-INPUT_HW[0] // s) * -(-INPUT_HW[1] // s) for s in (8, 16, 32, 64))
    out = np.zeros((anchors, 10 + 4 * REG_BINS), np.float32)
    out[:, 10:] = -50.0
    # anchor 0 of stride 8 is centred at (4, 4); every side 2 bins (16 px) away
    out[0, 1] = 0.9
    for side in range(4):
        out[0, 10 + side * REG_BINS + 2] = 50.0
    found = decode(out, labels, width=608 * 2, height=800 * 2)
    assert len(found) == 1
    assert found[0].label == "title"
    np.testing.assert_allclose(found[0].bbox, (0.0, 0.0, 40.0, 40.0), atol=1e-3)


def test_nms_keeps_the_best_of_overlapping_boxes() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30]], np.float32)
    assert nms(boxes, np.array([0.5, 0.9, 0.7], np.float32), 0.5) == [1, 2]


def test_big_letters_the_model_missed_are_a_heading_and_the_top_one_the_title() -> None:
    lines = [
        _line("Rivers of the North", 100, 100, 900, 150),  # 50 px letters, no region
        _line("body one", 100, 300, 900, 322),
        _line("body two", 100, 330, 900, 352),
        _line("Lakes", 100, 900, 300, 940),  # 40 px, further down: a heading
        _line("body three", 100, 960, 900, 982),
    ]
    detections = [Detection("text", 0.9, (90, 290, 910, 360))]
    blocks = build_blocks(detections, lines, W, H)
    assert [(b.type, b.text) for b in blocks] == [
        ("title", "Rivers of the North"),
        ("text", "body one\nbody two"),
        ("heading", "Lakes"),
        ("text", "body three"),
    ]


def test_a_table_of_500_rows_and_a_page_of_3000_loose_lines_stay_fast() -> None:
    import time

    rows = [
        line
        for r in range(500)
        for line in (_line(f"item {r}", 100, 10 + r * 3, 300, 12 + r * 3),
                     _line(str(r), 600, 10 + r * 3, 640, 12 + r * 3))
    ]  # fmt: skip
    started = time.perf_counter()
    (table,) = build_blocks([Detection("table", 0.9, (90, 0, 700, 1600))], rows, W, H)
    assert table.type == "table"
    assert max(c.row for c in table.cells) == 499
    assert {c.col for c in table.cells} == {0, 1}
    loose = [_line(f"w{i}", (i % 30) * 40, (i // 30) * 17, (i % 30) * 40 + 30, (i // 30) * 17 + 12)
             for i in range(3000)]  # fmt: skip
    blocks = build_blocks([], loose, W, H)
    assert sorted(i for b in blocks for i in b.lines) == list(range(3000))
    assert time.perf_counter() - started < 10.0


def test_a_page_without_text_or_regions_has_no_blocks() -> None:
    assert build_blocks([], [], W, H) == ()
    assert [
        b.type for b in build_blocks([Detection("figure", 0.9, (0, 0, 100, 100))], [], W, H)
    ] == ["figure"]


def test_a_region_box_that_spills_into_the_gutter_does_not_merge_the_columns() -> None:
    detections, lines = _two_column_page()
    # the model's left boxes reach 40 px into the right column's side of the gutter
    spilled = [
        Detection(d.label, d.score, (d.bbox[0], d.bbox[1], 700.0, d.bbox[3]))
        if d.bbox[0] < 200 and d.label == "text" else d
        for d in detections
    ]  # fmt: skip
    blocks = build_blocks(spilled, lines, W, H)
    assert [b.text.split("\n")[0] for b in blocks][1:5] == [
        "L1 first para", "L4 second para", "R1 first para", "R4 second para",
    ]  # fmt: skip
