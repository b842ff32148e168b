"""Shadow agreement: how a candidate engine's page results compare with the primary's.

A shadow worker reads the same pages as the primary pool and publishes to its own topic; the
comparer (:mod:`ocrstream.streams.shadow`) feeds both result streams to a :class:`ShadowJoin`,
which pairs them by (doc_id, page_no) whatever order they come in and yields one
:class:`Comparison` per page: the character error rate of the shadow's text against the
primary's (Levenshtein edits over the primary's characters, texts normalised as the benchmarks
do: NFKC, case-folded, whitespace collapsed) and the difference of their mean line
confidences. :func:`summarise` makes the numbers ``ocrstream shadow report`` prints.

Only usable results are compared: a failed page on either side, and the primary's provisional
answers (a routed page's final result is the accurate pool's), are left out. The join's memory
is bounded: at most ``max_pending`` halves wait for their other half, the oldest dropped first,
and none longer than ``ttl_s``; the pairs already made are remembered as far, so that a
duplicate result is not compared twice.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from ocrstream.bench.cer import levenshtein, normalise

Side = Literal["primary", "shadow"]
PageKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PageText:
    """What is compared of one page result: its text and its lines' confidences."""

    text: str
    confidences: tuple[float, ...] = ()

    @property
    def mean_confidence(self) -> float:
        return sum(self.confidences) / len(self.confidences) if self.confidences else 0.0


@dataclass(frozen=True, slots=True)
class Comparison:
    doc_id: str
    page_no: int
    cer: float  # shadow against primary; 0 when both are empty, 1 when only the primary is
    confidence_delta: float  # shadow mean confidence minus primary's


def compare(doc_id: str, page_no: int, primary: PageText, shadow: PageText) -> Comparison:
    ref, hyp = normalise(primary.text), normalise(shadow.text)
    cer = levenshtein(ref, hyp) / len(ref) if ref else float(bool(hyp))
    delta = shadow.mean_confidence - primary.mean_confidence
    return Comparison(doc_id, page_no, cer, delta)


class ShadowJoin:
    """Pairs primary and shadow page texts by (doc_id, page_no); bounded (module docstring)."""

    def __init__(self, *, max_pending: int = 100_000, ttl_s: float = 3600.0) -> None:
        self.max_pending = max_pending
        self.ttl_s = ttl_s
        self._waiting: dict[Side, OrderedDict[PageKey, tuple[float, PageText]]] = {
            "primary": OrderedDict(),
            "shadow": OrderedDict(),
        }
        self._paired: OrderedDict[PageKey, float] = OrderedDict()
        self.dropped = 0  # halves that expired or were pushed out unpaired

    def __len__(self) -> int:
        return sum(len(w) for w in self._waiting.values())

    def add(self, side: Side, doc_id: str, page_no: int, page: PageText,
            now: float) -> Comparison | None:  # fmt: skip
        """One side's result; the comparison when the other side's was waiting."""
        self._expire(now)
        key = (doc_id, page_no)
        if key in self._paired:
            return None  # a duplicate of a page already compared
        other: Side = "shadow" if side == "primary" else "primary"
        waiting = self._waiting[other].pop(key, None)
        if waiting is None:
            mine = self._waiting[side]
            if key not in mine:  # the first result of a page is the one compared
                mine[key] = (now, page)
                while len(self) > self.max_pending:
                    self._drop_oldest()
            return None
        self._paired[key] = now
        while len(self._paired) > self.max_pending:
            self._paired.popitem(last=False)
        _, theirs = waiting
        primary, shadow = (page, theirs) if side == "primary" else (theirs, page)
        return compare(doc_id, page_no, primary, shadow)

    def _drop_oldest(self) -> None:
        oldest = min(
            (w for w in self._waiting.values() if w), key=lambda w: next(iter(w.values()))[0]
        )
        oldest.popitem(last=False)
        self.dropped += 1

    def _expire(self, now: float) -> None:
        limit = now - self.ttl_s
        for waiting in self._waiting.values():
            while waiting and next(iter(waiting.values()))[0] < limit:
                waiting.popitem(last=False)
                self.dropped += 1
        while self._paired and next(iter(self._paired.values())) < limit:
            self._paired.popitem(last=False)


def join_all(
    results: Iterable[tuple[Side, str, int, PageText]], *, max_pending: int = 1_000_000
) -> list[Comparison]:
    """Every comparison of a finite sequence of results (``ocrstream shadow report``)."""
    join = ShadowJoin(max_pending=max_pending, ttl_s=math.inf)
    out = []
    for side, doc_id, page_no, page in results:
        found = join.add(side, doc_id, page_no, page, now=0.0)
        if found is not None:
            out.append(found)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summarise(comparisons: Sequence[Comparison]) -> dict[str, float | int]:
    """Pages compared, CER (mean, p50, p90, p99, max), pages that differ at all, and the mean
    confidence delta and its p10/p90."""
    cers = [c.cer for c in comparisons]
    deltas = [c.confidence_delta for c in comparisons]
    n = len(comparisons)
    return {
        "pages": n,
        "pages_differing": sum(1 for c in cers if c > 0),
        "cer_mean": sum(cers) / n if n else math.nan,
        "cer_p50": percentile(cers, 50),
        "cer_p90": percentile(cers, 90),
        "cer_p99": percentile(cers, 99),
        "cer_max": max(cers) if cers else math.nan,
        "confidence_delta_mean": sum(deltas) / n if n else math.nan,
        "confidence_delta_p10": percentile(deltas, 10),
        "confidence_delta_p90": percentile(deltas, 90),
    }
