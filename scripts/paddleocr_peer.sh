#!/usr/bin/env bash
# PaddleOCR itself (3.7.0, on PaddlePaddle 3.3.1), as a peer for `ocrstream bench engine
# --engines paddleocr`: a venv of its own, and ocrstream's own PP-OCRv6 ONNX files converted to
# PaddleOCR's model format (ocrstream/bench/paddleocr_peer.py says how and why).
#
#   bash scripts/paddleocr_peer.sh            # idempotent; about 400 MB of packages
#
# Needs the project's venv (make venv) for the ONNX files and PyPI for the packages. Everything
# goes under $OCRSTREAM_BENCH_PADDLEOCR_HOME (default ~/.cache/ocrstream/peers/paddleocr):
# venv/, and models/PP-OCRv6_{tiny,small}_{det,rec}/ (inference.json, .pdiparams, .yml).
# PaddleOCR is not a project dependency: nothing else needs it, and the tests do not.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PEER=ocrstream/bench/paddleocr_peer.py
# the versions measured in docs/benchmarks.md; x2paddle 1.6 needs onnx < 1.17
PINS=(paddlepaddle==3.3.1 paddleocr==3.7.0 paddlex==3.7.2 x2paddle==1.6.0 onnx==1.16.2
      onnxruntime==1.22.1 pyyaml)

[ -x "$PY" ] || { echo "paddleocr_peer.sh: no project venv: run make venv first" >&2; exit 1; }
# where the bench looks for it (BenchSettings: OCRSTREAM_BENCH_PADDLEOCR_HOME or its default)
HOME_DIR="$("$PY" -c 'from ocrstream.settings import BenchSettings; print(BenchSettings().paddleocr_home)')"
mkdir -p "$HOME_DIR"
if ! "$HOME_DIR/venv/bin/python" -c "import paddleocr, x2paddle" 2>/dev/null; then
  python3.11 -m venv "$HOME_DIR/venv"
  "$HOME_DIR/venv/bin/pip" install -q --upgrade pip
  "$HOME_DIR/venv/bin/pip" install -q "${PINS[@]}"
fi
for size in tiny small; do
  # the pinned, checked files ocrstream itself reads for this model set
  mapfile -t files < <("$PY" - "ppocrv6-$size" <<'EOF'
import sys
from ocrstream.processors.ocr.models import MODEL_SETS, verify
spec = MODEL_SETS[sys.argv[1]]
print(verify(spec.det))
print(verify(spec.rec))
print(verify(spec.dict_file) if spec.dict_file else "")
EOF
  )
  for kind in det rec; do
    target="$HOME_DIR/models/PP-OCRv6_${size}_${kind}"
    source="${files[0]}"
    [ "$kind" = rec ] && source="${files[1]}"
    stamp="$target/source.sha256"
    want="$(sha256sum "$source" | cut -d' ' -f1) $(sha256sum "$PEER" | cut -d' ' -f1)"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
      echo "$target: up to date"
      continue
    fi
    dict=()
    [ "$kind" = rec ] && [ -n "${files[2]}" ] && dict=(--dict "${files[2]}")
    "$HOME_DIR/venv/bin/python" "$PEER" convert --size "$size" --kind "$kind" \
      --onnx "$source" "${dict[@]}" --out "$HOME_DIR/models" 2> >(grep -v -i warn >&2)
    echo "$want" > "$stamp"
    echo "$target: converted"
  done
done
