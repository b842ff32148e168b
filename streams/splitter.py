"""The splitter: a faust agent on ``ocr.scans.v1`` that turns each scan into page tasks.

For every ScanSubmitted it fetches the source (inline bytes, or the object into a temporary
file), checks the limits, and splits it with :mod:`ocrstream.processors.split` on a single
worker thread (CPU-heavy, and MuPDF is not thread-safe), streaming one page at a time:

- a page becomes a PageTask on ``ocr.pages.v1`` keyed ``doc_id/page_no`` (so the pages of one
  document spread over the OCR workers); an image over ``claim_check_bytes`` goes to the store
  (``pages/{doc_id}/{page_no:05d}.{ext}``) and travels by URI; a page with a usable text layer
  (when asked for) carries its lines and needs no OCR;
- a page that can't be produced becomes a failed PageResult straight to the assembler;
- a document that can't be read ends at once with a failed DocumentEvent and its reason code.

The searchable PDF is built by the assembler from the *source* (the original page images,
untouched), so an inline source that asks for a PDF is uploaded to ``scans/{doc_id}/…``: one
object per document instead of one per page.

Duplicates: the ``splitter-documents`` table (changelog-backed, co-partitioned with the scans
by doc_id) remembers, per doc_id, the latest revision split or failed; a second ScanSubmitted
of that revision or an older one is skipped, a newer revision (``ocrstream reprocess``) is
split again. A crash mid-document re-splits it on replay; the assembler de-duplicates the page
results by (doc_id, revision, page_no) and remembers the terminal event, so no second one is
emitted.

At-least-once: faust acks a scan only when the handler returns, which is after every page
and event of it was delivered. No exception leaves the agent loop: a record that can't be
decoded goes to ``ocr.dlq.v1``; an unexpected error fails the document and dead-letters the
record; a store outage is retried with backoff, holding the message.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import faust

from ocrstream.errors import FatalError, PoisonError, ReasonCode
from ocrstream.logs import log_context
from ocrstream.processors.ocr.types import Line as OcrLine
from ocrstream.processors.regions import OPTION as REGIONS_OPTION
from ocrstream.processors.regions import InvalidRegionsError, Region, for_page, parse_regions
from ocrstream.processors.regions import encode as encode_regions
from ocrstream.processors.split import iter_pages, sniff
from ocrstream.processors.split_types import SplitPage
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import (
    DocumentEvent,
    DocumentStatus,
    ErrorInfo,
    Line,
    PageImage,
    PageResult,
    PageStatus,
    PageTask,
    Point,
    ScanSubmitted,
    utc_now,
)
from ocrstream.settings import KafkaSettings, LimitsSettings, SplitterSettings
from ocrstream.storage import ObjectStore, parse_s3_uri, validate_doc_id
from ocrstream.streams import topics
from ocrstream.streams.agent import (
    StallWatch,
    StoreCalls,
    decode_or_dead_letter,
    register_agent,
    send_dead_letter,
)
from ocrstream.streams.app import (
    DeliveryWindow,
    declare_internal_topics,
    make_app,
    raw_topic,
    topic_partitions,
)
from ocrstream.streams.media import extension
from ocrstream.streams.metrics import Metrics

log = logging.getLogger(__name__)

STAGE = "splitter"
TEXT_LAYER_ATTRIBUTE = "text_layer"
T = TypeVar("T")


class DocumentFailed(Exception):
    """The document ends here, failed, with a reason code."""

    def __init__(self, code: str, message: str, page_count: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.page_count = page_count


def source_bucket_allowed(bucket: str, own: str, allowed: tuple[str, ...]) -> bool:
    """May a scan's source be read from ``bucket``? The store's own bucket always; others only
    when listed (``*``: any)."""
    return bucket == own or "*" in allowed or bucket in allowed


def wants_text_layer(scan: ScanSubmitted, default: bool) -> bool:
    value = scan.attributes.get(TEXT_LAYER_ATTRIBUTE, "")
    return default or value.lower() in ("1", "true", "yes", "on")


def page_outputs(scan: ScanSubmitted) -> tuple[str, ...]:
    """The outputs the pages ask the assembler for: the scan's, plus ``md`` in layout mode."""
    outputs = tuple(scan.outputs)
    if scan.mode == "layout" and "md" not in outputs:
        outputs += ("md",)
    return outputs


def page_task(
    scan: ScanSubmitted,
    page: SplitPage,
    image: PageImage,
    source_uri: str | None,
    content_type: str,
    regions: tuple[Region, ...] | None = None,
) -> PageTask:
    """The PageTask of one split page; in key-field mode with the page's own ``regions``
    (``options["regions"]``, :mod:`ocrstream.processors.regions`)."""
    options = {k: v for k, v in scan.options.items() if k != REGIONS_OPTION}
    if regions is not None:
        options[REGIONS_OPTION] = encode_regions(for_page(regions, page.page_no))
    return PageTask(
        doc_id=scan.doc_id,
        page_no=page.page_no,
        page_count=page.page_count,
        image=image,
        width=page.width,
        height=page.height,
        dpi=page.dpi,
        source_sha256=scan.sha256,
        source_uri=source_uri,
        content_type=content_type,
        outputs=page_outputs(scan),
        submitted_at=scan.submitted_at,
        text_layer=_lines(page.text_lines) if page.text_lines is not None else None,
        trace_id=scan.trace_id,
        priority=scan.priority,
        tenant=scan.tenant,
        mode=scan.mode,
        options=options,
        revision=scan.revision,
        text_layer_rules=page.text_rules if page.text_lines is not None else (),
        text_layer_images=page.text_images if page.text_lines is not None else (),
    )


def scan_regions(scan: ScanSubmitted, templates: Path | None) -> tuple[Region, ...] | None:
    """The named regions a scan asks for (None: not key-field mode), its template resolved
    from the ``templates`` file; a bad spec is :class:`DocumentFailed` ``invalid_regions``."""
    spec = scan.options.get(REGIONS_OPTION)
    if spec is None:
        return None
    try:
        return parse_regions(spec, _templates(templates))
    except InvalidRegionsError as e:
        raise DocumentFailed(e.code, str(e)) from e


def _templates(path: Path | None) -> dict[str, object]:
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise FatalError(f"region templates {path} cannot be read: {e}") from e
    if not isinstance(data, dict):
        raise FatalError(f"region templates {path}: a JSON object of name → regions")
    return data


def failed_page(
    scan: ScanSubmitted, page: SplitPage, source_uri: str | None, content_type: str
) -> PageResult:
    return PageResult(
        doc_id=scan.doc_id,
        page_no=page.page_no,
        page_count=page.page_count,
        status=PageStatus.FAILED,
        error=ErrorInfo(page.error_code or "page_error", page.error_message or ""),
        worker_id=STAGE,
        source_sha256=scan.sha256,
        source_uri=source_uri,
        content_type=content_type,
        outputs=page_outputs(scan),
        submitted_at=scan.submitted_at,
        completed_at=utc_now(),
        trace_id=scan.trace_id,
        tenant=scan.tenant,
        mode=scan.mode,
        revision=scan.revision,
    )


def failed_document(
    scan: ScanSubmitted, code: str, message: str, page_count: int = 0
) -> DocumentEvent:
    return DocumentEvent(
        doc_id=scan.doc_id,
        status=DocumentStatus.FAILED,
        page_count=page_count,
        pages_ok=0,
        pages_failed=0,
        error=ErrorInfo(code, message[:2000]),
        submitted_at=scan.submitted_at,
        completed_at=utc_now(),
        source_sha256=scan.sha256,
        attributes=scan.attributes,
        trace_id=scan.trace_id,
        tenant=scan.tenant,
        revision=scan.revision,
    )


def _lines(lines: tuple[OcrLine, ...]) -> tuple[Line, ...]:
    return tuple(
        Line(ln.text, float(ln.confidence), tuple(Point(float(x), float(y)) for x, y in ln.polygon))
        for ln in lines
    )


class Splitter:
    """The handler behind the agent; one per process."""

    def __init__(
        self,
        app: faust.App,
        *,
        kafka: KafkaSettings,
        store: ObjectStore,
        settings: SplitterSettings,
        limits: LimitsSettings,
        codec: Codec,
        metrics: Metrics,
        partitions: int,
    ) -> None:
        self.app, self.store, self.settings, self.limits = app, store, settings, limits
        self.codec, self.metrics = codec, metrics
        self.scans = raw_topic(app, kafka.topic(topics.SCANS))
        self.pages = raw_topic(app, kafka.topic(topics.PAGES))
        self.results = raw_topic(app, kafka.topic(topics.PAGE_RESULTS))
        self.documents = raw_topic(app, kafka.topic(topics.DOCUMENTS))
        self.dlq = raw_topic(app, kafka.topic(topics.DLQ))
        self.done = app.Table("splitter-documents", default=None, partitions=partitions)
        self._pool = ThreadPoolExecutor(1, "split")  # MuPDF: one document at a time
        self.store_calls = StoreCalls(
            app, ThreadPoolExecutor(4, "split-io"), metrics, stage=STAGE,
            topics=[self.scans.get_topic_name()], backoff_s=settings.store_backoff_s,
            backoff_max_s=settings.store_backoff_max_s,
        )  # fmt: skip

    # --- the agent loop ---------------------------------------------------------------------

    async def handle(self, event: Any) -> None:
        """Handle one scan record; never raises (except cancellation at shutdown)."""
        msg = event.message
        with log_context(tp=f"{msg.topic}[{msg.partition}]@{msg.offset}"):
            scan = await decode_or_dead_letter(self.codec, event, ScanSubmitted, self._dead_letter)
            if scan is None:
                return
            with log_context(doc_id=scan.doc_id, trace_id=scan.trace_id):
                try:
                    await self._scan(scan)
                except FatalError:
                    raise
                except Exception as e:
                    log.exception("splitting failed unexpectedly")
                    await self._fail(scan, DocumentFailed("internal_error", repr(e)))
                    await self._dead_letter(msg, e)

    async def _scan(self, scan: ScanSubmitted) -> None:
        previous = self.done.get(scan.doc_id)
        if previous is not None and int(previous.get("revision") or 1) >= scan.revision:
            log.info(
                "duplicate ScanSubmitted for %s revision %d (already %s at revision %s): skipped",
                scan.doc_id,
                scan.revision,
                previous.get("status"),
                previous.get("revision") or 1,
            )
            self.metrics.pages.labels(STAGE, "duplicate_document").inc(0)
            return
        started = time.perf_counter()
        try:
            pages = await self._split(scan)
        except DocumentFailed as e:
            await self._fail(scan, e)
            return
        self.done[scan.doc_id] = {"status": "split", "pages": pages, "sha256": scan.sha256,
                                  "revision": scan.revision}  # fmt: skip
        await self.app.producer.flush()  # the mark reaches the changelog before the next scan
        self.metrics.stage_seconds.labels(STAGE).observe(time.perf_counter() - started)
        log.info(
            "split %s into %d pages in %.2fs", scan.doc_id, pages, time.perf_counter() - started
        )

    # --- one document -------------------------------------------------------------------------

    async def _split(self, scan: ScanSubmitted) -> int:
        try:
            validate_doc_id(scan.doc_id)
        except Exception as e:
            raise DocumentFailed("invalid_doc_id", str(e)) from e
        if scan.size_bytes > self.limits.max_file_bytes:
            raise DocumentFailed(
                ReasonCode.FILE_TOO_LARGE,
                f"declared size {scan.size_bytes} is over the limit {self.limits.max_file_bytes}",
            )
        with tempfile.TemporaryDirectory(prefix="ocrstream-split-") as tmp:
            source, head = await self._fetch(scan, Path(tmp))
            content_type = sniff(head) or scan.content_type
            source_uri = await self._source_uri(scan, source, content_type)
            regions = scan_regions(scan, self.settings.region_templates)
            return await self._pages(scan, source, content_type, source_uri, regions)

    async def _fetch(self, scan: ScanSubmitted, tmp: Path) -> tuple[bytes | Path, bytes]:
        """The source as bytes (inline) or a file path; checks its SHA-256 when declared."""
        if scan.source.data is not None:
            data = scan.source.data
            if len(data) > self.limits.max_file_bytes:
                raise DocumentFailed(ReasonCode.FILE_TOO_LARGE, f"{len(data)} bytes inline")
            sha = hashlib.sha256(data).hexdigest()
            source: bytes | Path = data
            head = data[:1024]
        elif scan.source.uri:
            try:
                bucket, key = parse_s3_uri(scan.source.uri)
            except Exception as e:
                raise DocumentFailed("invalid_source_uri", str(e)) from e
            if not source_bucket_allowed(bucket, self.store.bucket, self.settings.source_buckets):
                raise DocumentFailed(
                    "source_not_allowed",
                    f"bucket {bucket!r} is neither the store's bucket nor in "
                    "OCRSTREAM_SPLITTER_SOURCE_BUCKETS",
                )
            path = tmp / "source"
            download = await self._store(
                self.store.get_to_file,
                key,
                path,
                max_bytes=self.limits.max_file_bytes,
                bucket=bucket,
            )
            sha, source = download.sha256, download.path
            with open(download.path, "rb") as f:
                head = f.read(1024)
        else:
            raise DocumentFailed("source_missing", "the scan has neither a URI nor inline bytes")
        if scan.sha256 and sha != scan.sha256.lower():
            raise DocumentFailed("checksum_mismatch", f"source SHA-256 is {sha}, not {scan.sha256}")
        return source, head

    async def _source_uri(
        self, scan: ScanSubmitted, source: bytes | Path, content_type: str
    ) -> str | None:
        """Where the assembler finds the original pages for the searchable PDF."""
        if scan.source.uri:
            return scan.source.uri
        if "pdf" not in scan.outputs or not isinstance(source, bytes):
            return None
        ext = extension(content_type)
        key = self.store.keys.source(scan.doc_id, ext)
        info = await self._store(self.store.put_bytes, key, source, content_type=content_type)
        return info.uri

    async def _pages(
        self,
        scan: ScanSubmitted,
        source: bytes | Path,
        content_type: str,
        source_uri: str | None,
        regions: tuple[Region, ...] | None = None,
    ) -> int:
        pages = iter_pages(
            source if isinstance(source, bytes) else str(source),
            scan.content_type,
            self.limits,
            dpi=self.settings.dpi,
            # key-field pages are read from their regions' pixels, never from a text layer
            use_text_layer=regions is None and wants_text_layer(scan, self.settings.text_layer),
        )
        window = DeliveryWindow(size=16)
        count = 0
        try:
            page = await self._next(pages)  # document-level checks raise here
            while page is not None:
                await self._emit(scan, page, window, content_type, source_uri, regions)
                count = page.page_count
                page = await self._next(pages)
            await window.drain()
        except BaseException:
            window.discard()
            close = getattr(pages, "close", None)  # the generator closes the document
            if close is not None:
                await asyncio.get_running_loop().run_in_executor(self._pool, close)
            raise
        if count == 0:
            raise DocumentFailed(ReasonCode.ZERO_PAGES, "the document has no pages")
        return count

    async def _next(self, pages: Iterator[SplitPage]) -> SplitPage | None:
        try:
            # In the record's log context: what MuPDF says about a page names its document.
            ctx = contextvars.copy_context()
            return await asyncio.get_running_loop().run_in_executor(
                self._pool, lambda: ctx.run(next, pages, None)
            )
        except PoisonError as e:
            raise DocumentFailed(str(e.code), str(e)) from e

    async def _emit(
        self,
        scan: ScanSubmitted,
        page: SplitPage,
        window: DeliveryWindow,
        content_type: str,
        source_uri: str | None,
        regions: tuple[Region, ...] | None = None,
    ) -> None:
        doc_id = scan.doc_id
        if not page.ok:
            result = failed_page(scan, page, source_uri, content_type)
            await window.send(
                self.results,
                doc_id.encode(),
                self.codec.encode(result, self.results.get_topic_name()),
            )
            self.metrics.pages.labels(STAGE, "failed").inc()
            return
        if len(page.data) > self.settings.claim_check_bytes:
            key = self.store.keys.page(doc_id, page.page_no, page.encoding or "bin")
            info = await self._store(
                self.store.put_bytes, key, page.data, content_type=f"image/{page.encoding}"
            )
            image = PageImage(page.encoding, uri=info.uri)
        else:
            image = PageImage(page.encoding, data=page.data)
        task = page_task(scan, page, image, source_uri, content_type, regions)
        key_bytes = f"{doc_id}/{page.page_no}".encode()
        await window.send(
            self.pages, key_bytes, self.codec.encode(task, self.pages.get_topic_name())
        )
        status = "text_layer" if task.text_layer is not None else "ok"
        self.metrics.pages.labels(STAGE, status).inc()

    # --- helpers ------------------------------------------------------------------------------

    async def _store(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A store call, waited out while the store is down (:class:`StoreCalls`); a store that
        refuses for good fails the document."""
        try:
            result: T = await self.store_calls(fn, *args, **kwargs)
        except PoisonError as e:
            raise DocumentFailed(str(e.code), str(e)) from e
        return result

    async def _fail(self, scan: ScanSubmitted, failure: DocumentFailed) -> None:
        event = failed_document(scan, failure.code, str(failure), failure.page_count)
        fut = await self.documents.send(
            key=scan.doc_id.encode(),
            value=self.codec.encode(event, self.documents.get_topic_name()),
        )
        await fut
        self.done[scan.doc_id] = {"status": "failed", "code": failure.code,
                                  "revision": scan.revision}  # fmt: skip
        await self.app.producer.flush()
        self.metrics.documents.labels("failed").inc()
        latency = (event.completed_at - scan.submitted_at).total_seconds()
        self.metrics.document_latency.observe(max(0.0, latency))
        log.warning("document %s failed: %s: %s", scan.doc_id, failure.code, failure)

    async def _dead_letter(self, msg: Any, exc: BaseException) -> None:
        await send_dead_letter(self.dlq, self.codec, self.metrics, msg, exc, stage=STAGE,
                               max_bytes=self.limits.max_message_bytes)  # fmt: skip


def build_splitter(
    kafka: KafkaSettings,
    store: ObjectStore,
    settings: SplitterSettings,
    limits: LimitsSettings,
    metrics: Metrics,
    codec: Codec | None = None,
) -> faust.App:
    """The splitter's faust app, its agent registered; run it with :func:`run_app`."""
    partitions = topic_partitions(kafka, topics.SCANS)
    app = make_app(
        settings.app_id,
        kafka,
        partitions=partitions,
        limits=limits,
        replication_factor=settings.changelog_replication,
    )
    splitter = Splitter(
        app,
        kafka=kafka,
        store=store,
        settings=settings,
        limits=limits,
        codec=codec or Codec(kafka),
        metrics=metrics,
        partitions=partitions,
    )

    watch = StallWatch(app, kafka, metrics, agent=STAGE,
                       interval_s=settings.stall_check_interval_s,
                       stall_after_s=settings.stall_after_s)  # fmt: skip
    splitter.store_calls.watch = watch
    register_agent(app, splitter.scans, "ocrstream.splitter", splitter.handle, watch)
    declare_internal_topics(app, kafka, settings.changelog_replication)
    return app
