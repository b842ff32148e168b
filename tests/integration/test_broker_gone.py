"""Stopping the pipeline after Kafka is gone: ``ocrstream all`` stopped once the broker already
was (``infra down`` first, or a broker lost while a node drains) must still end, every agent by
itself, without the supervisor killing any.

It did not: an OCR worker holding offsets it had not committed waited in librdkafka's
``close()`` for a group coordinator that never came back, and the assembler in faust's last
commit; ``ocrstream all`` killed both after its ``stop_timeout_s`` (session 38's new-user
trial, and this test before the fix). The broker here is the test's own, as the suite's is
shared.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ocrstream.client import OcrClient
from ocrstream.settings import KafkaSettings, S3Settings
from ocrstream.storage import ObjectStore
from ocrstream.streams.topics import ensure_topics
from tests.integration.harness import REPO, free_port, interruptible, own_broker, text_doc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

STOP_TIMEOUT_S = 100  # the supervisor's: an agent still running after it is killed


def test_every_agent_stops_by_itself_when_kafka_went_first(
    kafka_settings: KafkaSettings,
    s3_settings: S3Settings,
    object_store: ObjectStore,
    tmp_path: Path,
) -> None:
    with own_broker(tmp_path / "kafka") as broker:
        kafka = kafka_settings.model_copy(update={"bootstrap_servers": broker.address})
        ensure_topics(kafka, partitions_scale=0.125)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "OCRSTREAM_KAFKA_BOOTSTRAP_SERVERS": broker.address,
            "OCRSTREAM_TOPIC_PREFIX": kafka.topic_prefix,
            "OCRSTREAM_S3_BUCKET": s3_settings.bucket,
            # The worker's offsets stay stored and uncommitted until it stops: the state in
            # which close() waits for the coordinator (commits run every second by default,
            # and a stop just after one has nothing left to say).
            "OCRSTREAM_WORKER_COMMIT_INTERVAL_MS": "600000",
            "OCRSTREAM_SUPERVISOR_STOP_TIMEOUT_S": str(STOP_TIMEOUT_S),
            **{f"OCRSTREAM_{agent}_METRICS_PORT": "0"
               for agent in ("SPLITTER", "WORKER", "ASSEMBLER", "LAG", "WEBHOOK")},
        }  # fmt: skip
        log_path = tmp_path / "all.log"
        with open(log_path, "wb") as log:
            supervisor = subprocess.Popen(
                [sys.executable, "-m", "ocrstream", "all", "--workers", "1"],
                env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=interruptible,
            )  # fmt: skip
        try:
            # a document through the pipeline: every agent has read, and stored offsets
            doc = text_doc(1, pages=1, prefix="gone")
            with OcrClient(kafka, s3_settings) as client:
                client.submit(doc.data, doc_id=doc.doc_id, content_type="application/pdf")
                event = client.wait(doc.doc_id, timeout_s=180)
            assert event.status == "completed", event

            broker.stop(timeout_s=30)
            began = time.monotonic()
            supervisor.send_signal(signal.SIGTERM)
            code = supervisor.wait(STOP_TIMEOUT_S + 60)
            took = time.monotonic() - began
        finally:
            if supervisor.poll() is None:
                supervisor.kill()
                supervisor.wait(30)
        text = log_path.read_text(errors="replace")
        lines = [line for line in text.splitlines() if "ocrstream." in line]
        print("\n".join(lines[-60:]))
    assert code == 0
    killed = [line for line in lines if "did not stop in time" in line]
    assert not killed, killed
    assert took < STOP_TIMEOUT_S
    # the worker was in the state that hung: offsets to commit, and no coordinator to take them
    assert any("ocr worker" in line and "did not take the last commit" in line for line in lines)
    assert any("ocr worker" in line and "stopped" in line for line in lines)


STOPPING = textwrap.dedent(
    """
    import logging, sys, time
    from ocrstream.settings import KafkaSettings
    from ocrstream.streams.membership import watch_the_stop

    logging.basicConfig(level=logging.INFO)
    watch_the_stop(KafkaSettings(bootstrap_servers=sys.argv[1], close_timeout_s=0.5), "agent")
    time.sleep(float(sys.argv[2]))  # a stop that takes this long
    print("stop finished")
    """
)


def _stop_taking(address: str, seconds: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", STOPPING, address, str(seconds)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_a_long_stop_is_left_to_finish_while_kafka_answers(kafka_settings: KafkaSettings) -> None:
    """A faust agent's stop that runs long (a scan still being split) is not cut short: the
    watch asks Kafka every 0.5 s here, and Kafka answers."""
    result = _stop_taking(kafka_settings.bootstrap_servers, 4.0)
    assert result.returncode == 0, result.stderr
    assert "stop finished" in result.stdout
    assert "still stopping" not in result.stderr


def test_a_stop_is_ended_once_kafka_does_not_answer() -> None:
    began = time.monotonic()
    result = _stop_taking(f"127.0.0.1:{free_port()}", 60.0)  # nothing listens there
    assert result.returncode == 1
    assert "stop finished" not in result.stdout
    assert "agent: still stopping after" in result.stderr
    assert time.monotonic() - began < 30  # the watch's 0.5 s and its 0.5 s probe, not the 60 s
