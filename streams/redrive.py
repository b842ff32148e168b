"""DLQ redrive: read the dead letters, and put them back on their topics once the cause is fixed.

A dead letter's id is ``{partition}:{offset}`` on ``ocr.dlq.v1``. Redriving publishes its
original key, value and headers to its original topic (the dead letter's ``topic``), where the
agents read it again as any record; a header ``ocrstream-redriven-from`` names the dead letter.

Each dead letter is redriven at most once, across runs and operators: before it is published,
a claim is written to ``ocr.dlq.redriven.v1`` (compacted, keyed by the id) and acknowledged;
the outcome follows under the same key. A claim without an outcome — the process died between
the two — counts as done: a redrive may be lost to a crash (``dlq show`` says so) but never
doubles a record. The log of claims is the record of what was redriven, by whom and when.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ocrstream.errors import PoisonError
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import DeadLetter, utc_now
from ocrstream.settings import KafkaSettings
from ocrstream.streams import topics as t

REDRIVEN_HEADER = "ocrstream-redriven-from"


@dataclass(frozen=True, slots=True)
class Letter:
    """A dead letter and where it is on the DLQ."""

    id: str
    partition: int
    offset: int
    letter: DeadLetter


@dataclass(frozen=True, slots=True)
class Filters:
    stage: str | None = None
    code: str | None = None
    since: datetime | None = None
    ids: tuple[str, ...] = ()

    def match(self, letter: Letter) -> bool:
        dead = letter.letter
        return (
            (self.stage is None or dead.stage == self.stage)
            and (self.code is None or dead.error_code == self.code)
            and (self.since is None or dead.failed_at >= self.since)
            and (not self.ids or letter.id in self.ids)
        )


@dataclass
class Report:
    """What a redrive did (or, dry, would do)."""

    redriven: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)  # redriven before (or claimed)
    unusable: list[str] = field(default_factory=list)  # the dead letter kept no value
    failed: dict[str, str] = field(default_factory=dict)


def read_to_end(kafka: KafkaSettings, topic: str) -> Iterator[Any]:
    """Every record of ``topic`` from the beginning to the high watermarks at the start (a
    partition librdkafka stops fetching is fetched again: :mod:`.fetch_watch`)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    from ocrstream.streams.fetch_watch import FetchWatch

    consumer = Consumer(kafka.librdkafka(**{
        "group.id": "ocrstream-dlq-reader", "enable.auto.commit": False,
        "enable.partition.eof": True,
    }))  # fmt: skip
    watch = FetchWatch(consumer, None, "dlq-reader", stall_after_s=kafka.fetch_stall_s)
    try:
        md = consumer.list_topics(topic, timeout=30)
        if topic not in md.topics or md.topics[topic].error is not None:
            return
        ends = {}
        for p in md.topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if high > low:
                ends[p] = high
        if not ends:
            return
        assignment = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends]
        consumer.assign(assignment)
        watch.assigned_from(assignment)
        while ends:
            msg = watch.poll(1.0)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    ends.pop(msg.partition(), None)
                continue
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if partition not in ends or offset >= ends[partition]:
                ends.pop(partition, None)
                continue
            yield msg
            if offset >= ends[partition] - 1:
                ends.pop(partition, None)
    finally:
        consumer.close()


def dead_letters(kafka: KafkaSettings, codec: Codec, filters: Filters = Filters()) -> list[Letter]:
    """The dead letters that match, oldest first per partition."""
    out = []
    for msg in read_to_end(kafka, kafka.topic(t.DLQ)):
        try:
            letter = codec.decode_as(msg.value() or b"", DeadLetter)
        except PoisonError:
            continue  # not a dead letter: nothing to redrive
        entry = Letter(f"{msg.partition()}:{msg.offset()}", msg.partition(), msg.offset(), letter)
        if filters.match(entry):
            out.append(entry)
    return out


def redriven(kafka: KafkaSettings) -> dict[str, dict[str, Any]]:
    """What was redriven (or claimed) so far: id → the latest record of it."""
    out: dict[str, dict[str, Any]] = {}
    for msg in read_to_end(kafka, kafka.topic(t.DLQ_REDRIVEN)):
        key = (msg.key() or b"").decode()
        if msg.value() is None:
            out.pop(key, None)
            continue
        try:
            out[key] = json.loads(msg.value())
        except ValueError:
            continue
    return out


def redrive(
    kafka: KafkaSettings, letters: list[Letter], *, dry_run: bool = False, timeout_s: float = 30
) -> Report:
    """Publish each dead letter back to its topic, at most once (see the module docstring)."""
    from confluent_kafka import Producer

    report = Report()
    done = redriven(kafka)
    todo = []
    for entry in letters:
        if entry.id in done:
            report.already.append(entry.id)
        elif entry.letter.value is None:
            report.unusable.append(entry.id)
        else:
            todo.append(entry)
    if dry_run or not todo:
        report.redriven = [e.id for e in todo]
        return report
    producer = Producer(kafka.librdkafka(**{
        "enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random",
    }))  # fmt: skip
    journal = kafka.topic(t.DLQ_REDRIVEN)
    who = socket.gethostname()
    for entry in todo:
        dead = entry.letter
        claim = {"state": "claimed", "at": utc_now().isoformat(), "by": who, "to": dead.topic}
        _send(producer, journal, entry.id.encode(), json.dumps(claim).encode(), [], timeout_s)
        headers = [*dead.headers.items(), (REDRIVEN_HEADER, entry.id.encode())]
        try:
            where = _send(producer, dead.topic, dead.key, dead.value, headers, timeout_s)
        except RuntimeError as e:
            report.failed[entry.id] = str(e)
            outcome = {**claim, "state": "failed", "error": str(e)}
        else:
            report.redriven.append(entry.id)
            outcome = {**claim, "state": "redriven", "to": where}
        _send(producer, journal, entry.id.encode(), json.dumps(outcome).encode(), [], timeout_s)
    return report


def _send(producer: Any, topic: str, key: bytes | None, value: bytes | None,
          headers: list[tuple[str, bytes]], timeout_s: float) -> str:  # fmt: skip
    """Produce one record and wait for its acknowledgement; ``topic[partition]@offset``."""
    result: dict[str, Any] = {}

    def delivered(err: Any, msg: Any) -> None:
        result["err"], result["msg"] = err, msg

    producer.produce(topic, key=key, value=value, headers=headers, on_delivery=delivered)
    producer.flush(timeout_s)
    if result.get("err") is not None or "msg" not in result:
        raise RuntimeError(f"not delivered to {topic}: {result.get('err', 'timed out')}")
    msg = result["msg"]
    return f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
