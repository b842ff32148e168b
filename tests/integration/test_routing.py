"""Confidence routing on the real Kafka and S3 store with the real engines: a primary worker
on the fast model (``ppocrv6-tiny``) with routing on, an accurate worker (``ocrstream
ocr-worker --pool accurate``: ``ppocrv6-small``), the splitter and the assembler.

A deliberately degraded scan (faded ink on grey paper, blurred, noisy:
:func:`ocrstream.bench.datasets.degrade`) is routed to ``ocr.pages.accurate.v1`` and its
document is written from the accurate pool's result; a clean scan is not routed. By default the
early rule routes it unread (its noise); with the early rule off, the fast model reads it
weakly and the confidence rule routes it, with a provisional result. Without an accurate pool,
that provisional result is used once the assembler's provisional wait is over: the document
still completes."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ocrstream.bench.cer import levenshtein, normalise
from ocrstream.bench.datasets import degrade, render_a4_page
from ocrstream.client import OcrClient
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import DocumentStatus, PageResult, PageTask
from ocrstream.settings import KafkaSettings, S3Settings
from ocrstream.storage import ObjectStore
from ocrstream.streams import topics as t
from tests.integration import harness
from tests.integration.harness import Agent, Pipeline, read_all
from tests.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ENV = {
    "OCRSTREAM_OCR_MODEL": "ppocrv6-tiny",
    "OCRSTREAM_OCR_THREADS": "1",
    "OCRSTREAM_ACCURATE_OCR_THREADS": "1",
    "OCRSTREAM_ROUTING_ENABLED": "true",
    "OCRSTREAM_ASSEMBLER_SCAN_INTERVAL_S": "1",
    "OCRSTREAM_WORKER_MAX_WAIT_MS": "50",
}
LATE_ONLY = {"OCRSTREAM_ROUTING_EARLY_MAX_NOISE": "0"}  # only the rule over tiny's confidences


@pytest.fixture
def stack(topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path) -> Iterator:
    with harness.stack(topics, object_store.bucket, tmp_path) as make:
        yield make


@pytest.fixture(scope="module")
def pages() -> dict[str, tuple[bytes, str]]:
    """A clean and a degraded 150-DPI A4 page (JPEG) with the text printed on them."""
    data, lines = render_a4_page(7, dpi=150)
    text = "\n".join(line.text for line in lines)
    return {"clean": (data, text), "degraded": (degrade(data, seed=7), text)}


def add_accurate_worker(pipeline: Pipeline) -> None:
    worker = pipeline.agents["worker"]
    port = harness.free_port()
    pipeline.agents["accurate"] = Agent(
        "accurate",
        [sys.executable, "-m", "ocrstream", "ocr-worker", "--pool", "accurate",
         "--metrics-port", str(port)],
        dict(worker.env), pipeline.log_dir / "accurate.log", port,
    )  # fmt: skip


def document(store: ObjectStore, doc_id: str) -> dict:
    body: dict = json.loads(store.get_bytes(store.keys.document(doc_id, "json")))
    return body


def fast_reading(data: bytes) -> dict:
    """The page as the primary pool's engine reads it, in this process."""
    from ocrstream.processors.ocr.engine import OcrEngine
    from ocrstream.settings import OcrSettings

    engine = OcrEngine(OcrSettings(model=ENV["OCRSTREAM_OCR_MODEL"], threads=1))
    try:
        [page] = engine.recognize([data])
    finally:
        engine.close()
    return {"lines": [{"text": line.text} for line in page.lines]}


def cer(page: dict, truth: str) -> float:
    text = normalise(" ".join(line["text"] for line in page["lines"]))
    ref = normalise(truth.replace("\n", " "))
    return levenshtein(ref, text) / len(ref)


def run_with_accurate_pool(
    stack: Any,
    topics: KafkaSettings,
    s3_settings: S3Settings,
    pages: dict[str, tuple[bytes, str]],
    env: dict[str, str],
) -> tuple[Pipeline, dict[str, list[PageResult]]]:
    """Splitter, fast worker, assembler and an accurate worker; every page submitted as its own
    document and completed. The pipeline, and each document's page results as published."""
    pipeline, witness = stack(engine="real", env=env)
    add_accurate_worker(pipeline)
    pipeline.start("splitter", "worker", "assembler", "accurate")
    client = OcrClient(topics, s3_settings)
    for doc_id, (data, _) in pages.items():
        client.submit(data, doc_id=doc_id, outputs=("json", "txt"))
    witness.wait_done(set(pages), 600, pipeline)
    client.close()
    events = witness.terminal()
    assert {d: events[d][0].status for d in pages} == {d: DocumentStatus.COMPLETED for d in pages}
    return pipeline, {d: [r for r in witness.page_results() if r.doc_id == d] for d in pages}


def wait_for_routing_counts(pipeline: Pipeline, expected: dict[tuple[str, str], int]) -> None:
    """``ocrstream_routing_total`` of each (agent, outcome) reaches its count (the worker agent
    is the primary pool, ``accurate`` the accurate one)."""
    pools = {"worker": "primary", "accurate": "accurate"}

    def counted() -> bool:
        return all(
            pipeline.metric(agent, "ocrstream_routing_total", pool=pools[agent], outcome=outcome)
            == n
            for (agent, outcome), n in expected.items()
        )

    wait_until(counted, 30, f"the routing counters of both pools: {expected}")


def test_a_noisy_page_is_routed_unread_and_its_document_takes_the_accurate_result(
    stack: object,
    topics: KafkaSettings,
    s3_settings: S3Settings,
    object_store: ObjectStore,
    pages: dict[str, tuple[bytes, str]],
) -> None:
    pipeline, results = run_with_accurate_pool(stack, topics, s3_settings, pages, ENV)
    assert [(r.pool, r.provisional) for r in results["clean"]] == [("primary", False)]
    # The noisy page: no reading by the fast pool at all, only the accurate pool's.
    assert [(r.pool, r.provisional) for r in results["degraded"]] == [("accurate", False)]
    routed = read_all(topics, t.PAGES_ACCURATE, Codec(topics))
    assert [(r.doc_id, r.page_no) for r in routed if isinstance(r, PageTask)] == [("degraded", 1)]
    final = document(object_store, "degraded")["pages"][0]
    assert final["engine"]["model"] == "ppocrv6-small"
    # Better than what the fast model would have given, had it read the page first.
    fast = fast_reading(pages["degraded"][0])
    assert cer(final, pages["degraded"][1]) < cer(fast, pages["degraded"][1])
    assert document(object_store, "clean")["pages"][0]["engine"]["model"] == "ppocrv6-tiny"

    wait_for_routing_counts(pipeline, {("worker", "routed_early"): 1, ("worker", "routed"): 0,
                                       ("worker", "kept"): 1, ("accurate", "kept"): 1})  # fmt: skip


def test_a_degraded_page_is_routed_and_its_document_takes_the_accurate_result(
    stack: object,
    topics: KafkaSettings,
    s3_settings: S3Settings,
    object_store: ObjectStore,
    pages: dict[str, tuple[bytes, str]],
) -> None:
    # A long provisional wait: the degraded document can only finish with the accurate result.
    # The early rule off: the fast model reads the page, and its confidences route it.
    env = {**ENV, **LATE_ONLY, "OCRSTREAM_ASSEMBLER_PROVISIONAL_WAIT_S": "900"}
    pipeline, results = run_with_accurate_pool(stack, topics, s3_settings, pages, env)
    # The clean page: one result, the fast pool's, final.
    assert [(r.pool, r.provisional) for r in results["clean"]] == [("primary", False)]
    # The degraded page: the fast pool's provisional answer, then the accurate pool's.
    assert sorted((r.pool, r.provisional) for r in results["degraded"]) == [
        ("accurate", False), ("primary", True),
    ]  # fmt: skip
    routed = read_all(topics, t.PAGES_ACCURATE, Codec(topics))
    assert [(r.doc_id, r.page_no) for r in routed if isinstance(r, PageTask)] == [("degraded", 1)]

    # document.json of the degraded scan is the accurate pool's reading, and a better one.
    final = document(object_store, "degraded")["pages"][0]
    accurate = next(r for r in results["degraded"] if r.pool == "accurate")
    provisional = next(r for r in results["degraded"] if r.provisional)
    assert [line["text"] for line in final["lines"]] == [line.text for line in accurate.lines]
    assert final["engine"]["model"] == "ppocrv6-small"
    truth = pages["degraded"][1]
    fast_page = {"lines": [{"text": line.text} for line in provisional.lines]}
    assert cer(final, truth) < cer(fast_page, truth)
    assert document(object_store, "clean")["pages"][0]["engine"]["model"] == "ppocrv6-tiny"

    # The metrics: the fast pool answered two pages and routed one; the accurate pool kept it.
    counts = {("worker", "routed"): 1, ("worker", "kept"): 1, ("accurate", "kept"): 1,
              ("accurate", "routed"): 0}  # fmt: skip
    wait_for_routing_counts(pipeline, counts)


def test_without_an_accurate_pool_the_provisional_result_completes_the_document(
    stack: object,
    topics: KafkaSettings,
    s3_settings: S3Settings,
    object_store: ObjectStore,
    pages: dict[str, tuple[bytes, str]],
) -> None:
    env = {**ENV, **LATE_ONLY, "OCRSTREAM_ASSEMBLER_PROVISIONAL_WAIT_S": "5"}
    pipeline, witness = stack(engine="real", env=env)  # type: ignore[operator]
    pipeline.start()  # no accurate worker
    client = OcrClient(topics, s3_settings)
    client.submit(pages["degraded"][0], doc_id="alone", outputs=("json",))
    witness.wait_done({"alone"}, 300, pipeline)
    client.close()

    assert witness.terminal()["alone"][0].status is DocumentStatus.COMPLETED
    [result] = [r for r in witness.page_results() if r.doc_id == "alone"]
    assert result.provisional
    final = document(object_store, "alone")["pages"][0]
    assert [line["text"] for line in final["lines"]] == [line.text for line in result.lines]
    assert final["lines"]  # the fast text, weak as it is, rather than nothing
