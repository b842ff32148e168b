"""``ocrstream ocr FILE…``: the engine in-process, no Kafka, like the ``tesseract`` command.

Images and PDFs. PDF pages are rendered at ``--dpi`` (300) unless a page is one scanned image,
which is used as it is; with ``--skip-text``, pages that carry a usable text layer are answered
from it (confidence 1.0) and not OCRed. Pages of all inputs go through the engine together, in
batches across files (:class:`~ocrstream.processors.ocr.batching.BatchingEngine`, while the
next inputs are split), and each input's output is written as soon as its last page is done:
``DIR/<stem>.json`` (document.json of docs/architecture.md, "Storage"), ``.txt``, ``.md`` or
``.pdf`` (a PDF input with the text layer grafted on, as the assembler writes document.pdf)
with ``--output DIR``, standard output without (one JSON document per line when there are
several inputs; text pages are separated by form feeds, as tesseract does). ``--mode layout``
adds each page's blocks (document.json) and gives ``--format markdown`` its structure.
``--regions FILE.json`` reads only the named boxes it lists (or ``{"template": NAME}`` from
``OCRSTREAM_SPLITTER_REGION_TEMPLATES``; :mod:`ocrstream.processors.regions`) and adds
``fields`` to document.json. With ``--mode layout --format markdown --output DIR`` the figure
crops go to ``DIR/<stem>.figures/`` beside ``<stem>.md``, which links them.

The exit status is 1 when any input failed entirely (its reason on standard error), 2 when the
engine cannot start, 0 otherwise (a document with some failed pages is ``partial``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import click

from ocrstream.cli import allow_quick_exit
from ocrstream.errors import OcrstreamError, PoisonError
from ocrstream.processors.ocr.types import EngineInfo, LayoutPage, PageOCR, RegionsPage
from ocrstream.processors.regions import Region, for_page
from ocrstream.settings import LimitsSettings, OcrBackend, OcrSettings


@dataclass(slots=True)
class _Doc:
    """One input file while it is processed."""

    path: Path
    doc_id: str
    page_count: int = 0
    pages: dict[int, PageOCR] = field(default_factory=dict)
    error_code: str | None = None
    error_message: str | None = None
    split_done: bool = False
    figures: dict[str, bytes] = field(default_factory=dict)  # layout mode: crops by path
    own_text: set[int] = field(default_factory=set)  # pages answered from their text layer

    @property
    def done(self) -> bool:
        return self.split_done and len(self.pages) == self.page_count

    @property
    def status(self) -> str:
        if self.error_code is not None or not self.pages:
            return "failed"
        failed = sum(1 for p in self.pages.values() if p.status == "failed")
        if failed == len(self.pages):
            return "failed"
        return "partial" if failed else "completed"

    def to_dict(self, engine: EngineInfo) -> dict[str, Any]:
        out: dict[str, Any] = {
            "doc_id": self.doc_id,
            "status": self.status,
            "page_count": self.page_count,
            "engine": engine.to_dict(),
            "pages": [self.pages[n].to_dict(n) for n in sorted(self.pages)],
        }
        fields: dict[str, Any] = {}
        for n in sorted(self.pages):
            for found in self.pages[n].fields or ():
                if found.name not in fields or (found.text and not fields[found.name]["text"]):
                    fields[found.name] = found.to_dict(n)
        if fields:
            out["fields"] = fields
        if self.error_code is not None:
            out["error"] = {"code": self.error_code, "message": self.error_message or ""}
        return out

    def text(self) -> str:
        return "\f".join(_page_text(self.pages[n]) for n in sorted(self.pages))

    def markdown(self, figures_dir: str = "figures") -> str:
        from ocrstream.processors.layout.markdown import MarkdownPage, render_markdown

        pages = []
        for n in sorted(self.pages):
            page = self.pages[n]
            if page.blocks is None:
                lines = tuple(_page_text(page).splitlines())
            else:
                lines = tuple(line.text for line in page.lines)
            pages.append(MarkdownPage(n, page.blocks, lines))
        return render_markdown(pages, figures_dir)

    def crop(self, page_no: int, page: PageOCR, image: bytes) -> None:
        """Keep the figure crops of a layout page (cut now: the page image is not kept)."""
        from ocrstream.processors.figures import FigurePage, crop_figures
        from ocrstream.processors.searchable_pdf import PageImage

        if not page.blocks or not any(b.type == "figure" for b in page.blocks):
            return
        target = FigurePage(page_no, page.width, page.height, page.rotation, page.blocks)
        self.figures.update(crop_figures([target], lambda _: PageImage(image, 0.0)))


def _page_text(page: PageOCR) -> str:
    from ocrstream.processors.ocr.order import text_rows

    rows = text_rows([line.polygon for line in page.lines], [line.text for line in page.lines])
    return "".join(row + "\n" for row in rows)


@dataclass(frozen=True, slots=True)
class _Job:
    doc: _Doc
    page_no: int
    data: bytes | LayoutPage | RegionsPage


# How long the first pages split wait for more to fill a batch while the engine is idle.
BATCH_WAIT_S = 0.05


def make_engine(settings: OcrSettings) -> Any:
    """The engine for a run (a seam for tests)."""
    from ocrstream.processors.ocr.engine import OcrEngine

    return OcrEngine(settings)


# the names `ocrstream submit --output` gives the same outputs
FORMAT_ALIASES = {"txt": "text", "md": "markdown"}


@click.command("ocr")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "text", "markdown", "pdf", "txt", "md"]),
    default="json",
    show_default=True,
    callback=lambda _ctx, _param, value: FORMAT_ALIASES.get(value, value),
    help="document.json, plain text in reading order, Markdown (structure with --mode layout), "
    "or a searchable PDF: a PDF input with an invisible text layer on the pages OCR read, an "
    "image input as a PDF of its pages (binary: several inputs need --output). txt and md, as "
    "`ocrstream submit --output` names them, are text and markdown.",
)
@click.option(
    "--mode",
    type=click.Choice(["text", "layout"]),
    default="text",
    show_default=True,
    help="layout: also the blocks of each page (titles, paragraphs, tables …) in reading order.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write DIR/<stem>.json (or .txt, .md, .pdf) per input instead of standard output.",
)
@click.option(
    "--skip-text",
    is_flag=True,
    help="Answer PDF pages that have a usable text layer from it, without OCR.",
)
@click.option(
    "--backend",
    type=click.Choice([b.value for b in OcrBackend]),
    help="Inference backend (default: OCRSTREAM_OCR_BACKEND, else auto).",
)
@click.option(
    "--model",
    help="Model set: ppocrv6-small (the default), ppocrv6-small-tinydet (v6 small's rec with "
    "v6 tiny's det: faster, a little less accurate), ppocrv6-tiny (the fast profile: Chinese, "
    "Latin and Greek letters, no kana, so not for Japanese), ppocrv5 …",
)
@click.option("--device", help="cpu, cuda, cuda:1 …")
@click.option("--threads", type=int, help="Inference threads.")
@click.option(
    "--fix-orientation/--no-fix-orientation",
    default=None,
    help="Turn pages scanned sideways or upside down upright with the page orientation model "
    "on every page (1-10% slower a page). By default such pages are found from their own "
    "lines, at no cost to upright pages (OCRSTREAM_OCR_FIND_TURNED_PAGES); "
    "--no-fix-orientation reads every page as it comes.",
)
@click.option("--dpi", type=int, default=300, show_default=True, help="PDF render resolution.")
@click.option(
    "--regions",
    "regions_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Key-field mode: read only the named boxes in this JSON file (fields in the JSON).",
)
@click.option(
    "--batch",
    type=int,
    default=8,
    show_default=True,
    help="Pages per engine call, drawn from all inputs.",
)
def ocr(
    files: tuple[Path, ...],
    fmt: str,
    mode: str,
    output: Path | None,
    skip_text: bool,
    backend: str | None,
    model: str | None,
    device: str | None,
    threads: int | None,
    fix_orientation: bool | None,
    dpi: int,
    batch: int,
    regions_file: Path | None,
) -> None:
    """Recognise the text of images and PDFs."""
    regions = _load_regions(regions_file) if regions_file is not None else None
    if fmt == "pdf" and output is None and len(files) > 1:
        raise click.UsageError("--format pdf with several inputs needs --output DIR")
    overrides: dict[str, Any] = {
        key: value
        for key, value in (
            ("backend", backend),
            ("model", model),
            ("device", device),
            ("threads", threads),
            ("fix_orientation", fix_orientation),
        )
        if value is not None
    }
    if fix_orientation is False:
        overrides["find_turned_pages"] = False
    limits = LimitsSettings()  # the splitter's: for the split, the probe and the PDF alike
    pages = _count_pages(files, limits, AUTO_MEASURE_PAGES)
    if "OCRSTREAM_OCR_DET_WARMUP" not in os.environ and pages <= 1:
        # On one page the det warm-up (one pass at the budget's largest shape, ~0.2 s) costs
        # more than it saves; on more it can save seconds (15 receipts in one PDF: 5.6-5.9 s
        # with it, 6.4-7.2 s without), so it stays there.
        overrides["det_warmup"] = False
    if "OCRSTREAM_OCR_AUTO_MEASURE" not in os.environ and pages < AUTO_MEASURE_PAGES:
        overrides["auto_measure"] = False  # a short job: see AUTO_MEASURE_PAGES
    try:
        settings = OcrSettings(**overrides)
        engine = make_engine(settings)
    except OcrstreamError as e:
        click.echo(f"ocrstream ocr: the engine cannot start: {e.code}: {e}", err=True)
        sys.exit(2)
    if output is not None:
        output.mkdir(parents=True, exist_ok=True)
    docs = [_Doc(path, doc_id) for path, doc_id in zip(files, _doc_ids(files), strict=True)]
    writer = _Writer(engine.info, fmt, output, several=len(docs) > 1, dpi=dpi, limits=limits)
    failed = 0
    try:
        run = _run(engine, docs, limits, dpi, skip_text, max(1, batch), mode, regions)
        for doc in run:
            writer.write(doc)
            if doc.status == "failed":
                failed += 1
                reason = doc.error_code or "pages_failed"
                message = doc.error_message or "no page could be recognised"
                click.echo(f"ocrstream ocr: {doc.path}: failed: {reason}: {message}", err=True)
            elif doc.status == "partial":
                bad = sorted(n for n, p in doc.pages.items() if p.status == "failed")
                click.echo(f"ocrstream ocr: {doc.path}: pages {bad} failed", err=True)
    except OcrstreamError as e:  # a fatal engine error mid-run
        click.echo(f"ocrstream ocr: {e.code}: {e}", err=True)
        sys.exit(2)
    # every document is written (files closed, stdout flushed on the way out) and nothing
    # else needs closing: the process may skip tearing the engine down
    allow_quick_exit()
    if failed:
        sys.exit(1)


# `auto` measures the CPU backends when no choice is kept for this machine yet (backends.choice:
# 9.5 s on a 2-vCPU Zen 4, v6 small: 20 receipts' or 8 A4 pages' reading in bf16, 12 or 4 in
# the provisional fp32), then keeps it. A run of fewer pages would spend more on the
# measurement than it could save (the provisional choice read 0-40% slower a page there; on
# that Zen 4, 25 receipts with an empty engine cache took 21.1-21.9 s on it and 23.6-23.9 s
# measuring first), so it runs on the provisional choice and keeps nothing: a new user's first
# `ocrstream ocr` on a page takes a second or two, not twelve.
AUTO_MEASURE_PAGES = 50


def _count_pages(files: Sequence[Path], limits: LimitsSettings, stop: int) -> int:
    """The run's pages, counted up to ``stop`` (the probe reads each file's header only; a
    file it cannot read counts as one page: it will fail as the run reads it)."""
    from ocrstream.processors.split import probe

    total = 0
    for path in files:
        try:
            total += max(1, probe(path, None, limits))
        except (OcrstreamError, OSError):
            total += 1
        if total >= stop:
            break
    return total


def _load_regions(path: Path) -> tuple[Region, ...]:
    from ocrstream.processors.regions import parse_regions
    from ocrstream.settings import SplitterSettings
    from ocrstream.streams.splitter import _templates

    try:
        spec = path.read_text("utf-8")
        return parse_regions(spec, _templates(SplitterSettings().region_templates))
    except (OSError, OcrstreamError) as e:
        raise click.UsageError(f"--regions {path}: {e}") from e


def _doc_ids(files: Sequence[Path]) -> list[str]:
    """File stems, made unique (``scan``, ``scan-2`` …) when two inputs share one."""
    seen: dict[str, int] = {}
    out = []
    for path in files:
        stem = path.stem or "document"
        n = seen.get(stem, 0) + 1
        seen[stem] = n
        out.append(stem if n == 1 else f"{stem}-{n}")
    return out


def _run(
    engine: Any,
    docs: list[_Doc],
    limits: LimitsSettings,
    dpi: int,
    skip_text: bool,
    batch: int,
    mode: str = "text",
    regions: tuple[Region, ...] | None = None,
) -> Iterator[_Doc]:
    """Every document, finished, in input order. The engine reads the pages already split, in
    batches across files, while the next pages are split; a page that breaks the engine fails
    alone."""
    from ocrstream.processors.ocr.batching import BatchingEngine

    emitted = 0

    def answer(results: list[tuple[_Job, PageOCR]]) -> Iterator[_Doc]:
        nonlocal emitted
        for job, result in results:
            job.doc.pages[job.page_no] = result
            if isinstance(job.data, LayoutPage) and isinstance(job.data.image, bytes):
                job.doc.crop(job.page_no, result, job.data.image)
        while emitted < len(docs) and docs[emitted].done:
            yield docs[emitted]
            emitted += 1

    batcher: BatchingEngine[_Job] = BatchingEngine(
        engine, max_batch=batch, max_wait_s=BATCH_WAIT_S, max_inflight=2 * batch
    )
    with batcher:
        for doc in docs:
            jobs = _split(doc, limits, dpi, skip_text, layout=mode == "layout", regions=regions)
            for job in jobs:
                while not batcher.submit(job, job.data, timeout=0.1):
                    yield from answer(batcher.poll())  # full: take what is done meanwhile
                yield from answer(batcher.poll())
            yield from answer([])
        batcher.flush()  # no more pages: the last batch need not wait to fill
        while batcher.inflight:
            yield from answer(batcher.poll(timeout=0.1))
    yield from answer([])


def _split(
    doc: _Doc,
    limits: LimitsSettings,
    dpi: int,
    skip_text: bool,
    *,
    layout: bool = False,
    regions: tuple[Region, ...] | None = None,
) -> Iterator[_Job]:
    """The pages of one input that need OCR; the others are answered on ``doc`` directly."""
    from ocrstream.processors.layout.structure import text_layer_blocks
    from ocrstream.processors.split import iter_pages

    try:
        use_text_layer = skip_text and regions is None
        for page in iter_pages(doc.path, None, limits, dpi, use_text_layer=use_text_layer):
            doc.page_count = page.page_count
            if page.error_code is not None:
                doc.pages[page.page_no] = PageOCR(
                    width=0,
                    height=0,
                    lines=(),
                    status="failed",
                    error_code=page.error_code,
                    error_message=page.error_message,
                )
            elif page.text_lines is not None:
                doc.own_text.add(page.page_no)
                doc.pages[page.page_no] = answered = PageOCR(
                    width=page.width,
                    height=page.height,
                    lines=page.text_lines,
                    status="ok" if page.text_lines else "empty",
                    blocks=text_layer_blocks(
                        page.text_lines, page.width, page.height, page.text_rules, page.text_images
                    )
                    if layout
                    else None,
                )
                if layout:
                    doc.crop(page.page_no, answered, page.data)
            elif regions is not None:
                data = RegionsPage(page.data, for_page(regions, page.page_no))
                yield _Job(doc, page.page_no, data)
            else:
                yield _Job(doc, page.page_no, LayoutPage(page.data) if layout else page.data)
    except PoisonError as e:
        doc.error_code, doc.error_message = e.code, str(e)
        doc.page_count = 0
        doc.pages.clear()
    finally:
        doc.split_done = True


class _Writer:
    def __init__(
        self,
        engine: EngineInfo,
        fmt: str,
        output: Path | None,
        several: bool,
        dpi: int,
        limits: LimitsSettings,
    ) -> None:
        self.engine = engine
        self.fmt = fmt
        self.output = output
        self.several = several
        self.dpi = dpi
        self.limits = limits

    def write(self, doc: _Doc) -> None:
        if self.fmt == "pdf":
            self._pdf(doc)
        elif self.fmt == "json":
            body = doc.to_dict(self.engine)
            if self.output is None:
                indent = None if self.several else 2
                self._stdout(json.dumps(body, ensure_ascii=False, indent=indent) + "\n")
            else:
                path = self.output / f"{doc.doc_id}.json"
                path.write_text(json.dumps(body, ensure_ascii=False, indent=2) + "\n", "utf-8")
        else:
            markdown = self.fmt == "markdown"
            folder = f"{doc.doc_id}.figures"
            text = doc.markdown(folder) if markdown else doc.text()
            if self.output is None:
                self._stdout(text)
            else:
                suffix = ".md" if markdown else ".txt"
                (self.output / f"{doc.doc_id}{suffix}").write_text(text, "utf-8")
                if markdown and doc.figures:
                    (self.output / folder).mkdir(exist_ok=True)
                    for crop, data in doc.figures.items():
                        (self.output / folder / crop.removeprefix("figures/")).write_bytes(data)

    def _pdf(self, doc: _Doc) -> None:
        """The searchable PDF (the limits and DPI the pages were split with); a document that
        failed entirely has none."""
        from ocrstream.processors.searchable_pdf import source_searchable_pdf

        if doc.status == "failed" and doc.page_count == 0:
            return
        data = source_searchable_pdf(
            doc.path,
            doc.page_count,
            doc.pages,
            own_text=doc.own_text,
            dpi=self.dpi,
            limits=self.limits,
            title=doc.doc_id,
        )
        if self.output is None:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            (self.output / f"{doc.doc_id}.pdf").write_bytes(data)

    @staticmethod
    def _stdout(text: str, stream: TextIO | None = None) -> None:
        click.echo(text, nl=False, file=stream)
