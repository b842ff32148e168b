"""How much the OCR worker holds at once: the in-flight window and the pixel budget.

- Pages: at most ``max_inflight_pages`` consumed and not delivered. At the limit no queued page
  is started, and every partition with a page queued is paused until deliveries make room (a
  partition with none may still fetch one, so that its oldest page is not starved by the
  partitions that happen to be fetched first: the bound is ``max_inflight_pages`` plus one page
  per assigned partition).
- Below the limit, a partition may queue its share (:meth:`InflightWindow.share`): what the
  limit leaves beside a batch decoding and one in the engine, split over the partitions. The
  share must be deep: with 4 pages per partition the constant pause/resume left some
  partitions unfetched for a minute.
- Pages start decoding from the intake's head only as far as the next batch needs
  (``max_batch`` pages decoding or waiting for the engine), and about as fast as the decode
  threads take them (one waiting per thread, so a thread that finishes starts its next page at
  once; a GPU engine can outrun the decoding), so that each pick sees the partitions the
  previous picks emptied refilled.
- Pixels: pages are decoded only while the pixels held (decoding, waiting for or in the engine)
  stay within ``max_inflight_pixels``; one page is always let through whatever its size.
  Without it a few small PDFs of huge vector pages (each rendered at the 80-megapixel page
  limit, 240 MB as BGR) could fill the worker's memory 64 pages at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

from ocrstream.settings import WorkerSettings

# The most records one poll hands over.
MAX_POLL_RECORDS = 256


@dataclass(slots=True)
class InflightWindow:
    """The worker's limits and the pixels it holds now; see the module docstring."""

    max_batch: int
    decode_threads: int
    max_inflight_pages: int
    max_inflight_pixels: int
    held_pixels: int = 0

    @classmethod
    def of(cls, settings: WorkerSettings) -> InflightWindow:
        return cls(
            max_batch=settings.max_batch,
            decode_threads=settings.decode_threads,
            max_inflight_pages=settings.max_inflight_pages,
            max_inflight_pixels=settings.max_inflight_pixels,
        )

    # --- pages ----------------------------------------------------------------------------

    def full(self, consumed: int) -> bool:
        """Whether ``consumed`` pages (consumed, not delivered) fill the window."""
        return consumed >= self.max_inflight_pages

    def poll_size(self, consumed: int) -> int:
        """How many records the next poll may take (at least one: a partition with nothing
        queued may still fetch a page)."""
        return max(1, min(self.max_inflight_pages - consumed, MAX_POLL_RECORDS))

    def share(self, partitions: int) -> int:
        """Pages a partition may queue before it is paused, below the limit."""
        room = self.max_inflight_pages - 2 * self.max_batch
        return max(1, room // max(1, partitions))

    def may_start(self, *, decoding: int, waiting: int, started: int) -> bool:
        """Whether one more page may start decoding, with ``decoding`` pages decoding,
        ``waiting`` for the engine and ``started`` started and not delivered."""
        return (
            decoding < 2 * self.decode_threads
            and decoding + waiting < self.max_batch
            and started < self.max_inflight_pages
        )

    # --- pixels ---------------------------------------------------------------------------

    def fits(self, pixels: int) -> bool:
        """Whether a page of ``pixels`` may be decoded now."""
        held = self.held_pixels
        return not held or held + pixels <= self.max_inflight_pixels

    def hold(self, pixels: int) -> None:
        self.held_pixels += pixels

    def release(self, pixels: int) -> None:
        self.held_pixels = max(0, self.held_pixels - pixels)
