"""The OCR worker without a broker: a scripted consumer, a producer whose deliveries the test
controls, and a fake engine that reads back each page's size (tests/fakes/)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest
from confluent_kafka import TopicPartition

from ocrstream.errors import RetriableError
from ocrstream.processors.ocr.batching import MicroBatcher
from ocrstream.processors.ocr.types import PageOCR
from ocrstream.schemas.records import DeadLetter, PageImage, PageResult, PageStatus, PageTask
from ocrstream.streams.ocr_batch import PreparedPage, prepare_page
from ocrstream.streams.offsets import OffsetTracker
from tests.fakes.engines import SizeEngine
from tests.fakes.kafka import PAGES, FakeConsumer, FakeMessage, FakeProducer
from tests.fakes.stepped_worker import (
    CODEC,
    RESULTS,
    make_worker,
    png,
    results,
    run_until,
    step_until,
    task,
)

DLQ = "ocr.dlq.v1"


def test_offset_tracker_releases_only_the_done_prefix() -> None:
    t = OffsetTracker()
    for off in range(5):
        t.add("t", 0, off)
    assert t.done("t", 0, 2) is None
    assert t.done("t", 0, 1) is None
    # 1 and 2 are done but not committable: still in flight, no longer unfinished
    assert (t.inflight(), t.unfinished()) == (5, 3)
    assert t.done("t", 0, 0) == 3  # 0, 1, 2 done: commit up to 3
    assert t.done("t", 0, 4) is None
    assert t.done("t", 0, 3) == 5
    assert t.inflight() == t.unfinished() == 0
    assert t.done("t", 0, 3) is None  # a repeat is ignored


def test_micro_batcher_is_due_when_full_or_waited() -> None:
    b: MicroBatcher[int] = MicroBatcher(max_batch=3, max_wait_s=0.5)
    b.add(1, now=0.0)
    b.add(2, now=0.1)
    assert not b.due(0.2)
    assert b.due(0.5)
    b.add(3, now=0.3)
    assert b.due(0.0)
    assert b.take() == [1, 2, 3]
    assert b.deadline() is None


def test_pages_of_different_documents_share_a_batch() -> None:
    consumer, producer = FakeConsumer(partitions=2), FakeProducer()
    engine = SizeEngine()
    for d, doc in enumerate(("a", "b", "c")):
        for page in (1, 2):
            t = task(doc, page, width=10 * (d + 1) + page, count=2)
            consumer.push(page % 2, doc.encode(), CODEC.encode(t))
    worker = make_worker(consumer, producer, engine, max_batch=4, max_wait_ms=50)
    run_until(worker, lambda: len(results(producer)) == 6)

    out = results(producer)
    assert sorted((r.doc_id, r.page_no) for r in out) == [(doc, p) for doc in "abc" for p in (1, 2)]
    assert all(r.status is PageStatus.OK for r in out)
    # The text is what the engine read from that page's own image.
    assert {r.lines[0].text for r in out} == {
        f"{10 * (d + 1) + p}x8" for d in range(3) for p in (1, 2)
    }
    assert max(len(b) for b in engine.batches) > 2  # a batch mixed documents
    assert sum(len(b) for b in engine.batches) == 6
    # Results are keyed by doc_id, so a document's pages meet on one assembler partition.
    assert {k for t, k, _ in producer.delivered if t == RESULTS} == {"a", "b", "c"}
    assert consumer.last_stored(0) == 3
    assert consumer.last_stored(1) == 3
    assert consumer.commits >= 1
    assert consumer.closed


def test_offsets_are_stored_in_order_when_deliveries_complete_out_of_order() -> None:
    consumer, producer = FakeConsumer(partitions=1), FakeProducer(auto=False)
    for page in range(1, 7):
        consumer.push(0, b"d", CODEC.encode(task("d", page, width=10 + page, count=6)))
    worker = make_worker(consumer, producer, max_batch=6, max_wait_ms=0)
    consumer.subscribe([PAGES], worker._on_assign, worker._on_revoke, worker._on_lost)
    assert step_until(worker, lambda: len(producer.queued) == 6)
    assert consumer.stored == []  # nothing delivered: nothing stored
    # Deliver last-first, whatever order the engine returned them in: page 6 (offset 5) first,
    # page 1 (offset 0) last. Nothing may be stored while offset 0 is outstanding.
    producer.queued.sort(key=lambda q: -CODEC.decode_as(q[2], PageResult).page_no)
    queued, producer.queued = producer.queued, []
    for entry in queued[:-1]:
        producer.queued = [entry]
        producer.deliver()
        assert consumer.stored == []
    producer.queued = [queued[-1]]
    producer.deliver()
    # Offset 6 ("everything up to 5 done") is stored only once offset 0 was delivered.
    assert consumer.stored == [(0, 6)]
    worker.shutdown()


def test_a_page_that_fails_becomes_a_failed_result_and_the_others_succeed() -> None:
    consumer, producer = FakeConsumer(partitions=1), FakeProducer()
    consumer.push(0, b"d", CODEC.encode(task("d", 1, width=11)))
    consumer.push(0, b"d", CODEC.encode(task("d", 2, width=13)))  # the engine fails on it
    consumer.push(0, b"d", CODEC.encode(task("d", 3, width=12, data=b"not an image")))
    worker = make_worker(
        consumer, producer, SizeEngine(fail_width=13), max_batch=3, max_wait_ms=100
    )
    run_until(worker, lambda: len(results(producer)) == 3)

    by_page = {r.page_no: r for r in results(producer)}
    assert by_page[1].status is PageStatus.OK
    assert by_page[1].lines[0].text == "11x8"
    assert by_page[2].status is PageStatus.FAILED
    assert by_page[2].error is not None
    assert by_page[2].error.code == "engine_error"
    assert by_page[3].status is PageStatus.FAILED
    assert by_page[3].error is not None
    assert by_page[3].error.code == "undecodable_image"
    assert consumer.last_stored(0) == 3


def test_an_undecodable_record_goes_to_the_dlq_with_its_origin() -> None:
    consumer, producer = FakeConsumer(partitions=1), FakeProducer()
    consumer.push(0, b"k", b"\x00garbage")
    consumer.push(0, b"d", CODEC.encode(task("d", 1, width=11, count=1)))
    worker = make_worker(consumer, producer)
    run_until(worker, lambda: len(results(producer)) == 1)

    letters = [CODEC.decode_as(v, DeadLetter) for t, _, v in producer.delivered if t == DLQ]
    assert len(letters) == 1
    letter = letters[0]
    assert (letter.topic, letter.partition, letter.offset) == (PAGES, 0, 0)
    assert letter.key == b"k"
    assert letter.value == b"\x00garbage"
    assert letter.headers == {"trace": b"t1"}
    assert letter.stage == "ocr-worker"
    assert letter.error_code == "unknown_schema"
    assert consumer.last_stored(0) == 2


def test_store_down_pauses_the_partition_and_retries_until_it_answers() -> None:
    consumer, producer = FakeConsumer(partitions=2), FakeProducer()
    calls = {"n": 0}

    def fetch(uri: str) -> bytes:
        calls["n"] += 1
        if calls["n"] <= 3:
            raise RetriableError("store unavailable", code="store_unavailable")
        return png(21)

    consumer.push(0, b"d", CODEC.encode(task("d", 1, width=21, uri="s3://b/pages/d/00001.png")))
    consumer.push(1, b"e", CODEC.encode(task("e", 1, width=22)))
    worker = make_worker(consumer, producer, fetch=fetch)
    run_until(worker, lambda: len(results(producer)) == 2)

    assert calls["n"] == 4
    assert {0} in consumer.pause_calls  # only the blocked partition was paused
    assert consumer.paused == set()  # and resumed once the store answered
    assert {r.doc_id: r.status for r in results(producer)} == {
        "d": PageStatus.OK,
        "e": PageStatus.OK,
    }


def test_inflight_limit_pauses_every_partition() -> None:
    consumer, producer = FakeConsumer(partitions=2), FakeProducer(auto=False)
    for p in range(2):
        for page in range(1, 4):
            consumer.push(p, b"d", CODEC.encode(task(f"d{p}", page, width=10 + page)))
    worker = make_worker(consumer, producer, max_inflight_pages=2, max_batch=2)
    consumer.subscribe([PAGES], worker._on_assign, worker._on_revoke, worker._on_lost)
    assert step_until(worker, lambda: len(producer.queued) == 2 and consumer.paused == {0, 1})
    for _ in range(50):  # nothing is delivered: however long the loop turns, it holds
        worker.step()
    assert consumer.paused == {0, 1}
    assert len(producer.queued) == 2  # no more than the limit consumed
    producer.auto = True
    assert step_until(worker, lambda: len(results(producer)) == 6)
    worker.shutdown()


def test_revoke_drains_in_flight_pages_and_commits() -> None:
    consumer, producer = FakeConsumer(partitions=1), FakeProducer(auto=False)
    for page in (1, 2):
        consumer.push(0, b"d", CODEC.encode(task("d", page, width=10 + page, count=2)))
    worker = make_worker(consumer, producer, max_batch=16, max_wait_ms=10_000)
    consumer.subscribe([PAGES], worker._on_assign, worker._on_revoke, worker._on_lost)
    assert step_until(worker, lambda: worker._engine.waiting == 2)  # both decoded
    assert not producer.delivered  # waiting for a fuller batch
    consumer.on_revoke(consumer, [TopicPartition(PAGES, 0)])
    assert len(results(producer)) == 2
    assert consumer.stored[-1] == (0, 2)
    assert consumer.commits == 1
    worker.shutdown()


def test_text_layer_pages_pass_through_without_the_engine() -> None:
    from ocrstream.schemas.records import Line as RLine
    from ocrstream.schemas.records import Point

    t = PageTask(
        doc_id="d",
        page_no=1,
        page_count=1,
        image=PageImage("png"),
        width=100,
        height=50,
        text_layer=(RLine("hello", 1.0, (Point(0, 0),) * 4),),
    )
    consumer, producer = FakeConsumer(partitions=1), FakeProducer()
    consumer.push(0, b"d", CODEC.encode(t))
    engine = SizeEngine()
    worker = make_worker(
        consumer, producer, engine, fetch=lambda uri: pytest.fail("no fetch for a text-layer page")
    )
    run_until(worker, lambda: len(results(producer)) == 1)
    (r,) = results(producer)
    assert engine.batches == []
    assert r.status is PageStatus.OK
    assert r.lines[0].text == "hello"
    assert r.engine is not None
    assert r.engine.backend == "text-layer"
    assert consumer.last_stored(0) == 1


def test_pixel_limit_is_checked_before_decoding() -> None:
    t = task("d", 1, width=4000, data=png(4000, 4000))
    page = prepare_page(t, lambda uri: b"", max_pixels=1_000_000)
    assert isinstance(page, PreparedPage)
    assert page.image is None
    assert page.error is not None
    assert page.error.code == "page_too_large"


def test_the_loop_waits_instead_of_spinning_while_the_engine_is_busy() -> None:
    """A backlog (a due batch queued behind the running one) must not turn the consumer loop
    into a busy spin: on a small machine that thread takes the engine's CPU."""
    busy = threading.Event()

    class SlowEngine(SizeEngine):
        def recognize(self, images: Sequence[np.ndarray]) -> list[PageOCR]:
            busy.set()
            time.sleep(0.3)
            try:
                return super().recognize(images)
            finally:
                busy.clear()

    class RecordingConsumer(FakeConsumer):
        def __init__(self) -> None:
            super().__init__(partitions=1)
            self.busy_timeouts: list[float] = []

        def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
            out = super().consume(num_messages, timeout)
            if busy.is_set():
                self.busy_timeouts.append(timeout)
            if not out:
                time.sleep(timeout)  # as librdkafka waits for messages
            return out

    consumer, producer = RecordingConsumer(), FakeProducer()
    for page in range(1, 7):
        consumer.push(0, b"d", CODEC.encode(task("d", page, width=10 + page, count=6)))
    worker = make_worker(consumer, producer, SlowEngine(), max_batch=2, max_wait_ms=0)
    run_until(worker, lambda: len(results(producer)) == 6)

    assert len(results(producer)) == 6
    # Three batches of 0.3 s, the later ones due (full, waited) while the first runs.
    spins = [t for t in consumer.busy_timeouts if t < 0.001]
    assert consumer.busy_timeouts
    assert not spins, f"{len(spins)} zero-timeout polls"
    assert len(consumer.busy_timeouts) < 0.9 / 0.004


@pytest.mark.parametrize("late_priority", [0, 5])
def test_intake_takes_the_earliest_submission_first_whatever_its_partition(
    late_priority: int,
) -> None:
    """Partition 0 holds a document submitted later, partition 1 one submitted earlier, and
    the consumer hands out partition 0 first. The earlier document is recognised first —
    unless the later one has a higher priority."""
    from datetime import UTC, datetime, timedelta

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    consumer, producer = FakeConsumer(partitions=2), FakeProducer()
    for page in range(1, 7):
        late = task("late", page, width=20 + page, count=6)
        late = dataclasses.replace(late, submitted_at=t0 + timedelta(seconds=60),
                                   priority=late_priority)  # fmt: skip
        consumer.push(0, b"late", CODEC.encode(late))
    for page in range(1, 7):
        early = dataclasses.replace(task("early", page, width=10 + page, count=6), submitted_at=t0)
        consumer.push(1, b"early", CODEC.encode(early))
    engine = SizeEngine()
    worker = make_worker(consumer, producer, engine, max_batch=2, max_wait_ms=10_000)
    run_until(worker, lambda: len(results(producer)) == 12)

    order = [r.doc_id for r in results(producer)]
    first, second = ("late", "early") if late_priority else ("early", "late")
    assert order == [first] * 6 + [second] * 6
    # and within a document, page by page (a batch's two pages are decoded concurrently)
    assert [sorted(w for w, _ in batch) for batch in engine.batches[:3]] == (
        [[21, 22], [23, 24], [25, 26]] if late_priority else [[11, 12], [13, 14], [15, 16]]
    )


def test_the_splitter_carries_the_scans_priority_and_submission_time_to_each_page() -> None:
    from datetime import UTC, datetime

    from ocrstream.processors.split_types import SplitPage
    from ocrstream.schemas.records import ScanSource, ScanSubmitted
    from ocrstream.streams.splitter import page_task

    when = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    scan = ScanSubmitted("d", ScanSource(data=b"x"), "image/png", "0" * 64, 1, when, priority=7)
    page = SplitPage(2, 3, "png", png(10), 10, 8, 300.0)
    got = CODEC.decode_as(CODEC.encode(page_task(scan, page, PageImage("png", data=page.data),
                                                 None, "image/png")), PageTask)  # fmt: skip
    assert (got.priority, got.submitted_at, got.page_no) == (7, when, 2)


def test_a_partition_fetched_last_is_not_starved_at_the_inflight_limit() -> None:
    """Four partitions, room for four pages, and a consumer that always serves partition 0
    first: the oldest document, alone on partition 3, is still taken first."""
    from datetime import UTC, datetime, timedelta

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    consumer, producer = FakeConsumer(partitions=4), FakeProducer()
    for p in range(3):
        for page in range(1, 7):
            new = task(f"new{p}", page, width=20 + 10 * p + page, count=6)
            new = dataclasses.replace(new, submitted_at=t0 + timedelta(seconds=60))
            consumer.push(p, new.doc_id.encode(), CODEC.encode(new))
    for page in range(1, 7):
        old = dataclasses.replace(task("old", page, width=10 + page, count=6), submitted_at=t0)
        consumer.push(3, b"old", CODEC.encode(old))
    worker = make_worker(consumer, producer, max_batch=2, max_inflight_pages=4)
    run_until(worker, lambda: len(results(producer)) == 24)

    order = [r.doc_id for r in results(producer)]
    assert len(order) == 24
    last = {doc: max(i for i, d in enumerate(order) if d == doc) for doc in set(order)}
    # the document submitted first is complete before any of the others (served FIFO by
    # fetch order it came last); with one queued page per partition at this limit it shares
    # the engine with the others rather than running alone
    assert last["old"] < min(last[f"new{p}"] for p in range(3)), order
