"""``python -m tests.fakes.worker``: the real OCR worker around a fast fake engine.

Everything a reliability test cares about is the real thing — the confluent-kafka consumer
group on ``ocr.pages.v1``, stored-after-delivery offsets, claim-check fetches from the S3 store
with back-off and paused partitions, the idempotent producer, the DLQ — only the recognition is
:class:`tests.fakes.engines.FakeEngine`, which answers each page with one line ``page WxH`` (its
size). A 50-document load then costs seconds of CPU instead of minutes on a 2-core CI machine,
and the text still tells which page a result belongs to.

Configured like ``ocrstream ocr-worker`` (``OCRSTREAM_KAFKA_…``, ``OCRSTREAM_S3_…``,
``OCRSTREAM_WORKER_…``, ``OCRSTREAM_LIMIT_…``); ``OCRSTREAM_FAKE_ENGINE_BATCH_DELAY_S`` makes
every engine call take that long, so that a test can kill the worker while a batch is in the
engine.
"""

from __future__ import annotations

import argparse

from pydantic_settings import BaseSettings, SettingsConfigDict

from ocrstream.cli.agents import _stop_on_signals
from ocrstream.logs import configure_logging
from ocrstream.schemas.codec import Codec
from ocrstream.settings import KafkaSettings, LimitsSettings, S3Settings, WorkerSettings
from ocrstream.storage import ObjectStore, parse_s3_uri
from ocrstream.streams.metrics import process_metrics, serve
from ocrstream.streams.worker import OcrWorker
from tests.fakes.engines import SlowEngine


class FakeEngineSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OCRSTREAM_FAKE_ENGINE_", frozen=True)

    batch_delay_s: float = 0.0
    page_delay_s: float = 0.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.worker")
    parser.add_argument("--metrics-port", type=int, default=0)
    args = parser.parse_args(argv)
    configure_logging()
    kafka, settings, limits = KafkaSettings(), WorkerSettings(), LimitsSettings()
    fake = FakeEngineSettings()
    serve(args.metrics_port)
    # Few retries inside the store, as in `ocrstream ocr-worker`: the worker backs off itself.
    s3 = S3Settings()
    store = ObjectStore(s3.model_copy(update={"retries": 1}))

    def fetch(uri: str) -> bytes:
        bucket, key = parse_s3_uri(uri)
        data: bytes = store.get_bytes(key, bucket=bucket, max_bytes=limits.max_file_bytes)
        return data

    engine = SlowEngine(per_batch_s=fake.batch_delay_s, per_page_s=fake.page_delay_s,
                        max_pixels=limits.max_page_pixels)  # fmt: skip
    engine.name = "fake"
    worker = OcrWorker(kafka=kafka, settings=settings, engine=engine, codec=Codec(kafka),
                       fetch=fetch, metrics=process_metrics(), limits=limits)  # fmt: skip
    worker.run(_stop_on_signals())


if __name__ == "__main__":
    main()
