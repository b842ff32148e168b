"""Errors of the object store, in the hierarchy of :mod:`ocrstream.errors`."""

from __future__ import annotations

from ocrstream.errors import FatalError, PoisonError, RetriableError


class StoreUnavailableError(RetriableError):
    """The store can't be reached, timed out, or answered 5xx/SlowDown after every retry."""

    code = "store_unavailable"


class ObjectNotFoundError(PoisonError):
    """The object (or its bucket) does not exist."""

    code = "source_missing"


class StoreRequestError(PoisonError):
    """The store refused this request for good (access denied, invalid name, too large …)."""

    code = "store_refused"


class StoreConfigError(FatalError):
    """The store can't be used as configured (bad credentials, TLS, a bucket we can't create)."""

    code = "store_config"
