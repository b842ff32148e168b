"""Regenerate the JSON schemas in this folder (run from the repository root).

    .venv/bin/python infra/k8s/schemas/vendor.py

Sources, fetched with their ordinary clients:

* Kubernetes: the PyPI package ``kubernetes-validate`` ships the API's JSON schemas per
  Kubernetes version (``pip download --no-deps``).
* KEDA: the CustomResourceDefinitions in the Go module ``github.com/kedacore/keda/v2``
  (``go mod download``), whose ``openAPIV3Schema`` becomes a JSON schema.

Only the kinds the manifests use are written, each self-contained (the definitions it
reaches are copied under ``$defs``) and without descriptions, to keep the folder small.
File names follow kubeconform's ``{{.ResourceKind}}{{.KindSuffix}}.json`` convention, so the
same folder serves kubeconform and the Python test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import yaml

K8S_VERSION = "1.33.0"
KUBERNETES_VALIDATE = "kubernetes-validate==1.37.0"
KEDA_MODULE = "github.com/kedacore/keda/v2@v2.21.0"

# (apiVersion, kind, definition name in the Kubernetes OpenAPI)
K8S_KINDS = [
    ("v1", "Namespace", "io.k8s.api.core.v1.Namespace"),
    ("v1", "ConfigMap", "io.k8s.api.core.v1.ConfigMap"),
    ("v1", "Secret", "io.k8s.api.core.v1.Secret"),
    ("v1", "ServiceAccount", "io.k8s.api.core.v1.ServiceAccount"),
    ("apps/v1", "Deployment", "io.k8s.api.apps.v1.Deployment"),
    ("policy/v1", "PodDisruptionBudget", "io.k8s.api.policy.v1.PodDisruptionBudget"),
]
KEDA_CRDS = ["keda.sh_scaledobjects.yaml", "keda.sh_triggerauthentications.yaml"]
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
DRAFT = "https://json-schema.org/draft/2020-12/schema"

HERE = Path(__file__).resolve().parent

# Keywords whose value is a map from names to schemas (so their keys are not keywords).
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")


def file_name(api_version: str, kind: str) -> str:
    """kubeconform's name for a kind: ``deployment-apps-v1.json``, ``namespace-v1.json``."""
    group, _, version = api_version.rpartition("/")
    suffix = f"-{group.split('.')[0]}-{version}" if group else f"-{version}"
    return f"{kind.lower()}{suffix}.json".lower()


def strip(node: Any) -> Any:
    """A copy of a schema without descriptions and other documentation-only keywords."""
    if isinstance(node, list):
        return [strip(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("description", "x-kubernetes-group-version-kind"):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: strip(sub) for name, sub in value.items()}
        else:
            out[key] = strip(value)
    return out


def refs(node: Any) -> set[str]:
    """The ``#/$defs/NAME`` references under a schema node."""
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            found.add(ref.removeprefix("#/$defs/"))
        for value in node.values():
            found |= refs(value)
    elif isinstance(node, list):
        for item in node:
            found |= refs(item)
    return found


def closure(defs: dict[str, Any], roots: set[str]) -> dict[str, Any]:
    """The definitions reachable from ``roots``."""
    seen: dict[str, Any] = {}
    todo = sorted(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen[name] = defs[name]
        todo.extend(sorted(refs(defs[name]) - seen.keys()))
    return dict(sorted(seen.items()))


def k8s_defs(wheel: Path) -> dict[str, Any]:
    member = (
        f"kubernetes_validate/kubernetes-json-schema/v{K8S_VERSION}-local-strict/_definitions.json"
    )
    with zipfile.ZipFile(wheel) as zf:
        raw = json.loads(zf.read(member))
    # The package points its references at "/api/_definitions.json#/$defs/…"; make them local.
    text = json.dumps(raw["$defs"]).replace('"/api/_definitions.json#/$defs/', '"#/$defs/')
    return strip(json.loads(text))


def k8s_schema(defs: dict[str, Any], api_version: str, kind: str, name: str) -> dict[str, Any]:
    root = json.loads(json.dumps(defs[name]))
    root["properties"]["apiVersion"] = {"type": "string", "enum": [api_version]}
    root["properties"]["kind"] = {"type": "string", "enum": [kind]}
    root["required"] = sorted({*root.get("required", []), "apiVersion", "kind", "metadata"})
    return {
        "$schema": DRAFT,
        "$id": f"ocrstream:k8s/{K8S_VERSION}/{file_name(api_version, kind)}",
        **{k: v for k, v in root.items() if k != "$defs"},
        "$defs": closure(defs, refs(root)),
    }


def crd_to_schema(node: Any) -> Any:
    """An ``openAPIV3Schema`` node as JSON schema, strict like kubeconform's ``-strict``.

    Objects with declared properties reject unknown fields (the API server would silently
    prune them, which hides typos); ``x-kubernetes-int-or-string`` becomes integer-or-string.
    """
    if isinstance(node, list):
        return [crd_to_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "description" or key.startswith("x-kubernetes-"):
            continue
        if key == "properties":
            out[key] = {name: crd_to_schema(sub) for name, sub in value.items()}
        else:
            out[key] = crd_to_schema(value)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def keda_schemas(module_dir: Path, defs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    schemas: dict[str, dict[str, Any]] = {}
    for crd_file in KEDA_CRDS:
        crd = yaml.safe_load((module_dir / "config/crd/bases" / crd_file).read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if not version.get("served"):
                continue
            api_version = f"{group}/{version['name']}"
            root = crd_to_schema(version["schema"]["openAPIV3Schema"])
            root["properties"]["apiVersion"] = {"type": "string", "enum": [api_version]}
            root["properties"]["kind"] = {"type": "string", "enum": [kind]}
            # The CRD says only "metadata: object"; the API server checks it as ObjectMeta.
            root["properties"]["metadata"] = {"$ref": f"#/$defs/{OBJECT_META}"}
            root["required"] = sorted({*root.get("required", []), "apiVersion", "kind", "spec"})
            name = file_name(api_version, kind)
            schemas[name] = {
                "$schema": DRAFT,
                "$id": f"ocrstream:keda/{KEDA_MODULE.rpartition('@')[2]}/{name}",
                **root,
                "$defs": closure(defs, {OBJECT_META}),
            }
    return schemas


def fetch() -> tuple[Path, Path]:
    tmp = Path(tempfile.mkdtemp(prefix="ocrstream-schemas-"))
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(tmp)]
    subprocess.run([*pip, KUBERNETES_VALIDATE], check=True)
    wheel = next(tmp.glob("kubernetes_validate-*.whl"))
    info = subprocess.run(
        ["go", "mod", "download", "-json", KEDA_MODULE],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp,
    )
    return wheel, Path(json.loads(info.stdout)["Dir"])


def main() -> None:
    wheel, keda_dir = fetch()
    defs = k8s_defs(wheel)
    out: dict[str, dict[str, Any]] = {}
    for api_version, kind, name in K8S_KINDS:
        out[file_name(api_version, kind)] = k8s_schema(defs, api_version, kind, name)
    out.update(keda_schemas(keda_dir, defs))
    for old in HERE.glob("*.json"):
        old.unlink()
    for name, schema in sorted(out.items()):
        (HERE / name).write_text(json.dumps(schema, indent=1, sort_keys=False) + "\n")
        print(f"{name}: {len(schema['$defs'])} definitions")


if __name__ == "__main__":
    main()
