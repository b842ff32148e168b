"""Per-tenant limits without a server: the sliding minute, the UTC day, Retry-After, what the
replicas tell each other, and the page count charged for an upload."""

from __future__ import annotations

import threading
from pathlib import Path

import pymupdf
import pytest

from ocrstream.api.limits import PAGES, REQUESTS, Limiter, count_pages
from ocrstream.api.usage import UsageLog
from ocrstream.settings import ApiSettings, KafkaSettings, LimitsSettings, TenantLimits
from tests.fakes.clock import FakeClock

T0 = 1_764_547_200.0  # 2025-12-01 00:00:00 UTC


class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int, int, int]] = []

    def record(self, tenant: str, second: int, requests: int, pages: int) -> None:
        self.sent.append((tenant, second, requests, pages))


def limiter(clock: FakeClock, **settings: object) -> tuple[Limiter, Sink, list[tuple[str, str]]]:
    refused: list[tuple[str, str]] = []
    sink = Sink()
    made = Limiter(ApiSettings(**settings), sink, clock=clock,  # type: ignore[arg-type]
                   on_refusal=lambda t, limit: refused.append((t, limit)))  # fmt: skip
    return made, sink, refused


def test_requests_past_the_limit_wait_for_the_oldest_to_leave_the_minute() -> None:
    clock = FakeClock(T0 + 10.5)
    lim, sink, refused = limiter(clock, requests_per_minute=5)
    for _ in range(3):
        assert lim.admit_request("acme") is None
    clock.now = T0 + 30.2
    for _ in range(2):
        assert lim.admit_request("acme") is None
    clock.now = T0 + 40.9
    refusal = lim.admit_request("acme")
    assert refusal is not None
    assert refusal.limit == REQUESTS
    # the three of second 10 leave the window at second 70: 29.1 s from now, said as 30
    assert refusal.retry_after_s == 30
    assert refused == [("acme", REQUESTS)]
    assert lim.admit_request("globex") is None  # another tenant is not affected
    clock.now = T0 + 69.99
    assert lim.admit_request("acme") is not None  # refused requests were not counted
    clock.now = T0 + 70.0
    assert lim.admit_request("acme") is None
    assert sum(n for t, _, n, _ in sink.sent if t == "acme") == 6


def test_a_burst_in_one_second_waits_the_whole_minute() -> None:
    clock = FakeClock(T0 + 5.0)
    lim, _, _ = limiter(clock, requests_per_minute=3)
    assert [lim.admit_request("a") for _ in range(3)] == [None] * 3
    refusal = lim.admit_request("a")
    assert refusal is not None
    assert refusal.retry_after_s == 60


def test_other_replicas_usage_counts_and_none_is_sent_back() -> None:
    clock = FakeClock(T0 + 100.0)
    lim, sink, _ = limiter(clock, requests_per_minute=10)
    lim.add_remote("acme", int(T0) + 40, 50, 0)  # read back at start: out of the minute
    lim.add_remote("acme", int(T0) + 95, 9, 0)
    assert lim.admit_request("acme") is None
    refusal = lim.admit_request("acme")
    assert refusal is not None
    assert refusal.retry_after_s == 55
    assert sink.sent == [("acme", int(T0) + 100, 1, 0)]


def test_per_tenant_overrides_and_no_limit() -> None:
    clock = FakeClock(T0)
    lim, _, _ = limiter(clock, requests_per_minute=1,
                        tenant_limits={"big": TenantLimits(requests_per_minute=0),
                                       "tiny": TenantLimits(pages_per_day=2)})  # fmt: skip
    assert lim.quota("big").requests_per_minute == 0
    assert lim.quota("tiny").requests_per_minute == 1
    assert lim.quota("tiny").pages_per_day == 2
    assert all(lim.admit_request("big") is None for _ in range(100))
    assert not lim.counts_pages("big")
    assert lim.counts_pages("tiny")


def test_no_limits_at_all_counts_nothing() -> None:
    lim, sink, _ = limiter(FakeClock(T0))
    assert not lim.enabled
    assert lim.admit_request("acme") is None
    assert sink.sent == []


def test_pages_are_charged_whole_documents_per_utc_day() -> None:
    clock = FakeClock(T0 + 3600)
    lim, sink, refused = limiter(clock, pages_per_day=10)
    assert lim.pages_left("acme") is None
    assert lim.charge_pages("acme", 6) is None
    refusal = lim.charge_pages("acme", 5)
    assert refusal is not None
    assert refusal.limit == PAGES
    assert refusal.retry_after_s == 23 * 3600  # until midnight UTC
    assert lim.charge_pages("acme", 4) is None
    refusal = lim.pages_left("acme")
    assert refusal is not None
    assert "no pages are left" in refusal.detail
    assert refused == [("acme", PAGES), ("acme", PAGES)]
    clock.now = T0 + 86400  # the next day
    assert lim.charge_pages("acme", 10) is None
    assert [p for _, _, _, p in sink.sent] == [6, 4, 10]


def test_usage_records_round_trip_and_a_replica_skips_its_own() -> None:
    seen: list[tuple[str, int, int, int]] = []
    lags: list[float] = []
    clock = FakeClock(T0 + 1.0)
    log = UsageLog(KafkaSettings(), lambda *a: seen.append(a), 100, on_lag=lags.append,
                   clock=clock)  # fmt: skip
    other = UsageLog(KafkaSettings(), lambda *a: None, 100, clock=clock)
    other.record("acme", int(T0), 2, 0)
    other.record("acme", int(T0), 1, 3)
    (((tenant, second), entry),) = other._pending.items()
    value = other.encode(tenant, second, entry)
    log.caught_up.set()
    clock.now = T0 + 1.25
    log.take(value)
    assert seen == [("acme", int(T0), 3, 3)]
    assert lags == [pytest.approx(0.25)]
    log.take(log.encode("acme", int(T0), [5, 0, 0]))  # its own: already counted
    log.take(b"not json")
    assert len(seen) == 1


def pdf(path: Path, pages: int) -> Path:
    with pymupdf.open() as doc:
        for _ in range(pages):
            doc.new_page()
        doc.save(path)
    return path


def test_the_pages_charged_are_the_splitters_count(tmp_path: Path) -> None:
    lock = threading.Lock()
    assert count_pages(pdf(tmp_path / "a.pdf", 3), LimitsSettings(), lock) == 3
    broken = tmp_path / "b.pdf"
    broken.write_bytes(b"%PDF-1.7\n" + bytes(1000))
    assert count_pages(broken, LimitsSettings(), lock) == 1


def test_tenant_limits_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCRSTREAM_API_REQUESTS_PER_MINUTE", "600")
    overrides = '{"acme": {"pages_per_day": 100}, "big": {"requests_per_minute": 0}}'
    monkeypatch.setenv("OCRSTREAM_API_TENANT_LIMITS", overrides)
    settings = ApiSettings()
    lim = Limiter(settings)
    assert lim.quota("acme").requests_per_minute == 600
    assert lim.quota("acme").pages_per_day == 100
    assert lim.quota("big").requests_per_minute == 0
    assert lim.quota("other").pages_per_day == 0
