"""The lag exporter reports high watermark minus committed offset per group and partition,
from the admin API alone: the lag of a group whose consumer is gone stays visible."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import generate_latest

from ocrstream.settings import KafkaSettings
from ocrstream.streams import topics as t
from ocrstream.streams.lag import LagExporter, LagReader, total_lag
from ocrstream.streams.metrics import Metrics

pytestmark = pytest.mark.integration


def test_lag_of_a_dead_consumer_group(topics: KafkaSettings) -> None:
    kafka = topics
    topic = kafka.topic(t.DLQ)  # one partition at the test's scale
    producer = Producer(kafka.librdkafka())
    for i in range(10):
        producer.produce(topic, key=b"k", value=str(i).encode(), partition=0)
    assert producer.flush(10) == 0

    group = kafka.topic("lag-test")
    consumer = Consumer(kafka.librdkafka(**{"group.id": group, "enable.auto.commit": False,
                                            "auto.offset.reset": "earliest"}))  # fmt: skip
    consumer.assign([TopicPartition(topic, 0)])
    got = 0
    while got < 4:
        msg = consumer.poll(5)
        assert msg is not None
        assert msg.error() is None
        got += 1
    consumer.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    consumer.close()  # the group has no member now

    metrics = Metrics()
    lags = LagExporter(LagReader(kafka), metrics).collect()
    assert total_lag(lags, group, topic) == 6
    text = generate_latest(metrics.registry).decode()
    assert f'ocrstream_consumer_lag{{group="{group}",partition="0",topic="{topic}"}} 6.0' in text
