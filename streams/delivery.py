"""The OCR worker's outputs: sent with their origin, offsets stored only after delivery.

Every output (a PageResult, or the dead letter of an undecodable record) is sent with the
topic, partition and offset of the record it answers. When the brokers acknowledge it, that
offset is done in the :class:`~ocrstream.streams.offsets.OffsetTracker`, and once it *and every
earlier offset of the same partition* are done, the next offset is stored on the consumer
(``enable.auto.offset.store`` is off; the background committer commits what was stored). A
delivery that fails is sent again on the next :meth:`Delivery.resend_failed`; a fatal producer
error is kept for the loop to raise (a delivery callback must not raise into librdkafka).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from ocrstream.errors import FatalError
from ocrstream.schemas.codec import UnencodableRecordError
from ocrstream.schemas.records import ErrorInfo, PageImage, PageResult, PageTask
from ocrstream.streams.intake import Origin
from ocrstream.streams.ocr_batch import failed_result
from ocrstream.streams.offsets import OffsetTracker
from ocrstream.streams.producer import RecordProducer

log = logging.getLogger(__name__)


class Delivery:
    """Sends outputs and stores the offsets they complete; see the module docstring."""

    def __init__(
        self,
        producer: RecordProducer,
        consumer: Any,
        tracker: OffsetTracker,
        *,
        on_retry: Callable[[], None] | None = None,
    ) -> None:
        self.producer = producer
        self.consumer = consumer
        self.tracker = tracker
        self._on_retry = on_retry
        self._failed: list[tuple[Origin, str, Any, bytes]] = []
        self._outstanding: dict[Origin, int] = {}  # origins with several outputs: how many left
        self.fatal: FatalError | None = None

    def __len__(self) -> int:
        """Outputs whose delivery failed, to be sent again."""
        return len(self._failed)

    def send(self, origin: Origin, topic: str, key: Any, value: bytes) -> None:
        self.producer.send_raw(
            topic, key, value, on_delivery=partial(self._delivered, origin, topic, key, value)
        )

    def send_all(self, origin: Origin, outputs: list[tuple[str, Any, bytes]]) -> None:
        """Several outputs for one record (a routed page: its task for the accurate pool and
        its provisional result): the offset is done once every one of them is delivered."""
        if len(outputs) > 1:
            self._outstanding[origin] = len(outputs)
        for topic, key, value in outputs:
            self.send(origin, topic, key, value)

    def resend_failed(self) -> None:
        redo, self._failed = self._failed, []
        for origin, topic, key, value in redo:
            self.send(origin, topic, key, value)

    def _delivered(
        self,
        origin: Origin,
        topic: str,
        key: Any,
        value: bytes,
        err: KafkaError | None,
        _msg: Message,
    ) -> None:
        if err is not None:
            if err.fatal():
                self.fatal = FatalError(f"producer: {err}", code="kafka_fatal")
                return
            log.warning("delivery to %s failed (%s); sending again", topic, err)
            if self._on_retry is not None:
                self._on_retry()
            self._failed.append((origin, topic, key, value))
            return
        left = self._outstanding.get(origin)
        if left is not None:
            if left > 1:
                self._outstanding[origin] = left - 1
                return
            del self._outstanding[origin]
        nxt = self.tracker.done(*origin)
        if nxt is None:
            return
        try:
            self.consumer.store_offsets(offsets=[KafkaTopicPartition(origin[0], origin[1], nxt)])
        except KafkaException as e:  # the partition was revoked meanwhile
            log.debug("offset %s[%d]@%d not stored: %s", origin[0], origin[1], nxt, e)


# --- what is sent ---------------------------------------------------------------------------


def result_value(
    producer: RecordProducer, result: PageResult, topic: str, *, max_bytes: int, worker_id: str
) -> bytes:
    """The encoded result; a ``failed`` result in its place when it does not encode or is over
    the message limit (the producer would refuse it: a crash)."""
    try:
        value = producer.encode(result, topic)
    except UnencodableRecordError as e:
        log.error("page %s/%d result does not encode: %s", result.doc_id, result.page_no, e)
        fallback = failed_result(_task_of(result), ErrorInfo(e.code, str(e)), worker_id=worker_id)
        value = producer.encode(fallback, topic)
    if len(value) > max_bytes:
        log.error(
            "page %s/%d result is %d bytes, over the message limit",
            result.doc_id,
            result.page_no,
            len(value),
        )
        error = ErrorInfo("result_too_large", f"{len(value)} bytes")
        value = producer.encode(failed_result(_task_of(result), error, worker_id=worker_id), topic)
    return value


def _task_of(result: PageResult) -> PageTask:
    """A minimal task to build a failed result from a result that could not be encoded."""
    return PageTask(
        doc_id=result.doc_id,
        page_no=result.page_no,
        page_count=result.page_count,
        image=PageImage(encoding=""),
        width=result.width,
        height=result.height,
        source_sha256=result.source_sha256,
        source_uri=result.source_uri,
        content_type=result.content_type,
        outputs=result.outputs,
        submitted_at=result.submitted_at,
        attempt=result.attempt,
        trace_id=result.trace_id,
        tenant=result.tenant,
        mode=result.mode,
        revision=result.revision,
    )
