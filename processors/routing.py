"""Confidence routing: whether a page's recognition is weak enough to be read again by the
accurate worker pool.

A pure rule over the confidences of the lines the engine kept (lines below the engine's
``min_confidence`` are already dropped): a page is *weak* when at least ``min_lines`` lines
were read and either the share of lines below ``low_confidence`` is over
``max_low_fraction``, or their mean confidence is under ``min_mean_confidence``. A page with
fewer lines (empty, or a stamp) is not weak: a second model finds text on a blank page no
better, and routing every blank page would double the cost of the pages that need it least.
The thresholds come from :class:`~ocrstream.settings.RoutingSettings`; their defaults are
measured in docs/benchmarks.md ("Confidence routing").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RoutingRule:
    low_confidence: float = 0.9  # a line below this is a low-confidence line
    max_low_fraction: float = 0.1  # more low-confidence lines than this share: weak
    min_mean_confidence: float = 0.96  # a mean confidence below this: weak
    min_lines: int = 1  # pages with fewer lines are never weak

    def weak(self, confidences: Sequence[float]) -> bool:
        """Whether a page with lines of these confidences should be read again."""
        n = len(confidences)
        if n == 0 or n < self.min_lines:
            return False
        low = sum(1 for c in confidences if c < self.low_confidence)
        mean = sum(confidences) / n
        return low / n > self.max_low_fraction or mean < self.min_mean_confidence
