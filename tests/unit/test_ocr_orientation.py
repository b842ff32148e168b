"""How a page turned a quarter turn shows in det's boxes (processors/ocr/orientation.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ocrstream.processors.ocr.orientation import (
    LOOK_HEIGHTS,
    marks_set_across,
    read_both_ways,
    small_marks,
    written_across,
    written_in_cjk,
)

NOTO_CJK = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")


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


def _line(*marks: tuple[int, int]) -> np.ndarray:
    """A crop at rec's height: ten characters (full-height blocks) 40 px apart, then a small
    mark (8 x 8) after each of ``marks``' characters at the given top."""
    line = np.full((48, 420, 3), 255, np.uint8)
    for i in range(10):
        line[6:42, 4 + 40 * i : 34 + 40 * i] = 0
    for after, top in marks:
        line[top : top + 8, 36 + 40 * after : 38 + 40 * after + 1] = 0
    return line


def test_small_marks_are_counted_where_they_sit_in_the_text():
    assert small_marks(_line()) == (0, 0)
    assert small_marks(_line((0, 34), (3, 34), (5, 8))) == (1, 2)  # two low, one high
    assert small_marks(_line((2, 22))) == (0, 0)  # across the middle: neither
    blank = np.full((48, 200, 3), 255, np.uint8)
    assert small_marks(blank) == (0, 0)


def test_high_marks_are_moved_down_to_the_bottom_of_the_text_and_the_rest_kept():
    line = _line((1, 8), (4, 34), (6, 10))
    moved = marks_set_across(line)
    assert small_marks(moved) == (0, 3)
    assert np.array_equal(moved[:, :36], line[:, :36])  # the characters are where they were
    assert (moved[8:18, 76:79] == 255).all()  # the first high mark's place is blank
    assert (moved[34:42, 76:79] == 0).all()  # and the mark is at the text's bottom (row 42)
    low = _line((2, 34))
    assert marks_set_across(low) is low  # nothing high: the crop as it was


def test_two_high_marks_side_by_side_are_a_colon_and_stay_where_they_are():
    """A colon's vertical form, cut, is two dots side by side at the top: rec reads it there,
    and moved down it reads as a full stop."""
    line = np.full((48, 300, 3), 255, np.uint8)
    for x in (4, 120, 250):
        line[6:42, x : x + 30] = 0  # three characters
    line[10:16, 40:45] = line[10:16, 55:60] = 0  # a colon's dots, 10 px apart, then one alone
    line[10:16, 160:165] = 0
    moved = marks_set_across(line)
    assert np.array_equal(moved[:, :120], line[:, :120])
    assert (moved[10:16, 160:165] == 255).all()
    assert (moved[36:42, 160:165] == 0).all()


def test_ink_cut_by_the_crops_edge_is_not_a_mark():
    """A neighbouring column's characters cut by the crop (a column grown across into the
    next one) fill the gaps between this one's at its top or bottom edge."""
    line = _line((1, 34))
    line[0:5, 36:40] = 0  # a neighbour's stroke in a gap, cut by the top edge
    line[44:48, 116:120] = 0  # and one cut by the bottom edge
    assert small_marks(line) == (0, 1)


def _rendered(text: str, down: bool) -> np.ndarray:
    """``text`` at rec's height as the engine cuts it: a line written across, or a column
    written down with the font's vertical forms, cut and turned a quarter turn
    counter-clockwise (geometry.crop_quad)."""
    import cv2
    from PIL import Image, ImageDraw, ImageFont, features

    if not NOTO_CJK.is_file():
        pytest.skip(f"no {NOTO_CJK}: apt-get install fonts-noto-cjk (scripts/test.sh does)")
    if down and not features.check("raqm"):
        pytest.skip("this Pillow lays out no vertical text (built without libraqm)")
    font = ImageFont.truetype(str(NOTO_CJK), 60, index=2)  # Noto Sans CJK SC
    length = 64 * len(text) + 40
    if down:
        image = Image.new("L", (80, length), 255)
        ImageDraw.Draw(image).text(
            (40, 20), text, font=font, fill=0, anchor="mt", direction="ttb", features=["vert"]
        )
        crop = np.rot90(np.asarray(image))
    else:
        image = Image.new("L", (length, 80), 255)
        ImageDraw.Draw(image).text((20, 40), text, font=font, fill=0, anchor="lm")
        crop = np.asarray(image)
    crop = cv2.resize(np.ascontiguousarray(crop), (crop.shape[1] * 48 // 80, 48), cv2.INTER_AREA)
    return cv2.cvtColor(crop, cv2.COLOR_GRAY2BGR)


PROSE = ["春眠不觉晓，处处闻啼鸟。", "夜来风雨声、花落知多少。", "床前明月光，疑是地上霜。"]


def test_chinese_written_across_is_told_from_chinese_written_down():
    """Where the punctuation sits: low in a line written across; in the top right of its
    square in a column, at the top of the column as cut. Without punctuation, nothing to go on."""
    across = [_rendered(text, down=False) for text in PROSE]
    down = [_rendered(text, down=True) for text in PROSE]
    marks = [sum(c in "，、。" for c in text) for text in PROSE]
    assert [small_marks(line) for line in across] == [(0, n) for n in marks]
    assert [small_marks(line) for line in down] == [(n, 0) for n in marks]
    assert written_across(across)
    assert not written_across(down)
    assert [small_marks(marks_set_across(line)) for line in down] == [(0, n) for n in marks]
    bare = [_rendered(text.strip("，、。").replace("，", "").replace("、", ""), down=False)
            for text in PROSE]  # fmt: skip
    assert not written_across(bare)


def test_strokes_thickened_widens_dark_strokes_and_leaves_paper() -> None:
    from ocrstream.processors.ocr.orientation import strokes_thickened

    line = np.full((48, 120, 3), 230, np.uint8)
    line[10:38, 50:51] = 20  # a hairline one pixel wide
    assert strokes_thickened(line, 1) is line  # off: the crop as it is
    thick = strokes_thickened(line, 3)
    assert (thick[24, 49:52] == 20).all()  # three pixels wide now
    assert (thick[:, :45] == 230).all()  # the paper either side untouched
    assert (thick[:, 56:] == 230).all()
