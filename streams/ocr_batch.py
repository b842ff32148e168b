"""The OCR worker's core, with no Kafka in it: page tasks in, page results out.

- :func:`prepare_page` (run in a thread pool) fetches a claim-checked image from the store and
  decodes it to the engine's BGR array (:mod:`ocrstream.processors.imageio`, which checks the
  pixel limit from the image header before any large allocation).
- Pages that need OCR go to the engine through
  :class:`~ocrstream.processors.ocr.batching.BatchingEngine` (micro-batches across documents;
  a page that breaks the engine fails alone), and :func:`engine_result` turns what it read
  into a :class:`PageResult`: ``ok``/``empty`` with lines, or ``failed`` with a reason code.
- :func:`unread_result` answers the others without the engine: a page that could not be
  fetched or decoded is ``failed``, a page answered from the PDF's text layer passes through.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ocrstream.errors import PoisonError
from ocrstream.processors.imageio import PageTooLargeError, decode_image
from ocrstream.processors.layout.blocks import Block as PageBlock
from ocrstream.processors.layout.structure import text_layer_blocks
from ocrstream.processors.ocr.types import Line as OcrLine
from ocrstream.processors.ocr.types import PageOCR
from ocrstream.processors.page_quality import PageQuality
from ocrstream.processors.page_quality import measure as measure_quality
from ocrstream.schemas.records import (
    TEXT_LAYER_BACKEND,
    Block,
    Cell,
    Engine,
    ErrorInfo,
    FieldRead,
    Line,
    PageResult,
    PageStatus,
    PageTask,
    Point,
    Timings,
    utc_now,
)

Image_ = npt.NDArray[np.uint8]

TEXT_LAYER_ENGINE = Engine(backend=TEXT_LAYER_BACKEND, model="pdf", version="1")


class ImageMissingError(PoisonError):
    code = "image_missing"


@dataclass(frozen=True, slots=True)
class PreparedPage:
    """A page ready for the engine: the decoded image, or why it can't be recognised."""

    task: PageTask
    image: Image_ | None = None
    error: ErrorInfo | None = None
    decode_ms: float = 0.0
    cache_key: str | None = None  # the page's content key, when the worker has a cache
    cached: PageResult | None = None  # the cache's result for it: no decoding, no engine
    quality: PageQuality | None = None  # measured for confidence routing's early rule

    @property
    def needs_ocr(self) -> bool:
        return self.error is None and self.task.text_layer is None and self.cached is None


class PageLookup(Protocol):
    """The page cache as the decode threads see it (:mod:`ocrstream.streams.page_cache`)."""

    def key(self, task: PageTask, image: bytes) -> str: ...

    def get(self, key: str) -> PageResult | None: ...


# --- prepare ------------------------------------------------------------------------------


def prepare_page(
    task: PageTask,
    fetch: Callable[[str], bytes],
    *,
    max_pixels: int,
    cache: PageLookup | None = None,
    model: str | None = None,
    quality: bool = False,
) -> PreparedPage:
    """Fetch and decode one page; a page the ``cache`` knows comes back with its cached
    result, undecoded. With ``quality``, the decoded image's quality is measured too (for
    confidence routing's early rule, :mod:`ocrstream.processors.page_quality`). A page whose
    task asks for a recognition model (``options["model"]``, ``ocrstream reprocess
    --model``) other than this worker's ``model`` fails
    (``model_unavailable``): read by another model, its result would claim what it is not.
    A RetriableError (store down) propagates: try again later."""
    if task.text_layer is not None:
        return PreparedPage(task)
    wanted = task.options.get("model")
    if model is not None and wanted and wanted != model:
        message = f"the page asks for model {wanted!r}; this worker runs {model!r}"
        return PreparedPage(task, error=ErrorInfo("model_unavailable", message))
    start = time.perf_counter()
    try:
        if task.image.data is not None:
            data = task.image.data
        elif task.image.uri:
            data = fetch(task.image.uri)
        else:
            raise ImageMissingError("page task carries neither image bytes nor a URI")
        key = None if cache is None else cache.key(task, data)
        if key is not None and (hit := cache.get(key)) is not None:  # type: ignore[union-attr]
            return PreparedPage(task, cache_key=key, cached=hit)
        if task.width * task.height > max_pixels:
            raise PageTooLargeError(
                f"page is {task.width}x{task.height} pixels, over the limit of {max_pixels}"
            )
        image = decode_image(data, max_pixels=max_pixels)
    except PoisonError as e:
        return PreparedPage(task, error=ErrorInfo(e.code, str(e)))
    decode_ms = (time.perf_counter() - start) * 1000
    measured = measure_quality(image) if quality else None
    return PreparedPage(task, image=image, decode_ms=decode_ms, cache_key=key, quality=measured)


# --- results ------------------------------------------------------------------------------


def unread_result(page: PreparedPage, *, worker_id: str = "") -> PageResult:
    """The result of a page that does not go to the engine: ``failed`` when it could not be
    fetched or decoded, else what its text layer says."""
    if page.error is not None:
        return failed_result(page.task, page.error, worker_id=worker_id)
    return text_layer_result(page.task, worker_id=worker_id)


def _base(task: PageTask, worker_id: str) -> dict[str, object]:
    return {
        "doc_id": task.doc_id,
        "page_no": task.page_no,
        "page_count": task.page_count,
        "worker_id": worker_id,
        "source_sha256": task.source_sha256,
        "source_uri": task.source_uri,
        "content_type": task.content_type,
        "outputs": task.outputs,
        "submitted_at": task.submitted_at,
        "completed_at": utc_now(),
        "attempt": task.attempt,
        "trace_id": task.trace_id,
        "tenant": task.tenant,
        "mode": task.mode,
        "revision": task.revision,
    }


def failed_result(task: PageTask, error: ErrorInfo, *, worker_id: str = "") -> PageResult:
    return PageResult(
        status=PageStatus.FAILED,
        error=error,
        width=task.width,
        height=task.height,
        **_base(task, worker_id),  # type: ignore[arg-type]
    )


def text_layer_result(task: PageTask, *, worker_id: str = "") -> PageResult:
    """A page answered from the PDF's own text; in layout mode with blocks made from it
    (:func:`~ocrstream.processors.layout.structure.text_layer_blocks`), without OCR."""
    lines = task.text_layer or ()
    blocks = None
    if task.mode == "layout":
        page_lines = [
            OcrLine(line.text, line.confidence, tuple((p.x, p.y) for p in line.polygon))  # type: ignore[arg-type]
            for line in lines
        ]
        found = text_layer_blocks(
            page_lines,
            task.width,
            task.height,
            rules=[_box(r) for r in task.text_layer_rules if len(r) == 4],
            images=[_box(r) for r in task.text_layer_images if len(r) == 4],
        )
        blocks = tuple(block_record(b) for b in found)
    return PageResult(
        status=PageStatus.OK if lines else PageStatus.EMPTY,
        width=task.width,
        height=task.height,
        lines=tuple(lines),
        engine=TEXT_LAYER_ENGINE,
        blocks=blocks,
        **_base(task, worker_id),  # type: ignore[arg-type]
    )


def engine_result(
    page: PreparedPage, ocr: PageOCR, engine: Engine, *, worker_id: str = ""
) -> PageResult:
    """What the engine read on a page: ``ok`` or ``empty`` with its lines; a page the engine
    failed on (alone: see :func:`~ocrstream.processors.ocr.batching.recognize_batch`) is
    ``failed`` with the reason and the size its task declares."""
    if ocr.status == "failed":
        error = ErrorInfo(ocr.error_code or "engine_error", ocr.error_message or "")
        return failed_result(page.task, error, worker_id=worker_id)
    lines = tuple(
        Line(
            text=line.text,
            confidence=float(line.confidence),
            polygon=tuple(Point(float(x), float(y)) for x, y in line.polygon),
        )
        for line in ocr.lines
    )
    t = ocr.timings_ms
    timings = Timings(
        decode_ms=page.decode_ms,
        det_ms=float(t.get("det", t.get("det_ms", 0.0))),
        rec_ms=float(t.get("rec", t.get("rec_ms", 0.0))),
        total_ms=page.decode_ms + float(t.get("total", t.get("total_ms", 0.0))),
    )
    return PageResult(
        status=PageStatus.EMPTY if ocr.status == "empty" or not lines else PageStatus.OK,
        width=ocr.width,
        height=ocr.height,
        rotation=ocr.rotation,
        lines=lines,
        engine=engine,
        timings=timings,
        blocks=None if ocr.blocks is None else tuple(block_record(b) for b in ocr.blocks),
        fields=tuple(
            FieldRead(f.name, f.text, float(f.confidence), tuple(float(v) for v in f.bbox))
            for f in ocr.fields or ()
        ),
        **_base(page.task, worker_id),  # type: ignore[arg-type]
    )


def block_record(block: PageBlock) -> Block:
    """A layout block as the PageResult record carries it."""
    return Block(
        type=block.type,
        bbox=tuple(round(v, 1) for v in block.bbox),
        lines=block.lines,
        text=block.text,
        html=block.to_dict().get("html"),
        cells=tuple(
            Cell(c.row, c.col, c.rowspan, c.colspan, tuple(round(v, 1) for v in c.bbox), c.text)
            for c in block.cells
        ),
        source=block.source,
    )


def _box(values: tuple[float, ...]) -> tuple[float, float, float, float]:
    x0, y0, x1, y1 = (float(v) for v in values)
    return x0, y0, x1, y1
