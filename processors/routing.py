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

The early rule (:meth:`RoutingRule.weak_image`) decides before the fast model reads the page,
from its image alone (:mod:`ocrstream.processors.page_quality`): a page noisier than
``max_noise``, or (when set) with less ink contrast than ``min_contrast``, goes to the
accurate pool unread. Such a page the fast model reads badly anyway (a degraded scan: CER 0.14
to 0.44 on tiny against 0.01 on small), so reading it first only adds the fast model's time to
the accurate one's. 0 turns either measure off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ocrstream.processors.page_quality import PageQuality


@dataclass(frozen=True, slots=True)
class RoutingRule:
    low_confidence: float = 0.9  # a line below this is a low-confidence line
    max_low_fraction: float = 0.1  # more low-confidence lines than this share: weak
    min_mean_confidence: float = 0.96  # a mean confidence below this: weak
    min_lines: int = 1  # pages with fewer lines are never weak
    max_noise: float = 0.0  # early: a page noisier than this goes unread (0: off)
    min_contrast: float = 0.0  # early: a page with less ink contrast goes unread (0: off)

    @property
    def early(self) -> bool:
        """Whether the early rule is on (the worker then measures each page's quality)."""
        return self.max_noise > 0 or self.min_contrast > 0

    def weak_image(self, quality: PageQuality) -> bool:
        """Whether a page of this quality should go to the accurate pool before the fast
        model reads it."""
        noisy = self.max_noise > 0 and quality.noise > self.max_noise
        faint = self.min_contrast > 0 and quality.contrast < self.min_contrast
        return noisy or faint

    def weak(self, confidences: Sequence[float]) -> bool:
        """Whether a page with lines of these confidences should be read again."""
        n = len(confidences)
        if n == 0 or n < self.min_lines:
            return False
        low = sum(1 for c in confidences if c < self.low_confidence)
        mean = sum(confidences) / n
        return low / n > self.max_low_fraction or mean < self.min_mean_confidence
