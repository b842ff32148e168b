"""The engine's records: what one page gives back, in the page shape of document.json."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ocrstream.processors.layout.blocks import Block
    from ocrstream.processors.regions import Field, Region

Point = tuple[float, float]
# an affine map of the plane, (a, b, c, d, e, f): x' = a x + c y + e, y' = b x + d y + f
Affine = tuple[float, float, float, float, float, float]


@dataclass(frozen=True, slots=True)
class Line:
    """One recognised text line; polygon in page pixels, clockwise from top-left."""

    text: str
    confidence: float
    polygon: tuple[Point, Point, Point, Point]

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "confidence": round(float(self.confidence), 4),
            "polygon": [[round(float(x), 1), round(float(y), 1)] for x, y in self.polygon],
        }


@dataclass(frozen=True, slots=True)
class LayoutPage:
    """A page given to the engine to be read in layout mode: lines, and blocks from them.
    ``image`` is what the engine takes otherwise (encoded bytes or a decoded array)."""

    image: Any


@dataclass(frozen=True, slots=True)
class RegionsPage:
    """A page given to the engine to read only its named regions (key-field mode): each
    region cropped, its lines found and read in the crop alone, one field per region."""

    image: Any
    regions: tuple[Region, ...]


@dataclass(frozen=True, slots=True)
class EngineInfo:
    backend: str
    model: str
    version: str
    device: str = "cpu"

    def to_dict(self) -> dict[str, str]:
        return {"backend": self.backend, "model": self.model, "version": self.version}


@dataclass(frozen=True, slots=True)
class PageOCR:
    """The result for one page, exactly the page object of document.json (plus timings)."""

    width: int
    height: int
    lines: tuple[Line, ...]
    rotation: int = 0
    status: str = "ok"  # ok | empty | failed
    error_code: str | None = None
    error_message: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    skew: float = 0.0  # degrees the page was turned counter-clockwise by deskew (0: not)
    blocks: tuple[Block, ...] | None = None  # layout mode: in reading order; None: text mode
    fields: tuple[Field, ...] | None = None  # key-field mode: one per region; None: not asked

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)

    def to_source(self) -> tuple[Affine, int, int]:
        """The map from this page's pixels (turned upright by the engine: ``rotation`` degrees
        clockwise) back to the pixels of the image it was given, and that image's width and
        height. The map is ``(a, b, c, d, e, f)``: ``x' = a x + c y + e``, ``y' = b x + d y +
        f``, PDF's and PyMuPDF's ``Matrix`` order."""
        w, h = self.width, self.height
        turn = round(self.rotation / 90) % 4
        if turn == 1:
            return (0, -1, 1, 0, 0, w), h, w
        if turn == 2:
            return (-1, 0, 0, -1, w, h), w, h
        if turn == 3:
            return (0, 1, -1, 0, h, 0), h, w
        return (1, 0, 0, 1, 0, 0), w, h

    def to_dict(self, page_no: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "page_no": page_no,
            "status": self.status,
            "width": self.width,
            "height": self.height,
            "rotation": self.rotation,
            "lines": [line.to_dict() for line in self.lines],
        }
        if self.error_code:
            out["error"] = {"code": self.error_code, "message": self.error_message or ""}
        if self.blocks is not None:
            out["blocks"] = [block.to_dict() for block in self.blocks]
        return out
