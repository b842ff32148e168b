"""GPU utilisation and memory of an OCR worker's device, as Prometheus gauges.

Where the worker's engine runs on an NVIDIA GPU (``OCRSTREAM_OCR_DEVICE=cuda`` or ``cuda:N``),
a daemon thread sets ``ocrstream_gpu_utilization_ratio{device}`` (0..1) and
``ocrstream_gpu_memory_used_bytes{device}`` every few seconds. Both come from NVML
(nvidia-ml-py, imported as ``pynvml``) when it is importable; without it, torch.cuda gives the
memory in use on the device (``mem_get_info``) and the utilisation is left out. On a CPU
worker, or where neither reaches a GPU, nothing is exported at all: a gauge of 0 would read as
an idle GPU that is not there.

The device index is the CUDA ordinal of the setting (``cuda`` is 0), which is also NVML's
index when ``CUDA_VISIBLE_DEVICES`` is not set.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ocrstream.streams.metrics import Metrics

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 5.0


@dataclass(frozen=True, slots=True)
class GpuSample:
    device: str  # the label: "cuda:0"
    utilization: float | None  # 0..1, None when the source cannot tell
    memory_used_bytes: int | None


Source = Callable[[], GpuSample]


def cuda_index(device: str) -> int | None:
    """The CUDA ordinal of a device setting (``cuda`` → 0, ``cuda:1`` → 1); None for others."""
    name, _, index = device.strip().lower().partition(":")
    if name not in ("cuda", "gpu"):
        return None
    try:
        return int(index) if index else 0
    except ValueError:
        return None


def nvml_source(index: int, nvml: Any | None = None) -> Source | None:
    """Sample device ``index`` through NVML; None when NVML is missing or finds no such GPU."""
    if nvml is None:
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            return None
        nvml = pynvml
    try:
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as e:  # noqa: BLE001 - pynvml.NVMLError and driver-less machines
        log.debug("NVML cannot see GPU %d: %s", index, e)
        return None
    label = f"cuda:{index}"

    def sample() -> GpuSample:
        util = nvml.nvmlDeviceGetUtilizationRates(handle)
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        return GpuSample(label, float(util.gpu) / 100.0, int(mem.used))

    return sample


def torch_source(index: int, cuda: Any | None = None) -> Source | None:
    """Sample the memory in use on device ``index`` through torch.cuda; None without CUDA."""
    if cuda is None:
        try:
            import torch
        except ImportError:
            return None
        cuda = torch.cuda
    try:
        if not cuda.is_available() or index >= cuda.device_count():
            return None
    except Exception as e:  # noqa: BLE001 - a broken driver must not stop the worker
        log.debug("torch.cuda cannot see GPU %d: %s", index, e)
        return None
    label = f"cuda:{index}"

    def sample() -> GpuSample:
        free, total = cuda.mem_get_info(index)
        return GpuSample(label, None, int(total - free))

    return sample


def find_source(device: str) -> Source | None:
    """The best way to watch ``device``: NVML, else torch.cuda, else None (CPU, no GPU)."""
    index = cuda_index(device)
    if index is None:
        return None
    return nvml_source(index) or torch_source(index)


class GpuCollector:
    """Sets the GPU gauges from ``source`` now and every ``interval_s`` in a daemon thread."""

    def __init__(
        self, source: Source, metrics: Metrics, interval_s: float = DEFAULT_INTERVAL_S
    ) -> None:
        self.source, self.metrics, self.interval_s = source, metrics, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        self._labels: set[str] = set()

    def collect(self) -> GpuSample | None:
        try:
            s = self.source()
        except Exception as e:  # noqa: BLE001 - metrics must never take the worker down
            if not self._failing:
                log.warning("GPU metrics unavailable: %s", e)
            self._failing = True
            return None
        self._failing = False
        if s.utilization is not None:
            self.metrics.gpu_utilization.labels(s.device).set(s.utilization)
        if s.memory_used_bytes is not None:
            self.metrics.gpu_memory_used.labels(s.device).set(s.memory_used_bytes)
        self._labels.add(s.device)
        return s

    def start(self) -> GpuCollector:
        self.collect()
        self._thread = threading.Thread(target=self._run, name="gpu-metrics", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.collect()

    def stop(self) -> None:
        """Stop sampling and drop the series: a stopped worker no longer reports its GPU."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 1)
        for label in self._labels:
            for gauge in (self.metrics.gpu_utilization, self.metrics.gpu_memory_used):
                with contextlib.suppress(KeyError):
                    gauge.remove(label)
        self._labels.clear()


def start_gpu_metrics(
    device: str, metrics: Metrics, interval_s: float = DEFAULT_INTERVAL_S
) -> GpuCollector | None:
    """Start collecting for ``device`` where it is a GPU we can see; None (no-op) otherwise."""
    source = find_source(device)
    if source is None:
        if cuda_index(device) is not None:
            log.warning("device %s: no NVML or torch.cuda to read GPU metrics from", device)
        return None
    log.info("GPU metrics for %s every %.0fs", device, interval_s)
    return GpuCollector(source, metrics, interval_s).start()
