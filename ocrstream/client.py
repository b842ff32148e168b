"""The producer SDK: submit scans, follow their pages and documents, fetch the outputs.

    >>> client = OcrClient(KafkaSettings(), S3Settings())
    >>> doc_id = client.submit("scan.pdf")
    >>> event = client.wait(doc_id, timeout=300)
    >>> client.download(doc_id, "out/scan")

A file up to ``LimitsSettings.max_inline_bytes`` travels inside the ScanSubmitted record;
a bigger one is uploaded to ``scans/{doc_id}/source.{ext}`` first and referenced by URI.

The default doc_id is derived from the content and the requested outputs
(``sha256`` of them, 32 hex digits): submitting the same file again is idempotent, and
:meth:`wait` finds the document's terminal event even when it was made earlier
(``ocr.documents.v1`` is compacted by doc_id). Pass ``doc_id`` to process a file again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, TopicPartition

from ocrstream.errors import PoisonError, RetriableError
from ocrstream.processors.regions import OPTION as REGIONS_OPTION
from ocrstream.processors.regions import parse_regions
from ocrstream.processors.split import sniff
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import (
    DEFAULT_OUTPUTS,
    DocumentEvent,
    DocumentProgress,
    PageResult,
    ScanSource,
    ScanSubmitted,
    utc_now,
)
from ocrstream.settings import ClientSettings, KafkaSettings, LimitsSettings, ParseMode, S3Settings
from ocrstream.storage import ObjectStore, validate_doc_id
from ocrstream.streams import topics
from ocrstream.streams.fetch_watch import FetchWatch
from ocrstream.streams.follow import until_terminal
from ocrstream.streams.media import extension
from ocrstream.streams.producer import RecordProducer

log = logging.getLogger(__name__)

# What wait_many passes to its on_update: a document's page results, progress and end.
_FOLLOWED = (PageResult, DocumentProgress, DocumentEvent)

Update = PageResult | DocumentProgress | DocumentEvent


class SubmitError(RetriableError):
    code = "submit_failed"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def content_doc_id(
    sha256: str, outputs: Sequence[str], mode: str = ParseMode.TEXT, regions: str | None = None
) -> str:
    """The default doc_id: the same bytes asked for the same outputs in the same mode (and
    the same key-field regions) get the same id (text mode's ids are those from before modes
    existed)."""
    key = f"{sha256}|{','.join(sorted(outputs))}|"  # the last field was languages: ids stay
    if mode != ParseMode.TEXT:
        key += f"|mode={mode}"
    if regions is not None:
        key += f"|regions={regions}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


class OcrClient:
    """Submit documents and read what the pipeline says about them. Not thread-safe."""

    def __init__(
        self,
        kafka: KafkaSettings,
        s3: S3Settings,
        *,
        limits: LimitsSettings | None = None,
        codec: Codec | None = None,
        settings: ClientSettings | None = None,
    ) -> None:
        self.kafka, self.s3 = kafka, s3
        self.limits = limits or LimitsSettings()
        self.settings = settings or ClientSettings()
        self.codec = codec or Codec(kafka)
        self._producer: RecordProducer | None = None
        self._store: ObjectStore | None = None

    @property
    def producer(self) -> RecordProducer:
        if self._producer is None:
            self._producer = RecordProducer(self.kafka, self.codec, limits=self.limits)
        return self._producer

    @property
    def store(self) -> ObjectStore:
        if self._store is None:
            self._store = ObjectStore(self.s3)
        return self._store

    # --- submit -------------------------------------------------------------------------------

    def submit(
        self,
        source: str | os.PathLike[str] | bytes,
        doc_id: str | None = None,
        *,
        outputs: Sequence[str] = DEFAULT_OUTPUTS,
        attributes: Mapping[str, str] | None = None,
        content_type: str | None = None,
        tenant: str = "",
        priority: int = 0,
        text_layer: bool = False,
        trace_id: str | None = None,
        timeout_s: float = 60.0,
        mode: str | None = None,
        regions: Any = None,
    ) -> str:
        """Upload (or inline) the file and publish its ScanSubmitted; returns the doc_id once
        the record is acknowledged by the brokers.

        ``mode`` is ``text`` or ``layout`` (blocks in reading order, and ``document.md``);
        None takes ``ClientSettings.mode`` (``OCRSTREAM_CLIENT_MODE``, default ``text``).

        ``regions`` (key-field mode): named boxes ``[{"name", "page", "bbox"}]`` (``bbox`` in
        fractions of the page, ``page`` 0 for every page) or ``{"template": NAME}``; only those
        are read, and document.json gets ``fields`` (:mod:`ocrstream.processors.regions`)."""
        parse_mode = ParseMode(mode) if mode is not None else self.settings.mode
        options: dict[str, str] = {}
        if regions is not None:
            if not (isinstance(regions, Mapping) and "template" in regions):
                parse_regions(regions)  # a bad box is refused here, before anything is sent
            options[REGIONS_OPTION] = json.dumps(regions, separators=(",", ":"), sort_keys=True)
        path = None if isinstance(source, bytes) else Path(source)
        if path is not None:
            size = path.stat().st_size
            with open(path, "rb") as f:
                head = f.read(1024)
            sha = _sha256_file(path)
        else:
            assert isinstance(source, bytes)
            size, head, sha = len(source), source[:1024], hashlib.sha256(source).hexdigest()
        if size > self.limits.max_file_bytes:
            raise PoisonError(f"{size} bytes is over the limit of {self.limits.max_file_bytes}",
                              code="file_too_large")  # fmt: skip
        media_type = content_type or sniff(head) or "application/octet-stream"
        # An explicit id is checked as given: "" is refused, not replaced by the content id.
        if doc_id is None:
            doc_id = content_doc_id(sha, outputs, parse_mode, options.get(REGIONS_OPTION))
        doc_id = validate_doc_id(doc_id)
        if size <= self.limits.max_inline_bytes:
            data = source if isinstance(source, bytes) else path.read_bytes()  # type: ignore[union-attr]
            scan_source = ScanSource(data=data)
        else:
            key = self.store.keys.source(doc_id, extension(media_type))
            if path is not None:
                info = self.store.put_file(key, path, content_type=media_type)
            else:
                info = self.store.put_bytes(key, source, content_type=media_type)  # type: ignore[arg-type]
            scan_source = ScanSource(uri=info.uri)
        attrs = dict(attributes or {})
        if text_layer:
            attrs["text_layer"] = "true"
        scan = ScanSubmitted(
            doc_id=doc_id, source=scan_source, content_type=media_type, sha256=sha,
            size_bytes=size, submitted_at=utc_now(), tenant=tenant, priority=priority,
            outputs=tuple(outputs), attributes=attrs,
            trace_id=trace_id or uuid.uuid4().hex, mode=parse_mode.value, options=options,
        )  # fmt: skip
        self.publish(scan, timeout_s)
        log.info(
            "submitted %s (%d bytes, %s)",
            doc_id,
            size,
            "inline" if scan_source.data is not None else scan_source.uri,
        )
        return doc_id

    def publish(self, scan: ScanSubmitted, timeout_s: float = 60.0) -> None:
        """Publish a ScanSubmitted whose source is already in place (inline, or in the store);
        returns once the brokers acknowledged it. The HTTP API submits through this."""
        errors: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        self.producer.send(self.kafka.topic(topics.SCANS), scan.doc_id, scan, on_delivery=delivered)
        if self.producer.flush(timeout_s) or errors:
            raise SubmitError(
                f"ScanSubmitted for {scan.doc_id} not delivered: {errors or 'timeout'}"
            )

    # --- read ---------------------------------------------------------------------------------

    def _consumer(self, names: Iterable[str], from_beginning: bool) -> tuple[Consumer, FetchWatch]:
        """A consumer assigned every partition of ``names``, and its fetch watch (a partition
        librdkafka stops fetching is fetched again: :mod:`ocrstream.streams.fetch_watch`)."""
        consumer = Consumer(self.kafka.librdkafka(**{
            "group.id": f"ocrstream-client-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.max.bytes": 16 * 1024 * 1024,
        }))  # fmt: skip
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        assignment = []
        for name in names:
            topic = self.kafka.topic(name)
            try:
                md = consumer.list_topics(topic, timeout=30)
            except KafkaException as e:
                raise RetriableError(f"cannot reach Kafka: {e}") from e
            partitions = md.topics[topic].partitions if topic in md.topics else {}
            assignment += [TopicPartition(topic, p, start) for p in partitions]
        consumer.assign(assignment)
        watch = FetchWatch(consumer, None, "client", stall_after_s=self.kafka.fetch_stall_s)
        watch.assigned_from(assignment)
        return consumer, watch

    def results(
        self,
        *,
        follow: bool = True,
        from_beginning: bool = False,
        progress: bool = False,
        doc_ids: Iterable[str] | None = None,
        idle_timeout_s: float = 5.0,
    ) -> Iterator[Update]:
        """Page results and document events (and progress) as they arrive. With ``follow`` it
        runs until the caller stops; otherwise it ends after ``idle_timeout_s`` without news."""
        wanted = set(doc_ids) if doc_ids is not None else None
        names = [topics.PAGE_RESULTS, topics.DOCUMENTS] + ([topics.PROGRESS] if progress else [])
        consumer, watch = self._consumer(names, from_beginning)
        idle_since = time.monotonic()
        try:
            while follow or time.monotonic() - idle_since < idle_timeout_s:
                msg = watch.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    log.warning("consumer: %s", msg.error())
                    continue
                idle_since = time.monotonic()
                try:
                    record = self.codec.decode(msg.value() or b"")
                except PoisonError as e:
                    log.warning("skipping an undecodable record on %s: %s", msg.topic(), e)
                    continue
                if not isinstance(record, PageResult | DocumentProgress | DocumentEvent):
                    continue
                if wanted is None or record.doc_id in wanted:
                    yield record
        finally:
            consumer.close()

    def wait_many(
        self,
        doc_ids: Iterable[str],
        timeout_s: float | None = None,
        on_update: Callable[[Update], None] | None = None,
    ) -> dict[str, DocumentEvent]:
        """The terminal event of every doc_id (those seen before ``timeout_s`` ran out).

        Reads ``ocr.documents.v1`` from the beginning (compacted: one record per document),
        so an event published before the call is found too."""
        pending = set(doc_ids)
        consumer, watch = self._consumer([topics.DOCUMENTS, topics.PROGRESS], True)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            return until_terminal(watch, self.codec, pending, deadline, on_update=on_update,
                                  accept=lambda r: isinstance(r, _FOLLOWED))  # fmt: skip
        finally:
            consumer.close()

    def wait(self, doc_id: str, timeout_s: float | None = None) -> DocumentEvent:
        """The document's terminal event; TimeoutError if none came in ``timeout_s``."""
        events = self.wait_many([doc_id], timeout_s)
        if doc_id not in events:
            raise TimeoutError(f"no terminal event for {doc_id} within {timeout_s}s")
        return events[doc_id]

    def download(
        self,
        doc_id: str,
        directory: str | os.PathLike[str],
        formats: Sequence[str] = (*DEFAULT_OUTPUTS, "md"),
    ) -> dict[str, Path]:
        """Fetch the document's outputs into ``directory``/document.{fmt}; missing ones are
        skipped (a failed document has none). With document.md come the figure crops it links
        to, into ``directory``/figures/."""
        from ocrstream.storage import ObjectNotFoundError

        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        got: dict[str, Path] = {}
        for fmt in formats:
            key = self.store.keys.document(doc_id, fmt)
            try:
                got[fmt] = self.store.get_to_file(key, target / f"document.{fmt}").path
            except ObjectNotFoundError:
                continue
        if "md" in got:  # the figure crops document.md links to, beside it
            prefix = self.store.keys.figures_prefix(doc_id)
            for info in self.store.list_objects(prefix):
                name = info.key[len(prefix) :]
                if "/" in name or not name or name.startswith("."):
                    continue
                (target / "figures").mkdir(exist_ok=True)
                self.store.get_to_file(info.key, target / "figures" / name)
        return got

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)

    def __enter__(self) -> OcrClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
