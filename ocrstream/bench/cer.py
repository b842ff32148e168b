"""Character error rate of OCR lines against ground-truth lines, matched by position.

Definitions (used for ocrstream, RapidOCR and Tesseract alike):

- **Matching.** Predicted and ground-truth lines are matched one-to-one by position: a pair
  is a candidate when their polygons overlap with IoU >= ``min_iou`` or the centre of one
  lies inside the other; among candidates the assignment maximises total IoU (Hungarian,
  with scipy when installed) or takes pairs greedily by IoU. A predicted line left over whose
  centre lies inside a matched ground-truth line is then appended to that line (an engine
  that splits one line in two pays for the missing space, not for a whole line).
  Pieces of one ground-truth line are joined left to right with a space.
- **Errors.** Per matched ground-truth line, the Levenshtein distance between its text and the
  joined prediction. An unmatched ground-truth line counts all its characters (deletions); an
  unmatched prediction counts all its characters (insertions).
- **CER** = total edits / total ground-truth characters, summed over pages (not averaged per
  page), reported twice:
  - *raw*: the texts as they are;
  - *normalised*: both sides NFKC-normalised (full-width forms, ligatures and compatibility
    characters folded), case-folded, runs of whitespace collapsed to one space, ends
    stripped. Case-folding is needed for SROIE, whose ground truth is upper-cased whatever
    the receipt prints ("Thank You" is annotated "THANK YOU"): raw CER there mostly
    counts case.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

_WS = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class TextLine:
    """A line of text and its polygon (4 points or more, page pixels)."""

    text: str
    polygon: tuple[tuple[float, float], ...]


@dataclass(slots=True)
class CerCounts:
    """Edit and character totals; add them up over pages, then read ``cer``."""

    edits: int = 0
    ref_chars: int = 0
    matched: int = 0
    missed_gt: int = 0
    extra_pred: int = 0

    @property
    def cer(self) -> float:
        return self.edits / self.ref_chars if self.ref_chars else 0.0

    def __iadd__(self, other: CerCounts) -> CerCounts:
        self.edits += other.edits
        self.ref_chars += other.ref_chars
        self.matched += other.matched
        self.missed_gt += other.missed_gt
        self.extra_pred += other.extra_pred
        return self


def normalise(text: str) -> str:
    """NFKC, case-folded, whitespace runs collapsed to one space, ends stripped."""
    return _WS.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insert, delete, substitute, each 1)."""
    try:
        from rapidfuzz.distance import Levenshtein
    except ImportError:  # pragma: no cover - rapidfuzz is a dependency
        return _levenshtein_numpy(a, b)
    return int(Levenshtein.distance(a, b))


def _levenshtein_numpy(a: str, b: str) -> int:
    """Row-by-row DP, vectorised over the inner loop's insert/substitute terms."""
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return len(a)
    bb = np.frombuffer(b.encode("utf-32-le"), dtype=np.uint32)
    prev = np.arange(len(b) + 1, dtype=np.int64)
    for i, ch in enumerate(a, 1):
        sub = prev[:-1] + (bb != ord(ch))
        cur = np.empty_like(prev)
        cur[0] = i
        cur[1:] = np.minimum(prev[1:] + 1, sub)
        # deletions within the row: cur[j] = min(cur[j], cur[j-1] + 1), a running minimum
        cur = np.minimum.accumulate(cur - np.arange(len(cur))) + np.arange(len(cur))
        prev = cur
    return int(prev[-1])


def _polygons(lines: Sequence[TextLine]) -> list[object]:
    from shapely.geometry import Polygon

    out = []
    for line in lines:
        poly = Polygon(line.polygon)
        if not poly.is_valid:
            poly = poly.buffer(0)
        if poly.is_empty or poly.area <= 0:
            poly = Polygon(line.polygon).envelope
        out.append(poly)
    return out


def overlap_matrix(
    pred: Sequence[TextLine], gt: Sequence[TextLine]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """IoU of every (pred, gt) pair, and whether a centre of one lies inside the other."""
    import shapely

    iou: np.ndarray = np.zeros((len(pred), len(gt)))
    contains = np.zeros((len(pred), len(gt)), dtype=bool)
    if not pred or not gt:
        return iou, contains
    p = np.array(_polygons(pred), dtype=object)[:, None]
    g = np.array(_polygons(gt), dtype=object)[None, :]
    inter = shapely.area(shapely.intersection(p, g))
    union = shapely.area(p) + shapely.area(g) - inter
    iou = np.where(union > 0, inter / np.maximum(union, 1e-9), 0.0)
    contains = shapely.contains(g, shapely.centroid(p)) | shapely.contains(p, shapely.centroid(g))
    return iou, contains


def _assign(score: npt.NDArray[np.float64], ok: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
    if score.size == 0 or not ok.any():
        return []
    weight = np.where(ok, score + 1e-3, 0.0)  # containment alone still counts a little
    try:
        from scipy.optimize import linear_sum_assignment
    except ImportError:
        pairs = []
        used_p: set[int] = set()
        used_g: set[int] = set()
        for flat in np.argsort(-weight, axis=None):
            pi, gi = divmod(int(flat), weight.shape[1])
            if weight[pi, gi] <= 0:
                break
            if pi not in used_p and gi not in used_g:
                pairs.append((pi, gi))
                used_p.add(pi)
                used_g.add(gi)
        return pairs
    rows, cols = linear_sum_assignment(weight, maximize=True)
    return [(int(r), int(c)) for r, c in zip(rows, cols, strict=True) if weight[r, c] > 0]


def match_lines(
    pred: Sequence[TextLine], gt: Sequence[TextLine], min_iou: float = 0.1
) -> dict[int, list[int]]:
    """Ground-truth index -> predicted indices assigned to it, in the order they come along
    it (left to right on a line that lies, top down on one that stands, as the text runs on a
    turned page: along the line's longer side, from its first corner)."""
    iou, contains = overlap_matrix(pred, gt)
    ok = (iou >= min_iou) | contains
    groups: dict[int, list[int]] = {gi: [pi] for pi, gi in _assign(iou, ok)}
    used = {p for ps in groups.values() for p in ps}
    if gt:
        import shapely

        gpolys = _polygons(gt)
        for pi in range(len(pred)):
            if pi in used:
                continue
            centre = shapely.centroid(_polygons([pred[pi]])[0])
            inside = [gi for gi in groups if shapely.contains(gpolys[gi], centre)]
            if inside:
                best = max(inside, key=lambda g: iou[pi, g])
                groups[best].append(pi)
    for gi, ps in groups.items():
        along = _along(gt[gi])
        groups[gi] = sorted(
            ps, key=lambda p: min(x * along[0] + y * along[1] for x, y in pred[p].polygon)
        )
    return groups


def _along(line: TextLine) -> tuple[float, float]:
    """The direction ``line``'s text runs in: its polygon's longer side from the first corner
    (the top edge of a line that lies, the left edge of a column that stands)."""
    (x0, y0), (x1, y1) = line.polygon[0], line.polygon[1]
    x3, y3 = line.polygon[-1]
    across, down = (x1 - x0, y1 - y0), (x3 - x0, y3 - y0)
    return across if math.hypot(*across) >= math.hypot(*down) else down


def page_cer(
    pred: Sequence[TextLine], gt: Sequence[TextLine], *, normalised: bool, min_iou: float = 0.1
) -> CerCounts:
    """Edits and reference characters of one page (see the module docstring)."""
    prep = normalise if normalised else (lambda s: s)
    groups = match_lines(pred, gt, min_iou=min_iou)
    counts = CerCounts()
    used: set[int] = set()
    for gi, line in enumerate(gt):
        ref = prep(line.text)
        counts.ref_chars += len(ref)
        if gi in groups:
            hyp = prep(" ".join(pred[p].text for p in groups[gi]))
            counts.edits += levenshtein(ref, hyp)
            counts.matched += 1
            used.update(groups[gi])
        else:
            counts.edits += len(ref)
            counts.missed_gt += 1
    for pi, line in enumerate(pred):
        if pi not in used:
            counts.edits += len(prep(line.text))
            counts.extra_pred += 1
    return counts


def text_cer(pred: str, ref: str, *, normalised: bool) -> CerCounts:
    """CER of whole texts, for sources without positions (lines joined by newlines)."""
    prep = normalise if normalised else (lambda s: s)
    r, h = prep(ref), prep(pred)
    return CerCounts(edits=levenshtein(r, h), ref_chars=len(r))
