"""The package as users get it: the wheel holds ``ocrstream`` alone, with the design card's
top-level folders inside it (streams/, processors/, schemas/, storage/ are ocrstream.streams …),
its schemas and service configs as package data, and no top-level ``streams`` or ``storage``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import LAYOUT_FOLDERS

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(REPO)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (built,) = out.glob("ocrstream-*.whl")
    return built


def test_the_wheel_holds_ocrstream_alone_with_every_module_and_data_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/", 1)[0] for n in names if not n.startswith("ocrstream-")}
    assert tops == {"ocrstream"}
    for folder in LAYOUT_FOLDERS:  # every module of the top-level folders, under ocrstream/
        modules = {p.relative_to(REPO).as_posix() for p in (REPO / folder).rglob("*.py")
                   if "__pycache__" not in p.parts}  # fmt: skip
        assert modules, folder
        assert {f"ocrstream/{m}" for m in modules} <= names, folder
    for data in ("ocrstream/py.typed", "ocrstream/schemas/ScanSubmitted.avsc",
                 "ocrstream/schemas/released/v1.0/ScanSubmitted.avsc",
                 "ocrstream/services/infra/kafka/pom.xml",
                 "ocrstream/services/infra/prometheus/rules/ocrstream.rules.yml",
                 "ocrstream/api/ui/index.html", "ocrstream/api/ui/app.js",
                 "ocrstream/api/ui/app.css"):  # fmt: skip
        assert data in names, data


def test_installed_the_folders_are_only_ocrstream_subpackages(wheel: Path, tmp_path: Path) -> None:
    """In a clean venv with the wheel (no dependencies: only names are checked)."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    probe = (
        "import importlib.util as u, json, sys; names = sys.argv[1:]; "
        "print(json.dumps({n: [u.find_spec(n) is not None, "
        "u.find_spec('ocrstream.' + n) is not None] for n in names}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the wheel alone
    result = subprocess.run([python, "-c", probe, *LAYOUT_FOLDERS], cwd=tmp_path, env=env,
                            capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    found = json.loads(result.stdout)
    assert found == {name: [False, True] for name in LAYOUT_FOLDERS}


def test_a_test_cannot_import_a_layout_folder_by_its_name() -> None:
    for name in LAYOUT_FOLDERS:
        with pytest.raises(ModuleNotFoundError, match=f"ocrstream.{name}"):
            __import__(name)
