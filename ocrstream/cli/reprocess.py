"""``ocrstream reprocess``: read documents again from their stored sources, as a new revision.

Which documents, where the sources come from and how a run resumes after an interruption:
:mod:`ocrstream.streams.reprocess`. This module is the command around it: the selection from
the options, progress bars and throughput as ``ocrstream run`` shows them, and the summary.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from ocrstream.errors import OcrstreamError, RetriableError


def _when(value: str | None) -> datetime | None:
    """``2026-11-30`` or ``2026-11-30T12:00:00`` (UTC when no zone)."""
    if not value:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError as e:
        raise click.BadParameter(f"{value!r}: an ISO date or time, e.g. 2026-11-30") from e
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@click.command()
@click.argument("doc_ids", nargs=-1)
@click.option("--tenant", default=None, help="Every document of this tenant.")
@click.option(
    "--before",
    default=None,
    help="Documents whose latest revision ended before this date (ISO, UTC).",
)
@click.option("--all", "everything", is_flag=True, help="Every document with a terminal event.")
@click.option("--mode", type=click.Choice(["text", "layout"]), default=None,
              help="Parse mode of the new revision (default: each document's own).")  # fmt: skip
@click.option("--model", default=None,
              help="Recognition model the pages must be read with (e.g. ppocrv6-small); "
                   "workers running another one fail them (model_unavailable).")  # fmt: skip
@click.option("--timeout", type=float, default=3600.0, show_default=True,
              help="Seconds to wait for the documents to end.")  # fmt: skip
@click.option("--no-wait", is_flag=True, help="Submit and exit; the same command waits later.")
@click.option("--summary", "summary_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write one JSON object per document here.")  # fmt: skip
def reprocess(
    doc_ids: Sequence[str], tenant: str | None, before: str | None, everything: bool,
    mode: str | None, model: str | None, timeout: float, no_wait: bool,
    summary_path: Path | None,
) -> None:  # fmt: skip
    """Re-split DOC_IDS (or --tenant, --before, --all) from their stored sources through the
    pipeline, as their next revision; the earlier outputs stay under rev-{n}/. Interrupted,
    the same command continues where it stopped."""
    from ocrstream.streams.reprocess import Selection

    if doc_ids and (tenant or before or everything):
        raise click.UsageError("give doc_ids, or --tenant/--before/--all, not both")
    if not (doc_ids or tenant or before or everything):
        raise click.UsageError("which documents? doc_ids, --tenant, --before or --all")
    selection = Selection(doc_ids=tuple(doc_ids), tenant=tenant, before=_when(before),
                          everything=everything, mode=mode, model=model)  # fmt: skip
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        code = _reprocess(selection, timeout, no_wait, summary_path)
    except OcrstreamError as e:
        raise click.ClickException(f"{e.code}: {e}") from e
    sys.exit(code)


def _reprocess(selection: Any, timeout: float, no_wait: bool, summary_path: Path | None) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ocrstream.schemas.codec import Codec
    from ocrstream.schemas.records import DocumentEvent, DocumentProgress
    from ocrstream.settings import KafkaSettings, S3Settings
    from ocrstream.storage import ObjectStore
    from ocrstream.streams import reprocess as rp
    from ocrstream.streams import topics
    from ocrstream.streams.producer import RecordProducer

    console = Console(stderr=True)
    kafka = KafkaSettings()
    codec = Codec(kafka)
    store = ObjectStore(S3Settings())
    runs = rp.RunLog(store)
    run, plan = runs.open(selection.name())
    console.print("reading the documents' latest revisions from ocr.documents.v1 …")
    events = rp.read_documents(kafka, codec)
    if plan is None:
        chosen = rp.select(events, selection)
        missing = sorted(set(selection.doc_ids) - {e.doc_id for e in chosen})
        for doc_id in missing:
            console.print(f"[yellow]{doc_id}: no terminal event on ocr.documents.v1, skipped")
        plan = rp.Plan(run, rp.now_utc(), {e.doc_id: e.revision + 1 for e in chosen})
        runs.write_plan(plan, selection)
        console.print(f"run {run}: {len(plan.targets)} documents to reprocess")
    else:
        console.print(f"run {run} resumed: {len(plan.submitted)} of {len(plan.targets)} "
                      "documents were submitted before")  # fmt: skip
    expected_pages = {d: events[d].page_count for d in plan.targets if d in events}
    producer = RecordProducer(kafka, codec)
    scans_topic = kafka.topic(topics.SCANS)
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    def send(scan: Any) -> None:
        producer.send(scans_topic, scan.doc_id, scan, on_delivery=delivered)

    def flush() -> None:
        if producer.flush(60.0) or errors:
            raise RetriableError(f"ScanSubmitted not delivered: {errors or 'timeout'}")

    started = time.monotonic()
    found: dict[str, DocumentEvent] = {}
    done_pages: dict[str, int] = {}
    submitted = rp.Submitted()
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[state]}"), TimeElapsedColumn(),
                      console=console) as progress:  # fmt: skip
            docs = progress.add_task("documents", total=len(plan.targets), state="submitting",
                                     completed=0)  # fmt: skip
            pages = progress.add_task("pages", total=sum(expected_pages.values()) or None,
                                      state="")  # fmt: skip
            sent = progress.add_task("submitted", total=len(plan.targets),
                                     completed=len(plan.submitted), state="")  # fmt: skip
            submitted = rp.submit(
                plan, events, selection, store=store, runs=runs, send=send, flush=flush,
                on_published=lambda _d: progress.advance(sent),
            )  # fmt: skip
            for doc_id, why in submitted.skipped.items():
                console.print(f"[yellow]{doc_id}: skipped ({why})")
            waiting = {d for d in plan.targets if d not in submitted.skipped}
            # what is skipped never ends: out of the bars' totals
            progress.update(sent, total=len(waiting))
            progress.update(pages, total=sum(expected_pages.get(d, 0) for d in waiting) or None)
            progress.update(docs, total=len(waiting))
            if no_wait:
                progress.update(docs, state="submitted; not waiting")
            else:
                progress.update(docs, state="running")

                def on_update(record: DocumentEvent | DocumentProgress) -> None:
                    if isinstance(record, DocumentProgress):
                        done_pages[record.doc_id] = record.pages_done
                    else:
                        found[record.doc_id] = record
                        done_pages[record.doc_id] = record.page_count
                        progress.update(docs, completed=len(found))
                    total_pages = sum(done_pages.values())
                    wall = time.monotonic() - started
                    rate = total_pages / wall if wall > 0 else 0.0
                    progress.update(pages, completed=total_pages, state=f"{rate:.2f} pages/s")

                rp.follow(kafka, codec, plan.targets, plan.created_at, on_update=on_update,
                          pending=set(waiting), timeout_s=timeout)  # fmt: skip
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted: run the same command again to continue run {run} "
                      f"({len(plan.submitted)} of {len(plan.targets)} submitted)")  # fmt: skip
        return 130
    finally:
        producer.flush(10.0)
    wall = time.monotonic() - started
    return _report(console, runs, plan, found, submitted, wall, no_wait, summary_path)


def _report(console: Any, runs: Any, plan: Any, found: dict[str, Any], submitted: Any,
            wall: float, no_wait: bool, summary_path: Path | None) -> int:  # fmt: skip
    from collections import Counter

    rows = []
    for doc_id, revision in sorted(plan.targets.items()):
        event = found.get(doc_id)
        rows.append({
            "doc_id": doc_id, "revision": revision,
            "status": event.status.value if event else submitted.skipped.get(doc_id, "pending"),
            "pages": event.page_count if event else 0,
            "pages_ok": event.pages_ok if event else 0,
            "pages_cached": event.pages_cached if event else 0,
            "seconds": round((event.completed_at - event.submitted_at).total_seconds(), 3)
            if event else None,
        })  # fmt: skip
    if summary_path is not None:
        summary_path.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    counts = Counter(row["status"] for row in rows)
    pages = sum(row["pages"] for row in rows)
    pending = counts.get("pending", 0)
    console.print(
        f"run {plan.run}: {len(rows)} documents, {pages} pages in {wall:.1f}s "
        f"({pages / wall if wall > 0 else 0:.2f} pages/s): "
        + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    )
    if no_wait:
        return 0
    if pending:
        console.print(f"[yellow]{pending} documents not ended yet: run the same command again "
                      "to keep waiting")  # fmt: skip
        return 1
    runs.close(plan, {"documents": len(rows), "pages": pages, "statuses": dict(counts)})
    return 0
