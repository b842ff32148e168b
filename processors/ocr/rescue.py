"""Line rescue: a fast engine's low-confidence lines re-read by a stronger recogniser.

The primary pool's fast model (``ppocrv6-tiny``) finds lines about as well as ``ppocrv6-small``
on receipts but reads them worse: its recognition makes ~86% of its CER gap there
(docs/benchmarks.md, "Early routing"). :class:`LineRescue` loads only the stronger model's
recogniser and re-reads, in one batch per page, the lines the fast engine kept with a confidence
below ``below``; a line keeps whichever reading is the more confident. In a worker with a
routing rule, only the pages the rule keeps on the fast engine's own confidences are rescued
(measured: judging the rescued confidences instead kept receipts out of the accurate pool that
needed them; docs/benchmarks.md, "Line rescue").

:class:`RescuingEngine` wraps a page engine with it, for the worker: same ``info`` (the results
name the fast engine, which found and read most of the page), and a ``fingerprint`` that
includes the rescue model's file and threshold, so cached pages read without it (or with
another) are not served as if read with it. Text-mode pages given as decoded arrays, upright
and not deskewed, are rescued; layout, key-field and encoded pages pass through unchanged.
Lines the fast engine dropped (under its ``min_confidence``) are not seen.

Settings: ``OCRSTREAM_ROUTING_RESCUE_MODEL`` (a model set name; empty: off) and
``OCRSTREAM_ROUTING_RESCUE_BELOW`` (:class:`~ocrstream.settings.RoutingSettings`). Off by
default: with ``ppocrv6-small`` at 0.9 the more confident readings kept most receipts out of the
accurate pool, and tiny-first was faster but 0.0025-0.0041 over small-only's CER on the tuning
set (docs/benchmarks.md, "Line rescue").
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ocrstream.processors.ocr import bilevel
from ocrstream.processors.ocr import rec as rec_mod
from ocrstream.processors.ocr.backends import COMPACT_HEAD_BACKENDS, create, rec_options
from ocrstream.processors.ocr.backends.base import Backend
from ocrstream.processors.ocr.geometry import grow_for_rec
from ocrstream.processors.ocr.models import ctc_best_model, file_digest, load_model_set
from ocrstream.processors.ocr.types import EngineInfo, Line, PageOCR
from ocrstream.processors.page_key import engine_fingerprint
from ocrstream.settings import OcrSettings


class LineRescue:
    """Model ``model``'s recogniser on the backend of ``settings`` (the fast engine's), for
    lines under ``below``."""

    def __init__(
        self, settings: OcrSettings, model: str, below: float, *, backend: Backend | None = None
    ) -> None:
        self.settings = settings
        self.below = below
        self.models = models = load_model_set(model, None)
        self.params = rec_mod.RecParams.from_settings(
            settings, models.rec_crop_margin, models.rec_native_min_height
        )
        backend = backend or create(settings)
        self.backend_name = backend.name
        path, classes = models.rec_path, 0
        if backend.name in COMPACT_HEAD_BACKENDS:
            compact = ctc_best_model(models.rec_path, settings.engine_cache_dir)
            if compact is not None:
                path, classes = compact
        # one stream: the rescue reads a page's few weak lines in one batch
        self._rec = backend.load(path, "rec", rec_options(settings, self.params, streams=1))
        classes = classes or rec_mod.model_classes(self._rec, self.params)
        self._charset = rec_mod.match_charset(classes, models.charset, models.rec_path)

    def fingerprint_part(self) -> dict[str, object]:
        """What the rescue adds to an engine's fingerprint: its model file and threshold (and
        the restored spaces' threshold, when on)."""
        part: dict[str, object] = {
            "rescue_rec": file_digest(self.models.rec_path),
            "rescue_below": self.below,
        }
        if self.params.space_min:
            part["rescue_space_min"] = self.params.space_min
        return part

    def read(self, lines: Sequence[Any]) -> list[tuple[str, float]]:
        """Text and confidence of lines cut at the model's height (BGR, ``rec.crop_line``),
        in their order."""
        return rec_mod.read_lines(
            self._rec, lines, self._charset, self.params, self.settings.rec_batch_lines
        )

    def rescue(self, image: Any, page: PageOCR) -> PageOCR:
        """``page`` with its lines under ``below`` re-read from ``image`` (as the engine saw
        it), each keeping the more confident reading; ``timings_ms["rescue"]`` is its cost."""
        weak = [i for i, line in enumerate(page.lines) if line.confidence < self.below]
        if not weak or page.status != "ok" or page.rotation or page.skew:
            return page
        start = time.perf_counter()
        bgr = bilevel.decode_page(image, self.settings)
        # grown for rec as the engine grows them, the page's other lines as neighbours
        quads = [np.array(line.polygon, np.float32) for line in page.lines]
        grown, heights = grow_for_rec(quads, self.params.crop_margin, bgr.shape[1], bgr.shape[0])
        cut = [rec_mod.crop_line(bgr, grown[i], self.params, heights[i]) for i in weak]
        lines = list(page.lines)
        for i, (text, conf) in zip(weak, self.read(cut), strict=True):
            text = text.strip()
            if text and conf > lines[i].confidence:
                lines[i] = Line(text=text, confidence=conf, polygon=lines[i].polygon)
        ms = (time.perf_counter() - start) * 1000
        timings = dict(page.timings_ms, rescue=round(ms, 2))
        if "total" in timings:
            timings["total"] = round(timings["total"] + ms, 2)
        return dataclasses.replace(page, lines=tuple(lines), timings_ms=timings)


class RescuingEngine:
    """A page engine whose text-mode pages go through a :class:`LineRescue` after it; with
    ``weak`` (the routing rule over line confidences), only the pages it does not find weak on
    the engine's own confidences. Such a page stays kept (the rescue only raises confidences),
    and a weak one goes to the accurate pool as the engine read it, without the rescue's cost."""

    def __init__(
        self, engine: Any, rescue: LineRescue, weak: Callable[[list[float]], bool] | None = None
    ) -> None:
        self.engine = engine
        self.rescue = rescue
        self.weak = weak

    @property
    def info(self) -> EngineInfo:
        info: EngineInfo = self.engine.info
        return info

    def fingerprint(self, mode: str) -> str:
        inner = self.engine.fingerprint(mode)
        part = self.rescue.fingerprint_part()
        return engine_fingerprint(
            self.rescue.backend_name,
            {"engine": inner, "rescue_rec": str(part["rescue_rec"])},
            {"rescue_below": part["rescue_below"], "mode": mode},
        )

    def recognize(self, images: Sequence[Any]) -> list[PageOCR]:
        pages: list[PageOCR] = self.engine.recognize(images)
        return [
            self.rescue.rescue(image, page) if self._wanted(image, page) else page
            for image, page in zip(images, pages, strict=True)
        ]

    def _wanted(self, image: Any, page: PageOCR) -> bool:
        if not isinstance(image, np.ndarray):
            return False
        return self.weak is None or not self.weak([line.confidence for line in page.lines])

    def close(self) -> None:
        close = getattr(self.engine, "close", None)
        if callable(close):
            close()
