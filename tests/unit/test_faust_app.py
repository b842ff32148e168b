"""The faust app factory's fixes around aiokafka (:mod:`ocrstream.streams.app`)."""

from __future__ import annotations

import asyncio
import time


def test_failed_metadata_updates_wait_the_retry_backoff() -> None:
    """aiokafka's sender asks for metadata in a loop while a leader is unknown; with no broker
    answering each update failed at once, a busy loop. Paced: each failure takes the backoff."""
    from aiokafka.client import AIOKafkaClient

    from ocrstream.streams.app import pace_failed_metadata_updates

    pace_failed_metadata_updates()
    pace_failed_metadata_updates()  # idempotent: paced once, not twice

    async def five_failures() -> float:
        client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1", retry_backoff_ms=50)
        started = time.monotonic()
        for _ in range(5):
            assert await client._metadata_update(client.cluster, set()) is False
        return time.monotonic() - started

    took = asyncio.run(five_failures())
    assert 0.25 <= took < 1.0
