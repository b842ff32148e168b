"""Webhooks on the real Kafka and S3 store, to a real HTTP receiver started by the test on
loopback (the settings of these tests allow ``127.0.0.0/8`` and ``http``; nothing else does).

- A document uploaded through ``ocrstream api`` with a ``callback_url`` is read by the
  pipeline, and the webhook agent (``ocrstream webhooks``) POSTs its terminal event there:
  the body is the event, ``X-Ocrstream-Signature`` checks out under the tenant's secret (as
  ``ocrstream api keys secret`` printed it), and a receiver that fails twice gets the same
  delivery id three times, the third answered 200.
- A callback to a private, link-local, loopback (outside the allowed network) or non-http(s)
  address is refused at submission with 422; one that reaches the agent anyway (a producer
  that is not the API) and resolves to loopback where the agent does not allow it is refused
  at delivery: never called, dead-lettered with stage ``webhook``.
- The agent SIGKILLed while a delivery is between retries loses nothing: started again, it
  delivers it (same delivery id) once the receiver is back.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ocrstream.processors.webhook import CALLBACK_ATTRIBUTE
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import DeadLetter, DocumentEvent, DocumentStatus
from ocrstream.settings import KafkaSettings
from ocrstream.storage import ObjectStore
from ocrstream.streams.producer import RecordProducer
from ocrstream.streams.topics import DLQ, DOCUMENTS, WEBHOOK_RETRY
from tests.integration import harness
from tests.integration.harness import REPO, free_port, read_all
from tests.integration.test_api import Api, png, start_api, stop_api, wait_ready, wait_status
from tests.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

LOOPBACK = {"OCRSTREAM_WEBHOOK_ALLOW_HTTP": "true",
            "OCRSTREAM_WEBHOOK_ALLOWED_NETWORKS": '["127.0.0.0/8"]'}  # fmt: skip
# Short retries: 0.5 s, 1 s, then every 2 s.
FAST_RETRIES = {
    "OCRSTREAM_WEBHOOK_BACKOFF_S": "0.5",
    "OCRSTREAM_WEBHOOK_BACKOFF_MAX_S": "2",
    "OCRSTREAM_WEBHOOK_JITTER": "0",
    "OCRSTREAM_WEBHOOK_SESSION_TIMEOUT_MS": "6000",
}


# --- a receiver --------------------------------------------------------------------------------


@dataclass
class Call:
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int


@dataclass
class Receiver:
    """An HTTP server on loopback that records every POST and answers ``fail`` (a status) to
    the first ``failures`` of them, 200 afterwards."""

    failures: int = 0
    fail: int = 503
    by_path: dict[str, int] = field(default_factory=dict)  # a fixed answer for these paths
    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    def answer(self, path: str) -> int:
        with self.lock:
            if path in self.by_path:
                return self.by_path[path]
            return self.fail if len(self.calls) < self.failures else 200

    def record(self, call: Call) -> None:
        with self.lock:
            self.calls.append(call)

    def seen(self) -> list[Call]:
        with self.lock:
            return list(self.calls)

    def url(self, host: str = "127.0.0.1", path: str = "/hooks/ocr?src=test") -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status = found.answer(self.path)
            found.record(Call(self.path, {k.lower(): v for k, v in self.headers.items()},
                              body, status))  # fmt: skip
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    found.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()


# --- the webhook agent as a process ------------------------------------------------------------


@dataclass
class WebhookAgent:
    env: dict[str, str]
    log: Path
    metrics_port: int
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ocrstream", "webhooks", "--metrics-port",
                 str(self.metrics_port)],
                env=self.env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def kill(self) -> None:
        assert self.proc is not None
        assert self.proc.poll() is None, self.tail()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.proc = None  # not a clean exit, and not asked for one

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return 0 if self.proc is None else self.proc.returncode
        self.proc.terminate()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def metric(self, name: str, **labels: str) -> float | None:
        import urllib.request

        from prometheus_client.parser import text_string_to_metric_families

        try:
            url = f"http://127.0.0.1:{self.metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
        except OSError:
            return None
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v
                                               for k, v in labels.items()):  # fmt: skip
                    return float(sample.value)
        return None

    def settles(self, name: str, value: float, **labels: str) -> None:
        """The metric reaches ``value`` (the agent counts an attempt once it has its answer,
        a moment after the receiver saw the request)."""
        wait_until(lambda: self.metric(name, **labels) == value, 30, f"{name}{labels} == {value}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


def agent_env(kafka: KafkaSettings, bucket: str, secrets: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "OCRSTREAM_TOPIC_PREFIX": kafka.topic_prefix,
        "OCRSTREAM_S3_BUCKET": bucket,
        "OCRSTREAM_WEBHOOK_SECRETS_FILE": str(secrets),
        **extra,
    }


@pytest.fixture
def webhook_agents(tmp_path: Path) -> Iterator[list[WebhookAgent]]:
    made: list[WebhookAgent] = []
    yield made
    codes = [agent.stop() for agent in made]
    show_logs(made)
    assert all(code == 0 for code in codes), f"the webhook agent exited with {codes}"


def show_logs(agents: list[WebhookAgent]) -> None:
    """The agents' logs on the test's output: shown with a failure, in the phase that failed
    (a rerun's report of the first failure shows the call's output, not the teardown's)."""
    for agent in agents:
        print(f"--- {agent.log.name} ---\n{agent.tail()}")


def new_agent(made: list[WebhookAgent], env: dict[str, str], tmp_path: Path) -> WebhookAgent:
    agent = WebhookAgent(env, tmp_path / f"webhooks-{len(made)}.log", free_port())
    made.append(agent)
    agent.start()
    wait_until(lambda: agent.metric("ocrstream_webhook_pending_retries") is not None, 60,
               "the webhook agent's metrics", interval_s=0.3)  # fmt: skip
    return agent


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "ocrstream", *args], env=env, cwd=REPO,
                          capture_output=True, check=True)  # fmt: skip


def signed(secret: str, call: Call) -> bool:
    want = "sha256=" + hmac.new(secret.encode(), call.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, call.headers.get("x-ocrstream-signature", ""))


# --- the tests ---------------------------------------------------------------------------------


def test_an_uploaded_document_is_called_back_signed_and_retried(
    topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path, receiver: Receiver,
    webhook_agents: list[WebhookAgent],
) -> None:  # fmt: skip
    secrets = tmp_path / "webhook-secrets.json"
    env = agent_env(topics, object_store.bucket, secrets, **LOOPBACK, **FAST_RETRIES)
    api: Api = start_api(
        topics,
        object_store.bucket,
        tmp_path,
        **{k: env[k] for k in (*LOOPBACK, "OCRSTREAM_WEBHOOK_SECRETS_FILE")},
    )
    receiver.failures = 2  # 503, 503, then 200
    try:
        wait_ready(api)
        assert secrets.exists(), "the tenant's first key made no webhook secret"
        # The operator rotates acme's secret: printed once, and what the agent signs with.
        rotated = cli(env, "api", "keys", "secret", "--tenant", "acme").stdout.decode().strip()
        assert rotated.startswith("whsec_")
        assert rotated not in (tmp_path / "api-keys.json").read_text()
        new_agent(webhook_agents, env, tmp_path)
        with harness.stack(topics, object_store.bucket, tmp_path) as make:
            pipeline, _witness = make()
            pipeline.start()
            # a document without a callback: finished, and never called back
            status, quiet = api.upload("acme", png(200, 50), "quiet.png")
            assert status == 202, quiet
            assert wait_status(api, "acme", quiet["doc_id"])["status"] == "completed"
            status, accepted = api.upload(
                "acme",
                png(321, 123),
                "receipt.png",
                callback_url=receiver.url(),
                attributes='{"case": "7"}',
            )
            assert status == 202, accepted
            doc_id = accepted["doc_id"]
            calls = wait_until(lambda: (c := receiver.seen()) and c[-1].answered == 200 and c,
                               120, "the webhook answered 200", interval_s=0.2)  # fmt: skip
            assert wait_status(api, "acme", doc_id)["status"] == "completed"
    finally:
        stop_api(api)
        show_logs(webhook_agents)
    assert [c.answered for c in calls] == [503, 503, 200]
    assert {c.path for c in calls} == {"/hooks/ocr?src=test"}
    assert [c.headers["x-ocrstream-attempt"] for c in calls] == ["1", "2", "3"]
    assert len({c.headers["x-ocrstream-delivery"] for c in calls}) == 1
    assert all(c.headers["content-type"] == "application/json" for c in calls)
    assert all(signed(rotated, c) for c in calls), "a signature does not check out"
    assert not signed("whsec_someone-else", calls[-1])
    event = json.loads(calls[-1].body)
    assert event["doc_id"] == doc_id
    assert event["status"] == "completed"
    assert event["tenant"] == "acme"
    assert event["pages_ok"] == event["page_count"] == 1
    assert event["attributes"]["case"] == "7"
    assert event["attributes"][CALLBACK_ATTRIBUTE] == receiver.url()
    agent = webhook_agents[0]
    agent.settles("ocrstream_webhook_deliveries_total", 1, outcome="delivered")
    assert agent.metric("ocrstream_webhook_deliveries_total", outcome="retry") == 2
    assert agent.metric("ocrstream_webhook_deliveries_total", outcome="dead_letter") == 0
    assert (agent.metric("ocrstream_webhook_delivery_seconds_count") or 0) >= 3
    assert wait_until(lambda: agent.metric("ocrstream_webhook_pending_retries") == 0, 30,
                      "no retries pending")  # fmt: skip


def terminal_event(doc_id: str, callback: str, tenant: str = "acme") -> DocumentEvent:
    now = datetime.now(UTC)
    return DocumentEvent(doc_id=doc_id, status=DocumentStatus.COMPLETED, page_count=1,
                         pages_ok=1, pages_failed=0, submitted_at=now, completed_at=now,
                         attributes={CALLBACK_ATTRIBUTE: callback}, tenant=tenant)  # fmt: skip


def publish(kafka: KafkaSettings, event: DocumentEvent) -> None:
    """The event on ocr.documents.v1, as the assembler publishes it."""
    producer = RecordProducer(kafka, Codec(kafka))
    producer.send(kafka.topic(DOCUMENTS), event.doc_id, event)
    assert producer.flush(30) == 0


def test_private_callbacks_are_refused_at_submission_and_at_delivery(
    topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path, receiver: Receiver,
    webhook_agents: list[WebhookAgent],
) -> None:  # fmt: skip
    secrets = tmp_path / "webhook-secrets.json"
    api = start_api(
        topics,
        object_store.bucket,
        tmp_path,
        OCRSTREAM_WEBHOOK_SECRETS_FILE=str(secrets),
        **LOOPBACK,
    )
    try:
        wait_ready(api)
        refused = {
            "http://10.1.2.3/hook": "10.1.2.3",
            "http://192.168.0.10:8080/hook": "192.168.0.10",
            "http://169.254.169.254/latest/meta-data/": "169.254.169.254",
            "http://[::1]:8080/hook": "::1",
            "http://[::ffff:10.0.0.1]/": "::ffff:10.0.0.1",
            "http://0.0.0.0:8080/": "0.0.0.0",
            "ftp://127.0.0.1/hook": "must be https or http",
            "http://user:pw@127.0.0.1/hook": "credentials",
            "http://no-such-host.invalid/hook": "does not resolve",
        }
        for url, reason in refused.items():
            status, body = api.upload("acme", png(100, 40), "a.png", callback_url=url)
            assert status == 422, (url, body)
            assert reason in body["detail"], (url, body)
        status, body = api.json(
            "POST",
            "/v1/documents",
            tenant="acme",
            content_type="application/json",
            body=json.dumps(
                {"source_uri": "s3://elsewhere/x.pdf", "callback_url": "http://10.9.9.9/"}
            ).encode(),
        )
        assert status == 422, body
        assert "callback_url refused" in body["detail"]
        status, body = api.upload(
            "acme",
            png(100, 40),
            "a.png",
            attributes=json.dumps({CALLBACK_ATTRIBUTE: "http://10.0.0.1/"}),
        )
        assert status == 422, body
        assert "reserved" in body["detail"]
        # within the API's allowed network: accepted
        status, body = api.upload("acme", png(100, 40), "a.png", callback_url=receiver.url())
        assert status == 202, body
    finally:
        stop_api(api)

    # An agent that allows no inside network: a callback that resolves to loopback ("localhost"),
    # published by a producer that never asked the API, is refused at delivery.
    env = agent_env(topics, object_store.bucket, secrets, OCRSTREAM_WEBHOOK_ALLOW_HTTP="true",
                    **FAST_RETRIES)  # fmt: skip
    agent = new_agent(webhook_agents, env, tmp_path)
    publish(topics, terminal_event("rebound-1", receiver.url("localhost")))
    codec = Codec(topics)

    def dead_letters() -> list[DeadLetter]:
        return [r for r in read_all(topics, DLQ, codec) if isinstance(r, DeadLetter)]

    letters = wait_until(dead_letters, 60, "the refused webhook's dead letter", interval_s=0.5)
    assert [(d.stage, d.error_code) for d in letters] == [("webhook", "callback_not_allowed")]
    assert "127.0.0.1" in letters[0].error_message or "::1" in letters[0].error_message
    assert letters[0].topic == topics.topic(DOCUMENTS)
    assert codec.decode_as(letters[0].value or b"", DocumentEvent).doc_id == "rebound-1"
    assert agent.metric("ocrstream_webhook_deliveries_total", outcome="dead_letter") == 1
    assert agent.metric("ocrstream_dlq_total", stage="webhook", code="callback_not_allowed") == 1
    assert receiver.seen() == [], "an address the agent does not allow was called"


def test_a_killed_agent_loses_no_delivery_between_retries(
    topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path, receiver: Receiver,
    webhook_agents: list[WebhookAgent],
) -> None:  # fmt: skip
    secrets = tmp_path / "webhook-secrets.json"
    env = agent_env(topics, object_store.bucket, secrets, **LOOPBACK, **FAST_RETRIES)
    cli(env, "api", "keys", "create", "--tenant", "acme")
    secret = json.loads(secrets.read_text())["tenants"]["acme"]["secret"]
    receiver.failures = 10**6  # down until the agent is killed
    first = new_agent(webhook_agents, env, tmp_path)
    publish(topics, terminal_event("kept-1", receiver.url()))
    wait_until(lambda: len(receiver.seen()) >= 3, 60, "three failed attempts", interval_s=0.2)
    # between retries: the event was handed to the retry topic and the agent holds it
    assert (first.metric("ocrstream_webhook_pending_retries") or 0) + \
        (first.metric("ocrstream_webhook_deliveries_total", outcome="retry") or 0) >= 1  # fmt: skip
    first.kill()
    failed = receiver.seen()
    receiver.failures = len(failed)  # the receiver is back: the next call is answered 200
    second = new_agent(webhook_agents, env, tmp_path)

    # The chain of retries survived: an attempt that carries on its count is answered 200.
    # (At least once: were the source offset not yet committed when the agent died, the
    # event would be called back once more, with the same delivery id.)
    def chain_delivered() -> list[Call]:
        calls = receiver.seen()
        after = calls[len(failed) :]
        ok = [c for c in after if c.answered == 200 and int(c.headers["x-ocrstream-attempt"])
              >= len(failed)]  # fmt: skip
        return calls if ok else []

    calls = wait_until(chain_delivered, 90, "the delivery after the restart", interval_s=0.2)
    assert len({c.headers["x-ocrstream-delivery"] for c in calls}) == 1
    assert all(signed(secret, c) for c in calls)
    assert {json.loads(c.body)["doc_id"] for c in calls} == {"kept-1"}
    wait_until(lambda: (second.metric("ocrstream_webhook_deliveries_total", outcome="delivered")
                        or 0) >= 1, 30, "the delivery counted")  # fmt: skip
    assert wait_until(lambda: second.metric("ocrstream_webhook_pending_retries") == 0, 30,
                      "no retries pending")  # fmt: skip


def test_what_cannot_be_delivered_ends_on_the_dlq_and_a_redrive_starts_afresh(
    topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path, receiver: Receiver,
    webhook_agents: list[WebhookAgent],
) -> None:  # fmt: skip
    secrets = tmp_path / "webhook-secrets.json"
    env = agent_env(topics, object_store.bucket, secrets, **LOOPBACK, **FAST_RETRIES,
                    OCRSTREAM_WEBHOOK_WINDOW_S="3")  # fmt: skip
    cli(env, "api", "keys", "create", "--tenant", "acme")
    receiver.by_path = {"/gone": 410, "/down": 503}
    agent = new_agent(webhook_agents, env, tmp_path)
    publish(topics, terminal_event("gone-1", receiver.url(path="/gone")))
    publish(topics, terminal_event("down-1", receiver.url(path="/down")))
    codec = Codec(topics)

    def letters(want: int) -> dict[str, DeadLetter]:
        found = [r for r in read_all(topics, DLQ, codec) if isinstance(r, DeadLetter)]
        by_doc = {codec.decode_as(d.value or b"", DocumentEvent).doc_id: d for d in found}
        return by_doc if len(found) >= want else {}

    dead = wait_until(lambda: letters(2), 60, "two dead letters", interval_s=0.5)
    assert set(dead) == {"gone-1", "down-1"}
    gone, down = dead["gone-1"], dead["down-1"]
    assert (gone.stage, gone.error_code) == ("webhook", "webhook_rejected")
    assert "HTTP 410" in gone.error_message
    assert gone.topic == topics.topic(DOCUMENTS)  # refused at the first attempt: never retried
    assert (down.stage, down.error_code) == ("webhook", "webhook_expired")
    assert "window 3s" in down.error_message
    assert down.topic == topics.topic(WEBHOOK_RETRY)
    paths = [c.path for c in receiver.seen()]
    assert paths.count("/gone") == 1
    assert paths.count("/down") >= 2  # retried until the window closed
    assert agent.metric("ocrstream_webhook_deliveries_total", outcome="dead_letter") == 2
    assert agent.metric("ocrstream_dlq_total", stage="webhook", code="webhook_expired") == 1
    assert agent.metric("ocrstream_dlq_total", stage="webhook", code="webhook_rejected") == 1

    # The receiver is fixed; the operator redrives the expired one: a fresh window, delivered.
    receiver.by_path = {"/gone": 410}
    tried = len(receiver.seen())
    redriven = cli(env, "dlq", "redrive", "--stage", "webhook", "--code", "webhook_expired")
    assert b"redriven: 1;" in redriven.stdout
    delivered = wait_until(
        lambda: [c for c in receiver.seen()[tried:] if c.path == "/down" and c.answered == 200],
        60, "the redriven webhook delivered", interval_s=0.2,
    )  # fmt: skip
    assert json.loads(delivered[0].body)["doc_id"] == "down-1"
    agent.settles("ocrstream_webhook_deliveries_total", 1, outcome="delivered")
