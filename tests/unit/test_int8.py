"""The int8 profile (``OCRSTREAM_OCR_PRECISION=int8``): where it may run, its models built once
into the engine cache and reused by the next process, and its text against fp32's."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.backends import create, resolve
from ocrstream.processors.ocr.quantize import FORMAT, int8_kinds, prune_stale, tool_versions
from ocrstream.settings import OcrSettings

HAS_OPENVINO = importlib.util.find_spec("openvino") is not None
HAS_NNCF = importlib.util.find_spec("nncf") is not None


@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed")
def test_int8_on_the_cpu_is_openvino_at_any_thread_count():
    assert resolve(OcrSettings(precision="int8", threads=1)) == "openvino"
    assert resolve(OcrSettings(precision="int8", threads=2, backend="openvino")) == "openvino"


@pytest.mark.parametrize(
    ("backend", "device", "says"),
    [
        ("onnxruntime", "cpu", "openvino backend only"),
        ("torch", "cpu", "openvino backend only"),
        ("auto", "cuda", "CPU only"),
        ("tensorrt", "cuda", "CPU only"),
    ],
)
def test_int8_elsewhere_is_a_clear_fatal_error(backend: str, device: str, says: str):
    with pytest.raises(FatalError, match=says) as err:
        create(OcrSettings(precision="int8", backend=backend, device=device))
    assert err.value.code == "bad_config"


def test_an_unknown_precision_is_a_fatal_error():
    with pytest.raises(FatalError, match="int4") as err:
        create(OcrSettings(precision="int4"))
    assert err.value.code == "bad_config"


@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed")
def test_the_convolutions_kept_in_fp32_are_the_ones_that_read_the_image():
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    from ocrstream.processors.ocr.quantize import input_convolutions

    image = ops.parameter([1, 3, 32, 32], np.float32, name="x")
    scaled = ops.multiply(image, ops.constant(np.float32(1 / 255)))  # normalisation in the model
    kernel = ops.constant(np.ones((8, 3, 3, 3), np.float32))
    stem = ops.convolution(scaled, kernel, [2, 2], [1, 1], [1, 1], [1, 1])
    stem.set_friendly_name("stem")
    side = ops.convolution(image, kernel, [1, 1], [1, 1], [1, 1], [1, 1])  # a second reader
    side.set_friendly_name("side")
    deeper = ops.convolution(
        ops.relu(stem), ops.constant(np.ones((8, 8, 3, 3), np.float32)), [1, 1], [1, 1], [1, 1],
        [1, 1],
    )  # fmt: skip
    deeper.set_friendly_name("deeper")
    model = ov.Model([deeper, side], [image])

    assert input_convolutions(model) == ["side", "stem"]


@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed")
def test_calibration_holds_the_pages_tensors_not_the_engines_start_up_runs():
    from ocrstream.bench.datasets import render_a4_page
    from ocrstream.processors.ocr.quantize import calibration_inputs

    # OpenVINO named outright warms det up on a blank page at start-up (OCRSTREAM_OCR_BACKEND)
    settings = OcrSettings(model="ppocrv6-tiny", threads=1, backend="openvino", det_warmup=True)
    image, _ = render_a4_page(seed=3, dpi=100)

    inputs = calibration_inputs(settings, [image, image])

    assert len(inputs["det"]) == 2  # one a page, nothing else
    assert all(float(x.std()) > 0.1 for x in inputs["det"])
    assert inputs["rec"]
    assert all(float(x.std()) > 0.1 for x in inputs["rec"])


# A process that builds (or finds) the tiny model's INT8 models in CACHE, calibrated on one
# dev-split page of a4-en and one receipt-like page (the real calibration reads 16: minutes),
# reads PAGE with them and prints the text and the models it loaded.
_PROCESS = """
import json, logging, sys
from pathlib import Path
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
from ocrstream.processors.ocr import quantize
from ocrstream.processors.ocr.engine import OcrEngine
from ocrstream.settings import OcrSettings
quantize.CALIBRATION = quantize.Calibration(devsets=("a4-en",), pages=1, receipts=1, max_det=2,
                                               max_rec=8)
settings = OcrSettings(model="ppocrv6-tiny", threads=2, precision="int8",
                       engine_cache_dir=Path(sys.argv[1]))
engine = OcrEngine(settings)
page = engine.recognize([Path(sys.argv[2]).read_bytes()])[0]
engine.close()
print(json.dumps({"text": [ln.text for ln in page.lines], "version": engine.info.version,
                  "models": {k: str(v) for k, v in engine.int8_models.items()}}))
"""


def _run(cache: Path, page: Path) -> tuple[dict[str, object], str]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROCESS, str(cache), str(page)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out, proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(not (HAS_OPENVINO and HAS_NNCF), reason="needs openvino and nncf")
def test_int8_models_are_built_once_reused_by_the_next_process_and_read_like_fp32(tmp_path):
    from rapidfuzz.distance import Levenshtein

    from ocrstream.bench import devsets
    from ocrstream.bench.datasets import render_a4_page
    from ocrstream.processors.ocr.engine import OcrEngine

    if devsets.requirements("a4-en"):
        pytest.skip(f"the calibration page cannot be made here: {devsets.requirements('a4-en')}")
    image, truth = render_a4_page(seed=7, dpi=200)  # a generated page, not a dev-set page
    page = tmp_path / "page.png"
    page.write_bytes(image)
    cache = tmp_path / "cache"
    stale = _plant(cache / "openvino" / "int8", "det-0ld", FORMAT - 1, tool_versions())

    first, log = _run(cache, page)
    assert "building it now" in log
    # on a CPU with bf16 the default precision is faster, and the user is told so
    from ocrstream.processors.ocr.backends.choice import cpu_has_bf16

    assert ("the int8 profile on a CPU with bf16" in log) == cpu_has_bf16()
    assert not any(p.exists() for p in stale)  # the last format's model went with the build
    models = {k: Path(str(v)) for k, v in dict(first["models"]).items()}  # type: ignore[call-overload]
    kinds = sorted(int8_kinds("ppocrv6-tiny"))  # det (rec stays fp32: docs/benchmarks.md)
    assert sorted(models) == kinds
    assert str(first["version"]).endswith(f" int8:{'+'.join(kinds)}")  # what results say
    for path in models.values():
        assert path.is_file()
        assert path.with_suffix(".bin").is_file()
        assert path.parent == cache / "openvino" / "int8"
        manifest = json.loads(path.with_suffix(".json").read_text())
        assert "devsets=a4-en split=dev pages=1" in manifest["calibration"]
        # the convolution reading the image stays fp32: nothing quantises its input or weights
        import openvino as ov

        assert manifest["fp32_ops"]
        convolutions = {
            op.get_friendly_name(): op
            for op in ov.Core().read_model(str(path)).get_ordered_ops()
            if op.get_type_name() in ("Convolution", "GroupConvolution")
        }
        quantised = [
            name
            for name, op in convolutions.items()
            if any(i.get_source_output().get_node().get_type_name() == "FakeQuantize"
                   for i in op.inputs())
        ]  # fmt: skip
        assert quantised  # the rest is INT8
        assert not set(manifest["fp32_ops"]) & set(quantised)
        assert set(manifest["fp32_ops"]) <= set(convolutions)
    made = {p: p.stat().st_mtime_ns for p in (cache / "openvino" / "int8").iterdir()}

    second, log = _run(cache, page)
    assert "building it now" not in log
    assert second == first  # the same models, the same text
    assert {p: p.stat().st_mtime_ns for p in (cache / "openvino" / "int8").iterdir()} == made

    fp32 = OcrEngine(OcrSettings(model="ppocrv6-tiny", threads=2, precision="fp32"))
    try:
        reference = [ln.text for ln in fp32.recognize([image])[0].lines]
    finally:
        fp32.close()
    int8 = "\n".join(list(second["text"]))  # type: ignore[call-overload]
    fp32_text = "\n".join(reference)
    assert len(reference) >= 0.9 * len(truth)  # the page is read (fp32 finds its lines)
    # INT8 reads what fp32 reads, but for at most half a percent of the characters
    assert Levenshtein.distance(int8, fp32_text) <= 0.005 * len(fp32_text)


@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed")
def test_a_set_int8_did_not_pay_for_runs_in_fp32_and_the_user_is_told(tmp_path, caplog):
    from ocrstream.bench.datasets import render_a4_page
    from ocrstream.processors.ocr.engine import OcrEngine

    assert int8_kinds("ppocrv6-small-tinydet") == frozenset()  # measured: docs/benchmarks.md
    image, _ = render_a4_page(seed=5, dpi=100)
    texts = {}
    for precision in ("int8", "fp32"):
        settings = OcrSettings(model="ppocrv6-small-tinydet", threads=2, precision=precision,
                               engine_cache_dir=tmp_path / "cache")  # fmt: skip
        with caplog.at_level("WARNING", logger="ocrstream.processors.ocr.quantize"):
            engine = OcrEngine(settings)
        try:
            texts[precision] = [ln.text for ln in engine.recognize([image])[0].lines]
            if precision == "int8":
                assert engine.int8_models == {}
                assert " int8:" not in engine.info.version
        finally:
            engine.close()
    assert "quantises no model of ppocrv6-small-tinydet" in caplog.text
    assert "building it now" not in caplog.text
    assert not (tmp_path / "cache" / "openvino" / "int8").exists()  # nothing built
    from click.testing import CliRunner

    from ocrstream.cli import main

    result = CliRunner().invoke(
        main, ["engine", "quantize", "--model", "ppocrv6-small-tinydet"],
        env={"OCRSTREAM_OCR_ENGINE_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "ppocrv6-small-tinydet: nothing to build" in result.output
    assert "int8 models ready" not in result.output
    assert not (tmp_path / "cache" / "openvino" / "int8").exists()
    assert texts["int8"]
    assert texts["int8"] == texts["fp32"]


def _plant(folder: Path, stem: str, fmt: int | None, versions: str) -> list[Path]:
    """An INT8 model's three files as :func:`quantize.build` leaves them (``fmt`` None: no
    manifest, as after a crash between the model and its manifest)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = [folder / f"{stem}.xml", folder / f"{stem}.bin"]
    for f in files:
        f.write_bytes(b"model")
    if fmt is not None:
        files.append(folder / f"{stem}.json")
        files[-1].write_text(json.dumps({"kind": "det", "format": fmt, "versions": versions}))
    return files


def test_only_models_this_install_can_no_longer_load_are_pruned(tmp_path):
    current = _plant(tmp_path, "det-current", FORMAT, tool_versions())
    older_recipe = _plant(tmp_path, "det-older", FORMAT - 1, tool_versions())
    upgraded_away = _plant(tmp_path, "rec-upgraded", FORMAT, "nncf-2.0.0 openvino-2024.0.0")
    unknown = _plant(tmp_path, "det-no-manifest", None, "")

    removed = prune_stale(tmp_path)

    assert sorted(removed) == sorted([older_recipe[0], upgraded_away[0]])
    assert all(p.exists() for p in current + unknown)
    assert not any(p.exists() for p in older_recipe + upgraded_away)
    assert prune_stale(tmp_path) == []  # nothing left to prune


def test_receipt_like_calibration_pages_are_narrow_strips_the_same_for_a_seed():
    import cv2
    import numpy as np

    from ocrstream.bench import devsets

    if devsets.requirements("a4-en"):
        pytest.skip(f"no fonts for the strips here: {devsets.requirements('a4-en')}")
    first, again, other = (devsets.receipt_like_page(s) for s in (3, 3, 4))
    assert first == again
    assert first != other
    image = cv2.imdecode(np.frombuffer(first, np.uint8), cv2.IMREAD_COLOR)
    assert image.shape[0] > image.shape[1]  # taller than wide, like a till receipt
