"""CPU time per page of layout mode against text mode, on the two-page structured scan.

    PYTHONPATH=$PWD python scripts/layout_cpu_cost.py

``tests.samples.structured_scan_pdf`` at 200 DPI (page 1: a title and two columns; page 2: a
heading, a ruled table with spanning cells, a picture), default engine with 2 threads, a warm-up
of each mode, then 3 rounds of both pages; process CPU time (all threads) per page.
"""

from __future__ import annotations

import time

import numpy as np
import pymupdf

from ocrstream.processors.ocr.engine import OcrEngine
from ocrstream.processors.ocr.types import LayoutPage
from ocrstream.settings import OcrSettings
from tests import samples


def main() -> None:
    doc = pymupdf.open(stream=samples.structured_scan_pdf(dpi=200).data)
    imgs = []
    for p in doc:
        pix = p.get_pixmap(dpi=200, colorspace=pymupdf.csGRAY)
        imgs.append(np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width).copy())
    e = OcrEngine(OcrSettings(threads=2))
    e.recognize(imgs)
    e.recognize([LayoutPage(i) for i in imgs])
    for name, pages in (("text", imgs), ("layout", [LayoutPage(i) for i in imgs])):
        c = time.process_time()
        w = time.perf_counter()
        for _ in range(3):
            out = e.recognize(pages)
        print(
            name,
            "cpu s/page",
            round((time.process_time() - c) / 6, 2),
            "wall s/page",
            round((time.perf_counter() - w) / 6, 2),
            out[1].timings_ms,
        )
    e.close()


if __name__ == "__main__":
    main()
