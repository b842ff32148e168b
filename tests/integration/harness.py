"""A reliability harness: the pipeline's agents as processes a test can kill, and a witness.

- :class:`Pipeline` runs the splitter, an OCR worker (the real one, or the real consumer loop
  around a fast fake engine: :mod:`tests.fakes.worker`) and the assembler as child processes
  on the test's topic prefix and bucket. Each one can be stopped (SIGTERM), SIGKILLed and
  started again; its peak RSS (``VmHWM``), CPU time and ``/metrics`` can be read.
- :class:`Witness` follows ``ocr.documents.v1``, ``ocr.page-results.v1`` and ``ocr.dlq.v1``
  from the beginning in a thread and keeps every record it saw, duplicates included, with the
  time it saw it.
- :func:`fake_doc` and :func:`text_doc` make small multi-page scans whose text is known: for
  the fake engine the size of each page image is unique (it reads back ``page WxH``), for the
  real engine each page carries its own printed line.
- :func:`assert_exactly_once` and :func:`assert_complete` state the guarantees of
  docs/architecture.md ("Guarantees"):
  every doc_id ends in exactly one terminal DocumentEvent; a completed document has every
  page, each with its own text.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pymupdf
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from PIL import Image

from ocrstream.bench.cer import levenshtein, normalise
from ocrstream.errors import PoisonError
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import (
    DeadLetter,
    DocumentEvent,
    DocumentProgress,
    DocumentStatus,
    PageResult,
    Record,
    ScanSource,
    ScanSubmitted,
    utc_now,
)
from ocrstream.services.kafka import KafkaService
from ocrstream.settings import KafkaSettings
from ocrstream.storage import ObjectStore
from ocrstream.streams import topics as t
from tests import samples
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
CLK_TCK = os.sysconf("SC_CLK_TCK")
AGENTS = ("splitter", "worker", "assembler")


def interruptible() -> None:
    """``preexec_fn`` of a command a test stops with SIGINT, as Ctrl-C would: the default
    disposition, even where the tests run with SIGINT ignored (a shell script starts its
    background jobs that way, `make test &` included, and every child inherits it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# --- the agents -------------------------------------------------------------------------------


@dataclass
class Agent:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    metrics_port: int
    proc: subprocess.Popen[bytes] | None = None
    pids: list[int] = field(default_factory=list)  # every process this agent ran, in order
    exits: list[int] = field(default_factory=list)  # their return codes, as they ended
    terminating: bool = False  # SIGTERM sent

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} is not running"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Pipeline:
    """The three agents as child processes on one test's topics and bucket."""

    def __init__(
        self,
        kafka: KafkaSettings,
        bucket: str,
        log_dir: Path,
        *,
        engine: str = "fake",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.kafka = kafka
        self.log_dir = log_dir
        base = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "OCRSTREAM_TOPIC_PREFIX": kafka.topic_prefix,
            "OCRSTREAM_S3_BUCKET": bucket,
            # A killed member holds its partitions until its session times out: keep it short.
            "OCRSTREAM_WORKER_SESSION_TIMEOUT_MS": "6000",
            **(env or {}),
        }
        worker = (
            ["-m", "tests.fakes.worker"] if engine == "fake" else ["-m", "ocrstream", "ocr-worker"]
        )
        commands = {
            "splitter": ["-m", "ocrstream", "splitter"],
            "worker": worker,
            "assembler": ["-m", "ocrstream", "assembler"],
        }
        self.agents: dict[str, Agent] = {}
        for name, args in commands.items():
            port = free_port()
            self.agents[name] = Agent(
                name, [sys.executable, *args, "--metrics-port", str(port)], dict(base),
                log_dir / f"{name}.log", port,
            )  # fmt: skip

    def __getitem__(self, name: str) -> Agent:
        return self.agents[name]

    # --- lifecycle --------------------------------------------------------------------------

    def start(self, *names: str) -> None:
        for name in names or AGENTS:
            agent = self.agents[name]
            assert not agent.alive(), f"{name} is already running"
            with open(agent.log_path, "ab") as log:
                log.write(f"\n=== harness: starting {name} at {time.time():.3f}\n".encode())
                log.flush()
                agent.proc = subprocess.Popen(
                    agent.argv, env=agent.env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT
                )
            agent.pids.append(agent.proc.pid)

    def kill(self, name: str) -> int:
        """SIGKILL the agent (no draining, no commit, no leaving the group); its return code."""
        agent = self.agents[name]
        assert agent.proc is not None, f"{name} is not running"
        assert agent.alive(), f"{name} already exited with {agent.proc.returncode}"
        agent.proc.send_signal(signal.SIGKILL)
        code = agent.proc.wait(30)
        agent.exits.append(code)
        agent.proc = None
        return code

    def stop(self, name: str, timeout_s: float = 60.0) -> int:
        """SIGTERM and wait for a clean exit (killed after ``timeout_s``); its return code."""
        agent = self.agents[name]
        if agent.proc is None:
            return 0
        if agent.proc.poll() is None:
            if not agent.terminating:  # a second SIGTERM may find the default handler back
                agent.proc.send_signal(signal.SIGTERM)
            try:
                agent.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                agent.proc.kill()
                agent.proc.wait(10)
        code = agent.proc.returncode
        agent.exits.append(code)
        agent.proc = None
        agent.terminating = False
        return code

    def close(self) -> dict[str, int]:
        """Stop every agent that still runs (all at once: they drain in parallel)."""
        live = [a for a in self.agents.values() if a.alive()]
        for agent in live:
            assert agent.proc is not None
            agent.proc.send_signal(signal.SIGTERM)
            agent.terminating = True
        return {agent.name: self.stop(agent.name) for agent in live}

    def died(self) -> list[str]:
        """Agents that exited without the test asking (a crash)."""
        return [a.name for a in self.agents.values() if a.proc is not None and not a.alive()]

    def assert_alive(self) -> None:
        dead = self.died()
        assert not dead, f"agents died: {dead}\n" + "\n".join(self.tail(n) for n in dead)

    # --- observation ------------------------------------------------------------------------

    def peak_rss_mib(self, name: str) -> float:
        """The agent's peak resident set (VmHWM) so far."""
        return _proc_status_kib(self.agents[name].pid, "VmHWM") / 1024

    def cpu_seconds(self, name: str) -> float:
        """User + system CPU time the agent's process used so far."""
        with open(f"/proc/{self.agents[name].pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def metrics(self, name: str) -> str:
        url = f"http://127.0.0.1:{self.agents[name].metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text: str = response.read().decode()
            return text

    def metric(self, name: str, metric: str, **labels: str) -> float | None:
        """One sample of the agent's ``/metrics`` (summed over unmentioned labels)."""
        from prometheus_client.parser import text_string_to_metric_families

        try:
            text = self.metrics(name)
        except OSError:
            return None
        total: float | None = None
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == metric and all(sample.labels.get(k) == v
                                                 for k, v in labels.items()):  # fmt: skip
                    total = (total or 0.0) + sample.value
        return total

    def tail(self, name: str, chars: int = 4000) -> str:
        path = self.agents[name].log_path
        text = path.read_text(errors="replace") if path.exists() else ""
        return f"--- {name} log (last {chars} chars) ---\n{text[-chars:]}"

    def log_text(self, name: str) -> str:
        return self.agents[name].log_path.read_text(errors="replace")


def _proc_status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    raise KeyError(key)


def delete_internal_topics(kafka: KafkaSettings) -> None:
    """faust's changelog, leader and deadline topics under the test's prefix."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(kafka.librdkafka())
    names = [n for n in admin.list_topics(timeout=10).topics
             if n.startswith(f"{kafka.topic_prefix}ocrstream-")]  # fmt: skip
    for fut in admin.delete_topics(names).values() if names else ():
        fut.result(30)


# --- the witness ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    at: float  # time.monotonic() when the witness read it
    record: Any
    topic: str
    partition: int
    offset: int


class Witness:
    """Reads the pipeline's outputs (and, with ``tasks``, its page tasks) from the beginning,
    in a thread, and keeps all of it."""

    def __init__(self, kafka: KafkaSettings, codec: Codec | None = None, *,
                 tasks: bool = False) -> None:  # fmt: skip
        self.kafka = kafka
        self.codec = codec or Codec(kafka)
        self._lock = threading.Lock()
        self.events: list[Seen] = []
        self.results: list[Seen] = []
        self.letters: list[Seen] = []
        self.tasks: list[Seen] = []
        self._follow = [t.DOCUMENTS, t.PAGE_RESULTS, t.DLQ] + ([t.PAGES] if tasks else [])
        self.undecodable: list[tuple[str, bytes]] = []
        self._read: dict[tuple[str, int], int] = {}  # (topic, partition) → last offset read
        self._stop = threading.Event()
        self._consumer = Consumer(kafka.librdkafka(**{
            "group.id": f"harness-witness-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.max.bytes": 16 * 1024 * 1024,
        }))  # fmt: skip
        assignment = []
        for name in self._follow:
            topic = kafka.topic(name)
            md = self._consumer.list_topics(topic, timeout=30)
            assignment += [TopicPartition(topic, p, OFFSET_BEGINNING)
                           for p in md.topics[topic].partitions]  # fmt: skip
        self._consumer.assign(assignment)
        self._thread = threading.Thread(target=self._run, name="witness", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        targets = {
            self.kafka.topic(t.DOCUMENTS): self.events,
            self.kafka.topic(t.PAGE_RESULTS): self.results,
            self.kafka.topic(t.DLQ): self.letters,
            self.kafka.topic(t.PAGES): self.tasks,
        }
        try:
            while not self._stop.is_set():
                msg = self._consumer.poll(0.2)
                if msg is None or msg.error() is not None:
                    continue
                topic = msg.topic() or ""
                with self._lock:
                    self._read[(topic, msg.partition() or 0)] = msg.offset() or 0
                try:
                    record = self.codec.decode(msg.value() or b"")
                except PoisonError:
                    with self._lock:
                        self.undecodable.append((topic, msg.value() or b""))
                    continue
                seen = Seen(time.monotonic(), record, topic, msg.partition() or 0,
                            msg.offset() or 0)  # fmt: skip
                with self._lock:
                    targets[topic].append(seen)
        finally:
            self._consumer.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)

    # --- views --------------------------------------------------------------------------------

    def terminal(self) -> dict[str, list[DocumentEvent]]:
        """Every DocumentEvent seen, by doc_id."""
        out: dict[str, list[DocumentEvent]] = defaultdict(list)
        with self._lock:
            for seen in self.events:
                if isinstance(seen.record, DocumentEvent):
                    out[seen.record.doc_id].append(seen.record)
        return out

    def events_since(self, since: float) -> list[DocumentEvent]:
        with self._lock:
            return [s.record for s in self.events if s.at >= since]

    def page_results(self, since: float = 0.0) -> list[PageResult]:
        with self._lock:
            return [s.record for s in self.results
                    if s.at >= since and isinstance(s.record, PageResult)]  # fmt: skip

    def seen_results(self) -> list[Seen]:
        """Every page result with where it was on the topic."""
        with self._lock:
            return [s for s in self.results if isinstance(s.record, PageResult)]

    def page_tasks(self, doc_id: str) -> list[Seen]:
        """The page tasks of one document on ``ocr.pages.v1`` (with ``tasks=True``)."""
        with self._lock:
            return [s for s in self.tasks if getattr(s.record, "doc_id", None) == doc_id]

    def dead_letters(self) -> list[DeadLetter]:
        with self._lock:
            return [s.record for s in self.letters if isinstance(s.record, DeadLetter)]

    def has_read(self, logical_topic: str, ends: Mapping[int, int]) -> bool:
        """Whether every record below ``ends`` (partition → end offset, from
        :func:`end_offsets`) has been read, decodable or not."""
        topic = self.kafka.topic(logical_topic)
        with self._lock:
            return all(self._read.get((topic, p), -1) >= end - 1 for p, end in ends.items())

    def done(self, doc_ids: Iterable[str]) -> int:
        """How many of ``doc_ids`` have a terminal event."""
        terminal = self.terminal()
        return sum(1 for d in doc_ids if d in terminal)

    def wait_done(self, doc_ids: Iterable[str], timeout_s: float, pipeline: Pipeline | None = None,
                  ) -> float:  # fmt: skip
        """Wait until every doc_id has a terminal event; fails early when an agent dies."""
        wanted = set(doc_ids)

        def check() -> bool:
            if pipeline is not None:
                pipeline.assert_alive()
            return self.done(wanted) == len(wanted)

        started = time.monotonic()
        try:
            wait_until(check, timeout_s, f"terminal events of {len(wanted)} documents",
                       interval_s=0.2)  # fmt: skip
            return time.monotonic() - started
        except AssertionError as e:
            missing = sorted(wanted - set(self.terminal()))
            raise AssertionError(f"{e}: {len(missing)} missing, e.g. {missing[:5]}") from None

    def quiet(self, seconds: float, timeout_s: float = 60.0) -> None:
        """Wait until nothing new arrived for ``seconds`` (late duplicates would show by then)."""

        def count() -> int:
            with self._lock:
                return len(self.events) + len(self.results) + len(self.letters)

        last, since = count(), time.monotonic()

        def settled() -> bool:
            nonlocal last, since
            now = count()
            if now != last:
                last, since = now, time.monotonic()
            return time.monotonic() - since >= seconds

        wait_until(settled, timeout_s, f"the pipeline to stay quiet for {seconds:g}s",
                   interval_s=0.25)  # fmt: skip


class Committed:
    """A consumer group's committed offsets, read without joining the group."""

    def __init__(self, kafka: KafkaSettings, group: str, logical_topic: str) -> None:
        self.topic = kafka.topic(logical_topic)
        self._consumer = Consumer(kafka.librdkafka(**{
            "group.id": group, "enable.auto.commit": False, "enable.auto.offset.store": False,
        }))  # fmt: skip
        md = self._consumer.list_topics(self.topic, timeout=30)
        self._tps = [TopicPartition(self.topic, p) for p in md.topics[self.topic].partitions]

    def offsets(self) -> dict[int, int]:
        """partition → the next offset the group will read (-1001: nothing committed)."""
        return {tp.partition: tp.offset for tp in self._consumer.committed(self._tps, timeout=10)}

    def lag(self) -> int:
        """Records on the topic the group has not committed (all of a partition it never
        committed on): 0 once it has processed everything there is."""
        marks = watermarks(self._consumer, self.topic)
        return sum(marks[p][1] - (offset if offset >= 0 else marks[p][0])
                   for p, offset in self.offsets().items())  # fmt: skip

    def close(self) -> None:
        self._consumer.close()


def wait_all_consumed(kafka: KafkaSettings, timeout_s: float = 60.0) -> None:
    """Wait until the splitter, the OCR workers and the assembler have committed every record
    on their input topics, so whatever they publish for those records has been published
    (each agent commits a record only after its outputs are delivered)."""
    from ocrstream.settings import AssemblerSettings, SplitterSettings, WorkerSettings

    groups = {SplitterSettings().app_id: t.SCANS, WorkerSettings().group: t.PAGES,
              AssemblerSettings().app_id: t.PAGE_RESULTS}  # fmt: skip
    inputs = [Committed(kafka, kafka.topic(group), topic) for group, topic in groups.items()]
    try:
        wait_until(lambda: all(c.lag() == 0 for c in inputs), timeout_s,
                   "every agent to commit all of its input", interval_s=0.5)  # fmt: skip
    finally:
        for c in inputs:
            c.close()


# --- reading topics ---------------------------------------------------------------------------


def watermarks(consumer: Consumer, topic: str) -> dict[int, tuple[int, int]]:
    """partition → (low, high) watermark offsets of ``topic`` (a full name)."""
    md = consumer.list_topics(topic, timeout=30)
    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            for p in md.topics[topic].partitions}  # fmt: skip


def end_offsets(kafka: KafkaSettings, logical_topic: str) -> dict[int, int]:
    """partition → the offset the next record will get: what is on the topic as of now."""
    consumer = Consumer(kafka.librdkafka(**{"group.id": "harness-end-offsets"}))
    try:
        marks = watermarks(consumer, kafka.topic(logical_topic))
    finally:
        consumer.close()
    return {p: high for p, (_, high) in marks.items()}


def read_all(kafka: KafkaSettings, logical_topic: str, codec: Codec) -> list[object]:
    """Every record of a topic, decoded, from the beginning to its end as of now."""
    consumer = Consumer(
        kafka.librdkafka(**{"group.id": "test-reader", "enable.auto.commit": False})
    )
    topic = kafka.topic(logical_topic)
    ends = {p: high for p, (_, high) in watermarks(consumer, topic).items()}
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    out: list[object] = []
    remaining = {p for p, end in ends.items() if end > 0}

    def read_to_the_end() -> bool:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            out.append(codec.decode(msg.value() or b""))
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if offset + 1 >= ends[partition]:
                remaining.discard(partition)
        return not remaining

    try:
        wait_until(read_to_the_end, 30, f"every record of {topic}", interval_s=0)
    finally:
        consumer.close()
    return out


# --- raw records ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]


def produce_raw(
    kafka: KafkaSettings,
    logical_topic: str,
    records: Sequence[tuple[bytes | None, bytes | None, Mapping[str, bytes]]],
) -> list[Sent]:
    """Publish (key, value, headers) records as they are, bypassing the codec; where they went."""
    # murmur2, as every ocrstream producer: a doc_id lands where the SDK would put it.
    producer = Producer(kafka.librdkafka(**{
        "enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random",
        "message.max.bytes": 8 * 1024 * 1024,  # the topics' own limit, above ocrstream's
    }))  # fmt: skip
    topic = kafka.topic(logical_topic)
    out: list[Sent] = []
    errors: list[str] = []
    for key, value, headers in records:

        def delivered(err: Any, msg: Any, key: bytes | None = key, value: bytes | None = value,
                      headers: Mapping[str, bytes] = headers) -> None:  # fmt: skip
            if err is not None:
                errors.append(str(err))
            else:
                out.append(Sent(topic, msg.partition(), msg.offset(), key, value, dict(headers)))

        producer.produce(topic, key=key, value=value, headers=list(headers.items()),
                         on_delivery=delivered)  # fmt: skip
    assert producer.flush(30) == 0, "records not delivered in 30s"
    assert not errors, errors
    return out


# --- documents with known text ------------------------------------------------------------------


@dataclass(frozen=True)
class LoadDoc:
    doc_id: str
    data: bytes
    texts: tuple[str, ...]  # what each page says

    @property
    def page_count(self) -> int:
        return len(self.texts)


def _jpeg(gray: np.ndarray, quality: int = 60) -> bytes:
    out = io.BytesIO()
    Image.fromarray(gray).save(out, "JPEG", quality=quality)
    return out.getvalue()


def _scan_pdf(pages: Sequence[tuple[bytes, int, int]]) -> bytes:
    """Each page one full-page JPEG at 72 DPI (the splitter passes it through untouched)."""
    doc = pymupdf.open()
    for data, w, h in pages:
        page = doc.new_page(width=w, height=h)
        page.insert_image(page.rect, stream=data, keep_proportion=False)
    out: bytes = doc.tobytes(garbage=1, deflate=True)
    doc.close()
    return out


def fake_doc(index: int, pages: int, prefix: str = "doc") -> LoadDoc:
    """A scan whose page ``p`` is a ``(200 + index) × (100 + 10 p)`` pixel image: the fake engine
    reads each page back as ``page WxH``, so every page's text is unique within a load."""
    rng = np.random.default_rng(index)
    parts, texts = [], []
    for p in range(1, pages + 1):
        w, h = 200 + index, 100 + 10 * p
        gray = np.full((h, w), 255, np.uint8)
        for _ in range(6):  # a few dark strokes, like words
            x, y = int(rng.integers(0, w - 40)), int(rng.integers(0, h - 8))
            gray[y : y + 6, x : x + 30] = 20
        parts.append((_jpeg(gray), w, h))
        texts.append(f"page {w}x{h}")
    return LoadDoc(f"{prefix}-{index:04d}", _scan_pdf(parts), tuple(texts))


def long_doc(index: int, pages: int, prefix: str = "long") -> LoadDoc:
    """Like :func:`fake_doc`, with hundreds of pages: page ``p`` is
    ``(400 + 2 (p // 40)) × (100 + 5 (p % 40))`` pixels."""
    parts, texts = [], []
    for p in range(1, pages + 1):
        w, h = 400 + 2 * (p // 40), 100 + 5 * (p % 40)
        gray = np.full((h, w), 255, np.uint8)
        gray[10:20, 10 + p % 50 : 100 + p % 50] = 20
        parts.append((_jpeg(gray), w, h))
        texts.append(f"page {w}x{h}")
    return LoadDoc(f"{prefix}-{index:04d}", _scan_pdf(parts), tuple(texts))


def text_doc(index: int, pages: int, prefix: str = "doc", dpi: int = 150) -> LoadDoc:
    """A scan of small pages that each print their own line (for the real engine)."""
    parts, texts = [], []
    for p in range(1, pages + 1):
        line = f"Document {index:03d} page {p} total {1000 + 37 * index + p}"
        gray = samples.render_lines([line], dpi=dpi, size=(330, 110), fontsize=14, noise=4,
                                    seed=index * 10 + p)  # fmt: skip
        h, w = gray.shape
        parts.append((_jpeg(gray, 80), w, h))
        texts.append(line)
    return LoadDoc(f"{prefix}-{index:04d}", _scan_pdf(parts), tuple(texts))


# --- the guarantees ---------------------------------------------------------------------------


def assert_exactly_once(witness: Witness, doc_ids: Iterable[str]) -> dict[str, DocumentEvent]:
    """Every doc_id has exactly one terminal DocumentEvent, and no other doc_id has one."""
    wanted = set(doc_ids)
    terminal = witness.terminal()
    counts = Counter({d: len(events) for d, events in terminal.items()})
    missing = sorted(wanted - set(counts))
    repeated = {d: n for d, n in counts.items() if n > 1}
    strangers = sorted(set(counts) - wanted)
    assert not missing, f"{len(missing)} documents without a terminal event: {missing[:10]}"
    assert not repeated, f"documents with more than one terminal event: {repeated}"
    assert not strangers, f"terminal events for documents never submitted: {strangers[:10]}"
    return {d: terminal[d][0] for d in wanted}


def assert_complete(
    store: ObjectStore,
    events: Mapping[str, DocumentEvent],
    docs: Iterable[LoadDoc],
    *,
    max_cer: float = 0.0,
) -> None:
    """Each document completed with every page, and ``document.json`` holds each page's own
    text (exactly, or within ``max_cer`` for a real engine) in page order."""
    for doc in docs:
        event = events[doc.doc_id]
        assert event.status is DocumentStatus.COMPLETED, (doc.doc_id, event.status, event.error)
        assert event.page_count == event.pages_ok == doc.page_count, (doc.doc_id, event)
        assert not event.missing_pages, (doc.doc_id, event)
        assert not event.failed_pages, (doc.doc_id, event)
        body = json.loads(store.get_bytes(store.keys.document(doc.doc_id, "json")))
        pages = body["pages"]
        assert [p["page_no"] for p in pages] == list(range(1, doc.page_count + 1)), doc.doc_id
        for page, want in zip(pages, doc.texts, strict=True):
            got = " ".join(line["text"] for line in page["lines"])
            assert page["status"] == "ok", (doc.doc_id, page["page_no"], page["status"])
            if max_cer == 0.0:
                assert got == want, (doc.doc_id, page["page_no"], got, want)
            else:
                ref = normalise(want)
                cer = levenshtein(normalise(got), ref) / max(1, len(ref))
                assert cer <= max_cer, (doc.doc_id, page["page_no"], got, want, cer)


# --- records for the duplicate and poison cases ------------------------------------------------


def scan_record(
    doc: LoadDoc, *, outputs: Sequence[str] = ("json", "txt"), mode: str = "text"
) -> ScanSubmitted:
    """The ScanSubmitted the SDK would publish for ``doc`` (inline source)."""
    import hashlib

    return ScanSubmitted(
        doc_id=doc.doc_id, source=ScanSource(data=doc.data), content_type="application/pdf",
        sha256=hashlib.sha256(doc.data).hexdigest(), size_bytes=len(doc.data),
        submitted_at=utc_now(), outputs=tuple(outputs), trace_id=uuid.uuid4().hex, mode=mode,
    )  # fmt: skip


@dataclass(frozen=True)
class Poison:
    """A record that can't be processed and the DLQ error code it must get."""

    key: bytes | None
    value: bytes | None
    code: str
    headers: Mapping[str, bytes] = field(default_factory=dict)


OVERSIZE = 6 * 1024 * 1024  # over LimitsSettings.max_message_bytes, under the topics' limit


def poison_for(codec: Codec, topic: str, valid: Record, tag: str) -> list[Poison]:
    """Records no consumer of ``topic`` can use: not Avro, an unknown schema, a known schema
    with a truncated body, the wrong record type, a null value (a tombstone), and 6 MiB of
    junk (a dead letter carrying it would be over the producers' message limit)."""
    good = codec.encode(valid, topic)
    wrong = codec.encode(DocumentProgress(doc_id="x", pages_done=0, page_count=1,
                                          updated_at=utc_now()), topic)  # fmt: skip
    h = {"origin": tag.encode(), "binary": b"\x00\xff"}
    return [
        Poison(f"{tag}-not-avro".encode(), b"%PDF-1.7 this is not Avro", "unknown_schema", h),
        Poison(f"{tag}-unknown".encode(), b"\xc3\x01" + b"\x13" * 8 + good[10:],
               "unknown_schema", h),
        Poison(f"{tag}-truncated".encode(), good[: len(good) // 2], "malformed_record", h),
        Poison(f"{tag}-wrong-type".encode(), wrong, "unknown_schema", h),
        Poison(f"{tag}-tombstone".encode(), None, "malformed_record", h),
        Poison(f"{tag}-oversize".encode(), b"junk" * (OVERSIZE // 4), "unknown_schema", h),
    ]  # fmt: skip


# --- the local services ---------------------------------------------------------------------


@contextlib.contextmanager
def service_down(name: str) -> Iterator[Callable[[], int | None]]:
    """Stop one local service (``kafka`` or ``s3``) for the duration of the block, through the
    services manager, and start it again on the same ports and data; it is started again even
    when the block fails. Yields a function that starts it early and returns its new PID."""
    from ocrstream.services import build_services, down, up
    from ocrstream.settings import S3Settings, ServicesSettings

    services = build_services(ServicesSettings(), S3Settings(), [name])
    (service,) = services
    assert service.own_pid() is not None, f"{name} is not running"
    down(services)
    started = False

    def start() -> int | None:
        nonlocal started
        if not started:
            up(services)
            started = True
        return service.own_pid()

    try:
        yield start
    finally:
        start()


@contextlib.contextmanager
def own_broker(home: Path, service: type[KafkaService] = KafkaService) -> Iterator[KafkaService]:
    """A Kafka broker of the test's own, on new storage under ``home`` and free ports, stopped
    on the way out: for a test that stops Kafka (the suite's broker is shared) or needs one as
    CI and every first ``infra up`` get it."""
    from ocrstream.settings import ServicesSettings

    ports = {"kafka_port": free_port(), "kafka_controller_port": free_port()}
    broker = service(ServicesSettings(home=home, start_timeout_s=120, **ports))
    broker.prepare()
    broker.wait_ready(broker.start(), deadline=time.monotonic() + 120)
    try:
        yield broker
    finally:
        broker.stop(timeout_s=30)


@contextlib.contextmanager
def stack(
    kafka: KafkaSettings, bucket: str, log_dir: Path
) -> Iterator[Callable[..., tuple[Pipeline, Witness]]]:
    """Yields ``make(**pipeline_options)`` → (pipeline not started, witness). On the way out
    every agent is stopped with SIGTERM and must exit 0 (drained, committed), their logs are
    printed, and faust's internal topics under the prefix are deleted."""
    made: list[tuple[Pipeline, Witness]] = []

    def make(*, tasks: bool = False, **kwargs: Any) -> tuple[Pipeline, Witness]:
        pipeline = Pipeline(kafka, bucket, log_dir, **kwargs)
        witness = Witness(kafka, tasks=tasks)
        made.append((pipeline, witness))
        return pipeline, witness

    try:
        yield make
        for pipeline, _ in made:
            exits = pipeline.close()
            assert all(code == 0 for code in exits.values()), f"unclean exits: {exits}"
    finally:
        for pipeline, witness in made:
            pipeline.close()
            witness.close()
            for name in pipeline.agents:
                print(pipeline.tail(name, 3000))
        delete_internal_topics(kafka)


def parse_sse(text: str) -> list[dict[str, Any]]:
    """Server-Sent Events as the API sends them: id, event and JSON data per event (comments
    such as keep-alives left out)."""
    events = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines()
                      if line and not line.startswith(":"))  # fmt: skip
        if fields:
            events.append({"id": fields["id"], "event": fields["event"],
                           "data": json.loads(fields["data"])})  # fmt: skip
    return events


def event_contents(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """Parsed events as a sorted list of their (event, data), ids left out: what two streams
    that sent the same events in another order have in common."""
    return sorted(json.dumps([e["event"], e["data"]], sort_keys=True) for e in events)
