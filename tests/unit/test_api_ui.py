"""The web UI's server side without a broker: the event-stream tokens, the viewer's page images
and the UI files with their Content-Security-Policy (the browser tests are in
tests/integration/test_ui.py)."""

from __future__ import annotations

import asyncio
import io
import re
from pathlib import Path

import numpy as np
import pymupdf
import pytest
from fastapi import HTTPException
from fastapi.responses import FileResponse
from PIL import Image

from ocrstream.api import ui
from ocrstream.api.tokens import EventTokens
from ocrstream.processors.split import one_page
from ocrstream.processors.viewer_image import viewer_image
from ocrstream.settings import LimitsSettings
from ocrstream.storage.keys import Keys

# --- tokens ---------------------------------------------------------------------------------


def test_a_token_opens_one_documents_events_for_its_tenant_until_it_expires() -> None:
    tokens = EventTokens(b"s" * 32, ttl_s=60)
    token, expires = tokens.issue("acme", "doc-1", now=1000.0)
    assert expires == 1060
    assert tokens.tenant(token, "doc-1", now=1059.0) == "acme"
    assert tokens.tenant(token, "doc-1", now=1060.0) is None  # expired
    assert tokens.tenant(token, "doc-2", now=1001.0) is None  # another document


def test_a_token_signed_with_another_secret_or_altered_is_refused() -> None:
    tokens = EventTokens(b"s" * 32, ttl_s=60)
    token, _ = tokens.issue("acme", "doc-1", now=1000.0)
    assert EventTokens(b"t" * 32).tenant(token, "doc-1", now=1001.0) is None
    payload, signature = token.split(".")
    forged = EventTokens(b"x" * 32).issue("globex", "doc-1", now=1000.0)[0].split(".")[0]
    for bad in (f"{forged}.{signature}", f"{payload}.{signature[:-2]}AA", payload, "",
                f"{payload}.", f".{signature}", "a.b.c", "x" * 5000):  # fmt: skip
        assert tokens.tenant(bad, "doc-1", now=1001.0) is None, bad


def test_replicas_with_one_secret_accept_each_others_tokens() -> None:
    one, two = EventTokens.with_secret("shared", 60), EventTokens.with_secret("shared", 60)
    token, _ = one.issue("acme", "d")
    assert two.tenant(token, "d") == "acme"
    alone = EventTokens.with_secret("", 60)  # no secret set: a random one, this process only
    assert EventTokens.with_secret("", 60).tenant(alone.issue("acme", "d")[0], "d") is None


# --- the viewer's page image ----------------------------------------------------------------


def pdf_page(width_pt: float = 300, height_pt: float = 200) -> bytes:
    doc = pymupdf.open()
    page = doc.new_page(width=width_pt, height=height_pt)
    page.draw_rect(
        pymupdf.Rect(0, 0, width_pt / 2, height_pt / 2), color=(0, 0, 0), fill=(0, 0, 0)
    )  # a black top-left quarter shows which way the page turned
    page.insert_text((20, 150), "Hello viewer", fontsize=20)
    data: bytes = doc.tobytes()
    return data


def pixels(jpeg: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(jpeg)) as im:
        assert im.format == "JPEG"
        return np.asarray(im.convert("L"))


def test_the_viewer_image_is_the_split_page_scaled_to_its_longest_side() -> None:
    page = one_page(pdf_page(), "application/pdf", LimitsSettings(), 1, dpi=144)
    assert (page.width, page.height) == (600, 400)
    image = pixels(viewer_image(page, max_side=300))
    assert image.shape == (200, 300)  # the page's proportions, at most 300 px
    assert image[20, 20] < 60
    assert image[20, 280] > 200


@pytest.mark.parametrize(("rotation", "dark"), [(90, (20, 180)), (180, (180, 280)),
                                                (270, (280, 20))])  # fmt: skip
def test_the_viewer_image_is_turned_clockwise_as_the_engine_turned_the_page(
    rotation: int, dark: tuple[int, int]
) -> None:
    page = one_page(pdf_page(), "application/pdf", LimitsSettings(), 1, dpi=144)
    image = pixels(viewer_image(page, rotation, max_side=300))
    assert image.shape == ((300, 200) if rotation in (90, 270) else (200, 300))
    y, x = dark
    assert image[y, x] < 60, image[::20, ::20]


def test_one_page_is_any_page_of_the_document_and_refuses_a_page_past_the_end() -> None:
    doc = pymupdf.open()
    for width in (100, 200, 300):
        doc.new_page(width=width, height=100)
    data = doc.tobytes()
    assert one_page(data, None, LimitsSettings(), 2, dpi=72).width == 200
    with pytest.raises(IndexError):
        one_page(data, None, LimitsSettings(), 4, dpi=72)


def test_the_viewer_images_live_beside_the_documents_outputs() -> None:
    keys = Keys("tenant-x/")
    assert keys.viewer_page("doc-1", 7) == "tenant-x/documents/doc-1/viewer/00007.jpg"
    assert keys.viewer_page("doc-1", 7).startswith(keys.pipeline_prefixes)
    with pytest.raises(ValueError, match="page_no"):
        keys.viewer_page("doc-1", 0)


# --- the UI files -----------------------------------------------------------------------------


def get(path: str) -> tuple[FileResponse, str]:
    """The UI route's answer to ``path`` and its body (the routes are called directly)."""
    if path == "/":
        response = asyncio.run(ui.index())
    else:
        response = asyncio.run(ui.asset(path.removeprefix("/ui/")))
    return response, Path(response.path).read_text()


def test_the_ui_is_served_with_a_strict_content_security_policy() -> None:
    page, _ = get("/")
    assert page.media_type.startswith("text/html")
    csp = dict(d.strip().split(" ", 1) for d in page.headers["content-security-policy"].split(";"))
    assert csp["default-src"] == "'none'"
    assert csp["script-src"] == "'self'"  # no inline script, no eval, no other origin
    assert csp["style-src"] == "'self'"
    assert csp["require-trusted-types-for"] == "'script'"  # innerHTML = "…" throws
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"] == "no-referrer"
    for name in ("app.js", "app.css", "favicon.svg"):
        asset, _ = get(f"/ui/{name}")
        assert asset.headers["content-security-policy"] == page.headers["content-security-policy"]
    for name in ("../app.py", "ui.py", "nope.js"):
        with pytest.raises(HTTPException) as refused:
            get(f"/ui/{name}")
        assert refused.value.status_code == 404


def test_the_ui_loads_nothing_from_elsewhere_and_never_writes_html() -> None:
    _, html = get("/")
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert refs
    assert all(r.startswith(("/ui/", "#")) for r in refs), refs
    assert "<script>" not in html
    assert "style=" not in html
    _, script = get("/ui/app.js")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script, sink
