#!/usr/bin/env bash
# The one prepared GPU check: the torch backend on CUDA (parity, then pages/s by batch size).
#
# Two steps, because the GPU machine (the `run` tool's H100 or H200, one image: Python 3.12
# with torch cu13, torchvision, onnx, CPU onnxruntime, opencv, numpy; no TensorRT, no network)
# cannot download anything and takes at most 64 MiB of working tree + carried files:
#
#   1. here, on the dev machine (PyPI reachable, the project's venv installed):
#          bash scripts/gpu_check.sh prepare
#      fills .whl/ (git-ignored): small cp312 wheels the image lacks (onnx2torch, pydantic,
#      pydantic-settings, pyclipper, shapely, rapidfuzz and their needs), the PP-OCRv6 small
#      det/rec ONNX files (checked against the pinned SHA-256) as a model dir, 6 synthetic
#      300-DPI A4 pages in the SROIE layout (img/ + box/ ground truth) and a rendered parity
#      page. About 50 MiB.
#   2. on the GPU machine, with the run tool, carry [".whl"], timeout_s 480:
#          bash scripts/gpu_check.sh run
#      installs the wheels into /tmp/site, then writes to $OUT:
#        gpu_check.log      everything printed
#        nvidia-smi.txt     the GPU
#        cpu.txt            the host CPU (lscpu, flags), cores and memory
#        pytest.txt         the gpu-marked and torch tests of tests/unit/test_backends_gpu.py
#        gpu_bench.json     parity results; what one rec or det run costs (a shape's first run,
#                           then warm, eager and as a CUDA graph); then per configuration a cold
#                           first pass and a warm
#                           pass: pages/s, ms per stage, GPU memory and CER against ground
#                           truth. The engine's host path with the rec shape ladder, with the
#                           ladder and CUDA graphs, with the exact shapes; the device pipeline
#                           (nvjpeg decode, pre-processing on the GPU) by batch size; bf16.
#      Session 24's run: pip ~10 s, pytest ~70 s, parity ~60 s; the bench starts no new
#      configuration after GPUCHECK_BUDGET_S (240 s) and stops at GPUCHECK_TIMEOUT (300 s).
#   0. optional, here, after prepare: bash scripts/gpu_check.sh dry-run
#      runs the same steps on this CPU (project venv, batch 1; slow) to check the script;
#      GPUCHECK_PY=/tmp/tv/bin/python bash scripts/gpu_check.sh rehearse does it the GPU
#      machine's way (the carried wheels into a bare site folder) with a Python 3.12 venv that
#      holds only the image's packages (torch, torchvision, onnx, onnxruntime, opencv, pytest).
#
# Results go into docs/benchmarks.md ("Engine (GPU)"), with the command and the machine.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-}"
DATA=.whl/gpucheck

prepare() {
  set -e
  local py=.venv/bin/python
  mkdir -p .whl "$DATA/models" "$DATA/a4"
  local plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
              --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
              --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
  # pinned to what the project's venv runs (pydantic and pydantic-core must be a matched pair)
  for pkg in onnx2torch==1.5.15 pydantic==2.14.4 pydantic-core==2.50.5 pydantic-settings==2.16.3 \
             python-dotenv==1.2.4 typing-inspection==0.4.5 annotated-types==0.8.0 \
             typing-extensions==4.16.0 pyclipper==1.4.0 shapely==2.2.0 rapidfuzz==3.14.6; do
    $py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp "${plat[@]}" -d .whl "$pkg"
  done
  $py - "$DATA" <<'EOF'
import shutil
import sys
from pathlib import Path

from ocrstream.bench.datasets import render_a4_page
from ocrstream.processors.ocr.models import MODEL_SETS, verify

out = Path(sys.argv[1])
spec = MODEL_SETS["ppocrv6-small"]
shutil.copyfile(verify(spec.det), out / "models" / "det.onnx")
shutil.copyfile(verify(spec.rec), out / "models" / "rec.onnx")
(out / "models" / "SHA256SUMS").write_text(
    f"{spec.det.sha256}  det.onnx\n{spec.rec.sha256}  rec.onnx\n")
(out / "a4" / "img").mkdir(parents=True, exist_ok=True)
(out / "a4" / "box").mkdir(parents=True, exist_ok=True)
for i in range(6):
    data, lines = render_a4_page(100 + i)
    (out / "a4" / "img" / f"{i:03d}.jpg").write_bytes(data)
    rows = [",".join(f"{v:.1f}" for p in ln.polygon for v in p) + "," + ln.text for ln in lines]
    (out / "a4" / "box" / f"{i:03d}.csv").write_text("\n".join(rows) + "\n")
# the parity page of tests/unit/test_backends_gpu.py (no PyMuPDF on the GPU machine)
sys.path.insert(0, ".")
from tests.unit.test_backends_gpu import PAGE_TEXT, _render_page

(out / "parity.png").write_bytes(_render_page(PAGE_TEXT))
print("prepared", out, sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) >> 20, "MiB")
EOF
  du -sh .whl
}

run() {
  local py=python3 site=/tmp/site
  if [ "$MODE" = rehearse ]; then
    # the GPU machine's steps exactly (wheels into a fresh site folder, PYTHONPATH) with another
    # interpreter, e.g. a Python 3.12 venv holding only the image's packages, on this CPU
    py="${GPUCHECK_PY:?GPUCHECK_PY=/path/to/python3.12 with torch, torchvision, onnxruntime}"
    OUT="${OUT:-$(mktemp -d)}"
    site="$(mktemp -d)"
    export GPUCHECK_DEVICE=cpu GPUCHECK_BATCHES="${GPUCHECK_BATCHES:-1}" GPUCHECK_TIMEOUT=1200
    export GPUCHECK_BUDGET_S="${GPUCHECK_BUDGET_S:-100000}"
  elif [ "$MODE" = dry-run ]; then
    # the same steps on this machine's CPU (the project venv, no wheels): checks the script
    py=.venv/bin/python
    OUT="${OUT:-$(mktemp -d)}"
    export GPUCHECK_DEVICE=cpu GPUCHECK_BATCHES="${GPUCHECK_BATCHES:-1}" GPUCHECK_TIMEOUT=1200
    export GPUCHECK_BUDGET_S="${GPUCHECK_BUDGET_S:-100000}"
  fi
  : "${OUT:?run on the GPU machine, where the run tool sets OUT}"
  exec > >(tee "$OUT/gpu_check.log") 2>&1
  export PYTHONUNBUFFERED=1
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
  { lscpu; grep -m1 -E '^flags' /proc/cpuinfo; nproc; free -g; } > "$OUT/cpu.txt" 2>&1 || true
  if [ "$MODE" != dry-run ]; then
    $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" .whl/*.whl || { echo "wheel install failed"; exit 1; }
    export PYTHONPATH="$site:$PWD"
  fi
  (cd "$DATA/models" && sha256sum -c SHA256SUMS) || exit 1
  $py -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision',
  torchvision.__version__, 'cuda', torch.cuda.is_available())"

  echo "== pytest (torch and gpu tests)"
  timeout 150 $py -m pytest -q -p no:cacheprovider -o addopts="" -rs \
    tests/unit/test_backends_gpu.py 2>&1 | tee "$OUT/pytest.txt"

  echo "== parity and pages/s"
  timeout "${GPUCHECK_TIMEOUT:-300}" $py - "$DATA" "$OUT/gpu_bench.json" <<'EOF'
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import torch

from ocrstream.bench.cer import CerCounts, page_cer
from ocrstream.bench.datasets import load_sroie
from ocrstream.bench.engine import machine
from ocrstream.processors.ocr.engine import OcrEngine
from ocrstream.bench.device_pipeline import DevicePipeline
from ocrstream.settings import OcrSettings

data, out_path = Path(sys.argv[1]), Path(sys.argv[2])
models = data / "models"
# GPUCHECK_DEVICE=cpu GPUCHECK_BATCHES=1,2 OUT=/tmp/x: a dry run of this script without a GPU
DEVICE = os.environ.get("GPUCHECK_DEVICE", "cuda")
BATCHES = [int(b) for b in os.environ.get("GPUCHECK_BATCHES", "8,32,64,16,4,2,1").split(",")]
ON_GPU = DEVICE.startswith("cuda")


def sync():
    if ON_GPU:
        torch.cuda.synchronize()

report = {"machine": machine(), "parity": {}, "runs": []}


def save():
    out_path.write_text(json.dumps(report, indent=2))


def failure(e):
    """What the report says of a step that raised: the exception's type and message."""
    return f"{type(e).__name__}: {e}"[:1000]


def texts(page):
    return [ln.text for ln in page.lines]


parity_page = (data / "parity.png").read_bytes()
ref = texts(OcrEngine(OcrSettings(backend="onnxruntime", model_dir=models, threads=8))
            .recognize([parity_page])[0])
report["parity"]["onnxruntime_cpu"] = ref
for precision in ("fp16", "bf16"):
    try:
        eng = OcrEngine(OcrSettings(backend="torch", device=DEVICE, precision=precision,
                                    model_dir=models))
        host = texts(eng.recognize([parity_page])[0])
        dev = texts(DevicePipeline.from_engine(eng).recognize([parity_page])[0])
    except Exception as e:  # recorded; the other precision and the benchmarks still run
        report["parity"][f"torch_{precision}"] = {"engine_path_same": False,
                                                  "device_path_same": False,
                                                  "error": failure(e)}
        print(precision, "failed:", report["parity"][f"torch_{precision}"]["error"])
        continue
    report["parity"][f"torch_{precision}"] = {"engine_path_same": host == ref,
                                              "device_path_same": dev == ref,
                                              "engine_path": host, "device_path": dev}
    print(precision, "engine path same text:", host == ref, "device path:", dev == ref)
save()

# What one rec run costs, apart from pages: a shape's first run (cuDNN's plans, lazily loaded
# kernels), then its warm runs eagerly and as a CUDA graph, and a det batch alike. Tells
# whether rec is bound by the arithmetic or by each run's launches (session 24: ~50 ms a run).
from ocrstream.processors.ocr.backends import SessionOptions
from ocrstream.processors.ocr.backends.torch_backend import TorchBackend


def per_run(session, shape, runs=20):
    x = torch.rand(shape) * 2 - 1
    sync()
    t = time.perf_counter()
    session.run_torch(x)
    sync()
    first = (time.perf_counter() - t) * 1000
    for _ in range(3):
        session.run_torch(x)
    sync()
    t = time.perf_counter()
    for _ in range(runs):
        session.run_torch(x)
    sync()
    return {"shape": list(shape), "first_ms": round(first, 1),
            "warm_ms": round((time.perf_counter() - t) * 1000 / runs, 2)}


micro = {}


def measure_runs():
    for graphs in (False, True):
        rec = TorchBackend().load(models / "rec.onnx", "rec", SessionOptions(
            device=DEVICE, precision="fp16", cuda_graphs=graphs and ON_GPU))
        rec_shapes = ((1, 3, 48, 320), (8, 3, 48, 640), (64, 3, 48, 1024)) if ON_GPU else (
            (1, 3, 48, 320),)
        for shape in rec_shapes:
            micro[f"rec graphs={graphs} {shape}"] = per_run(rec, shape, 20 if ON_GPU else 2)
    det = TorchBackend().load(models / "det.onnx", "det", SessionOptions(device=DEVICE,
                                                                         precision="fp16"))
    for shape in ((1, 3, 1600, 1152), (8, 3, 1600, 1152)) if ON_GPU else ((1, 3, 320, 320),):
        micro[f"det {shape}"] = per_run(det, shape, 10 if ON_GPU else 1)


try:
    measure_runs()
except Exception as e:  # recorded; the page benchmarks still run
    micro["error"] = failure(e)
for k, v in micro.items():
    print("per run:", k, v)
report["per_run"] = micro
save()

samples = load_sroie(data / "a4")
blobs = [s.path.read_bytes() for s in samples]


_engines = {}
BUDGET_S = float(os.environ.get("GPUCHECK_BUDGET_S", "240"))  # no new run starts after this
_t0 = time.perf_counter()


def engine(precision, shapes, graphs):
    """One engine per precision, det and rec shape rule and CUDA graphs on/off (the onnx2torch
    conversion is paid once per engine), batches up to 64 pages and 256 lines."""
    key = (precision, shapes, graphs)
    if key not in _engines:
        _engines[key] = OcrEngine(OcrSettings(
            backend="torch", device=DEVICE, precision=precision, model_dir=models,
            det_batch=64, rec_batch=256, det_shapes=shapes, rec_shapes=shapes,
            cuda_graphs=graphs))
    return _engines[key]


def bench(precision, batch, device_path, min_pages, shapes="ladder", graphs=False):
    """Two passes over the same pages: the first meets every shape new (cuDNN builds its plans
    then), the second is a long-running worker's speed. Skipped past the time budget. A
    configuration that fails (CUDA out of memory on a smaller card, say) is written to the
    report with its error, and the next one runs: the device's minutes are too few to lose
    the rest of the check to one of them."""
    if time.perf_counter() - _t0 > BUDGET_S:
        print("skipped (time budget):", precision, batch, device_path, shapes)
        return
    try:
        _bench(precision, batch, device_path, min_pages, shapes, graphs)
    except Exception as e:  # recorded, then the next configuration
        error = failure(e)
        print("failed:", precision, batch, device_path, shapes, graphs, error)
        report["runs"].append({"precision": precision, "batch": batch,
                               "device_pipeline": device_path, "rec_shapes": shapes,
                               "cuda_graphs": graphs, "error": error})
        save()
        if ON_GPU:
            torch.cuda.empty_cache()


def _bench(precision, batch, device_path, min_pages, shapes, graphs):
    eng = engine(precision, shapes, graphs and ON_GPU)
    rec_params = dataclasses.replace(eng.rec_params, max_batch_width=256 * 320)
    pipe = DevicePipeline(eng._det, eng._rec, eng._charset, det_params=eng.det_params,
                          rec_params=rec_params, det_batch=batch, rec_batch=256,
                          min_confidence=eng.settings.min_confidence, device=DEVICE)
    call = pipe.recognize if device_path else eng.recognize
    n = max(min_pages, 2 * batch)
    order = [i % len(blobs) for i in range(n)]
    run = {"precision": precision, "batch": batch, "device_pipeline": device_path,
           "rec_shapes": shapes, "cuda_graphs": graphs, "pages": n}
    for label in ("first", "warm"):
        sync()
        if ON_GPU:
            torch.cuda.reset_peak_memory_stats()
        stage, norm = {}, CerCounts()
        start = time.perf_counter()
        for b in range(0, n, batch):
            idx = order[b:b + batch]
            for i, page in zip(idx, call([blobs[i] for i in idx])):
                norm += page_cer([_line(ln) for ln in page.lines], samples[i].gt,
                                 normalised=True)
                for k, v in page.timings_ms.items():
                    stage[k] = stage.get(k, 0.0) + v
        sync()
        wall = time.perf_counter() - start
        run[label] = {"wall_s": round(wall, 3), "pages_per_s": round(n / wall, 2),
                      "stage_ms_per_page": {k: round(v / n, 1) for k, v in stage.items()},
                      "cer_norm": round(norm.cer, 4),
                      "gpu_peak_mem_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2)
                      if ON_GPU else None}
    print(json.dumps(run))
    report["runs"].append(run)
    save()


def _line(ln):
    from ocrstream.bench.cer import TextLine
    return TextLine(ln.text, tuple(tuple(p) for p in ln.polygon))


MIN_PAGES = 24 if ON_GPU else 2
# the most telling first: the engine's host path with the ladder, with the ladder and CUDA
# graphs, and with the exact shapes (session 24's H200 run: 53 shapes for 4 pages, rec 0.7 s
# a page warm); then the device pipeline with graphs and by batch size; then bf16
HOST_BATCH = 8 if ON_GPU else BATCHES[0]
bench("fp16", HOST_BATCH, False, MIN_PAGES, "ladder")
bench("fp16", HOST_BATCH, False, MIN_PAGES, "ladder", graphs=True)
bench("fp16", HOST_BATCH, False, MIN_PAGES, "exact")
bench("fp16", 32 if ON_GPU else BATCHES[0], True, MIN_PAGES, "ladder", graphs=True)
for batch in BATCHES:
    bench("fp16", batch, True, MIN_PAGES)
if ON_GPU:
    bench("fp16", 32, False, MIN_PAGES)
bench("bf16", 32 if ON_GPU else BATCHES[-1], True, MIN_PAGES)
print("parity", json.dumps({k: (v if k == "onnxruntime_cpu" else
                                {"engine": v["engine_path_same"], "device": v["device_path_same"]})
                            for k, v in report["parity"].items()}))
EOF
  echo "== done"
}

case "$MODE" in
  prepare) prepare ;;
  run|dry-run|rehearse) run ;;
  *) echo "usage: $0 prepare|run|dry-run|rehearse  (see the comment at the top)"; exit 2 ;;
esac
