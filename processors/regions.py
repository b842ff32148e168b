"""Key-field mode: named regions of a page, read alone — no page detection, no layout.

A submission's ``options.regions`` is JSON: a list of boxes, or ``{"template": NAME}`` naming a
list kept in settings (``OCRSTREAM_SPLITTER_REGION_TEMPLATES``, a JSON file of name → list).
A box is ``{"name": "total", "page": 1, "bbox": [x0, y0, x1, y1]}``: ``bbox`` in fractions of
the page's width and height (0..1, so a template fits any DPI), ``page`` 1-based or 0 for every
page. The splitter gives each PageTask its page's boxes (``options["regions"]``, JSON, so they
are part of the page-cache key); the engine crops them, finds and reads the lines inside each
crop only, and answers one :class:`Field` per box; ``document.json`` gets
``fields: {name: {text, confidence, page, bbox}}`` (``bbox`` in page pixels). Pure.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ocrstream.errors import PoisonError

OPTION = "regions"  # the key in ScanSubmitted.options and PageTask.options
MAX_REGIONS = 200  # boxes per submission


class InvalidRegionsError(PoisonError):
    """``options.regions`` that is not a list of named boxes or a known template."""

    code = "invalid_regions"


@dataclass(frozen=True, slots=True)
class Region:
    name: str
    page: int  # 1-based; 0: every page
    bbox: tuple[float, float, float, float]  # fractions of the page's width and height

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "page": self.page, "bbox": list(self.bbox)}

    def pixels(self, width: int, height: int) -> tuple[int, int, int, int]:
        """The box in pixels of a ``width`` × ``height`` page, clipped to it."""
        x0, y0, x1, y1 = self.bbox
        return (
            max(0, min(width, round(x0 * width))),
            max(0, min(height, round(y0 * height))),
            max(0, min(width, round(x1 * width))),
            max(0, min(height, round(y1 * height))),
        )


@dataclass(frozen=True, slots=True)
class Field:
    """What was read in one region: its text (:func:`field_text`), the lowest line
    confidence (0 when empty), and its box in page pixels."""

    name: str
    text: str
    confidence: float
    bbox: tuple[float, float, float, float]

    def to_dict(self, page_no: int) -> dict[str, Any]:
        return {
            "text": self.text,
            "confidence": round(self.confidence, 4),
            "page": page_no,
            "bbox": [round(v, 1) for v in self.bbox],
        }


def _box(item: Any, where: str) -> Region:
    if not isinstance(item, Mapping):
        raise InvalidRegionsError(f"{where}: a region is an object with name, page and bbox")
    name = item.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise InvalidRegionsError(f"{where}: a region needs a name (1-100 characters)")
    page = item.get("page", 0)
    if not isinstance(page, int) or page < 0:
        raise InvalidRegionsError(f"{where}: region {name!r}: page must be 0 (every) or 1..n")
    bbox = item.get("bbox")
    if (
        not isinstance(bbox, Sequence)
        or len(bbox) != 4
        or not all(isinstance(v, int | float) and 0 <= v <= 1 for v in bbox)
        or not (bbox[0] < bbox[2] and bbox[1] < bbox[3])
    ):
        raise InvalidRegionsError(
            f"{where}: region {name!r}: bbox must be [x0, y0, x1, y1], fractions of the page "
            "(0..1) with x0 < x1 and y0 < y1"
        )
    x0, y0, x1, y1 = (float(v) for v in bbox)
    return Region(name.strip(), page, (x0, y0, x1, y1))


def parse_regions(value: Any, templates: Mapping[str, Any] | None = None) -> tuple[Region, ...]:
    """The boxes of ``options.regions`` (JSON text or already parsed), a template resolved
    from ``templates``. Raises :class:`InvalidRegionsError`."""
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise InvalidRegionsError(f"options.regions is not JSON: {e}") from e
    where = "options.regions"
    if isinstance(value, Mapping) and "template" in value:
        name = value["template"]
        if not isinstance(name, str) or name not in (templates or {}):
            known = ", ".join(sorted(templates or {})) or "none"
            raise InvalidRegionsError(f"unknown regions template {name!r} (known: {known})")
        value, where = (templates or {})[name], f"template {name!r}"
    if isinstance(value, Mapping) and "regions" in value:
        value = value["regions"]
    if not isinstance(value, Sequence) or isinstance(value, str) or not value:
        raise InvalidRegionsError(f"{where}: a non-empty list of regions, or a template")
    if len(value) > MAX_REGIONS:
        raise InvalidRegionsError(f"{where}: {len(value)} regions, more than {MAX_REGIONS}")
    return tuple(_box(item, where) for item in value)


def field_text(pieces: Sequence[tuple[str, tuple[float, float, float, float]]]) -> str:
    """The text of a region from its lines' (text, box) in reading order: pieces on one row
    (vertical overlap of half a line) joined — without a space where the boxes touch or
    overlap (a number the detector split at its point) — and rows
    joined by newlines."""
    rows: list[list[tuple[str, tuple[float, float, float, float]]]] = []
    for text, box in sorted(pieces, key=lambda p: (p[1][1] + p[1][3]) / 2):
        if rows:
            last = rows[-1][-1][1]
            overlap = min(box[3], last[3]) - max(box[1], last[1])
            if overlap >= 0.5 * min(box[3] - box[1], last[3] - last[1]):
                rows[-1].append((text, box))
                continue
        rows.append([(text, box)])
    out = []
    for row in rows:
        row.sort(key=lambda p: p[1][0])
        line = row[0][0]
        for (_, prev), (text, box) in itertools.pairwise(row):
            gap = box[0] - prev[2]
            line += ("" if gap < 0.05 * (box[3] - box[1]) else " ") + text
        out.append(line)
    return "\n".join(out)


def for_page(regions: Sequence[Region], page_no: int) -> tuple[Region, ...]:
    return tuple(r for r in regions if r.page in (0, page_no))


def encode(regions: Sequence[Region]) -> str:
    return json.dumps([r.to_dict() for r in regions], separators=(",", ":"))


def decode(text: str) -> tuple[Region, ...]:
    """A PageTask's regions, as :func:`encode` wrote them (an empty list: none on the page)."""
    data = json.loads(text)
    return tuple(_box(item, "PageTask regions") for item in data)
