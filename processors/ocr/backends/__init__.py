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

``auto`` on CPU follows a measurement made on the machine, per stage (:mod:`.choice`): the
first engine to start there times det and rec on each installed CPU backend (OpenVINO,
onnxruntime) and keeps the faster for each stage in the engine cache; later processes reuse
it, ``ocrstream engine calibrate`` measures again. With one CPU backend installed, ``auto`` is
that one. What such measurements found (docs/benchmarks.md, "Engine (CPU)"): on 300-DPI A4
pages, quiet 2-core Xeon (AVX-512, no AMX), pages/s over 10 pages (``ocrstream bench engine
--synthetic-a4 10 --backend B --model M --threads T --processes P``):

==========================  =================  =================
model, threads × processes  OpenVINO           onnxruntime
==========================  =================  =================
v6 small, 2 × 1             **0.35**           0.26
v6 small, 1 × 2             0.15               **0.25**
v6 tiny, 2 × 1              0.82               0.85
v6 tiny, 1 × 2              0.59               **1.34**
==========================  =================  =================

There OpenVINO's det was ~3x faster at any thread count, but its rec on one thread 2-3x slower
than onnxruntime's: which is why the choice is made per stage, and per machine.

OpenVINO's own default on that CPU would be bf16, which was slower there (0.23 s det, 0.82 s
rec for 32 lines at 48×480) and changes the probabilities by ~0.05, so it runs in f32.

Precision ``int8`` (the CPU's INT8 profile, :mod:`ocrstream.processors.ocr.quantize`) runs its
INT8 models on OpenVINO only: ``auto`` then means OpenVINO for them at any thread count, while a
model the profile keeps in fp32 (rec, by default) runs where ``auto`` measured fp32 fastest; any
other backend, or a GPU, is a :class:`FatalError` (``bad_config``).

``auto`` on a CUDA device is TensorRT when ``tensorrt`` imports, else torch. A GPU backend that
was asked for and cannot start raises :class:`FatalError`; nothing falls back to the CPU.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.backends.base import Backend, InferSession, ModelKind, SessionOptions
from ocrstream.settings import OcrBackend, OcrSettings

if TYPE_CHECKING:
    from ocrstream.processors.ocr.backends.choice import SharedChoices
    from ocrstream.processors.ocr.models import ModelSet
    from ocrstream.processors.ocr.rec import RecParams

# What resolve() answers for ``auto`` on the CPU with several CPU backends installed: the
# backend of each stage is then measured (:func:`create_stages`).
AUTO_CPU = "auto"
# Backends that run on the CPU here: their rec model gets the compact CTC head
# (models.ctc_best_model) and, in the engine, REC_STREAMS streams of rec batches side by side.
CPU_BACKENDS = frozenset({"onnxruntime", "openvino"})
# Backends that load rec as the compact-head ONNX graph (models.ctc_best_model): the CPU ones
# and onnxruntime-gpu, whose output would otherwise cross to the host whole (18,710 floats a
# step for PP-OCRv6: ~700 MB a 300-DPI A4 page). torch and TensorRT load the model as it is and
# take the argmax on the device themselves (SessionOptions.ctc_best).
COMPACT_HEAD_BACKENDS = CPU_BACKENDS | {"onnxruntime-gpu"}
# Rec on the CPU runs as this many batches side by side (the engine's rec thread pool).
REC_STREAMS = 2

_MODULES: dict[str, tuple[str, str]] = {
    "onnxruntime": ("onnxruntime_backend", "OnnxRuntimeBackend"),
    "ort_gpu": ("ort_gpu", "OrtGpuBackend"),
    "openvino": ("openvino_backend", "OpenVinoBackend"),
    "tensorrt": ("tensorrt_backend", "TensorRTBackend"),
    "torch": ("torch_backend", "TorchBackend"),
    "paddle": ("paddle_backend", "PaddleBackend"),
}
# the extra each backend's packages come in (OpenVINO and onnxruntime: the core dependencies)
_EXTRAS = {
    "ort_gpu": "gpu",
    "tensorrt": "tensorrt",
    "torch": "torch",
    "paddle": "paddle",
}


PRECISIONS = ("fp32", "fp16", "bf16", "int8")


def resolve(settings: OcrSettings) -> str:
    """The backend module key for the settings, or :data:`AUTO_CPU` when ``auto`` on the CPU
    has more than one backend to choose from (:func:`create_stages` measures them); the int8
    profile is OpenVINO's, never measured."""
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
                "(OCRSTREAM_OCR_BACKEND=openvino or auto, where OpenVINO is installed)",
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
        from ocrstream.processors.ocr.backends.choice import installed

        candidates = installed()
        return AUTO_CPU if len(candidates) > 1 else "onnxruntime"
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


def create(settings: OcrSettings, models: ModelSet | None = None) -> Backend:
    """Import and construct the backend the settings ask for (``auto`` on the CPU: det's, as
    measured for the settings' model set; see :func:`create_stages`)."""
    return create_stages(settings, models)["det"]


def create_stages(
    settings: OcrSettings, models: ModelSet | None = None, shared: SharedChoices | None = None
) -> dict[str, Backend]:
    """The backend for each stage, ``det`` (also cls, orientation and layout) and ``rec``: the
    one the settings name, or for ``auto`` on the CPU the ones measured fastest on this
    machine (:func:`.choice.choose`, kept in the engine cache after the first time, and in
    ``shared`` for other machines)."""
    key = resolve(settings)
    fp32_rec = settings.precision == "int8" and OcrBackend(settings.backend) is OcrBackend.AUTO
    if fp32_rec:
        from ocrstream.processors.ocr.backends.choice import installed
        from ocrstream.processors.ocr.quantize import int8_kinds

        fp32_rec = "rec" not in int8_kinds(settings.model) and len(installed()) > 1
    if key != AUTO_CPU and not fp32_rec:
        backend = create_key(key)
        return {"det": backend, "rec": backend}
    from ocrstream.processors.ocr.backends.choice import backend_of, choose
    from ocrstream.processors.ocr.models import load_model_set

    models = models or load_model_set(settings.model, settings.model_dir, settings.engine_cache_dir)
    # the int8 profile reads rec's choice from the default precision's measurement
    measured = settings.model_copy(update={"precision": "fp16"}) if fp32_rec else settings
    found = choose(measured, models, shared=shared)
    stages = dict(found.stages)
    if fp32_rec:
        # The int8 profile with an fp32 rec: INT8 det on OpenVINO, rec where ``auto``
        # measured fp32 rec fastest (on an AMD EPYC with VNNI, onnxruntime: 1.1-1.4x), never
        # the bf16 candidate (the profile promises fp32 for what it does not quantise).
        fp32 = {k: t for k, t in found.seconds["rec"].items() if backend_of(k)[1] is None}
        fp32 = fp32 or {found.stages["rec"]: 0.0}  # provisional (not measured): fp32 already
        stages = {"det": key, "rec": min(fp32, key=fp32.__getitem__)}
    made = {name: create_key(name) for name in {backend_of(k)[0] for k in stages.values()}}
    out: dict[str, Backend] = {}
    for stage, chosen in stages.items():
        name, precision = backend_of(chosen)
        kind: ModelKind = "det" if stage == "det" else "rec"
        backend = made[name]
        out[stage] = backend if precision is None else StagePrecision(backend, kind, precision)
    return out


class StagePrecision:
    """A backend whose model of one stage (det or rec) runs in ``precision`` (``auto``'s bf16
    candidates, :mod:`.choice`); every other model it loads (cls, orientation, layout, tables)
    runs as the settings say."""

    def __init__(self, backend: Backend, stage: ModelKind, precision: str) -> None:
        self.backend = backend
        self.name = backend.name
        self.stage = stage
        self.precision = precision

    def load(self, model_path: Path, kind: ModelKind, options: SessionOptions) -> InferSession:
        if kind == self.stage:
            options = dataclasses.replace(options, precision=self.precision)
        return self.backend.load(model_path, kind, options)


def stage_precision(backend: Backend, stage: ModelKind) -> str | None:
    """The precision ``backend`` forces on ``stage``'s model (None: the settings')."""
    if isinstance(backend, StagePrecision) and backend.stage == stage:
        return backend.precision
    return None


def create_key(key: str) -> Backend:
    """Import and construct one backend by its module key (see the table above)."""
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


def det_options(settings: OcrSettings) -> SessionOptions:
    """The options the engine loads det with (any page size up to 4096 px a side)."""
    n = settings.det_batch_size
    return session_options(
        settings,
        min_shape=(1, 3, 32, 32),
        opt_shape=(n, 3, 1280, 960),
        max_shape=(n, 3, 4096, 4096),
    )


def rec_options(
    settings: OcrSettings, params: RecParams | None = None, streams: int = REC_STREAMS
) -> SessionOptions:
    """The options the engine loads rec with (on the CPU backends, :data:`REC_STREAMS`)."""
    from ocrstream.processors.ocr.rec import RecParams

    params = params or RecParams(height=settings.rec_height)
    h, n, width = params.height, settings.rec_batch_lines, params.max_width
    return session_options(
        settings,
        min_shape=(1, 3, h, 32),
        opt_shape=(n, 3, h, 640),
        max_shape=(n, 3, h, width),
        streams=streams,
        cuda_graphs=settings.cuda_graphs and not settings.on_cpu,
        ctc_best=True,
    )
