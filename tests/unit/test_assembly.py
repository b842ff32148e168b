"""The assembler's join as a state machine: every transition by example, and (hypothesis) any
order and duplication of a document's inputs ends in exactly one terminal event per revision."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocrstream.errors import PoisonError
from ocrstream.processors.assembly import (
    DeadlinePassed,
    DocumentState,
    DropPages,
    Effect,
    Input,
    KeepPage,
    NewRevision,
    Outcome,
    PageArrived,
    PublishProgress,
    PublishTerminal,
    Rules,
    ScanRegistered,
    TerminalPublished,
    WriteOutputs,
    bit_set,
    bit_test,
    bits,
    due,
    step,
)

DOC = "doc-1"
RULES = Rules(max_pages=50, deadline_s=100.0, retry_after_s=10.0, forget_after_s=1000.0)
ATTRS = (("customer", "acme"), ("batch", "7"))


def page(
    page_no: int, page_count: int = 3, *, failed: bool = False, revision: int = 1
) -> PageArrived:
    return PageArrived(
        DOC, page_no, page_count, failed=failed, submitted_at_ms=2_000, source_sha256="sha-page",
        source_uri="s3://sources/doc-1.pdf", outputs=("json", "txt"), trace_id="trace-page",
        revision=revision,
    )  # fmt: skip


def scan(revision: int = 1) -> ScanRegistered:
    return ScanRegistered(
        DOC, submitted_at_ms=1_000, source_sha256="sha-scan", attributes=ATTRS,
        trace_id="trace-scan", revision=revision,
    )  # fmt: skip


def feed(
    state: DocumentState | None, *events: Input, now: float = 0.0
) -> tuple[DocumentState | None, list[Effect]]:
    """The state after ``events`` (all at ``now``) and their effects."""
    effects: list[Effect] = []
    for event in events:
        state, more, _ = step(state, event, now=now, rules=RULES)
        effects += more
    return state, effects


# --- the bitmap -----------------------------------------------------------------------------


@given(st.sets(st.integers(1, 200)))
def test_bitmap_holds_exactly_the_pages_set(pages: set[int]) -> None:
    bitmap = ""
    for p in sorted(pages, key=lambda p: (p * 7919) % 211):  # in no particular order
        bitmap = bit_set(bitmap, p)
    assert list(bits(bitmap)) == sorted(pages)
    assert all(bit_test(bitmap, p) == (p in pages) for p in range(1, 202))


# --- pages and scans, by example ------------------------------------------------------------


def test_scan_then_pages_finish_when_the_last_page_is_in() -> None:
    state, effects = feed(None, scan(), now=10.0)
    assert effects == []
    assert state is not None
    assert state.scan_seen
    assert state.attributes == ATTRS
    state, effects = feed(state, page(2), page(1), now=20.0)
    assert effects == [
        KeepPage(DOC, 2),
        PublishProgress(DOC, 1, 3, 0, "trace-scan"),
        KeepPage(DOC, 1),
        PublishProgress(DOC, 2, 3, 0, "trace-scan"),
    ]
    state, effects = feed(state, page(3, failed=True), now=30.0)
    assert effects == [
        KeepPage(DOC, 3),
        PublishProgress(DOC, 3, 3, 1, "trace-scan"),
        WriteOutputs(
            DOC,
            3,
            (1, 2, 3),
            complete=True,
            outputs=("json", "txt"),
            source_uri="s3://sources/doc-1.pdf",
            source_sha256="sha-page",
            submitted_at_ms=1_000,
        ),
        PublishTerminal(DOC, 3, ATTRS, "trace-scan"),
    ]
    # Not terminal until the adapter says the event went out.
    assert state is not None
    assert state.terminal is None
    assert state.complete
    state, effects = feed(state, TerminalPublished(DOC, "partial"), now=31.0)
    assert effects == [DropPages(DOC, (1, 2, 3))]
    assert state == DocumentState(DOC, page_count=3, terminal="partial", ended_at_ms=31_000)


def test_pages_before_the_scan_take_its_attributes_and_trace() -> None:
    state, _ = feed(None, page(1, 2), now=1.0)
    assert state is not None
    assert (state.trace_id, state.submitted_at_ms, state.attributes) == ("trace-page", 2_000, ())
    state, effects = feed(state, scan(), now=2.0)
    assert effects == []
    state, effects = feed(state, page(2, 2), now=3.0)
    assert effects[-2:] == [
        WriteOutputs(
            DOC,
            2,
            (1, 2),
            complete=True,
            outputs=("json", "txt"),
            source_uri="s3://sources/doc-1.pdf",
            source_sha256="sha-page",
            submitted_at_ms=1_000,
        ),
        PublishTerminal(DOC, 2, ATTRS, "trace-scan"),
    ]


def test_the_scan_tenant_reaches_the_terminal_event_and_survives_the_changelog() -> None:
    tenant_scan = ScanRegistered(DOC, submitted_at_ms=1_000, tenant="acme-legal")
    state, _ = feed(None, page(1, 2), tenant_scan, now=1.0)
    assert state is not None
    restored = DocumentState.from_json(DOC, json.loads(json.dumps(state.to_json())))
    assert restored.tenant == "acme-legal"
    _, effects = feed(restored, page(2, 2), now=2.0)
    (terminal,) = [e for e in effects if isinstance(e, PublishTerminal)]
    assert terminal.tenant == "acme-legal"


def test_a_second_scan_changes_nothing() -> None:
    state, _ = feed(None, scan(), now=1.0)
    again = step(state, ScanRegistered(DOC, 5, attributes=(("x", "y"),)), now=2.0, rules=RULES)
    assert again == (state, (), Outcome.IGNORED)


def test_a_duplicate_page_changes_nothing() -> None:
    state, _ = feed(None, page(1), now=1.0)
    for duplicate in (page(1), page(1, failed=True), page(1, 9)):
        assert step(state, duplicate, now=2.0, rules=RULES) == (state, (), Outcome.DUPLICATE)


def test_an_ok_result_replaces_a_failed_one_but_not_the_reverse() -> None:
    state, _ = feed(None, page(1, failed=True), page(2), now=1.0)
    assert step(state, page(1, failed=True), now=2.0, rules=RULES).outcome is Outcome.DUPLICATE
    state, effects, outcome = step(state, page(1), now=2.0, rules=RULES)
    assert outcome is Outcome.ACCEPTED
    assert effects == (KeepPage(DOC, 1), PublishProgress(DOC, 2, 3, 0, "trace-page"))
    assert state is not None
    assert state.failed == ()
    assert state.done == 2
    assert step(state, page(1, failed=True), now=3.0, rules=RULES).outcome is Outcome.DUPLICATE


def test_a_duplicate_of_a_complete_unfinished_document_finishes_it_again() -> None:
    # A crash between "all pages in" and the terminal event: the replayed page ends it.
    state, first = feed(None, page(1, 1), now=1.0)
    t = step(state, page(1, 1), now=2.0, rules=RULES)
    assert t.outcome is Outcome.DUPLICATE
    assert t.state is state
    assert t.effects == tuple(first[-2:])
    assert isinstance(t.effects[0], WriteOutputs)
    assert isinstance(t.effects[1], PublishTerminal)


def test_a_page_of_an_ended_document_is_ignored() -> None:
    state, _ = feed(None, page(1, 1), TerminalPublished(DOC, "completed"), now=1.0)
    for late in (page(1, 1), page(2, 3), page(1, 10**9)):
        assert step(state, late, now=2.0, rules=RULES) == (state, (), Outcome.AFTER_TERMINAL)
    assert step(state, scan(), now=2.0, rules=RULES) == (state, (), Outcome.IGNORED)
    assert step(state, DeadlinePassed(DOC), now=1e9, rules=RULES).effects == ()
    assert feed(state, TerminalPublished(DOC, "failed"), now=3.0) == (state, [])


@pytest.mark.parametrize(
    ("known", "record", "code"),
    [
        (None, page(1, 0), "invalid_page_count"),
        (None, page(1, 51), "invalid_page_count"),
        (None, page(1, 10**9), "invalid_page_count"),
        (None, page(0, 3), "invalid_page_no"),
        (None, page(4, 3), "invalid_page_no"),
        (3, page(4, 5), "invalid_page_no"),  # the first page's count holds
        (3, page(2, 51), "invalid_page_count"),  # the record's own claim is checked too
    ],
)
def test_a_page_that_can_never_be_assembled_is_poison(
    known: int | None, record: PageArrived, code: str
) -> None:
    state = feed(None, page(1, known), now=1.0)[0] if known else None
    with pytest.raises(PoisonError) as e:
        step(state, record, now=2.0, rules=RULES)
    assert e.value.code == code


def test_max_pages_itself_is_accepted() -> None:
    state, effects = feed(None, page(50, 50), now=1.0)
    assert state is not None
    assert state.page_count == 50
    assert state.pages() == (50,)
    assert effects[-1] == PublishProgress(DOC, 1, 50, 0, "trace-page")


# --- deadlines ------------------------------------------------------------------------------


def test_the_deadline_finishes_with_the_pages_that_are_in() -> None:
    state, _ = feed(None, scan(), page(1), page(3, failed=True), now=1000.0)
    assert state is not None
    assert step(state, DeadlinePassed(DOC), now=1099.0, rules=RULES).outcome is Outcome.IGNORED
    assert not due(state, 1099.0, RULES)
    assert due(state, 1100.0, RULES)
    t = step(state, DeadlinePassed(DOC), now=1100.0, rules=RULES)
    assert t.state is state
    assert t.effects == (
        WriteOutputs(
            DOC,
            3,
            (1, 3),
            complete=False,
            outputs=("json", "txt"),
            source_uri="s3://sources/doc-1.pdf",
            source_sha256="sha-page",
            submitted_at_ms=1_000,
        ),
        PublishTerminal(DOC, 3, ATTRS, "trace-scan"),
    )


def test_a_new_page_restarts_the_deadline() -> None:
    state, _ = feed(None, page(1), now=1000.0)
    state, _ = feed(state, page(2), now=1090.0)
    assert step(state, DeadlinePassed(DOC), now=1150.0, rules=RULES).effects == ()
    assert step(state, DeadlinePassed(DOC), now=1190.0, rules=RULES).effects != ()


def test_a_complete_unfinished_document_is_due_soon_and_finished_at_once() -> None:
    state, _ = feed(None, page(1, 1), now=1000.0)
    assert state is not None
    assert state.complete
    assert not due(state, 1009.0, RULES)
    assert due(state, 1010.0, RULES)
    t = step(state, DeadlinePassed(DOC), now=1000.0, rules=RULES)
    assert [type(e) for e in t.effects] == [WriteOutputs, PublishTerminal]
    assert isinstance(t.effects[0], WriteOutputs)
    assert t.effects[0].complete


def test_a_document_with_no_page_is_forgotten_after_a_while_without_an_event() -> None:
    # Its split failed: the splitter published the document's terminal event.
    state, _ = feed(None, scan(), now=1000.0)
    assert state is not None
    assert not due(state, 1999.0, RULES)
    assert due(state, 2000.0, RULES)
    assert step(state, DeadlinePassed(DOC), now=1999.0, rules=RULES) == (
        state, (), Outcome.IGNORED,
    )  # fmt: skip
    assert step(state, DeadlinePassed(DOC), now=2000.0, rules=RULES) == (
        None, (), Outcome.ACCEPTED,
    )  # fmt: skip


def test_a_later_revision_without_pages_is_kept_so_older_inputs_stay_stale() -> None:
    state, _ = feed(None, NewRevision(DOC, 2), now=1000.0)
    assert state is not None
    assert not due(state, 1e12, RULES)
    assert step(state, DeadlinePassed(DOC, 2), now=1e12, rules=RULES).state is state
    assert step(state, page(1, 1), now=1e12, rules=RULES).outcome is Outcome.STALE_REVISION


def test_a_deadline_for_an_unknown_document_does_nothing() -> None:
    assert step(None, DeadlinePassed(DOC), now=1e9, rules=RULES) == (None, (), Outcome.IGNORED)
    assert step(None, TerminalPublished(DOC, "completed"), now=1.0, rules=RULES) == (
        None, (), Outcome.IGNORED,
    )  # fmt: skip


def test_an_ended_document_is_never_due() -> None:
    state, _ = feed(None, page(1, 2), TerminalPublished(DOC, "partial"), now=1.0)
    assert state is not None
    assert not due(state, 1e12, RULES)


# --- revisions ------------------------------------------------------------------------------


def test_inputs_of_an_older_revision_are_ignored() -> None:
    state, _ = feed(None, page(1, 2, revision=2), now=1.0)
    for old in (page(2, 2, revision=1), scan(1), DeadlinePassed(DOC, 1), NewRevision(DOC, 1),
                TerminalPublished(DOC, "completed", 1), page(1, 10**9, revision=0)):  # fmt: skip
        assert step(state, old, now=1e6, rules=RULES) == (state, (), Outcome.STALE_REVISION)


def test_a_newer_revision_starts_anew_and_drops_the_pages_kept_for_the_old_one() -> None:
    state, _ = feed(None, scan(), page(1), page(3), now=1.0)
    state, effects, outcome = step(state, page(2, 2, revision=2), now=2.0, rules=RULES)
    assert outcome is Outcome.ACCEPTED
    assert effects == (
        DropPages(DOC, (1, 3)),
        KeepPage(DOC, 2, revision=2),
        PublishProgress(DOC, 1, 2, 0, "trace-page", revision=2),
    )
    assert state is not None
    assert (state.revision, state.page_count, state.pages(), state.scan_seen) == (2, 2, (2,), False)


def test_a_revision_after_the_terminal_event_starts_anew() -> None:
    ended, _ = feed(None, page(1, 1), TerminalPublished(DOC, "completed"), now=1.0)
    state, effects = feed(ended, scan(3), now=2.0)
    assert effects == []
    assert state == DocumentState(
        DOC, revision=3, scan_seen=True, attributes=ATTRS, scan_at=2.0, trace_id="trace-scan",
        submitted_at_ms=1_000, source_sha256="sha-scan",
    )  # fmt: skip
    state, effects = feed(state, page(1, 1, revision=3), now=3.0)
    assert [type(e) for e in effects] == [KeepPage, PublishProgress, WriteOutputs, PublishTerminal]
    assert {e.revision for e in effects} == {3}


def test_new_revision_input() -> None:
    state, _ = feed(None, page(1, 2), now=1.0)
    assert step(state, NewRevision(DOC, 1), now=2.0, rules=RULES).outcome is Outcome.IGNORED
    assert step(state, NewRevision(DOC, 0), now=2.0, rules=RULES).outcome is (
        Outcome.STALE_REVISION
    )
    fresh, effects, _ = step(state, NewRevision(DOC, 2), now=2.0, rules=RULES)
    assert effects == (DropPages(DOC, (1,)),)
    assert fresh == DocumentState(DOC, revision=2, scan_at=2.0)
    assert step(None, NewRevision(DOC, 4), now=2.0, rules=RULES).state == DocumentState(
        DOC, revision=4, scan_at=2.0
    )


def test_deadlines_and_confirmations_apply_to_their_own_revision_only() -> None:
    state, _ = feed(None, page(1, 1, revision=1), now=1.0)
    for other in (DeadlinePassed(DOC, 2), TerminalPublished(DOC, "completed", 2)):
        assert step(state, other, now=1e6, rules=RULES) == (state, (), Outcome.IGNORED)
    assert step(state, TerminalPublished(DOC, "completed", 1), now=2.0, rules=RULES).state == (
        DocumentState(DOC, revision=1, page_count=1, terminal="completed", ended_at_ms=2_000)
    )


# --- the table's JSON -----------------------------------------------------------------------


def test_the_table_values_keep_the_shape_earlier_assemblers_wrote() -> None:
    state, _ = feed(None, scan(), now=5.0)
    assert state is not None
    assert state.to_json() == {
        "scan_seen": True, "attributes": {"customer": "acme", "batch": "7"}, "scan_at": 5.0,
        "trace_id": "trace-scan", "submitted_at": 1_000, "source_sha256": "sha-scan",
    }  # fmt: skip
    state, _ = feed(state, page(2), page(3, failed=True), now=6.0)
    assert state is not None
    assert state.to_json() == {
        "page_count": 3, "bitmap": "6", "done": 2, "failed": [3], "updated_at": 6.0,
        "first_at": 6.0, "submitted_at": 1_000, "source_sha256": "sha-page",
        "source_uri": "s3://sources/doc-1.pdf", "outputs": ["json", "txt"],
        "trace_id": "trace-scan", "scan_seen": True,
        "attributes": {"customer": "acme", "batch": "7"}, "scan_at": 5.0,
    }  # fmt: skip
    ended, _ = feed(state, TerminalPublished(DOC, "partial"), now=7.0)
    assert ended is not None
    assert ended.to_json() == {
        "terminal": "partial",
        "page_count": 3,
        "at": 7_000,
    }
    revised, _ = feed(ended, NewRevision(DOC, 2), now=8.0)
    assert revised is not None
    assert revised.to_json() == {"revision": 2, "scan_at": 8.0}


def test_a_value_written_before_revisions_is_revision_1_and_its_pages_continue_it() -> None:
    # An assembler upgraded while a document is in flight: its table value has no revision,
    # and the records now say revision 1 (their schema default); they are the same revision.
    written = {"page_count": 2, "bitmap": "1", "done": 1, "failed": [], "updated_at": 1.0,
               "first_at": 1.0, "outputs": ["json"]}  # fmt: skip
    state = DocumentState.from_json(DOC, written)
    assert state.revision == 1
    t = step(state, page(2, 2), now=2.0, rules=RULES)
    assert t.outcome is Outcome.ACCEPTED
    assert [type(e) for e in t.effects] == [
        KeepPage,
        PublishProgress,
        WriteOutputs,
        PublishTerminal,
    ]
    assert "revision" not in t.state.to_json()  # type: ignore[union-attr]


def test_a_late_page_of_the_old_revision_never_lands_in_the_new_one() -> None:
    ended, _ = feed(None, scan(), page(1, 2), page(2, 2), TerminalPublished(DOC, "completed"),
                    now=1.0)  # fmt: skip
    state, effects = feed(ended, NewRevision(DOC, 2), scan(2), page(1, 2, revision=2), now=2.0)
    assert [type(e) for e in effects] == [KeepPage, PublishProgress]
    late = step(state, page(2, 2), now=3.0, rules=RULES)
    assert late == (state, (), Outcome.STALE_REVISION)
    state, effects = feed(state, page(2, 2, revision=2), now=4.0)
    assert [type(e) for e in effects] == [KeepPage, PublishProgress, WriteOutputs, PublishTerminal]
    assert {e.revision for e in effects} == {2}
    assert effects[2] == WriteOutputs(
        DOC, 2, (1, 2), complete=True, outputs=("json", "txt"),
        source_uri="s3://sources/doc-1.pdf", source_sha256="sha-page", submitted_at_ms=1_000,
        revision=2,
    )  # fmt: skip


def test_a_value_written_by_an_earlier_assembler_reads_back() -> None:
    # As the assembler wrote it before the state machine (page-only, no scan seen).
    written = {
        "page_count": 4, "bitmap": "b", "done": 3, "failed": [2], "updated_at": 1700000000.5,
        "first_at": 1700000000.0, "submitted_at": 1699999999000, "source_sha256": "",
        "source_uri": None, "outputs": ["json", "txt", "pdf"], "trace_id": None,
    }  # fmt: skip
    state = DocumentState.from_json(DOC, written)
    assert (state.pages(), state.failed, state.done, state.complete) == ((1, 2, 4), (2,), 3, False)
    t = step(state, page(3, 4), now=1700000001.0, rules=RULES)
    assert [type(e) for e in t.effects] == [
        KeepPage,
        PublishProgress,
        WriteOutputs,
        PublishTerminal,
    ]
    ended = DocumentState.from_json(DOC, {"terminal": "completed", "page_count": 4, "at": 17})
    assert DocumentState.ended(ended.to_json())
    assert not DocumentState.ended(written)
    assert step(ended, page(3, 4), now=1.0, rules=RULES).outcome is Outcome.AFTER_TERMINAL


# --- any order, any duplication (hypothesis) ------------------------------------------------

DTS = (0.0, 1.0, 9.0, 10.0, 99.0, 100.0, 250.0, 1000.0)  # around the rules' times


@dataclass
class Adapter:
    """Carries out effects as the assembler does: the table holds JSON, the kept page results
    are tracked, and a published terminal event is fed back."""

    now: float = 1_000_000.0
    value: dict[str, Any] | None = None
    effects: list[Effect] = field(default_factory=list)
    kept: dict[tuple[int, int], bool] = field(default_factory=dict)  # (rev, page) → failed
    arrived: dict[tuple[int, int], list[bool]] = field(default_factory=dict)
    states: list[DocumentState] = field(default_factory=list)

    @property
    def state(self) -> DocumentState | None:
        return DocumentState.from_json(DOC, self.value) if self.value is not None else None

    def feed(self, event: Input) -> None:
        state = self.state
        try:
            t = step(state, event, now=self.now, rules=RULES)
        except PoisonError:
            return
        if t.state is None:
            self.value = None
        else:
            self.value = json.loads(json.dumps(t.state.to_json()))
            assert self.state == t.state, "the table's JSON reads back as the state"
            self.states.append(t.state)
        if isinstance(event, PageArrived) and t.outcome is not Outcome.STALE_REVISION:
            self.arrived.setdefault((event.revision, event.page_no), []).append(event.failed)
        for effect in t.effects:
            self.effects.append(effect)
            if isinstance(effect, KeepPage):
                assert isinstance(event, PageArrived)
                assert effect.page_no == event.page_no
                self.kept[effect.revision, effect.page_no] = event.failed
            elif isinstance(effect, DropPages):
                for p in effect.page_nos:
                    del self.kept[effect.revision, p]
            elif isinstance(effect, WriteOutputs):
                kept = {p for (r, p) in self.kept if r == effect.revision}
                assert set(effect.pages) == kept
                assert effect.complete == (kept == set(range(1, effect.page_count + 1)))
                for p in effect.pages:  # the better result of each page is kept
                    assert self.kept[effect.revision, p] == all(self.arrived[effect.revision, p])
            elif isinstance(effect, PublishTerminal):
                assert t.state is not None
                assert effect.attributes == (ATTRS if t.state.scan_seen else ())
                self.feed(TerminalPublished(DOC, "completed", effect.revision))


def page_inputs(draw: st.DrawFn, revision: int) -> list[Input]:
    n = draw(st.integers(1, 5))
    events: list[Input] = []
    for p in range(1, n + 1):
        for failed in draw(st.lists(st.booleans(), max_size=3)):
            events.append(page(p, draw(st.sampled_from((n, n, n + 1))), failed=failed,
                               revision=revision))  # fmt: skip
    events += [page(n + 2, n, revision=revision)] * draw(st.integers(0, 1))  # poison
    events += [scan(revision)] * draw(st.integers(0, 2))
    return events


@st.composite
def one_revision(draw: st.DrawFn) -> list[tuple[Input, float]]:
    events = page_inputs(draw, 1) + [DeadlinePassed(DOC)] * draw(st.integers(0, 4))
    events = draw(st.permutations(events))
    return [(e, draw(st.sampled_from(DTS))) for e in events]


def check_progress(effects: list[Effect]) -> None:
    done: dict[int, int] = {}
    for e in effects:
        if isinstance(e, PublishProgress):
            assert e.pages_done >= done.get(e.revision, 0), "progress never goes backwards"
            assert 1 <= e.pages_done <= e.page_count
            assert e.pages_failed <= e.pages_done
            done[e.revision] = e.pages_done


def check_pairs(effects: list[Effect]) -> None:
    for i, e in enumerate(effects):
        if isinstance(e, PublishTerminal):
            before = effects[i - 1]
            assert isinstance(before, WriteOutputs), "outputs are written before the event"
            assert (before.doc_id, before.revision) == (e.doc_id, e.revision)
        if isinstance(e, WriteOutputs):
            assert isinstance(effects[i + 1], PublishTerminal)


@settings(max_examples=400, deadline=None)
@given(one_revision())
def test_any_order_and_duplication_ends_in_exactly_one_terminal_event(
    inputs: list[tuple[Input, float]],
) -> None:
    run = Adapter()
    for event, dt in inputs:
        run.now += dt
        run.feed(event)
        for s in run.states[-1:]:  # the timer's rule agrees with the step's
            for later in DTS:
                if due(s, run.now + later, RULES):
                    t = step(s, DeadlinePassed(DOC, s.revision), now=run.now + later, rules=RULES)
                    assert t.outcome is Outcome.ACCEPTED
    run.now += 10 * RULES.forget_after_s  # the timer fires at last
    run.feed(DeadlinePassed(DOC))

    got_pages = any(isinstance(e, PageArrived) and e.page_no <= e.page_count for e, _ in inputs)
    terminal = [e for e in run.effects if isinstance(e, PublishTerminal)]
    assert len(terminal) == (1 if got_pages else 0)
    check_pairs(run.effects)
    check_progress(run.effects)
    ended_at = run.effects.index(terminal[0]) if terminal else len(run.effects)
    assert all(isinstance(e, DropPages) for e in run.effects[ended_at + 1 :])
    if got_pages:
        assert run.state is not None
        assert run.state.terminal == "completed"
        assert not run.kept, "the pages are dropped once the event is out"
    else:
        assert run.state is None, "a document without pages is forgotten"


@st.composite
def revisions(draw: st.DrawFn) -> list[tuple[Input, float]]:
    events: list[Input] = []
    for revision in draw(st.sets(st.integers(1, 4), min_size=1, max_size=3)):
        events += page_inputs(draw, revision)
        events += [DeadlinePassed(DOC, revision)] * draw(st.integers(0, 2))
        events += [NewRevision(DOC, revision)] * draw(st.integers(0, 1))
    events = draw(st.permutations(events))
    return [(e, draw(st.sampled_from(DTS))) for e in events]


@settings(max_examples=300, deadline=None)
@given(revisions())
def test_revisions_in_any_order_end_at_most_once_and_the_newest_exactly_once(
    inputs: list[tuple[Input, float]],
) -> None:
    run = Adapter()
    for event, dt in inputs:
        run.now += dt
        run.feed(event)
    starters = [
        e.revision for e, _ in inputs
        if isinstance(e, ScanRegistered | NewRevision)
        or (isinstance(e, PageArrived) and e.page_no <= e.page_count)
    ]  # fmt: skip
    if not starters:
        assert run.effects == []
        assert run.state is None
        return
    newest = max(starters)
    run.now += 10 * RULES.forget_after_s
    run.feed(DeadlinePassed(DOC, newest))

    terminal = Counter(e.revision for e in run.effects if isinstance(e, PublishTerminal))
    assert all(n == 1 for n in terminal.values()), terminal
    newest_pages = any(
        isinstance(e, PageArrived) and e.revision == newest and e.page_no <= e.page_count
        for e, _ in inputs
    )
    assert terminal[newest] == (1 if newest_pages else 0)
    seen = [e.revision for e in run.effects]
    assert seen == sorted(seen), "no effect of a revision once a newer one started"
    assert not any(r < newest for r, _ in run.kept), "older revisions' pages are dropped"
    check_pairs(run.effects)
    check_progress(run.effects)
