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
import json, sys
from ocrstream.processors.split import iter_pages, probe
from ocrstream.settings import LimitsSettings

def rss_mb(field):  # VmHWM is this process's peak (ru_maxrss would include the parent's)
    with open("/proc/self/status") as f:
        line = next(l for l in f if l.startswith(field + ":"))
    return int(line.split()[1]) / 1024

path, pages = sys.argv[1], int(sys.argv[2])
limits = LimitsSettings()
assert probe(path, "application/pdf", limits) == pages
base = rss_mb("VmRSS")
seen = out = 0
for page in iter_pages(path, "application/pdf", limits, dpi=300):
    assert page.ok, page
    seen += 1
    out += len(page.data)
peak = rss_mb("VmHWM")
print(json.dumps({"pages": seen, "base_mb": base, "peak_mb": peak, "output_mb": out / 2**20}))
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
