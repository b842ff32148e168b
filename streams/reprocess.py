"""Reprocessing: documents read again from their stored sources, as their next revision.

``ocrstream reprocess`` (:mod:`ocrstream.cli.reprocess`) publishes, per document, a
ScanSubmitted with the next revision and the stored source; the pipeline reads it as any scan
(the splitter and the assembler keep their state per (doc_id, revision), see
:mod:`ocrstream.processors.assembly`), and the assembler keeps the earlier outputs under
``documents/{doc_id}/rev-{n}/`` (:mod:`ocrstream.storage.revisions`).

Which documents: those with a terminal event on ``ocr.documents.v1``. That topic is compacted
by doc_id, so read from the beginning it holds each document's latest revision once, with its
tenant, completion time, attributes and the outputs it was given — everything a selection
(ids, ``--tenant``, ``--before``, ``--all``) and a new scan need, from one topic and no listing
of the store. The bytes come from the store: ``scans/{doc_id}/source.{ext}``, where the SDK
(large files), the HTTP API (every upload) and the splitter (inline sources asking for a PDF,
the default) put them. A document whose source is not there — an inline file that asked for no
PDF, or a source in a bucket of its own — is reported as skipped (``no_source``); the scan
record that carried it is gone after the scans topic's retention anyway.

Resuming: a run is named by what was asked (the selection, ``--mode`` and ``--model``) and a
generation. Its plan — every selected document and the revision it is to get — is written to
``reprocess/{run}/plan.json`` before anything is published, and after each batch of
ScanSubmitted records is acknowledged by the brokers, their doc_ids go to
``reprocess/{run}/submitted-{n}.json``. The same command again finds the plan without
``done.json``, submits only what no batch records, and waits for every document of the plan;
a crash between a batch's acknowledgement and its record republishes at most that batch, and
the splitter skips a ScanSubmitted of a revision it already split. When every document of the
plan ended at its revision, ``done.json`` closes the run; the same command later starts the
next generation (the next revision).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ocrstream.errors import PoisonError, RetriableError
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import (
    DocumentEvent,
    DocumentProgress,
    ScanSource,
    ScanSubmitted,
    utc_now,
)
from ocrstream.settings import KafkaSettings
from ocrstream.storage import ObjectNotFoundError, ObjectStore
from ocrstream.streams import topics
from ocrstream.streams.follow import until_terminal
from ocrstream.streams.redrive import read_to_end

log = logging.getLogger(__name__)

SCAN_FORMATS = ("json", "txt", "pdf")  # what a ScanSubmitted asks for; md follows the mode
BATCH = 100  # ScanSubmitted records acknowledged, then recorded, at a time
_GEN = re.compile(r"\.(\d+)/plan\.json$")


# --- which documents ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Selection:
    """What the command asked for; exactly one of ids, tenant, before or everything."""

    doc_ids: tuple[str, ...] = ()
    tenant: str | None = None
    before: datetime | None = None
    everything: bool = False
    mode: str | None = None  # None: each document's own
    model: str | None = None  # None: whatever the workers run

    def matches(self, event: DocumentEvent) -> bool:
        if self.doc_ids:
            return event.doc_id in self.doc_ids
        if self.tenant is not None and event.tenant != self.tenant:
            return False
        return self.before is None or event.completed_at < self.before

    def name(self) -> str:
        """The run's name without its generation: a digest of what was asked."""
        asked = {
            "ids": sorted(set(self.doc_ids)), "tenant": self.tenant,
            "before": None if self.before is None else self.before.isoformat(),
            "all": self.everything, "mode": self.mode, "model": self.model,
        }  # fmt: skip
        text = json.dumps(asked, sort_keys=True, separators=(",", ":"))
        return "r-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def latest_events(records: Iterable[DocumentEvent]) -> dict[str, DocumentEvent]:
    """Each document's event of its latest revision (in log order within a revision)."""
    out: dict[str, DocumentEvent] = {}
    for event in records:
        seen = out.get(event.doc_id)
        if seen is None or event.revision >= seen.revision:
            out[event.doc_id] = event
    return out


def select(events: Mapping[str, DocumentEvent], selection: Selection) -> list[DocumentEvent]:
    """The documents to reprocess, by doc_id."""
    return sorted((e for e in events.values() if selection.matches(e)), key=lambda e: e.doc_id)


def read_documents(kafka: KafkaSettings, codec: Codec) -> dict[str, DocumentEvent]:
    """Every document's latest terminal event, from ``ocr.documents.v1`` (to its end now)."""

    def decoded() -> Iterable[DocumentEvent]:
        for msg in read_to_end(kafka, kafka.topic(topics.DOCUMENTS)):
            try:
                yield codec.decode_as(msg.value() or b"", DocumentEvent)
            except PoisonError:
                continue

    return latest_events(decoded())


# --- the run's record in the store ----------------------------------------------------------


@dataclass
class Plan:
    """One run: the revision each document is to get, and what was published already."""

    run: str
    created_at: datetime
    targets: dict[str, int]  # doc_id → the revision it is to get
    submitted: set[str] = field(default_factory=set)
    batches: int = 0  # submitted-{n}.json written so far
    resumed: bool = False


class RunLog:
    """``reprocess/{run}/`` in the store: plan.json, submitted-{n}.json, done.json."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def _key(self, run: str, name: str) -> str:
        return f"{self.store.keys.reprocess_prefix(run)}{name}"

    def _json(self, key: str) -> Any:
        return json.loads(self.store.get_bytes(key, max_bytes=256 * 1024 * 1024))

    def _put(self, key: str, value: Any) -> None:
        self.store.put_bytes(key, json.dumps(value).encode(), content_type="application/json")

    def open(self, name: str) -> tuple[str, Plan | None]:
        """The run to continue (its plan) or the name of the next generation (None)."""
        prefix = self.store.keys.reprocess_prefix(name).removesuffix("/") + "."
        generations = []
        for info in self.store.list_objects(prefix):
            match = _GEN.search(info.key)
            if match:
                generations.append(int(match.group(1)))
        if not generations:
            return f"{name}.1", None
        run = f"{name}.{max(generations)}"
        if self.store.exists(self._key(run, "done.json")):
            return f"{name}.{max(generations) + 1}", None
        plan = self._json(self._key(run, "plan.json"))
        submitted: set[str] = set()
        batches = 0
        for info in self.store.list_objects(self._key(run, "submitted-")):
            submitted.update(self._json(info.key))
            batches += 1
        return run, Plan(run, datetime.fromisoformat(plan["created_at"]),
                         {k: int(v) for k, v in plan["targets"].items()}, submitted, batches,
                         resumed=True)  # fmt: skip

    def write_plan(self, plan: Plan, selection: Selection) -> None:
        self._put(self._key(plan.run, "plan.json"), {
            "created_at": plan.created_at.isoformat(),
            "selection": json.loads(json.dumps(selection_dict(selection), default=str)),
            "targets": plan.targets,
        })  # fmt: skip

    def record_batch(self, plan: Plan, doc_ids: Sequence[str]) -> None:
        plan.batches += 1
        self._put(self._key(plan.run, f"submitted-{plan.batches:06d}.json"), list(doc_ids))
        plan.submitted.update(doc_ids)

    def close(self, plan: Plan, summary: Mapping[str, Any]) -> None:
        self._put(self._key(plan.run, "done.json"), dict(summary))


def selection_dict(selection: Selection) -> dict[str, Any]:
    return {
        "doc_ids": list(selection.doc_ids), "tenant": selection.tenant,
        "before": selection.before, "all": selection.everything, "mode": selection.mode,
        "model": selection.model,
    }  # fmt: skip


# --- the scans --------------------------------------------------------------------------------


def stored_source(store: ObjectStore, doc_id: str) -> tuple[str, str, int] | None:
    """``(uri, content type, size)`` of the document's source in the store, or None."""
    try:
        found = store.list_objects(store.keys.sources_prefix(doc_id), limit=1)
    except ObjectNotFoundError:
        return None
    if not found:
        return None
    info = store.stat(found[0].key)  # a listing carries no media type
    return info.uri, info.content_type or "application/octet-stream", info.size


def next_scan(
    event: DocumentEvent,
    revision: int,
    source: tuple[str, str, int],
    selection: Selection,
    *,
    now: datetime | None = None,
) -> ScanSubmitted:
    """The ScanSubmitted of ``event``'s document at ``revision``: the same source, tenant,
    attributes and outputs (the mode from them, unless the selection names one)."""
    uri, content_type, size = source
    mode = selection.mode or ("layout" if "md" in event.outputs else "text")
    formats = tuple(f for f in SCAN_FORMATS if f in event.outputs) or SCAN_FORMATS
    return ScanSubmitted(
        doc_id=event.doc_id, source=ScanSource(uri=uri), content_type=content_type,
        sha256=event.source_sha256, size_bytes=size, submitted_at=now or utc_now(),
        tenant=event.tenant, outputs=formats, attributes=dict(event.attributes),
        trace_id=event.trace_id, mode=mode, revision=revision,
        options={"model": selection.model} if selection.model else {},
    )  # fmt: skip


@dataclass
class Submitted:
    published: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # doc_id → reason code


def submit(
    plan: Plan,
    events: Mapping[str, DocumentEvent],
    selection: Selection,
    *,
    store: ObjectStore,
    runs: RunLog,
    send: Callable[[ScanSubmitted], None],
    flush: Callable[[], None],
    on_published: Callable[[str], None] | None = None,
) -> Submitted:
    """Publish the scans of the plan not recorded as submitted, a batch at a time: ``send``
    each, ``flush`` (raises unless all were acknowledged), then record the batch."""
    out = Submitted()
    batch: list[str] = []

    def close_batch() -> None:
        flush()
        runs.record_batch(plan, batch)
        out.published.extend(batch)
        batch.clear()

    for doc_id, revision in sorted(plan.targets.items()):
        if doc_id in plan.submitted:
            continue
        event = events.get(doc_id)
        source = stored_source(store, doc_id) if event is not None else None
        if event is None or source is None:
            out.skipped[doc_id] = "unknown_document" if event is None else "no_source"
            continue
        send(next_scan(event, revision, source, selection))
        batch.append(doc_id)
        if on_published is not None:
            on_published(doc_id)
        if len(batch) >= BATCH:
            close_batch()
    if batch:
        close_batch()
    return out


# --- waiting ----------------------------------------------------------------------------------


def follow(
    kafka: KafkaSettings,
    codec: Codec,
    targets: Mapping[str, int],
    since: datetime,
    *,
    on_update: Callable[[DocumentEvent | DocumentProgress], None],
    pending: set[str],
    timeout_s: float | None = None,
) -> dict[str, DocumentEvent]:
    """The terminal events of ``pending`` documents at (or past) their target revision,
    reading ``ocr.documents.v1`` and ``ocr.progress.v1`` from ``since`` (the plan's time: what
    ended while no command was waiting is found too). Progress of the target revision goes to
    ``on_update`` as well."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from ocrstream.streams.fetch_watch import FetchWatch

    consumer = Consumer(kafka.librdkafka(**{
        "group.id": f"ocrstream-reprocess-{int(time.time() * 1000)}",
        "enable.auto.commit": False, "fetch.max.bytes": 16 * 1024 * 1024,
    }))  # fmt: skip
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        wanted = []
        ms = int(since.timestamp() * 1000) - 60_000  # a minute early: clocks differ
        for name in (topics.DOCUMENTS, topics.PROGRESS):
            topic = kafka.topic(name)
            try:
                md = consumer.list_topics(topic, timeout=30)
            except KafkaException as e:
                raise RetriableError(f"cannot reach Kafka: {e}") from e
            wanted += [TopicPartition(topic, p, ms) for p in md.topics[topic].partitions]
        assignment = consumer.offsets_for_times(wanted, timeout=30)
        consumer.assign(assignment)
        watch = FetchWatch(consumer, None, "reprocess", stall_after_s=kafka.fetch_stall_s)
        watch.assigned_from(assignment)

        def at_target(r: Any) -> bool:
            return isinstance(r, DocumentEvent | DocumentProgress) and r.revision >= targets.get(
                r.doc_id, r.revision + 1
            )

        return until_terminal(watch, codec, pending, deadline, on_update=on_update,
                              accept=at_target)  # fmt: skip
    finally:
        consumer.close()


def now_utc() -> datetime:
    return datetime.now(UTC)
