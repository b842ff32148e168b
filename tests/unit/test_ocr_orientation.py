"""How a page turned a quarter turn shows in det's boxes (processors/ocr/orientation.py)."""

from __future__ import annotations

import numpy as np

from ocrstream.processors.ocr.orientation import read_both_ways, runs_down


def _box(x: float, y: float, w: float, h: float) -> np.ndarray:
    return np.array([[x, y], [x + w, y], [x + w, y + h], [x, y + h]], np.float32)


def test_lines_that_lie_run_across_and_lines_that_stand_run_down():
    across = [_box(20, 30 + 40 * i, 600, 24) for i in range(10)]
    down = [_box(30 + 40 * i, 20, 24, 600) for i in range(10)]
    assert not runs_down(across)
    assert runs_down(down)


def test_digits_and_short_words_standing_on_an_upright_page_do_not_turn_it():
    lines = [_box(20, 30 + 40 * i, 500, 24) for i in range(6)]
    digits = [_box(560, 30 + 40 * i, 10, 24) for i in range(6)]  # "1", "l", "I"
    assert not runs_down(lines + digits)
    assert not runs_down(digits)  # a letter is not a line
    assert runs_down([_box(30, 20, 24, 600), _box(70, 20, 24, 400)])  # two lines will do
    assert not runs_down([_box(30, 20, 24, 600)])  # one is too few to tell


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
