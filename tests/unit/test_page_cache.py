"""The page-result cache without a broker: the content key, the memory bound, re-addressing,
and the worker answering a page it read before from the cache (its follower not started)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from ocrstream.processors.page_key import content_key, engine_fingerprint
from ocrstream.schemas.records import Engine, Line, PageResult, PageStatus, PageTask, Point
from ocrstream.settings import KafkaSettings
from ocrstream.streams.page_cache import ByteLRU, PageCache, fingerprint_of, readdress
from tests.fakes.engines import SizeEngine
from tests.fakes.kafka import FakeConsumer, FakeProducer
from tests.fakes.stepped_worker import CODEC, make_worker, png, results, step_until, task

CACHE_TOPIC = "ocr.page-cache.v1"
MODELS = {"det": "a" * 64, "rec": "b" * 64}
OPTIONS = {"precision": "fp16", "det_limit_side": 1600, "use_cls": False, "min_confidence": 0.5}


def test_same_image_and_engine_give_the_same_key() -> None:
    fp = engine_fingerprint("onnxruntime", MODELS, OPTIONS)
    assert fp == engine_fingerprint("onnxruntime", dict(reversed(MODELS.items())), dict(OPTIONS))
    assert content_key(png(40), fp, mode="text") == content_key(png(40), fp, mode="text")
    assert content_key(png(40), fp, mode="text") != content_key(png(41), fp, mode="text")


def test_any_engine_change_gives_another_key() -> None:
    base = engine_fingerprint("onnxruntime", MODELS, OPTIONS)
    changed = [
        engine_fingerprint("openvino", MODELS, OPTIONS),
        engine_fingerprint("onnxruntime", {**MODELS, "rec": "c" * 64}, OPTIONS),
        engine_fingerprint("onnxruntime", {**MODELS, "layout": "d" * 64}, OPTIONS),
    ] + [
        engine_fingerprint("onnxruntime", MODELS, {**OPTIONS, name: value})
        for name, value in [
            ("precision", "fp32"),
            ("det_limit_side", 960),
            ("use_cls", True),
            ("min_confidence", 0.6),
        ]
    ]
    assert len({base, *changed}) == 1 + len(changed)
    image = png(40)
    keys = {content_key(image, fp, mode="text") for fp in [base, *changed]}
    assert len(keys) == 1 + len(changed)
    assert content_key(image, base, mode="text") != content_key(image, base, mode="layout")
    assert content_key(image, base, mode="text") != content_key(
        image, base, mode="text", options={"lang": "de"}
    )


def test_an_engine_without_a_fingerprint_gets_a_stable_one_from_its_info() -> None:
    a, b = fingerprint_of(SizeEngine()), fingerprint_of(SizeEngine())
    assert a("text") == b("text") != a("layout")


def test_memory_keeps_the_most_recently_used_within_its_bound() -> None:
    lru = ByteLRU(max_bytes=100)
    lru.put("a", b"x" * 40)
    lru.put("b", b"y" * 40)
    assert lru.get("a") == b"x" * 40  # a is now the most recently used
    lru.put("c", b"z" * 40)
    assert lru.get("b") is None
    assert lru.get("a") is not None
    assert lru.get("c") is not None
    assert lru.size == 80 <= lru.max_bytes
    lru.put("huge", b"h" * 101)  # larger than the bound: not kept, nothing dropped for it
    assert lru.get("huge") is None
    assert len(lru) == 2


def test_a_cached_result_is_readdressed_to_the_page_that_asked() -> None:
    old = PageResult(
        doc_id="doc-a", page_no=3, page_count=5, status=PageStatus.OK, width=40, height=8,
        lines=(Line("hello", 0.9, (Point(0, 0), Point(1, 0), Point(1, 1), Point(0, 1))),),
        engine=Engine("onnxruntime", "m", "1"), tenant="t1", trace_id="tr-a", worker_id="w0",
    )  # fmt: skip
    new_task = PageTask(
        doc_id="doc-b", page_no=1, page_count=2, image=task("x", 1, 40).image, width=40, height=8,
        source_sha256="s" * 64, submitted_at=datetime(2026, 1, 2, tzinfo=UTC),
        trace_id="tr-b", tenant="t2", mode="text",
    )  # fmt: skip
    hit = readdress(old, new_task, worker_id="w9")
    assert (hit.doc_id, hit.page_no, hit.page_count) == ("doc-b", 1, 2)
    assert (hit.tenant, hit.trace_id, hit.worker_id, hit.source_sha256) == (
        "t2", "tr-b", "w9", "s" * 64,
    )  # fmt: skip
    assert hit.submitted_at == new_task.submitted_at
    assert hit.cached
    assert (hit.lines, hit.engine, hit.width, hit.status) == (
        old.lines, old.engine, 40, PageStatus.OK,
    )  # fmt: skip


def test_the_worker_answers_a_page_it_read_before_without_the_engine() -> None:
    consumer, producer, engine = FakeConsumer(), FakeProducer(), SizeEngine()
    worker = make_worker(consumer, producer, engine=engine, cache=True)
    worker.consumer.subscribe([worker.topic], worker._on_assign, worker._on_revoke,
                              worker._on_lost)  # fmt: skip
    first = [task("doc-a", n, 30 + n) for n in (1, 2, 3)]
    for t in first:
        consumer.push(0, t.doc_id.encode(), CODEC.encode(t))
    assert step_until(worker, lambda: len(results(producer)) == 3)
    batches = len(engine.batches)
    again = [task("doc-b", n, 30 + n) for n in (1, 2, 3)]
    for t in again:
        consumer.push(1, t.doc_id.encode(), CODEC.encode(t))
    assert step_until(worker, lambda: len(results(producer)) == 6)
    worker.shutdown()

    by_doc = {(r.doc_id, r.page_no): r for r in results(producer)}
    for n in (1, 2, 3):
        a, b = by_doc[("doc-a", n)], by_doc[("doc-b", n)]
        assert not a.cached
        assert b.cached
        assert [line.text for line in b.lines] == [line.text for line in a.lines]
    assert len(engine.batches) == batches  # the engine never saw doc-b
    cache_records = [k for t, k, _ in producer.delivered if t == CACHE_TOPIC]
    assert len(cache_records) == 3  # one per page read by the engine, none for the hits
    metric = worker.metrics.cache
    assert metric.labels("hit")._value.get() == 3
    assert metric.labels("miss")._value.get() == 3


def test_only_readable_results_within_the_message_limit_are_cached() -> None:
    sent: list[str] = []
    cache = PageCache(
        kafka=KafkaSettings(), codec=CODEC, topic=CACHE_TOPIC, fingerprint=lambda mode: mode,
        max_bytes=1 << 20, send=lambda topic, key, value: sent.append(key), max_value_bytes=400,
    )  # fmt: skip
    ok = PageResult(doc_id="d", page_no=1, page_count=1, status=PageStatus.OK, lines=(
        Line("x", 0.9, (Point(0, 0),)),))  # fmt: skip
    cache.put("ok", ok)
    cache.put("failed", dataclasses.replace(ok, status=PageStatus.FAILED))
    cache.put("big", dataclasses.replace(ok, lines=(Line("x" * 1000, 0.9, (Point(0, 0),)),)))
    assert sent == ["ok"]
    hit = cache.get("ok")
    assert hit is not None
    assert [line.text for line in hit.lines] == ["x"]
    assert cache.get("failed") is None
    assert cache.get("big") is None


def test_with_the_cache_off_every_page_is_read_by_the_engine() -> None:
    consumer, producer, engine = FakeConsumer(), FakeProducer(), SizeEngine()
    worker = make_worker(consumer, producer, engine=engine, cache=False)
    worker.consumer.subscribe([worker.topic], worker._on_assign, worker._on_revoke,
                              worker._on_lost)  # fmt: skip
    for n, doc in enumerate(("doc-a", "doc-b"), 1):
        t = task(doc, 1, 33)
        consumer.push(0, t.doc_id.encode(), CODEC.encode(t))
        assert step_until(worker, lambda n=n: len(results(producer)) == n)
    worker.shutdown()
    assert sum(len(b) for b in engine.batches) == 2
    assert not any(r.cached for r in results(producer))
    assert not [k for t, k, _ in producer.delivered if t == CACHE_TOPIC]
