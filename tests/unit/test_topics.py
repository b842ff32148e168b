"""The topic table of docs/architecture.md ("Topics"), without a broker."""

from __future__ import annotations

import pytest

from ocrstream.settings import KafkaSettings
from ocrstream.streams.topics import (
    SPECS,
    TOPICS,
    desired_partitions,
    scaled_partitions,
)

DAY_MS = 86_400_000


def test_table_is_the_design() -> None:
    table = {
        t.name: (t.partitions, t.configs()["cleanup.policy"], t.configs().get("retention.ms"))
        for t in TOPICS
    }
    assert table == {
        "ocr.scans.v1": (12, "delete", str(7 * DAY_MS)),
        "ocr.pages.v1": (64, "delete", str(1 * DAY_MS)),
        "ocr.page-results.v1": (12, "delete", str(7 * DAY_MS)),
        "ocr.progress.v1": (12, "compact", None),
        "ocr.documents.v1": (12, "compact,delete", str(30 * DAY_MS)),
        "ocr.dlq.v1": (3, "delete", str(30 * DAY_MS)),
        "ocr.dlq.redriven.v1": (1, "compact", None),
        "ocr.page-cache.v1": (12, "compact", None),
        "ocr.webhooks.retry.v1": (6, "delete", str(7 * DAY_MS)),
        "ocr.api-usage.v1": (1, "delete", str(2 * DAY_MS)),
        "ocr.pages.accurate.v1": (12, "delete", str(1 * DAY_MS)),
        "ocr.page-results.shadow.v1": (12, "delete", str(7 * DAY_MS)),
    }


def test_names_carry_the_prefix() -> None:
    kafka = KafkaSettings(topic_prefix="dev.")
    assert [kafka.topic(t.name) for t in TOPICS][:2] == ["dev.ocr.scans.v1", "dev.ocr.pages.v1"]


@pytest.mark.parametrize(
    ("partitions", "scale", "expected"),
    [(64, 1.0, 64), (64, 0.25, 16), (12, 0.25, 3), (3, 0.1, 1), (12, 0.01, 1), (12, 2, 24)],
)
def test_scaled_partitions_round_up_and_stay_positive(
    partitions: int, scale: float, expected: int
) -> None:
    assert scaled_partitions(partitions, scale) == expected


def test_scale_must_be_positive() -> None:
    with pytest.raises(ValueError, match="> 0"):
        scaled_partitions(12, 0)


def test_overrides_win_over_scale() -> None:
    pages = SPECS["ocr.pages.v1"]
    assert desired_partitions(pages, None, 0.5) == 32
    assert desired_partitions(pages, 4, 0.5) == 4
    assert desired_partitions(pages, {"ocr.pages.v1": 8}, 0.5) == 8
    assert desired_partitions(pages, {"ocr.scans.v1": 8}, 0.5) == 32
