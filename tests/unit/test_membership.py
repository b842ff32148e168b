"""Leaving a consumer group, bounded: what a stopping agent does when Kafka answers, when it
does not, and when the last commit has nothing to say or fails."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from ocrstream.streams.membership import commit_stored, leave_group


class Consumer:
    """A consumer whose commit and close do what the test says: return, raise, or block until
    released (a coordinator that is gone)."""

    def __init__(self, *, commit_error: int | None = None, close_blocks: bool = False,
                 close_error: Exception | None = None) -> None:  # fmt: skip
        self.commit_error, self.close_error = commit_error, close_error
        self.release = threading.Event()
        if not close_blocks:
            self.release.set()
        self.calls: list[str] = []

    def commit(self, asynchronous: bool = True) -> None:
        assert asynchronous is False
        self.calls.append("commit")
        if self.commit_error is not None:
            raise KafkaException(KafkaError(self.commit_error))

    def close(self) -> None:
        self.calls.append("close")
        self.release.wait()
        if self.close_error is not None:
            raise self.close_error
        self.calls.append("closed")


def test_leaving_commits_then_closes() -> None:
    consumer = Consumer()
    assert leave_group(consumer, 5.0, "worker") is True
    assert consumer.calls == ["commit", "close", "closed"]


def test_leaving_without_commit_only_closes() -> None:
    consumer = Consumer()
    assert leave_group(consumer, 5.0, "comparer", commit=False) is True
    assert consumer.calls == ["close", "closed"]


def test_a_close_that_does_not_return_is_left_after_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = Consumer(close_blocks=True)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, "ocrstream.streams.membership"):
        assert leave_group(consumer, 0.3, "ocr worker w1") is False
    assert time.monotonic() - began < 5.0  # not the close's time: it never returns by itself
    assert consumer.calls == ["commit", "close"]
    assert "ocr worker w1: Kafka did not take the last commit" in caplog.text
    consumer.release.set()  # the coordinator came back: the thread finishes on its own


def test_an_error_of_close_reaches_the_caller() -> None:
    consumer = Consumer(close_error=RuntimeError("Consumer closed"))
    with pytest.raises(RuntimeError, match="Consumer closed"):
        leave_group(consumer, 5.0, "worker")


def test_nothing_to_commit_is_not_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "ocrstream.streams.membership"):
        commit_stored(Consumer(commit_error=KafkaError._NO_OFFSET), "on revoke")
    assert caplog.text == ""


def test_a_failed_commit_is_logged_and_the_close_still_happens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = Consumer(commit_error=KafkaError._WAIT_COORD)
    with caplog.at_level(logging.WARNING, "ocrstream.streams.membership"):
        assert leave_group(consumer, 5.0, "webhook agent") is True
    assert consumer.calls == ["commit", "close", "closed"]
    assert "commit on leaving the group failed" in caplog.text
