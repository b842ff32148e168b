"""The assembler's outputs: the adapter between wire records and :mod:`ocrstream.processors`.

The searchable PDF of a PDF source is the source itself with an invisible text layer on each
page that was recognised (:func:`~ocrstream.processors.searchable_pdf.graft_text_layer`):
its vector content, born-digital text, images in their own encoding (CCITT, JBIG2, JPEG),
annotations and outline are kept, and nothing is rendered. An image source (JPEG, PNG,
TIFF …) becomes a PDF of its images: they are not kept, so the source is split again with
the splitter's settings (same limits), which gives the very bytes the worker recognised, and
the splitter writes one object per document (the source) instead of one per page. Runs in a
worker thread (MuPDF), never on the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import closing
from datetime import datetime
from pathlib import Path

from ocrstream.processors.assemble import AssembledDocument, assemble, render_outputs
from ocrstream.processors.figures import FigurePage, crop_figures
from ocrstream.processors.layout.markdown import page_figures
from ocrstream.processors.searchable_pdf import images_from_pages, source_searchable_pdf
from ocrstream.processors.split import iter_pages
from ocrstream.schemas.records import TEXT_LAYER_BACKEND, PageResult
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
    rendered = render_outputs(doc, [f for f in wanted if f != "pdf"])
    if "pdf" in wanted and source is not None and doc.page_count > 0:
        rendered["pdf"] = source_searchable_pdf(
            source,
            doc.page_count,
            {page.page_no: page.ocr for page in doc.pages},
            own_text=[
                p.page_no
                for p in doc.pages
                if (p.engine or {}).get("backend") == TEXT_LAYER_BACKEND
            ],
            dpi=dpi,
            limits=limits,
            title=doc.doc_id,
        )
    return {name: (data, CONTENT_TYPES[name]) for name, data in rendered.items()}


def has_figures(doc: AssembledDocument) -> bool:
    """Does the document have figure blocks to crop (layout mode)?"""
    return any(page_figures(p.page_no, p.ocr.blocks) for p in doc.pages if p.readable)


def figures(
    doc: AssembledDocument, source: Path, *, dpi: int, limits: LimitsSettings
) -> dict[str, bytes]:
    """The figure crops of the document by their path under its folder
    (``figures/p1-1.png``), cut from the source split again (module docstring)."""
    pages = [
        FigurePage(p.page_no, p.ocr.width, p.ocr.height, p.ocr.rotation, p.ocr.blocks)
        for p in doc.pages
        if p.readable and p.ocr.blocks
    ]
    split = iter_pages(str(source), None, limits, dpi=dpi)
    with closing(split):  # type: ignore[type-var]
        return dict(crop_figures(pages, images_from_pages(split)))
