"""The OCR worker's decode threads alone: what a decoded, unreadable, unfetchable or broken page
comes back as."""

from __future__ import annotations

import pytest

from ocrstream.errors import FatalError, RetriableError
from ocrstream.schemas.records import PageImage, PageTask
from ocrstream.streams.decode import DecodePool
from ocrstream.streams.intake import Pending
from ocrstream.streams.ocr_batch import PreparedPage
from tests.fakes.stepped_worker import png
from tests.polling import wait_until


def page(n: int, image: PageImage) -> Pending:
    return Pending(("t", 0, n), PageTask("d", n, 9, image, 30, 8))


def collect_all(pool: DecodePool) -> list[tuple[Pending, PreparedPage | RetriableError]]:
    done: list[tuple[Pending, PreparedPage | RetriableError]] = []

    def all_done() -> bool:
        done.extend(pool.collect())
        return not len(pool)

    wait_until(all_done, 10, "every page decoded", interval_s=0.01)
    return done


def test_pages_come_back_decoded_unreadable_or_to_be_fetched_again() -> None:
    def fetch(uri: str) -> bytes:
        if uri.endswith("down"):
            raise RetriableError("store unavailable", code="store_unavailable")
        return png(31)

    pool = DecodePool(2, fetch, max_pixels=10**6)
    try:
        pages = [
            page(1, PageImage("png", data=png(30))),
            page(2, PageImage("png", uri="s3://b/up")),
            page(3, PageImage("png", data=b"not an image")),
            page(4, PageImage("png", uri="s3://b/down")),
        ]
        for p in pages:
            pool.start(p)
        got = {p.task.page_no: outcome for p, outcome in collect_all(pool)}
    finally:
        pool.close()
    assert isinstance(got[1], PreparedPage)
    assert got[1].image is not None
    assert got[1].image.shape[:2] == (8, 30)
    assert isinstance(got[2], PreparedPage)
    assert got[2].image is not None
    assert got[2].image.shape[1] == 31  # the fetched image
    assert isinstance(got[3], PreparedPage)
    assert got[3].error is not None
    assert got[3].error.code == "undecodable_image"
    assert isinstance(got[4], RetriableError)


def test_a_bug_fails_the_page_and_a_fatal_error_stops_the_worker() -> None:
    def fetch(uri: str) -> bytes:
        if uri.endswith("bug"):
            raise KeyError("oops")
        raise FatalError("access denied", code="store_forbidden")

    pool = DecodePool(1, fetch, max_pixels=10**6)
    try:
        pool.start(page(1, PageImage("png", uri="s3://b/bug")))
        ((_, outcome),) = collect_all(pool)
        assert isinstance(outcome, PreparedPage)
        assert outcome.error is not None
        assert outcome.error.code == "prepare_error"
        pool.start(page(2, PageImage("png", uri="s3://b/forbidden")))
        with pytest.raises(FatalError, match="access denied"):
            collect_all(pool)
    finally:
        pool.close()
