"""``ocrstream bench engine``: the runners, the report and the command."""

from __future__ import annotations

import json
import platform
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from ocrstream.bench.cer import TextLine
from ocrstream.bench.datasets import Sample, render_a4_page
from ocrstream.bench.engine import (
    BenchConfig,
    EngineRun,
    describe_cpu,
    faster_paddle_lines,
    format_table,
    machine,
    onnxocr_lines,
    parse_tesseract_tsv,
    run_engine,
    score,
)

SQUARE = ((0.0, 0.0), (100.0, 0.0), (100.0, 20.0), (0.0, 20.0))

TSV = (
    "level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight\tconf\ttext\n"
    "1\t1\t0\t0\t0\t0\t0\t0\t800\t600\t-1\t\n"
    "4\t1\t1\t1\t1\t0\t10\t10\t300\t30\t-1\t\n"
    "5\t1\t1\t1\t1\t1\t10\t10\t100\t30\t96.5\tTotal\n"
    "5\t1\t1\t1\t1\t2\t150\t12\t160\t28\t95.1\t12.00\n"
    "5\t1\t1\t1\t2\t1\t10\t50\t90\t30\t91.0\tCash\n"
    "5\t1\t1\t1\t2\t2\t120\t50\t5\t30\t10.0\t \n"
)


def test_tesseract_words_are_grouped_into_lines_with_boxes() -> None:
    lines = parse_tesseract_tsv(TSV)
    assert [ln.text for ln in lines] == ["Total 12.00", "Cash"]
    assert lines[0].polygon == ((10, 10), (310, 10), (310, 40), (10, 40))


def _tsv_words(*words: tuple[int, int, int, int, int, str]) -> str:
    """Tesseract TSV of words: (line, left, top, width, height, text), one block."""
    rows = [TSV.splitlines()[0]]
    rows += [f"5\t1\t1\t1\t{ln}\t{i}\t{x}\t{y}\t{w}\t{h}\t90.0\t{t}"
             for i, (ln, x, y, w, h, t) in enumerate(words, 1)]  # fmt: skip
    return "\n".join(rows) + "\n"


def test_tesseract_chinese_words_are_joined_as_its_text_output_writes_them() -> None:
    """chi_sim's TSV splits a line into words that `tesseract ... stdout` writes together:
    no space beside a Chinese or Japanese character; Latin words keep theirs."""
    tsv = _tsv_words((1, 10, 10, 60, 30, "解毒"), (1, 80, 10, 60, 30, "1952"),
                     (1, 150, 10, 30, 30, "年"), (1, 190, 10, 30, 30, "，"),
                     (1, 230, 10, 60, 30, "暴雨"), (2, 10, 60, 80, 30, "Total"),
                     (2, 100, 60, 60, 30, "12.00"))  # fmt: skip
    assert [ln.text for ln in parse_tesseract_tsv(tsv)] == ["解毒1952年，暴雨", "Total 12.00"]


def test_tesseract_columns_are_read_top_down() -> None:
    """jpn_vert's and chi_sim_vert's lines stand: their words run top down, whatever their x."""
    tsv = _tsv_words((1, 2193, 230, 44, 117, "タフ"), (1, 2186, 361, 59, 120, "共和"),
                     (1, 2197, 496, 38, 47, "も"), (2, 2020, 230, 40, 60, "道"),
                     (2, 2016, 300, 44, 60, "徳"))  # fmt: skip
    assert [ln.text for ln in parse_tesseract_tsv(tsv)] == ["タフ共和も", "道徳"]


@pytest.mark.parametrize(
    ("dataset", "language", "tesseract"),
    [("sroie-dev", "en", "eng"), ("a4-en-heldout-10", "en", "eng"),
     ("small-print-dev-10", "en", "eng"), ("a4-zh-heldout-10", "zh", "chi_sim"),
     ("a4-zh-vertical-dev-10", "zh-vertical", "chi_sim_vert"), ("a4-ja-dev-4", "ja", "jpn"),
     ("a4-ja-vertical-heldout-10 scaled 0.5", "ja-vertical", "jpn_vert")],
)  # fmt: skip
def test_each_set_is_read_by_tesseract_in_its_own_language(
    dataset: str, language: str, tesseract: str
) -> None:
    from ocrstream.bench.devsets import language_of
    from ocrstream.bench.engine import TESSERACT_LANGS, _setup

    assert language_of(dataset) == language
    assert TESSERACT_LANGS[language] == tesseract
    assert _setup("tesseract", BenchConfig(language=language), 2).startswith(f"{tesseract} psm3")


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract is not installed")
def test_a_language_tesseract_has_no_model_for_is_an_error_naming_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ocrstream.bench.engine as be

    monkeypatch.setitem(be.TESSERACT_LANGS, "xx", "xyz_vert")
    with pytest.raises(RuntimeError, match=r"apt-get install tesseract-ocr-xyz-vert"):
        be.tesseract_language("xx")
    assert be.tesseract_language("en") == "eng"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract is not installed")
def test_tesseract_reads_a_japanese_column_page_in_its_vertical_model(tmp_path: Path) -> None:
    from ocrstream.bench import devsets
    from ocrstream.bench.engine import tesseract_language

    missing = devsets.requirements("a4-ja-vertical")
    if missing:
        pytest.skip(f"this machine cannot build a4-ja-vertical: {'; '.join(missing)}")
    try:
        tesseract_language("ja-vertical")
    except RuntimeError as e:
        pytest.skip(str(e))
    data, gt = devsets.render_page("a4-ja-vertical", 1)
    path = tmp_path / "ja-vertical.jpg"
    path.write_bytes(data)
    samples = [Sample("ja-vertical", path, gt)]
    run, preds = run_engine("tesseract", BenchConfig(warmup=0, language="ja-vertical"), samples,
                            processes=1)  # fmt: skip
    assert run.error is None
    score(run, preds, samples)
    assert run.cer_norm is not None
    assert run.cer_norm < 0.1  # 0.04 here; words in x order, or spaced out, read 0.89


def test_score_and_table_report_ratios_and_cer() -> None:
    gt = (TextLine("TOTAL 12.00", ((0, 0), (100, 0), (100, 20), (0, 20))),)
    samples = [Sample("p1", Path("/x/p1.jpg"), gt), Sample("p2", Path("/x/p2.jpg"), None)]
    ours = EngineRun(
        "ocrstream",
        "openvino/cpu",
        pages=2,
        wall_s=1.0,
        stage_ms={"decode": 5.0, "det": 100.0, "rec": 300.0},
    )
    theirs = EngineRun("rapidocr", "onnxruntime", pages=2, wall_s=4.0)
    score(ours, {"/x/p1.jpg": [TextLine("Total 12.00", gt[0].polygon)]}, samples)
    score(theirs, {"/x/p1.jpg": [TextLine("TOTAL 1200", gt[0].polygon)]}, samples)
    assert ours.cer_norm == 0.0
    assert ours.cer_raw == pytest.approx(4 / 11, abs=1e-4)
    assert theirs.cer_norm == pytest.approx(1 / 11, abs=1e-4)
    assert ours.counts["pages"] == 1
    table = format_table("demo", [ours, theirs, EngineRun("tesseract", "x", error="boom")])
    assert "ocrstream / rapidocr: 4.00x pages/s, normalised CER -0.0909" in table
    assert "error: boom" in table
    assert ours.to_dict()["pages_per_s"] == 2.0


def test_a_child_that_cannot_start_reports_instead_of_hanging(tmp_path: Path) -> None:
    page = tmp_path / "p.png"
    page.write_bytes(b"not an image")
    run, preds = run_engine(
        "ocrstream", BenchConfig(model="no-such-model"), [Sample("p", page)], processes=2
    )
    assert run.error is not None
    assert "no-such-model" in run.error
    assert preds == {}


def a4_samples(folder: Path, count: int) -> list[Sample]:
    """``count`` rendered 300-DPI A4 pages with their ground truth, written to ``folder``."""
    samples = []
    for i in range(count):
        data, gt = render_a4_page(i)
        path = folder / f"a4-{i}.jpg"
        path.write_bytes(data)
        samples.append(Sample(path.stem, path, gt))
    return samples


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract is not installed")
def test_tesseract_runs_one_process_per_core_on_rendered_pages(tmp_path: Path) -> None:
    samples = a4_samples(tmp_path, 2)
    run, preds = run_engine("tesseract", BenchConfig(warmup=0), samples, processes=2)
    assert run.error is None
    assert run.pages == 2
    assert run.wall_s > 0
    score(run, preds, samples)
    assert run.cer_norm is not None
    assert run.cer_norm < 0.05  # clean 300-DPI print


@pytest.mark.slow
@pytest.mark.parametrize("model", ["ppocrv6-tiny", "ppocrv6-small"])
def test_faster_paddle_runs_beside_ocrstream_on_the_same_pages(tmp_path: Path, model: str) -> None:
    pytest.importorskip("faster_paddle", reason="faster-paddle is not installed (dev extra)")
    samples = a4_samples(tmp_path, 2)
    cfg = BenchConfig(model=model, warmup=0, batch=2, threads=1)
    run, preds = run_engine("faster-paddle", cfg, samples, processes=1)
    assert run.error is None
    assert run.pages == 2
    assert run.setup.startswith(f"bundled v6 {model.rsplit('-', 1)[1]}")
    score(run, preds, samples)
    assert run.cer_norm is not None
    assert run.cer_norm < 0.05  # clean 300-DPI print, read by its own models


def test_rapidocr_on_openvino_is_given_openvino_for_det_and_rec_unpinned() -> None:
    from rapidocr import EngineType

    import ocrstream.bench.engine as be

    cfg = BenchConfig(model="ppocrv6-tiny", threads=3)
    params = be.rapidocr_params(cfg, "openvino")
    assert params["Det.engine_type"] == params["Rec.engine_type"] == EngineType.OPENVINO
    assert params["EngineConfig.openvino.inference_num_threads"] == 3
    assert params["EngineConfig.openvino.enable_cpu_pinning"] is False
    assert params["Rec.rec_keys_path"].endswith(".txt")  # v6 tiny's dictionary is a file apart
    ort = be.rapidocr_params(cfg, "onnxruntime")
    assert "Det.engine_type" not in ort
    assert ort["EngineConfig.onnxruntime.intra_op_num_threads"] == 3
    assert ort["Det.model_path"] == params["Det.model_path"]  # the same files either way


@pytest.mark.slow
@pytest.mark.parametrize(
    ("engine", "module", "threads", "setup"),
    [
        ("onnxocr", "onnxocr", 2, "bundled v6 tiny onnxruntime threads=2 x1 no-cls"),
        ("rapidocr-openvino", "openvino", 1, "openvino ppocrv6-tiny threads=1 x1 no-cls"),
    ],
)
def test_a_peer_runs_beside_ocrstream_on_the_same_pages(
    tmp_path: Path, engine: str, module: str, threads: int, setup: str
) -> None:
    pytest.importorskip(module, reason=f"{module} is not installed")
    samples = a4_samples(tmp_path, 1)
    cfg = BenchConfig(model="ppocrv6-tiny", warmup=0, threads=threads)
    run, preds = run_engine(engine, cfg, samples, processes=1)
    assert run.error is None
    assert run.pages == 1
    assert run.setup == setup
    score(run, preds, samples)
    assert run.cer_norm is not None
    assert run.cer_norm < 0.05  # clean 300-DPI print, v6 tiny (OnnxOCR's own copy of it)


def test_onnxocr_results_become_lines() -> None:
    box = [[10.0, 5.0], [80.0, 5.0], [80.0, 25.0], [10.0, 25.0]]
    lines = onnxocr_lines([[[box, ("first", 0.99)], [box, ("second", 0.8)]]])
    assert [ln.text for ln in lines] == ["first", "second"]
    assert lines[0].polygon == ((10.0, 5.0), (80.0, 5.0), (80.0, 25.0), (10.0, 25.0))
    assert onnxocr_lines([None]) == []  # a page without text
    assert onnxocr_lines([]) == []


def test_faster_paddle_bounds_become_lines_in_reading_order() -> None:
    result = {"bounds": {
        1: {"text": "second", "topLeftCoord": (10, 40), "bottomRightCoord": (90, 60)},
        0: {"text": "first", "topLeftCoord": (10, 5), "bottomRightCoord": (80, 25)},
    }}  # fmt: skip
    lines = faster_paddle_lines(result)
    assert [ln.text for ln in lines] == ["first", "second"]
    assert lines[0].polygon == ((10.0, 5.0), (80.0, 5.0), (80.0, 25.0), (10.0, 25.0))


@pytest.mark.slow
def test_bench_engine_command_on_synthetic_pages(tmp_path: Path) -> None:
    from ocrstream.cli import main

    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "engine",
            "--synthetic-a4",
            "1",
            "--engines",
            "ocrstream",
            "--batch",
            "1",
            "--threads",
            "2",
            "--workdir",
            str(tmp_path),
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "ocrstream" in result.output
    assert f"machine: {machine()['cpu']}" in result.output  # every result names its CPU
    report = json.loads(out.read_text())
    run = report["datasets"]["synthetic-a4-1"]["runs"][0]
    assert run["error"] is None
    assert run["pages"] == 1
    assert run["pages_per_s"] > 0
    assert run["cer_norm"] < 0.05
    assert {"decode", "det", "rec"} <= set(run["stage_ms"])
    assert run["peak_rss_mb"] > 50
    assert report["machine"]["cores"] >= 1
    assert report["command"].startswith("ocrstream bench engine")
    assert report["complete"] is True


def test_each_finished_dataset_is_reported_before_the_next_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run stopped part-way (a lent machine's time limit) still leaves the datasets it
    finished: the CLI writes the report after each, marked incomplete."""
    import ocrstream.bench.engine as be
    from ocrstream.cli import main

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "p.png").write_bytes(b"")
    seen: list[list[str]] = []
    out = tmp_path / "bench.json"

    def fake_run(engine: str, cfg: BenchConfig, samples: list, processes: int) -> object:
        if out.exists():  # the JSON of the datasets before this one is already there
            seen.append(list(json.loads(out.read_text())["datasets"]))
        if samples[0].path.parent.name == "b":
            raise KeyboardInterrupt  # stopped during the second dataset
        return EngineRun(engine=engine, setup="x", pages=1, wall_s=1.0), {}

    monkeypatch.setattr(be, "run_engine", fake_run)
    monkeypatch.setattr(be, "available", lambda engine: True)
    args = ["bench", "engine", "--dataset", str(tmp_path / "a"), "--dataset", str(tmp_path / "b")]
    result = CliRunner().invoke(main, [*args, "--engines", "ocrstream", "--json", str(out)])
    assert result.exit_code != 0
    assert seen == [["a"]]
    report = json.loads(out.read_text())
    assert report["complete"] is False
    assert list(report["datasets"]) == ["a"]
    assert report["datasets"]["a"]["runs"][0]["pages_per_s"] == 1.0


def test_bilevel_reads_a_1_bit_copy_of_each_set_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ocrstream.bench.engine as be
    from ocrstream.cli import main

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        cv2.imwrite(str(tmp_path / name / "p.png"), np.full((20, 40), 200, np.uint8))
    read: list[tuple[str, str]] = []

    def fake_run(engine: str, cfg: BenchConfig, samples: list, processes: int) -> object:
        with Image.open(samples[0].path) as im:
            read.append((samples[0].path.parent.name, im.mode))
        return EngineRun(engine=engine, setup="x", pages=1, wall_s=1.0), {}

    monkeypatch.setattr(be, "run_engine", fake_run)
    monkeypatch.setattr(be, "available", lambda engine: True)
    out = tmp_path / "bench.json"
    args = ["bench", "engine", "--dataset", str(tmp_path / "a"), "--dataset", str(tmp_path / "b")]
    work = tmp_path / "work"
    result = CliRunner().invoke(
        main,
        [*args, "--bilevel", "--workdir", str(work), "--engines", "ocrstream", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert list(json.loads(out.read_text())["datasets"]) == ["a", "a 1-bit", "b", "b 1-bit"]
    assert read == [("a", "L"), ("1-bit-0", "1"), ("b", "L"), ("1-bit-1", "1")]


def test_scaled_reads_each_set_rescanned_after_it_and_bilevel_copies_those_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ocrstream.bench.engine as be
    from ocrstream.cli import main

    (tmp_path / "a").mkdir()
    cv2.imwrite(str(tmp_path / "a" / "p.png"), np.full((20, 40), 200, np.uint8))
    read: list[tuple[str, tuple[int, int], str]] = []

    def fake_run(engine: str, cfg: BenchConfig, samples: list, processes: int) -> object:
        with Image.open(samples[0].path) as im:
            read.append((samples[0].path.parent.name, im.size, im.mode))
        return EngineRun(engine=engine, setup="x", pages=1, wall_s=1.0), {}

    monkeypatch.setattr(be, "run_engine", fake_run)
    monkeypatch.setattr(be, "available", lambda engine: True)
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        main,
        ["bench", "engine", "--dataset", str(tmp_path / "a"), "--scaled", "0.5", "--bilevel",
         "--workdir", str(tmp_path / "work"), "--engines", "ocrstream", "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert list(json.loads(out.read_text())["datasets"]) == [
        "a", "a 1-bit", "a scaled 0.5", "a scaled 0.5 1-bit"
    ]  # fmt: skip
    assert read == [
        ("a", (40, 20), "L"),
        ("1-bit-0", (40, 20), "1"),
        ("scaled-0.5-0", (20, 10), "L"),
        ("1-bit-1", (20, 10), "1"),
    ]
    refused = CliRunner().invoke(main, ["bench", "engine", "--dataset", str(tmp_path / "a"),
                                        "--scaled", "0"])  # fmt: skip
    assert refused.exit_code != 0
    assert "--scaled" in refused.output


def test_bench_group_lists_engine_and_the_pipeline_slot() -> None:
    from ocrstream.cli import main

    result = CliRunner().invoke(main, ["bench", "--help"])
    assert result.exit_code == 0
    assert "engine" in result.output
    missing = CliRunner().invoke(main, ["bench", "engine"])
    assert missing.exit_code != 0
    assert "--synthetic-a4" in missing.output


def test_rounds_alternate_the_engines_and_report_each_ones_median(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine whose speed drifts, --rounds runs A B, B A, A B and quotes medians."""
    import ocrstream.bench.engine as be

    samples = [Sample(name="p", path=tmp_path / "p.png", gt=(TextLine("Total", SQUARE),))]
    walls = {"ocrstream": [1.0, 4.0, 2.0], "rapidocr": [3.0, 9.0, 6.0]}
    calls: list[str] = []

    def fake_run(engine: str, cfg: BenchConfig, s: object, processes: int) -> object:
        calls.append(engine)
        run = EngineRun(engine=engine, setup="x", pages=1, wall_s=walls[engine].pop(0))
        text = "Total" if engine == "ocrstream" else "Tota1"
        return run, {str(samples[0].path): [TextLine(text, SQUARE)]}

    monkeypatch.setattr(be, "run_engine", fake_run)
    monkeypatch.setattr(be, "available", lambda engine: True)
    report = be.bench({"set": samples}, BenchConfig(), ["ocrstream", "rapidocr"], rounds=3)
    assert calls == ["ocrstream", "rapidocr", "rapidocr", "ocrstream", "ocrstream", "rapidocr"]
    ours, peer = report["datasets"]["set"]["runs"]
    assert ours["pages_per_s"] == 0.5  # median wall 2.0 s of 1.0 / 4.0 / 2.0
    assert peer["pages_per_s"] == pytest.approx(1 / 6, abs=1e-4)
    assert ours["round_pages_per_s"] == [1.0, 0.25, 0.5]
    assert (ours["cer_norm"], peer["cer_norm"]) == (0.0, 0.2)
    table = report["datasets"]["set"]["table"]
    assert "ocrstream / rapidocr: 3.00x pages/s" in table
    assert "median of 3 rounds" in table
    walls["ocrstream"] = [1.0]
    single = be.bench({"set": samples}, BenchConfig(), ["ocrstream"], rounds=1)
    assert "round_pages_per_s" not in single["datasets"]["set"]["runs"][0]


def test_an_engine_in_a_layout_of_its_own_runs_in_it_beside_the_same_engine_in_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """faster-paddle@1x2 and @2x1 run side by side; ocrstream keeps the run's layout."""
    import ocrstream.bench.engine as be

    samples = [Sample(name="p", path=tmp_path / "p.png", gt=(TextLine("Total", SQUARE),))]
    layouts: list[tuple[str, int, int]] = []

    def fake_run(engine: str, cfg: BenchConfig, s: object, processes: int) -> object:
        layouts.append((engine, processes, cfg.threads))
        wall = {("faster-paddle", 1, 2): 4.0, ("faster-paddle", 2, 1): 3.0}.get(
            (engine, processes, cfg.threads), 2.0
        )
        run = EngineRun(engine=engine, setup="x", pages=1, wall_s=wall)
        return run, {str(samples[0].path): [TextLine("Total", SQUARE)]}

    monkeypatch.setattr(be, "run_engine", fake_run)
    monkeypatch.setattr(be, "available", lambda engine: True)
    cfg = BenchConfig(threads=1, processes=2)
    engines = ["ocrstream", "faster-paddle@1x2", "faster-paddle@2x1"]
    report = be.bench({"set": samples}, cfg, engines)
    assert layouts == [("ocrstream", 2, 1), ("faster-paddle", 1, 2), ("faster-paddle", 2, 1)]
    runs = report["datasets"]["set"]["runs"]
    assert [r["engine"] for r in runs] == engines
    table = report["datasets"]["set"]["table"]
    assert "ocrstream / faster-paddle@1x2: 2.00x pages/s" in table
    assert "ocrstream / faster-paddle@2x1: 1.50x pages/s" in table
    assert "faster-paddle@1x2 / " not in table  # peers are not compared with each other


def test_an_engine_with_a_model_set_of_its_own_reads_with_it_beside_the_runs_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ocrstream:SET runs with SET whatever the run's model; the others keep the run's."""
    import ocrstream.bench.engine as be

    samples = [Sample(name="p", path=tmp_path / "p.png", gt=(TextLine("Total", SQUARE),))]
    models: list[tuple[str, str, int]] = []

    def fake_run(engine: str, cfg: BenchConfig, s: object, processes: int) -> object:
        models.append((engine, cfg.model, processes))
        wall = 1.0 if cfg.model == "ppocrv6-small-tinydet" else 2.0
        run = EngineRun(engine=engine, setup="x", pages=1, wall_s=wall)
        return run, {str(samples[0].path): [TextLine("Total", SQUARE)]}

    monkeypatch.setattr(be, "run_engine", fake_run)
    monkeypatch.setattr(be, "available", lambda engine: True)
    engines = ["ocrstream", "ocrstream:ppocrv6-small-tinydet@2x1", "faster-paddle"]
    report = be.bench({"set": samples}, BenchConfig(model="ppocrv6-small"), engines)
    assert models == [
        ("ocrstream", "ppocrv6-small", 1),
        ("ocrstream", "ppocrv6-small-tinydet", 2),
        ("faster-paddle", "ppocrv6-small", 1),
    ]
    assert [r["engine"] for r in report["datasets"]["set"]["runs"]] == engines
    table = report["datasets"]["set"]["table"]
    assert "ocrstream:ppocrv6-small-tinydet@2x1 / faster-paddle: 2.00x pages/s" in table
    assert "ocrstream / faster-paddle: 1.00x pages/s" in table
    with pytest.raises(ValueError, match="unknown model set 'ppocrv9'"):
        be.EngineSpec.parse("ocrstream:ppocrv9")


@pytest.mark.parametrize(
    "bad", ["faster-paddle@2", "faster-paddle@0x1", "paddle@1x1", "ocrstream@x"]
)
def test_a_malformed_engine_layout_is_refused_with_what_to_write(bad: str) -> None:
    from ocrstream.bench.engine import EngineSpec

    with pytest.raises(ValueError, match=r"layout|unknown engine"):
        EngineSpec.parse(bad)
    assert EngineSpec.parse("faster-paddle@2x1").label == "faster-paddle@2x1"
    assert EngineSpec.parse("rapidocr") == EngineSpec("rapidocr")


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract is not installed")
def test_passes_time_each_run_over_the_same_pages_and_keep_the_first_ones_text(
    tmp_path: Path,
) -> None:
    samples = a4_samples(tmp_path, 2)
    run, preds = run_engine("tesseract", BenchConfig(warmup=0, passes=3), samples, processes=2)
    assert run.error is None
    assert run.pages == 2
    assert run.wall_s > 0
    assert run.warm_wall_s > 0
    assert run.to_dict()["warm_pages_per_s"] == pytest.approx(2 / run.warm_wall_s, abs=1e-3)
    assert sorted(preds) == sorted(str(s.path) for s in samples)
    single, _ = run_engine("tesseract", BenchConfig(warmup=0), samples, processes=1)
    assert single.warm_wall_s == 0.0
    assert "warm_pages_per_s" not in single.to_dict()


def test_warm_pages_per_s_are_reported_beside_the_first_pass_and_in_the_ratios(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--passes: the table gains a warm column and each ratio its warm figure, medians over
    rounds like the first pass's."""
    import ocrstream.bench.engine as be

    samples = [Sample(name="p", path=tmp_path / "p.png", gt=(TextLine("Total", SQUARE),))]
    walls = {"ocrstream": [(2.0, 1.0), (4.0, 2.0), (3.0, 1.5)], "rapidocr": [(3.0, 3.0)] * 3}

    def fake_run(engine: str, cfg: BenchConfig, s: object, processes: int) -> object:
        first, last = walls[engine].pop(0)
        run = EngineRun(engine=engine, setup="x", pages=1, wall_s=first, warm_wall_s=last)
        return run, {str(samples[0].path): [TextLine("Total", SQUARE)]}

    monkeypatch.setattr(be, "run_engine", fake_run)
    monkeypatch.setattr(be, "available", lambda engine: True)
    report = be.bench({"set": samples}, BenchConfig(passes=2), ["ocrstream", "rapidocr"], rounds=3)
    ours = report["datasets"]["set"]["runs"][0]
    assert ours["pages_per_s"] == pytest.approx(1 / 3, abs=1e-4)  # median first pass 3.0 s
    assert ours["warm_pages_per_s"] == pytest.approx(1 / 1.5, abs=1e-4)  # median last 1.5 s
    table = report["datasets"]["set"]["table"]
    assert "ocrstream / rapidocr: 1.00x pages/s (2.00x warm)" in table
    assert "warm: its last pass over the same pages" in table
    header = table.splitlines()[1]
    assert header.split()[3:5] == ["pages/s", "warm"]


_KILLED_BENCH = """
import sys
from pathlib import Path
from ocrstream.bench.datasets import Sample
from ocrstream.bench.engine import BenchConfig, run_engine
page = Path(sys.argv[1])
run_engine("ocrstream", BenchConfig(threads=1, warmup=0, passes=100000), [Sample("p", page)], 2)
"""


def _children(parent: int) -> list[int]:
    """The pids whose parent is ``parent`` and that run multiprocessing's spawn main (the
    bench's engine children; not its resource tracker)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == parent and fields[0] != "Z" and b"spawn_main" in cmdline:
            found.append(int(proc.name))
    return found


def test_a_killed_bench_leaves_no_engine_child_running(tmp_path: Path) -> None:
    """Killing ``ocrstream bench engine`` (Ctrl-C twice, SIGKILL, a timeout) must not leave its
    engine children reading pages: they would compete for the CPU with the next bench."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys

    from tests.polling import pid_alive, wait_until

    (sample,) = a4_samples(tmp_path, 1)
    parent = subprocess.Popen([sys.executable, "-c", _KILLED_BENCH, str(sample.path)])
    try:
        wait_until(lambda: len(_children(parent.pid)) == 2, 60, "the two engine children")
        children = _children(parent.pid)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()

    try:
        wait_until(lambda: not any(pid_alive(pid) for pid in children), 30,
                   "the engine children to exit with the killed bench")  # fmt: skip
    finally:  # a failing run must not leave them reading pages into the next tests
        for pid in children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx avx2 fma

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: something else
"""
SAPPHIRE = """vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: avx2 avx512f avx512_vnni avx_vnni avx512_bf16 amx_tile amx_bf16
"""
GRAVITON = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics
CPU implementer\t: 0x41
"""


@pytest.mark.parametrize(
    ("cpuinfo", "expected"),
    [
        (ZEN3, "AMD EPYC (AuthenticAMD family 25 model 1: AVX2)"),
        (
            SAPPHIRE,
            "Intel(R) Xeon(R) Platinum 8480+ (GenuineIntel family 6 model 143: AVX-512, VNNI, "
            "AVX-VNNI, BF16, AMX)",
        ),
    ],
)
def test_every_result_names_the_cpu_even_where_a_vm_hides_its_model(
    cpuinfo: str, expected: str
) -> None:
    """A VM's "AMD EPYC" says neither the generation nor the extensions that set the speed
    (Zen 3: AVX2 only; Zen 4 and 5: AVX-512 with VNNI and BF16): results carry both."""
    assert describe_cpu(cpuinfo) == expected


def test_a_cpu_without_a_model_name_is_named_by_the_platform() -> None:
    assert describe_cpu(GRAVITON) in {platform.processor(), platform.machine()}
    assert describe_cpu("")


def test_the_engine_runs_in_the_precision_the_environment_names_unless_the_flag_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OCRSTREAM_OCR_PRECISION=fp32 ocrstream bench engine`` measures fp32 (a flag default
    once replaced it with fp16 unseen), and the report's setup says so."""
    import ocrstream.bench.engine as be
    from ocrstream.cli import main

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "p.png").write_bytes(b"")
    seen: list[BenchConfig] = []

    def fake_run(engine: str, cfg: BenchConfig, samples: list, processes: int) -> object:
        seen.append(cfg)
        return EngineRun(engine=engine, setup=be._setup(engine, cfg, processes), pages=1,
                         wall_s=1.0), {}  # fmt: skip

    monkeypatch.setattr(be, "run_engine", fake_run)
    monkeypatch.setattr(be, "available", lambda engine: True)
    args = ["bench", "engine", "--dataset", str(tmp_path / "a"), "--engines", "ocrstream"]
    monkeypatch.setenv("OCRSTREAM_OCR_PRECISION", "fp32")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "ocrstream" in result.output
    assert " fp32 " in result.output  # in the setup column
    assert CliRunner().invoke(main, [*args, "--precision", "bf16"]).exit_code == 0
    monkeypatch.delenv("OCRSTREAM_OCR_PRECISION")
    assert CliRunner().invoke(main, args).exit_code == 0
    assert [cfg.precision for cfg in seen] == ["fp32", "bf16", "fp16"]


@pytest.mark.parametrize("rotation", [0, 90, 180, 270])
def test_a_page_the_engine_turned_is_scored_where_its_ground_truth_is(rotation: int) -> None:
    """The engine's lines on a page it turned upright lie in the turned page's pixels; the
    bench puts them back in the pixels of the image it was given, where the ground truth is."""
    from ocrstream.bench.engine import _page_lines
    from ocrstream.processors.ocr.types import Line, PageOCR

    source = np.zeros((60, 100), np.uint8)
    source[10:14, 20:50] = 255  # a line near the top left of the image as given
    upright = np.rot90(source, k=-rotation // 90)  # what the engine read: turned clockwise
    ys, xs = np.nonzero(upright)
    x0, y0, x1, y1 = float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)
    h, w = upright.shape
    line = Line(text="x", confidence=1.0, polygon=((x0, y0), (x1, y0), (x1, y1), (x0, y1)))
    page = PageOCR(width=w, height=h, lines=(line,), rotation=rotation)
    ((scored,), _) = _page_lines(page)
    pts = np.array(scored.polygon)
    assert (pts.min(axis=0).tolist(), pts.max(axis=0).tolist()) == ([20, 10], [50, 14])


@pytest.mark.parametrize(
    ("missing", "rapidocr", "rapidocr_openvino"),
    [(None, True, True), ("openvino", True, False), ("onnxruntime", False, True)],
)
def test_rapidocr_peer_needs_its_runtime(
    monkeypatch: pytest.MonkeyPatch, missing: str | None, rapidocr: bool, rapidocr_openvino: bool
) -> None:
    """A RapidOCR peer counts as installed only with the runtime it runs on: without
    OpenVINO the bench names `pip install rapidocr openvino` instead of failing mid-run."""
    import importlib.util

    import ocrstream.bench.engine as be

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name, *a)
    )
    assert be.available("rapidocr") is rapidocr
    assert be.available("rapidocr-openvino") is rapidocr_openvino
