"""``bench api`` without a server: its arithmetic, its big PDF, its report and that the CLI has
it. The run itself is ``ocrstream bench api`` against the local services (docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

import pymupdf
from click.testing import CliRunner

from ocrstream.bench.api import Phase, format_report, write_big_pdf
from ocrstream.cli import main


def test_a_phase_counts_answered_requests_per_second_and_nearest_rank_latencies() -> None:
    phase = Phase("status", seconds=2.0, latencies=[i / 1000 for i in range(1, 101)],
                  statuses={200: 100, 503: 3}, errors=1)  # fmt: skip
    summary = phase.summary()
    assert summary["requests_per_s"] == 50.0  # the 2xx answers only
    assert (summary["p50_ms"], summary["p95_ms"], summary["p99_ms"]) == (51.0, 96.0, 100.0)
    assert summary["statuses"] == {"200": 100, "503": 3}
    assert Phase("upload").summary()["requests_per_s"] == 0.0


def test_the_big_pdf_is_as_big_as_asked_for_and_opens(tmp_path: Path) -> None:
    size = write_big_pdf(tmp_path / "big.pdf", 3)
    assert 3_000_000 <= size < 6_000_000  # distinct pages: equal images would be stored once
    with pymupdf.open(tmp_path / "big.pdf") as doc:
        assert doc.page_count >= 2


def test_the_report_names_the_machine_and_the_memory_next_to_the_file() -> None:
    phase = Phase("x", seconds=1.0, latencies=[0.01], statuses={202: 1}).summary()
    report = {"command": "ocrstream bench api", "date": "2026-12-01T03:00:00+00:00",
              "machine": {"cpu": "AMD EPYC", "cores": 2, "memory_gb": 23.5,
                          "load_average": [1.0, 1.0, 1.0]},
              "upload": phase, "status": phase,
              "big_upload": {"file_mb": 51.4, "status": 202, "seconds": 1.3, "rss_before_mib": 220,
                             "rss_peak_during_mib": 247, "rss_growth_mib": 27,
                             "rss_after_mib": 247, "store_part_mib": 5}}  # fmt: skip
    text = format_report(report)
    assert "AMD EPYC, 2 cores" in text
    assert "51.4 MB PDF" in text
    assert "(+27)" in text


def test_bench_api_is_a_command() -> None:
    result = CliRunner().invoke(main, ["bench", "api", "--help"])
    assert result.exit_code == 0, result.output
    assert "--big-mb" in result.output
