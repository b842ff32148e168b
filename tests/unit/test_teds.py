"""TEDS on small hand-made tables (ocrstream.bench.teds)."""

from __future__ import annotations

import pytest

from ocrstream.bench.teds import Node, match_tables, parse_table, teds, tree_distance

GRID = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>"


def test_identical_tables_score_one_with_and_without_text() -> None:
    assert teds(GRID, GRID) == 1.0
    assert teds(GRID, GRID, structure_only=True) == 1.0


def test_thead_tbody_and_th_read_as_rows_and_cells() -> None:
    fancy = (
        "<table><thead><tr><th>a</th><th>b</th></tr></thead>"
        "<tbody><tr><td> c </td><td>d</td></tr></tbody></table>"
    )
    assert teds(fancy, GRID) == 1.0


def test_one_wrong_cell_costs_its_share_of_the_text_score_only() -> None:
    wrong = GRID.replace("<td>d</td>", "<td>x</td>")
    # 7 nodes (table, 2 rows, 4 cells); one cell's text entirely wrong: distance 1
    assert teds(wrong, GRID) == pytest.approx(1 - 1 / 7)
    assert teds(wrong, GRID, structure_only=True) == 1.0
    half = GRID.replace("<td>d</td>", "<td>dx</td>")
    assert teds(half, GRID) == pytest.approx(1 - 0.5 / 7)


def test_a_missing_cell_and_a_missing_row_lower_the_structure_score() -> None:
    fewer = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td></tr></table>"
    assert teds(fewer, GRID, structure_only=True) == pytest.approx(1 - 1 / 7)
    one_row = "<table><tr><td>a</td><td>b</td></tr></table>"
    assert teds(one_row, GRID, structure_only=True) == pytest.approx(1 - 3 / 7)


def test_spans_must_match_for_a_cell_to_match() -> None:
    spanned = '<table><tr><td colspan="2">ab</td></tr><tr><td>c</td><td>d</td></tr></table>'
    split = "<table><tr><td>ab</td><td></td></tr><tr><td>c</td><td>d</td></tr></table>"
    # the spanning cell vs a plain one: a rename (1) plus the extra empty cell (1), of 7 nodes
    assert teds(split, spanned, structure_only=True) == pytest.approx(1 - 2 / 7)
    assert teds(spanned, spanned) == 1.0
    rowspan = '<table><tr><td rowspan="2">a</td><td>b</td></tr><tr><td>d</td></tr></table>'
    no_rowspan = "<table><tr><td>a</td><td>b</td></tr><tr><td>d</td></tr></table>"
    assert teds(no_rowspan, rowspan, structure_only=True) == pytest.approx(1 - 1 / 6)


def test_something_that_is_no_table_scores_near_zero() -> None:
    assert teds("<p>not a table</p>", GRID) == pytest.approx(1 / 7)
    assert parse_table("").size() == 1


def test_tree_distance_is_symmetric_and_counts_inserts() -> None:
    a = parse_table(GRID)
    b = Node("table")
    assert tree_distance(a, b, lambda x, y: 0.0) == 6
    assert tree_distance(b, a, lambda x, y: 0.0) == 6


def test_tables_of_a_page_are_paired_and_unpaired_slots_score_zero() -> None:
    other = "<table><tr><td>x</td></tr></table>"
    assert match_tables([GRID], [GRID]) == [1.0]
    assert match_tables([], [GRID]) == [0.0]  # a missed table costs its whole score
    assert match_tables([other, GRID], [GRID]) == [1.0, 0.0]  # and so does a false one
    scores = match_tables([GRID, other], [other, GRID])
    assert scores == [1.0, 1.0]
