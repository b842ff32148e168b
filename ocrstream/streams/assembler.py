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
the store, then exactly one DocumentEvent is published, then the table records it. Deadlines
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
import logging
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import faust
from aiokafka.partitioner import DefaultPartitioner

from ocrstream.errors import FatalError, PoisonError, RetriableError
from ocrstream.logs import log_context
from ocrstream.processors.assemble import AssembledDocument
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
from ocrstream.streams import outputs, topics
from ocrstream.streams.agent import StallWatch, register_agent
from ocrstream.streams.app import declare_internal_topics, make_app, raw_topic, topic_partitions
from ocrstream.streams.dlq import dead_letter
from ocrstream.streams.metrics import Metrics

log = logging.getLogger(__name__)

STAGE = "assembler"
DEADLINE = b"deadline"
EXPIRE = b"expire"
SCAN_ONLY_TTL_S = 7 * 24 * 3600.0  # scans whose pages never came (split failed): forget them
T = TypeVar("T")


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


# --- the bitmap of pages that are in ---------------------------------------------------------


def bit_test(bitmap: str, page_no: int) -> bool:
    i = page_no - 1
    return len(bitmap) > i // 4 and bool(int(bitmap[i // 4], 16) & (1 << (i % 4)))


def bit_set(bitmap: str, page_no: int) -> str:
    i = page_no - 1
    if len(bitmap) <= i // 4:
        bitmap += "0" * (i // 4 + 1 - len(bitmap))
    nibble = int(bitmap[i // 4], 16) | (1 << (i % 4))
    return f"{bitmap[: i // 4]}{nibble:x}{bitmap[i // 4 + 1 :]}"


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
        self._partitioner = DefaultPartitioner()
        self.dpi = dpi
        self._pool = ThreadPoolExecutor(4, "assemble-io")
        self._render = ThreadPoolExecutor(1, "assemble-render")  # MuPDF: one at a time

    # --- page results -----------------------------------------------------------------------

    async def on_result(self, event: Any) -> None:
        msg = event.message
        with log_context(tp=f"{msg.topic}[{msg.partition}]@{msg.offset}"):
            try:
                result = self.codec.decode_as(event.value or b"", PageResult)
            except PoisonError as e:
                log.warning("undecodable page result goes to the DLQ: %s", e)
                await self._dead_letter(msg, e)
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
        doc_id, page_no = result.doc_id, result.page_no
        # Checked before anything is stored: a doc_id that can't name the outputs would leave a
        # complete document that can never be finished, retried by the deadline timer forever.
        validate_doc_id(doc_id)
        doc = self.docs.get(doc_id) or {}
        if doc.get("terminal"):
            self.metrics.pages.labels(STAGE, "after_terminal").inc()
            return
        page_count = int(doc.get("page_count") or result.page_count)
        if not 1 <= result.page_count <= self.limits.max_pages:
            # Finishing walks every page number and lists the missing ones: a raw record
            # claiming a billion pages must not get that far.
            raise PoisonError(
                f"a document of {result.page_count} pages (limit {self.limits.max_pages})",
                code="invalid_page_count",
            )
        if not 1 <= page_no <= page_count:
            raise PoisonError(
                f"page {page_no} of a {page_count}-page document", code="invalid_page_no"
            )
        key = f"{doc_id}/{page_no}"
        failed = set(doc.get("failed", ()))
        bitmap = doc.get("bitmap", "")
        is_failed = result.status is PageStatus.FAILED
        if bit_test(bitmap, page_no):
            if page_no in failed and not is_failed:  # a retry succeeded: keep the better one
                failed.discard(page_no)
                self.pages[key] = _b64(raw)
            else:
                self.metrics.pages.labels(STAGE, "duplicate").inc()
                if int(doc.get("done", 0)) >= page_count:
                    # A replay after a crash between "all pages in" and the terminal event.
                    await self._finish(doc_id)
                return
        else:
            bitmap = bit_set(bitmap, page_no)
            if is_failed:
                failed.add(page_no)
            self.pages[key] = _b64(raw)
        done = int(doc.get("done", 0)) + (0 if bit_test(doc.get("bitmap", ""), page_no) else 1)
        now = time.time()
        doc.update(
            page_count=page_count, bitmap=bitmap, done=done, failed=sorted(failed),
            updated_at=now, first_at=doc.get("first_at", now),
            submitted_at=doc.get("submitted_at") or _ms(result.submitted_at.timestamp()),
            source_sha256=result.source_sha256, source_uri=result.source_uri,
            outputs=list(result.outputs), trace_id=doc.get("trace_id") or result.trace_id,
        )  # fmt: skip
        self.docs[doc_id] = doc
        self.metrics.pages.labels(STAGE, result.status.value).inc()
        progress = DocumentProgress(doc_id=doc_id, pages_done=done, page_count=page_count,
                                    updated_at=utc_now(), pages_failed=len(failed),
                                    trace_id=doc.get("trace_id"))  # fmt: skip
        await self.progress.send(
            key=doc_id.encode(), value=self.codec.encode(progress, self.progress.get_topic_name())
        )
        if done >= page_count:
            await self._finish(doc_id)

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
        doc = self.docs.get(scan.doc_id) or {}
        if doc.get("terminal") or doc.get("scan_seen"):
            return
        doc.update(
            scan_seen=True, attributes=dict(scan.attributes), trace_id=scan.trace_id,
            submitted_at=_ms(scan.submitted_at.timestamp()), source_sha256=scan.sha256,
            scan_at=time.time(),
        )  # fmt: skip
        self.docs[scan.doc_id] = doc

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
        """Timer: mark documents that made no progress for ``deadline_s``, and complete ones
        left unfinished by a crash."""
        now = time.time()
        for doc_id, doc in list(self.docs.items()):
            if not doc or doc.get("terminal"):
                continue
            if self._marked.get(doc_id, 0.0) > now - self.settings.deadline_s:
                continue
            if doc.get("done"):
                idle = now - float(doc.get("updated_at", now))
                # Complete but never finished (a crash in between; nothing may be replayed if
                # the offsets were committed): finish it soon, not at the deadline.
                complete = int(doc["done"]) >= int(doc.get("page_count", 0))
                overdue = idle >= self.settings.deadline_s or (
                    complete
                    and idle >= 2 * self.settings.scan_interval_s
                    and doc_id not in self._finishing
                )
                marker = DEADLINE
            else:
                overdue = now - float(doc.get("scan_at", now)) >= SCAN_ONLY_TTL_S
                marker = EXPIRE
            if overdue and self.owns(doc_id):
                self._marked[doc_id] = now
                await self.deadlines.send(key=doc_id.encode(), value=marker)
        self.metrics.inflight_documents.set(
            sum(1 for d in self.docs.values() if d and d.get("done") and not d.get("terminal"))
        )

    async def on_deadline(self, event: Any) -> None:
        doc_id = bytes(event.key or b"").decode("utf-8", "replace")
        with log_context(doc_id=doc_id):
            try:
                doc = self.docs.get(doc_id)
                if not doc or doc.get("terminal"):
                    return
                if event.value == EXPIRE and not doc.get("done"):
                    del self.docs[doc_id]
                    return
                age = time.time() - float(doc.get("updated_at", 0))
                complete = int(doc.get("done", 0)) >= int(doc.get("page_count", 0))
                if event.value == DEADLINE and (complete or age >= self.settings.deadline_s):
                    if not complete:
                        log.warning("deadline passed for %s: %s of %s pages in", doc_id,
                                    doc.get("done"), doc.get("page_count"))  # fmt: skip
                    await self._finish(doc_id)
            except Exception:
                log.exception("deadline handling failed")
            finally:
                self._marked.pop(doc_id, None)

    # --- finishing ----------------------------------------------------------------------------

    async def _finish(self, doc_id: str) -> None:
        if doc_id in self._finishing:
            return
        self._finishing.add(doc_id)
        try:
            await self._finish_document(doc_id)
        finally:
            self._finishing.discard(doc_id)

    async def _finish_document(self, doc_id: str) -> None:
        started = time.perf_counter()
        doc = dict(self.docs[doc_id])
        page_count = int(doc["page_count"])
        results: list[PageResult] = []
        for page_no in range(1, page_count + 1):
            stored = self.pages.get(f"{doc_id}/{page_no}")
            if stored is not None:
                results.append(self.codec.decode_as(base64.b64decode(stored), PageResult))
        submitted_at = _from_ms(int(doc.get("submitted_at") or _ms(time.time())))
        completed_at = utc_now()
        assembled = outputs.assemble_document(
            doc_id, page_count, results, source_sha256=doc.get("source_sha256") or None,
            submitted_at=submitted_at, completed_at=completed_at,
        )  # fmt: skip
        formats = [f for f in doc.get("outputs") or outputs.FORMATS if f in outputs.FORMATS]
        written = await self._write_outputs(assembled, formats, doc.get("source_uri"))
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
            outputs=written,
            error=error,
            submitted_at=submitted_at,
            completed_at=completed_at,
            source_sha256=str(doc.get("source_sha256") or ""),
            missing_pages=tuple(assembled.missing_pages),
            failed_pages=tuple(assembled.failed_pages),
            attributes=doc.get("attributes") or {},
            trace_id=doc.get("trace_id"),
        )
        fut = await self.documents.send(
            key=doc_id.encode(), value=self.codec.encode(event, self.documents.get_topic_name())
        )
        await fut
        self.docs[doc_id] = {"terminal": status.value, "page_count": page_count,
                             "at": _ms(time.time())}  # fmt: skip
        for result in results:
            del self.pages[f"{doc_id}/{result.page_no}"]
        # Write the terminal mark to the changelog now, not at the next commit: a crash after
        # this point can no longer publish a second event for the document.
        await self.app.producer.flush()
        self.metrics.documents.labels(status.value).inc()
        latency = (completed_at - submitted_at).total_seconds()
        self.metrics.document_latency.observe(max(0.0, latency))
        self.metrics.stage_seconds.labels(STAGE).observe(time.perf_counter() - started)
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
            if "pdf" in formats and source_uri:
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
                                         content_type=content_type)  # fmt: skip
                written[fmt] = info.uri
        return written

    # --- helpers ------------------------------------------------------------------------------

    async def _store(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A blocking store call in a thread, retried with backoff while the store is down."""
        loop = asyncio.get_running_loop()
        attempt = 0
        while True:
            try:
                return await loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))
            except RetriableError as e:
                attempt += 1
                delay = min(self.settings.store_backoff_max_s,
                            self.settings.store_backoff_s * 2 ** (attempt - 1))  # fmt: skip
                self.metrics.retries.labels(STAGE, e.code).inc()
                log.warning("store unavailable (%s); retry %d in %.1fs", e, attempt, delay)
                await asyncio.sleep(delay)

    async def _dead_letter(self, msg: Any, exc: BaseException) -> None:
        letter = dead_letter(
            topic=msg.topic, partition=msg.partition, offset=msg.offset, key=msg.key,
            value=msg.value, headers=msg.headers, stage=STAGE, exc=exc,
            timestamp_ms=int(msg.timestamp * 1000) if msg.timestamp else None,
            max_bytes=self.limits.max_message_bytes,
        )  # fmt: skip
        fut = await self.dlq.send(
            key=letter.key, value=self.codec.encode(letter, self.dlq.get_topic_name())
        )
        await fut
        self.metrics.dlq.labels(STAGE, letter.error_code).inc()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


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
