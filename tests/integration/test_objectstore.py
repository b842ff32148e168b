"""The object store against the real local S3 server (versitygw from `ocrstream infra up`).

Each test has its own bucket (the ``object_store`` fixture), emptied and removed after.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from ocrstream.errors import LimitExceededError
from ocrstream.settings import S3Settings
from ocrstream.storage import ObjectNotFoundError, ObjectStore, StoreConfigError, parse_s3_uri

pytestmark = pytest.mark.integration

MiB = 1024 * 1024


def test_put_get_stat_delete(object_store: ObjectStore) -> None:
    key = object_store.keys.source("invoice-42", "pdf")
    info = object_store.put_bytes(
        key, b"%PDF-1.7 hello", content_type="application/pdf", metadata={"tenant": "acme"}
    )
    assert info.uri == f"s3://{object_store.bucket}/scans/invoice-42/source.pdf"
    assert parse_s3_uri(info.uri) == (object_store.bucket, key)
    assert object_store.get_bytes(key) == b"%PDF-1.7 hello"
    stat = object_store.stat(key)
    assert (stat.size, stat.content_type, stat.metadata) == (
        14,
        "application/pdf",
        {"tenant": "acme"},
    )
    assert stat.etag == hashlib.md5(b"%PDF-1.7 hello").hexdigest()
    assert object_store.exists(key)

    object_store.put_bytes(key, b"replayed")  # deterministic keys: a replay overwrites
    assert object_store.get_bytes(key) == b"replayed"
    assert [o.key for o in object_store.list_objects("scans/")] == [key]

    object_store.delete(key)
    assert not object_store.exists(key)
    object_store.delete(key)  # idempotent


def test_missing_objects_are_source_missing(object_store: ObjectStore) -> None:
    for call in (object_store.get_bytes, object_store.stat):
        with pytest.raises(ObjectNotFoundError) as info:
            call("scans/nope/source.pdf")
        assert info.value.code == "source_missing"
        assert "s3://" in str(info.value)
    with pytest.raises(ObjectNotFoundError):
        object_store.get_bytes("k", bucket="no-such-bucket-ocrstream")


def test_size_limits_are_enforced_before_reading_it_all(
    object_store: ObjectStore, tmp_path: Path
) -> None:
    object_store.put_bytes("big", b"x" * 100_000)
    with pytest.raises(LimitExceededError, match="100000 bytes, over the limit of 1000"):
        object_store.get_bytes("big", max_bytes=1000)
    with pytest.raises(LimitExceededError):
        object_store.get_to_file("big", tmp_path / "big", max_bytes=1000)
    assert not list(tmp_path.iterdir())  # nothing half-written left behind
    with pytest.raises(LimitExceededError), object_store.open("big", max_bytes=1000):
        pass
    assert object_store.get_bytes("big", max_bytes=100_000) == b"x" * 100_000


def test_open_streams_the_body(object_store: ObjectStore) -> None:
    data = os.urandom(3 * MiB + 17)
    object_store.put_bytes("stream", data)
    with object_store.open("stream") as body:
        head = body.read(10)
        rest = body.read()
    assert head + rest == data


def test_streaming_multipart_upload_of_unknown_length(
    s3_settings: S3Settings, tmp_path: Path
) -> None:
    """A pipe (no length, not seekable) bigger than part_size goes up in 5 MiB parts."""
    store = ObjectStore(s3_settings.model_copy(update={"part_size": 5 * MiB}))
    store.ensure_bucket()
    try:
        data = os.urandom(12 * MiB + 5)
        read_end, write_end = os.pipe()

        def feed() -> None:
            with open(write_end, "wb") as w:
                for i in range(0, len(data), MiB):
                    w.write(data[i : i + MiB])

        feeder = threading.Thread(target=feed)
        feeder.start()
        with open(read_end, "rb") as pipe:
            info = store.put_stream("piped", pipe)
        feeder.join()
        assert info.size == len(data)
        assert info.etag.endswith("-3")  # three parts: 5 + 5 + 2 MiB
        got = store.get_to_file("piped", tmp_path / "piped.bin")
        assert (got.size, got.sha256) == (len(data), hashlib.sha256(data).hexdigest())
        assert (tmp_path / "piped.bin").read_bytes() == data
    finally:
        store.remove_bucket()


def test_presigned_get_url(object_store: ObjectStore) -> None:
    object_store.put_bytes("documents/d/document.txt", b"hello", content_type="text/plain")
    url = object_store.presigned_get_url("documents/d/document.txt", expires=timedelta(minutes=5))
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.read() == b"hello"
    tampered = url.replace("document.txt", "document.json")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(tampered, timeout=10)
    assert info.value.code == 403


def test_prefixes_and_claim_check_expiry(object_store: ObjectStore) -> None:
    keys = object_store.keys
    for page in (1, 2, 3):
        object_store.put_bytes(keys.page("doc-a", page, "png"), b"png")
    object_store.put_bytes(keys.page("doc-b", 1, "png"), b"png")
    object_store.put_bytes(keys.document("doc-a", "txt"), b"text")
    assert [o.key for o in object_store.list_objects(keys.pages_prefix("doc-a"))] == [
        "pages/doc-a/00001.png",
        "pages/doc-a/00002.png",
        "pages/doc-a/00003.png",
    ]
    assert object_store.delete_prefix(keys.pages_prefix("doc-a")) == 3
    assert object_store.expire_claim_checks() == 0  # doc-b's page is fresh
    later = datetime.now(UTC) + timedelta(days=object_store.settings.claim_check_expiry_days + 1)
    assert object_store.expire_claim_checks(now=later) == 1
    assert [o.key for o in object_store.list_objects()] == ["documents/doc-a/document.txt"]


def test_key_prefix_keeps_tenants_apart(s3_settings: S3Settings) -> None:
    a = ObjectStore(s3_settings.model_copy(update={"key_prefix": "tenant-a"}))
    b = ObjectStore(s3_settings.model_copy(update={"key_prefix": "tenant-b/"}))
    a.ensure_bucket()
    try:
        a.put_bytes(a.keys.source("doc", "pdf"), b"a")
        b.put_bytes(b.keys.source("doc", "pdf"), b"b")
        assert [o.key for o in a.list_objects(a.keys.prefix)] == ["tenant-a/scans/doc/source.pdf"]
        assert b.get_bytes("tenant-b/scans/doc/source.pdf") == b"b"
    finally:
        a.remove_bucket()


def test_ensure_bucket_is_idempotent_and_says_if_lifecycle_is_unsupported(
    object_store: ObjectStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ocrstream.storage")
    object_store.ensure_bucket()
    object_store.ensure_bucket()
    try:
        rules = object_store.client.get_bucket_lifecycle(object_store.bucket)
    except Exception:  # noqa: BLE001 - a store without lifecycle support must have said so
        assert "will not expire by themselves" in caplog.text
    else:
        assert rules is not None
        rule_filter = rules.rules[0].rule_filter
        assert rule_filter is not None
        assert rule_filter.prefix == "pages/"


def test_wrong_credentials_are_a_config_error(s3_settings: S3Settings) -> None:
    wrong = SecretStr("wrong-secret-value")
    store = ObjectStore(s3_settings.model_copy(update={"secret_key": wrong}))
    with pytest.raises(StoreConfigError) as info:
        store.ensure_bucket()
    assert "wrong-secret-value" not in str(info.value)


@pytest.mark.slow
def test_100_mb_object_streams_up_and_back_with_its_sha256(
    object_store: ObjectStore, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    source = tmp_path / "scan.bin"
    digest = hashlib.sha256()
    with open(source, "wb") as f:
        for _ in range(100):
            chunk = os.urandom(MiB)
            digest.update(chunk)
            f.write(chunk)
    key = object_store.keys.source("big-scan", "pdf")

    tracemalloc.start()
    started = time.perf_counter()
    info = object_store.put_file(key, source, content_type="application/pdf")
    put_s = time.perf_counter() - started
    _, put_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    started = time.perf_counter()
    got = object_store.get_to_file(key, tmp_path / "back.bin")
    get_s = time.perf_counter() - started

    parts = -(-100 * MiB // object_store.settings.part_size)
    assert info.etag.endswith(f"-{parts}")  # a multipart upload, part by part
    # Streamed: about (parallel uploads + 2) parts in memory, never the whole object.
    settings = object_store.settings
    assert put_peak < (settings.parallel_uploads + 2) * settings.part_size + 8 * MiB
    assert put_peak < 100 * MiB
    assert object_store.stat(key).size == 100 * MiB
    assert got.size == 100 * MiB
    assert got.sha256 == digest.hexdigest()
    record_property("put_s", round(put_s, 2))
    record_property("get_s", round(get_s, 2))
    print(
        f"\n100 MiB: put {put_s:.2f}s ({100 / put_s:.0f} MiB/s, {parts} parts, "
        f"peak traced memory {put_peak / MiB:.0f} MiB), get {get_s:.2f}s ({100 / get_s:.0f} MiB/s)"
    )
