"""document.pdf of a PDF source: the source's own pages with the recognised text grafted on."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pymupdf
import pytest

from ocrstream.processors.ocr.geometry import rotate_page
from ocrstream.processors.ocr.types import Line, PageOCR
from ocrstream.processors.searchable_pdf import graft_text_layer, source_searchable_pdf
from ocrstream.processors.split import iter_pages
from ocrstream.processors.split_types import SplitPage
from ocrstream.schemas.records import Engine, PageResult, PageStatus, Point, utc_now
from ocrstream.schemas.records import Line as WireLine
from ocrstream.settings import LimitsSettings
from ocrstream.streams import outputs
from tests import hostile, samples

DPI = 150
LIMITS = LimitsSettings()


def born_digital(path: Path, rotation: int, *, sideways: bool = False) -> Path:
    """One page with visible text, a crop box inside an offset media box, ``/Rotate``."""
    doc = pymupdf.open()
    page = doc.new_page(width=400, height=600)
    page.set_mediabox(pymupdf.Rect(10, 20, 410, 620))
    page.set_cropbox(pymupdf.Rect(30, 40, 380, 600))
    turn = 90 if sideways else 0
    page.insert_text((80, 450), "hello searchable world", fontsize=18, rotate=turn)
    page.insert_text((200, 500), "second line", fontsize=12, rotate=turn)
    page.set_rotation(rotation)
    doc.save(path)
    return path


def split(path: Path) -> list[SplitPage]:
    return list(iter_pages(str(path), None, LIMITS, dpi=DPI, use_text_layer=True))


def shouted(pages: list[SplitPage]) -> dict[int, PageOCR]:
    """What an engine would have read: the text layer's lines and boxes, in capitals, so the
    grafted words are told apart from the page's own."""
    out = {}
    for p in pages:
        assert p.text_lines, "the sample page has a text layer"
        lines = tuple(dataclasses.replace(ln, text=ln.text.upper()) for ln in p.text_lines)
        out[p.page_no] = PageOCR(p.width, p.height, lines)
    return out


def lines_by_text(page: pymupdf.Page) -> dict[str, tuple[pymupdf.Rect, tuple[float, float]]]:
    """Each line's text, box (unrotated page coordinates) and direction."""
    out = {}
    for block in page.get_text("dict")["blocks"]:
        for line in block.get("lines", ()):
            text = "".join(span["text"] for span in line["spans"]).strip()
            out[text] = (pymupdf.Rect(line["bbox"]), tuple(line["dir"]))
    return out


def overlap(a: pymupdf.Rect, b: pymupdf.Rect) -> float:
    inter = a & b
    return 0.0 if inter.is_empty else inter.get_area() / (a | b).get_area()


def render(page: pymupdf.Page) -> np.ndarray:
    pix = page.get_pixmap(dpi=72, colorspace=pymupdf.csGRAY)
    return np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width).copy()


def assert_grafted_over_own_text(source: Path, grafted: bytes) -> None:
    with pymupdf.open(source) as before, pymupdf.open(stream=grafted) as after:
        assert after.page_count == before.page_count
        for old, new in zip(before, after, strict=True):
            assert new.rotation == old.rotation
            assert new.rect == old.rect
            own = lines_by_text(old)
            found = lines_by_text(new)
            for text, (box, direction) in own.items():
                assert text in found  # the page's own text is kept
                grafted_box, grafted_dir = found[text.upper()]
                assert overlap(box, grafted_box) > 0.7, (text, box, grafted_box)
                assert grafted_dir == pytest.approx(direction, abs=1e-3)
            # the layer is invisible: the page looks exactly as before
            assert np.array_equal(render(new), render(old))


@pytest.mark.parametrize("rotation", [0, 90, 180, 270])
def test_the_text_lies_over_the_words_on_a_cropped_and_turned_page(
    tmp_path: Path, rotation: int
) -> None:
    source = born_digital(tmp_path / "in.pdf", rotation)
    grafted = graft_text_layer(source, shouted(split(source)), dpi=DPI, limits=LIMITS)
    assert_grafted_over_own_text(source, grafted)


@pytest.mark.parametrize("turn", [1, 2, 3])
def test_a_page_the_engine_turned_upright_gets_its_text_turned_back(
    tmp_path: Path, turn: int
) -> None:
    """The engine reports lines in the page as it turned it (``rotation`` degrees clockwise,
    :func:`rotate_page`); the graft undoes that turn."""
    source = born_digital(tmp_path / "in.pdf", 0, sideways=True)
    pages = split(source)
    results = shouted(pages)
    page = pages[0]
    # where each pixel goes when the engine turns the image: found by turning a marker
    marker = np.zeros((page.height, page.width), np.uint8)

    def turned(x: float, y: float) -> tuple[float, float]:
        marker[:] = 0
        marker[int(y), int(x)] = 255
        ys, xs = np.nonzero(rotate_page(marker, turn))
        return float(xs[0]) + 0.5, float(ys[0]) + 0.5

    result = results[1]
    lines = tuple(
        dataclasses.replace(ln, polygon=tuple(turned(x, y) for x, y in ln.polygon))
        for ln in result.lines
    )
    width, height = (page.height, page.width) if turn % 2 else (page.width, page.height)
    results[1] = PageOCR(width, height, lines, rotation=turn * 90)  # type: ignore[arg-type]
    grafted = graft_text_layer(source, results, dpi=DPI, limits=LIMITS)
    assert_grafted_over_own_text(source, grafted)


def test_scanned_pages_keep_their_image_bytes_and_unread_pages_stay_as_they_were(
    tmp_path: Path,
) -> None:
    sample = samples.scanned_pdf(3, dpi=100, seed=41)
    source = tmp_path / "scan.pdf"
    source.write_bytes(sample.data)
    pages = list(iter_pages(str(source), None, LIMITS, dpi=DPI))
    assert [p.origin for p in pages] == ["passthrough"] * 3
    results = {
        p.page_no: PageOCR(
            p.width,
            p.height,
            (Line(f"page {p.page_no} text", 0.9, ((40, 40), (400, 40), (400, 80), (40, 80))),),
        )
        for p in pages[:2]  # page 3 was not read
    }
    grafted = graft_text_layer(source, results, dpi=DPI, limits=LIMITS)
    with pymupdf.open(source) as before, pymupdf.open(stream=grafted) as after:
        assert [p.get_text().strip() for p in after] == ["page 1 text", "page 2 text", ""]
        for old, new in zip(before, after, strict=True):
            (old_xref, *_), (new_xref, *_) = old.get_images()[0], new.get_images()[0]
            assert after.xref_stream_raw(new_xref) == before.xref_stream_raw(old_xref)
            assert np.array_equal(render(new), render(old))
    # the text adds little: no image is re-encoded
    assert len(grafted) < len(sample.data) + 20_000


def result_of(page: SplitPage, ocr: PageOCR, engine: Engine) -> PageResult:
    return PageResult(
        doc_id="d",
        page_no=page.page_no,
        page_count=page.page_count,
        status=PageStatus.OK,
        width=ocr.width,
        height=ocr.height,
        lines=tuple(
            WireLine(ln.text, ln.confidence, tuple(Point(x, y) for x, y in ln.polygon))
            for ln in ocr.lines
        ),
        engine=engine,
        completed_at=utc_now(),
    )


def test_the_assembler_grafts_a_pdf_and_leaves_text_layer_pages_alone(tmp_path: Path) -> None:
    """``outputs.build``: a page answered from its own text layer already has its text; a page
    recognised by OCR gets it. Each text then appears once."""
    source = born_digital(tmp_path / "in.pdf", 0)
    two = pymupdf.open(source)
    two.insert_pdf(pymupdf.open(source))
    two.save(tmp_path / "two.pdf")
    source = tmp_path / "two.pdf"
    pages = split(source)
    read = shouted(pages)
    results = [
        result_of(pages[0], read[1], Engine("text-layer", "pdf", "1")),
        result_of(pages[1], read[2], Engine("openvino", "ppocrv6-small", "1")),
    ]
    doc = outputs.assemble_document("d", 2, results)
    built = outputs.build(doc, ["json", "pdf"], source, dpi=DPI, limits=LIMITS)
    data, content_type = built["pdf"]
    assert content_type == "application/pdf"
    with pymupdf.open(stream=data) as pdf:
        first, second = (lines_by_text(page) for page in pdf)
    assert "hello searchable world" in first
    assert "HELLO SEARCHABLE WORLD" not in first
    assert "hello searchable world" in second
    assert "HELLO SEARCHABLE WORLD" in second


def test_lines_outside_winansi_are_placed_as_well(tmp_path: Path) -> None:
    """Chinese (and any text Helvetica cannot encode) goes through an embedded, subset font."""
    source = born_digital(tmp_path / "in.pdf", 90)
    results = shouted(split(source))
    first, second = results[1].lines
    results[1] = dataclasses.replace(
        results[1], lines=(first, dataclasses.replace(second, text="第二行"))
    )
    grafted = graft_text_layer(source, results, dpi=DPI, limits=LIMITS)
    with pymupdf.open(source) as before, pymupdf.open(stream=grafted) as after:
        box, direction = lines_by_text(before[0])["second line"]
        found = lines_by_text(after[0])
        assert overlap(box, found["第二行"][0]) > 0.6, (box, found["第二行"][0])
        assert found["第二行"][1] == pytest.approx(direction, abs=1e-3)
        assert np.array_equal(render(after[0]), render(before[0]))
        fonts = {f[3] for f in after[0].get_fonts(full=True)}
        assert any("+" in name for name in fonts), fonts  # the CJK font is a subset
    assert len(grafted) < 100_000


@pytest.mark.parametrize(
    "case",
    [c for c in hostile.CASES if c.content_type == hostile.PDF and c.page_count],
    ids=lambda c: c.name,
)
def test_a_hostile_pdf_keeps_its_pages_and_the_readable_ones_get_their_text(
    tmp_path: Path, case: hostile.Case
) -> None:
    """Damaged, repaired, bombed, encrypted-for-the-owner PDFs: the searchable PDF never fails
    the document, every page the splitter read gets its line, and the output opens page by
    page (a page tree MuPDF cannot walk falls back to the page images, with a note)."""
    source = tmp_path / f"{case.name}.pdf"
    source.write_bytes(case.data)
    pages = list(iter_pages(str(source), None, LIMITS, dpi=DPI))
    results = {
        p.page_no: PageOCR(
            p.width,
            p.height,
            (
                Line(
                    f"grafted{p.page_no}",
                    0.9,
                    ((5, 5), (p.width - 5, 5), (p.width - 5, 40), (5, 40)),
                ),
            ),
        )
        for p in pages
        if p.ok
    }
    out = source_searchable_pdf(source, len(pages), results, dpi=DPI, limits=LIMITS)
    with pymupdf.open(stream=out) as after:
        assert after.page_count == case.page_count
        for page_no in range(1, after.page_count + 1):
            text = after[page_no - 1].get_text()
            assert (f"grafted{page_no}" in text) == (page_no in results), (page_no, text)
