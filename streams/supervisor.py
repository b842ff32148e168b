"""``ocrstream all``: run every agent as a child process and keep it running.

Each agent (splitter, N OCR workers, assembler, lag exporter) is a subprocess running the
same ``ocrstream`` command, so a crash (or an OOM kill) takes down one agent, not the rest.
One that exits unexpectedly is restarted after a backoff that doubles on every crash up to a
maximum and resets once it stayed up for a minute. SIGTERM/SIGINT are forwarded to the
children, which drain and commit; one that does not stop within ``stop_timeout_s`` is killed.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ocrstream.settings import SupervisorSettings, WorkerSettings

log = logging.getLogger(__name__)

STABLE_AFTER_S = 60.0

_PR_SET_PDEATHSIG = 1


def terminate_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child sent SIGTERM when this process dies (Linux): a
    supervisor or autoscaler that is killed (SIGKILL, an OOM kill; librdkafka can abort a process
    on a broker restart) leaves no agents behind, still in their consumer groups, for its
    restarted successor to double. None where prctl is unavailable. Linux ties the signal to the
    thread that started the child: start children from a thread that outlives them."""
    prctl = _prctl()  # resolved here, not after fork
    if prctl is None:
        return None
    parent = os.getpid()
    return lambda: _tie(prctl, parent)


def terminate_with(parent: int) -> bool:
    """Called in a child (a ``multiprocessing`` one, say): have Linux send it SIGTERM when
    ``parent``, the process that started it, dies, so that killing a run's parent does not
    leave its children running (and competing for the CPU with whatever runs next). False
    where prctl is unavailable."""
    prctl = _prctl()
    if prctl is None:
        return False
    _tie(prctl, parent)
    return True


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


def _tie(prctl: Callable[..., int], parent: int) -> None:
    prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def start_tied(argv: list[str], env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a child that is sent SIGTERM (and so drains and commits) when this process dies."""
    return subprocess.Popen(argv, env=dict(env) if env else None,
                            preexec_fn=terminate_with_parent())  # fmt: skip


@dataclass(frozen=True)
class AgentSpec:
    """One child: a name and the ``ocrstream`` arguments (and extra environment) to run it."""

    name: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


def terminate_all(procs: Sequence[subprocess.Popen[bytes]], timeout_s: float) -> None:
    """SIGTERM every process that still runs, wait up to ``timeout_s`` in all for them to drain
    and exit, kill what is left."""
    live = [p for p in procs if p.poll() is None]
    for proc in live:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for proc in live:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("pid %d did not stop in time; killing it", proc.pid)
            proc.kill()
            proc.wait()


def ocrstream_command(args: Sequence[str]) -> list[str]:
    """The command line that runs ``ocrstream ARGS`` with this interpreter."""
    return [sys.executable, "-m", "ocrstream", *args]


def default_agents(
    workers: int,
    worker_settings: WorkerSettings | None = None,
    *,
    accurate: int = 0,
    shadow: int = 0,
) -> list[AgentSpec]:
    """The splitter, ``workers`` OCR workers (metrics on consecutive ports), the assembler and
    the lag exporter; ``accurate`` workers of the accurate pool (and then routing on for the
    primary workers) and ``shadow`` shadow workers (and the comparer) on the ports after them."""
    base = (worker_settings or WorkerSettings()).metrics_port
    routing = {"OCRSTREAM_ROUTING_ENABLED": "true"} if accurate else {}
    specs = [AgentSpec("splitter", ("splitter",))]
    specs += [
        AgentSpec(f"ocr-worker-{i}", ("ocr-worker", "--metrics-port", str(base + i)), routing)
        for i in range(workers)
    ]
    port = base + workers
    specs += [
        AgentSpec(f"ocr-worker-accurate-{i}",
                  ("ocr-worker", "--pool", "accurate", "--metrics-port", str(port + i)))
        for i in range(accurate)
    ]  # fmt: skip
    port += accurate
    specs += [
        AgentSpec(f"ocr-worker-shadow-{i}", ("ocr-worker", "--shadow", "--metrics-port",
                                             str(port + i)))
        for i in range(shadow)
    ]  # fmt: skip
    specs += [AgentSpec("assembler", ("assembler",)), AgentSpec("lag-exporter", ("lag-exporter",))]
    if shadow:
        specs.append(AgentSpec("shadow-comparer", ("shadow", "compare")))
    return specs


@dataclass
class _Child:
    spec: AgentSpec
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    crashes: int = 0
    restart_at: float = 0.0


class Supervisor:
    """Start, watch and stop the agents. :meth:`run` blocks until :meth:`stop` is called."""

    def __init__(
        self,
        specs: Sequence[AgentSpec],
        settings: SupervisorSettings | None = None,
        *,
        env: Mapping[str, str] | None = None,
        stdout: int | None = None,
    ) -> None:
        self.settings = settings or SupervisorSettings()
        self.env = dict(os.environ if env is None else env)
        self.stdout = stdout
        self.children = [_Child(spec) for spec in specs]
        self._stop = threading.Event()
        self.restarts = 0

    def _start(self, child: _Child) -> None:
        env = {**self.env, **child.spec.env}
        child.proc = subprocess.Popen(
            ocrstream_command(child.spec.args), env=env, stdout=self.stdout,
            stderr=subprocess.STDOUT if self.stdout is not None else None,
            preexec_fn=terminate_with_parent(),
        )  # fmt: skip
        child.started_at = time.monotonic()
        log.info("started %s (pid %d)", child.spec.name, child.proc.pid)

    def start(self) -> None:
        for child in self.children:
            self._start(child)

    def check(self) -> None:
        """Restart children that exited, after their backoff."""
        now = time.monotonic()
        for child in self.children:
            proc = child.proc
            if proc is not None and proc.poll() is None:
                if child.crashes and now - child.started_at > STABLE_AFTER_S:
                    child.crashes = 0
                continue
            if proc is not None:
                code = proc.returncode
                child.proc = None
                child.crashes += 1
                delay = min(
                    self.settings.restart_backoff_max_s,
                    self.settings.restart_backoff_s * 2 ** (child.crashes - 1),
                )
                child.restart_at = now + delay
                log.warning("%s exited with %s; restarting in %.1fs", child.spec.name, code, delay)
            if child.proc is None and now >= child.restart_at and not self._stop.is_set():
                self._start(child)
                self.restarts += 1

    def run(self) -> None:
        if not any(c.proc for c in self.children):
            self.start()
        try:
            while not self._stop.wait(0.5):
                self.check()
        finally:
            self.shutdown()

    def stop(self) -> None:
        self._stop.set()

    def shutdown(self) -> None:
        """SIGTERM every child, wait for them to drain, kill what's left."""
        self._stop.set()
        terminate_all([c.proc for c in self.children if c.proc is not None],
                      self.settings.stop_timeout_s)  # fmt: skip

    def pids(self) -> dict[str, int]:
        return {c.spec.name: c.proc.pid for c in self.children if c.proc is not None}
