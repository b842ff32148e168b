"""TEDS: tree-edit-distance similarity of two HTML tables.

A table is read as a tree: ``table`` → ``tr`` → ``td`` (``th`` reads as ``td``; ``thead``,
``tbody`` and ``tfoot`` are looked through). A cell node carries its ``rowspan``, ``colspan``
and text (inner text, whitespace collapsed). The distance is the ordered tree edit distance
(Zhang and Shasha, 1989) with these costs: inserting or deleting a node costs 1; turning one
node into another costs 1 when their tags differ, or when both are cells whose spans differ,
else — for two cells — the normalised Levenshtein distance of their texts (0 with
``structure_only``), else 0. Then

    TEDS(a, b) = 1 - distance(a, b) / max(nodes(a), nodes(b))

so identical tables score 1 and tables with nothing in common score near 0.

Cost: the algorithm is quadratic in the number of nodes times the square of the tree depth
(here 3), plain Python: fine for tables of a few hundred cells, slow for thousands.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser

from rapidfuzz.distance import Levenshtein

_SKIP = {"thead", "tbody", "tfoot"}
_CELL = {"td", "th"}


@dataclass(slots=True)
class Node:
    """A node of a table tree: ``table``, ``tr`` or ``td``."""

    tag: str
    rowspan: int = 1
    colspan: int = 1
    text: str = ""
    children: list[Node] = field(default_factory=list)

    def size(self) -> int:
        return 1 + sum(child.size() for child in self.children)


class _TableParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root: Node | None = None
        self._stack: list[Node] = []
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            return
        if tag == "br":
            self._text.append(" ")
            return
        if tag == "table":
            if self.root is not None:
                return  # a nested table: its text joins the cell around it
            node = Node("table")
            self.root = node
            self._stack = [node]
        elif tag == "tr" and self._stack:
            node = Node("tr")
            self._stack = self._stack[:1]
            self._stack[0].children.append(node)
            self._stack.append(node)
        elif tag in _CELL and self._stack:
            spans = dict(attrs)
            node = Node("td", _span(spans.get("rowspan")), _span(spans.get("colspan")))
            if len(self._stack) == 1:  # a cell without a row: give it one
                row = Node("tr")
                self._stack[0].children.append(row)
                self._stack.append(row)
            self._stack = self._stack[:2]
            self._stack[1].children.append(node)
            self._stack.append(node)
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if tag in _CELL and len(self._stack) == 3:
            self._stack[2].text = " ".join("".join(self._text).split())
            self._stack.pop()

    def handle_data(self, data: str) -> None:
        if len(self._stack) == 3:
            self._text.append(data)


def _span(value: str | None) -> int:
    try:
        return max(1, int(value or 1))
    except ValueError:
        return 1


def parse_table(html: str) -> Node:
    """The first ``<table>`` of ``html`` as a tree; an empty ``table`` node if there is none."""
    parser = _TableParser()
    parser.feed(html)
    parser.close()
    if parser.root is not None and len(parser._stack) == 3:  # an unclosed last cell
        parser._stack[2].text = " ".join("".join(parser._text).split())
    return parser.root or Node("table")


def _postorder(root: Node) -> tuple[list[Node], list[int], list[int]]:
    """Nodes in post-order, each node's leftmost leaf (index), and the key roots."""
    nodes: list[Node] = []
    leftmost: list[int] = []

    def walk(node: Node) -> int:
        first = -1
        for child in node.children:
            leaf = walk(child)
            if first < 0:
                first = leaf
        nodes.append(node)
        leftmost.append(first if first >= 0 else len(nodes) - 1)
        return leftmost[-1]

    walk(root)
    highest: dict[int, int] = {}
    for i, leaf in enumerate(leftmost):
        highest[leaf] = i  # the last node with this leftmost leaf is the highest
    return nodes, leftmost, sorted(highest.values())


def tree_distance(a: Node, b: Node, rename: Callable[[Node, Node], float]) -> float:
    """Zhang–Shasha ordered tree edit distance; insert and delete cost 1."""
    na, la, ka = _postorder(a)
    nb, lb, kb = _postorder(b)
    td = [[0.0] * len(nb) for _ in na]
    for i in ka:
        for j in kb:
            li, lj = la[i], lb[j]
            rows, cols = i - li + 2, j - lj + 2
            fd = [[0.0] * cols for _ in range(rows)]
            for x in range(1, rows):
                fd[x][0] = fd[x - 1][0] + 1
            for y in range(1, cols):
                fd[0][y] = fd[0][y - 1] + 1
            for x in range(1, rows):
                ai = li + x - 1
                for y in range(1, cols):
                    bj = lj + y - 1
                    if la[ai] == li and lb[bj] == lj:
                        fd[x][y] = min(
                            fd[x - 1][y] + 1,
                            fd[x][y - 1] + 1,
                            fd[x - 1][y - 1] + rename(na[ai], nb[bj]),
                        )
                        td[ai][bj] = fd[x][y]
                    else:
                        fd[x][y] = min(
                            fd[x - 1][y] + 1,
                            fd[x][y - 1] + 1,
                            fd[la[ai] - li][lb[bj] - lj] + td[ai][bj],
                        )
    return td[-1][-1]


def _rename(structure_only: bool) -> Callable[[Node, Node], float]:
    def cost(x: Node, y: Node) -> float:
        if x.tag != y.tag:
            return 1.0
        if x.tag != "td":
            return 0.0
        if x.rowspan != y.rowspan or x.colspan != y.colspan:
            return 1.0
        if structure_only:
            return 0.0
        return float(Levenshtein.normalized_distance(x.text, y.text))

    return cost


def teds(pred: str | Node, truth: str | Node, *, structure_only: bool = False) -> float:
    """TEDS of two tables (HTML or parsed), in [0, 1]; see the module docstring."""
    a = parse_table(pred) if isinstance(pred, str) else pred
    b = parse_table(truth) if isinstance(truth, str) else truth
    size = max(a.size(), b.size())
    return 1.0 - tree_distance(a, b, _rename(structure_only)) / size


def match_tables(
    preds: list[str], truths: list[str], *, structure_only: bool = False
) -> list[float]:
    """One score per slot of a page: its true tables, each paired with the predicted table
    that resembles it best (greedily, each used once), plus every predicted table left
    unpaired (a table where there is none). Unpaired slots score 0."""
    pa = [parse_table(p) for p in preds]
    ta = [parse_table(t) for t in truths]
    pairs = sorted(
        ((teds(p, t, structure_only=structure_only), i, j) for i, p in enumerate(pa)
         for j, t in enumerate(ta)),
        reverse=True,
    )  # fmt: skip
    used_p: set[int] = set()
    used_t: set[int] = set()
    scores: list[float] = []
    for score, i, j in pairs:
        if i in used_p or j in used_t:
            continue
        used_p.add(i)
        used_t.add(j)
        scores.append(score)
    return scores + [0.0] * (max(len(pa), len(ta)) - len(scores))
