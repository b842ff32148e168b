"""The OCR worker: one confluent-kafka consumer per process in the group on ``ocr.pages.v1``.

Delivery guarantee: at-least-once with offsets stored after delivery, not transactions.
``enable.auto.commit`` is on and ``enable.auto.offset.store`` is off: an offset is stored only
when the PageResult (or dead letter) of that record *and of every earlier record of the same
partition* has been acknowledged by the brokers (idempotent producer, ``acks=all``); the
background committer then commits what was stored, and rebalances and shutdown commit
synchronously. A crash can therefore only repeat pages, never lose them, and repeats are
harmless: results are keyed by doc_id and the assembler de-duplicates by (doc_id, page_no).
Transactions would buy nothing the de-duplication doesn't already give, and they would cost a
transaction commit per micro-batch, a transactional.id per consumer, ``read_committed``
readers downstream, and still could not cover the object-store reads of claim-checked images.

The loop never sleeps: it polls with a short timeout so the group membership stays alive
while pages are fetched and decoded in a thread pool and batches run in the engine thread.

- Micro-batching across documents: prepared pages of any document join the next batch,
  dispatched when it is full (``max_batch``) or its oldest page waited ``max_wait_ms``.
- Intake in submission order: consumed pages wait, undecoded, in one queue ordered by the
  scan's priority (higher first), then its submission time, then page number, and are
  decoded from its head only as far as the next batch needs (``max_batch`` pages decoding or
  batched), and about as fast as the decode threads take them (one waiting per thread), so
  every pick sees the partitions the previous picks emptied refilled. A partition holding its
  share of the queue (what ``max_inflight_pages`` leaves beside two batches, split over the
  partitions assigned; at least one page) is paused, so the queue holds the heads of every
  partition and the worker takes the oldest work first whichever partition it is on: a
  document's pages are spread over many partitions (key doc_id/page_no), and draining
  partitions at equal rates finished the median document of a bulk backlog at 88% of the run
  (55% now, documents completing in submission order; docs/benchmarks.md). The share must be
  deep: with 4 pages per partition the constant pause/resume left some partitions unfetched
  for a minute. Priority reorders only the pages a worker holds, not a partition's log: it
  jumps the queue, not the backlog.
- Bounded memory: at ``max_inflight_pages`` consumed-but-undelivered pages no queued page is
  started and every partition that has a page queued is paused (fetching stops; polling goes
  on) until deliveries make room; a partition with none may still fetch one, so that its
  oldest page is not starved by partitions that happen to be fetched first: the bound is
  ``max_inflight_pages`` plus one page per assigned partition. Decoded images are bounded
  too: pages are decoded only while the pixels held (decoding, batched or in the engine) stay
  within ``max_inflight_pixels``; the others wait undecoded. Without it a few small PDFs of
  huge vector pages (each rendered at the 80-megapixel page limit, 240 MB as BGR) could fill
  the worker's memory 64 pages at a time.
- Store down: a page whose image can't be fetched waits, and its partition is paused until
  the store answers again. The store has one circuit for the whole worker: after a failed
  fetch no image is fetched until the backoff (doubling per failed probe) runs out; then one
  page probes the store, and the others follow once it answers: one request per backoff
  instead of one per waiting page (up to ``max_inflight_pages``), one warning per outage, and
  no burst of requests the moment it comes back.
- Rebalance and SIGTERM: in-flight pages are finished and delivered, offsets stored, and
  the commit is made synchronously before partitions are given up.
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import itertools
import logging
import os
import socket
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from ocrstream.errors import FatalError, PoisonError, RetriableError
from ocrstream.logs import log_context
from ocrstream.schemas.codec import Codec, UnencodableRecordError
from ocrstream.schemas.records import ErrorInfo, PageResult, PageTask
from ocrstream.settings import KafkaSettings, LimitsSettings, WorkerSettings
from ocrstream.streams import dlq, topics
from ocrstream.streams.gpu_metrics import start_gpu_metrics
from ocrstream.streams.metrics import Metrics
from ocrstream.streams.ocr_batch import (
    MicroBatcher,
    PageEngine,
    PreparedPage,
    failed_result,
    prepare_page,
    process_batch,
)
from ocrstream.streams.offsets import OffsetTracker
from ocrstream.streams.producer import RecordProducer

log = logging.getLogger(__name__)

STAGE = "ocr"
DLQ_STAGE = "ocr-worker"

Origin = tuple[str, int, int]  # topic, partition, offset


@dataclass(slots=True)
class _Item:
    origin: Origin
    task: PageTask
    attempts: int = 0
    future: Future[PreparedPage] | None = None

    @property
    def tp(self) -> tuple[str, int]:
        return self.origin[0], self.origin[1]

    def order(self) -> tuple[int, float, int]:
        """Intake order: higher priority, then earlier submission, then lower page number."""
        task = self.task
        return -task.priority, task.submitted_at.timestamp(), task.page_no

    @property
    def pixels(self) -> int:
        """The decoded size it will hold (as its task declares; none for a text layer)."""
        if self.task.text_layer is not None:
            return 0
        return max(1, self.task.width) * max(1, self.task.height)


def consumer_config(kafka: KafkaSettings, settings: WorkerSettings) -> dict[str, Any]:
    return kafka.librdkafka(
        **{
            "group.id": kafka.topic(settings.group),
            "enable.auto.commit": True,
            "enable.auto.offset.store": False,
            "auto.commit.interval.ms": 1000,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": settings.session_timeout_ms,
            "max.poll.interval.ms": settings.max_poll_interval_ms,
            # Bound librdkafka's prefetch: inline page images are up to a few MiB each.
            "queued.max.messages.kbytes": 16_384,
            "fetch.max.bytes": 16 * 1024 * 1024,
        }
    )


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class OcrWorker:
    """The consumer loop around :func:`process_batch`. Build one, then call :meth:`run`."""

    def __init__(
        self,
        *,
        kafka: KafkaSettings,
        settings: WorkerSettings,
        engine: PageEngine,
        codec: Codec,
        fetch: Any,
        metrics: Metrics,
        limits: LimitsSettings | None = None,
        consumer: Any | None = None,
        producer: RecordProducer | None = None,
        worker_id: str | None = None,
    ) -> None:
        self.settings = settings
        self.limits = limits or LimitsSettings()
        self.engine = engine
        self.codec = codec
        self.fetch = fetch
        self.metrics = metrics
        self.worker_id = worker_id or default_worker_id()
        self.topic = kafka.topic(topics.PAGES)
        self.results_topic = kafka.topic(topics.PAGE_RESULTS)
        self.dlq_topic = kafka.topic(topics.DLQ)
        self.consumer = (
            consumer if consumer is not None else Consumer(consumer_config(kafka, settings))
        )
        self.producer = (
            producer if producer is not None else RecordProducer(kafka, codec, limits=self.limits)
        )
        self._tracker = OffsetTracker()
        self._batcher: MicroBatcher[tuple[_Item, PreparedPage]] = MicroBatcher(
            settings.max_batch, settings.max_wait_ms / 1000
        )
        self._preparing: list[_Item] = []
        self._retrying: list[_Item] = []
        # Consumed, not decoded yet: a heap in _Item.order (a counter breaks ties), and how
        # many of them each partition has.
        self._intake: list[tuple[tuple[int, float, int], int, _Item]] = []
        self._intake_by_tp: Counter[tuple[str, int]] = Counter()
        self._intake_seq = itertools.count()
        self._store_failures = 0  # failed probes since the store last answered
        self._store_retry_at = 0.0  # no image is fetched before this while it fails
        self._probe: _Item | None = None  # the one fetch that tests the store
        self._held_pixels = 0
        self._engine_future: Future[list[PageResult]] | None = None
        self._engine_batch: list[tuple[_Item, PreparedPage]] = []
        self._engine_started = 0.0
        self._redeliver: list[tuple[Origin, str, str, bytes]] = []
        self._assigned: set[tuple[str, int]] = set()
        self._paused: set[tuple[str, int]] = set()
        self._fatal: FatalError | None = None
        self._decode_pool = ThreadPoolExecutor(settings.decode_threads, "ocr-decode")
        self._engine_pool = ThreadPoolExecutor(1, "ocr-engine")
        info = engine.info
        metrics.worker_info.labels(info.backend, info.model, info.device).set(1)

    # --- the loop -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Consume until ``stop`` is set; then drain, commit and leave the group."""
        self.consumer.subscribe(
            [self.topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        log.info("ocr worker %s consuming %s as group member", self.worker_id, self.topic)
        gpu = start_gpu_metrics(self.engine.info.device, self.metrics)
        try:
            while not stop.is_set():
                self.step()
        finally:
            if gpu is not None:
                gpu.stop()
            self.shutdown()

    def step(self) -> None:
        """One turn of the loop: poll, hand pages on, deliver results. Never blocks long."""
        if self._fatal is not None:
            raise self._fatal
        self._apply_backpressure()
        room = self.settings.max_inflight_pages - self._tracker.inflight()
        msgs = self.consumer.consume(
            num_messages=max(1, min(room, 256)), timeout=self._poll_timeout()
        )
        for msg in msgs:
            self._accept(msg)
        now = time.monotonic()
        self._collect_prepared(now)
        self._resubmit_due(now)
        self._collect_engine()
        self._admit()
        self._dispatch(now, force=False)
        self._resend_failed()
        self.producer.poll(0)
        self.metrics.pages_inflight.labels(STAGE).set(self._tracker.inflight())

    def shutdown(self) -> None:
        """Drain what's in flight, commit synchronously, leave the group."""
        try:
            self.drain(revoked=None)
            self._commit_sync()
        finally:
            try:
                self.consumer.close()
            finally:
                self._decode_pool.shutdown(wait=True, cancel_futures=True)
                self._engine_pool.shutdown(wait=True)
                info = self.engine.info
                self.metrics.worker_info.remove(info.backend, info.model, info.device)
        log.info("ocr worker %s stopped", self.worker_id)

    def _poll_timeout(self) -> float:
        timeout = self.settings.poll_timeout_ms / 1000
        busy = self._engine_future is not None
        if self._preparing or busy or len(self.producer):
            timeout = min(timeout, 0.005)
        # A due batch can only start when the engine is free: while it runs, waking for the
        # batch's deadline would make this loop spin and take the engine's CPU.
        deadline = None if busy else self._batcher.deadline()
        if deadline is not None:
            timeout = min(timeout, max(0.0, deadline - time.monotonic()))
        return timeout

    # --- consume --------------------------------------------------------------------------

    def _accept(self, msg: Message) -> None:
        err = msg.error()
        if err is not None:
            if err.fatal():
                raise FatalError(f"consumer: {err}", code="kafka_fatal")
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer error: %s", err)
            return
        topic, partition, offset = origin = _origin(msg)
        self._tracker.add(topic, partition, offset)
        with log_context(tp=f"{topic}[{partition}]@{offset}"):
            try:
                task = self.codec.decode_as(msg.value() or b"", PageTask)
            except PoisonError as e:
                log.warning("undecodable page task goes to the DLQ: %s", e)
                self._dead_letter(msg, e)
                return
        self._submit(_Item(origin, task))

    def _submit(self, item: _Item) -> None:
        """Queue the page for decoding, in intake order (the loop admits from the queue once
        everything polled is in)."""
        heapq.heappush(self._intake, (item.order(), next(self._intake_seq), item))
        self._intake_by_tp[item.tp] += 1

    def _start(self, item: _Item) -> None:
        if self._store_failures and item.task.image.uri and item is not self._probe:
            self._retrying.append(item)  # the store is down: wait for the probe
            return
        self._held_pixels += item.pixels
        with _context(item):  # the decode thread logs with the page's context
            run = contextvars.copy_context().run
        item.future = self._decode_pool.submit(
            run, prepare_page, item.task, self.fetch, max_pixels=self.limits.max_page_pixels
        )
        self._preparing.append(item)

    def _admit(self) -> None:
        """Start decoding queued pages from the head of the intake while the next batch is not
        full yet and the pixel budget allows (a page is always admitted when none is held)."""
        ahead, limit = self.settings.max_batch, self.settings.max_inflight_pages
        # About as fast as the decode threads take them: each pick then sees the partitions
        # the last picks emptied refilled. One page waits in the pool per thread, so a thread
        # that finishes starts the next page at once instead of at the loop's next turn (a
        # GPU engine can outrun the decoding).
        picks = 2 * self.settings.decode_threads
        while (
            self._intake
            and len(self._preparing) < picks
            and len(self._preparing) + len(self._batcher) < ahead
        ):
            if self._tracker.inflight() - len(self._intake) >= limit:
                return  # started, not delivered: as many as the limit allows
            item = self._intake[0][2]
            held = self._held_pixels
            if held and held + item.pixels > self.settings.max_inflight_pixels:
                return
            heapq.heappop(self._intake)
            self._intake_by_tp[item.tp] -= 1
            self._start(item)

    def _drop_intake(self, tps: set[tuple[str, int]] | None) -> None:
        """Forget queued pages of ``tps`` (all when None): their offsets were never stored."""
        keep = [e for e in self._intake if tps is not None and e[2].tp not in tps]
        heapq.heapify(keep)
        self._intake = keep
        self._intake_by_tp = Counter(e[2].tp for e in keep)

    def _intake_share(self) -> int:
        """Queued pages a partition may have before it is paused: what the in-flight limit
        leaves beside a batch decoding and one in the engine, split over the partitions."""
        room = self.settings.max_inflight_pages - 2 * self.settings.max_batch
        return max(1, room // max(1, len(self._assigned)))

    def _release(self, item: _Item) -> None:
        self._held_pixels = max(0, self._held_pixels - item.pixels)

    def _collect_prepared(self, now: float) -> None:
        pending: list[_Item] = []
        for item in self._preparing:
            fut = item.future
            assert fut is not None
            if not fut.done():
                pending.append(item)
                continue
            with _context(item):
                try:
                    page = fut.result()
                except RetriableError as e:
                    self._release(item)  # nothing decoded; the budget is taken again on retry
                    self._schedule_retry(item, e, now)
                    continue
                except FatalError:  # e.g. the store refuses our credentials: exit, be restarted
                    raise
                except Exception as e:  # a bug in decoding must fail the page, not the worker
                    log.exception(
                        "preparing %s page %d failed", item.task.doc_id, item.task.page_no
                    )
                    page = PreparedPage(item.task, error=ErrorInfo("prepare_error", repr(e)))
            if item is self._probe:
                self._probe = None
            if self._store_failures and item.task.image.uri:
                log.info("the store answers again: fetching the %d waiting pages",
                         len(self._retrying))  # fmt: skip
                self._store_failures = 0
            self.metrics.stage_seconds.labels("decode").observe(page.decode_ms / 1000)
            self._batcher.add((item, page), now)
        self._preparing = pending

    def _schedule_retry(self, item: _Item, exc: RetriableError, now: float) -> None:
        """Park a page whose image could not be fetched; the first failure, and each failed
        probe, open the store's circuit for the next backoff."""
        item.attempts += 1
        self._retrying.append(item)
        self.metrics.retries.labels(STAGE, exc.code).inc()
        was_probe = item is self._probe
        if was_probe:
            self._probe = None
        if self._store_failures and not was_probe:
            return  # failed with the others of the same outage: no new backoff
        self._store_failures += 1
        delay = min(
            self.settings.store_backoff_max_s,
            self.settings.store_backoff_s * 2 ** (self._store_failures - 1),
        )
        self._store_retry_at = now + delay
        log.log(
            logging.WARNING if self._store_failures == 1 else logging.DEBUG,
            "store unavailable (%s): %d pages wait, their partitions paused; probe %d in %.1fs",
            exc,
            len(self._retrying),
            self._store_failures,
            delay,
        )

    def _resubmit_due(self, now: float) -> None:
        if not self._retrying:
            return
        if self._store_failures:  # one probe at a time, when the backoff has run out
            probe = self._probe
            if probe is not None and not any(
                i is probe for i in (*self._preparing, *(e[2] for e in self._intake))
            ):
                self._probe = None  # dropped with a revoked or lost partition
            if self._probe is None and now >= self._store_retry_at:
                self._probe = self._retrying.pop(0)
                self._submit(self._probe)
            return
        due, self._retrying = self._retrying, []
        for item in due:
            self._submit(item)

    def _apply_backpressure(self) -> None:
        full = self._tracker.inflight() >= self.settings.max_inflight_pages
        blocked = {item.tp for item in self._retrying}
        blocked |= {item.tp for item in self._preparing if item.attempts}
        # At the limit, a partition with nothing queued may still fetch one page.
        share = 1 if full else self._intake_share()
        queued = {tp for tp, n in self._intake_by_tp.items() if n >= share}
        want = (blocked | queued) & self._assigned
        pause, resume = want - self._paused, self._paused - want
        if pause:
            self.consumer.pause([TopicPartition(t, p) for t, p in pause])
        if resume:
            self.consumer.resume([TopicPartition(t, p) for t, p in resume])
        self._paused = want
        held = len((queued - blocked) & self._assigned)
        self.metrics.paused_partitions.labels(STAGE, "inflight_limit").set(held if full else 0)
        self.metrics.paused_partitions.labels(STAGE, "store_unavailable").set(
            len(blocked & self._assigned)
        )
        self.metrics.paused_partitions.labels(STAGE, "intake_share").set(0 if full else held)

    # --- engine ---------------------------------------------------------------------------

    def _dispatch(self, now: float, *, force: bool) -> None:
        if self._engine_future is not None or not len(self._batcher):
            return
        if not (force or self._batcher.due(now)):
            return
        batch = self._batcher.take()
        self._engine_batch = batch
        self._engine_started = time.perf_counter()
        self.metrics.batch_size.labels(STAGE).observe(len(batch))
        self._engine_future = self._engine_pool.submit(
            process_batch,
            self.engine,
            [page for _, page in batch],
            worker_id=self.worker_id,
            retries=self.settings.engine_retries,
        )

    def _collect_engine(self) -> None:
        fut = self._engine_future
        if fut is None or not fut.done():
            return
        self._engine_future = None
        batch, self._engine_batch = self._engine_batch, []
        results = fut.result()  # only FatalError (or a bug) escapes process_batch
        self.metrics.stage_seconds.labels("engine").observe(
            time.perf_counter() - self._engine_started
        )
        for (item, _), result in zip(batch, results, strict=True):
            self._release(item)
            self.metrics.pages.labels(STAGE, result.status.value).inc()
            with _context(item):
                self._produce(item.origin, result)

    # --- produce --------------------------------------------------------------------------

    def _produce(self, origin: Origin, result: PageResult) -> None:
        try:
            value = self.producer.encode(result, self.results_topic)
        except UnencodableRecordError as e:
            log.error("page %s/%d result does not encode: %s", result.doc_id, result.page_no, e)
            fallback = failed_result(
                _task_of(result), ErrorInfo(e.code, str(e)), worker_id=self.worker_id
            )
            value = self.producer.encode(fallback, self.results_topic)
        if len(value) > self.limits.max_message_bytes:  # the producer would refuse it: a crash
            log.error("page %s/%d result is %d bytes, over the message limit", result.doc_id,
                      result.page_no, len(value))  # fmt: skip
            error = ErrorInfo("result_too_large", f"{len(value)} bytes")
            fallback = failed_result(_task_of(result), error, worker_id=self.worker_id)
            value = self.producer.encode(fallback, self.results_topic)
        self._send(origin, self.results_topic, result.doc_id, value)

    def _send(self, origin: Origin, topic: str, key: Any, value: bytes) -> None:
        self.producer.send_raw(
            topic, key, value, on_delivery=partial(self._delivered, origin, topic, key, value)
        )

    def _delivered(
        self,
        origin: Origin,
        topic: str,
        key: Any,
        value: bytes,
        err: KafkaError | None,
        _msg: Message,
    ) -> None:
        if err is not None:
            if err.fatal():
                self._fatal = FatalError(f"producer: {err}", code="kafka_fatal")
                return
            log.warning("delivery to %s failed (%s); sending again", topic, err)
            self.metrics.retries.labels(STAGE, "delivery").inc()
            self._redeliver.append((origin, topic, key, value))
            return
        nxt = self._tracker.done(*origin)
        if nxt is None:
            return
        try:
            self.consumer.store_offsets(offsets=[TopicPartition(origin[0], origin[1], nxt)])
        except KafkaException as e:  # the partition was revoked meanwhile
            log.debug("offset %s[%d]@%d not stored: %s", origin[0], origin[1], nxt, e)

    def _resend_failed(self) -> None:
        redo, self._redeliver = self._redeliver, []
        for origin, topic, key, value in redo:
            self._send(origin, topic, key, value)

    def _dead_letter(self, msg: Message, exc: PoisonError) -> None:
        letter = dlq.from_confluent(msg, DLQ_STAGE, exc, max_bytes=self.limits.max_message_bytes)
        self.metrics.dlq.labels(STAGE, exc.code).inc()
        self._send(
            _origin(msg), self.dlq_topic, letter.key, self.producer.encode(letter, self.dlq_topic)
        )

    # --- rebalance and shutdown -------------------------------------------------------------

    def drain(self, revoked: set[tuple[str, int]] | None) -> None:
        """Finish and deliver every page in flight; pages of ``revoked`` partitions (all when
        None) that wait for the store or for the pixel budget are dropped instead: their
        offsets were not stored, so their new owner will redo them."""
        deadline = time.monotonic() + self.settings.drain_timeout_s

        def drop_blocked() -> None:
            self._retrying = [
                i for i in self._retrying if revoked is not None and i.tp not in revoked
            ]

        self._drop_intake(revoked)

        drop_blocked()
        while time.monotonic() < deadline and (
            self._preparing or len(self._batcher) or self._engine_future is not None
        ):
            now = time.monotonic()
            self._collect_prepared(now)
            drop_blocked()
            self._collect_engine()
            self._dispatch(now, force=True)
            self._resend_failed()
            self.producer.poll(0.005)
        while time.monotonic() < deadline and (len(self.producer) or self._redeliver):
            self._resend_failed()
            self.producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
        if self._preparing or len(self._batcher) or len(self.producer):
            log.warning(
                "drain timed out: %d preparing, %d batched, %d undelivered",
                len(self._preparing),
                len(self._batcher),
                len(self.producer),
            )

    def _commit_sync(self) -> None:
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as e:
            if e.args and e.args[0].code() == KafkaError._NO_OFFSET:
                return
            log.warning("synchronous commit failed: %s", e)

    def _on_assign(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        tps = {(tp.topic, tp.partition) for tp in partitions}
        self._assigned |= tps
        log.info("assigned %s", sorted(p for _, p in tps))

    def _on_revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        tps = {(tp.topic, tp.partition) for tp in partitions}
        log.info("revoking %s: draining in-flight pages", sorted(p for _, p in tps))
        self.drain(revoked=tps)
        self._commit_sync()
        self._forget(tps)

    def _on_lost(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        tps = {(tp.topic, tp.partition) for tp in partitions}
        log.warning(
            "lost %s: their in-flight pages will be redone elsewhere", sorted(p for _, p in tps)
        )
        self._retrying = [i for i in self._retrying if i.tp not in tps]
        self._drop_intake(tps)
        self._forget(tps)

    def _forget(self, tps: set[tuple[str, int]]) -> None:
        self._tracker.forget(list(tps))
        self._assigned -= tps
        self._paused -= tps


def _context(item: _Item) -> contextlib.AbstractContextManager[None]:
    """Log context of one page: topic[partition]@offset, doc_id, page and trace id."""
    topic, partition, offset = item.origin
    return log_context(
        tp=f"{topic}[{partition}]@{offset}",
        doc_id=item.task.doc_id,
        page=item.task.page_no,
        trace_id=item.task.trace_id,
    )


def _origin(msg: Message) -> Origin:
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    if topic is None or partition is None or offset is None:
        raise ValueError("a consumed message without topic, partition or offset")
    return topic, partition, offset


def _task_of(result: PageResult) -> PageTask:
    """A minimal task to build a failed result from a result that could not be encoded."""
    from ocrstream.schemas.records import PageImage

    return PageTask(
        doc_id=result.doc_id,
        page_no=result.page_no,
        page_count=result.page_count,
        image=PageImage(encoding=""),
        width=result.width,
        height=result.height,
        source_sha256=result.source_sha256,
        source_uri=result.source_uri,
        content_type=result.content_type,
        outputs=result.outputs,
        submitted_at=result.submitted_at,
        attempt=result.attempt,
        trace_id=result.trace_id,
    )
