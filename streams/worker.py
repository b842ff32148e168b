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
One turn (:meth:`OcrWorker.step`): poll, check each message's error, hand its page to the
parts, deliver, and let the delivery callbacks store the offsets. Each job is one part:

- Intake in submission order (:mod:`~ocrstream.streams.intake`): consumed pages wait,
  undecoded, in one queue ordered by the scan's priority (higher first), then its submission
  time, then page number, across partitions, so the worker takes the oldest work first.
- Bounded memory (:mod:`~ocrstream.streams.window`): at most ``max_inflight_pages`` consumed
  and undelivered, each partition a share of the queue, pages decoded only as far as the next
  batch needs, and only while the pixels held stay within ``max_inflight_pixels``.
- Store down (:mod:`~ocrstream.streams.breaker`): a page whose image can't be fetched waits;
  one circuit for the whole worker, one probe per backoff.
- Pause and resume (:mod:`~ocrstream.streams.flow`): a partition is paused while it waits for
  the store or holds its share of the intake; ``paused_partitions{reason}`` says which.
- A partition not paused that hands over nothing for ``OCRSTREAM_KAFKA_FETCH_STALL_S`` while
  its log goes further is fetched again from its position (:mod:`~ocrstream.streams.fetch_watch`).
- Decoding (:mod:`~ocrstream.streams.decode`) in ``decode_threads`` threads.
- Micro-batching across documents
  (:class:`~ocrstream.processors.ocr.batching.BatchingEngine`): decoded pages of any document
  join the next batch, run when it is full (``max_batch``) or its oldest page waited
  ``max_wait_ms``; a page that breaks the engine fails alone.
- Page cache (:mod:`~ocrstream.streams.page_cache`): a page whose image this engine read
  before is answered from the cache, re-addressed and marked ``cached``, without decoding or
  the engine; what the engine reads is put into it.
- Delivery (:mod:`~ocrstream.streams.delivery`): outputs sent with their origin, offsets
  stored in order once delivered, failed deliveries sent again.
- Worker pools (here, :func:`pool_topics`): a ``primary`` worker reads ``ocr.pages.v1``; with
  a :class:`~ocrstream.processors.routing.RoutingRule` it re-sends a page whose recognition is
  weak to ``ocr.pages.accurate.v1``, read by the ``accurate`` pool (a stronger engine, which
  never routes: a page is routed at most once); by the rule's early part, a page whose image
  is poor (:mod:`~ocrstream.processors.page_quality`, measured in the decode threads) goes
  there before the engine reads it. A ``shadow`` worker reads ``ocr.pages.v1`` in
  a group of its own and publishes to ``ocr.page-results.shadow.v1`` only.
- Rebalance and SIGTERM (here): in-flight pages are finished and delivered, offsets stored,
  and the commit is made synchronously before partitions are given up; queued pages and pages
  waiting for the store of the partitions given up are dropped (their offsets were never
  stored, so their new owner redoes them).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import replace
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from ocrstream.errors import FatalError, PoisonError, RetriableError
from ocrstream.logs import log_context
from ocrstream.processors.ocr.batching import BatchingEngine, PageEngine
from ocrstream.processors.ocr.types import LayoutPage, PageOCR, RegionsPage
from ocrstream.processors.regions import OPTION as REGIONS_OPTION
from ocrstream.processors.regions import decode as decode_regions
from ocrstream.processors.routing import RoutingRule
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import (
    TEXT_LAYER_BACKEND,
    Engine,
    ErrorInfo,
    PageResult,
    PageStatus,
    PageTask,
)
from ocrstream.settings import KafkaSettings, LimitsSettings, WorkerPool, WorkerSettings
from ocrstream.streams import dlq, topics
from ocrstream.streams.breaker import StoreBreaker
from ocrstream.streams.decode import DecodePool
from ocrstream.streams.delivery import Delivery, result_value
from ocrstream.streams.fetch_watch import FetchWatch
from ocrstream.streams.flow import PartitionFlow
from ocrstream.streams.gpu_metrics import start_gpu_metrics
from ocrstream.streams.intake import Intake, Origin, Pending
from ocrstream.streams.intake import TopicPartition as TP
from ocrstream.streams.membership import commit_stored, leave_group
from ocrstream.streams.metrics import Metrics
from ocrstream.streams.ocr_batch import (
    PreparedPage,
    engine_result,
    failed_result,
    unread_result,
)
from ocrstream.streams.offsets import OffsetTracker
from ocrstream.streams.page_cache import PageCache, fingerprint_of, readdress
from ocrstream.streams.producer import RecordProducer
from ocrstream.streams.window import InflightWindow

log = logging.getLogger(__name__)

STAGE = "ocr"
DLQ_STAGE = "ocr-worker"


def pool_topics(pool: WorkerPool) -> tuple[str, str]:
    """The topic a pool's workers read and the one their results go to (logical names)."""
    if pool is WorkerPool.ACCURATE:
        return topics.PAGES_ACCURATE, topics.PAGE_RESULTS
    if pool is WorkerPool.SHADOW:
        return topics.PAGES, topics.PAGE_RESULTS_SHADOW
    return topics.PAGES, topics.PAGE_RESULTS


def pool_group(settings: WorkerSettings) -> str:
    """The consumer group of the worker's pool (unprefixed): the primary pool's is
    ``settings.group``, the others add their name (a shadow group reads every page again)."""
    if settings.pool is WorkerPool.PRIMARY:
        return settings.group
    return f"{settings.group}-{settings.pool.value}"


def consumer_config(kafka: KafkaSettings, settings: WorkerSettings) -> dict[str, Any]:
    return kafka.librdkafka(
        **{
            "group.id": kafka.topic(pool_group(settings)),
            "enable.auto.commit": True,
            "enable.auto.offset.store": False,
            "auto.commit.interval.ms": settings.commit_interval_ms,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": settings.session_timeout_ms,
            # A member learns of a rebalance at its next heartbeat. With librdkafka's 3 s a
            # worker joining (a scale-up) left the partitions it takes over unread for 3 s
            # between the two cooperative rounds; at 1 s, for about 1 s.
            "heartbeat.interval.ms": min(1000, settings.session_timeout_ms // 3),
            "max.poll.interval.ms": settings.max_poll_interval_ms,
            # Bound librdkafka's prefetch: inline page images are up to a few MiB each.
            "queued.max.messages.kbytes": 16_384,
            "fetch.max.bytes": 16 * 1024 * 1024,
        }
    )


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class OcrWorker:
    """The consumer loop around the parts. Build one, then call :meth:`run`."""

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
        routing: RoutingRule | None = None,
    ) -> None:
        self.settings = settings
        self._close_timeout_s = kafka.close_timeout_s
        self.limits = limits or LimitsSettings()
        self.engine = engine
        self.codec = codec
        self.metrics = metrics
        self.worker_id = worker_id or default_worker_id()
        self.pool = settings.pool
        pages_topic, results_topic = pool_topics(self.pool)
        self.topic = kafka.topic(pages_topic)
        self.results_topic = kafka.topic(results_topic)
        self.accurate_topic = kafka.topic(topics.PAGES_ACCURATE)
        # Only the primary pool routes: the accurate pool's answer is final, and a shadow's
        # results never change a document.
        self.routing = routing if self.pool is WorkerPool.PRIMARY else None
        for outcome in ("kept", "routed", "routed_early"):  # exported from the start: panels read 0
            metrics.routing.labels(self.pool.value, outcome)
        self.dlq_topic = kafka.topic(topics.DLQ)
        self.consumer = (
            consumer if consumer is not None else Consumer(consumer_config(kafka, settings))
        )
        self.producer = (
            producer if producer is not None else RecordProducer(kafka, codec, limits=self.limits)
        )
        info = engine.info
        self._engine_record = Engine(backend=info.backend, model=info.model, version=info.version)
        self._tracker = OffsetTracker()
        self._intake = Intake()
        self._window = InflightWindow.of(settings)
        self._breaker = StoreBreaker(settings.store_backoff_s, settings.store_backoff_max_s)
        self._flow = PartitionFlow(self.consumer)
        self._watch = FetchWatch(self.consumer, metrics, f"ocr-worker-{self.pool.value}",
                                 stall_after_s=kafka.fetch_stall_s)  # fmt: skip
        self._cache = (
            PageCache(
                kafka=kafka,
                codec=codec,
                topic=kafka.topic(topics.PAGE_CACHE),
                fingerprint=fingerprint_of(engine),
                max_bytes=settings.cache_max_bytes,
                send=self.producer.send_raw,
                max_value_bytes=self.limits.max_message_bytes,
                metrics=metrics,
            )
            if settings.cache
            else None
        )
        if self._cache is not None:
            # both exported from the start, so the hit ratio reads 0 rather than nothing
            for result in ("hit", "miss"):
                self.metrics.cache.labels(result)
        self._decoder = DecodePool(
            settings.decode_threads,
            fetch,
            max_pixels=self.limits.max_page_pixels,
            cache=self._cache,
            model=info.model,
            quality=self.routing is not None and self.routing.early,
        )
        self._engine: BatchingEngine[tuple[Pending, PreparedPage]] = BatchingEngine(
            engine,
            max_batch=settings.max_batch,
            max_wait_s=settings.max_wait_ms / 1000,
            max_inflight=None,  # the window bounds what is started
            retries=settings.engine_retries,
            on_batch=self._observe_batch,
        )
        self._batch_delay_s = (
            settings.shadow_delay_ms / 1000 if self.pool is WorkerPool.SHADOW else 0.0
        )
        self._delivery = Delivery(
            self.producer,
            self.consumer,
            self._tracker,
            on_retry=metrics.retries.labels(STAGE, "delivery").inc,
        )
        metrics.worker_info.labels(info.backend, info.model, info.device).set(1)

    # --- the loop -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Consume until ``stop`` is set; then drain, commit and leave the group."""
        if self._cache is not None:  # what the cache holds first, then the pages
            self._cache.start()
            self._cache.wait_ready(self.settings.cache_load_timeout_s)
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
            if self._cache is not None:
                self._cache.stop()

    def step(self) -> None:
        """One turn of the loop: poll, hand pages on, deliver results. Never blocks long."""
        if self._delivery.fatal is not None:
            raise self._delivery.fatal
        self._pause_and_resume()
        msgs = self.consumer.consume(
            num_messages=self._window.poll_size(self._tracker.inflight()),
            timeout=self._poll_timeout(),
        )
        for msg in msgs:
            self._watch.heard((msg.topic() or "", msg.partition() or 0))
            err = msg.error()
            if err is not None:
                self._consumer_error(err)
            else:
                self._accept(msg)
        self._watch.check(self._flow.paused)
        now = time.monotonic()
        self._collect_decoded(now)
        for page in self._breaker.due(now):  # the store answers again, or the next probe
            self._intake.push(page)
        self._collect_results()
        self._start_decoding()
        self._delivery.resend_failed()
        self.producer.poll(0)  # delivery callbacks: offsets are stored once delivered
        self.metrics.pages_inflight.labels(STAGE).set(self._tracker.inflight())

    def shutdown(self) -> None:
        """Drain what's in flight, commit synchronously, leave the group (each bounded: with
        Kafka gone the worker stops after ``drain_timeout_s`` and ``close_timeout_s``)."""
        try:
            self.drain(revoked=None)
        finally:
            try:
                leave_group(self.consumer, self._close_timeout_s, f"ocr worker {self.worker_id}")
            finally:
                self._decoder.close()
                self._engine.close(cancel=True)
                info = self.engine.info
                self.metrics.worker_info.remove(info.backend, info.model, info.device)
        log.info("ocr worker %s stopped", self.worker_id)

    def _poll_timeout(self) -> float:
        """Short while pages decode, are with the engine or wait for delivery: this loop
        collects what they become."""
        timeout = self.settings.poll_timeout_ms / 1000
        if len(self._decoder) or self._engine.inflight or len(self.producer):
            timeout = min(timeout, 0.005)
        return timeout

    def _pause_and_resume(self) -> None:
        full = self._window.full(self._tracker.inflight())
        # At the limit, a partition with nothing queued may still fetch one page.
        share = 1 if full else self._window.share(len(self._flow.assigned))
        paused = self._flow.apply(
            blocked=self._breaker.blocked(), crowded=self._intake.crowded(share), full=full
        )
        for reason, n in paused.items():
            self.metrics.paused_partitions.labels(STAGE, reason).set(n)

    # --- consume --------------------------------------------------------------------------

    def _consumer_error(self, err: KafkaError) -> None:
        if err.fatal():
            raise FatalError(f"consumer: {err}", code="kafka_fatal")
        if err.code() != KafkaError._PARTITION_EOF:
            log.warning("consumer error: %s", err)

    def _accept(self, msg: Message) -> None:
        """Track the record's offset and queue its page; a record that does not decode goes
        to the DLQ."""
        topic, partition, offset = origin = _origin(msg)
        self._tracker.add(topic, partition, offset)
        with log_context(tp=f"{topic}[{partition}]@{offset}"):
            try:
                task = self.codec.decode_as(msg.value() or b"", PageTask)
            except PoisonError as e:
                log.warning("undecodable page task goes to the DLQ: %s", e)
                self._dead_letter(msg, origin, e)
                return
        self._intake.push(Pending(origin, task))

    def _dead_letter(self, msg: Message, origin: Origin, exc: PoisonError) -> None:
        letter = dlq.from_confluent(msg, DLQ_STAGE, exc, max_bytes=self.limits.max_message_bytes)
        self.metrics.dlq.labels(STAGE, exc.code).inc()
        value = self.producer.encode(letter, self.dlq_topic)
        self._delivery.send(origin, self.dlq_topic, letter.key, value)

    # --- decode ---------------------------------------------------------------------------

    def _start_decoding(self) -> None:
        """Start pages from the intake's head while the window and the pixel budget allow (a
        page is always let through when none is held)."""
        while (page := self._intake.head()) is not None:
            # started: decoding, with the engine or being delivered. Neither the pages done
            # behind an earlier offset that is not (delivered, held only for the commit) nor
            # those waiting for the store (they hold nothing, and during an outage they can
            # outnumber the window: a partition with nothing queued still fetches a page at
            # the limit). Counted, either kept the page they wait on, the store's probe or the
            # earlier offset, from ever starting: the worker stuck for good.
            started = self._tracker.unfinished() - len(self._intake) - len(self._breaker)
            if not self._window.may_start(
                decoding=len(self._decoder), waiting=self._engine.waiting, started=started
            ):
                return
            if not self._window.fits(page.pixels):
                return
            self._intake.pop()
            if self._breaker.start(page):  # else it waits for the store
                self._window.hold(page.pixels)
                self._decoder.start(page)

    def _collect_decoded(self, now: float) -> None:
        """Decoded pages go to the engine; the others are answered at once; a page whose
        image could not be fetched waits for the store."""
        for page, prepared in self._decoder.collect():
            with page.log_context():
                if isinstance(prepared, RetriableError):
                    self._window.release(page.pixels)  # nothing decoded; taken again on retry
                    self._store_failed(page, prepared, now)
                    continue
                if self._breaker.answered(page):
                    waiting = len(self._breaker)
                    log.info("the store answers again: fetching the %d waiting pages", waiting)
                if prepared.cache_key is not None:
                    self.metrics.cache.labels("miss" if prepared.cached is None else "hit").inc()
                if prepared.cached is not None:
                    self._window.release(page.pixels)
                    hit = readdress(prepared.cached, prepared.task, worker_id=self.worker_id)
                    self._send_result(page, hit)
                    continue
                self.metrics.stage_seconds.labels("decode").observe(prepared.decode_ms / 1000)
                if prepared.needs_ocr and self._weak_image(prepared):
                    self._window.release(page.pixels)
                    self._route_early(page)
                    continue
                if prepared.needs_ocr:
                    image: object = prepared.image
                    regions = prepared.task.options.get(REGIONS_OPTION)
                    if regions is not None:  # key-field mode: only the page's named regions
                        try:
                            image = RegionsPage(image, decode_regions(regions))
                        except (PoisonError, ValueError) as e:
                            self._window.release(page.pixels)
                            error = ErrorInfo("invalid_regions", str(e))
                            failed = failed_result(prepared.task, error, worker_id=self.worker_id)
                            self._send_result(page, failed)
                            continue
                    elif prepared.task.mode == "layout":
                        image = LayoutPage(image)  # blocks too, in the same batch as the OCR
                    self._engine.submit((page, prepared), image)
                else:
                    self._window.release(page.pixels)
                    self._send_result(page, unread_result(prepared, worker_id=self.worker_id))

    def _store_failed(self, page: Pending, exc: RetriableError, now: float) -> None:
        self.metrics.retries.labels(STAGE, exc.code).inc()
        backoff = self._breaker.failed(page, now)
        if backoff is not None:
            log.log(
                logging.WARNING if backoff.probe == 1 else logging.DEBUG,
                "store unavailable (%s): %d pages wait, their partitions paused; probe %d in %.1fs",
                exc,
                len(self._breaker),
                backoff.probe,
                backoff.delay_s,
            )

    # --- engine and results ---------------------------------------------------------------

    def _observe_batch(self, pages: int, seconds: float) -> None:
        """Called from the engine thread after each batch."""
        self.metrics.batch_size.labels(STAGE).observe(pages)
        self.metrics.stage_seconds.labels("engine").observe(seconds)
        if self._batch_delay_s:  # a slower shadow candidate: the engine thread waits
            time.sleep(self._batch_delay_s)

    def _collect_results(self) -> None:
        results: list[tuple[tuple[Pending, PreparedPage], PageOCR]] = self._engine.poll()
        for (page, prepared), ocr in results:
            self._window.release(page.pixels)
            for stage in ("layout", "table"):  # layout mode: its models' share of the batch
                if stage in ocr.timings_ms:
                    self.metrics.stage_seconds.labels(stage).observe(ocr.timings_ms[stage] / 1000)
            result = engine_result(prepared, ocr, self._engine_record, worker_id=self.worker_id)
            if self._cache is not None and prepared.cache_key is not None:
                self._cache.put(prepared.cache_key, result)
            self._send_result(page, result)

    def _send_result(self, page: Pending, result: PageResult) -> None:
        self.metrics.pages.labels(STAGE, result.status.value).inc()
        result = replace(result, pool=self.pool.value)
        routed = self._weak(result)
        self.metrics.routing.labels(self.pool.value, "routed" if routed else "kept").inc()
        with page.log_context():
            if routed:
                # The fast answer goes out too, marked provisional, with the task for the
                # accurate pool; the offset is stored once both are delivered. Why publish it:
                # if the accurate pool is down, behind or gone, the assembler still has this
                # page and finishes the document with it after ASSEMBLER_PROVISIONAL_WAIT_S,
                # instead of ending it partial after the much longer deadline (or never, with
                # a page missing for good). It costs one result record per routed page; an
                # accurate result, whenever it comes first or later, replaces it.
                log.info("weak recognition: page routed to %s", self.accurate_topic)
                result = replace(result, provisional=True)
            value = result_value(
                self.producer,
                result,
                self.results_topic,
                max_bytes=self.limits.max_message_bytes,
                worker_id=self.worker_id,
            )
            outputs = [(self.results_topic, result.doc_id, value)]
            if routed:
                task = self.producer.encode(page.task, self.accurate_topic)
                key = f"{page.task.doc_id}/{page.task.page_no}"
                outputs.insert(0, (self.accurate_topic, key, task))
            self._delivery.send_all(page.origin, outputs)

    def _weak_image(self, prepared: PreparedPage) -> bool:
        """Whether to route the page before the engine reads it: a primary worker whose rule
        has the early part on, and a page image of poor quality by it."""
        if self.routing is None or prepared.quality is None:
            return False
        return self.routing.weak_image(prepared.quality)

    def _route_early(self, page: Pending) -> None:
        """Send the page's task to the accurate pool, unread. No provisional result goes out:
        there is no reading to give, so its document waits for the accurate pool (without
        one, it ends ``partial`` at the assembler's deadline, the page missing)."""
        self.metrics.routing.labels(self.pool.value, "routed_early").inc()
        with page.log_context():
            log.info("poor page image: page routed unread to %s", self.accurate_topic)
            task = self.producer.encode(page.task, self.accurate_topic)
            key = f"{page.task.doc_id}/{page.task.page_no}"
            self._delivery.send_all(page.origin, [(self.accurate_topic, key, task)])

    def _weak(self, result: PageResult) -> bool:
        """Whether to route the page: a primary worker with a rule, a page the engine read
        (not its text layer, not failed) whose line confidences the rule finds weak."""
        if self.routing is None or result.status is not PageStatus.OK:
            return False
        if result.engine is None or result.engine.backend == TEXT_LAYER_BACKEND:
            return False
        return self.routing.weak([line.confidence for line in result.lines])

    # --- rebalance and shutdown -------------------------------------------------------------

    def drain(self, revoked: set[TP] | None) -> None:
        """Finish and deliver every page in flight; pages of ``revoked`` partitions (all when
        None) that wait for the store or for the pixel budget are dropped instead: their
        offsets were not stored, so their new owner will redo them."""
        deadline = time.monotonic() + self.settings.drain_timeout_s
        self._intake.drop(revoked)
        self._breaker.drop(revoked)
        while time.monotonic() < deadline and (len(self._decoder) or self._engine.inflight):
            self._collect_decoded(time.monotonic())
            self._breaker.drop(revoked)  # those whose fetch failed just now
            self._engine.flush()
            self._collect_results()
            self._delivery.resend_failed()
            self.producer.poll(0.005)
        while time.monotonic() < deadline and (len(self.producer) or len(self._delivery)):
            self._delivery.resend_failed()
            self.producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
        if len(self._decoder) or self._engine.inflight or len(self.producer):
            log.warning(
                "drain timed out: %d decoding, %d with the engine, %d undelivered",
                len(self._decoder),
                self._engine.inflight,
                len(self.producer),
            )

    def _on_assign(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        tps = _tps(partitions)
        self._flow.assign(tps)
        self._watch.assigned(tps)
        log.info("assigned %s", sorted(p for _, p in tps))

    def _on_revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        tps = _tps(partitions)
        log.info("revoking %s: draining in-flight pages", sorted(p for _, p in tps))
        self.drain(revoked=tps)
        commit_stored(self.consumer, "on revoke")
        self._forget(tps)

    def _on_lost(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        tps = _tps(partitions)
        log.warning(
            "lost %s: their in-flight pages will be redone elsewhere", sorted(p for _, p in tps)
        )
        self._breaker.drop(tps)
        self._intake.drop(tps)
        self._forget(tps)

    def _forget(self, tps: set[TP]) -> None:
        self._tracker.forget(list(tps))
        self._flow.forget(tps)
        self._watch.forget(tps)


def _tps(partitions: list[TopicPartition]) -> set[TP]:
    return {(tp.topic, tp.partition) for tp in partitions}


def _origin(msg: Message) -> Origin:
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    if topic is None or partition is None or offset is None:
        raise ValueError("a consumed message without topic, partition or offset")
    return topic, partition, offset
