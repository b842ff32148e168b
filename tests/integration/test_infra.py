"""The local services that ``ocrstream infra up`` starts, checked the way a user would."""

from __future__ import annotations

import io
import json
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from ocrstream.cli import main
from ocrstream.schemas import Codec, ScanSource, ScanSubmitted
from ocrstream.settings import KafkaSettings, S3Settings, ServicesSettings
from ocrstream.streams.topics import SCANS, SPECS, delete_topics, ensure_topics
from tests.polling import wait_until

pytestmark = pytest.mark.integration


def test_status_reports_every_service_up(services: ServicesSettings) -> None:
    result = CliRunner().invoke(main, ["infra", "status"])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line.split() for line in result.output.splitlines()[1:4]}
    assert set(lines) == {"kafka", "s3", "prometheus"}
    for name, fields in lines.items():
        assert fields[1] == "up", result.output
        assert fields[2].isdigit(), name
    assert f"127.0.0.1:{services.kafka_port}" in result.output
    assert f"http://127.0.0.1:{services.s3_port}" in result.output
    assert f"http://127.0.0.1:{services.prometheus_port}" in result.output

    quiet = CliRunner().invoke(main, ["infra", "status", "--quiet"])
    assert quiet.exit_code == 0
    assert quiet.output == ""


def test_infra_up_again_is_a_no_op(services: ServicesSettings) -> None:
    t0 = time.monotonic()
    result = CliRunner().invoke(main, ["infra", "up"])
    assert result.exit_code == 0, result.output
    assert result.output.count("already up") == 3
    assert time.monotonic() - t0 < 10


def test_prometheus_scrapes_itself(services: ServicesSettings) -> None:
    query = urllib.parse.urlencode({"query": 'up{job="prometheus"}'})
    url = f"http://127.0.0.1:{services.prometheus_port}/api/v1/query?{query}"

    def up() -> bool:
        with urllib.request.urlopen(url, timeout=5) as resp:
            results = json.load(resp)["data"]["result"]
        return bool(results) and results[0]["value"][1] == "1"

    wait_until(up, 30, "Prometheus to have scraped itself", interval_s=1)


def test_s3_put_and_get(services: ServicesSettings, s3_settings: S3Settings) -> None:
    from minio import Minio

    client = Minio(
        f"127.0.0.1:{services.s3_port}",
        access_key=s3_settings.access_key.get_secret_value(),
        secret_key=s3_settings.secret_key.get_secret_value(),
        region=s3_settings.region,
        secure=False,
    )
    bucket = s3_settings.bucket
    client.make_bucket(bucket)
    try:
        payload = b"%PDF-1.7 scanned page\n" * 100
        client.put_object(bucket, "scans/doc-1/source.pdf", io.BytesIO(payload), len(payload))
        resp = client.get_object(bucket, "scans/doc-1/source.pdf")
        try:
            assert resp.read() == payload
        finally:
            resp.close()
            resp.release_conn()
    finally:
        for obj in client.list_objects(bucket, recursive=True):
            client.remove_object(bucket, obj.object_name or "")
        client.remove_bucket(bucket)


def _scan(i: int) -> ScanSubmitted:
    return ScanSubmitted(
        doc_id=f"doc-{i}",
        source=ScanSource(uri=f"s3://ocrstream/scans/doc-{i}/source.pdf"),
        content_type="application/pdf",
        sha256="0" * 64,
        size_bytes=1000 + i,
        submitted_at=datetime(2026, 1, 1, tzinfo=UTC),
        tenant="acme",
    )


def test_kafka_round_trip_commit_and_lag(kafka_settings: KafkaSettings) -> None:
    """An Avro ScanSubmitted produced, consumed in a group, committed; lag read by the admin API."""
    from confluent_kafka import Consumer, Message, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    from ocrstream.streams.autoscaler import GroupLag

    topic = kafka_settings.topic(SCANS)
    group = f"{kafka_settings.topic_prefix}group"
    ensure_topics(kafka_settings, 3, specs=[SPECS[SCANS]])
    codec = Codec(kafka_settings)
    try:
        producer = Producer(kafka_settings.librdkafka(acks="all", **{"enable.idempotence": True}))
        sent = [_scan(i) for i in range(5)]
        for record in sent:
            producer.produce(topic, key=record.doc_id.encode(), value=codec.encode(record, topic))
        assert producer.flush(30) == 0

        consumer = Consumer(
            kafka_settings.librdkafka(
                **{
                    "group.id": group,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                }
            )
        )
        consumer.subscribe([topic])
        received: list[Message] = []

        def read_all_sent() -> bool:
            msg = consumer.poll(1.0)
            if msg is not None:
                assert msg.error() is None, msg.error()
                received.append(msg)
            return len(received) >= len(sent)

        try:
            wait_until(read_all_sent, 60, f"the {len(sent)} records back", interval_s=0)
            # Commit only the first three: two records stay unconsumed as far as the group knows.
            for msg in received[:3]:
                consumer.commit(message=msg, asynchronous=False)
        finally:
            consumer.close()

        records = [codec.decode_as(m.value() or b"", ScanSubmitted) for m in received]
        decoded = {r.doc_id: r for r in records}
        assert decoded == {r.doc_id: r for r in sent}

        admin = AdminClient(kafka_settings.librdkafka())
        ends = admin.list_offsets(
            {TopicPartition(topic, p): OffsetSpec.latest() for p in range(3)},
            request_timeout=30,
        )
        high = {tp.partition: f.result(timeout=30).offset for tp, f in ends.items()}
        assert sum(high.values()) == 5
        lag = GroupLag(kafka_settings, group, topic, timeout_s=30)
        try:
            assert lag.read() == 2  # five produced, three committed
        finally:
            lag.close()
    finally:
        cleanup = AdminClient(kafka_settings.librdkafka())
        cleanup.delete_consumer_groups([group])[group].result(timeout=30)
        delete_topics(kafka_settings, specs=[SPECS[SCANS]])
