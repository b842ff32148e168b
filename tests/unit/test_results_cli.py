"""``ocrstream results`` as a user reads it: each line names the document's revision, and a
page answered from the page cache says so (the records from a stand-in client: no broker)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from ocrstream.cli import client as cli_client
from ocrstream.cli import main
from ocrstream.schemas.records import (
    DocumentEvent,
    DocumentProgress,
    DocumentStatus,
    Line,
    PageResult,
    PageStatus,
    utc_now,
)


class _Client:
    def __init__(self, records: list[Any]) -> None:
        self.records = records

    def results(self, **_: Any) -> Iterator[Any]:
        yield from self.records

    def close(self) -> None:
        pass


def test_results_name_the_revision_and_the_cached_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    line = Line(text="TOTAL 12.50", confidence=0.98)
    records = [
        PageResult(doc_id="inv-7", page_no=1, page_count=2, status=PageStatus.OK,
                   lines=(line,), cached=True, revision=2),
        DocumentProgress(doc_id="inv-7", page_count=2, pages_done=1, updated_at=utc_now(),
                         revision=2),
        DocumentEvent(doc_id="inv-7", status=DocumentStatus.COMPLETED, page_count=2,
                      pages_ok=2, pages_failed=0, pages_cached=1, revision=2),
    ]  # fmt: skip
    monkeypatch.setattr(cli_client, "_client", lambda: _Client(records))
    result = CliRunner().invoke(main, ["results", "--progress"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "page      inv-7 rev 2 1/2 ok cached 1 lines  TOTAL 12.50",
        "progress  inv-7 rev 2 1/2",
        "document  inv-7 rev 2 completed 2/2 pages ok, 1 cached",
    ]
