"""ONNX Runtime on CPU: the reference backend.

One session per model: intra-op threads from the settings, one inter-op thread, sequential
execution and every graph optimisation. With ``SessionOptions.streams`` > 1 the threads are
split between that many concurrent ``run`` calls (two rec batches at once on one thread each
beat one batch on two threads by 10-30% on 2 cores). The memory arena is kept off for det,
whose input shape changes with every page size (an arena sized for the largest page would
stay resident).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.backends.base import ModelKind, SessionOptions


class OrtSession:
    backend = "onnxruntime"

    def __init__(self, model_path: Path, kind: ModelKind, options: SessionOptions) -> None:
        import onnxruntime as ort

        if options.device != "cpu":
            raise FatalError(
                f"the onnxruntime backend runs on CPU; for {options.device!r} use "
                "OCRSTREAM_OCR_BACKEND=tensorrt or torch, or install onnxruntime-gpu",
                code="backend_unavailable",
            )
        so = ort.SessionOptions()
        streams = max(1, min(options.streams, options.threads))
        so.intra_op_num_threads = max(1, options.threads // streams)
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.enable_cpu_mem_arena = kind != "det"
        so.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(
                str(model_path), sess_options=so, providers=["CPUExecutionProvider"]
            )
        except Exception as e:  # onnxruntime raises its own untyped errors
            raise FatalError(f"onnxruntime cannot load {model_path}: {e}") from e
        self._input = self._session.get_inputs()[0].name
        self._output = self._session.get_outputs()[0].name
        self.concurrency = streams  # InferenceSession.run is safe to call from several threads
        self.device = "cpu"
        self.kind = kind

    def run(self, batch: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        out = self._session.run([self._output], {self._input: np.ascontiguousarray(batch)})
        return np.asarray(out[0], dtype=np.float32)


class OnnxRuntimeBackend:
    name = "onnxruntime"

    def load(self, model_path: Path, kind: ModelKind, options: SessionOptions) -> OrtSession:
        return OrtSession(model_path, kind, options)
