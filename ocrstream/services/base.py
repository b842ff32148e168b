"""What every local service has: a home, a PID file, a log, a readiness probe."""

from __future__ import annotations

import logging
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import ClassVar

from ocrstream.errors import FatalError
from ocrstream.services import process
from ocrstream.settings import ServicesSettings

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


class ServiceError(FatalError):
    """A local service could not be prepared, started or stopped."""

    code = "service_error"


def repo_infra_dir() -> Path:
    """The service configs (Kafka's pom and log4j2 config, Prometheus's config and rules).

    They live in ``infra/`` at the top of the checkout; ``ocrstream/services/infra`` links
    there, and a wheel carries the files themselves at that place (package data), so the same
    path works in a checkout, an editable install and a wheel install.
    """
    return Path(__file__).parent / "infra"


class State(StrEnum):
    UP = "up"  # ours, and it answers
    STARTING = "starting"  # ours and alive, not answering yet
    STOPPED = "stopped"  # not running
    FOREIGN = "foreign"  # its port is held by a process we did not start


@dataclass(frozen=True)
class Status:
    name: str
    state: State
    pid: int | None
    address: str
    detail: str = ""


@dataclass(frozen=True)
class Launch:
    """How to start a service process."""

    argv: Sequence[str]
    env: Mapping[str, str] | None = None
    cwd: Path | None = None


class Service(ABC):
    """One local service. Subclasses say how to prepare, launch and probe it."""

    name: ClassVar[str]

    def __init__(self, settings: ServicesSettings) -> None:
        self.settings = settings
        self.home = settings.home.resolve()

    # -- layout ------------------------------------------------------------------------------
    @property
    def pid_file(self) -> Path:
        return self.home / "run" / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        """stdout and stderr of the process."""
        return self.home / "logs" / f"{self.name}.log"

    @property
    def state_dir(self) -> Path:
        return self.home / self.name

    # -- what subclasses provide -------------------------------------------------------------
    @property
    @abstractmethod
    def ports(self) -> Sequence[int]:
        """Ports the service listens on (all on 127.0.0.1)."""

    @property
    @abstractmethod
    def address(self) -> str:
        """Where clients reach it, for ``infra status``."""

    def prepare(self) -> None:
        """Download, build or install what the service needs (cached; cheap when done)."""
        return None

    def configure(self) -> None:
        """Render configuration and initialise storage under the home folder."""
        return None

    @abstractmethod
    def launch(self) -> Launch:
        """The command that runs the service in the foreground."""

    @abstractmethod
    def probe(self, timeout_s: float) -> str | None:
        """None when the service really answers, else why not."""

    def reconfigure(self) -> None:
        """Apply rendered configuration to the running process, where it can be done live."""
        return None

    # -- lifecycle ---------------------------------------------------------------------------
    def own_pid(self) -> int | None:
        """The PID from our PID file when that process is alive and is ours."""
        pid = process.read_pid(self.pid_file)
        if pid is None:
            return None
        if process.is_alive(pid) and process.cmdline_contains(pid, str(self.home)):
            return pid
        return None

    def check_ports_free(self) -> None:
        for port in self.ports:
            if process.port_open(LOOPBACK, port):
                holder = process.describe_pid(process.port_listener(port))
                raise ServiceError(
                    f"{self.name}: port {port} is already in use by {holder}, which ocrstream "
                    f"did not start (home {self.home}). Stop it, or choose other ports "
                    f"(OCRSTREAM_INFRA_*_PORT)."
                )

    def start(self) -> subprocess.Popen[bytes] | None:
        """Start the process unless ours is already running. Returns the new process, if any."""
        if self.own_pid() is not None:
            self.reconfigure()
            return None
        self.pid_file.unlink(missing_ok=True)
        self.check_ports_free()
        for folder in (self.home / "logs", self.state_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self.configure()
        spec = self.launch()
        proc = process.spawn(spec.argv, self.log_file, cwd=spec.cwd or self.home, env=spec.env)
        process.write_pid(self.pid_file, proc.pid)
        log.info("%s: started pid %d, log %s", self.name, proc.pid, self.log_file)
        return proc

    def wait_ready(self, proc: subprocess.Popen[bytes] | None, deadline: float) -> None:
        """Block until the probe passes; fail early if the process exits."""
        reason: str | None = "not probed"
        while True:
            remaining = deadline - time.monotonic()
            reason = self.probe(timeout_s=max(0.5, min(5.0, remaining)))
            if reason is None:
                return
            if proc is not None and proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise ServiceError(
                    f"{self.name} exited with status {proc.returncode} while starting; "
                    f"last lines of {self.log_file}:\n{process.tail(self.log_file)}"
                )
            if proc is None and self.own_pid() is None:
                raise ServiceError(f"{self.name} is not running (see {self.log_file})")
            if time.monotonic() >= deadline:
                raise ServiceError(
                    f"{self.name} did not answer within {self.settings.start_timeout_s:.0f}s "
                    f"({reason}); see {self.log_file}:\n{process.tail(self.log_file)}"
                )
            time.sleep(0.5)

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """Stop our process (TERM, then KILL). Returns the PID that was stopped, if any."""
        pid = self.own_pid()
        if pid is not None and process.terminate(pid, timeout_s):
            log.warning("%s: pid %d was killed", self.name, pid)
        self.pid_file.unlink(missing_ok=True)
        return pid

    def status(self, timeout_s: float = 3.0) -> Status:
        pid = self.own_pid()
        if pid is None:
            busy = [p for p in self.ports if process.port_open(LOOPBACK, p)]
            if busy:
                holder = process.describe_pid(process.port_listener(busy[0]))
                return Status(
                    self.name, State.FOREIGN, None, self.address, f"port {busy[0]} held by {holder}"
                )
            return Status(self.name, State.STOPPED, None, self.address)
        reason = self.probe(timeout_s)
        if reason is None:
            return Status(self.name, State.UP, pid, self.address)
        return Status(self.name, State.STARTING, pid, self.address, reason)
