"""A broker on new storage, as CI and every first ``infra up`` get it.

Until the first group request creates ``__consumer_offsets`` and its partitions get leaders,
group requests are answered NOT_COORDINATOR, and librdkafka's admin ListConsumerGroupOffsets
crashes the calling process on that answer (SIGSEGV, confluentinc/librdkafka#5040) — it
killed a whole CI run. Each test here runs its own broker on new storage and free ports.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from ocrstream.services.kafka import KafkaService
from tests.integration.harness import own_broker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


class PortOnlyKafka(KafkaService):
    """Up as soon as the broker answers metadata: what ``infra up`` waited for before, which
    leaves clients the window where the group coordinator does not exist yet."""

    def _probe_group_coordinator(self, timeout_s: float) -> str | None:
        return None


@pytest.fixture
def port_only_kafka(tmp_path: Path) -> Iterator[KafkaService]:
    with own_broker(tmp_path / "home", PortOnlyKafka) as broker:
        yield broker


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaService]:
    with own_broker(tmp_path / "home") as broker:
        yield broker


LAG_SCRIPT = textwrap.dedent(
    """
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from ocrstream.settings import KafkaSettings
    from ocrstream.streams.autoscaler import GroupLag
    from ocrstream.streams.lag import LagReader

    kafka = KafkaSettings(bootstrap_servers="{address}", topic_prefix="")
    # the very first request of this client is a group one, as the autoscaler's first tick is
    lag = GroupLag(kafka, "fresh-workers", "fresh-pages", timeout_s=60)
    print("committed", lag.reader.offsets.read("fresh-workers", [("fresh-pages", 0)]))
    admin = AdminClient(kafka.librdkafka())
    admin.create_topics([NewTopic("fresh-pages", 2, 1)])["fresh-pages"].result(30)
    producer = Producer(kafka.librdkafka())
    for i in range(3):
        producer.produce("fresh-pages", b"page", partition=i % 2)
    assert producer.flush(30) == 0
    print("group lag", lag.read())
    reader = LagReader(kafka, timeout_s=60)
    print("groups", reader.read())
    lag.close()
    reader.close()
    """
)


def test_lag_is_read_on_a_broker_whose_group_coordinator_is_not_ready(
    port_only_kafka: KafkaService,
) -> None:
    # In a child process: the crash this guards against kills the process that asks.
    result = subprocess.run(
        [sys.executable, "-c", LAG_SCRIPT.format(address=port_only_kafka.address)],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"rc {result.returncode}\n{result.stdout}\n{result.stderr}"
    lines = result.stdout.splitlines()
    assert "committed {('fresh-pages', 0): -1}" in lines
    assert "group lag 3" in lines  # nothing committed: the whole backlog is lag
    assert "groups []" in lines  # the reader's own consumers never joined the group


def test_infra_up_waits_until_consumer_groups_work(kafka: KafkaService) -> None:
    """``start`` + ``wait_ready`` (what ``infra up`` does) returns only once the group
    coordinator answers: __consumer_offsets exists and every partition has a leader."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka.address})
    meta = admin.list_topics("__consumer_offsets", timeout=10)
    topic = meta.topics["__consumer_offsets"]
    assert topic.error is None
    assert topic.partitions
    assert all(p.leader >= 0 for p in topic.partitions.values())
