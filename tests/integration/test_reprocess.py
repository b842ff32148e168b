"""``ocrstream reprocess`` on the real Kafka and S3 store, with the real splitter and assembler
and the real OCR worker around the fake engine (:mod:`tests.fakes.worker`: it reads each page
back as ``page WxH``):

- a document read, then reprocessed: revision 2 at the latest keys, revision 1 under
  ``rev-1/``, both revisions' events on ``ocr.documents.v1``; the same command once more makes
  revision 3, and with ``KEEP_REVISIONS=1`` revision 1 is deleted;
- a reprocess under load, with a page result of the old revision published after revision 2
  started: it is counted stale and document.json of revision 2 holds what revision 2 read;
- an interrupted reprocess: the same command continues without publishing again what was
  acknowledged and recorded before.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ocrstream.client import OcrClient
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import (
    DocumentProgress,
    DocumentStatus,
    Engine,
    Line,
    PageResult,
    PageStatus,
    Point,
    ScanSubmitted,
)
from ocrstream.settings import KafkaSettings, S3Settings
from ocrstream.storage import ObjectStore
from ocrstream.storage.revisions import kept_revisions, stored_revision
from ocrstream.streams import reprocess as rp
from ocrstream.streams import topics as t
from tests.integration import harness
from tests.integration.harness import LoadDoc, Witness, fake_doc, read_all
from tests.polling import wait_until

pytestmark = [pytest.mark.integration]


@pytest.fixture
def stack(topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path) -> Iterator[Any]:
    with harness.stack(topics, object_store.bucket, tmp_path) as make:
        yield make


def _reprocess(
    topics: KafkaSettings, store: ObjectStore, tmp_path: Path, *args: str
) -> tuple[int, list[dict[str, Any]], str]:
    """``ocrstream reprocess ARGS`` as a user runs it: (exit code, summary rows, stderr)."""
    summary = tmp_path / "summary.json"
    summary.unlink(missing_ok=True)
    run_env = {**os.environ, "OCRSTREAM_TOPIC_PREFIX": topics.topic_prefix,
               "OCRSTREAM_S3_BUCKET": store.bucket}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "ocrstream", "reprocess", *args, "--timeout", "180",
         "--summary", str(summary)],
        env=run_env, capture_output=True, timeout=300, cwd=harness.REPO,
    )  # fmt: skip
    rows = json.loads(summary.read_text()) if summary.exists() else []
    return proc.returncode, rows, proc.stderr.decode(errors="replace")


def _document(store: ObjectStore, key: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(store.get_bytes(key))
    return body


def _texts(body: dict[str, Any]) -> list[str]:
    return [" ".join(line["text"] for line in page["lines"]) for page in body["pages"]]


def _revisions(witness: Witness, doc_id: str) -> list[tuple[int, DocumentStatus]]:
    return [(e.revision, e.status) for e in witness.terminal().get(doc_id, [])]


def _submit(client: OcrClient, docs: list[LoadDoc], outputs: tuple[str, ...]) -> None:
    for doc in docs:
        client.submit(doc.data, doc_id=doc.doc_id, outputs=outputs)


def test_a_reprocessed_document_is_revision_2_and_revision_1_is_kept(
    stack: Any, topics: KafkaSettings, s3_settings: S3Settings, object_store: ObjectStore,
    tmp_path: Path,
) -> None:  # fmt: skip
    pipeline, witness = stack(env={"OCRSTREAM_ASSEMBLER_KEEP_REVISIONS": "1"})
    client = OcrClient(topics, s3_settings)
    doc = fake_doc(1, 3)  # asks for a PDF: the splitter stores its inline source
    plain = fake_doc(2, 2)  # json and txt only, inline: no source is stored
    pipeline.start()
    _submit(client, [doc], ("json", "txt", "pdf"))
    _submit(client, [plain], ("json", "txt"))
    witness.wait_done([doc.doc_id, plain.doc_id], 120, pipeline)
    keys = object_store.keys
    first = _document(object_store, keys.document(doc.doc_id, "json"))
    assert (first["revision"], _texts(first)) == (1, list(doc.texts))

    code, rows, err = _reprocess(topics, object_store, tmp_path, doc.doc_id, plain.doc_id)
    assert code == 0, err
    by_id = {row["doc_id"]: row for row in rows}
    assert by_id[doc.doc_id]["status"] == "completed", (rows, err)
    assert by_id[doc.doc_id]["revision"] == 2
    assert by_id[doc.doc_id]["pages_cached"] == 3  # same images, same engine: the cache answers
    assert by_id[plain.doc_id]["status"] == "no_source", rows
    assert "pages/s" in err

    latest = _document(object_store, keys.document(doc.doc_id, "json"))
    kept = _document(object_store, keys.revision_document(doc.doc_id, 1, "json"))
    assert (latest["revision"], _texts(latest)) == (2, list(doc.texts))
    assert (kept["revision"], _texts(kept)) == (1, list(doc.texts))
    assert kept["completed_at"] == first["completed_at"]
    for fmt in ("json", "txt", "pdf"):
        assert stored_revision(object_store, doc.doc_id, fmt) == 2, fmt
        assert object_store.exists(keys.revision_document(doc.doc_id, 1, fmt)), fmt
    assert _revisions(witness, doc.doc_id) == [(1, DocumentStatus.COMPLETED),
                                               (2, DocumentStatus.COMPLETED)]  # fmt: skip
    assert _revisions(witness, plain.doc_id) == [(1, DocumentStatus.COMPLETED)]

    # The same command once the run is done: the next generation, revision 3. One earlier
    # revision is kept (KEEP_REVISIONS=1): revision 2 under rev-2/, revision 1 deleted.
    code, rows, err = _reprocess(topics, object_store, tmp_path, doc.doc_id, plain.doc_id)
    assert code == 0, err
    assert {r["doc_id"]: (r["revision"], r["status"]) for r in rows}[doc.doc_id] == (
        3, "completed",
    )  # fmt: skip
    assert _document(object_store, keys.document(doc.doc_id, "json"))["revision"] == 3
    assert kept_revisions(object_store, doc.doc_id) == [2]
    assert _document(object_store, keys.revision_document(doc.doc_id, 2, "json"))["revision"] == 2
    assert [r for r, _ in _revisions(witness, doc.doc_id)] == [1, 2, 3]
    pipeline.assert_alive()


def _progress_of(topics: KafkaSettings, doc_id: str, revision: int) -> bool:
    records = read_all(topics, t.PROGRESS, Codec(topics))
    return any(isinstance(r, DocumentProgress) and r.doc_id == doc_id and r.revision == revision
               for r in records)  # fmt: skip


def test_a_late_page_of_the_old_revision_never_lands_in_the_new_one(
    stack: Any, topics: KafkaSettings, s3_settings: S3Settings, object_store: ObjectStore,
    tmp_path: Path,
) -> None:  # fmt: skip
    # Slow pages, so that revision 2 is in flight among other documents when the late page of
    # revision 1 comes.
    pipeline, witness = stack(env={"OCRSTREAM_FAKE_ENGINE_PAGE_DELAY_S": "0.3",
                                   "OCRSTREAM_WORKER_MAX_BATCH": "2"})  # fmt: skip
    client = OcrClient(topics, s3_settings)
    doc = fake_doc(3, 6)
    pipeline.start()
    _submit(client, [doc], ("json", "txt", "pdf"))
    witness.wait_done([doc.doc_id], 120, pipeline)

    load = [fake_doc(10 + i, 3, prefix="load") for i in range(4)]
    _submit(client, load, ("json", "txt"))
    # --model names the model the fake worker runs: every page's cache key changes, so
    # revision 2 is read by the engine again (slowly), not answered from the cache.
    summary = tmp_path / "late.json"
    env = {**os.environ, "OCRSTREAM_TOPIC_PREFIX": topics.topic_prefix,
           "OCRSTREAM_S3_BUCKET": object_store.bucket}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "ocrstream", "reprocess", doc.doc_id, "--model", "fake-model",
         "--timeout", "240", "--summary", str(summary)],
        env=env, cwd=harness.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_until(lambda: _progress_of(topics, doc.doc_id, 2), 120,
                   "a page of revision 2 kept by the assembler", interval_s=0.5)  # fmt: skip
        late = PageResult(
            doc_id=doc.doc_id, page_no=1, page_count=6, status=PageStatus.OK, width=10, height=10,
            lines=(Line("LATE PAGE OF REVISION 1", 0.99,
                        (Point(0, 0), Point(9, 0), Point(9, 9), Point(0, 9))),),
            engine=Engine("fake", "fake-model", "1"), worker_id="late", revision=1,
            outputs=("json", "txt", "pdf"),
        )  # fmt: skip
        codec = Codec(topics)
        value = codec.encode(late, topics.topic(t.PAGE_RESULTS))
        harness.produce_raw(topics, t.PAGE_RESULTS, [(doc.doc_id.encode(), value, {})])
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err.decode(errors="replace")
    [row] = json.loads(summary.read_text())
    assert (row["revision"], row["status"], row["pages_cached"]) == (2, "completed", 0), row

    body = _document(object_store, object_store.keys.document(doc.doc_id, "json"))
    assert body["revision"] == 2
    assert _texts(body) == list(doc.texts)
    assert (
        "LATE" not in object_store.get_bytes(object_store.keys.document(doc.doc_id, "txt")).decode()
    )
    wait_until(lambda: pipeline.metric("assembler", "ocrstream_pages_total",
                                       stage="assembler", status="stale_revision") == 1,
               30, "the late page counted stale")  # fmt: skip
    witness.wait_done([d.doc_id for d in load], 120, pipeline)
    assert _revisions(witness, doc.doc_id) == [(1, DocumentStatus.COMPLETED),
                                               (2, DocumentStatus.COMPLETED)]  # fmt: skip
    for other in load:
        assert _revisions(witness, other.doc_id) == [(1, DocumentStatus.COMPLETED)]
    pipeline.assert_alive()


def test_an_interrupted_reprocess_resumes_without_submitting_again(
    stack: Any, topics: KafkaSettings, s3_settings: S3Settings, object_store: ObjectStore,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    pipeline, witness = stack()
    client = OcrClient(topics, s3_settings)
    docs = [fake_doc(20 + i, 2) for i in range(5)]
    pipeline.start()
    _submit(client, docs, ("json", "txt", "pdf"))
    ids = [d.doc_id for d in docs]
    witness.wait_done(ids, 120, pipeline)

    # The command's first run, interrupted (Ctrl-C) while it publishes the third scan: the
    # first batch of two was acknowledged and recorded, the third never left.
    monkeypatch.setattr(rp, "BATCH", 2)
    codec = Codec(topics)
    selection = rp.Selection(doc_ids=tuple(ids))
    runs = rp.RunLog(object_store)
    run, plan = runs.open(selection.name())
    assert plan is None
    events = rp.read_documents(topics, codec)
    plan = rp.Plan(
        run, rp.now_utc(), {e.doc_id: e.revision + 1 for e in rp.select(events, selection)}
    )
    runs.write_plan(plan, selection)
    producer = harness_producer(topics, codec)
    sent: list[str] = []

    def send(scan: ScanSubmitted) -> None:
        if len(sent) == 2:
            raise KeyboardInterrupt
        producer.send(topics.topic(t.SCANS), scan.doc_id, scan)
        sent.append(scan.doc_id)

    def flush() -> None:
        assert producer.flush(30) == 0

    with pytest.raises(KeyboardInterrupt):
        rp.submit(plan, events, selection, store=object_store, runs=runs, send=send, flush=flush)
    assert sent == ids[:2]

    # The same command again, with no OCR worker running, and Ctrl-C while it waits: it
    # resumed, submitted the other three, and says how to go on.
    assert pipeline.stop("worker") == 0
    env = {**os.environ, "OCRSTREAM_TOPIC_PREFIX": topics.topic_prefix,
           "OCRSTREAM_S3_BUCKET": object_store.bucket}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "ocrstream", "reprocess", *ids, "--timeout", "240"],
        env=env, cwd=harness.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=harness.interruptible,
    )  # fmt: skip
    try:
        wait_until(lambda: len(runs.open(selection.name())[1].submitted) == 5, 60,  # type: ignore[union-attr]
                   "the other three scans recorded")  # fmt: skip
        proc.send_signal(signal.SIGINT)
        _, err_bytes = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    err = err_bytes.decode(errors="replace")
    assert proc.returncode == 130, err
    assert f"run {run} resumed: 2 of 5" in err
    assert "run the same command again" in err

    # And once more with the worker back: nothing left to submit; it waits for all five.
    pipeline.start("worker")
    code, rows, err = _reprocess(topics, object_store, tmp_path, *ids)
    assert code == 0, err
    assert f"run {run} resumed: 5 of 5" in err
    assert [(r["doc_id"], r["revision"], r["status"]) for r in rows] == [
        (d, 2, "completed") for d in ids
    ]
    scans = [r for r in read_all(topics, t.SCANS, codec) if isinstance(r, ScanSubmitted)]
    assert sorted((s.doc_id, s.revision) for s in scans) == sorted(
        [(d, 1) for d in ids] + [(d, 2) for d in ids]
    )
    for doc in docs:
        body = _document(object_store, object_store.keys.document(doc.doc_id, "json"))
        assert (body["revision"], _texts(body)) == (2, list(doc.texts))
        assert _revisions(witness, doc.doc_id) == [(1, DocumentStatus.COMPLETED),
                                                   (2, DocumentStatus.COMPLETED)]  # fmt: skip
    pipeline.assert_alive()


def harness_producer(topics: KafkaSettings, codec: Codec) -> Any:
    from ocrstream.streams.producer import RecordProducer

    return RecordProducer(topics, codec)
