"""``ocrstream ocr``: images and PDFs to document.json or text, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pymupdf
import pytest
from click.testing import CliRunner

from ocrstream.cli import main
from ocrstream.errors import FatalError
from ocrstream.settings import OcrSettings
from tests.fakes.engines import cer, render_text_page, scan_noise

LINES = ["Quarterly report 2024", "Revenue grew by 12.5 percent"]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, ocr_engine) -> CliRunner:
    monkeypatch.setattr("ocrstream.cli.ocr.make_engine", lambda settings: ocr_engine)
    return CliRunner()


@pytest.fixture
def scan(tmp_path: Path) -> Path:
    path = tmp_path / "scan.jpg"
    path.write_bytes(scan_noise(render_text_page(LINES), angle=0.5))
    return path


@pytest.fixture
def pdf(tmp_path: Path, scan: Path) -> Path:
    """Page 1: real text (a text layer); page 2: one full-page scanned image."""
    doc = pymupdf.open()
    page = doc.new_page(width=360, height=120)
    page.insert_text((24, 40), "Born digital text layer 4711", fontsize=14)
    image = cv2.imread(str(scan))
    h, w = image.shape[:2]
    page = doc.new_page(width=w * 72 / 300, height=h * 72 / 300)
    page.insert_image(page.rect, filename=str(scan))
    path = tmp_path / "mixed.pdf"
    doc.save(path)
    doc.close()
    return path


def test_image_to_json_on_stdout(cli: CliRunner, scan: Path):
    result = cli.invoke(main, ["--log-level", "WARNING", "ocr", str(scan)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["doc_id"] == "scan"
    assert doc["status"] == "completed"
    assert doc["page_count"] == 1
    assert set(doc["engine"]) == {"backend", "model", "version"}
    (page,) = doc["pages"]
    assert page["page_no"] == 1
    assert page["status"] == "ok"
    assert page["rotation"] == 0
    text = "\n".join(line["text"] for line in page["lines"])
    assert cer(text, "\n".join(LINES)) < 0.05
    line = page["lines"][0]
    assert set(line) == {"text", "confidence", "polygon"}
    assert len(line["polygon"]) == 4


def test_pdf_with_text_layer_and_scan_to_files(cli: CliRunner, pdf: Path, tmp_path: Path):
    out = tmp_path / "out"
    result = cli.invoke(main, ["ocr", str(pdf), "--skip-text", "--output", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "mixed.json").read_text())
    assert doc["status"] == "completed"
    assert doc["page_count"] == 2
    first, second = doc["pages"]
    assert [ln["text"] for ln in first["lines"]] == ["Born digital text layer 4711"]
    assert first["lines"][0]["confidence"] == 1.0  # from the text layer, not OCR
    assert first["width"] == 1500  # pixels at 300 DPI
    # the scanned page is used at its own resolution, not re-rendered
    assert (second["width"], second["height"]) == cv2.imread(str(pdf.parent / "scan.jpg")).shape[
        1::-1
    ]
    assert cer("\n".join(ln["text"] for ln in second["lines"]), "\n".join(LINES)) < 0.05

    result = cli.invoke(main, ["ocr", str(pdf), "--format", "text", "-o", str(out)])
    assert result.exit_code == 0
    text = (out / "mixed.txt").read_text()
    assert text.count("\f") == 1
    assert "4711" in text
    assert "Quarterly" in text
    # txt, as `ocrstream submit --output` names it, is the same output
    result = cli.invoke(main, ["ocr", str(pdf), "--format", "txt", "-o", str(out / "again")])
    assert result.exit_code == 0, result.output
    assert (out / "again" / "mixed.txt").read_text() == text


def test_a_pdf_becomes_itself_with_the_text_of_its_scanned_page(
    cli: CliRunner, pdf: Path, tmp_path: Path
):
    """``--format pdf``: the input PDF comes back page for page — its born-digital page as it
    was (its text once), its scanned page with the same image and the recognised text."""
    out = tmp_path / "out"
    result = cli.invoke(main, ["ocr", str(pdf), "--skip-text", "--format", "pdf", "-o", str(out)])
    assert result.exit_code == 0, result.output
    with pymupdf.open(pdf) as before, pymupdf.open(out / "mixed.pdf") as after:
        assert after.page_count == 2
        first, second = after
        assert first.get_text().split() == before[0].get_text().split()  # not read twice
        (xref, *_), (old, *_) = second.get_images()[0], before[1].get_images()[0]
        assert after.xref_stream_raw(xref) == before.xref_stream_raw(old)  # not re-encoded
        assert cer(second.get_text().strip(), "\n".join(LINES)) < 0.05


def test_an_image_becomes_a_searchable_pdf_on_stdout(cli: CliRunner, scan: Path, tmp_path: Path):
    result = cli.invoke(main, ["ocr", str(scan), "--format", "pdf"])
    assert result.exit_code == 0, result.stderr
    with pymupdf.open(stream=result.stdout_bytes) as pdf:
        assert pdf.page_count == 1
        assert cer(pdf[0].get_text().strip(), "\n".join(LINES)) < 0.05
    two = cli.invoke(main, ["ocr", str(scan), str(scan), "--format", "pdf"])
    assert two.exit_code == 2
    assert "needs --output" in two.stderr


def test_a_bad_input_fails_alone_with_a_reason(cli: CliRunner, scan: Path, tmp_path: Path):
    bad = tmp_path / "notes.png"
    bad.write_bytes(b"this is not a png")
    result = cli.invoke(main, ["ocr", str(scan), str(bad), "--format", "json"])
    assert result.exit_code == 1
    assert "notes.png" in result.stderr
    assert "unsupported_type" in result.stderr
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert [d["status"] for d in docs] == ["completed", "failed"]
    assert docs[1]["error"]["code"] == "unsupported_type"
    assert docs[1]["pages"] == []


def test_engine_that_cannot_start_exits_2(monkeypatch: pytest.MonkeyPatch, scan: Path):
    def broken(settings):
        raise FatalError("no CUDA device", code="backend_unavailable")

    monkeypatch.setattr("ocrstream.cli.ocr.make_engine", broken)
    result = CliRunner().invoke(main, ["ocr", "--device", "cuda", str(scan)])
    assert result.exit_code == 2
    assert "backend_unavailable" in result.stderr


def test_a_page_that_breaks_the_engine_fails_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Pages of both inputs share a batch; the engine crashes on one page: that input fails
    with the reason, the other is read."""
    from tests.fakes.engines import CrashingEngine

    engine = CrashingEngine(crash_on=lambda img: img.shape[1] == 130)
    monkeypatch.setattr("ocrstream.cli.ocr.make_engine", lambda settings: engine)
    monkeypatch.setattr("ocrstream.cli.ocr.BATCH_WAIT_S", 60.0)  # a batch waits to be full
    paths = []
    for name, width in (("good", 120), ("bad", 130)):
        path = tmp_path / f"{name}.jpg"
        path.write_bytes(cv2.imencode(".jpg", np.full((40, width, 3), 255, np.uint8))[1])
        paths.append(str(path))
    result = CliRunner().invoke(main, ["ocr", *paths, "--batch", "2"])
    assert result.exit_code == 1
    good, bad = (json.loads(line) for line in result.stdout.splitlines())
    assert good["status"] == "completed"
    assert [ln["text"] for ln in good["pages"][0]["lines"]] == ["page 120x40"]
    assert bad["status"] == "failed"
    assert bad["pages"][0]["error"]["code"] == "engine_error"
    assert "bad.jpg: failed" in result.stderr
    assert engine.batches[0] == 2  # one batch across both files, then halves


def test_layout_mode_gives_blocks_in_json_and_structure_in_markdown(
    cli: CliRunner, tmp_path: Path
) -> None:
    from tests.samples import two_column_scan

    sample = two_column_scan()
    path = tmp_path / "paper.png"
    path.write_bytes(sample.data)
    as_json = cli.invoke(main, ["--log-level", "WARNING", "ocr", "--mode", "layout", str(path)])
    assert as_json.exit_code == 0, as_json.output
    (page,) = json.loads(as_json.stdout)["pages"]
    assert [b["type"] for b in page["blocks"]] == [
        "title",
        "text",
        "text",
        "text",
        "text",
        "footer",
    ]
    out = tmp_path / "out"
    as_md = cli.invoke(main, ["ocr", "--mode", "layout", "--format", "markdown", "-o", str(out),
                              str(path)])  # fmt: skip
    assert as_md.exit_code == 0, as_md.output
    md = (out / "paper.md").read_text()
    assert md.startswith(f"<!-- page 1 -->\n\n# {sample.title}\n\n")
    assert [line.split()[0] for line in md.split("\n\n")[2:]] == [
        "Alpha", "Beta", "Gamma", "Delta",
    ]  # fmt: skip
    assert sample.paragraphs[2] in md  # "sum-" + "mer" re-flowed to "summer"
    text_mode = cli.invoke(main, ["ocr", "--format", "json", str(path)])
    assert "blocks" not in json.loads(text_mode.stdout)["pages"][0]


def test_layout_mode_on_a_text_layer_page_gives_blocks_without_ocr(cli: CliRunner, pdf: Path):
    result = cli.invoke(main, ["ocr", "--skip-text", "--mode", "layout", str(pdf)])
    assert result.exit_code == 0, result.output
    pages = json.loads(result.stdout)["pages"]
    assert [(b["type"], b["text"]) for b in pages[0]["blocks"]] == [
        ("text", "Born digital text layer 4711")
    ]
    assert pages[1]["blocks"]  # the scanned page went through the engine and the model


def test_regions_read_only_the_named_boxes_into_fields(cli: CliRunner, tmp_path: Path) -> None:
    from tests.samples import receipt

    sample = receipt(seed=4)
    path = tmp_path / "receipt.png"
    path.write_bytes(sample.data)
    spec = tmp_path / "fields.json"
    spec.write_text(json.dumps(list(sample.regions)))
    result = cli.invoke(main, ["--log-level", "WARNING", "ocr", str(path), "--regions", str(spec)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert {name: f["text"] for name, f in doc["fields"].items()} == sample.fields
    assert len(doc["pages"][0]["lines"]) == 3
    spec.write_text(json.dumps({"template": "nope"}))
    bad = cli.invoke(main, ["ocr", str(path), "--regions", str(spec)])
    assert bad.exit_code == 2
    assert "unknown regions template 'nope'" in bad.output


def test_layout_markdown_to_a_folder_writes_the_figure_crops_it_links(
    cli: CliRunner, tmp_path: Path
) -> None:
    from tests.samples import structured_pdf

    path = tmp_path / "report.pdf"
    path.write_bytes(structured_pdf().data)
    out = tmp_path / "out"
    args = ["--mode", "layout", "--skip-text", "--format", "markdown", "--dpi", "150"]
    result = cli.invoke(main, ["ocr", str(path), *args, "--output", str(out)])
    assert result.exit_code == 0, result.output
    md = (out / "report.md").read_text()
    assert "![Figure 1](report.figures/p2-1.png)" in md.split("\n")
    assert '<td rowspan="2">Region</td>' in md
    crop = cv2.imread(str(out / "report.figures" / "p2-1.png"))
    assert crop is not None
    assert crop.shape[1] > 300  # the picture, at 150 DPI


@pytest.fixture
def engine_settings(monkeypatch: pytest.MonkeyPatch, ocr_engine) -> list[OcrSettings]:
    """The settings each ``ocrstream ocr`` run builds its engine with (the real engine)."""
    seen: list[OcrSettings] = []

    def engine(settings: OcrSettings):  # type: ignore[no-untyped-def]
        seen.append(settings)
        return ocr_engine

    monkeypatch.setattr("ocrstream.cli.ocr.make_engine", engine)
    return seen


def test_one_page_skips_the_det_warm_up_that_more_pages_pay_for(
    monkeypatch: pytest.MonkeyPatch,
    engine_settings: list[OcrSettings],
    scan: Path,
    pdf: Path,
    tmp_path: Path,
) -> None:
    monkeypatch.delenv("OCRSTREAM_OCR_DET_WARMUP", raising=False)
    other = tmp_path / "other.jpg"
    other.write_bytes(scan.read_bytes())
    for args in ([str(scan)], [str(scan), str(other)], [str(pdf)]):  # 1 page, 2 files, 2 pages
        assert CliRunner().invoke(main, ["ocr", *args]).exit_code == 0
    monkeypatch.setenv("OCRSTREAM_OCR_DET_WARMUP", "true")  # said by the user: kept
    assert CliRunner().invoke(main, ["ocr", str(scan)]).exit_code == 0
    assert [s.det_warmup for s in engine_settings] == [False, True, True, True]


def test_a_short_job_runs_auto_without_measuring_and_a_long_one_measures(
    monkeypatch: pytest.MonkeyPatch,
    engine_settings: list[OcrSettings],
    scan: Path,
    tmp_path: Path,
) -> None:
    """``auto``'s measurement costs as much as reading tens of pages: a shorter job skips it
    (backends.choice.PROVISIONAL), a job of AUTO_MEASURE_PAGES pages or more measures."""
    from ocrstream.cli.ocr import AUTO_MEASURE_PAGES

    monkeypatch.delenv("OCRSTREAM_OCR_AUTO_MEASURE", raising=False)
    long_pdf = tmp_path / "long.pdf"
    doc = pymupdf.open()
    for _ in range(AUTO_MEASURE_PAGES):
        doc.new_page(width=200, height=100).insert_text((20, 50), "page", fontsize=12)
    doc.save(long_pdf)
    doc.close()
    for args in ([str(scan)], [str(long_pdf)]):
        assert CliRunner().invoke(main, ["ocr", "--skip-text", *args]).exit_code == 0
    monkeypatch.setenv("OCRSTREAM_OCR_AUTO_MEASURE", "true")  # said by the user: kept
    assert CliRunner().invoke(main, ["ocr", str(scan)]).exit_code == 0
    assert [s.auto_measure for s in engine_settings] == [False, True, True]


def test_the_command_as_a_process_ends_with_everything_written(scan: Path, tmp_path: Path):
    """As a process, ``ocrstream ocr`` ends without tearing its engine down (``cli.entry``):
    its text on stdout, its files and its exit status must all still be there."""
    import os
    import subprocess
    import sys

    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    env = {**os.environ, "OCRSTREAM_OCR_ENGINE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTHONUNBUFFERED", None)  # stdout to a pipe, block-buffered as for most users
    base = [sys.executable, "-m", "ocrstream", "ocr", "--model", "ppocrv6-tiny", "--threads", "1"]

    run = subprocess.run(
        [*base, "--format", "text", str(scan), str(broken)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr  # a document failed
    assert f"{broken}: failed" in run.stderr
    assert cer(run.stdout, "\n".join(LINES)) < 0.1, run.stdout

    out = tmp_path / "out"
    run = subprocess.run(
        [*base, "--output", str(out), str(scan)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    doc = json.loads((out / "scan.json").read_text())
    assert cer("\n".join(ln["text"] for ln in doc["pages"][0]["lines"]), "\n".join(LINES)) < 0.1


def test_a_page_scanned_sideways_is_read_upright(tmp_path: Path) -> None:
    """A page scanned a quarter turn off is found from its lines and read upright by default,
    and with --fix-orientation by the orientation model; either way the result says by how
    much it was turned. --no-fix-orientation reads it as it came: noise (the real engine)."""
    page = render_text_page(LINES, width_in=6.0)
    sideways = tmp_path / "sideways.png"
    cv2.imwrite(str(sideways), np.ascontiguousarray(np.rot90(page)))  # a quarter turn left

    def read(*flags: str) -> dict:  # type: ignore[type-arg]
        result = CliRunner().invoke(main, ["ocr", *flags, str(sideways)])
        assert result.exit_code == 0, result.output
        doc: dict = json.loads(result.stdout)  # type: ignore[type-arg]
        return doc["pages"][0]

    for flags in ((), ("--fix-orientation",)):
        fixed = read(*flags)
        assert fixed["rotation"] == 90, flags
        assert (fixed["height"], fixed["width"]) == page.shape[:2]
        assert cer("\n".join(ln["text"] for ln in fixed["lines"]), "\n".join(LINES)) < 0.05
    as_is = read("--no-fix-orientation")
    assert as_is["rotation"] == 0
    assert cer("\n".join(ln["text"] for ln in as_is["lines"]), "\n".join(LINES)) > 0.5
