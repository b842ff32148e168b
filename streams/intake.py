"""The OCR worker's intake: consumed pages wait here, undecoded, in the order they are taken.

The order is the scan's priority (higher first), then its submission time, then the page
number; pages that tie keep their arrival order. The worker takes from the head, so it starts
the oldest work first whichever partition it is on: a document's pages are spread over many
partitions (key doc_id/page_no), and draining partitions at equal rates finished the median
document of a bulk backlog at 88% of the run (55% in intake order, documents completing in
submission order; docs/benchmarks.md). Priority reorders only the pages a worker holds, not a
partition's log: it jumps the queue, not the backlog.

The intake also counts its pages per partition, so that the worker can pause a partition that
holds its share (:meth:`Intake.crowded`, :meth:`~ocrstream.streams.window.InflightWindow.share`)
and the queue holds the heads of every partition.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
from collections import Counter
from dataclasses import dataclass

from ocrstream.logs import log_context
from ocrstream.schemas.records import PageTask

Origin = tuple[str, int, int]  # topic, partition, offset
TopicPartition = tuple[str, int]


@dataclass(slots=True, eq=False)
class Pending:
    """A consumed page on its way through the worker (compared by identity: the same task may
    be consumed twice)."""

    origin: Origin
    task: PageTask
    attempts: int = 0  # failed fetches so far

    @property
    def tp(self) -> TopicPartition:
        return self.origin[0], self.origin[1]

    def order(self) -> tuple[int, float, int]:
        """Intake order: higher priority, then earlier submission, then lower page number."""
        task = self.task
        return -task.priority, task.submitted_at.timestamp(), task.page_no

    @property
    def pixels(self) -> int:
        """The decoded size it will hold (as its task declares; none for a text layer)."""
        if self.task.text_layer is not None:
            return 0
        return max(1, self.task.width) * max(1, self.task.height)

    @property
    def needs_store(self) -> bool:
        """Whether its image is fetched from the object store (a claim check)."""
        return bool(self.task.image.uri)

    def log_context(self) -> contextlib.AbstractContextManager[None]:
        """Log context of the page: topic[partition]@offset, doc_id, page and trace id."""
        topic, partition, offset = self.origin
        return log_context(
            tp=f"{topic}[{partition}]@{offset}",
            doc_id=self.task.doc_id,
            page=self.task.page_no,
            trace_id=self.task.trace_id,
        )


class Intake:
    """Pages consumed and not started, in intake order (see the module docstring)."""

    def __init__(self) -> None:
        self._heap: list[tuple[tuple[int, float, int], int, Pending]] = []
        self._by_tp: Counter[TopicPartition] = Counter()
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, page: Pending) -> None:
        heapq.heappush(self._heap, (page.order(), next(self._seq), page))
        self._by_tp[page.tp] += 1

    def head(self) -> Pending | None:
        """The page to start next (None when empty)."""
        return self._heap[0][2] if self._heap else None

    def pop(self) -> Pending:
        page = heapq.heappop(self._heap)[2]
        self._by_tp[page.tp] -= 1
        return page

    def crowded(self, share: int) -> set[TopicPartition]:
        """The partitions that hold at least ``share`` pages here."""
        return {tp for tp, n in self._by_tp.items() if n >= share}

    def drop(self, tps: set[TopicPartition] | None) -> None:
        """Forget the pages of ``tps`` (all when None): their offsets were never stored, so
        whoever owns those partitions next redoes them."""
        keep = [e for e in self._heap if tps is not None and e[2].tp not in tps]
        heapq.heapify(keep)
        self._heap = keep
        self._by_tp = Counter(e[2].tp for e in keep)
