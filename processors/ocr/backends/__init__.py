"""Inference backends, chosen by :class:`~ocrstream.settings.OcrBackend` and imported lazily.

========================  =========================================  ==========================
backend, device           module                                     class
========================  =========================================  ==========================
onnxruntime, cpu          ``onnxruntime_backend``                    ``OnnxRuntimeBackend``
onnxruntime, cuda         ``ort_gpu`` (onnxruntime-gpu: TRT/CUDA EP)  ``OrtGpuBackend``
openvino, cpu             ``openvino_backend``                       ``OpenVinoBackend``
tensorrt, cuda            ``tensorrt_backend``                       ``TensorRTBackend``
torch, cpu or cuda        ``torch_backend``                          ``TorchBackend``
paddle, cpu or cuda       ``paddle_backend``                         ``PaddleBackend``
========================  =========================================  ==========================

Each class takes no constructor arguments and implements :class:`base.Backend`.

``auto`` on CPU is OpenVINO when it is installed and the engine has two threads or more, and
onnxruntime for a single-threaded engine (the fast profile: one process per core). On 300-DPI
A4 pages, quiet 2-core Xeon (AVX-512, no AMX), pages/s over 10 pages (``ocrstream bench
engine --synthetic-a4 10 --backend B --model M --threads T --processes P``):

==========================  =================  =================
model, threads × processes  OpenVINO           onnxruntime
==========================  =================  =================
v6 small, 2 × 1             **0.35**           0.26
v6 small, 1 × 2             0.15               **0.25**
v6 tiny, 2 × 1              0.82               0.85
v6 tiny, 1 × 2              0.59               **1.34**
==========================  =================  =================

OpenVINO's det is ~3x faster at any thread count, but its rec on one thread is 2-3x slower than
onnxruntime's. Earlier measurements, PP-OCRv6 small, 2 threads, fp32 (other jobs were running,
so read the ratios, not the absolute times):

- det, one 1280×896 page: OpenVINO 0.16 s, onnxruntime 0.64 s (~4x in two runs);
- rec, 16 lines at 48×960, best of 5 interleaved: OpenVINO 0.54 s (0.49 s as two streams),
  onnxruntime 0.65 s (0.58 s as two streams); at 48×320: 0.16 s against 0.27 s;
- whole A4 pages at 300 DPI through the engine: OpenVINO 3.2-3.5 s/page, onnxruntime
  4.3-5.7 s/page (RapidOCR 3.10 with the same models and threads: 5.3 s/page).

OpenVINO's own default on this CPU would be bf16, which was slower here (0.23 s det, 0.82 s
rec for 32 lines at 48×480) and changes the probabilities by ~0.05, so it runs in f32. Without
OpenVINO, ``auto`` is onnxruntime.

Precision ``int8`` (the CPU's INT8 profile, :mod:`ocrstream.processors.ocr.quantize`) runs on
OpenVINO only: ``auto`` then means OpenVINO at any thread count, and any other backend, or a
GPU, is a :class:`FatalError` (``bad_config``).

``auto`` on a CUDA device is TensorRT when ``tensorrt`` imports, else torch. A GPU backend that
was asked for and cannot start raises :class:`FatalError`; nothing falls back to the CPU.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.backends.base import Backend, SessionOptions
from ocrstream.settings import OcrBackend, OcrSettings

_MODULES: dict[str, tuple[str, str]] = {
    "onnxruntime": ("onnxruntime_backend", "OnnxRuntimeBackend"),
    "ort_gpu": ("ort_gpu", "OrtGpuBackend"),
    "openvino": ("openvino_backend", "OpenVinoBackend"),
    "tensorrt": ("tensorrt_backend", "TensorRTBackend"),
    "torch": ("torch_backend", "TorchBackend"),
    "paddle": ("paddle_backend", "PaddleBackend"),
}
_EXTRAS = {
    "ort_gpu": "gpu",
    "openvino": "openvino",
    "tensorrt": "tensorrt",
    "torch": "torch",
    "paddle": "paddle",
}


PRECISIONS = ("fp32", "fp16", "bf16", "int8")


def resolve(settings: OcrSettings) -> str:
    """The backend module key for the settings (``auto`` decided here, see the docstring)."""
    key = _resolve(settings)
    if settings.precision not in PRECISIONS:
        raise FatalError(
            f"unknown precision {settings.precision!r}; use one of {', '.join(PRECISIONS)}",
            code="bad_config",
        )
    if settings.precision == "int8":
        if not settings.on_cpu:
            raise FatalError(
                f"precision int8 runs on the CPU only, not on {settings.device!r} "
                "(fp16 or bf16 on a GPU)",
                code="bad_config",
            )
        if key != "openvino":
            raise FatalError(
                f"precision int8 runs on the openvino backend only, not {key} "
                "(OCRSTREAM_OCR_BACKEND=openvino or auto; pip install 'ocrstream[openvino]')",
                code="bad_config",
            )
    return key


def _resolve(settings: OcrSettings) -> str:
    backend = OcrBackend(settings.backend)
    cuda = not settings.on_cpu
    if backend is OcrBackend.AUTO:
        if not cuda and settings.precision == "int8" and importlib.util.find_spec("openvino"):
            return "openvino"
        if cuda:
            return "tensorrt" if importlib.util.find_spec("tensorrt") else "torch"
        if settings.threads >= 2 and importlib.util.find_spec("openvino"):
            return "openvino"
        return "onnxruntime"
    if backend is OcrBackend.ONNXRUNTIME:
        return "ort_gpu" if cuda else "onnxruntime"
    if backend in (OcrBackend.OPENVINO, OcrBackend.TENSORRT) and (
        cuda != (backend is OcrBackend.TENSORRT)
    ):
        raise FatalError(
            f"backend {backend.value} does not run on device {settings.device!r}",
            code="backend_unavailable",
        )
    return backend.value


def create(settings: OcrSettings) -> Backend:
    """Import and construct the backend the settings ask for."""
    key = resolve(settings)
    module_name, class_name = _MODULES[key]
    try:
        module = importlib.import_module(f"{__name__}.{module_name}")
    except ImportError as e:
        extra = _EXTRAS.get(key)
        hint = f": pip install 'ocrstream[{extra}]'" if extra else ""
        raise FatalError(
            f"backend {key} is not available ({e}){hint}", code="backend_unavailable"
        ) from e
    cls: Any = getattr(module, class_name, None)
    if cls is None:
        raise FatalError(f"{module.__name__} has no {class_name}", code="backend_unavailable")
    backend: Backend = cls()
    return backend


def session_options(settings: OcrSettings, **shape: Any) -> SessionOptions:
    """The per-model options from the settings (CPU runs in fp32 unless bf16 is asked for;
    the int8 profile's quantised models run in INT8 with the rest in fp32)."""
    precision = (
        ("bf16" if settings.precision == "bf16" else "fp32")
        if settings.on_cpu
        else settings.precision
    )
    return SessionOptions(
        device=settings.device,
        threads=max(1, settings.threads),
        precision=precision,
        cache_dir=settings.engine_cache_dir,
        **shape,
    )
