"""INT8 post-training quantisation of the det and rec models (``OCRSTREAM_OCR_PRECISION=int8``).

The CPU engine's own fp32 pipeline is run on a calibration set — the ``dev`` split of the
engine's development sets (:mod:`ocrstream.bench.devsets`: English A4, Chinese A4, small print;
never the held-out split, never outside data; optionally generated receipt-like strips,
:func:`~ocrstream.bench.devsets.receipt_like_page`) — with every tensor it hands to det and rec
recorded. NNCF's post-training quantisation (min/max ranges per channel for weights and per
tensor for activations, over the whole set, then a bias correction) turns each OpenVINO model
into an INT8 one from those tensors, so the quantised models see exactly what they will be
given at work. The convolutions that read the model's input (the image itself) stay fp32: an
8-bit copy of the page cost the receipts most of what INT8 det lost (docs/benchmarks.md,
session 33).

Each result is OpenVINO IR under ``{engine_cache_dir}/openvino/int8/``, named by a key over
the source model's SHA-256, its input shape range, the calibration set's identity, NNCF's and
OpenVINO's versions and :data:`FORMAT`, with a JSON manifest beside it. Nothing is
downloaded. ``ocrstream engine quantize`` builds the cache; an engine that finds none builds
it once itself, saying so in a warning (on 2 shared, loaded vCPUs: 2.5-6 min for v6 tiny,
17 min for v6 small), under a file lock so that workers starting together build it once.

Which models run in INT8 is decided per model set by measurement (:data:`INT8_MODELS`,
docs/benchmarks.md): a model not listed there stays fp32 in the int8 profile.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.backends.base import Backend, InferSession, ModelKind, SessionOptions
from ocrstream.settings import OcrSettings

log = logging.getLogger(__name__)

FORMAT = 3  # bump when the recipe below changes: every cached model is rebuilt
# NNCF's preset: "performance" (symmetric activations) or "mixed" (asymmetric activations,
# for the hard-swish outputs of PP-LCNet that reach below zero).
PRESET = "performance"
# Which models of a set run in INT8 in the int8 profile (the rest stay fp32): measured on the
# held-out dev sets and receipts, docs/benchmarks.md "INT8".
# INT8 rec lost accuracy on every set (v6 small's rec read 20% of A4 characters wrong; v6 tiny's
# +0.0034 nCER on Chinese, +0.008 on receipts), INT8 det held the A4 sets: det only. With its
# first convolution in fp32 and the whole set's activation ranges, INT8 det holds the receipts
# too (+0.0015 nCER v6 small, +0.0016 v6 tiny; session 33).
# ppocrv6-small-tinydet: none. Its det is v6 tiny's, already a fifth of a page in fp32; INT8
# det gave it 0.99-1.02x fp32's pages/s and +0.0024 nCER on the receipts (session 52).
INT8_MODELS: dict[str, frozenset[str]] = {"ppocrv6-small-tinydet": frozenset()}
DEFAULT_INT8_MODELS = frozenset({"det"})


@dataclass(frozen=True, slots=True)
class Calibration:
    """The calibration set: ``pages`` dev-split pages of each of ``devsets``."""

    devsets: tuple[str, ...] = ("a4-en", "a4-zh", "small-print")
    split: str = "dev"
    pages: int = 4
    # generated receipt-like pages (devsets.receipt_like_page, seeds from 0); 4 of them did not
    # help on the held-out receipts and cost A4 edits (docs/benchmarks.md), so none by default
    receipts: int = 0
    max_det: int = 12  # det inputs kept (one per page)
    max_rec: int = 96  # rec batches kept, spread over the set

    @property
    def identity(self) -> str:
        from ocrstream.bench import devsets

        receipts = f" receipts={self.receipts}" if self.receipts else ""
        return (
            f"devsets={','.join(self.devsets)} split={self.split} pages={self.pages}{receipts} "
            f"devset-v{','.join(str(devsets.VERSIONS[name]) for name in self.devsets)} "
            f"det<={self.max_det} rec<={self.max_rec}"
        )

    def samples(self) -> list[bytes]:
        from ocrstream.bench import devsets

        try:
            pages = [
                s.path.read_bytes()
                for name in self.devsets
                for s in devsets.devset(name, self.pages, self.split)
            ]
            return pages + [devsets.receipt_like_page(seed) for seed in range(self.receipts)]
        except devsets.MissingRequirement as e:
            raise FatalError(
                f"the int8 calibration set cannot be made here: {e}", code="bad_config"
            ) from e


CALIBRATION = Calibration()


def int8_kinds(model: str) -> frozenset[str]:
    """The models of set ``model`` that the int8 profile runs in INT8."""
    return INT8_MODELS.get(model, DEFAULT_INT8_MODELS)


def tool_versions() -> str:
    from ocrstream.processors.ocr.models import package_version

    return f"nncf-{package_version('nncf')} openvino-{package_version('openvino')}"


def cache_key(source_sha256: str, shape: str, calibration: Calibration) -> str:
    text = f"{FORMAT} {source_sha256} {shape} {calibration.identity} {tool_versions()}"
    if PRESET != "performance":
        text += f" preset={PRESET}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def cached_path(
    cache_dir: Path, source: Path, shape: str, calibration: Calibration | None = None
) -> Path:
    """Where the INT8 IR of ``source`` (for input shapes ``shape``) is kept; ``source``'s
    digest is kept in ``cache_dir`` too, as the engine's other files' are (a derived model no
    process has hashed yet would otherwise be hashed at every start)."""
    from ocrstream.processors.ocr.models import file_digest

    key = cache_key(file_digest(source, cache_dir), shape, calibration or CALIBRATION)
    return Path(cache_dir) / "openvino" / "int8" / f"{source.stem}-{key}.xml"


def is_built(path: Path) -> bool:
    return path.is_file() and path.with_suffix(".bin").is_file()


# --------------------------------------------------------------------------- recording


class _Recorder:
    """A session that keeps a copy of every batch it runs."""

    def __init__(self, inner: InferSession, seen: list[npt.NDArray[np.float32]]) -> None:
        self._inner, self._seen = inner, seen
        self.backend, self.device = inner.backend, inner.device
        self.concurrency = 1

    def run(self, batch: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        self._seen.append(np.array(batch, dtype=np.float32, copy=True))
        return self._inner.run(batch)


class _RecordingBackend:
    """Wraps a backend so that the det and rec sessions record their inputs."""

    def __init__(self, inner: Backend) -> None:
        self._inner = inner
        self.name = inner.name
        self.seen: dict[str, list[npt.NDArray[np.float32]]] = {"det": [], "rec": []}

    def load(self, model_path: Path, kind: ModelKind, options: SessionOptions) -> InferSession:
        session = self._inner.load(model_path, kind, options)
        return _Recorder(session, self.seen[kind]) if kind in self.seen else session


def _spread(items: list[Any], most: int) -> list[Any]:
    """At most ``most`` of ``items``, evenly spread (the first and the last kept)."""
    if len(items) <= most:
        return items
    step = (len(items) - 1) / (most - 1)
    return [items[round(i * step)] for i in range(most)]


def calibration_inputs(
    settings: OcrSettings, pages: Sequence[bytes], calibration: Calibration | None = None
) -> dict[str, list[npt.NDArray[np.float32]]]:
    """The det and rec input tensors of the fp32 engine reading ``pages``."""
    from ocrstream.processors.ocr.backends import create
    from ocrstream.processors.ocr.engine import OcrEngine

    calibration = calibration or CALIBRATION
    fp32 = settings.model_copy(update={"precision": "fp32"})
    backend = _RecordingBackend(create(fp32))
    engine = OcrEngine(fp32, backend=backend)
    try:
        for seen in backend.seen.values():
            seen.clear()  # the engine's own start-up runs: rec's charset probe, det's warm-up
        for page in pages:
            engine.recognize([page])
    finally:
        engine.close()
    return {
        "det": _spread(backend.seen["det"], calibration.max_det),
        "rec": _spread(backend.seen["rec"], calibration.max_rec),
    }


# --------------------------------------------------------------------------- building


# Ops a walk from a model input passes through on its way to the first convolution (layout and
# per-element ops, which do not mix pixels).
_PASS_THROUGH = frozenset(
    {"Convert", "Multiply", "Add", "Subtract", "Divide", "Transpose", "Reshape", "Clamp"}
)
_CONVOLUTIONS = frozenset({"Convolution", "GroupConvolution"})


def input_convolutions(model: Any) -> list[str]:
    """The friendly names of an OpenVINO model's convolutions that read one of its inputs
    (directly or through per-element ops): the ones the int8 models keep in fp32."""
    found: set[str] = set()
    frontier = list(model.get_parameters())
    for _ in range(8):
        following = []
        for node in frontier:
            for output in node.outputs():
                for target in output.get_target_inputs():
                    op = target.get_node()
                    kind = op.get_type_name()
                    if kind in _CONVOLUTIONS:
                        found.add(op.get_friendly_name())
                    elif kind in _PASS_THROUGH:
                        following.append(op)
        frontier = following
    return sorted(found)


def quantize_ir(
    source: Path, shape: Any, samples: Sequence[npt.NDArray[np.float32]], target: Path
) -> list[str]:
    """NNCF's post-training INT8 quantisation of ONNX ``source`` reshaped to ``shape``,
    calibrated on ``samples``, saved as OpenVINO IR ``target`` (atomically); returns the ops
    kept in fp32 (:func:`input_convolutions`)."""
    try:
        import nncf
        import openvino as ov
        from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters
        from nncf.quantization.range_estimator import RangeEstimatorParametersSet
    except ImportError as e:
        raise FatalError(
            f"building the int8 models needs nncf ({e}): pip install 'ocrstream[openvino]'",
            code="backend_unavailable",
        ) from e
    core = ov.Core()
    model = core.read_model(str(source))
    model.reshape({model.inputs[0].any_name: shape})
    logging.getLogger("nncf").setLevel(logging.WARNING)
    fp32_ops = input_convolutions(model)
    quantized = nncf.quantize(
        model,
        nncf.Dataset(list(samples)),
        subset_size=len(samples),
        target_device=nncf.TargetDevice.CPU,
        preset=nncf.QuantizationPreset(PRESET),
        ignored_scope=nncf.IgnoredScope(names=fp32_ops),
        # Activation ranges from the whole set's min and max, not the mean of each sample's
        # (NNCF's default): as accurate on the receipts, and much less moved by which pages
        # calibrate (v6 tiny, 4 or 8 pages a set: 2,803 / 2,794 receipt edits against the
        # mean's 2,799 / 2,914; docs/benchmarks.md, session 33)
        advanced_parameters=AdvancedQuantizationParameters(
            activations_range_estimator_params=RangeEstimatorParametersSet.MINMAX
        ),
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.stem}.{os.getpid()}.{threading.get_ident()}.xml"
    ov.save_model(quantized, str(tmp), compress_to_fp16=False)
    tmp.with_suffix(".bin").replace(target.with_suffix(".bin"))
    tmp.replace(target)
    return fp32_ops


@contextlib.contextmanager
def _build_lock(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".build.lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@dataclass(frozen=True, slots=True)
class Wanted:
    """One model the int8 profile needs: its fp32 source, shape range and cached IR path."""

    kind: str
    source: Path
    shape: Any
    target: Path


def build(
    settings: OcrSettings,
    wanted: Sequence[Wanted],
    calibration: Calibration | None = None,
    pages: Sequence[bytes] | None = None,
) -> list[Path]:
    """Make every missing model of ``wanted`` (one build at a time per cache folder).

    ``pages`` replaces the calibration set's pages (tests); the key still names
    ``calibration``, so a caller passing pages must pass a calibration that says which."""
    if not wanted:
        return []
    calibration = calibration or CALIBRATION
    folder = wanted[0].target.parent
    with _build_lock(folder):
        missing = [w for w in wanted if not is_built(w.target)]
        if not missing:
            return [w.target for w in wanted]
        start = time.perf_counter()
        inputs = calibration_inputs(
            settings, pages if pages is not None else calibration.samples(), calibration
        )
        for w in missing:
            fp32_ops = quantize_ir(w.source, w.shape, inputs[w.kind], w.target)
            manifest = {
                "kind": w.kind,
                "source": str(w.source),
                "calibration": calibration.identity,
                "samples": len(inputs[w.kind]),
                "fp32_ops": fp32_ops,
                "versions": tool_versions(),
                "format": FORMAT,
                "built_s": round(time.perf_counter() - start, 1),
            }
            w.target.with_suffix(".json").write_text(
                json.dumps(manifest, indent=2), encoding="utf-8"
            )
            log.info("int8 %s model built: %s", w.kind, w.target)
        prune_stale(folder)
    return [w.target for w in wanted]


def prune_stale(folder: Path) -> list[Path]:
    """Delete the INT8 models in ``folder`` that no engine here can load again: built under
    another :data:`FORMAT` or other NNCF/OpenVINO versions (both are part of every key, so a
    recipe change or an upgrade would otherwise leave the old files behind for good). Models
    without a manifest are kept; the caller holds the folder's build lock."""
    removed = []
    for manifest in sorted(folder.glob("*.json")):
        try:
            made = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if made.get("format") == FORMAT and made.get("versions") == tool_versions():
            continue
        for suffix in (".xml", ".bin", ".json"):
            manifest.with_suffix(suffix).unlink(missing_ok=True)
        removed.append(manifest.with_suffix(".xml"))
        log.info(
            "int8 model of format %s (%s) removed: %s",
            made.get("format"),
            made.get("versions"),
            manifest.with_suffix(".xml"),
        )
    return removed


def wanted_models(
    settings: OcrSettings,
    model: str,
    sources: dict[str, tuple[Path, SessionOptions]],
    calibration: Calibration | None = None,
) -> list[Wanted]:
    """The INT8 models the int8 profile of set ``model`` needs, from the fp32 ``sources``
    (kind → the model file the engine would load and its session options)."""
    from ocrstream.processors.ocr.backends.openvino_backend import dynamic_shape

    out = []
    for kind, (source, options) in sources.items():
        if kind not in int8_kinds(model):
            continue
        shape = dynamic_shape(kind, options)  # type: ignore[arg-type]
        target = cached_path(settings.engine_cache_dir, source, str(shape), calibration)
        out.append(Wanted(kind, source, shape, target))
    return out


def int8_paths(
    settings: OcrSettings,
    backend: str,
    model: str,
    sources: dict[str, tuple[Path, SessionOptions]],
) -> dict[str, Path]:
    """kind → the INT8 IR to load instead of the fp32 source, built first if missing (with a
    warning: ``ocrstream engine quantize`` is the way to build it ahead of time). Nothing for
    a set whose INT8 models did not pay (:data:`INT8_MODELS`): it runs in fp32, on any
    backend, and the user is told so."""
    if not int8_kinds(model):
        log.warning(
            "the int8 profile quantises no model of %s (INT8 did not pay for it: "
            "docs/benchmarks.md); it runs in fp32",
            model,
        )
        return {}
    if backend != "openvino":
        raise FatalError(
            f"precision int8 runs on the openvino backend only, not {backend}",
            code="bad_config",
        )
    wanted = wanted_models(settings, model, sources)
    missing = [w for w in wanted if not is_built(w.target)]
    if missing:
        log.warning(
            "no int8 %s model in %s: building it now from the %s calibration set "
            "(once; minutes of CPU — `ocrstream engine quantize` does it ahead of time)",
            "+".join(w.kind for w in missing),
            missing[0].target.parent,
            CALIBRATION.split,
        )
        build(settings, wanted)
    return {w.kind: w.target for w in wanted}
