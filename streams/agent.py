"""What every faust agent of ocrstream shares: the loop around a handler, and the stall watch.

:func:`register_agent` puts a handler on a topic: each event is handed to it; a
:class:`~ocrstream.errors.FatalError` crashes the app (the supervisor restarts it), any other
escaping error is logged — an exception that left the loop would make faust ack the record and
restart the agent on the next one.

:class:`StallWatch` makes sure no record stays behind while an agent runs. faust decides which
fetched records reach an agent and which it drops (see
:func:`ocrstream.streams.app.rewind_to_committed` for the drop that lost documents at start-up).
The watch keeps, for every partition the app owns on its source topics, the offset of the first
record the agent has not handled yet (the *frontier*: the group's committed offset when the
partition was assigned, moved on by every record handled in order). Every ``interval_s`` it
compares the frontier with the partition's high watermark: a partition whose record at the
frontier has waited ``stall_after_s`` since the watch first saw it there while the agent sits
idle (six times that while it is busy with other records), is *stalled*. The wait counts from
that first sighting, not from the frontier's last move: a record landing on a partition idle for
an hour is faust's to deliver first (handing it over at once would read it twice).
Its records from the frontier on are then read directly (a confluent-kafka consumer that only
assigns, never joins the group), handed to the same handler as a normal event (agents
de-duplicate as they do for any redelivery), acked in faust so its commits move on, logged as a
warning with the partition and offsets, and counted in
``ocrstream_agent_stalled_records_total{agent,topic}``. A record that faust acked without
handling (faust skips and acks events whose generation ended) stays behind the frontier too,
even after the group committed past it, so the watch hands it over as well.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import faust
from faust.streams import _current_event

from ocrstream.errors import FatalError
from ocrstream.settings import KafkaSettings
from ocrstream.streams.metrics import Metrics

log = logging.getLogger(__name__)

Handler = Callable[[Any], Awaitable[None]]
BUSY_FACTOR = 6  # while the agent is busy, a partition is stalled after 6 × stall_after_s
R = TypeVar("R")


class DirectRecord:
    """A record read around faust, shaped like a faust event (``.message``, ``.value``)."""

    def __init__(self, msg: Any) -> None:
        self.key = msg.key()
        self.value = msg.value()
        self.message = self
        self.topic, self.partition, self.offset = msg.topic(), msg.partition(), msg.offset()
        self.headers = msg.headers() or []
        ts = msg.timestamp()[1]
        self.timestamp = ts / 1000 if ts and ts > 0 else None


@dataclass
class PartitionWatch:
    """What the watch knows of one owned partition."""

    frontier: int | None = None  # the first offset not handled yet (None: not read yet)
    handled: list[int] = field(default_factory=list)  # handled offsets above the frontier, sorted
    working: set[int] = field(default_factory=set)  # offsets a handler is on right now
    moved_at: float = field(default_factory=time.monotonic)  # when the frontier last moved
    # when a record at the frontier was first seen waiting (None: none seen since it moved)
    behind_since: float | None = None

    def start(self, offset: int) -> None:
        self.working.add(offset)

    def finish(self, offset: int) -> None:
        self.working.discard(offset)
        if self.frontier is not None and offset < self.frontier:
            return  # a redelivery of something already behind us
        i = bisect.bisect_left(self.handled, offset)
        if i == len(self.handled) or self.handled[i] != offset:
            self.handled.insert(i, offset)
        self._advance()

    def first_untouched(self) -> int | None:
        """The first offset from the frontier that is neither handled nor being handled."""
        if self.frontier is None:
            return None
        offset = self.frontier
        done = set(self.handled) | self.working
        while offset in done:
            offset += 1
        return offset

    def begin_at(self, offset: int) -> None:
        """The group's position when the partition was assigned: records from here on are ours."""
        self.frontier = offset
        self.handled = [o for o in self.handled if o >= offset]
        self.moved_at = time.monotonic()
        self.behind_since = None
        self._advance()

    def stalled(self, high: int, now: float, bound: float) -> bool:
        """Has the record at the frontier waited ``bound`` seconds, the log's end being
        ``high``? Counted from when the watch first saw it there, not from when the frontier
        last moved: a record that lands on a partition idle for an hour is not stalled yet
        (faust is about to deliver it), and handing it over would read it twice."""
        if self.frontier is None or high <= self.frontier:
            self.behind_since = None
            return False
        if self.behind_since is None:
            self.behind_since = now
        return now - self.behind_since >= bound

    def skip_to(self, offset: int) -> None:
        """No record exists below ``offset`` (read directly: the log starts later)."""
        if self.frontier is not None and offset > self.frontier:
            self.begin_at(offset)

    def _advance(self) -> None:
        if self.frontier is None:
            return
        moved = False
        while self.handled and self.handled[0] <= self.frontier:
            if self.handled.pop(0) == self.frontier:
                self.frontier += 1
                moved = True
        if moved:
            self.moved_at = time.monotonic()
            self.behind_since = None


class StallWatch:
    """Finds records an agent never got and hands them to it (see the module docstring)."""

    def __init__(
        self,
        app: faust.App,
        kafka: KafkaSettings,
        metrics: Metrics,
        *,
        agent: str,
        interval_s: float = 5.0,
        stall_after_s: float = 20.0,
        idle_s: float = 2.0,
        max_records: int = 100,
    ) -> None:
        self.app, self.kafka, self.metrics, self.agent = app, kafka, metrics, agent
        self.interval_s, self.stall_after_s, self.idle_s = interval_s, stall_after_s, idle_s
        self.max_records = max_records
        self._handlers: dict[str, Handler] = {}  # topic name → handler
        self._parts: dict[tuple[str, int], PartitionWatch] = {}
        self._pending: set[tuple[str, int]] = set()  # assigned, frontier not read yet
        self._busy = 0
        self._idle_since = time.monotonic()
        self._reader: Any = None
        self._lock = asyncio.Lock()

        async def assigned(_sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
            # Awaited by faust inside the rebalance, before the new generation commits anything:
            # the committed offsets read here are where this generation starts.
            tps = args[0] if args else kwargs.get("assigned", ())
            mine = [(tp.topic, tp.partition) for tp in tps if tp.topic in self._handlers]
            for key in mine:
                self._parts.setdefault(key, PartitionWatch())
            self._pending.update(mine)
            await self._read_frontiers()

        async def revoked(_sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
            tps = args[0] if args else kwargs.get("revoked", ())
            for tp in tps:
                self._parts.pop((tp.topic, tp.partition), None)
                self._pending.discard((tp.topic, tp.partition))

        # the signals keep weak references: hold the receivers here
        self._assigned, self._revoked = assigned, revoked
        app.on_partitions_assigned.connect(assigned)
        app.on_partitions_revoked.connect(revoked)
        app.timer(interval_s, name=f"ocrstream.{agent}.stall-watch")(self.check)

    def watch(self, topic: str, handler: Handler) -> None:
        self._handlers[topic] = handler
        self.metrics.agent_stalled_records.labels(self.agent, topic)  # exported at 0 from start

    # --- the agents report -------------------------------------------------------------------

    def started(self, topic: str, partition: int, offset: int) -> None:
        self._busy += 1
        part = self._parts.get((topic, partition))
        if part is not None:
            part.start(offset)

    def finished(self, topic: str, partition: int, offset: int) -> None:
        self._busy -= 1
        if self._busy == 0:
            self._idle_since = time.monotonic()
        part = self._parts.get((topic, partition))
        if part is not None:
            part.finish(offset)

    def resume_points(self) -> dict[tuple[str, int], int | None]:
        """Per owned partition, where to fetch from so that nothing not yet started is skipped."""
        return {tp: part.first_untouched() for tp, part in self._parts.items()}

    def frontiers(self) -> dict[tuple[str, int], int | None]:
        """Per owned partition, the first offset the agent has not handled (None: not read yet)."""
        return {tp: part.frontier for tp, part in self._parts.items()}

    # --- the check ---------------------------------------------------------------------------

    async def check(self) -> None:
        """Timer: read the frontiers of newly assigned partitions, then hand over what stalled.
        Never raises: an exception in a faust timer crashes the app, and the broker being away
        (a restart, a network cut) only means the next check tries again."""
        if self.app.rebalancing or self._lock.locked():
            return
        try:
            await self._check()
        except FatalError:
            raise
        except Exception as e:  # noqa: BLE001 -- see the docstring; handler errors don't get here
            log.warning("%s: stall check failed (%s); trying again in %.0fs", self.agent, e,
                        self.interval_s)  # fmt: skip

    async def _check(self) -> None:
        async with self._lock:
            loop = asyncio.get_running_loop()
            await self._read_frontiers()
            now = time.monotonic()
            # An idle agent has nothing in faust's buffers: a partition behind for stall_after_s
            # is stalled. A busy one may just not have got to it yet (a long document holds the
            # stream): give it BUSY_FACTOR times longer, so a stuck record still gets through
            # under a steady load.
            idle = not self._busy and now - self._idle_since >= self.idle_s
            bound = self.stall_after_s * (1 if idle else BUSY_FACTOR)
            quiet = [tp for tp, part in self._parts.items()
                     if part.frontier is not None and not part.working
                     and now - part.moved_at >= bound]  # fmt: skip
            if not quiet:
                return
            highs = await loop.run_in_executor(None, self._high_watermarks, quiet)
            now = time.monotonic()
            for tp in quiet:
                part = self._parts.get(tp)
                if (
                    part is not None
                    and part.frontier is not None
                    and part.stalled(highs.get(tp, 0), now, bound)
                ):
                    await self._hand_over(tp, part, part.frontier, highs[tp])

    async def _read_frontiers(self) -> None:
        pending = sorted(self._pending)
        if not pending:
            return
        loop = asyncio.get_running_loop()
        try:
            committed = await loop.run_in_executor(None, self._committed, pending)
        except Exception as e:  # noqa: BLE001 -- a broker hiccup: the next check retries
            log.warning("%s: committed offsets not read (%s); retrying", self.agent, e)
            return
        for tp in pending:
            part = self._parts.get(tp)
            if part is not None and tp in committed and tp in self._pending:
                self._pending.discard(tp)
                part.begin_at(committed[tp])

    async def _hand_over(
        self, tp: tuple[str, int], part: PartitionWatch, start: int, high: int
    ) -> None:
        topic, partition = tp
        end = min(high, start + self.max_records)
        log.warning("%s: %s[%d] has records %d..%d behind it, none handled for %.0fs: "
                    "reading them directly", self.agent, topic, partition, start, high - 1,
                    time.monotonic() - part.moved_at)  # fmt: skip
        loop = asyncio.get_running_loop()
        records, complete = await loop.run_in_executor(
            None, self._read, topic, partition, start, end
        )
        if records:
            part.skip_to(
                records[0].offset
            )  # no record below the first one read: the log starts there
        elif complete:
            part.skip_to(end)  # nothing there any more (deleted by retention)
        handler = self._handlers[topic]
        for record in records:
            if (topic, partition) not in self._parts:
                return  # revoked meanwhile: the new owner reads them
            if record.offset < (part.frontier or 0) or record.offset in part.handled:
                continue
            self.metrics.agent_stalled_records.labels(self.agent, topic).inc()
            # Handled as the current event of a stream, as faust would: table writes take
            # their changelog partition from it.
            token = _current_event.set(weakref.ref(cast(Any, record)))
            try:
                await handle_one(self, handler, record)
            finally:
                _current_event.reset(token)
            self._ack(record)

    def _ack(self, record: DirectRecord) -> None:
        """Count a directly read record as processed in faust's commit bookkeeping."""
        from faust.types import TP
        from faust.types.tuples import Message

        tp = TP(record.topic, record.partition)
        message = Message(record.topic, record.partition, record.offset, record.timestamp or 0.0,
                          0, record.headers, record.key, record.value, None, tp=tp)  # fmt: skip
        self.app.consumer.ack(message)

    # --- the direct reader (a thread) ---------------------------------------------------------

    def _consumer(self) -> Any:
        if self._reader is None:
            from confluent_kafka import Consumer

            self._reader = Consumer(self.kafka.librdkafka(**{
                "group.id": str(self.app.conf.id),  # for committed(); never subscribes
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
            }))  # fmt: skip
        return self._reader

    def _committed(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The group's committed offsets, the log start where it has none."""
        from confluent_kafka import TopicPartition

        consumer = self._consumer()
        out: dict[tuple[str, int], int] = {}
        for tp in consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=10):
            if tp.offset is not None and tp.offset >= 0:
                out[(tp.topic, tp.partition)] = tp.offset
            else:
                low, _ = consumer.get_watermark_offsets(tp, timeout=10)
                out[(tp.topic, tp.partition)] = low
        return out

    def _high_watermarks(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka import TopicPartition

        consumer = self._consumer()
        out = {}
        for topic, partition in tps:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            out[(topic, partition)] = high
        return out

    def _read(
        self, topic: str, partition: int, start: int, end: int
    ) -> tuple[list[DirectRecord], bool]:
        """The records of ``[start, end)``, and whether the read got to ``end`` or the log's end
        (False: it timed out)."""
        from confluent_kafka import KafkaError, TopicPartition

        consumer = self._consumer()
        consumer.assign([TopicPartition(topic, partition, start)])
        out: list[DirectRecord] = []
        deadline = time.monotonic() + 30
        try:
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        return out, True
                    continue
                if msg.offset() >= end:
                    return out, True
                out.append(DirectRecord(msg))
                if msg.offset() == end - 1:
                    return out, True
            return out, False
        finally:
            consumer.unassign()


async def handle_one(watch: StallWatch | None, handler: Handler, event: Any) -> None:
    """Run ``handler`` on one event, telling the watch; nothing but a FatalError escapes."""
    msg = event.message
    if watch is not None:
        watch.started(msg.topic, msg.partition, msg.offset)
    try:
        await handler(event)
    except FatalError:
        raise
    except Exception:  # last resort: an escaping error would crash-loop the agent
        log.exception("%s[%d]@%d not handled", msg.topic, msg.partition, msg.offset)
    finally:
        if watch is not None:
            watch.finished(msg.topic, msg.partition, msg.offset)


def register_agent(
    app: faust.App, topic: Any, name: str, handler: Handler, watch: StallWatch | None
) -> None:
    """A faust agent on ``topic`` that hands every event to ``handler`` (see module doc)."""
    if watch is not None:
        watch.watch(topic.get_topic_name(), handler)

    async def agent(stream: Any) -> None:
        async for event in stream.events():
            try:
                await handle_one(watch, handler, event)
            except FatalError as e:  # configuration, credentials: exit, be restarted
                log.critical("fatal: %s", e)
                await app.crash(e)
                raise

    app.agent(topic, name=name)(agent)


class StoreCalls:
    """Blocking object-store calls of a faust agent, in a thread, waited out while the store is
    down: the agent's source partitions are paused for the outage (its other records stay in
    the fetcher instead of piling up behind the one being retried), the call is retried with
    exponential backoff — it is the probe — and once the store answers the partitions resume,
    each sought back to the first record the agent has not handled (the stall watch's frontier)
    so nothing fetched around the pause is skipped. ``ocrstream_paused_partitions{stage,
    reason="store_unavailable"}`` and ``ocrstream_retries_total`` say what happens."""

    def __init__(
        self,
        app: faust.App,
        executor: Any,
        metrics: Metrics,
        *,
        stage: str,
        topics: Iterable[str],
        backoff_s: float,
        backoff_max_s: float,
    ) -> None:
        self.app, self.executor, self.metrics, self.stage = app, executor, metrics, stage
        self.topics = set(topics)
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self.watch: StallWatch | None = None
        self._paused: set[Any] = set()
        self._outages = 0  # calls waiting for the store now

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from ocrstream.errors import RetriableError

        loop = asyncio.get_running_loop()
        attempt = 0
        try:
            while True:
                try:
                    return await loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))
                except RetriableError as e:
                    attempt += 1
                    if attempt == 1:
                        self._outages += 1
                        self._pause()
                    delay = min(self.backoff_max_s, self.backoff_s * 2 ** (attempt - 1))
                    self.metrics.retries.labels(self.stage, e.code).inc()
                    log.warning("store unavailable (%s); retry %d in %.1fs", e, attempt, delay)
                    await asyncio.sleep(delay)
        finally:
            if attempt:
                self._outages -= 1
                if not self._outages:
                    await self._resume()

    def _pause(self) -> None:
        if self._paused:
            return
        consumer = self.app.consumer
        self._paused = {tp for tp in consumer.assignment() if tp.topic in self.topics}
        consumer.pause_partitions(self._paused)
        self.metrics.paused_partitions.labels(self.stage, "store_unavailable").set(
            len(self._paused)
        )
        log.warning("store unavailable: %d partitions paused", len(self._paused))

    async def _resume(self) -> None:
        paused, self._paused = self._paused, set()
        if not paused:
            return
        consumer = self.app.consumer
        owned = paused & set(consumer.assignment())
        consumer.resume_partitions(owned)
        points = self.watch.resume_points() if self.watch is not None else {}
        for tp in owned:
            point = points.get((tp.topic, tp.partition))
            if point is not None:
                await consumer.seek(tp, point)
        self.metrics.paused_partitions.labels(self.stage, "store_unavailable").set(0)
        log.info("store answers again: %d partitions resumed", len(owned))


async def decode_or_dead_letter(
    codec: Any,
    event: Any,
    record_type: type[R],
    dead_letter: Callable[[Any, BaseException], Awaitable[None]],
) -> R | None:
    """The event's record, or None after dead-lettering a value that is not one."""
    from ocrstream.errors import PoisonError

    try:
        record: R = codec.decode_as(event.value or b"", record_type)
    except PoisonError as e:
        log.warning("undecodable %s record goes to the DLQ: %s", record_type.__name__, e)
        await dead_letter(event.message, e)
        return None
    return record


async def send_dead_letter(
    dlq: Any,
    codec: Any,
    metrics: Metrics,
    msg: Any,
    exc: BaseException,
    *,
    stage: str,
    max_bytes: int,
) -> None:
    """Publish a faust message that can't be processed to ``ocr.dlq.v1`` with its origin, and
    wait for the delivery (the record is acked only after)."""
    from ocrstream.streams.dlq import dead_letter

    letter = dead_letter(
        topic=msg.topic, partition=msg.partition, offset=msg.offset, key=msg.key,
        value=msg.value, headers=msg.headers, stage=stage, exc=exc,
        timestamp_ms=int(msg.timestamp * 1000) if msg.timestamp else None, max_bytes=max_bytes,
    )  # fmt: skip
    fut = await dlq.send(key=letter.key, value=codec.encode(letter, dlq.get_topic_name()))
    await fut
    metrics.dlq.labels(stage, letter.error_code).inc()
