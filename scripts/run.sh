#!/usr/bin/env bash
# The README's first command (`make run`): from a fresh machine to OCR'd sample scans.
# Starts the local services if needed (Kafka, S3, Prometheus; they stay up — `ocrstream infra
# down` stops them), creates the topics and bucket, runs the agents for the duration, OCRs the
# bundled samples (scripts/make_samples.py made them) and writes out/<name>/document.{json,txt,pdf}
# and out/summary.json. Extra arguments go to `ocrstream run` (e.g. --workers 2).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
exec "$BIN/ocrstream" run samples/*.pdf samples/*.tif samples/*.jpg --output out/ "$@"
