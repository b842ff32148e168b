"""Choosing a backend: ``auto``, lazy imports, and GPUs that were asked for but are missing."""

from __future__ import annotations

import importlib.util

import pytest

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.backends import create, resolve, session_options
from ocrstream.processors.ocr.backends.base import SessionOptions
from ocrstream.processors.ocr.models import load_model_set
from ocrstream.settings import OcrSettings

HAS_OPENVINO = importlib.util.find_spec("openvino") is not None
HAS_TRT = importlib.util.find_spec("tensorrt") is not None


def test_auto_on_cpu_is_openvino_when_installed_and_multithreaded():
    expected = "openvino" if HAS_OPENVINO else "onnxruntime"
    assert resolve(OcrSettings(backend="auto", device="cpu", threads=2)) == expected
    assert create(OcrSettings(backend="auto", device="cpu", threads=4)).name == expected


def test_auto_on_cpu_with_one_thread_is_onnxruntime():
    """One engine thread (one process per core): onnxruntime's rec is 2-3x OpenVINO's there."""
    assert resolve(OcrSettings(backend="auto", device="cpu", threads=1)) == "onnxruntime"
    assert create(OcrSettings(backend="auto", device="cpu", threads=1)).name == "onnxruntime"


def test_auto_on_cuda_is_a_gpu_backend_never_the_cpu():
    key = resolve(OcrSettings(backend="auto", device="cuda"))
    assert key == ("tensorrt" if HAS_TRT else "torch")
    assert resolve(OcrSettings(backend="onnxruntime", device="cuda:0")) == "ort_gpu"


@pytest.mark.parametrize(
    ("backend", "device"), [("tensorrt", "cpu"), ("openvino", "cuda"), ("openvino", "gpu")]
)
def test_backend_on_the_wrong_device_is_fatal(backend: str, device: str):
    with pytest.raises(FatalError) as err:
        create(OcrSettings(backend=backend, device=device))
    assert err.value.code == "backend_unavailable"


def test_missing_gpu_is_an_error_not_a_cpu_fallback():
    """Asking for CUDA on a machine without it raises; it never runs on the CPU instead."""
    if not importlib.util.find_spec("torch"):
        with pytest.raises(FatalError):
            create(OcrSettings(backend="torch", device="cuda")).load(
                load_model_set().det_path, "det", SessionOptions(device="cuda")
            )
        return
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    from ocrstream.processors.ocr.engine import OcrEngine

    with pytest.raises(FatalError, match=r"(?i)cuda"):
        OcrEngine(OcrSettings(backend="auto", device="cuda", threads=2))


def test_cpu_sessions_run_fp32_unless_bf16_is_asked():
    assert session_options(OcrSettings(device="cpu", precision="fp16")).precision == "fp32"
    assert session_options(OcrSettings(device="cpu", precision="bf16")).precision == "bf16"
    assert session_options(OcrSettings(device="cuda", precision="fp16")).precision == "fp16"
    assert session_options(OcrSettings(threads=3)).threads == 3
