"""Parse mode ``layout`` on the real stack: a scanned two-column page comes back with its
structure in document.json and document.md; the same page in text mode is unchanged; the page
born digital gets the same structure from its own text, without OCR."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import cv2
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


def _html_cells(html: str) -> list[tuple[int, str, str]]:
    """(row, attributes, text) of each <td> of an HTML table, rows counted from 0."""
    out = []
    for r, row in enumerate(re.findall(r"<tr>(.*?)</tr>", html)):
        out += [
            (r, attrs.strip(), text) for attrs, text in re.findall(r"<td([^>]*)>(.*?)</td>", row)
        ]
    return out


def test_ocrstream_run_layout_reads_a_scanned_report_into_markdown_with_its_spanning_table(
    stack: Factory, topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path
) -> None:
    """Two pages (a title and two columns; a heading, a table with a rowspan and a colspan, a
    picture, page numbers) scanned, and born digital, through one ``ocrstream run --mode
    layout --text-layer``: the same Markdown from both, the digital one without OCR (its
    table from the PDF's rules, its figure where its image is drawn)."""
    pipeline, _ = stack(engine="real", env={"OCRSTREAM_OCR_THREADS": "2"})
    pipeline.start()
    sample = samples.structured_scan_pdf()
    scan = tmp_path / "report.pdf"
    scan.write_bytes(sample.data)
    digital = tmp_path / "digital.pdf"
    digital.write_bytes(samples.structured_pdf().data)
    env = {**os.environ, "OCRSTREAM_TOPIC_PREFIX": topics.topic_prefix,
           "OCRSTREAM_S3_BUCKET": object_store.bucket}  # fmt: skip
    out = tmp_path / "out"
    subprocess.run(
        [sys.executable, "-m", "ocrstream", "run", str(scan), str(digital), "--output", str(out),
         "--mode", "layout", "--text-layer", "--no-infra", "--no-agents", "--timeout", "300"],
        env=env, check=True, capture_output=True, timeout=360,
    )  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert [s["status"] for s in summary] == ["completed", "completed"], summary
    for name, source in (("report", "model"), ("digital", "rules")):
        _assert_structured(out / name, sample, source)
    digital_doc = json.loads((out / "digital" / "document.json").read_text())
    assert digital_doc["engine"]["backend"] == "text-layer"  # no OCR


def _assert_structured(folder: Path, sample: samples.StructuredSample, source: str) -> None:
    md = (folder / "document.md").read_text()
    parts = md.split("\n\n")

    # Page 1: the title, then the paragraphs in column order, the page number left out.
    assert parts[:6] == ["<!-- page 1 -->", f"# {sample.title}", *sample.paragraphs[:4]]
    # Page 2: the heading, the paragraph, the caption, the table as HTML (its cells span),
    # the picture as a link to its crop; no page numbers anywhere in the body.
    page2 = parts[parts.index("<!-- page 2 -->\n" if "<!-- page 2 -->\n" in parts
                              else "<!-- page 2 -->"):]  # fmt: skip
    assert page2[1].lstrip("# ") == sample.heading
    assert page2[1].startswith("#")
    assert page2[2] == sample.table_intro
    assert "Sales by region" in page2[3]
    table = page2[4]
    assert table.startswith("<table>")
    assert _html_cells(table) == [
        (0, 'rowspan="2"', "Region"), (0, 'colspan="2"', "Sales"),
        (1, "", "2024"), (1, "", "2025"),
        (2, "", "North"), (2, "", "1200"), (2, "", "1500"),
        (3, "", "South"), (3, "", "900"), (3, "", "1100"),
        (4, "", "East"), (4, "", "700"), (4, "", "800"),
    ]  # fmt: skip
    assert page2[5] == "![Figure 1](figures/p2-1.png)"
    for footer in sample.footers:
        assert footer not in md.split("\n")

    # The crop sits beside document.md, as linked: the picture, not the page.
    crop = cv2.imread(str(folder / "figures" / "p2-1.png"), cv2.IMREAD_GRAYSCALE)
    assert crop is not None
    doc = json.loads((folder / "document.json").read_text())
    page = doc["pages"][1]
    (figure,) = [b for b in page["blocks"] if b["type"] == "figure"]
    x0, y0, x1, y1 = figure["bbox"]
    assert abs(crop.shape[1] - (x1 - x0)) <= 2
    assert abs(crop.shape[0] - (y1 - y0)) <= 2
    assert 0.3 * page["width"] < crop.shape[1] < 0.8 * page["width"]

    # document.json: the table block's cells, exactly per the contract, and where from.
    (block,) = [b for b in page["blocks"] if b["type"] == "table"]
    assert block["source"] == source
    cells = {(c["row"], c["col"], c["rowspan"], c["colspan"], c["text"]) for c in block["cells"]}
    assert cells == set(sample.cells)
    assert all(len(c["bbox"]) == 4 for c in block["cells"])
    assert block["html"] == table


def test_key_field_regions_come_back_as_fields_by_boxes_or_template(
    stack: Factory, topics: KafkaSettings, s3_settings: S3Settings, tmp_path: Path
) -> None:
    """A receipt submitted with named boxes, another with a template the splitter knows: only
    those regions are read, and document.json has their fields."""
    templates = tmp_path / "templates.json"
    second = samples.receipt(seed=1)
    templates.write_text(json.dumps({"till-receipt": list(second.regions)}))
    pipeline, witness = stack(
        engine="real",
        env={"OCRSTREAM_OCR_THREADS": "2", "OCRSTREAM_SPLITTER_REGION_TEMPLATES": str(templates)},
    )
    pipeline.start()
    first = samples.receipt(seed=2)
    client = OcrClient(topics, s3_settings)
    by_boxes = client.submit(first.data, regions=list(first.regions))
    by_template = client.submit(second.data, regions={"template": "till-receipt"})
    unknown = client.submit(second.data, regions={"template": "no-such-template"})
    plain = client.submit(first.data)
    assert len({by_boxes, by_template, unknown, plain}) == 4  # regions are part of the doc_id
    witness.wait_done([by_boxes, by_template, unknown, plain], timeout_s=240, pipeline=pipeline)
    events = assert_exactly_once(witness, [by_boxes, by_template, unknown, plain])
    assert events[unknown].status.value == "failed"
    assert events[unknown].error is not None
    assert events[unknown].error.code == "invalid_regions"

    for doc_id, sample in ((by_boxes, first), (by_template, second)):
        got = client.download(doc_id, tmp_path / doc_id)
        doc = json.loads(got["json"].read_text())
        assert {name: f["text"] for name, f in doc["fields"].items()} == sample.fields
        assert all(f["page"] == 1 and f["confidence"] > 0.5 for f in doc["fields"].values())
        # Only the regions were read: three rows of text, not the receipt's fifteen.
        assert len(doc["pages"][0]["lines"]) == 3
    full = json.loads(client.download(plain, tmp_path / "plain")["json"].read_text())
    assert "fields" not in full
    assert len(full["pages"][0]["lines"]) > 10
    client.close()
