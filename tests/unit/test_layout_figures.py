"""Figure crops: cut from the page image as the worker saw it, named as document.md links them."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from ocrstream.processors.figures import FigurePage, crop_figures
from ocrstream.processors.layout.blocks import Block
from ocrstream.processors.searchable_pdf import PageImage
from ocrstream.storage.keys import Keys


def _png(image: np.ndarray) -> bytes:
    ok, data = cv2.imencode(".png", image)
    assert ok
    return data.tobytes()


def test_figures_are_cut_from_the_page_image_upright_and_at_its_scale() -> None:
    # A 400 x 200 (w x h) page image, a black square at x 100-150, y 50-100.
    image = np.full((200, 400), 255, np.uint8)
    image[50:100, 100:150] = 0
    # The worker turned the page upside down and reported it at half the size (200 x 100):
    # the square is then at x 125-150, y 50-75 of the result.
    blocks = (Block("text", (0, 0, 50, 10), text="x"), Block("figure", (125, 50, 150, 75)))
    pages = [FigurePage(3, 200, 100, 180, blocks), FigurePage(4, 200, 100, 0, None)]
    asked: list[int] = []

    def get(page_no: int) -> PageImage:
        asked.append(page_no)
        return PageImage(_png(image), 300.0)

    found = dict(crop_figures(pages, get))
    assert asked == [3]  # a page without figures is not decoded
    assert list(found) == ["figures/p3-1.png"]
    crop = cv2.imdecode(np.frombuffer(found["figures/p3-1.png"], np.uint8), cv2.IMREAD_GRAYSCALE)
    assert crop.shape == (50, 50)
    assert crop.mean() < 10  # all of the square, nothing else


def test_a_missing_page_image_gives_no_crop() -> None:
    pages = [FigurePage(1, 100, 100, 0, (Block("figure", (10, 10, 50, 50)),))]
    assert dict(crop_figures(pages, lambda _: None)) == {}


def test_figure_keys_sit_beside_document_md() -> None:
    keys = Keys("t/")
    assert keys.figure("doc-1", "figures/p2-3.png") == "t/documents/doc-1/figures/p2-3.png"
    assert keys.figures_prefix("doc-1") == "t/documents/doc-1/figures/"
    for bad in ("figures/../x.png", "p1-1.png", "figures/p0-1.png", "figures/p1-1.jpg/x"):
        with pytest.raises(ValueError, match="figure path"):
            keys.figure("doc-1", bad)
