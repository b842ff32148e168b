"""PaddleOCR itself as a peer of ``ocrstream bench engine`` (scripts/paddleocr_peer.sh)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from ocrstream.bench import engine as be
from ocrstream.bench.datasets import Sample, render_a4_page
from ocrstream.bench.engine import BenchConfig, paddleocr_lines, run_engine, score
from ocrstream.bench.paddleocr_peer import drop_copies, fuse_activations, rewrite_upsampling

# lines as x2paddle 1.6 writes PP-OCRv6 det's neck (ONNX Resize, nearest, scales 2 and 8)
X2PADDLE_CODE = """import paddle

class ONNXModel(paddle.nn.Layer):
    def forward(self, x2paddle_x):
        a = paddle.nn.functional.interpolate(x=x2paddle_Add_159, scale_factor=[2.0, 2.0], \
mode='nearest', align_mode=1)
        b = paddle.nn.functional.interpolate(x=x2paddle_Add_191, scale_factor=[8.0, 8.0], \
mode='nearest', align_mode=1)
        c = paddle.nn.functional.interpolate(x=y, scale_factor=[2.0, 2.0], mode='bilinear')
        return a, b, c

def main(x2paddle_x):
    return ONNXModel()(x2paddle_x)
"""


def test_the_detectors_nearest_upsampling_is_rewritten_and_nothing_else() -> None:
    code, count = rewrite_upsampling(X2PADDLE_CODE)
    assert count == 2
    assert "a = _nearest_up(x2paddle_Add_159, 2, mode='nearest', align_mode=1)" in code
    assert "b = _nearest_up(x2paddle_Add_191, 8, mode='nearest', align_mode=1)" in code
    assert "scale_factor=[2.0, 2.0], mode='bilinear'" in code  # not nearest: left alone
    assert code.index("def _nearest_up(") < code.index("def main(")
    compile(code, "x2paddle_code.py", "exec")  # still Python


def test_code_without_upsampling_is_left_as_it_is() -> None:
    code = "def main(x):\n    return x\n"
    assert rewrite_upsampling(code) == (code, 0)


# x2paddle 1.6's lines for v6 tiny det's spelt-out GELU (ONNX Div, Erf, Add, Mul, Mul), one of
# them with other statements between its own, and a HardSigmoid (Scale, Clip)
ACTIVATIONS = """
    def forward(self, x):
        c0 = paddle.full(dtype='float32', shape=[1], fill_value=1.4142135381698608)
        c2 = paddle.full(dtype='float32', shape=[1], fill_value=1.0)
        c1 = paddle.full(dtype='float32', shape=[1], fill_value=0.5)
        d1 = paddle.divide(x=x, y=c0)
        other = paddle.scale(x=x, scale=2.0, bias=0.0)
        e1 = paddle.erf(x=d1)
        a1 = paddle.add(x=e1, y=c2)
        m1 = paddle.multiply(x=x, y=a1)
        g1 = paddle.multiply(x=m1, y=c1)
        h_val = paddle.scale(x=g1, scale=0.16666670143604279, bias=0.5)
        h = paddle.clip(x=h_val, min=0.0, max=1.0)
        d2 = paddle.divide(x=h, y=c0)
        e2 = paddle.erf(x=d2)
        a2 = paddle.add(x=e2, y=c2)
        m2 = paddle.multiply(x=h, y=a2)
        g2 = paddle.multiply(x=m2, y=c1)
        k = paddle.assign(x=g2)
        return paddle.add(x=k, y=other), a2
"""


def _numpy_paddle() -> Any:
    """Enough of ``paddle`` in numpy to run the lines above, before and after the rewrite."""
    erf = np.vectorize(math.erf)

    def gelu(x: Any) -> Any:
        return x * 0.5 * (1 + erf(x / math.sqrt(2)))

    def hardsigmoid(x: Any, slope: float, offset: float) -> Any:
        return np.clip(x * slope + offset, 0.0, 1.0)

    return SimpleNamespace(
        full=lambda dtype, shape, fill_value: np.full(shape, fill_value, dtype),
        divide=lambda x, y: x / y, add=lambda x, y: x + y, multiply=lambda x, y: x * y,
        erf=lambda x: erf(x), scale=lambda x, scale, bias: x * scale + bias,
        clip=lambda x, min, max: np.clip(x, min, max), assign=lambda x: x.copy(),
        nn=SimpleNamespace(functional=SimpleNamespace(gelu=gelu, hardsigmoid=hardsigmoid)),
    )  # fmt: skip


def _forward(code: str) -> Any:
    scope: dict[str, Any] = {"paddle": _numpy_paddle()}
    exec(code.replace("\n    ", "\n"), scope)
    return scope["forward"]


def test_spelt_out_activations_are_written_back_by_data_flow_with_the_same_values() -> None:
    code, gelus, hardsigmoids = fuse_activations(ACTIVATIONS)
    # the first GELU's statements are interleaved with another; its inner values go.
    # The second's Add is returned too, so it stays as it is.
    assert (gelus, hardsigmoids) == (1, 1)
    assert "g1 = paddle.nn.functional.gelu(x)" in code
    for gone in ("d1 =", "e1 =", "a1 =", "m1 =", "h_val ="):
        assert gone not in code
    assert "other = paddle.scale(x=x, scale=2.0, bias=0.0)" in code
    assert "h = paddle.nn.functional.hardsigmoid(g1, slope=0.16666670143604279, offset=0.5)" in code
    assert "g2 = paddle.multiply(x=m2, y=c1)" in code
    code, copies = drop_copies(code)
    assert copies == 1
    assert "k = g2" in code
    x = np.linspace(-4, 4, 17, dtype=np.float64)
    want = _forward(ACTIVATIONS)(None, x)
    got = _forward(code)(None, x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[1], want[1])


def test_a_pattern_with_other_constants_is_not_gelu_and_is_left_alone() -> None:
    code = ACTIVATIONS.replace("fill_value=0.5", "fill_value=0.25")
    assert fuse_activations(code)[1] == 0


def test_a_reply_becomes_lines_and_a_failed_page_an_error() -> None:
    reply = {"lines": [["TOTAL 12.00", [[0, 0], [100, 0], [100, 20], [0, 20]]]]}
    (line,) = paddleocr_lines(reply)
    assert line.text == "TOTAL 12.00"
    assert line.polygon == ((0.0, 0.0), (100.0, 0.0), (100.0, 20.0), (0.0, 20.0))
    with pytest.raises(RuntimeError, match="PaddleOCR: ValueError: not an image"):
        paddleocr_lines({"error": "ValueError: not an image OpenCV can decode"})


def test_without_the_peer_set_up_the_bench_skips_it_and_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OCRSTREAM_BENCH_PADDLEOCR_HOME", str(tmp_path / "none"))
    assert not be.available("paddleocr")
    report = be.bench({}, BenchConfig(), ["paddleocr"])
    assert report["datasets"] == {}
    assert "paddleocr: not installed, skipped: bash scripts/paddleocr_peer.sh" in (
        capsys.readouterr().err
    )


def test_a_broken_peer_venv_is_the_runs_error_with_what_it_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a "venv" whose Python runs, but has no PaddleOCR: the peer exits on its import
    home = tmp_path / "peer"
    (home / "venv" / "bin").mkdir(parents=True)
    (home / "models").mkdir()
    python = home / "venv" / "bin" / "python"
    python.write_text("#!/bin/sh\necho 'No module named paddleocr' >&2\nexit 3\n")
    python.chmod(0o755)
    monkeypatch.setenv("OCRSTREAM_BENCH_PADDLEOCR_HOME", str(home))
    page = tmp_path / "p.jpg"
    page.write_bytes(render_a4_page(0)[0])
    run, preds = run_engine("paddleocr", BenchConfig(warmup=0), [Sample("p", page)], processes=1)
    assert run.error is not None
    assert "PaddleOCR exited (3)" in run.error
    assert "No module named paddleocr" in run.error
    assert preds == {}


def _peer_ready() -> bool:
    return be.available("paddleocr") and (be.paddleocr_dirs().models / "PP-OCRv6_tiny_det").is_dir()


@pytest.mark.slow
@pytest.mark.skipif(
    not _peer_ready(),
    reason="the PaddleOCR peer is not set up here (bash scripts/paddleocr_peer.sh: ~400 MB)",
)
def test_paddleocr_reads_rendered_pages_with_the_converted_models(tmp_path: Path) -> None:
    samples = []
    for i in range(2):
        data, gt = render_a4_page(i)
        path = tmp_path / f"a4-{i}.jpg"
        path.write_bytes(data)
        samples.append(Sample(path.stem, path, gt))
    cfg = BenchConfig(model="ppocrv6-tiny", warmup=0, threads=min(2, os.cpu_count() or 1))
    run, preds = run_engine("paddleocr", cfg, samples, processes=1)
    assert run.error is None
    assert run.pages == 2
    assert run.peak_rss_mb > 200  # PaddleOCR's own process, not the bench child's
    score(run, preds, samples)
    assert run.cer_norm is not None
    assert run.cer_norm < 0.05  # clean 300-DPI print


def test_the_whole_process_command_is_paddleocrs_own_on_a_page_or_a_folder_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ocrstream.bench.whole import commands

    monkeypatch.setenv("OCRSTREAM_BENCH_PADDLEOCR_HOME", str(tmp_path / "peer"))
    pages = [tmp_path / f"{name}.jpg" for name in ("b", "a", "c")]
    cfg = BenchConfig(model="ppocrv6-small", threads=2)
    one = commands("paddleocr", cfg, pages[:1], tmp_path / "out1")
    assert one is not None
    assert one[:4] == [str(tmp_path / "peer/venv/bin/paddleocr"), "ocr", "-i", str(pages[0])]
    options = dict(zip(one[4::2], one[5::2], strict=True))
    assert options["--text_detection_model_dir"] == str(tmp_path / "peer/models/PP-OCRv6_small_det")
    assert options["--text_recognition_model_name"] == "PP-OCRv6_small_rec"
    assert options["--use_textline_orientation"] == "False"
    assert options["--cpu_threads"] == "2"
    many = commands("paddleocr", cfg, pages, tmp_path / "out3")
    assert many is not None
    folder = Path(many[3])
    # the pages in the run's order, whatever their names
    assert [p.resolve() for p in sorted(folder.iterdir())] == [p.resolve() for p in pages]
    assert commands("paddleocr", BenchConfig(model="ppocrv5"), pages, tmp_path) is None
