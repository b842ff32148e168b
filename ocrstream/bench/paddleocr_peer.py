"""PaddleOCR itself as a peer of ``ocrstream bench engine``: run by the Python of a venv of its
own, never imported by ocrstream.

PaddleOCR 3.7 (PaddlePaddle 3.3 underneath) pins packages that the project's venv cannot hold
beside its own (``opencv-contrib-python`` 4.10, among others), and it downloads its models from
hosts this project cannot reach. ``scripts/paddleocr_peer.sh`` therefore makes a venv under
``~/.cache/ocrstream/peers/paddleocr`` and runs this file there twice:

- ``convert``: the same PP-OCRv6 ONNX files ocrstream reads (the SHA-256-pinned ones of
  ``processors/ocr/models.py``) made into PaddleOCR's own model format. x2paddle turns each
  into Paddle code and weights; the code is saved again as a static graph (PIR JSON) with one
  change: the detector's nearest-neighbour upsampling by k (ONNX ``Resize``) is written as an
  ``expand`` and a ``reshape``, the same values, because the ``nearest_interp`` op that
  x2paddle emits carries its scale as doubles, which PaddlePaddle 3.3's oneDNN executor
  cannot run (``ConvertPirAttribute2RuntimeAttribute not support
  pir::ArrayAttribute<pir::DoubleAttribute>``), and oneDNN is how PaddleOCR runs on a CPU.
  Two more rewrites undo what the trip through ONNX added, so that Paddle runs the graph its
  own export would have (:func:`fuse_activations`, :func:`drop_copies`): GELU and HardSigmoid
  spelt out in elementwise ops are written back as Paddle's ``gelu`` and ``hardsigmoid``, and
  the copies (``assign``) of whole feature maps, one for each ONNX ``Identity``, become second
  names. Without them Paddle ran v6 tiny's det 3.1-3.3x slower than onnxruntime runs the ONNX
  file and v6 small's det up to 1.9x (docs/benchmarks.md, sessions 46 and 47).
  Each model is then checked against onnxruntime on the same input, through Paddle Inference
  with oneDNN on, and the run fails if they differ. ``inference.yml`` gives PaddleOCR each
  model's name, pre-processing, post-processing and dictionary, as its own exports do.
- ``serve``: ``paddleocr.PaddleOCR`` with these models and its CPU defaults (oneDNN, its
  pipeline's detection sizes: the shorter side at least 64 px, the longer at most 4,000),
  without the modules the other engines do not run either (page orientation, unwarping, line
  orientation), on ``--threads`` threads. It reads pages from stdin, each an 8-byte
  big-endian length and the file's bytes, and writes one JSON line per page to its stdout:
  ``{"lines": [[text, [[x, y], ...]], ...]}``, or ``{"error": "..."}``. Whatever Paddle prints
  goes to stderr. It ends at the end of its input.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: What the detector's upsampling becomes: nearest by an integer k along both axes.
_UPSAMPLE = """

def _nearest_up(x, k, **_):
    s = paddle.shape(x)
    y = paddle.unsqueeze(x, [3, 5]).expand([s[0], s[1], s[2], k, s[3], k])
    return paddle.reshape(y, [s[0], s[1], s[2] * k, s[3] * k])

"""

_INTERPOLATE = re.compile(
    r"paddle\.nn\.functional\.interpolate\(x=(\w+), scale_factor=\[(\d+)\.0, \2\.0\], "
    r"mode='nearest'"
)

_DET_YML = {
    "PreProcess": {
        "transform_ops": [
            {"DecodeImage": {"channel_first": False, "img_mode": "BGR"}},
            {"DetLabelEncode": None},
            {"DetResizeForTest": {"resize_long": 960}},
            {
                "NormalizeImage": {
                    "mean": [0.485, 0.456, 0.406],
                    "std": [0.229, 0.224, 0.225],
                    "scale": 1.0 / 255.0,
                    "order": "hwc",
                }
            },
            {"ToCHWImage": None},
            {"KeepKeys": {"keep_keys": ["image", "shape", "polys", "ignore_tags"]}},
        ]
    },
    "PostProcess": {
        "name": "DBPostProcess",
        "thresh": 0.3,
        "box_thresh": 0.6,
        "max_candidates": 1000,
        "unclip_ratio": 1.5,
    },
}

_REC_OPS = [
    {"DecodeImage": {"channel_first": False, "img_mode": "BGR"}},
    {"MultiLabelEncode": {"gtc_encode": "NRTRLabelEncode"}},
    {"RecResizeImg": {"image_shape": [3, 48, 320]}},
    {"KeepKeys": {"keep_keys": ["image", "label_ctc", "label_gtc", "length", "valid_ratio"]}},
]


def model_name(size: str, kind: str) -> str:
    """PaddleOCR's name of a PP-OCRv6 model (``PP-OCRv6_tiny_det``)."""
    return f"PP-OCRv6_{size}_{kind}"


def rewrite_upsampling(code: str) -> tuple[str, int]:
    """x2paddle's code with each nearest ×k ``interpolate`` written as :func:`_nearest_up`;
    the count of calls rewritten."""
    code, count = _INTERPOLATE.subn(r"_nearest_up(\1, \2, mode='nearest'", code)
    if count:
        code = code.replace("\ndef main(", _UPSAMPLE + "def main(", 1)
    return code, count


#: ``target = paddle.op(name=value, ...)``, one statement of x2paddle's ``forward``
_STATEMENT = re.compile(r"^(?P<indent>[ \t]+)(?P<target>\w+) = (?P<call>paddle\.[\w.]+\(.*\))$")


def _parse(line: str) -> tuple[str, str, dict[str, Any]] | None:
    """A statement's target, the function it calls and its keyword arguments (names as
    strings, numbers as numbers), or None for any other line."""
    m = _STATEMENT.match(line)
    if m is None:
        return None
    call = ast.parse(m["call"], mode="eval").body
    if not isinstance(call, ast.Call) or call.args:
        return None
    kwargs: dict[str, Any] = {}
    for k in call.keywords:
        if k.arg is None:
            return None
        value = k.value
        if isinstance(value, ast.Name):
            kwargs[k.arg] = value.id
        elif isinstance(value, ast.Constant):
            kwargs[k.arg] = value.value
        elif (
            isinstance(value, ast.UnaryOp)
            and isinstance(value.op, ast.USub)
            and isinstance(value.operand, ast.Constant)
            and isinstance(value.operand.value, int | float)
        ):
            kwargs[k.arg] = -value.operand.value
        else:
            kwargs[k.arg] = None
    return m["target"], ast.unparse(call.func), kwargs


def fuse_activations(code: str) -> tuple[str, int, int]:
    """x2paddle's code with the activations it spelt out written back as Paddle's own ops:
    GELU (``x * (erf(x / sqrt 2) + 1) * 0.5``, as v6 tiny's det has it) as ``gelu`` and
    HardSigmoid (``clip(scale(x, s, b), 0, 1)``) as ``hardsigmoid``, found by data flow, as
    x2paddle interleaves a pattern's statements with others; the counts of each rewritten.

    A pattern is rewritten only where its constants are GELU's (sqrt 2, 1, 1/2) and each of
    its inner values is used by the next statement of the pattern alone."""
    lines = code.split("\n")
    parsed = [_parse(line) for line in lines]
    defs = {p[0]: i for i, p in enumerate(parsed) if p is not None}
    uses: dict[str, int] = {}
    for name in re.findall(r"\b\w+\b", code):
        uses[name] = uses.get(name, 0) + 1
    constants = {
        p[0]: p[2]["fill_value"]
        for p in parsed
        if p is not None and p[1] == "paddle.full" and isinstance(p[2].get("fill_value"), float)
    }

    def inner(name: object, func: str) -> dict[str, Any] | None:
        """The arguments of the ``func`` call that made ``name``, if one statement reads it."""
        if not isinstance(name, str) or uses.get(name) != 2 or name not in defs:
            return None
        p = parsed[defs[name]]
        return p[2] if p is not None and p[1] == func else None

    def constant(name: object) -> object:
        return constants.get(name) if isinstance(name, str) else None

    drop: set[int] = set()
    gelus = hardsigmoids = 0
    for i, p in enumerate(parsed):
        if p is None:
            continue
        target, func, kw = p
        if func == "paddle.multiply" and constant(kw.get("y")) == 0.5:
            # x * (erf(x / sqrt 2) + 1), then * 0.5
            mul = inner(kw.get("x"), "paddle.multiply")
            add = inner(mul.get("y"), "paddle.add") if mul else None
            erf = inner(add.get("x"), "paddle.erf") if add else None
            div = inner(erf.get("x"), "paddle.divide") if erf else None
            root2 = constant(div.get("y")) if div else None
            if (
                mul is None or add is None or erf is None or div is None
                or constant(add.get("y")) != 1.0
                or not isinstance(root2, float) or abs(root2 - math.sqrt(2)) > 1e-6
                or div.get("x") != mul.get("x")
            ):  # fmt: skip
                continue
            lines[i] = f"{_indent(lines[i])}{target} = paddle.nn.functional.gelu({div['x']})"
            drop.update(defs[n] for n in (kw["x"], mul["y"], add["x"], erf["x"]))
            gelus += 1
        elif func == "paddle.clip" and kw.get("min") == 0.0 and kw.get("max") == 1.0:
            scale = inner(kw.get("x"), "paddle.scale")
            if scale is None or not all(isinstance(scale.get(k), float) for k in ("scale", "bias")):
                continue
            lines[i] = (
                f"{_indent(lines[i])}{target} = paddle.nn.functional.hardsigmoid("
                f"{scale['x']}, slope={scale['scale']!r}, offset={scale['bias']!r})"
            )
            drop.add(defs[kw["x"]])
            hardsigmoids += 1
    kept = "\n".join(line for k, line in enumerate(lines) if k not in drop)
    return kept, gelus, hardsigmoids


#: ``a = paddle.assign(x=b)``: a copy, where the ONNX file had an ``Identity`` (paddle2onnx
#: writes one for each auto-cast and each renamed output)
_COPY = re.compile(
    r"^(?P<indent>[ \t]+)(?P<target>\w+) = paddle\.assign\(x=(?P<source>\w+)\)$", re.M
)


def drop_copies(code: str) -> tuple[str, int]:
    """x2paddle's code with each ``paddle.assign`` of one value to another written as a
    second name for the same value: x2paddle's code never writes a value in place, so the copy
    changes nothing but the time (58 copies of whole feature maps in v6's rec); the count."""
    return _COPY.subn(r"\g<indent>\g<target> = \g<source>", code)


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _dictionary(onnx_path: Path, dict_path: Path | None) -> list[str]:
    if dict_path is not None:
        return dict_path.read_text("utf-8").splitlines()
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    meta = {p.key: p.value for p in model.metadata_props}
    return meta["character"].splitlines()


def convert(size: str, kind: str, onnx_path: Path, dict_path: Path | None, out: Path) -> None:
    """One ONNX model as PaddleOCR's model folder ``out/PP-OCRv6_{size}_{kind}``."""
    import importlib.util

    import paddle
    import yaml
    from paddle.static import InputSpec

    target = out / model_name(size, kind)
    with tempfile.TemporaryDirectory() as tmp:
        x2paddle = Path(sys.executable).with_name("x2paddle")
        subprocess.run(
            [str(x2paddle), "--framework=onnx", f"--model={onnx_path}", f"--save_dir={tmp}",
             "--disable_feedback=True"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        code, count = rewrite_upsampling((Path(tmp) / "x2paddle_code.py").read_text("utf-8"))
        if kind == "det" and count == 0:
            raise SystemExit(f"{onnx_path}: no upsampling found to rewrite; x2paddle changed?")
        code, gelus, hardsigmoids = fuse_activations(code)
        code, copies = drop_copies(code)
        print(
            f"{model_name(size, kind)}: {count} upsamplings, {gelus} GELUs and {hardsigmoids}"
            f" HardSigmoids written as Paddle's own ops, {copies} copies dropped",
            file=sys.stderr,
        )
        module_path = Path(tmp) / "peer_model.py"
        module_path.write_text(code, "utf-8")
        spec = importlib.util.spec_from_file_location("peer_model", module_path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        paddle.disable_static()
        layer = module.ONNXModel()
        layer.set_dict(paddle.load(str(Path(tmp) / "model.pdparams")), use_structured_name=True)
        layer.eval()
        height = None if kind == "det" else 48
        static = paddle.jit.to_static(
            layer, input_spec=[InputSpec([None, 3, height, None], "float32", "x")],
            full_graph=True,
        )  # fmt: skip
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        paddle.jit.save(static, str(target / "inference"))
    config: dict[str, Any] = {"Global": {"model_name": model_name(size, kind)}}
    if kind == "det":
        config.update(_DET_YML)
    else:
        config["PreProcess"] = {"transform_ops": _REC_OPS}
        config["PostProcess"] = {
            "name": "CTCLabelDecode",
            "character_dict": _dictionary(onnx_path, dict_path),
        }
    (target / "inference.yml").write_text(yaml.safe_dump(config, allow_unicode=True), "utf-8")
    _check(kind, onnx_path, target)


def _check(kind: str, onnx_path: Path, target: Path) -> None:
    """The converted model, run as PaddleOCR runs it (Paddle Inference, oneDNN), against
    onnxruntime on the ONNX file; exits the run when they differ."""
    import numpy as np
    import onnxruntime as ort
    import paddle.inference as pi

    rng = np.random.default_rng(0)
    shape = (1, 3, 640, 480) if kind == "det" else (2, 3, 48, 320)
    # pixels in [0, 1] normalised as the detector's pre-processing does (the recogniser's
    # maps [0, 1] to [-1, 1]): inputs in the range the models meet
    if kind == "det":
        mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    else:
        mean, std = np.full(3, 0.5), np.full(3, 0.5)
    pixels = rng.random(shape)
    x = ((pixels - mean[:, None, None]) / std[:, None, None]).astype(np.float32)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    want = session.run(None, {session.get_inputs()[0].name: x})[0]
    config = pi.Config(str(target / "inference.json"), str(target / "inference.pdiparams"))
    config.disable_gpu()
    config.enable_mkldnn()
    config.set_cpu_math_library_num_threads(1)
    predictor = pi.create_predictor(config)
    handle = predictor.get_input_handle(predictor.get_input_names()[0])
    handle.copy_from_cpu(x)
    predictor.run()
    got = predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu()
    diff = float(np.abs(got - want).max())
    same = kind == "det" or bool((got.argmax(-1) == want.argmax(-1)).mean() > 0.999)
    print(f"{target.name}: largest difference from onnxruntime {diff:.2e}", file=sys.stderr)
    # found: 1e-5 to 5e-5 on these inputs; on N(0, 1) noise v6 tiny's det differs by 1e-3
    # already as x2paddle converts it (without the rewrite, without oneDNN)
    if got.shape != want.shape or diff > 2e-3 or not same:
        raise SystemExit(f"{target.name}: the converted model does not match the ONNX file")


def serve(models: Path, size: str, threads: int) -> None:
    """Read pages from stdin, answer each on stdout (see the module docstring)."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # Paddle's own prints (C and Python) go to stderr, not into the answers
    sys.stdout = sys.stderr
    os.environ.setdefault("PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK", "True")
    import cv2
    import numpy as np
    from paddleocr import PaddleOCR

    engine = PaddleOCR(
        text_detection_model_name=model_name(size, "det"),
        text_detection_model_dir=str(models / model_name(size, "det")),
        text_recognition_model_name=model_name(size, "rec"),
        text_recognition_model_dir=str(models / model_name(size, "rec")),
        use_doc_orientation_classify=False,
        use_doc_unwarping=False,
        use_textline_orientation=False,
        device="cpu",
        cpu_threads=threads,
    )
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    source = sys.stdin.buffer
    while header := source.read(8):
        blob = source.read(int.from_bytes(header, "big"))
        try:
            image = cv2.imdecode(np.frombuffer(blob, np.uint8), cv2.IMREAD_COLOR)
            if image is None:
                raise ValueError("not an image OpenCV can decode")
            (found,) = engine.predict(image)
            lines = [
                [str(text), [[float(x), float(y)] for x, y in poly]]
                for text, poly in zip(found["rec_texts"], found["rec_polys"], strict=True)
            ]
            answer: dict[str, Any] = {"lines": lines}
        except Exception as e:  # noqa: BLE001 - one page's failure, reported to the bench
            answer = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(answer, ensure_ascii=False) + "\n")
        out.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="an ONNX model as PaddleOCR's model folder")
    c.add_argument("--size", required=True)
    c.add_argument("--kind", choices=("det", "rec"), required=True)
    c.add_argument("--onnx", type=Path, required=True)
    c.add_argument("--dict", type=Path, default=None)
    c.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("serve", help="PaddleOCR over pages on stdin")
    s.add_argument("--models", type=Path, required=True)
    s.add_argument("--size", required=True)
    s.add_argument("--threads", type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "convert":
        convert(args.size, args.kind, args.onnx, args.dict, args.out)
    else:
        serve(args.models, args.size, args.threads)


if __name__ == "__main__":
    main()
