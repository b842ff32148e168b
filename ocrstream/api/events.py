"""``GET /v1/documents/{doc_id}/events``: a document's progress, page results and terminal
event as Server-Sent Events.

Each stream is a short-lived consumer of its own (no group, nothing committed) over
``ocr.progress.v1``, ``ocr.page-results.v1`` and ``ocr.documents.v1``, positioned by time at the
document's submission (``offsets_for_times``), so it reads only what came after the upload and
needs no state in the API. Every record of one document is on one partition of each topic (they
are keyed by doc_id), so an event's id — the offsets of the last record sent on each topic,
``r{results}.p{progress}.d{documents}`` — says exactly what a reconnecting client has seen:
with ``Last-Event-ID`` the stream skips those and goes on. The stream ends after the terminal
event, or after ``ApiSettings.events_max_s`` (the client reconnects with its last id). A
reprocessed document streams the latest revision the API knows of when the stream opens.

The consumer fetches the three topics independently, so the terminal record can arrive before
page results or progress written ahead of it (a resumed stream, which skips what was seen,
meets this often). The terminal event is therefore held until every page-results and progress
partition has been read up to its end as of the moment the terminal record arrived: no page a
document completed with is left out of its stream.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from ocrstream.errors import PoisonError
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import DocumentEvent, DocumentProgress, PageResult
from ocrstream.settings import KafkaSettings
from ocrstream.streams import topics
from ocrstream.streams.fetch_watch import LATEST, FetchWatch, log_offsets
from ocrstream.streams.metrics import Metrics

log = logging.getLogger(__name__)

_ID = re.compile(r"r(-?\d+)\.p(-?\d+)\.d(-?\d+)")
KINDS = {topics.PAGE_RESULTS: "r", topics.PROGRESS: "p", topics.DOCUMENTS: "d"}
SLACK_MS = 60_000  # records stamped a little before the submission time (clock skew)
HEARTBEAT_S = 15.0
DRAIN_S = 10.0  # the most the terminal event waits for the other topics to be read to their end


@dataclass
class Position:
    """The offset of the last record sent from each topic (-1: none yet)."""

    r: int = -1
    p: int = -1
    d: int = -1

    @classmethod
    def parse(cls, last_event_id: str | None) -> Position:
        match = _ID.fullmatch(last_event_id or "")
        return cls(*(int(g) for g in match.groups())) if match else cls()

    def __str__(self) -> str:
        return f"r{self.r}.p{self.p}.d{self.d}"


def sse(event: str, data: dict[str, Any], event_id: str) -> bytes:
    # json.dumps escapes newlines, so one data line holds the whole event; OCR text stays data.
    return f"id: {event_id}\nevent: {event}\ndata: {json.dumps(data)}\n\n".encode()


def page_data(result: PageResult) -> dict[str, Any]:
    return {
        "page_no": result.page_no, "page_count": result.page_count,
        "status": result.status.value,
        "error": None if result.error is None else result.error.code,
        "text": "\n".join(line.text for line in result.lines),
        "lines": len(result.lines),
    }  # fmt: skip


def stream(
    kafka: KafkaSettings,
    codec: Codec,
    doc_id: str,
    since: datetime,
    last_event_id: str | None,
    describe: Callable[[DocumentEvent], dict[str, Any]],
    max_s: float,
    revision: int = 1,
    metrics: Metrics | None = None,
) -> Iterator[bytes]:
    """The event stream of ``doc_id`` (blocking: starlette runs it in a worker thread).
    ``describe(event)`` renders the terminal event as the status body. Records of revisions
    before ``revision`` (the latest the caller knows of) are skipped: the stream of a
    reprocessed document is its new revision's, not the first terminal event it meets. A
    partition librdkafka stops fetching is fetched again from where the stream is
    (:mod:`ocrstream.streams.fetch_watch`, counted in ``metrics`` as agent ``api-events``)."""
    position = Position.parse(last_event_id)
    consumer = Consumer(kafka.librdkafka(**{
        "group.id": f"ocrstream-api-events-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
    }))  # fmt: skip
    try:
        start_ms = int(since.timestamp() * 1000) - SLACK_MS
        wanted = []
        for name in KINDS:
            topic = kafka.topic(name)
            md = consumer.list_topics(topic, timeout=10)
            partitions = md.topics[topic].partitions if topic in md.topics else {}
            wanted += [TopicPartition(topic, p, start_ms) for p in partitions]
        start = consumer.offsets_for_times(wanted, timeout=10)
        for tp in start:
            if tp.offset < 0:  # nothing at or after the time yet: from the end as it is now
                tp.offset = consumer.get_watermark_offsets(tp, timeout=10)[1]
        consumer.assign(start)
        watch = FetchWatch(consumer, metrics, "api-events", stall_after_s=kafka.fetch_stall_s)
        watch.assigned_from(start)
        kind_of = {kafka.topic(name): kind for name, kind in KINDS.items()}
        # the offset of the next record to read on each partition, whatever it holds
        reading = {(tp.topic, tp.partition): tp.offset for tp in start}
        yield b": stream of " + doc_id.encode() + b"\n\n"
        started = last_beat = time.monotonic()
        pages_sent: set[int] = set()
        held: DocumentEvent | None = None  # the terminal record, until the others are read
        ends: dict[tuple[str, int], int] = {}
        drain_until = 0.0
        held_at = -1
        while time.monotonic() - started < max_s:
            if held is not None and (
                time.monotonic() > drain_until or all(reading[tp] >= e for tp, e in ends.items())
            ):
                # its id covers the pages and progress read while it waited; the events before
                # it do not name it, so a client resuming from one of them still gets it
                position.d = held_at
                yield sse("terminal", describe(held), str(position))
                return
            msg = watch.poll(0.5)
            now = time.monotonic()
            if msg is None or msg.error() is not None:
                if now - last_beat >= HEARTBEAT_S:
                    last_beat = now
                    yield b": keep-alive\n\n"
                continue
            kind = kind_of.get(msg.topic() or "")
            offset = msg.offset() or 0
            if kind is not None:
                reading[(msg.topic() or "", msg.partition() or 0)] = offset + 1
            if kind is None or offset <= getattr(position, kind) or msg.value() is None:
                continue
            try:
                record = codec.decode(msg.value() or b"")
            except PoisonError:
                continue
            if getattr(record, "doc_id", None) != doc_id:
                continue
            if getattr(record, "revision", 1) < revision:
                continue
            if isinstance(record, DocumentEvent):
                if held is None:  # a second terminal record (a redelivery): the first stands
                    held, held_at = record, offset
                    ends = log_offsets(  # in one request: each waits behind a fetch
                        consumer,
                        ((tp.topic, tp.partition) for tp in start
                         if kind_of[tp.topic] != KINDS[topics.DOCUMENTS]),
                        LATEST,
                        10,
                    )  # fmt: skip
                    drain_until = time.monotonic() + DRAIN_S
                continue
            setattr(position, kind, offset)
            if isinstance(record, DocumentProgress):
                done = {"pages_done": record.pages_done, "page_count": record.page_count,
                        "pages_failed": record.pages_failed}  # fmt: skip
                yield sse("progress", done, str(position))
            elif isinstance(record, PageResult) and record.page_no not in pages_sent:
                pages_sent.add(record.page_no)  # a redelivered page comes once
                yield sse("page", page_data(record), str(position))
    except KafkaException as e:
        log.warning("events of %s: Kafka: %s", doc_id, e)
        yield b'event: error\ndata: {"error": "kafka_unavailable"}\n\n'
    finally:
        consumer.close()
