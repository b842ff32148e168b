"""Streaming over the engine: pages go in as they arrive, results come out as batches finish.

:class:`BatchingEngine` owns one background thread that runs the engine. A batch starts when
``max_batch`` pages wait or the oldest has waited ``max_wait_s``; pages of any documents mix.
``submit`` blocks while ``max_inflight`` pages are submitted but not yet collected with
``poll``, which bounds memory whatever the producer does.

A batch whose engine call raises is split in halves and retried, down to single pages, so one
page that breaks the engine fails only itself (``engine_error``, or ``engine_out_of_memory``
for a MemoryError). A :class:`FatalError` stops the thread and is raised to the caller by the
next ``submit`` or ``poll``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.types import EngineInfo, PageOCR

log = logging.getLogger(__name__)

K = TypeVar("K")
_END = object()


class PageEngine(Protocol):
    @property
    def info(self) -> EngineInfo: ...

    def recognize(self, images: Sequence[Any]) -> list[PageOCR]: ...


class BatchingEngine(Generic[K]):
    """Micro-batching front of an engine; see the module docstring."""

    def __init__(
        self,
        engine: PageEngine,
        *,
        max_batch: int = 16,
        max_wait_s: float = 0.05,
        max_inflight: int = 64,
    ) -> None:
        if max_batch < 1 or max_inflight < max_batch:
            raise ValueError("need 1 <= max_batch <= max_inflight")
        self.engine = engine
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.max_inflight = max_inflight
        self._cond = threading.Condition()
        self._pending: deque[tuple[float, K, Any]] = deque()
        self._done: deque[tuple[K, PageOCR]] = deque()
        self._inflight = 0
        self._closing = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="ocr-batcher", daemon=True)
        self._thread.start()

    @property
    def info(self) -> EngineInfo:
        return self.engine.info

    @property
    def inflight(self) -> int:
        """Pages submitted and not yet returned by :meth:`poll`."""
        with self._cond:
            return self._inflight

    def submit(self, key: K, image: Any, timeout: float | None = None) -> bool:
        """Queue one page; blocks while the in-flight bound is reached (False on timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._raise_error()
                if self._closing:
                    raise RuntimeError("BatchingEngine is closed")
                if self._inflight < self.max_inflight:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            self._pending.append((time.monotonic(), key, image))
            self._inflight += 1
            self._cond.notify_all()
            return True

    def poll(self, timeout: float | None = 0.0) -> list[tuple[K, PageOCR]]:
        """Results ready now, waiting up to ``timeout`` s for at least one (None: until one
        is ready, so never call it with None while nothing is in flight)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._done:
                self._raise_error()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return []
                self._cond.wait(remaining)
            out = list(self._done)
            self._done.clear()
            self._inflight -= len(out)
            self._cond.notify_all()
            return out

    def close(self, timeout: float | None = None) -> None:
        """Finish the queued pages (their results stay pollable) and stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def __enter__(self) -> BatchingEngine[K]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def run(self, pages: Iterable[tuple[K, Any]] | queue.Queue[Any]) -> Iterator[tuple[K, PageOCR]]:
        """Feed ``pages`` (an iterable, or a queue ended by ``None``) and yield every result."""
        feeder_error: list[BaseException] = []
        fed = threading.Event()

        def feed() -> None:
            try:
                for key, image in _items(pages):
                    self.submit(key, image)
            except BaseException as e:  # noqa: BLE001 - re-raised in the consuming thread
                feeder_error.append(e)
            finally:
                fed.set()
                with self._cond:
                    self._cond.notify_all()

        feeder = threading.Thread(target=feed, name="ocr-feeder", daemon=True)
        feeder.start()
        while True:
            yield from self.poll(timeout=0.1)
            if feeder_error:
                raise feeder_error[0]
            if fed.is_set() and self.inflight == 0:
                break
            if not fed.is_set() and self.inflight == 0:
                fed.wait(0.1)
        feeder.join()

    # --- the batch thread ------------------------------------------------------------------

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._pending and (self._closing or self._due()):
                        break
                    if self._closing and not self._pending:
                        return
                    wait = None
                    if self._pending:
                        wait = max(0.0, self._pending[0][0] + self.max_wait_s - time.monotonic())
                    self._cond.wait(wait)
                n = min(self.max_batch, len(self._pending))
                batch = [self._pending.popleft() for _ in range(n)]
            try:
                results = self._run([image for _, _, image in batch])
            except FatalError as e:
                log.error("OCR engine failed fatally: %s", e)
                with self._cond:
                    self._error = e
                    self._closing = True
                    self._cond.notify_all()
                return
            with self._cond:
                self._done.extend((key, r) for (_, key, _), r in zip(batch, results, strict=True))
                self._cond.notify_all()

    def _due(self) -> bool:
        if len(self._pending) >= self.max_batch:
            return True
        return time.monotonic() >= self._pending[0][0] + self.max_wait_s

    def _run(self, images: list[Any]) -> list[PageOCR]:
        try:
            results = self.engine.recognize(images)
            if len(results) != len(images):
                raise RuntimeError(f"{len(results)} results for {len(images)} pages")
            return results
        except FatalError:
            raise
        except MemoryError as e:
            code, message = "engine_out_of_memory", str(e) or "MemoryError"
        except Exception as e:  # noqa: BLE001 - an engine failure fails pages, not the stream
            code, message = "engine_error", f"{type(e).__name__}: {e}"
        log.warning("engine failed on a batch of %d pages: %s", len(images), message)
        if len(images) == 1:
            return [
                PageOCR(
                    width=0,
                    height=0,
                    lines=(),
                    status="failed",
                    error_code=code,
                    error_message=message,
                )
            ]
        mid = len(images) // 2
        return self._run(images[:mid]) + self._run(images[mid:])


def _items(pages: Iterable[tuple[K, Any]] | queue.Queue[Any]) -> Iterator[tuple[K, Any]]:
    if isinstance(pages, queue.Queue):
        while (item := pages.get()) is not None and item is not _END:
            yield item
    else:
        yield from pages
