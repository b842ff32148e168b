"""Micro-batching over the engine: the one batcher of ocrstream and its one batch retry.

- :class:`MicroBatcher` is the rule: items of any documents collect into a batch, which is due
  when it is full (``max_batch``) or its oldest item has waited ``max_wait_s``. It holds no
  thread and reads no clock (the caller says what time it is).
- :func:`recognize_batch` runs one batch through the engine. A batch whose engine call fails is
  tried again (``retries``), then split in halves down to single pages, so one page that breaks
  the engine fails only itself (``engine_error``, or ``engine_out_of_memory`` for a
  MemoryError, which splits at once: the same batch would run out again). A
  :class:`FatalError` propagates.
- :class:`BatchingEngine` runs those batches in one thread of its own: pages go in with
  ``submit`` as they arrive, results come out with ``poll`` as batches finish, and the caller
  never waits for the engine. ``submit`` blocks while ``max_inflight`` pages are submitted but
  not yet collected, which bounds memory whatever the producer does. An error that stops the
  thread (a :class:`FatalError`) is raised to the caller by the next ``submit`` or ``poll``.

The OCR worker (:mod:`ocrstream.streams.worker`), ``ocrstream ocr`` and ``ocrstream bench
engine`` all run the engine through :class:`BatchingEngine`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.types import EngineInfo, PageOCR

log = logging.getLogger(__name__)

K = TypeVar("K")
T = TypeVar("T")
_END = object()


class PageEngine(Protocol):
    @property
    def info(self) -> EngineInfo: ...

    def recognize(self, images: Sequence[Any]) -> list[PageOCR]: ...


# --- the rule -------------------------------------------------------------------------------


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
        """The next batch: the oldest items, at most ``max_batch``."""
        n = min(self.max_batch, len(self._items))
        return [self._items.popleft()[1] for _ in range(n)]

    def drain(self) -> list[T]:
        items = [item for _, item in self._items]
        self._items.clear()
        return items


# --- the retry ------------------------------------------------------------------------------


def failed_page(code: str, message: str) -> PageOCR:
    """A page the engine could not read (it never measured it: no size)."""
    return PageOCR(
        width=0, height=0, lines=(), status="failed", error_code=code, error_message=message
    )


def recognize_batch(
    engine: PageEngine, images: Sequence[Any], *, retries: int = 1
) -> list[PageOCR]:
    """One result per image, in order; see the module docstring. Only FatalError escapes."""
    if not images:
        return []
    code, message = "engine_error", ""
    for attempt in range(retries + 1):
        try:
            out = engine.recognize(images)
        except FatalError:
            raise
        except MemoryError as e:
            log.warning("engine out of memory on a batch of %d pages", len(images))
            code, message = "engine_out_of_memory", str(e) or "MemoryError"
            break
        except Exception as e:  # any engine failure fails pages, never the caller
            log.warning(
                "engine failed on a batch of %d pages (attempt %d)",
                len(images),
                attempt + 1,
                exc_info=True,
            )
            code, message = "engine_error", f"{type(e).__name__}: {e}"
            continue
        if len(out) != len(images):
            code, message = "engine_error", f"{len(out)} results for {len(images)} pages"
            continue
        return list(out)
    if len(images) == 1:
        return [failed_page(code, message)]
    mid = len(images) // 2
    return recognize_batch(engine, images[:mid], retries=retries) + recognize_batch(
        engine, images[mid:], retries=retries
    )


# --- the engine thread ----------------------------------------------------------------------


class BatchingEngine(Generic[K]):
    """Micro-batching front of an engine; see the module docstring.

    ``max_inflight=None`` leaves the bound to the caller (the OCR worker bounds what it starts
    itself, and its loop must never block in ``submit``). ``on_batch(pages, seconds)`` is
    called from the engine thread after each batch.
    """

    def __init__(
        self,
        engine: PageEngine,
        *,
        max_batch: int = 16,
        max_wait_s: float = 0.05,
        max_inflight: int | None = 64,
        retries: int = 1,
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        if max_batch < 1 or (max_inflight is not None and max_inflight < max_batch):
            raise ValueError("need 1 <= max_batch <= max_inflight")
        self.engine = engine
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.max_inflight = max_inflight
        self.retries = retries
        self._on_batch = on_batch
        self._cond = threading.Condition()
        self._queue: MicroBatcher[tuple[K, Any]] = MicroBatcher(max_batch, max_wait_s)
        self._done: deque[tuple[K, PageOCR]] = deque()
        self._inflight = 0
        self._flushing = False
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

    @property
    def waiting(self) -> int:
        """Pages submitted that no batch has taken yet."""
        with self._cond:
            return len(self._queue)

    def submit(self, key: K, image: Any, timeout: float | None = None) -> bool:
        """Queue one page; blocks while the in-flight bound is reached (False on timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._raise_error()
                if self._closing:
                    raise RuntimeError("BatchingEngine is closed")
                if self.max_inflight is None or self._inflight < self.max_inflight:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            self._queue.add((key, image), time.monotonic())
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

    def flush(self) -> None:
        """Send the pages waiting now to the engine without waiting for fuller batches (pages
        submitted before they are all taken go along)."""
        with self._cond:
            self._flushing = bool(self._queue)
            self._cond.notify_all()

    def close(self, timeout: float | None = None, *, cancel: bool = False) -> None:
        """Finish the queued pages (their results stay pollable) and stop the thread; with
        ``cancel``, only the batch in the engine is finished and the others are dropped."""
        with self._cond:
            self._closing = True
            if cancel:
                self._inflight -= len(self._queue)
                self._queue.drain()
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
        """Feed ``pages`` (an iterable, or a queue ended by ``None``) from a thread and yield
        every result; the last pages go to the engine as soon as the input ends."""
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
                self.flush()

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

    def _next_batch(self) -> list[tuple[K, Any]] | None:
        """Wait until a batch is due (or the queue is to be emptied); None when closed."""
        with self._cond:
            while True:
                if self._queue:
                    if self._closing or self._flushing or self._queue.due(time.monotonic()):
                        batch = self._queue.take()
                        self._flushing = self._flushing and bool(self._queue)
                        return batch
                else:
                    self._flushing = False
                    if self._closing:
                        return None
                deadline = self._queue.deadline()
                self._cond.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        while (batch := self._next_batch()) is not None:
            started = time.perf_counter()
            try:
                results = recognize_batch(
                    self.engine, [image for _, image in batch], retries=self.retries
                )
                if self._on_batch is not None:
                    self._on_batch(len(batch), time.perf_counter() - started)
            except Exception as e:  # a FatalError (or a bug): stop, and tell the caller
                if isinstance(e, FatalError):
                    log.error("OCR engine failed fatally: %s", e)
                else:
                    log.exception("the batching thread failed")
                with self._cond:
                    self._error = e
                    self._closing = True
                    self._cond.notify_all()
                return
            with self._cond:
                self._done.extend((key, r) for (key, _), r in zip(batch, results, strict=True))
                self._cond.notify_all()


def _items(pages: Iterable[tuple[K, Any]] | queue.Queue[Any]) -> Iterator[tuple[K, Any]]:
    if isinstance(pages, queue.Queue):
        while (item := pages.get()) is not None and item is not _END:
            yield item
    else:
        yield from pages
