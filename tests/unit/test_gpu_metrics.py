"""The OCR worker's GPU gauges: set from NVML (or torch.cuda memory) on a GPU device, absent on
the CPU. NVML and torch.cuda are faked here; tests/integration/test_observability.py checks
the real series through Prometheus where a GPU exists."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from prometheus_client import generate_latest

from ocrstream.streams.gpu_metrics import (
    GpuCollector,
    GpuSample,
    cuda_index,
    nvml_source,
    start_gpu_metrics,
    torch_source,
)
from ocrstream.streams.metrics import Metrics
from tests.polling import wait_until


class FakeNvml:
    def __init__(self, count: int = 2) -> None:
        self.count, self.inits = count, 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index >= self.count:
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return SimpleNamespace(gpu=37, memory=5)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=80 << 30, used=(3 + handle) << 30, free=1)


class FakeCuda:
    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def mem_get_info(self, index: int) -> tuple[int, int]:
        return (70 << 30, 80 << 30)


def value(metrics: Metrics, name: str, device: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"device": device})


def text(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


def test_device_settings_map_to_cuda_ordinals() -> None:
    assert cuda_index("cuda") == 0
    assert cuda_index("cuda:1") == 1
    assert cuda_index("CUDA:2") == 2
    assert cuda_index("cpu") is None
    assert cuda_index("cuda:x") is None


def test_nvml_sets_utilisation_and_memory() -> None:
    source = nvml_source(1, FakeNvml())
    assert source is not None
    metrics = Metrics()
    sample = GpuCollector(source, metrics).collect()
    assert sample == GpuSample("cuda:1", 0.37, 4 << 30)
    assert value(metrics, "ocrstream_gpu_utilization_ratio", "cuda:1") == 0.37
    assert value(metrics, "ocrstream_gpu_memory_used_bytes", "cuda:1") == 4 << 30


def test_a_gpu_nvml_cannot_see_gives_no_source() -> None:
    assert nvml_source(5, FakeNvml(count=2)) is None


def test_torch_gives_memory_but_no_utilisation() -> None:
    source = torch_source(0, FakeCuda())
    assert source is not None
    metrics = Metrics()
    GpuCollector(source, metrics).collect()
    assert value(metrics, "ocrstream_gpu_memory_used_bytes", "cuda:0") == 10 << 30
    assert value(metrics, "ocrstream_gpu_utilization_ratio", "cuda:0") is None


def test_cpu_worker_exports_no_gpu_series() -> None:
    metrics = Metrics()
    assert start_gpu_metrics("cpu", metrics) is None
    assert "ocrstream_gpu_utilization_ratio{" not in text(metrics)
    assert "ocrstream_gpu_memory_used_bytes{" not in text(metrics)


def test_a_failing_source_is_survived_and_stop_removes_the_series() -> None:
    calls = {"n": 0}

    def flaky() -> GpuSample:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return GpuSample("cuda:0", 0.5, 123)

    metrics = Metrics()
    collector = GpuCollector(flaky, metrics, interval_s=0.01).start()
    try:
        wait_until(lambda: calls["n"] >= 4, 5, "samples after the failure", interval_s=0.01)
        assert 'ocrstream_gpu_utilization_ratio{device="cuda:0"} 0.5' in text(metrics)
    finally:
        collector.stop()
    assert "ocrstream_gpu_utilization_ratio{" not in text(metrics)
