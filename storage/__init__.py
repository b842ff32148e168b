"""The object store: buckets, deterministic keys, put/get, claim-check (S3 via the minio SDK)."""

from __future__ import annotations

from ocrstream.storage.errors import (
    ObjectNotFoundError,
    StoreConfigError,
    StoreRequestError,
    StoreUnavailableError,
)
from ocrstream.storage.keys import (
    InvalidUriError,
    Keys,
    S3Uri,
    format_s3_uri,
    parse_s3_uri,
    validate_doc_id,
)
from ocrstream.storage.objectstore import Download, ObjectInfo, ObjectStore

__all__ = [
    "Download",
    "InvalidUriError",
    "Keys",
    "ObjectInfo",
    "ObjectNotFoundError",
    "ObjectStore",
    "S3Uri",
    "StoreConfigError",
    "StoreRequestError",
    "StoreUnavailableError",
    "format_s3_uri",
    "parse_s3_uri",
    "validate_doc_id",
]
