"""The page-result cache on the real Kafka and S3 store, with the real OCR worker around the
fake engine (:mod:`tests.fakes.worker`, whose fingerprint is stable: made of its name, model
and version): the same page images submitted again under new doc_ids are answered from
``ocr.page-cache.v1`` without the engine, and still are after the worker restarts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ocrstream.client import OcrClient
from ocrstream.schemas.records import DocumentStatus
from ocrstream.settings import KafkaSettings, S3Settings
from ocrstream.storage import ObjectStore
from tests.integration import harness
from tests.integration.harness import LoadDoc, Pipeline, Witness, fake_doc, text_doc

pytestmark = [pytest.mark.integration]

OUTPUTS = ("json", "txt")


@pytest.fixture
def stack(topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path) -> Iterator:
    with harness.stack(topics, object_store.bucket, tmp_path) as make:
        yield make


def _submit(client: OcrClient, docs: list[LoadDoc], prefix: str) -> list[LoadDoc]:
    """The documents' own bytes under new doc_ids ``{prefix}-{n}``."""
    again = [LoadDoc(f"{prefix}-{n:04d}", d.data, d.texts) for n, d in enumerate(docs)]
    for doc in again:
        client.submit(doc.data, doc_id=doc.doc_id, outputs=OUTPUTS)
    return again


def _texts(store: ObjectStore, doc_id: str) -> list[str]:
    body = json.loads(store.get_bytes(store.keys.document(doc_id, "json")))
    return [" ".join(line["text"] for line in page["lines"]) for page in body["pages"]]


def _assert_all_cached(
    pipeline: Pipeline, witness: Witness, store: ObjectStore, docs: list[LoadDoc], hits: int
) -> None:
    ids = {d.doc_id for d in docs}
    witness.wait_done(ids, 120, pipeline)
    results = [r for r in witness.page_results() if r.doc_id in ids]
    pages = sum(d.page_count for d in docs)
    assert len({(r.doc_id, r.page_no) for r in results}) == pages
    assert all(r.cached for r in results), [(r.doc_id, r.page_no) for r in results if not r.cached]
    terminal = witness.terminal()
    for doc in docs:
        event = terminal[doc.doc_id][0]
        assert event.status is DocumentStatus.COMPLETED, (doc.doc_id, event)
        assert event.pages_cached == doc.page_count, (doc.doc_id, event)
        assert _texts(store, doc.doc_id) == list(doc.texts), doc.doc_id
    assert pipeline.metric("worker", "ocrstream_cache_total", result="hit") == hits


def test_the_same_pages_again_are_cache_hits_also_after_a_worker_restart(
    stack: object,
    topics: KafkaSettings,
    s3_settings: S3Settings,
    object_store: ObjectStore,
    tmp_path: Path,
) -> None:
    pipeline, witness = stack(env={"OCRSTREAM_WORKER_MAX_WAIT_MS": "50"})  # type: ignore[operator]
    client = OcrClient(topics, s3_settings)
    docs = [fake_doc(i, 2 + i % 2) for i in range(6)]
    pages = sum(d.page_count for d in docs)
    pipeline.start()

    for doc in docs:
        client.submit(doc.data, doc_id=doc.doc_id, outputs=OUTPUTS)
    witness.wait_done([d.doc_id for d in docs], 120, pipeline)
    first = [r for r in witness.page_results() if r.doc_id.startswith("doc-")]
    assert first, "no page results for the first batch"
    assert not any(r.cached for r in first), "a page of the first batch was already cached"
    terminal = witness.terminal()
    assert all(terminal[d.doc_id][0].pages_cached == 0 for d in docs)
    assert pipeline.metric("worker", "ocrstream_cache_total", result="miss") == pages

    again = _submit(client, docs, "again")
    _assert_all_cached(pipeline, witness, object_store, again, hits=pages)
    assert pipeline.metric("worker", "ocrstream_cache_total", result="miss") == pages

    # A new worker process: its memory is empty and is filled from ocr.page-cache.v1.
    assert pipeline.stop("worker") == 0
    pipeline.start("worker")
    third = _submit(client, docs, "third")
    _assert_all_cached(pipeline, witness, object_store, third, hits=pages)

    # `ocrstream run` on one of the files (its doc_id from its content: new) reports the hits.
    scan = tmp_path / "scan.pdf"
    scan.write_bytes(docs[1].data)
    env = {**os.environ, "OCRSTREAM_TOPIC_PREFIX": topics.topic_prefix,
           "OCRSTREAM_S3_BUCKET": object_store.bucket}  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "ocrstream", "run", str(scan), "--output", str(tmp_path / "out"),
         "--no-infra", "--no-agents", "--timeout", "120"],
        env=env, check=True, capture_output=True, timeout=180,
    )  # fmt: skip
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    [doc] = summary
    assert doc["status"] == "completed", doc
    assert doc["pages_cached"] == doc["pages"] == docs[1].page_count, doc
    pipeline.assert_alive()


def test_the_real_engine_answers_a_page_set_again_from_the_cache(
    stack: object, topics: KafkaSettings, s3_settings: S3Settings, object_store: ObjectStore
) -> None:
    """``ocrstream ocr-worker`` with the real engine (its fingerprint from its model files and
    options): the same scan under a new doc_id is answered from the cache, word for word."""
    pipeline, witness = stack(engine="real")  # type: ignore[operator]
    client = OcrClient(topics, s3_settings)
    docs = [text_doc(1, 2)]
    pipeline.start()
    for doc in docs:
        client.submit(doc.data, doc_id=doc.doc_id, outputs=OUTPUTS)
    witness.wait_done([docs[0].doc_id], 180, pipeline)
    read = _texts(object_store, docs[0].doc_id)
    assert all(read), read

    again = _submit(client, docs, "again")
    witness.wait_done([again[0].doc_id], 60, pipeline)
    event = witness.terminal()[again[0].doc_id][0]
    assert event.pages_cached == event.page_count == 2, event
    assert _texts(object_store, again[0].doc_id) == read
    assert pipeline.metric("worker", "ocrstream_cache_total", result="hit") == 2
