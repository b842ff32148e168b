"""Assembling a document from its page results: document.json, document.txt, document.pdf.

Pure: the assembler agent collects the page results of a document (de-duplicated by page
number), calls :func:`assemble` once every page is in or the deadline passed, and stores what
:func:`render_outputs` returns (document.pdf comes from
:func:`~ocrstream.processors.searchable_pdf.source_searchable_pdf`, which needs the source).

Status: ``completed`` when every page is ``ok`` or ``empty``; ``failed`` when none is;
``partial`` otherwise — pages that ``failed`` are listed in ``failed_pages``, pages that never
arrived in ``missing_pages``, and ``error`` says how many and which.

Page results may be :class:`~ocrstream.processors.ocr.types.PageOCR` objects or mappings in the
page shape of document.json — or of the PageResult record (``polygon`` as ``{x, y}`` points,
an optional ``engine``), so ``PageResult.to_avro()`` can be passed as it is.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ocrstream.errors import ReasonCode
from ocrstream.processors.layout.blocks import Block
from ocrstream.processors.layout.markdown import MarkdownPage, render_markdown
from ocrstream.processors.ocr.types import Line, PageOCR
from ocrstream.processors.regions import Field

log = logging.getLogger(__name__)

OUTPUT_FILES = {
    "json": "document.json",
    "txt": "document.txt",
    "pdf": "document.pdf",
    "md": "document.md",
}
READABLE = frozenset({"ok", "empty"})
_LISTED = 20  # page numbers quoted in an error message

PageInput = PageOCR | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class AssembledPage:
    """One page of the document: its recognition result and the engine that produced it."""

    page_no: int
    ocr: PageOCR
    engine: Mapping[str, str] | None = None

    @property
    def readable(self) -> bool:
        return self.ocr.status in READABLE

    def to_dict(self) -> dict[str, Any]:
        out = self.ocr.to_dict(self.page_no)
        if self.engine:
            out["engine"] = dict(self.engine)
        return out


@dataclass(frozen=True, slots=True)
class AssembledDocument:
    """A document's pages put together, with its status; renders document.json and .txt."""

    doc_id: str
    status: str  # completed | partial | failed
    page_count: int
    pages: tuple[AssembledPage, ...]  # the pages received, by page number
    missing_pages: tuple[int, ...] = ()
    failed_pages: tuple[int, ...] = ()
    engine: Mapping[str, str] = field(default_factory=dict)
    error_code: str | None = None
    error_message: str | None = None
    source_sha256: str | None = None
    submitted_at: datetime | None = None
    completed_at: datetime | None = None
    revision: int = 1  # which reading of the document (ocrstream reprocess makes the next)

    @property
    def pages_ok(self) -> int:
        return sum(1 for page in self.pages if page.readable)

    @property
    def pages_failed(self) -> int:
        return self.page_count - self.pages_ok

    def page(self, page_no: int) -> AssembledPage | None:
        return next((p for p in self.pages if p.page_no == page_no), None)

    def to_dict(self) -> dict[str, Any]:
        """document.json, in the shape of ``schemas/document.schema.json``."""
        out: dict[str, Any] = {
            "doc_id": self.doc_id,
            "status": self.status,
            "page_count": self.page_count,
            "revision": self.revision,
            "engine": {
                "backend": self.engine.get("backend", ""),
                "model": self.engine.get("model", ""),
                "version": self.engine.get("version", ""),
            },
        }
        if self.source_sha256:
            out["source_sha256"] = self.source_sha256
        if self.submitted_at is not None:
            out["submitted_at"] = self.submitted_at.isoformat()
        if self.completed_at is not None:
            out["completed_at"] = self.completed_at.isoformat()
        if self.missing_pages:
            out["missing_pages"] = list(self.missing_pages)
        if self.error_code:
            out["error"] = {"code": self.error_code, "message": self.error_message or ""}
        fields = self.fields()
        if fields:
            out["fields"] = fields
        out["pages"] = [page.to_dict() for page in self.pages]
        return out

    def fields(self) -> dict[str, dict[str, Any]]:
        """Key-field mode: each named region's reading, ``{name: {text, confidence, page,
        bbox}}``; a name read on several pages (a region on every page) keeps the first page
        where it has text."""
        out: dict[str, dict[str, Any]] = {}
        for page in self.pages:
            for found in page.ocr.fields or ():
                if found.name not in out or (found.text and not out[found.name]["text"]):
                    out[found.name] = found.to_dict(page.page_no)
        return out

    def json_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":")).encode()

    def text(self) -> str:
        """document.txt: each page's lines in reading order, each page ended by a form feed
        (as ``pdftotext`` writes it); pages without text are empty between form feeds."""
        by_no = {page.page_no: page for page in self.pages}
        out = []
        for page_no in range(1, self.page_count + 1):
            page = by_no.get(page_no)
            body = page_text(page.ocr.lines) if page is not None and page.readable else ""
            out.append(f"{body}\n\f" if body else "\f")
        return "".join(out)

    def markdown(self) -> str:
        """document.md: every page 1..page_count after its page-break marker; pages read in
        layout mode rendered from their blocks (:mod:`ocrstream.processors.layout.markdown`),
        others as their lines, unreadable ones as the marker alone."""
        by_no = {page.page_no: page for page in self.pages}
        pages = []
        for page_no in range(1, self.page_count + 1):
            page = by_no.get(page_no)
            if page is None or not page.readable:
                pages.append(MarkdownPage(page_no, (), ()))
                continue
            lines = tuple(line.text for line in page.ocr.lines)
            if page.ocr.blocks is None:
                lines = tuple(page_text(page.ocr.lines).split("\n"))
            pages.append(MarkdownPage(page_no, page.ocr.blocks, lines))
        return render_markdown(pages)


def page_text(lines: Sequence[Line]) -> str:
    """A page's text: the engine's reading order, one line per text line. Consecutive pieces
    that the detector split on one row (same height band, a small gap) are joined by a space."""
    rows: list[str] = []
    previous: Line | None = None
    for line in lines:
        text = line.text.strip()
        if not text:
            continue
        if previous is not None and rows and _same_row(previous, line):
            rows[-1] = f"{rows[-1]} {text}"
        else:
            rows.append(text)
        previous = line
    return "\n".join(rows)


def _same_row(a: Line, b: Line) -> bool:
    _, ay0, ax1, ay1 = _bounds(a)
    bx0, by0, _, by1 = _bounds(b)
    height = min(ay1 - ay0, by1 - by0)
    if height <= 0:
        return False
    overlap = min(ay1, by1) - max(ay0, by0)
    gap = bx0 - ax1
    return overlap >= 0.5 * height and -0.5 * height <= gap <= 2.0 * height


def _bounds(line: Line) -> tuple[float, float, float, float]:
    xs = [p[0] for p in line.polygon]
    ys = [p[1] for p in line.polygon]
    return min(xs), min(ys), max(xs), max(ys)


# -- inputs ---------------------------------------------------------------------------------


def _point(value: Any) -> tuple[float, float]:
    if isinstance(value, Mapping):
        return float(value["x"]), float(value["y"])
    x, y = value
    return float(x), float(y)


def page_from_mapping(data: Mapping[str, Any]) -> tuple[PageOCR, Mapping[str, str] | None]:
    """A page result in the document.json or PageResult shape, as a PageOCR and its engine."""
    lines = tuple(
        Line(
            text=str(line.get("text", "")),
            confidence=float(line.get("confidence", 0.0)),
            polygon=tuple(_point(p) for p in line.get("polygon", ())),  # type: ignore[arg-type]
        )
        for line in data.get("lines") or ()
    )
    error = data.get("error") or {}
    status = str(getattr(data.get("status"), "value", data.get("status") or "failed"))
    if status not in ("ok", "empty", "failed"):
        status = "failed"  # readers map statuses they don't know to failed
    engine = data.get("engine")
    blocks = data.get("blocks")
    fields = data.get("fields") or ()
    ocr = PageOCR(
        width=int(data.get("width") or 0),
        height=int(data.get("height") or 0),
        lines=lines,
        rotation=int(data.get("rotation") or 0),
        status=status,
        error_code=error.get("code") if error else None,
        error_message=error.get("message") if error else None,
        skew=float(data.get("skew") or 0.0),
        blocks=None if blocks is None else tuple(Block.from_mapping(b) for b in blocks),
        fields=tuple(_field(f) for f in fields) or None,
    )
    return ocr, ({k: str(v) for k, v in engine.items()} if engine else None)


def _field(data: Mapping[str, Any]) -> Field:
    x0, y0, x1, y1 = (float(v) for v in (data.get("bbox") or (0, 0, 0, 0)))
    return Field(str(data.get("name", "")), str(data.get("text", "")),
                 float(data.get("confidence", 0.0)), (x0, y0, x1, y1))  # fmt: skip


def _page(page_no: int, result: PageInput) -> AssembledPage:
    if isinstance(result, PageOCR):
        return AssembledPage(page_no, result)
    ocr, engine = page_from_mapping(result)
    return AssembledPage(page_no, ocr, engine)


def _listed(pages: Iterable[int]) -> str:
    pages = list(pages)
    shown = ", ".join(str(p) for p in pages[:_LISTED])
    return shown + (f" and {len(pages) - _LISTED} more" if len(pages) > _LISTED else "")


def _common_engine(pages: Sequence[AssembledPage]) -> dict[str, str]:
    engines = Counter(
        tuple(sorted(p.engine.items())) for p in pages if p.engine and p.readable
    ) or Counter(tuple(sorted(p.engine.items())) for p in pages if p.engine)
    return dict(engines.most_common(1)[0][0]) if engines else {}


def assemble(
    doc_id: str,
    page_count: int,
    results: Mapping[int, PageInput],
    *,
    engine: Mapping[str, str] | None = None,
    source_sha256: str | None = None,
    submitted_at: datetime | None = None,
    completed_at: datetime | None = None,
) -> AssembledDocument:
    """Put a document's page results together and decide its status.

    ``results`` maps page numbers (1-based) to results; page numbers outside
    ``1..page_count`` are ignored. ``engine`` defaults to the engine most pages name.
    """
    pages = tuple(
        _page(page_no, results[page_no])
        for page_no in sorted(results)
        if 1 <= page_no <= page_count
    )
    ignored = sorted(set(results) - {p.page_no for p in pages})
    if ignored:
        log.warning("%s: ignoring results for pages %s of %d", doc_id, _listed(ignored), page_count)
    received = {p.page_no for p in pages}
    missing = tuple(n for n in range(1, page_count + 1) if n not in received)
    failed = tuple(p.page_no for p in pages if not p.readable)
    ok = len(pages) - len(failed)
    code: str | None
    message: str | None
    if page_count <= 0:
        status, code, message = "failed", str(ReasonCode.ZERO_PAGES), "the document has no pages"
    elif not failed and not missing:
        status, code, message = "completed", None, None
    else:
        status = "failed" if ok == 0 else "partial"
        code, message = _error(pages, failed, missing, page_count)
    return AssembledDocument(
        doc_id=doc_id,
        status=status,
        page_count=max(page_count, 0),
        pages=pages,
        missing_pages=missing,
        failed_pages=failed,
        engine=dict(engine) if engine else _common_engine(pages),
        error_code=code,
        error_message=message,
        source_sha256=source_sha256,
        submitted_at=submitted_at,
        completed_at=completed_at,
    )


def _error(
    pages: Sequence[AssembledPage],
    failed: Sequence[int],
    missing: Sequence[int],
    page_count: int,
) -> tuple[str, str]:
    codes = {p.ocr.error_code or ReasonCode.PAGES_FAILED for p in pages if not p.readable}
    if missing:
        codes.add(ReasonCode.PAGES_MISSING)
    code = str(codes.pop()) if len(codes) == 1 else str(ReasonCode.PAGES_FAILED)
    parts = []
    if failed:
        parts.append(f"pages {_listed(failed)} failed")
    if missing:
        parts.append(f"pages {_listed(missing)} never arrived")
    unread = len(failed) + len(missing)
    return code, f"{unread} of {page_count} pages could not be read: " + "; ".join(parts)


# -- outputs --------------------------------------------------------------------------------


def render_outputs(
    doc: AssembledDocument, outputs: Iterable[str] = ("json", "txt")
) -> dict[str, bytes]:
    """The requested text outputs by name (``json``, ``txt``, ``md``; see :data:`OUTPUT_FILES`).
    ``pdf`` needs the source file and is made by
    :func:`~ocrstream.processors.searchable_pdf.source_searchable_pdf`; it is ignored here."""
    wanted = set(outputs)
    out: dict[str, bytes] = {}
    if "json" in wanted:
        out["json"] = doc.json_bytes()
    if "txt" in wanted:
        out["txt"] = doc.text().encode()
    if "md" in wanted:
        out["md"] = doc.markdown().encode()
    return out
