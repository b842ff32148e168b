"""Confidence routing without a broker: the rule, the worker pools on the fake Kafka clients
(tests/fakes/), and the assembler's state machine with provisional pages."""

from __future__ import annotations

import numpy as np
import pytest

from ocrstream.processors.assembly import (
    DeadlinePassed,
    DocumentState,
    KeepPage,
    Outcome,
    PageArrived,
    PublishTerminal,
    Rules,
    WriteOutputs,
    due,
    step,
)
from ocrstream.processors.page_quality import PageQuality
from ocrstream.processors.routing import RoutingRule
from ocrstream.schemas.records import PageResult, PageTask
from ocrstream.settings import WorkerPool, WorkerSettings
from ocrstream.streams.supervisor import default_agents
from ocrstream.streams.worker import consumer_config, pool_topics
from tests.fakes.engines import WEAK_WIDTH, ConfidenceEngine
from tests.fakes.kafka import FakeConsumer, FakeProducer
from tests.fakes.stepped_worker import CODEC, make_worker, run_until, step_until, task

ACCURATE = "ocr.pages.accurate.v1"
RESULTS = "ocr.page-results.v1"
SHADOW_RESULTS = "ocr.page-results.shadow.v1"
RULE = RoutingRule(low_confidence=0.9, max_low_fraction=0.25, min_mean_confidence=0.9)
EARLY = RoutingRule(low_confidence=0.9, max_low_fraction=0.25, min_mean_confidence=0.9,
                    max_noise=8.0)  # fmt: skip


def noisy_png(width: int, sigma: float = 25.0) -> bytes:
    """A grey page of 32 rows with Gaussian noise of ``sigma``: a poor scan for the early rule."""
    import cv2

    rng = np.random.default_rng(0)
    pixels = np.clip(180 + rng.normal(0, sigma, (32, width, 3)), 0, 255).astype(np.uint8)
    ok, buf = cv2.imencode(".png", pixels)
    assert ok
    return buf.tobytes()


def sent(producer: FakeProducer, topic: str) -> list[tuple[str, bytes]]:
    return [(k, v) for t, k, v in producer.delivered if t == topic]


# --- the rule -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("confidences", "weak"),
    [
        ([0.99, 0.98, 0.97, 0.95], False),  # a clean page
        ([0.99, 0.75, 0.99, 0.99], False),  # one low line of four: 25%, not over; mean 0.93
        ([0.99, 0.6, 0.7, 0.97], True),  # half the lines low
        ([0.91, 0.91, 0.6, 0.91, 0.91, 0.91], True),  # few low, but the mean is under 0.9
        ([], False),  # nothing read: another model finds text on a blank page no better
    ],
)
def test_the_rule_finds_weak_pages_by_low_lines_and_mean(
    confidences: list[float], weak: bool
) -> None:
    assert RULE.weak(confidences) is weak


def test_pages_with_fewer_lines_than_the_minimum_are_never_weak() -> None:
    rule = RoutingRule(min_lines=3)
    assert not rule.weak([0.1, 0.2])
    assert rule.weak([0.1, 0.2, 0.3])


@pytest.mark.parametrize(
    ("rule", "quality", "weak"),
    [
        (EARLY, PageQuality(noise=22.0, contrast=50.0), True),  # a degraded scan
        (EARLY, PageQuality(noise=0.5, contrast=180.0), False),  # a clean receipt
        (EARLY, PageQuality(noise=0.0, contrast=0.0), False),  # blank: contrast is off
        (RoutingRule(min_contrast=80.0), PageQuality(noise=0.0, contrast=60.0), True),
        (RoutingRule(min_contrast=80.0), PageQuality(noise=30.0, contrast=120.0), False),
        (RULE, PageQuality(noise=40.0, contrast=10.0), False),  # no early part: never
    ],
)
def test_the_early_rule_finds_poor_images_by_noise_and_contrast(
    rule: RoutingRule, quality: PageQuality, weak: bool
) -> None:
    assert rule.weak_image(quality) is weak


def test_the_early_rule_is_on_only_with_a_threshold() -> None:
    assert not RoutingRule().early
    assert EARLY.early
    assert RoutingRule(min_contrast=60.0).early


# --- the worker pools -------------------------------------------------------------------------


def test_a_weak_page_is_routed_with_a_provisional_result_and_a_clean_one_is_not() -> None:
    consumer, producer = FakeConsumer(partitions=1), FakeProducer()
    weak, clean = task("d", 1, width=WEAK_WIDTH, count=2), task("d", 2, width=20, count=2)
    for t in (weak, clean):
        consumer.push(0, b"d", CODEC.encode(t))
    worker = make_worker(consumer, producer, ConfidenceEngine())
    worker.routing = RULE
    run_until(worker, lambda: len(sent(producer, RESULTS)) == 2)

    routed = sent(producer, ACCURATE)
    assert [k for k, _ in routed] == ["d/1"]  # keyed like ocr.pages.v1
    assert CODEC.decode_as(routed[0][1], PageTask) == weak  # the task as it was consumed
    results = {r.page_no: r for r in (CODEC.decode_as(v, PageResult) for _, v in
                                      sent(producer, RESULTS))}  # fmt: skip
    assert results[1].provisional
    assert not results[2].provisional
    assert {r.pool for r in results.values()} == {"primary"}
    assert consumer.last_stored(0) == 2
    routing = worker.metrics.routing
    assert routing.labels("primary", "routed")._value.get() == 1
    assert routing.labels("primary", "kept")._value.get() == 1


def test_the_offset_of_a_routed_page_is_stored_only_when_both_outputs_are_delivered() -> None:
    consumer, producer = FakeConsumer(partitions=1), FakeProducer(auto=False)
    consumer.push(0, b"d", CODEC.encode(task("d", 1, width=WEAK_WIDTH, count=1)))
    worker = make_worker(consumer, producer, ConfidenceEngine())
    worker.routing = RULE
    consumer.subscribe([worker.topic], worker._on_assign, worker._on_revoke, worker._on_lost)
    assert step_until(worker, lambda: len(producer.queued) == 2)
    queued, producer.queued = producer.queued, []
    assert {q[0] for q in queued} == {ACCURATE, RESULTS}
    producer.queued = [q for q in queued if q[0] == RESULTS]
    producer.deliver()
    assert consumer.stored == []  # the result is out, the task for the accurate pool is not
    producer.queued = [q for q in queued if q[0] == ACCURATE]
    producer.deliver()
    assert consumer.stored == [(0, 1)]
    worker.shutdown()


def test_a_noisy_page_is_routed_unread_by_the_early_rule() -> None:
    consumer, producer = FakeConsumer(partitions=1), FakeProducer()
    noisy = task("d", 1, width=40, data=noisy_png(40), count=2)
    clean = task("d", 2, width=20, count=2)
    for t in (noisy, clean):
        consumer.push(0, b"d", CODEC.encode(t))
    engine = ConfidenceEngine()
    worker = make_worker(consumer, producer, engine, routing=EARLY)
    run_until(worker, lambda: len(sent(producer, RESULTS)) == 1 and sent(producer, ACCURATE))

    routed = sent(producer, ACCURATE)
    assert [k for k, _ in routed] == ["d/1"]
    assert CODEC.decode_as(routed[0][1], PageTask) == noisy
    # No result of its own (there is no reading to give): only the clean page's, final.
    [result] = [CODEC.decode_as(v, PageResult) for _, v in sent(producer, RESULTS)]
    assert (result.page_no, result.provisional) == (2, False)
    assert engine.widths == [20]  # the engine never saw the noisy page
    assert consumer.last_stored(0) == 2
    routing = worker.metrics.routing
    assert routing.labels("primary", "routed_early")._value.get() == 1
    assert routing.labels("primary", "kept")._value.get() == 1
    assert routing.labels("primary", "routed")._value.get() == 0


def test_without_the_early_part_a_noisy_page_is_read_first() -> None:
    consumer, producer = FakeConsumer(partitions=1), FakeProducer()
    consumer.push(0, b"d", CODEC.encode(task("d", 1, width=40, data=noisy_png(40), count=1)))
    worker = make_worker(consumer, producer, ConfidenceEngine(), routing=RULE)
    run_until(worker, lambda: len(sent(producer, RESULTS)) == 1)
    assert sent(producer, ACCURATE) == []  # read confidently by the engine: kept
    assert worker.metrics.routing.labels("primary", "routed_early")._value.get() == 0


def test_without_a_rule_nothing_is_routed() -> None:
    consumer, producer = FakeConsumer(partitions=1), FakeProducer()
    consumer.push(0, b"d", CODEC.encode(task("d", 1, width=WEAK_WIDTH, count=1)))
    worker = make_worker(consumer, producer, ConfidenceEngine())
    run_until(worker, lambda: len(sent(producer, RESULTS)) == 1)
    assert sent(producer, ACCURATE) == []
    assert not CODEC.decode_as(sent(producer, RESULTS)[0][1], PageResult).provisional


def test_the_accurate_pool_never_routes_and_its_results_are_final() -> None:
    consumer, producer = FakeConsumer(partitions=1), FakeProducer()
    consumer.push(0, b"d", CODEC.encode(task("d", 1, width=WEAK_WIDTH, count=1)))
    worker = make_worker(consumer, producer, ConfidenceEngine("small"), pool="accurate")
    assert worker.topic == ACCURATE
    assert worker.results_topic == RESULTS
    run_until(worker, lambda: len(sent(producer, RESULTS)) == 1)
    result = CODEC.decode_as(sent(producer, RESULTS)[0][1], PageResult)
    assert sent(producer, ACCURATE) == []
    assert result.engine is not None
    assert (result.pool, result.provisional, result.engine.model) == ("accurate", False, "small")


def test_the_worker_ignores_a_rule_outside_the_primary_pool() -> None:
    from ocrstream.schemas.codec import Codec
    from ocrstream.settings import KafkaSettings
    from ocrstream.streams.metrics import Metrics
    from ocrstream.streams.producer import RecordProducer
    from ocrstream.streams.worker import OcrWorker

    for pool in ("accurate", "shadow"):
        worker = OcrWorker(
            kafka=KafkaSettings(), settings=WorkerSettings(pool=pool, cache=False),
            engine=ConfidenceEngine(), codec=Codec(), fetch=lambda uri: b"", metrics=Metrics(),
            consumer=FakeConsumer(), producer=RecordProducer(KafkaSettings(), Codec(),
                                                             producer=FakeProducer()),
            routing=RULE,
        )  # fmt: skip
        assert worker.routing is None, pool
        worker.shutdown()


def test_a_shadow_worker_publishes_only_to_the_shadow_topic() -> None:
    consumer, producer = FakeConsumer(partitions=1), FakeProducer()
    consumer.push(0, b"d", CODEC.encode(task("d", 1, width=WEAK_WIDTH, count=1)))
    worker = make_worker(consumer, producer, ConfidenceEngine("candidate"), pool="shadow")
    run_until(worker, lambda: len(sent(producer, SHADOW_RESULTS)) == 1)
    assert {t for t, _, _ in producer.delivered} == {SHADOW_RESULTS}
    assert CODEC.decode_as(sent(producer, SHADOW_RESULTS)[0][1], PageResult).pool == "shadow"


def test_each_pool_has_its_topics_and_group() -> None:
    from ocrstream.settings import KafkaSettings

    assert pool_topics(WorkerPool.PRIMARY) == ("ocr.pages.v1", RESULTS)
    assert pool_topics(WorkerPool.ACCURATE) == (ACCURATE, RESULTS)
    assert pool_topics(WorkerPool.SHADOW) == ("ocr.pages.v1", SHADOW_RESULTS)
    kafka = KafkaSettings(topic_prefix="t.")
    groups = {p: consumer_config(kafka, WorkerSettings(pool=p))["group.id"] for p in WorkerPool}
    assert groups == {
        WorkerPool.PRIMARY: "t.ocrstream-ocr-worker",
        WorkerPool.ACCURATE: "t.ocrstream-ocr-worker-accurate",
        WorkerPool.SHADOW: "t.ocrstream-ocr-worker-shadow",
    }


def test_all_runs_the_pools_with_routing_on_and_the_comparer() -> None:
    specs = {s.name: s for s in default_agents(2, accurate=1, shadow=1)}
    assert specs["ocr-worker-0"].env == {"OCRSTREAM_ROUTING_ENABLED": "true"}
    assert specs["ocr-worker-accurate-0"].args == ("ocr-worker", "--pool", "accurate",
                                                   "--metrics-port", "9112")  # fmt: skip
    assert specs["ocr-worker-shadow-0"].args == ("ocr-worker", "--shadow", "--metrics-port",
                                                 "9113")  # fmt: skip
    assert specs["shadow-comparer"].args == ("shadow", "compare")
    plain = {s.name: s for s in default_agents(1)}
    assert set(plain) == {"splitter", "ocr-worker-0", "assembler", "lag-exporter"}
    assert plain["ocr-worker-0"].env == {}


# --- the assembler: provisional pages ----------------------------------------------------------

DOC = "doc-r"
RULES = Rules(max_pages=50, deadline_s=900.0, retry_after_s=10.0, provisional_wait_s=60.0)


def arrived(page_no: int, *, provisional: bool = False, failed: bool = False) -> PageArrived:
    return PageArrived(DOC, page_no, 2, failed=failed, provisional=provisional,
                       submitted_at_ms=1_000)  # fmt: skip


def test_a_provisional_page_holds_the_document_until_the_accurate_result_replaces_it() -> None:
    state, _, _ = step(None, arrived(1, provisional=True), now=1.0, rules=RULES)
    state, effects, _ = step(state, arrived(2), now=2.0, rules=RULES)
    assert state is not None
    assert state.provisional == (1,)
    assert not state.complete
    assert not any(isinstance(e, WriteOutputs) for e in effects)
    assert not due(state, 30.0, RULES)
    # The accurate result replaces the provisional one and finishes the document.
    state, effects, outcome = step(state, arrived(1), now=5.0, rules=RULES)
    assert outcome is Outcome.ACCEPTED
    assert effects[0] == KeepPage(DOC, 1)
    assert isinstance(effects[-2], WriteOutputs)
    assert effects[-2].complete
    assert isinstance(effects[-1], PublishTerminal)
    assert state is not None
    assert state.provisional == ()
    assert state.done == 2


def test_without_an_accurate_result_the_provisional_one_is_used_after_the_wait() -> None:
    state, _, _ = step(None, arrived(1, provisional=True), now=1.0, rules=RULES)
    state, _, _ = step(state, arrived(2), now=2.0, rules=RULES)
    assert state is not None
    assert not due(state, 2.0 + 59.0, RULES)
    assert due(state, 2.0 + 60.0, RULES)
    _, effects, outcome = step(state, DeadlinePassed(DOC), now=62.0, rules=RULES)
    assert outcome is Outcome.ACCEPTED
    assert [type(e) for e in effects] == [WriteOutputs, PublishTerminal]
    assert effects[0].pages == (1, 2)  # type: ignore[union-attr]


def test_a_provisional_result_after_the_accurate_one_changes_nothing() -> None:
    state, _, _ = step(None, arrived(1), now=1.0, rules=RULES)
    late = step(state, arrived(1, provisional=True), now=2.0, rules=RULES)
    assert late.outcome is Outcome.DUPLICATE
    assert late.state is state


def test_a_failed_accurate_result_keeps_the_provisional_one() -> None:
    state, _, _ = step(None, arrived(1, provisional=True), now=1.0, rules=RULES)
    t = step(state, arrived(1, failed=True), now=2.0, rules=RULES)
    assert t.outcome is Outcome.DUPLICATE
    assert t.state is not None
    assert t.state.failed == ()
    assert t.state.provisional == (1,)


def test_provisional_pages_survive_the_table() -> None:
    state, _, _ = step(None, arrived(2, provisional=True), now=1.0, rules=RULES)
    assert state is not None
    again = DocumentState.from_json(DOC, state.to_json())
    assert again == state
    assert "provisional" not in DocumentState(DOC, page_count=1, done=1, bitmap="1").to_json()
