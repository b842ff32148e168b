"""Logging: context (doc_id, page, topic[partition]@offset, trace id) travels in a contextvar.

Modules use ``logging.getLogger(__name__)``; only entry points call :func:`configure_logging`.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "ocrstream_log_context", default=None
)


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Attach fields (doc_id=…, page=…, tp="topic[3]@42", trace_id=…) to every log record."""
    current = _context.get() or {}
    token = _context.set({**current, **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


class ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _context.get() or {}
        record.ctx = ctx
        record.ctx_text = " ".join(f"{k}={v}" for k, v in ctx.items())
        return True


# C0 and C1 control characters and the bidirectional overrides: from a doc_id or a file's
# metadata they could end a log line and forge the next one, or recolour a terminal.
_CONTROLS = {
    c: ascii(chr(c))[1:-1]
    for c in (*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A))
}


def escape_controls(text: str) -> str:
    """``text`` with control characters as Python escapes (``\\n``, ``\\x1b``)."""
    return text.translate(_CONTROLS)


class TextFormatter(logging.Formatter):
    """One line per record: control characters in the message (and the context) are escaped,
    so values from outside can't forge log lines; a traceback still follows on its own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(getattr(record, "ctx", {}) or {})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class _FaustFirstRebalance(logging.Filter):
    """faust warns "Missing sensor state for rebalance" at every agent's first rebalance (its
    sensors start counting at the second): not a fault, and the first thing a new user read."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Missing sensor state for rebalance" not in record.getMessage()


def configure_logging(level: str = "INFO", json_lines: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s %(ctx_text)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("kafka", "aiokafka", "faust", "mode", "urllib3"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    faust_app = logging.getLogger("faust.app.base")
    if not any(isinstance(f, _FaustFirstRebalance) for f in faust_app.filters):
        faust_app.addFilter(_FaustFirstRebalance())
