"""onnxruntime-gpu: the TensorRT execution provider first, then CUDA.

Used when the ``onnxruntime-gpu`` package (extra ``[gpu]``) is installed in place of the CPU
``onnxruntime``. Providers, in order:

1. ``TensorrtExecutionProvider`` (when this build has it) with ``trt_fp16_enable`` (unless the
   settings ask for fp32), ``trt_engine_cache_enable`` and ``trt_timing_cache_enable`` under
   ``<cache_dir>/ort-tensorrt``, and explicit profile shapes from the session's min/opt/max;
2. ``CUDAExecutionProvider`` on the requested device id.

onnxruntime always keeps the CPU provider for nodes no GPU provider takes; but if neither GPU
provider is available, or the session comes up without one, that is a :class:`FatalError`:
a GPU that was asked for is never silently replaced by the CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.backends.base import ModelKind, SessionOptions

GPU_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider")


def device_id(device: str) -> int:
    """``cuda`` / ``gpu`` -> 0, ``cuda:N`` -> N; anything else is a configuration error."""
    name = device.strip().lower()
    if name in ("cuda", "gpu"):
        return 0
    if name.startswith(("cuda:", "gpu:")) and name.split(":", 1)[1].isdigit():
        return int(name.split(":", 1)[1])
    raise FatalError(f"onnxruntime-gpu needs a CUDA device, not {device!r}", code="bad_config")


def _shape_str(input_name: str, shape: tuple[int, ...]) -> str:
    return f"{input_name}:{'x'.join(str(d) for d in shape)}"


def provider_list(
    available: list[str],
    options: SessionOptions,
    input_name: str = "x",
) -> list[tuple[str, dict[str, Any]]]:
    """The providers and their options for this session, best first (pure; tested on CPU)."""
    dev = device_id(options.device)
    providers: list[tuple[str, dict[str, Any]]] = []
    if "TensorrtExecutionProvider" in available:
        cache = Path(options.cache_dir or Path.home() / ".cache" / "ocrstream") / "ort-tensorrt"
        trt: dict[str, Any] = {
            "device_id": dev,
            "trt_fp16_enable": options.precision in ("fp16", "bf16"),
            "trt_engine_cache_enable": True,
            "trt_engine_cache_path": str(cache),
            "trt_timing_cache_enable": True,
            "trt_timing_cache_path": str(cache),
        }
        if options.min_shape and options.opt_shape and options.max_shape:
            trt["trt_profile_min_shapes"] = _shape_str(input_name, options.min_shape)
            trt["trt_profile_opt_shapes"] = _shape_str(input_name, options.opt_shape)
            trt["trt_profile_max_shapes"] = _shape_str(input_name, options.max_shape)
        providers.append(("TensorrtExecutionProvider", trt))
    if "CUDAExecutionProvider" in available:
        providers.append(("CUDAExecutionProvider", {"device_id": dev}))
    return providers


class OrtGpuSession:
    backend = "onnxruntime-gpu"

    def __init__(self, model_path: Path, kind: ModelKind, options: SessionOptions) -> None:
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise FatalError("onnxruntime is not installed", code="backend_unavailable") from e
        available = list(ort.get_available_providers())
        if not any(p in available for p in GPU_PROVIDERS):
            raise FatalError(
                f"onnxruntime {ort.__version__} has no GPU provider (it offers "
                f"{', '.join(available)}): install onnxruntime-gpu "
                "(pip install 'ocrstream[gpu]', after removing onnxruntime) "
                "or use OCRSTREAM_OCR_BACKEND=torch",
                code="gpu_unavailable",
            )
        self.kind = kind
        self.device = f"cuda:{device_id(options.device)}"
        input_name = _first_input_name(model_path)
        providers = provider_list(available, options, input_name)
        if providers and providers[0][0] == "TensorrtExecutionProvider":
            Path(providers[0][1]["trt_engine_cache_path"]).mkdir(parents=True, exist_ok=True)
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self._session = ort.InferenceSession(
                str(model_path),
                sess_options=so,
                providers=[name for name, _ in providers],
                provider_options=[opts for _, opts in providers],
            )
        except Exception as e:
            raise FatalError(
                f"onnxruntime-gpu cannot load {model_path}: {e}", code="gpu_unavailable"
            ) from e
        active = self._session.get_providers()
        if not active or active[0] not in GPU_PROVIDERS:
            raise FatalError(
                f"onnxruntime-gpu started {model_path.name} on {active}, not on the GPU "
                "(CUDA/cuDNN libraries missing?)",
                code="gpu_unavailable",
            )
        self.providers = tuple(active)
        self._input = self._session.get_inputs()[0].name
        self._output = self._session.get_outputs()[0].name

    def run(self, batch: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        out = self._session.run([self._output], {self._input: np.ascontiguousarray(batch)})
        return np.asarray(out[0], dtype=np.float32)


def _first_input_name(model_path: Path) -> str:
    try:
        import onnx

        model = onnx.load(str(model_path), load_external_data=False)
        return str(model.graph.input[0].name)
    except (ImportError, OSError, IndexError):
        return "x"


class OrtGpuBackend:
    name = "onnxruntime-gpu"

    def load(self, model_path: Path, kind: ModelKind, options: SessionOptions) -> OrtGpuSession:
        return OrtGpuSession(model_path, kind, options)
