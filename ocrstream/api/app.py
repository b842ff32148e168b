"""The FastAPI application: routes, authentication, metrics (docs/architecture.md "HTTP API").

:func:`create_app` takes its settings and builds everything it uses; it keeps no state of its
own beyond a cache of the result topics (:mod:`ocrstream.api.book`), so replicas are
interchangeable. Blocking calls (the store, the producer's flush) run in worker threads.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse, StreamingResponse
from minio.error import S3Error
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, Field
from urllib3.exceptions import HTTPError

from ocrstream.api import events, ui, upload
from ocrstream.api.book import DocumentBook
from ocrstream.api.keys import KeyFile
from ocrstream.api.limits import Limiter, Refusal, count_pages
from ocrstream.api.tokens import EventTokens
from ocrstream.api.usage import UsageLog
from ocrstream.api.viewer import NoPageImage, PageImages
from ocrstream.client import OcrClient
from ocrstream.errors import InvalidDocIdError, OcrstreamError, PoisonError, RetriableError
from ocrstream.processors import webhook
from ocrstream.processors.regions import OPTION as REGIONS_OPTION
from ocrstream.processors.regions import InvalidRegionsError, parse_regions
from ocrstream.processors.split import sniff
from ocrstream.schemas.records import (
    DEFAULT_OUTPUTS,
    DocumentEvent,
    ScanSource,
    ScanSubmitted,
    utc_now,
)
from ocrstream.settings import (
    ApiSettings,
    KafkaSettings,
    LimitsSettings,
    ParseMode,
    S3Settings,
    WebhookSettings,
)
from ocrstream.storage import ObjectNotFoundError, ObjectStore, validate_doc_id
from ocrstream.storage.keys import DOCUMENT_FORMATS, MAX_PAGE_NO, parse_s3_uri
from ocrstream.streams import topics
from ocrstream.streams.metrics import Metrics

log = logging.getLogger(__name__)

_CURSOR = re.compile(r"[0-9]{13}-[A-Za-z0-9._-]{1,128}")
MODES = tuple(m.value for m in ParseMode)
TOKEN_DOC = "from POST …/events/token, for a client that cannot send a header"
CHUNK = 256 * 1024


class Links(BaseModel):
    status_url: str
    events_url: str


class Accepted(Links):
    doc_id: str
    status: str = "queued"


class DocumentStatusBody(BaseModel):
    doc_id: str
    status: str = Field(description="queued, processing, completed, partial or failed")
    pages_done: int
    page_count: int | None
    outputs: dict[str, str]
    error: dict[str, str] | None
    submitted_at: str | None = None
    revision: int | None = Field(
        None,
        description="1, then one more per `ocrstream reprocess`: the revision this status is "
        "of (a reprocess under way is `processing` at its new revision); null while queued",
    )


class DocumentList(BaseModel):
    documents: list[DocumentStatusBody]
    next: str | None = Field(description="pass as `after` for the next page; null on the last")


class EventsToken(BaseModel):
    token: str
    expires_at: int = Field(description="Unix seconds")
    events_url: str = Field(description="the event stream with the token in its query")


class SourceUri(BaseModel):
    source_uri: str
    mode: str = "text"
    outputs: list[str] = list(DEFAULT_OUTPUTS)
    priority: int = 0
    attributes: dict[str, str] = {}
    callback_url: str | None = None
    regions: Any = None  # key-field mode: named boxes, or {"template": NAME}


def tenant_of(request: Request) -> str:
    """The tenant of the request's bearer key; 401 without a valid one."""
    keys: KeyFile = request.app.state.keys
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    tenant = keys.tenant(key.strip()) if scheme.lower() == "bearer" and key else None
    if tenant is None:
        raise HTTPException(401, "a valid API key is needed: Authorization: Bearer KEY",
                            headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
    request.state.tenant = tenant
    limiter: Limiter = request.app.state.limiter
    refusal = limiter.admit_request(tenant)
    if refusal is not None:
        raise too_many(refusal)
    return tenant


def too_many(refusal: Refusal) -> HTTPException:
    """429 with when to come back (whole seconds)."""
    return HTTPException(429, f"{refusal.limit}: {refusal.detail}",
                         headers={"Retry-After": str(refusal.retry_after_s)})  # fmt: skip


Tenant = Annotated[str, Depends(tenant_of)]


def _options(
    mode: str, outputs: list[str], priority: int, attributes: Any, regions: Any = None
) -> tuple[Any, ...]:
    if mode not in MODES:
        raise HTTPException(422, f"mode must be one of {MODES}")
    if not outputs or not set(outputs) <= set(DOCUMENT_FORMATS):
        raise HTTPException(422, f"outputs must be some of {DOCUMENT_FORMATS}")
    if not isinstance(attributes, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()
    ):
        raise HTTPException(422, "attributes must be an object of strings")
    if any(k.startswith(webhook.RESERVED_ATTRIBUTE_PREFIX) for k in attributes):
        raise HTTPException(422, f"attribute names starting with "
                                 f"{webhook.RESERVED_ATTRIBUTE_PREFIX!r} are reserved")  # fmt: skip
    if not -1000 <= priority <= 1000:
        raise HTTPException(422, "priority must be -1000..1000")
    reading: dict[str, str] = {}
    if regions is not None:
        try:
            if isinstance(regions, str):
                regions = json.loads(regions)
            if not (isinstance(regions, dict) and "template" in regions):
                parse_regions(regions)  # boxes are checked here; a template by the splitter
        except (ValueError, InvalidRegionsError) as e:
            raise HTTPException(422, f"regions: {e}") from e
        reading[REGIONS_OPTION] = json.dumps(regions, separators=(",", ":"), sort_keys=True)
    return tuple(dict.fromkeys(outputs)), priority, attributes, mode, reading


def create_app(
    api: ApiSettings,
    kafka: KafkaSettings,
    s3: S3Settings,
    limits: LimitsSettings,
    *,
    registry: CollectorRegistry | None = None,
    webhooks: WebhookSettings | None = None,
) -> FastAPI:
    registry = registry if registry is not None else CollectorRegistry()
    webhooks = webhooks if webhooks is not None else WebhookSettings()
    callback_networks = webhook.networks(webhooks.allowed_networks)
    metrics = Metrics(registry)
    keys = KeyFile(api.keys_file)
    store = ObjectStore(s3)
    client = OcrClient(kafka, s3, limits=limits)
    book = DocumentBook(kafka, client.codec, metrics)
    limiter = Limiter(
        api,
        on_refusal=lambda tenant, limit: metrics.api_limited.labels(tenant, limit).inc(),
        on_usage=lambda tenant, limit, n: metrics.api_usage.labels(tenant, limit).inc(n),
    )  # fmt: skip
    usage = None
    if limiter.enabled:
        usage = UsageLog(kafka, limiter.add_remote, api.usage_flush_ms,
                         on_lag=metrics.api_usage_lag_seconds.observe)  # fmt: skip
        limiter.sink = usage
    mupdf = threading.Lock()  # MuPDF counts the pages of one document at a time
    presigner = store
    if api.presign_endpoint:
        presigner = ObjectStore(s3.model_copy(update={"endpoint": api.presign_endpoint}))
    tokens = EventTokens.with_secret(api.token_secret.get_secret_value(), api.events_token_ttl_s)
    if not api.token_secret.get_secret_value():
        log.warning("OCRSTREAM_API_TOKEN_SECRET is not set: event-stream tokens are signed with "
                    "a random secret, valid on this replica only")  # fmt: skip
    page_images = PageImages(store, limits, max_side=api.viewer_max_side, dpi=api.viewer_dpi)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        book.start()
        if usage is not None:
            usage.start()
        try:
            yield
        finally:
            book.close()
            if usage is not None:
                await anyio.to_thread.run_sync(usage.close)
            await anyio.to_thread.run_sync(client.close)

    app = FastAPI(
        title="ocrstream", summary="OCR of scanned documents on Kafka: the HTTP edge.",
        lifespan=lifespan,
    )  # fmt: skip
    app.state.keys = keys
    app.state.limiter = limiter
    app.include_router(ui.router)

    @app.exception_handler(RetriableError)
    async def unavailable(_request: Request, e: RetriableError) -> JSONResponse:
        """The store or Kafka away: try again soon (the request changed nothing that counts)."""
        log.warning("answering 503: %s", e)
        return JSONResponse({"detail": f"{e.code}: try again"}, status_code=503,
                            headers={"Retry-After": "5"})  # fmt: skip

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Any:
        started = time.perf_counter()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            route = getattr(request.scope.get("route"), "path", "unmatched")
            tenant = getattr(request.state, "tenant", "")
            metrics.api_requests.labels(route, str(status), tenant).inc()
            metrics.api_request_seconds.labels(route, str(status)).observe(
                time.perf_counter() - started
            )

    async def with_callback(options: tuple[Any, ...], url: str | None) -> tuple[Any, ...]:
        """The options with the callback URL among the attributes, once it passed the SSRF
        check (its host resolved, every address allowed); 422 saying why not."""
        if not url:
            return options
        check = partial(webhook.check_callback_url, url, allow_http=webhooks.allow_http,
                        allowed=callback_networks)  # fmt: skip
        try:
            await anyio.to_thread.run_sync(check)
        except webhook.CallbackRefusedError as e:
            raise HTTPException(422, f"callback_url refused: {e}") from e
        outputs, priority, attributes, mode, reading = options
        return outputs, priority, {**attributes, webhook.CALLBACK_ATTRIBUTE: url}, mode, reading

    def links(doc_id: str) -> dict[str, str]:
        return {"status_url": f"/v1/documents/{doc_id}",
                "events_url": f"/v1/documents/{doc_id}/events"}  # fmt: skip

    def submission(doc_id: str, tenant: str) -> dict[str, Any]:
        """The API's record of the upload, if it is ``tenant``'s; 404 otherwise, the same
        answer for another tenant's id as for a missing one."""
        try:
            validate_doc_id(doc_id)
            body = json.loads(store.get_bytes(store.keys.submission(doc_id), max_bytes=1 << 20))
        except (ObjectNotFoundError, InvalidDocIdError) as e:
            raise HTTPException(404, "no such document") from e
        if body.get("tenant") != tenant:
            raise HTTPException(404, "no such document")
        return dict(body)

    async def publish(doc_id: str, tenant: str, source: ScanSource, media_type: str,
                      sha256: str, size: int, options: tuple[Any, ...],
                      filename: str | None) -> Accepted:  # fmt: skip
        outputs, priority, attributes, mode, reading = options
        now = utc_now()
        record = {"doc_id": doc_id, "tenant": tenant, "submitted_at": now.isoformat(),
                  "filename": filename, "content_type": media_type, "size_bytes": size,
                  "source": source.uri}  # fmt: skip
        index = store.keys.tenant_document(tenant, doc_id, int(now.timestamp() * 1000))

        def remember() -> None:
            store.put_bytes(store.keys.submission(doc_id), json.dumps(record).encode(),
                            content_type="application/json")  # fmt: skip
            store.put_bytes(index, b"", content_type="application/octet-stream")

        await anyio.to_thread.run_sync(remember)
        scan = ScanSubmitted(
            doc_id=doc_id, source=source, content_type=media_type, sha256=sha256,
            size_bytes=size, submitted_at=now, tenant=tenant, priority=priority,
            outputs=outputs, attributes=attributes, trace_id=uuid.uuid4().hex, mode=mode,
            options=reading,
        )  # fmt: skip
        await anyio.to_thread.run_sync(client.publish, scan)
        log.info("accepted %s for tenant %s (%d bytes, %s)", doc_id, tenant, size, media_type)
        return Accepted(doc_id=doc_id, **links(doc_id))

    async def charge(tenant: str, path: Path, stored_key: str | None) -> None:
        """Charge the pages of the document in ``path`` to the tenant's day, or answer 429 (and
        delete ``stored_key``, the upload that does not fit)."""
        pages = await anyio.to_thread.run_sync(count_pages, path, limits, mupdf)
        refusal = limiter.charge_pages(tenant, pages)
        if refusal is not None:
            if stored_key is not None:
                await anyio.to_thread.run_sync(store.delete, stored_key)
            raise too_many(refusal)

    @app.post(
        "/v1/documents", status_code=202, response_model=Accepted,
        openapi_extra={"requestBody": {"content": {
            "multipart/form-data": {"schema": {"type": "object", "required": ["file"],
                "properties": {"file": {"type": "string", "format": "binary"},
                               "mode": {"type": "string"}, "outputs": {"type": "string"},
                               "priority": {"type": "integer"},
                               "attributes": {"type": "string"},
                               "callback_url": {"type": "string"},
                               "regions": {"type": "string"}}}},
            "application/json": {"schema": SourceUri.model_json_schema()}}}},
    )  # fmt: skip
    async def submit(request: Request, tenant: Tenant) -> Accepted:
        """Submit a document: a multipart ``file`` (streamed to the store) or JSON
        ``{"source_uri": "s3://…"}``. ``outputs`` in a form is comma-separated, ``attributes``
        a JSON object; ``callback_url`` gets the terminal event, signed (422 when it may not be
        called: not https, or its host resolves to a loopback, private or reserved address);
        ``regions`` (key-field mode) JSON: named boxes or a template."""
        content_type = request.headers.get("content-type", "")
        doc_id = uuid.uuid4().hex
        counting = limiter.counts_pages(tenant)
        if counting and (refusal := limiter.pages_left(tenant)) is not None:
            raise too_many(refusal)  # before a byte of the body is read
        if content_type.startswith("application/json"):
            return await submit_uri(request, tenant, doc_id, counting)
        if not content_type.startswith("multipart/form-data"):
            raise HTTPException(415, "send multipart/form-data with a file, or JSON")
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limits.max_file_bytes + (1 << 20):
            raise HTTPException(413, f"the file is over the limit of {limits.max_file_bytes}")
        boundary = dict(p.strip().split("=", 1) for p in content_type.split(";")[1:]
                        if "=" in p).get("boundary", "").strip('"')  # fmt: skip
        if not boundary:
            raise HTTPException(400, "multipart/form-data without a boundary")
        with contextlib.ExitStack() as cleanup:
            spool = (cleanup.enter_context(tempfile.NamedTemporaryFile(prefix="ocrstream-api-"))
                     if counting else None)  # fmt: skip
            try:
                stored = await upload.receive(
                    request.stream(), boundary.encode(), store, doc_id,
                    max_bytes=limits.max_file_bytes, queue_chunks=api.upload_queue_chunks,
                    metadata={"tenant": tenant}, spool=spool,
                )  # fmt: skip
            except upload.UploadError as e:
                raise HTTPException(e.status, e.detail) from e
            except OcrstreamError as e:
                raise HTTPException(503, f"the store refused the upload: {e}") from e
            options = await form_options(stored)
            if spool is not None:
                await anyio.to_thread.run_sync(spool.flush)
                await charge(tenant, Path(spool.name), stored.info.key)
        return await publish(doc_id, tenant, ScanSource(uri=stored.info.uri), stored.media_type,
                             stored.sha256, stored.size, options, stored.filename)  # fmt: skip

    async def form_options(stored: upload.Stored) -> tuple[Any, ...]:
        fields = stored.fields
        try:  # the fields may follow the file in the form: checked once it is stored
            try:
                attributes = json.loads(fields.get("attributes") or "{}")
                priority = int(fields.get("priority") or 0)
            except ValueError as e:
                raise HTTPException(422, f"bad form field: {e}") from e
            outputs = [o.strip() for o in (fields.get("outputs") or ",".join(DEFAULT_OUTPUTS))
                       .split(",") if o.strip()]  # fmt: skip
            options = _options(fields.get("mode") or "text", outputs, priority, attributes,
                               fields.get("regions"))  # fmt: skip
            options = await with_callback(options, fields.get("callback_url"))
        except HTTPException:
            await anyio.to_thread.run_sync(store.delete, stored.info.key)
            raise
        return options

    async def submit_uri(request: Request, tenant: str, doc_id: str, counting: bool) -> Accepted:
        try:
            body = SourceUri.model_validate(await request.json())
        except ValueError as e:
            raise HTTPException(422, f"bad JSON body: {e}") from e
        options = _options(body.mode, body.outputs, body.priority, body.attributes, body.regions)
        options = await with_callback(options, body.callback_url)
        try:
            bucket, key = parse_s3_uri(body.source_uri)
        except OcrstreamError as e:
            raise HTTPException(422, str(e)) from e
        # The pipeline's own objects belong to documents (maybe another tenant's): not a source.
        if bucket == store.bucket and key.startswith(store.keys.pipeline_prefixes):
            raise HTTPException(422, "source_uri points into the pipeline's own objects")

        def inspect() -> tuple[int, bytes]:
            info = store.stat(key, bucket=bucket)
            if info.size > limits.max_file_bytes:
                return info.size, b""
            with store.open(key, bucket=bucket) as f:
                return info.size, f.read(upload.SNIFF_BYTES)

        try:
            size, head = await anyio.to_thread.run_sync(inspect)
        except ObjectNotFoundError as e:
            raise HTTPException(422, f"no object at {body.source_uri}") from e
        except PoisonError as e:  # the store refused (no access): unavailable ones answer 503
            raise HTTPException(422, f"cannot read {body.source_uri}: {e}") from e
        if size > limits.max_file_bytes:
            raise HTTPException(413, f"the file is over the limit of {limits.max_file_bytes}")
        media_type = sniff(head)
        if media_type is None:
            raise HTTPException(415, "not a PDF or an image the splitter reads")
        if counting:  # its pages, counted in a copy (the object is not ours to delete)
            with tempfile.TemporaryDirectory(prefix="ocrstream-api-") as tmp:
                copy = Path(tmp) / "source"
                await anyio.to_thread.run_sync(lambda: store.get_to_file(
                    key, copy, bucket=bucket, max_bytes=limits.max_file_bytes))  # fmt: skip
                await charge(tenant, copy, None)
        # The sha256 of a referenced object is not read here (that would mean fetching all of
        # it); the splitter does not need it.
        return await publish(doc_id, tenant, ScanSource(uri=body.source_uri), media_type, "",
                             size, options, None)  # fmt: skip

    @app.get("/v1/documents", response_model=DocumentList)
    async def list_documents(
        tenant: Tenant,
        limit: Annotated[int, Query(ge=1, le=1000)] = 50,
        after: Annotated[str | None, Query(description="`next` of the page before")] = None,
    ) -> DocumentList:
        """The tenant's documents, newest first, ``limit`` a page."""
        prefix = store.keys.tenant_documents_prefix(tenant)
        if after is not None and not _CURSOR.fullmatch(after):
            raise HTTPException(422, "after must be the next of an earlier page")
        start = None if after is None else prefix + after
        found = await anyio.to_thread.run_sync(
            lambda: store.list_objects(prefix, start_after=start, limit=limit + 1)
        )
        names = [o.key[len(prefix) :] for o in found]
        documents = []
        for name in names[:limit]:
            countdown, doc_id = name.split("-", 1)
            submitted = datetime.fromtimestamp((10**13 - int(countdown)) / 1000, UTC)
            documents.append(describe(doc_id, submitted.isoformat()))
        return DocumentList(documents=documents,
                            next=names[limit - 1] if len(names) > limit else None)  # fmt: skip

    def describe(doc_id: str, submitted_at: str | None) -> DocumentStatusBody:
        entry = book.get(doc_id)
        ev, pr = entry.event, entry.progress
        if ev is not None and (pr is None or pr.revision <= ev.revision):
            return terminal(ev, submitted_at)
        if pr is not None:  # under way: the first revision, or a reprocess after a terminal one
            return DocumentStatusBody(
                doc_id=doc_id, status="processing", pages_done=pr.pages_done,
                page_count=pr.page_count, outputs={}, error=None,
                submitted_at=submitted_at, revision=pr.revision,
            )  # fmt: skip
        return DocumentStatusBody(doc_id=doc_id, status="queued", pages_done=0, page_count=None,
                                  outputs={}, error=None, submitted_at=submitted_at)  # fmt: skip

    def terminal(ev: DocumentEvent, submitted_at: str | None) -> DocumentStatusBody:
        doc_id = ev.doc_id
        outputs = {fmt: f"/v1/documents/{doc_id}/document.{fmt}" for fmt in ev.outputs}
        error = None if ev.error is None else {"code": ev.error.code,
                                               "message": ev.error.message}  # fmt: skip
        return DocumentStatusBody(
            doc_id=doc_id, status=ev.status.value, pages_done=ev.pages_ok + ev.pages_failed,
            page_count=ev.page_count, outputs=outputs, error=error,
            submitted_at=submitted_at, revision=ev.revision,
        )  # fmt: skip

    @app.get("/v1/documents/{doc_id}", response_model=DocumentStatusBody)
    async def status(doc_id: str, tenant: Tenant) -> DocumentStatusBody:
        """Where the document is: queued, processing, or its terminal status."""
        record = await anyio.to_thread.run_sync(submission, doc_id, tenant)
        return describe(doc_id, record.get("submitted_at"))

    @app.get("/v1/documents/{doc_id}/events", response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}}}})  # fmt: skip
    async def document_events(
        doc_id: str,
        request: Request,
        last_event_id: Annotated[str | None, Header()] = None,
        token: Annotated[str | None, Query(description=TOKEN_DOC)] = None,
        last_event_id_query: Annotated[str | None, Query(alias="last_event_id")] = None,
    ) -> StreamingResponse:
        """Server-Sent Events: ``progress``, ``page`` (each page's result, its text as data) and
        ``terminal`` (the status body), then the stream ends. Reconnect with ``Last-Event-ID``
        (the header, or the query parameter) to go on after the last event received.
        Authorised by the key, or by a ``token`` for this document."""
        if token is None:
            tenant = tenant_of(request)
        else:
            found = tokens.tenant(token, doc_id)
            if found is None:
                raise HTTPException(401, "the token is not valid for this document (or expired)")
            tenant = request.state.tenant = found
        last_event_id = last_event_id or last_event_id_query
        record = await anyio.to_thread.run_sync(submission, doc_id, tenant)
        since = datetime.fromisoformat(record["submitted_at"])
        submitted_at = record.get("submitted_at")
        entry = book.get(doc_id)
        known = [r.revision for r in (entry.event, entry.progress) if r is not None]
        body = events.stream(
            kafka, client.codec, doc_id, since, last_event_id,
            lambda ev: terminal(ev, submitted_at).model_dump(), api.events_max_s,
            max(known, default=1), metrics,
        )  # fmt: skip
        return StreamingResponse(body, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache",
                                          "X-Accel-Buffering": "no"})  # fmt: skip

    @app.post("/v1/documents/{doc_id}/events/token", response_model=EventsToken)
    async def events_token(doc_id: str, tenant: Tenant) -> EventsToken:
        """A short-lived token that opens this document's event stream without the key
        (``?token=``), for a browser's EventSource, which cannot send a header."""
        await anyio.to_thread.run_sync(submission, doc_id, tenant)
        token, expires = tokens.issue(tenant, doc_id)
        return EventsToken(token=token, expires_at=expires,
                           events_url=f"/v1/documents/{doc_id}/events?token={token}")  # fmt: skip

    @app.get("/v1/documents/{doc_id}/pages/{page_no}.jpg", response_class=Response,
             responses={200: {"content": {"image/jpeg": {}}}})  # fmt: skip
    async def page_image(doc_id: str, page_no: int, tenant: Tenant) -> Response:
        """The viewer's image of a finished document's page: rendered from the source on its
        first request and kept in the store (``documents/{doc_id}/viewer/``), turned as the
        engine read it; draw document.json's polygons on it scaled by the page's size."""
        record = await anyio.to_thread.run_sync(submission, doc_id, tenant)
        if not 1 <= page_no <= MAX_PAGE_NO:
            raise HTTPException(404, "no such page")
        try:
            data = await anyio.to_thread.run_sync(page_images.get, doc_id, page_no, record)
        except NoPageImage as e:
            raise HTTPException(404, f"no image of this page: {e}") from e
        return Response(data, media_type="image/jpeg",
                        headers={"Cache-Control": "private, max-age=86400"})  # fmt: skip

    @app.get("/v1/documents/{doc_id}/document.{fmt}", response_class=StreamingResponse,
             responses={200: {"content": {"application/octet-stream": {}}},
                        307: {"description": "a presigned URL of the output in the store "
                                             "(OCRSTREAM_API_OUTPUT_REDIRECT)"}})  # fmt: skip
    async def output(doc_id: str, fmt: str, tenant: Tenant) -> Response:
        """One output of a finished document, streamed from the store, or a redirect to a
        presigned URL of it when the API is configured so."""
        if fmt not in DOCUMENT_FORMATS:
            raise HTTPException(404, "no such output")
        await anyio.to_thread.run_sync(submission, doc_id, tenant)
        key = store.keys.document(doc_id, fmt)
        if api.output_redirect:

            def sign() -> str:
                store.stat(key)  # 404 until it exists, as when streamed
                expires = timedelta(seconds=api.presign_expiry_s)
                return presigner.presigned_get_url(key, expires=expires)

            try:
                url = await anyio.to_thread.run_sync(sign)
            except ObjectNotFoundError as e:
                raise HTTPException(404, "no such output (yet)") from e
            return RedirectResponse(url, status_code=307, headers={"Cache-Control": "no-store"})
        opened = contextlib.ExitStack()
        try:
            reader = await anyio.to_thread.run_sync(
                lambda: opened.enter_context(store.open(key)))  # fmt: skip
        except ObjectNotFoundError as e:
            raise HTTPException(404, "no such output (yet)") from e

        def chunks() -> Iterator[bytes]:
            with opened:
                while data := reader.read(CHUNK):
                    yield data

        media = {"json": "application/json", "txt": "text/plain; charset=utf-8",
                 "pdf": "application/pdf", "md": "text/markdown; charset=utf-8"}[fmt]  # fmt: skip
        return StreamingResponse(chunks(), media_type=media, headers={
            "Content-Disposition": f'attachment; filename="{doc_id}.{fmt}"'})  # fmt: skip

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process answers."""
        return {"status": "ok"}

    admins: list[AdminClient] = []

    def admin_client() -> AdminClient:
        """One admin client for every probe (each new one would open its own connections)."""
        if not admins:
            admins.append(AdminClient(kafka.librdkafka()))
        return admins[0]

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """Kafka and the store reachable, and the document book caught up with the topics."""

        def check() -> dict[str, str]:
            found: dict[str, str] = {}
            try:
                admin = admin_client()
                topic = kafka.topic(topics.SCANS)
                md = admin.list_topics(topic, timeout=3)
                ok = topic in md.topics and md.topics[topic].error is None
                found["kafka"] = "ok" if ok else f"topic {topic} missing"
            except (KafkaException, OSError) as e:
                found["kafka"] = f"unreachable: {e}"
            try:
                ok = store.client.bucket_exists(store.bucket)
                found["store"] = "ok" if ok else f"bucket {store.bucket} missing"
            except (S3Error, HTTPError, OSError) as e:
                found["store"] = f"unreachable: {e}"
            found["documents"] = "ok" if book.caught_up.is_set() else "catching up"
            if usage is not None:
                found["usage"] = "ok" if usage.caught_up.is_set() else "catching up"
            return found

        checks = await anyio.to_thread.run_sync(check)
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse({"ready": ready, **checks}, status_code=200 if ready else 503)

    @app.get("/metrics", include_in_schema=False)
    async def metrics_endpoint() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
