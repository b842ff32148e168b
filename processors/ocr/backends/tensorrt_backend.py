"""TensorRT: FP16 engines built from the ONNX models, cached on disk, run on CUDA streams.

Build. Each model gets one optimisation profile with explicit shape ranges
(:func:`default_profile`, or ``SessionOptions.min/opt/max_shape`` when the engine passes them):

- det: N 1..det_batch, H and W 32..det_limit_side in multiples of 32 (opt: a portrait page);
- rec: N 1..rec_batch, H = rec height (48), W 32..max width;
- cls / orientation: their fixed input size, N 1..rec_batch.

Precision: TensorRT 10 builds FP16 with ``BuilderFlag.FP16`` from the fp32 graph. TensorRT 11
removed that flag (strong typing only), so there the graph itself is converted to fp16 first
(:func:`onnx_to_fp16`: weights and activations in fp16, the LayerNorm/softmax reductions
``ReduceMean``, ``Pow``, ``Sqrt``, ``Softmax`` kept in fp32, Resize scales kept fp32, graph
inputs and outputs kept fp32 with Casts) and built strongly typed.

Cache. The serialized engine is written to ``<cache_dir>/tensorrt/<model>-<kind>-<key>.engine``
where ``key`` = sha256 of (model file sha256, GPU name, compute capability, TensorRT version,
profile shapes, precision, this module's format version) — :func:`cache_key`. Writes are atomic
(temp file + rename), so concurrent workers that both build end with one good file. Each
process deserializes its own engine and execution context: engines are never shared across
processes.

Run. Buffers are torch CUDA tensors (no pycuda / cuda-python: the ``tensorrt`` extra installs
torch for them); ``execute_async_v3`` on a stream of the session's own; the caller's stream
waits on it. :meth:`TensorRTSession.run` is the numpy :class:`InferSession` path,
:meth:`TensorRTSession.run_torch` the device path (see the torch backend). Batches larger than
the profile's N are split.

Status: the pure parts (profiles, cache keys, the fp16 graph rewrite) are tested on CPU; the
build and run need TensorRT and an NVIDIA GPU and were not run in the session that wrote this
(no GPU, no TensorRT) — see docs/benchmarks.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.backends.base import ModelKind, SessionOptions
from ocrstream.processors.ocr.backends.torch_backend import ctc_best, full_output_classes

if TYPE_CHECKING:
    import onnx
    import torch

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
Shape4 = tuple[int, int, int, int]
FP32_OPS = frozenset({"ReduceMean", "Pow", "Sqrt", "Softmax"})
_FIXED_INPUT = {"cls": (48, 192)}


def _round_up(value: int, multiple: int) -> int:
    return max(multiple, -(-value // multiple) * multiple)


def default_profile(
    kind: ModelKind,
    *,
    det_batch: int = 4,
    det_limit_side: int = 1280,
    rec_batch: int = 64,
    rec_height: int = 48,
    rec_max_width: int = 2048,
    fixed_hw: tuple[int, int] | None = None,
) -> tuple[Shape4, Shape4, Shape4]:
    """(min, opt, max) NCHW shapes of the one optimisation profile for ``kind``."""
    if kind == "det":
        side = _round_up(det_limit_side, 32)
        portrait_w = _round_up(int(side / 2**0.5), 32)
        return (1, 3, 32, 32), (det_batch, 3, side, portrait_w), (det_batch, 3, side, side)
    if kind == "rec":
        width = _round_up(rec_max_width, 32)
        return (
            (1, 3, rec_height, 32),
            (rec_batch, 3, rec_height, min(320, width)),
            (rec_batch, 3, rec_height, width),
        )
    h, w = fixed_hw or _FIXED_INPUT["cls"]
    return (1, 3, h, w), (rec_batch, 3, h, w), (rec_batch, 3, h, w)


def profile_for(
    kind: ModelKind, options: SessionOptions, model_input: Any = None
) -> tuple[Shape4, Shape4, Shape4]:
    """The session's profile: the engine's explicit shapes, else :func:`default_profile`."""
    if options.min_shape and options.opt_shape and options.max_shape:
        return options.min_shape, options.opt_shape, options.max_shape
    fixed = None
    if model_input is not None and kind == "cls":
        dims = list(model_input)
        if len(dims) == 4 and all(isinstance(d, int) and d > 0 for d in dims[2:]):
            fixed = (int(dims[2]), int(dims[3]))
    return default_profile(kind, fixed_hw=fixed)


def cache_key(
    model_sha256: str,
    gpu_name: str,
    compute_capability: tuple[int, int],
    trt_version: str,
    profile: tuple[Shape4, Shape4, Shape4],
    precision: str,
) -> str:
    """A stable hex key for one serialized engine (see the module docstring)."""
    payload = json.dumps(
        {
            "format": FORMAT_VERSION,
            "model": model_sha256,
            "gpu": gpu_name,
            "cc": list(compute_capability),
            "trt": trt_version,
            "profile": [list(s) for s in profile],
            "precision": precision,
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def engine_path(cache_dir: Path, model_path: Path, kind: str, key: str) -> Path:
    return Path(cache_dir) / "tensorrt" / f"{model_path.stem}-{kind}-{key[:24]}.engine"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------- fp16 graph


def onnx_to_fp16(model: onnx.ModelProto, keep_fp32: frozenset[str] = FP32_OPS) -> onnx.ModelProto:
    """A copy of ``model`` computing in fp16 (see the module docstring), fp32 at its edges."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    elem: dict[str, int] = {}
    for vi in [*graph.value_info, *graph.input, *graph.output]:
        elem[vi.name] = vi.type.tensor_type.elem_type
    inits = {t.name: t for t in graph.initializer}
    for t in graph.initializer:
        elem[t.name] = t.data_type

    out = onnx.ModelProto()
    out.CopyFrom(inferred)
    g = out.graph
    del g.node[:]
    del g.value_info[:]
    precision: dict[str, int] = {}  # float tensor name -> FLOAT or FLOAT16 as produced now
    for inp in graph.input:
        if elem.get(inp.name) == TensorProto.FLOAT:
            precision[inp.name] = TensorProto.FLOAT
    casts: dict[tuple[str, int], str] = {}
    new_inits: list[Any] = []
    new_nodes: list[Any] = []

    def as_type(name: str, want: int) -> str:
        if name in inits:
            if want == TensorProto.FLOAT or inits[name].data_type != TensorProto.FLOAT:
                return name
            key = (name, want)
            if key not in casts:
                arr = numpy_helper.to_array(inits[name]).astype(np.float16)
                casts[key] = f"{name}__fp16"
                new_inits.append(numpy_helper.from_array(arr, casts[key]))
            return casts[key]
        have = precision.get(name)
        if have is None or have == want:
            return name
        key = (name, want)
        if key not in casts:
            casts[key] = f"{name}__to{'16' if want == TensorProto.FLOAT16 else '32'}"
            new_nodes.append(
                helper.make_node("Cast", [name], [casts[key]], to=want, name=f"{casts[key]}__cast")
            )
        return casts[key]

    for node in graph.node:
        want = TensorProto.FLOAT if node.op_type in keep_fp32 else TensorProto.FLOAT16
        new = onnx.NodeProto()
        new.CopyFrom(node)
        if node.op_type == "Constant":
            for attr in new.attribute:
                if attr.name == "value" and attr.t.data_type == TensorProto.FLOAT:
                    arr = numpy_helper.to_array(attr.t).astype(np.float16)
                    attr.t.CopyFrom(numpy_helper.from_array(arr, attr.t.name))
            for o in node.output:
                if elem.get(o) == TensorProto.FLOAT:
                    precision[o] = TensorProto.FLOAT16
            new_nodes.append(new)
            continue
        for i, name in enumerate(node.input):
            if not name or elem.get(name) != TensorProto.FLOAT:
                continue
            target = TensorProto.FLOAT if (node.op_type == "Resize" and i > 0) else want
            new.input[i] = as_type(name, target)
        if node.op_type == "Cast":
            for attr in new.attribute:
                if attr.name == "to" and attr.i == TensorProto.FLOAT:
                    attr.i = want
        for o in node.output:
            if elem.get(o) == TensorProto.FLOAT:
                precision[o] = want
        new_nodes.append(new)

    outputs = {o.name for o in graph.output}
    for name in outputs:
        if precision.get(name) == TensorProto.FLOAT16:
            inner = f"{name}__fp16out"
            for n in new_nodes:
                for i, o in enumerate(n.output):
                    if o == name:
                        n.output[i] = inner
                for i, x in enumerate(n.input):
                    if x == name:
                        n.input[i] = inner
            new_nodes.append(
                helper.make_node(
                    "Cast", [inner], [name], to=TensorProto.FLOAT, name=f"{name}__castout"
                )
            )
    g.node.extend(new_nodes)
    used = {name for n in new_nodes for name in n.input}
    kept = [t for t in [*graph.initializer, *new_inits] if t.name in used]
    del g.initializer[:]
    g.initializer.extend(kept)
    return out


# --------------------------------------------------------------------------- build + run


def _import_trt() -> Any:
    try:
        import tensorrt as trt
    except ImportError as e:
        raise FatalError(
            "the tensorrt backend needs TensorRT: pip install 'ocrstream[tensorrt]'",
            code="backend_unavailable",
        ) from e
    return trt


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise FatalError(
            "the tensorrt backend keeps its CUDA buffers in PyTorch: "
            "pip install 'ocrstream[tensorrt]'",
            code="backend_unavailable",
        ) from e
    return torch


def _strongly_typed_only(trt: Any) -> bool:
    return not hasattr(trt.BuilderFlag, "FP16")


def build_engine(
    model_path: Path,
    profile: tuple[Shape4, Shape4, Shape4],
    precision: str,
    workspace_bytes: int = 2 << 30,
) -> bytes:
    """Parse the ONNX model and build a serialized engine for one profile."""
    import onnx

    trt = _import_trt()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    model = onnx.load(str(model_path))
    strong = _strongly_typed_only(trt)
    if precision in ("fp16", "bf16") and strong:
        model = onnx_to_fp16(model)
    flags = 0
    if hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED") and strong:
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(model.SerializeToString()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise FatalError(
            f"TensorRT cannot parse {model_path.name}: {errors}", code="model_unsupported"
        )
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_bytes)
    if precision in ("fp16", "bf16") and not strong:
        config.set_flag(trt.BuilderFlag.FP16)
    opt_profile = builder.create_optimization_profile()
    opt_profile.set_shape(network.get_input(0).name, *profile)
    config.add_optimization_profile(opt_profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise FatalError(
            f"TensorRT failed to build an engine for {model_path.name}", code="backend_unavailable"
        )
    return bytes(serialized)


class TensorRTSession:
    """One deserialized engine and execution context on one GPU."""

    backend = "tensorrt"

    def __init__(self, model_path: Path, kind: ModelKind, options: SessionOptions) -> None:
        from ocrstream.processors.ocr.backends.torch_backend import resolve_device

        trt = _import_trt()
        torch = _import_torch()
        self._trt, self._torch = trt, torch
        self.kind = kind
        self._ctc_best = options.ctc_best and kind == "rec"
        if options.device == "cpu":
            raise FatalError(
                "the tensorrt backend needs a CUDA device (OCRSTREAM_OCR_DEVICE=cuda)",
                code="bad_config",
            )
        self.device = resolve_device(options.device)
        self.profile = profile_for(kind, options, _onnx_input_dims(model_path))
        precision = options.precision if options.precision in ("fp16", "bf16") else "fp32"
        with torch.cuda.device(self.device):
            props = torch.cuda.get_device_properties(self.device)
            key = cache_key(
                file_sha256(model_path),
                props.name,
                (props.major, props.minor),
                trt.__version__,
                self.profile,
                precision,
            )
            cache_dir = Path(options.cache_dir or Path.home() / ".cache" / "ocrstream")
            path = engine_path(cache_dir, model_path, kind, key)
            if path.is_file():
                data = path.read_bytes()
                log.info("TensorRT engine from cache %s", path)
            else:
                log.info(
                    "building TensorRT %s engine for %s (%s, profile %s)",
                    precision,
                    model_path.name,
                    props.name,
                    self.profile,
                )
                data = build_engine(model_path, self.profile, precision)
                write_atomic(path, data)
            runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
            self._engine = runtime.deserialize_cuda_engine(data)
            if self._engine is None:  # a stale or foreign file: rebuild once
                path.unlink(missing_ok=True)
                data = build_engine(model_path, self.profile, precision)
                write_atomic(path, data)
                self._engine = runtime.deserialize_cuda_engine(data)
            if self._engine is None:
                raise FatalError(f"TensorRT cannot deserialize {path}", code="backend_unavailable")
            self._context = self._engine.create_execution_context()
            self._stream = torch.cuda.Stream(device=self.device)
        names = [self._engine.get_tensor_name(i) for i in range(self._engine.num_io_tensors)]
        inputs = [n for n in names if self._engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        outputs = [n for n in names if n not in inputs]
        self._input, self._output = inputs[0], outputs[0]
        self._in_dtype = _torch_dtype(trt, torch, self._engine.get_tensor_dtype(self._input))
        self._out_dtype = _torch_dtype(trt, torch, self._engine.get_tensor_dtype(self._output))
        self.classes = 0  # where run compacts its output, the model's (rec.model_classes)
        if self._ctc_best:
            self.classes = full_output_classes(self.run_torch, (1, *self.profile[0][1:]))

    def run(self, batch: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """numpy NCHW float32 in, the output float32 out (rec with ``ctc_best``: N x T x 3,
        torch_backend.ctc_best, taken on the GPU)."""
        x = self._torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32)).pin_memory()
        y = self.run_torch(x)
        if self._ctc_best:
            y = ctc_best(y)
        return np.asarray(y.cpu().numpy(), dtype=np.float32)

    def run_torch(self, batch: torch.Tensor) -> torch.Tensor:
        torch = self._torch
        lo, _, hi = self.profile
        for dim in (2, 3):
            if not lo[dim] <= batch.shape[dim] <= hi[dim]:
                raise FatalError(
                    f"TensorRT {self.kind} input {tuple(batch.shape)} is outside the engine's "
                    f"profile {lo}..{hi}; raise the limit in the settings",
                    code="bad_config",
                )
        parts = [self._run_chunk(chunk) for chunk in torch.split(batch, hi[0])]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _run_chunk(self, chunk: torch.Tensor) -> torch.Tensor:
        torch = self._torch
        caller = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(caller)
        with torch.cuda.stream(self._stream):
            x = chunk.to(device=self.device, dtype=self._in_dtype, non_blocking=True)
            x = x.contiguous()
            self._context.set_input_shape(self._input, tuple(x.shape))
            shape = tuple(self._context.get_tensor_shape(self._output))
            y = torch.empty(shape, dtype=self._out_dtype, device=self.device)
            self._context.set_tensor_address(self._input, x.data_ptr())
            self._context.set_tensor_address(self._output, y.data_ptr())
            if not self._context.execute_async_v3(self._stream.cuda_stream):
                raise FatalError(
                    f"TensorRT {self.kind} execution failed", code="backend_unavailable"
                )
            y = y.float()
        caller.wait_stream(self._stream)
        y.record_stream(caller)
        return y


def _onnx_input_dims(model_path: Path) -> list[int | str] | None:
    try:
        import onnx

        model = onnx.load(str(model_path), load_external_data=False)
    except (ImportError, OSError):
        return None
    dims = model.graph.input[0].type.tensor_type.shape.dim
    return [d.dim_value if d.dim_value > 0 else d.dim_param for d in dims]


def _torch_dtype(trt: Any, torch: Any, dtype: Any) -> Any:
    table = {trt.float32: torch.float32, trt.float16: torch.float16, trt.int32: torch.int32}
    if hasattr(trt, "bfloat16"):
        table[trt.bfloat16] = torch.bfloat16
    if hasattr(trt, "int64"):
        table[trt.int64] = torch.int64
    if dtype not in table:
        raise FatalError(f"unsupported TensorRT tensor type {dtype}", code="model_unsupported")
    return table[dtype]


class TensorRTBackend:
    name = "tensorrt"

    def load(self, model_path: Path, kind: ModelKind, options: SessionOptions) -> TensorRTSession:
        return TensorRTSession(model_path, kind, options)
