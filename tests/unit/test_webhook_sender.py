"""One webhook attempt against real HTTP and HTTPS servers on loopback (no broker): the
connection goes to the address the SSRF check approved while TLS checks the URL's host name,
redirects are not followed, timeouts and refusals are judged as the agent needs them."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ocrstream.api.webhook_secrets import SecretFile
from ocrstream.processors import webhook
from ocrstream.processors.webhook import Verdict
from ocrstream.settings import WebhookSettings
from ocrstream.streams.webhook_sender import Sender

PAYLOAD = b'{"doc_id":"d1","status":"completed"}'


@dataclass
class Server:
    port: int
    seen: list[dict[str, str]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)


def serve(answers: dict[str, tuple[int, dict[str, str], float]],
          context: ssl.SSLContext | None = None) -> tuple[Server, ThreadingHTTPServer]:  # fmt: skip
    """A server that answers each path with (status, headers, delay before answering)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            found.seen.append({k.lower(): v for k, v in self.headers.items()} | {"path": self.path})
            found.bodies.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            status, headers, delay = answers.get(self.path, (200, {}, 0.0))
            time.sleep(delay)
            self.send_response(status)
            for k, v in {**headers, "Content-Length": "0"}.items():
                self.send_header(k, v)
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if context is not None:
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    found = Server(httpd.server_address[1])
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return found, httpd


def to_loopback(_host: str, _port: int) -> Sequence[str]:
    return ["127.0.0.1"]


@pytest.fixture
def secrets(tmp_path: Path) -> SecretFile:
    found = SecretFile(tmp_path / "secrets.json")
    found.rotate("acme")
    return found


def sender(secrets: SecretFile, **settings: Any) -> Sender:
    base = {"allow_http": True, "allowed_networks": ("127.0.0.0/8",), "timeout_s": 2.0}
    return Sender(WebhookSettings(**{**base, **settings}), secrets, resolver=to_loopback)


@pytest.fixture
def plain() -> Iterator[Server]:
    answers = {"/gone": (410, {}, 0.0), "/moved": (302, {"Location": "http://10.0.0.1/"}, 0.0),
               "/busy": (503, {}, 0.0), "/slow": (200, {}, 3.0)}  # fmt: skip
    server, httpd = serve(answers)
    yield server
    httpd.shutdown()
    httpd.server_close()


def test_a_delivery_is_signed_and_goes_to_the_checked_address(
    plain: Server, secrets: SecretFile
) -> None:
    url = f"http://hooks.test:{plain.port}/ok?x=1"
    outcome = sender(secrets).deliver(PAYLOAD, url, "acme", "abc123", 2)
    assert outcome.verdict is Verdict.DELIVERED
    assert outcome.status == 200
    assert outcome.seconds > 0
    (headers,) = plain.seen
    assert headers["path"] == "/ok?x=1"
    assert headers["host"] == f"hooks.test:{plain.port}"  # the URL's name, not the address
    assert headers["x-ocrstream-delivery"] == "abc123"
    assert headers["x-ocrstream-attempt"] == "2"
    secret = secrets.secret("acme")
    assert secret is not None
    assert webhook.verify(secret.get_secret_value(), plain.bodies[0],
                          headers["x-ocrstream-signature"])  # fmt: skip


@pytest.mark.parametrize(
    ("path", "verdict", "code"),
    [("/gone", Verdict.REJECTED, "webhook_rejected"), ("/moved", Verdict.REJECTED,
     "webhook_rejected"), ("/busy", Verdict.RETRY, "webhook_failed"),
     ("/slow", Verdict.RETRY, "webhook_failed")],
)  # fmt: skip
def test_answers_that_are_no_delivery(
    plain: Server, secrets: SecretFile, path: str, verdict: Verdict, code: str
) -> None:
    outcome = sender(secrets, timeout_s=0.5).deliver(PAYLOAD, f"http://127.0.0.1:{plain.port}{path}",
                                                     "acme", "id", 1)  # fmt: skip
    assert (outcome.verdict, outcome.code) == (verdict, code)
    assert len(plain.seen) == 1  # the redirect was not followed


def test_nothing_is_sent_where_the_check_refuses(plain: Server, secrets: SecretFile) -> None:
    refused = sender(secrets, allowed_networks=()).deliver(
        PAYLOAD, f"http://hooks.test:{plain.port}/ok", "acme", "id", 1)  # fmt: skip
    assert (refused.verdict, refused.code) == (Verdict.REJECTED, "callback_not_allowed")
    no_secret = sender(secrets).deliver(PAYLOAD, f"http://127.0.0.1:{plain.port}/ok", "globex",
                                        "id", 1)  # fmt: skip
    assert (no_secret.verdict, no_secret.code) == (Verdict.REJECTED, "webhook_no_secret")
    assert plain.seen == []


def test_a_closed_port_is_retried(secrets: SecretFile) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    outcome = sender(secrets).deliver(PAYLOAD, f"http://127.0.0.1:{port}/", "acme", "id", 1)
    assert outcome.verdict is Verdict.RETRY
    assert "connect" in outcome.detail


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A test CA and a certificate it signed for hooks.test."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test CA")
    d = tmp_path_factory.mktemp("tls")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.pem", "-days", "2", "-subj", "/CN=ocrstream test CA", cwd=d)  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr",
            "-subj", "/CN=hooks.test", cwd=d)  # fmt: skip
    (d / "ext").write_text("subjectAltName=DNS:hooks.test\n")
    openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-days", "2",
            "-CAcreateserial", "-out", "srv.pem", "-extfile", "ext", cwd=d)  # fmt: skip
    return d


@pytest.fixture
def tls(certificates: Path) -> Iterator[Server]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates / "srv.pem", certificates / "srv.key")
    server, httpd = serve({}, context)
    yield server
    httpd.shutdown()
    httpd.server_close()


def test_https_checks_the_certificate_of_the_urls_host(
    tls: Server, certificates: Path, secrets: SecretFile
) -> None:
    trusted = sender(secrets, allow_http=False, ca_bundle=certificates / "ca.pem")
    ok = trusted.deliver(PAYLOAD, f"https://hooks.test:{tls.port}/hook", "acme", "id", 1)
    assert ok.verdict is Verdict.DELIVERED, ok
    assert tls.seen[0]["host"] == f"hooks.test:{tls.port}"

    # the same server under another name: its certificate does not match
    mismatch = sender(secrets, allow_http=False, ca_bundle=certificates / "ca.pem")
    wrong = mismatch.deliver(PAYLOAD, f"https://elsewhere.test:{tls.port}/hook", "acme", "id", 1)
    assert wrong.verdict is Verdict.RETRY
    # and a CA the agent does not trust: refused too
    untrusted = sender(secrets, allow_http=False).deliver(
        PAYLOAD, f"https://hooks.test:{tls.port}/hook", "acme", "id", 1)  # fmt: skip
    assert untrusted.verdict is Verdict.RETRY
    assert "certificate" in untrusted.detail.lower() or "ssl" in untrusted.detail.lower()
    assert len(tls.seen) == 1  # only the trusted, matching one got through
