"""Text detection: DB (differentiable binarisation) on batches of pages.

Pre-processing scales each page into a fixed pixel budget (small pages such as 150-DPI
receipts are enlarged), then scales pages of large print down so that their lines are no
taller than det needs (``DetParams.max_line_height``, from the page's own line height
estimated by :func:`~ocrstream.processors.ocr.textsize.line_height`); see :func:`det_shape`.
With ``DetParams.line_height`` set instead, every page is scaled so that its text comes out at
that height, up or down, within the budgets. Both sides are snapped to multiples of 32, which
the network needs. The snapped shape is a function of the page alone, and only pages of the
same shape share a batch: a page's input tensor, and so its boxes, are the same alone or in a
batch (no padding from neighbours).

Post-processing follows PaddleOCR's DBPostProcess: threshold the probability map (dilated by a
2×2 kernel only with ``DetParams.dilate``, off: see docs/benchmarks.md), find contours, take
each contour's minimum-area rectangle, score it by the mean probability inside it, grow it back
(the network predicts shrunk kernels) with a polygon offset, and scale it to page pixels.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from ocrstream.processors.ocr.geometry import Quad, clip_quad, min_box, unclip

ImageBGR = npt.NDArray[np.uint8]
FloatArray = npt.NDArray[np.float32]

A4_PAGE = (3508, 2480)  # a 300-DPI A4 page, height x width: det's input is its budget's shape


@dataclass(frozen=True, slots=True)
class DetParams:
    limit_side: int = 1600
    # Text-size scaling: the height (det input px) a line's box is scaled to; 0 = off (the
    # fixed ``limit_side`` budget for every page). Bounded by the ``max_limit_side`` budget
    # above and by ``min_limit_side``'s below.
    line_height: float = 0.0
    max_limit_side: int = 2880
    min_limit_side: int = 960
    # Large text scaled down: a page whose lines would come out taller than this in the det
    # input (by the page's line height) is scaled down to about this (``shrink_step``), to no
    # less than ``MIN_SHRINK`` of its budget's scale; never enlarged by it. 0 = off. Unused
    # while ``line_height`` is set. Per model set (models.ModelSetSpec.det_max_line_height).
    max_line_height: float = 0.0
    min_side: int = 736
    max_side: int = 4096
    thresh: float = 0.3
    box_thresh: float = 0.5
    unclip_ratio: float = 1.6
    max_candidates: int = 1000
    min_size: float = 3.0
    dilate: bool = False
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    # A GPU's shapes (settings.OcrSettings.det_shapes): each page's input padded with white up
    # to SIDE_LADDER on each side (padded_shape), so that pages of nearby sizes share a batch
    # and cuDNN builds plans for a few hundred shapes at most, not for every 32-px step.
    ladder: bool = False


# Sides a GPU's det inputs are padded up to (DetParams.ladder): at most a quarter more past
# 1,024 px, 128 px below; 16 sides, so at most 256 shapes.
SIDE_LADDER = (128, 256, 384, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048, 2560, 3072,
               3584, 4096)  # fmt: skip


def padded_shape(shape: tuple[int, int], params: DetParams) -> tuple[int, int]:
    """The input shape a page resized to ``shape`` is run at: ``shape`` itself, or with
    ``ladder`` each side padded up to SIDE_LADDER (a side past its end keeps its size)."""
    if not params.ladder:
        return shape
    h, w = shape
    return _ladder_side(h), _ladder_side(w)


def _ladder_side(side: int) -> int:
    step = bisect.bisect_left(SIDE_LADDER, side)
    return SIDE_LADDER[step] if step < len(SIDE_LADDER) else side


@dataclass(frozen=True, slots=True)
class Box:
    """A detected text line in page pixels, with its mean probability."""

    quad: Quad
    score: float


# The most ``max_line_height`` shrinks a page: to half its budget's scale (a quarter of the
# pixels), so that a page's smaller print keeps half its height when its median line is large.
MIN_SHRINK = 0.5
SHRINK_STEPS = 8  # per halving: pages of nearly the same print share one det input shape


def shrink_step(wanted: float) -> float:
    """``wanted`` (the scale that brings a page's lines to ``max_line_height``, relative to the
    budget's) rounded up to one of ``SHRINK_STEPS`` steps per halving, between ``MIN_SHRINK``
    and 1: never more shrinking than wanted, and the pages of one kind of print (an A4 letter
    in 10-pt type) come out at the same input shape, which the runtimes have met before."""
    if wanted >= 1.0:
        return 1.0
    steps = math.ceil(math.log2(wanted) * SHRINK_STEPS - 1e-9) / SHRINK_STEPS
    return max(MIN_SHRINK, 2.0**steps)


def _budget(limit_side: int) -> float:
    return limit_side * limit_side / math.sqrt(2.0)


def det_shape(
    height: int, width: int, params: DetParams, line_px: float | None = None
) -> tuple[int, int]:
    """The network input (height, width) for a page: multiples of 32 within a pixel budget.

    With ``params.line_height`` set and the page's line height ``line_px`` known, the page is
    scaled by ``line_height / line_px``, kept between the budgets of ``min_limit_side`` and
    ``max_limit_side`` (and ``max_side`` on the longer side). Otherwise: the budget is the
    area of an A4-shaped page whose longer side is ``limit_side`` (1280 → 1280×905): text
    size on a page depends on its DPI, not its shape, so a long receipt gets the same number
    of pixels as a letter page instead of being squeezed to ``limit_side`` tall. Small pages
    are enlarged until the shorter side reaches ``min_side``, within the same budget. Then,
    with ``params.max_line_height`` set and ``line_px`` known, a page whose lines would be
    taller than that in the input is scaled down until they are not, in steps
    (:func:`shrink_step`, to no less than ``MIN_SHRINK`` of that scale): large print costs
    det fewer pixels.
    """
    area = float(height * width)
    if params.line_height > 0 and line_px is not None and line_px > 0:
        ratio = params.line_height / line_px
        high, low = _budget(params.max_limit_side), _budget(params.min_limit_side)
        ratio = min(ratio, math.sqrt(high / area))
        ratio = max(ratio, min(1.0, math.sqrt(low / area)))
        return _snap(height, width, min(ratio, params.max_side / max(height, width)))
    budget = _budget(params.limit_side)
    short = min(height, width)
    ratio = 1.0
    if short < params.min_side:
        ratio = params.min_side / short
    if area * ratio * ratio > budget:
        ratio = math.sqrt(budget / area)
    if params.max_line_height > 0 and line_px is not None and line_px > 0:
        ratio *= shrink_step(params.max_line_height / (line_px * ratio))
    return _snap(height, width, min(ratio, params.max_side / max(height, width)))


def _snap(height: int, width: int, ratio: float) -> tuple[int, int]:
    rh = max(32, round(height * ratio / 32) * 32)
    rw = max(32, round(width * ratio / 32) * 32)
    return rh, rw


def normalise(
    image: ImageBGR, shape: tuple[int, int], params: DetParams, out: FloatArray | None = None
) -> FloatArray:
    """Resize to ``shape`` and normalise to CHW float32: (BGR/255 - mean) / std, written into
    ``out`` (3 × H × W, e.g. a page's slot of its batch) when given.

    The resized page is split into its three byte planes and each plane looked up in its
    channel's table of the 256 values (``cv2.LUT``) straight into its CHW slot: the same
    floats as the arithmetic in numpy, without a float HWC image and its transposing copy
    (15.5 → 6.8 ms per receipt-sized page with OpenCV's two threads, Zen 4; a LUT to HWC
    and ``blobFromImage``'s copy before that).
    """
    rh, rw = shape
    h, w = image.shape[:2]
    interp = cv2.INTER_AREA if rh * rw < h * w else cv2.INTER_LINEAR
    resized = cv2.resize(image, (rw, rh), interpolation=interp)
    if resized.ndim == 2:  # decode_image gives BGR; a caller's grey array is read as such
        resized = cv2.cvtColor(resized, cv2.COLOR_GRAY2BGR)
    tables = _tables(params.mean, params.std)
    if out is None:
        out = np.empty((3, rh, rw), np.float32)
    padded = out.shape[1:] != (rh, rw)  # a slot of padded_shape: white around the page
    # looked up into a whole array: OpenCV's LUT into a strided view of the slot was slower
    # (33.7 against 27.9 ms for an A4 page into a 1792 x 1280 slot, Zen 4)
    page = np.empty((3, rh, rw), np.float32) if padded else out
    for c, plane in enumerate(cv2.split(resized)):
        cv2.LUT(plane, tables[c], dst=page[c])
    if padded:
        out[:, :rh, :rw] = page
        for c in range(3):  # only the margins: below the page and to its right
            white = tables[c][255, 0]
            out[c, rh:, :] = white
            out[c, :rh, rw:] = white
    return out


@functools.lru_cache(maxsize=8)
def _tables(mean: tuple[float, ...], std: tuple[float, ...]) -> tuple[FloatArray, ...]:
    """(v - 255 mean) / (255 std) for each byte value v: a 256 × 1 float32 table per channel."""
    scale = (1.0 / (255.0 * np.asarray(std, np.float32))).astype(np.float32)
    shift = (np.asarray(mean, np.float32) * 255.0).astype(np.float32)
    values = np.arange(256, dtype=np.float32)[:, None]
    table = ((values - shift) * scale).astype(np.float32)
    return tuple(np.ascontiguousarray(table[:, c : c + 1]) for c in range(3))


def plan_batches(
    shapes: Sequence[tuple[int, int]], max_batch: int
) -> list[tuple[tuple[int, int], list[int]]]:
    """Group page indices by input shape, in chunks of at most ``max_batch``; biggest first."""
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, shape in enumerate(shapes):
        groups[shape].append(i)
    batches: list[tuple[tuple[int, int], list[int]]] = []
    for shape, idx in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        for start in range(0, len(idx), max(1, max_batch)):
            batches.append((shape, idx[start : start + max_batch]))
    return batches


def sigmoid(logits: FloatArray) -> FloatArray:
    """A det logits map (:func:`.models.det_logits_model`) as probabilities, in place:
    1 / (1 + exp(-x)), what the model's own last Sigmoid computes."""
    with np.errstate(over="ignore"):  # exp(-x) of a very negative logit: inf, probability 0
        np.negative(logits, out=logits)
        np.exp(logits, out=logits)
    logits += 1.0
    np.reciprocal(logits, out=logits)
    return logits


def boxes_from_map(
    prob: FloatArray,
    page_height: int,
    page_width: int,
    params: DetParams,
    shape: tuple[int, int] | None = None,
) -> list[Box]:
    """DB post-processing of one probability map (H×W) into boxes in page pixels; ``shape``:
    the page's part of a padded map (padded_shape), the whole map if None."""
    if shape is not None:
        prob = prob[: shape[0], : shape[1]]
    map_h, map_w = prob.shape
    bitmap: npt.NDArray[np.uint8] = (prob > params.thresh).astype(np.uint8)
    if params.dilate:
        bitmap = np.asarray(cv2.dilate(bitmap, np.ones((2, 2), np.uint8)), np.uint8)
    contours, _ = cv2.findContours(bitmap, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    sx, sy = page_width / map_w, page_height / map_h
    boxes: list[Box] = []
    for contour in contours[: params.max_candidates]:
        if len(contour) < 3:
            continue
        quad, short = min_box(np.asarray(contour))
        if short < params.min_size:
            continue
        score = box_score(prob, quad)
        if score < params.box_thresh:
            continue
        grown = unclip(quad, params.unclip_ratio)
        if grown is None or len(grown) < 3:
            continue
        quad, short = min_box(grown)
        if short < params.min_size + 2:
            continue
        quad = quad * np.array([sx, sy], np.float32)
        quad = clip_quad(quad, page_width, page_height)
        w = float(np.linalg.norm(quad[1] - quad[0]))
        h = float(np.linalg.norm(quad[3] - quad[0]))
        if w <= 3 or h <= 3:
            continue
        boxes.append(Box(quad=quad.astype(np.float32), score=score))
    return boxes


def box_score(prob: FloatArray, quad: Quad) -> float:
    """Mean probability inside the quad, computed on its bounding crop only."""
    h, w = prob.shape
    xs, ys = quad[:, 0].tolist(), quad[:, 1].tolist()
    x0 = min(max(math.floor(min(xs)), 0), w - 1)
    x1 = min(max(math.ceil(max(xs)), 0), w - 1)
    y0 = min(max(math.floor(min(ys)), 0), h - 1)
    y1 = min(max(math.ceil(max(ys)), 0), h - 1)
    mask = np.zeros((y1 - y0 + 1, x1 - x0 + 1), dtype=np.uint8)
    pts = (quad - np.array([x0, y0], np.float32)).round().astype(np.int32)
    cv2.fillPoly(mask, [pts], 1)
    return float(cv2.mean(prob[y0 : y1 + 1, x0 : x1 + 1], mask)[0])
