"""The searchable PDF: the original images, an invisible text layer on the line boxes."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pymupdf
import pytest

from ocrstream.processors.ocr.types import Line, PageOCR
from ocrstream.processors.searchable_pdf import (
    PageImage,
    build_searchable_pdf,
    images_from_pages,
)
from ocrstream.processors.split import iter_pages
from ocrstream.processors.split_types import SplitPage
from ocrstream.settings import LimitsSettings
from tests import samples

DPI = 150


def known_pages() -> tuple[samples.Sample, list[SplitPage]]:
    """A born-digital sample split with its text layer: exact lines and polygons."""
    sample = samples.text_pdf(2, seed=31)
    pages = list(iter_pages(sample.data, None, LimitsSettings(), dpi=DPI, use_text_layer=True))
    return sample, pages


def results_of(pages: list[SplitPage]) -> dict[int, PageOCR]:
    return {p.page_no: PageOCR(p.width, p.height, p.text_lines or ()) for p in pages}


def render(page: pymupdf.Page) -> np.ndarray:
    pix = page.get_pixmap(dpi=72, colorspace=pymupdf.csGRAY)
    return np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width).copy()


def test_text_matches_lines_words_sit_in_their_boxes_and_are_invisible() -> None:
    sample, pages = known_pages()
    pdf = build_searchable_pdf(2, results_of(pages), images_from_pages(pages), title="t")
    blank = build_searchable_pdf(
        2,
        {n: dataclasses.replace(r, lines=()) for n, r in results_of(pages).items()},
        images_from_pages(pages),
    )
    with pymupdf.open(stream=pdf) as doc, pymupdf.open(stream=blank) as without:
        assert doc.page_count == 2
        for page, split, lines in zip(doc, pages, sample.lines, strict=True):
            # the page has the image's size at its DPI
            assert page.rect.width == pytest.approx(split.width * 72 / DPI)
            assert page.get_text().splitlines() == list(lines)
            # every word lies inside its line's box (in points)
            assert split.text_lines is not None
            boxes = [
                pymupdf.Rect(ln.polygon[0], ln.polygon[2]) * (72 / DPI) for ln in split.text_lines
            ]
            for x0, y0, x1, y1, _word, _block, line_no, _w in page.get_text("words"):
                word = pymupdf.Rect(x0, y0, x1, y1)
                assert any((box + pymupdf.Rect(-1, -1, 1, 1)).contains(word) for box in boxes), (
                    word,
                    line_no,
                )
            # invisible: render mode 3, and the same pixels as the page without a text layer
            assert b"3 Tr" in page.read_contents()
            assert np.array_equal(render(page), render(without[page.number]))


def test_jpeg_pages_are_embedded_unchanged() -> None:
    sample = samples.scanned_pdf(2, dpi=100, seed=33)
    pages = list(iter_pages(sample.data, None, LimitsSettings()))
    results = {p.page_no: PageOCR(p.width, p.height, ()) for p in pages}
    pdf = build_searchable_pdf(2, results, images_from_pages(pages))
    with pymupdf.open(stream=pdf) as doc:
        for page, split in zip(doc, pages, strict=True):
            (image,) = page.get_images(full=True)
            assert image[8] == "DCTDecode"
            assert doc.xref_stream_raw(image[0]) == split.data


def test_missing_and_failed_pages_keep_numbering_with_a_note() -> None:
    _, pages = known_pages()
    results = results_of(pages)
    results[2] = PageOCR(0, 0, (), status="failed", error_code="page_too_large")
    get = images_from_pages(pages[:1])  # page 2's image is gone
    pdf = build_searchable_pdf(3, results, get)
    with pymupdf.open(stream=pdf) as doc:
        assert doc.page_count == 3
        assert "page 2 could not be read" in doc[1].get_text()
        assert "page_too_large" in doc[1].get_text()
        assert "page 3 could not be read" in doc[2].get_text()
        assert doc[0].get_text().strip()


def test_images_that_cannot_be_embedded_become_notes(capfd: pytest.CaptureFixture[str]) -> None:
    header_only_png = (
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00\x00\x00\x01\x00\x08\x00\x00\x00\x00"
        + b"garbage" * 10
    )
    images = {1: PageImage(header_only_png, 72.0), 2: PageImage(b"\xff\xd8\xffgarbage", 72.0)}
    pdf = build_searchable_pdf(2, {1: PageOCR(256, 256, ())}, images.get)
    with pymupdf.open(stream=pdf) as doc:
        assert [p.get_text().strip() for p in doc] == [
            "page 1 could not be read",
            "page 2 could not be read",
        ]
    assert capfd.readouterr().err == ""


def test_rotated_recognition_turns_the_image_and_places_the_text() -> None:
    # the worker turned a sideways 400x200 image a quarter clockwise and read one line
    image = np.full((200, 400), 255, np.uint8)
    image[20 : 380 // 2, 150:180] = 0  # a vertical bar in the stored image …
    png = pymupdf.Pixmap(pymupdf.csGRAY, 400, 200, image.tobytes(), False).tobytes("png")
    text = Line("turned line", 0.9, ((20.0, 150.0), (180.0, 150.0), (180.0, 180.0), (20.0, 180.0)))
    result = PageOCR(width=200, height=400, lines=(text,), rotation=90)
    pdf = build_searchable_pdf(1, {1: result}, lambda n: PageImage(png, 72.0))
    with pymupdf.open(stream=pdf) as doc:
        page = doc[0]
        assert (page.rect.width, page.rect.height) == (200, 400)  # as the worker saw it
        pixels = render(page)
        assert pixels[150:180, 20:180].mean() < 40  # … is a horizontal bar once turned
        assert page.get_text().strip() == "turned line"
        (word1, word2) = page.get_text("words")
        assert word1[1] >= 149
        assert word2[3] <= 181


@pytest.mark.parametrize("turns", [0, 1, 2, 3])
def test_a_turned_pages_pixels_map_back_to_the_image_it_was_given(turns: int) -> None:
    """PageOCR.to_source, which the text layer and the bench both use: a pixel of the page as
    the engine turned it (``turns`` quarter turns clockwise) lands on the same pixel of the
    image it was given, whose size it also gives."""
    given = np.zeros((7, 11), np.uint8)
    given[2, 5] = 255
    turned = np.rot90(given, -turns)
    (yt,), (xt,) = np.nonzero(turned)
    page = PageOCR(width=turned.shape[1], height=turned.shape[0], lines=(), rotation=90 * turns)
    (a, b, c, d, e, f), width, height = page.to_source()
    x, y = xt + 0.5, yt + 0.5
    assert (a * x + c * y + e, b * x + d * y + f) == (5.5, 2.5)
    assert (width, height) == (11, 7)


def test_slanted_and_cjk_lines() -> None:
    angle = math.radians(10)
    c, s = math.cos(angle), math.sin(angle)
    x, y, length, height = 100.0, 100.0, 600.0, 40.0
    ul = (x, y)
    ur = (x + c * length, y + s * length)
    lr = (ur[0] - s * height, ur[1] + c * height)
    ll = (x - s * height, y + c * height)
    slanted = Line("a slanted line of text", 0.9, (ul, ur, lr, ll))
    cjk = Line(
        "中文 テスト 한국어 Привет",
        0.9,
        ((100.0, 400.0), (700.0, 400.0), (700.0, 440.0), (100.0, 440.0)),
    )
    white = pymupdf.Pixmap(pymupdf.csGRAY, 800, 600, bytes([255]) * 800 * 600, False)
    result = PageOCR(width=800, height=600, lines=(slanted, cjk))
    pdf = build_searchable_pdf(1, {1: result}, lambda n: PageImage(white.tobytes("png"), 72.0))
    with pymupdf.open(stream=pdf) as doc:
        page = doc[0]
        assert page.get_text().splitlines() == [
            "a slanted line of text",
            "中文 テスト 한국어 Привет",
        ]
        first = page.get_text("dict", flags=pymupdf.TEXTFLAGS_TEXT)["blocks"][0]["lines"][0]
        assert first["dir"] == pytest.approx((c, s), abs=1e-3)
        raw = page.get_text("rawdict", flags=pymupdf.TEXTFLAGS_TEXT)["blocks"][0]["lines"][0]
        for char in (ch for span in raw["spans"] for ch in span["chars"]):
            dx, dy = char["origin"][0] - ul[0], char["origin"][1] - ul[1]
            assert -1 <= dx * c + dy * s <= length + 1  # along the line …
            assert 0 <= -dx * s + dy * c <= height  # … and between its top and bottom


def test_images_from_pages_walks_forward_and_skips_failed_pages() -> None:
    pages = [
        SplitPage(1, 3, "png", b"one", 10, 10, 72.0),
        SplitPage.failed(2, 3, "page_too_large", "too big"),
        SplitPage(3, 3, "png", b"three", 10, 10, 0.0),
    ]
    get = images_from_pages(pages)
    assert get(1) == PageImage(b"one", 72.0)
    assert get(2) is None
    assert get(3) == PageImage(b"three", 0.0)
    assert get(4) is None


def test_pdf_string_syntax_and_mixed_scripts_keep_text_and_order() -> None:
    """Parentheses, backslashes and Latin-1 accents go through the PDF string syntax intact;
    a line outside WinAnsi in between keeps its place in the reading order."""
    texts = ["Total (RM) \\ 12,50 € déjà", "Ελληνικά и русский", "a) b( c\\d ~ ÿ"]
    lines = tuple(
        Line(t, 0.9, ((20.0, y), (700.0, y), (700.0, y + 40), (20.0, y + 40)))
        for t, y in zip(texts, (40.0, 100.0, 160.0), strict=True)
    )
    white = pymupdf.Pixmap(pymupdf.csGRAY, 800, 300, bytes([255]) * 800 * 300, False)
    result = PageOCR(width=800, height=300, lines=lines)
    pdf = build_searchable_pdf(1, {1: result}, lambda n: PageImage(white.tobytes("png"), 72.0))
    with pymupdf.open(stream=pdf) as doc:
        page = doc[0]
        assert page.get_text().splitlines() == texts
        blocks = page.get_text("dict", flags=pymupdf.TEXTFLAGS_TEXT)["blocks"]
        boxes = [line["bbox"] for block in blocks for line in block["lines"]]
        assert len(boxes) == len(texts)
        for x0, _, x1, _ in boxes:
            assert x0 == pytest.approx(20, abs=1.5)  # each line spans its box
            assert x1 == pytest.approx(700, abs=1.5)
