"""From a page's layout detections and OCR lines to its blocks in reading order. Pure.

0. Before the table model runs, :func:`refine_regions` corrects the model's regions by the
   page's lines: a grid of short lines that no table region holds is a table (borderless
   tables are often read as text, a figure or nothing), a figure that such a grid fills or
   that is full of running text is text.
1. Lines go to the detected region that holds most of their area (a table or figure before the
   text around it; a text or reference region lying mostly inside a more confident one is the
   same paragraphs drawn twice and takes none); lines in no region are grouped into text
   blocks by proximity, so a page where the model found nothing still has paragraphs.
2. CDLA classes map to block types (:data:`CDLA_TYPES`); a title region over rows of clearly
   different letter sizes gives one block per size; a short text block with letters
   :data:`HEADING_SIZE` times the body's, or one capitalised line that ends no sentence, is a
   heading the model missed; the tallest-lettered heading in the top part of the page is the
   ``title``, the others stay ``heading``; a text block whose rows start with bullets or
   numbers is a ``list``.
3. Headers and footers by position too: a block wholly in the top or bottom band of the page
   (:data:`BAND`), or a lone page number near an edge, is a header or footer whatever the model
   said.
4. Tables get their cells from the table-structure model where it read the region
   (:mod:`.table_grid`: its grid, the lines' text in its cell boxes), ``source`` ``model``;
   where it did not, its answer is unusable, or it misread the lines (:func:`.misread`: lines
   it puts in one cell that cannot share one), from their lines' geometry — rows where lines
   overlap vertically, columns at the vertical gaps no line crosses — ``source`` ``geometry``.
5. Reading order (:func:`reading_order`): headers, then the body by XY-cut — columns left to
   right where a vertical gap splits the blocks, bands top to bottom where none does, bands
   that share a column layout kept together so that the left column is read to its end before
   the right — then footers.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ocrstream.processors.layout.blocks import BBox, Block, Cell
from ocrstream.processors.layout.model import Detection
from ocrstream.processors.layout.ruled import ruled_tables
from ocrstream.processors.layout.table_grid import GridCell, fill_cells, misread
from ocrstream.processors.ocr.types import Line

#: CDLA class → block type (title is refined into title or heading).
CDLA_TYPES = {
    "text": "text",
    "title": "heading",
    "figure": "figure",
    "figure_caption": "caption",
    "table": "table",
    "table_caption": "caption",
    "header": "header",
    "footer": "footer",
    "reference": "reference",
    "equation": "equation",
}
#: Fraction of the page height at the top and at the bottom where headers and footers live.
BAND = 0.06
#: Near an edge (this fraction of the height), a block that is only a page number.
PAGE_NUMBER_BAND = 0.12
PAGE_NUMBER = re.compile(
    r"^\s*(?:page\s+|p\.\s*|seite\s+)?[-–—(\[]?\s*\d{1,4}\s*[-–—)\]]?"
    r"(?:\s*(?:of|/|von)\s*\d{1,4})?\s*$",
    re.IGNORECASE,
)
LIST_ITEM = re.compile(r"^\s*(?:[•▪◦●○■□‣⁃*–-]\s+|\(?\d{1,3}[.)]\s+|\(?[a-z][.)]\s+)")
_CONTAINERS = ("table", "figure", "equation")

log = logging.getLogger(__name__)

#: The grid of a detected table region (by the detection's index) with cell boxes in page
#: pixels: the table model's reading, or a born-digital page's ruled cells; None where the
#: model's answer was unusable.
TableReadings = Mapping[int, Sequence[GridCell] | None]


@dataclass(frozen=True, slots=True)
class _Region:
    type: str
    bbox: BBox
    score: float = 1.0


def line_box(line: Line) -> BBox:
    xs = [p[0] for p in line.polygon]
    ys = [p[1] for p in line.polygon]
    return min(xs), min(ys), max(xs), max(ys)


def _area(b: BBox) -> float:
    return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])


def _inter(a: BBox, b: BBox) -> float:
    return _area((max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])))


def _mostly_in(b: BBox, box: BBox) -> bool:
    """Whether at least half of ``b`` lies inside ``box``."""
    return _inter(b, box) >= 0.5 * max(_area(b), 1e-6)


def _union(boxes: Sequence[BBox]) -> BBox:
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )


def build_blocks(
    detections: Sequence[Detection],
    lines: Sequence[Line],
    width: int,
    height: int,
    tables: TableReadings | None = None,
    grid_source: str = "model",
) -> tuple[Block, ...]:
    """The page's blocks in reading order; see the module docstring. ``tables``: the grids of
    detected table regions, by detection index; ``grid_source`` what they came from (the
    block's ``source``: ``model``, or ``rules`` for a born-digital page's ruled tables)."""
    regions = [_Region(CDLA_TYPES.get(d.label, "text"), d.bbox, d.score) for d in detections]
    boxes = [line_box(line) for line in lines]
    members: list[list[int]] = [[] for _ in regions]
    loose: list[int] = []
    live = _undoubled(regions)
    for i, box in enumerate(boxes):
        owner = _owner(box, live)
        (members[owner] if owner is not None else loose).append(i)
    groups = []
    for n, r in enumerate(regions):
        parts = _by_letter_size(members[n], boxes) if r.type == "heading" else [members[n]]
        if len(parts) == 1:
            groups.append((r.type, members[n], r.bbox, n))
        else:  # a title region over a title and the heading under it: one block each
            groups += [(r.type, part, _union([boxes[i] for i in part]), n) for part in parts]
    groups += [
        ("text", idx, _union([boxes[i] for i in idx]), -1) for idx in _paragraphs(loose, boxes)
    ]
    blocks: list[Block] = []
    for kind, idx, region_box, region in groups:
        if not idx and kind != "figure":
            continue  # a region with no text is dropped, but for figures
        ordered = _row_order(idx, boxes)
        bbox = _union([region_box, *(boxes[i] for i in ordered)]) if ordered else region_box
        kind = _position_type(kind, bbox, ordered, lines, height)
        if kind == "table":
            grid = (tables or {}).get(region)
            cells = None if grid is None else fill_cells(grid, ordered, boxes, lines)
            if cells is None and region in (tables or {}):
                why = "no grid" if grid is None else f"{len(grid)} cells misfit the lines"
                log.info("table structure unusable (%s): cells from geometry", why)
            geometry = table_cells(ordered, boxes, lines)
            misreads = grid_source == "model" and cells is not None
            if misreads and misread(cells or (), geometry, ordered, boxes, lines):
                log.info("table model misread the lines: cells from geometry")
                cells = None
            source = grid_source if cells is not None else "geometry"
            if cells is None:
                cells = geometry
            text = "\n".join(" ".join(c.text for c in row) for row in _rows_of(cells))
            blocks.append(Block(kind, bbox, tuple(ordered), text, cells=cells, source=source))
            continue
        text = _join_rows(ordered, boxes, lines)
        if kind == "text" and _is_list(ordered, boxes, lines):
            kind = "list"
        blocks.append(Block(kind, bbox, tuple(ordered), text))
    blocks = _titles(_big_text_headings(blocks, boxes), boxes, height)
    # Ordered by where their text is: a region box that spills into the gutter between two
    # columns must not join the columns into one.
    cores = [_union([boxes[i] for i in b.lines]) if b.lines else b.bbox for b in blocks]
    return tuple(blocks[i] for i in reading_order(cores, [b.type for b in blocks]))


def text_layer_blocks(
    lines: Sequence[Line],
    width: int,
    height: int,
    rules: Sequence[BBox] = (),
    images: Sequence[BBox] = (),
) -> tuple[Block, ...]:
    """The blocks of a born-digital page from its own text lines and drawing, without a
    model: lines grouped into paragraphs by position and letter size (font size), big letters
    as headings and the title, headers and footers by position, the same reading order; ruled
    tables from its vector ``rules`` (:mod:`.ruled`, cells with spans, ``source`` ``rules``),
    grids of short lines without rules as tables with cells from geometry
    (:func:`refine_regions`), and figures where its ``images`` are drawn (boxes in page
    pixels)."""
    regions = [Detection("figure", 1.0, box) for box in images if _area(box) > 0]
    grids: dict[int, Sequence[GridCell] | None] = {}
    for table in ruled_tables(rules):
        grids[len(regions)] = table.cells
        regions.append(Detection("table", 1.0, table.bbox))
    regions = refine_regions(regions, lines, width, height)
    return build_blocks(regions, lines, width, height, grids, grid_source="rules")


#: A table cell's line is at most this share of the page width (body lines are wider).
CELL_WIDTH = 0.25
#: Lines of cells found in a grid: at least this many rows with two or more cells.
GRID_ROWS = 3


def refine_regions(
    detections: Sequence[Detection], lines: Sequence[Line], width: int, height: int
) -> list[Detection]:
    """The layout model's regions corrected by the page's lines; run before the table model,
    so that the tables found here are read by it. Indices of ``detections`` are kept (a region
    is relabelled, never dropped); found tables are appended.

    - A grid of short lines — at least :data:`GRID_ROWS` rows of two or more lines, each line
      at most :data:`CELL_WIDTH` of the page wide, in columns that overlap from row to row,
      crossed by no wider line, its first and last rows of two or more lines (a heading or
      caption stacked on it is not a row) — that no table region holds is a table (the layout model
      reads many borderless tables as text, a figure or nothing).
    - A figure region that such a table fills (most of its height) is that table: it becomes
      a text region whose lines the table takes.
    - A figure region filled with lines of running text (three or more, most of them over
      half its width) is text.
    - A table region over running text (three or more lines, at least half of them wider
      than :data:`CELL_WIDTH` of the page: the model drew one box over two columns of prose)
      is no region: its box shrinks to nothing, and its lines are grouped into paragraphs as
      lines in no region are."""
    out = list(detections)
    boxes = [line_box(line) for line in lines]
    for n, d in enumerate(out):
        inside = [b for b in boxes if _mostly_in(b, d.bbox)]
        wide = [b for b in inside if b[2] - b[0] > CELL_WIDTH * width]
        if d.label == "table" and len(inside) >= 3 and 2 * len(wide) >= len(inside):
            x0, y0 = d.bbox[:2]
            out[n] = Detection("text", d.score, (x0, y0, x0, y0))  # no region: paragraphs
    grids = _grids(boxes, [d.bbox for d in out if d.label == "table"], width, height)
    for n, d in enumerate(out):
        if d.label != "figure":
            continue
        inside = [b for b in boxes if _mostly_in(b, d.bbox)]
        fw = d.bbox[2] - d.bbox[0]
        long_ = [b for b in inside if b[2] - b[0] >= 0.5 * fw]
        filled = any(
            _inter(g, d.bbox) >= 0.8 * _area(g) and g[3] - g[1] >= 0.6 * (d.bbox[3] - d.bbox[1])
            for g in grids
        )
        if filled or (len(inside) >= 3 and 2 * len(long_) >= len(inside)):
            out[n] = Detection("text", d.score, d.bbox)
    out += [Detection("table", 0.5, g) for g in grids]
    return out


def _grids(boxes: Sequence[BBox], tables: Sequence[BBox], width: int, height: int) -> list[BBox]:
    """Boxes of the grids of short lines (see :func:`refine_regions`)."""

    def free(b: BBox) -> bool:
        held = any(_mostly_in(b, t) for t in tables)
        return not held and b[1] >= BAND * height and b[3] <= (1 - BAND) * height

    short = [i for i, b in enumerate(boxes) if b[2] - b[0] <= CELL_WIDTH * width and free(b)]
    parent = {i: i for i in short}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    ordered = sorted(short, key=lambda j: boxes[j][1])
    for a, i in enumerate(ordered):
        x0, y0, x1, y1 = boxes[i]
        h = max(y1 - y0, 1.0)
        for j in ordered[a + 1 :]:
            u0, v0, u1, v1 = boxes[j]
            if v0 - y1 > 1.5 * h:
                break
            same_row = min(y1, v1) - max(y0, v0) >= 0.5 * min(h, v1 - v0)
            gap = max(u0 - x1, x0 - u1)
            stacked = -0.5 * h <= v0 - y1 <= 1.5 * h and min(x1, u1) - max(x0, u0) > 0
            if (same_row and gap <= 0.2 * width) or stacked:
                parent[find(j)] = find(i)
    members: dict[int, list[int]] = {}
    for i in short:
        members.setdefault(find(i), []).append(i)
    found: list[BBox] = []
    for idx in members.values():
        rows = _rows(idx, boxes)
        while rows and len(rows[0]) < 2:  # a heading or caption just above, not a row
            rows.pop(0)
        while rows and len(rows[-1]) < 2:
            rows.pop()
        if sum(1 for r in rows if len(r) >= 2) < GRID_ROWS:
            continue
        bbox = _union([boxes[i] for r in rows for i in r])
        crossed = any(i not in parent and _mostly_in(b, bbox) for i, b in enumerate(boxes))
        if not crossed:
            found.append(bbox)
    return found


#: Body regions (text, reference) that the model draws twice over the same lines.
_BODY = ("text", "reference")
#: A body region this much inside a more confident one is the same paragraphs twice.
DOUBLED = 0.7


def _undoubled(regions: Sequence[_Region]) -> list[_Region | None]:
    """The regions with those the model drew twice left out (None, so indices stay): a text
    or reference region lying mostly (:data:`DOUBLED`) inside a more confident text or
    reference region, and any region drawn over much the same box (each :data:`DOUBLED`
    inside the other) as a more confident one of the same kind — both tables, figures or
    equations, or both not — a table before an equation whatever their scores. Two body
    regions over one column would otherwise share its lines by a few pixels of overlap, each
    taking every other paragraph's rows; a title also drawn, less surely and a pixel wider,
    as a reference would lose its line to it; a table also drawn as an equation would be
    no table."""
    out: list[_Region | None] = list(regions)
    for i, a in enumerate(regions):
        for j, b in enumerate(regions):
            if i == j or out[j] is None:
                continue
            inter = _inter(a.bbox, b.bbox)
            inside = inter >= DOUBLED * max(_area(a.bbox), 1e-6)
            around = inter >= DOUBLED * max(_area(b.bbox), 1e-6)
            if a.type in _BODY and b.type in _BODY:
                doubled = inside
            else:
                same_kind = (a.type in _CONTAINERS) == (b.type in _CONTAINERS)
                doubled = same_kind and inside and around
            if doubled and _rank(b) > _rank(a):
                out[i] = None
                break
    return out


def _rank(region: _Region) -> tuple[bool, float, float]:
    return region.type == "table", region.score, _area(region.bbox)


def _owner(box: BBox, regions: Sequence[_Region | None]) -> int | None:
    """The region that holds most of the line (at least half of it); containers first."""
    area = max(_area(box), 1e-6)
    best: tuple[int, float, float] | None = None
    for i, region in enumerate(regions):
        if region is None:
            continue
        share = _inter(box, region.bbox) / area
        if share < 0.5:
            continue
        rank = (1 if region.type in _CONTAINERS else 0, share, -_area(region.bbox))
        if best is None or rank > best:
            best, choice = rank, i
    return choice if best is not None else None


def _paragraphs(idx: Sequence[int], boxes: Sequence[BBox]) -> list[list[int]]:
    """Lines in no region, grouped: a line joins a group whose last line ends just above it
    (a gap under 1.2 line heights), overlaps it horizontally and has letters of its size
    (within a third). Groups that end far above the line are closed, so a page of thousands
    of lines stays linear in practice."""
    groups: list[list[int]] = []
    extents: list[list[float]] = []  # each group's x0, x1, bottom
    open_: list[int] = []  # groups that may still grow
    for i in sorted(idx, key=lambda j: (boxes[j][1], boxes[j][0])):
        x0, y0, x1, y1 = boxes[i]
        h = max(y1 - y0, 1.0)
        open_ = [g for g in open_ if y0 - extents[g][2] <= 1.2 * h or y0 - extents[g][2] < 0]
        for g in open_:
            gx0, gx1, gy1 = extents[g]
            last = boxes[groups[g][-1]][3] - boxes[groups[g][-1]][1]
            if (
                -0.5 * h <= y0 - gy1 <= 1.2 * h
                and min(x1, gx1) - max(x0, gx0) > 0
                and 0.75 <= h / max(last, 1.0) <= 1.33
            ):
                groups[g].append(i)
                extents[g] = [min(gx0, x0), max(gx1, x1), max(gy1, y1)]
                break
        else:
            groups.append([i])
            extents.append([x0, x1, y1])
            open_.append(len(groups) - 1)
    return groups


def _rows(idx: Sequence[int], boxes: Sequence[BBox]) -> list[list[int]]:
    """Lines grouped into rows (vertical overlap of half a line height), top to bottom, each
    row left to right."""
    rows: list[list[int]] = []
    for i in sorted(idx, key=lambda j: ((boxes[j][1] + boxes[j][3]) / 2, boxes[j][0])):
        y0, y1 = boxes[i][1], boxes[i][3]
        if rows:
            ry0 = min(boxes[j][1] for j in rows[-1])
            ry1 = max(boxes[j][3] for j in rows[-1])
            if min(y1, ry1) - max(y0, ry0) >= 0.5 * min(y1 - y0, ry1 - ry0):
                rows[-1].append(i)
                continue
        rows.append([i])
    return [sorted(row, key=lambda j: boxes[j][0]) for row in rows]


def _row_order(idx: Sequence[int], boxes: Sequence[BBox]) -> list[int]:
    return [i for row in _rows(idx, boxes) for i in row]


def _by_letter_size(idx: Sequence[int], boxes: Sequence[BBox]) -> list[list[int]]:
    """A heading region's rows cut where the letter height changes by a quarter or more from
    one row to the next (a title and the section heading under it in one region)."""
    rows = _rows(idx, boxes)
    parts: list[list[int]] = []
    last = 0.0
    for row in rows:
        h = _median([boxes[i][3] - boxes[i][1] for i in row])
        if parts and max(h, last) < 1.25 * min(h, last):
            parts[-1] += row
        else:
            parts.append(list(row))
        last = h
    return parts or [list(idx)]


def _join_rows(idx: Sequence[int], boxes: Sequence[BBox], lines: Sequence[Line]) -> str:
    rows = _rows(idx, boxes)
    return "\n".join(" ".join(lines[i].text.strip() for i in row) for row in rows).strip()


def _is_list(idx: Sequence[int], boxes: Sequence[BBox], lines: Sequence[Line]) -> bool:
    rows = _rows(idx, boxes)
    firsts = [lines[row[0]].text for row in rows]
    marked = sum(1 for t in firsts if LIST_ITEM.match(t))
    return bool(LIST_ITEM.match(firsts[0])) and marked >= 2 if firsts else False


def _position_type(
    kind: str, bbox: BBox, idx: Sequence[int], lines: Sequence[Line], height: int
) -> str:
    if kind in ("table", "figure") or height <= 0:
        return kind
    top, bottom = bbox[1] / height, bbox[3] / height
    text = " ".join(lines[i].text for i in idx)
    if bottom <= BAND or (top < PAGE_NUMBER_BAND and PAGE_NUMBER.match(text) and idx):
        return "header"
    if top >= 1 - BAND or (bottom > 1 - PAGE_NUMBER_BAND and PAGE_NUMBER.match(text) and idx):
        return "footer"
    return kind


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


#: Letters this many times the body's make a short text block a heading.
HEADING_SIZE = 1.25
_WORD = re.compile(r"[^\W\d_]{4,}")


def _title_cased(text: str) -> bool:
    """One line of at most eight words that reads as a heading: it starts with a capital,
    every word of four letters or more is capitalised, and it does not end a sentence."""
    words = text.split()
    long_words = _WORD.findall(text)
    return (
        0 < len(words) <= 8
        and text[0].isupper()
        and text.rstrip()[-1] not in ".,;:!?"
        and bool(long_words)
        and all(w[0].isupper() for w in long_words)
    )


def _big_text_headings(blocks: list[Block], boxes: Sequence[BBox]) -> list[Block]:
    """A heading the model missed: a short text block (up to three rows) whose letters are
    at least :data:`HEADING_SIZE` times the body's (a born-digital h2 is about 1.35 times;
    OCR boxes of a scan flatten that), or a one-row text block of body-sized letters or
    bigger that reads as a heading (:func:`_title_cased`)."""
    heights = [[boxes[j][3] - boxes[j][1] for j in b.lines] for b in blocks]
    body = _median(
        [h for b, hs in zip(blocks, heights, strict=True) if b.type == "text" for h in hs]
    )
    out = []
    for block, hs in zip(blocks, heights, strict=True):
        rows = block.text.count("\n") + 1
        big = rows <= 3 and _median(hs) >= HEADING_SIZE * body > 0 if hs else False
        plain = (
            rows == 1 and _median(hs) >= 0.9 * body and _title_cased(block.text) if hs else False
        )
        if block.type == "text" and (big or plain):
            block = Block("heading", block.bbox, block.lines, block.text)
        out.append(block)
    return out


def _titles(blocks: list[Block], boxes: Sequence[BBox], height: int) -> list[Block]:
    """The heading with the tallest letters, in the top 40% of the page and taller than the
    body's lines, is the page's title."""
    heights = {i: sorted(boxes[j][3] - boxes[j][1] for j in b.lines) for i, b in enumerate(blocks)}
    body = sorted(h for i, b in enumerate(blocks) if b.type == "text" for h in heights[i])
    body_h = body[len(body) // 2] if body else 0.0
    best: tuple[float, int] | None = None
    for i, block in enumerate(blocks):
        if block.type != "heading" or not heights[i] or block.bbox[1] > 0.4 * height:
            continue
        h = heights[i][len(heights[i]) // 2]
        if h >= 1.3 * body_h and (best is None or h > best[0]):
            best = (h, i)
    if best is not None:
        b = blocks[best[1]]
        blocks[best[1]] = Block("title", b.bbox, b.lines, b.text)
    return blocks


# -- tables ---------------------------------------------------------------------------------


def table_cells(
    idx: Sequence[int], boxes: Sequence[BBox], lines: Sequence[Line]
) -> tuple[Cell, ...]:
    """Cells from line geometry: rows of overlapping lines; columns at the vertical gaps that
    no line of the body (from the first row with the most lines down) crosses but those
    spanning several columns (taken narrowest lines first); header lines go to the columns
    they cover or the nearest, and a group header spans the columns under it
    (:func:`_group_headers`); a line over several columns spans them (``colspan``), and a
    row label left empty under one (the first column empty in a row that has cells) continues
    it (``rowspan``)."""
    if not idx:
        return ()
    line_rows = _rows(idx, boxes)
    most = max(len(row) for row in line_rows)
    first_full = next(k for k, row in enumerate(line_rows) if len(row) == most)
    body = [i for row in line_rows[first_full:] for i in row]  # header lines make no column
    columns: list[list[float]] = []
    for x0, x1 in sorted(((boxes[i][0], boxes[i][2]) for i in body), key=lambda s: s[1] - s[0]):
        hit = [c for c in columns if min(x1, c[1]) - max(x0, c[0]) > 0]
        if len(hit) == 1:
            hit[0][0], hit[0][1] = min(hit[0][0], x0), max(hit[0][1], x1)
        elif not hit:
            columns.append([x0, x1])
    columns.sort()
    spans: list[Cell] = []
    for r, row in enumerate(line_rows):
        by_col: dict[int, list[int]] = {}
        width: dict[int, int] = {}
        for i in row:
            x0, x1 = boxes[i][0], boxes[i][2]
            covered = [c for c, (c0, c1) in enumerate(columns) if x0 <= (c0 + c1) / 2 <= x1]
            if not covered:
                cx = (x0 + x1) / 2
                covered = [min(range(len(columns)), key=lambda c: abs(sum(columns[c]) / 2 - cx))]
            col = covered[0]
            by_col.setdefault(col, []).append(i)
            width[col] = max(width.get(col, 1), covered[-1] - col + 1)
        for col in sorted(by_col):
            members = by_col[col]
            text = " ".join(lines[i].text.strip() for i in members)
            box = _union([boxes[i] for i in members])
            spans.append(Cell(r, col, 1, width[col], box, text))
    return _continued_labels(_group_headers(spans, columns))


def _group_headers(cells: list[Cell], columns: Sequence[Sequence[float]]) -> list[Cell]:
    """In the header rows (those above the first row with a cell in every column), a column
    no cell of the row covers goes to the row's nearest cell but the first column's: a group
    header centred over its columns is narrower than they are."""
    rows = _rows_of(cells)
    full = next(
        (k for k, row in enumerate(rows) if sum(c.colspan for c in row) >= len(columns)),
        len(rows),
    )
    out: list[Cell] = []
    for k, row in enumerate(rows):
        groups = [c for c in row if c.col > 0]
        if k >= full or not groups:
            out += row
            continue
        taken = {c.col + n for c in row for n in range(c.colspan)}
        reach = {id(c): (c.col, c.col + c.colspan - 1) for c in groups}
        for col in range(1, len(columns)):
            if col in taken:
                continue
            mid = (columns[col][0] + columns[col][1]) / 2
            near = min(groups, key=lambda c: max(c.bbox[0] - mid, mid - c.bbox[2], 0.0))
            lo, hi = reach[id(near)]
            reach[id(near)] = (min(lo, col), max(hi, col))
        for c in row:
            if c.col == 0 or id(c) not in reach:
                out.append(c)
                continue
            lo, hi = reach[id(c)]
            crossed = any(o is not c and lo <= o.col <= hi for o in row)
            col, span = (c.col, c.colspan) if crossed else (lo, hi - lo + 1)
            out.append(Cell(c.row, col, c.rowspan, span, c.bbox, c.text))
    return out


def _continued_labels(cells: list[Cell]) -> tuple[Cell, ...]:
    """A first-column cell spans down over the rows below it whose first column is empty."""
    rows = _rows_of(cells)
    out: list[Cell] = []
    label: int | None = None  # index in out of the last first-column cell
    for row in rows:
        if row[0].col == 0:
            label = len(out)
        elif label is not None:
            c = out[label]
            out[label] = Cell(c.row, c.col, c.rowspan + 1, c.colspan, c.bbox, c.text)
        out += row
    return tuple(out)


def _rows_of(cells: Sequence[Cell]) -> list[list[Cell]]:
    rows: dict[int, list[Cell]] = {}
    for cell in cells:
        rows.setdefault(cell.row, []).append(cell)
    return [sorted(rows[r], key=lambda c: c.col) for r in sorted(rows)]


# -- reading order --------------------------------------------------------------------------


def reading_order(bboxes: Sequence[BBox], types: Sequence[str] | None = None) -> list[int]:
    """Indices of the blocks in reading order; see the module docstring (step 5)."""
    types = types or ["text"] * len(bboxes)
    head = [i for i, t in enumerate(types) if t == "header"]
    foot = [i for i, t in enumerate(types) if t == "footer"]
    body = [i for i, t in enumerate(types) if t not in ("header", "footer")]

    def by_position(idx: list[int]) -> list[int]:
        return sorted(idx, key=lambda i: (bboxes[i][1], bboxes[i][0]))

    return by_position(head) + _xy_cut(body, bboxes) + by_position(foot)


def _split(idx: Sequence[int], bboxes: Sequence[BBox], axis: int) -> list[list[int]]:
    """Groups of blocks separated by gaps along ``axis`` (0: x, columns; 1: y, bands)."""
    order = sorted(idx, key=lambda i: bboxes[i][axis])
    groups: list[list[int]] = []
    end = float("-inf")
    for i in order:
        lo, hi = bboxes[i][axis], bboxes[i][axis + 2]
        if groups and lo < end - 1.0:  # overlaps the group (a pixel of slack)
            groups[-1].append(i)
        else:
            groups.append([i])
        end = max(end, hi) if len(groups[-1]) > 1 else hi
    return groups


def _xy_cut(idx: list[int], bboxes: Sequence[BBox]) -> list[int]:
    if len(idx) <= 1:
        return list(idx)
    columns = _split(idx, bboxes, 0)
    if len(columns) > 1:
        return [i for col in columns for i in _xy_cut(col, bboxes)]
    bands = _split(idx, bboxes, 1)
    if len(bands) == 1:
        return sorted(idx, key=lambda i: (bboxes[i][1], bboxes[i][0]))
    merged: list[list[int]] = [bands[0]]
    for band in bands[1:]:
        joined = merged[-1] + band
        if len(_split(merged[-1], bboxes, 0)) > 1 and len(_split(joined, bboxes, 0)) > 1:
            merged[-1] = joined  # the same columns go on: read each to its end
        else:
            merged.append(band)
    return [i for group in merged for i in _xy_cut(group, bboxes)]
