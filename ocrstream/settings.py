"""Configuration: one frozen pydantic-settings model per component, env prefix ``OCRSTREAM_``.

Nothing else in ocrstream reads the environment. Each entry point builds the models it needs
(``KafkaSettings()``, ``S3Settings()`` …) and passes them down; library code takes them as
arguments and never constructs them from globals.
"""

from __future__ import annotations

import os
import socket
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, field_serializer
from pydantic_settings import BaseSettings, SettingsConfigDict


def _frozen(prefix: str) -> SettingsConfigDict:
    # defer_build: a model's validator is built when it is first used, so a command pays only
    # for the settings it reads (`ocrstream ocr`: this module's own import 32 -> 19 ms)
    return SettingsConfigDict(
        env_prefix=prefix, frozen=True, extra="ignore", populate_by_name=True, defer_build=True
    )


def default_home() -> Path:
    """Where local services and caches live: ``.infra/`` in the project folder — the nearest
    folder from the working directory up that has one, else the working directory (a checkout's
    root when run by ``make``). Not found from the package's own files: an installed wheel
    has no project folder around it."""
    cwd = Path.cwd()
    for folder in (cwd, *cwd.parents):
        if (folder / ".infra").is_dir():
            return folder / ".infra"
    return cwd / ".infra"


class KafkaSettings(BaseSettings):
    """How to reach Kafka; renders the librdkafka configuration.

    SASL and TLS options pass through unchanged, so the same code runs against a managed
    cluster (``security_protocol=SASL_SSL``, ``sasl_mechanism=SCRAM-SHA-512`` …).
    """

    model_config = _frozen("OCRSTREAM_KAFKA_")

    bootstrap_servers: str = "127.0.0.1:19092"
    client_id: str = Field(default_factory=lambda: f"ocrstream-{socket.gethostname()}")
    topic_prefix: str = Field(
        default="",
        validation_alias=AliasChoices("OCRSTREAM_TOPIC_PREFIX", "OCRSTREAM_KAFKA_TOPIC_PREFIX"),
    )
    schema_registry_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "OCRSTREAM_SCHEMA_REGISTRY_URL", "OCRSTREAM_KAFKA_SCHEMA_REGISTRY_URL"
        ),
    )
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: SecretStr | None = None
    ssl_endpoint_identification: bool = True
    # A partition a consumer is not holding back that has handed over nothing for this long
    # while its log goes further is fetched again from its position (ocrstream.streams.
    # fetch_watch): the webhook agent, the OCR workers and the API's document book.
    fetch_stall_s: float = 30.0
    # A stopping consumer waits at most this long for its last commit and for leaving its
    # group; past it (Kafka gone) it stops without (ocrstream.streams.membership).
    close_timeout_s: float = 10.0
    extra: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="Further librdkafka properties, as a JSON object in OCRSTREAM_KAFKA_EXTRA "
        "(masked in reprs: they may hold secrets such as sasl.oauthbearer.client.secret).",
    )

    # A registry URL may carry credentials (https://user:secret@host): reprs and dumps show it
    # without them.
    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            if name == "schema_registry_url" and isinstance(value, str):
                value = _without_userinfo(value)
            yield name, value

    @field_serializer("schema_registry_url")
    def _registry_url_without_credentials(self, url: str | None) -> str | None:
        return None if url is None else _without_userinfo(url)

    def topic(self, name: str) -> str:
        """The full topic name for a logical name such as ``ocr.pages.v1``."""
        return f"{self.topic_prefix}{name}"

    def librdkafka(self, **overrides: Any) -> dict[str, Any]:
        """The librdkafka configuration for a confluent-kafka client."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": self.client_id,
            "security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username:
            conf["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            conf["sasl.password"] = self.sasl_password.get_secret_value()
        for key, value in (
            ("ssl.ca.location", self.ssl_ca_location),
            ("ssl.certificate.location", self.ssl_certificate_location),
            ("ssl.key.location", self.ssl_key_location),
        ):
            if value:
                conf[key] = value
        if self.ssl_key_password is not None:
            conf["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        if self.security_protocol.upper() in ("SSL", "SASL_SSL"):
            conf["ssl.endpoint.identification.algorithm"] = (
                "https" if self.ssl_endpoint_identification else "none"
            )
        conf.update({key: value.get_secret_value() for key, value in self.extra.items()})
        conf.update(overrides)
        return conf

    def aiokafka(self) -> dict[str, Any]:
        """The same connection for aiokafka/faust clients (``broker`` URL and credentials)."""
        conf: dict[str, Any] = {
            "broker": ",".join(f"kafka://{h.strip()}" for h in self.bootstrap_servers.split(",")),
        }
        return conf


def _without_userinfo(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit((parts.scheme, f"***@{netloc}", parts.path, parts.query, parts.fragment))


class S3Settings(BaseSettings):
    """The S3-compatible object store (MinIO, AWS S3, Ceph, versitygw)."""

    model_config = _frozen("OCRSTREAM_S3_")

    endpoint: str = "127.0.0.1:19000"
    access_key: SecretStr = SecretStr("ocrstream")
    secret_key: SecretStr = SecretStr("ocrstream-secret")
    region: str = "us-east-1"
    secure: bool = False
    ca_bundle: str | None = None
    bucket: str = "ocrstream"
    key_prefix: str = ""
    part_size: int = 16 * 1024 * 1024
    parallel_uploads: int = 2
    retries: int = 5
    retry_backoff_s: float = 0.2
    retry_backoff_max_s: float = 5.0
    claim_check_expiry_days: int = 2
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0


class LimitsSettings(BaseSettings):
    """Bounds on everything the outside world controls. Enforced before large allocations."""

    model_config = _frozen("OCRSTREAM_LIMIT_")

    max_file_bytes: int = 512 * 1024 * 1024
    max_pages: int = 5000
    max_page_pixels: int = 80_000_000
    max_inline_bytes: int = 768 * 1024
    max_message_bytes: int = 4 * 1024 * 1024


class ParseMode(StrEnum):
    """What a document is read for: ``text`` (lines) or ``layout`` (lines plus blocks)."""

    TEXT = "text"
    LAYOUT = "layout"


class ClientSettings(BaseSettings):
    """What the producer SDK and ``ocrstream submit/run`` ask for when the caller does not say."""

    model_config = _frozen("OCRSTREAM_CLIENT_")

    mode: ParseMode = ParseMode.TEXT


class OcrBackend(StrEnum):
    AUTO = "auto"
    ONNXRUNTIME = "onnxruntime"
    OPENVINO = "openvino"
    TENSORRT = "tensorrt"
    TORCH = "torch"
    PADDLE = "paddle"


class OcrSettings(BaseSettings):
    """The OCR engine: models, backend, device and batching."""

    model_config = _frozen("OCRSTREAM_OCR_")

    backend: OcrBackend = OcrBackend.AUTO
    device: str = "cpu"
    model: str = "ppocrv6-small"
    model_dir: Path | None = Field(
        default=None,
        validation_alias=AliasChoices("OCRSTREAM_MODEL_DIR", "OCRSTREAM_OCR_MODEL_DIR"),
    )
    threads: int = Field(default_factory=lambda: os.cpu_count() or 1)
    precision: str = "fp16"
    det_limit_side: int = 1600
    # Pages per det batch; None: 1 on the CPU (measured on A4 pages: batches of 4 were 10-30%
    # slower and took 1.5 GB more memory), 4 on a GPU.
    det_batch: int | None = None
    # Lines per rec batch; None: 1 on the CPU, 64 on a GPU. On the CPU one line per run, on
    # two streams, meets a new input shape only per width bucket, not per (lines, width): a
    # runtime that compiles kernels per shape (OpenVINO) then runs rec at its warm speed from
    # the first pages, and `auto` measures it so (docs/benchmarks.md, session 21: v6 small's
    # rec in bf16 on a Zen 5, 1.3-1.5x onnxruntime's batches on A4). onnxruntime reads the
    # lines as fast either way.
    rec_batch: int | None = Field(default=None, ge=1)
    # Summed width in pixels of the lines in one rec batch; None: 4096 on the CPU (wider
    # batches were no faster there and each 20k px costs ~450 MB per stream), 65536 on a GPU.
    rec_batch_width: int | None = None
    # The input shapes of rec batches. "exact": each line's width rounded up to 32 px, each
    # batch as many lines as share that width (the CPU's: no padding to compute). "ladder":
    # widths padded up to rec.WIDTH_LADDER's 17 steps and a batch's lines up to a power of
    # two, so a worker meets a few dozen shapes however its pages vary. On the H200 the exact
    # shapes made 53 rec runs of 53 new shapes for 4 A4 pages, and each new shape cost cuDNN
    # seconds of plan building: rec took 0.7 s a page warm and 12 s cold (docs/benchmarks.md,
    # session 24). None: exact on the CPU, ladder on a GPU.
    rec_shapes: Literal["exact", "ladder"] | None = None
    # The input shapes of det batches. "exact": each page at its own size (rounded to 32 px),
    # a batch per size. "ladder": each side padded with white up to det.SIDE_LADDER's 16
    # steps, so pages of nearby sizes share a batch and a worker meets at most 256 shapes.
    # None: exact on the CPU, ladder on a GPU (where each new shape cost ~0.5 s a page of
    # cuDNN plan building on the H200, session 24).
    det_shapes: Literal["exact", "ladder"] | None = None
    # GPU, torch backend: rec replays each input shape it has met twice as one CUDA graph
    # (one launch instead of ~500 kernels and Python calls a run; at most 32 shapes, each
    # holding its own activations). Pairs with rec_shapes=ladder. Off until measured on a GPU.
    cuda_graphs: bool = False
    rec_height: int = 48
    # Line crops for rec: this share of the det box's height taller above and below, unless
    # the next line is that close (processors/ocr/geometry.grow_for_rec); 0: the box as it is;
    # None: the model set's own (processors/ocr/models.py, ModelSetSpec.rec_crop_margin).
    rec_crop_margin: float | None = Field(default=None, ge=0.0, le=0.5)
    # Horizontal line crops at least this many px tall but shorter than rec_height are read at
    # their own height, padded to rec_height, instead of enlarged (rec.crop_line): fewer
    # columns. 0: every crop enlarged; None: the model set's own
    # (processors/ocr/models.py, ModelSetSpec.rec_native_min_height).
    rec_native_min_height: int | None = Field(default=None, ge=0, le=512)
    # A space the greedy CTC path lost is read back where the space class's probability
    # reached this on the blank steps between two characters (rec.ctc_greedy); 0: off.
    rec_space_min: float = Field(default=0.1, ge=0.0, le=1.0)
    # Punctuation in the width of the script around it, as it is printed (rec.mark_widths):
    # ``,;:!?`` full-width beside Chinese or Japanese, full-width forms as ASCII in a line of
    # Latin text; and in a Japanese line, letters alike across its scripts (べ/ベ, エ/工, ー/一)
    # in the script around them (rec.kana_in_context); false: as the model read it.
    rec_mark_width: bool = True
    # 1-bit pages (fax, Group 4 TIFF, JBIG2, a 1-bit PNG: every pixel black or white) blurred
    # into grey before they are read, by a Gaussian of this share of their line height
    # (processors/ocr/bilevel.py; measured in docs/benchmarks.md, session 36); 0: read as
    # they are.
    bilevel_smoothing: float = Field(default=0.04, ge=0.0, le=0.5)
    use_cls: bool = False
    # The page orientation classifier on every page before det (processors/ocr/orientation.py):
    # 1-10% slower (docs/benchmarks.md, session 35).
    fix_orientation: bool = False
    # Without it, pages scanned sideways or upside down found from their own lines: most of
    # det's boxes standing (a quarter turn), or lines read with low confidence that read better
    # turned by 180° (a half turn); upright pages pay nothing (engine._find_quarter_turns,
    # _find_half_turns; session 36).
    find_turned_pages: bool = True
    deskew: bool = False
    max_page_pixels: int = 80_000_000
    min_confidence: float = 0.5
    engine_cache_dir: Path = Field(default_factory=lambda: Path.home() / ".cache" / "ocrstream")
    # Layout mode: table cells from SLANet-plus (processors/layout/table_model.py); false:
    # from the lines' geometry alone.
    table_model: bool = True
    # Detection scale from the text size on the page (processors/ocr/textsize.py): each page is
    # scaled so its lines are det_line_height px tall in the det input, within the budget of
    # det_max_limit_side (det_limit_side's budget for pages with no estimate); 0 (the default)
    # turns it off: on the dev sets it did not beat the fixed budget (docs/benchmarks.md).
    det_line_height: float = 0.0
    det_max_limit_side: int = 2880
    # Pages of large print scaled down for det until their lines are this tall in its input
    # (processors/ocr/det.py, det_shape); None: the model set's own (processors/ocr/models.py,
    # ModelSetSpec.det_max_line_height: 12 for v6 tiny, off for the others), 0: off.
    det_max_line_height: float | None = Field(default=None, ge=0.0)
    # One det pass at the largest input the budget gives, when the engine starts on OpenVINO:
    # it sizes OpenVINO's buffers once, so that each larger page later does not (a new input
    # shape larger than any before cost 70-100 ms more on v6 tiny; 20 receipts of 20 sizes
    # read 15-20% faster after it, docs/benchmarks.md). Costs one pass at start-up
    # (`ocrstream ocr` on one file skips it).
    det_warmup: bool = True
    # `auto` on the CPU where no choice is kept yet for this machine, thread count and model
    # (backends.choice): true measures the backends (5-10 s on 2 cores) and keeps the answer for
    # every later process; false runs this process on the provisional choice
    # (choice.PROVISIONAL) and keeps nothing. `ocrstream ocr` sets it false for a job of fewer
    # pages than the measurement costs (cli/ocr.py, AUTO_MEASURE_PAGES).
    auto_measure: bool = True

    @property
    def on_cpu(self) -> bool:
        return not self.device.strip().lower().startswith(("cuda", "gpu"))

    @property
    def det_batch_size(self) -> int:
        return max(1, self.det_batch or (1 if self.on_cpu else 4))

    @property
    def rec_batch_lines(self) -> int:
        return max(1, self.rec_batch or (1 if self.on_cpu else 64))

    @property
    def rec_batch_pixels(self) -> int:
        return max(32, self.rec_batch_width or (4096 if self.on_cpu else 65536))

    @property
    def det_shape_ladder(self) -> bool:
        return (self.det_shapes or ("exact" if self.on_cpu else "ladder")) == "ladder"

    @property
    def rec_shape_ladder(self) -> bool:
        return (self.rec_shapes or ("exact" if self.on_cpu else "ladder")) == "ladder"


class ServicesSettings(BaseSettings):
    """Local services for development and CI (``ocrstream infra up``)."""

    model_config = _frozen("OCRSTREAM_INFRA_")

    home: Path = Field(default_factory=default_home)
    cache_dir: Path = Field(default_factory=lambda: Path.home() / ".cache" / "ocrstream")
    kafka_version: str = "4.1.1"
    kafka_port: int = 19092
    kafka_controller_port: int = 19093
    kafka_heap: str = "1g"
    s3_port: int = 19000
    versitygw_version: str = "v1.8.0"
    prometheus_port: int = 19090
    start_timeout_s: float = 120.0


class WorkerPool(StrEnum):
    """What an OCR worker reads and where its results go (docs/architecture.md)."""

    PRIMARY = "primary"  # ocr.pages.v1 → ocr.page-results.v1; routes weak pages when enabled
    ACCURATE = "accurate"  # ocr.pages.accurate.v1 → ocr.page-results.v1; never routes
    SHADOW = "shadow"  # ocr.pages.v1 (own group) → ocr.page-results.shadow.v1


class WorkerSettings(BaseSettings):
    """The OCR worker (``ocrstream ocr-worker``): its consumer group, batching and bounds."""

    model_config = _frozen("OCRSTREAM_WORKER_")

    group: str = "ocrstream-ocr-worker"
    max_batch: int = 16
    max_wait_ms: int = 50
    # Pages consumed and not yet delivered: up to two batches started, the rest queued
    # undecoded (PageTasks, inline images up to the splitter's claim-check size, 512 KiB) so
    # that the intake can take the oldest page of every partition: 256 is a window of 28
    # pages on each of 8 partitions; 64 left 4, and documents finished out of order.
    max_inflight_pages: int = 256
    # Decoded pages held at once (fetched, decoding, waiting for or in the engine), in pixels:
    # 3 bytes each as BGR. Pages are counted by the size their task declares; one page is
    # always let through, whatever its size (up to LimitsSettings.max_page_pixels).
    max_inflight_pixels: int = 320_000_000
    decode_threads: int = 2
    engine_retries: int = 1
    poll_timeout_ms: int = 100
    store_backoff_s: float = 0.5
    store_backoff_max_s: float = 10.0
    drain_timeout_s: float = 60.0
    session_timeout_ms: int = 10_000
    max_poll_interval_ms: int = 300_000
    # How often the offsets stored after delivery are committed: a worker that dies without
    # its last commit has its partitions' next owner redo up to this much work (beside the
    # pages it held), and the group's lag falls at this pace.
    commit_interval_ms: int = 1000
    metrics_port: int = 9110
    # The page-result cache (ocrstream.streams.page_cache): a page image already read by the
    # same engine is answered from ocr.page-cache.v1; its results held in memory up to this.
    cache: bool = True
    cache_max_bytes: int = 256 * 1024 * 1024
    cache_load_timeout_s: float = 30.0  # at start, at most this long reading the topic
    # The worker pool this worker is in (ocrstream ocr-worker --pool/--shadow): primary reads
    # ocr.pages.v1, accurate ocr.pages.accurate.v1, shadow ocr.pages.v1 in a group of its own
    # and publishes to ocr.page-results.shadow.v1 (docs/architecture.md, "Worker pools").
    pool: WorkerPool = WorkerPool.PRIMARY
    # Shadow workers only: wait this long after each engine batch, to try a slower candidate
    # (or to show that a slow shadow delays no document).
    shadow_delay_ms: int = 0


class SplitterSettings(BaseSettings):
    """The splitter agent (``ocrstream splitter``)."""

    model_config = _frozen("OCRSTREAM_SPLITTER_")

    app_id: str = "ocrstream-splitter"
    dpi: int = 200
    claim_check_bytes: int = 512 * 1024
    text_layer: bool = False  # answer from usable text layers even when the scan does not ask
    # Key-field mode: a JSON file of template name → regions, for options.regions
    # {"template": NAME} (processors/regions.py).
    region_templates: Path | None = None
    # Buckets a ScanSubmitted may name as its source besides the store's own (OCRSTREAM_S3_
    # BUCKET), as JSON: '["scans-in"]'; '["*"]' allows any bucket the credentials can read.
    # Any other is refused (reason source_not_allowed): a producer must not make the splitter
    # read out objects it was never meant to see.
    source_buckets: tuple[str, ...] = ()
    changelog_replication: int = 1
    store_backoff_s: float = 0.5
    store_backoff_max_s: float = 10.0
    # the stall watch (ocrstream.streams.agent): how often it looks, and after how long
    # without progress a partition with records behind it is read directly
    stall_check_interval_s: float = 2.0
    stall_after_s: float = 10.0
    metrics_port: int = 9101
    web_port: int = 6066


class AssemblerSettings(BaseSettings):
    """The assembler agent (``ocrstream assembler``): deadline for missing pages and outputs."""

    model_config = _frozen("OCRSTREAM_ASSEMBLER_")

    app_id: str = "ocrstream-assembler"
    deadline_s: float = 900.0
    scan_interval_s: float = 5.0
    store_backoff_s: float = 0.5
    store_backoff_max_s: float = 10.0
    # the stall watch (ocrstream.streams.agent): how often it looks, and after how long
    # without progress a partition with records behind it is read directly
    stall_check_interval_s: float = 2.0
    stall_after_s: float = 10.0
    metrics_port: int = 9102
    web_port: int = 6067
    changelog_replication: int = 1
    # earlier revisions of a document's outputs kept under documents/{doc_id}/rev-{n}/ when a
    # reprocess writes the next one (older ones are deleted; 0 keeps none)
    keep_revisions: int = Field(default=3, ge=0)
    # A page whose kept result is provisional (routed to the accurate pool) holds its document
    # back until the accurate result comes, or for this long after the last page came; then
    # the provisional result is used.
    provisional_wait_s: float = 300.0


class LagSettings(BaseSettings):
    """The lag exporter (``ocrstream lag-exporter``)."""

    model_config = _frozen("OCRSTREAM_LAG_")

    interval_s: float = 5.0
    metrics_port: int = 9103


class SupervisorSettings(BaseSettings):
    """``ocrstream all``: how many OCR workers and how crashed agents are restarted."""

    model_config = _frozen("OCRSTREAM_SUPERVISOR_")

    ocr_workers: int = 1
    restart_backoff_s: float = 1.0
    restart_backoff_max_s: float = 30.0
    stop_timeout_s: float = 90.0


class ScaleSettings(BaseSettings):
    """``ocrstream scale``: the local lag autoscaler (the rule KEDA applies in Kubernetes)."""

    model_config = _frozen("OCRSTREAM_SCALE_")

    min_replicas: int = 1
    max_replicas: int = 2
    lag_threshold: int = 20
    activation_lag_threshold: int = 0
    cooldown_s: float = 60.0
    stabilization_window_s: float = 60.0
    interval_s: float = 5.0
    metrics_port: int = 9104


class TenantLimits(BaseModel):
    """One tenant's own limits in ``OCRSTREAM_API_TENANT_LIMITS``; None keeps the default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    requests_per_minute: int | None = Field(default=None, ge=0)
    pages_per_day: int | None = Field(default=None, ge=0)


class ApiSettings(BaseSettings):
    """``ocrstream api``: the HTTP edge (docs/architecture.md "HTTP API").

    The upload limit is ``LimitsSettings.max_file_bytes``, the splitter's own, so the API never
    accepts what the pipeline would refuse."""

    model_config = _frozen("OCRSTREAM_API_")

    host: str = "0.0.0.0"
    port: int = 8080
    # The tenants' key hashes. A file every replica mounts (a Kubernetes Secret): see
    # ocrstream/api/keys.py for why not a topic.
    keys_file: Path = Field(default_factory=lambda: default_home() / "api-keys.json")
    # Bytes the upload handler holds between the request and the store's multipart upload.
    upload_queue_chunks: int = 8
    # The longest a Server-Sent Events stream stays open; the client reconnects with its
    # Last-Event-ID and goes on.
    events_max_s: float = 600.0
    # ---- per-tenant limits and presigned outputs (ocrstream/api/limits.py, usage.py) ----
    # Defaults for every tenant, 0 = no limit; per-tenant overrides as JSON:
    # '{"acme": {"requests_per_minute": 600, "pages_per_day": 10000}}'. Counted across
    # replicas on ocr.api-usage.v1; with no limit anywhere nothing is counted.
    requests_per_minute: int = Field(default=0, ge=0)
    pages_per_day: int = Field(default=0, ge=0)
    tenant_limits: dict[str, TenantLimits] = Field(default_factory=dict)
    usage_flush_ms: int = Field(default=100, ge=1)  # how often usage goes to the other replicas
    # GET /v1/documents/{doc_id}/document.{fmt}: 307 to a presigned URL instead of streaming,
    # valid for presign_expiry_s, on presign_endpoint (the store as clients reach it, e.g.
    # "https://s3.example.com"; default the API's own OCRSTREAM_S3_ENDPOINT).
    output_redirect: bool = False
    presign_expiry_s: int = Field(default=300, ge=1, le=7 * 24 * 3600)
    presign_endpoint: str | None = None
    # The web UI's event-stream tokens (ocrstream/api/tokens.py): EventSource sends no
    # Authorization header, so it gets a short-lived token signed with this secret instead.
    # Every replica behind one load balancer needs the same one; empty: a random one per process.
    token_secret: SecretStr = SecretStr("")
    events_token_ttl_s: float = 300.0
    # The viewer's page images (ocrstream/api/viewer.py): longest side in pixels, and the DPI
    # a PDF page is rendered at before it is scaled down to that.
    viewer_max_side: int = 1600
    viewer_dpi: int = 150


class WebhookSettings(BaseSettings):
    """Webhooks: the ``callback_url`` policy (checked by ``ocrstream api`` at submission and by
    the agent at every delivery) and the webhook agent (``ocrstream webhooks``)."""

    model_config = _frozen("OCRSTREAM_WEBHOOK_")

    # No server-side request forgery: only https, to hosts whose every address is global.
    allow_http: bool = False
    # Networks a callback may reach although they are not global (loopback, private, link-local
    # …), as JSON: '["127.0.0.0/8"]' for a receiver on this machine. Empty: none.
    allowed_networks: tuple[str, ...] = ()
    # The tenants' signing secrets (HMAC-SHA256 keys, readable: see ocrstream/api/secrets.py).
    secrets_file: Path = Field(default_factory=lambda: default_home() / "webhook-secrets.json")
    # CA certificates (a PEM file) that receivers' certificates are checked against instead of
    # the system's: for receivers behind a private CA. None: the system's.
    ca_bundle: Path | None = None
    group: str = "ocrstream-webhooks"
    concurrency: int = 8  # deliveries in flight at once
    timeout_s: float = 10.0  # connect and read, per attempt
    # Retries: attempt n waits min(backoff_max_s, backoff_s * 2**(n-1)), times a random factor
    # in [1 - jitter, 1]; after window_s from the first attempt the delivery is dead-lettered.
    backoff_s: float = 30.0
    backoff_max_s: float = 3600.0
    jitter: float = 0.5
    window_s: float = 24 * 3600.0
    max_pending: int = 100_000  # retries held in memory before the retry topic is paused
    poll_timeout_ms: int = 200
    drain_timeout_s: float = 30.0
    session_timeout_ms: int = 10_000
    metrics_port: int = 9105


# --- worker pools: confidence routing and shadow workers (issue 14, items 4 and 5) -----------


class RoutingSettings(BaseSettings):
    """Confidence routing (``ocrstream.processors.routing``): a primary worker re-sends a page
    whose recognition is weak to ``ocr.pages.accurate.v1``. Off unless enabled: without an
    accurate pool, routed pages would wait for it until ``OCRSTREAM_ASSEMBLER_PROVISIONAL_
    WAIT_S``. ``ocrstream all --accurate-workers N`` turns it on for its primary workers."""

    model_config = _frozen("OCRSTREAM_ROUTING_")

    enabled: bool = False
    # Measured with the early rule on (docs/benchmarks.md, "Early routing"): 0.9 / 0.1 / 0.96
    # kept the CER within 0.002 of small-only's on the tuning set and three held-out sets
    # (1.46x, 1.56x, 1.52x, 1.52x its pages/s); 0.85 / 0.05 / 0, the tuning set's pick, was
    # faster (1.53x, 1.75x, 1.60x, 1.57x) but 0.0021-0.0022 above small-only's on two.
    low_confidence: float = 0.9
    max_low_fraction: float = 0.1
    min_mean_confidence: float = 0.96
    min_lines: int = 1
    # The early rule (ocrstream.processors.page_quality), before the fast model reads a page:
    # noisier than this (grey levels, σ) or, when set, fainter ink than this contrast: routed
    # unread. 0 turns a measure off. EARLY_MAX_NOISE's default: measured in
    # docs/benchmarks.md ("Early routing").
    early_max_noise: float = 8.0
    early_min_contrast: float = 0.0
    # Line rescue (ocrstream.processors.ocr.rescue), in primary workers: the fast engine's lines
    # under RESCUE_BELOW re-read by this model set's recogniser, the more confident reading
    # kept, on the pages the late rule keeps. Empty: off until confirmed on fresh pages: with
    # ppocrv6-small, 1.53-1.96x small-only at <= +0.0017 nCER on the four sets it was chosen on
    # (docs/benchmarks.md, "Line rescue").
    rescue_model: str = ""
    rescue_below: float = 0.9


class AccurateOcrSettings(OcrSettings):
    """The accurate pool's engine, ``OCRSTREAM_ACCURATE_OCR_*``: the stronger configuration
    for the few pages routed to it — the bigger model and the page orientation model on.

    Detection keeps the default budget (``det_limit_side`` 1600) on purpose: without
    downscaling (4096, no 200-DPI A4 page over it) the small model's CER on three degraded
    A4 scans went from 0.065 to 0.202 — blur and noise at full resolution break lines apart
    (docs/benchmarks.md, "Confidence routing"). ``OCRSTREAM_ACCURATE_OCR_DET_LIMIT_SIDE``
    raises it for clean, small print."""

    model_config = _frozen("OCRSTREAM_ACCURATE_OCR_")

    model: str = "ppocrv6-small"
    fix_orientation: bool = True


class ShadowOcrSettings(OcrSettings):
    """A shadow worker's candidate engine, ``OCRSTREAM_SHADOW_OCR_*`` (or ``--model``);
    defaults as ``OcrSettings``."""

    model_config = _frozen("OCRSTREAM_SHADOW_OCR_")


class ShadowSettings(BaseSettings):
    """The shadow comparer (``ocrstream shadow compare``) and ``ocrstream shadow report``."""

    model_config = _frozen("OCRSTREAM_SHADOW_")

    group: str = "ocrstream-shadow-comparer"
    metrics_port: int = 9106
    # Results waiting for their other half, at most this many (oldest dropped first) and at
    # most this long: a shadow that is hours behind is compared for what is still held.
    max_pending: int = 100_000
    pending_ttl_s: float = 3600.0


class BenchSettings(BaseSettings):
    """``ocrstream bench``'s own settings, ``OCRSTREAM_BENCH_*``."""

    model_config = _frozen("OCRSTREAM_BENCH_")

    # PaddleOCR's venv and converted models (scripts/paddleocr_peer.sh writes them there)
    paddleocr_home: Path = Field(
        default_factory=lambda: Path.home() / ".cache" / "ocrstream" / "peers" / "paddleocr"
    )
