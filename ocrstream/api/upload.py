"""``POST /v1/documents`` with a multipart ``file``: the body streamed into the store.

The request is parsed as it arrives (python-multipart's push parser); the ``file`` part's bytes
go through a bounded queue (:class:`ChunkPipe`) to the store's multipart upload, which runs in a
worker thread, reads one part at a time and stores it before reading the next. So the API holds
about two store parts (``S3Settings.part_size``) plus ``ApiSettings.upload_queue_chunks``
request chunks of any upload, whatever its size and however slow the store. The size limit is
checked on every chunk (413 the moment it is passed, and the store's multipart upload is
aborted), and the type is sniffed from the first KiB (415 before anything is written).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import io
import queue
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, cast

import anyio.to_thread
from python_multipart.multipart import MultipartParser, parse_options_header

from ocrstream.processors.split import sniff
from ocrstream.storage import ObjectInfo, ObjectStore
from ocrstream.streams.media import extension

SNIFF_BYTES = 1024
MAX_FIELDS_BYTES = 64 * 1024  # every form field but the file, together


class UploadError(Exception):
    """An upload the API refuses: the HTTP status and why."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


class ChunkPipe(io.RawIOBase):
    """A blocking reader over chunks handed in from the event loop; what the store's upload
    reads. ``None`` ends it; an exception handed in is raised to the reader (the upload is
    aborted)."""

    def __init__(self, max_chunks: int) -> None:
        self._queue: queue.Queue[bytes | BaseException | None] = queue.Queue(max_chunks)
        self._buf = memoryview(b"")
        self._ended = False
        self._reader_gone = threading.Event()

    def put(self, item: bytes | BaseException | None) -> None:
        """Blocks while the queue is full; raises once the reader has stopped (its upload
        ended), so a failed store never leaves the request hanging."""
        while not self._reader_gone.is_set():
            try:
                self._queue.put(item, timeout=0.5)
                return
            except queue.Full:
                continue
        raise UploadError(503, "the store upload stopped")

    def reader_gone(self) -> None:
        self._reader_gone.set()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` as far as the chunks go (a store part is read in one call)."""
        view, n = memoryview(buffer).cast("B"), 0
        while n < len(view):
            if not self._buf:
                if self._ended:
                    break
                item = self._queue.get()
                if item is None:
                    self._ended = True
                    break
                if isinstance(item, BaseException):
                    self._ended = True
                    raise item
                self._buf = memoryview(item)
            take = min(len(view) - n, len(self._buf))
            view[n : n + take] = self._buf[:take]
            self._buf, n = self._buf[take:], n + take
        return n


@dataclass
class FormStream:
    """A multipart/form-data body fed chunk by chunk: the ``file`` part's bytes come out of
    :meth:`feed` in order; the other fields are collected (at most ``MAX_FIELDS_BYTES``)."""

    boundary: bytes
    fields: dict[str, str] = field(default_factory=dict)
    filename: str | None = None
    saw_file: bool = False
    _out: list[bytes] = field(default_factory=list)
    _name: str = ""
    _is_file: bool = False
    _header: bytes = b""
    _headers: dict[bytes, bytes] = field(default_factory=dict)
    _value: bytearray = field(default_factory=bytearray)
    _field_bytes: int = 0

    def __post_init__(self) -> None:
        self.parser = MultipartParser(self.boundary, {
            "on_part_begin": self._begin,
            "on_header_field": lambda d, s, e: self._add_header_field(d[s:e]),
            "on_header_value": lambda d, s, e: self._add_header_value(d[s:e]),
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": lambda d, s, e: self._data(d[s:e]),
            "on_part_end": self._end,
        })  # fmt: skip

    def feed(self, chunk: bytes) -> list[bytes]:
        try:
            self.parser.write(chunk)
        except UploadError:
            raise
        except Exception as e:  # python-multipart's parse errors
            raise UploadError(400, f"malformed multipart body: {e}") from e
        out, self._out = self._out, []
        return out

    def _begin(self) -> None:
        self._headers, self._header, self._value = {}, b"", bytearray()

    def _add_header_field(self, data: bytes) -> None:
        self._header += data

    def _add_header_value(self, data: bytes) -> None:
        key = self._header.lower()
        self._headers[key] = self._headers.get(key, b"") + data

    def _header_end(self) -> None:
        self._header = b""

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        self._name = options.get(b"name", b"").decode("utf-8", "replace")
        self._is_file = self._name == "file"
        if self._is_file:
            if self.saw_file:
                raise UploadError(400, "more than one file part")
            self.saw_file = True
            raw = options.get(b"filename")
            self.filename = raw.decode("utf-8", "replace")[:255] if raw else None

    def _data(self, data: bytes) -> None:
        if self._is_file:
            self._out.append(bytes(data))
            return
        self._field_bytes += len(data)
        if self._field_bytes > MAX_FIELDS_BYTES:
            raise UploadError(413, f"form fields over {MAX_FIELDS_BYTES} bytes")
        self._value += data

    def _end(self) -> None:
        if not self._is_file and self._name:
            self.fields[self._name] = self._value.decode("utf-8", "replace")
        self._is_file = False


@dataclass(frozen=True)
class Stored:
    """An upload in the store."""

    info: ObjectInfo
    media_type: str
    sha256: str
    size: int
    filename: str | None
    fields: Mapping[str, str]


async def receive(
    body: AsyncIterator[bytes],
    boundary: bytes,
    store: ObjectStore,
    doc_id: str,
    *,
    max_bytes: int,
    queue_chunks: int,
    metadata: Mapping[str, str],
    spool: IO[bytes] | None = None,
) -> Stored:
    """Stream the ``file`` part of ``body`` to ``scans/{doc_id}/source.{ext}`` (and, when
    given, to ``spool`` too: a temporary file the API counts the pages in)."""
    form = FormStream(boundary)
    head = bytearray()
    sha, size = hashlib.sha256(), 0
    pipe: ChunkPipe | None = None
    upload: asyncio.Future[ObjectInfo] | None = None
    media_type = ""

    async def put(item: bytes | BaseException | None) -> None:
        assert pipe is not None
        if spool is not None and isinstance(item, bytes):
            await anyio.to_thread.run_sync(spool.write, item)
        await anyio.to_thread.run_sync(pipe.put, item)

    def start() -> None:
        nonlocal pipe, upload, media_type
        sniffed = sniff(bytes(head[:SNIFF_BYTES]))
        if sniffed is None:
            raise UploadError(415, "not a PDF or an image the splitter reads")
        media_type = sniffed
        pipe = ChunkPipe(queue_chunks)
        key = store.keys.source(doc_id, extension(media_type))
        call = functools.partial(store.put_stream, key, cast(IO[bytes], pipe), length=-1,
                                 content_type=media_type, metadata=metadata,
                                 parallel_uploads=1)  # fmt: skip
        upload = asyncio.ensure_future(anyio.to_thread.run_sync(call))
        upload.add_done_callback(lambda _: pipe.reader_gone() if pipe is not None else None)

    try:
        async for chunk in body:
            for piece in form.feed(chunk):
                size += len(piece)
                if size > max_bytes:
                    raise UploadError(413, f"the file is over the limit of {max_bytes} bytes")
                sha.update(piece)
                if pipe is None:
                    head += piece
                    if len(head) >= SNIFF_BYTES:
                        start()
                        await put(bytes(head))
                else:
                    await put(piece)
        if not form.saw_file:
            raise UploadError(422, "no 'file' part in the form")
        if pipe is None:
            start()
            await put(bytes(head))
        await put(None)
        assert upload is not None
        info = await upload
    except BaseException as e:
        if pipe is not None and upload is not None and not upload.done():
            with contextlib.suppress(UploadError):
                await put(UploadError(499, "upload abandoned"))
            await asyncio.wait([upload])
        if upload is not None and upload.done() and not upload.cancelled():
            upload.exception()  # retrieved: the store's error is not the answer
        raise e
    return Stored(info, media_type, sha.hexdigest(), size, form.filename, dict(form.fields))
