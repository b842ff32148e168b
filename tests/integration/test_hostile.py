"""Hostile and odd input through the real pipeline: real splitter, real OCR worker (the real
engine), real assembler, on the real Kafka and S3 store.

Every case of :data:`tests.hostile.CASES` is submitted through the SDK, next to records only a
hostile producer would publish (doc_ids with path traversal or control characters, a source
object that is not in the store, a source URI that isn't ``s3://``, a wrong checksum, a
declared size over the limit). Each ends in exactly one terminal event with the reason code the
case owes the user, no agent dies or restarts, no object lands outside the key layout of
docs/architecture.md ("Storage"), and every agent's peak RSS stays under a stated bound.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ocrstream.client import OcrClient
from ocrstream.errors import InvalidDocIdError
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import (
    DocumentStatus,
    PageImage,
    PageResult,
    PageStatus,
    PageTask,
    ScanSource,
    ScanSubmitted,
    utc_now,
)
from ocrstream.settings import KafkaSettings, LimitsSettings, S3Settings
from ocrstream.storage import ObjectStore
from ocrstream.streams import topics as t
from tests import hostile, samples
from tests.integration import harness
from tests.integration.harness import Pipeline, Witness, assert_exactly_once, produce_raw
from tests.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Peak resident memory (VmHWM) each agent may reach over the whole run. The bombs declare
# 1.2-gigapixel pages (3.6 GB as RGB) and a 200-inch vector page would be 3.6 gigapixels at
# 300 DPI: nothing may decode or render them whole. Pages that pass the limits are rendered at
# most at 80 megapixels (240 MB as BGR), and the worker holds at most
# WorkerSettings.max_inflight_pixels of them (320 megapixels by default): its bound is the
# models and the engine (~0.6 GB), plus ~4 bytes per budgeted pixel (the BGR images and their
# decoding), plus a margin. Without that budget the ten huge pages below took the worker to
# 3.8 GB — and a document of N such pages to N x 240 MB.
PEAK_RSS_MIB = {"splitter": 700, "worker": 3000, "assembler": 400}

BAD_DOC_IDS = (
    "../../etc/passwd",
    "..",
    "a/b",
    "back\\slash",
    "nul\x00byte",
    "new\nline",
    "esc\x1b[31mred",
    "tab\tid",
    "x" * 129,
    "",
    "naïve",
)

Factory = Callable[..., tuple[Pipeline, Witness]]
HUGE_PAGES = 10


def huge_pages_pdf(pages: int = HUGE_PAGES) -> bytes:
    """Vector pages of 200 x 200 inches: under a kilobyte each, each rendered at the
    80-megapixel page limit (240 MB once decoded as BGR) — the worker must not hold them all."""
    import pymupdf

    doc = pymupdf.open()
    for p in range(pages):
        page = doc.new_page(width=14_400, height=14_400)
        page.insert_text((72, 400), f"Huge page {p + 1}", fontsize=300)
    data: bytes = doc.tobytes()
    doc.close()
    return data


@pytest.fixture
def stack(topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path) -> Iterator[Factory]:
    with harness.stack(topics, object_store.bucket, tmp_path) as make:
        yield make


def _scan(doc_id: str, data: bytes | None = None, **changes: object) -> ScanSubmitted:
    data = samples.scanned_pdf(1, dpi=100, seed=1).data if data is None else data
    fields: dict[str, object] = {
        "doc_id": doc_id, "source": ScanSource(data=data), "content_type": "application/pdf",
        "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data),
        "submitted_at": utc_now(), "outputs": ("json", "txt"),
    }  # fmt: skip
    fields.update(changes)
    return ScanSubmitted(**fields)  # type: ignore[arg-type]


def test_the_sdk_refuses_bad_doc_ids(topics: KafkaSettings, s3_settings: S3Settings) -> None:
    """Before anything is uploaded or published, with a message that names the problem and
    shows the id with its control characters escaped."""
    client = OcrClient(topics, s3_settings)
    for doc_id in BAD_DOC_IDS:
        with pytest.raises(InvalidDocIdError) as info:
            client.submit(b"%PDF-1.7 whatever", doc_id=doc_id)
        message = str(info.value)
        assert "doc_id" in message
        assert message.isprintable(), ascii(message)
        assert info.value.code == "invalid_doc_id"


def test_hostile_inputs_end_with_their_reason_codes(
    stack: Factory,
    topics: KafkaSettings,
    s3_settings: S3Settings,
    object_store: ObjectStore,
) -> None:
    pipeline, witness = stack(engine="real", env={
        "OCRSTREAM_WORKER_MAX_BATCH": "4",
        "OCRSTREAM_WORKER_MAX_WAIT_MS": "100",
        "OCRSTREAM_OCR_THREADS": "2",
        # One page per detector call: the engine's own working set (a batch of 4 pages at the
        # detector's 1.8-megapixel budget costs ~1.5 GB of activations on CPU) stays small,
        # so the bound below is about what the input can make the worker hold.
        "OCRSTREAM_OCR_DET_BATCH": "1",
    })  # fmt: skip
    codec = Codec(topics)
    client = OcrClient(topics, s3_settings)
    pipeline.start()
    pids = {name: agent.pid for name, agent in pipeline.agents.items()}

    # Every catalogued case, through the SDK (the big ones are uploaded, the rest inline).
    ids = {}
    for case in hostile.CASES:
        ids[case.name] = client.submit(case.data, doc_id=f"hostile-{case.name}",
                                       content_type=case.content_type,
                                       outputs=("json", "txt"))  # fmt: skip

    huge = client.submit(huge_pages_pdf(), doc_id="hostile-huge-pages", outputs=("json", "txt"))

    # What only a hostile producer publishes: the SDK would refuse these.
    limit = LimitsSettings().max_file_bytes
    missing_uri = object_store.uri(object_store.keys.source("never-uploaded", "pdf"))
    raw: dict[str, tuple[ScanSubmitted, str]] = {
        "source_missing": (_scan("raw-source-missing", source=ScanSource(uri=missing_uri)),
                           "source_missing"),
        "http_uri": (_scan("raw-http-uri", source=ScanSource(uri="http://169.254.169.254/x")),
                     "invalid_source_uri"),
        "traversal_uri": (_scan("raw-traversal-uri",
                                source=ScanSource(uri="s3://../../etc/passwd")),
                          "invalid_source_uri"),
        "no_source": (_scan("raw-no-source", source=ScanSource()), "source_missing"),
        "other_bucket": (_scan("raw-other-bucket",
                               source=ScanSource(uri="s3://someone-elses-bucket/payroll.pdf")),
                         "source_not_allowed"),
        "checksum": (_scan("raw-checksum", sha256="0" * 64), "checksum_mismatch"),
        "declared_size": (_scan("raw-declared-size", size_bytes=limit + 1), "file_too_large"),
        "traversal_id": (_scan("../../etc/passwd"), "invalid_doc_id"),
        "control_id": (_scan("esc\x1b[31mred\r\n"), "invalid_doc_id"),
        "long_id": (_scan("y" * 300), "invalid_doc_id"),
    }  # fmt: skip
    scans_topic = topics.topic(t.SCANS)
    produce_raw(topics, t.SCANS, [(scan.doc_id.encode(),
                                   codec.encode(scan, scans_topic), {})
                                  for scan, _ in raw.values()])  # fmt: skip
    # A page task and a page result for a doc_id that can't name an object: the worker reads
    # the task (its result carries the bad id on), the assembler dead-letters both results.
    bad_id = "../escape"
    produce_raw(topics, t.PAGES, [(b"t", codec.encode(
        PageTask(doc_id=bad_id, page_no=1, page_count=1,
                 image=PageImage("png", samples.encode_image(samples.render_lines(["x"], dpi=30),
                                                             "png")),
                 width=255, height=330, outputs=("json",)),
        topics.topic(t.PAGES)), {})])  # fmt: skip
    # And a result claiming a billion pages: the assembler would walk them all to finish it.
    results_topic = topics.topic(t.PAGE_RESULTS)
    produce_raw(topics, t.PAGE_RESULTS, [
        (bad_id.encode(), codec.encode(PageResult(doc_id=bad_id, page_no=1, page_count=1,
                                                  status=PageStatus.OK), results_topic), {}),
        (b"billion", codec.encode(PageResult(doc_id="billion", page_no=5, page_count=10**9,
                                             status=PageStatus.OK), results_topic), {}),
    ])  # fmt: skip

    expected_ids = set(ids.values()) | {scan.doc_id for scan, _ in raw.values()} | {huge}
    took = witness.wait_done(expected_ids, 420, pipeline)
    wait_until(lambda: len(witness.dead_letters()) >= 3, 60, "three dead letters",
               interval_s=0.5)  # fmt: skip
    witness.quiet(5)
    peaks = {name: pipeline.peak_rss_mib(name) for name in pipeline.agents}
    print(f"hostile run: all terminal after {took:.0f}s; peak RSS MiB {peaks}")

    events = assert_exactly_once(witness, expected_ids)
    for case in hostile.CASES:
        event = events[ids[case.name]]
        want_status, want_code = _expected(case)
        assert event.status is want_status, (case.name, event.status, event.error)
        assert (event.error.code if event.error else None) == want_code, (case.name, event.error)
        if case.doc_error is None:
            assert event.page_count == case.page_count, (case.name, event)
            assert list(event.failed_pages) == sorted(case.page_errors), (case.name, event)
            key = object_store.keys.document(ids[case.name], "json")
            body = json.loads(object_store.get_bytes(key))
            codes = {p["page_no"]: (p.get("error") or {}).get("code") for p in body["pages"]
                     if p["status"] == "failed"}  # fmt: skip
            assert codes == dict(case.page_errors), (case.name, codes)
        else:
            assert not event.outputs, (case.name, event.outputs)
    assert events[huge].status is DocumentStatus.COMPLETED, events[huge]
    assert events[huge].pages_ok == HUGE_PAGES
    for name, (scan, code) in raw.items():
        event = events[scan.doc_id]
        assert event.status is DocumentStatus.FAILED, (name, event)
        assert event.error is not None
        assert event.error.code == code, (name, event.error)
        assert not event.outputs

    letters = witness.dead_letters()
    assert sorted((d.stage, d.error_code) for d in letters) == [
        ("assembler", "invalid_doc_id"), ("assembler", "invalid_doc_id"),
        ("assembler", "invalid_page_count")], letters  # fmt: skip
    assert {d.topic for d in letters} == {topics.topic(t.PAGE_RESULTS)}

    # Nothing was written outside the layout, whatever the ids said.
    layout = re.compile(r"(scans|pages|documents)/[A-Za-z0-9._-]{1,128}/[a-z0-9.]+")
    keys = [o.key for o in object_store.list_objects()]
    assert keys
    assert all(layout.fullmatch(k) and ".." not in k for k in keys), keys

    # No agent died or was restarted; memory stayed bounded.
    pipeline.assert_alive()
    assert {name: agent.pid for name, agent in pipeline.agents.items()} == pids
    for name, peak in peaks.items():
        assert peak < PEAK_RSS_MIB[name], f"{name} peaked at {peak:.0f} MiB"


def _expected(case: hostile.Case) -> tuple[DocumentStatus, str | None]:
    if case.doc_error is not None:
        return DocumentStatus.FAILED, case.doc_error
    if not case.page_errors:
        return DocumentStatus.COMPLETED, None
    codes = set(case.page_errors.values())
    code = codes.pop() if len(codes) == 1 else "pages_failed"
    if len(case.page_errors) == case.page_count:
        return DocumentStatus.FAILED, code
    return DocumentStatus.PARTIAL, code
