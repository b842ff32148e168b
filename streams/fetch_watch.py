"""A partition a confluent-kafka consumer stopped fetching, found and fetched again.

Once in CI (session 31), the webhook agent's consumer was assigned both partitions of
``ocr.documents.v1``, with two documents' events on them, and handed the loop nothing for two
minutes: no record, no error, the group stable. The cause is not known; librdkafka has had
stalls of this kind (partitions left waiting on a leader-epoch check that never ends: its issues
4425 and 4492), and other clients watch for them the same way. librdkafka keeps a partition's
fetch state to itself, so a loop cannot tell "nothing to read" from "not reading" — except by
asking the broker where the log ends. :class:`FetchWatch` does that, but only for a partition
the loop is not holding back (paused) and has heard nothing from (no record, no end-of-partition
event) for ``stall_after_s`` (counted from when the loop last held it back, if it did): then it
asks for the partition's end (one ``ListOffsets`` request for all the partitions gone quiet
at once: each request waits behind the consumer's own fetch on its connection, up to
``fetch.wait.max.ms``), and if the consumer's position is behind it, the partition is
*stalled*. It is logged as a warning, counted in
``ocrstream_consumer_fetch_stalls_total{agent,topic}``, resumed (a no-op unless librdkafka held
it paused) and sent back (``seek``) to its position: the first offset the loop has not been
handed, so nothing is read twice. A partition still behind at the same position and end is not
sent back again (a log that ends in transaction markers keeps its end one past its last record):
a stall is acted on once.

Where the consumer has handed the loop nothing from a partition yet, its position is where the
loop assigned it to start (:meth:`FetchWatch.assigned_from`: an offset, an offset found for a
time, or the log's end when it was assigned), else the group's committed offset, or where the
group has none the log's start (``auto.offset.reset`` is ``earliest`` in every loop that
subscribes with this).

Agents export the stalls as a metric; a command or the SDK (``metrics=None``) only logs them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    KafkaException,
    TopicPartition,
)

from ocrstream.streams.metrics import Metrics

log = logging.getLogger(__name__)

TP = tuple[str, int]
# ListOffsets' timestamps for a log's end and its start (offsets_for_times)
LATEST, EARLIEST = -1, -2


class FetchWatch:
    """See the module docstring. Tell it what is assigned (:meth:`assigned`, :meth:`forget`)
    and what was heard (:meth:`heard`), and call :meth:`check` from the loop."""

    def __init__(
        self,
        consumer: Any,
        metrics: Metrics | None,
        agent: str,
        *,
        stall_after_s: float = 30.0,
        interval_s: float = 5.0,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.consumer, self.metrics, self.agent = consumer, metrics, agent
        self.stall_after_s, self.interval_s, self.timeout_s = stall_after_s, interval_s, timeout_s
        self.clock = clock
        self._heard: dict[TP, float] = {}  # when each assigned partition was last heard from
        self._acted: dict[TP, tuple[int, int]] = {}  # (position, end) a stall was acted on at
        self._start: dict[TP, int] = {}  # where the loop assigned a partition to start
        self._next = clock() + interval_s

    def assigned(self, tps: Iterable[TP], starts: Mapping[TP, int] | None = None) -> None:
        """``tps`` are the loop's now; ``starts``: the offsets the loop assigned them at
        (``OFFSET_BEGINNING``: the log's start), for a partition the consumer has handed
        nothing from yet (else its group's committed offset)."""
        now = self.clock()
        for tp in tps:
            self._heard[tp] = now
            self._acted.pop(tp, None)
            self._start.pop(tp, None)
            start = starts.get(tp) if starts is not None else None
            if start is not None and (start >= 0 or start == OFFSET_BEGINNING):
                self._start[tp] = start
            if self.metrics is not None:
                # exported at 0 from the start: increase() over a series that appears at 1
                # reads 0
                self.metrics.consumer_fetch_stalls.labels(self.agent, tp[0])

    def assigned_from(self, assignment: Iterable[TopicPartition]) -> None:
        """:meth:`assigned` for a consumer the loop ``assign()``-ed itself: each partition
        starts at its offset; ``OFFSET_END`` is looked up now (the end as the loop took it),
        ``OFFSET_BEGINNING`` is the log's start."""
        assignment = list(assignment)
        starts: dict[TP, int] = {}
        for tp in assignment:
            if tp.offset >= 0 or tp.offset == OFFSET_BEGINNING:
                starts[(tp.topic, tp.partition)] = tp.offset
        at_end = [(tp.topic, tp.partition) for tp in assignment if tp.offset == OFFSET_END]
        starts.update(log_offsets(self.consumer, at_end, LATEST, self.timeout_s))
        self.assigned(((tp.topic, tp.partition) for tp in assignment), starts)

    def forget(self, tps: Iterable[TP]) -> None:
        for tp in tps:
            self._heard.pop(tp, None)
            self._acted.pop(tp, None)
            self._start.pop(tp, None)

    def heard(self, tp: TP) -> None:
        """A record or an end-of-partition event came from ``tp``."""
        if tp in self._heard:
            self._heard[tp] = self.clock()

    def poll(self, timeout: float) -> Any:
        """``consumer.poll(timeout)`` for a loop that holds no partition back: :meth:`check`
        first, and what comes back (a record or an event) is :meth:`heard`."""
        self.check()
        msg = self.consumer.poll(timeout)
        if msg is not None:
            self.heard((msg.topic() or "", msg.partition() or 0))
        return msg

    def check(self, paused: Iterable[TP] = ()) -> list[TP]:
        """Every ``interval_s``: the partitions found stalled and sent back, as described in
        the module docstring (none between checks)."""
        now = self.clock()
        if now < self._next:
            return []
        self._next = now + self.interval_s
        held = set(paused)
        for tp in held & self._heard.keys():  # the wait counts from when the loop lets it go
            self._heard[tp] = now
        quiet = [tp for tp, at in self._heard.items() if now - at >= self.stall_after_s]
        if not quiet:
            return []
        try:
            stalled = self._behind(quiet)
        except KafkaException as e:
            # The broker did not answer: while it is away every partition goes quiet. Ask
            # again after stall_after_s.
            log.debug("fetch watch: cannot read the ends of %d partitions: %s", len(quiet), e)
            self._next = now + max(self.interval_s, self.stall_after_s)
            return []
        sent: list[TP] = []
        for tp in quiet:
            behind = stalled.get(tp)
            if behind is None:
                self._heard[tp] = now  # caught up: the wait starts again
                self._acted.pop(tp, None)
                continue
            if self._acted.get(tp) == behind:
                continue
            self._acted[tp] = behind
            self._send_back(tp, *behind, quiet_s=now - self._heard[tp])
            self._heard[tp] = now
            sent.append(tp)
        return sent

    def _behind(self, tps: list[TP]) -> dict[TP, tuple[int, int]]:
        """(position, end) of each of ``tps`` that has records the loop was not handed."""
        ends = log_offsets(self.consumer, tps, LATEST, self.timeout_s)
        parts = [TopicPartition(*tp) for tp in tps]
        at = {(p.topic, p.partition): p.offset for p in self.consumer.position(parts)}
        # nothing handed over yet: where the loop assigned it, else the group's offset
        ask = [
            tp for tp in tps if (at[tp] == OFFSET_INVALID or at[tp] < 0) and tp not in self._start
        ]
        if ask:
            found = self.consumer.committed(
                [TopicPartition(*tp) for tp in ask], timeout=self.timeout_s
            )
            at.update({(p.topic, p.partition): p.offset for p in found})
        position: dict[TP, int | None] = {}  # None: the log's start
        for tp in tps:
            if at[tp] >= 0:
                position[tp] = at[tp]
            elif tp in self._start and self._start[tp] != OFFSET_BEGINNING:
                position[tp] = self._start[tp]
            else:
                position[tp] = None
        # records below the log's start are gone: asked only where it may matter
        behind = [tp for tp in tps if (position[tp] or 0) < ends[tp]]
        starts = log_offsets(self.consumer, behind, EARLIEST, self.timeout_s)
        out: dict[TP, tuple[int, int]] = {}
        for tp in behind:
            start = max(position[tp] or 0, starts[tp])
            if start < ends[tp]:
                out[tp] = (start, ends[tp])
        return out

    def _send_back(self, tp: TP, position: int, end: int, quiet_s: float) -> None:
        log.warning(
            "%s: nothing from %s[%d] for %.0fs although its log ends at %d and the consumer "
            "is at %d: fetching it again from %d", self.agent, *tp, quiet_s, end, position,
            position,
        )  # fmt: skip
        if self.metrics is not None:
            self.metrics.consumer_fetch_stalls.labels(self.agent, tp[0]).inc()
        part = TopicPartition(tp[0], tp[1], position)
        try:
            self.consumer.resume([TopicPartition(*tp)])
            self.consumer.seek(part)
        except KafkaException as e:
            log.warning("%s: could not send %s[%d] back to %d: %s", self.agent, *tp, position, e)


def log_offsets(consumer: Any, tps: Iterable[TP], which: int, timeout_s: float) -> dict[TP, int]:
    """Where each of ``tps``' logs ends (``LATEST``: for a ``read_committed`` consumer, the
    last stable offset) or starts (``EARLIEST``), asked in one request. Asked a partition at a
    time (``get_watermark_offsets``), each question waits behind the consumer's own fetch on the
    broker's connection (``fetch.wait.max.ms``, 500 ms): an OCR worker's 64 quiet partitions
    held its loop 32 s a check, and a page sent to a worker idle for longer than the watch's
    ``stall_after_s`` took two minutes (sessions 40-41). Raises ``KafkaException`` where the
    broker did not answer for a partition."""
    asked = [TopicPartition(topic, partition, which) for topic, partition in tps]
    if not asked:
        return {}
    out: dict[TP, int] = {}
    for tp in consumer.offsets_for_times(asked, timeout=timeout_s):
        if tp.error is not None:
            raise KafkaException(tp.error)
        out[(tp.topic, tp.partition)] = tp.offset
    return out
