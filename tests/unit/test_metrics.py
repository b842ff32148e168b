"""Every metric of docs/architecture.md ("Metrics") is exposed under its name, with explicit
buckets, and nothing is registered until an entry point asks for it."""

from __future__ import annotations

import logging
import socket
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from ocrstream.streams.metrics import BATCH_BUCKETS, STAGE_BUCKETS, Metrics, serve
from tests.polling import wait_until

DOCUMENTED_NAMES = (
    "ocrstream_pages_total",
    "ocrstream_documents_total",
    "ocrstream_stage_seconds_bucket",
    "ocrstream_batch_size_bucket",
    "ocrstream_document_latency_seconds_bucket",
    "ocrstream_consumer_lag",
    "ocrstream_dlq_total",
    "ocrstream_inflight_documents",
    "ocrstream_worker_info",
    "ocrstream_pages_inflight",
)


def exposition(m: Metrics) -> str:
    return generate_latest(m.registry).decode()


def test_design_metric_names_are_exposed() -> None:
    m = Metrics(CollectorRegistry())
    m.pages.labels("ocr", "ok").inc(3)
    m.documents.labels("completed").inc()
    m.stage_seconds.labels("engine").observe(0.2)
    m.batch_size.labels("ocr").observe(8)
    m.document_latency.observe(1.5)
    m.consumer_lag.labels("g", "ocr.pages.v1", "0").set(42)
    m.dlq.labels("splitter", "unknown_schema").inc()
    m.inflight_documents.set(2)
    m.worker_info.labels("onnxruntime", "ppocrv6-small", "cpu").set(1)
    m.pages_inflight.labels("ocr").set(5)
    text = exposition(m)
    for name in DOCUMENTED_NAMES:
        assert f"\n{name}" in f"\n{text}", name
    assert 'ocrstream_pages_total{stage="ocr",status="ok"} 3.0' in text
    assert 'ocrstream_consumer_lag{group="g",partition="0",topic="ocr.pages.v1"} 42.0' in text
    assert (
        'ocrstream_worker_info{backend="onnxruntime",device="cpu",model="ppocrv6-small"} 1.0'
        in text
    )


def test_histograms_use_the_explicit_buckets() -> None:
    m = Metrics()
    m.stage_seconds.labels("engine").observe(0.2)
    m.batch_size.labels("ocr").observe(8)
    text = exposition(m)
    for upper in STAGE_BUCKETS:
        assert f'ocrstream_stage_seconds_bucket{{le="{float(upper)}",stage="engine"}}' in text
    for upper in BATCH_BUCKETS:
        assert f'ocrstream_batch_size_bucket{{le="{float(upper)}",stage="ocr"}}' in text


def test_two_instances_do_not_collide() -> None:
    # Private registries: tests (and several workers in one process) each get their own.
    a, b = Metrics(), Metrics()
    a.documents.labels("failed").inc()
    assert "ocrstream_documents_total" not in exposition(b).split("# TYPE")[0]
    assert 'ocrstream_documents_total{status="failed"}' not in exposition(b)


def test_an_agent_whose_port_is_still_held_serves_its_metrics_once_the_port_is_free(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Started again at once on one machine, an agent finds its metrics port held by the one
    it replaces, which drains for seconds after SIGTERM: it serves once the port is free,
    instead of running unscraped for the rest of its life."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    m = Metrics(CollectorRegistry())
    m.pages.labels("ocr", "ok").inc(7)
    with caplog.at_level(logging.INFO, logger="ocrstream.streams.metrics"):
        serve(port, addr="127.0.0.1", registry=m.registry, retry_s=0.1)
        assert f"cannot serve metrics on 127.0.0.1:{port}" in caplog.text
        time.sleep(0.5)  # still held: nothing of ours answers there
        holder.close()
        text = wait_until(lambda: _scrape(port), 10, "metrics served once the port is free")
    assert 'ocrstream_pages_total{stage="ocr",status="ok"} 7.0' in text
    assert f"serving metrics on 127.0.0.1:{port}" in caplog.text


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as answer:
            return answer.read().decode()
    except OSError:
        return None
