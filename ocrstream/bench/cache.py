"""``ocrstream bench cache``: what a page read a second time costs the OCR worker.

Issue 14 asks that submitting the same pages a second time under new doc_ids cost at most 5%
of the first run's worker CPU. One run, in order:

1. Topics under a fresh prefix ``bench-cache-…`` and a fresh bucket (local services started
   first unless ``--no-infra``), so the page cache starts empty and nobody else's records count.
2. ``--pages`` page images, one distinct file each (synthetic A4 pages, or a dataset's images),
   put into scanned PDFs of ``--pages-per-doc`` pages, plus one more page for the warm-up.
3. The agents as child processes: splitter, assembler and ONE OCR worker (the real engine,
   the page cache on), so the worker's CPU time is one process's ``/proc/PID/stat``.
4. A one-page warm-up document (models loaded and compiled, the group joined; not measured).
5. Pass 1: the documents as ``first-NNNNN``; pass 2: the same bytes as ``again-NNNNN``. For
   each pass the worker's user + system CPU seconds from the first submission to the last
   terminal event (CPU time, not wall time: the machine may be shared), and the documents'
   ``pages_cached``. Ratio = pass 2 CPU / pass 1 CPU; the target is at most 5%.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from ocrstream.bench.pipeline_run import remove_run

Echo = Callable[[str], None]

TARGET_RATIO = 0.05
CLK_TCK = os.sysconf("SC_CLK_TCK")
OUTPUTS = ("json", "txt")  # the searchable PDF is the assembler's work, not the worker's


@dataclass(frozen=True)
class CacheBenchConfig:
    pages: int = 200
    pages_per_doc: int = 4
    dataset: Path | None = None
    dpi: int = 200
    timeout_s: float = 3600.0
    infra: bool = True
    keep: bool = False


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its waited-for children so far."""
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the command name: state is field 3 of stat(5), so utime (14) is index 11 here.
    return sum(int(v) for v in fields[11:15]) / CLK_TCK


def verdict(ratio: float | None) -> str:
    if ratio is None:
        return "no ratio (pass 1 used no CPU?)"
    state = "meets" if ratio <= TARGET_RATIO else "above"
    return f"{ratio:.2%} of pass 1 ({state} the {TARGET_RATIO:.0%} target)"


def format_report(r: dict[str, Any]) -> str:
    """The human summary of a report (what the command prints)."""
    m = r["machine"]
    before, after = r["load_average_before"][0], r.get("load_average_after", [0.0])[0]
    rows = [
        f"== ocrstream bench cache ({r['run_id']})",
        f"machine          {m['cpu']}, {m['cores']} cores; load average {before:.1f} before, "
        f"{after:.1f} after",
    ]
    for name in ("first", "again"):
        p = r.get(name)
        if not p:
            continue
        rows.append(
            f"pass {name:<6}      {p['documents']} documents, {p['pages']} pages: worker CPU "
            f"{p['worker_cpu_s']:.2f} s ({p['cpu_ms_per_page']:.1f} ms/page), wall "
            f"{p['wall_s']:.1f} s, pages_cached {p['pages_cached']}, statuses {p['statuses']}"
            + (
                f"; {p['page_results']} page results, {p['engine_reads']} read by the engine"
                if "page_results" in p
                else ""
            )
        )
    if "ratio" in r:
        rows.append(f"second pass      {verdict(r['ratio'])}")
    return "\n".join(rows)


class CacheBench:
    """One run; :meth:`run` returns the JSON-ready report."""

    def __init__(self, cfg: CacheBenchConfig, workdir: Path, echo: Echo = print) -> None:
        from ocrstream.settings import KafkaSettings, OcrSettings, S3Settings

        self.cfg, self.workdir, self.echo = cfg, workdir, echo
        self.run_id = f"bench-cache-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.kafka = KafkaSettings().model_copy(update={"topic_prefix": f"{self.run_id}."})
        self.s3 = S3Settings().model_copy(update={"bucket": self.run_id})
        self.ocr = OcrSettings()
        self.report: dict[str, Any] = {}

    def run(self) -> dict[str, Any]:
        from ocrstream.bench.engine import machine

        cfg = self.cfg
        self.report = {
            "run_id": self.run_id, "machine": machine(), "config": _config_dict(cfg),
            "engine_settings": {"backend": self.ocr.backend.value, "model": self.ocr.model,
                                "device": self.ocr.device, "threads": self.ocr.threads},
            "load_average_before": os.getloadavg(),
        }  # fmt: skip
        self._services()
        try:
            docs, warm = self._documents()
            log_path = self.workdir / "agents.log"
            self.echo(f"agents starting (logs: {log_path}) …")
            with _agents(self._env(), log_path) as worker_pid:
                self._passes(docs, warm, worker_pid)
            self.report["load_average_after"] = os.getloadavg()
            self.report["agents_log"] = str(log_path)
        finally:
            if not cfg.keep:
                remove_run(self.kafka, self.s3, self.echo)
        return self.report

    # --- setup ----------------------------------------------------------------------------

    def _services(self) -> None:
        from ocrstream.settings import ServicesSettings
        from ocrstream.storage import ObjectStore
        from ocrstream.streams.topics import ensure_topics

        if self.cfg.infra:
            from ocrstream.services import build_services, up

            self.echo("local services (Kafka, S3, Prometheus) up if needed …")
            up(build_services(ServicesSettings(), self.s3))
        ensure_topics(self.kafka, partitions_scale=0.25)
        ObjectStore(self.s3).ensure_bucket()

    def _documents(self) -> tuple[list[bytes], bytes]:
        """The documents' PDFs (every page a distinct image) and the warm-up's."""
        from ocrstream.bench.scans import page_images, scanned_pdf

        cfg = self.cfg
        self.echo(f"preparing {cfg.pages + 1} page images in {self.workdir} …")
        pages = page_images(cfg.pages + 1, self.workdir, dataset=cfg.dataset, dpi=cfg.dpi)
        images = [p.path.read_bytes() for p in pages]
        n = cfg.pages_per_doc
        docs = [scanned_pdf(images[i : i + n], dpi=cfg.dpi) for i in range(0, cfg.pages, n)]
        return docs, scanned_pdf(images[-1:], dpi=cfg.dpi)

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "OCRSTREAM_TOPIC_PREFIX": self.kafka.topic_prefix,
            "OCRSTREAM_S3_BUCKET": self.s3.bucket,
            "OCRSTREAM_WORKER_CACHE": "true",
        }

    # --- the passes -----------------------------------------------------------------------

    def _passes(self, docs: Sequence[bytes], warm: bytes, worker_pid: int) -> None:
        from ocrstream.client import OcrClient

        client = OcrClient(self.kafka, self.s3)
        try:
            self.echo("warm-up: one page …")
            if not self._submit_and_wait(client, {"warm-up": warm}, 900.0)[0]:
                raise TimeoutError("the warm-up document did not finish: see the agents log")
            for name in ("first", "again"):
                batch = {f"{name}-{i:05d}": pdf for i, pdf in enumerate(docs)}
                self.echo(f"pass {name}: {len(batch)} documents, {self.cfg.pages} pages …")
                self.report[name] = self._pass(client, batch, worker_pid)
                self.echo(f"  worker CPU {self.report[name]['worker_cpu_s']:.2f} s")
        finally:
            client.close()
        for name, counts in self._page_results(("first", "again")).items():
            self.report[name].update(counts)
        first, again = self.report["first"]["worker_cpu_s"], self.report["again"]["worker_cpu_s"]
        self.report["ratio"] = round(again / first, 4) if first > 0 else None
        self.report["target_ratio"] = TARGET_RATIO

    def _pass(self, client: Any, batch: dict[str, bytes], worker_pid: int) -> dict[str, Any]:
        from collections import Counter

        cpu0, t0 = process_cpu_s(worker_pid), time.monotonic()
        events, wall = self._submit_and_wait(client, batch, self.cfg.timeout_s)
        cpu = process_cpu_s(worker_pid) - cpu0
        if len(events) < len(batch):
            raise TimeoutError(f"{len(batch) - len(events)} documents did not finish")
        pages = sum(e.page_count for e in events.values())
        return {
            "documents": len(batch), "pages": pages, "worker_cpu_s": round(cpu, 3),
            "cpu_ms_per_page": round(1000 * cpu / max(1, pages), 2), "wall_s": round(wall, 2),
            "observed_s": round(time.monotonic() - t0, 2),
            "pages_ok": sum(e.pages_ok for e in events.values()),
            "pages_cached": sum(e.pages_cached for e in events.values()),
            "statuses": dict(Counter(e.status.value for e in events.values())),
        }  # fmt: skip

    def _page_results(self, passes: Sequence[str]) -> dict[str, dict[str, int]]:
        """Per pass, the page results the worker published and how many of them the engine
        read (not cached): more results than pages means some page was handled twice (a
        redelivery, a document split twice), which pass 1's CPU then includes."""
        from ocrstream.schemas.codec import Codec
        from ocrstream.schemas.records import PageResult
        from ocrstream.streams import topics
        from ocrstream.streams.redrive import read_to_end

        codec = Codec(self.kafka)
        out = {name: {"page_results": 0, "engine_reads": 0} for name in passes}
        for msg in read_to_end(self.kafka, self.kafka.topic(topics.PAGE_RESULTS)):
            result = codec.decode_as(msg.value() or b"", PageResult)
            counts = out.get(result.doc_id.split("-", 1)[0])
            if counts is not None:
                counts["page_results"] += 1
                counts["engine_reads"] += 0 if result.cached else 1
        return out

    @staticmethod
    def _submit_and_wait(
        client: Any, batch: dict[str, bytes], timeout_s: float
    ) -> tuple[dict[str, Any], float]:
        start = time.time()
        for doc_id, pdf in batch.items():
            client.submit(pdf, doc_id=doc_id, outputs=OUTPUTS, content_type="application/pdf")
        events: dict[str, Any] = client.wait_many(list(batch), timeout_s)
        last = max((e.completed_at.timestamp() for e in events.values()), default=time.time())
        return events, last - start


@contextlib.contextmanager
def _agents(env: dict[str, str], log_path: Path) -> Iterator[int]:
    """Splitter, assembler and one OCR worker as child processes (no metrics ports: they
    would collide with agents already running); yields the worker's pid."""
    commands = [["-m", "ocrstream", "splitter"], ["-m", "ocrstream", "assembler"],
                ["-m", "ocrstream", "ocr-worker"]]  # fmt: skip
    log_path.parent.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    with open(log_path, "ab") as log:
        try:
            for args in commands:
                argv = [sys.executable, *args, "--metrics-port", "0"]
                procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
            yield procs[-1].pid
            for proc in procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"an agent exited with {proc.returncode}: see {log_path}")
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(150)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)


def _config_dict(cfg: CacheBenchConfig) -> dict[str, Any]:
    out = asdict(cfg)
    out["dataset"] = str(cfg.dataset) if cfg.dataset else None
    return out


@click.command()
@click.option(
    "--pages",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Distinct pages per pass.",
)
@click.option("--pages-per-doc", type=click.IntRange(min=1), default=4, show_default=True)
@click.option(
    "--dataset",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Page images from a folder (SROIE layout or plain images) [synthetic A4].",
)
@click.option(
    "--dpi",
    type=click.IntRange(min=50),
    default=200,
    show_default=True,
    help="Resolution of the synthetic pages.",
)
@click.option(
    "--timeout",
    type=float,
    default=3600.0,
    show_default=True,
    help="Seconds to wait for each pass's documents.",
)
@click.option("--no-infra", is_flag=True, help="Don't start local services.")
@click.option("--keep", is_flag=True, help="Keep the run's topics and bucket.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where pages and the agents' log go [a temporary folder].",
)
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path))
def cache(
    pages: int,
    pages_per_doc: int,
    dataset: Path | None,
    dpi: int,
    timeout: float,
    no_infra: bool,
    keep: bool,
    workdir: Path | None,
    json_out: Path | None,
) -> None:
    """Worker CPU for the same pages a second time under new doc_ids (page cache) vs the first."""
    from ocrstream.cli.bench import _command_line

    cfg = CacheBenchConfig(pages=pages, pages_per_doc=pages_per_doc, dataset=dataset, dpi=dpi,
                           timeout_s=timeout, infra=not no_infra, keep=keep)  # fmt: skip
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="ocrstream-bench-cache-")))  # fmt: skip
        workdir.mkdir(parents=True, exist_ok=True)
        run = CacheBench(cfg, workdir, lambda text: click.echo(text, err=True))
        try:
            report = run.run()
        except (TimeoutError, RuntimeError) as e:
            raise click.ClickException(str(e)) from e
        report["command"] = _command_line(click.get_current_context())
        report["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        click.echo(format_report(report))
        if json_out is not None:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
            click.echo(f"wrote {json_out}", err=True)
        if report.get("again", {}).get("pages_cached") != report["again"]["pages"]:
            raise click.ClickException("pass 2 was not answered from the cache entirely")
