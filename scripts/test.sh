#!/usr/bin/env bash
# The test command (`make test`): lint, types, then every test against real local services.
# Services started here are stopped on exit; services that were already up are left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin

started=0
if ! $BIN/ocrstream infra status --quiet >/dev/null 2>&1; then
  started=1
fi
cleanup() {
  if [ "$started" = 1 ]; then $BIN/ocrstream infra down || true; fi
}
trap cleanup EXIT

echo "== ruff"
SOURCES="ocrstream streams processors schemas storage tests"
$BIN/ruff check $SOURCES
$BIN/ruff format --check $SOURCES
echo "== mypy"
$BIN/mypy
echo "== browser and fonts"
# The web UI's tests (tests/integration/test_ui.py) drive Debian's chromium through Playwright
# (Playwright's own browser download is not reachable); the Chinese development set
# (ocrstream/bench/devsets.py) is rendered in Noto CJK. Installed once, skipped when present.
PACKAGES=""
if [ ! -x /usr/bin/chromium ] && [ ! -x /usr/lib/chromium/chromium ]; then
  PACKAGES="chromium"
fi
if [ ! -e /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc ]; then
  PACKAGES="$PACKAGES fonts-noto-cjk"
fi
if [ -n "$PACKAGES" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $PACKAGES
  else
    echo "missing:$PACKAGES — the tests that need them will be skipped (sudo apt-get install$PACKAGES)"
  fi
fi
echo "== services"
$BIN/ocrstream infra up
echo "== pytest"
# One run: unit tests first, then integration tests (tests/conftest.py orders them), ending in
# one summary line, after the ten slowest tests. Fault-injection tests restart the broker and
# the store under load on a 2-core machine; one that fails is run once more and reported as a
# rerun in the summary (never hidden: a test that fails twice fails the run).
$BIN/pytest -p no:cacheprovider --durations=10 --reruns 1 --reruns-delay 5 "$@"
