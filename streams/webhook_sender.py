"""One webhook attempt over HTTP: check the callback again, sign, POST, judge the answer.

The callback URL is checked against the SSRF rules (:func:`ocrstream.processors.webhook.
check_callback_url`) before every attempt, and the connection goes to an address that check
just approved — the URL's host name is kept for the ``Host`` header, TLS's server name and the
certificate check — so a name that resolves to an inside address by the time of delivery
(DNS rebinding) is refused, and one that changes between the check and the connection is
never looked up twice. Redirects are not followed; an answer's body is read up to 64 KiB and
thrown away.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import urllib3
from urllib3.exceptions import HTTPError, NewConnectionError

from ocrstream import __version__
from ocrstream.api.webhook_secrets import SecretFile
from ocrstream.processors import webhook
from ocrstream.processors.webhook import CallbackRefusedError, IpNetwork, Resolve, Verdict
from ocrstream.settings import WebhookSettings

log = logging.getLogger(__name__)

MAX_ANSWER_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt came to; ``code`` is the dead letter's error code when not retried."""

    verdict: Verdict
    detail: str
    code: str = ""
    status: int | None = None
    seconds: float = 0.0


class Sender:
    """Delivers one event to one callback; thread-safe (one connection pool per attempt)."""

    def __init__(
        self, settings: WebhookSettings, secrets: SecretFile, *, resolver: Resolve = webhook.resolve
    ) -> None:
        self.settings = settings
        self.secrets = secrets
        self.resolver = resolver
        self.allowed: Sequence[IpNetwork] = webhook.networks(settings.allowed_networks)
        self.ca_certs = str(settings.ca_bundle) if settings.ca_bundle is not None else None

    def deliver(self, payload: bytes, callback: str, tenant: str, delivery: str,
                attempt: int) -> Outcome:  # fmt: skip
        started = time.perf_counter()
        secret = self.secrets.secret(tenant)
        if secret is None:
            return Outcome(Verdict.REJECTED, f"tenant {tenant!r} has no webhook secret",
                           "webhook_no_secret")  # fmt: skip
        try:
            target = webhook.check_callback_url(
                callback, allow_http=self.settings.allow_http, allowed=self.allowed,
                resolver=self.resolver,
            )  # fmt: skip
        except CallbackRefusedError as e:
            return Outcome(Verdict.REJECTED, str(e), e.code)
        headers = {
            "Host": target.host_header,
            "Content-Type": "application/json",
            "User-Agent": f"ocrstream-webhooks/{__version__}",
            webhook.SIGNATURE_HEADER: webhook.signature(secret.get_secret_value(), payload),
            webhook.DELIVERY_HEADER: delivery,
            "X-Ocrstream-Attempt": str(attempt),
        }
        timeout = urllib3.Timeout(connect=self.settings.timeout_s, read=self.settings.timeout_s)
        last = "no address"
        for address in target.addresses:
            pool: urllib3.HTTPConnectionPool
            if target.scheme == "https":
                pool = urllib3.HTTPSConnectionPool(
                    address, target.port, timeout=timeout, retries=False, maxsize=1,
                    server_hostname=target.host, assert_hostname=target.host,
                    cert_reqs="CERT_REQUIRED", ca_certs=self.ca_certs,
                )  # fmt: skip
            else:
                pool = urllib3.HTTPConnectionPool(address, target.port, timeout=timeout,
                                                  retries=False, maxsize=1)  # fmt: skip
            try:
                with pool:
                    answer = pool.urlopen("POST", target.path, body=payload, headers=headers,
                                          redirect=False, preload_content=False,
                                          assert_same_host=False)  # fmt: skip
                    answer.read(MAX_ANSWER_BYTES)
                    answer.release_conn()
            except NewConnectionError as e:
                last = f"cannot connect to {address}: {e}"
                continue  # another address of the host may answer
            except (HTTPError, OSError) as e:
                return Outcome(Verdict.RETRY, f"{type(e).__name__}: {e}", "webhook_failed",
                               seconds=time.perf_counter() - started)  # fmt: skip
            verdict = webhook.classify(answer.status)
            code = "webhook_rejected" if verdict is Verdict.REJECTED else "webhook_failed"
            return Outcome(verdict, f"HTTP {answer.status}", code, answer.status,
                           time.perf_counter() - started)  # fmt: skip
        return Outcome(Verdict.RETRY, last, "webhook_failed",
                       seconds=time.perf_counter() - started)  # fmt: skip
