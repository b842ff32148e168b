"""CER and line matching: the numbers the benchmark reports for every engine."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocrstream.bench.cer import (
    CerCounts,
    TextLine,
    _levenshtein_numpy,
    levenshtein,
    match_lines,
    normalise,
    page_cer,
    text_cer,
)


def box(x0: float, y0: float, x1: float, y1: float) -> tuple[tuple[float, float], ...]:
    return ((x0, y0), (x1, y0), (x1, y1), (x0, y1))


def line(text: str, x0: float, y0: float, x1: float, y1: float) -> TextLine:
    return TextLine(text=text, polygon=box(x0, y0, x1, y1))


@pytest.mark.parametrize(
    ("a", "b", "d"),
    [
        ("", "", 0),
        ("abc", "", 3),
        ("", "abc", 3),
        ("kitten", "sitting", 3),
        ("flaw", "lawn", 2),
        ("TOTAL", "TOTAL", 0),
        ("日本語", "日本", 1),
    ],
)
def test_levenshtein_known_distances(a: str, b: str, d: int) -> None:
    assert levenshtein(a, b) == d
    assert _levenshtein_numpy(a, b) == d


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="abc .", max_size=30), st.text(alphabet="abc .", max_size=30))
def test_numpy_levenshtein_agrees_with_rapidfuzz(a: str, b: str) -> None:
    assert _levenshtein_numpy(a, b) == levenshtein(a, b)


def test_normalise_folds_width_case_and_whitespace() -> None:
    assert normalise("  Ｔｏｔａｌ\t RM\n12.00 ") == "total rm 12.00"
    assert normalise("ﬁne") == "fine"


def test_identical_pages_score_zero() -> None:
    gt = [line("TOTAL 12.00", 10, 10, 200, 40), line("CASH 20.00", 10, 50, 200, 80)]
    counts = page_cer(gt, gt, normalised=False)
    assert (counts.edits, counts.ref_chars, counts.matched) == (0, 21, 2)
    assert counts.cer == 0.0


def test_lines_are_matched_by_position_not_by_order_or_text() -> None:
    gt = [line("TOTAL", 10, 10, 200, 40), line("CASH", 10, 50, 200, 80)]
    pred = [line("CASH", 12, 52, 198, 78), line("T0TAL", 11, 11, 199, 39)]
    groups = match_lines(pred, gt)
    assert groups == {0: [1], 1: [0]}
    assert page_cer(pred, gt, normalised=False).edits == 1


def test_missing_and_extra_lines_count_in_full() -> None:
    gt = [line("TOTAL", 10, 10, 200, 40), line("CASH", 10, 50, 200, 80)]
    pred = [line("TOTAL", 10, 10, 200, 40), line("noise", 500, 500, 600, 530)]
    counts = page_cer(pred, gt, normalised=False)
    assert counts.missed_gt == 1
    assert counts.extra_pred == 1
    assert counts.edits == len("CASH") + len("noise")
    assert counts.cer == pytest.approx(9 / 9)


def test_a_split_line_is_joined_left_to_right() -> None:
    gt = [line("TOTAL AMOUNT 12.00", 10, 10, 400, 40)]
    pred = [line("12.00", 300, 10, 400, 40), line("TOTAL AMOUNT", 10, 10, 280, 40)]
    counts = page_cer(pred, gt, normalised=False)
    assert counts.edits == 0
    assert counts.extra_pred == 0


def test_a_split_line_on_a_page_turned_sideways_is_joined_along_its_text() -> None:
    """A line of a page scanned a quarter turn clockwise runs down the image: its first
    corner is at the top right, and its parts are joined top down."""
    gt = [TextLine("TOTAL AMOUNT 12.00", ((40, 10), (40, 400), (10, 400), (10, 10)))]
    pred = [line("12.00", 9, 300, 40, 400), line("TOTAL AMOUNT", 11, 10, 40, 280)]
    assert page_cer(pred, gt, normalised=False).edits == 0


def test_a_column_of_vertical_writing_split_in_two_is_joined_top_down() -> None:
    gt = [line("春眠不觉晓处处闻啼鸟", 100, 10, 150, 600)]
    pred = [line("处处闻啼鸟", 99, 320, 150, 600), line("春眠不觉晓", 101, 10, 150, 300)]
    assert match_lines(pred, gt) == {0: [1, 0]}


def test_normalised_cer_ignores_case_raw_does_not() -> None:
    gt = [line("THANK YOU", 0, 0, 100, 20)]
    pred = [line("Thank  You", 0, 0, 100, 20)]
    assert page_cer(pred, gt, normalised=True).edits == 0
    assert page_cer(pred, gt, normalised=False).edits == 6 + 1  # case, one extra space


def test_counts_add_up_over_pages() -> None:
    total = CerCounts()
    total += CerCounts(edits=1, ref_chars=10, matched=1)
    total += CerCounts(edits=3, ref_chars=10, missed_gt=1)
    assert total.cer == pytest.approx(0.2)
    assert (total.matched, total.missed_gt) == (1, 1)


def test_text_cer_without_positions() -> None:
    assert text_cer("hello world", "hello  world", normalised=True).edits == 0
    assert text_cer("", "abc", normalised=False).cer == 1.0
