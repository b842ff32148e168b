"""OpenVINO on CPU.

Models are read from ONNX with dynamic batch and spatial dims and compiled once per process.
With ``SessionOptions.cache_dir`` set (the engine's ``~/.cache/ocrstream``), the reshaped model
is saved once as OpenVINO IR under ``openvino/ir/`` (named by the ONNX file's SHA-256 and the
shape range) and compiled from that path with OpenVINO's model cache in ``openvino/``: a later
process, a restarted worker or the next ``ocrstream ocr``, then neither reads the ONNX file nor
compiles, it loads the compiled blob (start-up: ~1.1 s less for det + rec on 2 vCPU).

Compiled blobs are kept apart by precision (``openvino/f32/``, ``openvino/bf16/``): OpenVINO
2026.4's CPU plugin names a blob by the model file alone, whatever ``INFERENCE_PRECISION_HINT``
the model is compiled with, so with one folder the first compile of a model decided the blob
every later process got at either precision. A bf16 session given a blob compiled in f32 read
garbage on an Intel Xeon with AMX (v6 small's rec: 671 of 680 time steps changed, CER 0.997 on
receipts, docs/benchmarks.md, session 42), and an f32 session could be given a blob compiled
in bf16. Blobs of the old layout (directly in ``openvino/``) are no longer read; they are left
where they are.

With ``SessionOptions.streams`` = 1 (det) the model is compiled with the LATENCY hint: one
request, all threads on it. With 2 (rec, which the engine runs as many batches) it is compiled
for THROUGHPUT with that many streams and as many requests, and ``run`` may be called from that
many threads at once: on 2 cores two rec batches side by side took ~5-10% less time than the
same lines one batch after the other with both threads each. For det it was no faster (a lone
page then waits on one thread), so det stays on LATENCY.

A model given as OpenVINO IR (``.xml``, already reshaped: the int8 profile's quantised models,
:mod:`ocrstream.processors.ocr.quantize`) is compiled from that path, with the same model cache.

Precision: f32 unless the settings ask for ``bf16`` explicitly (the int8 models' quantised
layers run in INT8 whatever the hint; the rest in f32). OpenVINO would pick bf16 by
itself on CPUs with AVX512-BF16/AMX; that is faster but changes the text now and then, and a
backend choice must not change results behind the user's back.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.backends.base import ModelKind, SessionOptions

_core_lock = threading.Lock()
_core: Any = None


def _shared_core() -> Any:
    global _core
    with _core_lock:
        if _core is None:
            import openvino as ov

            _core = ov.Core()
        return _core


class OpenVinoSession:
    backend = "openvino"

    def __init__(self, model_path: Path, kind: ModelKind, options: SessionOptions) -> None:
        if options.device != "cpu":
            raise FatalError(
                f"the openvino backend runs on CPU here, not {options.device!r}",
                code="backend_unavailable",
            )
        core = _shared_core()
        streams = max(1, min(options.streams, options.threads))
        config: dict[str, Any] = {
            "PERFORMANCE_HINT": "THROUGHPUT" if streams > 1 else "LATENCY",
            "INFERENCE_NUM_THREADS": max(1, options.threads),
            "INFERENCE_PRECISION_HINT": "bf16" if options.precision == "bf16" else "f32",
            # OpenVINO pins its threads to cores by default, each process from the first core
            # on: two single-threaded workers on 2 cores both ran on core 0 (2 x 1 thread read
            # fewer pages/s than 1 x 1). Workers share the machine; the OS places threads.
            "ENABLE_CPU_PINNING": False,
        }
        if streams > 1:
            config["NUM_STREAMS"] = streams
        try:
            shape = dynamic_shape(kind, options)
            if model_path.suffix == ".xml":  # IR made for this shape range (the int8 models)
                if options.cache_dir is not None:
                    config["CACHE_DIR"] = str(blob_folder(options.cache_dir, config))
                self._compiled = core.compile_model(str(model_path), "CPU", config)
            elif options.cache_dir is not None:
                cache = Path(options.cache_dir) / "openvino"
                config["CACHE_DIR"] = str(blob_folder(options.cache_dir, config))
                ir = _ir_copy(core, model_path, shape, cache / "ir", Path(options.cache_dir))
                self._compiled = core.compile_model(str(ir), "CPU", config)
            else:
                model = core.read_model(str(model_path))
                model.reshape({model.inputs[0].any_name: shape})
                self._compiled = core.compile_model(model, "CPU", config)
        except Exception as e:  # OpenVINO raises RuntimeError subclasses freely
            raise FatalError(f"openvino cannot compile {model_path}: {e}") from e
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for _ in range(streams):
            self._requests.put(self._compiled.create_infer_request())
        self.concurrency = streams
        self.device = "cpu"
        self.kind = kind

    def run(self, batch: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Run one batch; up to ``concurrency`` threads may call this at once."""
        request = self._requests.get()
        try:
            request.infer({0: np.ascontiguousarray(batch, dtype=np.float32)})
            return np.array(request.get_output_tensor(0).data, dtype=np.float32)
        finally:
            self._requests.put(request)


def blob_folder(cache_dir: Path, config: dict[str, Any]) -> Path:
    """Where OpenVINO keeps the compiled blobs of models compiled with ``config``: a folder
    per inference precision, since OpenVINO's own cache key leaves the precision out."""
    return Path(cache_dir) / "openvino" / str(config["INFERENCE_PRECISION_HINT"])


def _ir_copy(core: Any, model_path: Path, shape: Any, folder: Path, memo_dir: Path) -> Path:
    """The ONNX model reshaped to ``shape`` as OpenVINO IR in ``folder`` (made once), named
    by the model's digest (kept in ``memo_dir``, :func:`~ocrstream.processors.ocr.models.
    file_digest`, so that a later process does not hash it again)."""
    import hashlib
    import os

    import openvino as ov

    from ocrstream.processors.ocr.models import file_digest

    key = hashlib.sha256(f"{file_digest(model_path, memo_dir)} {shape}".encode()).hexdigest()[:24]
    target = folder / f"{model_path.stem}-{key}.xml"
    if target.is_file() and target.with_suffix(".bin").is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    model = core.read_model(str(model_path))
    model.reshape({model.inputs[0].any_name: shape})
    # A private name first, then renamed: a concurrent process never sees half a model.
    tmp = folder / f".{target.stem}.{os.getpid()}.{threading.get_ident()}.xml"
    ov.save_model(model, str(tmp), compress_to_fp16=False)
    tmp.with_suffix(".bin").replace(target.with_suffix(".bin"))
    tmp.replace(target)
    return target


def dynamic_shape(kind: ModelKind, options: SessionOptions) -> Any:
    """Keep every dim dynamic but for channels (and the rec/cls height when it is fixed)."""
    import openvino as ov

    if options.min_shape and options.max_shape:
        dims = zip(options.min_shape, options.max_shape, strict=True)
        return ov.PartialShape([ov.Dimension(lo, hi) for lo, hi in dims])
    if kind == "det":
        return ov.PartialShape([-1, 3, -1, -1])
    return ov.PartialShape([-1, 3, options.opt_shape[2] if options.opt_shape else -1, -1])


class OpenVinoBackend:
    name = "openvino"

    def load(self, model_path: Path, kind: ModelKind, options: SessionOptions) -> OpenVinoSession:
        return OpenVinoSession(model_path, kind, options)
