"""Background processes for local services: spawn, PID files, ports, stop (TERM, then KILL)."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import psutil

log = logging.getLogger(__name__)


def read_pid(path: Path) -> int | None:
    """The PID in a PID file, or None when the file is missing or unreadable."""
    try:
        return int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def write_pid(path: Path, pid: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{pid}\n", encoding="utf-8")
    tmp.replace(path)


def is_alive(pid: int) -> bool:
    """True when ``pid`` is a running (not zombie) process."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def cmdline_contains(pid: int, marker: str) -> bool:
    """True when the process's command line mentions ``marker`` (how we recognise our own)."""
    try:
        return any(marker in arg for arg in psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """True when something accepts TCP connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        return sock.connect_ex((host, port)) == 0


def port_listener(port: int) -> int | None:
    """The PID listening on ``port`` when it can be seen, else None."""
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                return conn.pid
    except psutil.Error:
        return None
    return None


def describe_pid(pid: int | None) -> str:
    if pid is None:
        return "another process"
    try:
        proc = psutil.Process(pid)
        return f"pid {pid} ({' '.join(proc.cmdline())[:120]})"
    except psutil.Error:
        return f"pid {pid}"


def spawn(
    argv: Sequence[str],
    log_path: Path,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session, detached from the terminal, output appended to a log."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        out.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} start: {argv[0]}\n".encode())
        out.flush()
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            close_fds=True,
        )


def terminate(pid: int, timeout_s: float) -> bool:
    """SIGTERM, wait up to ``timeout_s``, then SIGKILL. True when it had to be killed."""
    try:
        proc = psutil.Process(pid)
        proc.send_signal(signal.SIGTERM)
    except psutil.NoSuchProcess:
        return False
    try:
        proc.wait(timeout=timeout_s)
        return False
    except psutil.TimeoutExpired:
        log.warning("pid %d did not stop within %.0fs; killing it", pid, timeout_s)
    with contextlib.suppress(psutil.NoSuchProcess):
        proc.kill()
        proc.wait(timeout=10)
    return True


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log file, for error messages."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            data = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so two ``infra up``/``down`` never race on one home."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
