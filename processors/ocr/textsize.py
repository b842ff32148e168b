"""How tall the text on a page is, from a cheap low-resolution look, before detection.

The detector reads text best at the height it was trained on; the page's own text size, not its
pixel count, says how much to scale it. :func:`line_height` estimates the height of the page's
text lines in page pixels:

1. grey, shrunk with area averaging so the longer side is at most ``work_side`` px (one pass of
   ``cv2.resize``; the noise of a scan averages out);
2. ink by an adaptive threshold (dark on light, a window a few lines tall: shaded receipts and
   uneven scans keep their text);
3. each row of ink smeared to the right so the characters of a line join into one blob (one
   pixel tall: lines above and below stay apart);
4. the (8-connected) blobs that look like lines (wider than 2.5× their height, at least 3 px
   tall) vote with their width for their height; the weighted median is the estimate. Fewer
   than ``min_lines`` such blobs (a photo, a blank page) → ``None``: no estimate.

Steps 3–4 run twice. The first smear is 5 px: it joins the letters of small text into lines,
but the words of large text stay apart, and a word without ascenders or descenders is shorter
than its line (70-px Hershey text read 0.8× where 14-px text read 1.1×). The letters of larger
print are further apart than 5 px, no blob looks like a line, and the first smear is tried
again further (``FIRST_REACHES``: at 5 px alone, 18-pt DejaVu Sans at 300 DPI on A4 had no
estimate; 24-pt needs 10). The second smear reaches ``WORD_GAP`` × the first estimate, enough
to bridge a word space at any size, so every size is measured as whole lines.

The result is the height of a line's box (ascenders to descenders, or a CJK character's square),
the same measure as the ground-truth boxes of the dev sets and the detector's own boxes. It takes
27 ms on a 300-DPI A4 page with one OpenCV thread (21 with two) and 7 ms on a receipt, on a 2 vCPU
Zen 5; labelling the blobs with ``connectedComponentsWithStats`` instead took 54 and 20 ms.
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

WORK_SIDE = 2048
MIN_LINES = 4
FIRST_REACH = 5  # px of the shrunk page: the first smear, letters into words (small text: lines)
# the first smear's reaches, tried in turn until line-shaped blobs appear (larger print's
# letters stand further apart); each doubles what the one before joins
FIRST_REACHES = (FIRST_REACH, 10, 20, 40)
WORD_GAP = 0.6  # the second smear's reach, × the first estimate: a word space at any size


def line_height(
    image: npt.NDArray[np.uint8], work_side: int = WORK_SIDE, min_lines: int = MIN_LINES
) -> float | None:
    """The weighted-median height of the text lines on ``image`` (BGR or grey), in its pixels."""
    gray = image if image.ndim == 2 else cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    h, w = gray.shape[:2]
    if min(h, w) < 16:
        return None
    shrink = min(1.0, work_side / max(h, w))
    small = (
        cv2.resize(gray, (max(1, round(w * shrink)), max(1, round(h * shrink))),
                   interpolation=cv2.INTER_AREA)
        if shrink < 1.0 else gray
    )  # fmt: skip
    sh, sw = small.shape[:2]
    block = max(15, (min(sh, sw) // 24) | 1)
    ink = cv2.adaptiveThreshold(
        small, 1, cv2.ADAPTIVE_THRESH_MEAN_C, cv2.THRESH_BINARY_INV, block, 12
    )
    first = None
    for reach in FIRST_REACHES:
        first = _blob_height(ink, reach, min_lines)
        if first is not None:
            break
    if first is None:
        return None
    lines = _blob_height(ink, max(FIRST_REACH, round(WORD_GAP * first)), min_lines)
    return (lines if lines is not None else first) / shrink


def _blob_height(ink: npt.NDArray[Any], reach: int, min_lines: int) -> float | None:
    """The width-weighted median height of the line-shaped blobs of ``ink`` smeared ``reach`` px."""
    smear = cv2.dilate(ink, np.ones((1, reach), np.uint8), anchor=(0, 0))
    boxes = blob_boxes(smear)
    if len(boxes) == 0:
        return None
    # less the reach the smear added to each blob's right end
    widths = boxes[:, 0].astype(np.float64) - (reach - 1)
    heights = boxes[:, 1].astype(np.float64)
    keep = (heights >= 3) & (widths > 2.5 * heights) & (heights < ink.shape[0] / 4)
    if int(keep.sum()) < min_lines:
        return None
    return weighted_median(heights[keep], widths[keep])


def blob_boxes(mask: npt.NDArray[Any]) -> npt.NDArray[np.int32]:
    """(width, height) of the bounding box of each 8-connected blob of ``mask`` (N × 2).

    From the blobs' outer outlines (``cv2.findContours``, two-level hierarchy: a blob inside
    another's hole is still an outline of the top level), not from a labelled image:
    ``connectedComponentsWithStats`` took 18 ms on a 2,048-px A4 page with one thread
    (the statistics 15 of them), the outlines 5.
    """
    contours, hierarchy = cv2.findContours(mask, cv2.RETR_CCOMP, cv2.CHAIN_APPROX_SIMPLE)
    if not contours:
        return np.zeros((0, 2), np.int32)
    outer = [c for c, parent in zip(contours, hierarchy[0][:, 3], strict=True) if parent < 0]
    counts = np.fromiter((len(c) for c in outer), np.int64, len(outer))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    points = np.concatenate(outer).reshape(-1, 2)
    low = np.minimum.reduceat(points, starts)
    high = np.maximum.reduceat(points, starts)
    return (high - low + 1).astype(np.int32)


def weighted_median(values: npt.NDArray[np.float64], weights: npt.NDArray[np.float64]) -> float:
    """The value below which half the total weight lies."""
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    i = int(np.searchsorted(cumulative, cumulative[-1] / 2.0))
    return float(values[order][min(i, len(order) - 1)])
