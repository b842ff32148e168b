"""CTC greedy decoding, rec batching and the dictionary table, on crafted inputs."""

from __future__ import annotations

import numpy as np
import pytest

from ocrstream.processors.ocr.models import charset_from_lines
from ocrstream.processors.ocr.rec import (
    RecParams,
    batch_tensor,
    bucket_width,
    ctc_greedy,
    plan_batches,
)

CHARSET = charset_from_lines(["a", "b", "c"])  # blank, a, b, c, space


def _probs(seq: list[int], conf: list[float]) -> np.ndarray:
    out = np.full((len(seq), len(CHARSET)), 0.0, np.float32)
    for t, (c, p) in enumerate(zip(seq, conf, strict=True)):
        out[t] = (1 - p) / (len(CHARSET) - 1)
        out[t, c] = p
    return out


def test_charset_has_blank_first_and_space_last():
    assert CHARSET == ("", "a", "b", "c", " ")
    assert charset_from_lines(["x\r", "y", "", ""]) == ("", "x", "y", " ")


def test_repeats_collapse_blanks_split_and_drop():
    # a a _ a b b _ _ space c  ->  "aab c"
    seq = [1, 1, 0, 1, 2, 2, 0, 0, 4, 3]
    conf = [0.9, 0.7, 0.99, 0.8, 0.6, 0.5, 0.99, 0.99, 0.9, 1.0]
    ((text, score),) = ctc_greedy(_probs(seq, conf)[None], CHARSET)
    assert text == "aab c"
    # kept steps: the first of each run (0.9, 0.8, 0.6, 0.9, 1.0)
    assert score == pytest.approx(np.mean([0.9, 0.8, 0.6, 0.9, 1.0]), abs=1e-5)


def test_batch_rows_decode_independently_and_blank_rows_are_empty():
    a = _probs([1, 2, 3, 0], [0.9] * 4)
    b = _probs([0, 0, 0, 0], [0.9] * 4)
    c = _probs([3, 3, 3, 3], [0.5] * 4)
    out = ctc_greedy(np.stack([a, b, c]), CHARSET)
    assert out == [("abc", pytest.approx(0.9)), ("", 0.0), ("c", pytest.approx(0.5))]


def test_ctc_rejects_wrong_rank():
    with pytest.raises(ValueError, match="N x T x C"):
        ctc_greedy(np.zeros((4, 5), np.float32), CHARSET)


def test_bucket_widths_and_batches_bound_padding_and_memory():
    params = RecParams(min_width=64, width_step=32, max_width=3200, max_batch_width=1024)
    assert bucket_width(10, params) == 64
    assert bucket_width(65, params) == 96
    assert bucket_width(5000, params) == 3200
    widths = [bucket_width(w, params) for w in (70, 90, 500, 65, 96, 1000, 1000)]
    batches = plan_batches(widths, max_lines=8, params=params)
    assert sorted(i for b in batches for i in b) == list(range(7))
    for b in batches:
        assert len({widths[i] for i in b}) == 1
        assert len(b) * widths[b[0]] <= max(params.max_batch_width, widths[b[0]])


def test_batch_tensor_normalises_and_pads_with_zero():
    line = np.full((48, 40, 3), 255, np.uint8)
    line[:, :10] = 0
    t = batch_tensor([line], 64, RecParams())
    assert t.shape == (1, 3, 48, 64)
    assert t.dtype == np.float32
    assert t[0, :, :, :10].max() == pytest.approx(-1.0)
    assert t[0, :, :, 10:40].min() == pytest.approx(1.0)
    assert not t[0, :, :, 40:].any()


def test_compact_ctc_head_decodes_like_the_full_output(tmp_path):
    """The derived rec model (best class + probability per step) reads exactly the same."""
    from ocrstream.processors.ocr.backends.base import SessionOptions
    from ocrstream.processors.ocr.backends.onnxruntime_backend import OnnxRuntimeBackend
    from ocrstream.processors.ocr.models import ctc_best_model, load_model_set

    models = load_model_set("ppocrv6-tiny")
    made = ctc_best_model(models.rec_path, tmp_path)
    assert made is not None
    path, classes = made
    assert classes == len(models.charset)
    assert ctc_best_model(models.rec_path, tmp_path) == made  # cached by the source's hash
    backend, options = OnnxRuntimeBackend(), SessionOptions(threads=1)
    full, compact = (
        backend.load(models.rec_path, "rec", options),
        backend.load(path, "rec", options),
    )
    x = np.random.default_rng(0).uniform(-1, 1, (3, 3, 48, 160)).astype(np.float32)
    out = compact.run(x)
    assert out.shape[2] == 2
    assert ctc_greedy(out, models.charset) == ctc_greedy(full.run(x), models.charset)
