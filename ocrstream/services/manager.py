"""Bring the local services up, down, and report on them."""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ocrstream.services.base import Service, ServiceError, Status
from ocrstream.services.kafka import KafkaService
from ocrstream.services.process import file_lock
from ocrstream.services.prometheus import PrometheusService
from ocrstream.services.s3 import S3Service
from ocrstream.settings import S3Settings, ServicesSettings

log = logging.getLogger(__name__)

SERVICE_NAMES: tuple[str, ...] = ("kafka", "s3", "prometheus")


@dataclass(frozen=True)
class UpResult:
    name: str
    started: bool  # False: it was already running
    pid: int | None
    address: str
    seconds: float


def build_services(
    settings: ServicesSettings, s3: S3Settings, names: Iterable[str] | None = None
) -> list[Service]:
    """The services to manage, in start order; ``names`` selects a subset."""
    every: dict[str, Callable[[], Service]] = {
        "kafka": lambda: KafkaService(settings),
        "s3": lambda: S3Service(settings, s3),
        "prometheus": lambda: PrometheusService(settings),
    }
    wanted = list(names) if names else list(SERVICE_NAMES)
    unknown = [n for n in wanted if n not in every]
    if unknown:
        raise ServiceError(
            f"unknown service {', '.join(unknown)}; choose from {', '.join(SERVICE_NAMES)}"
        )
    return [every[n]() for n in SERVICE_NAMES if n in wanted]


def up(
    services: Sequence[Service],
    report: Callable[[UpResult], None] | None = None,
) -> list[UpResult]:
    """Prepare and start every service, then wait until each really answers. Idempotent."""
    if not services:
        return []
    t0 = time.monotonic()
    with file_lock(services[0].home / "run" / "infra.lock"):
        for service in services:
            service.prepare()
        started: list[tuple[Service, subprocess.Popen[bytes] | None, float]] = []
        try:
            for service in services:
                started.append((service, service.start(), time.monotonic()))
        except ServiceError:
            for service, proc, _ in started:
                if proc is not None:
                    service.stop()
            raise
        deadline = time.monotonic() + services[0].settings.start_timeout_s
        results = []
        for service, proc, _ in started:
            service.wait_ready(proc, deadline)
            result = UpResult(
                service.name,
                proc is not None,
                service.own_pid(),
                service.address,
                time.monotonic() - t0,
            )
            results.append(result)
            if report is not None:
                report(result)
        return results


def down(services: Sequence[Service], timeout_s: float = 30.0) -> list[tuple[str, int | None]]:
    """Stop our processes, in reverse start order. Returns (name, stopped pid or None)."""
    if not services:
        return []
    with file_lock(services[0].home / "run" / "infra.lock"):
        return [(s.name, s.stop(timeout_s)) for s in reversed(services)]


def status(services: Sequence[Service]) -> list[Status]:
    return [s.status() for s in services]
