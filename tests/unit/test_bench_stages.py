"""``ocrstream bench stages``: det and rec per page for each CPU backend, side by side."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import cv2
import pytest
from click.testing import CliRunner

from tests.fakes.engines import render_text_page


@pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None, reason="compares OpenVINO with onnxruntime"
)
def test_bench_stages_reports_both_backends_per_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from ocrstream.cli import main

    monkeypatch.setenv("OCRSTREAM_OCR_ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    pages = tmp_path / "pages"
    pages.mkdir()
    page = render_text_page(["Total amount due: 1,234.56 USD", "Payment within 30 days"])
    cv2.imwrite(str(pages / "p1.png"), page)
    out = tmp_path / "stages.json"
    args = ["bench", "stages", "--dataset", str(pages), "--threads", "1",
            "--model", "ppocrv6-tiny", "--json", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "| pages (1) | 1 |" in result.output
    data = json.loads(out.read_text())
    assert {r["backend"] for r in data["rows"]} == {"openvino", "onnxruntime"}
    for row in data["rows"]:
        assert row["pages"] == 1
        assert row["det_ms"] > 0
        assert row["rec_ms"] > 0
    assert set(data["auto"]["1"]["stages"]) == {"det", "rec"}
