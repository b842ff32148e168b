"""The OCR worker's intake alone: the order pages are started in, and the shares per partition."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from ocrstream.schemas.records import Line, PageImage, PageTask, Point
from ocrstream.streams.intake import Intake, Pending

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def pending(doc: str, page: int, *, partition: int = 0, offset: int = 0, **task: Any) -> Pending:
    t = PageTask(
        doc_id=doc,
        page_no=page,
        page_count=9,
        image=PageImage("png", data=b"x"),
        width=10,
        height=20,
        submitted_at=T0,
    )
    return Pending(("pages", partition, offset), dataclasses.replace(t, **task))


def take_all(intake: Intake) -> list[tuple[str, int]]:
    out = []
    while intake.head() is not None:
        page = intake.pop()
        out.append((page.task.doc_id, page.task.page_no))
    return out


def test_priority_then_submission_time_then_page_number_then_arrival() -> None:
    intake = Intake()
    later = T0 + timedelta(seconds=5)
    intake.push(pending("late", 1, submitted_at=later))
    intake.push(pending("early", 2))
    intake.push(pending("urgent", 7, submitted_at=later, priority=3))
    intake.push(pending("early", 1))
    intake.push(pending("twin", 1, submitted_at=later))  # ties with "late" 1: arrived after it
    assert len(intake) == 5
    assert take_all(intake) == [("urgent", 7), ("early", 1), ("early", 2), ("late", 1), ("twin", 1)]
    assert len(intake) == 0


def test_crowded_partitions_hold_their_share() -> None:
    intake = Intake()
    for offset in range(3):
        intake.push(pending("a", offset + 1, partition=0, offset=offset))
    intake.push(pending("b", 1, partition=1))
    assert intake.crowded(3) == {("pages", 0)}
    assert intake.crowded(1) == {("pages", 0), ("pages", 1)}
    intake.pop()
    assert intake.crowded(3) == set()  # a page of partition 0 left


def test_drop_forgets_the_pages_of_revoked_partitions_and_keeps_the_order() -> None:
    intake = Intake()
    for p in range(3):
        intake.push(pending(f"d{p}", 2, partition=p))
        intake.push(pending(f"d{p}", 1, partition=p, offset=1))
    intake.drop({("pages", 1)})
    assert intake.crowded(1) == {("pages", 0), ("pages", 2)}
    assert take_all(intake) == [("d0", 1), ("d2", 1), ("d0", 2), ("d2", 2)]
    intake.push(pending("x", 1))
    intake.drop(None)
    assert len(intake) == 0
    assert intake.crowded(1) == set()


def test_a_page_knows_its_pixels_and_whether_it_needs_the_store() -> None:
    inline = pending("d", 1)
    assert inline.pixels == 10 * 20
    assert not inline.needs_store
    stored = pending("d", 2, image=PageImage("png", uri="s3://b/pages/d/00002.png"))
    assert stored.needs_store
    layer = pending("d", 3, text_layer=(Line("hi", 1.0, (Point(0, 0),) * 4),))
    assert layer.pixels == 0  # answered from the text layer, never decoded
    assert inline != pending("d", 1)  # told apart by identity: a record may come twice
