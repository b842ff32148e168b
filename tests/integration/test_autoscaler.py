"""The local autoscaler on real Kafka with real ``ocrstream ocr-worker`` processes: a backlog on
ocr.pages.v1 scales the group up to its maximum, the new worker joins the group and the pages
get done, and once the lag is gone (cooldown, then stabilisation) it scales back down — the
process count, the group's members and the autoscaler's metrics all say so."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from ocrstream.processors.autoscale import Autoscaler, ScalePolicy
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import PageImage, PageResult, PageTask
from ocrstream.settings import KafkaSettings, WorkerSettings
from ocrstream.storage import ObjectStore
from ocrstream.streams import topics as t
from ocrstream.streams.autoscaler import GroupLag, LocalAutoscaler, spawn_worker
from ocrstream.streams.metrics import Metrics
from tests import samples
from tests.integration.harness import read_all
from tests.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(420)]

BACKLOG = 40
THRESHOLD = 10
COOLDOWN_S = 5.0
STABILISATION_S = 15.0  # long enough for the second worker to load its models and join


@dataclass
class Tick:
    at: float
    lag: int | None
    replicas: int
    members: int


def small_page(doc: str, page: int) -> PageTask:
    gray = samples.render_lines(samples.sample_lines(2, seed=page), dpi=40, seed=page)
    data = samples.encode_image(gray, "png", 40)
    h, w = gray.shape
    return PageTask(doc_id=doc, page_no=page, page_count=BACKLOG, width=w, height=h,
                    image=PageImage("png", data=data))  # fmt: skip


def members(admin: AdminClient, group: str) -> int:
    return len(admin.describe_consumer_groups([group])[group].result().members)


@pytest.fixture
def autoscaler(
    topics: KafkaSettings, object_store: ObjectStore, metrics_ports: None
) -> Iterator[tuple[LocalAutoscaler, Metrics]]:
    env = {**os.environ, "OCRSTREAM_TOPIC_PREFIX": topics.topic_prefix,
           "OCRSTREAM_S3_BUCKET": object_store.bucket, "OCRSTREAM_OCR_THREADS": "1",
           "OCRSTREAM_WORKER_MAX_WAIT_MS": "20"}  # fmt: skip
    policy = ScalePolicy(min_replicas=1, max_replicas=2, lag_threshold=THRESHOLD,
                         cooldown_s=COOLDOWN_S, stabilization_window_s=STABILISATION_S,
                         partitions=8)  # fmt: skip
    lag = GroupLag(topics, topics.topic(WorkerSettings().group), topics.topic(t.PAGES))
    metrics = Metrics()
    scaler = LocalAutoscaler(Autoscaler(policy), lag.read,
                             spawn_worker(WorkerSettings().metrics_port, env), metrics,
                             interval_s=1.0, stop_timeout_s=60)  # fmt: skip
    try:
        yield scaler, metrics
    finally:
        scaler.shutdown()
        lag.close()


def test_backlog_scales_up_and_idle_scales_down(
    autoscaler: tuple[LocalAutoscaler, Metrics], topics: KafkaSettings
) -> None:
    scaler, metrics = autoscaler
    kafka = topics
    group = kafka.topic(WorkerSettings().group)
    admin = AdminClient(kafka.librdkafka())

    def gauge(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    def decide() -> Any:
        """One tick that read the lag (a read can fail while leaders move: retried)."""
        return wait_until(scaler.tick, 30, "a tick that could read the lag", interval_s=1)

    # Idle: the minimum, one worker; wait until it consumes (models loaded, in the group).
    decide()
    assert scaler.replicas == 1
    wait_until(lambda: members(admin, group) >= 1, 120, "the worker to join the group",
               interval_s=1)  # fmt: skip
    assert members(admin, group) == 1
    assert gauge("ocrstream_autoscaler_replicas") == 1

    # A backlog of 40 pages: 40 / 10 per worker -> 4, capped at the maximum of 2.
    codec, producer = Codec(kafka), Producer(kafka.librdkafka())
    topic = kafka.topic(t.PAGES)
    for page in range(1, BACKLOG + 1):
        producer.produce(topic, key=f"backlog/{page}".encode(),
                         value=codec.encode(small_page("backlog", page), topic))  # fmt: skip
    assert producer.flush(30) == 0
    decision = decide()
    backlog_at = time.monotonic()
    assert decision.desired == 2, decision
    assert scaler.replicas == 2
    assert sum(w.proc.poll() is None for w in scaler.workers) == 2
    assert gauge("ocrstream_autoscaler_replicas") == 2
    assert gauge("ocrstream_autoscaler_desired_replicas") == 2
    assert gauge("ocrstream_autoscaler_decisions_total", direction="up") == 2  # 0->1, 1->2
    assert (gauge("ocrstream_autoscaler_lag") or 0) > THRESHOLD

    # Run the loop until it has scaled back down to one worker: the test is the autoscaler's
    # loop here, ticking once a second as `ocrstream scale --interval 1` would.
    history: list[Tick] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        time.sleep(1.0)
        scaler.tick()
        lag = gauge("ocrstream_autoscaler_lag")
        history.append(Tick(time.monotonic(), None if lag is None else int(lag), scaler.replicas,
                            members(admin, group)))  # fmt: skip
        if scaler.replicas == 1 and history[-1].lag == 0:
            break
    trace = [(round(h.at - history[0].at), h.lag, h.replicas, h.members) for h in history]
    assert scaler.replicas == 1, trace
    assert max(h.members for h in history) == 2, f"the second worker never joined: {trace}"
    assert history[-1].lag == 0
    assert gauge("ocrstream_autoscaler_replicas") == 1
    assert gauge("ocrstream_autoscaler_desired_replicas") == 1
    assert gauge("ocrstream_autoscaler_decisions_total", direction="down") == 1
    # Scale-down waited a stabilisation window after the last tick that still wanted two.
    busy = [h.at for h in history if h.lag is not None and h.lag > THRESHOLD]
    last_busy = busy[-1] if busy else backlog_at
    down_at = next(h.at for h in history if h.replicas == 1)
    assert down_at - last_busy >= STABILISATION_S - 2, trace

    # The stopped worker left the group; every page of the backlog has its result.
    wait_until(lambda: members(admin, group) == 1, 60, "the stopped worker to leave the group",
               interval_s=1)  # fmt: skip
    done = {(r.doc_id, r.page_no) for r in read_all(kafka, t.PAGE_RESULTS, codec)
            if isinstance(r, PageResult)}  # fmt: skip
    assert done == {("backlog", p) for p in range(1, BACKLOG + 1)}
