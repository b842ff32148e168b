"""``ocrstream dlq``: dead letters listed, shown, and redriven to their topics at most once;
and, with the real agents, a document whose pages dead-lettered completes after the cause is
fixed and its dead letters are redriven."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ocrstream.cli import main
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import DeadLetter
from ocrstream.settings import KafkaSettings, S3Settings
from ocrstream.storage import ObjectStore
from ocrstream.streams import topics as t
from ocrstream.streams.redrive import REDRIVEN_HEADER, read_to_end
from tests.integration import harness
from tests.integration.harness import end_offsets, fake_doc, produce_raw
from tests.polling import wait_until

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


def test_a_document_dead_lettered_by_a_misconfigured_assembler_completes_after_a_redrive(
    topics: KafkaSettings, s3_settings: S3Settings, object_store: ObjectStore, tmp_path: Path
) -> None:
    """The assembler is deployed with OCRSTREAM_LIMIT_MAX_PAGES=2 (the splitter allows more):
    every page result of a 3-page document is refused as ``invalid_page_count`` and goes to the
    DLQ, and the document hangs. The assembler is restarted with the right limit, an operator
    runs ``ocrstream dlq redrive``: the document completes with every page, once. A second
    redrive publishes nothing."""
    from ocrstream.client import OcrClient

    stuck, fine = fake_doc(1, 3), fake_doc(2, 2)
    env = {**os.environ, "OCRSTREAM_TOPIC_PREFIX": topics.topic_prefix}

    def dlq_cli(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "ocrstream", "dlq", *args], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    with harness.stack(topics, object_store.bucket, tmp_path) as make:
        pipeline, witness = make()
        pipeline["assembler"].env["OCRSTREAM_LIMIT_MAX_PAGES"] = "2"
        pipeline.start()
        client = OcrClient(topics, s3_settings)
        for doc in (stuck, fine):
            client.submit(doc.data, doc_id=doc.doc_id, outputs=("json", "txt"))
        witness.wait_done([fine.doc_id], 120, pipeline)

        def refused() -> list[DeadLetter]:
            return [d for d in witness.dead_letters() if d.key == stuck.doc_id.encode()]

        wait_until(lambda: len(refused()) == stuck.page_count, 120,
                   "the 3-page document's page results in the DLQ")  # fmt: skip
        assert {(d.stage, d.error_code) for d in refused()} == {("assembler", "invalid_page_count")}
        assert stuck.doc_id not in witness.terminal()

        # The fix: the assembler restarted with the default limit.
        assert pipeline.stop("assembler") == 0
        del pipeline["assembler"].env["OCRSTREAM_LIMIT_MAX_PAGES"]
        pipeline.start("assembler")

        assert "would redrive: 3;" in dlq_cli("redrive", "--code", "invalid_page_count",
                                              "--dry-run")  # fmt: skip
        out = dlq_cli("redrive", "--code", "invalid_page_count")
        assert "redriven: 3; already redriven: 0" in out, out
        witness.wait_done([stuck.doc_id], 120, pipeline)
        events = harness.assert_exactly_once(witness, [stuck.doc_id, fine.doc_id])
        harness.assert_complete(object_store, events, [stuck, fine])

        # Again: every one of them was redriven already, nothing is published twice.
        before = end_offsets(topics, t.PAGE_RESULTS)
        out = dlq_cli("redrive", "--code", "invalid_page_count")
        assert "redriven: 0; already redriven: 3" in out, out
        assert end_offsets(topics, t.PAGE_RESULTS) == before
        listed = [json.loads(line) for line in dlq_cli("list", "--json").splitlines()
                  if line.startswith("{")]  # fmt: skip
        assert len(listed) == 3
        assert all(entry["redriven"] == "redriven" for entry in listed), listed
        witness.quiet(2.0)
        harness.assert_exactly_once(witness, [stuck.doc_id, fine.doc_id])
        client.close()
