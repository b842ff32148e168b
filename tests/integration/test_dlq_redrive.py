"""``ocrstream dlq``: dead letters listed, shown, and redriven to their topics at most once."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ocrstream.cli import main
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import DeadLetter
from ocrstream.settings import KafkaSettings
from ocrstream.streams import topics as t
from ocrstream.streams.redrive import REDRIVEN_HEADER, read_to_end
from tests.integration.harness import produce_raw

pytestmark = pytest.mark.integration


def _letter(kafka: KafkaSettings, stage: str, code: str, topic: str, n: int,
            value: bytes | None) -> DeadLetter:  # fmt: skip
    return DeadLetter(
        topic=kafka.topic(topic), partition=0, offset=100 + n, key=f"doc-{n}".encode(),
        value=value, headers={"origin": f"test-{n}".encode()}, stage=stage, error_code=code,
        error_message=f"failure {n}",
    )  # fmt: skip


def test_list_show_and_redrive_each_dead_letter_at_most_once(
    topics: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OCRSTREAM_TOPIC_PREFIX", topics.topic_prefix)
    codec = Codec(topics)
    dlq = topics.topic(t.DLQ)
    letters = [
        _letter(topics, "splitter", "malformed_record", t.SCANS, 1, b"scan one"),
        _letter(topics, "splitter", "malformed_record", t.SCANS, 2, b"scan two"),
        _letter(topics, "splitter", "malformed_record", t.SCANS, 3, None),  # kept no value
        _letter(topics, "assembler", "invalid_page_count", t.PAGE_RESULTS, 4, b"result"),
    ]
    produce_raw(topics, t.DLQ, [(d.key, codec.encode(d, dlq), {}) for d in letters])
    runner = CliRunner()

    def cli(*args: str) -> str:
        result = runner.invoke(main, ["dlq", *args])
        assert result.exit_code == 0, result.output
        return result.output

    listed = [json.loads(line) for line in cli("list", "--json").splitlines()
              if line.startswith("{")]  # fmt: skip
    assert len(listed) == 4
    splitter = [entry for entry in listed if entry["stage"] == "splitter"]
    assert len(splitter) == 3
    assert all(entry["redriven"] is None for entry in listed)

    def scans() -> list[tuple[bytes | None, bytes | None, dict[str, bytes]]]:
        return [(m.key(), m.value(), dict(m.headers() or []))
                for m in read_to_end(topics, topics.topic(t.SCANS))]  # fmt: skip

    out = cli("redrive", "--stage", "splitter", "--dry-run")
    assert "would redrive: 2" in out
    assert "without a value to publish: 1" in out
    assert scans() == []

    out = cli("redrive", "--stage", "splitter")
    assert "redriven: 2;" in out
    got = scans()
    assert sorted((k, v) for k, v, _ in got) == [(b"doc-1", b"scan one"), (b"doc-2", b"scan two")]
    assert all(h["origin"].startswith(b"test-") and REDRIVEN_HEADER in h for _, _, h in got)

    out = cli("redrive", "--stage", "splitter")  # again: nothing twice
    assert "redriven: 0; already redriven: 2" in out
    assert len(scans()) == 2

    first = next(entry["id"] for entry in splitter if entry["origin"].endswith("@101"))
    shown = json.loads(cli("show", first))
    assert shown["code"] == "malformed_record"
    assert shown["redriven"]["state"] == "redriven"
    assert shown["redriven"]["to"].startswith(topics.topic(t.SCANS))
    still = {e["id"]: e["redriven"] for e in (json.loads(line) for line in
             cli("list", "--json", "--code", "invalid_page_count").splitlines()
             if line.startswith("{"))}  # fmt: skip
    assert list(still.values()) == [None]  # the assembler's letter was not touched
