"""The OCR worker's core, with no Kafka in it: page tasks in, page results out.

- :func:`prepare_page` (run in a thread pool) fetches a claim-checked image from the store and
  decodes it to the engine's BGR array (:mod:`ocrstream.processors.imageio`, which checks the
  pixel limit from the image header before any large allocation).
- :class:`MicroBatcher` groups prepared pages of any documents into batches (max size, max wait).
- :func:`process_batch` runs one batch through the engine's batching API and turns every page
  into a :class:`PageResult`: ``ok``/``empty`` with lines, or ``failed`` with a reason code.
  Pages answered from the PDF's text layer are passed through without OCR.

An engine error is retried; a batch that still fails is split in halves until the page that
fails alone is found, so one bad page fails only itself.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from ocrstream.errors import FatalError, PoisonError
from ocrstream.processors.imageio import PageTooLargeError, decode_image
from ocrstream.processors.ocr.batching import PageEngine
from ocrstream.processors.ocr.types import PageOCR
from ocrstream.schemas.records import (
    Engine,
    ErrorInfo,
    Line,
    PageResult,
    PageStatus,
    PageTask,
    Point,
    Timings,
    utc_now,
)

log = logging.getLogger(__name__)

Image_ = npt.NDArray[np.uint8]
T = TypeVar("T")

TEXT_LAYER_ENGINE = Engine(backend="text-layer", model="pdf", version="1")


class ImageMissingError(PoisonError):
    code = "image_missing"


@dataclass(frozen=True, slots=True)
class PreparedPage:
    """A page ready for the engine: the decoded image, or why it can't be recognised."""

    task: PageTask
    image: Image_ | None = None
    error: ErrorInfo | None = None
    decode_ms: float = 0.0

    @property
    def needs_ocr(self) -> bool:
        return self.error is None and self.task.text_layer is None


# --- prepare ------------------------------------------------------------------------------


def prepare_page(task: PageTask, fetch: Callable[[str], bytes], *, max_pixels: int) -> PreparedPage:
    """Fetch and decode one page. A RetriableError (store down) propagates: try again later."""
    if task.text_layer is not None:
        return PreparedPage(task)
    start = time.perf_counter()
    try:
        if task.image.data is not None:
            data = task.image.data
        elif task.image.uri:
            data = fetch(task.image.uri)
        else:
            raise ImageMissingError("page task carries neither image bytes nor a URI")
        if task.width * task.height > max_pixels:
            raise PageTooLargeError(
                f"page is {task.width}x{task.height} pixels, over the limit of {max_pixels}"
            )
        image = decode_image(data, max_pixels=max_pixels)
    except PoisonError as e:
        return PreparedPage(task, error=ErrorInfo(e.code, str(e)))
    return PreparedPage(task, image=image, decode_ms=(time.perf_counter() - start) * 1000)


# --- batch --------------------------------------------------------------------------------


class MicroBatcher(Generic[T]):
    """Collect items into batches: a batch is due when full or when its oldest item waited
    ``max_wait_s``. Items of any document mix freely."""

    def __init__(self, max_batch: int, max_wait_s: float) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self._items: deque[tuple[float, T]] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: T, now: float) -> None:
        self._items.append((now, item))

    def deadline(self) -> float | None:
        """When the oldest item's wait runs out (None when empty)."""
        return self._items[0][0] + self.max_wait_s if self._items else None

    def due(self, now: float) -> bool:
        if len(self._items) >= self.max_batch:
            return True
        deadline = self.deadline()
        return deadline is not None and now >= deadline

    def take(self) -> list[T]:
        n = min(self.max_batch, len(self._items))
        return [self._items.popleft()[1] for _ in range(n)]

    def drain(self) -> list[T]:
        items = [item for _, item in self._items]
        self._items.clear()
        return items


def process_batch(
    engine: PageEngine, pages: Sequence[PreparedPage], *, worker_id: str = "", retries: int = 1
) -> list[PageResult]:
    """Recognise a batch; one result per page, in order. Only FatalError escapes."""
    ocr_idx = [i for i, p in enumerate(pages) if p.needs_ocr]
    outcomes = _recognize(engine, [pages[i].image for i in ocr_idx], retries) if ocr_idx else []
    by_index = dict(zip(ocr_idx, outcomes, strict=True))
    info = engine.info
    engine_rec = Engine(backend=info.backend, model=info.model, version=info.version)
    results: list[PageResult] = []
    for i, page in enumerate(pages):
        if page.error is not None:
            results.append(failed_result(page.task, page.error, worker_id=worker_id))
        elif page.task.text_layer is not None:
            results.append(text_layer_result(page.task, worker_id=worker_id))
        else:
            outcome = by_index[i]
            if isinstance(outcome, ErrorInfo):
                results.append(failed_result(page.task, outcome, worker_id=worker_id))
            else:
                results.append(ocr_result(page, outcome, engine_rec, worker_id=worker_id))
    return results


def _recognize(
    engine: PageEngine, images: Sequence[Image_ | None], retries: int
) -> list[PageOCR | ErrorInfo]:
    batch = [img for img in images if img is not None]
    assert len(batch) == len(images)
    error: ErrorInfo | None = None
    for attempt in range(retries + 1):
        try:
            out = engine.recognize(batch)
        except FatalError:
            raise
        except MemoryError as e:
            log.warning("engine out of memory on a batch of %d pages", len(batch))
            error = ErrorInfo("engine_out_of_memory", str(e) or "MemoryError")
            break  # the same batch would run out again: split it at once
        except Exception as e:  # any engine failure becomes a page error, never a crash
            log.warning(
                "engine failed on a batch of %d pages (attempt %d)",
                len(batch),
                attempt + 1,
                exc_info=True,
            )
            error = ErrorInfo("engine_error", f"{type(e).__name__}: {e}")
            continue
        if len(out) != len(batch):
            error = ErrorInfo("engine_error", f"{len(out)} results for {len(batch)} pages")
            continue
        return list(out)
    assert error is not None
    if len(batch) == 1:
        return [error]
    mid = len(batch) // 2
    return _recognize(engine, batch[:mid], retries) + _recognize(engine, batch[mid:], retries)


# --- results ------------------------------------------------------------------------------


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
    lines = task.text_layer or ()
    return PageResult(
        status=PageStatus.OK if lines else PageStatus.EMPTY,
        width=task.width,
        height=task.height,
        lines=tuple(lines),
        engine=TEXT_LAYER_ENGINE,
        **_base(task, worker_id),  # type: ignore[arg-type]
    )


def ocr_result(
    page: PreparedPage, ocr: PageOCR, engine: Engine, *, worker_id: str = ""
) -> PageResult:
    lines = tuple(
        Line(
            text=line.text,
            confidence=float(line.confidence),
            polygon=tuple(Point(float(x), float(y)) for x, y in line.polygon),
        )
        for line in ocr.lines
    )
    if ocr.status == "failed":
        status = PageStatus.FAILED
    elif ocr.status == "empty" or not lines:
        status = PageStatus.EMPTY
    else:
        status = PageStatus.OK
    error = (
        ErrorInfo(ocr.error_code or "engine_error", ocr.error_message or "")
        if status is PageStatus.FAILED
        else None
    )
    t = ocr.timings_ms
    timings = Timings(
        decode_ms=page.decode_ms,
        det_ms=float(t.get("det", t.get("det_ms", 0.0))),
        rec_ms=float(t.get("rec", t.get("rec_ms", 0.0))),
        total_ms=page.decode_ms + float(t.get("total", t.get("total_ms", 0.0))),
    )
    return PageResult(
        status=status,
        error=error,
        width=ocr.width,
        height=ocr.height,
        rotation=ocr.rotation,
        lines=lines,
        engine=engine,
        timings=timings,
        **_base(page.task, worker_id),  # type: ignore[arg-type]
    )
