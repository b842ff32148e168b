"""``auto``'s measured backends shared through the object store (the real local S3 server):
the first worker on a kind of machine measures, the next one (a new pod: an empty engine
cache) reads its answer instead of measuring."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import pytest

from ocrstream.processors.ocr.backends import choice
from ocrstream.processors.ocr.models import load_model_set
from ocrstream.settings import KafkaSettings, OcrSettings, S3Settings
from ocrstream.storage import ObjectStore
from ocrstream.storage.engine_cache import StoredChoices
from tests.integration.harness import Pipeline

pytestmark = pytest.mark.integration


class _Session:
    """A session that takes ``delay_s`` a run: how slow a backend is on this pretend CPU."""

    concurrency = 1

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def run(self, batch: np.ndarray) -> np.ndarray:
        time.sleep(self.delay_s)
        return batch


def _loader(loads: list[tuple[str, str]]):  # type: ignore[no-untyped-def]
    slow = {("openvino", "rec"): 0.02, ("onnxruntime", "det"): 0.02}

    def load(key: str, stage: str) -> _Session:
        loads.append((key, stage))
        return _Session(slow.get((key, stage), 0.0))

    return load


@pytest.fixture
def cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(choice, "installed", lambda: ("openvino", "onnxruntime"))
    monkeypatch.setattr(choice, "_cpuinfo", lambda: ("Some CPU", "avx2 fma sse4_2"))


def _settings(cache: Path) -> OcrSettings:
    return OcrSettings(model="ppocrv6-tiny", threads=1, engine_cache_dir=cache)


def test_the_next_worker_reads_the_first_ones_measurement_from_the_store(
    object_store: ObjectStore, tmp_path: Path, cpu: None
) -> None:
    models = load_model_set("ppocrv6-tiny")
    shared = StoredChoices(object_store)
    loads: list[tuple[str, str]] = []
    first = choice.choose(_settings(tmp_path / "pod-1"), models, loader=_loader(loads),
                          shared=shared)  # fmt: skip
    assert first.measured
    assert first.stages == {"det": "openvino", "rec": "onnxruntime"}
    key = object_store.keys.engine_choice(first.path.name)
    assert key.startswith("engine/auto-backend/")
    kept = json.loads(object_store.get_bytes(key))
    assert kept["stages"] == first.stages

    loads.clear()
    second = choice.choose(_settings(tmp_path / "pod-2"), models, loader=_loader(loads),
                           shared=shared)  # fmt: skip
    assert (second.measured, second.stages, loads) == (False, first.stages, [])
    assert (tmp_path / "pod-2" / choice.FOLDER / first.path.name).is_file()  # kept locally too

    # what the store holds is checked as a local file is: another key's answer is measured over
    other = dict(kept, key="0" * 64)
    object_store.put_bytes(key, json.dumps(other).encode())
    third = choice.choose(_settings(tmp_path / "pod-3"), models, loader=_loader(loads),
                          shared=shared)  # fmt: skip
    assert third.measured
    assert loads
    assert json.loads(object_store.get_bytes(key))["key"] == kept["key"]  # repaired


def test_a_store_that_cannot_be_reached_leaves_the_worker_to_measure(
    tmp_path: Path, cpu: None, caplog: pytest.LogCaptureFixture
) -> None:
    down = ObjectStore(S3Settings(endpoint="127.0.0.1:9", bucket="nowhere", retries=0))
    loads: list[tuple[str, str]] = []
    with caplog.at_level(logging.WARNING, logger=choice.__name__):
        found = choice.choose(_settings(tmp_path), load_model_set("ppocrv6-tiny"),
                              loader=_loader(loads), shared=StoredChoices(down))  # fmt: skip
    assert found.measured
    assert found.stages == {"det": "openvino", "rec": "onnxruntime"}
    assert "cannot read s3://nowhere/engine/auto-backend/" in caplog.text
    assert "cannot keep the choice in s3://nowhere/" in caplog.text
    assert found.path.is_file()


@pytest.mark.slow
def test_a_new_worker_pod_takes_the_choice_kept_in_the_store(
    topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path
) -> None:
    """``ocrstream ocr-worker`` with an empty engine cache (a new pod) and a choice kept in
    the store for this machine: it starts on that choice, without measuring."""
    if len(choice.installed()) < 2:
        pytest.skip("auto chooses only when OpenVINO and onnxruntime are both installed")
    settings = OcrSettings(model="ppocrv6-tiny", threads=1)
    fields = choice.machine(settings, load_model_set("ppocrv6-tiny"), choice.installed())
    key = choice.cache_key(fields)
    name = choice.cache_path(tmp_path, key).name
    times = {"onnxruntime": 0.1, "openvino": 0.2}
    kept = {"format": choice.FORMAT, "key": key, "machine": fields,
            "stages": {"det": "onnxruntime", "rec": "onnxruntime"},
            "seconds": {"det": times, "rec": times},
            "new_shape_seconds": {"det": times, "rec": times}}  # fmt: skip
    object_store.put_bytes(object_store.keys.engine_choice(name), json.dumps(kept).encode())
    cache = tmp_path / "empty-engine-cache"
    env = {
        "OCRSTREAM_OCR_MODEL": "ppocrv6-tiny",
        "OCRSTREAM_OCR_THREADS": "1",
        "OCRSTREAM_OCR_BACKEND": "auto",
        "OCRSTREAM_OCR_ENGINE_CACHE_DIR": str(cache),
    }
    pipeline = Pipeline(topics, object_store.bucket, tmp_path, engine="real", env=env)
    pipeline.start("worker")
    try:
        log = pipeline["worker"].log_path
        deadline = time.monotonic() + 120
        while "OCR engine ready" not in log.read_text() and time.monotonic() < deadline:
            assert pipeline["worker"].alive(), log.read_text()[-2000:]
            time.sleep(0.5)
        text = log.read_text()
        assert f"auto backend from s3://{object_store.bucket}/engine/auto-backend/{name}" in text
        assert "auto backend measured" not in text
        assert "OCR engine ready: onnxruntime on cpu" in text
        assert (cache / choice.FOLDER / name).is_file()
    finally:
        pipeline.close()
