"""The assembler: faust agents and tables keyed by doc_id that join page results into documents.

Topics and co-partitioning: ``ocr.page-results.v1`` and ``ocr.scans.v1`` have the same number
of partitions and are keyed by doc_id with the murmur2 partitioner (every ocrstream producer
uses it), so all records of a document meet on one assembler partition, and the tables'
changelogs are written to that partition too.

- ``assembler-documents`` (json): per doc_id the page count, which pages are in (a bitmap),
  which failed, the scan's attributes and, once emitted, the terminal status. A terminal entry
  stays (small) so that a replayed or duplicated page never emits a second event.
- ``assembler-pages`` (json): the Avro bytes (base64: faust's changelog recovery decodes
  with the app's json serializer whatever the table's schema says) of each page's first usable
  result, keyed ``doc_id/page_no``; deleted once the document is done. A failed page is
  replaced by a later ok duplicate.

When every page is in, or no page arrived for ``deadline_s`` (then ``partial`` with the
missing pages listed), the document is finished: document.json, .txt and .pdf are written to
the store, then exactly one DocumentEvent is published, then the table records it.

Revisions (``ocrstream reprocess``): every record names its document's revision. The state is
per (doc_id, revision): the ScanSubmitted of a newer revision starts the document anew
(:class:`~ocrstream.processors.assembly.NewRevision`), and a page result of an older one is
dropped and counted (``ocrstream_pages_total{stage="assembler", status="stale_revision"}``).
Before a revision's outputs are written at the latest keys, the earlier ones are kept under
``documents/{doc_id}/rev-{n}/`` (:mod:`ocrstream.storage.revisions`). The join
itself (de-duplication, the bitmap, limits, deadlines, when to finish) is the pure state
machine :mod:`ocrstream.processors.assembly`: the handlers here decode records into its
inputs, store the state it returns and carry out its effects in order. Deadlines
are found by a timer that scans the local table; as faust tables can only be changed while
processing a record of their partition, the timer sends a marker to the internal
``…-deadlines`` topic (same partitioning) and the finishing happens there.

The searchable PDF is built from the original file (``source_uri`` of the page results: the
splitter uploads inline sources that ask for a PDF), so the pages keep their original images.

Store down: writes are retried with backoff while the record is held (not acked). The terminal
mark is flushed to the changelog right after the event is delivered; only a crash in between
(milliseconds) could repeat the event, and ``ocr.documents.v1`` is compacted by doc_id.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import faust
from aiokafka.partitioner import DefaultPartitioner

from ocrstream.errors import FatalError, PoisonError
from ocrstream.logs import log_context
from ocrstream.processors.assemble import AssembledDocument
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
    Transition,
    WriteOutputs,
    due,
    step,
)
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import (
    DocumentEvent,
    DocumentProgress,
    DocumentStatus,
    ErrorInfo,
    PageResult,
    PageStatus,
    ScanSubmitted,
    utc_now,
)
from ocrstream.settings import AssemblerSettings, KafkaSettings, LimitsSettings
from ocrstream.storage import ObjectStore, parse_s3_uri, validate_doc_id
from ocrstream.storage.revisions import archive_latest, revision_metadata
from ocrstream.streams import outputs, topics
from ocrstream.streams.agent import (
    StallWatch,
    StoreCalls,
    decode_or_dead_letter,
    register_agent,
    send_dead_letter,
)
from ocrstream.streams.app import declare_internal_topics, make_app, raw_topic, topic_partitions
from ocrstream.streams.metrics import Metrics

log = logging.getLogger(__name__)

STAGE = "assembler"
DEADLINE = b"deadline"
EXPIRE = b"expire"
T = TypeVar("T")


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


@dataclass(frozen=True, slots=True)
class _Written:
    """A document assembled and its outputs written, to publish."""

    document: AssembledDocument
    outputs: dict[str, str]  # name → object URI
    submitted_at: datetime
    completed_at: datetime
    started: float  # perf_counter when finishing began
    pages_cached: int = 0  # pages answered from the page cache


class Assembler:
    """The handlers behind the agents; one per process."""

    def __init__(
        self,
        app: faust.App,
        *,
        kafka: KafkaSettings,
        store: ObjectStore,
        settings: AssemblerSettings,
        limits: LimitsSettings,
        codec: Codec,
        metrics: Metrics,
        partitions: int,
        dpi: int,
    ) -> None:
        self.app, self.store, self.settings, self.limits = app, store, settings, limits
        self.codec, self.metrics, self.partitions = codec, metrics, partitions
        self.results = raw_topic(app, kafka.topic(topics.PAGE_RESULTS))
        self.scans = raw_topic(app, kafka.topic(topics.SCANS))
        self.progress = raw_topic(app, kafka.topic(topics.PROGRESS))
        self.documents = raw_topic(app, kafka.topic(topics.DOCUMENTS))
        self.dlq = raw_topic(app, kafka.topic(topics.DLQ))
        self.deadlines = app.topic(
            f"{app.conf.id}-deadlines", key_type=bytes, value_type=bytes,
            key_serializer="raw", value_serializer="raw", partitions=partitions, internal=True,
        )  # fmt: skip
        self.docs = app.Table("assembler-documents", default=None, partitions=partitions)
        self.pages = app.Table("assembler-pages", default=None, partitions=partitions)
        self._finishing: set[str] = set()
        self._marked: dict[str, float] = {}
        self.rules = Rules(max_pages=limits.max_pages, deadline_s=settings.deadline_s,
                           retry_after_s=2 * settings.scan_interval_s,
                           provisional_wait_s=settings.provisional_wait_s)  # fmt: skip
        self._partitioner = DefaultPartitioner()
        self.dpi = dpi
        self.store_calls = StoreCalls(
            app, ThreadPoolExecutor(4, "assemble-io"), metrics, stage=STAGE,
            topics=[self.results.get_topic_name(), self.scans.get_topic_name(),
                    self.deadlines.get_topic_name()],
            backoff_s=settings.store_backoff_s, backoff_max_s=settings.store_backoff_max_s,
        )  # fmt: skip
        self._render = ThreadPoolExecutor(1, "assemble-render")  # MuPDF: one at a time

    # --- page results -----------------------------------------------------------------------

    async def on_result(self, event: Any) -> None:
        msg = event.message
        with log_context(tp=f"{msg.topic}[{msg.partition}]@{msg.offset}"):
            result = await decode_or_dead_letter(self.codec, event, PageResult, self._dead_letter)
            if result is None:
                return
            with log_context(doc_id=result.doc_id, page=result.page_no, trace_id=result.trace_id):
                try:
                    await self._page(result, bytes(event.value or b""))
                except FatalError:
                    raise
                except PoisonError as e:  # a record that can never be assembled
                    log.warning("page result goes to the DLQ: %s: %s", e.code, e)
                    await self._dead_letter(msg, e)
                except Exception as e:
                    log.exception("page result failed unexpectedly")
                    await self._dead_letter(msg, e)

    async def _page(self, result: PageResult, raw: bytes) -> None:
        # Checked before anything is stored: a doc_id that can't name the outputs would leave a
        # complete document that can never be finished, retried by the deadline timer forever.
        validate_doc_id(result.doc_id)
        page = PageArrived(
            result.doc_id, result.page_no, result.page_count,
            failed=result.status is PageStatus.FAILED,
            submitted_at_ms=_ms(result.submitted_at.timestamp()),
            source_sha256=result.source_sha256, source_uri=result.source_uri,
            outputs=tuple(result.outputs), trace_id=result.trace_id, tenant=result.tenant,
            revision=result.revision,
            provisional=result.provisional,
        )  # fmt: skip
        t = self._step(page)
        status = result.status.value if t.outcome is Outcome.ACCEPTED else t.outcome.value
        self.metrics.pages.labels(STAGE, status).inc()
        await self._carry_out(t.effects, raw)

    # --- scans (for the attributes to pass through) ---------------------------------------------

    async def on_scan(self, event: Any) -> None:
        try:
            scan = self.codec.decode_as(event.value or b"", ScanSubmitted)
        except PoisonError:
            return  # the splitter dead-letters it
        partition = self.partition_of(scan.doc_id)
        if event.message.partition != partition:
            # Written by a producer that doesn't partition with murmur2 (librdkafka's default
            # is crc32): recording it here would put the document's table entry into a second
            # changelog partition, and a restore could then bring back this entry over the
            # terminal mark. The document is processed all the same, without its attributes.
            log.warning("scan %s on partition %d, not %d (the producer's partitioner is not "
                        "murmur2): its attributes are not passed through", scan.doc_id,
                        event.message.partition, partition)  # fmt: skip
            return
        if scan.revision > 1:  # a reprocess: the older revision's pages are stale from now
            await self._carry_out(self._step(NewRevision(scan.doc_id, scan.revision)).effects)
        registered = ScanRegistered(
            scan.doc_id, _ms(scan.submitted_at.timestamp()), source_sha256=scan.sha256,
            attributes=tuple(scan.attributes.items()), trace_id=scan.trace_id,
            tenant=scan.tenant, revision=scan.revision,
        )  # fmt: skip
        await self._carry_out(self._step(registered).effects)

    # --- deadlines ----------------------------------------------------------------------------

    def partition_of(self, doc_id: str) -> int:
        """The partition of ``doc_id`` on the results and scans topics (murmur2)."""
        partition: int = self._partitioner(doc_id.encode(), list(range(self.partitions)), [])
        return partition

    def owns(self, doc_id: str) -> bool:
        """Whether this instance holds the results partition of ``doc_id``."""
        from faust.types import TP

        tp = TP(self.results.get_topic_name(), self.partition_of(doc_id))
        return tp in self.app.consumer.assignment()

    async def scan_deadlines(self) -> None:
        """Timer: send a marker for each document that is due (no page for ``deadline_s``,
        complete but left unfinished by a crash, or pageless for a week)."""
        now = time.time()
        for doc_id, value in list(self.docs.items()):
            if not value or DocumentState.ended(value) or doc_id in self._finishing:
                continue
            if self._marked.get(doc_id, 0.0) > now - self.settings.deadline_s:
                continue
            state = DocumentState.from_json(doc_id, value)
            if due(state, now, self.rules) and self.owns(doc_id):
                self._marked[doc_id] = now
                await self.deadlines.send(key=doc_id.encode(), value=_marker(state))
        self.metrics.inflight_documents.set(
            sum(1 for doc_id, value in self.docs.items()
                if value and not DocumentState.ended(value)
                and DocumentState.from_json(doc_id, value).in_flight)
        )  # fmt: skip

    async def on_deadline(self, event: Any) -> None:
        doc_id = bytes(event.key or b"").decode("utf-8", "replace")
        with log_context(doc_id=doc_id):
            try:
                _, _, revision = bytes(event.value or b"").partition(b":")
                transition = self._step(DeadlinePassed(doc_id, int(revision or 1)))
                await self._carry_out(transition.effects)
            except Exception:
                log.exception("deadline handling failed")
            finally:
                self._marked.pop(doc_id, None)

    # --- finishing ----------------------------------------------------------------------------

    def _step(self, event: Input) -> Transition:
        """Step the document's state with ``event`` and store the state it returns."""
        value = self.docs.get(event.doc_id)
        state = DocumentState.from_json(event.doc_id, value) if value else None
        transition = step(state, event, now=time.time(), rules=self.rules)
        if transition.state is None:
            if value is not None:
                del self.docs[event.doc_id]
        elif transition.state is not state:
            self.docs[event.doc_id] = transition.state.to_json()
        return transition

    async def _carry_out(self, effects: tuple[Effect, ...], raw: bytes | None = None) -> None:
        """Carry out a step's effects in order; ``raw`` is the page result that was stepped."""
        written: _Written | None = None
        finishing: str | None = None
        try:
            for effect in effects:
                if isinstance(effect, KeepPage):
                    assert raw is not None, effect
                    self.pages[_page_key(effect.doc_id, effect.page_no)] = _b64(raw)
                elif isinstance(effect, DropPages):
                    for page_no in effect.page_nos:
                        self.pages.pop(_page_key(effect.doc_id, page_no), None)
                elif isinstance(effect, PublishProgress):
                    await self._publish_progress(effect)
                elif isinstance(effect, WriteOutputs):
                    if effect.doc_id in self._finishing:
                        break  # another handler is finishing it (the pair comes last)
                    self._finishing.add(finishing := effect.doc_id)
                    written = await self._write_document(effect)
                elif isinstance(effect, PublishTerminal) and written is not None:
                    await self._publish_terminal(effect, written)
        finally:
            if finishing is not None:
                self._finishing.discard(finishing)

    async def _publish_progress(self, effect: PublishProgress) -> None:
        progress = DocumentProgress(doc_id=effect.doc_id, pages_done=effect.pages_done,
                                    page_count=effect.page_count, updated_at=utc_now(),
                                    pages_failed=effect.pages_failed,
                                    trace_id=effect.trace_id,
                                    revision=effect.revision)  # fmt: skip
        await self.progress.send(
            key=effect.doc_id.encode(),
            value=self.codec.encode(progress, self.progress.get_topic_name()),
        )

    async def _write_document(self, effect: WriteOutputs) -> _Written:
        """Assemble the document from its kept page results and write its outputs."""
        started = time.perf_counter()
        doc_id, page_count = effect.doc_id, effect.page_count
        if not effect.complete and len(effect.pages) >= page_count:  # provisional pages left
            log.warning("no accurate result in time for %s: its provisional pages are used", doc_id)
        elif not effect.complete:
            log.warning("deadline passed for %s: %d of %d pages in", doc_id, len(effect.pages),
                        page_count)  # fmt: skip
        results: list[PageResult] = []
        for page_no in effect.pages:
            stored = self.pages.get(_page_key(doc_id, page_no))
            if stored is not None:
                results.append(self.codec.decode_as(base64.b64decode(stored), PageResult))
        submitted_at = _from_ms(effect.submitted_at_ms or _ms(time.time()))
        completed_at = utc_now()
        assembled = outputs.assemble_document(
            doc_id, page_count, results, source_sha256=effect.source_sha256 or None,
            submitted_at=submitted_at, completed_at=completed_at,
        )  # fmt: skip
        assembled = dataclasses.replace(assembled, revision=effect.revision)
        formats = [f for f in effect.outputs or outputs.FORMATS if f in outputs.CONTENT_TYPES]
        await self._store(archive_latest, self.store, doc_id, effect.revision, formats,
                          keep=self.settings.keep_revisions)  # fmt: skip
        written = await self._write_outputs(assembled, formats, effect.source_uri)
        cached = sum(1 for r in results if r.cached)
        return _Written(assembled, written, submitted_at, completed_at, started, cached)

    async def _publish_terminal(self, effect: PublishTerminal, written: _Written) -> None:
        """Publish the terminal event; once it is delivered, record it in the table."""
        doc_id, page_count, assembled = effect.doc_id, effect.page_count, written.document
        status = DocumentStatus(assembled.status)
        error = (
            ErrorInfo(assembled.error_code, assembled.error_message or "")
            if assembled.error_code
            else None
        )
        event = DocumentEvent(
            doc_id=doc_id,
            status=status,
            page_count=page_count,
            pages_ok=assembled.pages_ok,
            pages_failed=assembled.pages_failed,
            outputs=written.outputs,
            error=error,
            submitted_at=written.submitted_at,
            completed_at=written.completed_at,
            source_sha256=assembled.source_sha256 or "",
            missing_pages=tuple(assembled.missing_pages),
            failed_pages=tuple(assembled.failed_pages),
            attributes=dict(effect.attributes),
            trace_id=effect.trace_id,
            tenant=effect.tenant,
            pages_cached=written.pages_cached,
            revision=effect.revision,
        )
        fut = await self.documents.send(
            key=doc_id.encode(), value=self.codec.encode(event, self.documents.get_topic_name())
        )
        await fut
        ended = self._step(TerminalPublished(doc_id, status.value, effect.revision))
        await self._carry_out(ended.effects)
        # Write the terminal mark to the changelog now, not at the next commit: a crash after
        # this point can no longer publish a second event for the document.
        await self.app.producer.flush()
        self.metrics.documents.labels(status.value).inc()
        latency = (written.completed_at - written.submitted_at).total_seconds()
        self.metrics.document_latency.observe(max(0.0, latency))
        self.metrics.stage_seconds.labels(STAGE).observe(time.perf_counter() - written.started)
        log.info("document %s %s: %d/%d pages ok, %.2fs after submission", doc_id,
                 status.value, event.pages_ok, page_count, latency)  # fmt: skip

    async def _write_outputs(
        self, doc: AssembledDocument, formats: list[str], source_uri: str | None
    ) -> dict[str, str]:
        """Build and upload the outputs; returns name → object URI. Retries while the store is
        down; the PDF is left out when the source can't be had (missing, unreadable)."""
        written: dict[str, str] = {}
        with tempfile.TemporaryDirectory(prefix="ocrstream-assemble-") as tmp:
            source: Path | None = None
            crops = "md" in formats and outputs.has_figures(doc)
            if ("pdf" in formats or crops) and source_uri:
                try:
                    bucket, key = parse_s3_uri(source_uri)
                    download = await self._store(self.store.get_to_file, key, Path(tmp) / "src",
                                                 max_bytes=self.limits.max_file_bytes,
                                                 bucket=bucket)  # fmt: skip
                    source = download.path
                except PoisonError as e:
                    log.warning("no searchable PDF for %s: source unavailable: %s", doc.doc_id, e)
            loop = asyncio.get_running_loop()
            built = await loop.run_in_executor(
                self._render, lambda: outputs.build(doc, formats, source, dpi=self.dpi,
                                                    limits=self.limits),
            )  # fmt: skip
            for fmt, (data, content_type) in built.items():
                key = self.store.keys.document(doc.doc_id, fmt)
                info = await self._store(self.store.put_bytes, key, data,
                                         content_type=content_type,
                                         metadata=revision_metadata(doc.revision))  # fmt: skip
                written[fmt] = info.uri
            if crops and source is not None:
                await self._write_figures(doc, source)
        return written

    async def _write_figures(self, doc: AssembledDocument, source: Path) -> None:
        """The figure crops beside document.md (not listed among the outputs)."""
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(
            self._render, lambda: outputs.figures(doc, source, dpi=self.dpi, limits=self.limits)
        )
        for path, data in found.items():
            key = self.store.keys.figure(doc.doc_id, path)
            await self._store(self.store.put_bytes, key, data, content_type="image/png")

    # --- helpers ------------------------------------------------------------------------------

    async def _store(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A store call, waited out while the store is down (:class:`StoreCalls`)."""
        result: T = await self.store_calls(fn, *args, **kwargs)
        return result

    async def _dead_letter(self, msg: Any, exc: BaseException) -> None:
        await send_dead_letter(self.dlq, self.codec, self.metrics, msg, exc, stage=STAGE,
                               max_bytes=self.limits.max_message_bytes)  # fmt: skip


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _page_key(doc_id: str, page_no: int) -> str:
    return f"{doc_id}/{page_no}"


def _marker(state: DocumentState) -> bytes:
    """The deadline marker: its kind (as earlier assemblers read it), then any revision."""
    kind = DEADLINE if state.done else EXPIRE
    return kind + (b":%d" % state.revision if state.revision > 1 else b"")


def _from_ms(ms: int) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC)


def build_assembler(
    kafka: KafkaSettings,
    store: ObjectStore,
    settings: AssemblerSettings,
    limits: LimitsSettings,
    metrics: Metrics,
    *,
    dpi: int,
    codec: Codec | None = None,
) -> faust.App:
    """The assembler's faust app with its agents and deadline timer registered; ``dpi`` must be
    the splitter's (the searchable PDF re-splits the source to get the same page images)."""
    partitions = topic_partitions(kafka, topics.PAGE_RESULTS)
    scan_partitions = topic_partitions(kafka, topics.SCANS)
    if scan_partitions != partitions:
        raise FatalError(
            f"{topics.SCANS} has {scan_partitions} partitions and {topics.PAGE_RESULTS} "
            f"{partitions}: they must be equal (co-partitioned by doc_id)",
            code="not_copartitioned",
        )
    app = make_app(settings.app_id, kafka, partitions=partitions, limits=limits,
                   replication_factor=settings.changelog_replication)  # fmt: skip
    assembler = Assembler(
        app,
        kafka=kafka,
        store=store,
        settings=settings,
        limits=limits,
        codec=codec or Codec(kafka),
        metrics=metrics,
        partitions=partitions,
        dpi=dpi,
    )

    watch = StallWatch(app, kafka, metrics, agent="assembler",
                       interval_s=settings.stall_check_interval_s,
                       stall_after_s=settings.stall_after_s)  # fmt: skip
    assembler.store_calls.watch = watch
    register_agent(app, assembler.results, "ocrstream.assembler.results", assembler.on_result,
                   watch)  # fmt: skip
    register_agent(app, assembler.scans, "ocrstream.assembler.scans", assembler.on_scan, watch)
    register_agent(app, assembler.deadlines, "ocrstream.assembler.deadlines",
                   assembler.on_deadline, watch)  # fmt: skip
    declare_internal_topics(app, kafka, settings.changelog_replication, assembler.deadlines)
    app.timer(settings.scan_interval_s, name="ocrstream.assembler.deadline-scan")(
        assembler.scan_deadlines
    )
    return app
