"""The real :class:`~ocrstream.streams.worker.OcrWorker` on the fake Kafka clients of
:mod:`tests.fakes.kafka`, turned step by step by the test (``worker.step()``), with
:class:`tests.fakes.engines.SizeEngine` as its engine unless a test passes another.
"""

from __future__ import annotations

import time
from typing import Any

import cv2
import numpy as np

from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import PageImage, PageResult, PageTask
from ocrstream.settings import KafkaSettings, WorkerSettings
from ocrstream.streams.metrics import Metrics
from ocrstream.streams.producer import RecordProducer
from ocrstream.streams.worker import OcrWorker
from tests.fakes.engines import SizeEngine
from tests.fakes.kafka import FakeConsumer, FakeProducer

RESULTS = "ocr.page-results.v1"

CODEC = Codec()


def png(width: int, height: int = 8) -> bytes:
    ok, buf = cv2.imencode(".png", np.full((height, width, 3), 200, np.uint8))
    assert ok
    return buf.tobytes()


def task(
    doc: str,
    page: int,
    width: int,
    *,
    uri: str | None = None,
    data: bytes | None = None,
    count: int = 3,
) -> PageTask:
    image = PageImage(
        "png", data=None if uri else (data if data is not None else png(width)), uri=uri
    )
    return PageTask(doc_id=doc, page_no=page, page_count=count, image=image, width=width, height=8)


def make_worker(
    consumer: FakeConsumer,
    producer: FakeProducer,
    engine: Any = None,
    fetch: Any = None,
    routing: Any = None,
    **settings: Any,
) -> OcrWorker:
    conf = {
        "max_batch": 4,
        "max_wait_ms": 0,
        "max_inflight_pages": 64,
        "decode_threads": 2,
        "store_backoff_s": 0.01,
        "drain_timeout_s": 5.0,
        "cache": False,  # tests of the page cache turn it on (its follower is not started)
        **settings,
    }
    return OcrWorker(
        kafka=KafkaSettings(),
        settings=WorkerSettings(**conf),
        engine=engine or SizeEngine(),
        codec=CODEC,
        fetch=fetch or (lambda uri: b""),
        metrics=Metrics(),
        consumer=consumer,
        producer=RecordProducer(KafkaSettings(), CODEC, producer=producer),
        worker_id="w1",
        routing=routing,
    )


def step_until(worker: OcrWorker, done: Any, timeout: float = 10.0) -> bool:
    """Turn the loop until ``done()`` or the timeout; the loop itself never blocks long."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        worker.step()
        if done():
            return True
    return False


def run_until(worker: OcrWorker, done: Any) -> None:
    worker.consumer.subscribe(
        [worker.topic],
        on_assign=worker._on_assign,
        on_revoke=worker._on_revoke,
        on_lost=worker._on_lost,
    )
    step_until(worker, done)
    worker.shutdown()


def results(producer: FakeProducer) -> list[PageResult]:
    return [CODEC.decode_as(v, PageResult) for t, _, v in producer.delivered if t == RESULTS]
