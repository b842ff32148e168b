"""The blocks of a page in layout mode, in the shape of document.json (docs/architecture.md).

A :class:`Block` is a region of the page with a type, its box in page pixels, the indices of
the page's OCR lines inside it (into ``lines`` of the same page) and its text; a table block
also has its ``cells``, an ``html`` rendering (``rowspan``/``colspan`` where cells span) and
its ``source``: ``model`` when the cells are the table-structure model's, ``rules`` when they are
a born-digital page's ruled cells, ``geometry`` when they were derived from the lines'
positions (no model output, or none usable).
"""

from __future__ import annotations

import html as html_mod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BBox = tuple[float, float, float, float]  # x0, y0, x1, y1 in page pixels

#: Every block type, as document.json and the PageResult record spell them.
BLOCK_TYPES = (
    "title",
    "heading",
    "text",
    "list",
    "table",
    "figure",
    "caption",
    "header",
    "footer",
    "equation",
    "reference",
)


def _bbox(value: Sequence[Any]) -> BBox:
    x0, y0, x1, y1 = (float(v) for v in value)
    return x0, y0, x1, y1


def _round(box: BBox) -> list[float]:
    return [round(v, 1) for v in box]


@dataclass(frozen=True, slots=True)
class Cell:
    """One table cell: its grid position and span, its box and its text."""

    row: int
    col: int
    rowspan: int = 1
    colspan: int = 1
    bbox: BBox = (0.0, 0.0, 0.0, 0.0)
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "col": self.col,
            "rowspan": self.rowspan,
            "colspan": self.colspan,
            "bbox": _round(self.bbox),
            "text": self.text,
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Cell:
        return cls(
            row=int(data.get("row", 0)),
            col=int(data.get("col", 0)),
            rowspan=max(1, int(data.get("rowspan", 1))),
            colspan=max(1, int(data.get("colspan", 1))),
            bbox=_bbox(data.get("bbox") or (0, 0, 0, 0)),
            text=str(data.get("text", "")),
        )


@dataclass(frozen=True, slots=True)
class Block:
    """One region of a page; see the module docstring."""

    type: str
    bbox: BBox
    lines: tuple[int, ...] = ()
    text: str = ""
    html: str | None = None
    cells: tuple[Cell, ...] = ()
    source: str | None = None  # tables: model | rules | geometry

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "bbox": _round(self.bbox),
            "lines": list(self.lines),
            "text": self.text,
        }
        if self.type == "table":
            out["html"] = self.html or table_html(self.cells)
            out["cells"] = [cell.to_dict() for cell in self.cells]
            if self.source:
                out["source"] = self.source
        return out

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Block:
        kind = str(data.get("type", "text"))
        return cls(
            type=kind if kind in BLOCK_TYPES else "text",  # a newer writer's type reads as text
            bbox=_bbox(data.get("bbox") or (0, 0, 0, 0)),
            lines=tuple(int(i) for i in data.get("lines") or ()),
            text=str(data.get("text", "")),
            html=data.get("html"),
            cells=tuple(Cell.from_mapping(c) for c in data.get("cells") or ()),
            source=data.get("source"),
        )


def spans(cells: Sequence[Cell]) -> bool:
    """Does any cell span more than one row or column?"""
    return any(c.rowspan > 1 or c.colspan > 1 for c in cells)


def table_html(cells: Sequence[Cell]) -> str:
    """A ``<table>`` of the cells, row by row; ``rowspan``/``colspan`` only where cells span.
    Text is escaped; a cell's line breaks become ``<br>``."""
    rows: dict[int, list[Cell]] = {}
    for cell in cells:
        rows.setdefault(cell.row, []).append(cell)
    out = ["<table>"]
    for row in sorted(rows):
        out.append("<tr>")
        for cell in sorted(rows[row], key=lambda c: c.col):
            attrs = ""
            if cell.rowspan > 1:
                attrs += f' rowspan="{cell.rowspan}"'
            if cell.colspan > 1:
                attrs += f' colspan="{cell.colspan}"'
            text = "<br>".join(html_mod.escape(part) for part in cell.text.split("\n"))
            out.append(f"<td{attrs}>{text}</td>")
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)
