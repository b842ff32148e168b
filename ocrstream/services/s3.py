"""An S3-compatible object store for local use: versitygw (Apache-2.0), posix backend.

Built once with ``go install github.com/versity/versitygw/cmd/versitygw@<version>`` and cached
as ``<cache_dir>/bin/versitygw-<version>``. The root credentials come from :class:`S3Settings`
and reach the process through its environment, never its command line or our logs.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ocrstream.services import process
from ocrstream.services.base import LOOPBACK, Launch, Service, ServiceError
from ocrstream.settings import S3Settings, ServicesSettings

log = logging.getLogger(__name__)

VERSITYGW_MODULE = "github.com/versity/versitygw/cmd/versitygw"


def _go() -> str:
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if go is None:
        raise ServiceError(
            "go not found: versitygw is built with `go install` "
            "(install Go 1.22+ from https://go.dev/dl/)"
        )
    return go


class S3Service(Service):
    name = "s3"

    def __init__(self, settings: ServicesSettings, s3: S3Settings) -> None:
        super().__init__(settings)
        self.s3 = s3

    @property
    def ports(self) -> Sequence[int]:
        return (self.settings.s3_port,)

    @property
    def address(self) -> str:
        return f"http://{LOOPBACK}:{self.settings.s3_port}"

    @property
    def binary(self) -> Path:
        return self.settings.cache_dir / "bin" / f"versitygw-{self.settings.versitygw_version}"

    @property
    def data_dir(self) -> Path:
        return self.home / "s3data"

    def prepare(self) -> None:
        """Build versitygw once per version (the Go module and build caches make rebuilds fast)."""
        if self.binary.exists():
            return
        staging = self.binary.parent / f".build-{self.settings.versitygw_version}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        build_log = self.home / "logs" / "versitygw-build.log"
        build_log.parent.mkdir(parents=True, exist_ok=True)
        target = f"{VERSITYGW_MODULE}@{self.settings.versitygw_version}"
        log.info("s3: building %s (once)", target)
        env = {
            **os.environ,
            "GOBIN": str(staging),
            "CGO_ENABLED": "0",
            "GOFLAGS": "-buildvcs=false",
        }
        with open(build_log, "ab") as out:
            result = subprocess.run(
                [_go(), "install", target],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                check=False,
            )
        built = staging / "versitygw"
        if result.returncode != 0 or not built.exists():
            raise ServiceError(
                f"building versitygw failed; see {build_log}:\n{process.tail(build_log)}"
            )
        built.replace(self.binary)
        shutil.rmtree(staging, ignore_errors=True)

    def configure(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)

    def launch(self) -> Launch:
        env = {
            "PATH": os.defpath,
            "ROOT_ACCESS_KEY_ID": self.s3.access_key.get_secret_value(),
            "ROOT_SECRET_ACCESS_KEY": self.s3.secret_key.get_secret_value(),
        }
        argv = [
            str(self.binary),
            "--port",
            f"{LOOPBACK}:{self.settings.s3_port}",
            "--region",
            self.s3.region,
            "--quiet",
            "posix",
            str(self.data_dir),
        ]
        return Launch(argv=argv, env=env, cwd=self.home)

    def probe(self, timeout_s: float) -> str | None:
        """A real, signed S3 request: ListBuckets with the configured keys."""
        if not process.port_open(LOOPBACK, self.settings.s3_port):
            return f"port {self.settings.s3_port} not accepting connections"
        import urllib3
        from minio import Minio
        from minio.error import MinioException

        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s),
            retries=urllib3.Retry(total=0),
        )
        client = Minio(
            f"{LOOPBACK}:{self.settings.s3_port}",
            access_key=self.s3.access_key.get_secret_value(),
            secret_key=self.s3.secret_key.get_secret_value(),
            region=self.s3.region,
            secure=False,
            http_client=http,
        )
        try:
            client.list_buckets()
        except (MinioException, urllib3.exceptions.HTTPError, OSError) as e:
            return f"ListBuckets failed: {type(e).__name__}: {e}"
        finally:
            http.clear()
        return None
