"""PyTorch: the PP-OCR ONNX graphs converted with onnx2torch, run on CUDA in fp16/bf16.

Conversion. onnx2torch turns each ONNX graph into a ``torch.fx.GraphModule``. Two things in
the PaddleOCR exports stop it, and :func:`prepare_onnx` rewrites them first, in memory:

- PP-OCRv6 det and rec use ``auto_pad="SAME_UPPER"`` on two 2x2 stride-1 Convs and a 2x2
  stride-1 MaxPool (the stem); onnx2torch raises ``NotImplementedError: "SAME_UPPER" auto_pad
  is not implemented``. With stride 1 the padding does not depend on the input size, so it is
  written out as explicit ``pads`` (0 before, kernel-1 after for SAME_UPPER).
- The old PP-OCR v2 direction classifier keeps its weights in ``Constant`` nodes, not
  initializers (onnx2torch: ``KeyError: 'conv1_weights'``); those are moved to initializers.

Running. On CUDA the module runs in the settings' precision (fp16 or bf16), channels_last
for det, under ``torch.inference_mode`` on a CUDA stream of its own; outputs come back as
float32. ``torch.compile`` is used when ``SessionOptions.compile`` is set (the first batch of
each new shape then compiles, so it pays only for long-running workers). With
``SessionOptions.cuda_graphs`` (rec, ``OCRSTREAM_OCR_CUDA_GRAPHS``) each input shape met twice
is replayed as one CUDA graph (:class:`_CudaGraphs`). On CPU it always runs in fp32: that is
the parity configuration the tests compare with onnxruntime.

Two ways in:

- :meth:`TorchSession.run` is the :class:`InferSession` contract: NCHW float32 numpy in, the
  first output as float32 numpy out (copied to the host).
- :meth:`TorchSession.run_torch` keeps everything on the device: a tensor in (any float
  dtype, on any device: it is moved to the session's device and dtype), a float32 tensor on
  the session's device out. The caller's current stream waits for the session's stream, so
  the result may be used at once. :mod:`ocrstream.bench.device_pipeline` produces such
  tensors (nvjpeg decode, resize, normalise, perspective crops) so pages stay on the GPU from
  decode to CTC.

A CUDA device that was asked for and is missing is a :class:`FatalError`, never a fallback.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.backends.base import ModelKind, SessionOptions

if TYPE_CHECKING:
    import onnx
    import torch

log = logging.getLogger(__name__)

_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
_convert_lock = threading.Lock()


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise FatalError(
            "the torch backend needs PyTorch: pip install 'ocrstream[torch]'",
            code="backend_unavailable",
        ) from e
    return torch


def resolve_device(device: str) -> str:
    """Map the settings' device ("cpu", "cuda", "cuda:1", "gpu") to a torch device string.

    Raises :class:`FatalError` when CUDA is asked for and torch cannot see it.
    """
    torch = _import_torch()
    name = device.strip().lower()
    if name == "gpu":
        name = "cuda"
    if name == "cpu":
        return "cpu"
    if not name.startswith("cuda"):
        raise FatalError(
            f"the torch backend runs on cpu or cuda, not {device!r}", code="backend_unavailable"
        )
    if not torch.cuda.is_available():
        raise FatalError(
            f"device {device!r} was asked for but torch sees no CUDA GPU "
            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})",
            code="gpu_unavailable",
        )
    index = int(name.split(":", 1)[1]) if ":" in name else 0
    if index >= torch.cuda.device_count():
        raise FatalError(
            f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s)",
            code="gpu_unavailable",
        )
    return f"cuda:{index}"


def torch_dtype(precision: str, device: str) -> Any:
    """The compute dtype: fp32 on CPU always, else the settings' precision."""
    torch = _import_torch()
    if device == "cpu":
        return torch.float32
    name = _DTYPES.get(precision.lower())
    if name is None:
        raise FatalError(
            f"unknown precision {precision!r}; use fp32, fp16 or bf16", code="bad_config"
        )
    return getattr(torch, name)


def prepare_onnx(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rewrite what onnx2torch cannot convert (see the module docstring); returns a copy."""
    import onnx
    from onnx import helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    kept = []
    for node in graph.node:
        if node.op_type == "Constant" and len(node.output) == 1:
            value = next((a for a in node.attribute if a.name == "value"), None)
            if value is not None and value.type == onnx.AttributeProto.TENSOR:
                tensor = onnx.TensorProto()
                tensor.CopyFrom(value.t)
                tensor.name = node.output[0]
                graph.initializer.append(tensor)
                continue
        kept.append(node)
        _explicit_same_padding(node, helper)
    del graph.node[:]
    graph.node.extend(_without_identities(kept, {o.name for o in graph.output}))
    return out


# onnx2torch modules that read these inputs' values in Python (as ints and lists), all but
# the first (the data): slice bounds, target shapes, resize scales and sizes, axes.
_HOST_ARGS = frozenset({
    "OnnxResize", "OnnxSlice", "OnnxReshape", "OnnxExpand", "OnnxTile", "OnnxConstantOfShape",
    "OnnxRange", "OnnxPadDynamic", "OnnxUnsqueezeDynamicAxes", "OnnxSqueezeDynamicAxes",
    "OnnxSplit", "OnnxSplit13",
})  # fmt: skip


def shapes_on_host(module: torch.nn.Module) -> int:
    """Keep a converted module's shape arithmetic on the host; returns how many constants
    moved there. onnx2torch reads slice bounds, reshape targets and resize scales in Python,
    and its Shape makes a tensor on the input's device: on a GPU each of those is a copy to
    or from the device that waits for every kernel queued before it. PP-OCRv6 small's rec
    has ~40 such reads a run. Here the constants of :func:`host_constants` move to the host
    and Shape answers there (:func:`shape_ops_on_host`); the data stays on the device.
    ``tests/unit/test_backends_gpu.py`` runs det and rec so with their data on PyTorch's
    ``meta`` device, which holds no values: any read of device data would fail there."""
    names = host_constants(module)
    for target in names:
        owner, attr = _owner(module, target)
        owner._buffers[attr] = owner._buffers[attr].cpu()
    shape_ops_on_host(module)
    return len(names)


def host_constants(module: torch.nn.Module) -> list[str]:
    """The module's constants (buffers) that belong on the host: the integer ones (shapes,
    indices, axes) and those read only as the non-data arguments of :data:`_HOST_ARGS`."""
    names = []
    for node in module.graph.nodes:
        if node.op != "get_attr":
            continue
        owner, attr = _owner(module, str(node.target))
        value = owner._buffers.get(attr)
        if value is None:
            continue
        as_args = all(
            use.op == "call_module"
            and type(module.get_submodule(use.target)).__name__ in _HOST_ARGS
            and node not in use.args[:1]
            for use in node.users
        )
        if as_args or not value.is_floating_point():
            names.append(str(node.target))
    return names


def shape_ops_on_host(module: torch.nn.Module) -> None:
    """Each OnnxShape of the module answers with a host tensor."""
    import types

    for sub in module.modules():
        if type(sub).__name__ == "OnnxShape":
            sub.forward = types.MethodType(_host_shape, sub)


def _owner(module: torch.nn.Module, target: str) -> tuple[torch.nn.Module, str]:
    owner_name, _, attr = target.rpartition(".")
    return (module.get_submodule(owner_name) if owner_name else module), attr


def _host_shape(self: Any, input_tensor: torch.Tensor) -> torch.Tensor:
    """OnnxShape's answer as a host tensor: the sizes are known without touching the data."""
    torch = _import_torch()
    return torch.tensor(input_tensor.shape[self._start : self._end], dtype=torch.int64)


def _without_identities(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` with each Identity dropped and its readers reading its input. onnx2torch makes
    every Identity a copy at each run: ~140 of them in PP-OCRv6 small's rec and det, mostly
    of weights, each a kernel launch on a GPU. An Identity that gives a graph output stays."""
    alias: dict[str, str] = {}
    kept = []
    for node in nodes:
        if node.op_type == "Identity" and len(node.input) == 1 and node.output[0] not in outputs:
            alias[node.output[0]] = alias.get(node.input[0], node.input[0])
            continue
        kept.append(node)
    for node in kept:
        for i, name in enumerate(node.input):
            if name in alias:
                node.input[i] = alias[name]
    return kept


def _explicit_same_padding(node: onnx.NodeProto, helper: Any) -> None:
    attrs = {a.name: a for a in node.attribute}
    auto_pad = attrs.get("auto_pad")
    if auto_pad is None:
        return
    mode = helper.get_attribute_value(auto_pad)
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode in ("NOTSET", "VALID"):
        return
    kernel = list(helper.get_attribute_value(attrs["kernel_shape"]))
    strides = list(helper.get_attribute_value(attrs["strides"])) if "strides" in attrs else []
    dilations = list(helper.get_attribute_value(attrs["dilations"])) if "dilations" in attrs else []
    if any(s != 1 for s in strides):
        raise FatalError(
            f"{node.op_type} node {node.name!r} uses auto_pad={mode} with strides {strides}: "
            "its padding depends on the input size, which onnx2torch cannot express",
            code="model_unsupported",
        )
    totals = [(k - 1) * (dilations[i] if dilations else 1) for i, k in enumerate(kernel)]
    small = [t // 2 for t in totals]
    large = [t - t // 2 for t in totals]
    begin, end = (small, large) if mode == "SAME_UPPER" else (large, small)
    node.attribute.remove(auto_pad)
    if "pads" in attrs:
        node.attribute.remove(attrs["pads"])
    node.attribute.append(helper.make_attribute("pads", begin + end))


def convert(model_path: Path) -> torch.nn.Module:
    """Load an ONNX file and convert it to a torch module (fp32, CPU, eval mode)."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        from onnx2torch import convert as onnx2torch_convert
    except ImportError as e:
        raise FatalError(
            "the torch backend needs onnx2torch: pip install 'ocrstream[torch]'",
            code="backend_unavailable",
        ) from e
    try:
        model = prepare_onnx(onnx.load(str(model_path)))
    except (OSError, DecodeError) as e:
        raise FatalError(f"cannot read ONNX model {model_path}: {e}", code="model_invalid") from e
    with _convert_lock:  # onnx2torch keeps module-level registries; convert one at a time
        try:
            module = onnx2torch_convert(model)
        except (NotImplementedError, KeyError, ValueError, RuntimeError) as e:
            raise FatalError(
                f"onnx2torch cannot convert {model_path.name}: {type(e).__name__}: {e}",
                code="model_unsupported",
            ) from e
    return module.eval()


def ctc_best(probs: torch.Tensor) -> torch.Tensor:
    """Per time step of a rec output (N x T x C, on its device) the best class as a float,
    its probability and the last class's (the space): N x T x 3 float32 on the same device,
    the layout of the CPU's compact rec head (models.ctc_best_model) that rec.ctc_greedy
    reads. The index is taken before any cast, so it is exact whatever the model's dtype
    (fp16 holds integers exactly only up to 2,048)."""
    torch = _import_torch()
    values, index = probs.max(dim=-1)
    return torch.stack([index.float(), values.float(), probs[..., -1].float()], dim=-1)


def full_output_classes(run_torch: Any, shape: tuple[int, ...]) -> int:
    """The classes of a rec session that compacts its ``run`` output (``ctc_best``), which
    that output no longer shows (rec.model_classes): the last dimension of ``run_torch``'s
    full output on a blank batch of ``shape``."""
    torch = _import_torch()
    return int(run_torch(torch.zeros(shape)).shape[-1])


class TorchSession:
    """One converted model on one device; see the module docstring."""

    backend = "torch"

    def __init__(self, model_path: Path, kind: ModelKind, options: SessionOptions) -> None:
        torch = _import_torch()
        self.kind = kind
        self.device = resolve_device(options.device)
        self.dtype = torch_dtype(options.precision, self.device)
        self._torch = torch
        if self.device == "cpu":
            torch.set_num_threads(max(1, options.threads))
        self._channels_last = self.device != "cpu" and kind == "det"
        module = self._converted(model_path)
        if self.device != "cpu":
            # Shapes are bucketed by the engine, so cuDNN's autotuner meets few distinct
            # shapes and pays for itself after the first batch of each.
            torch.backends.cudnn.benchmark = True
            module = self._with_shapes_on_host(module, model_path, options)
        if options.compile:
            module = torch.compile(module, dynamic=True)
        self._module = module
        self._ctc_best = options.ctc_best and kind == "rec"
        self._stream = torch.cuda.Stream(device=self.device) if self.device != "cpu" else None
        self._graphs: _CudaGraphs | None = None
        if options.cuda_graphs and self.device != "cpu" and not options.compile:
            self._graphs = _CudaGraphs(torch, self._call, kind)
        self.classes = 0  # where run compacts its output, the model's (rec.model_classes)
        if self._ctc_best:
            height = options.min_shape[2] if options.min_shape else 48
            self.classes = full_output_classes(self.run_torch, (1, 3, height, 64))
        log.info(
            "torch %s session on %s (%s)%s",
            kind,
            self.device,
            str(self.dtype).removeprefix("torch."),
            " compiled" if options.compile else "",
        )

    def _converted(self, model_path: Path) -> torch.nn.Module:
        """The model converted, on this session's device and dtype (channels_last for det)."""
        module = convert(model_path).to(device=self.device, dtype=self.dtype)
        if self._channels_last:
            module = module.to(memory_format=self._torch.channels_last)
        return module

    def _with_shapes_on_host(
        self, module: torch.nn.Module, model_path: Path, options: SessionOptions
    ) -> torch.nn.Module:
        """``module`` with its shape arithmetic on the host (:func:`shapes_on_host`), checked
        by one run on a small input; if that run fails (a model whose integer constants
        also meet device data), the module as converted, all on the device."""
        torch = self._torch
        moved = shapes_on_host(module)
        if not moved:
            return module
        n, c, h, w = options.min_shape or options.opt_shape or (1, 3, 64, 64)
        probe = torch.zeros((n, c, max(h, 32), max(w, 32)), device=self.device, dtype=self.dtype)
        try:
            with torch.inference_mode():
                module(probe)
        except RuntimeError as e:
            log.warning("%s: shape constants stay on the device: %s", model_path.name, e)
            return self._converted(model_path)
        log.debug("%s: %d shape constants and Shape ops on the host", model_path.name, moved)
        return module

    def run(self, batch: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The InferSession contract: numpy NCHW float32 in, first output float32 out (rec
        with ``ctc_best``: its :func:`ctc_best`, N x T x 3)."""
        torch = self._torch
        x = torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32))
        if self.device != "cpu":
            x = x.pin_memory()
        y = self.run_torch(x)
        if self._ctc_best:
            with torch.inference_mode():
                y = ctc_best(y)
        return np.asarray(y.cpu().numpy(), dtype=np.float32)

    def run_torch(self, batch: torch.Tensor) -> torch.Tensor:
        """Device path: a tensor in, the first output as float32 on ``self.device`` out."""
        torch = self._torch
        caller = torch.cuda.current_stream(self.device) if self._stream is not None else None
        with torch.inference_mode():
            if self._stream is None:
                return self._forward(batch)
            assert caller is not None
            self._stream.wait_stream(caller)
            with torch.cuda.stream(self._stream):
                if batch.device.type == "cuda":
                    batch.record_stream(self._stream)
                y = self._forward(batch)
            caller.wait_stream(self._stream)
            y.record_stream(caller)
            return y

    def _forward(self, batch: torch.Tensor) -> torch.Tensor:
        torch = self._torch
        memory_format = torch.channels_last if self._channels_last else torch.contiguous_format
        x = batch.to(device=self.device, dtype=self.dtype, non_blocking=True)
        x = x.contiguous(memory_format=memory_format)
        if self._graphs is not None:
            return self._graphs.run(x)
        return self._call(x)

    def _call(self, x: torch.Tensor) -> torch.Tensor:
        out = self._module(x)
        if isinstance(out, (list, tuple)):
            out = out[0]
        return out.float()


# Shapes one session keeps as CUDA graphs: each holds its own memory pool (graphs replayed in
# any order must not share one), sized by that shape's activations.
MAX_GRAPHS = 32


class _CudaGraphs:
    """A session's forward pass captured as one CUDA graph per input shape (torch.cuda.
    CUDAGraph): a replay launches the whole graph at once, where an eager run of the
    onnx2torch module makes ~500 Python calls and kernel launches. A shape is captured the
    second time it is met (a shape met once costs no graph memory), up to MAX_GRAPHS; other
    shapes run eagerly. A capture that fails (an operation that syncs with the host) turns
    graphs off for the session, with a warning, and the run goes on eagerly."""

    def __init__(self, torch: Any, call: Any, kind: str) -> None:
        self._torch, self._call, self._kind = torch, call, kind
        self._seen: set[tuple[Any, ...]] = set()
        self._graphs: dict[tuple[Any, ...], tuple[Any, Any, Any]] = {}
        self.enabled = True

    def run(self, x: torch.Tensor) -> torch.Tensor:
        key = (tuple(x.shape), x.dtype, x.stride())
        entry = self._graphs.get(key)
        if entry is not None:
            graph, static_in, static_out = entry
            static_in.copy_(x)
            graph.replay()
            return static_out.clone()
        if not self.enabled or key not in self._seen or len(self._graphs) >= MAX_GRAPHS:
            self._seen.add(key)
            return self._call(x)
        return self._capture(key, x)

    def _capture(self, key: tuple[Any, ...], x: torch.Tensor) -> torch.Tensor:
        torch = self._torch
        static_in = x.clone()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                static_out = self._call(static_in)
        except RuntimeError as e:  # e.g. "operation not permitted when stream is capturing"
            log.warning("CUDA graphs off for this %s session: capture failed: %s", self._kind, e)
            self.enabled = False
            return self._call(x)
        self._graphs[key] = (graph, static_in, static_out)
        graph.replay()  # the capture recorded the work without doing it
        return static_out.clone()


class TorchBackend:
    name = "torch"

    def load(self, model_path: Path, kind: ModelKind, options: SessionOptions) -> TorchSession:
        return TorchSession(model_path, kind, options)
