"""A document's blocks as Markdown: ``document.md`` and ``ocrstream ocr --format markdown``.

- Each page starts with one page-break marker, ``<!-- page N -->``.
- ``title`` is ``# …``, ``heading`` is ``## …`` (on one line).
- Paragraphs (``text``, ``caption``, ``reference``, ``equation``) are re-flowed: their lines
  joined by spaces, and a word hyphenated at a line end ("sum-" + "mer") joined whole (a
  compound that already has a hyphen keeps this one: "state-of-the-" + "art"); a caption is
  set in italics.
- ``list`` items start at rows that begin with a bullet or a number; bullets become ``-``,
  numbers stay.
- Tables are GitHub pipe tables (the first row as the header) when no cell spans, else the
  block's HTML ``<table>``.
- A figure is an image link to its crop, ``![Figure N](figures/p{page}-{i}.png)``, relative to
  document.md (:func:`figure_path`; the assembler stores the crops there,
  :mod:`ocrstream.processors.figures`).
- Headers and footers (page numbers included) are left out of the body.
- OCR text is untrusted: ``&``, ``<`` and ``>`` in it are written as character references, so
  a line that reads ``<img src=x onerror=…>`` shows as that text in every Markdown renderer
  instead of becoming raw HTML; HTML tables are built from the cells, their text escaped.
- A page without blocks (read in text mode, or from a text layer) gives its lines as they are.

Pure: blocks and lines in, a string out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ocrstream.processors.layout.blocks import Block, Cell, spans, table_html

_HYPHENATED = re.compile(r"[^\W\d_]-$")  # a letter, then a hyphen, at the end of a line
_BULLET = re.compile(r"^\s*[•▪◦●○■□‣⁃*–-]\s+")
_NUMBER = re.compile(r"^\s*\(?(\d{1,3}|[a-z])[.)]\s+")
_LEFT_OUT = frozenset({"header", "footer", "figure"})
MIN_FIGURE_SIDE = 4.0  # a figure box thinner than this (page pixels) has no crop
_BLOCK_START = re.compile(r"^(\s*)([#>+*-]|\d+[.)]|=+$|```)")


@dataclass(frozen=True, slots=True)
class MarkdownPage:
    """What the renderer needs of a page: its blocks (None: not read in layout mode) and the
    text of its lines, by index."""

    page_no: int
    blocks: tuple[Block, ...] | None
    lines: tuple[str, ...]


def reflow(rows: Sequence[str]) -> str:
    """Rows of a paragraph as one line: joined by spaces, hyphenated words made whole."""
    text = ""
    for raw in rows:
        row = " ".join(raw.split())
        if not row:
            continue
        if text and _HYPHENATED.search(text) and row[0].islower():
            word = text.rsplit(" ", 1)[-1]
            # "sum-" + "mer" is one word; "state-of-the-" + "art" keeps its hyphen
            text = (text if "-" in word[:-1] else text[:-1]) + row
        else:
            text = f"{text} {row}" if text else row
    return text


def _html_safe(text: str) -> str:
    """Text that no Markdown renderer passes on as HTML (CommonMark decodes the references
    back to the characters)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escape(text: str) -> str:
    """A paragraph that would read as Markdown syntax at its start is escaped."""
    return _BLOCK_START.sub(lambda m: f"{m.group(1)}\\{m.group(2)}", text, count=1)


def _rows(block: Block, lines: Sequence[str]) -> list[str]:
    rows = (
        block.text.split("\n") if block.text else [lines[i] for i in block.lines if i < len(lines)]
    )
    return [_html_safe(row) for row in rows]


def list_items(rows: Sequence[str]) -> list[str]:
    """Markdown list items: a row with a bullet or a number starts an item, others go on."""
    items: list[tuple[str, list[str]]] = []
    for row in rows:
        if bullet := _BULLET.match(row):
            items.append(("-", [row[bullet.end() :]]))
        elif number := _NUMBER.match(row):
            marker = f"{number.group(1)}." if number.group(1).isdigit() else "-"
            items.append((marker, [row if marker == "-" else row[number.end() :]]))
        elif items:
            items[-1][1].append(row)
        else:
            items.append(("-", [row]))
    return [f"{marker} {reflow(parts)}" for marker, parts in items]


def _cell_text(cell: Cell) -> str:
    return _html_safe(" ".join(cell.text.split())).replace("|", "\\|")


def pipe_table(cells: Sequence[Cell]) -> str:
    """A GitHub pipe table of cells that do not span; the first row is the header."""
    n_rows = max(c.row for c in cells) + 1
    n_cols = max(c.col for c in cells) + 1
    grid = [[""] * n_cols for _ in range(n_rows)]
    for cell in cells:
        grid[cell.row][cell.col] = _cell_text(cell)
    lines = ["| " + " | ".join(grid[0]) + " |", "|" + "---|" * n_cols]
    lines += ["| " + " | ".join(row) + " |" for row in grid[1:]]
    return "\n".join(lines)


def render_block(block: Block, lines: Sequence[str]) -> str | None:
    """One block as Markdown, or None for what stays out of the body."""
    if block.type in _LEFT_OUT:
        return None
    if block.type == "table":
        if block.cells and not spans(block.cells):
            return pipe_table(block.cells)
        if block.cells:
            return table_html(block.cells)  # never a record's own html: built, escaped
        text = reflow(_rows(block, lines))
        return _escape(text) if text else None
    rows = _rows(block, lines)
    if block.type == "list":
        return "\n".join(list_items(rows)) or None
    text = reflow(rows)
    if not text:
        return None
    if block.type == "title":
        return f"# {text}"
    if block.type == "heading":
        return f"## {text}"
    if block.type == "caption":
        return f"*{text}*"
    return _escape(text)


def figure_path(page_no: int, index: int) -> str:
    """A figure crop's name under the document's folder, as document.md links it."""
    return f"figures/p{page_no}-{index}.png"


@dataclass(frozen=True, slots=True)
class FigureRef:
    """A figure of a page: its number on the page (from 1, reading order) and box."""

    page_no: int
    index: int
    bbox: tuple[float, float, float, float]

    @property
    def path(self) -> str:
        return figure_path(self.page_no, self.index)


def page_figures(page_no: int, blocks: Sequence[Block] | None) -> list[FigureRef]:
    """A page's figures in reading order; boxes too thin to show are skipped, uncounted."""
    out: list[FigureRef] = []
    for block in blocks or ():
        x0, y0, x1, y1 = block.bbox
        if block.type == "figure" and min(x1 - x0, y1 - y0) >= MIN_FIGURE_SIDE:
            out.append(FigureRef(page_no, len(out) + 1, block.bbox))
    return out


def render_page(page: MarkdownPage, figures_dir: str = "figures") -> str:
    parts = [f"<!-- page {page.page_no} -->"]
    if page.blocks is None:
        body = "\n".join(_html_safe(line) for line in page.lines if line.strip())
        if body:
            parts.append(body)
    else:
        figures = iter(page_figures(page.page_no, page.blocks))
        for block in page.blocks:
            if block.type == "figure":
                x0, y0, x1, y1 = block.bbox
                if min(x1 - x0, y1 - y0) >= MIN_FIGURE_SIDE:
                    ref = next(figures)
                    name = ref.path.removeprefix("figures/")
                    parts.append(f"![Figure {ref.index}]({figures_dir}/{name})")
                continue
            md = render_block(block, page.lines)
            if md is not None:
                parts.append(md)
    return "\n\n".join(parts) + "\n"


def render_markdown(pages: Sequence[MarkdownPage], figures_dir: str = "figures") -> str:
    """The document: its pages in order, each after its page-break marker; figure links
    point into ``figures_dir`` (relative to the Markdown file)."""
    return "\n".join(render_page(page, figures_dir) for page in pages)
