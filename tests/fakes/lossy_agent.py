"""``python -m tests.fakes.lossy_agent splitter|assembler``: an agent whose faust loses records.

The real agent (``ocrstream splitter`` or ``ocrstream assembler``, same settings, same
``--metrics-port``), except that faust's consumer drops the first record it fetches on each
partition of the topics named by ``OCRSTREAM_FAKE_LOSE_TOPIC`` (a suffix, e.g.
``ocr.scans.v1``) once the app is past its start-up rebalance — drained from the fetcher and
never handed to the agent, with no seek afterwards: what faust itself does to records it
discards (see ``ocrstream.streams.app.rewind_to_committed``). Only the stall watch
(``ocrstream.streams.agent.StallWatch``) can then bring those records to the agent.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

log = logging.getLogger("tests.fakes.lossy_agent")


def lose_first_records(suffix: str) -> None:
    from faust.transport.consumer import Consumer

    getmany = Consumer.getmany
    lost: set[tuple[str, int]] = set()

    async def lossy(self: Consumer, timeout: float) -> AsyncIterator[tuple[Any, Any]]:
        async for tp, message in getmany(self, timeout):
            key = (tp.topic, tp.partition)
            if tp.topic.endswith(suffix) and key not in lost and not self.app.rebalancing:
                lost.add(key)
                log.warning("fake: losing %s[%d]@%d", tp.topic, tp.partition, message.offset)
                continue
            yield tp, message

    Consumer.getmany = lossy  # type: ignore[method-assign]


def main() -> None:
    from ocrstream.cli import main as cli

    lose_first_records(os.environ["OCRSTREAM_FAKE_LOSE_TOPIC"])
    cli(sys.argv[1:])


if __name__ == "__main__":
    main()
