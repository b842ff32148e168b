"""The page cache's content key: which pages are the same work.

Two pages may share a result when their image is the same bytes as the splitter emitted them
and the engine that reads them would read them the same way. The key is the SHA-256 of a
canonical JSON of the image's SHA-256, the engine fingerprint, the parse mode and the task's
engine options. The engine fingerprint (:func:`engine_fingerprint`) covers what changes a
result: the model files' SHA-256, the backend family, and every option that changes what is
read (precision, limits, thresholds, orientation …). Options that only change speed may be
left out by the caller; leaving in one too many only costs hits, never a wrong answer.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping


def _digest(obj: object) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def engine_fingerprint(
    backend: str, models: Mapping[str, str], options: Mapping[str, object]
) -> str:
    """A hex digest of the backend family, the model files (name → SHA-256) and the options
    that change results."""
    return _digest({"backend": backend, "models": dict(models), "options": dict(options)})


def content_key(
    image: bytes, fingerprint: str, *, mode: str, options: Mapping[str, str] | None = None
) -> str:
    """The cache key of a page image read by the engine ``fingerprint`` in parse ``mode``."""
    return _digest(
        {
            "image": hashlib.sha256(image).hexdigest(),
            "engine": fingerprint,
            "mode": mode,
            "options": dict(options or {}),
        }
    )
