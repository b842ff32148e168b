"""The assembler's join of a document's page results, as a pure state machine.

:mod:`ocrstream.processors.assemble` builds a document's outputs from its pages; this module
decides *when*: it keeps, per doc_id, which pages are in (de-duplicated by page number), which
failed, the scan's attributes, and whether the one terminal event has been published.

:func:`step` takes a document's :class:`DocumentState` (``None`` for a doc_id never seen) and
one input, and returns the new state with the effects the adapter carries out, in order:

- :class:`ScanRegistered`: the scan's attributes, trace id and submission time are recorded.
- :class:`PageArrived`: a page result. The first result of a page is kept (:class:`KeepPage`)
  and a :class:`PublishProgress` follows; a duplicate changes nothing, except that an ``ok``
  or ``empty`` result replaces a ``failed`` one. A page of a terminal document is ignored. A
  record claiming 0 or more than ``max_pages`` pages, or a page number outside the document,
  raises :class:`~ocrstream.errors.PoisonError` and changes nothing.
- :class:`DeadlinePassed`: a document with pages is finished if every page is in or none came
  for ``deadline_s``; a document with no page (its split failed: the splitter publishes its
  event) is forgotten ``forget_after_s`` after its scan, at revision 1 (a later revision's
  state stays, so that inputs of older ones are still known to be stale).
- :class:`TerminalPublished`: the adapter delivered the terminal event; the state becomes a
  small terminal mark (kept, so that a replayed page never emits a second event) and the
  pages are dropped (:class:`DropPages`).
- :class:`NewRevision`: starts the document anew under a later revision (the assembler feeds
  it when the ScanSubmitted of a reprocess arrives, before its pages).

Provisional pages (confidence routing): a page result marked ``provisional`` (the fast pool's
answer to a page it routed to the accurate pool) is kept like any other, but the document is
not complete while one is kept: the accurate result replaces it when it comes, and only if it
has not come ``provisional_wait_s`` after the document's last page is the provisional one used.

Finishing is the pair :class:`WriteOutputs` then :class:`PublishTerminal`, always the last
effects of a step; the state is marked terminal only by the :class:`TerminalPublished` that
the adapter feeds back once the event is delivered. Until then a complete document is finished
again by a duplicate page or a deadline: that is how one left unfinished by a crash ends.

Revisions: every input names one, from 1 (records written before revisions existed read as
1, and so does a table value without one). An input of an older revision
than the state's is ignored; a scan, page or :class:`NewRevision` of a newer one starts a new
state, dropping the pages kept for the old one (an unfinished older revision gets no terminal
event). A deadline or a delivery confirmation applies to its own revision only.

Pure: no I/O, no clock (``now`` is an argument), no metrics (the :class:`Outcome` says what
happened, for the adapter to count). The state serialises to the JSON dict the assembler's
table has always held (:meth:`DocumentState.to_json`, :meth:`DocumentState.from_json`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, NamedTuple

from ocrstream.errors import PoisonError

SCAN_ONLY_TTL_S = 7 * 24 * 3600.0  # a scan whose pages never came (split failed): forgotten


# --- the bitmap of pages that are in ---------------------------------------------------------


def bit_test(bitmap: str, page_no: int) -> bool:
    """Whether ``page_no`` (from 1) is set in ``bitmap`` (hex digits, 4 pages each, low bit
    first)."""
    i = page_no - 1
    return len(bitmap) > i // 4 and bool(int(bitmap[i // 4], 16) & (1 << (i % 4)))


def bit_set(bitmap: str, page_no: int) -> str:
    """``bitmap`` with ``page_no`` set."""
    i = page_no - 1
    if len(bitmap) <= i // 4:
        bitmap += "0" * (i // 4 + 1 - len(bitmap))
    nibble = int(bitmap[i // 4], 16) | (1 << (i % 4))
    return f"{bitmap[: i // 4]}{nibble:x}{bitmap[i // 4 + 1 :]}"


def bits(bitmap: str) -> Iterator[int]:
    """The page numbers set in ``bitmap``, in order."""
    for i, digit in enumerate(bitmap):
        nibble = int(digit, 16)
        for b in range(4):
            if nibble & (1 << b):
                yield 4 * i + b + 1


# --- the state ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rules:
    """The limits and times ``step`` applies."""

    max_pages: int
    deadline_s: float  # no new page for this long: finish with what is in
    retry_after_s: float  # a complete document still unfinished (a crash) is due after this
    forget_after_s: float = SCAN_ONLY_TTL_S
    provisional_wait_s: float = 300.0  # every page in, some provisional: finish after this


@dataclass(frozen=True, slots=True)
class DocumentState:
    """What the assembler knows of one revision of a document. Times in seconds since the
    epoch, except ``submitted_at_ms`` and ``ended_at_ms``."""

    doc_id: str
    revision: int = 1
    page_count: int = 0  # 0 until a page came
    bitmap: str = ""  # the pages that are in
    done: int = 0  # how many
    failed: tuple[int, ...] = ()  # those in whose result is ``failed``, ascending
    first_at: float | None = None
    updated_at: float | None = None  # the last page that changed the state
    submitted_at_ms: int | None = None
    source_sha256: str = ""
    source_uri: str | None = None
    outputs: tuple[str, ...] = ()
    trace_id: str | None = None
    scan_seen: bool = False
    attributes: tuple[tuple[str, str], ...] = ()
    tenant: str = ""  # the submitting tenant (ScanSubmitted.tenant), passed to the event
    scan_at: float | None = None  # when the scan (or the revision) was registered
    terminal: str | None = None  # the status published
    ended_at_ms: int | None = None
    provisional: tuple[int, ...] = ()  # those in whose kept result is provisional, ascending

    @property
    def complete(self) -> bool:
        return self.done > 0 and self.done >= self.page_count and not self.provisional

    @property
    def in_flight(self) -> bool:
        """Has pages and no terminal event yet."""
        return self.done > 0 and self.terminal is None

    def pages(self) -> tuple[int, ...]:
        """The page numbers that are in."""
        return tuple(bits(self.bitmap))

    def to_json(self) -> dict[str, Any]:
        """The table value: the keys the assembler has always written, defaults left out."""
        out: dict[str, Any] = {}
        if self.revision > 1:  # revision 1 keeps the shape earlier assemblers wrote
            out["revision"] = self.revision
        if self.terminal is not None:
            out.update(terminal=self.terminal, page_count=self.page_count, at=self.ended_at_ms)
            return out
        if self.page_count:
            out.update(
                page_count=self.page_count, bitmap=self.bitmap, done=self.done,
                failed=list(self.failed), updated_at=self.updated_at, first_at=self.first_at,
                source_uri=self.source_uri, outputs=list(self.outputs),
            )  # fmt: skip
            if self.provisional:
                out["provisional"] = list(self.provisional)
        if self.scan_seen:
            out.update(scan_seen=True, attributes=dict(self.attributes), scan_at=self.scan_at)
            if self.tenant:
                out["tenant"] = self.tenant
        elif self.scan_at is not None:
            out["scan_at"] = self.scan_at
        if self.submitted_at_ms is not None:
            out["submitted_at"] = self.submitted_at_ms
        if self.source_sha256:
            out["source_sha256"] = self.source_sha256
        if self.trace_id is not None:
            out["trace_id"] = self.trace_id
        return out

    @classmethod
    def from_json(cls, doc_id: str, value: Mapping[str, Any]) -> DocumentState:
        """The state from a table value (as written by :meth:`to_json` or earlier assemblers)."""
        if value.get("terminal"):
            return cls(
                doc_id, revision=int(value.get("revision") or 1),
                page_count=int(value.get("page_count") or 0), terminal=str(value["terminal"]),
                ended_at_ms=_opt_int(value.get("at")),
            )  # fmt: skip
        return cls(
            doc_id,
            revision=int(value.get("revision") or 1),
            page_count=int(value.get("page_count") or 0),
            bitmap=str(value.get("bitmap") or ""),
            done=int(value.get("done") or 0),
            failed=tuple(sorted(int(p) for p in value.get("failed") or ())),
            first_at=_opt_float(value.get("first_at")),
            updated_at=_opt_float(value.get("updated_at")),
            submitted_at_ms=_opt_int(value.get("submitted_at")),
            source_sha256=str(value.get("source_sha256") or ""),
            source_uri=value.get("source_uri"),
            outputs=tuple(value.get("outputs") or ()),
            trace_id=value.get("trace_id"),
            scan_seen=bool(value.get("scan_seen")),
            attributes=tuple((value.get("attributes") or {}).items()),
            tenant=str(value.get("tenant") or ""),
            scan_at=_opt_float(value.get("scan_at")),
            provisional=tuple(sorted(int(p) for p in value.get("provisional") or ())),
        )

    @staticmethod
    def ended(value: Mapping[str, Any] | None) -> bool:
        """Whether a table value is a terminal mark (cheaper than reading it whole)."""
        return bool(value and value.get("terminal"))


# --- inputs ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScanRegistered:
    doc_id: str
    submitted_at_ms: int
    source_sha256: str = ""
    attributes: tuple[tuple[str, str], ...] = ()
    trace_id: str | None = None
    revision: int = 1
    tenant: str = ""


@dataclass(frozen=True, slots=True)
class PageArrived:
    doc_id: str
    page_no: int
    page_count: int  # as the record claims it
    failed: bool = False
    submitted_at_ms: int = 0
    source_sha256: str = ""
    source_uri: str | None = None
    outputs: tuple[str, ...] = ()
    trace_id: str | None = None
    revision: int = 1
    tenant: str = ""
    provisional: bool = False  # routed: the accurate pool's result is to replace it


@dataclass(frozen=True, slots=True)
class DeadlinePassed:
    """The timer found the document :func:`due`; ``step`` checks again at its own ``now``."""

    doc_id: str
    revision: int = 1


@dataclass(frozen=True, slots=True)
class TerminalPublished:
    """The terminal event of the document went out with this status."""

    doc_id: str
    status: str
    revision: int = 1


@dataclass(frozen=True, slots=True)
class NewRevision:
    doc_id: str
    revision: int


Input = ScanRegistered | PageArrived | DeadlinePassed | TerminalPublished | NewRevision


# --- effects --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeepPage:
    """Keep the page result being stepped as the document's result for ``page_no``."""

    doc_id: str
    page_no: int
    revision: int = 1


@dataclass(frozen=True, slots=True)
class DropPages:
    """Forget the page results kept for these pages."""

    doc_id: str
    page_nos: tuple[int, ...]
    revision: int = 1


@dataclass(frozen=True, slots=True)
class PublishProgress:
    doc_id: str
    pages_done: int
    page_count: int
    pages_failed: int
    trace_id: str | None = None
    revision: int = 1


@dataclass(frozen=True, slots=True)
class WriteOutputs:
    """Assemble the kept results of ``pages`` and write the outputs asked for."""

    doc_id: str
    page_count: int
    pages: tuple[int, ...]
    complete: bool  # False: the deadline passed with pages missing
    outputs: tuple[str, ...] = ()  # as the page results ask: () for every format
    source_uri: str | None = None
    source_sha256: str = ""
    submitted_at_ms: int | None = None
    revision: int = 1


@dataclass(frozen=True, slots=True)
class PublishTerminal:
    """Publish the terminal event of the document just written; then feed back
    :class:`TerminalPublished`."""

    doc_id: str
    page_count: int
    attributes: tuple[tuple[str, str], ...] = ()
    trace_id: str | None = None
    revision: int = 1
    tenant: str = ""


Effect = KeepPage | DropPages | PublishProgress | WriteOutputs | PublishTerminal


class Outcome(StrEnum):
    """What an input did, for the adapter's metrics and logs."""

    ACCEPTED = "accepted"  # it changed the state (or, for a deadline, acted)
    DUPLICATE = "duplicate"  # a page already in
    AFTER_TERMINAL = "after_terminal"  # a page of a document already ended
    STALE_REVISION = "stale_revision"  # an input of an older revision
    IGNORED = "ignored"  # nothing to do


class Transition(NamedTuple):
    state: DocumentState | None  # None: forget the document; the same object if unchanged
    effects: tuple[Effect, ...]
    outcome: Outcome


# --- the step -------------------------------------------------------------------------------


def step(state: DocumentState | None, event: Input, *, now: float, rules: Rules) -> Transition:
    """The document's state after ``event`` at time ``now``, and the effects to carry out in
    order. Raises :class:`~ocrstream.errors.PoisonError` for a page that can never be
    assembled; the state is then unchanged."""
    if state is not None and event.revision < state.revision:
        return Transition(state, (), Outcome.STALE_REVISION)
    if isinstance(event, DeadlinePassed | TerminalPublished):
        if state is None or event.revision != state.revision:
            return Transition(state, (), Outcome.IGNORED)
        if isinstance(event, DeadlinePassed):
            return _deadline(state, now, rules)
        return _published(state, event, now)
    superseded: tuple[Effect, ...] = ()
    base = state
    if state is not None and event.revision > state.revision:
        if state.terminal is None and state.done:
            superseded = (DropPages(state.doc_id, state.pages(), state.revision),)
        base = None
    if isinstance(event, NewRevision):
        if base is not None:
            return Transition(state, (), Outcome.IGNORED)
        fresh = DocumentState(event.doc_id, revision=event.revision, scan_at=now)
        return Transition(fresh, superseded, Outcome.ACCEPTED)
    if base is None:
        base = DocumentState(event.doc_id, revision=event.revision)
    t = (
        _scan(base, event, now)
        if isinstance(event, ScanRegistered)
        else _page(base, event, now, rules)
    )
    return Transition(t.state, superseded + t.effects, t.outcome)


def due(state: DocumentState, now: float, rules: Rules) -> bool:
    """Whether the deadline timer should send the document a :class:`DeadlinePassed`: no page
    for ``deadline_s``, complete but unfinished for ``retry_after_s``, or pageless past
    ``forget_after_s`` (at revision 1)."""
    if state.terminal is not None:
        return False
    if state.done:
        idle = now - (state.updated_at if state.updated_at is not None else now)
        return (
            idle >= rules.deadline_s
            or (state.complete and idle >= rules.retry_after_s)
            or _provisional_due(state, idle, rules)
        )
    return _forgotten(state, now, rules)


def _provisional_due(state: DocumentState, idle: float, rules: Rules) -> bool:
    """Every page in, some only provisionally, and no accurate result for long enough."""
    return (
        bool(state.provisional)
        and state.done >= state.page_count
        and (idle >= rules.provisional_wait_s)
    )


def _forgotten(state: DocumentState, now: float, rules: Rules) -> bool:
    # Only at revision 1: the state of a later one stays (small), so that inputs of older
    # revisions are still known to be stale.
    if state.revision > 1:
        return False
    return state.scan_at is None or now - state.scan_at >= rules.forget_after_s


def _scan(state: DocumentState, scan: ScanRegistered, now: float) -> Transition:
    if state.terminal is not None or state.scan_seen:
        return Transition(state, (), Outcome.IGNORED)
    new = replace(
        state, scan_seen=True, attributes=scan.attributes, tenant=scan.tenant,
        trace_id=scan.trace_id,
        submitted_at_ms=scan.submitted_at_ms, source_sha256=scan.source_sha256, scan_at=now,
    )  # fmt: skip
    return Transition(new, (), Outcome.ACCEPTED)


def _page(state: DocumentState, page: PageArrived, now: float, rules: Rules) -> Transition:
    if state.terminal is not None:
        return Transition(state, (), Outcome.AFTER_TERMINAL)
    page_count = state.page_count or page.page_count
    if not 1 <= page.page_count <= rules.max_pages:
        # Finishing walks every page number and lists the missing ones: a raw record claiming
        # a billion pages must not get that far.
        raise PoisonError(
            f"a document of {page.page_count} pages (limit {rules.max_pages})",
            code="invalid_page_count",
        )
    page_no = page.page_no
    if not 1 <= page_no <= page_count:
        raise PoisonError(f"page {page_no} of a {page_count}-page document", code="invalid_page_no")
    bitmap, done, failed = state.bitmap, state.done, state.failed
    provisional = state.provisional
    if bit_test(bitmap, page_no):
        retried = page_no in failed and not page.failed  # a retry succeeded
        accurate = page_no in provisional and not page.provisional and not page.failed
        if not (retried or accurate):
            # A replay after a crash between "all pages in" and the terminal event finishes it.
            return Transition(state, _finish(state) if state.complete else (), Outcome.DUPLICATE)
        failed = tuple(p for p in failed if p != page_no)  # keep the better result instead
        provisional = tuple(p for p in provisional if p != page_no)
        if page.provisional:
            provisional = tuple(sorted((*provisional, page_no)))
    else:
        bitmap, done = bit_set(bitmap, page_no), done + 1
        if page.failed:
            failed = tuple(sorted((*failed, page_no)))
        elif page.provisional:
            provisional = tuple(sorted((*provisional, page_no)))
    new = replace(
        state, page_count=page_count, bitmap=bitmap, done=done, failed=failed, updated_at=now,
        provisional=provisional,
        first_at=state.first_at if state.first_at is not None else now,
        submitted_at_ms=state.submitted_at_ms or page.submitted_at_ms,
        source_sha256=page.source_sha256, source_uri=page.source_uri, outputs=page.outputs,
        trace_id=state.trace_id or page.trace_id, tenant=state.tenant or page.tenant,
    )  # fmt: skip
    effects: tuple[Effect, ...] = (
        KeepPage(new.doc_id, page_no, new.revision),
        PublishProgress(new.doc_id, done, page_count, len(failed), new.trace_id, new.revision),
    )
    if new.complete:
        effects += _finish(new)
    return Transition(new, effects, Outcome.ACCEPTED)


def _deadline(state: DocumentState, now: float, rules: Rules) -> Transition:
    if state.terminal is not None:
        return Transition(state, (), Outcome.IGNORED)
    if not state.done:
        if _forgotten(state, now, rules):
            return Transition(None, (), Outcome.ACCEPTED)
        return Transition(state, (), Outcome.IGNORED)
    idle = now - (state.updated_at if state.updated_at is not None else 0.0)
    if state.complete or idle >= rules.deadline_s or _provisional_due(state, idle, rules):
        return Transition(state, _finish(state), Outcome.ACCEPTED)
    return Transition(state, (), Outcome.IGNORED)


def _published(state: DocumentState, event: TerminalPublished, now: float) -> Transition:
    if state.terminal is not None:
        return Transition(state, (), Outcome.IGNORED)
    mark = DocumentState(
        state.doc_id, revision=state.revision, page_count=state.page_count,
        terminal=event.status, ended_at_ms=int(now * 1000),
    )  # fmt: skip
    return Transition(mark, (DropPages(state.doc_id, state.pages(), state.revision),),
                      Outcome.ACCEPTED)  # fmt: skip


def _finish(state: DocumentState) -> tuple[Effect, ...]:
    return (
        WriteOutputs(
            state.doc_id, state.page_count, state.pages(), complete=state.complete,
            outputs=state.outputs, source_uri=state.source_uri,
            source_sha256=state.source_sha256, submitted_at_ms=state.submitted_at_ms,
            revision=state.revision,
        ),
        PublishTerminal(state.doc_id, state.page_count, state.attributes, state.trace_id,
                        state.revision, state.tenant),
    )  # fmt: skip


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)
