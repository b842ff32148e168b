"""``ocrstream splitter|ocr-worker|assembler|lag-exporter|webhooks|all``: the pipeline's processes.

Each agent reads its settings from the environment (``OCRSTREAM_…``), serves its Prometheus
metrics, and stops cleanly on SIGTERM or Ctrl-C: in-flight work is finished and delivered and
offsets are committed before it exits. A missing topic or an unreachable broker at start is
an error exit; the supervisor (``ocrstream all``) restarts it with backoff.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

import click

from ocrstream.errors import FatalError, OcrstreamError

log = logging.getLogger(__name__)

_PORT = click.option(
    "--metrics-port",
    type=int,
    default=None,
    help="Serve /metrics here (0: off; default from settings).",
)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()

    def handler(signum: int, _frame: Any) -> None:
        log.info("signal %s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


def _run_faust(app: Any) -> None:
    """Run a faust app in this process until SIGTERM/SIGINT (faust's worker handles them)."""
    import faust

    worker = faust.Worker(
        app,
        loglevel=logging.getLevelName(logging.getLogger().level),
        quiet=True,
        override_logging=False,
        redirect_stdouts=False,
    )
    worker.execute_from_commandline()


def _store(retries: int | None = None) -> Any:
    from ocrstream.settings import S3Settings
    from ocrstream.storage import ObjectStore

    s3 = S3Settings()
    if retries is not None:
        s3 = s3.model_copy(update={"retries": retries})
    store = ObjectStore(s3)
    store.ensure_bucket()
    return store


@click.command()
@_PORT
def splitter(metrics_port: int | None) -> None:
    """The splitter agent: ocr.scans.v1 → page tasks on ocr.pages.v1."""
    from ocrstream.settings import KafkaSettings, LimitsSettings, SplitterSettings
    from ocrstream.streams.metrics import process_metrics, serve
    from ocrstream.streams.splitter import build_splitter

    settings = SplitterSettings()
    serve(settings.metrics_port if metrics_port is None else metrics_port)
    try:
        app = build_splitter(KafkaSettings(), _store(), settings, LimitsSettings(),
                             process_metrics())  # fmt: skip
    except OcrstreamError as e:
        raise click.ClickException(str(e)) from e
    _run_faust(app)


@click.command("ocr-worker")
@_PORT
def ocr_worker(metrics_port: int | None) -> None:
    """One OCR worker: a member of the consumer group on ocr.pages.v1 (backend from settings)."""
    from ocrstream.processors.ocr.engine import OcrEngine
    from ocrstream.schemas.codec import Codec
    from ocrstream.settings import KafkaSettings, LimitsSettings, OcrSettings, WorkerSettings
    from ocrstream.storage import parse_s3_uri
    from ocrstream.streams.metrics import process_metrics, serve
    from ocrstream.streams.worker import OcrWorker

    settings, limits, kafka = WorkerSettings(), LimitsSettings(), KafkaSettings()
    serve(settings.metrics_port if metrics_port is None else metrics_port)
    try:
        engine = OcrEngine(OcrSettings())
        # Few retries inside the store: the worker itself backs off and pauses the partition.
        store = _store(retries=1)
    except FatalError as e:
        raise click.ClickException(f"{e.code}: {e}") from e

    def fetch(uri: str) -> bytes:
        bucket, key = parse_s3_uri(uri)
        data: bytes = store.get_bytes(key, bucket=bucket, max_bytes=limits.max_file_bytes)
        return data

    worker = OcrWorker(kafka=kafka, settings=settings, engine=engine, codec=Codec(kafka),
                       fetch=fetch, metrics=process_metrics(), limits=limits)  # fmt: skip
    worker.run(_stop_on_signals())


@click.command()
@_PORT
def assembler(metrics_port: int | None) -> None:
    """The assembler agent: page results → documents/{doc_id}/… and one DocumentEvent."""
    from ocrstream.settings import (
        AssemblerSettings,
        KafkaSettings,
        LimitsSettings,
        SplitterSettings,
    )
    from ocrstream.streams.assembler import build_assembler
    from ocrstream.streams.metrics import process_metrics, serve

    settings = AssemblerSettings()
    serve(settings.metrics_port if metrics_port is None else metrics_port)
    try:
        app = build_assembler(KafkaSettings(), _store(), settings, LimitsSettings(),
                              process_metrics(), dpi=SplitterSettings().dpi)  # fmt: skip
    except OcrstreamError as e:
        raise click.ClickException(str(e)) from e
    _run_faust(app)


@click.command("lag-exporter")
@_PORT
def lag_exporter(metrics_port: int | None) -> None:
    """Export ocrstream_consumer_lag for every consumer group from committed offsets."""
    from ocrstream.settings import KafkaSettings, LagSettings
    from ocrstream.streams.lag import LagExporter, LagReader
    from ocrstream.streams.metrics import process_metrics, serve

    settings = LagSettings()
    serve(settings.metrics_port if metrics_port is None else metrics_port)
    reader = LagReader(KafkaSettings())
    try:
        LagExporter(reader, process_metrics(), settings.interval_s).run(_stop_on_signals())
    finally:
        reader.close()


@click.command()
@_PORT
def webhooks(metrics_port: int | None) -> None:
    """The webhook agent: each terminal event to its callback_url, signed, retried for hours."""
    from ocrstream.api.webhook_secrets import SecretFile
    from ocrstream.schemas.codec import Codec
    from ocrstream.settings import KafkaSettings, WebhookSettings
    from ocrstream.streams.metrics import process_metrics, serve
    from ocrstream.streams.webhook_sender import Sender
    from ocrstream.streams.webhooks import WebhookAgent

    settings, kafka = WebhookSettings(), KafkaSettings()
    serve(settings.metrics_port if metrics_port is None else metrics_port)
    sender = Sender(settings, SecretFile(settings.secrets_file))
    agent = WebhookAgent(kafka, settings, sender, Codec(kafka), process_metrics())
    try:
        agent.run(_stop_on_signals())
    except OcrstreamError as e:
        raise click.ClickException(f"{e.code}: {e}") from e


@click.command("all")
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="OCR worker processes (default OCRSTREAM_SUPERVISOR_OCR_WORKERS).",
)
@click.option("--api", "with_api", is_flag=True, help="Run the HTTP API (ocrstream api) too.")
def all_agents(workers: int | None, with_api: bool) -> None:
    """Every agent (the webhook agent too) under one supervisor that restarts the ones that
    crash."""
    from ocrstream.settings import SupervisorSettings
    from ocrstream.streams.supervisor import AgentSpec, Supervisor, default_agents

    settings = SupervisorSettings()
    specs = default_agents(settings.ocr_workers if workers is None else workers)
    specs.append(AgentSpec("webhooks", ("webhooks",)))
    if with_api:
        specs.append(AgentSpec("api", ("api",)))
    supervisor = Supervisor(specs, settings)
    stop = _stop_on_signals()

    def forward() -> None:
        stop.wait()
        supervisor.stop()

    threading.Thread(target=forward, daemon=True).start()
    supervisor.run()
