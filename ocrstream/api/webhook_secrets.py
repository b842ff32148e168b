"""Tenants' webhook signing secrets: one per tenant, shown once, kept readable for signing.

An API key is only ever compared, so only its hash is kept (:mod:`ocrstream.api.keys`). A
signing secret is different: the webhook agent computes HMAC-SHA256 *with* it on every
delivery, so the secret itself must be stored. How it is protected:

- it lives in its own file (``WebhookSettings.secrets_file``), written atomically with mode
  0600, apart from the API keys: the API replicas never need it, only the webhook agent and
  the operator's CLI do, so in Kubernetes it is a Secret mounted into the webhook agent alone;
- it is never written to a topic, a log line, a metric or a dead letter; in memory it is a
  :class:`~pydantic.SecretStr` until the moment it signs;
- it is 32 random bytes, printed once when made (``ocrstream api keys create`` for a tenant
  that has none, ``ocrstream api keys secret`` to rotate); a leaked one is replaced by
  rotating it, which takes effect at the agent's next delivery (the file is re-read when its
  modification time changes).

Encrypting the file with a key kept beside it would add no protection; a deployment that
wants envelope encryption mounts the file from its secret manager.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path

from pydantic import SecretStr

from ocrstream.api.keys import validate_tenant

SECRET_PREFIX = "whsec_"


class SecretFile:
    """``{"tenants": {tenant: {"secret", "created_at"}}}``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._mtime: int | None = None
        self._secrets: dict[str, SecretStr] = {}

    def _read(self) -> dict[str, dict[str, str]]:
        try:
            body = json.loads(self.path.read_text(encoding="utf-8"))
            tenants: dict[str, dict[str, str]] = body["tenants"]
        except FileNotFoundError:
            return {}
        return tenants

    def _write(self, tenants: dict[str, dict[str, str]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".webhook-secrets-")
        os.fchmod(fd, 0o600)  # before a byte of a secret is in it
        with os.fdopen(fd, "w") as f:
            json.dump({"tenants": tenants}, f, indent=1)
        os.replace(tmp, self.path)

    def rotate(self, tenant: str) -> str:
        """A new secret for ``tenant``, replacing its old one; returned once."""
        validate_tenant(tenant)
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        tenants = self._read()
        tenants[tenant] = {"secret": secret, "created_at": datetime.now(UTC).isoformat()}
        self._write(tenants)
        return secret

    def ensure(self, tenant: str) -> str | None:
        """A new secret for ``tenant`` if it has none (returned once), else None."""
        validate_tenant(tenant)
        if tenant in self._read():
            return None
        return self.rotate(tenant)

    def secret(self, tenant: str) -> SecretStr | None:
        """The tenant's secret, or None when it has none."""
        with self._lock:
            try:
                mtime = self.path.stat().st_mtime_ns
            except FileNotFoundError:
                self._mtime, self._secrets = None, {}
                return None
            if mtime != self._mtime:
                self._secrets = {t: SecretStr(e["secret"]) for t, e in self._read().items()}
                self._mtime = mtime
            return self._secrets.get(tenant)
