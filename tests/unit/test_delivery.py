"""The OCR worker's deliveries alone: offsets are stored in order and only once delivered; a
failed delivery is sent again; a fatal one is kept for the loop."""

from __future__ import annotations

from typing import Any

from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import Line, PageImage, PageResult, PageStatus, PageTask, Point
from ocrstream.settings import KafkaSettings
from ocrstream.streams.delivery import Delivery, result_value
from ocrstream.streams.offsets import OffsetTracker
from ocrstream.streams.producer import RecordProducer
from tests.fakes.kafka import FakeConsumer, FakeProducer

CODEC = Codec()


class Err:
    """A librdkafka delivery error."""

    def __init__(self, fatal: bool) -> None:
        self._fatal = fatal

    def fatal(self) -> bool:
        return self._fatal

    def __str__(self) -> str:
        return "broker down"


def delivery(producer: FakeProducer) -> tuple[Delivery, FakeConsumer, OffsetTracker, list[str]]:
    consumer, tracker, retries = FakeConsumer(partitions=1), OffsetTracker(), []
    records = RecordProducer(KafkaSettings(), CODEC, producer=producer)
    d = Delivery(records, consumer, tracker, on_retry=lambda: retries.append("retry"))
    return d, consumer, tracker, retries


def test_offsets_are_stored_only_up_to_the_delivered_prefix() -> None:
    producer = FakeProducer(auto=False)
    d, consumer, tracker, _ = delivery(producer)
    for offset in range(3):
        tracker.add("pages", 0, offset)
        d.send(("pages", 0, offset), "results", "k", b"v%d" % offset)
    producer.reverse = True  # offset 0 is delivered last
    producer.deliver()
    assert consumer.stored == [(0, 3)]  # only once 0 was delivered, and once


def test_a_failed_delivery_is_sent_again_and_a_fatal_one_kept() -> None:
    producer = FakeProducer(auto=False)
    d, consumer, tracker, retries = delivery(producer)
    tracker.add("pages", 0, 0)
    d.send(("pages", 0, 0), "results", "k", b"v")
    ((_, _, _, callback),) = producer.queued
    producer.queued = []
    callback(Err(fatal=False), None)
    assert (len(d), retries, consumer.stored) == (1, ["retry"], [])
    d.resend_failed()
    assert len(d) == 0
    producer.deliver()
    assert consumer.stored == [(0, 1)]
    d.send(("pages", 0, 1), "results", "k", b"v")
    producer.queued[0][3](Err(fatal=True), None)
    assert d.fatal is not None
    assert d.fatal.code == "kafka_fatal"


def test_a_result_over_the_message_limit_is_sent_as_failed() -> None:
    records = RecordProducer(KafkaSettings(), CODEC, producer=FakeProducer())
    task = PageTask("d", 1, 1, PageImage("png"), 100, 50)
    big = PageResult(
        "d",
        1,
        1,
        PageStatus.OK,
        width=100,
        height=50,
        lines=(Line("x" * 5000, 0.9, (Point(0, 0),) * 4),),
    )
    small: Any = result_value(records, big, "results", max_bytes=10**6, worker_id="w")
    assert CODEC.decode_as(small, PageResult).status is PageStatus.OK
    value = result_value(records, big, "results", max_bytes=2000, worker_id="w")
    sent = CODEC.decode_as(value, PageResult)
    assert sent.status is PageStatus.FAILED
    assert sent.error is not None
    assert sent.error.code == "result_too_large"
    assert (sent.doc_id, sent.page_no, sent.width, sent.worker_id) == ("d", 1, 100, "w")
    assert task.doc_id == sent.doc_id
