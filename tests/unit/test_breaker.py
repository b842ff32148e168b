"""The OCR worker's circuit for the object store alone: one probe per backoff, then all."""

from __future__ import annotations

from ocrstream.schemas.records import PageImage, PageTask
from ocrstream.streams.breaker import Backoff, StoreBreaker
from ocrstream.streams.intake import Pending


def page(n: int, *, partition: int = 0, uri: bool = True) -> Pending:
    image = PageImage("png", uri=f"s3://b/{n}") if uri else PageImage("png", data=b"x")
    return Pending(("t", partition, n), PageTask("d", n, 9, image, 10, 10))


def test_the_first_failure_opens_the_circuit_and_the_others_of_the_outage_wait_quietly() -> None:
    b = StoreBreaker(backoff_s=1.0, backoff_max_s=4.0)
    a, c = page(1), page(2, partition=1)
    assert b.start(a)
    assert b.start(c)
    assert b.failed(a, now=10.0) == Backoff(probe=1, delay_s=1.0)
    assert b.open
    assert b.failed(c, now=10.1) is None  # same outage: no new backoff, no new warning
    assert len(b) == 2
    assert b.blocked() == {("t", 0), ("t", 1)}
    assert (a.attempts, c.attempts) == (1, 1)
    # while it is open, a page that needs the store waits; one that does not goes on
    late = page(3)
    assert not b.start(late)
    assert len(b) == 3
    assert b.start(page(4, uri=False))


def test_one_probe_per_backoff_doubling_to_the_maximum() -> None:
    b = StoreBreaker(backoff_s=1.0, backoff_max_s=3.0)
    pages = [page(n) for n in range(5)]
    for p in pages:  # all fetching when the store went down
        assert b.start(p)
    for p in pages:
        b.failed(p, now=0.0)
    assert b.due(0.5) == []  # the backoff has not run out
    (probe,) = b.due(1.0)
    assert b.due(1.0) == []  # one probe at a time
    assert b.start(probe)
    assert b.failed(probe, now=1.0) == Backoff(probe=2, delay_s=2.0)
    (probe,) = b.due(3.0)
    b.start(probe)
    assert b.failed(probe, now=3.0) == Backoff(probe=3, delay_s=3.0)  # capped
    (probe,) = b.due(6.0)
    b.start(probe)
    assert b.answered(probe)  # the store answers: the circuit closes
    assert not b.open
    assert sorted(p.task.page_no for p in b.due(6.0)) == [
        n for n in range(5) if pages[n] is not probe
    ]
    assert len(b) == 0


def test_pages_fetched_again_keep_their_partition_blocked_until_answered() -> None:
    b = StoreBreaker(backoff_s=0.1, backoff_max_s=1.0)
    p = page(1)
    b.start(p)
    b.failed(p, now=0.0)
    (probe,) = b.due(1.0)
    b.start(probe)
    assert len(b) == 0
    assert b.blocked() == {("t", 0)}  # fetched again, not answered yet
    assert b.answered(probe)
    assert b.blocked() == set()
    assert not b.answered(page(2, uri=False))  # an inline page says nothing of the store


def test_dropping_a_partition_forgets_its_waiting_pages_and_its_queued_probe() -> None:
    b = StoreBreaker(backoff_s=0.1, backoff_max_s=1.0)
    for n, partition in ((1, 0), (2, 1)):
        p = page(n, partition=partition)
        b.start(p)
        b.failed(p, now=0.0)
    (probe,) = b.due(1.0)  # page 1, on partition 0, queued in the intake
    b.drop({("t", 0)})  # revoked: the probe is dropped from the intake with it
    assert [p.task.page_no for p in b.due(1.0)] == [2]  # so the next page probes
    b.drop(None)
    assert len(b) == 0
    assert probe.tp == ("t", 0)


def test_a_probe_never_fetched_before_keeps_its_partition_blocked_while_it_is_fetched() -> None:
    """A page that came in during the outage waits without a fetch (attempts 0); when it is
    the probe, its partition stays paused while it is fetched, as any page fetched again."""
    b = StoreBreaker(backoff_s=0.1, backoff_max_s=1.0)
    first, late = page(1), page(2, partition=1)
    b.start(first)
    b.failed(first, now=0.0)
    assert not b.start(late)  # came in during the outage: waits unfetched
    probes = b.due(1.0)
    while probes[0] is not late:  # fail the probes until the late page's turn
        b.start(probes[0])
        b.failed(probes[0], now=1.0)
        probes = b.due(100.0)
    assert late.attempts == 0
    assert b.start(late)
    assert ("t", 1) in b.blocked()  # being fetched: not resumed yet
    assert b.answered(late)
    assert ("t", 1) not in b.blocked()
