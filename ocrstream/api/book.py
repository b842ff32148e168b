"""What the pipeline said about each document, for ``GET /v1/documents/{doc_id}``.

An in-process cache fed by one background consumer, not a consumer per request: the two topics
it reads are compacted by doc_id (``ocr.documents.v1``: the terminal DocumentEvent,
``ocr.progress.v1``: the latest DocumentProgress), so reading them from the beginning at start
rebuilds the whole book, and a replica keeps no state of its own — any replica answers the same
once it has caught up (``/readyz`` says so). A consumer per request would read the whole
compacted topic for every status call. The book holds one small record per document (the
compacted topics' size): fine for millions of documents; beyond that it would be keyed by a
store lookup instead. A partition that hands over nothing while its log goes further is fetched
again from its position (:mod:`ocrstream.streams.fetch_watch`, agent ``api-book``): a book
that stopped reading would answer stale statuses for as long as the replica runs.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from ocrstream.errors import PoisonError
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import DocumentEvent, DocumentProgress
from ocrstream.settings import KafkaSettings
from ocrstream.streams import topics
from ocrstream.streams.fetch_watch import FetchWatch
from ocrstream.streams.metrics import Metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Entry:
    event: DocumentEvent | None = None
    progress: DocumentProgress | None = None


class DocumentBook:
    """The latest progress and the terminal event of every document, kept current in a
    daemon thread."""

    def __init__(
        self, kafka: KafkaSettings, codec: Codec | None = None, metrics: Metrics | None = None
    ) -> None:
        self.kafka = kafka
        self.codec = codec or Codec(kafka)
        self.metrics = metrics or Metrics()
        self._lock = threading.Lock()
        self._events: dict[str, DocumentEvent] = {}
        self._progress: dict[str, DocumentProgress] = {}
        self._stop = threading.Event()
        self.caught_up = threading.Event()
        self._thread = threading.Thread(target=self._run, name="document-book", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def get(self, doc_id: str) -> Entry:
        with self._lock:
            return Entry(self._events.get(doc_id), self._progress.get(doc_id))

    def _assign(self, consumer: Consumer, watch: FetchWatch) -> dict[tuple[str, int], int]:
        """Assign every partition from the beginning, watched by ``watch``; the end offsets to
        catch up to."""
        assignment, ends = [], {}
        for name in (topics.DOCUMENTS, topics.PROGRESS):
            topic = self.kafka.topic(name)
            md = consumer.list_topics(topic, timeout=10)
            for p in md.topics[topic].partitions if topic in md.topics else {}:
                tp = TopicPartition(topic, p, OFFSET_BEGINNING)
                low, high = consumer.get_watermark_offsets(tp, timeout=10)
                if high > low:
                    ends[(topic, p)] = high
                assignment.append(tp)
        consumer.assign(assignment)
        watch.assigned((tp.topic, tp.partition) for tp in assignment)
        return ends

    def _run(self) -> None:
        consumer = Consumer(self.kafka.librdkafka(**{
            "group.id": f"ocrstream-api-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }))  # fmt: skip
        watch = FetchWatch(consumer, self.metrics, "api-book",
                           stall_after_s=self.kafka.fetch_stall_s)  # fmt: skip
        try:
            ends: dict[tuple[str, int], int] | None = None
            while ends is None and not self._stop.is_set():
                try:
                    ends = self._assign(consumer, watch)
                except KafkaException as e:
                    log.warning("document book: cannot reach Kafka yet: %s", e)
                    time.sleep(1.0)
            if ends is not None and not ends:
                self.caught_up.set()
            while not self._stop.is_set():
                msg = watch.poll(0.5)
                if msg is None:
                    continue
                if msg.error() is not None:
                    log.warning("document book: %s", msg.error())
                    continue
                self._take(msg.value())
                if ends and not self.caught_up.is_set():
                    key = (msg.topic() or "", msg.partition() or 0)
                    if (msg.offset() or 0) + 1 >= ends.get(key, 0):
                        ends.pop(key, None)
                    if not ends:
                        self.caught_up.set()
                        log.info("document book caught up")
        finally:
            consumer.close()

    def _take(self, value: bytes | None) -> None:
        if value is None:
            return
        try:
            record = self.codec.decode(value)
        except PoisonError as e:
            log.warning("document book: skipping an undecodable record: %s", e)
            return
        with self._lock:
            if isinstance(record, DocumentEvent):
                self._events[record.doc_id] = record
            elif isinstance(record, DocumentProgress):
                self._progress[record.doc_id] = record
