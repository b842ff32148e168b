"""The topics of docs/architecture.md ("Topics") and their idempotent creation.

:data:`TOPICS` is the table: logical name, partitions, cleanup policy, retention. Real names go
through :meth:`KafkaSettings.topic` (the configured prefix). :func:`ensure_topics` creates what
is missing and reports, without changing them, existing topics whose settings differ.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ocrstream.errors import FatalError, RetriableError
from ocrstream.settings import KafkaSettings

log = logging.getLogger(__name__)

SCANS = "ocr.scans.v1"
PAGES = "ocr.pages.v1"
PAGE_RESULTS = "ocr.page-results.v1"
PROGRESS = "ocr.progress.v1"
DOCUMENTS = "ocr.documents.v1"
DLQ = "ocr.dlq.v1"
DLQ_REDRIVEN = "ocr.dlq.redriven.v1"
PAGE_CACHE = "ocr.page-cache.v1"
WEBHOOK_RETRY = "ocr.webhooks.retry.v1"
API_USAGE = "ocr.api-usage.v1"  # the HTTP API's per-tenant usage, shared by its replicas
PAGES_ACCURATE = "ocr.pages.accurate.v1"
PAGE_RESULTS_SHADOW = "ocr.page-results.shadow.v1"

DAY_MS = 24 * 60 * 60 * 1000
MAX_MESSAGE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class TopicSpec:
    """One topic as the design wants it."""

    name: str  # logical name, without prefix
    partitions: int
    cleanup_policy: str  # "delete", "compact" or "compact,delete"
    retention_ms: int | None = None  # None: the cleanup policy does not expire by time
    max_message_bytes: int = MAX_MESSAGE_BYTES

    def configs(self) -> dict[str, str]:
        """The topic-level configs this spec fixes (compared on existing topics)."""
        conf = {
            "cleanup.policy": self.cleanup_policy,
            "max.message.bytes": str(self.max_message_bytes),
        }
        if self.retention_ms is not None:
            conf["retention.ms"] = str(self.retention_ms)
        return conf


TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(SCANS, 12, "delete", 7 * DAY_MS),
    TopicSpec(PAGES, 64, "delete", 1 * DAY_MS),
    TopicSpec(PAGE_RESULTS, 12, "delete", 7 * DAY_MS),
    TopicSpec(PROGRESS, 12, "compact"),
    TopicSpec(DOCUMENTS, 12, "compact,delete", 30 * DAY_MS),
    TopicSpec(DLQ, 3, "delete", 30 * DAY_MS),
    TopicSpec(DLQ_REDRIVEN, 1, "compact"),
    TopicSpec(PAGE_CACHE, 12, "compact"),
    TopicSpec(WEBHOOK_RETRY, 6, "delete", 7 * DAY_MS),
    TopicSpec(API_USAGE, 1, "delete", 2 * DAY_MS),
    TopicSpec(PAGES_ACCURATE, 12, "delete", 1 * DAY_MS),
    TopicSpec(PAGE_RESULTS_SHADOW, 12, "delete", 7 * DAY_MS),
)
SPECS: dict[str, TopicSpec] = {spec.name: spec for spec in TOPICS}


class TopicAdminError(FatalError):
    """Topics could not be created or described."""

    code = "topic_admin_error"


@dataclass(frozen=True)
class Difference:
    topic: str
    setting: str  # "partitions" or a config name
    expected: str
    actual: str

    def __str__(self) -> str:
        return f"{self.topic}: {self.setting} is {self.actual}, expected {self.expected}"


@dataclass
class TopicsReport:
    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)  # present and as specified
    differing: list[Difference] = field(default_factory=list)

    @property
    def differing_topics(self) -> list[str]:
        return sorted({d.topic for d in self.differing})


def scaled_partitions(partitions: int, scale: float) -> int:
    """``partitions`` times ``scale``, rounded up, at least 1 (smaller topics for a dev box)."""
    if scale <= 0:
        raise ValueError(f"partition scale must be > 0, got {scale}")
    return max(1, math.ceil(partitions * scale))


def desired_partitions(
    spec: TopicSpec, partitions_override: Mapping[str, int] | int | None, scale: float
) -> int:
    """Partitions for ``spec``: an override (one count for all, or per logical name) or the
    design's count times ``scale``."""
    if isinstance(partitions_override, int):
        return partitions_override
    if partitions_override and spec.name in partitions_override:
        return partitions_override[spec.name]
    return scaled_partitions(spec.partitions, scale)


def _admin(kafka: KafkaSettings) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(kafka.librdkafka(log_level=3))


def _wait(futures: Mapping[Any, Any], timeout_s: float) -> dict[Any, Exception | Any]:
    out: dict[Any, Exception | Any] = {}
    for key, fut in futures.items():
        try:
            out[key] = fut.result(timeout=timeout_s)
        except Exception as e:  # noqa: BLE001 - collected per topic, inspected by the caller
            out[key] = e
    return out


def _error_code(exc: Exception) -> int | None:
    from confluent_kafka import KafkaError

    err = exc.args[0] if exc.args else None
    return err.code() if isinstance(err, KafkaError) else None


def _describe(admin: Any, names: list[str], deadline: float) -> dict[str, Any]:
    """Topic configs by name. A topic created a moment ago may be unknown to the broker that
    answers for a few hundred milliseconds: retry those until ``deadline``."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import ConfigResource, ResourceType

    configs: dict[str, Any] = {}
    pending = list(names)
    while pending:
        timeout_s = max(1.0, deadline - time.monotonic())
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in pending]
        described = _wait(admin.describe_configs(resources, request_timeout=timeout_s), timeout_s)
        pending = []
        for resource, outcome in described.items():
            if not isinstance(outcome, Exception):
                configs[resource.name] = outcome
            elif (
                _error_code(outcome) == KafkaError.UNKNOWN_TOPIC_OR_PART
                and time.monotonic() < deadline
            ):
                pending.append(resource.name)
            else:
                raise TopicAdminError(f"describing topic {resource.name} failed: {outcome}")
        if pending:
            time.sleep(0.2)
    return configs


def _wait_until_usable(admin: Any, names: list[str], deadline: float) -> Any:
    """Metadata once every topic in ``names`` is known with a leader for each partition."""
    while True:
        metadata = admin.list_topics(timeout=max(1.0, deadline - time.monotonic()))
        waiting = [
            name
            for name in names
            if name not in metadata.topics
            or metadata.topics[name].error is not None
            or any(p.leader < 0 for p in metadata.topics[name].partitions.values())
        ]
        if not waiting:
            return metadata
        if time.monotonic() >= deadline:
            raise TopicAdminError(f"topics not ready in time: {', '.join(waiting)}")
        time.sleep(0.2)


def _create(admin: Any, new: list[Any], timeout_s: float) -> tuple[list[str], list[str]]:
    """Create topics; returns (created, already there because someone else created them)."""
    from confluent_kafka import KafkaError

    created, raced = [], []
    results = _wait(admin.create_topics(new, request_timeout=timeout_s), timeout_s)
    for name, outcome in results.items():
        if not isinstance(outcome, Exception):
            created.append(name)
            log.info("created topic %s", name)
        elif _error_code(outcome) == KafkaError.TOPIC_ALREADY_EXISTS:
            raced.append(name)
        else:
            raise TopicAdminError(f"creating topic {name} failed: {outcome}") from outcome
    return created, raced


def _differences(
    name: str,
    spec: TopicSpec,
    partitions: int,
    expected_partitions: int,
    configs: Mapping[str, Any],
) -> list[Difference]:
    diffs = []
    if partitions != expected_partitions:
        diffs.append(Difference(name, "partitions", str(expected_partitions), str(partitions)))
    for key, expected in spec.configs().items():
        entry = configs.get(key)
        actual = entry.value if entry is not None else None
        if _normalise(key, actual) != _normalise(key, expected):
            diffs.append(Difference(name, key, expected, str(actual)))
    return diffs


def ensure_topics(
    kafka: KafkaSettings,
    partitions_override: Mapping[str, int] | int | None = None,
    replication_factor: int = 1,
    *,
    partitions_scale: float = 1.0,
    specs: Iterable[TopicSpec] = TOPICS,
    timeout_s: float = 30.0,
) -> TopicsReport:
    """Create every missing topic; report existing ones whose partitions or configs differ.

    Returns once every topic has a leader for each partition, so callers can produce at once.
    ``replication_factor=-1`` lets the broker choose (``default.replication.factor``).
    Existing topics are never altered: a difference is reported for a person to decide.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    deadline = time.monotonic() + timeout_s
    admin = _admin(kafka)
    wanted = {kafka.topic(spec.name): spec for spec in specs}
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as e:
        raise RetriableError(f"cannot reach Kafka at {kafka.bootstrap_servers}: {e}") from e

    def partitions_for(name: str) -> int:
        return desired_partitions(wanted[name], partitions_override, partitions_scale)

    report = TopicsReport()
    present = [name for name in wanted if name in metadata.topics]
    missing = [name for name in wanted if name not in metadata.topics]
    if missing:
        new = [
            NewTopic(
                name,
                num_partitions=partitions_for(name),
                replication_factor=replication_factor,
                config=wanted[name].configs(),
            )
            for name in missing
        ]
        report.created, raced = _create(admin, new, timeout_s)
        present += raced  # created concurrently by someone else: compare them
        metadata = _wait_until_usable(admin, list(wanted), deadline)

    configs = _describe(admin, present, deadline) if present else {}
    for name in present:
        partitions = len(metadata.topics[name].partitions)
        diffs = _differences(name, wanted[name], partitions, partitions_for(name), configs[name])
        if diffs:
            report.differing.extend(diffs)
            for d in diffs:
                log.warning("topic differs: %s", d)
        else:
            report.existing.append(name)
    report.created.sort()
    report.existing.sort()
    return report


def _normalise(key: str, value: str | None) -> str | None:
    if value is None:
        return None
    if key == "cleanup.policy":
        return ",".join(sorted(p.strip() for p in value.split(",") if p.strip()))
    return value.strip()


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    configs: dict[str, str]


def list_topics(kafka: KafkaSettings, timeout_s: float = 30.0) -> list[TopicInfo]:
    """The topics under the configured prefix, with partitions and the configs we care about."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = _admin(kafka)
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as e:
        raise RetriableError(f"cannot reach Kafka at {kafka.bootstrap_servers}: {e}") from e
    names = sorted(
        n for n in metadata.topics if n.startswith(kafka.topic_prefix) and not n.startswith("__")
    )
    if not names:
        return []
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
    described = _wait(admin.describe_configs(resources, request_timeout=timeout_s), timeout_s)
    keys = ("cleanup.policy", "retention.ms", "max.message.bytes")
    out = []
    for resource, outcome in described.items():
        configs: dict[str, str] = {}
        if not isinstance(outcome, Exception):
            configs = {k: outcome[k].value for k in keys if k in outcome}
        out.append(
            TopicInfo(resource.name, len(metadata.topics[resource.name].partitions), configs)
        )
    return sorted(out, key=lambda t: t.name)


def delete_topics(
    kafka: KafkaSettings, specs: Iterable[TopicSpec] = TOPICS, timeout_s: float = 30.0
) -> list[str]:
    """Delete the (prefixed) topics of ``specs`` that exist; for tests and resets."""
    from confluent_kafka import KafkaException

    admin = _admin(kafka)
    try:
        existing = admin.list_topics(timeout=timeout_s).topics
    except KafkaException as e:
        raise RetriableError(f"cannot reach Kafka at {kafka.bootstrap_servers}: {e}") from e
    names = [kafka.topic(s.name) for s in specs if kafka.topic(s.name) in existing]
    if not names:
        return []
    results = _wait(admin.delete_topics(names, request_timeout=timeout_s), timeout_s)
    failed = {n: e for n, e in results.items() if isinstance(e, Exception)}
    if failed:
        raise TopicAdminError(f"deleting topics failed: {failed}")
    return sorted(names)


def ensure_internal_topics(
    kafka: KafkaSettings,
    topics: Mapping[str, tuple[int, str]],
    replication_factor: int = 1,
    timeout_s: float = 30.0,
) -> list[str]:
    """Create a faust app's internal topics (``name → (partitions, cleanup.policy)``: table
    changelogs, the assembler's deadlines) before the app starts, and wait until each has
    leaders; returns the names created.

    faust would declare them itself as it starts, but its consumer's metadata does not know
    them yet when the first records arrive: on a new deployment the first table write of every
    record raced the metadata refresh and failed with ``PartitionsMismatch`` (“the changelog
    topic has 0 partitions”), which failed the splitter's first documents as internal errors.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(kafka.librdkafka())
    deadline = time.monotonic() + timeout_s
    present = admin.list_topics(timeout=timeout_s).topics
    new = [
        NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            config={"cleanup.policy": policy},
        )
        for name, (partitions, policy) in topics.items()
        if name not in present
    ]
    created: list[str] = []
    if new:
        created, _ = _create(admin, new, timeout_s)
    _wait_until_usable(admin, list(topics), deadline)
    return created
