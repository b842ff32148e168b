"""Pause and resume of the OCR worker's partitions alone, and the reasons it reports."""

from __future__ import annotations

from ocrstream.streams.flow import PartitionFlow
from tests.fakes.kafka import FakeConsumer

T = "ocr.pages.v1"


def flow(partitions: int = 4) -> tuple[PartitionFlow, FakeConsumer]:
    consumer = FakeConsumer(partitions=partitions)
    f = PartitionFlow(consumer)
    f.assign({(T, p) for p in range(partitions)})
    return f, consumer


def test_blocked_and_crowded_partitions_are_paused_and_the_others_resumed() -> None:
    f, consumer = flow()
    reasons = f.apply(blocked={(T, 0)}, crowded={(T, 1), (T, 0)}, full=False)
    assert consumer.paused == {0, 1}
    assert reasons == {"inflight_limit": 0, "store_unavailable": 1, "intake_share": 1}
    reasons = f.apply(blocked=set(), crowded={(T, 2)}, full=True)
    assert consumer.paused == {2}
    assert reasons == {"inflight_limit": 1, "store_unavailable": 0, "intake_share": 0}
    assert consumer.pause_calls == [{0, 1}, {2}]  # only the changes are sent


def test_partitions_not_assigned_are_never_paused() -> None:
    f, consumer = flow(partitions=2)
    f.forget({(T, 1)})
    reasons = f.apply(blocked={(T, 1)}, crowded={(T, 1), (T, 5)}, full=False)
    assert consumer.paused == set()
    assert reasons == {"inflight_limit": 0, "store_unavailable": 0, "intake_share": 0}
    assert f.assigned == {(T, 0)}
