"""The OCR worker holds a bounded amount of work: decoded pixels within its budget (one page
always passes, whatever its size), and, while the store is down, one page at a time probing it
instead of every waiting page retrying. Found by the reliability tests on the real stack
(tests/integration/test_faults.py, test_hostile.py); pinned here without a broker."""

from __future__ import annotations

import time
from typing import Any

from ocrstream.storage import StoreUnavailableError
from ocrstream.streams.worker import OcrWorker
from tests.fakes.engines import SizeEngine
from tests.fakes.kafka import PAGES, FakeConsumer, FakeProducer
from tests.fakes.stepped_worker import CODEC, make_worker, png, results, step_until, task


class HeldPixels(SizeEngine):
    """Records the worker's held pixels (decoded and waiting for or in the engine) per batch."""

    def __init__(self) -> None:
        super().__init__()
        self.worker: OcrWorker | None = None
        self.held: list[int] = []

    def recognize(self, images: Any) -> Any:
        assert self.worker is not None
        self.held.append(self.worker._window.held_pixels)
        time.sleep(0.01)
        return super().recognize(images)


def test_worker_decodes_only_within_its_pixel_budget() -> None:
    """Sixty pages of 100x8 pixels with room for 300 pixels: at most three are decoded at a
    time, the rest wait undecoded, each partition paused once it has its share of the queue
    ((64 in flight - 2 batches of 8) / 2 partitions = 24), and all are recognised."""
    consumer, producer = FakeConsumer(partitions=2), FakeProducer()
    for page in range(1, 61):
        consumer.push(page % 2, b"d", CODEC.encode(task("d", page, width=100, count=60)))
    engine = HeldPixels()
    worker = make_worker(consumer, producer, engine=engine, max_batch=8, max_wait_ms=0,
                         max_inflight_pixels=300 * 8)  # fmt: skip
    engine.worker = worker
    consumer.subscribe([PAGES], worker._on_assign, worker._on_revoke, worker._on_lost)
    waited = paused = False

    def done() -> bool:
        nonlocal waited, paused
        assert worker._window.held_pixels <= 300 * 8
        waited = waited or bool(worker._intake)
        paused = paused or consumer.paused == {0, 1}
        return len(results(producer)) == 60

    assert step_until(worker, done)
    assert waited
    assert paused
    assert max(engine.held) <= 300 * 8
    assert sorted(r.page_no for r in results(producer)) == list(range(1, 61))
    assert worker._window.held_pixels == 0
    worker.shutdown()


def test_worker_lets_one_page_through_whatever_its_size() -> None:
    consumer, producer = FakeConsumer(partitions=1), FakeProducer()
    consumer.push(0, b"d", CODEC.encode(task("d", 1, width=500, count=1)))
    worker = make_worker(consumer, producer, max_inflight_pixels=10)
    consumer.subscribe([PAGES], worker._on_assign, worker._on_revoke, worker._on_lost)
    assert step_until(worker, lambda: len(results(producer)) == 1)
    worker.shutdown()


class DownStore:
    """A store that refuses every fetch while ``down``; ``calls`` holds when each came."""

    def __init__(self) -> None:
        self.down = True
        self.calls: list[float] = []

    def fetch(self, uri: str) -> bytes:
        self.calls.append(time.monotonic())
        if self.down:
            raise StoreUnavailableError("connection refused")
        return png(int(uri.rsplit("/", 1)[1]))


def claim_checked(partitions: int, pages: int) -> FakeConsumer:
    """A consumer of ``pages`` pages of one document, each image in the store, the pages
    dealt over ``partitions`` partitions in turn."""
    consumer = FakeConsumer(partitions=partitions)
    for page in range(1, pages + 1):
        consumer.push(page % partitions, b"d",
                      CODEC.encode(task("d", page, 20 + page, uri=f"s3://b/{20 + page}",
                                        count=pages)))  # fmt: skip
    return consumer


def test_worker_probes_a_down_store_with_one_page() -> None:
    """Ten claim-checked pages and a store that is down for a second: after the first wave of
    failures one page at a time probes it (backoff 50 ms doubling to 200 ms), not all ten; the
    partitions stay paused; once it answers every page is recognised."""
    store = DownStore()
    consumer, producer = claim_checked(partitions=2, pages=10), FakeProducer()
    worker = make_worker(consumer, producer, fetch=store.fetch, store_backoff_s=0.05,
                         store_backoff_max_s=0.2)  # fmt: skip
    consumer.subscribe([PAGES], worker._on_assign, worker._on_revoke, worker._on_lost)
    step_until(worker, lambda: False, timeout=1.0)
    assert consumer.paused == {0, 1}
    # the first wave (the pages picked for the two decode threads), then ~7 probes; not ten
    # pages retrying
    assert 2 <= len(store.calls) <= 2 + 12, len(store.calls)
    store.down = False
    assert step_until(worker, lambda: len(results(producer)) == 10)
    assert sorted(r.page_no for r in results(producer)) == list(range(1, 11))
    assert all(r.status.value == "ok" for r in results(producer))
    worker.shutdown()


def test_a_store_outage_with_more_pages_waiting_than_the_window_ends() -> None:
    """The window lets a partition with nothing queued fetch one page even at the in-flight
    limit, so during an outage more pages can wait for the store than the window holds (here
    eight partitions, a window of four). The page that probes the store must still start:
    when the store answers, every page is recognised."""
    store = DownStore()
    consumer, producer = claim_checked(partitions=8, pages=24), FakeProducer()
    worker = make_worker(consumer, producer, fetch=store.fetch, store_backoff_s=0.05,
                         store_backoff_max_s=0.1, max_inflight_pages=4, max_batch=2)  # fmt: skip
    consumer.subscribe([PAGES], worker._on_assign, worker._on_revoke, worker._on_lost)
    step_until(worker, lambda: False, timeout=1.0)
    inflight = worker._tracker.inflight()
    assert inflight > 4, f"{inflight} pages in flight: the outage never outgrew the window"
    store.down = False
    assert step_until(worker, lambda: len(results(producer)) == 24, timeout=10.0)
    assert sorted(r.page_no for r in results(producer)) == list(range(1, 25))
    worker.shutdown()
