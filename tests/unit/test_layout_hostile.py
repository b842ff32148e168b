"""Hostile pages in layout mode, on the real models: each completes with sane output, in
bounded time and memory — a page that is one huge table, a table of 500 rows, a page with no
text, a layout model that finds nothing."""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator

import numpy as np
import pymupdf
import pytest

from ocrstream.processors.layout.model import Detection, LayoutDetector
from ocrstream.processors.ocr.engine import OcrEngine
from ocrstream.processors.ocr.types import LayoutPage, PageOCR
from ocrstream.settings import OcrSettings
from tests import samples

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine() -> Iterator[OcrEngine]:
    engine = OcrEngine(OcrSettings(backend="onnxruntime", threads=2, det_limit_side=10000))
    yield engine
    engine.close()


def _table_page(rows: int, cols: int, height: float, dpi: int) -> np.ndarray:
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=height)
    cells = [(r, c, 1, 1, f"R{r}C{c}") for r in range(rows) for c in range(cols)]
    samples.draw_table(page, cells, (30, 30), col_w=535 / cols, row_h=14, fontsize=9)
    pix = page.get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY)
    image = np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width).copy()
    doc.close()
    return image


def _read(engine: OcrEngine, image: np.ndarray, limit_s: float) -> tuple[PageOCR, float]:
    start = time.perf_counter()
    [page] = engine.recognize([LayoutPage(image)])
    took = time.perf_counter() - start
    assert took < limit_s, f"{took:.0f} s"
    return page, took


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_a_page_that_is_one_huge_table(engine: OcrEngine) -> None:
    page, _ = _read(engine, _table_page(55, 6, 842, 150), limit_s=240)
    assert page.blocks is not None
    tables = [b for b in page.blocks if b.type == "table"]
    assert tables, [b.type for b in page.blocks]
    cells = {c.text for t in tables for c in t.cells}
    # Most of the 330 cells come back with their own text, whichever way they were found.
    assert len({f"R{r}C{c}" for r in range(55) for c in range(6)} & cells) > 0.8 * 330
    assert _rss_mb() < 4000


def test_a_table_of_500_rows_falls_back_to_its_lines_and_keeps_every_row(
    engine: OcrEngine,
) -> None:
    # One tall page (7,100 pt): squeezed into the table model's 488 pixels its rows can't be
    # told apart, so the cells come from the lines' geometry; nothing read is lost from the
    # blocks, whichever regions the layout model made of the long page.
    page, _ = _read(engine, _table_page(500, 3, 7100, 100), limit_s=480)
    assert page.blocks is not None
    wanted = {f"R{r}C{c}" for r in range(500) for c in range(3)}
    words = {word for line in page.lines for word in line.text.split()}
    assert len(words & wanted) > 0.5 * len(wanted)  # small print, downscaled: OCR misses some
    in_blocks = {word for b in page.blocks for word in b.text.split()}
    assert words & wanted <= in_blocks  # … but the blocks lose none of what was read
    placed = {i for b in page.blocks for i in b.lines}
    assert placed == set(range(len(page.lines)))
    tables = [b for b in page.blocks if b.type == "table"]
    assert tables
    assert sum(max(c.row for c in t.cells) + 1 for t in tables) >= 100
    assert all(t.source == "geometry" for t in tables if len(t.cells) > 150)
    assert _rss_mb() < 4000


def test_a_page_without_text_is_empty_with_no_blocks(engine: OcrEngine) -> None:
    blank = np.full((1754, 1240), 255, np.uint8)
    page, _ = _read(engine, blank, limit_s=60)
    assert page.status == "empty"
    assert page.lines == ()
    assert page.blocks == ()


class _FindsNothing(LayoutDetector):
    def detect(self, image: np.ndarray) -> list[Detection]:
        return []


def test_a_layout_model_that_finds_nothing_still_gives_paragraphs_and_a_title() -> None:
    settings = OcrSettings(backend="onnxruntime", threads=2)
    engine = OcrEngine(settings)
    engine._layout = _FindsNothing(settings)
    sample = samples.two_column_scan()
    try:
        [page] = engine.recognize([LayoutPage(sample.data)])
    finally:
        engine.close()
    assert page.blocks is not None
    assert page.blocks[0].type == "title"
    assert page.blocks[0].text == sample.title
    assert [b.text.split()[0] for b in page.blocks if b.type == "text"] == [
        "Alpha", "Beta", "Gamma", "Delta"
    ]  # fmt: skip
    assert page.blocks[-1].type == "footer"
