"""docs/architecture.md says what the code does: its topic table, record fields, metric
catalogue, command list and document.json example are checked against the code here, so the
contract can't drift from the implementation without a red test."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

import ocrstream.schemas
from ocrstream.cli import _COMMANDS
from ocrstream.schemas import document_json_schema
from ocrstream.streams.metrics import Metrics
from ocrstream.streams.topics import DAY_MS, TOPICS
from tests.promql import KNOWN_METRICS, ROOT

DOC = (ROOT / "docs" / "architecture.md").read_text()
SCHEMAS = Path(ocrstream.schemas.__path__[0])


def section(title: str) -> str:
    """The text under the heading ``title`` (any level), up to the next heading of its level
    or above."""
    match = re.search(rf"^(#+) {re.escape(title)}\n", DOC, re.MULTILINE)
    assert match, f"no section {title!r} in docs/architecture.md"
    level = len(match.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.MULTILINE).search(DOC, match.end())
    return DOC[match.end() : end.start() if end else len(DOC)]


def rows(text: str) -> list[list[str]]:
    """The body rows of the first table in ``text``, as cells (``\\|`` is a literal bar)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    assert len(lines) > 2, "no table"
    cells = [re.split(r"(?<!\\)\|", line.strip())[1:-1] for line in lines[2:]]
    return [[cell.strip() for cell in row] for row in cells]


def code(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_the_topic_table_is_the_code() -> None:
    def retention(cell: str) -> int | None:
        if cell == "—":
            return None
        days = re.fullmatch(r"(\d+) days?", cell)
        assert days, cell
        return int(days.group(1)) * DAY_MS

    documented = {code(row[0])[0]: (int(row[2]), row[3], retention(row[4]))
                  for row in rows(section("Topics"))}  # fmt: skip
    assert documented == {t.name: (t.partitions, t.cleanup_policy, t.retention_ms) for t in TOPICS}


@pytest.mark.parametrize("schema", sorted(SCHEMAS.glob("*.avsc")), ids=lambda p: p.stem)
def test_every_record_field_is_described(schema: Path) -> None:
    fields = {f["name"] for f in json.loads(schema.read_text())["fields"]}
    described = {name for row in rows(section(schema.stem)) for name in code(row[0])}
    assert described == fields


def documented_metrics() -> dict[str, tuple[str, set[str]]]:
    """name → (type, labels) from the metric table."""

    def labels(cell: str) -> set[str]:
        return set() if cell == "—" else {label.strip() for label in cell.split(",")}

    return {code(row[0])[0]: (row[1], labels(row[2])) for row in rows(section("Metrics"))}


def test_the_metric_table_is_the_code() -> None:
    metrics = [m for m in vars(Metrics(CollectorRegistry())).values()
               if isinstance(m, MetricWrapperBase)]  # fmt: skip
    in_code = {
        m._name + ("_total" if m._type == "counter" else ""): (m._type, set(m._labelnames))
        for m in metrics
    }
    # process_*: prometheus_client's own process collector, listed for the dashboard's use
    ours = {k: v for k, v in documented_metrics().items() if not k.startswith("process_")}
    assert ours == in_code


def test_the_dashboards_catalogue_is_part_of_the_table() -> None:
    documented = documented_metrics()
    for name, metric in KNOWN_METRICS.items():
        assert documented.get(name) == (metric.type, set(metric.labels)), name


def test_every_command_is_listed() -> None:
    listed = {name.split()[0] for row in rows(section("Commands")) for name in code(row[0])}
    assert listed == set(_COMMANDS)


def test_the_document_json_example_is_valid() -> None:
    example = re.search(r"```json\n(.*?)```", section("Storage"), re.DOTALL)
    assert example
    jsonschema.validate(json.loads(example.group(1)), document_json_schema())
