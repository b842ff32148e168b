"""doc_id validation, the deterministic key layout and s3:// URIs."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocrstream.errors import InvalidDocIdError, PoisonError
from ocrstream.storage import InvalidUriError, Keys, S3Uri, format_s3_uri, parse_s3_uri
from ocrstream.storage.keys import normalize_prefix, validate_doc_id

valid_ids = st.from_regex(r"[A-Za-z0-9._-]{1,128}", fullmatch=True).filter(
    lambda s: ".." not in s and s != "."
)


@given(valid_ids)
def test_valid_doc_ids_pass_and_make_keys_under_their_own_folder(doc_id: str) -> None:
    assert validate_doc_id(doc_id) == doc_id
    keys = Keys()
    assert keys.source(doc_id, "pdf") == f"scans/{doc_id}/source.pdf"
    assert keys.page(doc_id, 7, "png") == f"pages/{doc_id}/00007.png"
    assert keys.document(doc_id, "json") == f"documents/{doc_id}/document.json"
    assert keys.page(doc_id, 1, "png").startswith(keys.pages_prefix(doc_id))


@given(st.text(max_size=200))
def test_any_text_is_either_a_valid_id_or_a_clear_refusal(text: str) -> None:
    ok = re.fullmatch(r"[A-Za-z0-9._-]{1,128}", text) is not None
    ok = ok and ".." not in text and text != "."
    if ok:
        assert validate_doc_id(text) == text
    else:
        with pytest.raises(InvalidDocIdError) as info:
            validate_doc_id(text)
        assert info.value.code == "invalid_doc_id"
        assert isinstance(info.value, PoisonError)


@pytest.mark.parametrize(
    ("doc_id", "says"),
    [
        ("", "empty"),
        (".", r"'\.\.' or is '\.'"),
        ("..", r"'\.\.'"),
        ("a..b", r"'\.\.'"),
        ("../../etc/passwd", "slash"),
        ("a/b", "slash"),
        ("a\\b", "slash"),
        ("a\x00b", "NUL"),
        ("a\nb", "control"),
        ("a\x7fb", "control"),
        ("x" * 129, "129 characters, over 128"),
        ("façade", r"found '\\xe7'"),
        ("a b", "found ' '"),
        ("a:b", "found ':'"),
    ],
)
def test_bad_doc_ids_are_refused_with_a_clear_message(doc_id: str, says: str) -> None:
    with pytest.raises(InvalidDocIdError, match=says):
        validate_doc_id(doc_id)


def test_refusal_messages_are_safe_to_log() -> None:
    with pytest.raises(InvalidDocIdError) as info:
        validate_doc_id("evil\r\nFAKE LOG LINE\x1b[31m")
    assert "\n" not in str(info.value)
    assert "\x1b" not in str(info.value)
    with pytest.raises(InvalidDocIdError, match="must be a string"):
        validate_doc_id(42)


def test_keys_reject_what_would_break_the_layout() -> None:
    keys = Keys()
    for bad_page in (0, -1, 100_000):
        with pytest.raises(ValueError, match="page_no"):
            keys.page("doc", bad_page, "png")
    with pytest.raises(ValueError, match="extension"):
        keys.source("doc", "p/df")
    with pytest.raises(ValueError, match="format"):
        keys.document("doc", "docx")
    with pytest.raises(InvalidDocIdError):
        keys.document("../x", "json")
    assert keys.source("doc", ".PDF") == "scans/doc/source.pdf"
    name = "0123456789abcdef01234567.json"
    assert Keys("env/prod").engine_choice(name) == f"env/prod/engine/auto-backend/{name}"
    for bad_name in ("../documents/x/document.json", "abc.json", name.upper()):
        with pytest.raises(ValueError, match="auto-backend"):
            keys.engine_choice(bad_name)


@pytest.mark.parametrize(
    ("prefix", "normal"),
    [("", ""), ("tenant-a", "tenant-a/"), ("/a//b/", "a/b/"), ("env/prod/", "env/prod/")],
)
def test_key_prefix_is_honoured(prefix: str, normal: str) -> None:
    keys = Keys(prefix)
    assert keys.prefix == normal
    assert keys.page("d", 12, "jpg") == f"{normal}pages/d/00012.jpg"
    assert keys.claim_check_prefix == f"{normal}pages/"


@pytest.mark.parametrize("prefix", ["a/../b", "./x", "a/\x00/b"])
def test_bad_key_prefixes_are_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        normalize_prefix(prefix)


@given(
    st.from_regex(r"[a-z0-9][a-z0-9-]{1,30}[a-z0-9]", fullmatch=True),
    st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=100),
)
def test_s3_uris_round_trip(bucket: str, key: str) -> None:
    uri = format_s3_uri(bucket, key)
    assert parse_s3_uri(uri) == S3Uri(bucket, key)
    assert str(parse_s3_uri(uri)) == uri


@pytest.mark.parametrize(
    "uri",
    [
        "http://bucket/key",
        "s3://bucket",
        "s3://bucket/",
        "s3:///key",
        "s3://Bucket/key",
        "s3://a/key",
        "s3://bu..cket/key",
        "s3://bucket/a\x00b",
        "s3://bucket/" + "k" * 1025,
        "scans/doc/source.pdf",
    ],
)
def test_bad_uris_are_refused(uri: str) -> None:
    with pytest.raises(InvalidUriError) as info:
        parse_s3_uri(uri)
    assert info.value.code == "invalid_uri"
