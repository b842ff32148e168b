"""Shadow workers on the real Kafka and S3 store: the splitter, a primary worker and the
assembler, plus a shadow worker that is much slower than the primary
(``OCRSTREAM_WORKER_SHADOW_DELAY_MS``: it waits after every batch) and the comparer
(``ocrstream shadow compare``). The workers are the real OCR worker around the fast fake
engine (:mod:`tests.fakes.worker`), which reads each page back as its size, so both sides read
the same text.

Every document completes while the shadow is still far behind (it delays none), no shadow
result reaches ``ocr.page-results.v1`` or a document, and once the shadow has caught up the
comparer's histograms and ``ocrstream shadow report`` count every page, in full agreement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ocrstream.client import OcrClient
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import DocumentStatus, PageResult
from ocrstream.settings import KafkaSettings, S3Settings
from ocrstream.storage import ObjectStore
from ocrstream.streams import topics as t
from tests.integration import harness
from tests.integration.harness import REPO, Agent, Pipeline, fake_doc, read_all
from tests.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SHADOW_DELAY_MS = 4000


@pytest.fixture
def stack(topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path) -> Iterator:
    with harness.stack(topics, object_store.bucket, tmp_path) as make:
        yield make


def add(pipeline: Pipeline, name: str, args: list[str], **env: str) -> None:
    base = pipeline.agents["worker"].env
    port = harness.free_port()
    pipeline.agents[name] = Agent(
        name, [sys.executable, *args, "--metrics-port", str(port)], {**base, **env},
        pipeline.log_dir / f"{name}.log", port,
    )  # fmt: skip


def test_a_slow_shadow_delays_no_document_and_its_agreement_is_measured(
    stack: object,
    topics: KafkaSettings,
    s3_settings: S3Settings,
    object_store: ObjectStore,
) -> None:
    pipeline, witness = stack(env={"OCRSTREAM_ASSEMBLER_SCAN_INTERVAL_S": "1"})  # type: ignore[operator]
    # One page per batch, each followed by a 4 s wait: 8 pages take the shadow over 30 s. Its
    # cache is off: with the same fake engine it would find every page in the primary's.
    add(pipeline, "shadow", ["-m", "tests.fakes.worker"], OCRSTREAM_WORKER_POOL="shadow",
        OCRSTREAM_WORKER_SHADOW_DELAY_MS=str(SHADOW_DELAY_MS), OCRSTREAM_WORKER_MAX_BATCH="1",
        OCRSTREAM_WORKER_CACHE="false")  # fmt: skip
    add(pipeline, "comparer", ["-m", "ocrstream", "shadow", "compare"])
    pipeline.start("splitter", "worker", "assembler", "shadow", "comparer")
    wait_until(lambda: pipeline.metric("comparer", "ocrstream_shadow_cer_count") == 0, 120,
               "the comparer's histograms, at 0")  # fmt: skip

    docs = [fake_doc(i, 2) for i in range(4)]
    pages = sum(d.page_count for d in docs)
    client = OcrClient(topics, s3_settings)
    for doc in docs:
        client.submit(doc.data, doc_id=doc.doc_id, outputs=("json",))
    witness.wait_done({d.doc_id for d in docs}, 120, pipeline)
    client.close()

    # Every document is done while the shadow has answered at most a few of its pages.
    shadow_done = pipeline.metric("shadow", "ocrstream_routing_total", pool="shadow",
                                  outcome="kept")  # fmt: skip
    assert shadow_done is not None
    assert shadow_done < pages / 2, "the shadow kept up: it is no slower than the primary here"
    terminal = witness.terminal()
    for doc in docs:
        [event] = terminal[doc.doc_id]
        assert event.status is DocumentStatus.COMPLETED

    wait_until(lambda: pipeline.metric("comparer", "ocrstream_shadow_cer_count") == pages, 240,
               "the shadow to catch up and every page to be compared")  # fmt: skip
    assert pipeline.metric("comparer", "ocrstream_shadow_cer_bucket", le="0.0") == pages
    # Shadow results are on their own topic only: no document saw one.
    codec = Codec(topics)
    shadow = [r for r in read_all(topics, t.PAGE_RESULTS_SHADOW, codec)
              if isinstance(r, PageResult)]  # fmt: skip
    assert len({(r.doc_id, r.page_no) for r in shadow}) == pages
    assert {r.pool for r in shadow} == {"shadow"}
    assert {r.pool for r in witness.page_results()} == {"primary"}
    assert all(len(terminal[d.doc_id]) == 1 for d in docs)  # still one event each

    env = {**os.environ, "PYTHONPATH": str(REPO), "OCRSTREAM_TOPIC_PREFIX": topics.topic_prefix}
    out = subprocess.run([sys.executable, "-m", "ocrstream", "shadow", "report", "--json"],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=120,
                         check=True)  # fmt: skip
    report = json.loads(out.stdout)
    assert report["pages"] == pages
    assert report["pages_differing"] == 0
    assert report["cer_mean"] == 0.0
    assert report["confidence_delta_mean"] == 0.0
