"""Ruled tables of born-digital pages from the PDF's own vector lines. Pure.

A page answered from its text layer has no image to give the layout and table models, but a
ruled table is drawn: its rules are in the PDF. From the page's horizontal and vertical
segments (:func:`segments`: strokes, and rectangles as their four sides or, when thin, as one
rule):

1. Rules that touch or cross (within :data:`TOLERANCE` pixels) form a group; a group with at
   least two horizontal and two vertical rules is a table, its box their union.
2. The distinct y of its horizontal rules and x of its vertical rules cut the box into
   elementary cells; two neighbours are one cell where no rule separates them at the middle of
   their shared side. The merged groups are the cells with ``rowspan``/``colspan``; a table
   whose merges are not rectangles is not trusted (no table).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ocrstream.processors.layout.blocks import BBox
from ocrstream.processors.layout.table_grid import GridCell

TOLERANCE = 3.0  # pixels: rules this close touch; y (or x) this close is one grid line
THIN = 3.0  # a filled rectangle thinner than this is a rule
MIN_RULE = 8.0  # shorter strokes are not rules (glyph parts, ticks)
MAX_RULES = 2000  # per page; more is a drawing, not tables (and grouping is quadratic)


@dataclass(frozen=True, slots=True)
class Rule:
    horizontal: bool
    at: float  # y of a horizontal rule, x of a vertical one
    lo: float  # where it starts along its direction
    hi: float


@dataclass(frozen=True, slots=True)
class RuledTable:
    bbox: BBox
    cells: tuple[GridCell, ...]


def segments(boxes: Sequence[BBox]) -> list[Rule]:
    """Rules from stroke and rectangle boxes in page pixels: a box thinner than :data:`THIN`
    one way is one rule along the other; a bigger box gives its four sides."""
    rules: list[Rule] = []
    for x0, y0, x1, y1 in boxes:
        w, h = x1 - x0, y1 - y0
        if h <= THIN and w >= MIN_RULE:
            rules.append(Rule(True, (y0 + y1) / 2, x0, x1))
        elif w <= THIN and h >= MIN_RULE:
            rules.append(Rule(False, (x0 + x1) / 2, y0, y1))
        elif w >= MIN_RULE and h >= MIN_RULE:
            rules += [Rule(True, y0, x0, x1), Rule(True, y1, x0, x1),
                      Rule(False, x0, y0, y1), Rule(False, x1, y0, y1)]  # fmt: skip
        if len(rules) > MAX_RULES:
            return []
    return rules


def _touch(a: Rule, b: Rule) -> bool:
    t = TOLERANCE
    if a.horizontal == b.horizontal:
        return abs(a.at - b.at) <= t and a.lo <= b.hi + t and b.lo <= a.hi + t
    h, v = (a, b) if a.horizontal else (b, a)
    return h.lo - t <= v.at <= h.hi + t and v.lo - t <= h.at <= v.hi + t


def _groups(rules: Sequence[Rule]) -> list[list[Rule]]:
    parent = list(range(len(rules)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(rules)):
        for j in range(i + 1, len(rules)):
            if _touch(rules[i], rules[j]):
                parent[find(i)] = find(j)
    out: dict[int, list[Rule]] = {}
    for i, rule in enumerate(rules):
        out.setdefault(find(i), []).append(rule)
    return list(out.values())


def _levels(values: Sequence[float]) -> list[float]:
    levels: list[float] = []
    for v in sorted(values):
        if levels and v - levels[-1] <= TOLERANCE:
            continue
        levels.append(v)
    return levels


def _covered(rules: Sequence[Rule], at: float, point: float) -> bool:
    return any(abs(r.at - at) <= TOLERANCE and r.lo - TOLERANCE <= point <= r.hi + TOLERANCE
               for r in rules)  # fmt: skip


def _table(rules: list[Rule]) -> RuledTable | None:
    hs = [r for r in rules if r.horizontal]
    vs = [r for r in rules if not r.horizontal]
    ys, xs = _levels([r.at for r in hs]), _levels([r.at for r in vs])
    if len(ys) < 2 or len(xs) < 2 or len(ys) * len(xs) > 40_000:
        return None
    rows, cols = len(ys) - 1, len(xs) - 1
    parent = list(range(rows * cols))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for r in range(rows):
        ymid = (ys[r] + ys[r + 1]) / 2
        for c in range(cols):
            xmid = (xs[c] + xs[c + 1]) / 2
            if c + 1 < cols and not _covered(vs, xs[c + 1], ymid):
                parent[find(r * cols + c)] = find(r * cols + c + 1)
            if r + 1 < rows and not _covered(hs, ys[r + 1], xmid):
                parent[find(r * cols + c)] = find((r + 1) * cols + c)
    members: dict[int, list[tuple[int, int]]] = {}
    for r in range(rows):
        for c in range(cols):
            members.setdefault(find(r * cols + c), []).append((r, c))
    # Grid positions as HTML counts them: rows and columns of the elementary grid.
    cells = []
    for group in members.values():
        r0, r1 = min(r for r, _ in group), max(r for r, _ in group)
        c0, c1 = min(c for _, c in group), max(c for _, c in group)
        if len(group) != (r1 - r0 + 1) * (c1 - c0 + 1):
            return None  # merges that are not rectangles: not a grid to trust
        box = (xs[c0], ys[r0], xs[c1 + 1], ys[r1 + 1])
        cells.append(GridCell(r0, c0, r1 - r0 + 1, c1 - c0 + 1, box))
    if len(cells) < 2:
        return None  # a frame, not a table
    cells.sort(key=lambda g: (g.row, g.col))
    return RuledTable((xs[0], ys[0], xs[-1], ys[-1]), tuple(cells))


def ruled_tables(boxes: Sequence[BBox]) -> list[RuledTable]:
    """The ruled tables drawn on a page, from its vector boxes in page pixels."""
    found = []
    for group in _groups(segments(boxes)):
        table = _table(group)
        if table is not None:
            found.append(table)
    return found
