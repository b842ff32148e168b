"""Scanned PDFs for the pipeline benchmark, and the splitter's peak memory on a long one.

A benchmark document is what a scanner makes: a PDF whose every page is one full-page baseline
JPEG. The splitter passes such an image through byte for byte, so the OCR workers receive
exactly the files that ``bench engine`` reads from disk, and the two throughputs compare the
same work.

- :func:`scanned_pdf`: one PDF from page images (each image stored once, however often used).
- :func:`page_images`: the page images: synthetic A4 pages (:mod:`ocrstream.bench.datasets`,
  with known text) or a dataset's images, one distinct file per page of the run.
- :func:`long_scanned_pdf` and :func:`splitter_peak_rss`: a 2,000-page scan (every tenth page
  a PNG the splitter has to decode and re-encode) split by
  :func:`ocrstream.processors.split.iter_pages` in a fresh process, whose high-water mark
  (``VmHWM``) is the splitter's peak RSS for that document.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ocrstream.bench.datasets import Sample, load_dataset, synthetic_a4

DEFAULT_DPI = 200


def image_size(data: bytes) -> tuple[int, int, float | None]:
    """Width, height and the DPI an image declares (None when it declares none)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        dpi = im.info.get("dpi")
        declared = float(dpi[0]) if dpi and dpi[0] and float(dpi[0]) > 1 else None
        return im.width, im.height, declared


def scanned_pdf(pages: Sequence[bytes], dpi: float = DEFAULT_DPI) -> bytes:
    """A PDF with one page per image, each page exactly its image at the image's DPI (or
    ``dpi``). JPEGs are embedded as they are (DCTDecode); the same bytes are stored once."""
    from ocrstream.processors.mupdf import pymupdf

    doc = pymupdf.open()
    stored: dict[bytes, int] = {}
    try:
        for data in pages:
            width, height, declared = image_size(data)
            scale = 72.0 / (declared or dpi)
            page = doc.new_page(width=width * scale, height=height * scale)
            xref = page.insert_image(page.rect, stream=data, xref=stored.get(data, 0))
            stored.setdefault(data, xref)
        out: bytes = doc.tobytes(garbage=0, deflate=False)
        return out
    finally:
        doc.close()


def page_images(
    count: int,
    workdir: Path,
    *,
    dataset: Path | None = None,
    dpi: int = DEFAULT_DPI,
    seed: int = 0,
) -> list[Sample]:
    """``count`` page images as distinct files: synthetic A4 pages rendered at ``dpi``, or
    ``dataset``'s images cycled (copies get their own file, so each page is timed once)."""
    if dataset is None:
        return synthetic_a4(count, workdir / f"a4-{dpi}dpi", seed=seed, dpi=dpi)
    found = load_dataset(dataset)
    if not found:
        raise FileNotFoundError(f"no images in {dataset}")
    if count <= len(found):
        return list(found[:count])
    out_dir = workdir / f"{dataset.name}-cycled"
    out_dir.mkdir(parents=True, exist_ok=True)
    samples = []
    for i in range(count):
        src = found[i % len(found)]
        if i < len(found):
            samples.append(src)
            continue
        path = out_dir / f"{i:05d}-{src.path.name}"
        if not path.exists():
            path.write_bytes(src.path.read_bytes())
        samples.append(Sample(name=path.stem, path=path, gt=src.gt))
    return samples


def long_scanned_pdf(
    pages: int, images: Sequence[bytes], dpi: float = DEFAULT_DPI, converted_every: int = 10
) -> bytes:
    """A ``pages``-page scan cycling through ``images`` (each stored once: a small file).
    Every ``converted_every``-th page is a gray PNG instead (Flate in the PDF), which the
    splitter must decode and re-encode rather than pass through."""
    if not images:
        raise ValueError("need at least one page image")
    gray = _gray_png(images[0]) if converted_every > 0 else b""
    chosen = [
        gray if converted_every > 0 and i % converted_every == converted_every - 1
        else images[i % len(images)]
        for i in range(pages)
    ]  # fmt: skip
    return scanned_pdf(chosen, dpi=dpi)


def _gray_png(data: bytes) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    with Image.open(io.BytesIO(data)) as im:
        params = {"dpi": im.info["dpi"]} if "dpi" in im.info else {}
        im.convert("L").save(out, "PNG", **params)
    return out.getvalue()


_PROBE = """
import json, sys
from ocrstream.processors.split import iter_pages
from ocrstream.settings import LimitsSettings

def kb(field):
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith(field + ":")).split()[1])

path, dpi = sys.argv[1], int(sys.argv[2])
base = kb("VmRSS")
pages = failed = passed = out = 0
for page in iter_pages(path, "application/pdf", LimitsSettings(), dpi=dpi):
    pages += 1
    failed += 0 if page.ok else 1
    passed += page.origin == "passthrough"
    out += len(page.data or b"")
print(json.dumps({"pages": pages, "failed": failed, "passthrough": passed, "base_mb": base / 1024,
                  "peak_mb": kb("VmHWM") / 1024, "output_mb": out / 2**20}))
"""


def splitter_peak_rss(
    pdf: Path, dpi: int = DEFAULT_DPI, timeout_s: float = 900.0
) -> dict[str, float]:
    """Split ``pdf`` as the splitter does, in a fresh interpreter; its pages and peak RSS.

    ``peak_mb`` is the process's whole high-water mark (interpreter and libraries included),
    ``base_mb`` its RSS before the split began."""
    run = subprocess.run(
        [sys.executable, "-c", _PROBE, str(pdf), str(dpi)],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout_s,
    )
    if run.returncode != 0:
        raise RuntimeError(f"the split probe failed: {run.stderr[-2000:]}")
    report: dict[str, float] = json.loads(run.stdout.strip().splitlines()[-1])
    return report
