"""Schema evolution checks: can a new (reader) schema read what an old (writer) schema wrote?

The check is empirical, so it tests what fastavro actually does rather than a re-statement
of the spec: it generates sample data from the old schema such that every union branch and
every enum symbol appears in at least one sample, writes each with the old schema and
resolves it into the new one.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import fastavro
from fastavro.schema import expand_schema

_PRIMITIVES: dict[str, Any] = {
    "null": lambda k: None,
    "boolean": lambda k: bool(k % 2),
    "int": lambda k: k,
    "long": lambda k: k,
    "float": lambda k: float(k),
    "double": lambda k: float(k),
    "bytes": lambda k: bytes([k % 256]),
    "string": lambda k: f"s{k}",
}


def _width(schema: Any) -> int:
    """How many samples cover every union branch and enum symbol."""
    if isinstance(schema, list):
        return max([len(schema), *(_width(s) for s in schema)])
    if not isinstance(schema, Mapping):
        return 1
    kind = schema["type"]
    if kind == "record":
        return max([1, *(_width(f["type"]) for f in schema["fields"])])
    if kind == "enum":
        return len(schema["symbols"])
    if kind == "array":
        return _width(schema["items"])
    if kind == "map":
        return _width(schema["values"])
    return _width(kind) if isinstance(kind, list | Mapping) else 1


def _sample(schema: Any, k: int) -> Any:
    if isinstance(schema, list):
        return _sample(schema[k % len(schema)], k)
    if isinstance(schema, str):
        return _PRIMITIVES[schema](k)
    kind = schema["type"]
    if kind == "record":
        return {f["name"]: _sample(f["type"], k) for f in schema["fields"]}
    if kind == "enum":
        return schema["symbols"][k % len(schema["symbols"])]
    if kind == "array":
        return [_sample(schema["items"], k)]
    if kind == "map":
        return {f"k{k}": _sample(schema["values"], k)}
    if kind == "fixed":
        return bytes(schema["size"])
    return _sample(kind, k)  # a primitive with a logicalType, or a nested type object


def samples(schema: Mapping[str, Any]) -> list[Any]:
    """Data written with ``schema`` that exercises every branch and symbol."""
    expanded = expand_schema(fastavro.parse_schema(dict(schema)))
    return [_sample(expanded, k) for k in range(_width(expanded))]


def check_backward_compatible(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Problems reading data written with ``old`` through ``new``; empty when compatible."""
    writer = fastavro.parse_schema(dict(old))
    try:
        reader = fastavro.parse_schema(dict(new))
    except fastavro.schema.SchemaParseException as e:
        return [f"new schema does not parse: {e}"]
    problems: list[str] = []
    for n, datum in enumerate(samples(old)):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, writer, datum)
        buf.seek(0)
        try:
            fastavro.schemaless_reader(buf, writer, reader)
        except (fastavro.read.SchemaResolutionError, ValueError, TypeError, KeyError) as e:
            problem = f"{type(e).__name__}: {e}"
            if problem not in problems:
                problems.append(problem)
            continue
        if buf.tell() != len(buf.getvalue()):
            problems.append(f"sample {n}: reader stopped before the end of the data")
    return problems
