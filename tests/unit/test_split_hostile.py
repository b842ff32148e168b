"""Every hostile input of tests/hostile.py ends in its reason code, and nothing else escapes."""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np
import pytest

from ocrstream.errors import PoisonError
from ocrstream.processors.split import iter_pages, probe
from ocrstream.settings import LimitsSettings
from tests import hostile

LIMITS = LimitsSettings()


def decode(data: bytes) -> Any:
    pixels = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert pixels is not None
    return pixels


@pytest.mark.parametrize("case", hostile.CASES, ids=lambda c: c.name)
def test_hostile_input(case: hostile.Case, capfd: pytest.CaptureFixture[str]) -> None:
    data = case.data
    if case.doc_error is not None:
        with pytest.raises(PoisonError) as info:
            probe(data, case.content_type, LIMITS)
        assert info.value.code == case.doc_error
        pages = iter_pages(data, case.content_type, LIMITS, use_text_layer=True)
        with pytest.raises(PoisonError) as info:
            next(pages)
        assert info.value.code == case.doc_error
    else:
        assert probe(data, case.content_type, LIMITS) == case.page_count
        split = list(iter_pages(data, case.content_type, LIMITS, dpi=100, use_text_layer=True))
        assert [p.page_no for p in split] == list(range(1, (case.page_count or 0) + 1))
        assert {p.page_no: p.error_code for p in split if not p.ok} == dict(case.page_errors)
        for page in split:
            if page.ok:
                pixels = decode(page.data)
                assert pixels.dtype == np.uint8
                assert (pixels.shape[1], pixels.shape[0]) == (page.width, page.height)
                assert page.width * page.height <= LIMITS.max_page_pixels
            else:
                assert page.error_message
                assert not page.data
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")  # MuPDF's messages go to the log, not to the terminal


def test_huge_page_is_rendered_to_fit_the_pixel_limit() -> None:
    (page,) = iter_pages(hostile.huge_page_pdf(), None, LimitsSettings(max_page_pixels=4_000_000))
    assert page.ok
    assert page.width * page.height <= 4_000_000
    assert page.dpi < 11


def test_alpha_image_is_composited_over_white() -> None:
    (page,) = iter_pages(hostile.alpha_png(), None, LIMITS)
    gray = decode(page.data)
    assert gray.ndim == 2
    assert np.median(gray) > 200
    assert gray.min() < 60


@pytest.mark.parametrize("build", [hostile.gray16_png, hostile.rgb48_png, hostile.cmyk_jpeg])
def test_deep_and_cmyk_images_become_8_bit(build: object) -> None:
    (page,) = iter_pages(build(), None, LIMITS)  # type: ignore[operator]
    pixels = decode(page.data)
    assert pixels.dtype == np.uint8
    assert np.median(pixels) > 200
    assert pixels.min() < 60
