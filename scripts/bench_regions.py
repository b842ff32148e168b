"""Key-field mode against full-page OCR on generated till receipts: pages/s, one process.

    PYTHONPATH=$PWD python scripts/bench_regions.py [--pages 12] [--threads 2] [--backend B]

Each receipt (``tests.samples.receipt``: 80 mm wide, 200 DPI, 3 named fields) is read twice
per round, in batches of 4 pages: whole (det + rec of every line) and by its regions only
(:class:`~ocrstream.processors.ocr.types.RegionsPage`). A warm-up batch of each goes first;
the report is pages/s of each and the share of fields read exactly.
"""

from __future__ import annotations

import argparse
import platform
import time

from ocrstream.processors.ocr.engine import OcrEngine
from ocrstream.processors.ocr.types import RegionsPage
from ocrstream.processors.regions import parse_regions
from ocrstream.settings import OcrSettings
from tests import samples


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backend", default="auto")
    args = parser.parse_args()
    receipts = [samples.receipt(seed=i) for i in range(args.pages)]
    engine = OcrEngine(OcrSettings(backend=args.backend, threads=args.threads))
    whole = [r.data for r in receipts]
    fields = [RegionsPage(r.data, parse_regions(list(r.regions))) for r in receipts]
    engine.recognize(whole[:4])
    engine.recognize(fields[:4])
    timed: dict[str, float] = {}
    exact = 0
    for name, pages in (("full page", whole), ("regions", fields)):
        start = time.perf_counter()
        results = []
        for i in range(0, len(pages), 4):
            results += engine.recognize(pages[i : i + 4])  # type: ignore[arg-type]
        timed[name] = time.perf_counter() - start
        if name == "regions":
            for receipt, result in zip(receipts, results, strict=True):
                got = {f.name: f.text for f in result.fields or ()}
                exact += sum(got.get(k) == v for k, v in receipt.fields.items())
    engine.close()
    print(f"CPU: {_cpu()}; backend {engine.info.backend}, {args.threads} threads")
    for name, seconds in timed.items():
        print(f"{name:10s} {len(receipts) / seconds:6.2f} pages/s ({seconds:.1f} s)")
    print(f"fields read exactly: {exact}/{3 * len(receipts)}")


if __name__ == "__main__":
    main()
