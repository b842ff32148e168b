"""The faust-streaming app factory shared by the splitter and the assembler.

Checked against Kafka 4.1 (KRaft): faust-streaming 0.15.3 on aiokafka 0.14 consumes,
produces, commits and writes and restores table changelogs; aiokafka's ``api_version="auto"``
negotiates versions Kafka 4 still serves. Two things matter:

- Records are Avro, decoded by our codec *inside* the agent, so every topic uses the ``raw``
  serializer (:func:`raw_topic`): with faust's default (json) a bad value raises in faust's
  own decoding, the agent crashes, restarts and crashes again on the same record. Tables keep
  faust's json serializer for their changelogs.
- A member killed without leaving the group keeps its partitions until its session times out,
  so the session timeout is short (``session_timeout_s``).

Only internal topics (table changelogs, the leader topic) are created by faust; the pipeline's
topics come from :func:`ocrstream.streams.topics.ensure_topics`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import tempfile
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import faust
from faust.types import TopicT

from ocrstream.errors import RetriableError
from ocrstream.settings import KafkaSettings, LimitsSettings

log = logging.getLogger(__name__)


def credentials(kafka: KafkaSettings) -> Any:
    """faust broker credentials for the SASL/TLS options of ``kafka`` (None for PLAINTEXT)."""
    protocol = kafka.security_protocol.upper()
    if protocol == "PLAINTEXT":
        return None
    context: ssl.SSLContext | None = None
    if protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=kafka.ssl_ca_location)
        if kafka.ssl_certificate_location:
            password = kafka.ssl_key_password.get_secret_value() if kafka.ssl_key_password else None
            context.load_cert_chain(
                kafka.ssl_certificate_location, kafka.ssl_key_location, password
            )
        if not kafka.ssl_endpoint_identification:
            context.check_hostname = False
    if protocol == "SSL":
        return faust.SSLCredentials(context)
    password = kafka.sasl_password.get_secret_value() if kafka.sasl_password else None
    return faust.SASLCredentials(
        username=kafka.sasl_username,
        password=password,
        mechanism=kafka.sasl_mechanism or "PLAIN",
        ssl_context=context,
    )


def topic_partitions(kafka: KafkaSettings, logical_name: str, timeout_s: float = 30.0) -> int:
    """How many partitions a topic has (tables must match their source topic)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    name = kafka.topic(logical_name)
    try:
        md = AdminClient(kafka.librdkafka(log_level=3)).list_topics(name, timeout=timeout_s)
    except KafkaException as e:
        raise RetriableError(f"cannot reach Kafka at {kafka.bootstrap_servers}: {e}") from e
    topic = md.topics.get(name)
    if topic is None or topic.error is not None or not topic.partitions:
        raise RetriableError(f"topic {name} does not exist (run `ocrstream topics create`)")
    return len(topic.partitions)


_METADATA_PACED = False


def pace_failed_metadata_updates() -> None:
    """Make a failed aiokafka metadata update take ``retry_backoff_ms`` before it reports.

    aiokafka 0.14's producer sender asks for a metadata update and waits for it, in a loop,
    while a partition with pending batches has no known leader; with the broker down every
    update fails at once, so the loop spins. Found by the broker-restart test: an assembler with
    a send in flight when the broker stopped logged 54,000 "Unable to update metadata" lines
    in 15 s at a full core. A failed update now waits ``retry_backoff_ms`` (100 ms) before
    reporting, which paces every caller of ``force_metadata_update`` (the sender, the fetcher,
    the coordinator lookup). Idempotent; patches the class once per process.
    """
    global _METADATA_PACED
    if _METADATA_PACED:
        return
    from aiokafka.client import AIOKafkaClient

    update = AIOKafkaClient._metadata_update

    async def paced(self: AIOKafkaClient, cluster_metadata: Any, topics: Any) -> bool:
        ok: bool = await update(self, cluster_metadata, topics)
        if not ok:
            await asyncio.sleep(self._retry_backoff)
        return ok

    AIOKafkaClient._metadata_update = paced
    _METADATA_PACED = True


def make_app(
    app_id: str,
    kafka: KafkaSettings,
    *,
    partitions: int,
    limits: LimitsSettings | None = None,
    replication_factor: int = 1,
    session_timeout_s: float = 15.0,
    stream_buffer: int = 16,
) -> faust.App:
    """A faust app for one agent: at-least-once, in-memory tables restored from changelogs."""
    limits = limits or LimitsSettings()
    pace_failed_metadata_updates()
    datadir = Path(tempfile.gettempdir()) / "ocrstream-faust" / kafka.topic(app_id)
    datadir.parent.mkdir(parents=True, exist_ok=True)
    return faust.App(
        kafka.topic(app_id),
        broker=kafka.aiokafka()["broker"],
        broker_credentials=credentials(kafka),
        broker_client_id=kafka.client_id,
        store="memory://",
        processing_guarantee="at_least_once",
        topic_partitions=partitions,
        topic_replication_factor=replication_factor,
        topic_allow_declare=True,  # only internal topics: changelogs, the leader topic
        broker_session_timeout=session_timeout_s,
        broker_heartbeat_interval=min(3.0, session_timeout_s / 3),
        broker_commit_interval=1.0,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_max_request_size=limits.max_message_bytes + 256 * 1024,
        consumer_max_fetch_size=limits.max_message_bytes + 256 * 1024,
        stream_buffer_maxsize=stream_buffer,
        web_enabled=False,
        datadir=str(datadir),
    )


def raw_topic(app: faust.App, name: str, partitions: int | None = None) -> TopicT:
    """A topic of Avro bytes: faust neither decodes nor encodes the values."""
    return app.topic(
        name,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=partitions,
    )


class DeliveryWindow:
    """Send without waiting for each acknowledgement, but with at most ``size`` outstanding:
    memory stays bounded and :meth:`drain` waits until everything sent was delivered."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._pending: deque[Awaitable[Any]] = deque()

    async def send(self, topic: TopicT, key: bytes | None, value: bytes) -> None:
        fut = await topic.send(key=key, value=value)
        self._pending.append(fut)
        while len(self._pending) > self.size:
            await self._pending.popleft()

    async def drain(self) -> None:
        while self._pending:
            await self._pending.popleft()

    def discard(self) -> None:
        """Forget pending sends (after an error; the message will be redone)."""
        for fut in self._pending:
            if isinstance(fut, asyncio.Future) and not fut.done():
                fut.add_done_callback(_ignore_result)
        self._pending.clear()


def _ignore_result(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


class _Record:
    """A record read around faust (see :class:`GapGuard`), shaped like a faust event."""

    def __init__(self, msg: Any) -> None:
        self.key = msg.key()
        self.value = msg.value()
        self.message = self
        self.topic, self.partition, self.offset = msg.topic(), msg.partition(), msg.offset()
        self.headers = msg.headers() or []
        ts = msg.timestamp()[1]
        self.timestamp = ts / 1000 if ts and ts > 0 else None


class GapGuard:
    """Hands an agent the records faust skipped.

    Seen with faust-streaming 0.15.3 on aiokafka 0.14: after an unclean restart (the dead
    member still in the group, so two rebalances in a row) the first records after the
    committed offset of a partition are fetched, dropped with the stream buffer in the second
    rebalance, and never delivered again, while later ones are. The guard knows the offset it
    expects next on each partition (the group's committed offset at first sight); when an
    event arrives beyond it, the missing records are read directly (a confluent-kafka consumer
    that only assigns, never joins the group), handed to the agent first, and acked in faust so
    its commits move on.
    """

    def __init__(self, app: faust.App, kafka: KafkaSettings) -> None:
        self.app, self.kafka = app, kafka
        self._expected: dict[tuple[str, int], int] = {}
        self._reader: Any = None

        async def forget(_sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
            revoked = args[0] if args else kwargs.get("revoked", ())
            for tp in revoked:
                self._expected.pop((tp.topic, tp.partition), None)

        self._forget = forget  # the signal keeps a weak reference
        app.on_partitions_revoked.connect(forget)

    def _consumer(self) -> Any:
        if self._reader is None:
            from confluent_kafka import Consumer

            self._reader = Consumer(self.kafka.librdkafka(**{
                "group.id": str(self.app.conf.id),  # for committed(); never subscribes
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
            }))  # fmt: skip
        return self._reader

    def _committed(self, topic: str, partition: int) -> int | None:
        from confluent_kafka import TopicPartition

        (tp,) = self._consumer().committed([TopicPartition(topic, partition)], timeout=10)
        return tp.offset if tp.offset is not None and tp.offset >= 0 else None

    def _read(self, topic: str, partition: int, start: int, end: int) -> list[_Record]:
        from confluent_kafka import TopicPartition

        consumer = self._consumer()
        consumer.assign([TopicPartition(topic, partition, start)])
        out: list[_Record] = []
        deadline = time.monotonic() + 30
        try:
            while len(out) < end - start and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None or msg.error() is not None:
                    continue
                if msg.offset() >= end:
                    break
                if msg.offset() >= start + len(out):
                    out.append(_Record(msg))
        finally:
            consumer.unassign()
        return out

    async def missed(self, event: Any) -> list[_Record]:
        """The records of ``event``'s partition that faust skipped before it (usually none)."""
        msg = event.message
        key = (msg.topic, msg.partition)
        loop = asyncio.get_running_loop()
        expected = self._expected.get(key)
        if expected is None:
            expected = await loop.run_in_executor(None, self._committed, msg.topic, msg.partition)
        self._expected[key] = msg.offset + 1
        if expected is None or msg.offset <= expected:
            return []
        log.warning("faust skipped %s[%d] offsets %d..%d: reading them directly",
                    msg.topic, msg.partition, expected, msg.offset - 1)  # fmt: skip
        return await loop.run_in_executor(
            None, self._read, msg.topic, msg.partition, expected, msg.offset
        )

    def ack(self, record: _Record) -> None:
        """Count a directly read record as processed in faust's commit bookkeeping."""
        from faust.types import TP
        from faust.types.tuples import Message

        tp = TP(record.topic, record.partition)
        message = Message(record.topic, record.partition, record.offset, record.timestamp or 0.0,
                          0, record.headers, record.key, record.value, None, tp=tp)  # fmt: skip
        self.app.consumer.ack(message)

    async def guard(self, event: Any, handle: Callable[[Any], Awaitable[None]]) -> None:
        """Handle the skipped records before ``event``, then ``event``."""
        for record in await self.missed(event):
            await handle(record)
            self.ack(record)
        await handle(event)
