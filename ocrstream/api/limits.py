"""Per-tenant limits: requests per minute and pages per day, shared by every API replica.

**What is counted.** Every authenticated request counts once against its tenant's
``requests_per_minute`` (``OCRSTREAM_API_REQUESTS_PER_MINUTE``, or the tenant's entry in
``OCRSTREAM_API_TENANT_LIMITS``; 0 is no limit), in a sliding window of the last 60 seconds kept
as per-second buckets; a request answered 429 is not counted, so a client that waits out its
``Retry-After`` gets in. Pages count against ``pages_per_day`` per UTC calendar day, charged
when a document is accepted: the API counts them itself (:func:`count_pages`, the splitter's own
:func:`~ocrstream.processors.split.probe`, on a copy of the upload spooled to a temporary file
as it streams — disk, not memory — or on the ``source_uri`` object fetched to one), only for
tenants that have a page quota. A document that does not open is charged one page (the
splitter will fail it). An upload is refused before its body is read when the day's quota is
already spent, and after it is stored (and then deleted) when its pages do not fit in what is
left: the page count of a PDF is only known once it is whole. (A document with more pages
than the whole daily quota is refused every day: it has to be split, or the quota raised.)

**Retry-After.** For requests: the seconds until enough of the window's oldest buckets have
expired to let one more request in (exact for the usage this replica knows of; between 1 and
60). For pages: the seconds until the next midnight UTC.

**Across replicas** (:mod:`ocrstream.api.usage`): every replica appends what it admitted to
``ocr.api-usage.v1`` (keyed by tenant; one small JSON record per tenant and second, batched
every ``OCRSTREAM_API_USAGE_FLUSH_MS``, 100 ms) and reads every record of that topic since the
start of the UTC day, so each replica's :class:`Ledger` holds the sum over all replicas: its
own admissions at once, the others' once their record arrives. No coordinator, no lock across
replicas; a new replica reads the day's records before it is ready (``/readyz``).

**How far a burst can overshoot.** A replica decides on its own count plus what the others
admitted more than the replication lag ago (flush interval + produce + fetch; measured as
``ocrstream_api_usage_lag_seconds``: a mean of 0.07–0.11 s on the 2-core development VM
under load, see docs/benchmarks.md). So
the admitted total can exceed the limit by what the *other* replicas admit within that lag:
at most (N−1) × (the per-replica request rate × lag), and never more than (N−1) × limit (each
replica still stops at the limit on its own count). With two replicas sharing 100 requests/s of
one tenant and 0.1 s of lag, that is about 5 requests over a minute's limit (measured: 7 and
15 over a limit of 20 with 250 requests/s spread over two replicas); a single replica never
overshoots. Pages overshoot the same way, by the pages other replicas accept within the
lag. If Kafka is away, each replica limits on what it knows (its own admissions and what it had
read), so the fleet can admit up to N × the limit until it comes back. Clocks are the replicas'
own: a skew of s seconds moves a request's bucket by s (NTP keeps that far below a second).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ocrstream.errors import PoisonError
from ocrstream.processors.split import probe
from ocrstream.settings import ApiSettings, LimitsSettings

WINDOW_S = 60
DAY_S = 24 * 60 * 60
REQUESTS = "requests_per_minute"
PAGES = "pages_per_day"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a tenant is refused and when to come back."""

    limit: str  # REQUESTS or PAGES
    retry_after_s: int
    detail: str


@dataclass
class _Tenant:
    requests: dict[int, int] = field(default_factory=dict)  # epoch second → requests
    pages: dict[int, int] = field(default_factory=dict)  # UTC day (epoch days) → pages


class Ledger:
    """Requests per second over the last minute and pages per UTC day, per tenant. Pure: the
    time is passed in, nothing is locked (its owner locks)."""

    def __init__(self) -> None:
        self._tenants: dict[str, _Tenant] = {}

    def add(self, tenant: str, second: int, requests: int = 0, pages: int = 0) -> None:
        t = self._tenants.setdefault(tenant, _Tenant())
        if requests:
            t.requests[second] = t.requests.get(second, 0) + requests
        if pages:
            day = second // DAY_S
            t.pages[day] = t.pages.get(day, 0) + pages

    def _prune(self, t: _Tenant, now: float) -> None:
        oldest = math.floor(now) - WINDOW_S + 1
        for s in [s for s in t.requests if s < oldest]:
            del t.requests[s]
        today = math.floor(now) // DAY_S
        for d in [d for d in t.pages if d < today]:
            del t.pages[d]

    def requests(self, tenant: str, now: float) -> int:
        """Requests in the window ending now (the last 60 whole seconds, this one included)."""
        t = self._tenants.get(tenant)
        if t is None:
            return 0
        self._prune(t, now)
        return sum(t.requests.values())

    def pages(self, tenant: str, now: float) -> int:
        """Pages charged today (UTC)."""
        t = self._tenants.get(tenant)
        if t is None:
            return 0
        self._prune(t, now)
        return t.pages.get(math.floor(now) // DAY_S, 0)

    def request_wait(self, tenant: str, limit: int, now: float) -> int:
        """0 if one more request fits in the window, else the whole seconds until one does."""
        used = self.requests(tenant, now)
        if used < limit:
            return 0
        second = math.floor(now)
        buckets = self._tenants[tenant].requests
        # the bucket of second s leaves the window at s + WINDOW_S: drop the oldest until one
        # more fits
        for s in sorted(buckets):
            used -= buckets[s]
            if used < limit:
                return max(1, s + WINDOW_S - second)
        return WINDOW_S  # not reached: the last bucket leaves the window last

    def seconds_to_midnight(self, now: float) -> int:
        return max(1, (math.floor(now) // DAY_S + 1) * DAY_S - math.floor(now))


class UsageSink(Protocol):
    """Where admitted usage goes so that the other replicas see it (:mod:`ocrstream.api.usage`)."""

    def record(self, tenant: str, second: int, requests: int, pages: int) -> None: ...


@dataclass(frozen=True, slots=True)
class TenantQuota:
    requests_per_minute: int
    pages_per_day: int


class Limiter:
    """The limits of :class:`ApiSettings` over one :class:`Ledger`, thread-safe. Admissions go
    into the ledger at once and to ``sink`` for the other replicas; their admissions come in
    through :meth:`add_remote`."""

    def __init__(
        self,
        settings: ApiSettings,
        sink: UsageSink | None = None,
        *,
        clock: Callable[[], float] = time.time,
        on_refusal: Callable[[str, str], None] = lambda tenant, limit: None,
        on_usage: Callable[[str, str, int], None] = lambda tenant, limit, n: None,
    ) -> None:
        self.settings = settings
        self.sink = sink
        self.clock = clock
        self.on_refusal, self.on_usage = on_refusal, on_usage
        self.ledger = Ledger()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Whether any tenant has any limit (without one, nothing is counted or shared)."""
        s = self.settings
        overrides = s.tenant_limits.values()
        return bool(
            s.requests_per_minute or s.pages_per_day
            or any(o.requests_per_minute or o.pages_per_day for o in overrides)
        )  # fmt: skip

    def quota(self, tenant: str) -> TenantQuota:
        s = self.settings
        own = s.tenant_limits.get(tenant)
        rpm = own.requests_per_minute if own and own.requests_per_minute is not None else None
        ppd = own.pages_per_day if own and own.pages_per_day is not None else None
        return TenantQuota(
            s.requests_per_minute if rpm is None else rpm,
            s.pages_per_day if ppd is None else ppd,
        )

    def add_remote(self, tenant: str, second: int, requests: int, pages: int) -> None:
        """Usage another replica admitted."""
        # requests already out of the window (the day's records read at start) are not kept
        window = requests if second > math.floor(self.clock()) - WINDOW_S else 0
        with self._lock:
            self.ledger.add(tenant, second, window, pages)
        self._counted(tenant, requests, pages)

    def _counted(self, tenant: str, requests: int, pages: int) -> None:
        if requests:
            self.on_usage(tenant, REQUESTS, requests)
        if pages:
            self.on_usage(tenant, PAGES, pages)

    def _admit(self, tenant: str, second: int, requests: int, pages: int) -> None:
        self.ledger.add(tenant, second, requests, pages)
        if self.sink is not None:
            self.sink.record(tenant, second, requests, pages)

    def admit_request(self, tenant: str) -> Refusal | None:
        """Count one request of ``tenant``, or say why not (nothing counted then)."""
        if not self.enabled:
            return None
        limit = self.quota(tenant).requests_per_minute
        now = self.clock()
        with self._lock:
            wait = self.ledger.request_wait(tenant, limit, now) if limit > 0 else 0
            if not wait:
                self._admit(tenant, math.floor(now), 1, 0)
        if wait:
            self.on_refusal(tenant, REQUESTS)
            return Refusal(REQUESTS, wait, f"over {limit} requests a minute")
        self._counted(tenant, 1, 0)
        return None

    def counts_pages(self, tenant: str) -> bool:
        """Whether ``tenant`` has a page quota (its uploads' pages must be counted)."""
        return self.enabled and self.quota(tenant).pages_per_day > 0

    def pages_left(self, tenant: str) -> Refusal | None:
        """A refusal when today's pages are all spent (checked before an upload is read)."""
        return self._charge(tenant, 1, charge=False)

    def charge_pages(self, tenant: str, pages: int) -> Refusal | None:
        """Charge ``pages`` to today, or refuse them all if they do not fit."""
        return self._charge(tenant, pages, charge=True)

    def _charge(self, tenant: str, pages: int, *, charge: bool) -> Refusal | None:
        limit = self.quota(tenant).pages_per_day if self.enabled else 0
        if limit <= 0:
            return None
        now = self.clock()
        with self._lock:
            used = self.ledger.pages(tenant, now)
            fits = used + pages <= limit
            if fits and charge:
                self._admit(tenant, math.floor(now), 0, pages)
            wait = self.ledger.seconds_to_midnight(now)
        if fits:
            if charge:
                self._counted(tenant, 0, pages)
            return None
        self.on_refusal(tenant, PAGES)
        what = f"{pages} pages do not fit" if charge else "no pages are left"
        return Refusal(PAGES, wait, f"{what} in today's quota of {limit} ({used} used; UTC day)")


def count_pages(path: Path, limits: LimitsSettings, lock: threading.Lock) -> int:
    """The pages of the document in ``path`` as the splitter will count them; 1 for one it
    cannot open (the splitter fails it; its upload is still charged). MuPDF is not
    thread-safe: ``lock`` keeps one count at a time in the process."""
    with lock:
        try:
            return max(1, probe(path, None, limits))
        except PoisonError:
            return 1
