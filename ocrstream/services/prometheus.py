"""Prometheus from the Debian package, run as our own process with our scrape config.

The source config is ``infra/prometheus/prometheus.yml``; it is rendered into the home folder
with rule files made absolute and the self-scrape target on the configured port.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ocrstream.services import process
from ocrstream.services.base import LOOPBACK, Launch, Service, ServiceError, repo_infra_dir

log = logging.getLogger(__name__)

# Where each agent serves /metrics on one machine (the scrape config follows this table).
# OCR workers take consecutive ports from 9110: worker i listens on 9110 + i.
METRICS_PORTS: dict[str, int] = {
    "splitter": 9101,
    "assembler": 9102,
    "lag-exporter": 9103,
    "autoscaler": 9104,
    "webhooks": 9105,
    "ocr-worker": 9110,
    "shadow-comparer": 9106,
    # The HTTP API serves /metrics on its own port (ApiSettings.port, OCRSTREAM_API_PORT).
    "api": 8080,
}
MAX_LOCAL_OCR_WORKERS = 10
# One set of agents at a time on those ports: a test or benchmark that runs agents on them
# holds this lock (``ocrstream.services.process.file_lock``) for as long as they run.
METRICS_PORTS_LOCK = Path(tempfile.gettempdir()) / "ocrstream-metrics-ports.lock"

_DEBIAN_BINARY = Path("/usr/bin/prometheus")


def render_prometheus_config(source: str, config_dir: Path, prometheus_port: int) -> str:
    """The config Prometheus runs with: ``source`` with paths resolved against ``config_dir``.

    Relative ``rule_files`` become absolute (the rendered file lives elsewhere) and the
    ``prometheus`` job scrapes the port this instance listens on.
    """
    config: dict[str, Any] = yaml.safe_load(source) or {}
    config["rule_files"] = [
        pattern if os.path.isabs(pattern) else str(config_dir / pattern)
        for pattern in config.get("rule_files") or []
    ]
    for job in config.get("scrape_configs") or []:
        if job.get("job_name") == "prometheus":
            job["static_configs"] = [{"targets": [f"{LOOPBACK}:{prometheus_port}"]}]
    header = f"# Rendered by `ocrstream infra up` from {config_dir}/prometheus.yml; do not edit.\n"
    return header + yaml.safe_dump(config, sort_keys=False)


class PrometheusService(Service):
    name = "prometheus"

    @property
    def ports(self) -> Sequence[int]:
        return (self.settings.prometheus_port,)

    @property
    def address(self) -> str:
        return f"http://{LOOPBACK}:{self.settings.prometheus_port}"

    @property
    def config_file(self) -> Path:
        return self.state_dir / "prometheus.yml"

    @property
    def source_dir(self) -> Path:
        return repo_infra_dir() / "prometheus"

    def _binary(self) -> str | None:
        found = shutil.which("prometheus")
        if found:
            return found
        return str(_DEBIAN_BINARY) if _DEBIAN_BINARY.exists() else None

    def prepare(self) -> None:
        """Install the Debian package when Prometheus is missing (needs root)."""
        if self._binary() is not None:
            return
        apt = shutil.which("apt-get")
        if apt is None or os.geteuid() != 0:
            raise ServiceError(
                "prometheus not found: install it (apt-get install prometheus) "
                "or put a prometheus binary on PATH"
            )
        build_log = self.home / "logs" / "apt.log"
        build_log.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = [apt, "install", "-y", "-q", "--no-install-recommends", "prometheus"]
        log.info("prometheus: installing the Debian package (once)")
        with open(build_log, "ab") as out:

            def run(argv: list[str]) -> int:
                return subprocess.run(
                    argv, stdout=out, stderr=subprocess.STDOUT, env=env, check=False
                ).returncode

            if run(install) != 0 and (run([apt, "update", "-q"]) != 0 or run(install) != 0):
                raise ServiceError(
                    f"apt-get install prometheus failed; see {build_log}:\n"
                    f"{process.tail(build_log)}"
                )

    def _render(self) -> bool:
        """Write the rendered config; True when it changed."""
        source = self.source_dir / "prometheus.yml"
        if not source.exists():
            raise ServiceError(f"{source} is missing")
        text = render_prometheus_config(
            source.read_text(encoding="utf-8"), self.source_dir, self.settings.prometheus_port
        )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.config_file.exists() and self.config_file.read_text(encoding="utf-8") == text:
            return False
        self.config_file.write_text(text, encoding="utf-8")
        return True

    def configure(self) -> None:
        self._render()
        (self.state_dir / "data").mkdir(parents=True, exist_ok=True)

    def reconfigure(self) -> None:
        """Reload a running Prometheus when the scrape config changed (--web.enable-lifecycle)."""
        if not self._render():
            return
        request = urllib.request.Request(f"{self.address}/-/reload", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10):
                log.info("prometheus: configuration reloaded")
        except (urllib.error.URLError, OSError) as e:
            log.warning("prometheus: reload failed (%s); restart with `infra down prometheus`", e)

    def launch(self) -> Launch:
        binary = self._binary()
        if binary is None:
            raise ServiceError("prometheus not found")
        return Launch(
            argv=[
                binary,
                f"--config.file={self.config_file}",
                f"--storage.tsdb.path={self.state_dir / 'data'}",
                "--storage.tsdb.retention.time=7d",
                f"--web.listen-address={LOOPBACK}:{self.settings.prometheus_port}",
                "--web.enable-lifecycle",
                "--log.level=info",
            ],
            cwd=self.state_dir,
        )

    def probe(self, timeout_s: float) -> str | None:
        try:
            with urllib.request.urlopen(f"{self.address}/-/ready", timeout=timeout_s) as resp:
                if resp.status == 200:
                    return None
                return f"/-/ready answered {resp.status}"
        except urllib.error.HTTPError as e:
            return f"/-/ready answered {e.code}"
        except (urllib.error.URLError, OSError) as e:
            return f"/-/ready failed: {e}"
