"""File extensions of the media types accepted as documents (for ``scans/{doc_id}/source.ext``)."""

from __future__ import annotations

EXTENSIONS: dict[str, str] = {
    "application/pdf": "pdf",
    "image/jpeg": "jpg",
    "image/png": "png",
    "image/tiff": "tif",
    "image/bmp": "bmp",
    "image/webp": "webp",
    "image/gif": "gif",
    "image/jp2": "jp2",
}


def extension(media_type: str) -> str:
    return EXTENSIONS.get(media_type, "bin")
