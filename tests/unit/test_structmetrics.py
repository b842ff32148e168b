"""The quality measures of ``ocrstream bench structure`` (ocrstream.bench.structmetrics) and
how each parser's answer is brought to them (ocrstream.bench.structure)."""

from __future__ import annotations

import pytest

from ocrstream.bench.structmetrics import PageParse, Scores, leaks, parse_markdown
from ocrstream.bench.structset import PageTruth
from ocrstream.bench.structure import blocks_parse, rapidai_parse
from ocrstream.processors.layout.blocks import Block, Cell

TABLE = '<table><tr><td colspan="2">Sales</td></tr><tr><td>North</td><td>12.5</td></tr></table>'
LEFT = "Alpha beta gamma delta epsilon zeta eta theta."
RIGHT = "Iota kappa lambda mu nu xi omicron pi rho sigma."
TRUTH = PageTruth(
    title="Annual Review 2025",
    headings=("Outlook",),
    body=("Annual Review 2025", LEFT, "Outlook", RIGHT),
    tables=(TABLE,),
    header=("Contoso Energy", "Draft"),
    footer=("Page 17",),
)


def score(parse: PageParse) -> dict[str, object]:
    scores = Scores()
    scores.add(parse, TRUTH)
    return scores.to_dict()


def test_a_perfect_parse_scores_perfectly() -> None:
    parse = PageParse(body=TRUTH.body, headings=("Annual Review 2025", "Outlook"), tables=(TABLE,))
    assert score(parse) == {
        "pages": 1,
        "tables_scored": 1,
        "teds": 1.0,
        "teds_structure": 1.0,
        "heading_recall": 1.0,
        "title_rate": 1.0,
        "body_cer": 0.0,
        "header_footer_out": 1.0,
    }


def test_text_mode_has_no_table_or_heading_scores_and_leaks_its_header() -> None:
    lines = ("Contoso Energy Draft", *TRUTH.body, "Page 17")
    got = score(PageParse(body=lines))
    assert got["teds"] is None
    assert got["heading_recall"] is None
    assert got["header_footer_out"] == 0.0
    assert 0 < got["body_cer"] < 0.5  # type: ignore[operator]


def test_a_missed_table_and_a_missed_heading_cost() -> None:
    got = score(PageParse(body=TRUTH.body, headings=("Annual Review 2025",), tables=()))
    assert got["teds"] == 0.0
    assert got["heading_recall"] == 0.5
    assert got["title_rate"] == 1.0
    noisy = score(PageParse(body=TRUTH.body, headings=("Annual Reveiw 2O25",), tables=()))
    assert noisy["title_rate"] == 1.0  # OCR slips are forgiven, up to a ratio of 85


def test_reading_two_columns_across_costs_body_cer() -> None:
    half = len(LEFT) // 2
    across = (TRUTH.body[0], LEFT[:half] + " " + RIGHT[:half], LEFT[half:] + RIGHT[half:])
    in_order = score(PageParse(body=TRUTH.body))["body_cer"]
    mixed = score(PageParse(body=across))["body_cer"]
    assert in_order == 0.0
    assert mixed > 0.2  # type: ignore[operator]


@pytest.mark.parametrize(
    ("body", "leaked"),
    [
        (("Contoso Energy", LEFT), True),  # the header as a block of its own
        ((LEFT + " Page 17",), True),  # the footer glued to the end of a paragraph
        (("17", LEFT), True),  # a bare page number
        ((LEFT, "Overall 17 regions grew."), False),  # a number inside a sentence
        ((LEFT, RIGHT), False),
    ],
)
def test_header_and_footer_strings_in_the_body_are_found(
    body: tuple[str, ...], leaked: bool
) -> None:
    assert leaks(body, ("Contoso Energy", "17")) is leaked


def test_markdown_headings_tables_and_paragraphs() -> None:
    markdown = (
        "# **Annual Review 2025**\n\n"
        f"{LEFT[:20]}\n{LEFT[20:]}\n\n"
        "|**Region**|**Sales**|\n|---|---|\n|North|12.5|\n\n"
        "![](figure.png)\n\n"
        "## Outlook\n\n"
        f"_{RIGHT}_\n\n"
        "<table><tr><td>x</td></tr></table>\n"
    )
    parse = parse_markdown(markdown)
    assert parse.headings == ("Annual Review 2025", "Outlook")
    assert parse.tables == (
        "<table><tr><td>x</td></tr></table>",
        "<table><tr><td>Region</td><td>Sales</td></tr><tr><td>North</td><td>12.5</td></tr></table>",
    )
    assert parse.body[0] == "Annual Review 2025"
    assert parse.body[1] == LEFT[:20] + " " + LEFT[20:]
    assert score(PageParse(body=parse.body))["body_cer"] == pytest.approx(0.0, abs=0.02)


def test_ocrstream_blocks_set_apart_headers_tables_and_figures() -> None:
    box = (0.0, 0.0, 10.0, 10.0)
    blocks = (
        Block("header", box, text="Contoso Energy"),
        Block("title", box, text="Annual Review 2025"),
        Block("text", box, text=LEFT),
        Block("table", box, text="Sales", cells=(Cell(0, 0, 1, 2, box, "Sales"),)),
        Block("figure", box),
        Block("caption", box, text="Figure 1: x"),
        Block("footer", box, text="Page 17"),
    )
    parse = blocks_parse(blocks)
    assert parse.body == ("Annual Review 2025", LEFT, "Figure 1: x")
    assert parse.headings == ("Annual Review 2025",)
    assert parse.tables == ('<table><tr><td colspan="2">Sales</td></tr></table>',)


def test_rapidai_regions_gather_their_lines_top_to_bottom() -> None:
    def line(x: float, y: float, text: str) -> tuple[list[list[float]], str, float]:
        return [[x, y], [x + 50, y], [x + 50, y + 10], [x, y + 10]], text, 0.9

    regions = [
        ((0.0, 0.0, 300.0, 20.0), "header"),
        ((0.0, 30.0, 300.0, 60.0), "title"),
        ((0.0, 100.0, 300.0, 200.0), "text"),
        ((0.0, 220.0, 300.0, 300.0), "table"),
    ]
    lines = [
        line(5, 5, "Contoso"),
        line(5, 150, "second"),
        line(5, 110, "first"),
        line(5, 35, "Title"),
        line(5, 230, "cell"),
        line(5, 400, "loose"),
    ]
    parse = rapidai_parse(regions, lines, lambda box: TABLE)
    assert parse.body == ("Title", "first second", "loose")
    assert parse.headings == ("Title",)
    assert parse.tables == (TABLE,)
