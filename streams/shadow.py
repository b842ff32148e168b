"""The shadow comparer and ``ocrstream shadow report``: primary against shadow page results.

:class:`ShadowComparer` is an agent (``ocrstream shadow compare``, and one of ``ocrstream
all``'s): a confluent-kafka consumer in its own group on ``ocr.page-results.v1`` and
``ocr.page-results.shadow.v1`` that pairs the results of each page
(:class:`~ocrstream.processors.shadow.ShadowJoin`) and observes, per page, the CER between the
two texts (``ocrstream_shadow_cer``) and the confidence delta
(``ocrstream_shadow_confidence_delta``). It only reads: nothing it does reaches a document.
Offsets are committed automatically; after a restart, pairs whose first half was read before
are not made again — the histograms are statistics, and a few pages less do not change them.
A partition the consumer stops fetching is found and fetched again
(:mod:`~ocrstream.streams.fetch_watch`, agent ``shadow-comparer``).

:func:`comparisons` reads both topics to their current end (no group, nothing committed) for
the report, so that ``ocrstream shadow report`` needs no comparer and no Prometheus.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from ocrstream.errors import FatalError, PoisonError
from ocrstream.processors.shadow import Comparison, PageText, ShadowJoin, Side, join_all
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import PageResult, PageStatus
from ocrstream.settings import KafkaSettings, ShadowSettings
from ocrstream.streams import topics
from ocrstream.streams.fetch_watch import FetchWatch
from ocrstream.streams.membership import leave_group
from ocrstream.streams.metrics import Metrics
from ocrstream.streams.redrive import read_to_end

log = logging.getLogger(__name__)


def page_text(result: PageResult) -> PageText | None:
    """What is compared of a result; None for one that is not (failed, or provisional)."""
    if result.status is PageStatus.FAILED or result.provisional:
        return None
    return PageText(
        "\n".join(line.text for line in result.lines),
        tuple(line.confidence for line in result.lines),
    )


class ShadowComparer:
    """Build one, then :meth:`run` it until ``stop`` is set."""

    def __init__(
        self,
        kafka: KafkaSettings,
        settings: ShadowSettings,
        codec: Codec,
        metrics: Metrics,
        consumer: Any | None = None,
    ) -> None:
        self.codec = codec
        self.metrics = metrics
        self._close_timeout_s = kafka.close_timeout_s
        self.primary_topic = kafka.topic(topics.PAGE_RESULTS)
        self.shadow_topic = kafka.topic(topics.PAGE_RESULTS_SHADOW)
        self.join = ShadowJoin(max_pending=settings.max_pending, ttl_s=settings.pending_ttl_s)
        self.consumer = consumer or Consumer(kafka.librdkafka(**{
            "group.id": kafka.topic(settings.group),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
        }))  # fmt: skip
        self.compared = 0
        self.watch = FetchWatch(self.consumer, metrics, "shadow-comparer",
                                stall_after_s=kafka.fetch_stall_s)  # fmt: skip

    def run(self, stop: threading.Event) -> None:
        self.consumer.subscribe([self.primary_topic, self.shadow_topic],
                                on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)  # fmt: skip
        log.info("shadow comparer: %s against %s", self.shadow_topic, self.primary_topic)
        try:
            while not stop.is_set():
                for msg in self.consumer.consume(num_messages=500, timeout=0.5):
                    err = msg.error()
                    if err is not None:
                        if err.fatal():
                            raise FatalError(f"consumer: {err}", code="kafka_fatal")
                        if err.code() != KafkaError._PARTITION_EOF:
                            log.warning("consumer error: %s", err)
                        continue
                    self.watch.heard((msg.topic() or "", msg.partition() or 0))
                    self.handle(msg.topic(), msg.value() or b"", time.monotonic())
                self.watch.check()  # the comparer holds no partition back
        finally:
            # auto-commit's last commit on the way out: bounded, for a Kafka that is gone
            leave_group(self.consumer, self._close_timeout_s, "shadow comparer", commit=False)

    def _on_assign(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self.watch.assigned((tp.topic, tp.partition) for tp in partitions)

    def _on_revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self.watch.forget((tp.topic, tp.partition) for tp in partitions)

    def handle(self, topic: str | None, value: bytes, now: float) -> Comparison | None:
        """One record of either topic; observes and returns the comparison it completes."""
        side: Side = "shadow" if topic == self.shadow_topic else "primary"
        try:
            result = self.codec.decode_as(value, PageResult)
        except PoisonError:
            return None  # the assembler dead-letters what it cannot read; nothing to compare
        page = page_text(result)
        if page is None:
            return None
        found = self.join.add(side, result.doc_id, result.page_no, page, now)
        if found is not None:
            self.compared += 1
            self.metrics.shadow_cer.observe(found.cer)
            self.metrics.shadow_confidence_delta.observe(found.confidence_delta)
        return found


def _results(kafka: KafkaSettings, codec: Codec, since: datetime | None
             ) -> Iterator[tuple[Side, str, int, PageText]]:  # fmt: skip
    since_ms = None if since is None else int(since.timestamp() * 1000)
    for side, name in (("primary", topics.PAGE_RESULTS), ("shadow", topics.PAGE_RESULTS_SHADOW)):
        for msg in read_to_end(kafka, kafka.topic(name)):
            _, ts = msg.timestamp()
            if since_ms is not None and ts < since_ms:
                continue
            try:
                result = codec.decode_as(msg.value() or b"", PageResult)
            except PoisonError:
                continue
            page = page_text(result)
            if page is not None:
                yield side, result.doc_id, result.page_no, page  # type: ignore[misc]


def comparisons(kafka: KafkaSettings, codec: Codec, since: datetime | None = None
                ) -> list[Comparison]:  # fmt: skip
    """Every page both sides answered (records written since ``since``), as they compare."""
    return join_all(_results(kafka, codec, since))
