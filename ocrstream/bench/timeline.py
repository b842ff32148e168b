"""What the pipeline does over time, sampled every second during ``bench pipeline``.

Each sample holds the page results produced so far (the sum of ``ocr.page-results.v1``'s high
watermarks, counted from the start), the OCR worker group's total lag on ``ocr.pages.v1``
(high watermark minus committed offset, as the autoscaler reads it), the group's members as
Kafka sees them (the OCR workers really consuming), and, with the local autoscaler, the
replicas it runs and wants (from its ``/metrics``). All from the Kafka admin API and the
autoscaler, never from the processes under test.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ocrstream.errors import RetriableError
from ocrstream.settings import KafkaSettings
from ocrstream.streams import topics
from ocrstream.streams.autoscaler import GroupLag

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Point:
    t: float  # seconds since the timeline started
    results: int  # page results produced since the start
    lag: int | None  # pages the worker group has not committed yet
    members: int | None  # OCR workers in the group
    replicas: int | None = None  # the autoscaler's running workers
    desired: int | None = None  # the autoscaler's rule

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def autoscaler_gauges(url: str, timeout_s: float = 1.0) -> tuple[int | None, int | None]:
    """``(replicas, desired)`` from an autoscaler's ``/metrics``; Nones when it can't answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            text = resp.read().decode()
    except (urllib.error.URLError, OSError):
        return None, None
    found: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("ocrstream_autoscaler_replicas", "ocrstream_autoscaler_desired_replicas"):
            found[name] = int(float(value))
    return found.get("ocrstream_autoscaler_replicas"), found.get(
        "ocrstream_autoscaler_desired_replicas"
    )


class Timeline:
    """Samples every ``interval_s`` in a daemon thread between :meth:`start` and :meth:`stop`."""

    def __init__(
        self,
        kafka: KafkaSettings,
        group: str,
        *,
        interval_s: float = 1.0,
        autoscaler: Callable[[], tuple[int | None, int | None]] | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        self.group, self.interval_s, self.timeout_s = group, interval_s, timeout_s
        self.results_topic = kafka.topic(topics.PAGE_RESULTS)
        self.admin = AdminClient(kafka.librdkafka(log_level=3))
        self.lag = GroupLag(kafka, group, kafka.topic(topics.PAGES), timeout_s=timeout_s)
        self.autoscaler = autoscaler
        self.points: list[Point] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._base = 0
        self._partitions: list[int] = []

    def produced(self) -> int:
        """Records in the page-results topic (sum of high watermarks)."""
        if not self._partitions:
            meta = self.admin.list_topics(self.results_topic, timeout=self.timeout_s)
            self._partitions = sorted(meta.topics[self.results_topic].partitions)
        request = {TopicPartition(self.results_topic, p): OffsetSpec.latest()
                   for p in self._partitions}  # fmt: skip
        futures = self.admin.list_offsets(request, request_timeout=self.timeout_s)
        return sum(int(f.result().offset) for f in futures.values())

    def members(self) -> int:
        futures = self.admin.describe_consumer_groups([self.group], request_timeout=self.timeout_s)
        return len(futures[self.group].result().members)

    def sample(self) -> Point:
        t = time.monotonic() - self._t0
        try:
            results = self.produced() - self._base
        except (KafkaException, KeyError) as e:
            log.debug("no result count: %s", e)
            results = self.points[-1].results if self.points else 0
        try:
            lag: int | None = self.lag.read()
        except RetriableError as e:
            log.debug("no lag: %s", e)
            lag = None
        try:
            members: int | None = self.members()
        except KafkaException as e:
            log.debug("no group members: %s", e)
            members = None
        replicas, desired = self.autoscaler() if self.autoscaler else (None, None)
        return Point(round(t, 3), results, lag, members, replicas, desired)

    def start(self) -> Timeline:
        self._t0 = time.monotonic()
        self._base = self.produced()
        self.points.append(self.sample())
        self._thread = threading.Thread(target=self._run, name="bench-timeline", daemon=True)
        self._thread.start()
        return self

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.points.append(self.sample())

    def stop(self) -> list[Point]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s * 4)
        return self.points


def throughput(points: list[Point], window_s: float = 5.0) -> list[tuple[float, float]]:
    """Pages/s at each point: results since the latest point at least ``window_s`` earlier
    (the first point, near the start), over the time between them."""
    out: list[tuple[float, float]] = []
    j = 0
    for p in points:
        while j + 1 < len(points) and points[j + 1].t <= p.t - window_s:
            j += 1
        first = points[j]
        dt = p.t - first.t
        out.append((p.t, (p.results - first.results) / dt if dt > 0 else 0.0))
    return out
