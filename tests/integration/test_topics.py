"""``topics create`` against the real broker: idempotent, and honest about differing topics."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from ocrstream.cli import main
from ocrstream.settings import KafkaSettings
from ocrstream.streams.topics import DLQ, TOPICS, delete_topics, ensure_topics, list_topics

pytestmark = pytest.mark.integration

SCALE = 0.125  # 64 → 8 partitions: enough to check counts without loading a 2-core broker


@pytest.fixture
def kafka(kafka_settings: KafkaSettings) -> Iterator[KafkaSettings]:
    yield kafka_settings
    delete_topics(kafka_settings)


def test_create_is_idempotent(kafka: KafkaSettings) -> None:
    first = ensure_topics(kafka, partitions_scale=SCALE)
    assert first.created == sorted(kafka.topic(t.name) for t in TOPICS)
    assert first.differing == []

    second = ensure_topics(kafka, partitions_scale=SCALE)
    assert second.created == []
    assert second.existing == first.created
    assert second.differing == []

    listed = {t.name: t for t in list_topics(kafka)}
    pages = listed[kafka.topic("ocr.pages.v1")]
    assert pages.partitions == 8
    assert pages.configs["cleanup.policy"] == "delete"
    assert pages.configs["retention.ms"] == str(86_400_000)
    assert listed[kafka.topic("ocr.documents.v1")].configs["cleanup.policy"] == "compact,delete"
    assert listed[kafka.topic("ocr.progress.v1")].configs["cleanup.policy"] == "compact"


def test_a_differing_topic_is_reported_not_changed(kafka: KafkaSettings) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    dlq = kafka.topic(DLQ)
    admin = AdminClient(kafka.librdkafka())
    wrong = NewTopic(
        dlq, num_partitions=2, replication_factor=1, config={"cleanup.policy": "compact"}
    )
    admin.create_topics([wrong])[dlq].result(timeout=30)

    report = ensure_topics(kafka, partitions_scale=SCALE)

    assert dlq not in report.created
    assert len(report.created) == len(TOPICS) - 1
    assert report.differing_topics == [dlq]
    diffs = {d.setting: (d.expected, d.actual) for d in report.differing}
    assert diffs["partitions"] == ("1", "2")
    assert diffs["cleanup.policy"] == ("delete", "compact")
    # Reported, never altered.
    assert {t.name: t.partitions for t in list_topics(kafka)}[dlq] == 2


def test_cli_topics_create_prints_the_report(kafka: KafkaSettings) -> None:
    env = {
        "OCRSTREAM_TOPIC_PREFIX": kafka.topic_prefix,
        "OCRSTREAM_TOPICS_PARTITIONS_SCALE": str(SCALE),
    }
    runner = CliRunner()
    first = runner.invoke(main, ["topics", "create"], env=env)
    assert first.exit_code == 0, first.output
    assert f"created  {kafka.topic('ocr.scans.v1')}" in first.output
    assert f"{len(TOPICS)} created, 0 as specified, 0 differing" in first.output

    # Without the scale the design's counts are expected: every topic now differs, still exit 0.
    second = runner.invoke(main, ["topics", "create", "--partitions-scale", "1"], env=env)
    assert second.exit_code == 0, second.output
    assert f"differs  {kafka.topic('ocr.pages.v1')}: partitions is 8, expected 64" in second.output

    listed = runner.invoke(main, ["topics", "list"], env=env)
    assert listed.exit_code == 0, listed.output
    assert kafka.topic("ocr.dlq.v1") in listed.output


def test_unreachable_broker_is_an_error_exit() -> None:
    env = {"OCRSTREAM_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    result = CliRunner().invoke(main, ["topics", "create", "--timeout", "2"], env=env)
    assert result.exit_code != 0
    assert "cannot reach Kafka" in result.output
