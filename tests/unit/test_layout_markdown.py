"""document.md: headings, re-flowed paragraphs, lists, pipe or HTML tables, no headers or
footers in the body, one page-break marker per page."""

from __future__ import annotations

from ocrstream.processors.assemble import assemble, render_outputs
from ocrstream.processors.layout.blocks import Block, Cell
from ocrstream.processors.layout.markdown import (
    MarkdownPage,
    list_items,
    reflow,
    render_markdown,
)
from ocrstream.processors.ocr.types import Line, PageOCR

BOX = (0.0, 0.0, 10.0, 10.0)


def _md(*blocks: Block) -> str:
    return render_markdown([MarkdownPage(1, blocks, ())])


def test_reflow_joins_lines_and_end_of_line_hyphens() -> None:
    assert reflow(["grain to the harbour in sum-", "mer and in autumn."]) == (
        "grain to the harbour in summer and in autumn."
    )
    assert reflow(["a state-of-the-", "art method"]) == "a state-of-the-art method"
    assert reflow(["Smith-", "Jones wrote"]) == "Smith- Jones wrote"  # not a broken word
    assert reflow(["pages 10-", "12 were"]) == "pages 10- 12 were"
    assert reflow(["  spaced   out ", "", "words"]) == "spaced out words"


def test_headings_and_paragraphs_in_block_order() -> None:
    md = _md(
        Block("title", BOX, text="Rivers of the North"),
        Block("heading", BOX, text="Alpha and\nbeta"),
        Block("text", BOX, text="Alpha rivers begin in the hills\nand run down to the lakes."),
        Block("caption", BOX, text="Figure 1: a lake"),
    )
    assert md == (
        "<!-- page 1 -->\n\n# Rivers of the North\n\n## Alpha and beta\n\n"
        "Alpha rivers begin in the hills and run down to the lakes.\n\n*Figure 1: a lake*\n"
    )


def test_headers_and_footers_stay_out_of_the_body_and_figures_link_their_crops() -> None:
    md = _md(
        Block("header", BOX, text="Journal of Rivers"),
        Block("text", BOX, text="Body."),
        Block("figure", BOX),
        Block("figure", (0, 0, 2, 2)),  # too small to crop: no link
        Block("caption", BOX, text="Figure 1: a lake"),
        Block("figure", BOX),
        Block("footer", BOX, text="7"),
    )
    assert md == (
        "<!-- page 1 -->\n\nBody.\n\n![Figure 1](figures/p1-1.png)\n\n*Figure 1: a lake*\n\n"
        "![Figure 2](figures/p1-2.png)\n"
    )


def test_lists_keep_their_items_and_numbers() -> None:
    assert list_items(["• first item that", "goes on", "• second"]) == [
        "- first item that goes on",
        "- second",
    ]
    assert list_items(["1. one", "2) two", "(a) letter"]) == ["1. one", "2. two", "- (a) letter"]
    md = _md(Block("list", BOX, text="- apples\n- pears"))
    assert md == "<!-- page 1 -->\n\n- apples\n- pears\n"


def test_a_table_without_spans_is_a_pipe_table_and_pipes_are_escaped() -> None:
    cells = (
        Cell(0, 0, text="Item"), Cell(0, 1, text="Qty"),
        Cell(1, 0, text="Pen | red"), Cell(1, 1, text="2"),
        Cell(2, 0, text="Ink"),
    )  # fmt: skip
    md = _md(Block("table", BOX, text="…", cells=cells))
    assert md == ("<!-- page 1 -->\n\n| Item | Qty |\n|---|---|\n| Pen \\| red | 2 |\n| Ink |  |\n")


def test_a_table_with_a_spanning_cell_is_html() -> None:
    cells = (Cell(0, 0, colspan=2, text="Stock"), Cell(1, 0, text="Pen"), Cell(1, 1, text="2"))
    md = _md(Block("table", BOX, text="…", cells=cells))
    assert md == (
        '<!-- page 1 -->\n\n<table><tr><td colspan="2">Stock</td></tr>'
        "<tr><td>Pen</td><td>2</td></tr></table>\n"
    )


def test_text_that_looks_like_markdown_is_escaped() -> None:
    md = _md(Block("text", BOX, text="# not a heading"), Block("text", BOX, text="- not a list"))
    assert md == "<!-- page 1 -->\n\n\\# not a heading\n\n\\- not a list\n"


def test_ocr_text_never_becomes_html_in_any_block() -> None:
    """A scan that reads as markup stays text: every renderer shows the characters."""
    evil = "<img src=x onerror=alert(1)>"
    spanning = (Cell(0, 0, colspan=2, text=evil), Cell(1, 0, text="a"), Cell(1, 1, text="b"))
    md = _md(
        Block("title", BOX, text=evil),
        Block("text", BOX, text=f"see {evil} & more"),
        Block("list", BOX, text=f"- {evil}"),
        Block("caption", BOX, text=evil),
        Block("table", BOX, cells=(Cell(0, 0, text=evil), Cell(0, 1, text="x"))),
        # a record's own html is never copied out: the table is built from its cells
        Block("table", BOX, cells=spanning, html=f"<table><tr><td>{evil}</td></tr></table>"),
    )
    assert "<img" not in md
    assert md.count("&lt;img src=x onerror=alert(1)&gt;") == 6
    assert "see &lt;img src=x onerror=alert(1)&gt; &amp; more" in md
    plain = render_markdown([MarkdownPage(1, None, (evil,))])
    assert plain == "<!-- page 1 -->\n\n&lt;img src=x onerror=alert(1)&gt;\n"


def _line(text: str, y: float) -> Line:
    return Line(text, 0.9, ((10.0, y), (200.0, y), (200.0, y + 20), (10.0, y + 20)))


def test_document_md_has_one_marker_per_page_and_text_mode_pages_as_lines() -> None:
    layout = PageOCR(
        600, 800, (_line("Title", 10), _line("Body", 100)),
        blocks=(Block("title", BOX, (0,), "Title"), Block("text", BOX, (1,), "Body")),
    )  # fmt: skip
    plain = PageOCR(600, 800, (_line("first row", 10), _line("second row", 40)))
    doc = assemble("d1", 3, {1: layout, 2: plain})
    md = render_outputs(doc, ["md"])["md"].decode()
    assert md == (
        "<!-- page 1 -->\n\n# Title\n\nBody\n\n"
        "<!-- page 2 -->\n\nfirst row\nsecond row\n\n"
        "<!-- page 3 -->\n"
    )
    assert md.count("<!-- page ") == 3
