"""Webhooks without a broker: the SSRF check, the retry schedule, the signature, what an answer
means, the agent's book of deliveries in hand, the tenants' secret file."""

from __future__ import annotations

import stat
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ocrstream.api.webhook_secrets import SecretFile
from ocrstream.processors import webhook
from ocrstream.processors.webhook import CallbackRefusedError, Verdict
from ocrstream.schemas.records import DocumentEvent, DocumentStatus
from ocrstream.streams.webhook_book import Book, Pending


def resolver(*addresses: str) -> webhook.Resolve:
    def resolve(_host: str, _port: int) -> Sequence[str]:
        return addresses

    return resolve


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "127.9.9.9", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
     "100.64.0.1", "0.0.0.0", "224.0.0.1", "240.0.0.1", "255.255.255.255", "::1", "::",
     "fe80::1", "fc00::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "192.0.2.1"],
)  # fmt: skip
def test_inside_addresses_are_refused(address: str) -> None:
    with pytest.raises(CallbackRefusedError, match="resolves to"):
        webhook.check_callback_url("https://hooks.example.com/x", resolver=resolver(address))


def test_a_host_is_refused_when_any_of_its_addresses_is_inside() -> None:
    with pytest.raises(CallbackRefusedError, match=r"10\.0\.0\.7"):
        webhook.check_callback_url(
            "https://h.example.com/", resolver=resolver("93.184.215.14", "10.0.0.7")
        )


def test_a_global_host_is_allowed_and_its_target_kept() -> None:
    target = webhook.check_callback_url(
        "https://hooks.example.com:8443/ocr/done?token=abc",
        resolver=resolver("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"),
    )
    assert target.addresses == ("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c")
    assert (target.scheme, target.host, target.port) == ("https", "hooks.example.com", 8443)
    assert target.path == "/ocr/done?token=abc"
    assert target.host_header == "hooks.example.com:8443"


def test_allowed_networks_open_exactly_those_networks() -> None:
    allowed = webhook.networks(["127.0.0.0/8"])
    loopback = webhook.check_callback_url("http://127.0.0.1:9999/hook", allow_http=True,
                                          allowed=allowed, resolver=webhook.resolve)  # fmt: skip
    assert loopback.addresses == ("127.0.0.1",)
    assert loopback.host_header == "127.0.0.1:9999"
    with pytest.raises(CallbackRefusedError):
        webhook.check_callback_url("http://10.0.0.1/", allow_http=True, allowed=allowed,
                                   resolver=webhook.resolve)  # fmt: skip


@pytest.mark.parametrize(
    ("url", "reason"),
    [("http://hooks.example.com/", "must be https"), ("ftp://hooks.example.com/", "must be https"),
     ("https://user:pw@hooks.example.com/", "credentials"), ("https:///path", "no host"),
     ("https://hooks.example.com:99999/", "no URL"), ("", "URL of"),
     ("https://" + "a" * 2050 + ".com/", "URL of"), ("file:///etc/passwd", "must be https")],
)  # fmt: skip
def test_urls_that_are_not_called(url: str, reason: str) -> None:
    with pytest.raises(CallbackRefusedError, match=reason):
        webhook.check_callback_url(url, resolver=resolver("93.184.215.14"))


def test_http_only_when_allowed() -> None:
    target = webhook.check_callback_url("http://hooks.example.com/", allow_http=True,
                                        resolver=resolver("93.184.215.14"))  # fmt: skip
    assert target.port == 80
    assert target.host_header == "hooks.example.com"


def test_dns_rebinding_is_caught_at_delivery_time() -> None:
    """The name resolved publicly at submission and privately later: the second check (the one
    before every delivery) refuses it."""
    answers = iter([["93.184.215.14"], ["127.0.0.1"]])

    def rebinding(_host: str, _port: int) -> Sequence[str]:
        return next(answers)

    webhook.check_callback_url("https://rebind.example.com/", resolver=rebinding)
    with pytest.raises(CallbackRefusedError, match=r"127\.0\.0\.1"):
        webhook.check_callback_url("https://rebind.example.com/", resolver=rebinding)


def test_a_name_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(CallbackRefusedError, match="does not resolve"):
        webhook.check_callback_url("https://no-such-host.invalid/")


def test_backoff_doubles_up_to_its_maximum_and_jitter_only_shortens() -> None:
    waits = [webhook.backoff_s(n, base_s=30, max_s=3600, jitter=0.5, rand=0.0) for n in
             range(1, 11)]  # fmt: skip
    assert waits == [30, 60, 120, 240, 480, 960, 1920, 3600, 3600, 3600]
    low = webhook.backoff_s(3, base_s=30, max_s=3600, jitter=0.5, rand=0.999999)
    assert 60 < low <= 120
    assert low == pytest.approx(60, rel=1e-4)
    assert webhook.backoff_s(10_000, base_s=1, max_s=5, jitter=0, rand=0.5) == 5


def test_the_default_schedule_retries_for_a_day() -> None:
    waits = webhook.schedule(base_s=30, max_s=3600, window_s=24 * 3600)
    assert sum(waits) <= 24 * 3600 < sum(waits) + 3600
    assert len(waits) == 7 + 22  # 30 s … 32 min, then hourly
    assert webhook.schedule(base_s=0.5, max_s=2, window_s=6) == [0.5, 1, 2, 2]


@pytest.mark.parametrize(
    ("status", "verdict"),
    [(200, Verdict.DELIVERED), (204, Verdict.DELIVERED), (500, Verdict.RETRY),
     (503, Verdict.RETRY), (429, Verdict.RETRY), (408, Verdict.RETRY), (410, Verdict.REJECTED),
     (404, Verdict.REJECTED), (401, Verdict.REJECTED), (301, Verdict.REJECTED)],
)  # fmt: skip
def test_what_an_answer_means(status: int, verdict: Verdict) -> None:
    assert webhook.classify(status) is verdict


def event(doc_id: str = "d1", **attributes: str) -> DocumentEvent:
    at = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    return DocumentEvent(doc_id=doc_id, status=DocumentStatus.COMPLETED, page_count=1,
                         pages_ok=1, pages_failed=0, submitted_at=at, completed_at=at,
                         attributes=attributes, tenant="acme")  # fmt: skip


def test_the_body_is_the_event_and_the_signature_checks_out() -> None:
    ev = event(**{webhook.CALLBACK_ATTRIBUTE: "https://h.example.com/"})
    payload = webhook.body(ev)
    assert b'"doc_id":"d1"' in payload
    assert b'"status":"completed"' in payload
    assert b'"completed_at":"2026-12-01T09:30:00+00:00"' in payload
    sig = webhook.signature("whsec_x", payload)
    # what a receiver computes with the standard library alone
    import hashlib
    import hmac

    assert sig == "sha256=" + hmac.new(b"whsec_x", payload, hashlib.sha256).hexdigest()
    assert webhook.verify("whsec_x", payload, sig)
    assert not webhook.verify("whsec_y", payload, sig)
    assert not webhook.verify("whsec_x", payload + b" ", sig)
    assert webhook.callback_of(ev) == "https://h.example.com/"
    assert webhook.callback_of(event()) is None


def test_the_delivery_id_is_per_document_and_revision() -> None:
    assert webhook.delivery_id("d1") == webhook.delivery_id("d1", 1)
    assert len({webhook.delivery_id("d1"), webhook.delivery_id("d1", 2),
                webhook.delivery_id("d2")}) == 3  # fmt: skip
    assert webhook.delivery_id(event().doc_id, event().revision) == \
        webhook.delivery_id("d1")  # fmt: skip


# --- the agent's book ----------------------------------------------------------------------


def pending(offset: int, key: str = "k", due: float = 0.0, partition: int = 0) -> Pending:
    return Pending(key, event(), b"{}", "https://h.example.com/",
                   ("retry", partition, offset), (None, b"", []), due_at=due)  # fmt: skip


def test_retries_go_by_due_time_not_log_order() -> None:
    book = Book()
    book.add_retry(pending(0, "late", due=100), caught_up=True)
    book.add_retry(pending(1, "soon", due=10), caught_up=True)
    assert book.take(5) is None
    first = book.take(50)
    assert first is not None
    assert first.key == "soon"
    assert book.take(50) is None
    late = book.take(100)
    assert late is not None
    assert late.key == "late"
    assert book.waiting == 0


def test_first_attempts_go_before_due_retries() -> None:
    book = Book()
    book.add_retry(pending(0, "r", due=1), caught_up=True)
    fresh = pending(7, "f")
    book.add_first(fresh)
    assert book.take(10) is fresh


def test_a_newer_record_of_a_delivery_supersedes_the_held_one() -> None:
    book = Book()
    old, new = pending(3, due=1), pending(9, due=50)
    assert book.add_retry(old, caught_up=False) == []
    assert book.add_retry(new, caught_up=False) == [old]  # the old one is done at once
    assert book.waiting == 1
    assert book.take(1000) is None  # its partition has not caught up: nothing fires
    book.caught_up(("retry", 0))
    assert book.take(10) is None
    assert book.take(50) is new


def test_an_older_copy_read_late_is_done_at_once() -> None:
    book = Book()
    new = pending(9, due=50)
    book.add_retry(new, caught_up=True)
    stale = pending(3, due=1)
    assert book.add_retry(stale, caught_up=True) == [stale]
    assert book.take(10) is None
    assert book.take(50) is new


def test_a_held_delivery_in_flight_is_superseded_without_being_done_twice() -> None:
    book = Book()
    old = pending(3, due=1)
    book.add_retry(old, caught_up=True)
    assert book.take(1) is old
    newer = pending(5, due=99)
    assert book.add_retry(newer, caught_up=True) == []  # old finishes by its own outcome
    assert old.superseded
    assert book.waiting == 1


def test_revoked_partitions_are_forgotten() -> None:
    book = Book()
    book.add_retry(pending(0, "a", due=1, partition=0), caught_up=True)
    book.add_retry(pending(0, "b", due=1, partition=1), caught_up=False)
    book.drop({("retry", 0), ("retry", 1)})
    assert book.take(10) is None
    assert book.waiting == 0
    assert len(book) == 0


# --- secrets -------------------------------------------------------------------------------


def test_a_tenant_secret_is_made_once_kept_private_and_rotated(tmp_path: Path) -> None:
    path = tmp_path / "webhook-secrets.json"
    secrets = SecretFile(path)
    made = secrets.ensure("acme")
    assert made is not None
    assert made.startswith("whsec_")
    assert len(made) > 40
    assert secrets.ensure("acme") is None  # not shown again
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    reader = SecretFile(path)
    found = reader.secret("acme")
    assert found is not None
    assert found.get_secret_value() == made
    assert made not in repr(found)
    assert reader.secret("globex") is None
    rotated = secrets.rotate("acme")
    assert rotated != made
    found = reader.secret("acme")
    assert found is not None
    assert found.get_secret_value() == rotated
    with pytest.raises(ValueError, match="tenant must be"):
        secrets.ensure("../etc")


def test_the_next_link_read_before_its_hand_off_is_acknowledged_counts_once() -> None:
    """The agent reads back the retry record it produced before the broker's acknowledgement
    reaches it: the held count stays right (it is the pending-retries gauge)."""
    book = Book()
    link = pending(3, due=1)
    book.add_retry(link, caught_up=True)
    assert book.take(1) is link
    link.in_flight = False  # its attempt failed; its successor is being handed on
    successor = pending(4, due=5)
    assert book.add_retry(successor, caught_up=True) == [link]
    assert book.waiting == 1
    assert book.take(5) is successor
    assert book.waiting == 0
