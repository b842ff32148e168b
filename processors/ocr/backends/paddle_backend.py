"""Paddle Inference: PaddleOCR's own runtime, for users who hold Paddle inference models.

This backend runs each model with ``paddle.inference`` (the predictor PaddleOCR itself uses
under ``paddleocr``), one predictor per model, behind the same :class:`InferSession` contract,
so the engine's cross-page batching, DB post-processing and CTC stay the same. Install
``ocrstream[paddle]`` (``paddlepaddle``, or ``paddlepaddle-gpu`` for CUDA).

Models. Point ``OCRSTREAM_MODEL_DIR`` at a folder with the usual ``det.onnx``/``rec.onnx`` (the
engine's model registry needs them for the dictionary and names) and, beside each, the Paddle
inference model in a folder named after it: ``det/`` and ``rec/`` (or ``det.paddle/``), each
holding PaddleOCR's export — ``inference.json`` (PIR, PaddlePaddle 3) or ``inference.pdmodel``
(older), plus ``inference.pdiparams``; x2paddle's ``model.json``/``model.pdmodel`` +
``model.pdiparams`` are found too. ``model_path`` may also name such a folder or file directly.

Producing Paddle models offline from the ONNX files here: yes, with ``x2paddle`` (PyPI,
1.6.0) in an environment with ``paddlepaddle`` and ``onnx<1.17`` (x2paddle 1.6 reads
``onnx.version.version``, which onnx 1.17+ removed; this project's venv has onnx 1.23, so
conversion needs a separate venv)::

    x2paddle --framework=onnx --model=det.onnx --save_dir=det.x2p --disable_feedback=True

It writes ``det.x2p/inference_model/model.json`` + ``model.pdiparams``. That was done for
PP-OCRv6 small det and rec with paddlepaddle 3.3.1 (CPU) and the outputs compared with
onnxruntime: see docs/benchmarks.md. The unit test does the same where ``paddle`` and a
working ``x2paddle`` import, and is skipped with the reason elsewhere.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.backends.base import ModelKind, SessionOptions

log = logging.getLogger(__name__)

_PROGRAM_NAMES = ("inference.json", "inference.pdmodel", "model.json", "model.pdmodel")


def find_paddle_model(model_path: Path) -> tuple[Path, Path]:
    """(program file, params file) for an ONNX path's Paddle sibling, a folder or a file."""
    path = Path(model_path)
    candidates: list[Path] = []
    if path.is_file() and path.suffix in (".json", ".pdmodel"):
        candidates.append(path)
    else:
        folders = [path] if path.is_dir() else []
        if path.suffix == ".onnx":
            stem = path.with_suffix("")
            folders += [stem, Path(f"{stem}.paddle"), Path(f"{stem}.x2p")]
        for folder in folders:
            for sub in (folder, folder / "inference_model"):
                candidates += [sub / name for name in _PROGRAM_NAMES]
    for program in candidates:
        params = program.with_suffix(".pdiparams")
        if program.is_file() and params.is_file():
            return program, params
    raise FatalError(
        f"no Paddle inference model for {path} (looked for {', '.join(_PROGRAM_NAMES)} with a "
        ".pdiparams beside it, in the folder named after the model); see "
        "ocrstream.processors.ocr.backends.paddle_backend for how to make one",
        code="model_missing",
    )


def _import_inference() -> Any:
    try:
        from paddle import inference
    except ImportError as e:
        raise FatalError(
            "the paddle backend needs PaddlePaddle: pip install 'ocrstream[paddle]'",
            code="backend_unavailable",
        ) from e
    return inference


class PaddleSession:
    backend = "paddle"

    def __init__(self, model_path: Path, kind: ModelKind, options: SessionOptions) -> None:
        inference = _import_inference()
        program, params = find_paddle_model(model_path)
        config = inference.Config(str(program), str(params))
        device = options.device.strip().lower()
        if device.startswith(("cuda", "gpu")):
            import paddle

            if not paddle.device.is_compiled_with_cuda() or paddle.device.cuda.device_count() == 0:
                raise FatalError(
                    f"device {options.device!r} asked for, but this PaddlePaddle "
                    "has no CUDA GPU (install paddlepaddle-gpu)",
                    code="gpu_unavailable",
                )
            index = int(device.split(":", 1)[1]) if ":" in device else 0
            config.enable_use_gpu(512, index)
            self.device = f"cuda:{index}"
        else:
            config.disable_gpu()
            config.set_cpu_math_library_num_threads(max(1, options.threads))
            # PaddlePaddle 3.3's oneDNN kernels reject some converted attributes
            # (``ConvertPirAttribute2RuntimeAttribute not support ArrayAttribute<Double>``)
            if hasattr(config, "disable_mkldnn"):
                config.disable_mkldnn()
            self.device = "cpu"
        config.switch_ir_optim(True)
        if hasattr(config, "disable_glog_info"):
            config.disable_glog_info()
        try:
            self._predictor = inference.create_predictor(config)
        except (RuntimeError, ValueError, OSError) as e:
            raise FatalError(
                f"Paddle Inference cannot load {program}: {e}", code="backend_unavailable"
            ) from e
        self._input = self._predictor.get_input_handle(self._predictor.get_input_names()[0])
        self._output = self._predictor.get_output_handle(self._predictor.get_output_names()[0])
        self.kind = kind
        log.info("paddle %s session from %s on %s", kind, program, self.device)

    def run(self, batch: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        x = np.ascontiguousarray(batch, dtype=np.float32)
        self._input.reshape(list(x.shape))
        self._input.copy_from_cpu(x)
        self._predictor.run()
        return np.asarray(self._output.copy_to_cpu(), dtype=np.float32)


class PaddleBackend:
    name = "paddle"

    def load(self, model_path: Path, kind: ModelKind, options: SessionOptions) -> PaddleSession:
        return PaddleSession(model_path, kind, options)
