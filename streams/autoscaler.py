"""``ocrstream scale``: KEDA's lag rule on one machine.

Every ``interval_s`` the autoscaler reads the OCR worker group's lag on ``ocr.pages.v1`` with
Kafka (high watermark minus committed offset, and for a partition the group has never
committed, the whole retained backlog — what KEDA's ``offsetResetPolicy: earliest`` does),
asks :class:`~ocrstream.processors.autoscale.Autoscaler` how many workers that needs, and
starts or stops ``ocrstream ocr-worker`` processes to match. Scale-down sends SIGTERM to the
newest worker, which drains its batch and commits before it exits; a worker that crashes is
replaced on the next tick; if the autoscaler itself dies, its workers get SIGTERM too (Linux
parent-death signal). Decisions are exported as metrics.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException

from ocrstream.errors import RetriableError
from ocrstream.processors.autoscale import Autoscaler, Decision
from ocrstream.settings import KafkaSettings
from ocrstream.streams.lag import LagReader, PartitionLag
from ocrstream.streams.metrics import Metrics
from ocrstream.streams.supervisor import ocrstream_command, start_tied, terminate_all

log = logging.getLogger(__name__)


class GroupLag:
    """The lag of one consumer group on one topic, over every partition of the topic."""

    def __init__(self, kafka: KafkaSettings, group: str, topic: str, timeout_s: float = 10.0):
        self.group, self.topic, self.timeout_s = group, topic, timeout_s
        self.reader = LagReader(kafka, timeout_s)

    def _partitions(self) -> list[int]:
        try:
            parts = self.reader.partitions([self.topic]).get(self.topic)
        except KafkaException as e:
            raise RetriableError(f"cannot read the metadata of {self.topic}: {e}") from e
        if not parts:
            raise RetriableError(f"topic {self.topic} is not available")
        return parts

    def partitions(self) -> int:
        return len(self._partitions())

    def read(self) -> int:
        """The lag summed over the topic's partitions; RetriableError when any part of it
        cannot be read (an undercount would scale the group down under a backlog)."""
        tps = [(self.topic, p) for p in self._partitions()]
        try:
            committed = self.reader.offsets.read(self.group, tps)
            marks = self.reader.watermarks(tps)
        except KafkaException as e:
            raise RetriableError(f"cannot read the lag of {self.group}: {e}") from e
        missing = [p for t, p in tps if (t, p) not in marks or (t, p) not in committed]
        if missing:
            raise RetriableError(f"no offsets for {self.topic} partitions {missing}")
        return sum(
            PartitionLag(self.group, t, p, committed[(t, p)], *marks[(t, p)]).lag for t, p in tps
        )

    def close(self) -> None:
        self.reader.close()


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes]


Spawn = Callable[[int], "subprocess.Popen[bytes]"]


def spawn_worker(base_port: int, env: Mapping[str, str] | None = None) -> Spawn:
    """A function that starts OCR worker ``i`` with its metrics on ``base_port + i``."""

    def spawn(i: int) -> subprocess.Popen[bytes]:
        args = ["ocr-worker", "--metrics-port", str(base_port + i)]
        return start_tied(ocrstream_command(args), env)

    return spawn


class LocalAutoscaler:
    """Keeps ``decide(lag)`` OCR worker processes running."""

    def __init__(
        self,
        autoscaler: Autoscaler,
        read_lag: Callable[[], int],
        spawn: Spawn,
        metrics: Metrics,
        *,
        interval_s: float = 5.0,
        stop_timeout_s: float = 90.0,
    ) -> None:
        self.autoscaler, self.read_lag, self.spawn = autoscaler, read_lag, spawn
        self.metrics, self.interval_s, self.stop_timeout_s = metrics, interval_s, stop_timeout_s
        self.workers: list[_Worker] = []
        self._stopping: list[_Worker] = []
        self.last: Decision | None = None

    @property
    def replicas(self) -> int:
        return len(self.workers)

    def _reap(self) -> None:
        for w in [w for w in self.workers if w.proc.poll() is not None]:
            log.warning("worker %d (pid %d) exited with %s", w.index, w.proc.pid, w.proc.returncode)
            self.workers.remove(w)
        self._stopping = [w for w in self._stopping if w.proc.poll() is None]

    def _free_index(self) -> int:
        # Not the index of a worker still draining either: it holds its metrics port.
        used = {w.index for w in self.workers} | {w.index for w in self._stopping}
        return next(i for i in range(len(used) + 1) if i not in used)

    def tick(self, now: float | None = None) -> Decision | None:
        self._reap()
        try:
            lag = self.read_lag()
        except RetriableError as e:
            log.warning("lag unavailable, keeping %d workers: %s", self.replicas, e)
            return None
        decision = self.autoscaler.decide(
            time.monotonic() if now is None else now, lag, self.replicas
        )
        self.last = decision
        if decision.desired > self.replicas:
            self.metrics.autoscaler_decisions.labels("up").inc()
            log.info("scale up %d -> %d (%s)", self.replicas, decision.desired, decision.reason)
            while self.replicas < decision.desired:
                i = self._free_index()
                self.workers.append(_Worker(i, self.spawn(i)))
        elif decision.desired < self.replicas:
            self.metrics.autoscaler_decisions.labels("down").inc()
            log.info("scale down %d -> %d (%s)", self.replicas, decision.desired, decision.reason)
            while self.replicas > decision.desired:
                w = max(self.workers, key=lambda w: w.index)
                self.workers.remove(w)
                w.proc.send_signal(signal.SIGTERM)
                self._stopping.append(w)
        self.metrics.autoscaler_lag.set(lag)
        self.metrics.autoscaler_desired_replicas.set(decision.desired)
        self.metrics.autoscaler_replicas.set(self.replicas)
        return decision

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                self.tick()
                stop.wait(self.interval_s)
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        procs = [w.proc for w in self.workers + self._stopping]
        self.workers, self._stopping = [], []
        terminate_all(procs, self.stop_timeout_s)
        self.metrics.autoscaler_replicas.set(0)
