"""The PromQL of the Grafana dashboards and the Prometheus rules, for tests.

:func:`iter_promql` lists every expression, ready to send to Prometheus's HTTP API (Grafana's
interval variables replaced by fixed durations); :func:`promql_items` says where each comes
from and what it is: a dashboard ``panel`` query, a ``record`` rule or an ``alert`` condition
(an alert's expression is empty while all is well, by design). :data:`KNOWN_METRICS` is the
part of the catalogue in docs/architecture.md ("Metrics") that dashboards and rules may use;
:func:`metric_names` and :func:`label_matchers` pull names out of an expression without a full
PromQL parser.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, NamedTuple

import yaml

ROOT = Path(__file__).resolve().parents[1]
DASHBOARDS = ROOT / "infra" / "grafana" / "dashboards"
RULES = ROOT / "infra" / "prometheus" / "rules"

# Grafana's built-in interval variables, as fixed durations Prometheus accepts.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "${__rate_interval}": "1m",
    "$__interval": "1m",
    "${__interval}": "1m",
    "$__range": "1h",
    "${__range}": "1h",
}

Kind = Literal["panel", "record", "alert"]


class PromQL(NamedTuple):
    source: str  # "ocrstream-pipeline.json: Consumer lag by group and topic [A]"
    kind: Kind
    expr: str
    name: str = ""  # the recorded series or the alert's name, for rules


class Metric(NamedTuple):
    type: Literal["counter", "gauge", "histogram"]
    labels: frozenset[str]


def _m(kind: Literal["counter", "gauge", "histogram"], *labels: str) -> Metric:
    return Metric(kind, frozenset(labels))


# docs/architecture.md "Metrics": what dashboards and rules may use.
KNOWN_METRICS: dict[str, Metric] = {
    "ocrstream_pages_total": _m("counter", "stage", "status"),
    "ocrstream_documents_total": _m("counter", "status"),
    "ocrstream_stage_seconds": _m("histogram", "stage"),
    "ocrstream_batch_size": _m("histogram", "stage"),
    "ocrstream_document_latency_seconds": _m("histogram"),
    "ocrstream_consumer_lag": _m("gauge", "group", "topic", "partition"),
    "ocrstream_dlq_total": _m("counter", "stage", "code"),
    "ocrstream_cache_total": _m("counter", "result"),
    "ocrstream_agent_stalled_records_total": _m("counter", "agent", "topic"),
    "ocrstream_consumer_fetch_stalls_total": _m("counter", "agent", "topic"),
    "ocrstream_inflight_documents": _m("gauge"),
    "ocrstream_worker_info": _m("gauge", "backend", "model", "device"),
    "ocrstream_gpu_utilization_ratio": _m("gauge", "device"),
    "ocrstream_gpu_memory_used_bytes": _m("gauge", "device"),
    "ocrstream_autoscaler_desired_replicas": _m("gauge"),
    "ocrstream_autoscaler_replicas": _m("gauge"),
    "ocrstream_routing_total": _m("counter", "pool", "outcome"),
    "ocrstream_shadow_cer": _m("histogram"),
    "ocrstream_shadow_confidence_delta": _m("histogram"),
    # prometheus_client's process collector, in every ocrstream process
    "process_resident_memory_bytes": _m("gauge"),
    # the edge: webhook agent and HTTP API (ocrstream-edge.json, ocrstream-edge.rules.yml)
    "ocrstream_webhook_deliveries_total": _m("counter", "outcome"),
    "ocrstream_webhook_delivery_seconds": _m("histogram"),
    "ocrstream_webhook_pending_retries": _m("gauge"),
    "ocrstream_api_requests_total": _m("counter", "route", "status", "tenant"),
    "ocrstream_api_request_seconds": _m("histogram", "route", "status"),
    "ocrstream_api_limited_total": _m("counter", "tenant", "limit"),
    "ocrstream_api_usage_total": _m("counter", "tenant", "limit"),
    "ocrstream_api_usage_lag_seconds": _m("histogram"),
}
# Labels every scraped series has.
TARGET_LABELS = frozenset({"instance", "job"})


def series_names() -> dict[str, frozenset[str]]:
    """Every series name a query may select, with its labels (histograms by their parts)."""
    names: dict[str, frozenset[str]] = {}
    for name, metric in KNOWN_METRICS.items():
        labels = metric.labels | TARGET_LABELS
        if metric.type == "histogram":
            names[f"{name}_bucket"] = labels | {"le"}
            names[f"{name}_sum"] = labels
            names[f"{name}_count"] = labels
        else:
            names[name] = labels
    return names


def _walk_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _walk_panels(panel.get("panels", []))


def substitute(expr: str) -> str:
    """The expression with Grafana's interval variables replaced; other variables are errors."""
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    if "$" in expr:
        raise ValueError(f"unsupported Grafana variable in {expr!r} (add it to tests/promql.py)")
    return expr


def dashboard_promql(path: Path) -> list[PromQL]:
    dashboard = json.loads(path.read_text())
    items: list[PromQL] = []
    for panel in _walk_panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            if target.get("expr"):
                where = f"{path.name}: {panel.get('title')} [{target.get('refId')}]"
                items.append(PromQL(where, "panel", substitute(target["expr"])))
    return items


def rules_promql(path: Path) -> list[PromQL]:
    items: list[PromQL] = []
    for group in yaml.safe_load(path.read_text()).get("groups", []):
        for rule in group.get("rules", []):
            kind: Kind = "record" if "record" in rule else "alert"
            name = rule.get("record") or rule.get("alert")
            where = f"{path.name}: {group['name']}/{name}"
            items.append(PromQL(where, kind, rule["expr"].strip(), name))
    return items


def promql_items(dashboard_dir: Path = DASHBOARDS, rules_dir: Path = RULES) -> list[PromQL]:
    """Every expression of the dashboards (``*.json``) and rule files (``*.yml``, not tests)."""
    items: list[PromQL] = []
    for path in sorted(Path(dashboard_dir).glob("*.json")):
        items.extend(dashboard_promql(path))
    for path in sorted(Path(rules_dir).glob("*.yml")):
        items.extend(rules_promql(path))
    return items


def iter_promql(dashboard_dir: Path = DASHBOARDS, rules_dir: Path = RULES) -> list[str]:
    """Every PromQL expression of the dashboards and rules, each once, in file order."""
    return list(dict.fromkeys(item.expr for item in promql_items(dashboard_dir, rules_dir)))


_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_RANGE = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")


def _bare(expr: str) -> str:
    """The expression without string literals and range/subquery brackets."""
    return _RANGE.sub("", _STRING.sub('""', expr))


def metric_names(expr: str) -> set[str]:
    """Series names an expression selects: ``ocrstream_*`` names, the ``process_*`` names of
    prometheus_client's process collector, and recorded ``a:b:c`` names."""
    return {
        token
        for token in _IDENT.findall(_bare(expr))
        if token.startswith(("ocrstream_", "process_")) or (":" in token and "ocrstream" in token)
    }


def label_matchers(expr: str) -> list[tuple[str, str]]:
    """(series name, label name) for every matcher inside a selector's braces."""
    pairs: list[tuple[str, str]] = []
    for name, body in _SELECTOR.findall(_bare(expr)):
        pairs.extend((name, label) for label in _MATCHER.findall(body))
    return pairs
