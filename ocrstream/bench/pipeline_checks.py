"""What ``bench pipeline`` checks and computes from Kafka: latency percentiles, and zero loss
(every submitted doc_id has exactly one terminal DocumentEvent, completed documents have all
their pages, and nothing went to the dead-letter topic)."""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 (nearest rank), mean and max, in the values' unit; {} when empty."""
    if not values:
        return {}
    xs = sorted(values)

    def rank(q: float) -> float:
        return xs[max(0, math.ceil(q * len(xs)) - 1)]

    return {
        "p50": round(rank(0.50), 3),
        "p95": round(rank(0.95), 3),
        "p99": round(rank(0.99), 3),
        "mean": round(sum(xs) / len(xs), 3),
        "max": round(xs[-1], 3),
    }


def terminal_events(kafka: Any, codec: Any, timeout_s: float = 60.0) -> list[Any]:
    """Every DocumentEvent in ``ocr.documents.v1``, from the beginning to the end as of now."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from ocrstream.schemas.records import DocumentEvent
    from ocrstream.streams import topics

    topic = kafka.topic(topics.DOCUMENTS)
    consumer = Consumer(kafka.librdkafka(**{
        "group.id": f"bench-check-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
    }))  # fmt: skip
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
                for p in meta.topics[topic].partitions}  # fmt: skip
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        remaining = {p for p, end in ends.items() if end > 0}
        events: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while remaining and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            record = codec.decode(msg.value() or b"")
            if isinstance(record, DocumentEvent):
                events.append(record)
            if (msg.offset() or 0) + 1 >= ends[msg.partition() or 0]:
                remaining.discard(msg.partition())
        if remaining:
            raise TimeoutError(f"partitions {sorted(remaining)} of {topic} not read to the end")
        return events
    finally:
        consumer.close()


def zero_loss(expected: dict[str, int], events: Sequence[Any], dead_letters: int) -> dict[str, Any]:
    """Every doc_id exactly one terminal event; completed ones with all ``expected`` pages."""
    counts = Counter(e.doc_id for e in events)
    missing = sorted(d for d in expected if counts[d] == 0)
    duplicated = sorted(d for d in expected if counts[d] > 1)
    unexpected = sorted(d for d in counts if d not in expected)
    not_completed, incomplete = [], []
    for e in events:
        if e.doc_id not in expected:
            continue
        if e.status.value != "completed":
            not_completed.append(f"{e.doc_id}: {e.status.value}")
        elif not e.page_count == e.pages_ok == expected[e.doc_id]:
            incomplete.append(f"{e.doc_id}: {e.pages_ok}/{e.page_count} of {expected[e.doc_id]}")
    ok = not (missing or duplicated or unexpected or not_completed or incomplete or dead_letters)
    return {
        "ok": ok, "documents": len(expected), "terminal_events": sum(counts.values()),
        "missing": missing, "duplicated": duplicated, "unexpected": unexpected,
        "not_completed": sorted(not_completed), "incomplete": sorted(incomplete),
        "dead_letters": dead_letters,
    }  # fmt: skip


def count_records(kafka: Any, name: str, timeout_s: float = 30.0) -> int:
    """Records in a topic (sum of high minus low watermarks)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient(kafka.librdkafka(log_level=3))
    topic = kafka.topic(name)
    parts = admin.list_topics(topic, timeout=timeout_s).topics[topic].partitions
    total = 0
    for spec, sign in ((OffsetSpec.latest(), 1), (OffsetSpec.earliest(), -1)):
        futures = admin.list_offsets({TopicPartition(topic, p): spec for p in parts},
                                     request_timeout=timeout_s)  # fmt: skip
        total += sign * sum(int(f.result().offset) for f in futures.values())
    return total
