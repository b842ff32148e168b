"""A document's Server-Sent Events stream (ocrstream.api.events) against the real broker, where
the page results lie behind a long backlog on their partition and the terminal record does not:
the consumer then fetches the terminal first, and the stream must still send every page."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import SecretStr

from ocrstream.api import events
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import (
    DocumentEvent,
    DocumentProgress,
    DocumentStatus,
    Line,
    PageResult,
    PageStatus,
    utc_now,
)
from ocrstream.settings import KafkaSettings
from ocrstream.streams import topics as t

from . import harness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

BACKLOG = 20_000  # tombstones ahead of the page results on their partition


def parse(chunks: list[bytes]) -> list[dict[str, Any]]:
    return harness.parse_sse(b"".join(chunks).decode())


def test_the_terminal_event_waits_for_pages_fetched_after_it(topics: KafkaSettings) -> None:
    since = datetime.now(UTC)
    codec = Codec(topics)
    doc_id = "doc-behind-a-backlog"
    key = doc_id.encode()
    results_topic, progress_topic = topics.topic(t.PAGE_RESULTS), topics.topic(t.PROGRESS)
    # the backlog: records on the same partition (same key) that the stream skips unread
    harness.produce_raw(topics, t.PAGE_RESULTS, [(key, None, {})] * BACKLOG)
    harness.produce_raw(topics, t.PAGE_RESULTS, [
        (key, codec.encode(PageResult(doc_id=doc_id, page_no=n, page_count=3,
                                      status=PageStatus.OK,
                                      lines=(Line(text=f"line of page {n}", confidence=0.99),)),
                           results_topic), {})
        for n in (1, 2, 3)
    ])  # fmt: skip
    harness.produce_raw(topics, t.PROGRESS, [
        (key, codec.encode(DocumentProgress(doc_id=doc_id, page_count=3, pages_done=n,
                                            updated_at=utc_now()), progress_topic), {})
        for n in (1, 2, 3)
    ])  # fmt: skip
    harness.produce_raw(topics, t.DOCUMENTS, [
        (key, codec.encode(DocumentEvent(doc_id=doc_id, status=DocumentStatus.COMPLETED,
                                         page_count=3, pages_ok=3, pages_failed=0),
                           topics.topic(t.DOCUMENTS)), {})
    ])  # fmt: skip
    # small fetches: the page-results partition takes many round trips to read through
    slow = topics.model_copy(update={"extra": {
        **topics.extra, "max.partition.fetch.bytes": SecretStr("4096")}})  # fmt: skip

    def describe(ev: DocumentEvent) -> dict[str, Any]:
        return {"status": ev.status.value, "pages_ok": ev.pages_ok}

    first = parse(list(events.stream(slow, codec, doc_id, since, None, describe, 60.0)))
    assert [e["event"] for e in first][-1] == "terminal"
    assert first[-1]["data"] == {"status": "completed", "pages_ok": 3}
    pages = {e["data"]["page_no"]: e["data"]["text"] for e in first if e["event"] == "page"}
    assert pages == {1: "line of page 1", 2: "line of page 2", 3: "line of page 3"}
    assert sorted(e["data"]["pages_done"] for e in first if e["event"] == "progress") == [1, 2, 3]
    assert len(first) == 7

    # resumed after the first page: every event sent after it in the first stream, once each
    at = next(i for i, e in enumerate(first) if e["event"] == "page" and e["data"]["page_no"] == 1)
    rest = parse(list(events.stream(slow, codec, doc_id, since, first[at]["id"], describe, 60.0)))
    assert rest[-1] == {**first[-1], "id": rest[-1]["id"]}
    assert sorted(e["data"]["page_no"] for e in rest if e["event"] == "page") == [2, 3]
    assert harness.event_contents(rest) == harness.event_contents(first[at + 1 :])
