"""1-bit pages blurred into grey before they are read (processors/ocr/bilevel.py)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from ocrstream.processors.ocr.bilevel import MAX_SIGMA, is_bilevel, soften
from ocrstream.processors.ocr.textsize import line_height
from tests.fakes.engines import render_text_page

LINES = [f"Line {i}: the quick brown fox jumps over the lazy dog {i * 37}" for i in range(8)]


def _one_bit(gray: np.ndarray) -> np.ndarray:
    _, split = cv2.threshold(gray, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    return np.asarray(split, np.uint8)


@pytest.fixture(scope="module")
def page() -> np.ndarray:
    """A rendered page (anti-aliased grey edges), BGR: 12-pt type at 100 DPI, a fax's."""
    return render_text_page(LINES, dpi=100)


def test_only_black_and_white_pages_count_as_1bit(page: np.ndarray):
    gray = cv2.cvtColor(page, cv2.COLOR_BGR2GRAY)
    split = _one_bit(gray)
    assert is_bilevel(split)
    assert is_bilevel(cv2.cvtColor(split, cv2.COLOR_GRAY2BGR))
    assert not is_bilevel(page)  # the anti-aliased edges are grey
    assert not is_bilevel(gray)
    # one grey pixel away from the rows looked at first is enough
    touched = split.copy()
    touched[split.shape[0] // 2 + 1, split.shape[1] // 2] = 128
    assert not is_bilevel(touched)
    # black, white and red: a colour page, not a 1-bit one
    coloured = cv2.cvtColor(split, cv2.COLOR_GRAY2BGR)
    coloured[: coloured.shape[0] // 2, :, 2] = 255
    assert not is_bilevel(coloured)
    assert not is_bilevel(np.zeros((0, 0, 3), np.uint8))
    assert not is_bilevel(split.astype(np.float32))


def test_a_1bit_page_is_blurred_by_a_share_of_its_line_height(page: np.ndarray):
    split = cv2.cvtColor(_one_bit(cv2.cvtColor(page, cv2.COLOR_BGR2GRAY)), cv2.COLOR_GRAY2BGR)
    out = soften(split, 0.04)
    assert out.shape == split.shape
    assert out.dtype == np.uint8
    assert not is_bilevel(out)  # the edges have levels in between again
    assert (out[..., 0] == out[..., 1]).all()
    assert (out[..., 0] == out[..., 2]).all()
    height = line_height(split[..., 0], work_side=1024)
    assert height is not None
    assert 0.04 * height * 2 < MAX_SIGMA  # this page and the one twice its size below
    expected = cv2.GaussianBlur(split[..., 0], (0, 0), 0.04 * height)
    assert np.array_equal(out[..., 0], expected)
    # twice the print, twice the blur: the same share of a line
    large = cv2.resize(split, None, fx=2, fy=2, interpolation=cv2.INTER_NEAREST)
    grey_band = int(np.count_nonzero(cv2.inRange(soften(large, 0.04)[..., 0], 1, 254)))
    small_band = int(np.count_nonzero(cv2.inRange(out[..., 0], 1, 254)))
    # edge pixels: twice as long an outline, each edge twice as wide
    assert 3.0 < grey_band / small_band < 5.5


def test_grey_pages_blank_pages_and_smoothing_off_are_left_as_they_are(page: np.ndarray):
    assert soften(page, 0.04) is page
    blank = np.full((400, 300, 3), 255, np.uint8)
    assert soften(blank, 0.04) is blank  # 1-bit, but no line to take the height of
    split = _one_bit(cv2.cvtColor(page, cv2.COLOR_BGR2GRAY))
    assert soften(split, 0.0) is split
    out = soften(split, 0.04)  # a grey array stays grey
    assert out.ndim == 2
    assert not is_bilevel(out)


def test_large_print_is_blurred_no_more_than_the_cap(page: np.ndarray):
    split = _one_bit(cv2.cvtColor(page, cv2.COLOR_BGR2GRAY))
    large = cv2.resize(split, None, fx=6, fy=6, interpolation=cv2.INTER_NEAREST)
    height = line_height(large, work_side=1024)
    assert height is not None
    assert 0.04 * height > MAX_SIGMA
    capped = cv2.GaussianBlur(large, (0, 0), MAX_SIGMA)
    assert np.array_equal(soften(large, 0.04), capped)
