"""Which of the OCR worker's partitions are fetched: pause and resume, and why.

A partition is paused while a page of it waits for the object store (``store_unavailable``),
or while it holds its share of the intake (``intake_share``; at the in-flight limit the share
is one page, and the reason ``inflight_limit``). Fetching stops, polling goes on, so the group
membership stays alive. The reasons are what ``ocrstream_paused_partitions{reason}`` exports.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition as KafkaTopicPartition

from ocrstream.streams.intake import TopicPartition


class PartitionFlow:
    """The partitions assigned to this consumer and those of them it paused."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.assigned: set[TopicPartition] = set()
        self.paused: set[TopicPartition] = set()

    def assign(self, tps: set[TopicPartition]) -> None:
        self.assigned |= tps

    def forget(self, tps: set[TopicPartition]) -> None:
        """Partitions revoked or lost: neither assigned nor paused any more."""
        self.assigned -= tps
        self.paused -= tps

    def apply(
        self, *, blocked: set[TopicPartition], crowded: set[TopicPartition], full: bool
    ) -> dict[str, int]:
        """Pause the assigned partitions that are ``blocked`` (a page waits for the store) or
        ``crowded`` (they hold their share of the intake), resume the others; how many are
        paused for each reason (``full``: the in-flight limit is reached)."""
        want = (blocked | crowded) & self.assigned
        pause, resume = want - self.paused, self.paused - want
        if pause:
            self.consumer.pause([KafkaTopicPartition(t, p) for t, p in pause])
        if resume:
            self.consumer.resume([KafkaTopicPartition(t, p) for t, p in resume])
        self.paused = want
        held = len((crowded - blocked) & self.assigned)
        return {
            "inflight_limit": held if full else 0,
            "store_unavailable": len(blocked & self.assigned),
            "intake_share": 0 if full else held,
        }
