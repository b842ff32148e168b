"""In-order offset tracking: an offset is committable only when it and every earlier offset
consumed from the same partition are done.

Pages of one partition finish out of order (different batches, retries, a DLQ record that
is delivered sooner than an OCR result). Storing offset N+1 tells Kafka that everything up to
N is done, so a crash would lose every page below N that was still in flight. The tracker keeps,
per partition, the offsets in consumption order and releases only the done prefix.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]


@dataclass
class _Partition:
    pending: deque[int] = field(default_factory=deque)
    done: set[int] = field(default_factory=set)


class OffsetTracker:
    """Offsets in flight per (topic, partition); not thread-safe (one consumer loop owns it)."""

    def __init__(self) -> None:
        self._parts: dict[TopicPartition, _Partition] = {}

    def add(self, topic: str, partition: int, offset: int) -> None:
        """Record a consumed offset (offsets of a partition arrive in increasing order)."""
        part = self._parts.setdefault((topic, partition), _Partition())
        if part.pending and offset <= part.pending[-1]:
            # A rewind (seek, re-delivery after resume): the earlier entries can't be done
            # before this one is, so start over from here.
            part.pending.clear()
            part.done.clear()
        part.pending.append(offset)

    def done(self, topic: str, partition: int, offset: int) -> int | None:
        """Mark an offset done; returns the next offset to commit if the done prefix grew."""
        part = self._parts.get((topic, partition))
        if part is None or offset not in part.pending:
            return None  # forgotten (revoked) or re-delivered: nothing to store
        part.done.add(offset)
        advanced: int | None = None
        while part.pending and part.pending[0] in part.done:
            first = part.pending.popleft()
            part.done.discard(first)
            advanced = first + 1
        return advanced

    def forget(self, partitions: list[TopicPartition] | None = None) -> None:
        """Drop the state of revoked or lost partitions (all of them when ``None``)."""
        if partitions is None:
            self._parts.clear()
            return
        for tp in partitions:
            self._parts.pop(tp, None)

    def inflight(self, tp: TopicPartition | None = None) -> int:
        """Offsets consumed but not yet committable (in one partition, or in all)."""
        if tp is not None:
            part = self._parts.get(tp)
            return len(part.pending) if part else 0
        return sum(len(p.pending) for p in self._parts.values())

    def unfinished(self) -> int:
        """Offsets consumed and not done: :meth:`inflight` less those done behind an earlier
        offset that is not (delivered, but not committable yet)."""
        return sum(len(p.pending) - len(p.done) for p in self._parts.values())

    def partitions(self) -> list[TopicPartition]:
        return [tp for tp, p in self._parts.items() if p.pending]
