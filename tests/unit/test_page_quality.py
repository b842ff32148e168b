"""The page-quality measures of confidence routing's early rule, on pages with a known noise
and contrast: the rendered pages of the routing benchmark, clean and degraded."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from ocrstream.bench.datasets import degrade, render_a4_page
from ocrstream.processors.imageio import decode_image
from ocrstream.processors.page_quality import measure


@pytest.mark.parametrize("sigma", [5.0, 10.0, 20.0])
def test_the_noise_of_a_flat_page_is_read_as_its_sigma(sigma: float) -> None:
    rng = np.random.default_rng(1)
    page = np.clip(180 + rng.normal(0, sigma, (600, 400)), 0, 255).astype(np.uint8)
    assert measure(page).noise == pytest.approx(sigma, rel=0.15)


def test_a_blank_page_has_neither_noise_nor_contrast() -> None:
    quality = measure(np.full((300, 200, 3), 255, np.uint8))
    assert (quality.noise, quality.contrast) == (0.0, 0.0)


def test_print_on_a_page_is_contrast_and_not_noise() -> None:
    page = np.full((400, 300), 250, np.uint8)
    for y in range(20, 380, 12):  # dense lines of dark "text", a third of the page ink
        cv2.rectangle(page, (10, y), (290, y + 3), 30, -1)
    quality = measure(page)
    assert quality.noise < 1.0
    assert quality.contrast == pytest.approx(220, abs=10)


def test_a_degraded_scan_reads_noisy_and_faint_and_its_clean_page_does_not() -> None:
    data, _ = render_a4_page(3, dpi=100)
    clean = measure(decode_image(data, max_pixels=10**8))
    worn = measure(decode_image(degrade(data, seed=3), max_pixels=10**8))
    assert clean.noise < 2 < 15 < worn.noise
    assert worn.contrast < 80 < 100 < clean.contrast
