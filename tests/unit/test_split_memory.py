"""Splitting streams: a 2,000-page document is split in bounded memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import samples

PAGES = 2_000
BOUND_MB = 300  # generous: a 300 DPI page and its PNG are ~40 MB; MuPDF's store caps at 256 MB

_PROBE = """
import json, resource, sys
import psutil
from ocrstream.processors.split import iter_pages, probe
from ocrstream.settings import LimitsSettings

path, pages = sys.argv[1], int(sys.argv[2])
me = psutil.Process()
limits = LimitsSettings()
assert probe(path, "application/pdf", limits) == pages
base = me.memory_info().rss
peak = base
seen = 0
out = 0
for page in iter_pages(path, "application/pdf", limits, dpi=300):
    assert page.ok, page
    seen += 1
    out += len(page.data)
    if seen % 25 == 0:
        peak = max(peak, me.memory_info().rss)
peak = max(peak, me.memory_info().rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
print(json.dumps({"pages": seen, "base_mb": base / 2**20, "peak_mb": peak / 2**20,
                  "output_mb": out / 2**20}))
"""


@pytest.mark.slow
def test_two_thousand_pages_split_in_bounded_memory(tmp_path: Path) -> None:
    scans = [
        samples.encode_image(samples.render_lines(samples.sample_lines(20, s), dpi=200, seed=s))
        for s in range(3)
    ]
    path = tmp_path / "long.pdf"
    # 95% scanned pages passed through, every 20th a text page rendered at 300 DPI
    path.write_bytes(samples.long_pdf(PAGES, scans, text_every=20))
    run = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path), str(PAGES)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["pages"] == PAGES
    # the pages produced add up to far more than the memory the split ever held
    assert report["output_mb"] > 2 * BOUND_MB
    assert report["peak_mb"] - report["base_mb"] < BOUND_MB, report
