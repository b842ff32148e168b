"""The pipeline bench probes latency only once every worker has joined the group: a worker
joining later makes the group rebalance, and the partitions handed to it go unread meanwhile."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from ocrstream.bench.pipeline_run import PipelineBench, PipelineConfig
from ocrstream.settings import KafkaSettings
from ocrstream.streams import topics as t

pytestmark = pytest.mark.integration


def _member(kafka: KafkaSettings, group: str) -> Consumer:
    consumer = Consumer(kafka.librdkafka(**{"group.id": group, "session.timeout.ms": 6000}))
    consumer.subscribe([kafka.topic(t.PAGES)])
    return consumer


def _poll_until_assigned(consumers: list[Consumer], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.2)
        if all(c.assignment() for c in consumers):
            return
    raise AssertionError("the consumers were never assigned partitions")


def test_the_bench_waits_for_every_worker_to_join(topics: KafkaSettings, tmp_path: Path) -> None:
    said: list[str] = []
    bench = PipelineBench(PipelineConfig(workers=2), tmp_path, echo=said.append)
    bench.kafka = topics
    bench.group = topics.topic("bench-wait-test")
    first = _member(topics, bench.group)
    second: Consumer | None = None
    try:
        _poll_until_assigned([first])
        bench._wait_for_workers(timeout_s=4.0)  # one of two: it gives up and says so
        assert said[-1].startswith("only 1 of 2 worker(s)"), said

        second = _member(topics, bench.group)
        start = time.monotonic()
        while time.monotonic() - start < 60 and not said[-1].startswith("2 worker(s)"):
            _poll_until_assigned([first, second])  # keep both members alive meanwhile
            bench._wait_for_workers(timeout_s=1.0)
        assert said[-1] == "2 worker(s) in the group, partitions assigned", said
    finally:
        first.close()
        if second is not None:
            second.close()
