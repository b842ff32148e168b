"""The assembler's outputs: the adapter between wire records and :mod:`ocrstream.processors`.

The searchable PDF needs the page images the worker recognised. They are not kept: the
source is split again with the splitter's settings (same DPI and limits), which gives the
same bytes — scanned pages pass their original JPEG through, others render identically — so
the PDF carries the original images, and the splitter writes one object per document (the
source) instead of one per page. Runs in a worker thread (MuPDF), never on the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import closing
from datetime import datetime
from pathlib import Path

from ocrstream.processors.assemble import AssembledDocument, assemble, render_outputs
from ocrstream.processors.searchable_pdf import images_from_pages
from ocrstream.processors.split import iter_pages
from ocrstream.schemas.records import PageResult
from ocrstream.settings import LimitsSettings

FORMATS = ("json", "txt", "pdf")  # what a document gets when its pages name no outputs
CONTENT_TYPES = {
    "json": "application/json",
    "txt": "text/plain; charset=utf-8",
    "pdf": "application/pdf",
    "md": "text/markdown; charset=utf-8",
}


def assemble_document(
    doc_id: str,
    page_count: int,
    results: Sequence[PageResult],
    *,
    source_sha256: str | None = None,
    submitted_at: datetime | None = None,
    completed_at: datetime | None = None,
) -> AssembledDocument:
    """The document and its status from the page results that came in."""
    return assemble(
        doc_id,
        page_count,
        {r.page_no: r.to_avro() for r in results},
        source_sha256=source_sha256,
        submitted_at=submitted_at,
        completed_at=completed_at,
    )


def build(
    doc: AssembledDocument,
    formats: Sequence[str],
    source: Path | None,
    *,
    dpi: int,
    limits: LimitsSettings,
) -> dict[str, tuple[bytes, str]]:
    """The requested outputs as (bytes, content type); the PDF only when ``source`` is set."""
    wanted = [f for f in formats if f in CONTENT_TYPES]
    if "pdf" not in wanted or source is None:
        rendered = render_outputs(doc, None, [f for f in wanted if f != "pdf"])
    else:
        pages = iter_pages(str(source), None, limits, dpi=dpi)
        with closing(pages):  # type: ignore[type-var]
            rendered = render_outputs(doc, images_from_pages(pages), wanted)
    return {name: (data, CONTENT_TYPES[name]) for name, data in rendered.items()}
