"""From the table model's structure tokens and cell boxes to cells with text. Pure.

1. The tokens (``<tr>``, ``<td></td>``, ``<td`` `` colspan="2"`` ``>`` ``</td>``, ``</tr>`` …)
   are walked into a grid: a cell takes the first column of its row that no cell above with a
   rowspan still covers, so ``row``/``col`` are grid positions as in HTML.
2. Each of the table's OCR lines (or the PDF's words) goes to the cell whose box holds most of
   it; the cell's text is its lines in reading order, joined by spaces. No second OCR pass.
3. The structure is unusable — :func:`cells_from_structure` returns None and the caller falls
   back to cells from line geometry — when the model ran out of steps before its end token
   (a table longer than it can write, 500 rows say), when tokens and boxes disagree, when it
   found no cell, when most of the table's lines fall in no cell at all, or when it has far
   fewer rows than the lines do (:data:`MIN_ROW_SHARE`: a long table squeezed into the model's
   488 pixels comes back as a few big cells).
4. The model misread the table — :func:`misread`, and the caller takes the cells from line
   geometry instead — when its cells put together lines that cannot be one cell's text (two
   lines side by side across a column gap, or two numbers stacked: a number does not wrap)
   or leaves a first-column cell empty under a filled one (a row label it did not span down,
   or rows shifted), while the geometric grid never puts together lines that the model's
   cells keep apart.
   SLANet-plus does that on some small borderless tables: a column dropped into its
   neighbour, rows shifted under a two-row header.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ocrstream.processors.layout.blocks import BBox, Cell
from ocrstream.processors.layout.table_model import TableStructure
from ocrstream.processors.ocr.types import Line

#: Share of the table's lines that may fall in no cell before the structure is not trusted.
MAX_STRAY = 0.5
#: The model's rows at least this share of the rows the table's lines form.
MIN_ROW_SHARE = 0.5
_OPEN = ("<td", "<td></td>", "<td>")
_NUMBER = re.compile(r"^[-+−(]?[$€£]?\d[\d.,]*%?\)?$")


@dataclass(frozen=True, slots=True)
class GridCell:
    row: int
    col: int
    rowspan: int
    colspan: int
    bbox: BBox


def _span(attr: str, name: str) -> int | None:
    attr = attr.strip()
    prefix = f'{name}="'
    if attr.startswith(prefix) and attr.endswith('"'):
        digits = attr[len(prefix) : -1]
        return int(digits) if digits.isdigit() and int(digits) > 0 else None
    return None


def parse_structure(tokens: Sequence[str], boxes: Sequence[BBox]) -> list[GridCell] | None:
    """The grid cells of a token stream (see the module docstring), None if it is malformed."""
    cells: list[GridCell] = []
    taken: set[tuple[int, int]] = set()
    row = -1
    col = 0
    box = 0
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == "<tr>":
            row, col = row + 1, 0
            continue
        if token not in _OPEN:
            continue  # </tr>, <thead>, </td> …: only rows and cells matter
        if row < 0:
            row = 0  # a cell before any <tr>: the first row
        rowspan = colspan = 1
        if token == "<td":
            while i < len(tokens) and tokens[i] != ">":
                if tokens[i] in _OPEN or tokens[i] == "<tr>":
                    return None  # an attribute list that never closes
                rowspan = _span(tokens[i], "rowspan") or rowspan
                colspan = _span(tokens[i], "colspan") or colspan
                i += 1
            i += 1  # the ">"
        if box >= len(boxes):
            return None
        while (row, col) in taken:
            col += 1
        for r in range(row, row + rowspan):
            for c in range(col, col + colspan):
                taken.add((r, c))
        cells.append(GridCell(row, col, rowspan, colspan, boxes[box]))
        box += 1
        col += colspan
    if not cells or box != len(boxes):
        return None
    return cells


def _inter(a: BBox, b: BBox) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return max(0.0, w) * max(0.0, h)


def _shift(box: BBox, dx: float, dy: float) -> BBox:
    return box[0] + dx, box[1] + dy, box[2] + dx, box[3] + dy


def grid_from_structure(
    structure: TableStructure, origin: tuple[float, float]
) -> list[GridCell] | None:
    """The model's grid with cell boxes in page pixels (``origin``: the crop's top-left on the
    page); None when it ran out of steps or its tokens are malformed."""
    if not structure.complete:
        return None
    grid = parse_structure(structure.tokens, structure.boxes)
    if grid is None:
        return None
    dx, dy = origin
    return [GridCell(g.row, g.col, g.rowspan, g.colspan, _shift(g.bbox, dx, dy)) for g in grid]


def cells_from_structure(
    structure: TableStructure,
    origin: tuple[float, float],
    idx: Sequence[int],
    boxes: Sequence[BBox],
    lines: Sequence[Line],
) -> tuple[Cell, ...] | None:
    """The table's cells with text from its lines (``idx`` into ``lines``, ``boxes`` their
    boxes in page pixels); ``origin`` is the crop's top-left on the page. None when the
    structure is unusable (module docstring, step 3)."""
    grid = grid_from_structure(structure, origin)
    return None if grid is None else fill_cells(grid, idx, boxes, lines)


def fill_cells(
    grid: Sequence[GridCell], idx: Sequence[int], boxes: Sequence[BBox], lines: Sequence[Line]
) -> tuple[Cell, ...] | None:
    """Cells of a grid (boxes in page pixels: the model's, or a born-digital page's ruled
    cells) with the text of the lines in them; None when the grid does not fit the lines
    (module docstring, step 3)."""
    if not grid:
        return None
    placed = [g.bbox for g in grid]
    members: list[list[int]] = [[] for _ in grid]
    stray = 0
    for i in idx:
        box = boxes[i]
        shares = [_inter(box, cell) for cell in placed]
        best = max(range(len(placed)), key=lambda k: shares[k])
        if shares[best] <= 0:
            stray += 1
            continue
        members[best].append(i)
    if idx and stray > MAX_STRAY * len(idx):
        return None
    rows = max(g.row + g.rowspan for g in grid)
    if rows < MIN_ROW_SHARE * len(_line_rows(idx, boxes)):
        return None
    out = []
    for g, cell_box, inside in zip(grid, placed, members, strict=True):
        text = " ".join(lines[j].text.strip() for j in _reading(inside, boxes))
        out.append(Cell(g.row, g.col, g.rowspan, g.colspan, cell_box, text))
    return tuple(out)


def misread(
    model: Sequence[Cell],
    geometry: Sequence[Cell],
    idx: Sequence[int],
    boxes: Sequence[BBox],
    lines: Sequence[Line],
) -> bool:
    """Whether the geometric cells of a table (``geometry``) should replace the model's
    (``model``, as :func:`fill_cells` filled them) for its lines (module docstring, step 4)."""
    in_model = _holders(model, idx, boxes)
    in_geometry = _holders(geometry, idx, boxes)
    seen: dict[int | None, int | None] = {}
    for i in idx:  # a geometric cell over two model cells: the geometry splits less there
        if in_model[i] is None:
            continue
        if seen.setdefault(in_geometry[i], in_model[i]) != in_model[i]:
            return False
    if _unspanned_label(model):
        return True
    rows = {i: r for r, row in enumerate(_line_rows(idx, boxes)) for i in row}
    together: dict[int, list[int]] = {}
    for i in idx:
        cell = in_model[i]
        if cell is not None:
            together.setdefault(cell, []).append(i)
    for members in together.values():
        for a, i in enumerate(members):
            for j in members[a + 1 :]:
                if in_geometry[i] == in_geometry[j]:
                    continue
                numbers = all(_NUMBER.match(lines[k].text.strip()) for k in (i, j))
                if rows[i] == rows[j] or numbers:
                    return True
    return False


def _unspanned_label(cells: Sequence[Cell]) -> bool:
    """An empty first-column cell under a filled one: a row label the model did not span
    down, or rows it shifted (an empty top-left corner is no such thing)."""
    first = sorted((c.row, bool(c.text.strip())) for c in cells if c.col == 0)
    return any(not filled and any(f for _, f in first[:k]) for k, (_, filled) in enumerate(first))


def _holders(
    cells: Sequence[Cell], idx: Sequence[int], boxes: Sequence[BBox]
) -> dict[int, int | None]:
    """Each line's cell: the one whose box holds most of it (None: no cell touches it)."""
    out: dict[int, int | None] = {}
    for i in idx:
        shares = [_inter(boxes[i], c.bbox) for c in cells]
        best = max(range(len(cells)), key=lambda k: shares[k], default=None)
        out[i] = best if best is not None and shares[best] > 0 else None
    return out


def _reading(idx: Sequence[int], boxes: Sequence[BBox]) -> list[int]:
    """Lines of one cell in reading order: rows top to bottom, each left to right."""
    return [i for row in _line_rows(idx, boxes) for i in sorted(row, key=lambda j: boxes[j][0])]


def _line_rows(idx: Sequence[int], boxes: Sequence[BBox]) -> list[list[int]]:
    """Lines grouped into rows: vertical overlap of half a line, top to bottom."""
    rows: list[list[int]] = []
    for i in sorted(idx, key=lambda j: (boxes[j][1] + boxes[j][3]) / 2):
        y0, y1 = boxes[i][1], boxes[i][3]
        if rows:
            last = boxes[rows[-1][-1]]
            if min(y1, last[3]) - max(y0, last[1]) >= 0.5 * min(y1 - y0, last[3] - last[1]):
                rows[-1].append(i)
                continue
        rows.append([i])
    return rows
