"""Born-digital pages in layout mode: blocks from the PDF's own text, without OCR."""

from __future__ import annotations

from ocrstream.processors.layout.blocks import Block
from ocrstream.processors.layout.markdown import MarkdownPage, render_markdown
from ocrstream.processors.split import iter_pages
from ocrstream.schemas.records import Line, PageImage, PageTask, Point
from ocrstream.settings import LimitsSettings
from ocrstream.streams.ocr_batch import text_layer_result
from tests.samples import two_column_pdf


def _task(mode: str) -> PageTask:
    sample = two_column_pdf()
    (page,) = iter_pages(sample.data, None, LimitsSettings(), dpi=150, use_text_layer=True)
    assert page.text_lines is not None  # the page is answered from its text layer
    lines = tuple(
        Line(line.text, line.confidence, tuple(Point(x, y) for x, y in line.polygon))
        for line in page.text_lines
    )
    return PageTask(doc_id="d1", page_no=1, page_count=1, image=PageImage("png", page.data),
                    width=page.width, height=page.height, text_layer=lines, mode=mode)  # fmt: skip


def test_a_born_digital_page_gets_blocks_in_reading_order_from_its_text() -> None:
    sample = two_column_pdf()
    result = text_layer_result(_task("layout"))
    assert result.engine is not None
    assert result.engine.backend == "text-layer"
    assert result.blocks is not None
    assert [b.type for b in result.blocks] == ["title", "text", "text", "text", "text", "footer"]
    assert result.blocks[0].text == sample.title
    blocks = tuple(Block.from_mapping(b.to_avro()) for b in result.blocks)
    md = render_markdown([MarkdownPage(1, blocks, tuple(line.text for line in result.lines))])
    assert md.split("\n\n")[1:] == [f"# {sample.title}", *sample.paragraphs[:-1],
                                     f"{sample.paragraphs[-1]}\n"]  # fmt: skip


def test_a_born_digital_page_in_text_mode_has_no_blocks() -> None:
    assert text_layer_result(_task("text")).blocks is None
