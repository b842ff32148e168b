"""The inference protocol every backend implements.

A backend turns one ONNX model file into an :class:`InferSession`. Sessions are created once
per process and are safe to call from one thread at a time; calling them never mutates
shared state. Backends are imported lazily (:func:`ocrstream.processors.ocr.backends.create`)
so that a CPU worker never imports torch or TensorRT.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

ModelKind = Literal["det", "rec", "cls"]


@dataclass(frozen=True, slots=True)
class SessionOptions:
    """How to run one model: device, threads, precision and the dynamic-shape ranges.

    ``min_shape``/``opt_shape``/``max_shape`` are NCHW and matter to engines that compile for
    shape ranges (TensorRT optimisation profiles, OpenVINO reshape); others ignore them.
    """

    device: str = "cpu"
    threads: int = 1
    precision: str = "fp32"  # fp32 | fp16 | bf16
    min_shape: tuple[int, int, int, int] | None = None
    opt_shape: tuple[int, int, int, int] | None = None
    max_shape: tuple[int, int, int, int] | None = None
    cache_dir: Path | None = None
    compile: bool = False  # torch: wrap the converted module in torch.compile (GPU workers)
    # torch on CUDA: replay each input shape met twice as one CUDA graph (up to
    # torch_backend.MAX_GRAPHS shapes); settings.OcrSettings.cuda_graphs, for rec only.
    cuda_graphs: bool = False
    # rec on the torch and TensorRT backends: ``run`` returns per time step the best class
    # (as a float), its probability and the last class's (N x T x 3, torch_backend.ctc_best),
    # computed on the device, instead of all C probabilities: 3 floats a step cross to the
    # host, not PP-OCRv6's 18,710. The CPU backends get the same from the compact rec model
    # (models.ctc_best_model) and ignore this.
    ctc_best: bool = False
    # CPU backends: how many ``run`` calls may go at once, each on threads // streams threads.
    # A session that allows it says so in its ``concurrency`` attribute (default 1).
    streams: int = 1


@runtime_checkable
class InferSession(Protocol):
    """One loaded model. ``run`` takes an NCHW float32 batch and returns the first output."""

    backend: str
    device: str

    def run(self, batch: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]: ...


class Backend(Protocol):
    name: str

    def load(self, model_path: Path, kind: ModelKind, options: SessionOptions) -> InferSession: ...
