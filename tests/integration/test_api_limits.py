"""Per-tenant limits across API replicas, and outputs by presigned redirect, on the real Kafka
and S3 store (docs/architecture.md "HTTP API"; the design in ``ocrstream.api.limits``).

- Two ``ocrstream api`` processes on two ports share one tenant's requests per minute through
  ``ocr.api-usage.v1``: requests spread over both get 429 once the tenant's combined count is
  at the limit, with a ``Retry-After`` of at most a minute after which a request gets in again;
  another tenant is not affected; a burst sent to both at once overshoots by no more than the
  design says; ``/metrics`` counts the refusals and the usage by tenant and limit.
- Pages per day: a document whose pages do not fit in what is left of the tenant's day is
  refused (429, ``Retry-After`` until midnight UTC) and not kept nor published, on the other
  replica too; what fits is accepted; another tenant has its own quota; a replica started
  later reads the day's usage before it is ready and refuses as the others do.
- ``OCRSTREAM_API_OUTPUT_REDIRECT``: an output answers 307 to a presigned URL of the store,
  on ``OCRSTREAM_API_PRESIGN_ENDPOINT`` when set (the store as clients reach it),
  (the minio SDK's presign, against versitygw) that serves the output's bytes without a key.
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ocrstream.api.keys import KeyFile
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import ScanSubmitted
from ocrstream.settings import KafkaSettings
from ocrstream.storage import ObjectStore
from ocrstream.streams.topics import SCANS
from tests.integration import harness
from tests.integration.harness import fake_doc
from tests.integration.test_api import (
    Api,
    multipart,
    png,
    start_api,
    stop_api,
    wait_ready,
    wait_status,
)
from tests.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def replicas(kafka: KafkaSettings, bucket: str, tmp_path: Path, **env: str) -> list[Api]:
    """Two API processes on two ports, sharing the key file, Kafka and the store."""
    started = [start_api(kafka, bucket, tmp_path, name=f"api-{n}", **env) for n in "ab"]
    initech = KeyFile(tmp_path / "api-keys.json").create("initech")
    for api in started:
        api.keys["initech"] = initech
        wait_ready(api)
    return started


@pytest.fixture
def stop_after() -> Iterator[list[Api]]:
    apis: list[Api] = []
    yield apis
    for api in apis:
        stop_api(api)


def metric(api: Api, name: str, **labels: str) -> float:
    """The sample of ``name`` with exactly ``labels`` on the API's /metrics; 0 when absent."""
    _, text, _ = api.request("GET", "/metrics")
    for found in re.finditer(rf"^{name}(?:\{{(.*)\}})? (\S+)$", text.decode(), re.MULTILINE):
        if dict(re.findall(r'(\w+)="([^"]*)"', found.group(1) or "")) == labels:
            return float(found.group(2))
    return 0.0


def sees(api: Api, tenant: str, limit: str, at_least: float) -> bool:
    """Whether ``api`` counts at least that much of ``tenant``'s usage (its own and others')."""
    return metric(api, "ocrstream_api_usage_total", limit=limit, tenant=tenant) >= at_least


def listing(api: Api, tenant: str) -> tuple[int, dict[str, str]]:
    status, _, headers = api.request("GET", "/v1/documents?limit=1", tenant=tenant)
    return status, {k.lower(): v for k, v in headers.items()}


def test_requests_per_minute_are_shared_by_the_replicas(
    topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path, stop_after: list[Api]
) -> None:
    limit = 20
    a, b = replicas(topics, object_store.bucket, tmp_path,
                    OCRSTREAM_API_REQUESTS_PER_MINUTE=str(limit))  # fmt: skip
    stop_after += [a, b]
    rpm = "requests_per_minute"

    # half the limit on replica a; replica b hears of it, then takes the other half alone
    assert [listing(a, "acme")[0] for _ in range(10)] == [200] * 10
    wait_until(lambda: sees(b, "acme", rpm, 10), 30, "replica b counting a's requests")
    assert [listing(b, "acme")[0] for _ in range(10)] == [200] * 10
    status, headers = listing(b, "acme")
    refused_at = time.monotonic()
    assert status == 429
    retry_after = int(headers["retry-after"])
    assert 1 <= retry_after <= 60, retry_after
    # replica a, once it has heard of b's, refuses too
    wait_until(lambda: sees(a, "acme", rpm, 20), 30, "replica a counting b's requests")
    status, headers = listing(a, "acme")
    assert status == 429
    assert 1 <= int(headers["retry-after"]) <= 60

    # another tenant is not affected, on either replica
    assert [listing(api, "globex")[0] for api in (a, b)] == [200, 200]

    # a burst spread over both at once: each replica stops at the limit on what it knows,
    # so the two together admit the limit and at most what one admitted before the other
    # heard of it (the replication lag); then both refuse
    started = time.monotonic()
    answers = [listing(api, "initech")[0] for _ in range(30) for api in (a, b)]
    took, admitted = time.monotonic() - started, answers.count(200)
    lag = [
        metric(api, "ocrstream_api_usage_lag_seconds_sum")
        / max(1.0, metric(api, "ocrstream_api_usage_lag_seconds_count"))
        for api in (a, b)
    ]
    print(
        f"burst of 60 requests over two replicas in {took:.2f} s, limit {limit}: "
        f"{admitted} admitted; mean replication lag {lag[0]:.3f} s, {lag[1]:.3f} s"
    )
    assert limit <= admitted <= 2 * limit, answers
    assert set(answers) == {200, 429}
    wait_until(lambda: all(sees(api, "initech", rpm, admitted) for api in (a, b)), 30,
               "both replicas counting the whole burst")  # fmt: skip
    assert [listing(api, "initech")[0] for api in (a, b)] == [429, 429]

    # /metrics: refusals and usage by tenant and limit
    assert metric(a, "ocrstream_api_limited_total", limit=rpm, tenant="acme") == 1
    assert metric(b, "ocrstream_api_limited_total", limit=rpm, tenant="acme") == 1
    assert metric(b, "ocrstream_api_limited_total", limit=rpm, tenant="globex") == 0
    assert metric(a, "ocrstream_api_requests_total", route="/v1/documents", status="429",
                  tenant="acme") == 1  # fmt: skip
    _, text, _ = b.request("GET", "/metrics")
    assert b"ocrstream_api_usage_lag_seconds_count" in text

    # Retry-After is when a request gets in again (waiting it out is what a client does)
    time.sleep(max(0.0, refused_at + retry_after - time.monotonic()))
    assert listing(b, "acme")[0] == 200


def test_pages_per_day_are_charged_when_documents_are_accepted(
    topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path, stop_after: list[Api]
) -> None:
    a, b = replicas(topics, object_store.bucket, tmp_path, OCRSTREAM_API_PAGES_PER_DAY="5",
                    OCRSTREAM_API_TENANT_LIMITS='{"globex": {"pages_per_day": 3}}')  # fmt: skip
    stop_after += [a, b]
    ppd = "pages_per_day"

    status, first = a.upload("acme", fake_doc(1, 3).data, "three.pdf")
    assert status == 202, first
    wait_until(lambda: sees(b, "acme", ppd, 3), 30, "replica b counting a's pages")

    # 3 more do not fit in the 2 left today: refused on the other replica, until midnight UTC
    body, content_type = multipart_pdf(fake_doc(2, 3).data)
    status, raw, headers = b.request("POST", "/v1/documents", tenant="acme", body=body,
                                     content_type=content_type)  # fmt: skip
    assert status == 429, raw
    midnight = (int(time.time()) // 86400 + 1) * 86400
    assert abs(int(headers["retry-after"]) - (midnight - time.time())) < 30, headers
    assert "pages_per_day" in json.loads(raw)["detail"]
    # 2 fit
    status, second = b.upload("acme", fake_doc(3, 2).data, "two.pdf")
    assert status == 202, second
    # then nothing fits, not even an image; refused before the body is read, on either replica
    wait_until(lambda: sees(a, "acme", ppd, 5), 30, "replica a counting b's pages")
    assert a.upload("acme", png(50, 20), "one.png")[0] == 429
    uri = object_store.uri("incoming/one.pdf")
    object_store.put_bytes("incoming/one.pdf", fake_doc(4, 1).data)
    status, _, headers = a.request("POST", "/v1/documents", tenant="acme",
                                   content_type="application/json",
                                   body=json.dumps({"source_uri": uri}).encode())  # fmt: skip
    assert status == 429
    assert int(headers["retry-after"]) > 0

    # globex has its own quota: 3 pages, charged for a referenced object too
    status, third = b.json("POST", "/v1/documents", tenant="globex",
                           content_type="application/json",
                           body=json.dumps({"source_uri": uri}).encode())  # fmt: skip
    assert status == 202, third
    assert b.upload("globex", fake_doc(5, 3).data, "three.pdf")[0] == 429
    status, fourth = b.upload("globex", fake_doc(6, 2).data, "two.pdf")
    assert status == 202, fourth

    # what was refused is neither kept nor published (a source_uri is not copied)
    sources = {o.key.split("/")[1] for o in object_store.list_objects("scans/")
               if "/source." in o.key}  # fmt: skip
    assert sources == {first["doc_id"], second["doc_id"], fourth["doc_id"]}
    scans = harness.read_all(topics, SCANS, Codec(topics))
    published = sorted(s.doc_id for s in scans if isinstance(s, ScanSubmitted))
    assert published == sorted(d["doc_id"] for d in (first, second, third, fourth))

    assert metric(b, "ocrstream_api_limited_total", limit=ppd, tenant="acme") == 1
    assert metric(a, "ocrstream_api_limited_total", limit=ppd, tenant="acme") == 2
    assert metric(b, "ocrstream_api_limited_total", limit=ppd, tenant="globex") == 1
    wait_until(lambda: sees(a, "globex", ppd, 3), 30, "replica a counting globex's pages")

    # a replica started now reads the day's usage before it is ready: it refuses at once
    c = start_api(topics, object_store.bucket, tmp_path / "c", name="api-c",
                  OCRSTREAM_API_PAGES_PER_DAY="5",
                  OCRSTREAM_API_TENANT_LIMITS='{"globex": {"pages_per_day": 3}}')  # fmt: skip
    stop_after.append(c)
    assert wait_ready(c)["usage"] == "ok"
    assert c.upload("acme", png(50, 20), "one.png")[0] == 429
    assert c.upload("globex", png(50, 20), "one.png")[0] == 429


def multipart_pdf(data: bytes) -> tuple[bytes, str]:
    return multipart(data, "scan.pdf", {})


def test_outputs_redirect_to_a_presigned_url_of_the_store(
    topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path, stop_after: list[Api]
) -> None:
    api = start_api(topics, object_store.bucket, tmp_path, OCRSTREAM_API_OUTPUT_REDIRECT="true",
                    OCRSTREAM_API_PRESIGN_EXPIRY_S="120")  # fmt: skip
    stop_after.append(api)
    wait_ready(api)
    with harness.stack(topics, object_store.bucket, tmp_path) as make:
        pipeline, _ = make()
        pipeline.start()
        status, accepted = api.upload("acme", png(321, 123), "receipt.png", outputs="json,txt")
        assert status == 202, accepted
        done = wait_status(api, "acme", accepted["doc_id"])
    assert done["status"] == "completed", done

    status, headers = head_request(api, done["outputs"]["txt"], "acme")
    assert status == 307
    location = headers["location"]
    url = urllib.parse.urlsplit(location)
    assert f"{url.hostname}:{url.port}" == "127.0.0.1:19000", location
    query = urllib.parse.parse_qs(url.query)
    assert query["X-Amz-Expires"] == ["120"]
    assert "X-Amz-Signature" in query
    # followed without the API key: the output's own bytes
    with urllib.request.urlopen(location, timeout=30) as response:
        text = response.read()
    assert text.decode().strip() == "page 321x123"
    assert text == object_store.get_bytes(f"documents/{accepted['doc_id']}/document.txt")
    # a client that follows redirects gets the same with one call
    status, followed, _ = api.request("GET", done["outputs"]["json"], tenant="acme")
    assert status == 200
    assert json.loads(followed)["pages"][0]["lines"][0]["text"] == "page 321x123"
    # an output not asked for, and another tenant's document: 404, never a URL
    assert head_request(api, f"/v1/documents/{accepted['doc_id']}/document.pdf", "acme")[0] == 404
    assert head_request(api, done["outputs"]["txt"], "globex")[0] == 404

    # the store as clients reach it, under another name than the API's: signed for that host
    public = start_api(topics, object_store.bucket, tmp_path / "public",
                       OCRSTREAM_API_OUTPUT_REDIRECT="true",
                       OCRSTREAM_API_PRESIGN_ENDPOINT="http://localhost:19000")  # fmt: skip
    stop_after.append(public)
    wait_ready(public)
    status, headers = head_request(public, done["outputs"]["txt"], "acme")
    assert status == 307
    assert headers["location"].startswith(f"http://localhost:19000/{object_store.bucket}/")
    with urllib.request.urlopen(headers["location"], timeout=30) as response:
        assert response.read() == text


def head_request(api: Api, path: str, tenant: str) -> tuple[int, dict[str, str]]:
    """GET without following a redirect: the status and headers."""
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {api.keys[tenant]}"})
        response = conn.getresponse()
        response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()
