"""Benchmark inputs: the SROIE box format, image folders and synthetic A4 pages."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from ocrstream.bench.datasets import (
    load_dataset,
    parse_box_line,
    render_a4_page,
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
