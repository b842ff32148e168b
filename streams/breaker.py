"""The OCR worker's circuit for the object store: one for the whole worker.

A page whose claim-checked image can't be fetched (a :class:`~ocrstream.errors.RetriableError`)
waits here, and its partition is paused until the store answers again. After a failed fetch
no image is fetched until the backoff (doubling per failed probe, up to a maximum) runs out;
then one page probes the store, and the others follow once it answers: one request per
backoff instead of one per waiting page (up to ``max_inflight_pages``), one warning per
outage, and no burst of requests the moment it comes back.

The breaker only decides; the worker fetches, logs and pauses. It holds no clock: the caller
says what time it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from ocrstream.streams.intake import Pending, TopicPartition


@dataclass(frozen=True, slots=True)
class Backoff:
    """A failed fetch opened the circuit (``probe`` 1) or a failed probe kept it open: no image
    is fetched for ``delay_s``."""

    probe: int
    delay_s: float


class StoreBreaker:
    """See the module docstring. Pages are told apart by identity."""

    def __init__(self, backoff_s: float, backoff_max_s: float) -> None:
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self._waiting: list[Pending] = []  # fetch failed: wait for the store
        self._refetching: list[Pending] = []  # fetched again, not answered yet
        self._failures = 0  # failed probes since the store last answered
        self._retry_at = 0.0  # no image is fetched before this while it fails
        self._probe: Pending | None = None  # the one page that tests the store
        self._probe_fetching = False  # the probe left the intake: it is being fetched

    def __len__(self) -> int:
        """Pages waiting for the store."""
        return len(self._waiting)

    @property
    def open(self) -> bool:
        """Whether the store failed and has not answered since."""
        return self._failures > 0

    def blocked(self) -> set[TopicPartition]:
        """Partitions to keep paused: those with a page waiting for the store or fetched
        again and not answered yet."""
        return {page.tp for page in (*self._waiting, *self._refetching)}

    def start(self, page: Pending) -> bool:
        """A page is about to be fetched: True to go ahead; False when it must wait for the
        store instead (it waits here)."""
        if self._failures and page.needs_store and page is not self._probe:
            self._waiting.append(page)
            return False
        if page is self._probe:
            self._probe_fetching = True
        if page.attempts or page is self._probe:  # its partition stays paused meanwhile
            self._refetching.append(page)
        return True

    def failed(self, page: Pending, now: float) -> Backoff | None:
        """A page's fetch failed: it waits. The first failure, and each failed probe, open the
        circuit for the next backoff (returned); a page failing with the others of the same
        outage changes nothing."""
        self._forget_fetch(page)
        page.attempts += 1
        self._waiting.append(page)
        was_probe = page is self._probe
        if was_probe:
            self._probe = None
        if self._failures and not was_probe:
            return None
        self._failures += 1
        delay = min(self.backoff_max_s, self.backoff_s * 2 ** (self._failures - 1))
        self._retry_at = now + delay
        return Backoff(self._failures, delay)

    def answered(self, page: Pending) -> bool:
        """A page's fetch came back (anything but a retriable failure); True when that closes
        the circuit (the store answers again)."""
        self._forget_fetch(page)
        if page is self._probe:
            self._probe = None
        if self._failures and page.needs_store:
            self._failures = 0
            return True
        return False

    def due(self, now: float) -> list[Pending]:
        """Pages to queue again: every waiting page once the store answers; while it fails,
        the next probe when the backoff has run out and no probe is out."""
        if not self._waiting:
            return []
        if self._failures:
            if self._probe is None and now >= self._retry_at:
                self._probe, self._probe_fetching = self._waiting.pop(0), False
                return [self._probe]
            return []
        due, self._waiting = self._waiting, []
        return due

    def drop(self, tps: set[TopicPartition] | None) -> None:
        """Forget the waiting pages of ``tps`` (all when None), revoked or lost, and a probe
        queued on one of them (it is dropped from the intake with them)."""
        self._waiting = [p for p in self._waiting if tps is not None and p.tp not in tps]
        probe = self._probe
        if probe is not None and not self._probe_fetching and (tps is None or probe.tp in tps):
            self._probe = None

    def _forget_fetch(self, page: Pending) -> None:
        self._refetching = [p for p in self._refetching if p is not page]
