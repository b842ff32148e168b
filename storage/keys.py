"""Object keys and ``s3://`` URIs: doc_id validation and the deterministic layout of
docs/architecture.md ("Storage").

::

    {prefix}scans/{doc_id}/source.{ext}          what producers upload
    {prefix}scans/{doc_id}/submission.json       the HTTP API's record of it (tenant, time)
    {prefix}tenants/{tenant}/documents/{10^13 - ms}-{doc_id}   a tenant's documents, newest first
    {prefix}pages/{doc_id}/{page_no:05d}.{ext}   claim-check for big page images (expires)
    {prefix}documents/{doc_id}/document.{json,txt,pdf,md}
    {prefix}documents/{doc_id}/figures/p{page}-{i}.png   layout mode: figure crops
    {prefix}documents/{doc_id}/viewer/{page_no:05d}.jpg   the web UI's page image, made once
    {prefix}engine/auto-backend/{key}.json       ``auto``'s measured CPU backends, per machine kind

Keys are pure functions of their inputs, so a replay overwrites instead of duplicating. A
doc_id is the only part that comes from outside, and it is validated before it becomes a key.
"""

from __future__ import annotations

import re
import unicodedata
from typing import NamedTuple

from ocrstream.errors import InvalidDocIdError, PoisonError

DOC_ID_MAX = 128
_DOC_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
_EXT = re.compile(r"[a-z0-9]{1,10}")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_KEY_MAX_BYTES = 1024
MAX_PAGE_NO = 99_999  # the layout's five digits
DOCUMENT_FORMATS = ("json", "txt", "pdf", "md")
_FIGURE = re.compile(r"figures/p[1-9][0-9]{0,4}-[1-9][0-9]{0,4}\.png")
_CHOICE = re.compile(r"[0-9a-f]{24}\.json")


class InvalidUriError(PoisonError):
    """An object URI that is not ``s3://bucket/key`` with a valid bucket and key."""

    code = "invalid_uri"


def validate_doc_id(doc_id: object) -> str:
    """``doc_id`` if it matches ``[A-Za-z0-9._-]{1,128}`` and isn't ``.`` or ``..``.

    Raises :class:`InvalidDocIdError` saying exactly what is wrong; the message shows the id
    with control characters escaped, so it is safe to log.
    """
    if not isinstance(doc_id, str):
        raise InvalidDocIdError(f"doc_id must be a string, got {type(doc_id).__name__}")
    shown = ascii(doc_id[:64]) + ("…" if len(doc_id) > 64 else "")
    if not doc_id:
        raise InvalidDocIdError("doc_id is empty")
    if len(doc_id) > DOC_ID_MAX:
        raise InvalidDocIdError(f"doc_id is {len(doc_id)} characters, over {DOC_ID_MAX}: {shown}")
    if "\x00" in doc_id:
        raise InvalidDocIdError(f"doc_id contains a NUL character: {shown}")
    if any(unicodedata.category(c) == "Cc" for c in doc_id):
        raise InvalidDocIdError(f"doc_id contains control characters: {shown}")
    if "/" in doc_id or "\\" in doc_id:
        raise InvalidDocIdError(f"doc_id contains a slash: {shown}")
    if doc_id in (".", "..") or ".." in doc_id:
        raise InvalidDocIdError(f"doc_id contains '..' or is '.': {shown}")
    if not _DOC_ID.fullmatch(doc_id):
        bad = sorted({c for c in doc_id if not _DOC_ID.fullmatch(c)})
        raise InvalidDocIdError(
            f"doc_id may only hold A-Z a-z 0-9 . _ -, found {''.join(bad)!a}: {shown}"
        )
    return doc_id


def _ext(ext: str) -> str:
    ext = ext.lower().lstrip(".")
    if not _EXT.fullmatch(ext):
        raise ValueError(f"file extension must be 1-10 letters or digits, got {ext!r}")
    return ext


def normalize_prefix(prefix: str) -> str:
    """``""`` or ``"a/b/"``: no leading slash, one trailing slash, no empty/dot segments."""
    parts = [p for p in prefix.strip("/").split("/") if p]
    if any(p in (".", "..") or not p.isprintable() for p in parts):
        raise ValueError(f"invalid key prefix {prefix!r}")
    return "".join(f"{p}/" for p in parts)


class Keys:
    """The deterministic keys of docs/architecture.md ("Storage") under an optional prefix
    (S3Settings.key_prefix)."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = normalize_prefix(prefix)

    def source(self, doc_id: str, ext: str) -> str:
        return f"{self.prefix}scans/{validate_doc_id(doc_id)}/source.{_ext(ext)}"

    def sources_prefix(self, doc_id: str) -> str:
        """The document's stored source, whatever its extension."""
        return f"{self.prefix}scans/{validate_doc_id(doc_id)}/source."

    def submission(self, doc_id: str) -> str:
        """What the HTTP API records of an upload: its tenant, time, file name and size."""
        return f"{self.prefix}scans/{validate_doc_id(doc_id)}/submission.json"

    def tenant_document(self, tenant: str, doc_id: str, submitted_ms: int) -> str:
        """The tenant's index entry of a document: newest first in key order (the time is
        counted down from 10^13 ms, the year 2286)."""
        countdown = 10**13 - submitted_ms
        return f"{self.tenant_documents_prefix(tenant)}{countdown:013d}-{validate_doc_id(doc_id)}"

    def tenant_documents_prefix(self, tenant: str) -> str:
        return f"{self.prefix}tenants/{validate_doc_id(tenant)}/documents/"

    def page(self, doc_id: str, page_no: int, ext: str) -> str:
        if not 1 <= page_no <= MAX_PAGE_NO:
            raise ValueError(f"page_no must be 1..{MAX_PAGE_NO}, got {page_no}")
        return f"{self.prefix}pages/{validate_doc_id(doc_id)}/{page_no:05d}.{_ext(ext)}"

    def document(self, doc_id: str, fmt: str) -> str:
        if fmt not in DOCUMENT_FORMATS:
            raise ValueError(f"document format must be one of {DOCUMENT_FORMATS}, got {fmt!r}")
        return f"{self.prefix}documents/{validate_doc_id(doc_id)}/document.{fmt}"

    def viewer_page(self, doc_id: str, page_no: int) -> str:
        """The web UI's image of a page, rendered from the source on its first view."""
        if not 1 <= page_no <= MAX_PAGE_NO:
            raise ValueError(f"page_no must be 1..{MAX_PAGE_NO}, got {page_no}")
        return f"{self.documents_prefix(doc_id)}viewer/{page_no:05d}.jpg"

    def figure(self, doc_id: str, path: str) -> str:
        """A figure crop, ``path`` as document.md links it (``figures/p1-1.png``)."""
        if not _FIGURE.fullmatch(path):
            raise ValueError(f"figure path must be figures/p<page>-<i>.png, got {path!r}")
        return f"{self.prefix}documents/{validate_doc_id(doc_id)}/{path}"

    def figures_prefix(self, doc_id: str) -> str:
        return f"{self.prefix}documents/{validate_doc_id(doc_id)}/figures/"

    def pages_prefix(self, doc_id: str) -> str:
        """Every claim-check page image of one document."""
        return f"{self.prefix}pages/{validate_doc_id(doc_id)}/"

    def documents_prefix(self, doc_id: str) -> str:
        return f"{self.prefix}documents/{validate_doc_id(doc_id)}/"

    def revision_document(self, doc_id: str, revision: int, fmt: str) -> str:
        """An earlier revision's output, kept when a reprocess wrote the next one."""
        if revision < 1:
            raise ValueError(f"revision must be 1 or more, got {revision}")
        latest = self.document(doc_id, fmt)
        head, _, name = latest.rpartition("/")
        return f"{head}/rev-{revision}/{name}"

    def revisions_prefix(self, doc_id: str) -> str:
        """Every kept earlier revision of one document (``rev-{n}/`` under it)."""
        return f"{self.documents_prefix(doc_id)}rev-"

    def engine_choice(self, name: str) -> str:
        """``auto``'s measured backend choice kept for every worker on the same kind of CPU,
        threads and models (``name``: its engine-cache file name, ``<24 hex>.json``)."""
        if not _CHOICE.fullmatch(name):
            raise ValueError(f"not an auto-backend file name: {name!r}")
        return f"{self.prefix}engine/auto-backend/{name}"

    def reprocess_prefix(self, run: str) -> str:
        """What one ``ocrstream reprocess`` run recorded (its plan, what it submitted)."""
        return f"{self.prefix}reprocess/{validate_doc_id(run)}/"

    @property
    def pipeline_prefixes(self) -> tuple[str, ...]:
        """Where the pipeline's own objects live (sources, page images, outputs): they belong
        to documents, so nothing from outside may name them as a source."""
        return tuple(f"{self.prefix}{area}/" for area in ("scans", "pages", "documents"))

    @property
    def claim_check_prefix(self) -> str:
        """Where the expiring claim-check objects live (the lifecycle rule's filter)."""
        return f"{self.prefix}pages/"


class S3Uri(NamedTuple):
    bucket: str
    key: str

    def __str__(self) -> str:
        return format_s3_uri(self.bucket, self.key)


def _check_bucket(bucket: str) -> None:
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise InvalidUriError(f"invalid bucket name {bucket!r}: 3-63 of a-z 0-9 . -")


def _check_key(key: str) -> None:
    if not key:
        raise InvalidUriError("object key is empty")
    if len(key.encode("utf-8", "surrogatepass")) > _KEY_MAX_BYTES:
        raise InvalidUriError(f"object key is over {_KEY_MAX_BYTES} bytes")
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in key):
        raise InvalidUriError(f"object key contains control characters: {key[:80]!a}")


def format_s3_uri(bucket: str, key: str) -> str:
    _check_bucket(bucket)
    _check_key(key)
    return f"s3://{bucket}/{key}"


def parse_s3_uri(uri: str) -> S3Uri:
    """``s3://bucket/key`` as (bucket, key); raises :class:`InvalidUriError` if it isn't one."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise InvalidUriError(f"not an s3:// URI: {str(uri)[:80]!a}")
    bucket, sep, key = uri[len("s3://") :].partition("/")
    if not sep:
        raise InvalidUriError(f"s3 URI has no object key: {uri[:80]!a}")
    _check_bucket(bucket)
    _check_key(key)
    return S3Uri(bucket, key)
