"""BatchingEngine: pages in as they arrive, results out as batches finish; failures isolated."""

from __future__ import annotations

import queue
import threading
import time

import numpy as np
import pytest

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.batching import BatchingEngine
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


def test_engine_stream_method(ocr_engine):
    pages = [("blank", np.full((300, 300, 3), 255, np.uint8)), ("junk", b"junk")]
    got = dict(ocr_engine.stream(pages, max_batch=4, max_wait_s=0.01))
    assert got["blank"].status == "empty"
    assert got["junk"].status == "failed"
