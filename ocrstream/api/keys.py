"""Tenants' API keys: a key is shown once, only its SHA-256 is kept.

The hashes live in one JSON file (``ApiSettings.keys_file``), not on a compacted topic: keys
change rarely and by an operator, the file is what a Kubernetes Secret or a config volume
mounts into every replica, and authenticating a request then needs neither Kafka nor a
consumer that has caught up — the API answers 401/200 correctly even while the broker is away.
Replicas re-read the file when its modification time changes, so a new key works without a
restart. A key is 32 random bytes, so a plain SHA-256 (not a slow password hash) is enough:
nothing short enough to guess is ever stored.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import tempfile
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

KEY_PREFIX = "ocs_"
_TENANT = re.compile(r"[A-Za-z0-9._-]{1,64}")


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def validate_tenant(tenant: str) -> str:
    if not _TENANT.fullmatch(tenant):
        raise ValueError(f"tenant must be 1-64 of A-Z a-z 0-9 . _ -, got {tenant!r}")
    return tenant


@dataclass(frozen=True, slots=True)
class KeyEntry:
    sha256: str
    tenant: str
    created_at: str


class KeyFile:
    """The key file: ``{"keys": [{"sha256", "tenant", "created_at"}, …]}``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._mtime: int | None = None
        self._tenants: dict[str, str] = {}

    def _read(self) -> list[KeyEntry]:
        try:
            body = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        return [KeyEntry(e["sha256"], e["tenant"], e.get("created_at", "")) for e in body["keys"]]

    def create(self, tenant: str) -> str:
        """A new key for ``tenant``; the file gets its hash (written atomically, mode 0600)."""
        validate_tenant(tenant)
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        entries = self._read()
        entries.append(KeyEntry(hash_key(key), tenant, datetime.now(UTC).isoformat()))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".api-keys-")
        with os.fdopen(fd, "w") as f:
            json.dump({"keys": [_entry(e) for e in entries]}, f, indent=1)
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.path)
        return key

    def tenant(self, key: str) -> str | None:
        """The tenant of ``key``, or None for an unknown key."""
        digest = hash_key(key)
        with self._lock:
            self._refresh()
            found = self._tenants.get(digest)
        # Looked up by its hash: the key itself is never compared, so how long the lookup takes
        # says nothing about how much of a guessed key was right.
        return found

    def _refresh(self) -> None:
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            self._mtime, self._tenants = None, {}
            return
        if mtime != self._mtime:
            self._tenants = {e.sha256: e.tenant for e in self._read()}
            self._mtime = mtime


def _entry(e: KeyEntry) -> dict[str, str]:
    return {"sha256": e.sha256, "tenant": e.tenant, "created_at": e.created_at}
