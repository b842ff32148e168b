"""Shadow agreement without a broker: the comparison of two page texts, the bounded join and
the summary, and the comparer's metrics."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from ocrstream.processors.shadow import (
    PageText,
    ShadowJoin,
    compare,
    join_all,
    percentile,
    summarise,
)
from ocrstream.schemas.codec import Codec
from ocrstream.schemas.records import Line, PageResult, PageStatus, Point
from ocrstream.settings import KafkaSettings, ShadowSettings
from ocrstream.streams.metrics import Metrics
from ocrstream.streams.shadow import ShadowComparer

BOX = (Point(0, 0), Point(1, 0), Point(1, 1), Point(0, 1))


def test_the_same_text_has_cer_0_and_a_changed_one_its_share_of_edits() -> None:
    same = compare("d", 1, PageText("Total 12.50", (0.9,)), PageText("total  12.50", (0.95,)))
    assert same.cer == 0.0  # normalised: case and whitespace do not count
    assert same.confidence_delta == pytest.approx(0.05)
    changed = compare("d", 1, PageText("abcdefghij", (0.9,)), PageText("abcdefghiX", (0.8,)))
    assert changed.cer == pytest.approx(0.1)
    assert changed.confidence_delta == pytest.approx(-0.1)
    assert compare("d", 1, PageText(""), PageText("")).cer == 0.0
    assert compare("d", 1, PageText(""), PageText("ghost")).cer == 1.0


def test_the_join_pairs_pages_in_any_order_and_once() -> None:
    join = ShadowJoin()
    assert join.add("shadow", "d", 2, PageText("b"), now=0.0) is None
    assert join.add("primary", "d", 1, PageText("a"), now=0.0) is None
    first = join.add("primary", "d", 2, PageText("b"), now=1.0)
    assert first is not None
    assert (first.doc_id, first.page_no, first.cer) == ("d", 2, 0.0)
    second = join.add("shadow", "d", 1, PageText("x"), now=1.0)
    assert second is not None
    assert second.cer == 1.0
    assert len(join) == 0
    assert join.add("shadow", "d", 1, PageText("again"), now=2.0) is None  # a duplicate
    assert len(join) == 0


def test_the_join_is_bounded_by_count_and_age() -> None:
    join = ShadowJoin(max_pending=2, ttl_s=10.0)
    for page in (1, 2, 3):
        join.add("primary", "d", page, PageText("t"), now=float(page))
    assert len(join) == 2
    assert join.dropped == 1
    assert join.add("shadow", "d", 1, PageText("t"), now=4.0) is None
    join.add("primary", "e", 1, PageText("t"), now=30.0)  # the others expired
    assert join.add("shadow", "d", 3, PageText("t"), now=30.0) is None
    assert join.add("shadow", "e", 1, PageText("t"), now=31.0) is not None


def test_the_summary_gives_counts_means_and_percentiles() -> None:
    pairs = [("primary", "d", p, PageText("abcdefghij", (0.9,))) for p in range(1, 5)]
    pairs += [("shadow", "d", 1, PageText("abcdefghij", (0.9,))),
              ("shadow", "d", 2, PageText("abcdefghiX", (0.8,)))]  # fmt: skip
    summary = summarise(join_all(pairs))  # type: ignore[arg-type]
    assert summary["pages"] == 2
    assert summary["pages_differing"] == 1
    assert summary["cer_mean"] == pytest.approx(0.05)
    assert summary["cer_max"] == pytest.approx(0.1)
    assert summary["confidence_delta_mean"] == pytest.approx(-0.05)
    assert math.isnan(summarise([])["cer_mean"])
    assert percentile([0.0, 1.0], 50) == 0.5


def _result(page: int, text: str, conf: float, **kw: object) -> bytes:
    lines = tuple(Line(t, conf, BOX) for t in text.split("/"))
    return Codec().encode(PageResult("d", page, 2, PageStatus.OK, lines=lines, **kw))  # type: ignore[arg-type]


def test_the_comparer_observes_cer_and_confidence_delta_per_page() -> None:
    metrics = Metrics()
    comparer = ShadowComparer(KafkaSettings(), ShadowSettings(), Codec(), metrics,
                              consumer=object())  # fmt: skip
    primary, shadow = comparer.primary_topic, comparer.shadow_topic
    assert comparer.handle(primary, _result(1, "Total/12.50", 0.9), 0.0) is None
    assert comparer.handle(primary, _result(2, "x", 0.9, provisional=True), 0.0) is None
    assert comparer.handle(shadow, b"\x00not avro", 0.0) is None
    found = comparer.handle(shadow, _result(1, "Total/12.5O", 0.8), 1.0)
    assert found is not None
    assert found.cer == pytest.approx(1 / 11)
    # the primary's result of page 2 was provisional: not compared
    assert comparer.handle(shadow, _result(2, "x", 0.9), 1.0) is None
    reg = metrics.registry
    assert reg.get_sample_value("ocrstream_shadow_cer_count") == 1
    assert reg.get_sample_value("ocrstream_shadow_cer_sum") == pytest.approx(1 / 11)
    # a histogram with negative buckets has no _sum (OpenMetrics): its buckets tell the sign
    delta = "ocrstream_shadow_confidence_delta_bucket"
    assert reg.get_sample_value(delta, {"le": "-0.2"}) == 0
    assert reg.get_sample_value(delta, {"le": "-0.05"}) == 1


def test_shadow_report_says_when_nothing_was_compared(monkeypatch: pytest.MonkeyPatch) -> None:
    from ocrstream.cli import main

    monkeypatch.setattr("ocrstream.streams.shadow.comparisons", lambda *a, **k: [])
    out = CliRunner().invoke(main, ["shadow", "report"])
    assert out.exit_code == 0, out.output
    assert "no page was answered by both" in out.output
