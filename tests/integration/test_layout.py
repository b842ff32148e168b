"""Parse mode ``layout`` on the real stack: a scanned two-column page comes back with its
structure in document.json and document.md; the same page in text mode is unchanged; the page
born digital gets the same structure from its own text, without OCR."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ocrstream.client import OcrClient
from ocrstream.settings import KafkaSettings, S3Settings
from ocrstream.storage import ObjectStore
from tests import samples
from tests.integration import harness
from tests.integration.harness import Pipeline, Witness, assert_exactly_once

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Factory = Callable[..., tuple[Pipeline, Witness]]


@pytest.fixture
def stack(topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path) -> Iterator[Factory]:
    with harness.stack(topics, object_store.bucket, tmp_path) as make:
        yield make


def test_a_layout_scan_comes_back_as_markdown_in_reading_order_and_text_mode_is_unchanged(
    stack: Factory, topics: KafkaSettings, s3_settings: S3Settings, tmp_path: Path
) -> None:
    pipeline, witness = stack(engine="real", env={"OCRSTREAM_OCR_THREADS": "2"})
    pipeline.start()
    sample = samples.two_column_scan()
    client = OcrClient(topics, s3_settings)
    layout_id = client.submit(sample.data, mode="layout")
    text_id = client.submit(sample.data)  # the same bytes in text mode: another document
    assert layout_id != text_id
    born_digital = samples.two_column_pdf()
    digital_id = client.submit(born_digital.data, mode="layout", text_layer=True)
    witness.wait_done([layout_id, text_id, digital_id], timeout_s=240, pipeline=pipeline)
    events = assert_exactly_once(witness, [layout_id, text_id, digital_id])
    assert set(events[layout_id].outputs) == {"json", "txt", "pdf", "md"}
    assert set(events[text_id].outputs) == {"json", "txt", "pdf"}

    # A subscriber has the page's structure the moment it is ready.
    result = next(r for r in witness.page_results() if r.doc_id == layout_id)
    assert result.mode == "layout"
    assert result.blocks is not None
    assert result.blocks[0].type == "title"
    assert result.blocks[0].text == sample.title

    # The layout step's time is on the worker's /metrics (one page went through the model).
    assert pipeline.metric("worker", "ocrstream_stage_seconds_count", stage="layout") == 1

    got = client.download(layout_id, tmp_path / "layout")
    assert set(got) == {"json", "txt", "pdf", "md"}
    md = got["md"].read_text()
    paragraphs = md.split("\n\n")
    assert paragraphs[0] == "<!-- page 1 -->"
    assert paragraphs[1] == f"# {sample.title}"
    assert paragraphs[2:] == [f"{p}\n" if p == sample.paragraphs[-1] else p
                              for p in sample.paragraphs]  # fmt: skip
    assert sample.footer not in md.split("\n")  # the page number is not in the body

    doc = json.loads(got["json"].read_text())
    (page,) = doc["pages"]
    assert [b["type"] for b in page["blocks"]] == ["title", "text", "text", "text", "text",
                                                   "footer"]  # fmt: skip
    assert page["lines"][page["blocks"][0]["lines"][0]]["text"] == sample.title

    plain = client.download(text_id, tmp_path / "text")
    assert set(plain) == {"json", "txt", "pdf"}
    text_doc = json.loads(plain["json"].read_text())
    assert "blocks" not in text_doc["pages"][0]
    assert [line["text"] for line in text_doc["pages"][0]["lines"]] == [
        line["text"] for line in page["lines"]
    ]
    assert plain["txt"].read_text() == got["txt"].read_text()

    # A born-digital PDF answered from its own text: the same structure, without OCR.
    digital = client.download(digital_id, tmp_path / "digital")
    digital_doc = json.loads(digital["json"].read_text())
    assert digital_doc["engine"]["backend"] == "text-layer"
    assert digital["md"].read_text().split("\n\n")[1:] == [
        f"# {born_digital.title}",
        *born_digital.paragraphs[:-1],
        f"{born_digital.paragraphs[-1]}\n",
    ]
    client.close()
