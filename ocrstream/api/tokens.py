"""Short-lived tokens for a document's event stream, for clients that cannot send a header.

A browser's ``EventSource`` sends no ``Authorization`` header, and an API key must never go into
a URL (URLs end up in access logs, histories and proxies). So the web UI asks, with its key,
``POST /v1/documents/{doc_id}/events/token`` and gets a token that names the tenant, that one
document and an expiry, signed with HMAC-SHA256 under ``ApiSettings.token_secret``;
``GET /v1/documents/{doc_id}/events?token=…`` accepts it instead of the key, for that document
only, until it expires. The expiry is checked when a stream opens: a stream already open goes
on, and a reconnect after the expiry gets 401 and a fresh token.

Stateless: nothing is stored, any replica that has the same secret checks a token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

_CONTEXT = b"ocrstream events token v1\n"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class EventTokens:
    """Issues and checks event-stream tokens: ``payload.signature``, both base64url, the
    payload ``{"t": tenant, "d": doc_id, "e": expiry in Unix seconds}``."""

    secret: bytes
    ttl_s: float = 300.0

    @classmethod
    def with_secret(cls, secret: str, ttl_s: float) -> EventTokens:
        """Tokens under ``secret``; an empty one gets a random secret (valid in this process
        only)."""
        return cls(secret.encode() if secret else secrets.token_bytes(32), ttl_s)

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self.secret, _CONTEXT + payload.encode(), hashlib.sha256).digest())

    def issue(self, tenant: str, doc_id: str, now: float | None = None) -> tuple[str, int]:
        """A token for ``tenant``'s ``doc_id`` and its expiry (Unix seconds)."""
        expires = int((time.time() if now is None else now) + self.ttl_s)
        body = json.dumps({"t": tenant, "d": doc_id, "e": expires}, separators=(",", ":"))
        payload = _b64(body.encode())
        return f"{payload}.{self._sign(payload)}", expires

    def tenant(self, token: str, doc_id: str, now: float | None = None) -> str | None:
        """The tenant a valid, unexpired token for ``doc_id`` names; None for anything else."""
        payload, _, signature = token.partition(".")
        if not payload or not signature or len(token) > 2048:
            return None
        if not hmac.compare_digest(signature.encode(), self._sign(payload).encode()):
            return None
        try:
            body = json.loads(_unb64(payload))
            tenant, doc, expires = body["t"], body["d"], body["e"]
        except (ValueError, KeyError, TypeError):
            return None
        if doc != doc_id or not isinstance(tenant, str) or not isinstance(expires, int):
            return None
        if expires <= (time.time() if now is None else now):
            return None
        return tenant
