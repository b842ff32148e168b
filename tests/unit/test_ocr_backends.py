"""Choosing a backend: ``auto``, lazy imports, and GPUs that were asked for but are missing."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from pathlib import Path

import pytest

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.backends import create, resolve, session_options
from ocrstream.processors.ocr.backends.base import SessionOptions
from ocrstream.processors.ocr.models import ctc_best_model, load_model_set
from ocrstream.settings import OcrSettings

HAS_OPENVINO = importlib.util.find_spec("openvino") is not None
HAS_TRT = importlib.util.find_spec("tensorrt") is not None


def test_auto_on_cpu_chooses_by_measurement_when_it_has_a_choice(tmp_path):
    """With OpenVINO and onnxruntime installed ``auto`` is measured per stage
    (tests/unit/test_auto_backend.py); with onnxruntime alone it is onnxruntime."""
    settings = OcrSettings(backend="auto", device="cpu", threads=2, engine_cache_dir=tmp_path)
    assert resolve(settings) == ("auto" if HAS_OPENVINO else "onnxruntime")
    assert create(settings).name in {"openvino", "onnxruntime"}


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


_SECOND_PROCESS = """
import sys
from pathlib import Path
from ocrstream.processors.ocr.backends.base import SessionOptions
from ocrstream.processors.ocr.backends.openvino_backend import OpenVinoBackend
options = SessionOptions(threads=1, cache_dir=Path(sys.argv[2]))
session = OpenVinoBackend().load(Path(sys.argv[1]), "det", options)
print(session.concurrency)
"""


@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed")
def test_openvino_keeps_the_compiled_model_for_the_next_process(tmp_path):
    """The first load leaves the reshaped IR and the compiled blob in the cache; a second
    process finds both and adds nothing, and reads the same as a session without the cache."""
    import subprocess
    import sys

    import numpy as np

    from ocrstream.processors.ocr.backends.openvino_backend import OpenVinoBackend

    det = load_model_set("ppocrv6-tiny").det_path
    cmd = [sys.executable, "-c", _SECOND_PROCESS, str(det), str(tmp_path)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert any(p.suffix == ".xml" for p in made)
    assert any(p.suffix == ".blob" for p in made)  # OpenVINO's compiled model
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()) == made
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 320, 256)).astype(np.float32)
    cached = OpenVinoBackend().load(det, "det", SessionOptions(threads=1, cache_dir=tmp_path))
    plain = OpenVinoBackend().load(det, "det", SessionOptions(threads=1))
    np.testing.assert_allclose(cached.run(x), plain.run(x), atol=1e-5)


def _runs_bf16() -> bool:
    import openvino as ov

    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed")
@pytest.mark.parametrize("model", ["ppocrv6-tiny", "ppocrv6-small"])
def test_a_model_compiled_in_f32_then_in_bf16_in_one_cache_runs_in_each(tmp_path, model):
    """OpenVINO names a compiled blob by the model file alone: with one cache folder, a
    session in bf16 loaded the blob an f32 session had compiled (on an Intel Xeon with AMX,
    v6 small's rec then read garbage). Each precision must read as it does without a cache,
    in whichever order they were compiled."""
    import numpy as np

    from ocrstream.processors.ocr.backends.openvino_backend import OpenVinoBackend

    if not _runs_bf16():
        pytest.skip("this CPU has no bf16 for OpenVINO to run (no AVX512_BF16 or AMX)")
    rec = ctc_best_model(load_model_set(model).rec_path, tmp_path)
    assert rec is not None
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 48, 320)).astype(np.float32)

    def read(precision: str, cache: Path | None) -> np.ndarray:
        options = SessionOptions(threads=1, precision=precision, cache_dir=cache)
        return OpenVinoBackend().load(rec[0], "rec", options).run(x)

    plain = {p: read(p, None) for p in ("fp32", "bf16")}
    assert not np.array_equal(plain["fp32"], plain["bf16"]), "bf16 read as f32 does"
    for order in (("fp32", "bf16"), ("bf16", "fp32")):
        cache = tmp_path / "-".join(order)
        for precision in order:
            np.testing.assert_array_equal(read(precision, cache), plain[precision])


@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: nothing to pin to")
def test_openvino_threads_are_not_pinned_so_worker_processes_spread_over_the_cores():
    """Each single-threaded worker process pinned its OpenVINO thread to the first core while
    it inferred, so two workers on two cores shared one: no thread of the process may be
    narrowed to fewer CPUs than the process may use, looked at while det runs."""
    import threading

    import numpy as np

    from ocrstream.processors.ocr.backends.openvino_backend import OpenVinoBackend

    allowed = os.sched_getaffinity(0)
    det = load_model_set("ppocrv6-tiny").det_path
    session = OpenVinoBackend().load(det, "det", SessionOptions(threads=1))
    page = np.zeros((1, 3, 1280, 960), np.float32)
    session.run(page)
    done = threading.Event()

    def infer() -> None:
        for _ in range(5):
            session.run(page)
        done.set()

    runner = threading.Thread(target=infer)
    runner.start()
    narrowed: dict[int, list[int]] = {}
    while not done.is_set():
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                cpus = os.sched_getaffinity(int(task))
                if cpus != allowed:
                    narrowed[int(task)] = sorted(cpus)
        done.wait(0.005)
    runner.join()
    assert not narrowed, f"threads pinned to {narrowed}, the process may use {sorted(allowed)}"
