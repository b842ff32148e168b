"""Each extra installs what its code imports, offline: no GPU, no network, nothing installed.

The backends' sources are parsed with :mod:`ast`, lazy imports inside functions included
(``if TYPE_CHECKING:`` blocks left out: they never run). Where a backend borrows a function
from another ocrstream module (``from ...torch_backend import resolve_device``), what that
function and the functions it calls import counts too, and so does what importing that
module runs. Every third-party module found must be installed by the core dependencies plus
the extra the backend belongs to (``backends._EXTRAS``: the extra its error message names),
read from pyproject.toml with :mod:`tomllib`. The other way round, every distribution an
extra lists must be imported by the code of that extra: nothing is listed and never used.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import sys
import tomllib
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from ocrstream.processors.ocr import backends

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Import names whose distribution is named otherwise (the rest: the name with "_" as "-").
PROVIDERS: dict[str, frozenset[str]] = {
    "PIL": frozenset({"pillow"}),
    "cv2": frozenset({"opencv-python-headless", "opencv-python"}),
    "faust": frozenset({"faust-streaming"}),
    "fitz": frozenset({"pymupdf"}),
    "google.protobuf": frozenset({"protobuf"}),
    "onnxruntime": frozenset({"onnxruntime", "onnxruntime-gpu"}),
    "paddle": frozenset({"paddlepaddle", "paddlepaddle-gpu"}),
    "pynvml": frozenset({"nvidia-ml-py"}),
    "tensorrt": frozenset({"tensorrt", "tensorrt-cu12", "tensorrt-cu13"}),
    "yaml": frozenset({"pyyaml"}),
}
# What a listed distribution always brings with it (checked against the installed metadata
# where the distribution is installed: test_transitive_providers_are_real).
BRINGS: dict[str, frozenset[str]] = {"onnx": frozenset({"protobuf"})}
# Modules outside the backend registry that belong to extras: the device pipeline (nvjpeg
# decode, resize, crops in torch; its error names the torch extra).
EXTRA_MODULES = {"ocrstream.bench.device_pipeline": "torch"}
EXTRA_MODULES["ocrstream.processors.ocr.quantize"] = "openvino"  # the int8 profile (nncf)
# Imports the scan finds in code a module borrows but never runs, each with why: the scan takes
# all of a first-party module it imports (here bench.devsets), not which of its inputs it uses.
NOT_RUN = {
    # devsets' Japanese word list; quantize calibrates on a4-en, a4-zh, small-print, receipts
    ("ocrstream.processors.ocr.quantize", "wordfreq"),
}
# The GPU gauges (NVML, else torch.cuda memory) of any worker on CUDA: each extra that runs a
# backend on CUDA must bring NVML, or the gauges are missing (the gpu extra has no torch).
GPU_METRICS = "ocrstream.streams.gpu_metrics"
CUDA_EXTRAS = ("gpu", "tensorrt", "torch")
# What must never come with a plain `pip install ocrstream`.
GPU_DISTRIBUTIONS = re.compile(
    r"torch|torchvision|tensorrt(-cu\d+)?|onnxruntime-gpu|paddlepaddle-gpu|cuda-python|cupy.*"
    r"|nvidia-.*"
)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _names(requirements: Iterable[str]) -> frozenset[str]:
    return frozenset(normalize(Requirement(r).name) for r in requirements)


def core() -> frozenset[str]:
    return _names(PYPROJECT["project"]["dependencies"])


def extras() -> dict[str, frozenset[str]]:
    return {k: _names(v) for k, v in PYPROJECT["project"]["optional-dependencies"].items()}


def installed_by(distributions: Iterable[str]) -> frozenset[str]:
    dists = set(distributions)
    for dist in list(dists):
        dists |= BRINGS.get(dist, frozenset())
    return frozenset(dists)


def providers(module: str) -> frozenset[str]:
    """The distributions that install ``module`` (a dotted import name)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        found = PROVIDERS.get(".".join(parts[:n]))
        if found:
            return found
    return frozenset({normalize(parts[0])})


# --- what a module imports when it runs --------------------------------------------------------


def _first_party() -> frozenset[str]:
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    return frozenset(pattern.split(".")[0].rstrip("*") for pattern in include)


FIRST_PARTY = _first_party()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """(module, names) of every import statement that can run, at any depth."""

    def __init__(self) -> None:
        self.found: list[tuple[str, tuple[str, ...]]] = []

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.extend((alias.name, ()) for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or node.module is None:
            raise NotImplementedError(f"relative import at line {node.lineno}: use absolute ones")
        self.found.append((node.module, tuple(alias.name for alias in node.names)))


@cache
def _source(module: str) -> tuple[Path, ast.Module] | None:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    path = Path(spec.origin)
    return path, ast.parse(path.read_text(), filename=str(path))


def _is_submodule(path: Path, name: str) -> bool:
    package = path.parent
    return path.name == "__init__.py" and (
        (package / f"{name}.py").is_file() or (package / name / "__init__.py").is_file()
    )


Defs = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _closure(tree: ast.Module, names: Iterable[str]) -> list[Defs]:
    """The module-level functions and classes ``names`` name, and those they refer to."""
    defs = {n.name: n for n in tree.body if isinstance(n, Defs)}
    todo, done = [n for n in names if n in defs], set[str]()
    while todo:
        name = todo.pop()
        if name in done:
            continue
        done.add(name)
        for node in ast.walk(defs[name]):
            if isinstance(node, ast.Name) and node.id in defs and node.id not in done:
                todo.append(node.id)
    return [defs[n] for n in sorted(done)]


def _needs(nodes: Iterable[ast.AST], seen: set[tuple[str, str]]) -> set[str]:
    visitor = _Imports()
    for node in nodes:
        visitor.visit(node)
    out: set[str] = set()
    for module, names in visitor.found:
        top = module.split(".")[0]
        if top == "__future__" or top in sys.stdlib_module_names:
            continue
        if top in FIRST_PARTY:
            out |= _borrowed(module, names, seen)
        else:
            out.add(module)
    return out


def _borrowed(module: str, names: tuple[str, ...], seen: set[tuple[str, str]]) -> set[str]:
    """What an ocrstream import brings: what importing the module (and its packages) runs, and
    what the functions and classes taken from it import when they are called."""
    out: set[str] = set()
    parts = module.split(".")
    for n in range(1, len(parts) + 1):  # the packages' __init__ run first, then the module
        name = ".".join(parts[:n])
        if (name, "") not in seen:
            seen.add((name, ""))
            found = _source(name)
            if found:
                body = [s for s in found[1].body if not isinstance(s, Defs)]
                out |= _needs(body, seen)
    found = _source(module)
    for name in names:
        if found and _is_submodule(found[0], name):  # all of a submodule may run
            out |= _module_needs(f"{module}.{name}", seen)
        elif found and (module, name) not in seen:
            seen.add((module, name))
            out |= _needs(_closure(found[1], [name]), seen)
    return out


def _module_needs(module: str, seen: set[tuple[str, str]]) -> set[str]:
    found = _source(module)
    assert found is not None, module
    out = _borrowed(module, (), seen)
    defs = [n.name for n in found[1].body if isinstance(n, Defs)]
    return out | _borrowed(module, tuple(defs), seen)


def module_needs(module: str) -> set[str]:
    """Third-party modules that importing ``module`` and running any of its code imports."""
    return _module_needs(module, set())


def backend_modules() -> dict[str, str | None]:
    """Each backend module (dotted name) -> its extra (None: the core dependencies)."""
    return {
        f"{backends.__name__}.{module}": backends._EXTRAS.get(key)
        for key, (module, _cls) in backends._MODULES.items()
    }


def extra_modules() -> dict[str, str | None]:
    return {**backend_modules(), **EXTRA_MODULES}


# --- the tests ------------------------------------------------------------------------------


def test_the_import_scan_sees_lazy_and_borrowed_imports() -> None:
    trt = module_needs(f"{backends.__name__}.tensorrt_backend")
    assert "tensorrt" in trt  # inside _import_trt()
    assert "torch" in trt  # resolve_device(), borrowed from the torch backend
    assert "onnx2torch" not in trt  # the torch backend's converter is not borrowed
    assert "onnx2torch" in module_needs(f"{backends.__name__}.torch_backend")
    assert "paddle" in module_needs(f"{backends.__name__}.paddle_backend")


def test_every_backend_is_in_the_table() -> None:
    assert set(backend_modules().values()) - {None} <= set(extras())
    assert "tensorrt" in backend_modules().values()


@pytest.mark.parametrize("module", sorted(extra_modules()))
def test_the_extra_installs_what_the_module_imports(module: str) -> None:
    extra = extra_modules()[module]
    listed = core() | (extras()[extra] if extra else frozenset())
    have = installed_by(listed)
    needs = {m for m in module_needs(module) if (module, m.split(".")[0]) not in NOT_RUN}
    missing = {m: sorted(providers(m)) for m in needs if not providers(m) & have}
    where = f"ocrstream[{extra}]" if extra else "the core dependencies"
    assert not missing, f"{module} imports what {where} does not install: {missing}"


@pytest.mark.parametrize("extra", CUDA_EXTRAS)
def test_every_cuda_extra_brings_nvml_for_the_gpu_gauges(extra: str) -> None:
    assert "pynvml" in module_needs(GPU_METRICS)
    assert providers("pynvml") & extras()[extra], f"ocrstream[{extra}] has no nvidia-ml-py"


@pytest.mark.parametrize("extra", sorted(set(extras()) - {"dev"}))
def test_every_distribution_of_an_extra_is_used(extra: str) -> None:
    modules = [m for m, e in extra_modules().items() if e == extra]
    if extra in CUDA_EXTRAS:
        modules.append(GPU_METRICS)
    used = {dist for m in modules for need in module_needs(m) for dist in providers(need)}
    unused = extras()[extra] - used
    assert not unused, f"ocrstream[{extra}] lists {sorted(unused)}, which nothing of it imports"


def test_plain_install_is_cpu_only() -> None:
    gpu = sorted(d for d in core() if GPU_DISTRIBUTIONS.fullmatch(d))
    assert not gpu, f"`pip install ocrstream` would pull GPU packages: {gpu}"


def test_transitive_providers_are_real() -> None:
    for dist, brings in BRINGS.items():
        try:
            requires = importlib.metadata.requires(dist) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        declared = {normalize(Requirement(r).name) for r in requires if "extra ==" not in r}
        assert brings <= declared, f"{dist} no longer requires {sorted(brings - declared)}"


# --- constraints.txt: the set the tests pass with ----------------------------------------------


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for row in (ROOT / "constraints.txt").read_text().splitlines():
        row = row.split("#", 1)[0].strip()
        if row:
            req = Requirement(row)
            (spec,) = req.specifier
            assert spec.operator == "==", f"constraints.txt: {row!r} is not an exact pin"
            pins[normalize(req.name)] = spec.version
    return pins


def test_constraints_pin_every_dependency_within_pyproject() -> None:
    """A fresh venv (make venv) and the images install exactly the versions CI tested."""
    pins = _pins()
    declared = [
        *PYPROJECT["project"]["dependencies"],
        *PYPROJECT["project"]["optional-dependencies"]["dev"],
        *PYPROJECT["project"]["optional-dependencies"]["openvino"],
    ]
    for row in declared:
        req = Requirement(row)
        name = normalize(req.name)
        assert name in pins, f"{name} is not pinned in constraints.txt (make lock)"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside pyproject's {req.specifier}"
        )


def test_what_is_not_run_is_not_run() -> None:
    from ocrstream.processors.ocr.quantize import Calibration

    # NOT_RUN's wordfreq: only the Japanese dev sets read it, and calibration renders none
    assert not [name for name in Calibration().devsets if name.startswith("a4-ja")]
