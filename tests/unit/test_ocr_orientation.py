"""How a page turned a quarter turn shows in det's boxes (processors/ocr/orientation.py)."""

from __future__ import annotations

import numpy as np

from ocrstream.processors.ocr.orientation import read_both_ways


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

    assert read_both_ways(read, [narrow, wide], widest=1) == (0.9, 0.3)
    assert [line.shape[1] for line in seen] == [400, 400]
    assert read_both_ways(read, []) == (0.0, 0.0)
