"""``ocr.api-usage.v1``: how API replicas share what each tenant used (see
:mod:`ocrstream.api.limits` for the limits and how far a burst can overshoot them).

Each replica batches its admissions per tenant and second and appends one record per pair
every ``usage_flush_ms``; the value is a small JSON object (bookkeeping of the API, read only
by the API, like ``ocr.dlq.redriven.v1``'s journal, so not one of the pipeline's Avro records)::

    {"replica": "9f1c…", "tenant": "acme", "second": 1764558000, "requests": 3, "pages": 0,
     "at": 1764558000123}

``second`` is the epoch second the usage belongs to, ``at`` (ms) when the first of it was
admitted. One background thread per replica produces these and reads the topic from the start
of the UTC day (or a minute back, whichever is earlier): records of other replicas go into the
limiter's ledger, its own are skipped (counted when admitted). The topic keeps records two
days and needs one partition: every replica reads all of it anyway.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, KafkaException, Producer, TopicPartition

from ocrstream.api.limits import DAY_S, WINDOW_S
from ocrstream.settings import KafkaSettings
from ocrstream.streams import topics

log = logging.getLogger(__name__)

Apply = Callable[[str, int, int, int], None]  # tenant, second, requests, pages


class UsageLog:
    """This replica's side of the shared usage topic; :meth:`record` is the limiter's sink."""

    def __init__(
        self,
        kafka: KafkaSettings,
        apply: Apply,
        flush_ms: int,
        *,
        on_lag: Callable[[float], None] = lambda seconds: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kafka = kafka
        self.topic = kafka.topic(topics.API_USAGE)
        self.apply, self.on_lag, self.clock = apply, on_lag, clock
        self.flush_s = flush_ms / 1000
        self.replica = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], list[int]] = {}  # → [requests, pages, first at ms]
        self._stop = threading.Event()
        self.caught_up = threading.Event()
        self._thread = threading.Thread(target=self._run, name="api-usage", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def record(self, tenant: str, second: int, requests: int, pages: int) -> None:
        at = int(self.clock() * 1000)
        with self._lock:
            entry = self._pending.setdefault((tenant, second), [0, 0, at])
            entry[0] += requests
            entry[1] += pages

    def encode(self, tenant: str, second: int, entry: list[int]) -> bytes:
        return json.dumps({"replica": self.replica, "tenant": tenant, "second": second,
                           "requests": entry[0], "pages": entry[1], "at": entry[2]},
                          separators=(",", ":")).encode()  # fmt: skip

    def take(self, value: bytes | None) -> None:
        """One record off the topic: another replica's usage goes to the ledger."""
        try:
            body: dict[str, Any] = json.loads(value or b"")
            replica, tenant = str(body["replica"]), str(body["tenant"])
            second, requests = int(body["second"]), int(body.get("requests", 0))
            pages, at = int(body.get("pages", 0)), int(body.get("at", 0))
        except (ValueError, KeyError, TypeError) as e:
            log.warning("api usage: skipping a record that is not usage: %s", e)
            return
        if replica == self.replica:
            return
        self.apply(tenant, second, max(0, requests), max(0, pages))
        if self.caught_up.is_set() and at:
            self.on_lag(max(0.0, self.clock() - at / 1000))

    def _flush(self, producer: Producer) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for (tenant, second), entry in pending.items():
            try:
                producer.produce(self.topic, key=tenant.encode(),
                                 value=self.encode(tenant, second, entry),
                                 on_delivery=_delivered)  # fmt: skip
            except (BufferError, KafkaException) as e:
                # the other replicas will not see this usage; this one counted it
                log.warning("api usage: cannot send %s's usage: %s", tenant, e)
        producer.poll(0)

    def _assign(self, consumer: Consumer) -> dict[int, int]:
        """Every partition from the start of the UTC day (a minute back at least); the ends
        to catch up to."""
        now = self.clock()
        since_ms = int(min(now // DAY_S * DAY_S, now - WINDOW_S) * 1000)
        md = consumer.list_topics(self.topic, timeout=10)
        found = md.topics.get(self.topic)
        if found is None or found.error is not None:
            raise KafkaException(f"topic {self.topic} is missing: run `ocrstream topics create`")
        wanted = [TopicPartition(self.topic, p, since_ms) for p in found.partitions]
        start = consumer.offsets_for_times(wanted, timeout=10)
        ends = {}
        for tp in start:
            _low, high = consumer.get_watermark_offsets(tp, timeout=10)
            if tp.offset < 0:  # nothing since then
                tp.offset = OFFSET_END
            elif high > tp.offset:
                ends[tp.partition] = high
        consumer.assign(start)
        return ends

    def _run(self) -> None:
        conf = self.kafka.librdkafka
        producer = Producer(conf(**{"linger.ms": 5, "enable.idempotence": True, "acks": "all",
                                    "partitioner": "murmur2_random"}))  # fmt: skip
        consumer = Consumer(conf(**{"group.id": f"ocrstream-api-usage-{self.replica[:12]}",
                                    "enable.auto.commit": False,
                                    "enable.partition.eof": False}))  # fmt: skip
        try:
            ends: dict[int, int] | None = None
            while ends is None and not self._stop.is_set():
                try:
                    ends = self._assign(consumer)
                except KafkaException as e:
                    log.warning("api usage: cannot read %s yet: %s", self.topic, e)
                    self._flush(producer)  # into the producer's bounded queue meanwhile
                    self._stop.wait(1.0)
            if ends is not None and not ends:
                self.caught_up.set()
            flushed = time.monotonic()
            while not self._stop.is_set():
                msg = consumer.poll(min(0.05, self.flush_s))
                if time.monotonic() - flushed >= self.flush_s:
                    self._flush(producer)
                    flushed = time.monotonic()
                if msg is None:
                    continue
                if msg.error() is not None:
                    log.warning("api usage: %s", msg.error())
                    continue
                self.take(msg.value())
                if ends and not self.caught_up.is_set():
                    if (msg.offset() or 0) + 1 >= ends.get(msg.partition() or 0, 0):
                        ends.pop(msg.partition() or 0, None)
                    if not ends:
                        self.caught_up.set()
                        log.info("api usage caught up")
        finally:
            self._flush(producer)
            producer.flush(5)
            consumer.close()


def _delivered(err: Any, _msg: Any) -> None:
    if err is not None:
        log.warning("api usage: a record was not delivered: %s", err)
