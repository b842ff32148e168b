"""The confluent-kafka producer every ocrstream process uses: idempotent, ``acks=all``,
and the murmur2 partitioner that Java clients and aiokafka (faust) use.

Records are encoded by the codec (the only code that knows the wire format). ``send`` never
drops a record when librdkafka's local queue is full: it serves delivery reports and tries
again. Callers that must not commit before delivery pass ``on_delivery``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import Record
from ocrstream.settings import KafkaSettings, LimitsSettings

log = logging.getLogger(__name__)

DeliveryCallback = Callable[[KafkaError | None, Message], None]


def producer_config(kafka: KafkaSettings, limits: LimitsSettings | None = None) -> dict[str, Any]:
    """Idempotent, fully acknowledged, lightly batched; retries ride out a broker restart."""
    max_bytes = (limits or LimitsSettings()).max_message_bytes
    return kafka.librdkafka(
        **{
            "enable.idempotence": True,
            # Java's (and aiokafka's, so faust's) partitioner: a doc_id lands on the same
            # partition whichever client wrote it, which keeps faust tables co-partitioned.
            "partitioner": "murmur2_random",
            "acks": "all",
            "linger.ms": 5,
            # aiokafka (faust) reads gzip without extra libraries; page images are JPEG/PNG.
            "compression.type": "gzip",
            "message.max.bytes": max_bytes + 64 * 1024,
            "message.timeout.ms": 300_000,
            "queue.buffering.max.kbytes": 262_144,
        }
    )


class RecordProducer:
    """Encode and send records; one per process, shared by threads (librdkafka is thread-safe)."""

    def __init__(
        self,
        kafka: KafkaSettings,
        codec: Codec,
        *,
        limits: LimitsSettings | None = None,
        producer: Any | None = None,
    ) -> None:
        self.codec = codec
        self._producer = (
            producer if producer is not None else Producer(producer_config(kafka, limits))
        )

    def encode(self, record: Record, topic: str) -> bytes:
        return self.codec.encode(record, topic)

    def send(
        self,
        topic: str,
        key: str | bytes | None,
        record: Record,
        on_delivery: DeliveryCallback | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        self.send_raw(topic, key, self.encode(record, topic), on_delivery, headers)

    def send_raw(
        self,
        topic: str,
        key: str | bytes | None,
        value: bytes,
        on_delivery: DeliveryCallback | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        kwargs: dict[str, Any] = {"key": key, "value": value}
        if on_delivery is not None:
            kwargs["on_delivery"] = on_delivery
        if headers:
            kwargs["headers"] = headers
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                return
            except BufferError:
                # The local queue is full: serve delivery reports until there is room.
                self._producer.poll(0.05)

    def poll(self, timeout: float = 0.0) -> int:
        return int(self._producer.poll(timeout))

    def flush(self, timeout: float = 30.0) -> int:
        """Wait for every queued record; returns how many are still undelivered."""
        return int(self._producer.flush(timeout))

    def __len__(self) -> int:
        return len(self._producer)
