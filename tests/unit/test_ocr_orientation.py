"""How a page turned a quarter turn shows in det's boxes (processors/ocr/orientation.py)."""

from __future__ import annotations

import numpy as np

from ocrstream.processors.ocr.orientation import LOOK_HEIGHTS, read_both_ways, written_in_cjk


def _box(x: float, y: float, w: float, h: float) -> np.ndarray:
    return np.array([[x, y], [x + w, y], [x + w, y + h], [x, y + h]], np.float32)


def test_read_both_ways_reads_the_widest_lines_as_they_are_and_turned():
    wide = np.zeros((48, 400, 3), np.uint8)
    wide[:, :200] = 255  # white on the left: turned, on the right
    narrow = np.zeros((48, 50, 3), np.uint8)
    seen: list[np.ndarray] = []

    def read(lines: list[np.ndarray]) -> list[tuple[str, float]]:
        seen.extend(lines)
        # "confident" when the line's left half is white
        return [("x", 0.9 if line[:, : line.shape[1] // 2].mean() > 128 else 0.3) for line in lines]

    assert read_both_ways(read, [narrow, wide], widest=1) == (0.9, 0.3, "x")
    assert [line.shape[1] for line in seen] == [400, 400]
    assert read_both_ways(read, []) == (0.0, 0.0, "")


def test_lines_that_read_well_as_they_are_are_not_read_turned_and_long_ones_in_part():
    seen: list[np.ndarray] = []

    def read(lines: list[np.ndarray]) -> list[tuple[str, float]]:
        seen.extend(lines)
        return [("x", 0.9 if line[0, 0, 0] == 0 else 0.3) for line in lines]

    long = np.zeros((48, 48 * (LOOK_HEIGHTS + 10), 3), np.uint8)
    long[:, -1] = 255  # the last column: white only at the far end, turned at the start
    assert read_both_ways(read, [long], enough=0.8) == (0.9, 0.0, "x")
    assert [line.shape for line in seen] == [(48, 48 * LOOK_HEIGHTS, 3)]  # its start, once
    assert read_both_ways(read, [long], enough=0.95) == (0.9, 0.9, "x")  # cut before turning
    assert len(seen) == 3


def test_chinese_japanese_and_korean_are_told_from_other_scripts():
    assert written_in_cjk("春眠不觉晓，处处闻啼鸟")
    assert written_in_cjk("吾輩は猫である。名前はまだ無い")
    assert written_in_cjk("동해 물과 백두산이")
    assert written_in_cjk("总计 TOTAL 12.00 元人民币")  # most letters Chinese
    assert not written_in_cjk("Total due 12.00")
    assert not written_in_cjk("TOTAL 12.00 元")  # most letters Latin
    assert not written_in_cjk("12.00 -- 3")  # no letters
