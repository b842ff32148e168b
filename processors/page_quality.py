"""A page image's quality, measured before any model reads it: its noise and its ink contrast.

Confidence routing's early rule (:meth:`~ocrstream.processors.routing.RoutingRule.weak_image`)
uses it to send a page that the fast model would read badly straight to the accurate pool,
instead of after the fast model has read all of it (its time on top of the accurate one's).
Both are cheap: tens of milliseconds
for an A4 page at 200 DPI, against seconds for reading it.

- ``noise``: the standard deviation of the page's pixel noise in grey levels, after
  Immerkær ("Fast noise variance estimation", 1996): the response to a 3×3 kernel that cancels
  flat areas and straight ramps, on full-resolution strips of the page (a quarter of its rows),
  its *median* absolute value scaled to a Gaussian σ — the median, so that the edges of print
  (a small share of the pixels) do not count. A clean page reads 0 to 1 (paper is flat), a scan
  with σ 20 of noise about 22.
- ``contrast``: how much darker the ink is than the paper, in grey levels: the median (the
  paper, on a page that is mostly paper) minus the 2nd percentile (the darkest print), on the
  page halved in each direction (area averaging, which averages most noise away). Faded ink on
  grey paper reads 38–65, clean A4 print 138 and more; but receipts read anywhere from 9 to 225
  (pale paper, sparse print: with under 2% ink the percentile is paper), which is why the early
  rule leaves contrast off by default (docs/benchmarks.md, "Early routing").
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

# Immerkær's kernel: zero on constant and linear patches, so what is left is mostly noise. Its
# response to Gaussian noise of σ has a standard deviation of 6σ (the root of the sum of its
# squared weights), and a median absolute value of 0.6745 times that.
_KERNEL = np.array([[1, -2, 1], [-2, 4, -2], [1, -2, 1]], np.float32)
_SCALE = 1 / (6 * 0.6745)
STRIP, EVERY = 32, 128  # rows measured for the noise: strips of 32 in every 128


@dataclass(frozen=True, slots=True)
class PageQuality:
    noise: float  # σ of the pixel noise, grey levels
    contrast: float  # paper minus ink, grey levels


def measure(image: npt.NDArray[np.uint8]) -> PageQuality:
    """The quality of a page image (BGR or grey, as :func:`~ocrstream.processors.imageio.
    decode_image` gives it)."""
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY) if image.ndim == 3 else image
    h, w = grey.shape[:2]
    if h < 8 or w < 8:
        return PageQuality(noise=0.0, contrast=0.0)
    counts = np.zeros(16 * 255 + 1, np.int64)  # |response| is an integer up to 16 * 255
    for y in range(0, h - 2, EVERY):
        strip = cv2.filter2D(grey[y : y + STRIP].astype(np.int16), cv2.CV_16S, _KERNEL)
        counts += np.bincount(np.abs(strip[1:-1, 1:-1]).ravel(), minlength=counts.size)
    noise = _quantile(counts, 0.5) * _SCALE
    halved = cv2.resize(grey, (w // 2, h // 2), interpolation=cv2.INTER_AREA)
    levels = np.bincount(halved.ravel(), minlength=256)
    contrast = _quantile(levels, 0.5) - _quantile(levels, 0.02)
    return PageQuality(noise=round(noise, 2), contrast=float(contrast))


def _quantile(counts: npt.NDArray[np.int64], q: float) -> float:
    """The value below which a share ``q`` of a histogram's counts lie (its index)."""
    cumulative = np.cumsum(counts)
    return float(np.searchsorted(cumulative, q * cumulative[-1], side="left"))
