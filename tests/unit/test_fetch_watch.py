"""When the fetch watch sends a partition back, and when it leaves one alone (the real stall,
on a broker: tests/integration/test_fetch_watch.py)."""

from __future__ import annotations

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from ocrstream.streams.fetch_watch import FetchWatch
from ocrstream.streams.metrics import Metrics
from tests.fakes.clock import FakeClock
from tests.fakes.kafka import PAGES, FakeConsumer

STALL_S = 30.0


def _watch(consumer: FakeConsumer) -> tuple[FetchWatch, FakeClock, Metrics]:
    clock, metrics = FakeClock(100.0), Metrics()
    watch = FetchWatch(consumer, metrics, "test", stall_after_s=STALL_S, interval_s=5.0,
                       clock=clock)  # fmt: skip
    watch.assigned([(PAGES, 0), (PAGES, 1)])
    return watch, clock, metrics


def _stalls(metrics: Metrics) -> float:
    labels = {"agent": "test", "topic": PAGES}
    return metrics.registry.get_sample_value("ocrstream_consumer_fetch_stalls_total", labels) or 0


def test_a_partition_behind_its_end_and_quiet_is_sent_back_once_per_stall() -> None:
    consumer = FakeConsumer()
    watch, clock, metrics = _watch(consumer)
    # exported at 0 from the assignment on, so that a dashboard's increase() sees the first one
    labels = {"agent": "test", "topic": PAGES}
    assert metrics.registry.get_sample_value("ocrstream_consumer_fetch_stalls_total", labels) == 0
    consumer.push(0, b"k", b"v")  # a record the loop is never handed
    clock.now += STALL_S - 1
    assert watch.check() == []  # not quiet long enough yet
    clock.now += 5
    assert watch.check() == [(PAGES, 0)]  # partition 1 is quiet too, but has nothing to read
    assert _stalls(metrics) == 1
    # still behind at the same position and end: acted on already
    clock.now += 2 * STALL_S
    assert watch.check() == []
    # the log goes further and still nothing comes: a stall again
    consumer.push(0, b"k", b"v")
    clock.now += STALL_S
    assert watch.check() == [(PAGES, 0)]
    assert _stalls(metrics) == 2


def test_a_partition_heard_from_or_held_back_by_the_loop_is_left_alone() -> None:
    consumer = FakeConsumer()
    watch, clock, metrics = _watch(consumer)
    consumer.pause([TopicPartition(PAGES, 1)])
    consumer.push(1, b"k", b"v")
    for _ in range(20):  # partition 0 keeps handing records over; partition 1 is held back
        clock.now += 5
        consumer.push(0, b"k", b"v")
        for msg in consumer.consume(10, 0):
            watch.heard((msg.topic(), msg.partition()))
        assert watch.check(paused={(PAGES, 1)}) == []
    # let go with a record waiting: the wait starts now, not when it was last heard from (and
    # the record is not handed over: the stall)
    consumer.resume([TopicPartition(PAGES, 1)])
    clock.now += 5
    assert watch.check() == []
    clock.now += STALL_S
    assert watch.check() == [(PAGES, 1)]
    assert _stalls(metrics) == 1


def test_a_forgotten_partition_is_not_watched() -> None:
    consumer = FakeConsumer()
    watch, clock, _ = _watch(consumer)
    consumer.push(0, b"k", b"v")
    watch.forget([(PAGES, 0)])
    clock.now += 2 * STALL_S
    assert watch.check() == []


class BrokerAway(FakeConsumer):
    """The broker does not answer: every question about a partition's end times out."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def offsets_for_times(
        self, tps: list[TopicPartition], timeout: float = 0.0
    ) -> list[TopicPartition]:
        self.asked += 1
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))


def test_a_broker_that_does_not_answer_is_asked_once_per_wait_not_once_per_partition() -> None:
    """While the broker is away every partition goes quiet; asking for each in turn would hold
    the consumer's loop for the timeout times the partitions."""
    consumer = BrokerAway()
    watch, clock, metrics = _watch(consumer)
    clock.now += STALL_S
    assert watch.check() == []
    assert consumer.asked == 1
    for _ in range(5):  # the next intervals: not asked again until the wait is over
        clock.now += 5
        watch.check()
    assert consumer.asked == 1
    clock.now += STALL_S
    watch.check()
    assert consumer.asked == 2
    assert _stalls(metrics) == 0


class NeverFetched(FakeConsumer):
    """Assigned, and librdkafka has fetched nothing from any partition yet: no position."""

    def __init__(self) -> None:
        super().__init__(partitions=3)
        self.seeks: list[tuple[int, int]] = []

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, OFFSET_INVALID) for tp in tps]

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.partition, tp.offset))
        super().seek(tp)


def test_a_partition_never_fetched_goes_back_to_where_the_loop_assigned_it() -> None:
    """A command or the SDK assigns its own start (an offset found for a time, the end, the
    beginning) and counts nothing (no metrics): the stall is still found, and the partition
    sent back there, not to the log's start or to the group's committed offset."""
    consumer = NeverFetched()
    for partition, records in ((0, 5), (1, 3), (2, 2)):
        for _ in range(records):
            consumer.push(partition, b"k", b"v")
    consumer.store_offsets([TopicPartition(PAGES, 2, 1)])  # the group had got this far once
    clock = FakeClock(100.0)
    watch = FetchWatch(consumer, None, "reprocess", stall_after_s=STALL_S, clock=clock)
    watch.assigned_from([
        TopicPartition(PAGES, 0, 3),  # the first record at or after a time
        TopicPartition(PAGES, 1, OFFSET_END),  # the end as it was when assigned: 3
        TopicPartition(PAGES, 2, OFFSET_BEGINNING),
    ])  # fmt: skip
    consumer.push(1, b"k", b"v")  # offset 3, after the assignment: it is to be read
    clock.now += STALL_S + 5
    assert sorted(watch.check()) == [(PAGES, 0), (PAGES, 1), (PAGES, 2)]
    assert sorted(consumer.seeks) == [(0, 3), (1, 3), (2, 0)]


class Counting(FakeConsumer):
    """Counts the questions about where logs end or start, and the partitions in each."""

    def __init__(self) -> None:
        super().__init__(partitions=8)
        self.asked: list[tuple[int, int]] = []  # (timestamp, partitions)

    def offsets_for_times(
        self, tps: list[TopicPartition], timeout: float = 0.0
    ) -> list[TopicPartition]:
        self.asked.append((tps[0].offset, len(tps)))
        return super().offsets_for_times(tps, timeout)


def test_quiet_partitions_are_asked_about_in_one_request_not_one_each() -> None:
    """A consumer's questions wait behind its fetch on the same connection (500 ms each on a
    quiet topic): a worker's 64 quiet partitions, asked one at a time, held its loop for 32 s.
    Where the log starts is asked only for a partition behind its end."""
    consumer = Counting()
    watch, clock, _ = _watch(consumer)
    watch.assigned([(PAGES, p) for p in range(8)])
    clock.now += STALL_S
    assert watch.check() == []
    assert consumer.asked == [(-1, 8)]  # the ends of all eight, at once; none behind
    consumer.push(3, b"k", b"v")  # a record the loop is never handed: a stall
    clock.now += STALL_S
    assert watch.check() == [(PAGES, 3)]
    assert consumer.asked[1:] == [(-1, 8), (-2, 1)]
