"""Reprocessing without a broker: which documents a selection takes, the scan of the next
revision, the run's name, the store keys of earlier revisions, and a worker that refuses a
page asking for a model it does not run (``--model``) before its cache could answer it."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from ocrstream.processors.page_key import content_key
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import (
    DocumentEvent,
    DocumentStatus,
    PageResult,
    PageStatus,
    ScanSubmitted,
)
from ocrstream.settings import KafkaSettings
from ocrstream.storage import Keys
from ocrstream.streams.ocr_batch import prepare_page
from ocrstream.streams.page_cache import readdress
from ocrstream.streams.reprocess import Selection, latest_events, next_scan, select
from tests.fakes.stepped_worker import png, task

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def event(doc_id: str, *, tenant: str = "", day: int = 1, revision: int = 1,
          outputs: tuple[str, ...] = ("json", "txt", "pdf")) -> DocumentEvent:  # fmt: skip
    return DocumentEvent(
        doc_id=doc_id, status=DocumentStatus.COMPLETED, page_count=2, pages_ok=2, pages_failed=0,
        outputs={f: f"s3://b/documents/{doc_id}/document.{f}" for f in outputs},
        completed_at=T0.replace(day=day), submitted_at=T0, source_sha256="a" * 64,
        attributes={"batch": "7"}, trace_id="tr", tenant=tenant, revision=revision,
    )  # fmt: skip


def test_each_document_is_taken_at_its_latest_revision() -> None:
    log = [event("a", revision=2), event("b"), event("a", revision=1, day=9), event("b", day=3)]
    latest = latest_events(log)
    assert {d: (e.revision, e.completed_at.day) for d, e in latest.items()} == {
        "a": (2, 1), "b": (1, 3),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("selection", "chosen"),
    [
        (Selection(doc_ids=("b", "zz")), ["b"]),
        (Selection(tenant="acme"), ["a", "c"]),
        (Selection(before=T0.replace(day=5)), ["a", "b"]),
        (Selection(tenant="acme", before=T0.replace(day=5)), ["a"]),
        (Selection(everything=True), ["a", "b", "c"]),
    ],
)
def test_a_selection_takes_the_documents_it_names(selection: Selection, chosen: list[str]) -> None:
    events = {e.doc_id: e for e in (event("c", tenant="acme", day=9), event("a", tenant="acme"),
                                    event("b", day=2))}  # fmt: skip
    assert [e.doc_id for e in select(events, selection)] == chosen


def test_the_run_is_named_by_what_was_asked() -> None:
    assert Selection(doc_ids=("a", "b")).name() == Selection(doc_ids=("b", "a", "a")).name()
    names = {
        Selection(doc_ids=("a",)).name(),
        Selection(doc_ids=("a",), model="m").name(),
        Selection(doc_ids=("a",), mode="layout").name(),
        Selection(everything=True).name(),
    }
    assert len(names) == 4


def test_the_next_scan_is_the_same_document_at_the_next_revision() -> None:
    previous = event("a", tenant="acme", outputs=("json", "txt", "md"))
    source = ("s3://b/scans/a/source.pdf", "application/pdf", 1234)
    scan = next_scan(previous, 3, source, Selection(doc_ids=("a",)), now=T0)
    assert scan == ScanSubmitted(
        doc_id="a", source=scan.source, content_type="application/pdf", sha256="a" * 64,
        size_bytes=1234, submitted_at=T0, tenant="acme", outputs=("json", "txt"),
        attributes={"batch": "7"}, trace_id="tr", mode="layout", revision=3,
    )  # fmt: skip
    assert scan.source.uri == "s3://b/scans/a/source.pdf"
    other = next_scan(previous, 3, source, Selection(doc_ids=("a",), mode="text", model="m"))
    assert (other.mode, dict(other.options)) == ("text", {"model": "m"})
    # what a reprocess writes reads back through the codec
    codec = Codec(KafkaSettings())
    assert codec.decode(codec.encode(other, "ocr.scans.v1")) == other


def test_earlier_revisions_have_keys_of_their_own() -> None:
    keys = Keys("tenant-x")
    assert keys.revision_document("d1", 2, "json") == "tenant-x/documents/d1/rev-2/document.json"
    assert keys.revisions_prefix("d1") == "tenant-x/documents/d1/rev-"
    assert keys.sources_prefix("d1") == "tenant-x/scans/d1/source."
    assert keys.reprocess_prefix("r-1.2") == "tenant-x/reprocess/r-1.2/"
    with pytest.raises(ValueError, match="revision must be 1 or more"):
        keys.revision_document("d1", 0, "json")


class _Cache:
    """A cache that knows every page: a page must be refused before it is asked."""

    def key(self, t: object, image: bytes) -> str:
        return content_key(image, "fp", mode="text")

    def get(self, key: str) -> object:
        raise AssertionError("the cache was asked for a page read by another model")


def test_a_page_asking_for_another_model_fails_without_the_cache_or_the_engine() -> None:
    page = dataclasses.replace(task("d", 1, 40), options={"model": "ppocrv6-small"})

    def fetch(uri: str) -> bytes:
        return png(40, 8)

    cache = _Cache()
    prepared = prepare_page(page, fetch, max_pixels=10**6, cache=cache, model="ppocrv6-tiny")  # type: ignore[arg-type]
    assert prepared.error is not None
    assert prepared.error.code == "model_unavailable"
    assert (
        prepared.error.message
        == "the page asks for model 'ppocrv6-small'; this worker runs 'ppocrv6-tiny'"
    )
    same = dataclasses.replace(page, options={"model": "ppocrv6-tiny"})
    assert prepare_page(same, fetch, max_pixels=10**6, model="ppocrv6-tiny").error is None


def test_the_model_asked_for_changes_the_page_cache_key() -> None:
    image = png(40, 8)
    plain = content_key(image, "fp", mode="text", options={})
    assert content_key(image, "fp", mode="text", options={"model": "m"}) != plain


def test_a_cached_result_answers_the_revision_that_asked() -> None:
    # Read at revision 1, answered from the cache to a page of revision 2: the assembler must
    # see revision 2, or it would drop the page as stale.
    read = PageResult(doc_id="d", page_no=1, page_count=1, status=PageStatus.OK, revision=1)
    asking = dataclasses.replace(task("d", 1, 40), revision=2)
    assert readdress(read, asking, worker_id="w").revision == 2
