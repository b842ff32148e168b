"""The guarantees of docs/architecture.md under faults, on the real Kafka and S3 store.

Each test runs a load of at least 50 multi-page documents through the agents as processes
(:mod:`tests.integration.harness`) and injects faults while it runs; each ends by asserting
that every submitted doc_id has exactly one terminal DocumentEvent on ``ocr.documents.v1`` and
that every document completed with all of its pages, each with its own text.

The guarantees are about the stream — offsets, changelogs, retries, de-duplication — not about
recognition, so most loads use the real OCR worker around a fast fake engine
(:mod:`tests.fakes.worker`: same consumer group, fetches, producer and DLQ; the engine answers
``page WxH``), which keeps a 50-document run to seconds of CPU on a 2-core CI machine.
:func:`test_worker_sigkill_with_the_real_engine` repeats the worker crash with the real engine
and checks the recognised text.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ocrstream.client import OcrClient
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import (
    DeadLetter,
    DocumentStatus,
    PageImage,
    PageResult,
    PageStatus,
    PageTask,
)
from ocrstream.settings import KafkaSettings, S3Settings
from ocrstream.storage import ObjectStore
from ocrstream.streams import topics as t
from tests.integration import harness
from tests.integration.harness import (
    OVERSIZE,
    Committed,
    LoadDoc,
    Pipeline,
    Poison,
    Sent,
    Witness,
    assert_complete,
    assert_exactly_once,
    end_offsets,
    fake_doc,
    long_doc,
    poison_for,
    produce_raw,
    scan_record,
    service_down,
    text_doc,
)
from tests.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAST_OUTPUTS = ("json", "txt")
LONG_PAGES = 200  # the searchable PDF costs CPU and proves nothing about faults
SIGKILL = -9

Factory = Callable[..., tuple[Pipeline, Witness]]


@pytest.fixture
def stack(topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path) -> Iterator[Factory]:
    """Build the test's pipeline (not started) and witness; everything is stopped after."""
    with harness.stack(topics, object_store.bucket, tmp_path) as make:
        yield make


class Submitter(threading.Thread):
    """Submits documents through the SDK at a steady pace while the test injects faults."""

    def __init__(self, client: OcrClient, docs: list[LoadDoc], interval_s: float) -> None:
        super().__init__(name="submitter", daemon=True)
        self.client, self.docs, self.interval_s = client, docs, interval_s
        self.submitted: list[tuple[float, str]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for doc in self.docs:
                self.client.submit(doc.data, doc_id=doc.doc_id, outputs=FAST_OUTPUTS)
                self.submitted.append((time.monotonic(), doc.doc_id))
                time.sleep(self.interval_s)  # pacing on purpose: a steady load, not a burst
        except Exception as e:  # noqa: BLE001 -- reported by finish()
            self.error = e

    def count(self) -> int:
        return len(self.submitted)

    def finish(self, timeout_s: float) -> None:
        self.join(timeout_s)
        assert not self.is_alive(), "the submitter is stuck"
        assert self.error is None, f"submitting failed: {self.error!r}"


def _agent_env(**extra: str) -> dict[str, str]:
    return {
        "OCRSTREAM_WORKER_MAX_BATCH": "8",
        "OCRSTREAM_WORKER_MAX_WAIT_MS": "100",
        "OCRSTREAM_ASSEMBLER_SCAN_INTERVAL_S": "2",
        **extra,
    }


def _by_topic(letters: list[DeadLetter]) -> dict[tuple[str, int, int], DeadLetter]:
    return {(d.topic, d.partition, d.offset): d for d in letters}


def test_agent_crashes_duplicates_and_poison_under_load(
    stack: Factory, topics: KafkaSettings, s3_settings: S3Settings, object_store: ObjectStore
) -> None:
    """One load of 60 documents (2-3 pages) while, in turn: the OCR worker is SIGKILLed with a
    batch in its engine and restarted; the assembler is SIGKILLed and restarted (its tables come
    back from their changelogs); the splitter is SIGKILLed and restarted. Along the way a
    ScanSubmitted is published twice back to back and once more after the splitter restarted,
    a file is submitted a second time under a new doc_id, and records that are not Avro, have an
    unknown schema, a truncated body, the wrong type or no value at all are published to the
    topic of each consuming agent: they go to ``ocr.dlq.v1`` with their origin and the agents
    go on."""
    # Batches of two pages: a 3-page document's results come in two batches 0.25 s apart, so
    # the assembler is regularly caught with a document half assembled and committed (with
    # eight-page batches on a quiet machine every document's pages came at once, and step 2
    # could wait out the whole load for that moment).
    pipeline, witness = stack(env=_agent_env(OCRSTREAM_FAKE_ENGINE_BATCH_DELAY_S="0.25",
                                             OCRSTREAM_WORKER_MAX_BATCH="2"),
                              tasks=True)  # fmt: skip
    codec = Codec(topics)
    client = OcrClient(topics, s3_settings)
    docs = [fake_doc(i, 2 + i % 2) for i in range(60)]
    long = long_doc(0, LONG_PAGES)
    pipeline.start()
    submitter = Submitter(client, docs, interval_s=0.7)
    submitter.start()

    # --- the same ScanSubmitted twice, back to back (the 61st document) ----------------------
    twice = fake_doc(60, 3)
    twice_bytes = codec.encode(scan_record(twice), topics.topic(t.SCANS))
    key = twice.doc_id.encode()
    produce_raw(topics, t.SCANS, [(key, twice_bytes, {}), (key, twice_bytes, {})])

    # --- 1. SIGKILL the OCR worker with a batch in its engine ----------------------------------
    def worker_busy() -> bool:
        inflight = pipeline.metric("worker", "ocrstream_pages_inflight", stage="ocr")
        return len(witness.page_results()) >= 10 and (inflight or 0) > 0

    wait_until(worker_busy, 120, "the worker to be in the middle of a batch", interval_s=0.05)
    old_worker = pipeline["worker"].pid
    assert pipeline.kill("worker") == SIGKILL
    # Every result the dead worker delivered is read before its successor starts, so every
    # result the witness sees from then on is the new worker's.
    delivered = end_offsets(topics, t.PAGE_RESULTS)
    wait_until(lambda: witness.has_read(t.PAGE_RESULTS, delivered), 60,
               "the witness to read the killed worker's last results")  # fmt: skip
    killed_worker_at = time.monotonic()
    pipeline.start("worker")
    new_worker = pipeline["worker"].pid

    # --- 2. SIGKILL the assembler with documents half assembled ---------------------------------
    wait_until(lambda: len(witness.page_results(since=killed_worker_at)) >= 15, 120,
               "results from the restarted worker")  # fmt: skip
    # Killed when some document has a page result the assembler committed and no terminal
    # event: after the crash that page is not read again, only the table's changelog has it.
    committed = Committed(topics, topics.topic("ocrstream-assembler"), t.PAGE_RESULTS)
    wait_until(lambda: bool(_half_committed(witness, committed.offsets())), 120,
               "a document half assembled and committed", interval_s=0.05)  # fmt: skip
    assert pipeline.kill("assembler") == SIGKILL
    killed_assembler_at = time.monotonic()
    restored = _half_committed(witness, committed.offsets())
    committed.close()
    pipeline.start("assembler")

    # --- poison for every consuming agent -------------------------------------------------------
    sample_result = PageResult(
        doc_id="poison-doc", page_no=7, page_count=2, status=PageStatus.OK
    )  # page 7 of 2: valid Avro, bad content
    poisons = {
        t.SCANS: poison_for(codec, topics.topic(t.SCANS), scan_record(docs[0]), "scans"),
        t.PAGES: poison_for(codec, topics.topic(t.PAGES), _page_task(), "pages"),
        t.PAGE_RESULTS: poison_for(codec, topics.topic(t.PAGE_RESULTS), sample_result, "results"),
    }
    poisons[t.PAGE_RESULTS].append(
        Poison(b"poison-doc", codec.encode(sample_result, topics.topic(t.PAGE_RESULTS)),
               "invalid_page_no", {"origin": b"results"})
    )  # fmt: skip
    sent: dict[str, list[Sent]] = {
        name: produce_raw(topics, name, [(p.key, p.value, p.headers) for p in records])
        for name, records in poisons.items()
    }

    # --- 3. SIGKILL the splitter in the middle of a long document, scans still coming --------
    wait_until(lambda: witness.done([d.doc_id for d in docs]) >= 5
               and time.monotonic() - killed_assembler_at > 5, 120,
               "documents from the restarted assembler")  # fmt: skip
    client.submit(long.data, doc_id=long.doc_id, outputs=FAST_OUTPUTS)
    wait_until(lambda: len(witness.page_tasks(long.doc_id)) >= 5, 120,
               "the long document's first pages", interval_s=0.02)  # fmt: skip
    submitted_before = submitter.count()
    assert pipeline.kill("splitter") == SIGKILL
    killed_splitter_at = time.monotonic()
    tasks_at_kill = len(witness.page_tasks(long.doc_id))
    assert submitted_before < len(docs), "the load ended before the splitter was killed"
    pipeline.start("splitter")

    # --- the same file again under a new doc_id, and the old ScanSubmitted once more -----------
    again = client.submit(docs[3].data, doc_id=f"{docs[3].doc_id}-again", outputs=FAST_OUTPUTS)
    witness.wait_done([twice.doc_id], 120, pipeline)
    republished_at = time.monotonic()
    produce_raw(topics, t.SCANS, [(key, twice_bytes, {})])

    submitter.finish(120)
    all_ids = [d.doc_id for d in docs] + [twice.doc_id, again, long.doc_id]
    witness.wait_done(all_ids, 240, pipeline)
    witness.quiet(6)

    print(f"{len(restored)} documents half assembled at the assembler's death; the long "
          f"document cut after {tasks_at_kill} of {LONG_PAGES} pages")  # fmt: skip
    # Every document exactly once, complete, each page with its own text.
    events = assert_exactly_once(witness, all_ids)
    again_doc = LoadDoc(again, docs[3].data, docs[3].texts)
    assert_complete(object_store, events, [*docs, twice, again_doc, long])

    # 1. The worker really died mid-batch and its successor did the rest of the work.
    worker_ids = {r.worker_id for r in witness.page_results(since=killed_worker_at)}
    assert any(w.endswith(f"-{new_worker}") for w in worker_ids), worker_ids
    assert pipeline["worker"].exits == [SIGKILL]
    assert old_worker != new_worker
    # 2. Documents half assembled, with pages committed, when the assembler died: finished by
    # the new one, all pages in (checked above), so their committed pages came back from the
    # changelog.
    finished_later = {e.doc_id for e in witness.events_since(killed_assembler_at)}
    assert restored, "no document was half assembled at the crash"
    assert restored <= finished_later, (restored, finished_later)
    # 3. The long document was cut in the middle, split again from the start by the new
    # splitter (its page tasks twice over), and assembled once, every page in (above).
    assert 0 < tasks_at_kill < LONG_PAGES, tasks_at_kill
    assert len(witness.page_tasks(long.doc_id)) >= tasks_at_kill + LONG_PAGES
    # Scans submitted after the splitter's death were split by its successor.
    after = [d for at, d in submitter.submitted if at > killed_splitter_at]
    assert after
    assert all(events[d].status is DocumentStatus.COMPLETED for d in after)
    # The duplicated ScanSubmitted was split once: nothing came of the late copy.
    late = [r for r in witness.page_results(since=republished_at) if r.doc_id == twice.doc_id]
    assert not late, f"the republished scan was split again: {late}"

    # Every poison record is in the DLQ with its origin, from the agent that consumes it.
    letters = _by_topic(witness.dead_letters())
    stages = {t.SCANS: "splitter", t.PAGES: "ocr-worker", t.PAGE_RESULTS: "assembler"}
    for name, records in poisons.items():
        where_of = {s.key: s for s in sent[name]}
        for poison in records:
            where = where_of[poison.key]
            letter = letters.get((where.topic, where.partition, where.offset))
            assert letter is not None, f"no dead letter for {poison.key!r} on {name}"
            assert letter.stage == stages[name], letter
            assert letter.key == poison.key
            assert letter.headers == dict(poison.headers)
            assert letter.error_code == poison.code, letter.error_message
            if len(poison.value or b"") < OVERSIZE:
                assert letter.value == poison.value
            else:  # the value is left out of a dead letter that would be over the limit
                assert letter.value is None
                assert f"value ({OVERSIZE} bytes)" in letter.error_message
                assert f"[{where.partition}]@{where.offset}" in letter.error_message
    assert len(letters) == sum(len(r) for r in poisons.values()), "unexpected dead letters"
    pipeline.assert_alive()


def _half_committed(witness: Witness, committed: dict[int, int]) -> set[str]:
    """Documents with a page result below the group's committed offset and no terminal event."""
    terminal = witness.terminal()
    return {
        s.record.doc_id
        for s in witness.seen_results()
        if s.offset < committed.get(s.partition, -1) and s.record.doc_id not in terminal
    }


def _page_task() -> PageTask:
    return PageTask(doc_id="poison-doc", page_no=1, page_count=1, image=PageImage("png", b"x"),
                    width=1, height=1)  # fmt: skip


def test_broker_restart_under_load(
    stack: Factory, topics: KafkaSettings, s3_settings: S3Settings, object_store: ObjectStore
) -> None:
    """The Kafka broker is stopped and started again (same ports, same data) while 50 documents
    are being submitted and processed: every client — the SDK's producer, the OCR worker's
    consumer and producer, the faust agents — reconnects by itself. No agent exits or is
    restarted, and every document still ends exactly once, complete."""
    pipeline, witness = stack(env=_agent_env(OCRSTREAM_FAKE_ENGINE_BATCH_DELAY_S="0.25"))
    client = OcrClient(topics, s3_settings)
    docs = [fake_doc(i, 2 + i % 2) for i in range(50)]
    ids = [d.doc_id for d in docs]
    pipeline.start()
    submitter = Submitter(client, docs, interval_s=0.4)
    submitter.start()
    wait_until(lambda: witness.done(ids) >= 8, 180, "the first documents")
    pids = {name: agent.pid for name, agent in pipeline.agents.items()}
    broker = _service_pid("kafka")
    with service_down("kafka") as start:
        began = time.monotonic()
        cpu_before = {name: pipeline.cpu_seconds(name) for name in pipeline.agents}
        done_ids = [d for d in ids if d in witness.terminal()]
        done_before = len(done_ids)
        submitted_before = submitter.count()
        time.sleep(5)  # the fault itself: the broker stays down for 5 s
        pipeline.assert_alive()
        new_broker = start()
        cpu = {n: pipeline.cpu_seconds(n) - cpu_before[n] for n in pipeline.agents}
        outage = time.monotonic() - began
    print(f"broker down and restarting for {outage:.1f}s: agents' CPU seconds {cpu}")
    for name, seconds in cpu.items():  # reconnecting, not spinning
        assert seconds < 0.25 * outage, f"{name} used {seconds:.1f}s CPU in {outage:.0f}s"
    assert new_broker is not None
    assert new_broker != broker  # a new process, on the same port and the same data:
    kept = OcrClient(topics, s3_settings).wait_many(done_ids, timeout_s=60)
    assert set(kept) == set(done_ids), "events published before the restart are gone"
    assert done_before < len(ids), "the load was over before the broker went down"
    assert submitted_before < len(docs), "nothing was submitted across the restart"

    submitter.finish(180)
    witness.wait_done(ids, 240, pipeline)
    witness.quiet(6)
    events = assert_exactly_once(witness, ids)
    assert_complete(object_store, events, docs)
    # Every document not done when the broker went down ended after that (counted from the
    # stop: agents reconnect while start() is still waiting for the broker to answer).
    assert len(witness.events_since(began)) >= len(ids) - done_before
    assert {name: agent.pid for name, agent in pipeline.agents.items()} == pids, "a restart"
    pipeline.assert_alive()


def test_store_outage_under_load(
    stack: Factory, topics: KafkaSettings, s3_settings: S3Settings, object_store: ObjectStore
) -> None:
    """The S3 store is unreachable for 30 s in the middle of 50 documents whose page images
    all travel through it (claim-check): the OCR worker finishes the pages it had fetched,
    then backs off and pauses the partitions of the pages it can't fetch
    (``ocrstream_paused_partitions{reason="store_unavailable"}`` > 0) instead of failing them,
    and idles: under 5% of a core once its fetched pages are done, as the splitter and the
    assembler, which hold their records and retry, over the whole outage. When the store is
    back every document completes, exactly once."""
    pipeline, witness = stack(env=_agent_env(
        OCRSTREAM_FAKE_ENGINE_PAGE_DELAY_S="0.1",  # slower than the splitter: a backlog
        OCRSTREAM_SPLITTER_CLAIM_CHECK_BYTES="0",  # every page image goes through the store
        OCRSTREAM_WORKER_MAX_INFLIGHT_PAGES="16",  # little fetched ahead: a long idle stretch
    ), tasks=True)  # fmt: skip
    client = OcrClient(topics, s3_settings)
    docs = [fake_doc(i, 2 + i % 2) for i in range(50)]
    ids = [d.doc_id for d in docs]
    pipeline.start()
    for doc in docs:  # inline sources: submitting needs no store
        client.submit(doc.data, doc_id=doc.doc_id, outputs=FAST_OUTPUTS)

    def backlog() -> int:  # pages split, their images in the store, not recognised yet
        return len(witness.tasks) - len(witness.page_results())

    wait_until(lambda: len(witness.page_results()) >= 5 and backlog() >= 20, 180,
               "the worker to have pages to fetch")  # fmt: skip

    outage_s = 30.0
    paused = 0.0
    with service_down("s3") as start:
        began = time.monotonic()
        done_before = witness.done(ids)
        backlog_before = backlog()
        cpu_before = {name: pipeline.cpu_seconds(name) for name in pipeline.agents}
        # (seconds into the outage, the worker's CPU seconds, page results so far)
        samples: list[tuple[float, float, int]] = []
        while time.monotonic() - began < outage_s:
            value = pipeline.metric("worker", "ocrstream_paused_partitions",
                                    stage="ocr", reason="store_unavailable")  # fmt: skip
            paused = max(paused, value or 0.0)
            samples.append((time.monotonic() - began, pipeline.cpu_seconds("worker"),
                            len(witness.page_results())))  # fmt: skip
            time.sleep(1.0)  # one sample a second through the outage (a measurement)
        cpu = {n: pipeline.cpu_seconds(n) - cpu_before[n] for n in pipeline.agents}
        outage = time.monotonic() - began
        done_during = witness.done(ids) - done_before
        pipeline.assert_alive()
        start()
    # The worker's idle stretch: from the first second with no new page result to the end.
    idle = next(i for i in range(1, len(samples)) if samples[i][2] == samples[-1][2])
    idle_s = samples[-1][0] - samples[idle][0]
    idle_cpu = samples[-1][1] - samples[idle][1]
    print(f"store outage {outage:.1f}s with {backlog_before} pages to fetch: CPU seconds {cpu}, "
          f"the worker's {idle_cpu:.2f}s in its last {idle_s:.0f}s; {done_during} documents "
          f"finished")  # fmt: skip

    assert done_before < len(ids) - 10, "the load was nearly over before the outage"
    assert paused > 0, "the worker never paused a partition for the store"
    assert idle_s >= 10, f"the worker was busy with fetched pages for {outage - idle_s:.0f}s"
    assert idle_cpu < 0.05 * idle_s, f"the worker used {idle_cpu:.1f}s CPU in {idle_s:.0f}s idle"
    for name in ("splitter", "assembler"):
        assert cpu[name] < 0.05 * outage, f"{name} used {cpu[name]:.1f}s CPU in {outage:.0f}s"
    retries = pipeline.metric("worker", "ocrstream_retries_total", stage="ocr",
                              reason="store_unavailable")  # fmt: skip
    assert retries, "the worker never retried a fetch"

    witness.wait_done(ids, 240, pipeline)
    witness.quiet(6)
    events = assert_exactly_once(witness, ids)
    assert_complete(object_store, events, docs)  # none failed: all completed, every page
    pipeline.assert_alive()


def test_store_outage_pauses_the_splitter(
    stack: Factory, topics: KafkaSettings, s3_settings: S3Settings, object_store: ObjectStore
) -> None:
    """Documents arrive while the store is down and every page image must go through it: the
    splitter holds the scan it is on, pauses its partitions
    (``ocrstream_paused_partitions{stage="splitter",reason="store_unavailable"}``) and retries;
    when the store is back it resumes them and every document completes, exactly once."""
    pipeline, witness = stack(env=_agent_env(OCRSTREAM_SPLITTER_CLAIM_CHECK_BYTES="0"))
    client = OcrClient(topics, s3_settings)
    docs = [fake_doc(i, 2) for i in range(6)]
    ids = [d.doc_id for d in docs]
    pipeline.start()
    # the agents check the store as they start (and exit if it stays down: a restart is
    # their orchestrator's job); the outage begins once both are past that check
    stalled = "ocrstream_agent_stalled_records_total"
    for agent in ("splitter", "assembler"):
        wait_until(lambda agent=agent: pipeline.metric(agent, stalled) is not None, 60,
                   f"the {agent} to serve its metrics")  # fmt: skip
    with service_down("s3"):
        for doc in docs:  # inline sources: submitting needs no store
            client.submit(doc.data, doc_id=doc.doc_id, outputs=FAST_OUTPUTS)
        paused = wait_until(
            lambda: pipeline.metric("splitter", "ocrstream_paused_partitions", stage="splitter",
                                    reason="store_unavailable"),
            60, "the splitter to pause its partitions for the store",
        )  # fmt: skip
        assert paused >= 1
        assert witness.done(ids) == 0
        pipeline.assert_alive()
    witness.wait_done(ids, 120, pipeline)
    witness.quiet(3)
    events = assert_exactly_once(witness, ids)
    assert_complete(object_store, events, docs)
    assert pipeline.metric("splitter", "ocrstream_paused_partitions", stage="splitter",
                           reason="store_unavailable") == 0  # fmt: skip
    retries = pipeline.metric("splitter", "ocrstream_retries_total", stage="splitter",
                              reason="store_unavailable")  # fmt: skip
    assert retries, "the splitter never retried the store"


def test_worker_sigkill_with_the_real_engine(
    stack: Factory, topics: KafkaSettings, s3_settings: S3Settings, object_store: ObjectStore
) -> None:
    """The worker crash again, with the real OCR engine: 50 two-page scans of small printed
    pages (all three outputs, the searchable PDF too); the worker is SIGKILLed with a batch in
    the engine and restarted. Every document ends exactly once, completed, each page's text
    recognised where it belongs."""
    pipeline, witness = stack(engine="real", env=_agent_env(
        OCRSTREAM_OCR_DET_LIMIT_SIDE="640",  # small pages: a small detector input
        OCRSTREAM_OCR_THREADS="2",
    ))  # fmt: skip
    client = OcrClient(topics, s3_settings)
    docs = [text_doc(i, 2) for i in range(50)]
    ids = [d.doc_id for d in docs]
    pipeline.start()
    for doc in docs:
        client.submit(doc.data, doc_id=doc.doc_id)

    def worker_busy() -> bool:
        inflight = pipeline.metric("worker", "ocrstream_pages_inflight", stage="ocr")
        return len(witness.page_results()) >= 16 and (inflight or 0) > 0

    wait_until(worker_busy, 240, "the worker to be in the middle of a batch", interval_s=0.05)
    done_before = witness.done(ids)
    assert pipeline.kill("worker") == SIGKILL
    killed_at = time.monotonic()
    pipeline.start("worker")
    new_worker = pipeline["worker"].pid

    witness.wait_done(ids, 400, pipeline)
    witness.quiet(6)
    events = assert_exactly_once(witness, ids)
    assert_complete(object_store, events, docs, max_cer=0.05)
    assert done_before < len(ids) - 10, "the load was nearly over before the crash"
    later = {r.worker_id for r in witness.page_results(since=killed_at)}
    assert any(w.endswith(f"-{new_worker}") for w in later), later
    assert all(set(events[d].outputs) == {"json", "txt", "pdf"} for d in ids)
    pipeline.assert_alive()


def _service_pid(name: str) -> int | None:
    from ocrstream.services import build_services
    from ocrstream.settings import ServicesSettings

    (service,) = build_services(ServicesSettings(), S3Settings(), [name])
    return service.own_pid()
