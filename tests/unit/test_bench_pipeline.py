"""``bench pipeline`` without a broker: its scans, its arithmetic, its zero-loss verdict, its
timeline and plot, its report and its command line. The run itself is exercised for real by
``ocrstream bench pipeline`` (docs/benchmarks.md) against the local services."""

from __future__ import annotations

import http.server
import itertools
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from ocrstream.bench.datasets import render_a4_page
from ocrstream.bench.pipeline import format_report
from ocrstream.bench.pipeline_checks import percentiles, zero_loss
from ocrstream.bench.scans import long_scanned_pdf, page_images, scanned_pdf, splitter_peak_rss
from ocrstream.bench.timeline import Point, Timeline, autoscaler_gauges, throughput
from ocrstream.cli import main
from ocrstream.processors.split import iter_pages
from ocrstream.settings import KafkaSettings, LimitsSettings
from tests import samples
from tests.polling import wait_until


@pytest.fixture(scope="module")
def jpegs() -> list[bytes]:
    return [render_a4_page(seed, dpi=72)[0] for seed in range(2)]


def test_scanned_pdf_pages_pass_through_the_splitter_unchanged(jpegs: list[bytes]) -> None:
    pdf = scanned_pdf([jpegs[0], jpegs[1], jpegs[0]], dpi=72)
    pages = list(iter_pages(pdf, "application/pdf", LimitsSettings(), dpi=200))
    assert [p.origin for p in pages] == ["passthrough"] * 3
    assert [p.data for p in pages] == [jpegs[0], jpegs[1], jpegs[0]]
    assert pages[0].height == 842  # A4 at 72 DPI
    assert round(pages[0].dpi) == 72
    assert len(pdf) < sum(len(j) for j in jpegs) + 20_000  # a repeated image is stored once


def test_long_scan_reuses_its_images(jpegs: list[bytes]) -> None:
    pdf = long_scanned_pdf(300, jpegs, dpi=72)
    assert len(pdf) < 3 * sum(map(len, jpegs)) + 300 * 400  # the JPEGs and one PNG, once
    pages = itertools.islice(iter_pages(pdf, "application/pdf", LimitsSettings(), dpi=72), 10)
    assert [p.origin == "passthrough" for p in pages] == [True] * 9 + [False]
    with pytest.raises(ValueError, match="at least one"):
        long_scanned_pdf(3, [])


def test_splitter_peak_rss_is_measured_in_a_fresh_process(
    tmp_path: Path, jpegs: list[bytes]
) -> None:
    path = tmp_path / "long.pdf"
    path.write_bytes(long_scanned_pdf(40, jpegs, dpi=72))
    got = splitter_peak_rss(path, dpi=72, timeout_s=120)
    assert got["pages"] == 40
    assert got["passthrough"] == 36  # every tenth page a PNG to decode and re-encode
    assert got["failed"] == 0
    assert 0 < got["base_mb"] <= got["peak_mb"] < 2000


def test_dataset_pages_are_cycled_into_distinct_files(tmp_path: Path) -> None:
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(2):
        gray = samples.render_lines(samples.sample_lines(2, i), dpi=50, seed=i)
        (folder / f"{i}.jpg").write_bytes(samples.encode_image(gray, "jpeg", 50))
    got = page_images(5, tmp_path / "work", dataset=folder)
    assert len(got) == 5
    assert len({s.path for s in got}) == 5  # engine bench counts each file once
    assert got[2].path.read_bytes() == got[0].path.read_bytes()
    assert page_images(1, tmp_path / "work", dataset=folder)[0].path == folder / "0.jpg"


def test_percentiles_are_nearest_rank() -> None:
    got = percentiles([float(v) for v in range(1, 101)])
    assert (got["p50"], got["p95"], got["p99"], got["max"]) == (50, 95, 99, 100)
    assert got["mean"] == 50.5
    assert percentiles([2.0]) == {"p50": 2.0, "p95": 2.0, "p99": 2.0, "mean": 2.0, "max": 2.0}
    assert percentiles([]) == {}


def event(doc_id: str, status: str = "completed", pages: int = 3, ok: int | None = None) -> Any:
    return SimpleNamespace(doc_id=doc_id, status=SimpleNamespace(value=status), page_count=pages,
                           pages_ok=pages if ok is None else ok)  # fmt: skip


def test_zero_loss_passes_one_complete_event_per_document() -> None:
    verdict = zero_loss({"a": 3, "b": 1}, [event("a"), event("b", pages=1)], dead_letters=0)
    assert verdict["ok"]
    assert verdict["terminal_events"] == 2


@pytest.mark.parametrize(
    ("events", "dlq", "field", "value"),
    [
        ([event("a")], 0, "missing", ["b"]),
        ([event("a"), event("a"), event("b", pages=1)], 0, "duplicated", ["a"]),
        ([event("a", ok=2), event("b", pages=1)], 0, "incomplete", ["a: 2/3 of 3"]),
        ([event("a", pages=2), event("b", pages=1)], 0, "incomplete", ["a: 2/2 of 3"]),
        ([event("a", "partial", ok=2), event("b", pages=1)], 0, "not_completed", ["a: partial"]),
        ([event("a"), event("b", pages=1), event("x")], 0, "unexpected", ["x"]),
        ([event("a"), event("b", pages=1)], 1, "dead_letters", 1),
    ],
)
def test_zero_loss_names_what_went_wrong(
    events: list[Any], dlq: int, field: str, value: Any
) -> None:
    verdict = zero_loss({"a": 3, "b": 1}, events, dead_letters=dlq)
    assert not verdict["ok"]
    assert verdict[field] == value


def test_throughput_over_a_trailing_window() -> None:
    pts = [Point(float(t), results, 0, 1) for t, results in enumerate([0, 0, 4, 4, 10, 10])]
    per_second = [round(r, 2) for _, r in throughput(pts, window_s=1.0)]
    assert per_second == [0.0, 0.0, 4.0, 0.0, 6.0, 0.0]
    assert [round(r, 2) for _, r in throughput(pts, window_s=2.0)] == [0, 0, 2, 2, 3, 3]


@pytest.fixture
def fake_autoscaler() -> Iterator[str]:
    body = (
        b"# TYPE ocrstream_autoscaler_replicas gauge\nocrstream_autoscaler_replicas 2.0\n"
        b"ocrstream_autoscaler_desired_replicas 3.0\nocrstream_autoscaler_lag 57.0\n"
    )

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()


def test_autoscaler_gauges_come_from_its_metrics(fake_autoscaler: str) -> None:
    assert autoscaler_gauges(fake_autoscaler) == (2, 3)
    assert autoscaler_gauges("http://127.0.0.1:9/metrics", timeout_s=0.2) == (None, None)


def test_plot_is_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from ocrstream.bench.plot import plot_timeline

    pts = [Point(float(t), 2 * t, max(0, 40 - 3 * t), 1 + (5 < t < 15), 1 + (5 < t < 15),
                 1 + (4 < t < 12)) for t in range(20)]  # fmt: skip
    path = plot_timeline(pts, tmp_path / "p.png", title="t", submitted_s=1.0, finished_s=14.0,
                         lag_threshold=20)  # fmt: skip
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 20_000


def test_report_states_the_targets() -> None:
    report = {
        "run_id": "bench-x",
        "pipeline": {"documents": 2, "finished": 2, "statuses": {"completed": 2}, "pages": 6,
                     "wall_s": 10.0, "pages_per_s": 0.6, "max_workers_seen": 2,
                     "latency_s": percentiles([4.0, 9.0])},
        "engine": {"pages_per_s": 0.8, "setup": "s", "pages": 6, "wall_s": 7.5},
        "ratio": 0.75,
        "zero_loss": zero_loss({"a": 3}, [event("a")], 0),
        "latency_probe": {"documents": 2, "summary": percentiles([1.5, 2.0]),
                          "latency_s": [1.5, 2.0], "idle_before_last_s": 40.0,
                          "engine_s": percentiles([1.0, 1.2]),
                          "overhead_s": percentiles([0.5, 0.8])},
        "splitter_rss": {"peak_mb": 180.0, "base_mb": 170.0, "pages": 2000,
                         "passthrough": 2000},
    }  # fmt: skip
    text = format_report(report)
    assert "0.600 pages/s through Kafka" in text
    assert "75.0% (below the 90% target)" in text
    assert "zero loss        OK" in text
    assert "the pipeline p50 0.50 s" in text
    assert "the last, after 40 s idle, 2.00 s" in text
    assert "peak 180 MB" in text


def test_command_line_checks_its_options() -> None:
    runner = CliRunner()
    out = runner.invoke(main, ["bench", "--help"])
    assert "pipeline" in out.output
    bad = runner.invoke(main, ["bench", "pipeline", "--dataset", ".", "--synthetic"])
    assert bad.exit_code == 2
    assert "exclude each other" in bad.output
    bad = runner.invoke(main, ["bench", "pipeline", "--autoscale", "--min", "3", "--max", "2"])
    assert bad.exit_code == 2


_FAKE_SAMPLER = """
import json, pathlib, sys, time
out = pathlib.Path(sys.argv[1])
for _ in range(2):
    n = len(out.read_text().splitlines())
    line = {"wall": time.time(), "results": 10 + 3 * n, "lag": 5, "members": 1,
            "replicas": None, "desired": None}
    with open(out, "a") as f:
        f.write(json.dumps(line) + "\\n")
    time.sleep(0.05)
sys.exit(134)  # as a librdkafka abort would end it
"""


def test_timeline_restarts_a_sampler_that_dies(tmp_path: Path) -> None:
    timeline = Timeline(KafkaSettings(topic_prefix="x."), "x.group", tmp_path / "t.jsonl")
    timeline.argv = [sys.executable, "-c", _FAKE_SAMPLER, str(timeline.path)]
    timeline.start()
    wait_until(lambda: timeline.restarts >= 1 and len(timeline.points) >= 4, 20,
               "the sampler to die, be restarted and sample again")  # fmt: skip
    points = timeline.stop()
    assert timeline.restarts >= 1
    assert len(points) >= 4
    assert (points[0].t, points[0].results) == (0.0, 0)  # relative to the first sample
    assert [p.results for p in points[:4]] == [0, 3, 6, 9]
    assert all(a.t <= b.t for a, b in itertools.pairwise(points))
