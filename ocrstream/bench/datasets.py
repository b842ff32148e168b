"""Benchmark inputs: SROIE-format folders, plain image folders, and synthetic A4 pages.

- **SROIE layout** (``../shared/data/README.md``): ``img/NNN.jpg`` and ``box/NNN.csv``, one
  line per row ``x1,y1,x2,y2,x3,y3,x4,y4,TEXT`` (the text may contain commas: split on the
  first eight).
- **A plain folder** of images (``.jpg .jpeg .png .tif .tiff .bmp .webp``): no ground truth.
- **Synthetic A4**: pages rendered by PyMuPDF at 300 DPI (2480 x 3508) with English text whose
  words and line boxes are known, saved as JPEG (quality 92, as a scanner would) so decoding
  is part of the work. Deterministic for a given seed; each line's box comes from the font
  metrics used to place it.
- **1-bit copies** (:func:`bilevel`): any set's pages as a bilevel scan gives them (a fax, a
  Group 4 TIFF, a JBIG2 PDF, which archives hold by the million): Otsu's threshold on each
  page's gray levels, stored as a 1-bit PNG, the ground truth unchanged.
- **Rescanned copies** (:func:`rescaled`): any set's pages as a scan at another resolution
  (the 300-DPI dev sets at 200 or 150 DPI, as many archives were scanned), area-averaged,
  stored as PNG, the ground truth scaled with them.

Samples carry file paths, not pixels: decoding is a timed stage of the benchmark.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ocrstream.bench.cer import TextLine

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp", ".webp")
A4_POINTS = (595.28, 841.89)


@dataclass(frozen=True, slots=True)
class Sample:
    """One page: where its image is, and its ground-truth lines when known."""

    name: str
    path: Path
    gt: tuple[TextLine, ...] | None = None


def parse_box_line(row: str) -> TextLine | None:
    """One SROIE ``box/*.csv`` row; ``None`` for blank or malformed rows."""
    parts = row.rstrip("\r\n").split(",", 8)
    if len(parts) < 9:
        return None
    try:
        coords = [float(v) for v in parts[:8]]
    except ValueError:
        return None
    points = tuple((coords[i], coords[i + 1]) for i in range(0, 8, 2))
    return TextLine(text=parts[8], polygon=points)


def load_sroie(root: Path) -> list[Sample]:
    """``root/img/*.jpg`` with ``root/box/*.csv`` ground truth where present."""
    samples = []
    for img in sorted((root / "img").iterdir()):
        if img.suffix.lower() not in IMAGE_SUFFIXES:
            continue
        box = root / "box" / f"{img.stem}.csv"
        gt = None
        if box.is_file():
            rows = box.read_text(encoding="utf-8", errors="replace").splitlines()
            gt = tuple(line for line in map(parse_box_line, rows) if line and line.text.strip())
        samples.append(Sample(name=img.stem, path=img, gt=gt))
    return samples


def load_folder(root: Path) -> list[Sample]:
    return [
        Sample(name=p.stem, path=p)
        for p in sorted(root.iterdir())
        if p.suffix.lower() in IMAGE_SUFFIXES
    ]


def load_dataset(root: Path) -> list[Sample]:
    """SROIE layout if ``root/img`` exists, else a plain folder of images."""
    if (root / "img").is_dir():
        return load_sroie(root)
    if root.is_dir():
        return load_folder(root)
    raise FileNotFoundError(f"no dataset at {root}")


# --------------------------------------------------------------------------- synthetic A4

_WORD_TEXT = (
    "the of and to in is for that on with as by this be are from at or an it not which have "
    "has will can all their they more one was were other been also its into than these may "
    "invoice total amount payment account balance due date number order customer service "
    "delivery address street road city county state country postal code telephone email "
    "company limited agreement contract section clause party parties terms conditions notice "
    "period month year annual report summary statement revenue expense tax value added net "
    "gross quantity unit price discount subtotal reference description item product schedule "
    "meeting minutes board director committee approved resolution shall hereby pursuant "
    "following described herein provided however whereas witness signature department office "
    "records archive document page scanned copy original certified registration license"
)
_WORDS = tuple(_WORD_TEXT.split())
_FONTS = ("helv", "tiro", "cour")


def _sentence(
    rng: random.Random, n_words: int, ends: Sequence[str] = (".", ".", ".", ":", ";")
) -> str:
    """``n_words`` of the word list with a few numbers, amounts, capitals and commas, ended by
    one of ``ends`` (repeats weight the choice)."""
    words = [rng.choice(_WORDS) for _ in range(n_words)]
    words[0] = words[0].capitalize()
    for i in range(1, len(words)):
        r = rng.random()
        if r < 0.06:
            words[i] = str(rng.randint(1, 99999))
        elif r < 0.09:
            words[i] = f"{rng.randint(1, 9999)}.{rng.randint(0, 99):02d}"
        elif r < 0.12:
            words[i] = words[i].capitalize()
        elif r < 0.15:
            words[i] += ","
    return " ".join(words) + rng.choice(ends)


def render_a4_page(seed: int, dpi: int = 300) -> tuple[bytes, tuple[TextLine, ...]]:
    """One synthetic A4 page as JPEG bytes, and its lines with boxes in image pixels."""
    from ocrstream.processors.mupdf import pymupdf as fitz

    rng = random.Random(seed)
    doc = fitz.open()
    page = doc.new_page(width=A4_POINTS[0], height=A4_POINTS[1])
    font = _FONTS[seed % len(_FONTS)]
    size = rng.choice((9.0, 10.0, 11.0, 12.0))
    left, right, top, bottom = 60.0, A4_POINTS[0] - 60.0, 70.0, A4_POINTS[1] - 60.0
    scale = dpi / 72.0
    lines: list[TextLine] = []
    y = top + size
    leading = size * 1.45
    title = _sentence(rng, rng.randint(3, 6)).rstrip(".:;").upper()
    page.insert_text((left, y), title, fontname=font, fontsize=size + 3)
    lines.append(_line(title, left, y, font, size + 3, scale))
    y += leading * 2
    while y < bottom:
        if rng.random() < 0.15:  # a two-column row: label on the left, amount on the right
            label = _sentence(rng, rng.randint(2, 4)).rstrip(".:;")
            amount = f"{rng.randint(1, 99999):,}.{rng.randint(0, 99):02d}"
            page.insert_text((left, y), label, fontname=font, fontsize=size)
            lines.append(_line(label, left, y, font, size, scale))
            ax = right - fitz.get_text_length(amount, fontname=font, fontsize=size)
            page.insert_text((ax, y), amount, fontname=font, fontsize=size)
            lines.append(_line(amount, ax, y, font, size, scale))
        else:
            text = _fill_line(rng, font, size, right - left)
            page.insert_text((left, y), text, fontname=font, fontsize=size)
            lines.append(_line(text, left, y, font, size, scale))
        y += leading * (2.0 if rng.random() < 0.1 else 1.0)
    pix = page.get_pixmap(dpi=dpi, colorspace=fitz.csRGB)
    data = pix.tobytes("jpg", jpg_quality=92)
    doc.close()
    return data, tuple(lines)


def _fill_line(rng: random.Random, font: str, size: float, width: float) -> str:
    from ocrstream.processors.mupdf import pymupdf as fitz

    words: list[str] = []
    budget = width * rng.uniform(0.6, 1.0)
    while True:
        nxt = _sentence(rng, rng.randint(4, 9))
        for w in nxt.split():
            trial = " ".join([*words, w])
            if fitz.get_text_length(trial, fontname=font, fontsize=size) > budget:
                return " ".join(words) if words else w
            words.append(w)


def _line(text: str, x: float, baseline: float, font: str, size: float, scale: float) -> TextLine:
    from ocrstream.processors.mupdf import pymupdf as fitz

    width = fitz.get_text_length(text, fontname=font, fontsize=size)
    ascent, descent = size * 0.8, size * 0.25
    x0, x1 = x * scale, (x + width) * scale
    y0, y1 = (baseline - ascent) * scale, (baseline + descent) * scale
    return TextLine(text=text, polygon=((x0, y0), (x1, y0), (x1, y1), (x0, y1)))


def synthetic_a4(n: int, out_dir: Path, seed: int = 0, dpi: int = 300) -> list[Sample]:
    """Render ``n`` pages into ``out_dir`` (reused when already there) and return them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    samples = []
    for i in range(n):
        path = out_dir / f"a4-{seed + i:04d}-{dpi}dpi.jpg"
        data, lines = render_a4_page(seed + i, dpi=dpi)
        if not path.is_file() or path.read_bytes() != data:
            path.write_bytes(data)
        samples.append(Sample(name=path.stem, path=path, gt=lines))
    return samples


def subset(samples: Sequence[Sample], limit: int | None) -> list[Sample]:
    return list(samples[:limit] if limit else samples)


def bilevel(samples: Sequence[Sample], out_dir: Path) -> list[Sample]:
    """``samples`` as 1-bit scans, written to ``out_dir`` as 1-bit PNGs (the project's own
    writer, :func:`~ocrstream.processors.split_encode.encode_bilevel_png`): each page's
    gray levels split at Otsu's threshold, ink black and paper white. Names and ground truth
    are the originals'."""
    import cv2
    import numpy as np

    from ocrstream.processors.split_encode import encode_bilevel_png

    out_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for i, s in enumerate(samples):
        gray = _decoded(s.path, cv2.IMREAD_GRAYSCALE)
        _, split = cv2.threshold(gray, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
        path = out_dir / f"{i:05d}-{s.path.stem}.png"
        path.write_bytes(encode_bilevel_png(np.asarray(split, np.uint8)))
        out.append(Sample(name=s.name, path=path, gt=s.gt))
    return out


def _decoded(path: Path, flags: int) -> Any:
    """The image at ``path`` as OpenCV decodes it with ``flags``; ValueError if it cannot."""
    import cv2
    import numpy as np

    image = cv2.imdecode(np.fromfile(path, np.uint8), flags)
    if image is None:
        raise ValueError(f"{path}: not an image OpenCV can decode")
    return image


def rescaled(samples: Sequence[Sample], factor: float, out_dir: Path) -> list[Sample]:
    """``samples`` as if scanned at ``factor`` × their resolution (0.5: a 300-DPI page as a
    150-DPI scan), written to ``out_dir`` as PNGs: each page resized by area averaging (a
    scanner's sensor averages the paper under each pixel) or, above 1, bicubic, and its
    ground-truth polygons scaled with it. Names are the originals'."""
    import cv2

    if not 0 < factor <= 4:
        raise ValueError(f"a scale factor is over 0 and at most 4, not {factor}")
    out_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for i, s in enumerate(samples):
        image = _decoded(s.path, cv2.IMREAD_UNCHANGED)
        h, w = image.shape[:2]
        size = (max(1, round(w * factor)), max(1, round(h * factor)))
        how = cv2.INTER_AREA if factor < 1 else cv2.INTER_CUBIC
        scaled = cv2.resize(image, size, interpolation=how)
        fx, fy = size[0] / w, size[1] / h
        gt = None
        if s.gt is not None:
            gt = tuple(
                TextLine(line.text, tuple((x * fx, y * fy) for x, y in line.polygon))
                for line in s.gt
            )
        path = out_dir / f"{i:05d}-{s.path.stem}.png"
        ok, data = cv2.imencode(".png", scaled)
        if not ok:
            raise ValueError(f"{s.path}: could not be written as PNG once scaled")
        path.write_bytes(data.tobytes())
        out.append(Sample(name=s.name, path=path, gt=gt))
    return out


def degrade(
    data: bytes,
    seed: int,
    *,
    blur: float = 1.6,
    noise: float = 20.0,
    contrast: float = 0.45,
    scale: float = 1.0,
) -> bytes:
    """A page image as a bad scan would give it: ``contrast`` of the ink left (on a grey
    paper), a Gaussian ``blur`` (radius in pixels), Gaussian ``noise`` (grey levels) and,
    with ``scale`` < 1, fewer pixels. Deterministic for a given seed; JPEG quality 80. Used
    for the routing benchmark's degraded scans and its integration test."""  # fmt: skip
    import io

    import numpy as np
    from PIL import Image, ImageFilter

    image = Image.open(io.BytesIO(data)).convert("L")
    if scale != 1.0:
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        image = image.resize(size, Image.Resampling.BILINEAR)
    if blur > 0:
        image = image.filter(ImageFilter.GaussianBlur(blur))
    pixels = np.asarray(image, dtype=np.float32)
    paper = 200.0
    pixels = paper - (255.0 - pixels) * contrast  # ink fades towards a grey paper
    rng = np.random.default_rng(seed)
    pixels += rng.normal(0.0, noise, pixels.shape)
    out = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=80)
    return out.getvalue()
