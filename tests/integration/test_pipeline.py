"""The whole pipeline on the real local Kafka and S3 store, with the agents as processes.

Five generated multi-page scans with known text and two files that cannot be read go in; out
come five completed documents whose text (document.txt and the searchable PDF's text layer,
read back with PyMuPDF) is the known text within a character error rate bound, two failed
documents with their reason codes, and exactly one terminal event per document — also for a
scan submitted twice and with a record that is not Avro dead-lettered on the way.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pymupdf
import pytest
from confluent_kafka import Producer

from ocrstream.bench.cer import levenshtein, normalise
from ocrstream.client import OcrClient
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import DeadLetter, DocumentEvent, DocumentStatus
from ocrstream.settings import KafkaSettings, S3Settings, SupervisorSettings
from ocrstream.storage import ObjectStore
from ocrstream.streams import topics as t
from ocrstream.streams.supervisor import AgentSpec, Supervisor
from tests import hostile, samples
from tests.integration.harness import delete_internal_topics, read_all, wait_all_consumed

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

MAX_CER = 0.03
BAD = {"encrypted.pdf": (hostile.encrypted_pdf, "encrypted_pdf"),
       "not-a-pdf.pdf": (hostile.not_a_pdf, "unsupported_type")}  # fmt: skip


def cer(got: str, want: str) -> float:
    ref = normalise(want)
    return levenshtein(normalise(got), ref) / max(1, len(ref))


@pytest.fixture
def pipeline(
    topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path, metrics_ports: None
) -> Iterator[Supervisor]:
    """Splitter, one OCR worker and the assembler as child processes on this test's topics and
    bucket; small claim-check threshold so that big pages travel through the store."""
    env = {
        **os.environ,
        "OCRSTREAM_TOPIC_PREFIX": topics.topic_prefix,
        "OCRSTREAM_S3_BUCKET": object_store.bucket,
        "OCRSTREAM_OCR_THREADS": "2",
        "OCRSTREAM_SPLITTER_CLAIM_CHECK_BYTES": "300000",
        "OCRSTREAM_SPLITTER_DPI": "150",
        "OCRSTREAM_ASSEMBLER_DEADLINE_S": "240",
        "OCRSTREAM_WORKER_MAX_WAIT_MS": "100",
    }
    specs = [AgentSpec(name, (name, "--metrics-port", "0"))
             for name in ("splitter", "ocr-worker", "assembler")]  # fmt: skip
    log = open(tmp_path / "agents.log", "wb")  # noqa: SIM115
    supervisor = Supervisor(specs, SupervisorSettings(stop_timeout_s=30), env=env,
                            stdout=log.fileno())  # fmt: skip
    thread = threading.Thread(target=supervisor.run, daemon=True)
    thread.start()
    try:
        yield supervisor
    finally:
        supervisor.stop()
        thread.join(60)
        log.close()
        print((tmp_path / "agents.log").read_text(errors="replace")[-6000:])
        delete_internal_topics(topics)


def test_scans_become_searchable_documents(
    pipeline: Supervisor, topics: KafkaSettings, s3_settings: S3Settings, tmp_path: Path
) -> None:
    kafka = topics
    codec = Codec(kafka)
    client = OcrClient(kafka, s3_settings)
    docs = {
        f"scan-{i}.pdf": samples.scanned_pdf(
            pages=2 + i % 2, lines_per_page=5, dpi=150 + 50 * (i == 4), seed=40 + i
        )
        for i in range(5)
    }
    ids: dict[str, str] = {}
    for name, sample in docs.items():
        ids[name] = client.submit(sample.data, doc_id=Path(name).stem)
    for name, (build, _) in BAD.items():
        ids[name] = client.submit(build(), doc_id=Path(name).stem)
    # The same scan again, and a record that is not Avro at all.
    client.submit(docs["scan-0.pdf"].data, doc_id="scan-0")
    garbage = Producer(kafka.librdkafka())
    garbage.produce(kafka.topic(t.SCANS), key=b"junk", value=b"\x00not avro", headers={"h": b"1"})
    garbage.flush(10)

    events = client.wait_many(ids.values(), timeout_s=200)
    assert set(events) == set(ids.values()), (
        f"no terminal event for {set(ids.values()) - set(events)}"
    )

    for name, sample in docs.items():
        event = events[ids[name]]
        assert event.status is DocumentStatus.COMPLETED, (name, event.error)
        assert event.page_count == event.pages_ok == len(sample.lines)
        assert event.source_sha256
        assert set(event.outputs) == {"json", "txt", "pdf"}
        out = client.download(ids[name], tmp_path / Path(name).stem)
        want = "\n".join("\n".join(page) for page in sample.lines)
        text = out["txt"].read_text()
        assert text.count("\f") == len(sample.lines)
        assert cer(text, want) <= MAX_CER, (name, cer(text, want), text)
        with pymupdf.open(out["pdf"]) as pdf:
            assert pdf.page_count == len(sample.lines)
            pdf_pages = [page.get_text() for page in pdf]
        for page_text, lines in zip(pdf_pages, sample.lines, strict=True):
            assert cer(page_text, "\n".join(lines)) <= MAX_CER, (name, page_text)
        assert pdf_pages[0].strip()
        assert pdf_pages[0].split()[0] in text

    for name, (_, code) in BAD.items():
        event = events[ids[name]]
        assert event.status is DocumentStatus.FAILED
        assert event.error is not None
        assert event.error.code == code, (name, event.error)
        assert not event.outputs

    # Exactly one terminal event per document, the duplicate submission included: counted
    # once every agent has committed all of its input, so that a second event would be there.
    wait_all_consumed(kafka)
    terminal = Counter(
        r.doc_id for r in read_all(kafka, t.DOCUMENTS, codec) if isinstance(r, DocumentEvent)
    )
    assert terminal == Counter(ids.values())
    letters = [r for r in read_all(kafka, t.DLQ, codec) if isinstance(r, DeadLetter)]
    assert [(d.topic, d.key, d.value, d.stage) for d in letters] == [
        (kafka.topic(t.SCANS), b"junk", b"\x00not avro", "splitter")
    ]
    assert letters[0].error_code == "unknown_schema"
    assert letters[0].headers == {"h": b"1"}
    assert all(p.poll() is None for p in _procs(pipeline)), "an agent died"


def _procs(supervisor: Supervisor) -> list[subprocess.Popen[bytes]]:
    return [c.proc for c in supervisor.children if c.proc is not None]
