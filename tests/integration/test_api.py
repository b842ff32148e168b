"""The HTTP API (``ocrstream api``) as a process on the real Kafka and S3 store, in front of
the pipeline's agents (the fast fake OCR worker): what a client of the API sees.

- A PDF, an image and a ``source_uri`` go in as a tenant's uploads; each answers 202, its
  status moves to ``completed`` with every page done, and its outputs stream back with each
  page's text. Another tenant gets 404 for those ids, exactly as for an id nobody made.
- 401 without a key or with a wrong one; 413 for a file over the limit, answered while the
  body is still being sent (the upload is checked as it streams); 415 for bytes that are no
  PDF or image, whatever the file is called; ``/readyz`` ready, and not ready when the
  pipeline's topics are missing; ``/metrics`` counts requests by route, status and tenant.
"""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import os
import select
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pymupdf
import pytest
from PIL import Image

from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import ScanSubmitted
from ocrstream.settings import KafkaSettings
from ocrstream.storage import ObjectStore
from ocrstream.streams.topics import SCANS
from tests.integration import harness
from tests.integration.harness import REPO, fake_doc, free_port
from tests.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

LIMIT = 1024 * 1024  # OCRSTREAM_LIMIT_MAX_FILE_BYTES of the API under test


@dataclass
class Api:
    url: str
    port: int
    keys: dict[str, str]  # tenant → key
    proc: subprocess.Popen[bytes]
    log: Path

    def request(self, method: str, path: str, *, tenant: str | None = None,
                key: str | None = None, body: bytes | None = None,
                content_type: str | None = None) -> tuple[int, bytes, dict[str, str]]:  # fmt: skip
        headers = {}
        if tenant is not None or key is not None:
            headers["Authorization"] = f"Bearer {key or self.keys[tenant or '']}"
        if content_type:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                return response.status, response.read(), dict(response.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)

    def json(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        status, body, _ = self.request(method, path, **kwargs)
        return status, json.loads(body) if body else None

    def upload(self, tenant: str, data: bytes, filename: str, **fields: str) -> tuple[int, Any]:
        body, content_type = multipart(data, filename, fields)
        return self.json("POST", "/v1/documents", tenant=tenant, body=body,
                         content_type=content_type)  # fmt: skip


def multipart(data: bytes, filename: str, fields: dict[str, str]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    out = io.BytesIO()
    for name, value in fields.items():
        out.write(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
                  f"{value}\r\n".encode())  # fmt: skip
    out.write(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
              f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
              .encode())  # fmt: skip
    out.write(data)
    out.write(f"\r\n--{boundary}--\r\n".encode())
    return out.getvalue(), f"multipart/form-data; boundary={boundary}"


def start_api(kafka: KafkaSettings, bucket: str, tmp_path: Path, name: str = "api",
              **extra_env: str) -> Api:  # fmt: skip
    keys_file = tmp_path / "api-keys.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "OCRSTREAM_TOPIC_PREFIX": kafka.topic_prefix,
        "OCRSTREAM_S3_BUCKET": bucket,
        "OCRSTREAM_API_KEYS_FILE": str(keys_file),
        "OCRSTREAM_WEBHOOK_SECRETS_FILE": str(tmp_path / "webhook-secrets.json"),
        "OCRSTREAM_LIMIT_MAX_FILE_BYTES": str(LIMIT),
        **extra_env,
    }
    keys = {}
    for tenant in ("acme", "globex"):
        made = subprocess.run(
            [sys.executable, "-m", "ocrstream", "api", "keys", "create", "--tenant", tenant],
            env=env, cwd=REPO, capture_output=True, check=True,
        )  # fmt: skip
        keys[tenant] = made.stdout.decode().strip()
    stored = keys_file.read_text()
    assert all(key not in stored for key in keys.values()), "a key itself was stored"
    port = free_port()
    log = tmp_path / f"{name}.log"
    with open(log, "wb") as out:
        argv = [sys.executable, "-m", "ocrstream", "api", "--port", str(port)]
        proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    return Api(f"http://127.0.0.1:{port}", port, keys, proc, log)


def stop_api(api: Api) -> None:
    api.proc.terminate()
    try:
        code = api.proc.wait(20)
    finally:
        if api.proc.poll() is None:
            api.proc.kill()
        print(f"--- {api.log.name} ---\n" + api.log.read_text(errors="replace")[-4000:])
    assert code == 0, f"the API exited with {code}"


def wait_ready(api: Api, timeout_s: float = 60.0) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        assert api.proc.poll() is None, api.log.read_text()[-3000:]
        status, body = api.json("GET", "/readyz")
        return body if status == 200 else None

    return wait_until(ready, timeout_s, "the API ready", interval_s=0.3,
                      ignoring=(OSError,))  # fmt: skip


@pytest.fixture
def api(topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path) -> Iterator[Api]:
    api = start_api(topics, object_store.bucket, tmp_path)
    try:
        wait_ready(api)
        yield api
    finally:
        stop_api(api)


def png(width: int, height: int) -> bytes:
    gray = np.full((height, width), 255, np.uint8)
    gray[20:30, 20:120] = 10
    out = io.BytesIO()
    Image.fromarray(gray).save(out, format="PNG")
    return out.getvalue()


def wait_status(api: Api, tenant: str, doc_id: str, timeout_s: float = 90.0) -> Any:
    seen: set[str] = set()

    def terminal() -> Any:
        status, body = api.json("GET", f"/v1/documents/{doc_id}", tenant=tenant)
        assert status == 200, (status, body)
        seen.add(body["status"])
        return body if body["status"] in ("completed", "partial", "failed") else None

    body = wait_until(terminal, timeout_s, f"{doc_id} finished", interval_s=0.2)
    assert seen <= {"queued", "processing", "completed", "partial", "failed"}, seen
    return body


def test_uploads_complete_and_their_outputs_stream_back(
    api: Api, topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path
) -> None:
    with harness.stack(topics, object_store.bucket, tmp_path) as make:
        pipeline, _witness = make()
        pipeline.start()
        pdf = fake_doc(1, 3)
        image = png(321, 123)  # the fake engine reads a page back as "page WxH"
        # an existing object handed over by URI, as a scanner station that uploads itself would
        object_store.put_bytes("incoming/station-7/scan.pdf", fake_doc(2, 2).data)
        accepted = {
            "pdf": api.upload("acme", pdf.data, "contract.pdf", priority="5",
                              attributes='{"case": "A-17"}'),
            "png": api.upload("acme", image, "receipt.bin", outputs="json,txt"),
            "uri": api.json("POST", "/v1/documents", tenant="acme", content_type="application/json",
                            body=json.dumps({"source_uri": object_store.uri(
                                "incoming/station-7/scan.pdf")}).encode()),
        }  # fmt: skip
        for name, (status, body) in accepted.items():
            assert status == 202, (name, body)
            assert body["status_url"] == f"/v1/documents/{body['doc_id']}"
            assert body["events_url"] == f"/v1/documents/{body['doc_id']}/events"
        ids = {name: body["doc_id"] for name, (_, body) in accepted.items()}

        done = {name: wait_status(api, "acme", doc_id) for name, doc_id in ids.items()}
        want_pages = {"pdf": 3, "png": 1, "uri": 2}
        for name, body in done.items():
            assert body["status"] == "completed", (name, body)
            assert body["pages_done"] == body["page_count"] == want_pages[name], (name, body)
            assert body["error"] is None
        assert set(done["pdf"]["outputs"]) == {"json", "txt", "pdf"}
        assert set(done["png"]["outputs"]) == {"json", "txt"}

        # the outputs, streamed back: each page's own text
        status, raw, headers = api.request("GET", done["pdf"]["outputs"]["json"], tenant="acme")
        assert status == 200
        assert headers["content-type"] == "application/json"
        document = json.loads(raw)
        texts = [" ".join(line["text"] for line in page["lines"]) for page in document["pages"]]
        assert texts == list(pdf.texts)
        status, raw, _ = api.request("GET", done["png"]["outputs"]["txt"], tenant="acme")
        assert status == 200
        assert raw.decode().strip() == "page 321x123"
        status, raw, headers = api.request("GET", done["pdf"]["outputs"]["pdf"], tenant="acme")
        assert status == 200
        assert headers["content-type"] == "application/pdf"
        with pymupdf.open(stream=raw, filetype="pdf") as searchable:
            assert searchable.page_count == 3
        status, _, _ = api.request("GET", f"/v1/documents/{ids['png']}/document.pdf",
                                   tenant="acme")  # fmt: skip
        assert status == 404  # not asked for

        # the events of the PDF: each page with its text, then the terminal status; the stream
        # ends there. Resumed after the second event, it sends every event not yet seen, once,
        # and the terminal last (the three topics are fetched independently, so the order of
        # progress against page events may differ from the first stream's, and so their ids).
        stream = read_events(api, "acme", ids["pdf"])
        pages = {e["data"]["page_no"]: e["data"]["text"] for e in stream if e["event"] == "page"}
        assert pages == {1: pdf.texts[0], 2: pdf.texts[1], 3: pdf.texts[2]}
        assert stream[-1]["event"] == "terminal"
        assert stream[-1]["data"]["status"] == "completed"
        assert stream[-1]["data"]["pages_done"] == 3
        assert len({e["id"] for e in stream}) == len(stream)
        resumed = read_events(api, "acme", ids["pdf"], last_event_id=stream[1]["id"])
        assert harness.event_contents(resumed) == harness.event_contents(stream[2:])
        assert resumed[-1]["event"] == "terminal"
        assert resumed[-1]["data"] == stream[-1]["data"]
        assert len({e["id"] for e in resumed}) == len(resumed)

        # the tenant's list, newest first, a page at a time
        status, first = api.json("GET", "/v1/documents?limit=2", tenant="acme")
        assert status == 200
        assert [d["doc_id"] for d in first["documents"]] == [ids["uri"], ids["png"]]
        assert [d["status"] for d in first["documents"]] == ["completed", "completed"]
        status, second = api.json("GET", f"/v1/documents?limit=2&after={first['next']}",
                                  tenant="acme")  # fmt: skip
        assert [d["doc_id"] for d in second["documents"]] == [ids["pdf"]]
        assert second["next"] is None
        assert api.json("GET", "/v1/documents", tenant="globex") == (
            200, {"documents": [], "next": None})  # fmt: skip

        # the tenant travelled with the scan to the terminal event
        terminal = wait_until(lambda: _witness.terminal().get(ids["pdf"]), 30, "event")
        assert terminal[0].tenant == "acme"
        assert terminal[0].attributes.get("case") == "A-17"

        # another tenant sees nothing of it: the same 404 as an id nobody made
        missing = api.request("GET", f"/v1/documents/{uuid.uuid4().hex}", tenant="globex")
        assert missing[0] == 404
        for doc_id in ids.values():
            other = api.request("GET", f"/v1/documents/{doc_id}", tenant="globex")
            assert (other[0], other[1]) == (missing[0], missing[1])
            output = api.request("GET", f"/v1/documents/{doc_id}/document.json",
                                 tenant="globex")  # fmt: skip
            assert (output[0], output[1]) == (missing[0], missing[1])
            events = api.request("GET", f"/v1/documents/{doc_id}/events", tenant="globex")
            assert (events[0], events[1]) == (missing[0], missing[1])

    # /metrics counts them by route, status and tenant
    _, text, _ = api.request("GET", "/metrics")
    assert (b'ocrstream_api_requests_total{route="/v1/documents",status="202",tenant="acme"} 3.0'
            in text), text.decode()[-3000:]  # fmt: skip
    assert b'route="/v1/documents/{doc_id}",status="404",tenant="globex"' in text
    assert b"ocrstream_api_request_seconds_bucket" in text


@pytest.mark.timeout(360)
def test_the_status_names_the_revision_and_a_reprocess_moves_it_on(
    api: Api, topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path
) -> None:
    """A document's status is of revision 1; after ``ocrstream reprocess`` it is completed at
    revision 2, in the status body and in the terminal event of its stream."""
    with harness.stack(topics, object_store.bucket, tmp_path) as make:
        pipeline, _witness = make()
        pipeline.start()
        status, accepted = api.upload("acme", fake_doc(4, 2).data, "letter.pdf")
        assert status == 202, accepted
        doc_id = accepted["doc_id"]
        first = wait_status(api, "acme", doc_id)
        assert (first["status"], first["revision"]) == ("completed", 1), first

        env = {**os.environ, "OCRSTREAM_TOPIC_PREFIX": topics.topic_prefix,
               "OCRSTREAM_S3_BUCKET": object_store.bucket}  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "ocrstream", "reprocess", doc_id, "--timeout", "180"],
            env=env, cwd=REPO, capture_output=True, timeout=240,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]

        def at_revision_2() -> dict[str, Any] | None:
            status, body = api.json("GET", f"/v1/documents/{doc_id}", tenant="acme")
            assert status == 200, body
            return body if body["revision"] == 2 and body["status"] == "completed" else None

        second = wait_until(at_revision_2, 60, "the status at revision 2", interval_s=0.2)
        assert second["pages_done"] == second["page_count"] == 2, second
        stream = read_events(api, "acme", doc_id)
        assert stream[-1]["event"] == "terminal"
        assert stream[-1]["data"]["revision"] == 2


def read_events(
    api: Api, tenant: str, doc_id: str, last_event_id: str | None = None
) -> list[dict[str, Any]]:
    """The Server-Sent Events of a document, to the end of the stream (after its terminal)."""
    headers = {"Authorization": f"Bearer {api.keys[tenant]}"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    req = urllib.request.Request(f"{api.url}/v1/documents/{doc_id}/events", headers=headers)
    with urllib.request.urlopen(req, timeout=30) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    return harness.parse_sse(text)


def test_refusals_and_readiness(
    api: Api, topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path
) -> None:
    pdf = fake_doc(3, 1).data
    # 401: no key, a wrong key, a key in the wrong scheme
    body, content_type = multipart(pdf, "a.pdf", {})
    for headers in ({}, {"key": "ocs_not-a-key"}):
        status, _, answer = api.request("POST", "/v1/documents", body=body,
                                        content_type=content_type, **headers)  # fmt: skip
        assert status == 401
        assert answer.get("www-authenticate") == "Bearer"
    assert api.request("GET", f"/v1/documents/{uuid.uuid4().hex}", key="nope")[0] == 401

    # 415: sniffed from the bytes, not trusted from the name
    status, answer = api.upload("acme", b"just some text, not a scan\n" * 100, "scan.pdf")
    assert status == 415, answer
    # 422 for a bad field, which may follow the file: the upload is not kept
    status, answer = api.upload("acme", pdf, "a.pdf", outputs="json,docx")
    assert status == 422, answer
    assert not [o for o in object_store.list_objects("scans/") if "source." in o.key]
    status, answer = api.upload("acme", pdf, "a.pdf", mode="tables-only")
    assert status == 422, answer
    # a PDF named .txt is read all the same; a layout-mode upload is taken
    assert api.upload("acme", pdf, "notes.txt")[0] == 202
    assert api.upload("acme", pdf, "paper.pdf", mode="layout")[0] == 202

    # 413 while streaming: the answer comes before the body is all sent
    sent, total, status_line = chunked_upload(api, "acme", size=4 * LIMIT)
    assert status_line.startswith(b"HTTP/1.1 413"), status_line
    assert sent < total, f"answered only after the whole body ({sent} of {total} bytes)"
    # and nothing of it stays in the store
    assert not [o for o in object_store.list_objects("scans/") if o.size > LIMIT]

    # ready: Kafka, the store and the document book
    status, ready = api.json("GET", "/readyz")
    assert status == 200
    assert ready == {"ready": True, "kafka": "ok", "store": "ok", "documents": "ok"}
    assert api.json("GET", "/healthz") == (200, {"status": "ok"})
    status, raw, _ = api.request("GET", "/openapi.json")
    assert status == 200
    assert "/v1/documents/{doc_id}" in json.loads(raw)["paths"]
    assert api.request("GET", "/docs")[0] == 200

    # not ready when the pipeline's topics are not there
    lost = start_api(KafkaSettings(topic_prefix=f"missing-{uuid.uuid4().hex[:8]}."),
                     object_store.bucket, tmp_path / "lost")  # fmt: skip
    try:

        def answer() -> Any:
            assert lost.proc.poll() is None, lost.log.read_text()[-3000:]
            status, body = lost.json("GET", "/readyz")
            return body if status == 503 else None

        body = wait_until(answer, 30, "a 503 from /readyz", ignoring=(OSError,))
        assert body["ready"] is False, body
        assert "missing" in body["kafka"], body
        assert body["store"] == "ok"
    finally:
        stop_api(lost)


def chunked_upload(api: Api, tenant: str, size: int) -> tuple[int, int, bytes]:
    """POST a multipart body of ``size`` file bytes with chunked transfer encoding, 64 KiB at a
    time, reading as soon as the server answers; (bytes sent, bytes in all, status line)."""
    boundary = uuid.uuid4().hex
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.pdf"'
            "\r\n\r\n").encode() + b"%PDF-1.7\n"  # fmt: skip
    chunks = [head] + [b"0" * 65536] * (size // 65536) + [f"\r\n--{boundary}--\r\n".encode()]
    total = sum(map(len, chunks))
    sent = 0
    with socket.create_connection(("127.0.0.1", api.port), timeout=30) as sock:
        sock.sendall(
            f"POST /v1/documents HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {api.keys[tenant]}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n".encode()
        )
        for chunk in chunks:
            if select.select([sock], [], [], 0.02)[0]:
                break
            try:
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
        deadline = time.monotonic() + 10
        answer = b""
        while b"\r\n" not in answer and time.monotonic() < deadline:
            data = sock.recv(4096)
            if not data:
                break
            answer += data
    return sent, total, answer.split(b"\r\n", 1)[0]


def test_a_big_upload_streams_through_without_growing_the_api(
    topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path
) -> None:
    """80 MiB in 5 MiB store parts: the upload arrives whole in the store, its sha256 on the
    ScanSubmitted, while the API's peak RSS grows by a few parts, far less than the file."""
    size, part = 80 * 1024 * 1024, 5 * 1024 * 1024
    api = start_api(topics, object_store.bucket, tmp_path,
                    OCRSTREAM_LIMIT_MAX_FILE_BYTES=str(2 * size),
                    OCRSTREAM_S3_PART_SIZE=str(part))  # fmt: skip
    try:
        wait_ready(api)
        assert api.upload("acme", fake_doc(4, 1).data, "warm-up.pdf")[0] == 202
        before = peak_rss(api.proc.pid)
        status, body = streamed_upload(api, "acme", size)
        grown = peak_rss(api.proc.pid) - before
    finally:
        stop_api(api)
    assert status == 202, body
    doc_id = body["doc_id"]
    (source,) = object_store.list_objects(f"scans/{doc_id}/source.")
    assert source.size == size
    # a few parts (the one being read, the SDK's copy, the one being sent), not the file
    assert grown < 6 * part, f"the API's peak RSS grew by {grown / 2**20:.0f} MiB"
    scans = harness.read_all(topics, SCANS, Codec(topics))
    (scan,) = [s for s in scans if isinstance(s, ScanSubmitted) and s.doc_id == doc_id]
    assert scan.size_bytes == size
    want = hashlib.sha256()
    for chunk in file_chunks(size):
        want.update(chunk)
    assert scan.sha256 == want.hexdigest()
    assert scan.tenant == "acme"


def peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def file_chunks(size: int) -> Iterator[bytes]:
    """``size`` bytes of a "PDF" (its header, then zeros) in 1 MiB chunks."""
    yield b"%PDF-1.7\n"
    left, zeros = size - 9, bytes(1 << 20)
    while left:
        yield zeros[: min(left, len(zeros))]
        left -= min(left, len(zeros))


def streamed_upload(api: Api, tenant: str, size: int) -> tuple[int, Any]:
    """A multipart upload of ``size`` bytes sent in 1 MiB chunks (never built whole here)."""
    boundary = uuid.uuid4().hex

    def body() -> Iterator[bytes]:
        yield (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
               'filename="big.pdf"\r\n\r\n').encode()  # fmt: skip
        yield from file_chunks(size)
        yield f"\r\n--{boundary}--\r\n".encode()

    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=120)
    try:
        conn.request("POST", "/v1/documents", body=body(), encode_chunked=True, headers={
            "Authorization": f"Bearer {api.keys[tenant]}",
            "Content-Type": f"multipart/form-data; boundary={boundary}"})  # fmt: skip
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_an_api_killed_mid_run_loses_no_document(
    topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path
) -> None:
    """The API keeps no state of its own: documents accepted by a replica that is then killed
    (SIGKILL, while their pages are still being read) finish, and a new replica (the same keys
    file, a new process) reports each of them completed, with all its events and outputs."""
    first = start_api(topics, object_store.bucket, tmp_path, name="api-first")
    with harness.stack(topics, object_store.bucket, tmp_path) as make:
        pipeline, _witness = make(env={"OCRSTREAM_WORKER_MAX_BATCH": "1",
                                       "OCRSTREAM_FAKE_ENGINE_PAGE_DELAY_S": "0.3"})  # fmt: skip
        pipeline.start()
        try:
            wait_ready(first)
            docs = [fake_doc(60 + i, 3) for i in range(3)]
            ids = []
            for i, doc in enumerate(docs):
                status, body = first.upload("acme", doc.data, f"batch-{i}.pdf")
                assert status == 202, body
                ids.append(body["doc_id"])
            status, body = first.json("GET", f"/v1/documents/{ids[-1]}", tenant="acme")
            assert status == 200
            assert body["status"] in ("queued", "processing"), "finished before the kill"
        finally:
            first.proc.kill()
            first.proc.wait(20)
            print(f"--- {first.log.name} ---\n" + first.log.read_text(errors="replace")[-3000:])

        second = start_api(topics, object_store.bucket, tmp_path, name="api-second")
        try:
            wait_ready(second)
            for doc, doc_id in zip(docs, ids, strict=True):
                done = wait_status(second, "acme", doc_id)
                assert done["status"] == "completed", done
                assert done["pages_done"] == done["page_count"] == 3
                stream = read_events(second, "acme", doc_id)
                pages = {e["data"]["page_no"]: e["data"]["text"]
                         for e in stream if e["event"] == "page"}  # fmt: skip
                assert pages == {1: doc.texts[0], 2: doc.texts[1], 3: doc.texts[2]}
                assert stream[-1]["event"] == "terminal"
                status, raw, _ = second.request("GET", f"/v1/documents/{doc_id}/document.txt",
                                                tenant="acme")  # fmt: skip
                assert status == 200
                assert all(text in raw.decode() for text in doc.texts)
            status, listed = second.json("GET", "/v1/documents?limit=10", tenant="acme")
            assert [d["doc_id"] for d in listed["documents"]] == ids[::-1]
        finally:
            stop_api(second)
