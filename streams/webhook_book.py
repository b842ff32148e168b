"""The webhook agent's deliveries in hand: ready now, waiting for their due time, in flight.

A delivery (:class:`Pending`) comes from a record: a DocumentEvent on ``ocr.documents.v1``
(its first attempt, due at once) or a retry record on ``ocr.webhooks.retry.v1`` (a later
attempt, due at the time its headers say). :class:`Book` keeps them apart from the consumer
loop, so the rules are tested without a broker:

- retries are fired by due time, not in log order, so one receiver that is down for an hour
  holds back nobody else's;
- the retry records of one delivery id are on one partition, newest last: a record read while
  an older one of the same id is held *supersedes* it (the older is done, its offset can be
  committed); a chain of attempts re-read after a crash therefore collapses to its newest link;
- a retry partition fires nothing until it is caught up (read to the end it had when it was
  assigned), so that after a restart the newest link is known before any link is tried.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from ocrstream.schemas.records import DocumentEvent

TP = tuple[str, int]


@dataclass(eq=False)
class Pending:
    """One delivery of one event to its callback, and the record it came from."""

    key: str  # the delivery id
    event: DocumentEvent
    payload: bytes  # the JSON body that is signed and sent
    callback: str
    origin: tuple[str, int, int]  # topic, partition, offset of the record it came from
    record: tuple[bytes | None, bytes, list[tuple[str, bytes]]]  # key, value, headers as read
    attempts: int = 0  # attempts made before this one
    first_at: float = 0.0  # epoch seconds of the first attempt (the window starts there)
    due_at: float = 0.0
    superseded: bool = False  # a newer record of the same delivery took over
    dropped: bool = False  # its partition was revoked
    in_flight: bool = False
    seq: int = field(default=0)

    @property
    def tp(self) -> TP:
        return self.origin[0], self.origin[1]


class Book:
    """Deliveries held by the agent; not thread-safe (the consumer loop owns it)."""

    def __init__(self) -> None:
        self._ready: deque[Pending] = deque()  # first attempts, in log order
        self._due: list[tuple[float, int, Pending]] = []  # retries whose partition caught up
        self._parked: dict[TP, list[Pending]] = {}  # retries of partitions not caught up yet
        self._latest: dict[str, Pending] = {}  # delivery id → the newest retry record held
        self._seq = 0
        self._waiting: set[Pending] = set()  # retries held, not in flight, not superseded

    @property
    def waiting(self) -> int:
        """Retries held for their due time (the pending-retries gauge)."""
        return len(self._waiting)

    def __len__(self) -> int:
        return len(self._ready) + self.waiting

    @property
    def ready(self) -> int:
        return len(self._ready)

    def add_first(self, p: Pending) -> None:
        self._ready.append(p)

    def add_retry(self, p: Pending, caught_up: bool) -> list[Pending]:
        """Hold a retry record; returns the held deliveries it supersedes (now done)."""
        self._seq += 1
        p.seq = self._seq
        older = self._latest.get(p.key)
        done: list[Pending] = []
        if older is not None and older.tp == p.tp and older.origin[2] < p.origin[2]:
            older.superseded = True
            self._waiting.discard(older)
            if not older.in_flight:  # one in flight is finished by its own outcome
                done.append(older)
        elif older is not None and older.tp == p.tp:
            p.superseded = True  # an older copy read after a newer one: nothing to do
            return [p]
        self._latest[p.key] = p
        self._waiting.add(p)
        if caught_up:
            heapq.heappush(self._due, (p.due_at, p.seq, p))
        else:
            self._parked.setdefault(p.tp, []).append(p)
        return done

    def caught_up(self, tp: TP) -> None:
        for p in self._parked.pop(tp, []):
            heapq.heappush(self._due, (p.due_at, p.seq, p))

    def take(self, now: float) -> Pending | None:
        """The next delivery to attempt: a first attempt, else the retry due soonest if due."""
        while self._ready:
            p = self._ready.popleft()
            if not p.dropped:
                return p
        while self._due and self._due[0][0] <= now:
            _, _, p = heapq.heappop(self._due)
            if p.superseded or p.dropped:
                continue
            self._waiting.discard(p)
            p.in_flight = True
            return p
        return None

    def next_due(self) -> float | None:
        return self._due[0][0] if self._due else None

    def finished(self, p: Pending) -> None:
        """A delivery is over (delivered, handed on or dead-lettered)."""
        if self._latest.get(p.key) is p:
            del self._latest[p.key]

    def drop(self, tps: set[TP]) -> None:
        """Forget what came from revoked partitions (their new owner reads it again)."""
        for p in [*self._ready, *(e for _, _, e in self._due)]:
            if p.tp in tps:
                p.dropped = True
        for tp in tps:
            self._parked.pop(tp, None)
        for key, p in list(self._latest.items()):
            if p.tp in tps:
                del self._latest[key]
        self._ready = deque(p for p in self._ready if not p.dropped)
        self._due = [e for e in self._due if not (e[2].dropped or e[2].superseded)]
        heapq.heapify(self._due)
        self._waiting = {p for p in self._waiting if p.tp not in tps}
