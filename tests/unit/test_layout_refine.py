"""Layout: the model's regions corrected by the page's lines — borderless tables it missed
(read as text, a figure or nothing) found as grids of short lines, figures of running text
read as text, a title region over a title and a heading split by letter size."""

from __future__ import annotations

from ocrstream.processors.layout.model import Detection
from ocrstream.processors.layout.structure import build_blocks, refine_regions, text_layer_blocks
from ocrstream.processors.ocr.types import Line

W, H = 1240, 1754  # A4 at 150 DPI


def _line(text: str, x0: float, y0: float, x1: float, y1: float) -> Line:
    return Line(text, 0.95, ((x0, y0), (x1, y0), (x1, y1), (x0, y1)))


def _grid(top: float) -> list[Line]:
    """A borderless table: a header row and four rows of a label and three numbers."""
    rows = [["Region", "2020", "2021", "2022"]] + [
        [name, f"{r}1.5", f"{r}2.5", f"{r}3.5"] for r, name in enumerate(["North", "South", "East"])
    ]
    return [
        _line(text, 150 + c * 120, top + r * 34, 150 + c * 120 + 80, top + r * 34 + 24)
        for r, row in enumerate(rows)
        for c, text in enumerate(row)
    ]


def _paragraph(top: float, n: int, x0: float = 150, x1: float = 1090) -> list[Line]:
    return [_line(f"running text line {i} of the body.", x0, top + i * 34, x1, top + i * 34 + 24)
            for i in range(n)]  # fmt: skip


def test_a_borderless_grid_the_model_missed_is_a_table_without_the_heading_above_it() -> None:
    lines = [_line("Market Overview", 150, 300, 420, 330), *_grid(350), *_paragraph(560, 3)]
    detections = [Detection("text", 0.9, (140, 555, 1100, 650))]
    regions = refine_regions(detections, lines, W, H)
    assert [d.label for d in regions] == ["text", "table"]
    blocks = build_blocks(regions, lines, W, H)
    assert (blocks[0].type, blocks[0].text) == ("heading", "Market Overview")
    assert [b.type for b in blocks][1:] == ["table", "text"]
    table = blocks[1]
    assert (max(c.row for c in table.cells), max(c.col for c in table.cells)) == (3, 3)
    assert [c.text for c in table.cells[:5]] == ["Region", "2020", "2021", "2022", "North"]


def test_a_figure_region_that_is_a_grid_becomes_the_table_and_one_of_prose_becomes_text() -> None:
    lines = [*_grid(350), *_paragraph(700, 4)]
    detections = [
        Detection("figure", 0.6, (140, 340, 1000, 500)),  # the table, wider than its cells
        Detection("figure", 0.6, (140, 690, 1100, 840)),  # a paragraph
        Detection("figure", 0.9, (140, 900, 800, 1300)),  # a picture: no lines
    ]
    regions = refine_regions(detections, lines, W, H)
    assert [d.label for d in regions] == ["text", "text", "figure", "table"]
    blocks = build_blocks(regions, lines, W, H)
    assert [b.type for b in blocks] == ["table", "text", "figure"]


def test_two_columns_of_prose_with_short_last_lines_are_no_table() -> None:
    lines: list[Line] = []
    for top in (300, 500, 700):
        lines += [*_paragraph(top, 3, 100, 580), _line("end.", 100, top + 102, 160, top + 126)]
        lines += [*_paragraph(top, 3, 660, 1140), _line("fin.", 660, top + 102, 720, top + 126)]
    assert refine_regions([], lines, W, H) == []


def test_a_table_region_already_found_is_not_found_twice() -> None:
    lines = _grid(350)
    detections = [Detection("table", 0.9, (140, 340, 560, 500))]
    assert refine_regions(detections, lines, W, H) == detections


def test_a_born_digital_grid_without_rules_is_a_table_from_its_words() -> None:
    lines = [*_paragraph(200, 2), *_grid(350)]
    blocks = text_layer_blocks(lines, W, H)
    assert [b.type for b in blocks] == ["text", "table"]
    assert blocks[1].source == "geometry"


def test_a_title_region_over_the_title_and_a_smaller_heading_gives_two_blocks() -> None:
    lines = [
        _line("Board Report 2026", 130, 170, 830, 220),  # 50 px letters
        _line("Market Overview", 130, 235, 350, 265),  # 30 px
        *_paragraph(300, 3),
    ]
    detections = [
        Detection("title", 0.7, (120, 165, 840, 270)),
        Detection("text", 0.9, (140, 295, 1100, 400)),
    ]
    blocks = build_blocks(detections, lines, W, H)
    assert [(b.type, b.text) for b in blocks][:2] == [
        ("title", "Board Report 2026"),
        ("heading", "Market Overview"),
    ]


def test_a_born_digital_h2_a_third_bigger_than_the_body_is_a_heading() -> None:
    lines = [
        _line("Annual Review", 150, 100, 700, 150),  # the title
        *_paragraph(200, 3),
        *_paragraph(380, 2),
        _line("results and costs", 150, 470, 400, 503),  # 33 px: over a third bigger
        *_paragraph(530, 2),
    ]
    types = [(b.type, b.text) for b in text_layer_blocks(lines, W, H)]
    assert ("heading", "results and costs") in types
    assert [t for t, _ in types] == ["title", "text", "text", "heading", "text"]


def test_a_title_cased_line_alone_is_a_heading_and_a_paragraph_tail_is_not() -> None:
    lines = [
        _line("Quality Control", 150, 300, 400, 324),
        *_paragraph(360, 2),
        _line("Our Staff Read It All.", 150, 500, 500, 524),  # ends a sentence
        _line("the lower costs of energy", 150, 600, 500, 624),  # not capitalised
        *_paragraph(700, 2),
    ]
    regions = [Detection("text", 0.9, (140, y - 5, 1100, y + 29)) for y in (300, 500, 600)]
    blocks = build_blocks(regions, lines, W, H)
    headings = [b.text for b in blocks if b.type == "heading"]
    assert headings == ["Quality Control"]


def test_a_column_the_model_drew_twice_is_read_in_order_not_row_by_row_between_the_two() -> None:
    # two paragraphs in one column, their rows long and short in turn
    lines = [
        _line(f"row{i}", 150, top, 1098 if i % 2 == 0 else 1000, top + 24)
        for i, top in enumerate((300, 334, 368, 420, 454, 488))
    ]
    detections = [
        Detection("reference", 0.9, (145, 295, 1090, 525)),  # both paragraphs, a bit narrow
        Detection("text", 0.6, (140, 290, 1100, 530)),  # the same again, a little bigger
        Detection("text", 0.7, (140, 415, 1100, 530)),  # the second paragraph inside them
    ]
    blocks = build_blocks(detections, lines, W, H)
    assert [(b.type, b.text.split()) for b in blocks] == [
        ("reference", [f"row{i}" for i in range(6)])
    ]


def test_cells_from_geometry_span_under_a_group_header_and_down_a_row_label() -> None:
    # | Region (2 rows) | Returns (3 columns)  |
    # |                 | 2020 | 2022 | 2025   |
    # | North (2 rows)  | 85.1 | 97.1 | 26.0   |
    # |                 | 74.0 | 38.4 | 13.2   |
    xs = (150, 300, 420, 540)
    rows = [["Region", "Returns"], ["2020", "2022", "2025"], ["North", "85.1", "97.1", "26.0"]]
    rows.append(["74.0", "38.4", "13.2"])
    lines = [_line("Region", 150, 300, 230, 324), _line("Returns", 330, 300, 600, 324)]
    lines += [_line(t, x, 334, x + 60, 358) for t, x in zip(rows[1], xs[1:], strict=True)]
    lines += [_line(t, x, 368, x + 60, 392) for t, x in zip(rows[2], xs, strict=True)]
    lines += [_line(t, x, 402, x + 60, 426) for t, x in zip(rows[3], xs[1:], strict=True)]
    (table,) = build_blocks([Detection("table", 0.9, (140, 290, 620, 430))], lines, W, H)
    assert table.source == "geometry"
    assert table.to_dict()["html"] == (
        '<table><tr><td rowspan="2">Region</td><td colspan="3">Returns</td></tr>'
        "<tr><td>2020</td><td>2022</td><td>2025</td></tr>"
        '<tr><td rowspan="2">North</td><td>85.1</td><td>97.1</td><td>26.0</td></tr>'
        "<tr><td>74.0</td><td>38.4</td><td>13.2</td></tr></table>"
    )


def test_group_headers_narrower_than_their_columns_span_them_from_geometry() -> None:
    # | Unit (2 rows) |   Staff     |   Visits    |   (each group header centred, narrow)
    # |               | 2023 | 2025 | 2023 | 2025 |
    # | North         | 60.3 | 52.5 | 41.0 | 99.7 |
    # | South         | 91.7 | 17.6 |      | 35.8 |   (an empty body cell stays empty)
    xs = (150, 300, 420, 540, 660)
    lines = [_line("Unit", 150, 300, 210, 324), _line("Staff", 370, 300, 410, 324)]
    lines.append(_line("Visits", 605, 300, 655, 324))
    rows = [["2023", "2025", "2023", "2025"], ["North", "60.3", "52.5", "41.0", "99.7"]]
    rows.append(["South", "91.7", "17.6", "35.8"])
    lefts = [xs[1:], xs, (*xs[:3], xs[4])]
    for top, row, left in zip((334, 368, 402), rows, lefts, strict=True):
        lines += [_line(t, x, top, x + 60, top + 24) for t, x in zip(row, left, strict=True)]
    (table,) = build_blocks([Detection("table", 0.9, (140, 290, 740, 430))], lines, W, H)
    assert table.to_dict()["html"] == (
        '<table><tr><td rowspan="2">Unit</td><td colspan="2">Staff</td>'
        '<td colspan="2">Visits</td></tr>'
        "<tr><td>2023</td><td>2025</td><td>2023</td><td>2025</td></tr>"
        "<tr><td>North</td><td>60.3</td><td>52.5</td><td>41.0</td><td>99.7</td></tr>"
        "<tr><td>South</td><td>91.7</td><td>17.6</td><td>35.8</td></tr></table>"
    )
    assert [(c.col, c.colspan) for c in table.cells if c.row == 0] == [(0, 1), (1, 2), (3, 2)]
    assert [c.col for c in table.cells if c.row == 3] == [0, 1, 2, 4]


def test_a_table_also_drawn_as_an_equation_keeps_its_lines() -> None:
    # The model drew the grid as a table and, a few pixels smaller and less surely, as an
    # equation: the lines must stay in the table, or the page has no table at all.
    lines = _grid(350)
    detections = [
        Detection("table", 0.84, (140, 345, 600, 480)),
        Detection("equation", 0.57, (142, 346, 596, 478)),
    ]
    blocks = build_blocks(detections, lines, W, H)
    assert [b.type for b in blocks] == ["table"]
    assert blocks[0].cells[0].text == "Region"
    assert len(blocks[0].cells) == 16
    # An equation region elsewhere on the page keeps its own lines.
    formula = _line("E = m c 2", 300, 700, 520, 740)
    detections.append(Detection("equation", 0.6, (290, 690, 530, 750)))
    blocks = build_blocks(detections, [*lines, formula], W, H)
    assert [b.type for b in blocks] == ["table", "equation"]
    # Drawn over the same box as an equation more confident than the table: still a table.
    detections[1] = Detection("equation", 0.9, (142, 346, 596, 478))
    assert [b.type for b in build_blocks(detections, lines, W, H)] == ["table"]


def test_a_title_also_drawn_a_pixel_wider_as_a_less_sure_reference_stays_the_title() -> None:
    title = _line("Board Report on Capital Projects 2022", 150, 170, 900, 215)
    lines = [title, *_paragraph(260, 4)]
    detections = [
        Detection("title", 0.91, (155, 172, 850, 212)),
        Detection("reference", 0.56, (155, 172, 853, 212)),  # holds the line a hair more
        Detection("text", 0.9, (140, 255, 1100, 400)),
    ]
    blocks = build_blocks(detections, lines, W, H)
    assert (blocks[0].type, blocks[0].text) == ("title", title.text)
    assert [b.type for b in blocks] == ["title", "text"]


def test_a_table_region_over_two_columns_of_prose_is_read_as_paragraphs() -> None:
    left = _paragraph(300, 5, 150, 580)
    right = [_line(f"the right column, line {i}.", 660, 300 + i * 34, 1090, 324 + i * 34)
             for i in range(5)]  # fmt: skip
    detections = [Detection("table", 0.56, (140, 290, 1100, 480))]
    regions = refine_regions(detections, [*left, *right], W, H)
    assert [d.label for d in regions] == ["text"]
    blocks = build_blocks(regions, [*left, *right], W, H)
    assert [b.type for b in blocks] == ["text", "text"]
    assert blocks[0].text.splitlines() == [ln.text for ln in left]  # left column first
    # A real table region of short cells stays a table.
    grid = _grid(600)
    assert (
        refine_regions([Detection("table", 0.6, (140, 590, 600, 740))], grid, W, H)[0].label
        == "table"
    )
