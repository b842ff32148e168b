"""The local autoscaler's loop with real child processes (``sleep`` stand-ins for OCR workers)
and a scripted lag: it starts and stops processes as KEDA's rule says, replaces crashed ones,
keeps its workers when the lag can't be read, exports its decisions, and takes its workers
down with it when it dies."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from ocrstream.errors import RetriableError
from ocrstream.processors.autoscale import Autoscaler, ScalePolicy
from ocrstream.streams.autoscaler import LocalAutoscaler
from ocrstream.streams.metrics import Metrics
from tests.polling import pid_alive, wait_until

# A stand-in worker: sleeps until SIGTERM; with a grace period it "drains" that long first.
_WORKER = """
import signal, sys, time
grace = float(sys.argv[1])
def stop(*_):
    time.sleep(grace)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


class FakeSpawn:
    """Starts stand-in workers and remembers which index each one got."""

    def __init__(self, grace_s: float = 0.0) -> None:
        self.grace_s = grace_s
        self.calls: list[int] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def __call__(self, index: int) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(self.grace_s)], stdout=subprocess.PIPE
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"  # its SIGTERM handler is in place
        self.calls.append(index)
        self.procs.append(proc)
        return proc

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


class ScriptedLag:
    """Returns the scripted lags in turn (an exception instance is raised); then the last."""

    def __init__(self, script: Sequence[int | Exception]) -> None:
        self.script, self.i = list(script), 0

    def __call__(self) -> int:
        value = self.script[min(self.i, len(self.script) - 1)]
        self.i += 1
        if isinstance(value, Exception):
            raise value
        return value


@pytest.fixture
def spawn() -> Iterator[FakeSpawn]:
    fake = FakeSpawn()
    yield fake
    fake.cleanup()


def scaler(
    script: Sequence[int | Exception], spawn: FakeSpawn, metrics: Metrics, **policy: float
) -> LocalAutoscaler:
    conf = {"min_replicas": 1, "max_replicas": 3, "lag_threshold": 10, "cooldown_s": 5.0,
            "stabilization_window_s": 5.0, **policy}  # fmt: skip
    return LocalAutoscaler(
        Autoscaler(ScalePolicy(**conf)),  # type: ignore[arg-type]
        ScriptedLag(script),
        spawn,
        metrics,
        stop_timeout_s=10,
    )


def gauge(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def alive(procs: Sequence[subprocess.Popen[bytes]]) -> int:
    return sum(p.poll() is None for p in procs)


def wait_exit(procs: Sequence[subprocess.Popen[bytes]], timeout: float = 10.0) -> None:
    for proc in procs:
        proc.wait(timeout)


def test_scales_up_on_backlog_and_down_after_cooldown_and_stabilisation(spawn: FakeSpawn) -> None:
    metrics = Metrics()
    auto = scaler([0, 25, 25, 0, 0, 0], spawn, metrics)

    auto.tick(now=0.0)  # no lag: the minimum
    assert spawn.calls == [0]
    decision = auto.tick(now=1.0)  # 25 pages / 10 per worker -> 3
    assert decision is not None
    assert decision.desired == 3
    assert spawn.calls == [0, 1, 2]
    assert alive(spawn.procs) == 3
    assert gauge(metrics, "ocrstream_autoscaler_replicas") == 3
    assert gauge(metrics, "ocrstream_autoscaler_desired_replicas") == 3
    assert gauge(metrics, "ocrstream_autoscaler_lag") == 25
    assert gauge(metrics, "ocrstream_autoscaler_decisions_total", direction="up") == 2

    auto.tick(now=2.0)  # still 25: nothing to do
    assert len(spawn.calls) == 3
    auto.tick(now=3.0)  # idle, but cooling down and stabilised: stay at 3
    assert auto.replicas == 3
    assert gauge(metrics, "ocrstream_autoscaler_lag") == 0
    auto.tick(now=6.0)  # cooldown over, but 3 was recommended within the window (t=2)
    assert auto.replicas == 3
    decision = auto.tick(now=9.0)  # the window holds only recommendations of 1 now
    assert decision is not None
    assert decision.desired == 1
    assert auto.replicas == 1
    wait_exit(spawn.procs[1:])  # the newest two were stopped
    assert [p.returncode for p in spawn.procs[1:]] == [0, 0]  # SIGTERM: drained, exited
    assert spawn.procs[0].poll() is None  # the oldest keeps running
    assert gauge(metrics, "ocrstream_autoscaler_replicas") == 1
    assert gauge(metrics, "ocrstream_autoscaler_desired_replicas") == 1
    assert gauge(metrics, "ocrstream_autoscaler_decisions_total", direction="down") == 1

    auto.shutdown()
    wait_exit(spawn.procs)
    assert gauge(metrics, "ocrstream_autoscaler_replicas") == 0


def test_a_crashed_worker_is_replaced_on_the_next_tick(spawn: FakeSpawn) -> None:
    auto = scaler([15], spawn, Metrics())
    auto.tick(now=0.0)
    assert spawn.calls == [0, 1]
    spawn.procs[0].kill()
    spawn.procs[0].wait()
    auto.tick(now=1.0)
    assert spawn.calls == [0, 1, 0]  # the free index is reused: same metrics port
    assert auto.replicas == 2
    assert alive(spawn.procs) == 2
    auto.shutdown()


def test_unreadable_lag_keeps_the_workers(spawn: FakeSpawn) -> None:
    metrics = Metrics()
    auto = scaler([30, RetriableError("broker away"), 0], spawn, metrics, cooldown_s=0,
                  stabilization_window_s=0)  # fmt: skip
    auto.tick(now=0.0)
    assert auto.replicas == 3
    assert auto.tick(now=100.0) is None  # no lag, no decision
    assert auto.replicas == 3
    assert gauge(metrics, "ocrstream_autoscaler_lag") == 30
    auto.tick(now=200.0)
    assert auto.replicas == 1
    auto.shutdown()


def test_a_draining_worker_keeps_its_index_until_it_has_gone() -> None:
    spawn = FakeSpawn(grace_s=1.5)
    try:
        auto = scaler([20, 0, 20], spawn, Metrics(), cooldown_s=0, stabilization_window_s=0)
        auto.tick(now=0.0)
        assert spawn.calls == [0, 1]
        auto.tick(now=1.0)  # down to 1: worker 1 drains for 1.5 s
        assert auto.replicas == 1
        auto.tick(now=2.0)  # back up at once: index 1 is still taken by the draining worker
        assert spawn.calls == [0, 1, 2]
        wait_exit([spawn.procs[1]])
        assert spawn.procs[1].returncode == 0  # it drained and exited cleanly
        auto.shutdown()
        wait_exit(spawn.procs)
    finally:
        spawn.cleanup()


def test_run_ticks_until_stopped_and_then_stops_every_worker(spawn: FakeSpawn) -> None:
    import threading

    metrics = Metrics()
    auto = scaler([25], spawn, metrics)
    auto.interval_s = 0.05
    stop = threading.Event()
    thread = threading.Thread(target=auto.run, args=(stop,))
    thread.start()
    wait_until(lambda: len(spawn.calls) >= 3, 10, "three workers", interval_s=0.02)
    stop.set()
    thread.join(15)
    assert not thread.is_alive()
    assert spawn.calls == [0, 1, 2]
    assert alive(spawn.procs) == 0
    assert gauge(metrics, "ocrstream_autoscaler_replicas") == 0


_PARENT = """
import sys
from ocrstream.streams.autoscaler import start_tied
child = start_tied([sys.executable, "-c", sys.argv[1], sys.argv[2]])
print(child.pid, flush=True)
import time
time.sleep(60)
"""

_CHILD = """
import pathlib, signal, sys, time
def stop(*_):
    pathlib.Path(sys.argv[1]).write_text("drained")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
pathlib.Path(sys.argv[1] + ".ready").write_text("")
while True:
    time.sleep(0.05)
"""


def test_workers_get_sigterm_when_the_autoscaler_dies(tmp_path: Path) -> None:
    """A crashed (SIGKILLed, aborted) autoscaler must not leave its workers running."""
    marker = tmp_path / "child"
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, _CHILD, str(marker)],
                              stdout=subprocess.PIPE)  # fmt: skip
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    wait_until(Path(f"{marker}.ready").exists, 20, "the worker to be ready", interval_s=0.05)
    parent.kill()
    parent.wait()
    parent.stdout.close()
    wait_until(lambda: marker.exists() and marker.read_text() == "drained", 20,
               "the worker to drain after its autoscaler died", interval_s=0.05)  # fmt: skip
    wait_until(lambda: not pid_alive(child_pid), 10, "the worker to exit", interval_s=0.05)
