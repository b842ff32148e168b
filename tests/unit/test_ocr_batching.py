"""The one micro-batcher: pages in as they arrive, results out as batches finish; failures
isolated (BatchingEngine, and its parts MicroBatcher and recognize_batch)."""

from __future__ import annotations

import queue
import threading
import time

import numpy as np
import pytest

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.batching import BatchingEngine, MicroBatcher, recognize_batch
from tests.fakes.engines import (
    CrashingEngine,
    FakeEngine,
    FatalEngine,
    OomEngine,
    SlowEngine,
)
from tests.polling import wait_until


def page(w: int, h: int = 10) -> np.ndarray:
    return np.full((h, w, 3), 255, np.uint8)


def collect(batcher: BatchingEngine, n: int, timeout: float = 5.0) -> dict:
    """The first ``n`` results, by key (``batcher.poll`` blocks up to 0.2 s for each)."""
    out: dict = {}

    def got_n() -> bool:
        out.update(batcher.poll(timeout=0.2))
        return len(out) >= n

    wait_until(got_n, timeout, f"{n} results from the batcher", interval_s=0)
    return out


def test_full_batches_go_at_once_and_results_match_keys():
    engine = FakeEngine()
    with BatchingEngine(engine, max_batch=4, max_wait_s=10.0) as batcher:
        for i in range(8):
            batcher.submit(("doc", i), page(20 + i))
        results = collect(batcher, 8)
    assert engine.batches == [4, 4]
    assert {k: r.text for k, r in results.items()} == {
        ("doc", i): f"page {20 + i}x10" for i in range(8)
    }


def test_a_partial_batch_goes_after_max_wait():
    engine = FakeEngine()
    with BatchingEngine(engine, max_batch=16, max_wait_s=0.05) as batcher:
        start = time.monotonic()
        batcher.submit("a", page(5))
        batcher.submit("b", page(6))
        results = collect(batcher, 2)
        assert time.monotonic() - start < 2.0
    assert sorted(results) == ["a", "b"]
    assert engine.batches == [2]


def test_inflight_is_bounded_until_results_are_polled():
    engine = SlowEngine(per_batch_s=0.05)
    batcher: BatchingEngine = BatchingEngine(engine, max_batch=2, max_wait_s=0.01, max_inflight=4)
    try:
        for i in range(4):
            assert batcher.submit(i, page(10 + i))
        assert batcher.submit(99, page(5), timeout=0.3) is False  # full until someone polls
        assert batcher.inflight == 4
        got = collect(batcher, 4)
        assert sorted(got) == [0, 1, 2, 3]
        assert batcher.submit(4, page(14), timeout=1.0)
        assert list(collect(batcher, 1)) == [4]
        assert batcher.inflight == 0
    finally:
        batcher.close()


def test_a_page_that_crashes_the_engine_fails_alone():
    engine = CrashingEngine(crash_on=lambda img: img.shape[1] == 13)
    with BatchingEngine(engine, max_batch=4, max_wait_s=0.01) as batcher:
        for w in (11, 12, 13, 14):
            batcher.submit(w, page(w))
        results = collect(batcher, 4)
    assert results[13].status == "failed"
    assert results[13].error_code == "engine_error"
    assert all(results[w].status == "ok" for w in (11, 12, 14))


def test_out_of_memory_splits_the_batch():
    engine = OomEngine(max_batch=2)
    with BatchingEngine(engine, max_batch=8, max_wait_s=10.0) as batcher:
        for i in range(8):
            batcher.submit(i, page(10 + i))
        results = collect(batcher, 8)
    assert all(r.status == "ok" for r in results.values())
    assert len(results) == 8
    assert engine.batches == [8, 4, 2, 2, 4, 2, 2]  # halves until they fit


def test_fatal_error_reaches_the_caller():
    engine = FatalEngine(ok_calls=0)
    batcher: BatchingEngine = BatchingEngine(engine, max_batch=1, max_wait_s=0.0)
    batcher.submit(1, page(3))
    with pytest.raises(FatalError, match="device lost"):
        collect(batcher, 1)
    with pytest.raises(FatalError):
        batcher.submit(2, page(3))
    batcher.close(timeout=2.0)


def test_stream_over_an_iterable_and_a_queue():
    engine = FakeEngine()
    from ocrstream.processors.ocr.batching import BatchingEngine as BE

    with BE(engine, max_batch=3, max_wait_s=0.01) as batcher:
        got = dict(batcher.run((i, page(30 + i)) for i in range(10)))
    assert {k: r.text for k, r in got.items()} == {i: f"page {30 + i}x10" for i in range(10)}

    q: queue.Queue = queue.Queue()

    def produce() -> None:
        for i in range(5):
            time.sleep(0.01)  # pacing on purpose: pages trickle in while batches run
            q.put((f"k{i}", page(40 + i)))
        q.put(None)

    threading.Thread(target=produce).start()
    with BE(engine, max_batch=2, max_wait_s=0.02) as batcher:
        got = dict(batcher.run(q))
    assert sorted(got) == [f"k{i}" for i in range(5)]


def test_stream_through_the_real_engine(ocr_engine):
    pages = [("blank", np.full((300, 300, 3), 255, np.uint8)), ("junk", b"junk")]
    with BatchingEngine(ocr_engine, max_batch=4, max_wait_s=0.01) as batcher:
        got = dict(batcher.run(pages))
    assert got["blank"].status == "empty"
    assert got["junk"].status == "failed"


# --- the parts alone --------------------------------------------------------------------------


def test_micro_batcher_takes_the_oldest_first_at_most_a_full_batch():
    b: MicroBatcher[str] = MicroBatcher(max_batch=2, max_wait_s=1.0)
    assert not b.due(100.0)
    assert b.deadline() is None
    for i, item in enumerate("abcde"):
        b.add(item, now=float(i))
    assert b.deadline() == 1.0
    assert b.take() == ["a", "b"]
    assert b.deadline() == 3.0  # the oldest left is "c", added at 2
    assert b.drain() == ["c", "d", "e"]
    assert len(b) == 0
    with pytest.raises(ValueError, match="max_batch"):
        MicroBatcher(max_batch=0, max_wait_s=0.0)


def test_recognize_batch_retries_then_fails_only_the_page_that_breaks_the_engine():
    engine = CrashingEngine(crash_on=lambda img: img.shape[1] == 13)
    got = recognize_batch(engine, [page(w) for w in (11, 12, 13, 14)], retries=1)
    assert [r.status for r in got] == ["ok", "ok", "failed", "ok"]
    assert [r.text for r in got if r.status == "ok"] == ["page 11x10", "page 12x10", "page 14x10"]
    assert got[2].error_code == "engine_error"
    assert "engine exploded" in (got[2].error_message or "")
    # each failing batch is tried twice (one retry) before it is split
    assert engine.batches == [4, 4, 2, 2, 2, 1, 1, 1]


def test_recognize_batch_without_retries_splits_at_once_and_passes_fatal_errors():
    engine = CrashingEngine(crash_on=lambda img: img.shape[1] == 12)
    got = recognize_batch(engine, [page(11), page(12)], retries=0)
    assert [r.status for r in got] == ["ok", "failed"]
    assert engine.batches == [2, 1, 1]
    assert recognize_batch(engine, []) == []
    with pytest.raises(FatalError):
        recognize_batch(FatalEngine(ok_calls=0), [page(3)])


def test_a_wrong_number_of_results_fails_the_pages_not_the_caller():
    class Short(FakeEngine):
        def recognize(self, images):
            return super().recognize(images)[:-1]

    got = recognize_batch(Short(), [page(5)], retries=0)
    assert got[0].status == "failed"
    assert got[0].error_code == "engine_error"
    assert got[0].error_message == "0 results for 1 pages"


def test_flush_runs_a_partial_batch_now_and_reports_each_batch():
    seen: list[int] = []
    engine = FakeEngine()
    batcher: BatchingEngine = BatchingEngine(
        engine,
        max_batch=16,
        max_wait_s=60.0,
        max_inflight=None,
        on_batch=lambda pages, seconds: seen.append(pages),
    )
    try:
        for i in range(3):
            batcher.submit(i, page(10 + i))
        assert batcher.waiting == 3
        assert batcher.poll(timeout=0.2) == []  # a minute from due
        batcher.flush()
        assert sorted(collect(batcher, 3)) == [0, 1, 2]
        assert engine.batches == [3]
        assert seen == [3]
        assert batcher.waiting == 0
        assert batcher.inflight == 0
    finally:
        batcher.close()


def test_close_with_cancel_drops_the_pages_no_batch_took():
    engine = FakeEngine()
    batcher: BatchingEngine = BatchingEngine(engine, max_batch=16, max_wait_s=60.0)
    for i in range(3):
        batcher.submit(i, page(10 + i))
    batcher.close(timeout=5.0, cancel=True)
    assert engine.batches == []
    assert batcher.inflight == 0
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit(9, page(9))
