"""Write the bundled sample scans (``make run`` OCRs them) and the text they hold.

    .venv/bin/python scripts/make_samples.py        # from the repository root

Each sample is generated, not scanned: text drawn with PyMuPDF, rasterised at a scanner's DPI,
lightly speckled and encoded as a scanner would (JPEG pages in a PDF, a CCITT G4 fax TIFF, a
JPEG photo of a page). ``samples/truth/<name>.txt`` holds the known text, pages separated by
form feeds like document.txt, so the OCR output can be compared with it. Deterministic: the same
seeds give the same files.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pymupdf
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.samples import encode_image, page_lines, render_lines  # noqa: E402

OUT = ROOT / "samples"


def scanned_pdf(name: str, pages: int, seed: int, dpi: int = 150) -> list[tuple[str, ...]]:
    lines = page_lines(pages, 7, seed)
    doc = pymupdf.open()
    for p, page_text in enumerate(lines):
        gray = render_lines(page_text, dpi=dpi, seed=seed + p, noise=3)
        page = doc.new_page(width=612, height=792)
        page.insert_image(page.rect, stream=encode_image(gray, "jpeg", dpi, quality=60))
    (OUT / f"{name}.pdf").write_bytes(doc.tobytes(garbage=3, deflate=True))
    doc.close()
    return list(lines)


def fax_tiff(name: str, pages: int, seed: int, dpi: int = 200) -> list[tuple[str, ...]]:
    lines = page_lines(pages, 6, seed)
    frames = []
    for p, page_text in enumerate(lines):
        gray = render_lines(page_text, dpi=dpi, seed=seed + p, noise=0)
        frames.append(Image.fromarray(gray).point(lambda v: 255 if v >= 128 else 0, mode="1"))
    out = io.BytesIO()
    frames[0].save(out, "TIFF", save_all=True, append_images=frames[1:],
                   compression="group4", dpi=(dpi, dpi))  # fmt: skip
    (OUT / f"{name}.tif").write_bytes(out.getvalue())
    return list(lines)


def photo_jpeg(name: str, seed: int, dpi: int = 150) -> list[tuple[str, ...]]:
    lines = page_lines(1, 6, seed)
    gray = render_lines(lines[0], dpi=dpi, seed=seed, noise=3)
    (OUT / f"{name}.jpg").write_bytes(encode_image(gray, "jpeg", dpi, quality=60))
    return list(lines)


def main() -> None:
    (OUT / "truth").mkdir(parents=True, exist_ok=True)
    made = {
        "contract.pdf": scanned_pdf("contract", pages=3, seed=101),
        "invoice.pdf": scanned_pdf("invoice", pages=1, seed=202),
        "fax.tif": fax_tiff("fax", pages=2, seed=303),
        "memo.jpg": photo_jpeg("memo", seed=404),
    }
    for file, pages in made.items():
        text = "".join("\n".join(page) + "\n\f" for page in pages)
        (OUT / "truth" / f"{Path(file).stem}.txt").write_text(text)
        print(f"samples/{file}: {len(pages)} pages, {(OUT / file).stat().st_size} bytes")


if __name__ == "__main__":
    main()
