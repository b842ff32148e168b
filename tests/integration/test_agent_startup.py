"""Records that arrive while the faust agents start: none may stay unprocessed.

A new user's ``ocrstream run a.pdf b.pdf c.pdf`` starts the agents and submits at once; a
deploy or a scale-out rebalances a loaded group. Records submitted in the first second of an
agent's life land on partitions the group never committed on, while the group forms, rebalances
and restores its tables. Each test submits one document per partition (so no later record on
the same partition could reveal a gap) and asserts that every doc_id ends in exactly one
terminal event within a bound far below the assembler's deadline.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiokafka.partitioner import DefaultPartitioner

from ocrstream.client import OcrClient
from ocrstream.settings import KafkaSettings, S3Settings
from ocrstream.storage import ObjectStore
from ocrstream.streams import topics as t
from tests.integration import harness
from tests.integration.harness import (
    LoadDoc,
    Pipeline,
    Witness,
    assert_complete,
    assert_exactly_once,
    fake_doc,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCAN_PARTITIONS = 12  # the design's ocr.scans.v1, not scaled down: many never-used partitions
DONE_WITHIN_S = 60.0  # the assembler's deadline is 30 minutes; a start-up is seconds
OUTPUTS = ("json", "txt")

murmur2 = DefaultPartitioner()  # aiokafka's (Java's) murmur2, as every ocrstream producer
Factory = Callable[..., tuple[Pipeline, Witness]]


@pytest.fixture
def full_topics(kafka_settings: KafkaSettings) -> Iterator[KafkaSettings]:
    """The design's topics with the scans topic at its real 12 partitions (the rest scaled
    down), under this test's prefix; deleted after."""
    from ocrstream.streams.topics import delete_topics, ensure_topics

    ensure_topics(kafka_settings, {t.SCANS: SCAN_PARTITIONS, t.PAGE_RESULTS: SCAN_PARTITIONS},
                  partitions_scale=0.125)  # fmt: skip
    yield kafka_settings
    delete_topics(kafka_settings)


@pytest.fixture
def stack(
    full_topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path
) -> Iterator[Factory]:
    with harness.stack(full_topics, object_store.bucket, tmp_path) as make:
        yield make


def one_per_partition(round_no: int, count: int, partitions: int) -> list[LoadDoc]:
    """``count`` documents of 1-3 pages whose doc_ids land on ``count`` different partitions of
    the scans topic (murmur2 of the doc_id, as every ocrstream producer partitions)."""
    docs: list[LoadDoc] = []
    used: set[int] = set()
    index = round_no * 1000
    while len(docs) < count:
        index += 1
        doc = fake_doc(index, 1 + index % 3, prefix=f"r{round_no:02d}")
        partition = murmur2(doc.doc_id.encode(), list(range(partitions)), [])
        if partition in used:
            continue
        used.add(partition)
        docs.append(doc)
    return docs


def _env() -> dict[str, str]:
    return {
        "OCRSTREAM_WORKER_MAX_BATCH": "8",
        "OCRSTREAM_WORKER_MAX_WAIT_MS": "50",
        "OCRSTREAM_ASSEMBLER_SCAN_INTERVAL_S": "2",
    }


def test_documents_submitted_as_the_agents_start_all_end(
    stack: Factory, full_topics: KafkaSettings, s3_settings: S3Settings, object_store: ObjectStore
) -> None:
    """The agents start; within the first second, 8 documents land on 8 never-used partitions
    of ocr.scans.v1, one each. Every one is split, read and assembled, promptly."""
    pipeline, witness = stack(env=_env())
    docs = one_per_partition(0, 8, SCAN_PARTITIONS)
    with OcrClient(full_topics, s3_settings) as client:
        pipeline.start()
        started = time.monotonic()
        for doc in docs:
            client.submit(doc.data, doc_id=doc.doc_id, outputs=OUTPUTS, tenant="acme-legal")
        assert time.monotonic() - started < 2.0, "submitting took too long to test start-up"
    witness.wait_done([d.doc_id for d in docs], DONE_WITHIN_S, pipeline)
    witness.quiet(2.0)
    events = assert_exactly_once(witness, [d.doc_id for d in docs])
    assert_complete(object_store, events, docs)
    assert {event.tenant for event in events.values()} == {"acme-legal"}
    for name in pipeline.agents:  # log lines only: no terminal escapes in a file
        assert "\x1b" not in pipeline.log_text(name), pipeline.tail(name)


# Rounds of the soak test: six in the suite (three clean stops, two SIGKILLs, each on the same
# groups as the round before), more with OCRSTREAM_TEST_SOAK_ROUNDS for a longer soak.
ROUNDS = int(os.environ.get("OCRSTREAM_TEST_SOAK_ROUNDS", "6"))


def test_soak_restarts_with_records_in_the_first_second(
    stack: Factory, full_topics: KafkaSettings, s3_settings: S3Settings, object_store: ObjectStore
) -> None:
    """ROUNDS rounds on the same topics and groups: start the agents (the previous ones stopped
    cleanly on even rounds, SIGKILLed on odd ones, so the dead members are still in the
    groups), and within the first second submit documents of 1-3 pages to several partitions.
    Every round's documents end, each exactly once, within the bound."""
    pipeline, witness = stack(env=_env())
    all_docs: list[LoadDoc] = []
    timings: list[float] = []
    with OcrClient(full_topics, s3_settings) as client:
        for round_no in range(ROUNDS):
            docs = one_per_partition(round_no + 1, 5, SCAN_PARTITIONS)
            pipeline.start()
            for doc in docs:
                client.submit(doc.data, doc_id=doc.doc_id, outputs=OUTPUTS)
            all_docs += docs
            timings.append(witness.wait_done([d.doc_id for d in docs], DONE_WITHIN_S, pipeline))
            for name in harness.AGENTS:
                if round_no % 2 and round_no < ROUNDS - 1:
                    pipeline.kill(name)
                else:
                    assert pipeline.stop(name) == 0, f"{name} did not stop cleanly"
    witness.quiet(2.0)
    events = assert_exactly_once(witness, [d.doc_id for d in all_docs])
    assert_complete(object_store, events, all_docs)
    handed_over = sum(pipeline.log_text(a).count("reading them directly")
                      for a in ("splitter", "assembler"))  # fmt: skip
    print("seconds to the last terminal event, per round:", [round(s, 1) for s in timings],
          f"; stall-watch hand-overs: {handed_over}")  # fmt: skip


@pytest.mark.parametrize(("agent", "topic"), [("splitter", t.SCANS), ("assembler", t.PAGE_RESULTS)])
def test_stall_watch_hands_over_records_faust_never_delivered(
    stack: Factory,
    full_topics: KafkaSettings,
    s3_settings: S3Settings,
    object_store: ObjectStore,
    agent: str,
    topic: str,
) -> None:
    """The agent runs with a faust that drops the first record of every partition of ``topic``
    and never fetches it again (tests.fakes.lossy_agent). Every document still ends, once,
    because the stall watch reads those records directly; each is counted in
    ocrstream_agent_stalled_records_total{agent,topic} and named in a warning."""
    pipeline, witness = stack(env={**_env(), f"OCRSTREAM_{agent.upper()}_STALL_AFTER_S": "3",
                                   f"OCRSTREAM_{agent.upper()}_STALL_CHECK_INTERVAL_S": "1",
                                   "OCRSTREAM_FAKE_LOSE_TOPIC": topic})  # fmt: skip
    lossy = pipeline[agent]
    lossy.argv = [sys.executable, "-m", "tests.fakes.lossy_agent", agent,
                  "--metrics-port", str(lossy.metrics_port)]  # fmt: skip
    docs = one_per_partition(50, 6, SCAN_PARTITIONS)
    with OcrClient(full_topics, s3_settings) as client:
        pipeline.start()
        for doc in docs:
            client.submit(doc.data, doc_id=doc.doc_id, outputs=OUTPUTS)
    witness.wait_done([d.doc_id for d in docs], DONE_WITHIN_S, pipeline)
    witness.quiet(2.0)
    events = assert_exactly_once(witness, [d.doc_id for d in docs])
    assert_complete(object_store, events, docs)

    log_text = pipeline.log_text(agent)
    lost = log_text.count("fake: losing")
    assert lost >= len({murmur2(d.doc_id.encode(), list(range(SCAN_PARTITIONS)), [])
                        for d in docs}), log_text[-3000:]  # fmt: skip
    stage = "splitter" if agent == "splitter" else "assembler"
    counted = pipeline.metric(agent, "ocrstream_agent_stalled_records_total", agent=stage,
                              topic=full_topics.topic(topic))  # fmt: skip
    assert counted is not None
    assert counted >= lost, (counted, lost)
    assert log_text.count("reading them directly") >= 1
