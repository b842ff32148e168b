"""PyMuPDF's optional layout add-on stays out of ocrstream's processes (it loads ONNX models
on import: over a second of every worker's and `ocrstream ocr`'s start-up)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

_PROBE = """
import sys
import ocrstream.processors.split  # what `ocrstream ocr` and the splitter import
import pymupdf
print(sys.modules.get("pymupdf.layout") is not None, pymupdf._get_layout is not None)
"""


def test_splitting_pdfs_never_activates_pymupdfs_layout_add_on():
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], check=True, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.split() == ["False", "False"]


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not _installed("pymupdf_layout"), reason="pymupdf_layout is not installed")
def test_the_structure_benchmarks_peer_can_still_have_it():
    probe = _PROBE.replace(
        "import pymupdf\n",
        "import pymupdf\nfrom ocrstream.processors.mupdf import with_layout\nwith_layout()\n",
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.split() == ["True", "True"]
