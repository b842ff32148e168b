"""PyMuPDF's optional layout add-on stays out of ocrstream's processes (it loads ONNX models
on import: over a second of every worker's and `ocrstream ocr`'s start-up), and PyMuPDF itself
is imported only when a PDF is split."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

# A one-page PDF with no xref table (MuPDF rebuilds it, as it does for damaged files).
_PDF = (
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
    b"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
    b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 200]>>endobj\n"
    b"trailer<</Root 1 0 R>>\n%%EOF\n"
)

_PROBE = f"""
import sys
from ocrstream.processors import split  # what `ocrstream ocr` and the splitter import
from ocrstream.settings import LimitsSettings
assert split.probe({_PDF!r}, "application/pdf", LimitsSettings()) == 1
import pymupdf
print(sys.modules.get("pymupdf.layout") is not None, pymupdf._get_layout is not None)
"""


def _printed(code: str) -> list[str]:
    """What ``code`` prints, run in a fresh interpreter (imports are per process)."""
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    )
    return out.stdout.split()


def test_splitting_pdfs_never_activates_pymupdfs_layout_add_on():
    assert _printed(_PROBE) == ["False", "False"]


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
    assert _printed(probe) == ["True", "True"]


_IMAGE_PROBE = """
import sys
import numpy as np, cv2
from ocrstream.processors import split
from ocrstream.settings import LimitsSettings
ok, png = cv2.imencode(".png", np.full((40, 60, 3), 255, np.uint8))
pages = list(split.iter_pages(png.tobytes(), "image/png", LimitsSettings()))
print(len(pages), "pymupdf" in sys.modules)
"""


def test_an_image_is_split_without_importing_pymupdf():
    assert _printed(_IMAGE_PROBE) == ["1", "False"]


_SHORTCUTS_PROBE = """
import sys
from ocrstream.processors.mupdf import pymupdf
held_back = "pymupdf4llm" not in sys.modules
import pymupdf4llm
print(held_back, pymupdf4llm.to_markdown is not None)
"""


@pytest.mark.skipif(not _installed("pymupdf4llm"), reason="pymupdf4llm is not installed")
def test_pymupdfs_markdown_shortcuts_are_not_imported_with_it_but_still_can_be():
    assert _printed(_SHORTCUTS_PROBE) == ["True", "True"]
