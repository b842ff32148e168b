"""``bench cache`` without a broker: the worker's CPU time it reads, its verdict, its report
and its command line. The run itself is ``ocrstream bench cache`` (docs/benchmarks.md) against
the local services."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from click.testing import CliRunner

from ocrstream.bench.cache import format_report, process_cpu_s, verdict
from ocrstream.cli import main


def test_cpu_time_of_a_busy_process_counts_its_work_not_its_sleep() -> None:
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\n"
    busy = subprocess.Popen([sys.executable, "-c", spin + "time.sleep(30)"])
    try:
        deadline = time.monotonic() + 60
        while process_cpu_s(busy.pid) < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        spent = process_cpu_s(busy.pid)
        assert spent >= 0.5
        time.sleep(0.5)  # sleeping costs no CPU
        assert process_cpu_s(busy.pid) - spent < 0.1
    finally:
        busy.kill()
        busy.wait()
    assert process_cpu_s(os.getpid()) > 0


def test_the_verdict_is_against_5_percent_of_the_first_pass() -> None:
    assert verdict(0.031) == "3.10% of pass 1 (meets the 5% target)"
    assert verdict(0.05) == "5.00% of pass 1 (meets the 5% target)"
    assert verdict(0.0501).endswith("(above the 5% target)")
    assert verdict(None).startswith("no ratio")


def test_the_report_names_the_machine_both_passes_and_the_ratio() -> None:
    def one(cpu: float, cached: int) -> dict[str, object]:
        return {"documents": 50, "pages": 200, "worker_cpu_s": cpu,
                "cpu_ms_per_page": cpu * 5, "wall_s": 10.0, "pages_cached": cached,
                "statuses": {"completed": 50}, "page_results": 200,
                "engine_reads": 200 - cached}  # fmt: skip

    report = {"run_id": "bench-cache-x", "machine": {"cpu": "AMD EPYC", "cores": 2},
              "load_average_before": (3.0, 2.0, 1.0), "load_average_after": (4.0, 3.0, 2.0),
              "first": one(400.0, 0), "again": one(6.0, 200), "ratio": 0.015}  # fmt: skip
    text = format_report(report)
    assert "AMD EPYC, 2 cores; load average 3.0 before, 4.0 after" in text
    assert "worker CPU 400.00 s (2000.0 ms/page)" in text
    assert "pages_cached 200" in text
    assert "200 page results, 0 read by the engine" in text
    assert "1.50% of pass 1 (meets the 5% target)" in text


def test_the_command_is_listed_and_checks_its_options() -> None:
    runner = CliRunner()
    listed = runner.invoke(main, ["bench", "--help"])
    assert listed.exit_code == 0
    assert "cache" in listed.output
    wrong = runner.invoke(main, ["bench", "cache", "--pages", "0"])
    assert wrong.exit_code == 2
    assert "--pages" in wrong.output
