"""The OCR worker's in-flight window and pixel budget alone."""

from __future__ import annotations

from typing import Any

from ocrstream.settings import WorkerSettings
from ocrstream.streams.window import InflightWindow


def window(**settings: Any) -> InflightWindow:
    conf: dict[str, Any] = {
        "max_batch": 8,
        "decode_threads": 2,
        "max_inflight_pages": 64,
        "max_inflight_pixels": 1000,
        **settings,
    }
    return InflightWindow.of(WorkerSettings(**conf))


def test_a_poll_takes_what_the_window_has_room_for_and_at_least_one() -> None:
    w = window()
    assert w.poll_size(0) == 64
    assert w.poll_size(60) == 4
    assert w.poll_size(64) == 1  # full: a partition with nothing queued may still fetch one
    assert not w.full(63)
    assert w.full(64)
    assert window(max_inflight_pages=1000).poll_size(0) == 256


def test_the_share_is_what_two_batches_leave_split_over_the_partitions() -> None:
    w = window()
    assert w.share(2) == (64 - 16) // 2
    assert w.share(0) == 48
    assert w.share(100) == 1  # never below one page


def test_pages_start_only_as_far_as_the_next_batch_and_the_threads_need() -> None:
    w = window()
    assert w.may_start(decoding=0, waiting=0, started=0)
    assert not w.may_start(decoding=4, waiting=0, started=4)  # one waiting per thread
    assert w.may_start(decoding=3, waiting=4, started=7)
    assert not w.may_start(decoding=3, waiting=5, started=8)  # the next batch is covered
    assert not w.may_start(decoding=0, waiting=0, started=64)  # the in-flight limit


def test_the_pixel_budget_lets_one_page_through_whatever_its_size() -> None:
    w = window()
    assert w.fits(5000)  # nothing held: one page always passes
    w.hold(5000)
    assert not w.fits(1)
    w.release(5000)
    w.hold(600)
    assert w.fits(400)
    assert not w.fits(401)
    w.release(10_000)
    assert w.held_pixels == 0
