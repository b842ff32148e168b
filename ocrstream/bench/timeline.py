"""What the pipeline does over time, sampled every second during ``bench pipeline``.

Each sample holds the page results produced so far (the sum of ``ocr.page-results.v1``'s high
watermarks, counted from the start), the OCR worker group's total lag on ``ocr.pages.v1``
(high watermark minus committed offset, as the autoscaler reads it), the group's members as
Kafka sees them (the OCR workers really consuming), and, with the local autoscaler, the
replicas it runs and wants (from its ``/metrics``). All from the Kafka admin API and the
autoscaler, never from the processes under test.

The sampler runs in a child process (``python -m ocrstream.bench.timeline``), restarted if it
dies: librdkafka can abort a process whose admin request is cut off by a broker restart
(``rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0'``, librdkafka issue
4605), and a benchmark on a shared machine must not die with it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
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


class Sampler:
    """Takes one sample at a time (in the sampler process): absolute counts, wall-clock time."""

    def __init__(
        self, kafka: KafkaSettings, group: str, autoscaler_url: str | None, timeout_s: float = 5.0
    ) -> None:
        self.group, self.autoscaler_url, self.timeout_s = group, autoscaler_url, timeout_s
        self.results_topic = kafka.topic(topics.PAGE_RESULTS)
        self.admin = AdminClient(kafka.librdkafka(log_level=3))
        self.lag = GroupLag(kafka, group, kafka.topic(topics.PAGES), timeout_s=timeout_s)
        self._partitions: list[int] = []
        self._last_results = 0

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

    def sample(self) -> dict[str, Any]:
        wall = time.time()
        try:
            self._last_results = self.produced()
        except (KafkaException, KeyError) as e:
            log.debug("no result count: %s", e)
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
        replicas, desired = (
            autoscaler_gauges(self.autoscaler_url) if self.autoscaler_url else (None, None)
        )
        return {"wall": wall, "results": self._last_results, "lag": lag, "members": members,
                "replicas": replicas, "desired": desired}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """The sampler process: one JSON line per sample appended to OUT until SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m ocrstream.bench.timeline")
    parser.add_argument("out", type=Path)
    parser.add_argument("--group", required=True)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--autoscaler-url", default=None)
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    sampler = Sampler(KafkaSettings(), args.group, args.autoscaler_url)
    try:
        with open(args.out, "a", encoding="utf-8") as out:
            while not stop.is_set():
                started = time.monotonic()
                out.write(json.dumps(sampler.sample()) + "\n")
                out.flush()
                stop.wait(max(0.0, args.interval - (time.monotonic() - started)))
    finally:
        sampler.lag.close()


class Timeline:
    """Runs the sampler process between :meth:`start` and :meth:`stop`; its points so far."""

    def __init__(
        self,
        kafka: KafkaSettings,
        group: str,
        path: Path,
        *,
        interval_s: float = 1.0,
        autoscaler_url: str | None = None,
    ) -> None:
        self.path, self.interval_s = path, interval_s
        self.argv = [sys.executable, "-m", "ocrstream.bench.timeline", str(path),
                     "--group", group, "--interval", str(interval_s)]  # fmt: skip
        if autoscaler_url:
            self.argv += ["--autoscaler-url", autoscaler_url]
        self.env = {**os.environ, "OCRSTREAM_TOPIC_PREFIX": kafka.topic_prefix,
                    "OCRSTREAM_KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers}  # fmt: skip
        self.restarts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._t0 = 0.0

    def _spawn(self) -> None:
        self._proc = subprocess.Popen(self.argv, env=self.env, stdout=subprocess.DEVNULL)

    def start(self, timeout_s: float = 60.0) -> Timeline:
        """Start sampling; returns after the first sample (the baseline) is written."""
        self.path.write_text("", encoding="utf-8")
        self._spawn()
        deadline = time.monotonic() + timeout_s
        while not self._lines():
            if time.monotonic() > deadline:
                raise TimeoutError("the timeline sampler wrote nothing")
            if self._proc is not None and self._proc.poll() is not None:
                self._spawn()
            time.sleep(0.1)
        self._t0 = self._lines()[0]["wall"]
        self._watchdog = threading.Thread(target=self._watch, name="bench-timeline", daemon=True)
        self._watchdog.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            if self._proc is not None and self._proc.poll() is not None:
                log.warning("timeline sampler exited (%s); restarting", self._proc.returncode)
                self.restarts += 1
                self._spawn()

    def _lines(self) -> list[dict[str, Any]]:
        lines = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by a crash
                continue
        return lines

    @property
    def points(self) -> list[Point]:
        lines = self._lines()
        if not lines:
            return []
        base = lines[0]["results"]
        return [
            Point(round(x["wall"] - self._t0, 3), x["results"] - base, x["lag"], x["members"],
                  x["replicas"], x["desired"])
            for x in lines
        ]  # fmt: skip

    def elapsed(self) -> float:
        return time.time() - self._t0

    def stop(self) -> list[Point]:
        self._stop.set()
        if self._watchdog is not None:
            self._watchdog.join(5)
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
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


if __name__ == "__main__":
    main()
