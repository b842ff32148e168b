"""Reading order of the lines on a page: columns, then top to bottom, then left to right.

The boxes are first turned by the page's median line angle, so a skewed scan orders like a
straight one. Then a recursive XY-cut:

1. split the region into horizontal bands where no box crosses (a box's vertical extent is
   trimmed by a quarter of its height, so touching lines still part);
2. consecutive bands that share a vertical gutter (an x range no box of theirs crosses), with
   text-wide blocks on both sides, form a column block: the left column is read before the
   right one, each recursively;
3. a band that does not split into columns is read row by row, left to right.

A page whose lines stand (:func:`runs_down`: written in vertical columns, as Japanese and
Chinese may be, or scanned a quarter turn clockwise and not turned) is ordered as if turned a
quarter turn counter-clockwise: its columns right to left, each from the top down.

What separates columns from a table or a receipt (label on the left, amount on the right, both
on the same row) is width: text columns hold long lines (many line heights) that fill most of
each side, while a receipt's amounts are a narrow strip of short cells, read row by row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ocrstream.processors.ocr.geometry import Quad

# Each side of a gutter must hold blocks at least this share of the region's width.
COLUMN_MIN_SHARE = 0.25
# A gutter is at least this many median line heights wide.
GUTTER_MIN_HEIGHTS = 1.0
# Lines of a text column are long: their median width is at least this many line heights.
COLUMN_MIN_LINE_HEIGHTS = 6.0


def reading_order(quads: Sequence[Quad]) -> list[int]:
    """Indices of ``quads`` in reading order."""
    n = len(quads)
    if n <= 1:
        return list(range(n))
    pts = np.stack([np.asarray(q, np.float64) for q in quads])  # N x 4 x 2
    if runs_down(quads):
        # each quad turned 90° counter-clockwise, its corners from the new top-left: the
        # rightmost column becomes the first row, the top of each column its left end
        turned = pts[:, [1, 2, 3, 0]]
        pts = np.stack([turned[:, :, 1], -turned[:, :, 0]], axis=-1)
    angle = _median_angle(pts)
    if abs(angle) > 1e-3:
        c, s = np.cos(-angle), np.sin(-angle)
        rot = np.array([[c, -s], [s, c]])
        pts = pts @ rot.T
    bounds = np.concatenate([pts.min(axis=1), pts.max(axis=1)], axis=1)  # x0 y0 x1 y1
    heights = bounds[:, 3] - bounds[:, 1]
    line_h = float(np.median(heights)) if n else 1.0
    return _order(bounds, list(range(n)), max(line_h, 1.0))


def runs_down(quads: Sequence[Quad], min_lines: int = 2) -> bool:
    """Whether the text det found runs down the page rather than across it (a page scanned a
    quarter turn, or written in vertical columns, as Chinese, Japanese and Korean can be):
    the boxes that stand (three times as tall as wide: a line of a few characters, at least
    ``min_lines`` of them) outweigh those that lie, each by its length.
    A digit or a letter stands on an upright page too, but not three times as tall as wide,
    and it weighs little beside the lines around it."""
    if len(quads) < min_lines:
        return False
    q = np.asarray(quads, np.float64).reshape(-1, 4, 2)  # every page's boxes: one pass
    across = np.hypot(*(q[:, 1] - q[:, 0]).T)
    down = np.hypot(*(q[:, 3] - q[:, 0]).T)
    stands = down > 3 * across
    lies = ~stands & (across > 3 * down)
    return int(stands.sum()) >= min_lines and float(down[stands].sum()) > float(across[lies].sum())


def _median_angle(pts: npt.NDArray[np.float64]) -> float:
    d = pts[:, 1] - pts[:, 0]
    lengths = np.hypot(d[:, 0], d[:, 1])
    wide = lengths > 2 * np.hypot(*(pts[:, 3] - pts[:, 0]).T)
    if not wide.any():
        return 0.0
    angles = np.arctan2(d[wide, 1], d[wide, 0])
    angles = angles[np.abs(angles) < np.radians(20)]
    return float(np.median(angles)) if len(angles) else 0.0


def _order(b: npt.NDArray[np.float64], ids: list[int], line_h: float) -> list[int]:
    if len(ids) <= 1:
        return ids
    bands = _bands(b, ids)
    min_gap = GUTTER_MIN_HEIGHTS * line_h
    gutters = [_gutters(b, band, min_gap) for band in bands]
    out: list[int] = []
    i = 0
    while i < len(bands):
        j, gutter = _column_run(b, bands, gutters, i, min_gap)
        if gutter is not None:
            block = [k for band in bands[i:j] for k in band]
            left = [k for k in block if b[k, 2] <= gutter]
            right = [k for k in block if b[k, 2] > gutter]
            out += _order(b, left, line_h) + _order(b, right, line_h)
            i = j
        else:
            out += _rows(b, bands[i], line_h)
            i += 1
    return out


def _bands(b: npt.NDArray[np.float64], ids: list[int]) -> list[list[int]]:
    """Split into horizontal bands separated by y ranges no (trimmed) box crosses."""
    trim = (b[ids, 3] - b[ids, 1]) * 0.25
    y0 = b[ids, 1] + trim
    y1 = b[ids, 3] - trim
    order = np.argsort(y0, kind="stable")
    bands: list[list[int]] = []
    end = -np.inf
    for o in order.tolist():
        if y0[o] > end:
            bands.append([])
        bands[-1].append(ids[o])
        end = max(end, float(y1[o]))
    return bands


def _gutters(
    b: npt.NDArray[np.float64], ids: list[int], min_gap: float
) -> list[tuple[float, float]]:
    """Free x ranges between the boxes of ``ids`` at least ``min_gap`` wide."""
    spans = sorted(zip(b[ids, 0].tolist(), b[ids, 2].tolist(), strict=True))
    out: list[tuple[float, float]] = []
    end = spans[0][1]
    for x0, x1 in spans[1:]:
        if x0 - end >= min_gap:
            out.append((end, x0))
        end = max(end, x1)
    return out


def _column_run(
    b: npt.NDArray[np.float64],
    bands: list[list[int]],
    gutters: list[list[tuple[float, float]]],
    start: int,
    min_gap: float,
) -> tuple[int, float | None]:
    """The longest run of bands from ``start`` that shares a gutter, if it splits into two
    text columns there: the run's end and the gutter's x; else ``(start + 1, None)``."""
    free = gutters[start]
    end = start + 1
    while free and end < len(bands):
        nxt = _intersect(free, gutters[end], min_gap)
        if not nxt:
            break
        free, end = nxt, end + 1
    if not free or end - start < 2:
        return start + 1, None
    block = [k for band in bands[start:end] for k in band]
    for lo, hi in free:
        mid = (lo + hi) / 2
        if _is_column_split(b, block, mid, min_gap / GUTTER_MIN_HEIGHTS):
            return end, mid
    return start + 1, None


def _is_column_split(b: npt.NDArray[np.float64], block: list[int], x: float, line_h: float) -> bool:
    left = [k for k in block if b[k, 2] <= x]
    right = [k for k in block if b[k, 0] >= x]
    if len(left) + len(right) != len(block) or len(left) < 2 or len(right) < 2:
        return False
    region = float(b[block, 2].max() - b[block, 0].min())
    wl = float(b[left, 2].max() - b[left, 0].min())
    wr = float(b[right, 2].max() - b[right, 0].min())
    if min(wl, wr) < COLUMN_MIN_SHARE * region:
        return False
    # Text columns hold long lines that fill most of the column, not short cells.
    med_l = float(np.median(b[left, 2] - b[left, 0]))
    med_r = float(np.median(b[right, 2] - b[right, 0]))
    if min(med_l, med_r) < COLUMN_MIN_LINE_HEIGHTS * line_h:
        return False
    return min(med_l / wl, med_r / wr) >= 0.5


def _intersect(
    a: list[tuple[float, float]], c: list[tuple[float, float]], min_gap: float
) -> list[tuple[float, float]]:
    out = []
    for lo1, hi1 in a:
        for lo2, hi2 in c:
            lo, hi = max(lo1, lo2), min(hi1, hi2)
            if hi - lo >= min_gap:
                out.append((lo, hi))
    return out


def _rows(b: npt.NDArray[np.float64], band: list[int], line_h: float) -> list[int]:
    """A band read as rows: boxes grouped by vertical centre, each row left to right."""
    if len(band) == 1:
        return band
    cy = (b[band, 1] + b[band, 3]) / 2
    order = np.argsort(cy, kind="stable").tolist()
    rows: list[list[int]] = []
    row_cy = -np.inf
    for o in order:
        k = band[o]
        h = max(float(b[k, 3] - b[k, 1]), 1.0)
        if not rows or cy[o] - row_cy > 0.5 * min(h, line_h):
            rows.append([k])
            row_cy = float(cy[o])
        else:
            rows[-1].append(k)
    return [k for row in rows for k in sorted(row, key=lambda k: (b[k, 0], b[k, 1]))]


def text_rows(polygons: Sequence[Sequence[tuple[float, float]]], texts: Sequence[str]) -> list[str]:
    """Lines in reading order joined into visual rows: neighbours that sit side by side on
    the same row (a receipt's label and its amount) become one row, separated by spaces."""
    rows: list[str] = []
    prev: npt.NDArray[np.float64] | None = None
    for poly, text in zip(polygons, texts, strict=True):
        pts = np.asarray(poly, np.float64)
        if prev is not None and rows and _same_row(prev, pts):
            rows[-1] = f"{rows[-1]} {text}"
        else:
            rows.append(text)
        prev = pts
    return rows


def _same_row(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> bool:
    ha = float(a[:, 1].max() - a[:, 1].min())
    hb = float(b[:, 1].max() - b[:, 1].min())
    ca, cb = float(a[:, 1].mean()), float(b[:, 1].mean())
    return (
        abs(ca - cb) < 0.5 * min(ha, hb) and float(b[:, 0].min()) >= float(a[:, 0].max()) - 0.5 * hb
    )
