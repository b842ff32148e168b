"""confluent-kafka's consumer and producer without a broker, for unit tests of the OCR worker.

:class:`FakeConsumer` hands out queued messages per partition and honours pause/resume;
:class:`FakeProducer` delivers only when the test (or ``poll``) says so, in order or reversed.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

PAGES = "ocr.pages.v1"


class FakeMessage:
    def __init__(self, topic: str, partition: int, offset: int, key: bytes, value: bytes):
        self._t, self._p, self._o, self._k, self._v = topic, partition, offset, key, value

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes:
        return self._k

    def value(self) -> bytes:
        return self._v

    def headers(self) -> list[tuple[str, bytes]]:
        return [("trace", b"t1")]

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)

    def error(self) -> None:
        return None


class FakeConsumer:
    """Hands out queued messages per partition, honouring pause/resume."""

    def __init__(self, partitions: int = 2) -> None:
        self.queues: dict[int, list[FakeMessage]] = {p: [] for p in range(partitions)}
        self.next_offset: dict[int, int] = {}
        self.paused: set[int] = set()
        self.pause_calls: list[set[int]] = []
        self.stored: list[tuple[int, int]] = []
        self.commits = 0
        self.closed = False
        self.on_revoke: Any = None
        self.on_assign: Any = None
        self.on_lost: Any = None
        self.log: dict[int, list[FakeMessage]] = {p: [] for p in range(partitions)}

    def push(self, partition: int, key: bytes, value: bytes) -> None:
        offset = self.next_offset.get(partition, 0)
        self.next_offset[partition] = offset + 1
        msg = FakeMessage(PAGES, partition, offset, key, value)
        self.queues[partition].append(msg)
        self.log[partition].append(msg)

    def subscribe(self, topics: list[str], on_assign: Any, on_revoke: Any, on_lost: Any) -> None:
        self.on_revoke, self.on_assign, self.on_lost = on_revoke, on_assign, on_lost
        on_assign(self, [TopicPartition(PAGES, p) for p in self.queues])

    def rebalance(self, partitions: list[int], lost: bool = False) -> None:
        """The group takes ``partitions`` away and gives them back, as a rebalance does:
        revoked (or lost, without the drain), each fetched again from its last stored offset
        (the start when none), and assigned again unpaused, as librdkafka assigns."""
        tps = [TopicPartition(PAGES, p) for p in partitions]
        (self.on_lost if lost else self.on_revoke)(self, tps)
        for p in partitions:
            start = self.last_stored(p) or 0
            self.queues[p] = [m for m in self.log[p] if m.offset() >= start]
        self.paused -= set(partitions)
        self.on_assign(self, tps)

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        out: list[FakeMessage] = []
        for p, q in self.queues.items():
            while q and p not in self.paused and len(out) < num_messages:
                out.append(q.pop(0))
        return out

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused |= {tp.partition for tp in tps}
        self.pause_calls.append({tp.partition for tp in tps})

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused -= {tp.partition for tp in tps}

    # what a fetch watch asks (ocrstream.streams.fetch_watch): this consumer never stalls, so
    # its position is the first queued record's offset, where its fetching stands

    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float = 0.0, cached: bool = False
    ) -> tuple[int, int]:
        return 0, self.next_offset.get(tp.partition, 0)

    def offsets_for_times(
        self, tps: list[TopicPartition], timeout: float = 0.0
    ) -> list[TopicPartition]:
        """Only the log's end (-1) and start (-2), as a fetch watch asks them."""
        assert all(tp.offset in (-1, -2) for tp in tps), "timestamps are not kept here"
        out = []
        for tp in tps:
            low, high = self.get_watermark_offsets(tp)
            out.append(TopicPartition(tp.topic, tp.partition, high if tp.offset == -1 else low))
        return out

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        def at(p: int) -> int:
            queue = self.queues[p]
            return queue[0].offset() if queue else self.next_offset.get(p, 0)

        return [TopicPartition(tp.topic, tp.partition, at(tp.partition)) for tp in tps]

    def committed(self, tps: list[TopicPartition], timeout: float = 0.0) -> list[TopicPartition]:
        def stored(p: int) -> int:
            offset = self.last_stored(p)
            return -1001 if offset is None else offset  # OFFSET_INVALID: nothing committed

        return [TopicPartition(tp.topic, tp.partition, stored(tp.partition)) for tp in tps]

    def seek(self, tp: TopicPartition) -> None:
        self.queues[tp.partition] = [m for m in self.log[tp.partition] if m.offset() >= tp.offset]

    def store_offsets(self, offsets: list[TopicPartition]) -> None:
        self.stored.extend((tp.partition, tp.offset) for tp in offsets)

    def commit(self, asynchronous: bool = True) -> None:
        self.commits += 1

    def close(self) -> None:
        self.closed = True

    def last_stored(self, partition: int) -> int | None:
        found = [o for p, o in self.stored if p == partition]
        return found[-1] if found else None


class DeliveryFailed:
    """The KafkaError of a delivery that failed and may be sent again (a timed-out request)."""

    def fatal(self) -> bool:
        return False

    def __str__(self) -> str:
        return "Local: Message timed out"


class FakeProducer:
    """librdkafka's produce/poll/flush; deliveries happen when the test (or poll) says so."""

    def __init__(self, auto: bool = True, reverse: bool = False, fails: Any = None) -> None:
        self.auto, self.reverse = auto, reverse
        self.queued: list[tuple[str, Any, bytes, Any]] = []
        self.delivered: list[tuple[str, Any, bytes]] = []
        # fails(n) -> True: the n-th delivery (from 0) fails with a retriable error, unwritten
        self.fails = fails
        self.attempts = 0

    def produce(
        self,
        topic: str,
        key: Any = None,
        value: bytes = b"",
        on_delivery: Any = None,
        headers: Any = None,
    ) -> None:
        self.queued.append((topic, key, value, on_delivery))

    def deliver(self) -> int:
        batch, self.queued = self.queued, []
        for topic, key, value, cb in reversed(batch) if self.reverse else batch:
            n, self.attempts = self.attempts, self.attempts + 1
            if self.fails is not None and self.fails(n):
                if cb is not None:
                    cb(DeliveryFailed(), None)
                continue
            self.delivered.append((topic, key, value))
            if cb is not None:
                cb(None, None)
        return len(batch)

    def poll(self, timeout: float = 0) -> int:
        return self.deliver() if self.auto else 0

    def flush(self, timeout: float = 0) -> int:
        self.deliver()
        return 0

    def __len__(self) -> int:
        return len(self.queued)
