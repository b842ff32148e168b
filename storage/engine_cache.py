"""``auto``'s measured CPU backend choices in the object store, shared by workers.

A Kubernetes pod starts with an empty engine cache (an ``emptyDir``), so every OCR worker
with ``OCRSTREAM_OCR_BACKEND=auto`` would measure the CPU backends before its first page
(~11 s on 2 cores, :mod:`ocrstream.processors.ocr.backends.choice`), on every scale-out. With
the choice kept at ``{prefix}engine/auto-backend/<key>.json`` (the key covers the CPU model
and flags, the thread count, the backends' versions and the model files), the first worker on
a kind of node measures and the others read its answer.
"""

from __future__ import annotations

from ocrstream.storage.errors import ObjectNotFoundError
from ocrstream.storage.objectstore import ObjectStore

# A kept choice is ~2 KB of JSON; anything far larger under that key is not one.
MAX_BYTES = 1 << 20


class StoredChoices:
    """:class:`~ocrstream.processors.ocr.backends.choice.SharedChoices` in an object store."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def fetch(self, name: str) -> bytes | None:
        try:
            return self.store.get_bytes(self.store.keys.engine_choice(name), max_bytes=MAX_BYTES)
        except ObjectNotFoundError:
            return None

    def keep(self, name: str, data: bytes) -> None:
        key = self.store.keys.engine_choice(name)
        self.store.put_bytes(key, data, content_type="application/json")

    def where(self, name: str) -> str:
        return self.store.uri(self.store.keys.engine_choice(name))
