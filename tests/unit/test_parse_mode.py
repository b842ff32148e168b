"""The parse mode travels from the submission to every page record (docs/architecture.md)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ocrstream.client import content_doc_id
from ocrstream.processors.ocr.types import PageOCR
from ocrstream.processors.split_types import SplitPage
from ocrstream.schemas.records import (
    Engine,
    ErrorInfo,
    PageImage,
    PageTask,
    ScanSource,
    ScanSubmitted,
)
from ocrstream.settings import ClientSettings, ParseMode
from ocrstream.streams.ocr_batch import PreparedPage, engine_result, failed_result
from ocrstream.streams.splitter import failed_page, page_outputs, page_task


def _scan(mode: str = "text", outputs: tuple[str, ...] = ("json", "txt", "pdf")) -> ScanSubmitted:
    return ScanSubmitted(
        doc_id="d1", source=ScanSource(data=b"x"), content_type="image/png", sha256="ab",
        size_bytes=1, submitted_at=datetime(2026, 12, 1, tzinfo=UTC), outputs=outputs, mode=mode,
    )  # fmt: skip


def _page() -> SplitPage:
    return SplitPage(page_no=1, page_count=1, encoding="png", data=b"p", width=10, height=10,
                     dpi=300.0)  # fmt: skip


def test_a_scan_without_a_mode_is_text_and_its_pages_ask_for_the_same_outputs() -> None:
    scan = _scan()
    task = page_task(scan, _page(), PageImage("png", b"p"), None, "image/png")
    assert task.mode == "text"
    assert task.outputs == ("json", "txt", "pdf")


def test_layout_mode_reaches_the_page_task_and_asks_for_markdown() -> None:
    scan = _scan("layout", ("json",))
    task = page_task(scan, _page(), PageImage("png", b"p"), None, "image/png")
    assert task.mode == "layout"
    assert task.outputs == ("json", "md")
    failed = failed_page(scan, SplitPage.failed(1, 1, "corrupt_pdf", "x"), None, "image/png")
    assert failed.mode == "layout"
    assert "md" in failed.outputs
    assert page_outputs(_scan("layout", ("json", "md"))) == ("json", "md")


def test_the_worker_passes_the_mode_on_to_every_page_result() -> None:
    task = PageTask(doc_id="d1", page_no=1, page_count=1, image=PageImage("png", b"p"),
                    width=10, height=10, mode="layout")  # fmt: skip
    ok = engine_result(PreparedPage(task), PageOCR(10, 10, ()), Engine("onnxruntime", "m", "1"))
    assert ok.mode == "layout"
    assert failed_result(task, ErrorInfo("engine_error", "x")).mode == "layout"


def test_a_layout_submission_gets_its_own_content_id_and_text_ids_stay() -> None:
    text_id = content_doc_id("ab", ("json", "txt", "pdf"))
    assert content_doc_id("ab", ("json", "txt", "pdf"), "text") == text_id
    assert text_id == "821d478c34cf15c479dfe902db5ba5b5"  # as before modes existed
    assert content_doc_id("ab", ("json", "txt", "pdf"), "layout") != text_id


def test_the_default_mode_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ClientSettings().mode is ParseMode.TEXT
    monkeypatch.setenv("OCRSTREAM_CLIENT_MODE", "layout")
    assert ClientSettings().mode is ParseMode.LAYOUT
    monkeypatch.setenv("OCRSTREAM_CLIENT_MODE", "tables")
    with pytest.raises(ValueError, match="mode"):
        ClientSettings()
