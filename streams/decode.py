"""The OCR worker's decode threads: pages are fetched and decoded (:func:`prepare_page`) in a
pool, each in its page's log context, and collected by the loop when they are done."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ocrstream.errors import FatalError, RetriableError
from ocrstream.schemas.records import ErrorInfo
from ocrstream.streams.intake import Pending
from ocrstream.streams.ocr_batch import PageLookup, PreparedPage, prepare_page

log = logging.getLogger(__name__)


class DecodePool:
    """Pages decoding, in the order they were started."""

    def __init__(
        self,
        threads: int,
        fetch: Callable[[str], bytes],
        *,
        max_pixels: int,
        cache: PageLookup | None = None,
        model: str | None = None,
        quality: bool = False,
    ) -> None:
        self.fetch = fetch
        self.max_pixels = max_pixels
        self.cache = cache
        self.model = model  # the engine's model set: a task asking for another one fails
        self.quality = quality  # measure each decoded page (confidence routing's early rule)
        self._pool = ThreadPoolExecutor(threads, "ocr-decode")
        self._decoding: list[tuple[Pending, Future[PreparedPage]]] = []

    def __len__(self) -> int:
        return len(self._decoding)

    def start(self, page: Pending) -> None:
        with page.log_context():  # the decode thread logs with the page's context
            run = contextvars.copy_context().run
        future = self._pool.submit(
            run, prepare_page, page.task, self.fetch, max_pixels=self.max_pixels,
            cache=self.cache, model=self.model, quality=self.quality,
        )  # fmt: skip
        self._decoding.append((page, future))

    def collect(self) -> list[tuple[Pending, PreparedPage | RetriableError]]:
        """The pages whose decoding has ended: prepared (an unreadable page carries its
        error), or the retriable error of a fetch to try again. A :class:`FatalError` (the
        store refuses our credentials) is raised: the worker exits and is restarted."""
        done: list[tuple[Pending, PreparedPage | RetriableError]] = []
        still: list[tuple[Pending, Future[PreparedPage]]] = []
        for page, future in self._decoding:
            if not future.done():
                still.append((page, future))
                continue
            try:
                done.append((page, future.result()))
            except RetriableError as e:
                done.append((page, e))
            except FatalError:
                raise
            except Exception as e:  # a bug in decoding must fail the page, not the worker
                task = page.task
                with page.log_context():
                    log.exception("preparing %s page %d failed", task.doc_id, task.page_no)
                done.append((page, PreparedPage(task, error=ErrorInfo("prepare_error", repr(e)))))
        self._decoding = still
        return done

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
