"""The web UI in a real headless browser: Debian's chromium driven by Playwright, against the
API process (``ocrstream api``) in front of the pipeline's agents (the fast fake OCR worker),
on the real Kafka and S3 store.

A person signs in with a key, picks a generated PDF, watches it complete in the list (its
progress fed by the event stream, opened with a short-lived token: the key is never in a URL),
opens the viewer and finds a box drawn on the page image for every line of document.json,
clicking a line highlights its box and the other way round, searching finds a line, the layout
blocks are drawn, and the downloads are there. The PDF has a text layer and is uploaded with
"answer from a PDF's own text layer", so its lines — one of them ``<img src=x onerror=alert(1)>``
— come through the pipeline exactly as written (no OCR guesswork, nothing injected): the line
shows as text, no dialog ever opens, and the browser itself refuses a string written as markup
(the Content-Security-Policy requires Trusted Types). A second test ends the event streams and
expires their tokens every few seconds: the list still follows a slow document (dropped on the
drop zone) live to the end. A third renders page images on the store without the pipeline.

Set ``OCRSTREAM_UI_SCREENSHOTS=docs/img`` to refresh the screenshots in the docs.
"""

from __future__ import annotations

import io
import json
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymupdf
import pytest
from PIL import Image

from ocrstream.api.viewer import NoPageImage, PageImages
from ocrstream.settings import KafkaSettings, LimitsSettings
from ocrstream.storage import ObjectStore
from tests.integration import harness
from tests.integration.harness import REPO
from tests.integration.test_api import Api, read_events, start_api, stop_api, wait_ready
from tests.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

HOSTILE = "<img src=x onerror=alert(1)>"
PAGES = (
    ("Quarterly report to the archive board", HOSTILE, "Total amount 1234 paid by transfer",
     "Signed by the director of the branch office"),
    ("Annex two of the contract agreement", "Delivery address 17 Harbour street",
     "Payment period thirty days from the invoice date"),
)  # fmt: skip
CHROMIUM = ("/usr/lib/chromium/chromium", "/usr/bin/chromium")  # Debian's; scripts/test.sh
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip


def born_digital_pdf() -> bytes:
    """A PDF whose pages carry their text as text (a usable text layer), one line each."""
    doc = pymupdf.open()
    for lines in PAGES:
        page = doc.new_page(width=595, height=842)
        page.insert_text((60, 90), lines[0], fontsize=22)
        for n, line in enumerate(lines[1:]):
            page.insert_text((60, 160 + 40 * n), line, fontsize=14)
    data: bytes = doc.tobytes()
    return data


def chromium() -> str:
    found = next((path for path in CHROMIUM if os.access(path, os.X_OK)), None)
    if found is None:
        pytest.skip("Debian's chromium is not installed (scripts/test.sh installs it: "
                    "apt-get install chromium)")  # fmt: skip
    return found


@pytest.fixture
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra")
    with sync_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium(), headless=True,
                                     args=CHROMIUM_ARGS)  # fmt: skip
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def api(topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path) -> Iterator[Api]:
    api = start_api(topics, object_store.bucket, tmp_path,
                    OCRSTREAM_API_TOKEN_SECRET="ui-test-secret")  # fmt: skip
    try:
        wait_ready(api)
        yield api
    finally:
        stop_api(api)


def screenshot(page: Any, tmp_path: Path, name: str) -> None:
    page.screenshot(path=str(tmp_path / name), full_page=True)
    folder = os.environ.get("OCRSTREAM_UI_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(REPO / folder / name), full_page=True)


def test_upload_watch_and_view_a_document_in_the_browser(
    api: Api, browser: Any, topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path
) -> None:
    pdf = tmp_path / "quarterly-report.pdf"
    pdf.write_bytes(born_digital_pdf())
    scan = tmp_path / "scanned-letter.pdf"  # 3 pages for the fake OCR engine (text mode only)
    scan.write_bytes(harness.fake_doc(1, 3).data)
    with harness.stack(topics, object_store.bucket, tmp_path) as make:
        pipeline, _witness = make()
        pipeline.start()
        context = browser.new_context(viewport={"width": 1400, "height": 1000},
                                      accept_downloads=True)  # fmt: skip
        page = context.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error"
                and not m.text.startswith("Failed to load resource") else None)  # fmt: skip
        urls: list[str] = []
        page.on("request", lambda r: urls.append(r.url))
        page.set_default_timeout(90_000)

        # sign in: a wrong key is refused, the tenant's key is taken
        page.goto(api.url + "/")
        page.fill("#api-key", "ocs_wrong")
        page.click("#sign-in-form button[type=submit]")
        page.wait_for_selector("#notice:not([hidden])")
        assert "not valid" in page.text_content("#notice")
        page.fill("#api-key", api.keys["acme"])
        page.click("#sign-in-form button[type=submit]")
        page.wait_for_selector("#documents:not([hidden])")

        # a scan in text mode, then the PDF in layout mode, answered from its own text layer
        rows = page.locator("#document-rows tr")
        page.set_input_files("#files", str(scan))
        scanned = rows.filter(has=page.locator("td.name", has_text="scanned-letter.pdf"))
        scanned.wait_for()
        page.check("input[name=mode][value=layout]")
        page.check("#text-layer")
        page.set_input_files("#files", str(pdf))
        row = rows.filter(has=page.locator("td.name", has_text="quarterly-report.pdf"))
        row.wait_for()
        assert rows.first.get_attribute("data-doc-id") == row.get_attribute("data-doc-id")
        doc_id = row.get_attribute("data-doc-id")
        assert doc_id
        # watched live: the event stream opened with a token, the key in no URL
        wait_until(lambda: any(f"/v1/documents/{doc_id}/events?token=" in u for u in urls),
                   60, "the event stream to open", interval_s=0.2)  # fmt: skip
        row.locator("td.state", has_text="completed").wait_for()
        progress = row.locator("progress")
        assert progress.get_attribute("max") == progress.evaluate("p => String(p.value)") == "2"
        assert row.locator(".pages").text_content() == "2 / 2 pages"
        scanned.locator("td.state", has_text="completed").wait_for()
        assert scanned.locator(".pages").text_content() == "3 / 3 pages"
        assert not [u for u in urls if api.keys["acme"] in u]
        screenshot(page, tmp_path, "ui-documents.png")

        # the viewer: a box for every line of document.json, on the page image from the store
        status, document = api.json("GET", f"/v1/documents/{doc_id}/document.json",
                                    tenant="acme")  # fmt: skip
        assert status == 200
        page.click(f"#document-rows tr[data-doc-id='{doc_id}'] td.name a")
        page.wait_for_selector("#viewer:not([hidden])")
        for n, want in enumerate(PAGES, start=1):
            if n > 1:
                page.click("#next-page")
            page.wait_for_function("n => document.getElementById('page-label').textContent"
                                   ".startsWith(`Page ${n} `)", arg=n)  # fmt: skip
            lines = document["pages"][n - 1]["lines"]
            assert [line["text"] for line in lines] == list(want)
            image = page.locator(f"#page-image[data-page='{n}']")
            image.wait_for()
            assert image.evaluate("img => img.naturalWidth") > 0
            assert page.locator("#overlay polygon.box").count() == len(lines)
            assert page.locator("#lines button.line").count() == len(lines)
            blocks = document["pages"][n - 1]["blocks"]
            assert blocks, "layout mode gave the page no blocks"
            assert page.locator("#overlay rect.block").count() == len(blocks)
            assert object_store.exists(object_store.keys.viewer_page(doc_id, n))
        page.click("#prev-page")
        page.wait_for_function("() => document.getElementById('page-label').textContent"
                               ".startsWith('Page 1 ')")  # fmt: skip

        # click a line: its box is highlighted; click a box: its line is
        page.click("#lines button.line[data-index='2']")
        assert page.locator("#overlay polygon.selected").count() == 1
        assert page.get_attribute("#overlay polygon.selected", "data-index") == "2"
        page.locator("#overlay polygon[data-index='3']").dispatch_event("click")
        assert page.get_attribute("#overlay polygon.selected", "data-index") == "3"
        assert page.get_attribute("#lines button.line[data-index='3']", "aria-pressed") == "true"
        assert page.get_attribute("#lines button.line[data-index='2']", "aria-pressed") == "false"

        # the hostile line is text: the very characters, no element made of them, no dialog
        hostile = page.locator("#lines button.line[data-index='1'] .text")
        assert hostile.text_content() == HOSTILE
        assert page.locator("#viewer img").count() == 1  # only the page image itself
        assert page.locator("#overlay img, #lines img").count() == 0

        # search within the document: the line is found and marked on the page
        page.fill("#search", "onerror")
        page.wait_for_function("() => document.getElementById('search-result').textContent"
                               " === '1 line'")  # fmt: skip
        assert page.get_attribute("#overlay polygon.match", "data-index") == "1"
        assert page.locator("#search-pages button").all_text_contents() == ["page 1 (1)"]
        screenshot(page, tmp_path, "ui-viewer.png")

        # a download button for every output; the text comes down as written
        outputs = api.json("GET", f"/v1/documents/{doc_id}", tenant="acme")[1]["outputs"]
        buttons = page.locator("#downloads button").all_text_contents()
        assert sorted(buttons) == sorted(f"document.{fmt}" for fmt in outputs)
        assert "md" in outputs  # layout mode
        saved = {}
        for fmt in outputs:
            with page.expect_download() as download:
                page.click(f"#downloads button:text-is('document.{fmt}')")
            saved[fmt] = Path(download.value.path()).read_bytes()
            assert download.value.suggested_filename == f"quarterly-report.pdf.{fmt}"
        assert HOSTILE in saved["txt"].decode()
        assert "Quarterly report to the archive board" in saved["md"].decode()
        assert json.loads(saved["json"]) == document
        assert saved["pdf"].startswith(b"%PDF-")

        assert not dialogs, dialogs
        assert not errors, errors
        # the browser enforces the policy: a string written as markup is refused
        refused = page.evaluate("""() => {
            try { document.getElementById('lines').innerHTML = '<b>x</b>'; return 'written'; }
            catch (e) { return e.name; } }""")
        assert refused == "TypeError"
        assert page.locator("#lines b").count() == 0
        context.close()

        # the routes behind it: another tenant gets 404 for the page image as for a missing
        # document; a token opens only its own document's events
        check_routes(api, doc_id)


def test_progress_goes_on_live_when_the_stream_ends_and_its_token_has_expired(
    browser: Any, topics: KafkaSettings, object_store: ObjectStore, tmp_path: Path
) -> None:
    """Streams that end every 2 s and tokens that expire after 1 s: the browser's own reconnect
    is refused (401), and the UI opens the stream again with a new token, going on after the
    last event it saw, until the document is done — a page every 4 s, 20 s in all."""
    api = start_api(topics, object_store.bucket, tmp_path, OCRSTREAM_API_EVENTS_MAX_S="2",
                    OCRSTREAM_API_EVENTS_TOKEN_TTL_S="1")  # fmt: skip
    try:
        wait_ready(api)
        slow = {"OCRSTREAM_WORKER_MAX_BATCH": "1", "OCRSTREAM_FAKE_ENGINE_BATCH_DELAY_S": "4"}
        with harness.stack(topics, object_store.bucket, tmp_path) as make:
            pipeline, _witness = make(env=slow)
            pipeline.start()
            scan = harness.fake_doc(2, 5).data
            context = browser.new_context()
            page = context.new_page()
            page.set_default_timeout(90_000)
            urls: list[str] = []
            page.on("request", lambda r: urls.append(r.url))
            page.goto(api.url + "/")
            page.fill("#api-key", api.keys["acme"])
            page.click("#sign-in-form button[type=submit]")
            page.wait_for_selector("#documents:not([hidden])")
            # dropped on the drop zone this time
            dropped = page.evaluate_handle("""bytes => {
                const files = new DataTransfer();
                files.items.add(new File([new Uint8Array(bytes)], "slow-scan.pdf",
                                         {type: "application/pdf"}));
                return files; }""", list(scan))  # fmt: skip
            page.dispatch_event("#drop", "drop", {"dataTransfer": dropped})
            row = page.locator("#document-rows tr").first
            row.locator("td.name", has_text="slow-scan.pdf").wait_for()
            doc_id = row.get_attribute("data-doc-id")
            seen: set[str] = set()

            def done() -> bool:
                # the state first: read after it, the count is the finished row's (the
                # other way round, a row that finished between the two reads left "5 / 5"
                # unseen)
                completed = row.locator("td.state").text_content() == "completed"
                seen.add(row.locator(".pages").text_content() or "")
                return completed

            wait_until(done, 120, "the slow scan completed in the list", interval_s=0.2)
            context.close()
        assert row_pages_seen_live(seen), seen
        tokens = [u for u in urls if u.endswith(f"/v1/documents/{doc_id}/events/token")]
        resumed = [u for u in urls if f"/v1/documents/{doc_id}/events?token=" in u
                   and "&last_event_id=r" in u]  # fmt: skip
        assert len(tokens) >= 2, urls
        assert resumed, "\n".join(u for u in urls if "/events" in u)
    finally:
        stop_api(api)


def row_pages_seen_live(seen: set[str]) -> bool:
    """Some page counts between none and all of the five were shown on the way."""
    return bool(seen & {f"{n} / 5 pages" for n in range(1, 5)}) and "5 / 5 pages" in seen


def test_a_page_image_is_rendered_once_from_the_source_turned_as_the_engine_read_it(
    object_store: ObjectStore,
) -> None:
    """The viewer's page images on the real store, without the pipeline: nothing before the
    document is finished; then page 2 rendered from the source, turned by its rotation, and
    stored — asked for again after the source is gone, it still comes, from the store."""
    doc = pymupdf.open()
    for width in (300, 400):
        page = doc.new_page(width=width, height=200)
        page.draw_rect(pymupdf.Rect(0, 0, 50, 50), color=(0, 0, 0), fill=(0, 0, 0))
    source = object_store.keys.source("doc-7", "pdf")
    object_store.put_bytes(source, doc.tobytes())
    record = {"source": object_store.uri(source), "content_type": "application/pdf"}
    images = PageImages(object_store, LimitsSettings(), max_side=200, dpi=72)
    with pytest.raises(NoPageImage, match="not finished"):
        images.get("doc-7", 2, record)

    pages = [{"page_no": 1, "status": "failed", "width": 0, "height": 0, "rotation": 0,
              "lines": []},
             {"page_no": 2, "status": "ok", "width": 200, "height": 400, "rotation": 90,
              "lines": []}]  # fmt: skip
    object_store.put_bytes(object_store.keys.document("doc-7", "json"),
                           json.dumps({"doc_id": "doc-7", "pages": pages}).encode())  # fmt: skip
    with pytest.raises(NoPageImage, match="not read"):
        images.get("doc-7", 1, record)
    with pytest.raises(NoPageImage, match="not read"):
        images.get("doc-7", 3, record)
    first = images.get("doc-7", 2, record)
    with Image.open(io.BytesIO(first)) as im:
        assert im.size == (100, 200)  # 400 x 200 pt at 72 dpi, turned a quarter, at most 200
        assert im.convert("L").getpixel((90, 10)) < 80  # the black corner went top-right
    assert object_store.get_bytes(object_store.keys.viewer_page("doc-7", 2)) == first

    object_store.delete(source)
    assert images.get("doc-7", 2, record) == first


def check_routes(api: Api, doc_id: str) -> None:
    mine = api.request("GET", f"/v1/documents/{doc_id}/pages/1.jpg", tenant="acme")
    assert mine[0] == 200
    assert mine[2]["content-type"] == "image/jpeg"
    # asked for again (the browser viewed it first): rendered once, then read from the store
    renders = api.log.read_text().count(f"rendered the viewer image of {doc_id} page 1 ")
    assert renders == 1
    missing = api.request("GET", "/v1/documents/0123456789abcdef/pages/1.jpg", tenant="globex")
    other = api.request("GET", f"/v1/documents/{doc_id}/pages/1.jpg", tenant="globex")
    assert missing[0] == 404
    assert (other[0], other[1]) == (missing[0], missing[1])
    assert api.request("GET", f"/v1/documents/{doc_id}/pages/9.jpg", tenant="acme")[0] == 404
    assert api.request("GET", f"/v1/documents/{doc_id}/pages/1.jpg")[0] == 401

    status, issued = api.json("POST", f"/v1/documents/{doc_id}/events/token", tenant="acme")
    assert status == 200
    assert api.keys["acme"] not in issued["events_url"]
    assert issued["expires_at"] > time.time()
    assert api.request("POST", f"/v1/documents/{doc_id}/events/token",
                       tenant="globex")[0] == 404  # fmt: skip
    with urllib.request.urlopen(api.url + issued["events_url"], timeout=30) as response:
        text = response.read().decode()
    assert "event: terminal" in text
    assert text.count("event: page") == len(PAGES)
    by_key = read_events(api, "acme", doc_id)
    assert [e["event"] for e in by_key].count("terminal") == 1
    # the token of this document opens no other, and an altered one nothing
    _, other_doc = api.upload("acme", born_digital_pdf(), "other.pdf")
    token = issued["token"]
    for path in (f"/v1/documents/{other_doc['doc_id']}/events?token={token}",
                 f"/v1/documents/{doc_id}/events?token={token[:-3]}AAA",
                 f"/v1/documents/{doc_id}/events?token={api.keys['acme']}"):  # fmt: skip
        assert api.request("GET", path)[0] == 401, path
