"""Errors of the wire format, in the hierarchy of :mod:`ocrstream.errors`."""

from __future__ import annotations

from ocrstream.errors import FatalError, PoisonError, RetriableError


class UnknownSchemaError(PoisonError):
    """The bytes don't start with a schema this codec knows."""

    code = "unknown_schema"


class MalformedRecordError(PoisonError):
    """The framing is known but the body doesn't decode (truncated, corrupt, wrong type)."""

    code = "malformed_record"


class UnencodableRecordError(PoisonError):
    """A record whose values don't fit its schema (e.g. a page number beyond 32 bits)."""

    code = "unencodable_record"


class SchemaRegistryUnavailableError(RetriableError):
    """The schema registry can't be reached or answered 5xx."""

    code = "schema_registry_unavailable"


class SchemaRegistryRejectedError(FatalError):
    """The registry refused our schema (incompatible with the subject's history) or our request."""

    code = "schema_registry_rejected"
