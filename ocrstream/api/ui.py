"""The web UI: ``GET /`` and its files under ``/ui/``, plain HTML, JavaScript and CSS checked in
as package data (``ocrstream/api/ui/``), no build step and nothing from another origin.

Every UI response carries a strict Content-Security-Policy: scripts, styles and everything the
page fetches only from this origin, page images also from ``blob:`` URLs (the UI fetches them
with its key), no inline script or style, no plugins, no framing — and Trusted Types required,
so that the browser itself refuses any assignment of a string to ``innerHTML`` and its kin: OCR
text, which is untrusted input, can only ever reach the page as text.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse

UI_DIR = Path(__file__).with_name("ui")

#: The files the UI is made of, and their media types.
FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}

CSP = "; ".join((
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' blob:",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
    "require-trusted-types-for 'script'",
    "trusted-types 'none'",
))  # fmt: skip

HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


def _file(name: str) -> FileResponse:
    if name not in FILES:
        raise HTTPException(404, "no such file")
    return FileResponse(UI_DIR / name, media_type=FILES[name], headers=HEADERS)


@router.get("/")
async def index() -> FileResponse:
    """The web UI."""
    return _file("index.html")


@router.get("/ui/{name}")
async def asset(name: str) -> FileResponse:
    return _file(name)
