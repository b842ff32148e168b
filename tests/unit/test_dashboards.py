"""The Grafana dashboards and Prometheus rules use only the metrics of docs/architecture.md
("Metrics"), and parse.

Names come from tests/promql.py (the catalogue and the expression extraction, shared with the
integration test that runs every expression against a live Prometheus). Where ``promtool`` is
installed (Debian package ``prometheus``), the rules are checked and unit-tested with it, and
every dashboard expression is parsed by it too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.promql import (
    DASHBOARDS,
    KNOWN_METRICS,
    ROOT,
    RULES,
    label_matchers,
    metric_names,
    promql_items,
    series_names,
)

DASHBOARD_FILES = sorted(DASHBOARDS.glob("*.json"))
RULE_FILES = sorted(RULES.glob("*.yml"))
RULE_TESTS = sorted((RULES / "tests").glob("*.yml"))
DATASOURCE_UID = "prometheus"


def _recorded() -> dict[str, set[str]]:
    """Recorded series of the rule files, with the names they are computed from."""
    recorded = {}
    for item in promql_items():
        if item.kind == "record":
            recorded[item.name] = metric_names(item.expr)
    return recorded


def _panels(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def test_there_are_dashboards_and_rules() -> None:
    assert DASHBOARD_FILES
    assert RULE_FILES
    kinds = {item.kind for item in promql_items()}
    assert kinds == {"panel", "record", "alert"}


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.name)
def test_dashboard_is_well_formed(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    assert dashboard["uid"]
    assert dashboard["title"]
    assert dashboard["schemaVersion"] >= 36
    panels = _panels(dashboard)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    boxes = []
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        boxes.append((grid["x"], grid["y"], grid["w"], grid["h"], panel["title"]))
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == DATASOURCE_UID, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == DATASOURCE_UID, panel["title"]
            assert target["expr"].strip(), panel["title"]
    for i, (x, y, w, h, title) in enumerate(boxes):
        for x2, y2, w2, h2, title2 in boxes[i + 1 :]:
            overlap = x < x2 + w2 and x2 < x + w and y < y2 + h2 and y2 < y + h
            assert not overlap, f"panels {title!r} and {title2!r} overlap"


def expression_problems(expr: str, recorded: dict[str, set[str]]) -> list[str]:
    """What is wrong with one expression: unknown names, bare histograms, unknown labels."""
    series = series_names()
    histograms = {n for n, m in KNOWN_METRICS.items() if m.type == "histogram"}
    names = metric_names(expr)
    problems = [f"unknown metric {n}" for n in sorted(names - set(series) - set(recorded))]
    if not names:
        problems.append("selects no ocrstream metric")
    problems += [
        f"{n} has no series of its own; use _bucket/_sum/_count" for n in sorted(names & histograms)
    ]
    if "histogram_quantile" in expr and ("_bucket" not in expr or "rate(" not in expr):
        problems.append("histogram_quantile needs the rate of a _bucket series")
    for name, label in label_matchers(expr):
        if name in series and label not in series[name]:
            problems.append(f"{name} has no label {label!r}")
    return problems


def test_every_expression_uses_only_known_metrics_and_labels() -> None:
    recorded = _recorded()
    problems = {}
    for item in promql_items():
        found = expression_problems(item.expr, recorded)
        if found:
            problems[item.source] = found
    assert problems == {}


def test_recording_rules_are_built_from_known_metrics() -> None:
    known = set(series_names())
    for name, sources in _recorded().items():
        assert sources <= known, f"{name} uses {sorted(sources - known)}"


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("rate(ocrstream_page_total[5m])", "unknown metric ocrstream_page_total"),
        ("sum(rate(ocrstream_pages_total:rate1m[5m]))", "unknown metric"),
        ("histogram_quantile(0.9, rate(ocrstream_stage_seconds[5m]))", "no series of its own"),
        ("histogram_quantile(0.9, ocrstream_stage_seconds_bucket)", "needs the rate"),
        ('ocrstream_documents_total{stage="split"}', "has no label 'stage'"),
        ("up", "selects no ocrstream metric"),
    ],
)
def test_a_wrong_expression_is_caught(expr: str, problem: str) -> None:
    assert any(problem in p for p in expression_problems(expr, _recorded()))


def test_dashboards_cover_what_operators_watch() -> None:
    used = set().union(*(metric_names(i.expr) for i in promql_items() if i.kind == "panel"))
    for name in (
        "ocrstream_consumer_lag",
        "ocrstream_pages_total",
        "ocrstream_documents_total",
        "ocrstream_stage_seconds_bucket",
        "ocrstream_batch_size_bucket",
        "ocrstream_document_latency_seconds_bucket",
        "ocrstream_dlq_total",
        "ocrstream_inflight_documents",
        "ocrstream_worker_info",
        "ocrstream_gpu_utilization_ratio",
        "ocrstream_autoscaler_replicas",
        "ocrstream_webhook_deliveries_total",
        "ocrstream_webhook_delivery_seconds_bucket",
        "ocrstream_webhook_pending_retries",
        "ocrstream_api_requests_total",
        "ocrstream_api_request_seconds_bucket",
        "ocrstream_api_limited_total",
    ):
        assert name in used, f"no dashboard panel shows {name}"


def test_alerts_exist() -> None:
    alerts = {i.name for i in promql_items() if i.kind == "alert"}
    assert {"OcrstreamConsumerLagGrowing", "OcrstreamDeadLetters", "OcrstreamNoProgress"} <= alerts
    assert {"OcrstreamWebhooksDeadLettered", "OcrstreamWebhookRetriesGrowing",
            "OcrstreamApiServerErrors"} <= alerts  # fmt: skip


def test_provisioned_datasource_has_the_dashboards_uid() -> None:
    path = ROOT / "infra" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
    if not path.exists():
        pytest.skip("no Grafana datasource provisioning file")
    uids = {d.get("uid") for d in yaml.safe_load(path.read_text())["datasources"]}
    assert DATASOURCE_UID in uids


def test_extraction_sees_what_it_should() -> None:
    expr = (
        'sum by (group) (max by (group, partition) (ocrstream_consumer_lag{topic=~"a\\\\.b"}))'
        " / on () group_topic:ocrstream_consumer_lag:sum[5m:1m] > bogus_metric"
    )
    assert metric_names(expr) == {
        "ocrstream_consumer_lag",
        "group_topic:ocrstream_consumer_lag:sum",
    }
    assert label_matchers(expr) == [("ocrstream_consumer_lag", "topic")]
    assert metric_names('ocrstream_pagez_total{stage="ocrstream_x"}') == {"ocrstream_pagez_total"}


# promtool, where installed.

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120)


@needs_promtool
@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_promtool_checks_the_rules(path: Path) -> None:
    result = _promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
@pytest.mark.parametrize("path", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests_of_the_alerts(path: Path) -> None:
    result = _promtool("test", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_parses_every_dashboard_expression(tmp_path: Path) -> None:
    panels = [i for i in promql_items() if i.kind == "panel"]
    rules = [{"record": f"ocrstream_check:expr_{n}", "expr": i.expr} for n, i in enumerate(panels)]
    path = tmp_path / "dashboards.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = _promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_rejects_a_broken_expression(tmp_path: Path) -> None:
    path = tmp_path / "broken.yml"
    rule = {"record": "x:y:z", "expr": "sum by (stage (rate(ocrstream_pages_total[5m]))"}
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [rule]}]}))
    assert _promtool("check", "rules", str(path)).returncode != 0
