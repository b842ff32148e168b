"""Every Prometheus metric of ocrstream, defined in one place.

Names follow docs/architecture.md ("Metrics") (prefix ``ocrstream_``); the Grafana dashboards
and alert rules use only these. Nothing registers at import time: an entry point builds one
:class:`Metrics` (on the default registry, or on a private one in tests), hands it to its
adapters, and calls :func:`serve` to expose ``/metrics``. Processors never see this module.

Stages are ``splitter``, ``ocr``, ``assembler`` (and ``decode``, ``fetch``, ``produce``,
``engine``, ``layout``, ``table`` for the parts of the OCR worker's ``stage_seconds``).
"""

from __future__ import annotations

import logging
import threading
import time

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

log = logging.getLogger(__name__)

NAMESPACE = "ocrstream"

# Seconds: a text-layer page takes ~1 ms, a CPU OCR batch several seconds, a document minutes.
STAGE_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DOCUMENT_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
# Shadow agreement: a CER per page (0 = the same text), a confidence difference (-1..1).
CER_BUCKETS = (0.0, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
DELTA_BUCKETS = (-0.5, -0.2, -0.1, -0.05, -0.02, -0.01, 0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)


class Metrics:
    """The metric families; one instance per process (or per test, on its own registry)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = reg = registry if registry is not None else CollectorRegistry()
        ns = NAMESPACE
        self.pages = Counter(
            "pages",
            "Pages processed, by stage and status (ok, failed, empty, text_layer).",
            ["stage", "status"],
            namespace=ns,
            registry=reg,
        )
        self.documents = Counter(
            "documents",
            "Documents that reached a terminal state, by status.",
            ["status"],
            namespace=ns,
            registry=reg,
        )
        self.stage_seconds = Histogram(
            "stage_seconds",
            "Time spent per stage (per page, or per batch for engine).",
            ["stage"],
            namespace=ns,
            registry=reg,
            buckets=STAGE_BUCKETS,
        )
        self.batch_size = Histogram(
            "batch_size",
            "Pages per micro-batch.",
            ["stage"],
            namespace=ns,
            registry=reg,
            buckets=BATCH_BUCKETS,
        )
        self.document_latency = Histogram(
            "document_latency_seconds",
            "From ScanSubmitted.submitted_at to the terminal event.",
            namespace=ns,
            registry=reg,
            buckets=DOCUMENT_BUCKETS,
        )
        self.consumer_lag = Gauge(
            "consumer_lag",
            "High watermark minus committed offset, per group and partition.",
            ["group", "topic", "partition"],
            namespace=ns,
            registry=reg,
        )
        self.cache = Counter(
            "cache",
            "Page-cache lookups of the OCR worker, by result (hit, miss).",
            ["result"],
            namespace=ns,
            registry=reg,
        )
        self.dlq = Counter(
            "dlq",
            "Records sent to the dead-letter topic, by stage and error code.",
            ["stage", "code"],
            namespace=ns,
            registry=reg,
        )
        self.inflight_documents = Gauge(
            "inflight_documents",
            "Documents the assembler holds that have no terminal event yet.",
            namespace=ns,
            registry=reg,
        )
        self.pages_inflight = Gauge(
            "pages_inflight",
            "Pages consumed but not yet delivered downstream.",
            ["stage"],
            namespace=ns,
            registry=reg,
        )
        self.worker_info = Gauge(
            "worker_info",
            "1 per running OCR worker, labelled with its engine.",
            ["backend", "model", "device"],
            namespace=ns,
            registry=reg,
        )
        self.retries = Counter(
            "retries",
            "Retries of a transient failure (store down, engine error, delivery).",
            ["stage", "reason"],
            namespace=ns,
            registry=reg,
        )
        self.agent_stalled_records = Counter(
            "agent_stalled_records",
            "Records a faust agent did not get from faust and its stall watch read directly "
            "(see ocrstream.streams.agent); anything above zero is worth a look.",
            ["agent", "topic"],
            namespace=ns,
            registry=reg,
        )
        self.consumer_fetch_stalls = Counter(
            "consumer_fetch_stalls",
            "Times a partition a consumer was not holding back sat behind its log's end with "
            "nothing fetched for a while and was sent back to its position "
            "(see ocrstream.streams.fetch_watch); anything above zero is worth a look.",
            ["agent", "topic"],
            namespace=ns,
            registry=reg,
        )
        self.paused_partitions = Gauge(
            "paused_partitions",
            "Partitions paused for back-pressure, by reason.",
            ["stage", "reason"],
            namespace=ns,
            registry=reg,
        )
        self.gpu_utilization = Gauge(
            "gpu_utilization_ratio",
            "GPU utilisation, 0..1.",
            ["device"],
            namespace=ns,
            registry=reg,
        )
        self.gpu_memory_used = Gauge(
            "gpu_memory_used_bytes",
            "GPU memory in use.",
            ["device"],
            namespace=ns,
            registry=reg,
        )
        self.lag_scrape_errors = Counter(
            "lag_scrape_errors",
            "Lag exporter rounds that failed.",
            namespace=ns,
            registry=reg,
        )
        self.autoscaler_replicas = Gauge(
            "autoscaler_replicas",
            "OCR worker processes the local autoscaler runs now.",
            namespace=ns,
            registry=reg,
        )
        self.autoscaler_desired_replicas = Gauge(
            "autoscaler_desired_replicas",
            "OCR worker processes the local autoscaler's rule asks for.",
            namespace=ns,
            registry=reg,
        )
        self.autoscaler_lag = Gauge(
            "autoscaler_lag",
            "The consumer lag the local autoscaler decided on.",
            namespace=ns,
            registry=reg,
        )
        self.autoscaler_decisions = Counter(
            "autoscaler_decisions",
            "Scaling actions of the local autoscaler (up, down).",
            ["direction"],
            namespace=ns,
            registry=reg,
        )
        self.api_requests = Counter(
            "api_requests",
            "HTTP API requests, by route template, status code and tenant ('' before auth).",
            ["route", "status", "tenant"],
            namespace=ns,
            registry=reg,
        )
        self.api_request_seconds = Histogram(
            "api_request_seconds",
            "HTTP API request latency (to the last byte of a streamed upload or output).",
            ["route", "status"],
            buckets=STAGE_BUCKETS,
            namespace=ns,
            registry=reg,
        )
        self.webhook_deliveries = Counter(
            "webhook_deliveries",
            "Webhook attempts by outcome: delivered, retry (handed to the retry topic), "
            "dead_letter (refused for good or out of its window).",
            ["outcome"],
            namespace=ns,
            registry=reg,
        )
        self.webhook_delivery_seconds = Histogram(
            "webhook_delivery_seconds",
            "One webhook attempt: the callback check, the POST and the answer.",
            buckets=STAGE_BUCKETS,
            namespace=ns,
            registry=reg,
        )
        self.webhook_pending_retries = Gauge(
            "webhook_pending_retries",
            "Webhook retries the agent holds, waiting for their due time.",
            namespace=ns,
            registry=reg,
        )
        # ---- the HTTP API's per-tenant limits (ocrstream.api.limits) ----
        self.api_limited = Counter(
            "api_limited",
            "HTTP API requests answered 429, by tenant and limit (requests_per_minute, "
            "pages_per_day).",
            ["tenant", "limit"],
            namespace=ns,
            registry=reg,
        )
        self.api_usage = Counter(
            "api_usage",
            "Usage this API replica counted against the limits, its own and the other replicas' "
            "(requests, pages), by tenant and limit.",
            ["tenant", "limit"],
            namespace=ns,
            registry=reg,
        )
        self.api_usage_lag_seconds = Histogram(
            "api_usage_lag_seconds",
            "From another replica admitting usage to this one counting it (ocr.api-usage.v1).",
            buckets=STAGE_BUCKETS,
            namespace=ns,
            registry=reg,
        )
        # worker pools: confidence routing and shadow workers
        self.routing = Counter(
            "routing",
            "Pages an OCR worker answered, by its pool (primary, accurate, shadow) and outcome "
            "(kept: its result is the page's; routed: sent on to the accurate pool).",
            ["pool", "outcome"],
            namespace=ns,
            registry=reg,
        )
        self.shadow_cer = Histogram(
            "shadow_cer",
            "Per page, the character error rate of the shadow's text against the primary's.",
            namespace=ns,
            registry=reg,
            buckets=CER_BUCKETS,
        )
        self.shadow_confidence_delta = Histogram(
            "shadow_confidence_delta",
            "Per page, the shadow's mean line confidence minus the primary's.",
            namespace=ns,
            registry=reg,
            buckets=DELTA_BUCKETS,
        )


_process_metrics: Metrics | None = None


def process_metrics() -> Metrics:
    """The metrics of this process, on the default registry; created on first use."""
    global _process_metrics
    if _process_metrics is None:
        _process_metrics = Metrics(registry=REGISTRY)
    return _process_metrics


# A port still held (by the agent this one replaces, draining for up to its drain timeout on a
# quick restart) is tried again this often, for as long as the process runs.
RETRY_BIND_S = 2.0
# and a port still refused is logged again this often (the first refusal at once)
RELOG_S = 600.0


def serve(port: int, addr: str = "0.0.0.0", registry: CollectorRegistry | None = None,
          *, retry_s: float = RETRY_BIND_S) -> None:  # fmt: skip
    """Expose ``/metrics`` on ``addr:port`` from a daemon thread; port 0 disables it.

    A port in use does not stop the agent, nor leave it unscraped for the rest of its life: it
    is logged as an error and tried again every ``retry_s`` from a daemon thread until it binds
    (then logged as served). On one machine, an agent started again at once finds its port
    still held by its predecessor, which drains for several seconds after SIGTERM."""
    if port <= 0:
        return
    reg = registry or REGISTRY
    try:
        start_http_server(port, addr=addr, registry=reg)
        return
    except OSError as e:
        log.error("cannot serve metrics on %s:%d: %s; trying again every %gs", addr, port, e,
                  retry_s)  # fmt: skip

    def keep_trying() -> None:
        logged = time.monotonic()
        while True:
            time.sleep(retry_s)
            try:
                start_http_server(port, addr=addr, registry=reg)
            except OSError as e:
                if time.monotonic() - logged >= RELOG_S:
                    log.error("still cannot serve metrics on %s:%d: %s", addr, port, e)
                    logged = time.monotonic()
                continue
            log.info("serving metrics on %s:%d", addr, port)
            return

    threading.Thread(target=keep_trying, name=f"metrics-bind-{port}", daemon=True).start()
