"""Dead letters (:mod:`ocrstream.streams.dlq`) fit the producers' message limit: what would not
fit is left out and named in the message, with where the record stays."""

from __future__ import annotations

from ocrstream.schemas.codec import Codec
from ocrstream.schemas.errors import UnknownSchemaError
from ocrstream.streams.dlq import dead_letter

CODEC = Codec()


def test_a_dead_letter_leaves_out_what_would_not_fit() -> None:
    exc = UnknownSchemaError("not Avro")
    common = {"topic": "t", "partition": 3, "offset": 42, "stage": "s", "exc": exc}
    small = dead_letter(key=b"k", value=b"v" * 100, headers={"h": b"1"}, max_bytes=1 << 20,
                        **common)  # type: ignore[arg-type]  # fmt: skip
    assert (small.key, small.value, small.headers) == (b"k", b"v" * 100, {"h": b"1"})

    big = dead_letter(key=b"k", value=b"v" * (2 << 20), headers={"h": b"1"}, max_bytes=1 << 20,
                      **common)  # type: ignore[arg-type]  # fmt: skip
    assert big.value is None
    assert (big.key, big.headers) == (b"k", {"h": b"1"})
    assert f"value ({2 << 20} bytes)" in big.error_message
    assert "t[3]@42" in big.error_message
    assert len(CODEC.encode(big)) < 1 << 20

    huge_key = dead_letter(key=b"k" * (2 << 20), value=b"v", headers={}, max_bytes=1 << 20,
                           **common)  # type: ignore[arg-type]  # fmt: skip
    assert (huge_key.key, huge_key.value, huge_key.headers) == (None, None, {})
