"""Local services for development and CI, without Docker: Kafka, an S3 store, Prometheus.

``ocrstream infra up`` prepares each one (Maven jars, a Go build, a Debian package, all cached
in the user's home), starts it under ``ServicesSettings.home`` with a PID file and a log, and
waits until it really answers.
"""

from ocrstream.services.base import Service, ServiceError, State, Status
from ocrstream.services.manager import SERVICE_NAMES, UpResult, build_services, down, status, up

__all__ = [
    "SERVICE_NAMES",
    "Service",
    "ServiceError",
    "State",
    "Status",
    "UpResult",
    "build_services",
    "down",
    "status",
    "up",
]
