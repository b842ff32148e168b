"""PyMuPDF for ocrstream, without its optional layout add-on.

PyMuPDF 2 imports ``pymupdf.layout`` whenever the ``pymupdf_layout`` package is installed (it
comes with pymupdf4llm, the structure benchmark's peer), and that add-on loads three ONNX
models on import: 1.2 s and ~100 MB on every ``ocrstream ocr`` and worker start on 2 vCPUs,
for a layout analyser ocrstream never calls (its own is :mod:`ocrstream.processors.layout`).
Importing PyMuPDF through this module keeps the add-on out; :func:`with_layout` brings it back
for the one caller that wants it (``ocrstream bench structure``'s pymupdf4llm). PyMuPDF also
imports pymupdf4llm itself, when installed, for its ``to_markdown`` shortcuts (~0.1 s, and
onnxruntime with it); that import is kept out too (ocrstream never calls those shortcuts), and
``import pymupdf4llm`` afterwards works as usual.
"""

from __future__ import annotations

import importlib
import sys

_ADDON = "pymupdf.layout"
_SHORTCUTS = "pymupdf4llm"
_held_back = False
if "pymupdf" not in sys.modules:
    sys.modules.setdefault(_ADDON, None)  # type: ignore[arg-type]  # its import: ImportError
    if _SHORTCUTS not in sys.modules:
        sys.modules[_SHORTCUTS] = None  # type: ignore[assignment]
        _held_back = True
try:
    import pymupdf
finally:
    if _held_back:
        sys.modules.pop(_SHORTCUTS, None)

__all__ = ["pymupdf", "with_layout"]


def with_layout() -> None:
    """Activate PyMuPDF's layout add-on in this process (where it is installed)."""
    if _ADDON in sys.modules and sys.modules[_ADDON] is None:
        del sys.modules[_ADDON]
    importlib.import_module(_ADDON)
