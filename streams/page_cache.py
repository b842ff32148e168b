"""The OCR worker's page-result cache: a page read once is not read again.

Where it lives: a compacted topic, ``ocr.page-cache.v1``, keyed by the content key
(:func:`~ocrstream.processors.page_key.content_key`) and carrying the PageResult as on
``ocr.page-results.v1``, materialised by every worker into a bounded in-memory LRU. Why a topic
and not the object store: the worker already speaks Kafka, a lookup is then a dict access in
the decode thread instead of an S3 round trip for every page (most of which miss), compaction
keeps one result per key with no clean-up job of ours, and a fresh or restarted worker warms
its memory by reading the topic from the beginning while it starts consuming pages. The bound
(``cache_max_bytes``, counted by encoded size) keeps the most recently used results; a result
evicted from memory is still in the topic and is found again after a restart. A miss is
harmless: the page is read by the engine as without a cache. A partition the follower's consumer
stops fetching is found and fetched again (:mod:`~ocrstream.streams.fetch_watch`, agent
``page-cache``).

:class:`PageCache` is the adapter the worker holds: :meth:`key` and :meth:`get` (called from
the decode threads), :meth:`put` after the engine read a page (into memory and onto the
topic), and a follower thread that reads the topic into memory. Only ``ok`` and ``empty``
results are cached; a cached result is re-addressed to the page that asked for it
(:func:`readdress`) and marked ``cached``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from ocrstream.processors.page_key import content_key, engine_fingerprint
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import PageResult, PageStatus, PageTask, Timings, utc_now
from ocrstream.settings import KafkaSettings
from ocrstream.streams.fetch_watch import FetchWatch
from ocrstream.streams.metrics import Metrics

log = logging.getLogger(__name__)

CACHEABLE = (PageStatus.OK, PageStatus.EMPTY)


class ByteLRU:
    """Values by key, least recently used dropped first once their summed size is over
    ``max_bytes``. Thread-safe: the decode threads read while the follower writes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> bytes | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: str, value: bytes) -> None:
        if len(value) > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.size -= len(old)
            self._items[key] = value
            self.size += len(value)
            while self.size > self.max_bytes:
                _, dropped = self._items.popitem(last=False)
                self.size -= len(dropped)


def readdress(cached: PageResult, task: PageTask, *, worker_id: str) -> PageResult:
    """A cached result as the result of ``task``'s page: its address, document attributes and
    trace, marked ``cached``; what was read (lines, blocks, size, engine) as it was."""
    return dataclasses.replace(
        cached,
        doc_id=task.doc_id,
        page_no=task.page_no,
        page_count=task.page_count,
        worker_id=worker_id,
        source_sha256=task.source_sha256,
        source_uri=task.source_uri,
        content_type=task.content_type,
        outputs=task.outputs,
        submitted_at=task.submitted_at,
        completed_at=utc_now(),
        attempt=task.attempt,
        trace_id=task.trace_id,
        tenant=task.tenant,
        mode=task.mode,
        timings=Timings(),
        cached=True,
        revision=task.revision,
    )


class PageCache:
    """The worker's cache: memory in front of the compacted topic."""

    def __init__(
        self,
        *,
        kafka: KafkaSettings,
        codec: Codec,
        topic: str,
        fingerprint: Callable[[str], str],
        max_bytes: int,
        send: Callable[[str, str, bytes], None],
        max_value_bytes: int = 4 * 1024 * 1024,
        consumer: Any | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.codec = codec
        self.topic = topic
        self.fingerprint = fingerprint  # parse mode → engine fingerprint
        self._fingerprints: dict[str, str] = {}  # by mode, made once (model files hashed)
        self.memory = ByteLRU(max_bytes)
        self._send = send  # (topic, key, value): the worker's producer
        self.max_value_bytes = max_value_bytes  # larger results are not cached
        self._consumer = consumer
        self._kafka = kafka
        self._metrics = metrics  # with them, the follower has a fetch watch (agent page-cache)
        self._stop = threading.Event()
        self.ready = threading.Event()  # the topic read to its end once (or the follower failed)
        self._thread: threading.Thread | None = None

    # --- lookups (decode threads) ---------------------------------------------------------

    def key(self, task: PageTask, image: bytes) -> str:
        fingerprint = self._fingerprints.get(task.mode)
        if fingerprint is None:
            fingerprint = self._fingerprints[task.mode] = self.fingerprint(task.mode)
        return content_key(image, fingerprint, mode=task.mode, options=task.options)

    def get(self, key: str) -> PageResult | None:
        value = self.memory.get(key)
        return None if value is None else self.codec.decode_as(value, PageResult)

    # --- after a miss (the worker loop) ---------------------------------------------------

    def put(self, key: str, result: PageResult) -> None:
        if result.status not in CACHEABLE or result.cached:
            return
        value = self.codec.encode(result, self.topic)
        if len(value) > self.max_value_bytes:  # the producer would refuse it
            return
        self.memory.put(key, value)
        self._send(self.topic, key, value)

    # --- the follower ---------------------------------------------------------------------

    def start(self) -> None:
        """Read the topic from the beginning into memory, then follow it, in a thread."""
        self._thread = threading.Thread(target=self._follow, name="page-cache", daemon=True)
        self._thread.start()

    def wait_ready(self, timeout_s: float) -> bool:
        """Wait until what the topic held at start is in memory (or ``timeout_s``): a worker
        that consumed pages before would miss pages the cache knows."""
        if not self.ready.wait(timeout_s):
            log.warning("page cache not loaded after %.0fs: consuming pages anyway", timeout_s)
            return False
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _follow(self) -> None:
        consumer = self._consumer or Consumer(
            self._kafka.librdkafka(
                **{
                    "group.id": self._kafka.topic("ocrstream-page-cache"),  # never commits
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                }
            )
        )
        try:
            meta = consumer.list_topics(self.topic, timeout=10)
            partitions = meta.topics[self.topic].partitions
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions])
            watch = None
            if self._metrics is not None:
                watch = FetchWatch(consumer, self._metrics, "page-cache",
                                   stall_after_s=self._kafka.fetch_stall_s)  # fmt: skip
                watch.assigned((self.topic, p) for p in partitions)
            behind, loaded = set(partitions), 0
            while not self._stop.is_set():
                for msg in consumer.consume(num_messages=500, timeout=0.2):
                    err = msg.error()
                    if watch is not None and (
                        err is None or err.code() == KafkaError._PARTITION_EOF
                    ):
                        watch.heard((self.topic, msg.partition() or 0))
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            behind.discard(msg.partition())
                            if not behind and not self.ready.is_set():
                                log.info("page cache loaded: %d results", len(self.memory))
                                self.ready.set()
                        else:
                            log.warning("page cache: %s", err)
                        continue
                    key, value = msg.key(), msg.value()
                    if key and value:  # a tombstone (no value) is left alone
                        self.memory.put(key.decode(), value)
                        loaded += 1
                if watch is not None:
                    watch.check()  # the follower holds no partition back
            log.info("page cache follower stopped after %d records", loaded)
        except Exception:  # the cache is an optimisation: without it pages are read again
            log.exception("page cache follower failed; pages are read without it")
        finally:
            self.ready.set()
            consumer.close()


def fingerprint_of(engine: Any) -> Callable[[str], str]:
    """The engine's fingerprint by parse mode: its own ``fingerprint(mode)`` when it has one
    (:meth:`~ocrstream.processors.ocr.engine.OcrEngine.fingerprint`), else one made of what its
    ``info`` says (backend, model, version), which a test engine keeps stable."""
    own = getattr(engine, "fingerprint", None)
    if callable(own):
        return own
    info = engine.info
    return lambda mode: engine_fingerprint(info.backend, {info.model: info.version}, {"mode": mode})
