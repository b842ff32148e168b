"""JSON log lines carry the record they are about: doc_id, page, topic[partition]@offset and the
trace id — also for what the OCR worker logs from its decode threads. Text that comes from
outside (a doc_id, a message argument) can't forge a log line or recolour a terminal."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from collections.abc import Iterator

import pytest

from ocrstream.errors import RetriableError
from ocrstream.logs import ContextFilter, JsonFormatter, TextFormatter, log_context
from tests.fakes.kafka import FakeConsumer, FakeProducer
from tests.fakes.stepped_worker import CODEC, make_worker, png, results, run_until, task


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """Root logging into a buffer as JSON lines, as ``--log-json`` configures it."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield buf
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def lines(buf: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]


def test_a_json_line_carries_the_context_fields(json_lines: io.StringIO) -> None:
    log = logging.getLogger("tests.logs")
    with log_context(tp="ocr.pages.v1[3]@42", trace_id="t-1"):
        with log_context(doc_id="doc-7", page=2):
            log.warning("page %d is odd", 2)
        log.info("outside the page")
    log.info("no context")

    first, second, third = lines(json_lines)
    assert first["msg"] == "page 2 is odd"
    assert first["level"] == "WARNING"
    assert (first["doc_id"], first["page"], first["tp"], first["trace_id"]) == (
        "doc-7", 2, "ocr.pages.v1[3]@42", "t-1",
    )  # fmt: skip
    assert second["tp"] == "ocr.pages.v1[3]@42"
    assert "doc_id" not in second
    assert "doc_id" not in third
    assert "tp" not in third


def test_worker_logs_carry_the_page_they_are_about(json_lines: io.StringIO) -> None:
    """A retried fetch names its page: what the fetch logs in the decode thread, and the
    worker's warning about it in the loop."""
    consumer, producer = FakeConsumer(partitions=1), FakeProducer()
    calls = {"n": 0}
    fetch_log = logging.getLogger("tests.logs.fetch")

    def fetch(uri: str) -> bytes:
        calls["n"] += 1
        fetch_log.info("fetching %s", uri)  # runs in the worker's decode thread
        if calls["n"] == 1:
            raise RetriableError("store unavailable", code="store_unavailable")
        return png(21)

    page = dataclasses.replace(task("doc-9", 2, width=21, uri="s3://b/p/00002.png"), trace_id="tr9")
    consumer.push(0, b"doc-9", CODEC.encode(page))
    worker = make_worker(consumer, producer, fetch=fetch)
    run_until(worker, lambda: len(results(producer)) == 1)

    got = lines(json_lines)
    about_page = [
        rec for rec in got if rec["logger"] == "tests.logs.fetch"
        or (rec["logger"] == "ocrstream.streams.worker" and rec["level"] == "WARNING")
    ]  # fmt: skip
    assert len(about_page) >= 3, got  # two fetches and the store warning
    for rec in about_page:
        assert rec["doc_id"] == "doc-9", rec
        assert rec["page"] == 2, rec
        assert rec["tp"] == "ocr.pages.v1[0]@0", rec
        assert rec["trace_id"] == "tr9", rec


# --- what comes from outside can't forge log lines ---------------------------------------------


def _record(msg: str, *args: object) -> logging.LogRecord:
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, msg, args, None)
    ContextFilter().filter(record)
    return record


@pytest.mark.parametrize("evil", ["a\nFAKE 00:00 INFO admin logged in", "esc\x1b[31mred", "cr\r"])
def test_text_logs_escape_control_characters_from_outside(evil: str) -> None:
    with log_context(doc_id=evil):
        line = TextFormatter("%(message)s %(ctx_text)s").format(_record("document %s failed", evil))
    assert "\n" not in line
    assert "\r" not in line
    assert "\x1b" not in line
    assert line.count(ascii(evil)[1:-1]) == 2  # escaped, in the message and in the context


def test_text_logs_keep_tracebacks_multiline() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = _record("failed")
        record.exc_info = sys.exc_info()
    text = TextFormatter("%(message)s").format(record)
    assert text.startswith("failed\nTraceback")


def test_json_logs_escape_control_characters() -> None:
    with log_context(doc_id="a\nb"):
        line = JsonFormatter().format(_record("x %s", "c\nd"))
    assert "\n" not in line


def test_fausts_first_rebalance_warning_is_not_shown_and_its_other_warnings_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ocrstream.logs import configure_logging

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging("INFO")
        faust_app = logging.getLogger("faust.app.base")
        faust_app.warning("[^-App]: Missing sensor state for rebalance #%s", 1)
        faust_app.warning("[^-App]: Missing sensor state for rebalance end #%s", 1)
        faust_app.warning("[^-App]: Timed out waiting for the commit")
        configure_logging("INFO")  # an entry point configuring twice adds no second filter
        assert len(faust_app.filters) == 1
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    err = capsys.readouterr().err
    assert "Missing sensor state" not in err
    assert "Timed out waiting for the commit" in err
