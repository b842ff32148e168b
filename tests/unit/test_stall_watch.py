"""The stall watch's bookkeeping (ocrstream.streams.agent.PartitionWatch): where the first
record an agent has not handled is, whatever order records are handled in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ocrstream.streams.agent import PartitionWatch


def test_frontier_moves_over_records_handled_in_order() -> None:
    part = PartitionWatch()
    part.begin_at(5)
    for offset in (5, 6, 7):
        part.start(offset)
        part.finish(offset)
    assert part.frontier == 8
    assert not part.working


def test_a_record_never_handled_holds_the_frontier() -> None:
    """Records after a lost one are handled; the frontier stays at the lost one."""
    part = PartitionWatch()
    part.begin_at(0)
    for offset in (0, 2, 3):
        part.finish(offset)
    assert part.frontier == 1
    part.finish(1)  # handed over by the watch
    assert part.frontier == 4


def test_records_handled_before_the_group_position_is_known_count() -> None:
    part = PartitionWatch()
    part.finish(3)
    part.finish(4)
    assert part.frontier is None
    part.begin_at(3)
    assert part.frontier == 5


def test_redeliveries_behind_the_frontier_change_nothing() -> None:
    part = PartitionWatch()
    part.begin_at(10)
    part.finish(10)
    moved = part.moved_at
    part.finish(4)
    assert part.frontier == 11
    assert part.moved_at == moved


def test_a_record_on_a_long_idle_partition_is_not_stalled_until_it_has_waited() -> None:
    """The wait counts from when the record was first seen at the frontier, not from when the
    frontier last moved: faust gets the chance to deliver a fresh record first."""
    part = PartitionWatch()
    part.begin_at(4)
    idle_for_an_hour = part.moved_at + 3600.0
    assert not part.stalled(high=4, now=idle_for_an_hour, bound=10.0)  # nothing waiting
    assert not part.stalled(high=5, now=idle_for_an_hour + 1, bound=10.0)  # just arrived
    assert not part.stalled(high=5, now=idle_for_an_hour + 10, bound=10.0)
    assert part.stalled(high=5, now=idle_for_an_hour + 11, bound=10.0)  # waited 10 s
    part.finish(4)  # handled: the next record's wait starts when it is seen
    assert not part.stalled(high=6, now=idle_for_an_hour + 12, bound=10.0)
    assert part.stalled(high=6, now=idle_for_an_hour + 22, bound=10.0)


def test_skip_to_jumps_over_offsets_that_no_longer_exist() -> None:
    part = PartitionWatch()
    part.begin_at(0)
    part.finish(7)
    part.skip_to(7)  # retention deleted 0..6
    assert part.frontier == 8
    part.skip_to(3)  # never backwards
    assert part.frontier == 8


@given(st.integers(0, 50), st.permutations(list(range(30))), st.integers(0, 29))
def test_frontier_is_the_first_offset_not_handled(base: int, order: list[int], lost: int) -> None:
    part = PartitionWatch()
    part.begin_at(base)
    handled = [base + o for o in order if o != lost]
    for offset in handled:
        part.finish(offset)
    assert part.frontier == base + lost
    part.finish(base + lost)
    assert part.frontier == base + 30
    assert part.handled == []
