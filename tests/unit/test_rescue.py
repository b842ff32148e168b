"""Line rescue (ocrstream.processors.ocr.rescue): a fast engine's low-confidence lines re-read
by the small model's real recogniser, on a page the test renders."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from ocrstream.processors.ocr.engine import OcrEngine
from ocrstream.processors.ocr.rescue import LineRescue, RescuingEngine
from ocrstream.processors.ocr.types import EngineInfo, Line, PageOCR
from ocrstream.settings import OcrSettings
from tests.fakes.engines import render_text_page

LINES = ["Invoice 2024-0117 for ACME Corporation", "Total amount due: 1,234.56 USD"]


class FastEngine:
    """Gives back a fixed reading (the fast model's, as the test makes it up)."""

    def __init__(self, page: PageOCR) -> None:
        self.page = page
        self.info = EngineInfo(backend="openvino", model="ppocrv6-tiny", version="6")

    def recognize(self, images: Sequence[Any]) -> list[PageOCR]:
        return [self.page for _ in images]

    def fingerprint(self, mode: str) -> str:
        return f"tiny-{mode}"


@pytest.fixture(scope="module")
def page_and_lines(ocr_engine: OcrEngine) -> tuple[np.ndarray, PageOCR]:
    image = render_text_page(LINES)
    (page,) = ocr_engine.recognize([image])
    assert [line.text for line in page.lines] == LINES  # the polygons the test re-uses
    return image, page


@pytest.fixture(scope="module")
def rescue() -> LineRescue:
    return LineRescue(OcrSettings(model="ppocrv6-tiny"), "ppocrv6-small", below=0.9)


def misread(page: PageOCR, *readings: tuple[str, float]) -> PageOCR:
    lines = tuple(
        Line(text=text, confidence=conf, polygon=line.polygon)
        for line, (text, conf) in zip(page.lines, readings, strict=True)
    )
    return dataclasses.replace(page, lines=lines, timings_ms={"total": 10.0})


def test_a_low_confidence_line_is_re_read_and_a_confident_one_is_not(
    page_and_lines: tuple[np.ndarray, PageOCR], rescue: LineRescue
) -> None:
    image, page = page_and_lines
    fast = misread(page, ("Inv0ice 2O24-O117 f0r ACME", 0.62), ("Tota1 amount", 0.95))
    engine = RescuingEngine(FastEngine(fast), rescue)
    (read,) = engine.recognize([image])
    assert read.lines[0].text == LINES[0]  # re-read by small, more confident
    assert read.lines[0].confidence > 0.9
    assert read.lines[1] == fast.lines[1]  # above the threshold: not re-read
    assert [line.polygon for line in read.lines] == [line.polygon for line in fast.lines]
    assert read.timings_ms["rescue"] > 0
    assert read.timings_ms["total"] == pytest.approx(10.0 + read.timings_ms["rescue"], abs=0.02)


def test_the_more_confident_reading_is_kept(
    page_and_lines: tuple[np.ndarray, PageOCR],
) -> None:
    image, page = page_and_lines
    # over 1.0, so both lines are re-read; no reading is surer than the fast one at 1.0
    sure = LineRescue(OcrSettings(model="ppocrv6-tiny"), "ppocrv6-small", below=1.01)
    fast = misread(page, ("Invoice 2024-0117 for ACME", 1.0), ("wrong", 0.2))
    (read,) = RescuingEngine(FastEngine(fast), sure).recognize([image])
    assert read.lines[0] == fast.lines[0]
    assert read.lines[1].text == LINES[1]


def test_encoded_and_turned_pages_pass_through(
    page_and_lines: tuple[np.ndarray, PageOCR], rescue: LineRescue
) -> None:
    image, page = page_and_lines
    fast = misread(page, ("Inv0ice", 0.5), ("Tota1", 0.5))
    engine = RescuingEngine(FastEngine(fast), rescue)
    assert engine.recognize([b"encoded bytes"]) == [fast]
    turned = dataclasses.replace(fast, rotation=180)
    assert RescuingEngine(FastEngine(turned), rescue).recognize([image]) == [turned]


def test_the_fingerprint_names_the_rescue_model_and_threshold(rescue: LineRescue) -> None:
    page = PageOCR(width=1, height=1, lines=())
    plain = FastEngine(page)
    with_rescue = RescuingEngine(plain, rescue)
    other = RescuingEngine(
        plain, LineRescue(OcrSettings(model="ppocrv6-tiny"), "ppocrv6-small", below=0.8)
    )
    prints = {plain.fingerprint("text"), with_rescue.fingerprint("text"),
              other.fingerprint("text"), with_rescue.fingerprint("layout")}  # fmt: skip
    assert len(prints) == 4
    assert with_rescue.fingerprint("text") == RescuingEngine(plain, rescue).fingerprint("text")
    assert with_rescue.info == plain.info  # results still name the fast engine


def test_a_primary_worker_rescues_only_when_the_settings_name_a_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ocrstream.cli.agents import _with_rescue
    from ocrstream.settings import WorkerPool

    fast = FastEngine(PageOCR(width=1, height=1, lines=()))
    fast.settings = OcrSettings(model="ppocrv6-tiny")  # type: ignore[attr-defined]
    assert _with_rescue(fast, WorkerPool.PRIMARY) is fast
    monkeypatch.setenv("OCRSTREAM_ROUTING_RESCUE_MODEL", "ppocrv6-small")
    monkeypatch.setenv("OCRSTREAM_ROUTING_RESCUE_BELOW", "0.8")
    assert _with_rescue(fast, WorkerPool.ACCURATE) is fast
    wrapped = _with_rescue(fast, WorkerPool.PRIMARY)
    assert isinstance(wrapped, RescuingEngine)
    assert wrapped.rescue.below == 0.8
    assert wrapped.rescue.models.name == "ppocrv6-small"


def test_the_worker_routes_on_the_rescued_confidences(
    page_and_lines: tuple[np.ndarray, PageOCR], rescue: LineRescue
) -> None:
    import cv2

    from ocrstream.processors.routing import RoutingRule
    from ocrstream.schemas.records import PageResult
    from tests.fakes.kafka import FakeConsumer, FakeProducer
    from tests.fakes.stepped_worker import CODEC, make_worker, run_until, task

    image, page = page_and_lines
    ok, png = cv2.imencode(".png", image)
    assert ok
    fast = misread(page, ("Inv0ice 2O24-O117 f0r ACME", 0.62), (LINES[1], 0.97))
    rule = RoutingRule(low_confidence=0.9, max_low_fraction=0.1, min_mean_confidence=0.96)
    delivered = {}
    for name, engine in (
        ("fast", FastEngine(fast)),
        ("rescued", RescuingEngine(FastEngine(fast), rescue)),
    ):
        consumer, producer = FakeConsumer(partitions=1), FakeProducer()
        consumer.push(
            0, b"d", CODEC.encode(task("d", 1, image.shape[1], data=png.tobytes(), count=1))
        )
        worker = make_worker(consumer, producer, engine, routing=rule)
        run_until(
            worker, lambda p=producer: any(t.endswith("page-results.v1") for t, _, _ in p.delivered)
        )
        delivered[name] = producer.delivered

    def outcome(name: str) -> tuple[list[str], list[str]]:
        topics = [t for t, _, _ in delivered[name]]
        [value] = [v for t, _, v in delivered[name] if t.endswith("page-results.v1")]
        return topics, [line.text for line in CODEC.decode_as(value, PageResult).lines]

    topics, texts = outcome("fast")
    assert any(t.endswith("pages.accurate.v1") for t in topics)  # weak as the fast model read it
    topics, texts = outcome("rescued")
    assert not any(t.endswith("pages.accurate.v1") for t in topics)  # kept after the rescue
    assert texts == LINES


def test_with_the_rule_only_the_pages_it_keeps_are_rescued(
    page_and_lines: tuple[np.ndarray, PageOCR], rescue: LineRescue
) -> None:
    from ocrstream.processors.routing import RoutingRule

    image, page = page_and_lines
    rule = RoutingRule(low_confidence=0.9, max_low_fraction=0.1, min_mean_confidence=0.96)
    weak = misread(page, ("Inv0ice 2O24-O117 f0r ACME", 0.62), (LINES[1], 0.97))
    kept = misread(page, ("Inv0ice 2O24-O117 f0r ACME", 0.93), (LINES[1], 0.99))
    assert rule.weak([0.62, 0.97])
    assert not rule.weak([0.93, 0.99])  # no line under 0.9, mean 0.96
    (read,) = RescuingEngine(FastEngine(weak), rescue, rule.weak).recognize([image])
    assert read == weak  # routed as the fast engine read it, not re-read
    higher = LineRescue(OcrSettings(model="ppocrv6-tiny"), "ppocrv6-small", below=0.95)
    (read,) = RescuingEngine(FastEngine(kept), higher, rule.weak).recognize([image])
    assert read.lines[0].text == LINES[0]
