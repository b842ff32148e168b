"""Whatever the store does while pages are in flight, the OCR worker ends every page once it
answers again: claim-checked and inline pages on any number of partitions, any in-flight
window, batch size and pixel budget, with or without weak pages routed to the accurate pool
(two outputs a page), deliveries acknowledged late, out of order or failed (sent again),
fetches that fail in any pattern (one outage, flapping, every call for a while), with or
without a rebalance (revoked or lost) on the way. The real worker on the fake Kafka clients,
turned step by step. It found two ways the worker stuck for good (session 30); the first is
also pinned in test_worker_backpressure.py."""

from __future__ import annotations

import threading

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ocrstream.processors.routing import RoutingRule
from ocrstream.schemas.records import PageTask
from ocrstream.storage import StoreUnavailableError
from ocrstream.streams.topics import PAGES_ACCURATE
from tests.fakes.engines import ConfidenceEngine, SizeEngine
from tests.fakes.kafka import PAGES, FakeConsumer, FakeProducer
from tests.fakes.stepped_worker import CODEC, make_worker, png, results, step_until, task

# Routes a page whose lines are mostly under 0.9: here, every page of an odd width.
RULE = RoutingRule(low_confidence=0.9, max_low_fraction=0.25, min_mean_confidence=0.9)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    partitions=st.integers(1, 8),
    stored=st.lists(st.booleans(), min_size=1, max_size=24),  # per page: claim-checked?
    window=st.integers(1, 8),
    batch=st.integers(1, 4),
    budget=st.integers(1, 2_000),  # decoded pixels held at once (a page: 168-384)
    failures=st.lists(st.booleans(), max_size=60),  # per fetch call while it lasts: fails?
    reverse=st.booleans(),  # deliveries acknowledged out of order
    every=st.integers(1, 5),  # deliveries acknowledged every this many loop turns
    undelivered=st.lists(st.booleans(), max_size=30),  # per delivery attempt: fails?
    routing=st.booleans(),  # weak pages (odd widths) also sent to the accurate pool
    # a rebalance at this loop turn takes these partitions away and gives them back
    rebalance=st.none() | st.tuples(st.integers(1, 200), st.integers(0, 255), st.booleans()),
)
def test_every_page_ends_once_the_store_answers(
    partitions: int,
    stored: list[bool],
    window: int,
    batch: int,
    budget: int,
    failures: list[bool],
    reverse: bool,
    every: int,
    undelivered: list[bool],
    routing: bool,
    rebalance: tuple[int, int, bool] | None,
) -> None:
    calls = [0]
    lock = threading.Lock()

    def fetch(uri: str) -> bytes:
        with lock:  # the decode threads fetch side by side
            n, calls[0] = calls[0], calls[0] + 1
        if n < len(failures) and failures[n]:
            raise StoreUnavailableError("connection refused")
        return png(int(uri.rsplit("/", 1)[1]))

    consumer = FakeConsumer(partitions=partitions)
    producer = FakeProducer(auto=False, reverse=reverse,
                            fails=lambda n: n < len(undelivered) and undelivered[n])  # fmt: skip
    count = len(stored)
    for page, claim_checked in enumerate(stored, 1):
        width = 20 + page
        uri = f"s3://b/{width}" if claim_checked else None
        consumer.push(page % partitions, b"d",
                      CODEC.encode(task("d", page, width, uri=uri, count=count)))  # fmt: skip
    engine = ConfidenceEngine(weak=lambda w: w % 2 == 1) if routing else SizeEngine()
    worker = make_worker(consumer, producer, engine, fetch=fetch, routing=RULE if routing else None,
                         store_backoff_s=0.001,
                         store_backoff_max_s=0.004, max_inflight_pages=window,
                         max_batch=batch, max_inflight_pixels=budget)  # fmt: skip
    consumer.subscribe([PAGES], worker._on_assign, worker._on_revoke, worker._on_lost)
    try:
        turns = [0]

        def ended_all() -> bool:
            turns[0] += 1
            if turns[0] % every == 0:
                producer.deliver()
            if rebalance is not None and turns[0] == rebalance[0]:
                moved = [p for p in range(partitions) if rebalance[1] >> p & 1] or [0]
                consumer.rebalance(moved, lost=rebalance[2])
                event("lost" if rebalance[2] else "revoked")
            ended = {r.page_no for r in results(producer)} == set(range(1, count + 1))
            # and nothing left in flight (after a rebalance, a page fetched again may be)
            busy = (worker._tracker.unfinished(), len(worker._intake), len(worker._breaker),
                    len(worker._decoder), worker._engine.inflight, len(producer))  # fmt: skip
            return ended and not any(busy)

        ended = step_until(worker, ended_all, timeout=10.0)
        pages = sorted(r.page_no for r in results(producer))
        assert ended, f"stuck: {pages} of {count} pages ended, {calls[0]} fetches"
        if rebalance is None or turns[0] < rebalance[0]:
            assert pages == list(range(1, count + 1))  # each once
        # (after a rebalance, pages in flight on the partitions moved may end twice)
        assert all(r.status.value == "ok" for r in results(producer))
        routed = {CODEC.decode_as(v, PageTask).page_no for t, _, v in producer.delivered
                  if t == PAGES_ACCURATE}  # fmt: skip
        assert routed == ({p for p in range(1, count + 1) if (20 + p) % 2} if routing else set())
        worker.step()  # the loop resumes partitions at the start of its next turn
        assert consumer.paused == set()  # every partition fetches again
    finally:
        worker.shutdown()
