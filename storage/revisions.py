"""Earlier revisions of a document's outputs in the store.

The latest revision's outputs are always at ``documents/{doc_id}/document.{fmt}`` (what every
reader already fetches); each carries its revision in the object's metadata
(``x-amz-meta-revision``; an object without it is revision 1). Before revision ``n`` is written
there, :func:`archive_latest` copies what the latest keys hold (revision ``n - 1``, or older)
to ``documents/{doc_id}/rev-{r}/document.{fmt}`` on the server, removes a latest output that
revision ``n`` will not write again (so the latest keys hold one revision only), and deletes
archived revisions beyond the ``keep`` most recent. It is idempotent: a retry after a crash
finds the latest keys still at the old revision (copied again, the same bytes) or already at
``n`` (nothing to do).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection

from ocrstream.storage.errors import ObjectNotFoundError
from ocrstream.storage.keys import DOCUMENT_FORMATS
from ocrstream.storage.objectstore import ObjectInfo, ObjectStore

log = logging.getLogger(__name__)

REVISION_METADATA = "revision"  # the user-metadata key (x-amz-meta-revision)
_REV = re.compile(r"rev-(\d+)/")


def revision_metadata(revision: int) -> dict[str, str]:
    """The metadata an output of ``revision`` is written with."""
    return {REVISION_METADATA: str(revision)}


def stored_revision(store: ObjectStore, doc_id: str, fmt: str) -> int | None:
    """The revision of the latest ``fmt`` output, or None when there is none."""
    try:
        info = store.stat(store.keys.document(doc_id, fmt))
    except ObjectNotFoundError:
        return None
    return int(info.metadata.get(REVISION_METADATA) or 1)


def archive_latest(
    store: ObjectStore, doc_id: str, revision: int, formats: Collection[str], *, keep: int
) -> int | None:
    """Make room at the latest keys for ``revision``'s ``formats``: earlier outputs go under
    ``rev-{r}/`` (at most ``keep`` earlier revisions stay). Returns the revision archived."""
    if revision <= 1:
        return None
    archived: int | None = None
    for fmt in DOCUMENT_FORMATS:
        old = stored_revision(store, doc_id, fmt)
        if old is None or old >= revision:
            continue
        latest = store.keys.document(doc_id, fmt)
        if keep > 0:
            store.copy(latest, store.keys.revision_document(doc_id, old, fmt))
        if fmt not in formats:
            store.delete(latest)
        archived = old if archived is None else max(archived, old)
    prune(store, doc_id, oldest_kept=revision - keep)
    if archived is not None:
        log.info("revision %d of %s kept under rev-%d/", archived, doc_id, archived)
    return archived


def prune(store: ObjectStore, doc_id: str, *, oldest_kept: int) -> int:
    """Delete the archived revisions of ``doc_id`` older than ``oldest_kept``; returns how many
    objects went."""
    gone = 0
    for info in kept_revisions_listing(store, doc_id):
        match = _REV.search(info.key, len(store.keys.documents_prefix(doc_id)))
        if match and int(match.group(1)) < oldest_kept:
            store.delete(info.key)
            gone += 1
    return gone


def kept_revisions(store: ObjectStore, doc_id: str) -> list[int]:
    """The earlier revisions of ``doc_id`` kept in the store, ascending."""
    found: set[int] = set()
    for info in kept_revisions_listing(store, doc_id):
        match = _REV.search(info.key, len(store.keys.documents_prefix(doc_id)))
        if match:
            found.add(int(match.group(1)))
    return sorted(found)


def kept_revisions_listing(store: ObjectStore, doc_id: str) -> list[ObjectInfo]:
    """Every object under ``documents/{doc_id}/rev-``."""
    try:
        return list(store.list_objects(store.keys.revisions_prefix(doc_id)))
    except ObjectNotFoundError:
        return []
