"""The lag exporter: ``ocrstream_consumer_lag{group,topic,partition}`` for every consumer group.

Lag is the partition's high watermark minus the group's committed offset. Groups, topics and
watermarks come from the admin API; committed offsets from an OffsetFetch through a consumer
bound to the group that never subscribes (so it never joins it). Neither depends on the group's
consumers being alive, so the lag of a dead worker group stays visible and keeps growing. A
partition without a committed offset counts from the earliest retained record (the groups
start at ``earliest``). Groups are limited to the configured topic prefix, when there is one.

Why not the admin API's ListConsumerGroupOffsets: librdkafka (through 2.16) dereferences a
NULL consumer group when that request is answered NOT_COORDINATOR — a broker that has just
started, or a coordinator moving in a rolling restart — and kills the process with SIGSEGV
(confluentinc/librdkafka#5040). A consumer's OffsetFetch goes through its own group
coordinator lookup and retries instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ocrstream.settings import KafkaSettings
from ocrstream.streams.metrics import Metrics

log = logging.getLogger(__name__)

# The group's coordinator is moving or still loading (a broker just started): asked again.
COORDINATOR_NOT_READY = frozenset({
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
})  # fmt: skip
RETRY_S = 0.2


@dataclass(frozen=True, slots=True)
class PartitionLag:
    group: str
    topic: str
    partition: int
    committed: int  # -1: nothing committed
    high: int
    low: int

    @property
    def lag(self) -> int:
        start = self.committed if self.committed >= 0 else self.low
        return max(0, self.high - start)


class CommittedOffsets:
    """The committed offsets of consumer groups, read with one idle consumer per group.

    The consumers carry the group's id only to address its coordinator: they never subscribe,
    assign or commit, so they are never members and never move the group's offsets."""

    def __init__(self, kafka: KafkaSettings, timeout_s: float = 15.0) -> None:
        self.kafka, self.timeout_s = kafka, timeout_s
        self._consumers: dict[str, Consumer] = {}
        self._lock = threading.Lock()

    def _consumer(self, group: str) -> Consumer:
        with self._lock:
            consumer = self._consumers.get(group)
            if consumer is None:
                consumer = Consumer(self.kafka.librdkafka(**{
                    "group.id": group,
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "log_level": 3,
                }))  # fmt: skip
                self._consumers[group] = consumer
            return consumer

    def read(self, group: str, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """``{(topic, partition): offset}`` with -1 where the group has committed nothing.
        A coordinator that is not ready yet (a broker just started, or the group's coordinator
        moving) is asked again until ``timeout_s``; raises KafkaException when it does not
        answer in time."""
        request = [TopicPartition(t, p) for t, p in tps]
        if not request:
            return {}
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                answer = self._consumer(group).committed(request, timeout=max(0.1, left))
                break
            except KafkaException as e:
                code = e.args[0].code() if e.args and isinstance(e.args[0], KafkaError) else None
                if code not in COORDINATOR_NOT_READY or left <= RETRY_S:
                    raise
                log.debug("committed offsets of %s: coordinator not ready (%s); again", group, e)
                time.sleep(RETRY_S)
        out: dict[tuple[str, int], int] = {}
        for tp in answer:
            if tp.error is not None:
                log.debug("no committed offset for %s %s[%d]: %s",
                          group, tp.topic, tp.partition, tp.error)  # fmt: skip
                continue
            out[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else -1
        return out

    def forget(self, keep: Iterable[str]) -> None:
        """Closes the consumers of groups not in ``keep`` (groups that were deleted)."""
        keep = set(keep)
        with self._lock:
            gone = [g for g in self._consumers if g not in keep]
            closing = [self._consumers.pop(g) for g in gone]
        for consumer in closing:
            consumer.close()

    def close(self) -> None:
        self.forget(())


class LagReader:
    """Reads groups, partitions and watermarks through one AdminClient and committed offsets
    through :class:`CommittedOffsets`."""

    def __init__(self, kafka: KafkaSettings, timeout_s: float = 15.0) -> None:
        self.kafka = kafka
        self.timeout_s = timeout_s
        self.admin = AdminClient(kafka.librdkafka(log_level=3))
        self.offsets = CommittedOffsets(kafka, timeout_s)

    def groups(self) -> list[str]:
        result = self.admin.list_consumer_groups(request_timeout=self.timeout_s).result()
        names = sorted(g.group_id for g in result.valid)
        prefix = self.kafka.topic_prefix
        return [g for g in names if g.startswith(prefix)] if prefix else names

    def topic_partitions(self) -> dict[str, list[int]]:
        """The partitions of every topic under the configured prefix, internal ones (``__…``)
        left out, from one metadata request."""
        meta = self.admin.list_topics(timeout=self.timeout_s)
        prefix = self.kafka.topic_prefix
        return {name: sorted(info.partitions) for name, info in meta.topics.items()
                if info.error is None and not name.startswith("__")
                and name.startswith(prefix)}  # fmt: skip

    def committed(
        self, group: str, parts: Mapping[str, Sequence[int]]
    ) -> dict[tuple[str, int], int]:
        """The group's committed offsets on every partition of each topic in ``parts`` it has
        committed on at all (-1 on that topic's other partitions); topics it never committed
        on are left out."""
        answer = self.offsets.read(group, [(t, p) for t, ps in parts.items() for p in ps])
        used = {topic for (topic, _), offset in answer.items() if offset >= 0}
        return {tp: offset for tp, offset in answer.items() if tp[0] in used}

    def watermarks(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        tps = list(tps)
        if not tps:
            return {}
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for spec, slot in ((OffsetSpec.latest(), 0), (OffsetSpec.earliest(), 1)):
            request = {TopicPartition(t, p): spec for t, p in tps}
            futures = self.admin.list_offsets(request, request_timeout=self.timeout_s)
            for tp, fut in futures.items():
                try:
                    offset = fut.result().offset
                except KafkaException as e:
                    log.debug("no offsets for %s[%d]: %s", tp.topic, tp.partition, e)
                    continue
                key = (tp.topic, tp.partition)
                pair = list(out.get(key, (0, 0)))
                pair[slot] = offset
                out[key] = (pair[0], pair[1])
        return out

    def partitions(self, names: Iterable[str]) -> dict[str, list[int]]:
        """The partitions of each topic (topics that don't exist are left out)."""
        meta = self.admin.list_topics(timeout=self.timeout_s)
        return {
            name: sorted(meta.topics[name].partitions)
            for name in names
            if name in meta.topics and meta.topics[name].error is None
        }

    def read(self) -> list[PartitionLag]:
        """The lag of every partition of every topic a group has committed for: partitions it
        never committed on (no record reached them yet) count from their earliest record, so
        new records there show up as lag even when the group's consumers are gone."""
        groups = self.groups()
        self.offsets.forget(groups)
        parts = self.topic_partitions()
        by_group = {group: self.committed(group, parts) for group in groups}
        marks = self.watermarks({tp for offsets in by_group.values() for tp in offsets})
        return [
            PartitionLag(group, topic, partition, committed, *marks[(topic, partition)])
            for group, offsets in by_group.items()
            for (topic, partition), committed in sorted(offsets.items())
            if (topic, partition) in marks
        ]

    def close(self) -> None:
        self.offsets.close()


class LagExporter:
    """Updates the consumer_lag gauge every ``interval_s``; labels of vanished partitions go."""

    def __init__(self, reader: LagReader, metrics: Metrics, interval_s: float = 5.0) -> None:
        self.reader, self.metrics, self.interval_s = reader, metrics, interval_s
        self._labels: set[tuple[str, str, str]] = set()

    def collect(self) -> list[PartitionLag]:
        lags = self.reader.read()
        seen: set[tuple[str, str, str]] = set()
        for lag in lags:
            labels = (lag.group, lag.topic, str(lag.partition))
            self.metrics.consumer_lag.labels(*labels).set(lag.lag)
            seen.add(labels)
        for labels in self._labels - seen:
            self.metrics.consumer_lag.remove(*labels)
        self._labels = seen
        return lags

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.collect()
            except (KafkaException, OSError) as e:
                self.metrics.lag_scrape_errors.inc()
                log.warning("lag collection failed: %s", e)
            stop.wait(self.interval_s)


def total_lag(lags: Iterable[PartitionLag], group: str, topic: str | None = None) -> int:
    return sum(x.lag for x in lags if x.group == group and (topic is None or x.topic == topic))
