"""Unit tests of fixes the reliability tests on the real stack led to (tests/integration/
test_faults.py and test_hostile.py): each pins one behaviour without a broker."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from ocrstream.logs import ContextFilter, JsonFormatter, TextFormatter, log_context
from ocrstream.streams.worker import OcrWorker
from tests.unit.test_worker import (
    CODEC,
    PAGES,
    FakeConsumer,
    FakeProducer,
    SizeEngine,
    make_worker,
    results,
    step_until,
    task,
)

# --- the OCR worker holds a bounded number of decoded pixels ------------------------------------


class HeldPixels(SizeEngine):
    """Records the worker's held pixels (decoded and waiting for or in the engine) per batch."""

    def __init__(self) -> None:
        super().__init__()
        self.worker: OcrWorker | None = None
        self.held: list[int] = []

    def recognize(self, images: Any) -> Any:
        assert self.worker is not None
        self.held.append(self.worker._held_pixels)
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
        assert worker._held_pixels <= 300 * 8
        waited = waited or bool(worker._intake)
        paused = paused or consumer.paused == {0, 1}
        return len(results(producer)) == 60

    assert step_until(worker, done)
    assert waited
    assert paused
    assert max(engine.held) <= 300 * 8
    assert sorted(r.page_no for r in results(producer)) == list(range(1, 61))
    assert worker._held_pixels == 0
    worker.shutdown()


def test_worker_lets_one_page_through_whatever_its_size() -> None:
    consumer, producer = FakeConsumer(partitions=1), FakeProducer()
    consumer.push(0, b"d", CODEC.encode(task("d", 1, width=500, count=1)))
    worker = make_worker(consumer, producer, max_inflight_pixels=10)
    consumer.subscribe([PAGES], worker._on_assign, worker._on_revoke, worker._on_lost)
    assert step_until(worker, lambda: len(results(producer)) == 1)
    worker.shutdown()


# --- aiokafka: a failed metadata update is paced ---------------------------------------------


def test_failed_metadata_updates_wait_the_retry_backoff() -> None:
    """aiokafka's sender asks for metadata in a loop while a leader is unknown; with no broker
    answering each update failed at once, a busy loop. Paced: each failure takes the backoff."""
    from aiokafka.client import AIOKafkaClient

    from ocrstream.streams.app import pace_failed_metadata_updates

    pace_failed_metadata_updates()
    pace_failed_metadata_updates()  # idempotent: paced once, not twice

    async def five_failures() -> float:
        client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1", retry_backoff_ms=50)
        started = time.monotonic()
        for _ in range(5):
            assert await client._metadata_update(client.cluster, set()) is False
        return time.monotonic() - started

    took = asyncio.run(five_failures())
    assert 0.25 <= took < 1.0


# --- logs: what comes from outside can't forge log lines ----------------------------------------


def _record(msg: str, *args: object) -> logging.LogRecord:
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, msg, args, None)
    ContextFilter().filter(record)
    return record


@pytest.mark.parametrize("evil", ["a\nFAKE 00:00 INFO admin logged in", "esc\x1b[31mred", "cr\r"])
def test_text_logs_escape_control_characters_from_outside(evil: str) -> None:
    with log_context(doc_id=evil):
        line = TextFormatter("%(message)s %(ctx_text)s").format(_record("document %s failed", evil))
    assert "\n" not in line
    assert "\r" not in line
    assert "\x1b" not in line
    assert line.count(ascii(evil)[1:-1]) == 2  # escaped, in the message and in the context


def test_text_logs_keep_tracebacks_multiline() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = _record("failed")
        record.exc_info = sys.exc_info()
    text = TextFormatter("%(message)s").format(record)
    assert text.startswith("failed\nTraceback")


def test_json_logs_escape_control_characters() -> None:
    with log_context(doc_id="a\nb"):
        line = JsonFormatter().format(_record("x %s", "c\nd"))
    assert "\n" not in line


# --- dead letters fit the producers' message limit ---------------------------------------------


def test_a_dead_letter_leaves_out_what_would_not_fit() -> None:
    from ocrstream.schemas.errors import UnknownSchemaError
    from ocrstream.streams.dlq import dead_letter

    exc = UnknownSchemaError("not Avro")
    common = {"topic": "t", "partition": 3, "offset": 42, "stage": "s", "exc": exc}
    small = dead_letter(key=b"k", value=b"v" * 100, headers={"h": b"1"}, max_bytes=1 << 20,
                        **common)  # type: ignore[arg-type]  # fmt: skip
    assert (small.key, small.value, small.headers) == (b"k", b"v" * 100, {"h": b"1"})

    big = dead_letter(key=b"k", value=b"v" * (2 << 20), headers={"h": b"1"}, max_bytes=1 << 20,
                      **common)  # type: ignore[arg-type]  # fmt: skip
    assert big.value is None
    assert (big.key, big.headers) == (b"k", {"h": b"1"})
    assert f"value ({2 << 20} bytes)" in big.error_message
    assert "t[3]@42" in big.error_message
    assert len(CODEC.encode(big)) < 1 << 20

    huge_key = dead_letter(key=b"k" * (2 << 20), value=b"v", headers={}, max_bytes=1 << 20,
                           **common)  # type: ignore[arg-type]  # fmt: skip
    assert (huge_key.key, huge_key.value, huge_key.headers) == (None, None, {})


# --- the worker probes a store that is down with one page at a time ------------------------------


def test_worker_probes_a_down_store_with_one_page() -> None:
    """Ten claim-checked pages and a store that is down for a second: after the first wave of
    failures one page at a time probes it (backoff 50 ms doubling to 200 ms), not all ten; the
    partitions stay paused; once it answers every page is recognised."""
    from ocrstream.storage import StoreUnavailableError
    from tests.unit.test_worker import png

    calls, down = [], [True]

    def fetch(uri: str) -> bytes:
        calls.append(time.monotonic())
        if down[0]:
            raise StoreUnavailableError("connection refused")
        return png(int(uri.rsplit("/", 1)[1]))

    consumer, producer = FakeConsumer(partitions=2), FakeProducer()
    for page in range(1, 11):
        consumer.push(page % 2, b"d",
                      CODEC.encode(task("d", page, 20 + page, uri=f"s3://b/{20 + page}",
                                        count=10)))  # fmt: skip
    worker = make_worker(consumer, producer, fetch=fetch, store_backoff_s=0.05,
                         store_backoff_max_s=0.2)  # fmt: skip
    consumer.subscribe([PAGES], worker._on_assign, worker._on_revoke, worker._on_lost)
    step_until(worker, lambda: False, timeout=1.0)
    assert consumer.paused == {0, 1}
    # the first wave (the pages picked for the two decode threads), then ~7 probes; not ten
    # pages retrying
    assert 2 <= len(calls) <= 2 + 12, len(calls)
    down[0] = False
    assert step_until(worker, lambda: len(results(producer)) == 10)
    assert sorted(r.page_no for r in results(producer)) == list(range(1, 11))
    assert all(r.status.value == "ok" for r in results(producer))
    worker.shutdown()
