"""Reading order on crafted boxes: columns, receipts, skew."""

from __future__ import annotations

import math

import numpy as np

from ocrstream.processors.ocr.order import reading_order, runs_down, text_rows


def box(x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float32)


def test_two_columns_under_a_title_read_column_by_column():
    boxes = [box(100, 50, 1900, 100)]  # title across both columns
    left, right = [], []
    for r in range(8):
        y = 200 + r * 60
        left.append(len(boxes))
        boxes.append(box(100, y, 950 - (r % 3) * 40, y + 40))
        right.append(len(boxes))
        boxes.append(box(1050, y, 1900 - (r % 2) * 60, y + 40))
    footer = len(boxes)
    boxes.append(box(100, 800, 1900, 840))
    rng = np.random.default_rng(0)
    shuffled = rng.permutation(len(boxes)).tolist()
    order = [shuffled[i] for i in reading_order([boxes[i] for i in shuffled])]
    assert order == [0, *left, *right, footer]


def test_receipt_rows_read_left_to_right_not_as_columns():
    boxes, expect = [], []
    for r in range(10):
        y = 100 + r * 50
        expect += [len(boxes), len(boxes) + 1]
        boxes.append(box(20, y, 150 + (r % 4) * 30, y + 30))  # label
        boxes.append(box(380, y + 2, 460, y + 31))  # amount, slightly offset
    assert reading_order(boxes) == expect


def test_skewed_page_keeps_lines_in_order():
    angle = math.radians(2.0)
    rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    boxes = []
    for r in range(12):
        y = 100 + r * 45
        boxes.append(box(50, y, 2000, y + 35) @ rot.T)
    order = reading_order(boxes[::-1])
    assert [11 - i for i in order] == list(range(12))


def box_at(x: float, y: float, w: float, h: float) -> np.ndarray:
    return box(x, y, x + w, y + h)


def test_lines_that_lie_run_across_and_lines_that_stand_run_down():
    across = [box_at(20, 30 + 40 * i, 600, 24) for i in range(10)]
    down = [box_at(30 + 40 * i, 20, 24, 600) for i in range(10)]
    assert not runs_down(across)
    assert runs_down(down)


def test_digits_and_short_words_standing_on_an_upright_page_do_not_turn_it():
    lines = [box_at(20, 30 + 40 * i, 500, 24) for i in range(6)]
    digits = [box_at(560, 30 + 40 * i, 10, 24) for i in range(6)]  # "1", "l", "I"
    assert not runs_down(lines + digits)
    assert not runs_down(digits)  # a letter is not a line
    assert runs_down([box_at(30, 20, 24, 600), box_at(70, 20, 24, 400)])  # two lines will do
    assert not runs_down([box_at(30, 20, 24, 600)])  # one is too few to tell


def test_columns_that_stand_read_right_to_left_each_from_the_top():
    """Vertical writing (or a page scanned a quarter turn clockwise): the rightmost column
    first, a column broken in two read top half first, then the next column to the left."""
    expect, boxes = [], []
    for c in range(6):
        x = 1800 - c * 70
        if c == 2:
            boxes += [box_at(x, 100, 44, 500), box_at(x, 700, 44, 600)]
        else:
            boxes.append(box_at(x, 100, 44, 1200 - (c % 3) * 200))
    expect = list(range(len(boxes)))
    rng = np.random.default_rng(1)
    shuffled = rng.permutation(len(boxes)).tolist()
    assert [shuffled[i] for i in reading_order([boxes[i] for i in shuffled])] == expect


def test_text_rows_join_side_by_side_lines():
    polys = [box(20, 100, 150, 130), box(380, 102, 460, 131), box(20, 150, 300, 180)]
    assert text_rows(polys, ["TOTAL", "12.00", "THANK YOU"]) == ["TOTAL 12.00", "THANK YOU"]


def test_empty_and_single():
    assert reading_order([]) == []
    assert reading_order([box(0, 0, 10, 10)]) == [0]
