"""A partition librdkafka stopped fetching is found and fetched again, on a real broker.

The stall seen once in CI (a consumer assigned partitions with records on them that handed
over nothing for two minutes) cannot be caused on purpose; here it is stood in for by pausing
a partition inside librdkafka behind the loop's back, which leaves the loop in the same
place: assigned, not holding the partition back, and handed nothing."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from ocrstream.settings import KafkaSettings
from ocrstream.streams import topics as t
from ocrstream.streams.fetch_watch import FetchWatch
from ocrstream.streams.metrics import Metrics
from tests.polling import wait_until

pytestmark = pytest.mark.integration

STALL_S = 2.0


def _stalls(metrics: Metrics, topic: str) -> float:
    value = metrics.registry.get_sample_value(
        "ocrstream_consumer_fetch_stalls_total", {"agent": "test", "topic": topic}
    )
    return value or 0.0


def _subscribe(consumer: Consumer, watch: FetchWatch, topic: str, partitions: int) -> list[int]:
    """Subscribes ``consumer`` to ``topic``, telling ``watch`` what it is assigned; the
    partitions it got once it has ``partitions`` of them (or a minute has gone)."""
    assigned: list[int] = []

    def on_assign(_c: Consumer, parts: list[TopicPartition]) -> None:
        watch.assigned((p.topic, p.partition) for p in parts)
        assigned.extend(p.partition for p in parts)

    consumer.subscribe([topic], on_assign=on_assign)
    deadline = time.monotonic() + 60
    while len(assigned) < partitions and time.monotonic() < deadline:
        consumer.poll(0.2)
    return sorted(assigned)


def test_a_partition_the_consumer_stopped_fetching_is_fetched_again_from_its_position(
    topics: KafkaSettings,
) -> None:
    topic = topics.topic(t.DOCUMENTS)  # two partitions at the tests' scale
    consumer = Consumer(topics.librdkafka(**{
        "group.id": topics.topic(f"fetch-watch-{uuid.uuid4().hex[:8]}"),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "partition.assignment.strategy": "cooperative-sticky",
    }))  # fmt: skip
    metrics = Metrics()
    watch = FetchWatch(consumer, metrics, "test", stall_after_s=STALL_S, interval_s=0.2)
    try:
        assert _subscribe(consumer, watch, topic, 2) == [0, 1]
        # The stall: librdkafka stops fetching partition 0, the loop not knowing. And the
        # loop holds partition 1 back itself (as for back-pressure): not the watch's to touch.
        consumer.pause([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        held = {(topic, 1)}
        producer = Producer(topics.librdkafka())
        for n in range(3):
            producer.produce(topic, key=f"doc-{n}", value=b"v", partition=0)
        producer.produce(topic, key=b"held", value=b"v", partition=1)
        assert producer.flush(30) == 0
        produced = time.monotonic()

        got: list[tuple[int, int, float]] = []  # partition, offset, when
        sent: list[tuple[str, int]] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            for msg in consumer.consume(10, 0.1):
                if msg.error() is None:
                    watch.heard((topic, msg.partition() or 0))
                    got.append((msg.partition() or 0, msg.offset() or 0, time.monotonic()))
            sent += watch.check(held)
        assert sent == [(topic, 0)]
        assert [(p, o) for p, o, _ in got] == [(0, 0), (0, 1), (0, 2)]
        assert got[0][2] - produced >= STALL_S - 0.5  # not before the partition had stalled
        assert _stalls(metrics, topic) == 1

        # Caught up, and partition 1 still held back by the loop: nothing more is sent back,
        # nothing is read twice, and the held record stays unread.
        end = time.monotonic() + 2 * STALL_S + 1
        while time.monotonic() < end:
            for msg in consumer.consume(10, 0.1):
                if msg.error() is None:
                    got.append((msg.partition() or 0, msg.offset() or 0, time.monotonic()))
            sent += watch.check(held)
        assert sent == [(topic, 0)]
        assert len(got) == 3
        assert _stalls(metrics, topic) == 1
    finally:
        consumer.close()


class _StallingConsumer(Consumer):
    """A consumer that librdkafka stops fetching from as soon as it has partitions, behind
    its loop's back (the stall stood in for as above)."""

    stalled = False
    made: list[_StallingConsumer] = []  # noqa: RUF012 - every one made, for the tests to see

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _StallingConsumer.made.append(self)

    def _stall(self) -> None:
        if not self.stalled and self.assignment():
            self.pause(self.assignment())
            self.stalled = True

    def assign(self, partitions: list[TopicPartition]) -> None:
        """A loop that assigns its own partitions: stalled before it fetched anything."""
        super().assign(partitions)
        self._stall()

    def consume(self, *args: Any, **kwargs: Any) -> list[Any]:
        got = super().consume(*args, **kwargs)
        self._stall()
        return list(got)

    def poll(self, *args: Any, **kwargs: Any) -> Any:
        got = super().poll(*args, **kwargs)
        self._stall()
        return got


def _page_result() -> Any:
    from ocrstream.schemas.records import Line, PageResult, PageStatus, Point

    box = (Point(0, 0), Point(1, 0), Point(1, 1), Point(0, 1))
    return PageResult("doc", 1, 1, PageStatus.OK, lines=(Line("Total 12.50", 0.9, box),))


def test_the_shadow_comparer_fetches_a_stalled_partition_again_and_compares_its_pages(
    topics: KafkaSettings,
) -> None:
    from ocrstream.schemas.codec import Codec
    from ocrstream.settings import ShadowSettings
    from ocrstream.streams.shadow import ShadowComparer

    kafka = topics.model_copy(update={"fetch_stall_s": STALL_S})
    consumer = _StallingConsumer(kafka.librdkafka(**{
        "group.id": kafka.topic(f"shadow-{uuid.uuid4().hex[:8]}"),
        "auto.offset.reset": "earliest",
    }))  # fmt: skip
    metrics, codec = Metrics(), Codec(kafka)
    comparer = ShadowComparer(kafka, ShadowSettings(), codec, metrics, consumer=consumer)
    stop = threading.Event()
    thread = threading.Thread(target=comparer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: consumer.stalled, 60, "the comparer's partitions, stalled")
        producer = Producer(kafka.librdkafka())
        for topic in (comparer.primary_topic, comparer.shadow_topic):
            producer.produce(topic, key=b"doc", value=codec.encode(_page_result(), topic))
        assert producer.flush(30) == 0

        wait_until(lambda: comparer.compared, 60, "the page's two results, compared")
        assert comparer.compared == 1  # both halves were fetched again and paired
        stalls = [
            metrics.registry.get_sample_value(
                "ocrstream_consumer_fetch_stalls_total",
                {"agent": "shadow-comparer", "topic": topic},
            )
            for topic in (comparer.primary_topic, comparer.shadow_topic)
        ]
        assert stalls == [1.0, 1.0]
        assert metrics.registry.get_sample_value("ocrstream_shadow_cer_sum") == 0.0
    finally:
        stop.set()
        thread.join(30)


def test_the_page_cache_follower_fetches_a_stalled_partition_again(
    topics: KafkaSettings,
) -> None:
    from ocrstream.schemas.codec import Codec
    from ocrstream.streams.page_cache import PageCache

    kafka = topics.model_copy(update={"fetch_stall_s": STALL_S})
    topic = kafka.topic(t.PAGE_CACHE)
    consumer = _StallingConsumer(kafka.librdkafka(**{
        "group.id": kafka.topic(f"page-cache-{uuid.uuid4().hex[:8]}"),
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    }))  # fmt: skip
    metrics, codec = Metrics(), Codec(kafka)
    cache = PageCache(kafka=kafka, codec=codec, topic=topic, fingerprint=lambda mode: mode,
                      max_bytes=1 << 20, send=lambda *_: None, consumer=consumer,
                      metrics=metrics)  # fmt: skip
    cache.start()
    try:
        wait_until(lambda: consumer.stalled, 60, "the follower's partitions, stalled")
        producer = Producer(kafka.librdkafka())
        producer.produce(topic, key=b"page-key", value=codec.encode(_page_result(), topic))
        assert producer.flush(30) == 0

        # another worker's result, in this one's memory
        found = wait_until(lambda: cache.get("page-key"), 60, "the cached result, loaded")
        assert [line.text for line in found.lines] == ["Total 12.50"]
        stalls = metrics.registry.get_sample_value(
            "ocrstream_consumer_fetch_stalls_total", {"agent": "page-cache", "topic": topic}
        )
        assert stalls == 1.0
    finally:
        cache.stop()


def _in_time(work: Any, timeout_s: float = 90.0) -> Any:
    """``work()``'s result, run in a thread: a loop that hangs fails the test, not the run."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(work()), daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert out, f"still waiting after {timeout_s:.0f}s: the stalled partition was not fetched"
    return out[0]


def _offsets_readable(kafka: KafkaSettings, names: list[str]) -> bool:
    from confluent_kafka import KafkaException

    consumer = Consumer(kafka.librdkafka(**{"group.id": kafka.topic("leaders")}))
    try:
        for name in names:
            topic = kafka.topic(name)
            for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
        return True
    except KafkaException:
        return False
    finally:
        consumer.close()


def _terminal(kafka: KafkaSettings, doc_id: str) -> None:
    from ocrstream.schemas.codec import Codec
    from ocrstream.schemas.records import DocumentEvent, DocumentStatus

    topic = kafka.topic(t.DOCUMENTS)
    event = DocumentEvent(doc_id=doc_id, status=DocumentStatus.COMPLETED, page_count=1,
                          pages_ok=1, pages_failed=0)  # fmt: skip
    producer = Producer(kafka.librdkafka())
    producer.produce(topic, key=doc_id.encode(), value=Codec(kafka).encode(event, topic))
    assert producer.flush(30) == 0


def test_reading_the_dead_letters_to_their_end_survives_a_stalled_partition(
    topics: KafkaSettings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``ocrstream dlq list`` and ``redrive`` read the DLQ to its end; a stalled partition held
    them forever before."""
    import confluent_kafka

    from ocrstream.streams.redrive import read_to_end

    kafka = topics.model_copy(update={"fetch_stall_s": STALL_S})
    topic = kafka.topic(t.DLQ)
    producer = Producer(kafka.librdkafka())
    for n in range(3):
        producer.produce(topic, key=f"letter-{n}", value=b"v", partition=0)
    assert producer.flush(30) == 0
    monkeypatch.setattr(confluent_kafka, "Consumer", _StallingConsumer)
    _StallingConsumer.made.clear()

    read = _in_time(lambda: [msg.key() for msg in read_to_end(kafka, topic)])

    assert read == [b"letter-0", b"letter-1", b"letter-2"]
    assert _StallingConsumer.made[0].stalled
    assert "dlq-reader: nothing from" in caplog.text  # a command logs the stall it undid


def test_waiting_for_documents_survives_a_stalled_partition(
    topics: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's ``wait_many`` (``ocrstream run``, ``submit --wait``; reprocess waits through
    the same loop)."""
    from ocrstream import client as client_module
    from ocrstream.settings import S3Settings

    kafka = topics.model_copy(update={"fetch_stall_s": STALL_S})
    _terminal(kafka, "doc-stalled-wait")
    monkeypatch.setattr(client_module, "Consumer", _StallingConsumer)
    _StallingConsumer.made.clear()
    client = client_module.OcrClient(kafka, S3Settings())

    found = _in_time(lambda: client.wait_many(["doc-stalled-wait"], timeout_s=60))

    assert found["doc-stalled-wait"].pages_ok == 1
    assert _StallingConsumer.made[0].stalled


def test_a_documents_event_stream_survives_a_stalled_partition(
    topics: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HTTP API's per-document event stream, which starts from offsets found for the
    submission's time."""
    from datetime import UTC, datetime, timedelta

    from ocrstream.api import events
    from ocrstream.schemas.codec import Codec

    kafka = topics.model_copy(update={"fetch_stall_s": STALL_S})
    since = datetime.now(UTC) - timedelta(seconds=5)
    _terminal(kafka, "doc-stalled-stream")
    # the stream looks up offsets on every partition of three new topics: wait for their
    # leaders (a stream opened before then ends in "kafka_unavailable", as it should)
    wait_until(lambda: _offsets_readable(kafka, [t.DOCUMENTS, t.PAGE_RESULTS, t.PROGRESS]), 60,
               "the topics' leaders")  # fmt: skip
    monkeypatch.setattr(events, "Consumer", _StallingConsumer)
    _StallingConsumer.made.clear()
    metrics = Metrics()

    body = _in_time(lambda: b"".join(events.stream(
        kafka, Codec(kafka), "doc-stalled-stream", since, None,
        lambda ev: {"status": ev.status.value}, 60.0, metrics=metrics,
    )))  # fmt: skip

    assert b"event: terminal" in body
    assert b'"status": "completed"' in body
    assert _StallingConsumer.made[0].stalled
    stalls = metrics.registry.get_sample_value(
        "ocrstream_consumer_fetch_stalls_total",
        {"agent": "api-events", "topic": kafka.topic(t.DOCUMENTS)},
    )
    assert stalls == 1.0


def test_a_loop_on_many_quiet_partitions_is_not_held_by_its_watch(
    kafka_settings: KafkaSettings,
) -> None:
    """An OCR worker subscribes to ``ocr.pages.v1``'s 64 partitions. Idle, they all go quiet,
    and the watch asks where their logs end: every question waits behind the consumer's own
    fetch on its connection (``fetch.wait.max.ms``, 500 ms), and asked one partition at a time
    they held the worker's loop for 32 s a check, so a page sent to an idle worker took two
    minutes and a SIGTERM waited a check out (session 41). Asked at once, a check is one wait."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = kafka_settings.topic(f"quiet-{uuid.uuid4().hex[:8]}")
    admin = AdminClient(kafka_settings.librdkafka())
    admin.create_topics([NewTopic(topic, 64, 1)])[topic].result(30)
    consumer = Consumer(kafka_settings.librdkafka(**{
        "group.id": topic,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }))  # fmt: skip
    watch = FetchWatch(consumer, None, "test", stall_after_s=1.0, interval_s=0.2)
    try:
        assert _subscribe(consumer, watch, topic, 64) == list(range(64))
        # Quiet for a while, the loop turning as a worker's does: poll, then check.
        turns: list[float] = []
        quiet_until = time.monotonic() + 6
        while time.monotonic() < quiet_until:
            start = time.monotonic()
            consumer.poll(0.1)
            watch.check()
            turns.append(time.monotonic() - start)
        # 64 questions one at a time held a turn 30 s; at once, one fetch's wait (0.5 s)
        assert max(turns) < 5, f"a turn of the loop was held {max(turns):.1f} s"
        producer = Producer(kafka_settings.librdkafka())
        producer.produce(topic, key=b"page", value=b"v", partition=37)
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 20
        got = None
        while got is None and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            watch.check()
            if msg is not None and msg.error() is None:
                got = msg
        assert got is not None
        assert got.partition() == 37
    finally:
        consumer.close()
        admin.delete_topics([topic])[topic].result(30)
