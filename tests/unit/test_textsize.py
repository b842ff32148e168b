"""The text-size estimate that sets the detection scale, and the scale it leads to."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from ocrstream.processors.ocr import textsize
from ocrstream.processors.ocr.det import DetParams, det_shape
from ocrstream.processors.ocr.textsize import line_height, weighted_median


def _page(line_px: int, width: int = 2480, height: int = 3508, pitch: float = 1.5) -> np.ndarray:
    """A white page of text lines ``line_px`` tall: Hershey text scaled to that height."""
    page = np.full((height, width, 3), 255, np.uint8)
    scale = cv2.getFontScaleFromHeight(cv2.FONT_HERSHEY_SIMPLEX, line_px, 2)
    y = 150 + line_px
    k = 0
    while y < height - 150:
        words = ["invoice", "Total", "amount", "delivery", "2024", "payment", "due", "page"]
        text = " ".join(words[(k + i) % len(words)] for i in range(24))
        cv2.putText(page, text, (150, y), cv2.FONT_HERSHEY_SIMPLEX, scale, (20, 20, 20), 2)
        y += round(line_px * pitch)
        k += 1
    return page


@pytest.mark.parametrize("line_px", [14, 24, 40, 70, 100, 140, 200])
def test_line_height_follows_the_text_size(line_px: int) -> None:
    page = _page(line_px)
    est = line_height(page)
    assert est is not None
    # Hershey's height is the cap height; the estimate is the line's (with descenders)
    assert 0.9 * line_px <= est <= 1.4 * line_px


def test_large_text_is_measured_as_lines_not_words() -> None:
    # at 70 px a word space is wider than the first smear: the words of a line stay apart and
    # "amount" alone is shorter than its line; the estimate must still be the line's height
    ratios = [est / px for px in (14, 70) if (est := line_height(_page(px))) is not None]
    assert len(ratios) == 2
    assert ratios[1] == pytest.approx(ratios[0], rel=0.12)


def test_print_whose_letters_stand_apart_is_still_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # from ~100 px (24 pt at 300 DPI) the letters are further apart in the shrunk page than
    # the first smear reaches: no blob looked like a line and such pages had no estimate
    page = _page(100)
    with monkeypatch.context() as m:
        m.setattr(textsize, "FIRST_REACHES", (textsize.FIRST_REACH,))
        assert line_height(page) is None
    est = line_height(page)
    assert est is not None
    assert 0.9 * 100 <= est <= 1.4 * 100


def test_line_height_orders_pages_by_text_size() -> None:
    small, large = line_height(_page(16)), line_height(_page(48))
    assert small is not None
    assert large is not None
    assert 2.2 < large / small < 3.8


def test_line_height_is_the_same_on_a_grey_page_and_at_another_resolution() -> None:
    page = _page(30)
    est = line_height(page)
    grey = line_height(cv2.cvtColor(page, cv2.COLOR_BGR2GRAY))
    half = line_height(cv2.resize(page, None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA))
    assert est is not None
    assert grey is not None
    assert half is not None
    assert grey == pytest.approx(est, rel=0.05)
    assert half * 2 == pytest.approx(est, rel=0.2)


def test_no_estimate_without_text() -> None:
    assert line_height(np.full((800, 600, 3), 255, np.uint8)) is None
    noise = np.random.default_rng(0).integers(0, 256, (800, 600), dtype=np.uint8)
    assert line_height(noise) is None
    assert line_height(np.zeros((8, 8), np.uint8)) is None


def test_weighted_median_weighs() -> None:
    values = np.array([10.0, 20.0, 30.0])
    assert weighted_median(values, np.array([1.0, 1.0, 1.0])) == 20.0
    assert weighted_median(values, np.array([10.0, 1.0, 1.0])) == 10.0
    assert weighted_median(values, np.array([1.0, 1.0, 10.0])) == 30.0


def test_det_shape_brings_the_lines_to_the_target_height() -> None:
    params = DetParams(line_height=24.0, max_limit_side=4000, min_limit_side=320)
    for line_px in (20.0, 30.0, 48.0):
        rh, rw = det_shape(3508, 2480, params, line_px)
        assert rh % 32 == 0
        assert rw % 32 == 0
        assert line_px * rh / 3508 == pytest.approx(24.0, rel=0.05)


def test_det_shape_stays_within_its_budgets() -> None:
    params = DetParams(line_height=24.0, max_limit_side=2880, min_limit_side=960)
    high, low = 2880**2 / np.sqrt(2), 960**2 / np.sqrt(2)
    tiny_text = det_shape(3508, 2480, params, 4.0)  # would be 6x: capped
    assert tiny_text[0] * tiny_text[1] <= high * 1.05
    huge_text = det_shape(3508, 2480, params, 400.0)  # would be 0.06x: floored
    assert huge_text[0] * huge_text[1] >= low * 0.9
    small_page = det_shape(300, 200, params, 200.0)  # small already: not shrunk below itself
    assert small_page == (288, 192) or small_page[0] >= 288


def test_det_shape_without_an_estimate_is_the_fixed_budget() -> None:
    fixed = DetParams(limit_side=1600)
    scaled = DetParams(limit_side=1600, line_height=24.0)
    for shape in [(3508, 2480), (1013, 463)]:
        assert det_shape(*shape, scaled, None) == det_shape(*shape, fixed)
        assert det_shape(*shape, fixed, 30.0) == det_shape(*shape, fixed)


def test_text_inside_a_ruled_frame_is_measured_as_without_it() -> None:
    # blobs come from their outlines: the lines inside a frame's hole must still count, as
    # they do on a page without the frame (a form, a boxed receipt)
    page = _page(30)
    framed = page.copy()
    cv2.rectangle(framed, (60, 60), (framed.shape[1] - 60, framed.shape[0] - 60), (0, 0, 0), 8)
    plain, boxed = line_height(page), line_height(framed)
    assert plain is not None
    assert boxed == pytest.approx(plain, rel=0.02)


def test_blob_boxes_are_each_blobs_bounding_box() -> None:
    mask = np.zeros((60, 100), np.uint8)
    mask[5:9, 10:40] = 1  # a bar
    mask[5:55, 50:95] = 1  # a ring 45 x 50 ...
    mask[8:52, 53:92] = 0
    mask[25:28, 60:80] = 1  # ... with a bar in its hole
    boxes = sorted(map(tuple, textsize.blob_boxes(mask).tolist()))
    assert boxes == [(20, 3), (30, 4), (45, 50)]
