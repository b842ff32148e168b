"""``ocrstream submit|results|run``: the pipeline from a user's side.

``run`` is the main job: local services up if needed, topics and bucket ensured, the agents
started under a supervisor, every file submitted, a progress bar per document, the outputs
downloaded to ``DIR/<file stem>/document.{json,txt,pdf,md}``, ``DIR/summary.json`` written and a
summary printed. It exits 0 when every document reached a terminal state (failed included).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from ocrstream.errors import OcrstreamError

log = logging.getLogger(__name__)

_FILES = click.argument(
    "files", nargs=-1, required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
)  # fmt: skip


_MODE = click.option(
    "--mode", type=click.Choice(["text", "layout"]), default=None,
    help="text: lines; layout: also blocks in reading order and document.md "
         "(default OCRSTREAM_CLIENT_MODE, else text).",
)  # fmt: skip


def _client() -> Any:
    from ocrstream.client import OcrClient
    from ocrstream.settings import KafkaSettings, S3Settings

    return OcrClient(KafkaSettings(), S3Settings())


@click.command()
@_FILES
@click.option("--doc-id", default=None, help="The doc_id (one file only); default from content.")
@click.option("--output", "outputs", multiple=True,
              type=click.Choice(["json", "txt", "pdf", "md"]),
              help="Outputs (repeat; default json, txt, pdf, and md in layout mode).")  # fmt: skip
@click.option("--attribute", "attributes", multiple=True, metavar="KEY=VALUE",
              help="Metadata passed through to the document event (repeat).")  # fmt: skip
@click.option("--text-layer/--no-text-layer", default=False,
              help="Answer pages with a usable PDF text layer from it, without OCR.")  # fmt: skip
@click.option("--tenant", default="", help="The submitting tenant, passed to the document event.")
@_MODE
@click.option("--regions", "regions_file", type=click.Path(exists=True, dir_okay=False,
              path_type=Path), help="Key-field mode: read only the named boxes in this JSON "
              "file (or {\"template\": NAME}); document.json gets fields.")  # fmt: skip
def submit(
    files: Sequence[Path], doc_id: str | None, outputs: Sequence[str],
    attributes: Sequence[str], text_layer: bool, tenant: str, mode: str | None,
    regions_file: Path | None,
) -> None:  # fmt: skip
    """Submit files for OCR; prints FILE<TAB>doc_id for each."""
    if doc_id and len(files) > 1:
        raise click.UsageError("--doc-id takes one file")
    attrs = dict(a.split("=", 1) for a in attributes if "=" in a)
    regions = json.loads(regions_file.read_text("utf-8")) if regions_file is not None else None
    client = _client()
    try:
        for path in files:
            got = client.submit(
                path, doc_id, outputs=outputs or ("json", "txt", "pdf"),
                attributes=attrs, text_layer=text_layer, tenant=tenant, mode=mode,
                regions=regions,
            )  # fmt: skip
            click.echo(f"{path}\t{got}")
    except OcrstreamError as e:
        raise click.ClickException(f"{e.code}: {e}") from e
    finally:
        client.close()


@click.command()
@click.option("--follow/--no-follow", default=True, show_default=True,
              help="Keep printing as results arrive (Ctrl-C to stop).")  # fmt: skip
@click.option("--from-beginning", is_flag=True, help="Start from the oldest retained record.")
@click.option("--doc-id", "doc_ids", multiple=True, help="Only these documents (repeat).")
@click.option("--progress", is_flag=True, help="Also print DocumentProgress records.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def results(
    follow: bool, from_beginning: bool, doc_ids: Sequence[str], progress: bool, as_json: bool
) -> None:
    """Print page results and document events as they arrive."""
    from ocrstream.schemas.records import DocumentEvent, DocumentProgress, PageResult

    client = _client()
    try:
        for record in client.results(follow=follow, from_beginning=from_beginning,
                                     progress=progress, doc_ids=doc_ids or None):  # fmt: skip
            if as_json:
                click.echo(json.dumps({"type": type(record).__name__, **record.to_avro()},
                                      default=str, ensure_ascii=False))  # fmt: skip
            elif isinstance(record, PageResult):
                first = record.lines[0].text if record.lines else ""
                err = f" {record.error.code}" if record.error else ""
                cached = " cached" if record.cached else ""
                click.echo(
                    f"page      {record.doc_id} rev {record.revision} "
                    f"{record.page_no}/{record.page_count} {record.status.value}{err}{cached} "
                    f"{len(record.lines)} lines  {first[:60]}"
                )
            elif isinstance(record, DocumentProgress):
                click.echo(f"progress  {record.doc_id} rev {record.revision} "
                           f"{record.pages_done}/{record.page_count}")  # fmt: skip
            elif isinstance(record, DocumentEvent):
                err = f" {record.error.code}" if record.error else ""
                click.echo(
                    f"document  {record.doc_id} rev {record.revision} {record.status.value}{err} "
                    f"{record.pages_ok}/{record.page_count} pages ok, {record.pages_cached} cached"
                )
    except KeyboardInterrupt:
        pass
    except OcrstreamError as e:
        raise click.ClickException(f"{e.code}: {e}") from e


# --- run ----------------------------------------------------------------------------------------


@dataclass
class _Doc:
    path: Path
    doc_id: str | None = None
    status: str | None = None
    reason: str | None = None
    pages: int = 0
    pages_ok: int = 0
    pages_cached: int = 0
    revision: int | None = None
    seconds: float | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    task: Any = None

    def summary(self, out_dir: Path) -> dict[str, Any]:
        return {
            "file": str(self.path), "doc_id": self.doc_id, "status": self.status or "pending",
            "reason_code": self.reason, "pages": self.pages, "pages_ok": self.pages_ok,
            "pages_cached": self.pages_cached, "revision": self.revision,
            "seconds": None if self.seconds is None else round(self.seconds, 3),
            "outputs": {k: str(Path(v).relative_to(out_dir)) for k, v in self.outputs.items()},
        }  # fmt: skip


def _unique_dirs(docs: Sequence[_Doc], out: Path) -> dict[int, Path]:
    used: set[str] = set()
    dirs = {}
    for i, doc in enumerate(docs):
        name = doc.path.stem or "document"
        if name in used:
            name = f"{name}-{i + 1}"
        used.add(name)
        dirs[i] = out / name
    return dirs


def _bring_up(no_infra: bool, partitions_scale: float) -> None:
    from ocrstream.settings import KafkaSettings, S3Settings, ServicesSettings
    from ocrstream.storage import ObjectStore
    from ocrstream.streams.topics import ensure_topics

    if not no_infra:
        from ocrstream.services import build_services, up

        click.echo("starting local services (Kafka, S3, Prometheus) if needed …", err=True)
        up(build_services(ServicesSettings(), S3Settings()))
    ensure_topics(KafkaSettings(), partitions_scale=partitions_scale)
    ObjectStore(S3Settings()).ensure_bucket()


@click.command()
@_FILES
@click.option("--output", "-o", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("out"), show_default=True)  # fmt: skip
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="OCR worker processes to start (default OCRSTREAM_SUPERVISOR_OCR_WORKERS).",
)
@click.option("--timeout", type=float, default=1800.0, show_default=True,
              help="Seconds to wait for all documents.")  # fmt: skip
@click.option("--no-infra", is_flag=True, help="Don't start local services (use the configured).")
@click.option("--no-agents", is_flag=True, help="Use agents that are already running.")
@click.option("--partitions-scale", type=float, default=1.0, show_default=True,
              envvar="OCRSTREAM_TOPICS_PARTITIONS_SCALE",
              help="Partition counts of topics this creates, times this.")  # fmt: skip
@click.option("--text-layer/--no-text-layer", default=False,
              help="Answer pages with a usable PDF text layer from it, without OCR.")  # fmt: skip
@_MODE
def run(
    files: Sequence[Path], out_dir: Path, workers: int | None, timeout: float, no_infra: bool,
    no_agents: bool, partitions_scale: float, text_layer: bool, mode: str | None,
) -> None:  # fmt: skip
    """OCR FILES through the pipeline and download the outputs to DIR/<file stem>/."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ocrstream.schemas.records import DocumentEvent, DocumentProgress
    from ocrstream.settings import ServicesSettings, SupervisorSettings
    from ocrstream.streams.supervisor import Supervisor, default_agents

    console = Console(stderr=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    docs = [_Doc(path) for path in files]
    dirs = _unique_dirs(docs, out_dir)
    try:
        _bring_up(no_infra, partitions_scale)
    except OcrstreamError as e:
        raise click.ClickException(f"{e.code}: {e}") from e

    supervisor: Supervisor | None = None
    thread: threading.Thread | None = None
    # SIGTERM (a CI job runner, `timeout`, systemd) unwinds like Ctrl-C, through the `finally`
    # below that stops the agents: they drain, commit and leave their groups, never orphaned.
    signal.signal(signal.SIGTERM, _interrupt)
    if not no_agents:
        settings = SupervisorSettings()
        logs = ServicesSettings().home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_file = open(logs / "agents.log", "ab")  # noqa: SIM115 - outlives this block
        supervisor = Supervisor(default_agents(workers or settings.ocr_workers), settings,
                                stdout=log_file.fileno())  # fmt: skip
        thread = threading.Thread(target=supervisor.run, name="supervisor", daemon=True)
        thread.start()
        console.print(f"agents started; their logs go to {logs / 'agents.log'}")

    client: Any = None
    started = time.monotonic()
    try:
        client = _client()
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[state]}"), TimeElapsedColumn(),
                      console=console) as progress:  # fmt: skip
            by_id: dict[str, _Doc] = {}
            for doc in docs:
                doc.task = progress.add_task(doc.path.name, total=None, state="submitting")
                try:
                    doc.doc_id = client.submit(doc.path, text_layer=text_layer, mode=mode)
                except OcrstreamError as e:
                    doc.status, doc.reason = "rejected", e.code
                    progress.update(doc.task, state=f"[red]rejected {e.code}", total=1)
                    continue
                by_id[doc.doc_id] = doc
                progress.update(doc.task, state="queued")

            def on_update(record: Any) -> None:
                doc = by_id[record.doc_id]
                if isinstance(record, DocumentProgress):
                    progress.update(doc.task, total=record.page_count,
                                    completed=record.pages_done, state="running")  # fmt: skip
                elif isinstance(record, DocumentEvent):
                    colour = {"completed": "green", "partial": "yellow"}.get(
                        record.status.value, "red"
                    )
                    progress.update(doc.task, total=max(record.page_count, 1),
                                    completed=max(record.page_count, 1),
                                    state=f"[{colour}]{record.status.value}")  # fmt: skip

            events = client.wait_many(list(by_id), timeout, on_update=on_update)
        for doc_id, event in events.items():
            doc = by_id[doc_id]
            doc.status = event.status.value
            doc.reason = event.error.code if event.error else None
            doc.pages, doc.pages_ok = event.page_count, event.pages_ok
            doc.pages_cached, doc.revision = event.pages_cached, event.revision
            doc.seconds = (event.completed_at - event.submitted_at).total_seconds()
        for i, doc in enumerate(docs):
            if doc.doc_id and doc.status:
                got = client.download(doc.doc_id, dirs[i])
                doc.outputs = {k: str(v) for k, v in got.items()}
    finally:
        if client is not None:
            client.close()
        if supervisor is not None and thread is not None:
            console.print("stopping agents …")
            supervisor.stop()
            thread.join()
    wall = time.monotonic() - started
    _report(docs, out_dir, wall, console)
    if any(doc.status in (None, "rejected") for doc in docs):
        sys.exit(1)


def _interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _report(docs: Sequence[_Doc], out_dir: Path, wall: float, console: Any) -> None:
    from rich.table import Table

    summary = [doc.summary(out_dir) for doc in docs]
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    table = Table(title="ocrstream run")
    for col in ("file", "status", "reason", "pages ok", "seconds"):
        table.add_column(col)
    for doc in docs:
        table.add_row(
            doc.path.name, doc.status or "[red]no terminal event", doc.reason or "",
            f"{doc.pages_ok}/{doc.pages}", "" if doc.seconds is None else f"{doc.seconds:.1f}",
        )  # fmt: skip
    console.print(table)
    pages = sum(doc.pages for doc in docs)
    failures = [doc for doc in docs if doc.status != "completed"]
    console.print(
        f"{len(docs)} documents, {pages} pages in {wall:.1f}s "
        f"({pages / wall if wall > 0 else 0:.2f} pages/s), {len(failures)} not completed; "
        f"outputs in {out_dir}/, summary in {out_dir / 'summary.json'}"
    )
