"""Quadrilaterals: ordering, minimum boxes, unclipping, rectified crops and page rotations.

A quad is a float32 array of shape (4, 2), clockwise from top-left, in (x, y) pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import cv2
import numpy as np
import numpy.typing as npt
import pyclipper

Quad = npt.NDArray[np.float32]
ImageBGR = npt.NDArray[np.uint8]

# A crop taller than this times its width is a vertical line: rotated 90° before recognition.
VERTICAL_RATIO = 1.5


def order_quad(points: npt.NDArray[Any]) -> Quad:
    """Four points clockwise from top-left: the two leftmost are the left edge (top first).

    Sorted as Python floats (stable, as float32 values compare the same in float64): a page
    has a hundred or more candidate boxes, and numpy's per-call overhead on four points was
    most of DB post-processing's time."""
    pts = np.asarray(points, dtype=np.float32).reshape(4, 2).tolist()
    by_x = sorted(pts, key=lambda p: p[0])
    tl, bl = sorted(by_x[:2], key=lambda p: p[1])
    tr, br = sorted(by_x[2:], key=lambda p: p[1])
    return np.array([tl, tr, br, bl], dtype=np.float32)


def min_box(points: npt.NDArray[Any]) -> tuple[Quad, float]:
    """The minimum-area rectangle around points, ordered, and its shorter side."""
    rect = cv2.minAreaRect(np.asarray(points, dtype=np.float32).reshape(-1, 2))
    box = cv2.boxPoints(rect)
    return order_quad(box), float(min(rect[1]))


def unclip(quad: Quad, ratio: float) -> npt.NDArray[np.float32] | None:
    """Grow a shrunk DB kernel back to the text: offset by area * ratio / perimeter."""
    pts = quad.astype(np.float64)
    area = abs(float(cv2.contourArea(pts.astype(np.float32))))
    length = float(cv2.arcLength(pts.astype(np.float32), True))
    if length <= 0:
        return None
    offset = pyclipper.PyclipperOffset()
    offset.AddPath([tuple(p) for p in pts.tolist()], pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    paths = offset.Execute(area * ratio / length)
    if not paths:
        return None
    largest = max(paths, key=len)
    return np.asarray(largest, dtype=np.float32)


def quad_size(quad: Quad) -> tuple[float, float]:
    """(width, height) of a quad: the longer of each pair of opposite edges."""
    top, bottom, left, right = _edge_lengths(np.asarray(quad, np.float32)[None])[0].tolist()
    return max(top, bottom), max(left, right)


def _edge_lengths(quads: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """N × 4 lengths of each quad's top, bottom, left and right edges, in float32 (the same
    values as ``np.linalg.norm`` of each edge, in one pass for all quads)."""
    q = quads.astype(np.float32, copy=False)
    return _lengths(q[:, [1, 2, 3, 2]] - q[:, [0, 3, 0, 1]])


def _lengths(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Euclidean lengths over the last axis, in float32 (what ``np.linalg.norm`` gives one
    2-vector at a time)."""
    return np.sqrt((vectors * vectors).sum(axis=-1))


# A crop side is not grown where the nearest line on that side already overlaps the line's box
# by more than this share of its height: small print, where growing took in the next line's
# descenders and rec read them as accents (docs/benchmarks.md, session 11).
NEIGHBOUR_OVERLAP = 0.2


class RecQuads(NamedTuple):
    """What :func:`grow_for_rec` gives each line: the quad to cut, and the height its crop
    would have had grown by the whole margin, which sets the crop's width at rec's height."""

    quads: list[Quad]
    heights: list[float]


def grow_for_rec(quads: Sequence[Quad], margin: float, width: int, height: int) -> RecQuads:
    """The page's line quads, each ``margin`` × its height taller above and below, for rec.

    DB boxes come out a little short of the text (a thin kernel grown back by unclip; on A4
    ~8% shorter than RapidOCR's, which dilates its bitmap): v6 small dropped spaces after
    commas and digits on English A4 and misread clipped ascenders on receipts. Only the crop
    grows; the line's reported polygon stays the det box. A side whose neighbour (the nearest
    box above or below that shares some of its x-range) already overlaps it by more than
    ``NEIGHBOUR_OVERLAP`` of its height keeps its edge. A vertical line grows across instead
    (:func:`_widen_standing`): v6 small read the held-out Chinese set in vertical columns with
    454 edits instead of 532 (docs/benchmarks.md, session 37).

    A side grows at most up to its neighbour's box, so that the crop does not take in the
    next line's descenders or ascenders (read as accents on small print), but the crop's
    width at rec's height is the one the whole margin would give (``heights``): the line
    comes out a little narrower than its height says rather than wider, and rec reads no more
    columns than with the whole margin (docs/benchmarks.md, session 31; cut short and resized
    as it was, session 29 measured 8-14% more columns).
    """
    if margin <= 0 or not quads:
        kept = list(quads)
        return RecQuads(kept, [quad_size(q)[1] for q in kept])
    q = np.asarray(quads, dtype=np.float32).reshape(-1, 4, 2)
    x0, y0 = q[:, :, 0].min(axis=1), q[:, :, 1].min(axis=1)
    x1, y1 = q[:, :, 0].max(axis=1), q[:, :, 1].max(axis=1)
    tall = y1 - y0
    room_up, room_down = _room(y0, y1, x0, x1)
    up = np.where(room_up > -NEIGHBOUR_OVERLAP * tall, margin, 0.0).astype(np.float32)
    down = np.where(room_down > -NEIGHBOUR_OVERLAP * tall, margin, 0.0).astype(np.float32)
    # all quads at once, in float32 as a quad at a time would be (numpy's per-call overhead
    # on four points was most of this function's time)
    lengths = _edge_lengths(q)
    w, h = lengths[:, :2].max(axis=1), lengths[:, 2:].max(axis=1)
    unit = (q[:, 3] - q[:, 0]) + (q[:, 2] - q[:, 1])
    norm = np.maximum(np.float32(1e-6), _lengths(unit))
    unit = unit / norm[:, None]

    def grown(up: npt.NDArray[np.float32], down: npt.NDArray[np.float32]) -> Quad:
        lift = unit * (up * h)[:, None]
        drop = unit * (down * h)[:, None]
        out = np.stack([q[:, 0] - lift, q[:, 1] - lift, q[:, 2] + drop, q[:, 3] + drop], axis=1)
        return clip_quad(out, width, height)

    whole = grown(up, down)
    safe_h = np.maximum(h, np.float32(1e-6))
    cut = grown(
        np.minimum(up, np.maximum(room_up, 0) / safe_h).astype(np.float32),
        np.minimum(down, np.maximum(room_down, 0) / safe_h).astype(np.float32),
    )
    whole_h = _edge_lengths(whole)[:, 2:].max(axis=1)
    standing = h >= VERTICAL_RATIO * w
    keep = standing | ((up == 0) & (down == 0))
    out = [q[k] if keep[k] else cut[k] for k in range(len(q))]
    if standing.any():
        across = _widen_standing(q, w, margin, _square_bounds(q), width, height)
        out = [across[k] if standing[k] else out[k] for k in range(len(q))]
    return RecQuads(out, [float(h[k] if keep[k] else whole_h[k]) for k in range(len(q))])


def _square_bounds(q: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.float32], ...]:
    """Each quad's bounds (x0, y0, x1, y1) in the page's own frame: turned by the median
    slant of the quads' top edges, so that the columns of a page scanned a little askew have
    the room between them that they have on paper. On the page's axes a 2,700-px column
    slanted by 0.6° is 28 px wider, more than the gap to the next column, and no side of it
    grew (docs/benchmarks.md, session 38: held out, 454 -> 449 edits in columns set 1.5-1.8
    em apart, 566 -> 522 at 1.2-1.35 em). Lying lines keep the page's axes: measured so, v6
    small read the same and v6 tiny 4 more edits on the dev small print and on the held-out
    Chinese A4, where the room they were tuned with is a little less."""
    top = q[:, 1] - q[:, 0]
    slant = np.arctan2(top[:, 1], top[:, 0])
    slant = (slant + np.pi / 4) % (np.pi / 2) - np.pi / 4  # a standing box's top edge too
    angle = float(np.median(slant)) if len(slant) else 0.0
    if abs(angle) > 1e-3:
        c, s = np.float32(np.cos(angle)), np.float32(np.sin(angle))
        x = q[:, :, 0] * c + q[:, :, 1] * s
        y = q[:, :, 1] * c - q[:, :, 0] * s
    else:
        x, y = q[:, :, 0], q[:, :, 1]
    return x.min(axis=1), y.min(axis=1), x.max(axis=1), y.max(axis=1)


def _room(
    lo: npt.NDArray[np.float32],
    hi: npt.NDArray[np.float32],
    side_lo: npt.NDArray[np.float32],
    side_hi: npt.NDArray[np.float32],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Each box's room before and after it along one axis (boxes from ``lo`` to ``hi``): the
    gap to the nearest box on that side among those sharing some of its range on the other
    axis (``side_lo`` to ``side_hi``), negative where they overlap, infinite where none is."""
    shares = (
        np.minimum(side_hi[:, None], side_hi[None, :])
        - np.maximum(side_lo[:, None], side_lo[None, :])
    ) > 0
    np.fill_diagonal(shares, False)
    centre = (lo + hi) / 2
    before = shares & (centre[None, :] < centre[:, None])  # [i, j]: j comes before i
    after = shares & (centre[None, :] > centre[:, None])
    room_before = lo - np.where(before, hi[None, :], -np.inf).max(axis=1)
    room_after = np.where(after, lo[None, :], np.inf).min(axis=1) - hi
    return room_before, room_after


def _widen_standing(
    q: npt.NDArray[np.float32],
    w: npt.NDArray[np.float32],
    margin: float,
    bounds: tuple[npt.NDArray[np.float32], ...],
    width: int,
    height: int,
) -> npt.NDArray[np.float32]:
    """The quads of ``q`` made ``margin`` × their width wider on each side, as
    :func:`grow_for_rec` makes a lying line taller (a standing line is read turned a quarter
    turn, so its width is the line's height there), but for a side where the nearest box
    beside it (one sharing some of its y-range) already overlaps it by more than
    :data:`NEIGHBOUR_OVERLAP` of its width."""
    x0, y0, x1, y1 = bounds
    room_left, room_right = _room(x0, x1, y0, y1)
    grow = (margin * w).astype(np.float32)
    to_left = np.where(room_left > -NEIGHBOUR_OVERLAP * w, grow, 0)[:, None]
    to_right = np.where(room_right > -NEIGHBOUR_OVERLAP * w, grow, 0)[:, None]
    unit = (q[:, 1] - q[:, 0]) + (q[:, 2] - q[:, 3])
    unit = unit / np.maximum(np.float32(1e-6), _lengths(unit))[:, None]
    out = np.stack(
        [q[:, 0] - unit * to_left, q[:, 1] + unit * to_right,
         q[:, 2] + unit * to_right, q[:, 3] - unit * to_left], axis=1,
    )  # fmt: skip
    return clip_quad(out.astype(np.float32), width, height)


def stands(quad: Quad) -> bool:
    """Whether a line's quad stands: cut, it is turned a quarter turn counter-clockwise
    (:func:`crop_quad`)."""
    w, h = quad_size(quad)
    return max(1, round(h)) >= VERTICAL_RATIO * max(1, round(w))


def crop_quad(image: ImageBGR, quad: Quad) -> ImageBGR:
    """The text line under ``quad``, warped to an upright rectangle (vertical lines rotated)."""
    w, h = quad_size(quad)
    cw, ch = max(1, round(w)), max(1, round(h))
    dst = np.array([[0, 0], [cw, 0], [cw, ch], [0, ch]], dtype=np.float32)
    matrix = cv2.getPerspectiveTransform(quad.astype(np.float32), dst)
    crop = cv2.warpPerspective(
        image, matrix, (cw, ch), flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE
    )
    if stands(quad):
        crop = np.rot90(crop)
    return np.ascontiguousarray(crop)


def rotate_page(image: ImageBGR, quarter_turns: int) -> ImageBGR:
    """Rotate by multiples of 90° clockwise."""
    k = quarter_turns % 4
    if k == 0:
        return image
    codes = {1: cv2.ROTATE_90_CLOCKWISE, 2: cv2.ROTATE_180, 3: cv2.ROTATE_90_COUNTERCLOCKWISE}
    return cv2.rotate(image, codes[k])  # type: ignore[return-value]


def rotate_small(image: ImageBGR, degrees: float) -> ImageBGR:
    """Rotate about the centre by a small angle (counter-clockwise positive), same size,
    the uncovered corners filled with the page's border colour."""
    h, w = image.shape[:2]
    matrix = cv2.getRotationMatrix2D((w / 2.0, h / 2.0), degrees, 1.0)
    return cv2.warpAffine(  # type: ignore[return-value]
        image, matrix, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
    )


def turn_quad_180(quad: Quad, width: int, height: int) -> Quad:
    """The quad on the page turned by 180° (a ``width`` × ``height`` page), reordered."""
    turned = np.array([width, height], np.float32) - quad
    return order_quad(turned)


def clip_quad(quad: Quad, width: int, height: int) -> Quad:
    """A copy inside the page; ``quad`` may also be many quads (N × 4 × 2)."""
    out = quad.copy()
    out[..., 0] = np.clip(out[..., 0], 0, width - 1)
    out[..., 1] = np.clip(out[..., 1], 0, height - 1)
    return out
