"""The webhook agent (``ocrstream webhooks``): each terminal event to its ``callback_url``.

It reads ``ocr.documents.v1`` in its own consumer group (``ocrstream-webhooks``), and for each
DocumentEvent whose attributes carry a callback (``ocrstream.callback_url``, set by
``ocrstream api`` from the upload's ``callback_url``) POSTs the event as JSON, signed with the
tenant's secret (:mod:`ocrstream.streams.webhook_sender`).

**Retries live on the log.** A failed attempt is not retried in memory: the event is handed
off to ``ocr.webhooks.retry.v1`` — the same DocumentEvent bytes, keyed by the delivery id, with
headers saying the attempt number, when the first attempt was and when the next is due — and
only once the broker has acknowledged that record is the source offset marked done. The agent
reads the retry topic too, holds its records in memory by due time
(:mod:`ocrstream.streams.webhook_book`: a receiver that is down for hours holds back no other)
and attempts each when due; a failure hands it on again with the next due time, and so on
until it is delivered, refused for good (a 4xx such as 410, a redirect, a callback that now
resolves to an inside address) or out of its window (``window_s``, 24 h): then it goes to the
DLQ (``ocr.dlq.v1``, stage ``webhook``), whose redrive puts it back for a fresh window.

Why this shape: every offset of both topics is stored only when its record is finished —
delivered, handed on (acknowledged) or dead-lettered — in log order per partition
(:class:`~ocrstream.streams.offsets.OffsetTracker`), so an agent killed at any moment (SIGKILL
included) leaves every delivery that is not finished on the log, behind its group's committed
offset, and the next agent reads it again: at least once, never lost. Keeping retries in the
agent's memory instead would hold the source offset for up to a day (a restart would re-send
every later event), and a separate scheduler or database would be state beside Kafka to run
and recover. One retry topic with due times in headers, instead of one topic per delay,
because the agent orders by due time itself; the cost is that retries are held in memory
(``max_pending``, then the retry topic is paused). A delivery re-read after a crash may be
sent again: receivers de-duplicate by ``X-Ocrstream-Delivery``, the same on every attempt.

A partition of either topic that the agent is not holding back and that hands over nothing
for ``OCRSTREAM_KAFKA_FETCH_STALL_S`` while its log goes further is fetched again from its
position (:mod:`ocrstream.streams.fetch_watch`): once in CI a new agent was handed nothing from
both partitions of ``ocr.documents.v1`` for two minutes.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from functools import partial
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from ocrstream.errors import FatalError, PoisonError, RetriableError
from ocrstream.processors import webhook
from ocrstream.processors.webhook import Verdict
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import DocumentEvent
from ocrstream.settings import KafkaSettings, WebhookSettings
from ocrstream.streams import topics as t
from ocrstream.streams.dlq import dead_letter
from ocrstream.streams.fetch_watch import LATEST, FetchWatch, log_offsets
from ocrstream.streams.membership import commit_stored, leave_group
from ocrstream.streams.metrics import Metrics
from ocrstream.streams.offsets import OffsetTracker
from ocrstream.streams.producer import RecordProducer
from ocrstream.streams.redrive import REDRIVEN_HEADER
from ocrstream.streams.webhook_book import TP, Book, Pending
from ocrstream.streams.webhook_sender import Outcome, Sender

log = logging.getLogger(__name__)

STAGE = "webhook"
ATTEMPTS_HEADER = "ocrstream-webhook-attempts"  # attempts made so far
FIRST_HEADER = "ocrstream-webhook-first-ms"  # epoch ms of the first attempt
DUE_HEADER = "ocrstream-webhook-due-ms"  # epoch ms of the next attempt
ERROR_HEADER = "ocrstream-webhook-error"  # what the last attempt came to
OUTCOMES = ("delivered", "retry", "dead_letter")


def consumer_config(kafka: KafkaSettings, settings: WebhookSettings) -> dict[str, Any]:
    return kafka.librdkafka(**{
        "group.id": kafka.topic(settings.group),
        "enable.auto.commit": True,
        "enable.auto.offset.store": False,
        "auto.commit.interval.ms": 1000,
        # A document finished before the agent first ran is still called back.
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,  # how a retry partition is known to be caught up
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": settings.session_timeout_ms,
    })  # fmt: skip


class WebhookAgent:
    """The consumer loop; see the module docstring. Build one, then call :meth:`run`."""

    def __init__(
        self,
        kafka: KafkaSettings,
        settings: WebhookSettings,
        sender: Sender,
        codec: Codec,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.settings = settings
        self._close_timeout_s = kafka.close_timeout_s
        self.sender = sender
        self.codec = codec
        self.metrics = metrics
        self.clock, self.rand = clock, rand
        self.source, self.retry = kafka.topic(t.DOCUMENTS), kafka.topic(t.WEBHOOK_RETRY)
        self.dlq = kafka.topic(t.DLQ)
        self.consumer = Consumer(consumer_config(kafka, settings))
        self.producer = RecordProducer(kafka, codec)
        self.tracker = OffsetTracker()
        self.book = Book()
        self.inflight: dict[Future[Outcome], Pending] = {}
        self.assigned: set[TP] = set()
        self.paused: set[TP] = set()
        self.ends: dict[TP, int] = {}  # retry partitions not caught up: their end at assignment
        self.fatal: FatalError | None = None
        self.watch = FetchWatch(self.consumer, metrics, "webhooks",
                                stall_after_s=kafka.fetch_stall_s)  # fmt: skip
        for outcome in OUTCOMES:  # exported at 0 from the start
            metrics.webhook_deliveries.labels(outcome)
        metrics.webhook_pending_retries.set(0)

    # --- the loop -------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Consume until ``stop`` is set; then finish the attempts in flight, commit, leave."""
        try:
            self._require_topics()
        except (FatalError, RetriableError):
            self.consumer.close()
            raise
        self.consumer.subscribe([self.source, self.retry], on_assign=self._on_assign,
                                on_revoke=self._on_revoke, on_lost=self._on_lost)  # fmt: skip
        log.info("webhook agent consuming %s and %s", self.source, self.retry)
        with ThreadPoolExecutor(self.settings.concurrency, "webhook") as pool:
            try:
                while not stop.is_set():
                    if self.fatal is not None:
                        raise self.fatal
                    timeout = self.settings.poll_timeout_ms / 1000
                    for msg in self.consumer.consume(200, timeout if not self.inflight else 0.02):
                        self._take(msg)
                    self._collect()
                    self._fire(pool)
                    self._flow()
                    self.watch.check(self.paused)
                    self.producer.poll(0)
                    self.metrics.webhook_pending_retries.set(self.book.waiting)
            finally:
                self._drain()
                leave_group(self.consumer, self._close_timeout_s, "webhook agent")

    def _require_topics(self) -> None:
        """Both topics exist, or the agent exits (its supervisor starts it again later)."""
        try:
            md = self.consumer.list_topics(timeout=30)
        except KafkaException as e:
            raise RetriableError(f"cannot reach Kafka: {e}") from e
        missing = [name for name in (self.source, self.retry)
                   if name not in md.topics or md.topics[name].error is not None]  # fmt: skip
        if missing:
            raise FatalError(f"topics missing: {', '.join(missing)} (run `ocrstream topics "
                             "create`)", code="topic_missing")  # fmt: skip

    def _drain(self) -> None:
        deadline = time.monotonic() + self.settings.drain_timeout_s
        while self.inflight and time.monotonic() < deadline:
            self._collect(wait_s=0.1)
        self.producer.flush(max(1.0, deadline - time.monotonic()))
        if self.inflight or len(self.producer):
            log.warning(
                "stopped with %d attempts in flight and %d records undelivered: the next agent "
                "reads them again", len(self.inflight), len(self.producer),
            )  # fmt: skip

    # --- records in ---------------------------------------------------------------------------

    def _take(self, msg: Message) -> None:
        self.watch.heard((msg.topic() or "", msg.partition() or 0))
        error = msg.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                self._caught_up((msg.topic() or "", msg.partition() or 0))
            elif error.fatal():
                raise FatalError(f"consumer: {error}", code="kafka_fatal")
            else:
                log.warning("consumer error: %s", error)
            return
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        self.tracker.add(topic, partition, offset)
        headers = _headers(msg.headers())
        raw = (msg.key(), msg.value() or b"", headers)
        try:
            event = self.codec.decode_as(raw[1], DocumentEvent)
        except PoisonError as e:
            log.error("%s[%d]@%d is no DocumentEvent: %s", topic, partition, offset, e)
            self._dead_letter_raw((topic, partition, offset), raw, e)
            return
        callback = webhook.callback_of(event)
        if callback is None:
            self._done((topic, partition, offset))
            return
        key = webhook.delivery_id(event.doc_id, event.revision)
        p = Pending(key, event, webhook.body(event), callback, (topic, partition, offset), raw)
        now = self.clock()
        found = dict(headers)
        if topic == self.source or REDRIVEN_HEADER in found:  # a fresh window
            p.first_at = p.due_at = now
            if topic == self.source:
                self.book.add_first(p)
                return
        else:
            p.attempts = _int(found.get(ATTEMPTS_HEADER))
            p.first_at = _int(found.get(FIRST_HEADER)) / 1000 or now
            p.due_at = _int(found.get(DUE_HEADER)) / 1000
        tp = (topic, partition)
        if offset + 1 >= self.ends.get(tp, 0):
            self._caught_up(tp)
        for older in self.book.add_retry(p, caught_up=tp not in self.ends):
            self._done(older.origin)

    def _caught_up(self, tp: TP) -> None:
        if self.ends.pop(tp, None) is not None:
            self.book.caught_up(tp)

    # --- attempts -----------------------------------------------------------------------------

    def _fire(self, pool: ThreadPoolExecutor) -> None:
        while len(self.inflight) < self.settings.concurrency:
            p = self.book.take(self.clock())
            if p is None:
                return
            future = pool.submit(self.sender.deliver, p.payload, p.callback, p.event.tenant,
                                 p.key, p.attempts + 1)  # fmt: skip
            self.inflight[future] = p

    def _collect(self, wait_s: float = 0.0) -> None:
        if wait_s and self.inflight:
            wait(list(self.inflight), timeout=wait_s, return_when=FIRST_COMPLETED)
        for future in [f for f in self.inflight if f.done()]:
            p = self.inflight.pop(future)
            p.in_flight = False
            try:
                outcome = future.result()
            except Exception as e:
                log.exception("webhook attempt for %s raised", p.event.doc_id)
                outcome = Outcome(Verdict.RETRY, f"{type(e).__name__}: {e}", "internal_error")
            self._settle(p, outcome)

    def _settle(self, p: Pending, outcome: Outcome) -> None:
        doc_id, attempt = p.event.doc_id, p.attempts + 1
        if outcome.seconds:
            self.metrics.webhook_delivery_seconds.observe(outcome.seconds)
        if p.dropped:
            return  # the partition went to another agent, which reads the record again
        if outcome.verdict is Verdict.DELIVERED:
            log.info("webhook for %s delivered (attempt %d, %s, delivery %s)", doc_id, attempt,
                     outcome.detail, p.key)  # fmt: skip
            self.metrics.webhook_deliveries.labels("delivered").inc()
            self._finish(p)
            return
        if p.superseded:  # a newer record of this delivery carries on
            self._finish(p)
            return
        now = self.clock()
        wait = webhook.backoff_s(attempt, base_s=self.settings.backoff_s,
                                 max_s=self.settings.backoff_max_s,
                                 jitter=self.settings.jitter, rand=self.rand())  # fmt: skip
        if outcome.verdict is Verdict.REJECTED:
            reason, code = outcome.detail, outcome.code or "webhook_rejected"
        elif now + wait - p.first_at > self.settings.window_s:
            reason = (f"not delivered in {attempt} attempts over "
                      f"{now - p.first_at:.0f}s (window {self.settings.window_s:g}s): "
                      f"{outcome.detail}")  # fmt: skip
            code = "webhook_expired"
        else:
            log.warning("webhook for %s failed (attempt %d: %s); next in %.1fs", doc_id, attempt,
                        outcome.detail, wait)  # fmt: skip
            self.metrics.webhook_deliveries.labels("retry").inc()
            self._hand_on(p, attempt, now + wait, outcome.detail)
            return
        log.error("webhook for %s dead-lettered (%s): %s", doc_id, code, reason)
        self.metrics.webhook_deliveries.labels("dead_letter").inc()
        self._dead_letter(p, PoisonError(reason, code=code))

    # --- records out --------------------------------------------------------------------------

    def _hand_on(self, p: Pending, attempts: int, due_at: float, detail: str) -> None:
        headers = [(ATTEMPTS_HEADER, str(attempts).encode()),
                   (FIRST_HEADER, str(int(p.first_at * 1000)).encode()),
                   (DUE_HEADER, str(int(due_at * 1000)).encode()),
                   (ERROR_HEADER, detail[:500].encode())]  # fmt: skip
        self._send(self.retry, p.key.encode(), p.record[1], headers, p)

    def _dead_letter(self, p: Pending, exc: PoisonError) -> None:
        self._dead_letter_raw(p.origin, p.record, exc, p)

    def _dead_letter_raw(self, origin: tuple[str, int, int],
                         raw: tuple[bytes | None, bytes, list[tuple[str, bytes]]],
                         exc: PoisonError, p: Pending | None = None) -> None:  # fmt: skip
        letter = dead_letter(topic=origin[0], partition=origin[1], offset=origin[2], key=raw[0],
                             value=raw[1], headers=raw[2], stage=STAGE, exc=exc)  # fmt: skip
        self.metrics.dlq.labels(STAGE, exc.code).inc()
        value = self.producer.encode(letter, self.dlq)
        self._send(self.dlq, raw[0], value, [], p, origin)

    def _send(self, topic: str, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]],
              p: Pending | None, origin: tuple[str, int, int] | None = None) -> None:  # fmt: skip
        origin = origin or (p.origin if p else None)
        done = partial(self._sent, topic, key, value, headers, p, origin)
        self.producer.send_raw(topic, key, value, headers=headers, on_delivery=done)

    def _sent(self, topic: str, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]],
              p: Pending | None, origin: tuple[str, int, int] | None, err: KafkaError | None,
              _msg: Message) -> None:  # fmt: skip
        if err is not None:
            if err.fatal():
                self.fatal = FatalError(f"producer: {err}", code="kafka_fatal")
                return
            log.warning("sending to %s failed (%s); sending again", topic, err)
            self.metrics.retries.labels(STAGE, "delivery").inc()
            self._send(topic, key, value, headers, p, origin)
            return
        if p is not None:
            self._finish(p)
        elif origin is not None:
            self._done(origin)

    def _finish(self, p: Pending) -> None:
        self.book.finished(p)
        self._done(p.origin)

    def _done(self, origin: tuple[str, int, int]) -> None:
        nxt = self.tracker.done(*origin)
        if nxt is None:
            return
        try:
            self.consumer.store_offsets(offsets=[TopicPartition(origin[0], origin[1], nxt)])
        except KafkaException as e:  # revoked meanwhile
            log.debug("offset %s[%d]@%d not stored: %s", origin[0], origin[1], nxt, e)

    # --- flow and rebalances ------------------------------------------------------------------

    def _flow(self) -> None:
        """Pause the source while first attempts queue up, the retry topic while too many
        retries are held; resume when they went down."""
        busy = {self.source: self.book.ready > 4 * self.settings.concurrency,
                self.retry: self.book.waiting > self.settings.max_pending}  # fmt: skip
        calm = {self.source: self.book.ready < self.settings.concurrency,
                self.retry: self.book.waiting < self.settings.max_pending // 2}  # fmt: skip
        pause = {tp for tp in self.assigned - self.paused if busy[tp[0]]}
        resume = {tp for tp in self.paused & self.assigned if calm[tp[0]]}
        if pause:
            self.consumer.pause([TopicPartition(*tp) for tp in pause])
            self.paused |= pause
        if resume:
            self.consumer.resume([TopicPartition(*tp) for tp in resume])
            self.paused -= resume

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.watch.assigned((tp.topic, tp.partition) for tp in partitions)
        self.assigned.update((tp.topic, tp.partition) for tp in partitions)
        retry = [(tp.topic, tp.partition) for tp in partitions if tp.topic == self.retry]
        try:  # in one request: asked one at a time, each waits behind the consumer's fetch
            ends = log_offsets(consumer, retry, LATEST, 10)
        except KafkaException as e:
            log.warning("no log end for %s (%s): waiting for their ends", retry, e)
            ends = dict.fromkeys(retry, 1 << 62)
        self.ends.update({key: end for key, end in ends.items() if end > 0})
        log.info("assigned %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in partitions))

    def _on_revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        commit_stored(self.consumer, "on revoke")
        self._forget(partitions)

    def _on_lost(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self._forget(partitions)

    def _forget(self, partitions: list[TopicPartition]) -> None:
        tps = {(tp.topic, tp.partition) for tp in partitions}
        for p in self.inflight.values():
            if p.tp in tps:
                p.dropped = True
        self.book.drop(tps)
        self.watch.forget(tps)
        self.tracker.forget(list(tps))
        self.assigned -= tps
        self.paused -= tps
        for tp in tps:
            self.ends.pop(tp, None)
        log.info("revoked %s", sorted(f"{t}[{p}]" for t, p in tps))


def _headers(found: Any) -> list[tuple[str, bytes]]:
    return [(str(k), v if isinstance(v, bytes) else str(v or "").encode()) for k, v in found or []]


def _int(value: bytes | None) -> int:
    try:
        return int(value or b"0")
    except ValueError:
        return 0
