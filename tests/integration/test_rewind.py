"""The cause of records faust never delivered, on the real broker: aiokafka's
``seek_to_committed`` leaves a partition without a committed offset where the fetcher left it,
after records faust drained and discarded; ``rewind_to_committed`` (what faust's seek now does
in every ocrstream agent) puts it back where the group stands."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from confluent_kafka import Producer

from ocrstream.settings import KafkaSettings
from ocrstream.streams import topics as t
from ocrstream.streams.app import rewind_to_committed

pytestmark = pytest.mark.integration


def _produce(kafka: KafkaSettings, topic: str, count: int) -> None:
    producer = Producer(kafka.librdkafka())
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=b"v", partition=0)
    assert producer.flush(30) == 0


async def _positions(kafka: KafkaSettings, topic: str, committed: int | None) -> list[int]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap_servers,
        group_id=f"rewind-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        if committed is not None:
            await consumer.commit({tp: committed})
            consumer.seek(tp, committed)
        fetched = await consumer.getmany(tp, timeout_ms=10_000)  # drained, then "discarded"
        assert fetched.get(tp), "nothing fetched"
        after_fetch = await consumer.position(tp)
        await consumer.seek_to_committed()
        after_aiokafka_seek = await consumer.position(tp)
        await rewind_to_committed(consumer, internal=lambda _topic: False)
        after_rewind = await consumer.position(tp)
        return [after_fetch, after_aiokafka_seek, after_rewind]
    finally:
        await consumer.stop()


@pytest.mark.parametrize("committed", [None, 0, 2])
def test_discarded_records_are_fetched_again(topics: KafkaSettings, committed: int | None) -> None:
    topic = topics.topic(t.SCANS)
    _produce(topics, topic, 4)
    after_fetch, after_aiokafka_seek, after_rewind = asyncio.run(
        _positions(topics, topic, committed)
    )
    start = committed or 0
    assert after_fetch == 4
    if committed:
        assert after_aiokafka_seek == start  # aiokafka seeks a committed offset above zero
    else:
        assert after_aiokafka_seek == 4  # ... and nothing else: the drained records are skipped
    assert after_rewind == start
