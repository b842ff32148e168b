"""``GET /v1/documents/{doc_id}/pages/{page_no}.jpg``: the web UI's page images, made once.

The pipeline keeps no page image a viewer could use: the splitter sends most pages inline on
``ocr.pages.v1`` and puts only big ones in the store, under ``pages/`` where they expire in
days. So the first request for a page renders it from the document's source
(``scans/{doc_id}/source.{ext}``, or the object a ``source_uri`` named) with the splitter's own
code (:func:`ocrstream.processors.split.one_page`), turned as document.json says the engine read
it (:mod:`ocrstream.processors.viewer_image`), and stores it at
``documents/{doc_id}/viewer/{page_no:05d}.jpg``; every later view, on any replica, is that
object. Only a finished document's pages are rendered (its document.json says how each page
was turned).

Renders run one at a time per process (MuPDF is not thread-safe, and a render is CPU work the
API should not multiply); a request that waited re-checks the store first, so concurrent first
views of one page render it once.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ocrstream.errors import PoisonError
from ocrstream.processors.split import one_page
from ocrstream.processors.viewer_image import viewer_image
from ocrstream.settings import LimitsSettings
from ocrstream.storage import ObjectNotFoundError, ObjectStore
from ocrstream.storage.keys import parse_s3_uri

log = logging.getLogger(__name__)

MAX_IMAGE_BYTES = 32 * 1024 * 1024
MAX_DOCUMENT_JSON_BYTES = 256 * 1024 * 1024


class NoPageImage(Exception):
    """The page has no viewer image (yet): the document is not finished, the page is not in
    it or could not be read, or the source is gone."""


class PageImages:
    """The viewer's page images: from the store, or rendered and stored on a first view."""

    def __init__(self, store: ObjectStore, limits: LimitsSettings, *, max_side: int = 1600,
                 dpi: int = 150) -> None:  # fmt: skip
        self.store = store
        self.limits = limits
        self.max_side = max_side
        self.dpi = dpi
        self._render_lock = threading.Lock()

    def get(self, doc_id: str, page_no: int, submission: Mapping[str, Any]) -> bytes:
        """The JPEG of page ``page_no`` of ``doc_id`` (blocking); ``submission`` is the API's
        record of the upload (its source URI and media type). Raises :class:`NoPageImage`."""
        key = self.store.keys.viewer_page(doc_id, page_no)
        cached = self._cached(key)
        if cached is not None:
            return cached
        with self._render_lock:
            cached = self._cached(key)
            if cached is not None:
                return cached
            data = self._render(doc_id, page_no, submission)
            self.store.put_bytes(key, data, content_type="image/jpeg")
            log.info("rendered the viewer image of %s page %d (%d bytes)", doc_id, page_no,
                     len(data))  # fmt: skip
            return data

    def _cached(self, key: str) -> bytes | None:
        try:
            data: bytes = self.store.get_bytes(key, max_bytes=MAX_IMAGE_BYTES)
        except ObjectNotFoundError:
            return None
        return data

    def _rotation(self, doc_id: str, page_no: int) -> int:
        """How the engine turned the page (document.json); NoPageImage when the document is
        not finished or the page was not read."""
        try:
            raw = self.store.get_bytes(self.store.keys.document(doc_id, "json"),
                                       max_bytes=MAX_DOCUMENT_JSON_BYTES)  # fmt: skip
        except ObjectNotFoundError as e:
            raise NoPageImage("the document is not finished") from e
        pages = json.loads(raw).get("pages") or []
        page = next((p for p in pages if p.get("page_no") == page_no), None)
        if page is None or page.get("status") == "failed":
            raise NoPageImage(f"page {page_no} was not read")
        return int(page.get("rotation") or 0)

    def _render(self, doc_id: str, page_no: int, submission: Mapping[str, Any]) -> bytes:
        rotation = self._rotation(doc_id, page_no)
        try:
            bucket, key = parse_s3_uri(str(submission.get("source") or ""))
        except PoisonError as e:
            raise NoPageImage("the document has no source in the store") from e
        with tempfile.TemporaryDirectory(prefix="ocrstream-viewer-") as tmp:
            path = Path(tmp) / "source"
            try:
                self.store.get_to_file(key, path, bucket=bucket,
                                       max_bytes=self.limits.max_file_bytes)  # fmt: skip
            except PoisonError as e:  # not found, refused, or over the size limit
                raise NoPageImage(f"the document's source cannot be read: {e}") from e
            try:
                page = one_page(path, submission.get("content_type"), self.limits, page_no,
                                dpi=self.dpi)  # fmt: skip
                return viewer_image(page, rotation, max_side=self.max_side)
            except (PoisonError, IndexError, ValueError) as e:
                raise NoPageImage(f"page {page_no} cannot be rendered: {e}") from e
