"""Shared fixtures, and the order tests run in.

Integration tests (marked ``integration``) talk to the real local services that
``ocrstream infra up`` starts: Kafka, the S3 store and Prometheus. Each test gets its own topic
prefix and bucket, so tests never see each other's records or objects. They run after every
unit test, whatever the paths given, so a broken unit fails the run in minutes, not after the
long integration tests.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import re
import sys
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from ocrstream.settings import KafkaSettings, S3Settings, ServicesSettings

# PyMuPDF as ocrstream's processes import it (without its layout add-on, whose import loads
# ONNX models and leaves onnxruntime threads pinned to a core: the tests that look at OpenVINO's
# thread affinity would see them), whichever test imports ``pymupdf`` first. The GPU machine
# (scripts/gpu_check.sh) has no PyMuPDF: its backend tests need none.
if importlib.util.find_spec("pymupdf") is not None:
    import ocrstream.processors.mupdf  # noqa: F401

if TYPE_CHECKING:
    from ocrstream.storage import ObjectStore


class _OnlyAsOcrstream(importlib.abc.MetaPathFinder):
    """streams/, processors/, schemas/ and storage/ sit at the top of the checkout (which pytest
    puts on sys.path) but are only ever ``ocrstream.streams`` …: a test that imports them by
    their folder name would load a second copy of every module and work by accident, then
    fail against an installed wheel. Refused here, as the wheel refuses them."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name in LAYOUT_FOLDERS:
            raise ModuleNotFoundError(f"import ocrstream.{name}, not {name}", name=name)


LAYOUT_FOLDERS = ("streams", "processors", "schemas", "storage")
sys.meta_path.insert(0, _OnlyAsOcrstream())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Unit tests first, then integration tests; each group in collection order."""
    items.sort(key=lambda item: item.get_closest_marker("integration") is not None)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Why each rerun test failed the first time (pytest-rerunfailures lists it as RERUN and
    keeps the traceback to itself): a flaky test's cause is then in the CI log, not lost."""
    reports = terminalreporter.stats.get("rerun", [])
    if not reports:
        return
    terminalreporter.write_sep("=", "first failures of rerun tests")
    for report in reports:
        terminalreporter.write_sep("_", f"{report.nodeid} ({report.when})")
        terminalreporter.write_line(report.longreprtext)
        for name, content in report.sections:
            if content.strip():
                terminalreporter.write_sep("-", name)
                terminalreporter.write_line(content[-4000:])


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:24]


@pytest.fixture
def unique_id(request: pytest.FixtureRequest) -> str:
    """A short id unique to this test run and test, usable in topic and bucket names."""
    return f"{_slug(request.node.name)}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def services() -> ServicesSettings:
    return ServicesSettings()


@pytest.fixture
def kafka_settings(unique_id: str) -> KafkaSettings:
    return KafkaSettings(topic_prefix=f"t-{unique_id}.")


@pytest.fixture
def s3_settings(unique_id: str) -> S3Settings:
    bucket = f"t-{unique_id}"[:63].rstrip("-")
    return S3Settings(bucket=bucket)


@pytest.fixture
def topics(kafka_settings: KafkaSettings) -> Iterator[KafkaSettings]:
    """The design's topics under this test's prefix (partitions scaled by 1/8), deleted after."""
    from ocrstream.streams.topics import delete_topics, ensure_topics

    ensure_topics(kafka_settings, partitions_scale=0.125)
    yield kafka_settings
    delete_topics(kafka_settings)


@pytest.fixture
def object_store(s3_settings: S3Settings) -> Iterator[ObjectStore]:
    """An ObjectStore on this test's own bucket (created first), emptied and removed after."""
    from ocrstream.storage import ObjectStore

    store = ObjectStore(s3_settings)
    store.ensure_bucket()
    yield store
    store.remove_bucket()


@pytest.fixture
def metrics_ports() -> Iterator[None]:
    """The fixed metrics ports Prometheus scrapes (9101-9104, 9110+), for this test alone.

    Agents on those ports are one set at a time across every pytest process and
    ``ocrstream bench pipeline`` on the machine: they all hold this lock while theirs run."""
    from ocrstream.services.process import file_lock
    from ocrstream.services.prometheus import METRICS_PORTS_LOCK

    with file_lock(METRICS_PORTS_LOCK):
        yield


@pytest.fixture(scope="session")
def ocr_engine():  # type: ignore[no-untyped-def]
    """One real OCR engine (default settings) shared by the tests that read pages."""
    from ocrstream.processors.ocr.engine import OcrEngine
    from ocrstream.settings import OcrSettings

    return OcrEngine(OcrSettings())
