"""The run behind ``ocrstream bench pipeline`` (the phases are listed in
:mod:`ocrstream.bench.pipeline`): services, topics and bucket, the agents, the measurements,
the engine alone, the splitter's memory, and the cleanup."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ocrstream.bench.datasets import Sample
from ocrstream.bench.pipeline_checks import count_records, percentiles, terminal_events, zero_loss

Echo = Callable[[str], None]


@dataclass(frozen=True)
class PipelineConfig:
    documents: int = 20
    pages_per_doc: int = 3
    dataset: Path | None = None
    dpi: int = 200
    workers: int = 1
    autoscale: bool = False
    min_workers: int = 1
    max_workers: int = 2
    lag_threshold: int = 20
    cooldown_s: float = 30.0
    stabilization_s: float = 30.0
    scale_interval_s: float = 2.0
    latency_probe: int = 5
    # the last probe document waits this long first: longer than the fetch watch's
    # OCRSTREAM_KAFKA_FETCH_STALL_S (30 s), so that every worker partition has gone quiet
    idle_probe_s: float = 40.0
    splitter_rss_pages: int = 0
    engine: bool = True
    partitions_scale: float = 0.25
    timeout_s: float = 3600.0
    tail_s: float = 120.0
    infra: bool = True
    metrics_ports: bool = True
    keep: bool = False


@contextlib.contextmanager
def ports_lock(echo: Echo) -> Iterator[None]:
    """Hold the lock of the fixed metrics ports (shared with the integration tests)."""
    from ocrstream.services.prometheus import METRICS_PORTS_LOCK

    with open(METRICS_PORTS_LOCK, "a+", encoding="utf-8") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            echo(f"other agents use the metrics ports; waiting for {METRICS_PORTS_LOCK} …")
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


class PipelineBench:
    """One benchmark run; :meth:`run` returns the JSON-ready report."""

    def __init__(self, cfg: PipelineConfig, workdir: Path, echo: Echo = print) -> None:
        from ocrstream.settings import (
            KafkaSettings,
            OcrSettings,
            S3Settings,
            WorkerSettings,
        )

        self.cfg, self.workdir, self.echo = cfg, workdir, echo
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.run_id = f"bench-{stamp}-{uuid.uuid4().hex[:6]}"
        self.kafka = KafkaSettings().model_copy(update={"topic_prefix": f"{self.run_id}."})
        self.s3 = S3Settings().model_copy(update={"bucket": self.run_id})
        self.ocr = OcrSettings()
        self.worker = WorkerSettings()
        self.group = self.kafka.topic(self.worker.group)
        self.report: dict[str, Any] = {}

    # --- setup ----------------------------------------------------------------------------

    def _services(self) -> None:
        from ocrstream.settings import ServicesSettings
        from ocrstream.storage import ObjectStore
        from ocrstream.streams.topics import ensure_topics

        if self.cfg.infra:
            from ocrstream.services import build_services, up

            self.echo("local services (Kafka, S3, Prometheus) up if needed …")
            up(build_services(ServicesSettings(), self.s3))
        ensure_topics(self.kafka, partitions_scale=self.cfg.partitions_scale)
        ObjectStore(self.s3).ensure_bucket()

    def _agents(self) -> list[Any]:
        from ocrstream.streams.supervisor import AgentSpec

        port = self.cfg.metrics_ports

        def spec(name: str, *args: str, metrics: int) -> AgentSpec:
            return AgentSpec(name, (*args, "--metrics-port", str(metrics if port else 0)))

        specs = [spec("splitter", "splitter", metrics=9101),
                 spec("assembler", "assembler", metrics=9102),
                 spec("lag-exporter", "lag-exporter", metrics=9103)]  # fmt: skip
        if self.cfg.autoscale:
            c = self.cfg
            specs.append(spec(
                "autoscaler", "scale", "--min", str(c.min_workers), "--max", str(c.max_workers),
                "--lag-threshold", str(c.lag_threshold), "--cooldown", str(c.cooldown_s),
                "--stabilization", str(c.stabilization_s), "--interval", str(c.scale_interval_s),
                metrics=9104,
            ))  # fmt: skip
        else:
            base = self.worker.metrics_port
            specs += [spec(f"ocr-worker-{i}", "ocr-worker", metrics=base + i)
                      for i in range(self.cfg.workers)]  # fmt: skip
        return specs

    def _pages(self) -> tuple[list[Sample], list[Sample], Sample]:
        """The load's pages, the probe's pages and the warm-up page, all distinct files."""
        from ocrstream.bench.scans import page_images

        cfg = self.cfg
        load = cfg.documents * cfg.pages_per_doc
        total = load + cfg.latency_probe + 1
        self.echo(f"preparing {total} page images in {self.workdir} …")
        pages = page_images(total, self.workdir, dataset=cfg.dataset, dpi=cfg.dpi)
        return pages[:load], pages[load : load + cfg.latency_probe], pages[-1]

    # --- phases ---------------------------------------------------------------------------

    def _submit_and_wait(
        self, client: Any, docs: dict[str, bytes], timeout_s: float
    ) -> dict[str, Any]:
        for doc_id, pdf in docs.items():
            client.submit(pdf, doc_id=doc_id, content_type="application/pdf")
        events: dict[str, Any] = client.wait_many(list(docs), timeout_s)
        return events

    def _probe(self, client: Any, pages: Sequence[Sample]) -> dict[str, Any]:
        """One-page documents one at a time at idle: their end-to-end latency, and how much
        of it the engine took in the worker (its PageResult's ``timings.total_ms``)."""
        from ocrstream.bench.scans import scanned_pdf
        from ocrstream.schemas.records import PageResult

        latencies, observed = {}, []
        for i, page in enumerate(pages):
            doc_id = f"probe-{i:03d}"
            pdf = scanned_pdf([page.path.read_bytes()], dpi=self.cfg.dpi)
            last = i == len(pages) - 1 and i > 0
            if last and self.cfg.idle_probe_s > 0:
                # a page to a pipeline left idle: every partition quiet, as overnight (the
                # fetch watch, asking their ends one at a time, held it two minutes: session 41)
                self.echo(f"  waiting {self.cfg.idle_probe_s:.0f} s idle before the last probe")
                time.sleep(self.cfg.idle_probe_s)
            else:
                time.sleep(1.0)  # idle: nothing else in flight
            t0 = time.monotonic()
            event = self._submit_and_wait(client, {doc_id: pdf}, 300.0).get(doc_id)
            if event is None:
                raise TimeoutError(f"the probe document {doc_id} did not finish in 300 s")
            observed.append(round(time.monotonic() - t0, 3))
            latencies[doc_id] = (event.completed_at - event.submitted_at).total_seconds()
            self.echo(f"  probe {i + 1}/{len(pages)}: {latencies[doc_id]:.2f} s end to end")
        engine_s = {
            r.doc_id: r.timings.total_ms / 1000
            for r in client.results(follow=False, from_beginning=True, doc_ids=list(latencies),
                                    idle_timeout_s=3.0)
            if isinstance(r, PageResult)
        }  # fmt: skip
        overhead = [latencies[d] - engine_s[d] for d in latencies if d in engine_s]
        return {
            "documents": len(pages), "latency_s": [round(v, 3) for v in latencies.values()],
            "client_s": observed, "summary": percentiles(list(latencies.values())),
            "engine_s": percentiles(list(engine_s.values())),
            "overhead_s": percentiles(overhead), "target_s": 1.0,
            "idle_before_last_s": self.cfg.idle_probe_s if len(pages) > 1 else 0.0,
        }  # fmt: skip

    def _load(self, client: Any, pages: Sequence[Sample]) -> dict[str, Any]:
        from ocrstream.bench.scans import scanned_pdf
        from ocrstream.bench.timeline import Timeline

        cfg = self.cfg
        docs = {
            f"doc-{i:05d}": scanned_pdf(
                [
                    p.path.read_bytes()
                    for p in pages[i * cfg.pages_per_doc : (i + 1) * cfg.pages_per_doc]
                ],
                dpi=cfg.dpi,
            )
            for i in range(cfg.documents)
        }
        url = "http://127.0.0.1:9104/metrics" if cfg.autoscale and cfg.metrics_ports else None
        timeline = Timeline(self.kafka, self.group, self.workdir / "timeline.jsonl",
                            autoscaler_url=url).start()  # fmt: skip
        start_wall = time.time()
        for doc_id, pdf in docs.items():
            client.submit(pdf, doc_id=doc_id, content_type="application/pdf")
        submitted_s = timeline.elapsed()
        self.echo(f"submitted {len(docs)} documents in {submitted_s:.1f} s; waiting …")
        events = client.wait_many(list(docs), cfg.timeout_s)
        done_s = timeline.elapsed()
        self._tail(timeline)
        points = timeline.stop()
        if not events:
            raise TimeoutError("no document finished")
        last = max(e.completed_at.timestamp() for e in events.values())
        wall = last - start_wall
        pages_done = sum(e.pages_ok for e in events.values())
        latencies = [(e.completed_at - e.submitted_at).total_seconds() for e in events.values()]
        return {
            "documents": len(docs), "finished": len(events), "pages": pages_done,
            "wall_s": round(wall, 3), "pages_per_s": round(pages_done / wall, 4) if wall else 0,
            "submit_s": round(submitted_s, 3), "observed_done_s": round(done_s, 3),
            "finished_s": round(last - start_wall, 3),
            "statuses": dict(Counter(e.status.value for e in events.values())),
            "latency_s": percentiles(latencies),
            "max_workers_seen": max((p.members or 0 for p in points), default=0),
            "timeline_restarts": timeline.restarts,
            "timeline": [p.to_dict() for p in points],
        }  # fmt: skip

    def _tail(self, timeline: Any) -> None:
        """Keep sampling after the load: until the autoscaler is back at its minimum (or
        ``tail_s``), a few seconds without it."""
        cfg = self.cfg
        deadline = time.monotonic() + (cfg.tail_s if cfg.autoscale else 3.0)
        while time.monotonic() < deadline:
            time.sleep(1.0)
            last = timeline.points[-1] if timeline.points else None
            if not cfg.autoscale or last is None or last.members is None:
                continue
            if last.members <= cfg.min_workers and (last.replicas or 0) <= cfg.min_workers:
                time.sleep(2.0)  # a couple more samples at the minimum
                return

    def _engine(self, pages: Sequence[Sample], processes: int, batch: int) -> dict[str, Any]:
        from ocrstream.bench.engine import BenchConfig, run_engine

        cfg = BenchConfig(
            backend=self.ocr.backend.value, model=self.ocr.model, device=self.ocr.device,
            precision=self.ocr.precision, batch=batch, threads=self.ocr.threads,
            processes=processes,
        )  # fmt: skip
        run, _ = run_engine("ocrstream", cfg, list(pages), processes)
        if run.error:
            raise RuntimeError(f"bench engine failed: {run.error}")
        return {"setup": run.setup, "pages": run.pages, "wall_s": round(run.wall_s, 3),
                "pages_per_s": round(run.pages_per_s, 4), "stage_ms": run.stage_ms,
                "peak_rss_mb": run.peak_rss_mb}  # fmt: skip

    def _splitter_rss(self, pages: Sequence[Sample]) -> dict[str, Any]:
        from ocrstream.bench.scans import long_scanned_pdf, splitter_peak_rss

        n = self.cfg.splitter_rss_pages
        path = self.workdir / f"long-{n}.pdf"
        path.write_bytes(long_scanned_pdf(n, [p.path.read_bytes() for p in pages[:3]],
                                          dpi=self.cfg.dpi))  # fmt: skip
        self.echo(f"splitting a {n}-page scan ({path.stat().st_size / 2**20:.0f} MiB) …")
        got = splitter_peak_rss(path, dpi=self.cfg.dpi)
        return {**got, "file_mb": round(path.stat().st_size / 2**20, 1), "target_mb": 500}

    # --- the whole run ----------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        from ocrstream.bench.engine import machine

        cfg = self.cfg
        self.report = {
            "run_id": self.run_id, "machine": machine(), "config": _config_dict(cfg),
            "engine_settings": {"backend": self.ocr.backend.value, "model": self.ocr.model,
                                "device": self.ocr.device, "threads": self.ocr.threads,
                                "max_batch": self.worker.max_batch,
                                "max_wait_ms": self.worker.max_wait_ms},
            "load_average_before": os.getloadavg(),
        }  # fmt: skip
        self._services()
        load_pages, probe_pages, warm = self._pages()
        log_path = self.workdir / "agents.log"
        lock = ports_lock(self.echo) if cfg.metrics_ports else contextlib.nullcontext()
        try:
            with lock, _supervised(self._agents(), self._env(), log_path) as supervisor:
                self.echo(f"agents started (logs: {log_path}); warming up …")
                self._measure(load_pages, probe_pages, warm)
                self.report["agent_restarts"] = supervisor.restarts
            self.report["load_average_after"] = os.getloadavg()
            if cfg.engine:
                self._compare(load_pages)
            if cfg.splitter_rss_pages > 0:
                self.report["splitter_rss"] = self._splitter_rss(load_pages or probe_pages)
        finally:
            if not cfg.keep:
                self._cleanup()
        self.report["agents_log"] = str(log_path)
        return self.report

    def _measure(
        self, load_pages: Sequence[Sample], probe_pages: Sequence[Sample], warm: Sample
    ) -> None:
        """Warm-up, latency probe, load and the zero-loss check, with the agents running."""
        from ocrstream.client import OcrClient
        from ocrstream.schemas.codec import Codec
        from ocrstream.streams import topics

        cfg = self.cfg
        expected: dict[str, int] = {}
        client = OcrClient(self.kafka, self.s3)
        try:
            self._warm_up(client, warm)
            expected["warm-up"] = 1
            self._wait_for_workers()
            if probe_pages:
                self.echo(f"latency probe: {len(probe_pages)} one-page documents …")
                self.report["latency_probe"] = self._probe(client, probe_pages)
                expected.update({f"probe-{i:03d}": 1 for i in range(len(probe_pages))})
            self.echo(f"load: {cfg.documents} documents × {cfg.pages_per_doc} pages …")
            expected.update({f"doc-{i:05d}": cfg.pages_per_doc for i in range(cfg.documents)})
            self.report["pipeline"] = self._load(client, load_pages)
            events = terminal_events(self.kafka, Codec(self.kafka))
            dlq = count_records(self.kafka, topics.DLQ)
            self.report["zero_loss"] = zero_loss(expected, events, dlq)
        finally:
            client.close()

    def _warm_up(self, client: Any, page: Sample) -> None:
        from ocrstream.bench.scans import scanned_pdf

        pdf = scanned_pdf([page.path.read_bytes()], dpi=self.cfg.dpi)
        if not self._submit_and_wait(client, {"warm-up": pdf}, 600.0):
            raise TimeoutError("the warm-up document did not finish in 600 s: see the agents log")

    def _wait_for_workers(self, timeout_s: float = 120.0) -> None:
        """Until every worker started has joined the group and holds its partitions: the first
        worker ready reads the warm-up alone, and when the others join, the partitions handed
        to them go unread until the members' next heartbeats (3 s apart then, 1 s now), which
        a probe "at idle" must not measure (it did: one probe of five took 3-4 s, the rest
        0.2-0.4)."""
        from confluent_kafka import ConsumerGroupState, KafkaException
        from confluent_kafka.admin import AdminClient

        cfg = self.cfg
        wanted = cfg.min_workers if cfg.autoscale else cfg.workers
        admin = AdminClient(self.kafka.librdkafka(log_level=3))
        deadline = time.monotonic() + timeout_s
        members = 0
        while time.monotonic() < deadline:
            try:
                group = admin.describe_consumer_groups([self.group])[self.group].result(10)
                members = len(group.members)
                assigned = all(m.assignment.topic_partitions for m in group.members)
                if (members >= wanted and group.state == ConsumerGroupState.STABLE
                        and assigned):  # fmt: skip
                    self.echo(f"{members} worker(s) in the group, partitions assigned")
                    return
            except (KafkaException, KeyError):  # the group between generations: ask again
                pass
            time.sleep(0.5)
        self.echo(f"only {members} of {wanted} worker(s) joined in {timeout_s:.0f} s; going on")

    def _compare(self, load_pages: Sequence[Sample]) -> None:
        cfg = self.cfg
        processes = cfg.max_workers if cfg.autoscale else cfg.workers
        self.echo(f"bench engine on the same {len(load_pages)} pages, {processes} process(es) …")
        engine = self._engine(load_pages, processes, self.worker.max_batch)
        self.report["engine"] = engine
        pipe = self.report.get("pipeline", {})
        if engine["pages_per_s"]:
            self.report["ratio"] = round(pipe.get("pages_per_s", 0) / engine["pages_per_s"], 4)

    def _env(self) -> dict[str, str]:
        # The page cache off: the load cycles a few page images, and the bench measures reading
        # pages, not answering them from the cache.
        return {**os.environ, "OCRSTREAM_TOPIC_PREFIX": self.kafka.topic_prefix,
                "OCRSTREAM_S3_BUCKET": self.s3.bucket,
                "OCRSTREAM_WORKER_CACHE": "false"}  # fmt: skip

    def _cleanup(self) -> None:
        remove_run(self.kafka, self.s3, self.echo)


def remove_run(kafka: Any, s3: Any, echo: Echo) -> None:
    """Delete a bench run's topics and consumer groups (everything under its prefix) and its
    bucket; what can't be deleted is reported, not raised."""
    from confluent_kafka.admin import AdminClient

    from ocrstream.storage import ObjectStore

    try:
        admin = AdminClient(kafka.librdkafka(log_level=3))
        names = [n for n in admin.list_topics(timeout=30).topics
                 if n.startswith(kafka.topic_prefix)]  # fmt: skip
        for fut in admin.delete_topics(names).values() if names else ():
            fut.result(30)
        groups = [g.group_id for g in admin.list_consumer_groups().result().valid
                  if g.group_id.startswith(kafka.topic_prefix)]  # fmt: skip
        for fut in admin.delete_consumer_groups(groups).values() if groups else ():
            with contextlib.suppress(Exception):
                fut.result(30)
        ObjectStore(s3).remove_bucket()
    except Exception as e:  # noqa: BLE001 - the report matters more than the cleanup
        echo(f"cleanup of {kafka.topic_prefix.rstrip('.')} incomplete: {e}")


@contextlib.contextmanager
def _supervised(specs: list[Any], env: dict[str, str], log_path: Path) -> Iterator[Any]:
    from ocrstream.settings import SupervisorSettings
    from ocrstream.streams.supervisor import Supervisor

    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        supervisor = Supervisor(specs, SupervisorSettings(stop_timeout_s=150), env=env,
                                stdout=out.fileno())  # fmt: skip
        thread = threading.Thread(target=supervisor.run, name="bench-supervisor", daemon=True)
        thread.start()
        try:
            yield supervisor
        finally:
            supervisor.stop()
            thread.join(200)


def _config_dict(cfg: PipelineConfig) -> dict[str, Any]:
    out = asdict(cfg)
    out["dataset"] = str(cfg.dataset) if cfg.dataset else None
    return out
