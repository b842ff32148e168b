#!/usr/bin/env bash
# Offline validation of the Kubernetes + KEDA manifests in infra/k8s.
#
#   scripts/validate_manifests.sh            validate with what is installed
#   scripts/validate_manifests.sh --install  first `go install` kustomize and kubeconform
#
# 1. Each overlay in infra/k8s/overlays is rendered by kustomize and validated by kubeconform
#    in strict mode against the JSON schemas vendored in infra/k8s/schemas (Kubernetes and
#    KEDA; nothing is fetched). Skipped, with a note, when the tools are missing.
# 2. tests/unit/test_manifests.py renders the overlays in Python, validates them against the
#    same schemas with jsonschema, runs the checks a schema cannot express (references,
#    partition caps, KEDA's Kafka trigger rules, probes, grace periods) and compares its
#    rendering with kustomize's and kubeconform's verdict where those are installed.
set -euo pipefail
cd "$(dirname "$0")/.."

KUSTOMIZE_VERSION=v5.8.1
KUBECONFORM_VERSION=v0.7.0
SCHEMA_LOCATION='infra/k8s/schemas/{{.ResourceKind}}{{.KindSuffix}}.json'
PYTEST=${PYTEST:-.venv/bin/pytest}

gobin() {
  if [ -n "${GOBIN:-}" ]; then echo "$GOBIN"; return; fi
  local gopath
  gopath=$(go env GOPATH 2>/dev/null || true)
  echo "${gopath:-${GOPATH:-$HOME/go}}/bin"
}

find_tool() {
  if command -v "$1" >/dev/null 2>&1; then command -v "$1"; return; fi
  local candidate
  candidate="$(gobin)/$1"
  if [ -x "$candidate" ]; then echo "$candidate"; fi
}

if [ "${1:-}" = "--install" ]; then
  go install "sigs.k8s.io/kustomize/kustomize/v5@${KUSTOMIZE_VERSION}"
  go install "github.com/yannh/kubeconform/cmd/kubeconform@${KUBECONFORM_VERSION}"
fi

status=0
KUSTOMIZE=$(find_tool kustomize)
KUBECONFORM=$(find_tool kubeconform)
if [ -n "$KUSTOMIZE" ] && [ -n "$KUBECONFORM" ]; then
  for overlay in infra/k8s/overlays/*/; do
    echo "== kustomize build ${overlay} | kubeconform"
    if ! "$KUSTOMIZE" build "$overlay" >"${TMPDIR:-/tmp}/ocrstream-manifests.yaml"; then
      status=1
      continue
    fi
    "$KUBECONFORM" -strict -summary -schema-location "$SCHEMA_LOCATION" \
      "${TMPDIR:-/tmp}/ocrstream-manifests.yaml" || status=1
  done
  rm -f "${TMPDIR:-/tmp}/ocrstream-manifests.yaml"
else
  echo "== kustomize or kubeconform not installed: run with --install (needs Go); Python only"
fi

echo "== pytest tests/unit/test_manifests.py"
"$PYTEST" -q -p no:cacheprovider tests/unit/test_manifests.py || status=1
exit "$status"
