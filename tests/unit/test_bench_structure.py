"""``ocrstream bench structure`` end to end on one generated page, every mode and peer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ocrstream.bench.engine import machine
from ocrstream.bench.structure import COLUMNS, MODES


@pytest.mark.slow
def test_bench_structure_runs_every_mode_on_one_page(tmp_path: Path) -> None:
    for module in ("rapidocr", "rapid_layout", "rapid_table"):
        pytest.importorskip(module, reason=f"{module} is not installed (the RapidAI peer)")
    pytest.importorskip("pymupdf4llm", reason="pymupdf4llm is not installed (a peer)")
    from ocrstream.cli import main

    out = tmp_path / "structure.json"
    result = CliRunner().invoke(
        main,
        [
            "bench", "structure", "--pages", "1", "--warmup", "0",
            "--cache-dir", str(tmp_path), "--json", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"machine: {machine()['cpu']}" in result.output  # every result names its CPU
    for column in COLUMNS:
        assert column in result.output
    assert "layout vs text CPU time per A4 page" in result.output
    report = json.loads(out.read_text())
    assert report["command"].startswith("ocrstream bench structure")
    runs = {run["mode"]: run for run in report["splits"]["dev"]["runs"]}
    assert set(runs) == set(MODES)
    for mode, run in runs.items():
        assert run["error"] is None, mode
        assert run["pages"] == 1
        assert run["pages_per_s"] > 0
        assert run["peak_rss_mb"] > 50
        assert [p["page"] for p in run["per_page"]] == ["page-000000"]
        assert mode in result.output
    # the first dev page has a title, a table and a footer
    assert runs["ocrstream-text"]["scores"]["teds"] is None  # text mode knows no tables
    assert runs["ocrstream-text"]["scores"]["header_footer_out"] == 0.0
    for mode in ("ocrstream-layout", "rapidai", "pymupdf4llm"):  # they find tables and titles
        assert runs[mode]["scores"]["teds"] is not None, mode
        assert runs[mode]["scores"]["heading_recall"] is not None, mode
        assert runs[mode]["scores"]["body_cer"] < 1.0, mode
    assert runs["pymupdf4llm"]["input"] == "pdf"
    assert (tmp_path / "v1" / "dev" / "page-000000.json").is_file()


def test_unknown_modes_are_refused() -> None:
    from ocrstream.cli import main

    result = CliRunner().invoke(main, ["bench", "structure", "--modes", "ocrstream-text,word"])
    assert result.exit_code != 0
    assert "unknown modes ['word']" in result.output
