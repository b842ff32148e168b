"""Benchmark inputs: the SROIE box format, image folders, synthetic A4 pages, their 1-bit
copies and copies at another resolution."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from ocrstream.bench.datasets import (
    bilevel,
    load_dataset,
    parse_box_line,
    render_a4_page,
    rescaled,
    subset,
    synthetic_a4,
)


def test_box_rows_split_on_the_first_eight_commas() -> None:
    got = parse_box_line("72,25,326,25,326,64,72,64,NO.53 55,57 & 59, JALAN SAGU 18,\n")
    assert got is not None
    assert got.text == "NO.53 55,57 & 59, JALAN SAGU 18,"
    assert got.polygon == ((72, 25), (326, 25), (326, 64), (72, 64))
    assert parse_box_line("") is None
    assert parse_box_line("a,b,c,d,e,f,g,h,TEXT") is None


def test_sroie_layout_and_plain_folders(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    (tmp_path / "box").mkdir()
    img = np.full((40, 80, 3), 255, np.uint8)
    for name in ("000", "001"):
        cv2.imwrite(str(tmp_path / "img" / f"{name}.jpg"), img)
    (tmp_path / "box" / "000.csv").write_text("1,1,9,1,9,9,1,9,HELLO\n\n1,1,2,1,2,2,1,2, \n")
    samples = load_dataset(tmp_path)
    assert [s.name for s in samples] == ["000", "001"]
    assert samples[0].gt is not None
    assert [g.text for g in samples[0].gt] == ["HELLO"]
    assert samples[1].gt is None
    assert [s.name for s in load_dataset(tmp_path / "img")] == ["000", "001"]
    assert len(subset(samples, 1)) == 1


def test_synthetic_a4_is_deterministic_and_its_boxes_hold_the_ink(tmp_path: Path) -> None:
    data, lines = render_a4_page(7)
    again, _ = render_a4_page(7)
    assert data == again
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE)
    assert decoded is not None
    image = np.asarray(decoded)
    assert abs(image.shape[0] - 3508) <= 1
    assert abs(image.shape[1] - 2480) <= 1
    assert len(lines) > 20
    ink = np.asarray(image < 128)
    inside = np.zeros_like(ink)
    for ln in lines:
        (x0, y0), _, (x1, y1), _ = ln.polygon
        inside[int(y0) : int(y1) + 1, int(x0) : int(x1) + 1] = True
        assert ln.text.strip()
    # nearly all dark pixels lie inside some ground-truth line box
    assert (ink & inside).sum() / ink.sum() > 0.97
    samples = synthetic_a4(2, tmp_path, seed=3)
    assert [s.path.is_file() for s in samples] == [True, True]
    assert samples[0].gt == render_a4_page(3)[1]


def test_a_1_bit_copy_keeps_the_ink_and_the_ground_truth(tmp_path: Path) -> None:
    """Faint grey ink on grey paper (no fixed threshold would do for every scan) comes out
    as black on white in a 1-bit PNG, where the ink was."""
    data, lines = render_a4_page(5)
    page = np.asarray(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE))
    faint = (150 + page.astype(np.float32) * (215 - 150) / 255).astype(np.uint8)
    (tmp_path / "img").mkdir()
    (tmp_path / "box").mkdir()
    cv2.imwrite(str(tmp_path / "img" / "p.png"), faint)
    rows = [",".join(f"{v:.1f}" for pt in ln.polygon for v in pt) + f",{ln.text}" for ln in lines]
    (tmp_path / "box" / "p.csv").write_text("\n".join(rows), encoding="utf-8")
    [sample] = load_dataset(tmp_path)

    [copy] = bilevel([sample], tmp_path / "copies")

    assert copy.name == sample.name
    assert copy.gt == sample.gt
    with Image.open(copy.path) as im:
        assert im.format == "PNG"
        assert im.mode == "1"
        bits = np.asarray(im.convert("L"))
    assert set(np.unique(bits).tolist()) == {0, 255}
    ink = bits == 0
    was_ink = page < 128
    # the ink is where the original's was, and the paper is white
    assert (ink & was_ink).sum() / was_ink.sum() > 0.9
    assert ink.mean() < 2 * was_ink.mean()


def test_a_rescanned_copy_has_its_ink_inside_the_scaled_ground_truth(tmp_path: Path) -> None:
    """A 300-DPI page as a 150-DPI scan: half the pixels each way, and each ground-truth box
    still around the ink of its line."""
    data, lines = render_a4_page(4)
    (tmp_path / "img").mkdir()
    (tmp_path / "box").mkdir()
    (tmp_path / "img" / "p.jpg").write_bytes(data)
    rows = [",".join(f"{v:.1f}" for pt in ln.polygon for v in pt) + f",{ln.text}" for ln in lines]
    (tmp_path / "box" / "p.csv").write_text("\n".join(rows), encoding="utf-8")
    [sample] = load_dataset(tmp_path)

    [copy] = rescaled([sample], 0.5, tmp_path / "150")

    assert copy.name == sample.name
    assert sample.gt is not None
    assert copy.gt is not None
    assert [ln.text for ln in copy.gt] == [ln.text for ln in sample.gt]
    image = np.asarray(cv2.imread(str(copy.path), cv2.IMREAD_GRAYSCALE))
    assert image.shape == (1754, 1240)
    ink = image < 128
    inside = np.zeros_like(ink)
    for ln in copy.gt:
        (x0, y0), _, (x1, y1), _ = ln.polygon
        inside[int(y0) : int(y1) + 2, int(x0) : int(x1) + 2] = True
    assert ink.sum() > 1000
    assert (ink & inside).sum() / ink.sum() > 0.97
    (x0, y0), *_ = sample.gt[0].polygon
    (cx0, cy0), *_ = copy.gt[0].polygon
    assert (cx0, cy0) == pytest.approx((x0 / 2, y0 / 2), abs=0.1)  # sides rounded to pixels
    with pytest.raises(ValueError, match="over 0"):
        rescaled([sample], 0, tmp_path / "none")
