"""``auto`` on the CPU follows a measurement per machine and stage, kept in the engine cache."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from ocrstream.processors.ocr.backends import choice, create_stages, resolve
from ocrstream.processors.ocr.models import load_model_set
from ocrstream.settings import OcrSettings
from tests.fakes.clock import FakeClock
from tests.fakes.engines import cer, render_text_page

HAS_OPENVINO = importlib.util.find_spec("openvino") is not None
needs_both = pytest.mark.skipif(
    not HAS_OPENVINO, reason="auto chooses only when OpenVINO and onnxruntime are installed"
)


# The fake sessions take their times scaled by this: the tests below give them in the units
# that read best (tens of milliseconds), and what they assert depends only on their ratios.
TIME_SCALE = 0.25


# The measurement's timer while fake sessions run: a run advances it by exactly the time its
# session says, so a race between fake backends comes out the same on a machine busy with other
# tests (with real sleeps, a candidate 3x slower once landed within 1.25x of the fastest under
# CI's load and ran a second round).
CLOCK = FakeClock()


@pytest.fixture
def virtual_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(choice, "clock", CLOCK)


class _Timed:
    """A session that takes ``delay_s`` per run (how slow a backend is on this fake CPU),
    times :data:`TIME_SCALE`, on the virtual clock."""

    backend = "fake"
    device = "cpu"
    concurrency = 1

    def __init__(
        self, delay_s: float, stage: str = "", new_shape_s: float = 0.0, column_s: float = 0.0
    ) -> None:
        self.delay_s = delay_s
        self.new_shape_s = new_shape_s  # what preparing a shape met for the first time costs
        self.column_s = column_s  # and each pixel column of a batch (lines x width)
        self.stage = stage
        self.order: list[tuple[int, ...]] = []  # the shape of each run, in order

    @property
    def runs(self) -> int:
        return len(self.order)

    @property
    def shapes(self) -> set[tuple[int, ...]]:
        return set(self.order)

    def run(self, batch: np.ndarray) -> np.ndarray:
        first = batch.shape not in self.order
        self.order.append(batch.shape)
        columns = batch.shape[0] * batch.shape[-1]
        wait = self.delay_s + (self.new_shape_s if first else 0.0) + self.column_s * columns
        CLOCK.advance(wait * TIME_SCALE)
        return batch


def _loader(  # type: ignore[no-untyped-def]
    slow: dict[tuple[str, str], float],
    made: list[_Timed],
    new_shape: dict[tuple[str, str], float] | None = None,
):
    def load(key: str, stage: str) -> _Timed:
        prepare = (new_shape or {}).get((key, stage), 0.0)
        session = _Timed(slow.get((key, stage), 0.0), stage, prepare)
        made.append(session)
        return session

    return load


# OpenVINO's det fast and its rec slow: the choice is per stage.
SLOW = {("openvino", "rec"): 0.02, ("onnxruntime", "det"): 0.08}


@pytest.fixture
def both_installed(monkeypatch: pytest.MonkeyPatch, virtual_time: None) -> None:
    monkeypatch.setattr(choice, "installed", lambda: ("openvino", "onnxruntime"))
    # a CPU without bf16: det chooses between the two backends alone (a test may say otherwise)
    monkeypatch.setattr(choice, "_cpuinfo", lambda: ("Some CPU", "avx2 fma sse4_2"))


def _settings(tmp_path: Path, **kw: object) -> OcrSettings:
    values: dict[str, object] = {"model": "ppocrv6-tiny", "threads": 1, **kw}
    return OcrSettings(engine_cache_dir=tmp_path, **values)  # type: ignore[arg-type]


def test_each_stage_takes_the_backend_measured_faster(tmp_path: Path, both_installed: None):
    settings = _settings(tmp_path)
    made: list[_Timed] = []
    found = choice.choose(settings, load_model_set("ppocrv6-tiny"), loader=_loader(SLOW, made))
    assert found.stages == {"det": "openvino", "rec": "onnxruntime"}
    assert found.measured
    assert found.seconds["rec"]["openvino"] >= 0.02 > found.seconds["rec"]["onnxruntime"]
    shapes = choice.input_shapes(settings)
    # a warm-up, then a round: the inputs warm and one input per shape never met before; the
    # other backend was far behind in each stage after it, so no second round
    assert all(s.runs == (1 + 2) * len(shapes[s.stage]) for s in made)
    kept = json.loads(found.path.read_text())
    assert kept["stages"] == found.stages
    assert kept["machine"]["threads"] == 1
    assert kept["machine"]["cpu"] == choice.cpu_identity()[0]


def test_a_close_race_runs_every_round_and_a_far_slower_candidate_drops_out(
    tmp_path: Path, both_installed: None, monkeypatch: pytest.MonkeyPatch
):
    """Three candidates: two within a few percent of each other race every round (the rounds
    are what tells them apart); one far slower after the first round sits out the rest, as a
    stage stops when one candidate is left (bf16 1.6x ahead of both fp32 backends on a Zen 4)."""
    monkeypatch.setattr(choice, "_cpuinfo", lambda: ("Some CPU", "avx512f avx512_bf16"))
    bf16 = choice.OPENVINO_BF16
    slow = {("openvino", "det"): 0.030, ("onnxruntime", "det"): 0.031, (bf16, "det"): 0.090,
            ("openvino", "rec"): 0.0016, ("onnxruntime", "rec"): 0.0015,
            (bf16, "rec"): 0.0010}  # fmt: skip
    made: dict[tuple[str, str], _Timed] = {}

    def load(key: str, stage: str) -> _Timed:
        made[(key, stage)] = _Timed(slow[(key, stage)], stage)
        return made[(key, stage)]

    settings = _settings(tmp_path)
    found = choice.choose(settings, load_model_set("ppocrv6-tiny"), loader=load)
    shapes = choice.input_shapes(settings)
    # each round runs the inputs warm and one input per new shape, after one warm-up
    rounds = {ks: (s.runs // len(shapes[ks[1]]) - 1) // 2 for ks, s in made.items()}
    assert rounds[("openvino", "det")] == rounds[("onnxruntime", "det")] == choice.ROUNDS
    assert rounds[(bf16, "det")] == 1
    assert found.stages["det"] in ("openvino", "onnxruntime")
    # rec: bf16 a third ahead of both after the first round; the stage stops there
    assert {rounds[(k, "rec")] for k in ("openvino", "onnxruntime", bf16)} == {1}
    assert found.stages["rec"] == bf16
    # every candidate is reported, the ones that dropped out by the rounds they ran
    assert found.seconds["det"][bf16] > choice.DROP_ABOVE * found.seconds["det"]["openvino"]
    assert set(found.seconds["rec"]) == {"openvino", "onnxruntime", bf16}


def test_it_measures_the_shapes_the_engine_runs(tmp_path: Path, both_installed: None):
    """Det a full page at the engine's pixel budget, rec whole batches of short and of long
    lines: on a small det input the other backend can win (it did, on an AMD EPYC)."""
    settings = _settings(tmp_path, det_limit_side=1280)
    made: list[_Timed] = []
    choice.choose(settings, load_model_set("ppocrv6-tiny"), loader=_loader({}, made))
    det = set().union(*(s.shapes for s in made if s.stage == "det"))
    rec = set().union(*(s.shapes for s in made if s.stage == "rec"))
    # an A4 page at a 1,280-px budget (1280 x 905, snapped), and per round one page shorter
    assert det == {(1, 3, 1280, 896), (1, 3, 1248, 896), (1, 3, 1216, 896)}
    # the batches the engine plans for a page of lines: many, each one width bucket, within
    # the engine's limits, from a receipt's narrow fields to lines across an A4 page
    warm = choice.input_shapes(settings)["rec"]
    assert len(warm) >= 10
    widths = {shape[3] for shape in warm}
    assert min(widths) <= 128
    assert max(widths) >= 1600
    assert all(width % 32 == 0 for width in widths)
    # on the CPU one line per batch, as the engine runs them there: a shape per width bucket
    assert {n for n, *_ in rec} == {1}
    assert len(warm) == sum(count for count, _ in choice.REC_PAGE_LINES)
    # with lines batched (rec_batch), batches of several lines within the engine's limits
    batched = _settings(tmp_path, det_limit_side=1280, rec_batch=64)
    many = choice.input_shapes(batched)["rec"]
    assert all(n * w <= batched.rec_batch_pixels and n <= 64 for n, _, _, w in many)
    assert {n for n, *_ in many} >= {1, 2}
    assert max(n for n, *_ in many) > 4
    assert {shape[3] for shape in many} == widths
    # and per round the same lines in the next width buckets
    assert {shape[3] for shape in rec} == {w + 32 * r for w in widths for r in (0, 1, 2)}
    # Another budget is another measurement, kept apart.
    other = choice.choose(
        _settings(tmp_path), load_model_set("ppocrv6-tiny"), loader=_loader({}, [])
    )
    assert other.measured


def test_rec_goes_to_the_backend_faster_on_a_pages_many_small_batches(
    tmp_path: Path, both_installed: None
):
    """A page's rec batches are many and small (17 on a receipt, 1 to 13 lines each). A backend
    that costs more per run and less per column would win on a few large batches (as
    OpenVINO tied on a Zen 3) and lose on the page, where it lost: rec goes to the other."""
    made: list[_Timed] = []

    def load(key: str, stage: str) -> _Timed:
        per_run, per_column = (0.006, 0.0) if key == "openvino" else (0.001, 2e-6)
        session = _Timed(per_run, stage, column_s=per_column if stage == "rec" else 0.0)
        made.append(session)
        return session

    found = choice.choose(_settings(tmp_path), load_model_set("ppocrv6-tiny"), loader=load)
    assert found.stages["rec"] == "onnxruntime"
    # on two large batches (12 lines of 320 px, 2 of 1,600: what format 7 measured) the same
    # two sessions rank the other way
    big = [(12, 3, 48, 320), (2, 3, 48, 1600)]
    ov, ort = (load(k, "rec") for k in ("openvino", "onnxruntime"))
    for session in (ov, ort):
        session.new_shape_s = 0.0
    cost = {
        name: sum(s.delay_s + s.column_s * n * w for n, _, _, w in big)
        for name, s in (("openvino", ov), ("onnxruntime", ort))
    }
    assert cost["openvino"] < cost["onnxruntime"]


def test_a_backend_that_prepares_each_new_shape_pays_for_it_in_the_measurement(
    tmp_path: Path, both_installed: None
):
    """Warm alone, OpenVINO's rec would win here by a little; it pays for every shape it meets
    for the first time (as it does: 7-20 ms a rec batch) and onnxruntime does not, so rec
    goes to onnxruntime. Det, far faster on OpenVINO warm, stays there despite the same cost.
    (Lines batched as on a GPU: every batch of a round is a shape of its own.)"""
    slow = {("openvino", "rec"): 0.010, ("onnxruntime", "rec"): 0.014,
            ("openvino", "det"): 0.010, ("onnxruntime", "det"): 0.060}  # fmt: skip
    prepare = {("openvino", "rec"): 0.060, ("openvino", "det"): 0.060}
    made: list[_Timed] = []
    found = choice.choose(
        _settings(tmp_path, rec_batch=64),
        load_model_set("ppocrv6-tiny"),
        loader=_loader(slow, made, prepare),
    )
    assert found.stages == {"det": "openvino", "rec": "onnxruntime"}
    new = found.new_shape_seconds
    batches = len(choice.input_shapes(_settings(tmp_path, rec_batch=64))["rec"])
    least, most = batches * 0.040 * TIME_SCALE, batches * 0.020 * TIME_SCALE
    assert new["rec"]["openvino"] >= least > most > new["rec"]["onnxruntime"]
    # warm time + new shapes, weighed by how often the engine meets them
    weighed = choice.NEW_SHAPE_WEIGHT["rec"] * new["rec"]["openvino"]
    # (exact on the virtual clock, but for the kept times' four decimals)
    warm_and_new = batches * 0.010 * TIME_SCALE + weighed
    assert found.seconds["rec"]["openvino"] == pytest.approx(warm_and_new, abs=1e-4)
    # each session met the same new shapes, once each, never among the warm ones
    settings = _settings(tmp_path, rec_batch=64)
    warm = choice.input_shapes(settings)
    for stage in ("det", "rec"):
        sessions = [s for s in made if s.stage == stage]
        fresh = [shape for s in sessions for shape in s.order if shape not in warm[stage]]
        assert len(fresh) == len(set(fresh)) * len(sessions)
        assert {shape for s in sessions for shape in s.shapes} >= set(warm[stage])
        assert all(n * w <= settings.rec_batch_pixels for n, _, _, w in fresh if stage == "rec")
    # kept with the choice, and read back
    again = choice.choose(settings, load_model_set("ppocrv6-tiny"))
    assert (again.measured, again.new_shape_seconds) == (False, new)


def test_rec_new_shapes_weigh_less_than_its_warm_runs(tmp_path: Path, both_installed: None):
    """One line per batch, a stream meets a new rec shape in about one run in five on a first
    pass over A4 pages, and fewer later: a backend whose warm rec is faster takes rec although
    it prepares each new shape (OpenVINO in bf16 on a Zen 5), where weighing the new shapes as
    much as the warm runs gave rec to the other. Det pages are mostly new shapes: weighed fully."""
    slow = {("openvino", "rec"): 0.010, ("onnxruntime", "rec"): 0.014,
            ("openvino", "det"): 0.010, ("onnxruntime", "det"): 0.014}  # fmt: skip
    prepare = {("openvino", "rec"): 0.060, ("openvino", "det"): 0.060}
    found = choice.choose(
        _settings(tmp_path), load_model_set("ppocrv6-tiny"), loader=_loader(slow, [], prepare)
    )
    assert found.stages == {"det": "onnxruntime", "rec": "openvino"}
    assert choice.NEW_SHAPE_WEIGHT["rec"] < choice.NEW_SHAPE_WEIGHT["det"] == 1.0
    new = found.new_shape_seconds["rec"]
    fully = {k: found.seconds["rec"][k] + (1 - choice.NEW_SHAPE_WEIGHT["rec"]) * new[k]
             for k in new}  # fmt: skip
    assert fully["openvino"] > fully["onnxruntime"]


def test_one_line_per_rec_batch_meets_a_new_shape_per_width_not_per_batch(
    tmp_path: Path, both_installed: None
):
    """On the CPU the engine runs each line alone, so a page's lines meet one shape per width
    bucket; batched, every (lines, width) is one more. A backend that prepares each new shape
    pays for fewer of them, and the measurement counts them as the engine meets them. (Both
    backends prepare shapes here, so neither falls behind and drops out before the last round.)"""
    prepare = {("openvino", "rec"): 0.030, ("onnxruntime", "rec"): 0.030}
    single: list[_Timed] = []
    one = choice.choose(_settings(tmp_path), load_model_set("ppocrv6-tiny"),
                        loader=_loader({}, single, prepare))  # fmt: skip
    batched: list[_Timed] = []
    many = choice.choose(_settings(tmp_path, rec_batch=64), load_model_set("ppocrv6-tiny"),
                         loader=_loader({}, batched, prepare))  # fmt: skip
    widths = {w for _, w in choice.REC_PAGE_LINES}

    def met(sessions: list[_Timed]) -> set[tuple[int, ...]]:
        return next(s for s in sessions if s.stage == "rec" and s.new_shape_s).shapes

    assert {shape[0] for shape in met(single)} == {1}
    # the warm-up's widths and each round's next buckets: a shape per width and round
    assert len(met(single)) == len({w + 32 * r for w in widths for r in range(choice.ROUNDS + 1)})
    assert len(met(batched)) > len(met(single))
    assert one.new_shape_seconds["rec"]["openvino"] < many.new_shape_seconds["rec"]["openvino"]


def test_a_kept_choice_is_reused_and_a_new_thread_count_is_measured(
    tmp_path: Path, both_installed: None
):
    models = load_model_set("ppocrv6-tiny")
    first = choice.choose(_settings(tmp_path), models, loader=_loader(SLOW, []))
    made: list[_Timed] = []
    again = choice.choose(_settings(tmp_path), models, loader=_loader({}, made))
    assert (again.measured, again.stages, made) == (False, first.stages, [])
    other = choice.choose(_settings(tmp_path, threads=2), models, loader=_loader({}, made))
    assert other.measured
    assert other.path != first.path
    remeasured = choice.choose(
        _settings(tmp_path), models, remeasure=True, loader=_loader({("openvino", "det"): 0.08}, [])
    )
    assert remeasured.measured
    assert remeasured.stages["det"] == "onnxruntime"
    assert choice.choose(_settings(tmp_path), models).stages == remeasured.stages


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "",
        json.dumps(
            {
                "format": 1,
                "key": "0" * 64,
                "stages": {"det": "openvino", "rec": "openvino"},
                "seconds": {"det": {}, "rec": {}},
                "machine": {},
            }
        ),
        "FOREIGN_STAGES",
    ],
    ids=["corrupt", "empty", "foreign-key", "backend-not-installed"],
)
def test_a_corrupt_or_foreign_file_is_ignored_and_measured_again(
    tmp_path: Path, both_installed: None, content: str
):
    models = load_model_set("ppocrv6-tiny")
    settings = _settings(tmp_path)
    first = choice.choose(settings, models, loader=_loader(SLOW, []))
    if content == "FOREIGN_STAGES":  # written where tensorrt was chosen: not installed here
        data = json.loads(first.path.read_text())
        data["stages"] = {"det": "tensorrt", "rec": "tensorrt"}
        content = json.dumps(data)
    first.path.write_text(content)
    made: list[_Timed] = []
    again = choice.choose(settings, models, loader=_loader(SLOW, made))
    assert again.measured
    assert made
    assert again.stages == {"det": "openvino", "rec": "onnxruntime"}
    assert json.loads(first.path.read_text())["stages"] == again.stages  # repaired


def test_an_unwritable_cache_still_gives_a_measured_choice(tmp_path: Path, both_installed: None):
    """A read-only engine cache (here a file where the folder should be) does not stop the
    engine: the choice is measured and used, and kept nowhere."""
    blocked = tmp_path / "cache"
    blocked.write_text("not a folder")
    models = load_model_set("ppocrv6-tiny")
    found = choice.choose(_settings(blocked), models, loader=_loader(SLOW, []))
    assert found.measured
    assert found.stages == {"det": "openvino", "rec": "onnxruntime"}
    assert choice.choose(_settings(blocked), models, loader=_loader(SLOW, [])).measured


def test_a_process_that_may_not_measure_runs_the_provisional_choice_and_keeps_nothing(
    tmp_path: Path, both_installed: None
):
    """A short job (``auto_measure`` false) on a machine with no choice kept loads nothing to
    measure and writes nothing; once a choice is kept, such a job takes it."""
    models = load_model_set("ppocrv6-tiny")
    made: list[_Timed] = []
    short = _settings(tmp_path, auto_measure=False)
    found = choice.choose(short, models, loader=_loader(SLOW, made))
    assert (found.provisional, found.measured, made) == (True, False, [])
    assert found.stages == choice.PROVISIONAL
    assert not list(tmp_path.rglob("*.json"))
    # the int8 profile's fp32 rec, where nothing was measured: the provisional rec
    int8 = create_stages(_settings(tmp_path, auto_measure=False, precision="int8"), models)
    assert {stage: b.name for stage, b in int8.items()} == {"det": "openvino", "rec": "onnxruntime"}
    assert not list(tmp_path.rglob("*.json"))
    measured = choice.choose(
        _settings(tmp_path), models, loader=_loader({("openvino", "det"): 0.08}, made)
    )
    assert measured.measured
    assert measured.stages["det"] == "onnxruntime"
    made.clear()
    again = choice.choose(short, models, loader=_loader({}, made))
    assert (again.provisional, again.stages, made) == (False, measured.stages, [])


def test_a_forced_backend_measures_nothing(tmp_path: Path, both_installed: None):
    models = load_model_set("ppocrv6-tiny")
    choice.choose(_settings(tmp_path), models, loader=_loader(SLOW, []))
    kept = sorted(tmp_path.rglob("*.json"))
    for name in ("onnxruntime", "openvino") if HAS_OPENVINO else ("onnxruntime",):
        settings = _settings(tmp_path, backend=name)
        assert resolve(settings) == name
        stages = create_stages(settings, models)
        assert {b.name for b in stages.values()} == {name}
    assert sorted(tmp_path.rglob("*.json")) == kept
    fresh = tmp_path / "fresh"
    create_stages(_settings(fresh, backend="onnxruntime"), models)
    assert not (fresh / choice.FOLDER).exists()


_PROCESS = """
import json, logging, sys
from pathlib import Path
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from ocrstream.processors.ocr.backends import choice
from ocrstream.processors.ocr.engine import OcrEngine
from ocrstream.settings import OcrSettings
settings = OcrSettings(model="ppocrv6-tiny", threads=1, engine_cache_dir=Path(sys.argv[1]))
engine = OcrEngine(settings)
found = choice.choose(settings, engine.models)
print(json.dumps({"backend": engine.info.backend, "stages": found.stages}))
"""


@needs_both
def test_the_engine_measures_on_first_use_and_the_next_process_reuses_it(tmp_path: Path):
    cmd = [sys.executable, "-c", _PROCESS, str(tmp_path)]
    first = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    assert "auto backend measured in" in first.stderr  # says how long it took
    (kept,) = (tmp_path / choice.FOLDER).glob("*.json")
    written = kept.stat().st_mtime_ns
    second = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    assert "auto backend measured" not in second.stderr
    assert kept.stat().st_mtime_ns == written
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a == b
    names = (choice.backend_of(b["stages"][stage])[0] for stage in ("det", "rec"))
    assert b["backend"] == "+".join(dict.fromkeys(names))


@needs_both
def test_ocrstream_ocr_on_a_page_on_a_new_machine_does_not_stop_to_measure(tmp_path: Path):
    """A user's first command: one page, nothing in the engine cache. It reads the page on the
    provisional choice and keeps no choice; a run of many pages measures and keeps it."""
    page = tmp_path / "page.png"
    cv2.imwrite(str(page), render_text_page(["Invoice 2024-118", "Total due 1,250.00"]))
    cache = tmp_path / "cache"
    env = {**os.environ, "OCRSTREAM_OCR_ENGINE_CACHE_DIR": str(cache)}
    env.pop("OCRSTREAM_OCR_AUTO_MEASURE", None)
    env.pop("OCRSTREAM_OCR_BACKEND", None)
    cmd = [sys.executable, "-m", "ocrstream", "ocr", "--format", "text", "--model",
           "ppocrv6-tiny", "--threads", "1", str(page)]  # fmt: skip
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr
    assert cer(run.stdout, "Invoice 2024-118\nTotal due 1,250.00") < 0.1
    assert "not measured yet" in run.stderr
    assert "auto backend measured in" not in run.stderr
    assert not (cache / choice.FOLDER).exists() or not list((cache / choice.FOLDER).glob("*.json"))


@needs_both
def test_an_engine_with_det_and_rec_on_different_backends_reads_a_page(
    tmp_path: Path, both_installed: None
):
    from ocrstream.processors.ocr.engine import OcrEngine

    # both_installed's CPU has no bf16: on one with it, openvino:bf16 would be a third
    # candidate that the made-up timings leave as fast as onnxruntime for rec, and either
    # could win.
    settings = _settings(tmp_path)
    models = load_model_set("ppocrv6-tiny")
    choice.choose(settings, models, loader=_loader(SLOW, []))  # det openvino, rec onnxruntime
    engine = OcrEngine(settings)
    assert engine.info.backend == "openvino+onnxruntime"
    lines = ["Invoice 2024-0117 for ACME Corporation", "Total amount due: 1,234.56 USD"]
    (page,) = engine.recognize([render_text_page(lines)])
    assert cer(page.text, "\n".join(lines)) < 0.05, page.text
    engine.close()


def _flags(monkeypatch: pytest.MonkeyPatch, flags: str) -> None:
    monkeypatch.setattr(choice, "_cpuinfo", lambda: ("Some CPU", flags))


@pytest.mark.parametrize(
    ("flags", "precision", "offered"),
    [
        ("avx2 avx512f avx512_bf16 fma", "fp16", True),  # the default precision, native bf16
        ("amx_bf16 amx_tile avx512f", "fp16", True),
        ("avx2 avx512f fma", "fp16", False),  # no bf16 on this CPU
        ("avx512f avx512_bf16", "fp32", False),  # fp32 asked for
        ("avx512f avx512_bf16", "int8", False),
    ],
)
def test_det_and_rec_are_offered_bf16_only_on_a_cpu_with_it_and_the_default_precision(
    monkeypatch: pytest.MonkeyPatch, flags: str, precision: str, offered: bool
):
    _flags(monkeypatch, flags)
    settings = OcrSettings(precision=precision)
    found = choice.stage_candidates(settings, ("openvino", "onnxruntime"))
    for stage in ("det", "rec"):
        assert found[stage][:2] == ("openvino", "onnxruntime")
        assert (choice.OPENVINO_BF16 in found[stage]) is offered
    without = choice.stage_candidates(settings, ("onnxruntime",))
    assert without == {"det": ("onnxruntime",), "rec": ("onnxruntime",)}


@pytest.mark.parametrize(
    ("rec_slow", "rec_chosen", "version_ends"),
    [
        # bf16 rec measured fastest: both stages in bf16, both named
        ({("onnxruntime", "rec"): 0.01}, choice.OPENVINO_BF16, " det:bf16 rec:bf16"),
        # bf16 rec slower than onnxruntime's fp32: rec stays fp32
        ({(choice.OPENVINO_BF16, "rec"): 0.01}, "onnxruntime", " det:bf16"),
    ],
)
@needs_both
def test_bf16_measured_fastest_is_taken_and_named_in_results_and_the_cache_key(
    tmp_path: Path,
    both_installed: None,
    monkeypatch: pytest.MonkeyPatch,
    rec_slow: dict[tuple[str, str], float],
    rec_chosen: str,
    version_ends: str,
):
    from ocrstream.processors.ocr.backends import StagePrecision, stage_precision
    from ocrstream.processors.ocr.engine import OcrEngine

    _flags(monkeypatch, "avx2 avx512f avx512_bf16")
    models = load_model_set("ppocrv6-tiny")
    made: list[_Timed] = []
    slow = {**SLOW, ("openvino", "det"): 0.04, **rec_slow}  # f32 det slower than bf16's (0 s)
    found = choice.choose(_settings(tmp_path), models, loader=_loader(slow, made))
    for stage in ("det", "rec"):
        assert set(found.seconds[stage]) == {"openvino", "onnxruntime", choice.OPENVINO_BF16}
    assert found.stages == {"det": choice.OPENVINO_BF16, "rec": rec_chosen}
    assert choice.choose(_settings(tmp_path), models).stages == found.stages  # kept as is
    stages = create_stages(_settings(tmp_path), models)
    assert isinstance(stages["det"], StagePrecision)
    assert (stages["det"].name, stage_precision(stages["det"], "det")) == ("openvino", "bf16")
    bf16_rec = rec_chosen == choice.OPENVINO_BF16
    assert stage_precision(stages["rec"], "rec") == ("bf16" if bf16_rec else None)
    assert stage_precision(stages["det"], "rec") is None  # det's backend loads rec as asked

    engine = OcrEngine(_settings(tmp_path))
    lines = ["Invoice 2024-0117 for ACME Corporation", "Total amount due: 1,234.56 USD"]
    (page,) = engine.recognize([render_text_page(lines)])
    assert cer(page.text, "\n".join(lines)) < 0.05, page.text
    assert engine.info.backend == ("openvino" if bf16_rec else "openvino+onnxruntime")
    assert engine.info.version.endswith(version_ends)  # what each result's engine says
    fp32 = OcrEngine(_settings(tmp_path / "fp32", precision="fp32"))
    assert fp32.det_precision is None
    assert fp32.rec_precision is None
    assert "bf16" not in fp32.info.version
    assert engine.fingerprint("text") != fp32.fingerprint("text")  # the page cache keeps apart
    engine.close()
    fp32.close()


@needs_both
def test_the_int8_profile_runs_its_fp32_rec_where_auto_measured_rec_fastest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, virtual_time: None
):
    from ocrstream.processors.ocr.backends import StagePrecision
    from ocrstream.processors.ocr.quantize import int8_kinds

    assert "rec" not in int8_kinds("ppocrv6-tiny")  # the profile quantises det only
    models = load_model_set("ppocrv6-tiny")
    # rec measured faster on onnxruntime, det on openvino
    choice.choose(_settings(tmp_path), models, loader=_loader(SLOW, []))
    stages = create_stages(_settings(tmp_path, precision="int8"), models)
    assert {k: b.name for k, b in stages.items()} == {"det": "openvino", "rec": "onnxruntime"}
    # and where OpenVINO's rec was measured faster, both run there
    other = tmp_path / "other"
    choice.choose(_settings(other), models, loader=_loader({("onnxruntime", "rec"): 0.02}, []))
    stages = create_stages(_settings(other, precision="int8"), models)
    assert {k: b.name for k, b in stages.items()} == {"det": "openvino", "rec": "openvino"}
    # bf16 rec measured fastest of all: the profile still takes the fastest fp32 rec
    monkeypatch.setattr(choice, "_cpuinfo", lambda: ("Some CPU", "avx512f avx512_bf16"))
    bf16 = tmp_path / "bf16"
    rec_times = {("onnxruntime", "rec"): 0.01, ("openvino", "rec"): 0.005}  # bf16's: 0 s
    choice.choose(_settings(bf16), models, loader=_loader(rec_times, []))
    assert choice.choose(_settings(bf16), models).stages["rec"] == choice.OPENVINO_BF16
    stages = create_stages(_settings(bf16, precision="int8"), models)
    assert {k: b.name for k, b in stages.items()} == {"det": "openvino", "rec": "openvino"}
    assert not isinstance(stages["rec"], StagePrecision)
    # a backend named by the settings is used for both, as before
    named = create_stages(_settings(tmp_path, precision="int8", backend="openvino"), models)
    assert {b.name for b in named.values()} == {"openvino"}


class _Wrong(_Timed):
    """A fast session that computes wrong: its output is its input turned upside down."""

    def run(self, batch: np.ndarray) -> np.ndarray:
        return -super().run(batch)


def test_a_candidate_that_reads_text_wrong_is_refused_however_fast(
    tmp_path: Path, both_installed: None, monkeypatch: pytest.MonkeyPatch
):
    """On an Intel Xeon with AMX, OpenVINO in bf16 read v6 small's receipts as garbage, 1.6x
    faster than onnxruntime, and auto took it. A candidate whose warm-up on the text probes
    reads otherwise than onnxruntime is not timed, not chosen, and the kept choice and
    ``engine calibrate`` say so."""
    from click.testing import CliRunner

    from ocrstream.cli import main

    monkeypatch.setattr(choice, "_cpuinfo", lambda: ("Some CPU", "avx512f amx_bf16"))
    bf16 = choice.OPENVINO_BF16
    made: dict[tuple[str, str], _Timed] = {}

    def load(key: str, stage: str) -> _Timed:
        slow = {"openvino": 0.03, "onnxruntime": 0.05, bf16: 0.01}[key]
        made[(key, stage)] = (_Wrong if key == bf16 and stage == "rec" else _Timed)(slow, stage)
        return made[(key, stage)]

    settings = _settings(tmp_path)
    found = choice.choose(settings, load_model_set("ppocrv6-tiny"), loader=load)
    assert found.stages == {"det": bf16, "rec": "openvino"}
    assert set(found.refused) == {"rec"}
    assert found.refused["rec"][bf16] < choice.AGREE["rec"]
    assert bf16 not in found.seconds["rec"]
    # the warm-up alone: one run of each probe, no round
    assert made[(bf16, "rec")].runs == len(choice.input_shapes(settings)["rec"])
    kept = choice.choose(settings, load_model_set("ppocrv6-tiny"), loader=load)
    assert not kept.measured
    assert kept.refused == found.refused

    monkeypatch.setenv("OCRSTREAM_OCR_ENGINE_CACHE_DIR", str(tmp_path / "cli"))
    monkeypatch.setattr(choice, "default_loader", lambda settings, models: load)
    args = ["engine", "calibrate", "--model", "ppocrv6-tiny", "--threads", "1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    rec = next(line for line in result.output.splitlines() if line.startswith("rec "))
    assert f"wrong {found.refused['rec'][bf16]:.0%}" in rec
    assert rec.split()[-1] == "openvino"


def test_engine_calibrate_measures_for_the_precision_it_is_given(
    tmp_path: Path, both_installed: None, monkeypatch: pytest.MonkeyPatch
):
    """On a CPU with bf16 an fp32 engine must not run what auto measured with bf16 racing:
    ``engine calibrate --precision fp32`` times the fp32 runtimes alone and keeps the choice
    that fp32 engines read, beside the default precision's, which it leaves as it was."""
    from click.testing import CliRunner

    from ocrstream.cli import main

    monkeypatch.setattr(choice, "_cpuinfo", lambda: ("Some CPU", "avx512f avx512_bf16"))
    bf16 = choice.OPENVINO_BF16
    # bf16 fastest at both stages; without it, OpenVINO's det and onnxruntime's rec
    slow = {**SLOW, ("openvino", "det"): 0.01, ("onnxruntime", "rec"): 0.01}
    slow |= {(bf16, "det"): 0.002, (bf16, "rec"): 0.002}
    monkeypatch.setattr(choice, "default_loader", lambda settings, models: _loader(slow, []))
    monkeypatch.setenv("OCRSTREAM_OCR_ENGINE_CACHE_DIR", str(tmp_path))
    args = ["engine", "calibrate", "--model", "ppocrv6-tiny", "--threads", "1"]

    def table(output: str) -> dict[str, list[str]]:
        return {line.split()[0]: line.split() for line in output.splitlines() if line}

    default = CliRunner().invoke(main, args)
    assert default.exit_code == 0, default.output
    assert "precision fp16" in default.output
    assert bf16 in table(default.output)["stage"]
    assert table(default.output)["rec"][-1] == bf16

    fp32 = CliRunner().invoke(main, [*args, "--precision", "fp32"])
    assert fp32.exit_code == 0, fp32.output
    assert "precision fp32" in fp32.output
    rows = table(fp32.output)
    assert bf16 not in rows["stage"]
    assert (rows["det"][-1], rows["rec"][-1]) == ("openvino", "onnxruntime")

    models = load_model_set("ppocrv6-tiny")
    kept32 = choice.choose(_settings(tmp_path, precision="fp32"), models)
    kept16 = choice.choose(_settings(tmp_path), models)
    assert not kept32.measured
    assert not kept16.measured
    assert kept32.stages == {"det": "openvino", "rec": "onnxruntime"}
    assert kept16.stages == {"det": bf16, "rec": bf16}

    wrong = CliRunner().invoke(main, [*args, "--precision", "int4"])
    assert wrong.exit_code == 2
    assert "int4" in wrong.output


def test_the_text_probes_are_text_the_models_read_and_noise_reads_apart(tmp_path: Path):
    """What the check compares must be text the models read, or any two runtimes would
    agree on blanks: rec reads the probe's words off its line, det marks the probe page's
    lines and not the paper between them, and rec's reading of noise is far under AGREE."""
    import difflib

    from ocrstream.processors.ocr.backends import create_key, det_options, rec_options
    from ocrstream.processors.ocr.models import ctc_best_model, det_logits_model

    settings = OcrSettings(model="ppocrv6-tiny", threads=1)
    models = load_model_set("ppocrv6-tiny")
    shapes = {"det": [(1, 3, 320, 640)], "rec": [(1, 3, settings.rec_height, 960)]}
    probes = choice.probe_inputs(shapes, models.det_mean, models.det_std)
    det_path = det_logits_model(models.det_path, tmp_path) or models.det_path
    rec = ctc_best_model(models.rec_path, tmp_path)
    assert rec is not None
    det = create_key("onnxruntime").load(det_path, "det", det_options(settings))
    rec_session = create_key("onnxruntime").load(rec[0], "rec", rec_options(settings))
    classes = choice._best_class(np.asarray(rec_session.run(probes["rec"][0])))[0]
    steps = [int(c) for i, c in enumerate(classes) if c and (i == 0 or c != classes[i - 1])]
    text = "".join(models.charset[c] for c in steps if c < len(models.charset))
    assert len(text) >= 20
    wanted = (choice.PROBE_TEXT * 3)[: len(text)]
    assert difflib.SequenceMatcher(None, text, wanted).ratio() > 0.6, text
    marked = choice._text_pixels(np.asarray(det.run(probes["det"][0])))[0, 0]
    rows = marked.mean(axis=1)
    assert 0.05 < marked.mean() < 0.6
    assert (rows < 0.01).mean() > 0.2  # the paper between the lines is not text
    noise = np.random.default_rng(1).uniform(-1, 1, probes["rec"][0].shape).astype(np.float32)
    read = [rec_session.run(probes["rec"][0])]
    assert choice.agreement("rec", [rec_session.run(noise)], read) < choice.AGREE["rec"]


@needs_both
def test_engine_calibrate_measures_again_and_prints_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from click.testing import CliRunner

    from ocrstream.cli import main

    monkeypatch.setenv("OCRSTREAM_OCR_ENGINE_CACHE_DIR", str(tmp_path))
    args = ["engine", "calibrate", "--model", "ppocrv6-tiny", "--threads", "1"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    # a cell is "total (of which new shapes)": the totals are what the choice compares
    rows = {
        line.split()[0]: [t for t in line.split() if not t.startswith("(")]
        for line in first.output.splitlines()
        if line
    }
    # the runtimes installed here read the text probes alike: none is refused
    assert "wrong" not in first.output, first.output
    header = rows["stage"][1:-1]
    # the two backends, and the bf16 candidate on a CPU with bf16 (for det and rec)
    assert header[:2] == ["openvino", "onnxruntime"]
    bf16 = choice.bf16_offered(OcrSettings(), ("openvino",))
    assert header[2:] == ([choice.OPENVINO_BF16] if bf16 else [])
    for stage in ("det", "rec"):
        *cells, chosen = rows[stage][1:]
        times = {k: float(v) for k, v in zip(header, cells, strict=True) if v != "-"}
        assert chosen in times
        assert times[chosen] == min(times.values())  # the fastest of the printed times
    settings = _settings(tmp_path)
    kept = choice.choose(settings, load_model_set("ppocrv6-tiny"))
    assert not kept.measured
    assert kept.stages == {"det": rows["det"][-1], "rec": rows["rec"][-1]}
