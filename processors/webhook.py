"""Webhooks, the pure part: which callback URLs may be called, what is sent, when to retry.

- :func:`check_callback_url` is the guard against server-side request forgery. A callback
  names a host; the host is resolved and *every* address it resolves to must be global (not
  loopback, private, shared, link-local, multicast, reserved or unspecified, IPv4-mapped
  IPv6 addresses judged as the IPv4 address they carry) unless it lies in a network the
  settings allow. It runs at submission (``ocrstream api`` answers 422) and again before every
  delivery, whose connection then goes to the very address that was checked, so a name that
  resolves elsewhere later (DNS rebinding) cannot send the agent inside.
- :func:`body` is the DocumentEvent as JSON, :func:`signature` its HMAC-SHA256 under the
  tenant's secret, :func:`delivery_id` the idempotency id: one per doc_id and revision, the
  same on every attempt.
- :func:`backoff_s` is the retry schedule, :func:`classify` what an answer means.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import socket
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from enum import Enum, StrEnum
from typing import Any
from urllib.parse import urlsplit

from ocrstream.errors import PoisonError
from ocrstream.schemas.records import DocumentEvent

#: The ScanSubmitted attribute that carries a document's callback URL to its DocumentEvent
#: (attributes pass through the pipeline unchanged); names under ``ocrstream.`` are reserved.
CALLBACK_ATTRIBUTE = "ocrstream.callback_url"
RESERVED_ATTRIBUTE_PREFIX = "ocrstream."
MAX_URL_CHARS = 2048
SIGNATURE_HEADER = "X-Ocrstream-Signature"
DELIVERY_HEADER = "X-Ocrstream-Delivery"

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolve = Callable[[str, int], Sequence[str]]


class CallbackRefusedError(PoisonError):
    """A callback URL that must not be called (scheme, form, or where its host resolves)."""

    code = "callback_not_allowed"


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (an IP literal resolves to itself)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise CallbackRefusedError(f"the callback host {host!r} does not resolve: {e}") from e
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def networks(cidrs: Iterable[str]) -> tuple[IpNetwork, ...]:
    return tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)


def address_allowed(address: str, allowed: Sequence[IpNetwork] = ()) -> bool:
    """A global unicast address, or one in ``allowed``."""
    ip: IpAddress = ipaddress.ip_address(address.split("%", 1)[0])  # no IPv6 zone id
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if any(ip.version == net.version and ip in net for net in allowed):
        return True
    return ip.is_global and not ip.is_multicast


class Target:
    """Where a callback goes: the URL's parts and the checked addresses to connect to."""

    __slots__ = ("addresses", "host", "path", "port", "scheme", "url")

    def __init__(self, url: str, scheme: str, host: str, port: int, path: str,
                 addresses: tuple[str, ...]) -> None:  # fmt: skip
        self.url, self.scheme, self.host, self.port = url, scheme, host, port
        self.path, self.addresses = path, addresses

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def check_callback_url(
    url: str,
    *,
    allow_http: bool = False,
    allowed: Sequence[IpNetwork] = (),
    resolver: Resolve = resolve,
) -> Target:
    """The target of ``url`` if it may be called; :class:`CallbackRefusedError` saying why not."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL_CHARS:
        raise CallbackRefusedError(f"callback_url must be a URL of 1-{MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise CallbackRefusedError(f"callback_url is no URL: {e}") from e
    schemes = ("https", "http") if allow_http else ("https",)
    if parts.scheme not in schemes:
        raise CallbackRefusedError(f"callback_url must be {' or '.join(schemes)}")
    if parts.username is not None or parts.password is not None:
        raise CallbackRefusedError("callback_url must not carry credentials")
    host = parts.hostname
    if not host or any(c.isspace() for c in url):
        raise CallbackRefusedError("callback_url has no host")
    port = port or (443 if parts.scheme == "https" else 80)
    addresses = tuple(resolver(host, port))
    if not addresses:
        raise CallbackRefusedError(f"the callback host {host!r} does not resolve")
    refused = [a for a in addresses if not address_allowed(a, allowed)]
    if refused:
        raise CallbackRefusedError(
            f"the callback host {host!r} resolves to {', '.join(refused)}: loopback, private, "
            "link-local, multicast and reserved addresses are not called"
        )
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(url, parts.scheme, host, port, path, addresses)


# --- what is sent -------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def body(event: DocumentEvent) -> bytes:
    """The event as the receiver gets it: every DocumentEvent field, times in ISO 8601."""
    return json.dumps(_plain(event.to_avro()), separators=(",", ":"), sort_keys=True).encode()


def signature(secret: str, payload: bytes) -> str:
    """The ``X-Ocrstream-Signature`` value: ``sha256=`` and the hex HMAC-SHA256."""
    return "sha256=" + hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()


def verify(secret: str, payload: bytes, header: str) -> bool:
    """What a receiver does (in constant time)."""
    return hmac.compare_digest(signature(secret, payload), header)


def delivery_id(doc_id: str, revision: int = 1) -> str:
    """The idempotency id of a document's webhook: the same on every attempt and replay."""
    return hashlib.sha256(f"{doc_id}\x00{revision}".encode()).hexdigest()[:32]


def callback_of(event: DocumentEvent) -> str | None:
    return event.attributes.get(CALLBACK_ATTRIBUTE) or None


# --- when to retry ------------------------------------------------------------------------------


class Verdict(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"  # worth trying again later
    REJECTED = "rejected"  # the receiver said no for good: no retry


# 408 Request Timeout, 409 Conflict, 425 Too Early, 429 Too Many Requests: try again later.
_RETRIABLE_4XX = frozenset({408, 409, 425, 429})


def classify(status: int) -> Verdict:
    """2xx delivered; 5xx and the retriable 4xx again later; other 4xx (410 Gone, 404, 401 …)
    and 3xx (redirects are not followed: they could lead anywhere) rejected."""
    if 200 <= status < 300:
        return Verdict.DELIVERED
    if status >= 500 or status in _RETRIABLE_4XX:
        return Verdict.RETRY
    return Verdict.REJECTED


def backoff_s(attempt: int, *, base_s: float, max_s: float, jitter: float, rand: float) -> float:
    """How long to wait after failed attempt number ``attempt`` (1 = the first): doubling from
    ``base_s`` up to ``max_s``, times a factor in ``[1 - jitter, 1]`` (``rand`` in [0, 1)),
    so receivers that failed together are not retried together."""
    exponent = min(max(attempt, 1) - 1, 62)
    delay = min(max_s, base_s * 2.0**exponent)
    return float(delay * (1.0 - jitter * rand))


def schedule(*, base_s: float, max_s: float, window_s: float, jitter: float = 0.0) -> list[float]:
    """The waits of a whole delivery without jitter (``rand`` 0), as long as they fit the window:
    for docs and tests."""
    waits: list[float] = []
    total = 0.0
    attempt = 1
    while True:
        wait = backoff_s(attempt, base_s=base_s, max_s=max_s, jitter=jitter, rand=0.0)
        if total + wait > window_s:
            return waits
        waits.append(wait)
        total += wait
        attempt += 1
