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
from typing import TYPE_CHECKING, Any

import click

from ocrstream.errors import FatalError, OcrstreamError

if TYPE_CHECKING:
    from ocrstream.settings import KafkaSettings

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


def _run_faust(app: Any, kafka: KafkaSettings) -> None:
    """Run a faust app in this process until SIGTERM/SIGINT (faust's worker handles them); a
    stop that hangs on a Kafka that is gone ends the process
    (:func:`~ocrstream.streams.membership.watch_the_stop`)."""
    import faust

    from ocrstream.streams.membership import watch_the_stop

    class Worker(faust.Worker):
        async def on_stop(self) -> None:
            watch_the_stop(kafka, app.conf.id)
            await super().on_stop()

    worker = Worker(
        app,
        loglevel=logging.getLevelName(logging.getLogger().level),
        quiet=True,
        override_logging=False,
        redirect_stdouts=False,
    )
    # faust's start-up spinner ends with a terminal escape (show the cursor) whether or not
    # its output is a terminal: agents write log lines, to a terminal or a file, never sprites
    worker.spinner = None
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

    settings, kafka = SplitterSettings(), KafkaSettings()
    serve(settings.metrics_port if metrics_port is None else metrics_port)
    try:
        app = build_splitter(kafka, _store(), settings, LimitsSettings(),
                             process_metrics())  # fmt: skip
    except OcrstreamError as e:
        raise click.ClickException(str(e)) from e
    _run_faust(app, kafka)


@click.command("ocr-worker")
@_PORT
@click.option(
    "--pool",
    type=click.Choice(["primary", "accurate"]),
    default=None,
    help="primary: ocr.pages.v1 (routes weak pages when OCRSTREAM_ROUTING_ENABLED); accurate: "
    "ocr.pages.accurate.v1 with the stronger engine (OCRSTREAM_ACCURATE_OCR_*). Default "
    "OCRSTREAM_WORKER_POOL.",
)
@click.option(
    "--shadow",
    is_flag=True,
    help="A shadow worker: its own group on ocr.pages.v1, the candidate engine "
    "(OCRSTREAM_SHADOW_OCR_*), results to ocr.page-results.shadow.v1 only.",
)
@click.option(
    "--model",
    default=None,
    help="The engine's model set, over the settings (ppocrv6-tiny has no kana: not for Japanese).",
)
def ocr_worker(metrics_port: int | None, pool: str | None, shadow: bool,
               model: str | None) -> None:  # fmt: skip
    """One OCR worker: a member of its pool's consumer group (backend from settings)."""
    from ocrstream.processors.ocr.engine import OcrEngine
    from ocrstream.schemas.codec import Codec
    from ocrstream.settings import KafkaSettings, LimitsSettings, WorkerPool, WorkerSettings
    from ocrstream.storage import parse_s3_uri
    from ocrstream.storage.engine_cache import StoredChoices
    from ocrstream.streams.metrics import process_metrics, serve
    from ocrstream.streams.worker import OcrWorker

    settings, limits, kafka = WorkerSettings(), LimitsSettings(), KafkaSettings()
    if shadow and pool is not None:
        raise click.UsageError("--shadow and --pool exclude each other")
    if shadow or pool is not None:
        chosen = WorkerPool.SHADOW if shadow else WorkerPool(pool or "primary")
        settings = settings.model_copy(update={"pool": chosen})
    serve(settings.metrics_port if metrics_port is None else metrics_port)
    try:
        # Few retries inside the store: the worker itself backs off and pauses the partition.
        store = _store(retries=1)
        # auto's measured backends kept in the store: the first worker on a kind of node
        # measures, the others (a pod's engine cache starts empty) read its answer
        shared = StoredChoices(store)
        engine = OcrEngine(_engine_settings(settings.pool, model), shared_choices=shared)
        engine = _with_rescue(engine, settings.pool)
    except FatalError as e:
        raise click.ClickException(f"{e.code}: {e}") from e

    def fetch(uri: str) -> bytes:
        bucket, key = parse_s3_uri(uri)
        data: bytes = store.get_bytes(key, bucket=bucket, max_bytes=limits.max_file_bytes)
        return data

    worker = OcrWorker(kafka=kafka, settings=settings, engine=engine, codec=Codec(kafka),
                       fetch=fetch, metrics=process_metrics(), limits=limits,
                       routing=routing_rule())  # fmt: skip
    worker.run(_stop_on_signals())


def _engine_settings(pool: Any, model: str | None) -> Any:
    """The engine settings of a pool: ``OCRSTREAM_OCR_*`` for the primary pool,
    ``OCRSTREAM_ACCURATE_OCR_*`` and ``OCRSTREAM_SHADOW_OCR_*`` for the others."""
    from ocrstream.settings import AccurateOcrSettings, OcrSettings, ShadowOcrSettings, WorkerPool

    kind = {WorkerPool.ACCURATE: AccurateOcrSettings, WorkerPool.SHADOW: ShadowOcrSettings}
    settings = kind.get(pool, OcrSettings)()
    return settings if model is None else settings.model_copy(update={"model": model})


def _with_rescue(engine: Any, pool: Any) -> Any:
    """A primary worker's engine with line rescue when ``OCRSTREAM_ROUTING_RESCUE_MODEL`` names
    a model set (:mod:`ocrstream.processors.ocr.rescue`); the engine itself otherwise."""
    from ocrstream.processors.ocr.rescue import LineRescue, RescuingEngine
    from ocrstream.settings import RoutingSettings, WorkerPool

    s = RoutingSettings()
    if pool is not WorkerPool.PRIMARY or not s.rescue_model:
        return engine
    rule = routing_rule()
    weak = None if rule is None else rule.weak  # rescue only the pages the rule keeps
    return RescuingEngine(engine, LineRescue(engine.settings, s.rescue_model, s.rescue_below), weak)


def routing_rule() -> Any:
    """The confidence-routing rule of the settings; None when routing is off."""
    from ocrstream.processors.routing import RoutingRule
    from ocrstream.settings import RoutingSettings

    s = RoutingSettings()
    if not s.enabled:
        return None
    return RoutingRule(
        low_confidence=s.low_confidence,
        max_low_fraction=s.max_low_fraction,
        min_mean_confidence=s.min_mean_confidence,
        min_lines=s.min_lines,
        max_noise=s.early_max_noise,
        min_contrast=s.early_min_contrast,
    )


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

    settings, kafka = AssemblerSettings(), KafkaSettings()
    serve(settings.metrics_port if metrics_port is None else metrics_port)
    try:
        app = build_assembler(kafka, _store(), settings, LimitsSettings(),
                              process_metrics(), dpi=SplitterSettings().dpi)  # fmt: skip
    except OcrstreamError as e:
        raise click.ClickException(str(e)) from e
    _run_faust(app, kafka)


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
@click.option(
    "--accurate-workers",
    type=click.IntRange(min=0),
    default=0,
    help="Workers of the accurate pool; when > 0 the primary workers route weak pages to them.",
)
@click.option(
    "--shadow-workers",
    type=click.IntRange(min=0),
    default=0,
    help="Shadow workers (candidate engine from OCRSTREAM_SHADOW_OCR_*).",
)
def all_agents(workers: int | None, with_api: bool, accurate_workers: int,
               shadow_workers: int) -> None:  # fmt: skip
    """Every agent (the webhook agent too) under one supervisor that restarts the ones that
    crash."""
    from ocrstream.settings import SupervisorSettings
    from ocrstream.streams.supervisor import AgentSpec, Supervisor, default_agents

    settings = SupervisorSettings()
    specs = default_agents(settings.ocr_workers if workers is None else workers,
                           accurate=accurate_workers, shadow=shadow_workers)  # fmt: skip
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
