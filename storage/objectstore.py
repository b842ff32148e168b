"""The S3 object store (MinIO, AWS S3, Ceph, versitygw), spoken through the ``minio`` SDK.

Every call is retried on transient failures (connection errors, timeouts, 5xx, SlowDown) with
exponential backoff and jitter, then gives up with :class:`StoreUnavailableError` (retriable:
the caller pauses and tries later). A missing object is :class:`ObjectNotFoundError` (poison,
code ``source_missing``). The SDK's own retries are disabled so the two don't multiply; the
HTTP pool has the connect/read timeouts of :class:`~ocrstream.settings.S3Settings`.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import logging
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, BinaryIO, TypeVar, cast

import certifi
import urllib3
from minio import Minio
from minio.commonconfig import ENABLED, CopySource, Filter
from minio.deleteobjects import DeleteObject
from minio.error import InvalidResponseError, MinioException, S3Error, ServerError
from minio.lifecycleconfig import Expiration, LifecycleConfig, Rule

from ocrstream.errors import LimitExceededError, OcrstreamError
from ocrstream.settings import S3Settings
from ocrstream.storage.errors import (
    ObjectNotFoundError,
    StoreConfigError,
    StoreRequestError,
    StoreUnavailableError,
)
from ocrstream.storage.keys import Keys, format_s3_uri

log = logging.getLogger(__name__)

T = TypeVar("T")

_CHUNK = 1024 * 1024
_MIN_PART = 5 * 1024 * 1024  # S3's smallest multipart part
_NOT_FOUND = {"NoSuchKey", "NoSuchBucket", "NoSuchObject", "NoSuchVersion"}
_TRANSIENT = {
    "SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "Throttling",
    "ThrottlingException", "RequestThrottled", "OperationAborted", "XMinioServerNotInitialized",
}  # fmt: skip
_BAD_CREDENTIALS = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AuthorizationHeaderMalformed"}
# What the SDK and urllib3 raise; local file errors (OSError) are not in here on purpose.
_WIRE_ERRORS = (MinioException, urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)
LIFECYCLE_RULE_ID = "ocrstream-claim-check-expiry"


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    bucket: str
    key: str
    size: int
    etag: str = ""
    content_type: str | None = None
    last_modified: datetime | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def uri(self) -> str:
        return format_s3_uri(self.bucket, self.key)


@dataclass(frozen=True, slots=True)
class Download:
    """What :meth:`ObjectStore.get_to_file` wrote: its size and SHA-256 (hex)."""

    path: Path
    size: int
    sha256: str


def _translate(e: BaseException, what: str) -> OcrstreamError:
    """Our error for a minio/urllib3 error during ``what``."""
    if isinstance(e, urllib3.exceptions.SSLError):
        return StoreConfigError(f"{what}: TLS failed: {e}")
    if isinstance(e, S3Error):
        status = e.response.status if e.response is not None else 0
        code = e.code or str(status)
        text = f"{what}: {code}: {e.message or 'no message'}"
        if code in _NOT_FOUND or status == 404:
            return ObjectNotFoundError(text)
        if code == "NotImplemented" or status == 501:
            return StoreRequestError(text)
        if code in _TRANSIENT or status >= 500 or status == 429:
            return StoreUnavailableError(text)
        if code in _BAD_CREDENTIALS:
            return StoreConfigError(text)
        return StoreRequestError(text)
    if isinstance(e, ServerError):
        if e.status_code >= 500 or e.status_code == 429:
            return StoreUnavailableError(f"{what}: HTTP {e.status_code}")
        return StoreRequestError(f"{what}: HTTP {e.status_code}")
    if isinstance(e, InvalidResponseError):
        return StoreUnavailableError(f"{what}: not an S3 answer: {e}")
    return StoreUnavailableError(f"{what}: {type(e).__name__}: {e}")


def make_client(settings: S3Settings) -> Minio:
    """A minio client with our timeouts, TLS settings and no SDK retries."""
    endpoint, secure = settings.endpoint, settings.secure
    for scheme in ("https://", "http://"):
        if endpoint.startswith(scheme):
            endpoint, secure = endpoint[len(scheme) :].rstrip("/"), scheme == "https://"
    http = urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=settings.connect_timeout_s, read=settings.read_timeout_s),
        retries=False,
        maxsize=10,
        cert_reqs="CERT_REQUIRED",
        ca_certs=settings.ca_bundle or certifi.where(),
    )
    return Minio(
        endpoint,
        access_key=settings.access_key.get_secret_value(),
        secret_key=settings.secret_key.get_secret_value(),
        secure=secure,
        region=settings.region,
        http_client=http,
    )


class ObjectStore:
    """Put, get, stat, list and delete objects in one bucket (others by ``bucket=``)."""

    def __init__(self, settings: S3Settings) -> None:
        if settings.part_size < _MIN_PART:
            raise ValueError(f"part_size must be at least {_MIN_PART} bytes")
        self.settings = settings
        self.bucket = settings.bucket
        self.keys = Keys(settings.key_prefix)
        self.client = make_client(settings)

    def __repr__(self) -> str:
        return f"ObjectStore(endpoint={self.settings.endpoint!r}, bucket={self.bucket!r})"

    def uri(self, key: str, bucket: str | None = None) -> str:
        return format_s3_uri(bucket or self.bucket, key)

    # --- retries ------------------------------------------------------------------------------

    def _backoff(self, attempt: int) -> float:
        cap = min(self.settings.retry_backoff_max_s, self.settings.retry_backoff_s * 2**attempt)
        return cap / 2 + random.uniform(0, cap / 2)  # "equal jitter"

    def _retry(
        self,
        what: str,
        call: Callable[[], T],
        *,
        retries: int | None = None,
        rewind: Callable[[], object] | None = None,
    ) -> T:
        retries = self.settings.retries if retries is None else retries
        attempt = 0
        while True:
            try:
                return call()
            except _WIRE_ERRORS as e:
                error = _translate(e, what)
                if not isinstance(error, StoreUnavailableError):
                    raise error from e
                if attempt >= retries:
                    raise StoreUnavailableError(
                        f"{error} (gave up after {attempt + 1} tries)"
                    ) from e
            delay = self._backoff(attempt)
            log.warning(
                "%s: transient failure, retry %d/%d in %.2fs", what, attempt + 1, retries, delay
            )
            time.sleep(delay)
            attempt += 1
            if rewind is not None:
                rewind()

    # --- buckets ------------------------------------------------------------------------------

    def ensure_bucket(self) -> None:
        """Create the bucket if needed and expire claim-check pages; idempotent.

        Refusals (bad credentials, a bucket owned by someone else) are :class:`StoreConfigError`:
        the process can't work as configured. A store without lifecycle support is logged.
        """
        bucket = self.bucket

        def create() -> None:
            if self.client.bucket_exists(bucket):
                return
            try:
                self.client.make_bucket(bucket, location=self.settings.region)
                log.info("created bucket %s", bucket)
            except S3Error as e:
                if e.code != "BucketAlreadyOwnedByYou":
                    raise

        try:
            self._retry(f"create bucket {bucket}", create)
        except (StoreRequestError, ObjectNotFoundError) as e:
            raise StoreConfigError(str(e)) from e
        self._ensure_lifecycle()

    def _ensure_lifecycle(self) -> None:
        days = self.settings.claim_check_expiry_days
        if days <= 0:
            return
        prefix = self.keys.claim_check_prefix
        rule = Rule(
            ENABLED,
            rule_filter=Filter(prefix=prefix),
            rule_id=LIFECYCLE_RULE_ID,
            expiration=Expiration(days=days),
        )
        what = f"set lifecycle of bucket {self.bucket}"
        try:
            self._retry(
                what, lambda: self.client.set_bucket_lifecycle(self.bucket, LifecycleConfig([rule]))
            )
        except (StoreRequestError, ObjectNotFoundError) as e:
            log.warning(
                "%s: the store refused (%s); objects under %s will not expire by themselves",
                what, e, prefix,
            )  # fmt: skip

    def expire_claim_checks(self, now: datetime | None = None) -> int:
        """Delete claim-check pages older than ``claim_check_expiry_days``; the count.

        For stores without lifecycle rules (versitygw): call it now and then.
        """
        days = self.settings.claim_check_expiry_days
        if days <= 0:
            return 0
        cutoff = (now or datetime.now(UTC)) - timedelta(days=days)
        old = [
            o.key
            for o in self.list_objects(self.keys.claim_check_prefix)
            if o.last_modified is not None and o.last_modified < cutoff
        ]
        self._delete_keys(self.bucket, old, f"expire claim-checks in s3://{self.bucket}")
        return len(old)

    def remove_bucket(self, bucket: str | None = None) -> None:
        """Delete every object in the bucket, then the bucket (tests and teardown)."""
        bucket = bucket or self.bucket
        self.delete_prefix("", bucket=bucket)
        with contextlib.suppress(ObjectNotFoundError):
            self._retry(f"remove bucket {bucket}", lambda: self.client.remove_bucket(bucket))

    # --- put ----------------------------------------------------------------------------------

    def put_bytes(
        self,
        key: str,
        data: bytes,
        *,
        content_type: str = "application/octet-stream",
        metadata: Mapping[str, str] | None = None,
        bucket: str | None = None,
    ) -> ObjectInfo:
        return self.put_stream(
            key, io.BytesIO(data), length=len(data), content_type=content_type,
            metadata=metadata, bucket=bucket,
        )  # fmt: skip

    def put_file(
        self,
        key: str,
        path: str | os.PathLike[str],
        *,
        content_type: str = "application/octet-stream",
        metadata: Mapping[str, str] | None = None,
        bucket: str | None = None,
    ) -> ObjectInfo:
        """Upload a local file, as a streaming multipart upload when it's over ``part_size``."""
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            return self.put_stream(
                key, f, length=size, content_type=content_type, metadata=metadata, bucket=bucket
            )

    def put_stream(
        self,
        key: str,
        stream: IO[bytes],
        *,
        length: int = -1,
        content_type: str = "application/octet-stream",
        metadata: Mapping[str, str] | None = None,
        bucket: str | None = None,
        parallel_uploads: int | None = None,
    ) -> ObjectInfo:
        """Upload from a readable stream of ``length`` bytes (-1: read to the end).

        Anything over ``part_size`` goes up as a multipart upload read part by part, so memory
        stays near ``part_size × (parallel_uploads + 2)`` whatever the object's size. The SDK
        queues parts for its upload threads without a bound, so a stream that can outrun the
        store (a client's upload) is better sent with ``parallel_uploads=1``: each part is read
        only once the one before is stored. Only seekable streams are retried (they're rewound
        first); a failed upload is aborted by the SDK.
        """
        bucket = bucket or self.bucket
        what = f"put {format_s3_uri(bucket, key)}"
        seekable = stream.seekable()
        start = stream.tell() if seekable else 0
        counted = _Counting(stream)

        def put() -> ObjectInfo:
            counted.count = 0
            result = self.client.put_object(
                bucket, key, cast(BinaryIO, counted), length,
                content_type=content_type, metadata=dict(metadata or {}),
                part_size=self.settings.part_size,
                num_parallel_uploads=parallel_uploads or self.settings.parallel_uploads,
            )  # fmt: skip
            size = length if length >= 0 else counted.count
            return ObjectInfo(bucket, key, size, result.etag or "", content_type)

        return self._retry(
            what, put, retries=None if seekable else 0, rewind=lambda: stream.seek(start)
        )

    # --- get ----------------------------------------------------------------------------------

    def get_bytes(
        self, key: str, *, max_bytes: int | None = None, bucket: str | None = None
    ) -> bytes:
        """The whole object; over ``max_bytes`` is :class:`LimitExceededError` (nothing kept)."""
        bucket = bucket or self.bucket
        what = f"get {format_s3_uri(bucket, key)}"

        def get() -> bytes:
            response = self.client.get_object(bucket, key)
            try:
                _check_length(response.headers.get("Content-Length"), max_bytes, what)
                out = bytearray()
                for chunk in response.stream(_CHUNK):
                    out += chunk
                    _check_length(len(out), max_bytes, what)
                return bytes(out)
            finally:
                response.close()
                response.release_conn()

        return self._retry(what, get)

    def get_to_file(
        self,
        key: str,
        path: str | os.PathLike[str],
        *,
        max_bytes: int | None = None,
        bucket: str | None = None,
    ) -> Download:
        """Stream the object into ``path`` (written aside, then renamed), hashing as it goes."""
        bucket = bucket or self.bucket
        what = f"get {format_s3_uri(bucket, key)}"
        path = Path(path)
        part = path.with_name(f".{path.name}.part")

        def fetch() -> Download:
            response = self.client.get_object(bucket, key)
            try:
                _check_length(response.headers.get("Content-Length"), max_bytes, what)
                digest, size = hashlib.sha256(), 0
                with open(part, "wb") as out:
                    for chunk in response.stream(_CHUNK):
                        size += len(chunk)
                        _check_length(size, max_bytes, what)
                        digest.update(chunk)
                        out.write(chunk)
            finally:
                response.close()
                response.release_conn()
            os.replace(part, path)
            return Download(path, size, digest.hexdigest())

        try:
            return self._retry(what, fetch)
        finally:
            part.unlink(missing_ok=True)

    @contextlib.contextmanager
    def open(
        self, key: str, *, max_bytes: int | None = None, bucket: str | None = None
    ) -> Iterator[BinaryIO]:
        """A readable stream of the object. Opening is retried; reading is not (errors while
        reading are :class:`StoreUnavailableError`)."""
        bucket = bucket or self.bucket
        what = f"get {format_s3_uri(bucket, key)}"
        response = self._retry(what, lambda: self.client.get_object(bucket, key))
        try:
            _check_length(response.headers.get("Content-Length"), max_bytes, what)
        except LimitExceededError:
            response.close()
            response.release_conn()
            raise
        with io.BufferedReader(_ObjectReader(response, what, max_bytes), _CHUNK) as reader:
            yield cast(BinaryIO, reader)

    # --- metadata, listing, deleting ----------------------------------------------------------

    def stat(self, key: str, *, bucket: str | None = None) -> ObjectInfo:
        bucket = bucket or self.bucket
        info = self._retry(
            f"stat {format_s3_uri(bucket, key)}", lambda: self.client.stat_object(bucket, key)
        )
        metadata = {
            k.lower().removeprefix("x-amz-meta-"): v
            for k, v in (info.metadata or {}).items()
            if k.lower().startswith("x-amz-meta-")
        }
        return ObjectInfo(
            bucket, key, info.size or 0, (info.etag or "").strip('"'), info.content_type,
            info.last_modified, metadata,
        )  # fmt: skip

    def exists(self, key: str, *, bucket: str | None = None) -> bool:
        try:
            self.stat(key, bucket=bucket)
        except ObjectNotFoundError:
            return False
        return True

    def copy(self, key: str, to_key: str, *, bucket: str | None = None) -> ObjectInfo:
        """Copy an object inside the bucket, on the server (nothing passes through here)."""
        bucket = bucket or self.bucket
        what = f"copy {format_s3_uri(bucket, key)} to {to_key}"
        self._retry(what, lambda: self.client.copy_object(bucket, to_key, CopySource(bucket, key)))
        return self.stat(to_key, bucket=bucket)

    def delete(self, key: str, *, bucket: str | None = None) -> None:
        """Remove the object; removing one that isn't there is not an error."""
        bucket = bucket or self.bucket
        with contextlib.suppress(ObjectNotFoundError):
            self._retry(
                f"delete {format_s3_uri(bucket, key)}",
                lambda: self.client.remove_object(bucket, key),
            )

    def list_objects(
        self,
        prefix: str = "",
        *,
        bucket: str | None = None,
        start_after: str | None = None,
        limit: int | None = None,
    ) -> list[ObjectInfo]:
        """The objects under ``prefix``, by key: every one, or the first ``limit`` after the key
        ``start_after`` (a page of a long listing)."""
        bucket = bucket or self.bucket

        def listing() -> list[ObjectInfo]:
            found = self.client.list_objects(bucket, prefix=prefix or None, recursive=True,
                                             start_after=start_after)  # fmt: skip
            return [
                ObjectInfo(bucket, o.object_name or "", o.size or 0, (o.etag or "").strip('"'),
                           o.content_type, o.last_modified)
                for o in itertools.islice(found, limit)
            ]  # fmt: skip

        return self._retry(f"list s3://{bucket}/{prefix}", listing)

    def delete_prefix(self, prefix: str, *, bucket: str | None = None) -> int:
        """Remove every object under ``prefix`` (claim-check pages of a finished document)."""
        bucket = bucket or self.bucket
        try:
            keys = [o.key for o in self.list_objects(prefix, bucket=bucket)]
        except ObjectNotFoundError:
            return 0
        self._delete_keys(bucket, keys, f"delete under s3://{bucket}/{prefix}")
        return len(keys)

    def _delete_keys(self, bucket: str, keys: list[str], what: str) -> None:
        for i in range(0, len(keys), 1000):
            batch = [DeleteObject(k) for k in keys[i : i + 1000]]

            def remove(batch: list[DeleteObject] = batch) -> None:
                failures = list(self.client.remove_objects(bucket, batch))
                if failures:
                    first = failures[0]
                    raise StoreRequestError(
                        f"{what}: {len(failures)} objects not deleted, "
                        f"first {first.name}: {first.code} {first.message}"
                    )

            self._retry(what, remove)

    def presigned_get_url(
        self, key: str, *, expires: timedelta = timedelta(hours=1), bucket: str | None = None
    ) -> str:
        """A URL anyone can GET the object with until ``expires`` (at most 7 days)."""
        bucket = bucket or self.bucket
        return self._retry(
            f"presign {format_s3_uri(bucket, key)}",
            lambda: self.client.presigned_get_object(bucket, key, expires=expires),
        )


def _check_length(size: int | str | None, max_bytes: int | None, what: str) -> None:
    if max_bytes is not None and size is not None and int(size) > max_bytes:
        raise LimitExceededError(f"{what}: {int(size)} bytes, over the limit of {max_bytes}")


class _Counting:
    """A read-only view of a stream that counts the bytes read through it."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.count += len(data)
        return data


class _ObjectReader(io.RawIOBase):
    """An object's body as a raw stream: wire errors translated, the size limit enforced."""

    def __init__(self, response: Any, what: str, max_bytes: int | None) -> None:
        self._response = response
        self._what = what
        self._max = max_bytes
        self._read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            n = int(self._response.readinto(buffer) or 0)
        except _WIRE_ERRORS as e:
            raise _translate(e, self._what) from e
        self._read += n
        _check_length(self._read, self._max, self._what)
        return n

    def close(self) -> None:
        if not self.closed:
            self._response.close()
            self._response.release_conn()
        super().close()
