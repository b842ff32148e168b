"""Committing and leaving a consumer group, bounded for when Kafka is gone.

librdkafka's synchronous commit and ``Consumer.close()`` wait for the group coordinator without
limit, and the Python call holds the main thread the whole time, so a stopping agent ignores
further signals too. ``close()`` waits only when it has something to say: offsets stored and not
yet committed (``enable.auto.commit`` commits them on the way out) — after an OCR worker read
pages, say. Stopping the whole stack with ``ocrstream all`` and ``ocrstream infra down`` one
after the other, or a broker lost while a pod stops, then left the worker in ``close()`` for
good, logging a failed connect every 50 ms, until someone killed it (measured in session 38;
upstream, confluent-kafka-python issue 1667).

:func:`leave_group` therefore commits and closes in a daemon thread and waits for it at most
``timeout_s``. Past that the agent stops anyway: what it stored and could not commit is read
again by the partitions' next owner (delivery is at-least-once and results are de-duplicated
downstream), and the group drops the member after its ``session.timeout.ms``. The thread may
stay blocked in librdkafka until the process exits; nothing waits for it.

The faust agents (the splitter, the assembler) stop inside faust, whose last commit waits for
aiokafka to find the group coordinator, again without limit: with Kafka stopped, the assembler
was still waiting when ``ocrstream all`` killed it 90 s later. :func:`watch_the_stop` is the
bound there: from the start of the stop, every ``close_timeout_s`` it asks Kafka for its
metadata, and once Kafka does not answer it ends the process (status 1) with a warning. A stop
that takes long while Kafka answers (a scan being split) is left to finish.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from ocrstream.settings import KafkaSettings

log = logging.getLogger(__name__)


def commit_stored(consumer: Any, when: str) -> None:
    """Commit the consumer's stored offsets synchronously. Nothing stored since the last commit
    is not an error; a failed commit is logged (``when`` says on which occasion) and leaves the
    offsets stored for the next commit, or for the partitions' next owner to read again."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as e:
        if e.args and e.args[0].code() == KafkaError._NO_OFFSET:
            return
        log.warning("commit %s failed: %s", when, e)


def leave_group(consumer: Any, timeout_s: float, who: str, *, commit: bool = True) -> bool:
    """Commit the stored offsets (``commit``), then close ``consumer`` (leaving its group), in a
    thread bounded by ``timeout_s``. True once closed; False, with a warning, when Kafka did not
    answer in time (the consumer is left to the thread). An error ``close()`` raised is raised
    here."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            if commit:
                commit_stored(consumer, "on leaving the group")
            consumer.close()
        except Exception as e:  # noqa: BLE001 - raised again in the caller's thread
            failure.append(e)

    thread = threading.Thread(target=run, name=f"{who}-leave", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        log.warning(
            "%s: Kafka did not take the last commit and the leaving of the group within %.0f s; "
            "stopping without: what was not committed is read again by the partitions' next "
            "owner, and the group drops this member when its session times out",
            who,
            timeout_s,
        )
        return False
    if failure:
        raise failure[0]
    return True


def kafka_answers(kafka: KafkaSettings, timeout_s: float) -> bool:
    """Whether a broker of ``kafka`` answers a metadata request within ``timeout_s``."""
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient(kafka.librdkafka(log_level=0)).list_topics(timeout=timeout_s)
    except KafkaException:
        return False
    return True


def watch_the_stop(kafka: KafkaSettings, who: str) -> threading.Thread:
    """Start the watch over a stop that has begun (see the module docstring): a daemon thread
    that ends the process once the stop has run ``close_timeout_s`` and Kafka does not
    answer."""

    def watch() -> None:
        started = time.monotonic()
        while True:
            time.sleep(kafka.close_timeout_s)
            if kafka_answers(kafka, timeout_s=min(5.0, kafka.close_timeout_s)):
                continue
            log.warning(
                "%s: still stopping after %.0f s and Kafka does not answer: exiting before the "
                "stop is done (what was not committed is read again by the partitions' next "
                "owner)",
                who,
                time.monotonic() - started,
            )
            logging.shutdown()
            os._exit(1)

    thread = threading.Thread(target=watch, name=f"{who}-stop-watch", daemon=True)
    thread.start()
    return thread
