"""The lag exporter: ``ocrstream_consumer_lag{group,topic,partition}`` for every consumer group.

Lag is the partition's high watermark minus the group's committed offset, read with the admin
API only (list groups, their committed offsets, the latest offsets): it does not depend on the
consumers being alive, so the lag of a dead worker group stays visible and keeps growing. A
partition without a committed offset counts from the earliest retained record (the groups
start at ``earliest``). Groups are limited to the configured topic prefix, when there is one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ocrstream.settings import KafkaSettings
from ocrstream.streams.metrics import Metrics

log = logging.getLogger(__name__)


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


class LagReader:
    """Reads committed offsets and watermarks through one AdminClient."""

    def __init__(self, kafka: KafkaSettings, timeout_s: float = 15.0) -> None:
        self.kafka = kafka
        self.timeout_s = timeout_s
        self.admin = AdminClient(kafka.librdkafka(log_level=3))

    def groups(self) -> list[str]:
        result = self.admin.list_consumer_groups(request_timeout=self.timeout_s).result()
        names = sorted(g.group_id for g in result.valid)
        prefix = self.kafka.topic_prefix
        return [g for g in names if g.startswith(prefix)] if prefix else names

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        futures = self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout_s
        )
        out: dict[tuple[str, int], int] = {}
        for fut in futures.values():
            for tp in fut.result().topic_partitions or []:
                if tp.error is None:
                    out[(tp.topic, tp.partition)] = tp.offset
        return out

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
        by_group = {group: self.committed(group) for group in self.groups()}
        parts = self.partitions({topic for offsets in by_group.values() for topic, _ in offsets})
        for offsets in by_group.values():
            for topic in {topic for topic, _ in offsets}:
                for p in parts.get(topic, ()):
                    offsets.setdefault((topic, p), -1)
        marks = self.watermarks({tp for offsets in by_group.values() for tp in offsets})
        return [
            PartitionLag(group, topic, partition, committed, *marks[(topic, partition)])
            for group, offsets in by_group.items()
            for (topic, partition), committed in sorted(offsets.items())
            if (topic, partition) in marks and not topic.startswith("__")
        ]


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
