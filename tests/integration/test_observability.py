"""A real Prometheus scrapes the real agents through an end-to-end run.

The local Prometheus (``ocrstream infra up``, 127.0.0.1:19090) scrapes the fixed ports of
infra/prometheus/prometheus.yml, so the agents run on those ports here — splitter 9101,
assembler 9102, lag exporter 9103, the local autoscaler 9104 and the OCR worker it starts on
9110 — under the lock every user of those ports takes; the webhook agent on 9105 and the HTTP
API on 8080 (its /metrics beside the routes) run too. Documents go through (good scans, one
with a broken page, one that is not a PDF, and undecodable records for the dead-letter
topic), three images are uploaded through the API with callbacks to a receiver the test runs
(one answers 200, one 503 once and then 200, one 410: delivered, retried, dead-lettered), and a
tenant limited to two requests a minute gets 429s; and then:

- every agent serves the metrics docs/architecture.md ("Metrics") makes it responsible for,
  as Prometheus stores them;
- every PromQL expression of the dashboards and of the recording rules returns data over the
  run (a range query), the recorded series exist, and the alert expressions evaluate — only
  the two dead-letter alerts holding, since dead letters were sent (a webhook's among them);
- with the agents stopped, ``ocrstream_consumer_lag`` on the lag exporter's ``/metrics``
  equals what the Kafka admin API says for every group, topic and partition of the run.

The Prometheus is the one on ``OCRSTREAM_INFRA_PROMETHEUS_PORT`` (19090 by default), run from
this checkout's infra/prometheus/prometheus.yml: the test reloads it when the rendered config
changed, and fails when it scrapes other jobs than that file names.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ocrstream.client import OcrClient
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import DocumentStatus, PageImage, PageTask
from ocrstream.services.process import file_lock
from ocrstream.services.prometheus import METRICS_PORTS_LOCK, PrometheusService
from ocrstream.settings import (
    KafkaSettings,
    OcrSettings,
    S3Settings,
    ServicesSettings,
    SupervisorSettings,
    WorkerSettings,
)
from ocrstream.storage import ObjectStore
from ocrstream.streams import topics as t
from ocrstream.streams.gpu_metrics import cuda_index
from ocrstream.streams.supervisor import AgentSpec, Supervisor, ocrstream_command
from ocrstream.streams.topics import delete_topics, ensure_topics
from tests import hostile, samples
from tests.integration.test_api import multipart, png
from tests.polling import wait_until
from tests.promql import ROOT, RULES, metric_names, promql_items

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

PROMETHEUS = f"http://127.0.0.1:{ServicesSettings().prometheus_port}"
JOBS = {"splitter": "9101", "assembler": "9102", "lag-exporter": "9103", "autoscaler": "9104",
        "ocr-worker": "9110", "shadow-comparer": "9106", "webhooks": "9105",
        "api": "8080"}  # fmt: skip
# What each agent must serve (docs/architecture.md "Metrics"; histograms by their _count).
SERVED = {
    "splitter": ["ocrstream_pages_total", "ocrstream_documents_total",
                 "ocrstream_stage_seconds_count", "ocrstream_document_latency_seconds_count",
                 "ocrstream_dlq_total"],
    "ocr-worker": ["ocrstream_pages_total", "ocrstream_stage_seconds_count",
                   "ocrstream_batch_size_count", "ocrstream_worker_info", "ocrstream_dlq_total",
                   "ocrstream_routing_total"],
    "assembler": ["ocrstream_pages_total", "ocrstream_documents_total",
                  "ocrstream_stage_seconds_count", "ocrstream_document_latency_seconds_count",
                  "ocrstream_inflight_documents"],
    "lag-exporter": ["ocrstream_consumer_lag"],
    "shadow-comparer": ["ocrstream_shadow_cer_count", "ocrstream_shadow_confidence_delta_count"],
    "autoscaler": ["ocrstream_autoscaler_replicas", "ocrstream_autoscaler_desired_replicas"],
    "webhooks": ["ocrstream_webhook_deliveries_total", "ocrstream_webhook_delivery_seconds_count",
                 "ocrstream_webhook_pending_retries", "ocrstream_dlq_total"],
    "api": ["ocrstream_api_requests_total", "ocrstream_api_request_seconds_count",
            "ocrstream_api_limited_total", "ocrstream_api_usage_total"],
}  # fmt: skip
# The edge: a tenant the API limits to two requests a minute, webhooks to loopback over http
# (which only these settings allow), retried after half a second.
LIMITED = "limited"
EDGE_ENV = {
    "OCRSTREAM_API_TENANT_LIMITS": json.dumps({LIMITED: {"requests_per_minute": 2}}),
    "OCRSTREAM_WEBHOOK_ALLOW_HTTP": "true",
    "OCRSTREAM_WEBHOOK_ALLOWED_NETWORKS": '["127.0.0.0/8"]',
    "OCRSTREAM_WEBHOOK_BACKOFF_S": "0.5",
    "OCRSTREAM_WEBHOOK_BACKOFF_MAX_S": "2",
    "OCRSTREAM_WEBHOOK_JITTER": "0",
}
# What the receiver answers on each path (a list: one answer per call, the last one repeated).
CALLBACKS = {"/hooks/ok": [200], "/hooks/flaky": [503, 200], "/hooks/gone": [410]}
GPU_METRICS = {"ocrstream_gpu_utilization_ratio", "ocrstream_gpu_memory_used_bytes"}


# --- Prometheus's HTTP API -----------------------------------------------------------------------


def api(path: str, **params: Any) -> Any:
    url = f"{PROMETHEUS}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]


def query(expr: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = api("query", query=expr)["result"]
    return result


def query_range(expr: str, start: float, end: float, step: float = 5.0) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = api("query_range", query=expr, start=start, end=end,
                                       step=step)["result"]  # fmt: skip
    return result


def has_numbers(result: list[dict[str, Any]]) -> bool:
    """At least one sample that is a number (not NaN): a panel that would show something."""
    values = [v for series in result for _, v in series.get("values", [series.get("value")])]
    return any(not math.isnan(float(v)) for v in values)


def scalar(expr: str) -> float:
    result = query(expr)
    return float(result[0]["value"][1]) if result else float("nan")


# --- the run --------------------------------------------------------------------------------------


@dataclass
class Run:
    kafka: KafkaSettings
    s3: S3Settings
    env: dict[str, str]
    supervisor: Supervisor
    thread: threading.Thread
    log: Path
    started: float = 0.0
    finished: float = 0.0
    statuses: dict[str, DocumentStatus] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # tenant -> API key
    receiver: Receiver | None = None

    def stop_agents(self) -> None:
        self.supervisor.stop()
        self.thread.join(180)


def ensure_prometheus_config() -> None:
    """Prometheus runs with this repository's scrape config and rules (reloaded if stale)."""
    try:
        api("status/buildinfo")
    except OSError:
        pytest.skip("no Prometheus on 127.0.0.1:19090: run `ocrstream infra up`")
    PrometheusService(ServicesSettings()).reconfigure()  # renders; POST /-/reload if changed
    source = yaml.safe_load((ROOT / "infra" / "prometheus" / "prometheus.yml").read_text())
    want = {job["job_name"] for job in source["scrape_configs"]}

    def loaded() -> bool:
        running = yaml.safe_load(api("status/config")["yaml"])
        jobs = {job["job_name"] for job in running["scrape_configs"]}
        groups = {g["name"] for g in api("rules")["groups"]}
        return jobs == want and rule_groups() <= groups

    if not loaded():  # a rule file added since it started, or rendered and never reloaded
        request = urllib.request.Request(f"{PROMETHEUS}/-/reload", method="POST")
        urllib.request.urlopen(request, timeout=30).close()
    wait_until(loaded, 30, "Prometheus to load the scrape config and the rules", interval_s=1)
    want_targets = {(job, f"http://127.0.0.1:{port}/metrics") for job, port in JOBS.items()}

    def targets() -> set[tuple[str, str]]:
        return {(t_["labels"]["job"], t_["scrapeUrl"]) for t_ in api("targets")["activeTargets"]}

    # a Prometheus started a moment ago lists no targets until its discovery's first round
    wait_until(lambda: want_targets <= targets(), 30, "Prometheus to list the scrape targets",
               interval_s=1)  # fmt: skip


def rule_groups() -> set[str]:
    """The rule groups of infra/prometheus/rules/*.yml."""
    return {group["name"] for path in RULES.glob("*.yml")
            for group in yaml.safe_load(path.read_text())["groups"]}  # fmt: skip


@dataclass
class Receiver:
    """Webhook receiver on loopback: answers each path as CALLBACKS says, records the calls."""

    server: ThreadingHTTPServer
    calls: list[tuple[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def answer(self, path: str) -> int:
        with self.lock:
            answers = CALLBACKS.get(path.split("?")[0], [404])
            status = answers[min(len([c for c in self.calls if c[0] == path]), len(answers) - 1)]
            self.calls.append((path, status))
            return status


def start_receiver() -> Receiver:
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(receiver.answer(self.path))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    receiver = Receiver(ThreadingHTTPServer(("127.0.0.1", 0), Handler))
    threading.Thread(target=receiver.server.serve_forever, daemon=True).start()
    return receiver


def edge(run: Run, method: str, path: str, tenant: str, body: bytes | None = None,
         content_type: str | None = None) -> tuple[int, Any]:  # fmt: skip
    """A request to the API under test as ``tenant``: (status, the JSON body or None)."""
    headers = {"Authorization": f"Bearer {run.keys[tenant]}"}
    if content_type:
        headers["Content-Type"] = content_type
    url = f"http://127.0.0.1:{JOBS['api']}{path}"
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            status, text = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read()
    return status, json.loads(text) if text else None


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    ensure_prometheus_config()
    tag = f"obs-{uuid.uuid4().hex[:8]}"
    kafka = KafkaSettings(topic_prefix=f"t-{tag}.")
    s3 = S3Settings(bucket=f"t-{tag}")
    ensure_topics(kafka, partitions_scale=0.125)
    store = ObjectStore(s3)
    store.ensure_bucket()
    env = {
        **os.environ,
        "OCRSTREAM_TOPIC_PREFIX": kafka.topic_prefix,
        "OCRSTREAM_S3_BUCKET": s3.bucket,
        "OCRSTREAM_OCR_THREADS": "2",
        "OCRSTREAM_LAG_INTERVAL_S": "1",
        "OCRSTREAM_ASSEMBLER_SCAN_INTERVAL_S": "1",
        "OCRSTREAM_WORKER_MAX_WAIT_MS": "50",
        "OCRSTREAM_API_KEYS_FILE": str(tmp_path_factory.mktemp("api") / "api-keys.json"),
        "OCRSTREAM_WEBHOOK_SECRETS_FILE": str(tmp_path_factory.mktemp("webhooks") / "secrets.json"),
        **EDGE_ENV,
    }
    keys = {}
    for tenant in ("acme", LIMITED):  # each tenant's first key makes its webhook secret
        made = subprocess.run(ocrstream_command(["api", "keys", "create", "--tenant", tenant]),
                              env=env, capture_output=True, check=True)  # fmt: skip
        keys[tenant] = made.stdout.decode().strip()
    specs = [
        AgentSpec("splitter", ("splitter", "--metrics-port", JOBS["splitter"])),
        AgentSpec("assembler", ("assembler", "--metrics-port", JOBS["assembler"])),
        AgentSpec("lag-exporter", ("lag-exporter", "--metrics-port", JOBS["lag-exporter"])),
        # No shadow worker runs: the comparer's histograms are there, at 0.
        AgentSpec("shadow-comparer", ("shadow", "compare", "--metrics-port",
                                      JOBS["shadow-comparer"])),
        # The autoscaler starts the OCR worker(s) on 9110 + i.
        AgentSpec("autoscaler", ("scale", "--min", "1", "--max", "2", "--lag-threshold", "5",
                                 "--cooldown", "5", "--stabilization", "10", "--interval", "1",
                                 "--metrics-port", JOBS["autoscaler"])),
        AgentSpec("webhooks", ("webhooks", "--metrics-port", JOBS["webhooks"])),
        AgentSpec("api", ("api", "--port", JOBS["api"])),
    ]  # fmt: skip
    log_path = tmp_path_factory.mktemp("observability") / "agents.log"
    with file_lock(METRICS_PORTS_LOCK), open(log_path, "wb") as log:
        supervisor = Supervisor(specs, SupervisorSettings(stop_timeout_s=120), env=env,
                                stdout=log.fileno())  # fmt: skip
        thread = threading.Thread(target=supervisor.run, daemon=True)
        thread.start()
        the_run = Run(kafka, s3, env, supervisor, thread, log_path, keys=keys,
                      receiver=start_receiver())  # fmt: skip
        try:
            drive(the_run)
            yield the_run
        finally:
            the_run.stop_agents()
            assert the_run.receiver is not None
            the_run.receiver.server.shutdown()
            the_run.receiver.server.server_close()
            print(log_path.read_text(errors="replace")[-5000:])
            admin = AdminClient(kafka.librdkafka())
            names = [n for n in admin.list_topics(timeout=10).topics
                     if n.startswith(kafka.topic_prefix)]  # fmt: skip
            for fut in admin.delete_topics(names).values() if names else ():
                fut.result(30)
            delete_topics(kafka)
            store.remove_bucket()


def drive(run: Run) -> None:
    """Agents scraped and up; documents and dead letters through; Prometheus has seen it all."""

    def all_up() -> bool:
        return all(query(f'up{{job="{job}", instance="127.0.0.1:{port}"}} == 1')
                   for job, port in JOBS.items())  # fmt: skip

    run.started = time.time()
    wait_until(all_up, 240, "every agent to be up in Prometheus", interval_s=2)

    kafka = run.kafka
    junk = Producer(kafka.librdkafka())
    junk.produce(kafka.topic(t.SCANS), key=b"junk-1", value=b"\x00not avro")
    junk.produce(kafka.topic(t.PAGES), key=b"junk/1", value=b"\x00not avro either")
    assert junk.flush(10) == 0

    # Through the API: three images with callbacks, and a tenant past its requests per minute.
    def api_ready() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{JOBS['api']}/readyz", timeout=10) as r:
            return r.status == 200

    wait_until(api_ready, 120, "the API ready", interval_s=1, ignoring=(OSError,))
    receiver = run.receiver
    assert receiver is not None
    uploaded = []
    for path in CALLBACKS:
        body, content_type = multipart(png(200, 50), "edge.png",
                                       {"callback_url": receiver.url(path)})  # fmt: skip
        status, answer = edge(run, "POST", "/v1/documents", "acme", body, content_type)
        assert status == 202, (status, answer)
        uploaded.append(answer["doc_id"])
    limited = [edge(run, "GET", "/v1/documents", LIMITED)[0] for _ in range(4)]
    assert limited == [200, 200, 429, 429], limited

    client = OcrClient(kafka, run.s3)
    docs = {f"scan-{i}": samples.scanned_pdf(pages=2, lines_per_page=4, dpi=100, seed=70 + i).data
            for i in range(3)}  # fmt: skip
    docs["truncated"] = hostile.truncated_pdf()  # a page that cannot be read: partial
    docs["not-a-pdf"] = hostile.not_a_pdf()  # failed
    for doc_id, data in docs.items():
        client.submit(data, doc_id=doc_id)
        time.sleep(3)  # pacing on purpose: the counters rise over several scrapes (5 s apart)
    events = client.wait_many(list(docs), timeout_s=300)
    client.close()
    assert set(events) == set(docs), f"no terminal event for {set(docs) - set(events)}"
    run.statuses = {doc_id: event.status for doc_id, event in events.items()}
    assert run.statuses["truncated"] is DocumentStatus.PARTIAL
    assert run.statuses["not-a-pdf"] is DocumentStatus.FAILED
    assert all(run.statuses[f"scan-{i}"] is DocumentStatus.COMPLETED for i in range(3))

    # A second dead letter a few scrapes after the first: the DLQ counter *rises* in Prometheus.
    junk.produce(kafka.topic(t.SCANS), key=b"junk-2", value=b"\x00still not avro")
    assert junk.flush(10) == 0
    # The callbacks: delivered, retried then delivered, refused for good (a dead letter).
    wait_until(lambda: sorted(receiver.calls) == sorted([("/hooks/ok", 200), ("/hooks/flaky", 503),
                                                         ("/hooks/flaky", 200),
                                                         ("/hooks/gone", 410)]),
               120, "the webhook agent to call back every uploaded document",
               interval_s=1)  # fmt: skip
    outcomes = 'sum(ocrstream_webhook_deliveries_total{outcome="%s"})'
    wait_until(lambda: scalar("sum(ocrstream_documents_total)") == len(docs) + len(uploaded)
               and scalar("sum(ocrstream_dlq_total)") == 4
               and scalar(outcomes % "delivered") == 2 and scalar(outcomes % "retry") == 1
               and scalar(outcomes % "dead_letter") == 1
               and scalar("sum(ocrstream_webhook_pending_retries)") == 0, 60,
               "Prometheus to count every document, dead letter and callback",
               interval_s=1)  # fmt: skip
    # Two more scrapes of every agent, then a rule evaluation after them: the rates and the
    # recorded series cover the end of the run.
    counted = time.time()
    wait_until(lambda: scrapes_since(counted) >= 2, 60, "two more scrapes of every agent",
               interval_s=1)  # fmt: skip
    scraped = time.time()
    wait_until(lambda: rules_evaluated_at() > scraped, 60, "a rule evaluation after them",
               interval_s=1)  # fmt: skip
    run.finished = time.time()


def scrapes_since(since: float) -> int:
    """The fewest scrapes any of the run's agents has had since ``since`` (a Unix time)."""
    window = math.floor(time.time() - since)  # whole seconds, all of them after ``since``
    if window < 1:
        return 0
    jobs = "|".join(JOBS)
    counts = query(f'count_over_time(up{{job=~"{jobs}"}}[{window}s])')
    if len(counts) < len(JOBS):
        return 0
    return min(int(float(series["value"][1])) for series in counts)


def rules_evaluated_at() -> float:
    """When Prometheus last evaluated the ocrstream rule group (a Unix time; 0: never)."""
    from datetime import datetime

    for group in api("rules")["groups"]:
        if group["name"] == "ocrstream":
            return datetime.fromisoformat(group["lastEvaluation"]).timestamp()
    return 0.0


# --- the tests ------------------------------------------------------------------------------------


def test_every_agent_serves_its_design_metrics(run: Run) -> None:
    missing = []
    for job, names in SERVED.items():
        for name in names:
            if not query_range(f'{name}{{job="{job}"}}', run.started, run.finished):
                missing.append(f"{job}: {name}")
    assert not missing, missing
    dlq = {(s["metric"]["job"], s["metric"]["stage"], s["metric"]["code"])
           for s in query("ocrstream_dlq_total")}  # fmt: skip
    assert ("splitter", "splitter", "unknown_schema") in dlq, dlq
    assert ("ocr-worker", "ocr", "unknown_schema") in dlq, dlq
    info = query("ocrstream_worker_info")[0]["metric"]
    assert info["device"] == OcrSettings().device
    assert info["backend"]
    assert info["model"]


def _needs_gpu(expr: str) -> bool:
    return bool(metric_names(expr) & GPU_METRICS)


def test_every_dashboard_and_recording_rule_expression_returns_data(run: Run) -> None:
    items = [i for i in promql_items() if i.kind in ("panel", "record") and not _needs_gpu(i.expr)]
    assert len(items) > 20
    empty = [f"{i.source}: {i.expr}" for i in items
             if not has_numbers(query_range(i.expr, run.started, run.finished))]  # fmt: skip
    assert not empty, "\n".join(empty)
    # Prometheus evaluated the rules into the recorded series, too.
    records = [i.name for i in promql_items() if i.kind == "record"]
    unrecorded = [n for n in records if not has_numbers(query_range(n, run.started, time.time()))]
    assert not unrecorded, unrecorded


def test_alert_expressions_evaluate_and_only_the_dead_letter_alerts_hold(run: Run) -> None:
    alerts = {i.name: i.expr for i in promql_items() if i.kind == "alert"}
    assert set(alerts) >= {"OcrstreamDeadLetters", "OcrstreamLagExporterDown",
                           "OcrstreamNoProgress", "OcrstreamConsumerLagGrowing"}  # fmt: skip
    assert set(alerts) >= {"OcrstreamWebhooksDeadLettered", "OcrstreamWebhookRetriesGrowing",
                           "OcrstreamApiServerErrors"}  # fmt: skip
    holding = {name for name, expr in alerts.items() if query(expr)}
    assert holding == {"OcrstreamDeadLetters", "OcrstreamWebhooksDeadLettered"}, holding
    stages = {s["metric"]["stage"] for s in query(alerts["OcrstreamDeadLetters"])}
    assert {"splitter", "webhook"} <= stages, stages


def test_gpu_panels_return_data_on_a_gpu_worker(run: Run) -> None:
    device = OcrSettings().device
    if cuda_index(device) is None:
        pytest.skip(f"the OCR worker runs on {device!r}: on a CPU the GPU gauges are not "
                    "exported at all (a zero would read as an idle GPU)")  # fmt: skip
    items = [i for i in promql_items() if _needs_gpu(i.expr)]
    assert items
    empty = [i.source for i in items if not has_numbers(query_range(i.expr, run.started,
                                                                       run.finished))]  # fmt: skip
    assert not empty, empty


def test_stage_names_in_use_match_the_dashboards(run: Run) -> None:
    """The dashboards select stages by name (split.*, ocr, assembl.*): those exist."""
    stages = {s["metric"]["stage"] for s in query_range("ocrstream_pages_total", run.started,
                                                          run.finished)}  # fmt: skip
    assert {"splitter", "ocr", "assembler"} <= stages, stages


# --- lag: the exporter against the admin API ------------------------------------------------------

_LAG_LINE = re.compile(r"^ocrstream_consumer_lag\{([^}]*)\} (\S+)$")


def exported_lag(url: str, prefix: str) -> dict[tuple[str, str, int], int]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        m = _LAG_LINE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels["group"].startswith(prefix):
            out[(labels["group"], labels["topic"], int(labels["partition"]))] = int(
                float(m.group(2))
            )
    return out


def offsets(admin: AdminClient, tps: list[TopicPartition], spec: OffsetSpec) -> dict[int, int]:
    futures = admin.list_offsets({tp: spec for tp in tps})
    return {tp.partition: int(f.result().offset) for tp, f in futures.items()}


def admin_lag(admin: AdminClient, kafka: KafkaSettings) -> dict[tuple[str, str, int], int]:
    """High watermark minus committed offset (earliest offset where nothing is committed) for
    every partition of every topic each of the run's groups committed on."""
    prefix = kafka.topic_prefix
    groups = [g.group_id for g in admin.list_consumer_groups().result().valid
              if g.group_id.startswith(prefix)]  # fmt: skip
    meta = admin.list_topics(timeout=10)
    run_tps = [TopicPartition(name, p) for name, topic in meta.topics.items()
               if name.startswith(prefix) for p in topic.partitions]  # fmt: skip
    out = {}
    for group in groups:
        # Committed offsets through a consumer of the group that never joins it (the admin
        # API's ListConsumerGroupOffsets can crash the process: see test_fresh_broker.py).
        reader = Consumer(kafka.librdkafka(**{"group.id": group, "enable.auto.commit": False}))
        try:
            committed = {(tp.topic, tp.partition): tp.offset
                         for tp in reader.committed(run_tps, timeout=30)
                         if tp.error is None and tp.offset >= 0}  # fmt: skip
        finally:
            reader.close()
        for topic in {topic for topic, _ in committed}:
            tps = [TopicPartition(topic, p) for p in meta.topics[topic].partitions]
            high = offsets(admin, tps, OffsetSpec.latest())
            low = offsets(admin, tps, OffsetSpec.earliest())
            for p in high:
                start = committed.get((topic, p), -1)
                out[(group, topic, p)] = high[p] - (start if start >= 0 else low[p])
    return out


def test_exported_lag_equals_the_admin_api(run: Run) -> None:
    run.stop_agents()  # workers, splitter and assembler gone: nothing moves any more
    kafka = run.kafka
    pages = kafka.topic(t.PAGES)
    admin = AdminClient(kafka.librdkafka())
    partitions = sorted(admin.list_topics(pages, timeout=10).topics[pages].partitions)
    # One new page per partition, also on partitions the workers never committed on.
    codec, producer = Codec(kafka), Producer(kafka.librdkafka())
    gray = samples.render_lines(["lag"], dpi=30)
    image = PageImage("png", data=samples.encode_image(gray, "png", 30))
    for p in partitions:
        task = PageTask(doc_id=f"lag-{p}", page_no=1, page_count=1, image=image,
                        width=gray.shape[1], height=gray.shape[0])  # fmt: skip
        producer.produce(pages, key=f"lag-{p}/1".encode(), value=codec.encode(task, pages),
                         partition=p)  # fmt: skip
    assert producer.flush(10) == 0

    env = {**run.env, "OCRSTREAM_LAG_INTERVAL_S": "1"}
    command = ocrstream_command(["lag-exporter", "--metrics-port", JOBS["lag-exporter"]])
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{JOBS['lag-exporter']}/metrics"
        worker_group = kafka.topic(WorkerSettings().group)

        def agree() -> tuple[dict[Any, int], dict[Any, int]] | None:
            before = admin_lag(admin, kafka)
            try:
                exported = exported_lag(url, kafka.topic_prefix)
            except OSError:
                return None
            after = admin_lag(admin, kafka)
            return (exported, after) if before == after == exported else None

        try:
            exported, computed = wait_until(agree, 60, "the exporter to agree with the admin API",
                                            interval_s=1)  # fmt: skip
        except AssertionError:
            raise AssertionError(
                f"exported {exported_lag(url, kafka.topic_prefix)}\n"
                f"admin    {admin_lag(admin, kafka)}"
            ) from None
        worker = {k: v for k, v in exported.items() if k[0] == worker_group and k[1] == pages}
        assert sorted(p for _, _, p in worker) == partitions
        assert sum(worker.values()) == len(partitions)  # exactly the pages no one consumed
        assert any(k[0] != worker_group for k in computed)  # the faust agents' groups too
    finally:
        proc.terminate()
        proc.wait(30)
