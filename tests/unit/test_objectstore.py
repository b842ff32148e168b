"""The object store without a server: an unreachable store, and how store errors are typed."""

from __future__ import annotations

import logging
import os
import socket
import time

import pytest
import urllib3
from minio.error import InvalidResponseError, S3Error, ServerError

from ocrstream.errors import FatalError, PoisonError, RetriableError
from ocrstream.settings import S3Settings
from ocrstream.storage import (
    ObjectNotFoundError,
    ObjectStore,
    StoreConfigError,
    StoreRequestError,
    StoreUnavailableError,
)
from ocrstream.storage.objectstore import _translate


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_store_gives_up_with_a_retriable_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = S3Settings(
        endpoint=f"127.0.0.1:{_closed_port()}",
        secret_key="do-not-log-me",
        retries=2,
        retry_backoff_s=0.05,
        retry_backoff_max_s=0.1,
        connect_timeout_s=0.5,
    )
    store = ObjectStore(settings)
    caplog.set_level(logging.WARNING, logger="ocrstream.storage")
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as info:
        store.get_bytes("scans/doc/source.pdf")
    elapsed = time.monotonic() - started
    assert isinstance(info.value, RetriableError)
    assert info.value.code == "store_unavailable"
    assert "gave up after 3 tries" in str(info.value)
    assert "s3://ocrstream/scans/doc/source.pdf" in str(info.value)
    assert isinstance(info.value.__cause__, urllib3.exceptions.HTTPError)
    retries = [r.getMessage() for r in caplog.records]
    assert len(retries) == 2
    assert "retry 1/2" in retries[0]
    assert "retry 2/2" in retries[1]
    assert 0.05 <= elapsed < 5  # backed off (0.025-0.05 s, then 0.05-0.1 s), but quickly
    for text in (str(info.value), caplog.text, repr(store)):
        assert "do-not-log-me" not in text
    with pytest.raises(StoreUnavailableError):
        store.ensure_bucket()


def test_a_non_seekable_stream_is_not_retried() -> None:
    settings = S3Settings(endpoint=f"127.0.0.1:{_closed_port()}", retries=3, retry_backoff_s=5)
    read_end, write_end = os.pipe()
    os.write(write_end, b"data")
    os.close(write_end)
    started = time.monotonic()
    with open(read_end, "rb") as pipe, pytest.raises(StoreUnavailableError, match="after 1 tries"):
        ObjectStore(settings).put_stream("k", pipe, length=4)
    assert time.monotonic() - started < 4


def test_part_size_below_the_s3_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="part_size"):
        ObjectStore(S3Settings(part_size=1024))


READ_TIMEOUT = urllib3.exceptions.ReadTimeoutError(None, "/", "timed out")  # type: ignore[arg-type]


def _s3_error(code: str, status: int) -> S3Error:
    response = urllib3.HTTPResponse(body=b"", status=status)
    return S3Error(response, code, f"{code} message", "/b/k", "req", "host", "b", "k")


@pytest.mark.parametrize(
    ("error", "expected", "kind"),
    [
        (_s3_error("NoSuchKey", 404), ObjectNotFoundError, PoisonError),
        (_s3_error("NoSuchBucket", 404), ObjectNotFoundError, PoisonError),
        (_s3_error("SlowDown", 503), StoreUnavailableError, RetriableError),
        (_s3_error("InternalError", 500), StoreUnavailableError, RetriableError),
        (_s3_error("RequestTimeout", 400), StoreUnavailableError, RetriableError),
        (_s3_error("NotImplemented", 501), StoreRequestError, PoisonError),
        (_s3_error("AccessDenied", 403), StoreRequestError, PoisonError),
        (_s3_error("EntityTooLarge", 400), StoreRequestError, PoisonError),
        (_s3_error("InvalidAccessKeyId", 403), StoreConfigError, FatalError),
        (_s3_error("SignatureDoesNotMatch", 403), StoreConfigError, FatalError),
        (ServerError("bad gateway", 502), StoreUnavailableError, RetriableError),
        (ServerError("teapot", 418), StoreRequestError, PoisonError),
        (InvalidResponseError(200, "text/html", "<html>"), StoreUnavailableError, RetriableError),
        (READ_TIMEOUT, StoreUnavailableError, RetriableError),
        (urllib3.exceptions.ProtocolError("reset"), StoreUnavailableError, RetriableError),
        (ConnectionResetError(), StoreUnavailableError, RetriableError),
        (urllib3.exceptions.SSLError("bad cert"), StoreConfigError, FatalError),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else "",
)
def test_store_errors_are_typed(error: Exception, expected: type, kind: type) -> None:
    got = _translate(error, "get s3://b/k")
    assert type(got) is expected
    assert isinstance(got, kind)
    assert str(got).startswith("get s3://b/k")
