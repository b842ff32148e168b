"""Fake OCR engines with the real engine's interface (``info``, ``recognize(images)``).

Each reads back the page it was given (its size, as text), so a test can check that a result
belongs to its page, and records every batch it saw. Variants crash, stall or run out of
memory on demand, as real engines do on a bad day.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ocrstream.processors.imageio import decode_image
from ocrstream.processors.ocr.types import EngineInfo, Line, PageOCR


def page_text(image: np.ndarray) -> str:
    h, w = image.shape[:2]
    return f"page {w}x{h}"


class FakeEngine:
    """Answers each page with one line, ``page WxH``; records the batches."""

    name = "fake"

    def __init__(self, *, max_pixels: int = 80_000_000) -> None:
        self.batches: list[int] = []
        self.calls = 0
        self.max_pixels = max_pixels
        self._lock = threading.Lock()

    @property
    def info(self) -> EngineInfo:
        return EngineInfo(self.name, "fake-model", "1", "cpu")

    def recognize(self, images: Sequence[Any]) -> list[PageOCR]:
        with self._lock:
            self.calls += 1
            self.batches.append(len(images))
        self.before(images)
        return [self.page(img) for img in images]

    def before(self, images: Sequence[Any]) -> None:
        """Hook for the failing variants: runs before any page is read."""

    def page(self, data: Any) -> PageOCR:
        image = decode_image(data, max_pixels=self.max_pixels)
        h, w = image.shape[:2]
        poly = ((0.0, 0.0), (float(w), 0.0), (float(w), float(h)), (0.0, float(h)))
        return PageOCR(
            width=w,
            height=h,
            lines=(Line(page_text(image), 0.99, poly),),
            timings_ms={"decode": 0.0, "det": 0.0, "rec": 0.0, "total": 0.0},
        )


class CrashingEngine(FakeEngine):
    """Raises ``RuntimeError`` on batches holding a page that ``crash_on`` picks (every batch
    when it is None), as a backend does when a kernel fails."""

    name = "crashing"

    def __init__(self, crash_on: Callable[[np.ndarray], bool] | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.crash_on = crash_on

    def before(self, images: Sequence[Any]) -> None:
        if self.crash_on is None or any(
            self.crash_on(decode_image(img, max_pixels=self.max_pixels)) for img in images
        ):
            raise RuntimeError("engine exploded")


class SlowEngine(FakeEngine):
    """Takes ``per_batch_s`` + ``per_page_s`` * pages for every call."""

    name = "slow"

    def __init__(self, per_batch_s: float = 0.2, per_page_s: float = 0.0, **kw: Any) -> None:
        super().__init__(**kw)
        self.per_batch_s = per_batch_s
        self.per_page_s = per_page_s

    def before(self, images: Sequence[Any]) -> None:
        time.sleep(self.per_batch_s + self.per_page_s * len(images))


class OomEngine(FakeEngine):
    """Raises ``MemoryError`` for batches of more than ``max_batch`` pages, like a GPU that
    runs out of memory on big batches and is fine on small ones."""

    name = "oom"

    def __init__(self, max_batch: int = 1, **kw: Any) -> None:
        super().__init__(**kw)
        self.max_batch = max_batch

    def before(self, images: Sequence[Any]) -> None:
        if len(images) > self.max_batch:
            raise MemoryError(f"out of memory on a batch of {len(images)} pages")


class FatalEngine(FakeEngine):
    """Raises :class:`FatalError` (the device is gone) after ``ok_calls`` good calls."""

    name = "fatal"

    def __init__(self, ok_calls: int = 0, **kw: Any) -> None:
        super().__init__(**kw)
        self.ok_calls = ok_calls

    def before(self, images: Sequence[Any]) -> None:
        from ocrstream.errors import FatalError

        if self.calls > self.ok_calls:
            raise FatalError("CUDA device lost", code="device_lost")


# --- pages for the real engine -----------------------------------------------------------------


class SizeEngine:
    """Reads each page's size back as its text; fails on images of a poisoned width."""

    def __init__(self, fail_width: int | None = None) -> None:
        self.batches: list[list[tuple[int, int]]] = []
        self.fail_width = fail_width

    @property
    def info(self) -> EngineInfo:
        return EngineInfo("fake", "size", "1", "cpu")

    def recognize(self, images: Sequence[np.ndarray]) -> list[PageOCR]:
        sizes = [(img.shape[1], img.shape[0]) for img in images]
        self.batches.append(sizes)
        if self.fail_width is not None and any(w == self.fail_width for w, _ in sizes):
            raise RuntimeError("engine exploded")
        box = ((0.0, 0.0), (5.0, 0.0), (5.0, 5.0), (0.0, 5.0))
        return [PageOCR(w, h, (Line(f"{w}x{h}", 0.9, box),)) for w, h in sizes]


# A page this wide is read with low confidence by ConfidenceEngine unless told otherwise.
WEAK_WIDTH = 13


class ConfidenceEngine:
    """Reads each page's size back as three lines, with low confidence (0.6) on the pages
    ``weak`` picks by their width and high (0.98) on the others: pages for confidence routing.
    Records the widths of the pages it read."""

    def __init__(
        self, name: str = "tiny", weak: Callable[[int], bool] = lambda w: w == WEAK_WIDTH
    ) -> None:
        self.name = name
        self.weak = weak
        self.widths: list[int] = []  # of the pages it read

    @property
    def info(self) -> EngineInfo:
        return EngineInfo("fake", self.name, "1", "cpu")

    def recognize(self, images: Sequence[np.ndarray]) -> list[PageOCR]:
        box = ((0.0, 0.0), (5.0, 0.0), (5.0, 5.0), (0.0, 5.0))
        out = []
        for img in images:
            w, h = img.shape[1], img.shape[0]
            self.widths.append(w)
            conf = 0.6 if self.weak(w) else 0.98
            out.append(PageOCR(w, h, tuple(Line(f"{w}x{h} {i}", conf, box) for i in range(3))))
        return out


def render_text_page(
    lines: Sequence[str],
    *,
    width_in: float = 5.0,
    fontsize: float = 12.0,
    dpi: int = 300,
    fontname: str = "helv",
    margin_pt: float = 24.0,
) -> np.ndarray:
    """A white page with ``lines`` of text in a standard font, rendered by PyMuPDF: BGR uint8."""
    import pymupdf

    leading = fontsize * 1.8
    height_pt = 2 * margin_pt + leading * len(lines)
    doc = pymupdf.open()
    try:
        page = doc.new_page(width=width_in * 72, height=height_pt)
        for i, text in enumerate(lines):
            y = margin_pt + leading * i + fontsize
            page.insert_text((margin_pt, y), text, fontname=fontname, fontsize=fontsize)
        pix = page.get_pixmap(dpi=dpi, colorspace=pymupdf.csRGB)
        rgb = np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width, 3)
        return np.ascontiguousarray(rgb[..., ::-1])
    finally:
        doc.close()


def scan_noise(
    image: np.ndarray, *, angle: float = 1.0, sigma: float = 8.0, quality: int = 70, seed: int = 0
) -> bytes:
    """What a scanner does to a page: a slight rotation, sensor noise, JPEG. Returns JPEG bytes."""
    import cv2

    h, w = image.shape[:2]
    m = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.0)
    turned = cv2.warpAffine(image, m, (w, h), borderValue=(255, 255, 255))
    noise = np.random.default_rng(seed).normal(0.0, sigma, turned.shape)
    noisy = np.clip(turned.astype(np.float32) + noise, 0, 255).astype(np.uint8)
    ok, buf = cv2.imencode(".jpg", noisy, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return bytes(buf)


def cer(predicted: str, truth: str) -> float:
    """Character error rate after collapsing whitespace."""
    from ocrstream.bench.cer import levenshtein

    p, t = " ".join(predicted.split()), " ".join(truth.split())
    return levenshtein(p, t) / max(1, len(t))
