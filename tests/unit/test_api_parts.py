"""The HTTP API's parts without a server: the key file and the streaming upload's pieces."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from ocrstream.api.keys import KeyFile, hash_key
from ocrstream.api.upload import ChunkPipe, FormStream, UploadError


def test_a_key_is_printed_once_and_only_its_hash_is_kept(tmp_path: Path) -> None:
    keys = KeyFile(tmp_path / "keys.json")
    acme, globex = keys.create("acme"), keys.create("globex")
    stored = (tmp_path / "keys.json").read_text()
    assert acme not in stored
    assert globex not in stored
    assert hash_key(acme) in stored
    assert os.stat(tmp_path / "keys.json").st_mode & 0o077 == 0  # no one else reads it
    assert keys.tenant(acme) == "acme"
    assert keys.tenant(globex) == "globex"
    assert keys.tenant(acme[:-1]) is None
    assert keys.tenant("") is None


def test_a_key_made_by_another_process_works_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    serving = KeyFile(path)
    assert serving.tenant("ocs_x") is None  # no file yet: nobody
    new = KeyFile(path).create("initech")
    assert serving.tenant(new) == "initech"
    body = json.loads(path.read_text())
    body["keys"] = []  # revoked by editing the file
    path.write_text(json.dumps(body))
    os.utime(path, ns=(0, 1))
    assert serving.tenant(new) is None


@pytest.mark.parametrize("tenant", ["", "a/b", "x" * 65, "a b"])
def test_tenant_names_are_refused_unless_plain(tmp_path: Path, tenant: str) -> None:
    with pytest.raises(ValueError, match="tenant"):
        KeyFile(tmp_path / "keys.json").create(tenant)


def form(boundary: str, file: bytes, **fields: str) -> bytes:
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]  # fmt: skip
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                 f'filename="scan.pdf"\r\n\r\n'.encode() + file + b"\r\n")  # fmt: skip
    return b"".join(parts) + f"--{boundary}--\r\n".encode()


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_the_file_part_comes_out_whole_whatever_the_chunking(chunk: int) -> None:
    file = bytes(range(256)) * 40 + b"\r\n--not-the-boundary\r\n"
    body = form("b0undary", file, outputs="json,txt", attributes='{"a": "1"}')
    stream = FormStream(b"b0undary")
    got = b"".join(b"".join(stream.feed(body[i : i + chunk])) for i in range(0, len(body), chunk))
    assert got == file
    assert stream.fields == {"outputs": "json,txt", "attributes": '{"a": "1"}'}
    assert stream.filename == "scan.pdf"


def test_two_file_parts_are_refused() -> None:
    body = form("b", b"one")[: -len(b"--b--\r\n")] + form("b", b"two")
    with pytest.raises(UploadError) as refused:
        FormStream(b"b").feed(body)
    assert refused.value.status == 400


def test_the_pipe_hands_over_whole_parts_and_raises_what_the_writer_says() -> None:
    pipe = ChunkPipe(2)

    def write() -> None:
        for _ in range(10):
            pipe.put(b"x" * 1000)
        pipe.put(None)

    writer = threading.Thread(target=write)
    writer.start()
    assert len(pipe.read(4096)) == 4096  # one read fills a part from several chunks
    assert len(pipe.read()) == 10_000 - 4096
    writer.join(5)

    failing = ChunkPipe(2)
    failing.put(b"abc")
    failing.put(UploadError(413, "too big"))
    with pytest.raises(UploadError):
        failing.read(100)


def test_a_writer_is_not_left_waiting_when_the_reader_has_gone() -> None:
    pipe = ChunkPipe(1)
    pipe.put(b"fills the queue")
    pipe.reader_gone()
    with pytest.raises(UploadError) as stopped:
        pipe.put(b"no one reads this")
    assert stopped.value.status == 503


def test_submission_regions_are_checked_and_carried_as_an_option() -> None:
    from fastapi import HTTPException

    from ocrstream.api.app import _options

    boxes = [{"name": "total", "page": 1, "bbox": [0.5, 0.8, 1.0, 0.9]}]
    *_, reading = _options("text", ["json"], 0, {}, json.dumps(boxes))
    assert json.loads(reading["regions"]) == boxes
    *_, template = _options("text", ["json"], 0, {}, {"template": "till-receipt"})
    assert json.loads(template["regions"]) == {"template": "till-receipt"}
    assert _options("text", ["json"], 0, {})[-1] == {}
    bad = [{"name": "total", "bbox": [0.5, 0.8, 2.0, 0.9]}]
    with pytest.raises(HTTPException) as e:
        _options("text", ["json"], 0, {}, bad)
    assert e.value.status_code == 422
    assert "fractions of the page" in str(e.value.detail)
