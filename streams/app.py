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


_STOP_PATCHED = False


def stop_consumers_without_a_broker() -> None:
    """Let faust's consumer thread finish stopping when the broker is gone.

    aiokafka 0.14's ``Fetcher.close()`` cancels the fetches in flight and awaits each; one that
    failed against the unreachable broker and waits out its retry backoff raises the
    cancellation from that wait, so ``AIOKafkaConsumer.stop()`` raises ``CancelledError``
    (aiokafka issue 647). It escaped faust's consumer thread, which then never reported that it
    had shut down, and mode waited out its 60 s ``shutdown_timeout``: with Kafka stopped, the
    splitter and the assembler each took 61 s to stop and printed three tracebacks (session 39).
    A cancellation that is not the stopping task's own is now taken as the fetch's, and the
    consumer's client is closed (what ``stop()`` had left to do). Idempotent; patches the driver
    class once per process.
    """
    global _STOP_PATCHED
    if _STOP_PATCHED:
        return
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    stop = AIOKafkaConsumerThread.on_thread_stop

    async def on_thread_stop(self: AIOKafkaConsumerThread) -> None:
        try:
            await stop(self)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise
            log.info("kafka consumer stopped; a fetch from an unreachable broker was cancelled")
            consumer = self._consumer
            if consumer is not None:
                await consumer._client.close()

    AIOKafkaConsumerThread.on_thread_stop = on_thread_stop  # type: ignore[method-assign]
    _STOP_PATCHED = True


_SEEK_PATCHED = False


async def rewind_to_committed(consumer: Any, internal: Callable[[str], bool]) -> dict[Any, Any]:
    """Seek every assigned partition back to where the group stands, including those where it
    has not committed yet; returns the committed offsets (None where there is none).

    The cause of records that faust never delivers (issue "scans that are never split"):
    faust drains records out of aiokafka's fetcher and then discards some of them before its
    agents see them — records of a partition it is not consuming yet (table recovery in
    progress), a batch that arrives while the flow is stopped for a rebalance, a batch from the
    previous generation. It counts on :meth:`Consumer.perform_seek` (after every recovery and
    rebalance) to fetch them again: "seek to the committed offsets". aiokafka 0.14's
    ``seek_to_committed`` only seeks a partition whose committed offset is above zero
    (``if offset and offset > 0``), so on a partition where the group never committed — every
    partition of a new deployment, and one that never had a record — or has committed 0, the
    fetch position stays after the discarded records. Those records are never delivered, and
    nothing later on that partition shows a gap. Records submitted in the first second of an
    agent's life land exactly there: fetched while the tables recover, dropped, never read.

    Here a partition with committed offset 0 is sought to 0, and one without a committed
    offset to the beginning of its log (``auto_offset_reset=earliest``: where a new group
    starts), so every record past the group's position is delivered again. A record handled
    twice this way is de-duplicated like any redelivery. Internal topics (changelogs, the
    leader topic) are left where they are: faust positions them itself for recovery.
    """
    from aiokafka.structs import TopicPartition as AioTP

    committed: dict[Any, Any] = await consumer.seek_to_committed()
    unsought = [
        AioTP(tp.topic, tp.partition)
        for tp, offset in committed.items()
        if not offset and not internal(tp.topic)
    ]
    for tp in unsought:
        if committed.get(tp) == 0:
            consumer.seek(tp, 0)
    never = [tp for tp in unsought if committed.get(tp) is None]
    if never:
        await consumer.seek_to_beginning(*never)
        log.debug("rewound %d partitions without a committed offset to their beginning",
                  len(never))  # fmt: skip
    return committed


def rewind_partitions_without_commits() -> None:
    """Make faust's seek-to-committed also rewind partitions without a committed offset
    (see :func:`rewind_to_committed`). Idempotent; patches the driver class once per process."""
    global _SEEK_PATCHED
    if _SEEK_PATCHED:
        return
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    async def seek_to_committed(self: AIOKafkaConsumerThread) -> Any:
        app = self.app

        def internal(topic: str) -> bool:
            return topic in app.tables.changelog_topics or topic.endswith("__assignor-__leader")

        return await self.call_thread(rewind_to_committed, self._ensure_consumer(), internal)

    AIOKafkaConsumerThread.seek_to_committed = seek_to_committed  # type: ignore[method-assign]
    _SEEK_PATCHED = True


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
    rewind_partitions_without_commits()
    stop_consumers_without_a_broker()
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


def declare_internal_topics(
    app: faust.App, kafka: KafkaSettings, replication_factor: int, *extra: TopicT
) -> None:
    """Create the app's table changelogs (compacted) and ``extra`` internal topics before it
    starts (see :func:`ocrstream.streams.topics.ensure_internal_topics`)."""
    from ocrstream.streams.topics import ensure_internal_topics

    wanted: dict[str, tuple[int, str]] = {}
    for table in app.tables.values():
        changelog = table.changelog_topic
        wanted[changelog.get_topic_name()] = (changelog.partitions or table.partitions, "compact")
    for topic in extra:
        wanted[topic.get_topic_name()] = (topic.partitions or 1, "delete")
    ensure_internal_topics(kafka, wanted, replication_factor)
