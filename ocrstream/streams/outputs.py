"""The assembler's outputs: document.json, document.txt and document.pdf from page results.

An adapter between the wire records (:class:`PageResult`) and the pure builders in
:mod:`ocrstream.processors`; it runs in the assembler's worker thread.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ocrstream.schemas.records import PageResult, PageStatus

FORMATS = ("json", "txt", "pdf")
CONTENT_TYPES = {
    "json": "application/json",
    "txt": "text/plain; charset=utf-8",
    "pdf": "application/pdf",
}


def page_dict(result: PageResult) -> dict[str, Any]:
    """One page in the shape of document.json."""
    out: dict[str, Any] = {
        "page_no": result.page_no,
        "status": result.status.value,
        "width": result.width,
        "height": result.height,
        "rotation": result.rotation,
        "lines": [
            {
                "text": line.text,
                "confidence": round(float(line.confidence), 4),
                "polygon": [[round(p.x, 1), round(p.y, 1)] for p in line.polygon],
            }
            for line in result.lines
        ],
    }
    if result.error is not None:
        out["error"] = {"code": result.error.code, "message": result.error.message}
    return out


def document_dict(
    doc_id: str, status: str, page_count: int, results: Sequence[PageResult]
) -> dict[str, Any]:
    by_page = {r.page_no: r for r in results}
    engine = next(
        (r.engine for r in results if r.engine is not None and r.engine.backend != "text-layer"),
        next((r.engine for r in results if r.engine is not None), None),
    )
    pages = []
    for page_no in range(1, page_count + 1):
        r = by_page.get(page_no)
        if r is None:
            pages.append({"page_no": page_no, "status": "missing", "width": 0, "height": 0,
                          "rotation": 0, "lines": []})  # fmt: skip
        else:
            pages.append(page_dict(r))
    return {
        "doc_id": doc_id,
        "status": status,
        "page_count": page_count,
        "engine": engine.to_avro() if engine is not None else None,
        "pages": pages,
    }


def document_text(page_count: int, results: Sequence[PageResult]) -> str:
    """Plain text in reading order; pages separated by a form feed."""
    by_page = {r.page_no: r for r in results}
    texts = []
    for page_no in range(1, page_count + 1):
        r = by_page.get(page_no)
        ok = r is not None and r.status is not PageStatus.FAILED
        texts.append("\n".join(line.text for line in r.lines) if ok and r else "")
    return "\n\f".join(texts) + "\n"


def build(
    doc_id: str,
    status: str,
    page_count: int,
    results: Sequence[PageResult],
    formats: Sequence[str],
    source: Path | None,
    dpi: int = 200,
) -> dict[str, tuple[bytes, str]]:
    """The requested outputs as (bytes, content type); the PDF only when ``source`` is set."""
    out: dict[str, tuple[bytes, str]] = {}
    if "json" in formats:
        doc = document_dict(doc_id, status, page_count, results)
        out["json"] = (json.dumps(doc, ensure_ascii=False).encode(), CONTENT_TYPES["json"])
    if "txt" in formats:
        out["txt"] = (document_text(page_count, results).encode(), CONTENT_TYPES["txt"])
    if "pdf" in formats and source is not None:
        from ocrstream.streams import pdf_layer

        out["pdf"] = (pdf_layer.searchable_pdf(source, results, dpi=dpi), CONTENT_TYPES["pdf"])
    return out
