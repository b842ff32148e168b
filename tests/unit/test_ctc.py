"""CTC greedy decoding, rec batching and the dictionary table, on crafted inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ocrstream.processors.ocr.models import charset_from_lines
from ocrstream.processors.ocr.rec import (
    WIDTH_LADDER,
    RecParams,
    batch_rows,
    batch_tensor,
    bucket_width,
    ctc_greedy,
    kana_in_context,
    mark_widths,
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


def _with_space(seq: list[int], space_at: dict[int, float]) -> np.ndarray:
    """Steps of ``seq`` at 0.9, with the space class at the given probability on some steps."""
    probs = _probs(seq, [0.9] * len(seq))
    for t, p in space_at.items():
        probs[t, 4] = p
    return probs


def test_a_space_lost_on_blank_steps_is_read_back():
    # a , _ _ b: the blank steps between "a" and "b" had the space at 0.3 and 0.05
    probs = _with_space([1, 0, 0, 2], {1: 0.05, 2: 0.3})
    assert ctc_greedy(probs[None], CHARSET) == [("ab", pytest.approx(0.9))]
    ((text, score),) = ctc_greedy(probs[None], CHARSET, space_min=0.1)
    assert text == "a b"
    assert score == pytest.approx(0.9)  # the model's own steps only
    # under the threshold, or on a character's own step (no blank between): nothing
    assert ctc_greedy(probs[None], CHARSET, space_min=0.4)[0][0] == "ab"
    adjacent = _with_space([1, 1, 2], {1: 0.3})
    assert ctc_greedy(adjacent[None], CHARSET, space_min=0.1)[0][0] == "ab"


def test_restored_spaces_never_double_or_pad_the_ends():
    # _ a _ space _ b _ : spaces around the model's own space, and at both ends, stay out
    probs = _with_space([0, 1, 0, 4, 0, 2, 0], {0: 0.5, 2: 0.5, 4: 0.5, 6: 0.5})
    assert ctc_greedy(probs[None], CHARSET, space_min=0.1)[0][0] == "a b"
    # a repeat of the same character across a blank is two characters, with the space
    repeat = _with_space([1, 0, 1], {1: 0.2})
    assert ctc_greedy(repeat[None], CHARSET, space_min=0.1)[0][0] == "a a"


def test_no_space_is_restored_inside_a_figure():
    """A space class rising between two digits is the figure's own spacing: "11779" stays one
    figure; between a digit and a letter, or after a full stop, the space comes back."""
    charset = charset_from_lines(["1", "7", "9", ".", "a"])  # blank 1 7 9 . a space
    one, seven, nine, stop, a = 1, 2, 3, 4, 5

    def read(seq: list[int]) -> str:
        probs = np.full((len(seq), len(charset)), 0.01, np.float32)
        for t, c in enumerate(seq):
            probs[t, c] = 0.9
            if c == 0:
                probs[t, len(charset) - 1] = 0.3  # the space second on every blank step
        return str(ctc_greedy(probs[None], charset, space_min=0.1)[0][0])

    assert read([one, 0, one, 0, seven, 0, seven, 0, nine]) == "11779"
    assert read([nine, 0, a]) == "9 a"
    assert read([a, 0, one]) == "a 1"
    assert read([nine, stop, 0, seven]) == "9. 7"


def test_compact_rows_with_the_space_column_decode_like_full_ones():
    spaced = _with_space([1, 0, 0, 2, 2, 0, 3], {1: 0.2, 5: 0.02})
    rows = np.stack([spaced, _probs([0] * 7, [0.9] * 7)])
    idx = rows.argmax(axis=2)
    compact = np.stack(
        [idx.astype(np.float32), rows.max(axis=2), rows[..., len(CHARSET) - 1]], axis=2
    )
    want = ctc_greedy(rows, CHARSET, space_min=0.1)
    assert want[0][0] == "a bc"
    assert ctc_greedy(compact, CHARSET, space_min=0.1) == want
    # the older two-column layout carries no space: the greedy text alone
    assert ctc_greedy(compact[..., :2], CHARSET, space_min=0.1)[0][0] == "abc"


def test_a_dictionary_without_space_restores_none():
    no_space = CHARSET[:-1]
    rows = _probs([1, 0, 2], [0.9] * 3)[:, :4]
    rows[1, 3] = 0.3  # the last class is "c" here, not a space
    assert ctc_greedy(rows[None], no_space, space_min=0.1)[0][0] == "ab"


@pytest.mark.parametrize(
    ("read", "printed"),
    [
        ("中国,北京;上海:广州!深圳?", "中国，北京；上海：广州！深圳？"),
        ("老李6814:鲁迅", "老李6814：鲁迅"),  # before a Chinese character, after a figure
        ("カタカナ,ひらがな", "カタカナ，ひらがな"),
        ("Note: 中文", "Note: 中文"),  # after a Latin letter, before a space: English
        ("ID:中文", "ID:中文"),
        ("会议 10:30 开始", "会议 10:30 开始"),
        ("72.7%,增长", "72.7%，增长"),
        ("Total: 1,250.00", "Total: 1,250.00"),
        ("안녕하세요, 세계", "안녕하세요, 세계"),  # Korean takes the half-width marks
        ("", ""),
        # Latin text, the other way
        ("– FASTER CX5N （BLUE） 74C", "– FASTER CX5N (BLUE) 74C"),
        ("RSK。", "RSK."),
        ("TOTAL：１２.５０", "TOTAL:12.50"),
        ("货物出门，忽不退还", "货物出门，忽不退还"),
        ("（注）中文", "（注）中文"),
    ],
)
def test_marks_take_the_width_of_the_script_around_them(read: str, printed: str):
    assert mark_widths(read) == printed


@pytest.mark.parametrize(
    ("read", "printed"),
    [
        # be/pe, the same glyphs in both kanas: the script of the letter after them
        ("食ベる", "食べる"),
        ("すベて", "すべて"),
        ("ベッド", "ベッド"),
        ("スーパー", "スーパー"),
        ("オぺラ", "オペラ"),
        # katakana read as the kanji they resemble, and the other way
        ("工ネルギー", "エネルギー"),
        ("力タログ", "カタログ"),
        ("ア口マ", "アロマ"),
        ("半ニ刀", "半二刀"),
        ("工場で", "工場で"),  # a kanji beside it: left as read
        ("力を入れる", "力を入れる"),
        ("数カ月", "数カ月"),  # the counter stays katakana between kanji
        ("ト書きの", "ト書きの"),
        # the long-vowel mark after a kanji is 一; what a column's mark reads as, between katakana
        ("年ーに", "年一に"),
        ("リ1ズ", "リーズ"),
        ("ビール一本", "ビール一本"),
        ("コーヒー", "コーヒー"),
        # no kana: Chinese and Latin as read
        ("中国一ー工力", "中国一ー工力"),
        ("ABC 1-2", "ABC 1-2"),
        ("", ""),
    ],
)
def test_japanese_look_alikes_take_the_script_around_them(read: str, printed: str):
    assert kana_in_context(read) == printed


def test_ctc_reads_japanese_look_alikes_in_context_with_the_mark_widths():
    charset = ("", "食", "ベ", "る", " ")
    rows = _probs([1, 2, 3], [0.9] * 3)[:, :5]
    assert ctc_greedy(rows[None], charset)[0][0] == "食ベる"
    assert ctc_greedy(rows[None], charset, mark_width=True)[0][0] == "食べる"


def test_ctc_gives_mark_widths_only_when_asked():
    charset = ("", "中", "国", ",", " ")
    rows = _probs([1, 2, 3, 1], [0.9] * 4)[:, :5]
    assert ctc_greedy(rows[None], charset)[0][0] == "中国,中"
    ((text, conf),) = ctc_greedy(rows[None], charset, mark_width=True)
    assert text == "中国，中"
    assert conf == pytest.approx(ctc_greedy(rows[None], charset)[0][1])


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


def test_ladder_widths_bound_padding_and_shapes():
    """A GPU's widths: every line width lands on one of 17 widths, no narrower than the line
    and at most a third wider (half, under 128 px; min_width aside); rows go up to a power of
    two within the batch limit. The exact bucketing (the CPU's) keeps 32 px steps and the
    lines' count."""
    ladder, exact = RecParams(ladder=True), RecParams()
    got = {w: bucket_width(w, ladder) for w in range(1, 3400)}
    assert len(set(got.values())) == 17
    assert set(got.values()) == {*WIDTH_LADDER, ladder.max_width}
    for w, b in got.items():
        assert b >= min(w, ladder.max_width)
        assert b <= max(ladder.min_width, math.ceil(w * (4 / 3 if w >= 128 else 3 / 2)))
    assert len({bucket_width(w, exact) for w in range(1, 3400)}) == 99
    assert [batch_rows(n, 64, ladder) for n in (1, 2, 3, 5, 8, 33, 64)] == [1, 2, 4, 8, 8, 64, 64]
    assert batch_rows(40, 48, ladder) == 48  # the batch limit caps the padding
    assert [batch_rows(n, 64, exact) for n in (1, 3, 33)] == [1, 3, 33]
    t = batch_tensor([np.zeros((48, 40, 3), np.uint8)] * 3, 64, ladder, max_lines=64)
    assert t.shape == (4, 3, 48, 64)
    assert not t[3].any()


def test_batch_tensor_normalises_and_pads_with_zero():
    line = np.full((48, 40, 3), 255, np.uint8)
    line[:, :10] = 0
    t = batch_tensor([line], 64, RecParams())
    assert t.shape == (1, 3, 48, 64)
    assert t.dtype == np.float32
    assert t[0, :, :, :10].max() == pytest.approx(-1.0)
    assert t[0, :, :, 10:40].min() == pytest.approx(1.0)
    assert not t[0, :, :, 40:].any()


def _cpu_backends() -> list[str]:
    from ocrstream.processors.ocr.backends.choice import installed

    return sorted(installed())


def _rendered_lines(texts: list[str], width: int) -> np.ndarray:
    """Printed lines as rec reads them: black text on white at rec's 48 px, normalised."""
    import cv2

    lines = np.full((len(texts), 48, width, 3), 255, np.uint8)
    for line, text in zip(lines, texts, strict=True):
        cv2.putText(line, text, (4, 34), cv2.FONT_HERSHEY_SIMPLEX, 0.9, (0, 0, 0), 2)
    return (lines.transpose(0, 3, 1, 2).astype(np.float32) / 127.5 - 1.0).copy()


@pytest.mark.parametrize("backend_name", ["onnxruntime", "openvino"])
def test_compact_ctc_head_decodes_like_the_full_output(tmp_path, backend_name):
    """The derived rec model (best class + probability per step) reads printed lines exactly
    as the full output does, on either runtime, from one file for both."""
    from ocrstream.processors.ocr.backends import create_key
    from ocrstream.processors.ocr.backends.base import SessionOptions
    from ocrstream.processors.ocr.models import CTC_GROUP, ctc_best_model, load_model_set

    if backend_name not in _cpu_backends():
        pytest.skip(f"{backend_name} is not installed (no OpenVINO wheel for this platform)")
    models = load_model_set("ppocrv6-tiny")
    made = ctc_best_model(models.rec_path, tmp_path)
    assert made is not None
    path, classes = made
    assert classes == len(models.charset)
    assert ctc_best_model(models.rec_path, tmp_path) == made  # cached by hash
    backend, options = create_key(backend_name), SessionOptions(threads=1)
    full, compact = (
        backend.load(models.rec_path, "rec", options),
        backend.load(path, "rec", options),
    )
    texts = ["Invoice 2291, total 1,250.00", "The quick brown fox jumps", "QZXJ vwyk 7@#%&"]
    x = _rendered_lines(texts, 480)
    out, probs = compact.run(x), full.run(x)
    assert out.shape == (*probs.shape[:2], 3)
    best = probs.argmax(axis=2)
    # letters and figures in the first two groups of 64 classes, the space in the last
    assert {0, 1, (classes - 1) // CTC_GROUP} <= set((best[best > 0] // CTC_GROUP).tolist())
    np.testing.assert_array_equal(out[..., 0], best)
    np.testing.assert_allclose(out[..., 1], probs.max(axis=2), rtol=1e-6)
    np.testing.assert_allclose(out[..., 2], probs[..., -1], rtol=1e-5, atol=1e-7)
    read = ctc_greedy(out, models.charset)
    assert read == ctc_greedy(probs, models.charset)
    assert [text for text, _ in read][:2] == texts[:2]
    assert ctc_greedy(out, models.charset, 0.1) == ctc_greedy(probs, models.charset, 0.1)


def _stand_in_rec(path, classes: int, classifier: bool) -> None:
    """A stand-in rec model, (N, 3, 48, W) -> Softmax over ``classes`` per step: its logits a
    slice of the input itself, or (``classifier``) the input's steps of 8 values each through
    MatMul and Add, as PP-OCR's rec head computes them."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [helper.make_tensor("axes", TensorProto.INT64, [1], [1])]
    if classifier:
        weight = _stand_in_weight(classes)
        nodes = [
            helper.make_node("Reshape", ["x", "shape"], ["steps"]),
            helper.make_node("MatMul", ["steps", "weight"], ["product"]),
            helper.make_node("Add", ["product", "bias"], ["logits"]),
        ]
        inits += [
            helper.make_tensor("shape", TensorProto.INT64, [3], [0, -1, 8]),
            numpy_helper.from_array(weight, "weight"),
            numpy_helper.from_array(np.zeros(classes, np.float32), "bias"),
        ]
    else:
        nodes = [
            helper.make_node("Reshape", ["x", "shape"], ["flat"]),
            helper.make_node("Slice", ["flat", "starts", "ends", "axes"], ["logits"]),
        ]
        inits += [
            helper.make_tensor("shape", TensorProto.INT64, [3], [0, -1, classes]),
            helper.make_tensor("starts", TensorProto.INT64, [1], [0]),
            helper.make_tensor("ends", TensorProto.INT64, [1], [2]),
        ]
    graph = helper.make_graph(
        [*nodes, helper.make_node("Softmax", ["logits"], ["probs"], axis=2)],
        "stand-in",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 48, "W"])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", "T", classes])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    onnx.save(model, str(path))


# the classes a classifier stand-in's eight features pick, in groups of CTC_GROUP (64) and
# past the integers that bf16 (256) and float16 (2,048) hold
TIE_CLASSES = (7, 18_001, 18_700, 18_999, 63, 64, 12_345, 18_998)


@pytest.mark.parametrize("classifier", [False, True], ids=["padded", "classifier-filled"])
@pytest.mark.parametrize("backend_name", ["onnxruntime", "openvino"])
def test_compact_ctc_head_takes_the_first_of_tied_classes(tmp_path, backend_name, classifier):
    """Where two classes tie for the best probability, the head answers the first, as ArgMax
    does, within a group of classes and across groups; the classes added to fill the last
    group (the classifier's, or the Softmax's output padded) never win; the 19,000 classes
    check that the index is exact past bf16's and float16's integers."""
    from ocrstream.processors.ocr.backends import create_key
    from ocrstream.processors.ocr.backends.base import SessionOptions
    from ocrstream.processors.ocr.models import ctc_best_model

    if backend_name not in _cpu_backends():
        pytest.skip(f"{backend_name} is not installed (no OpenVINO wheel for this platform)")
    classes = 19_000  # 296 groups of 64 and 56 classes over: the last group is filled
    source = tmp_path / "stand-in.onnx"
    _stand_in_rec(source, classes, classifier)
    made = ctc_best_model(source, tmp_path)
    assert made is not None
    assert made[1] == classes
    session = create_key(backend_name).load(
        made[0], "rec", SessionOptions(threads=1, precision="bf16")
    )
    if classifier:
        features = np.zeros((2, 5, 8), np.float32)
        features[0, 0, [0, 1]] = 1.0  # 7 and 18,001 tie: 7
        features[0, 1, [4, 5]] = 1.0  # 63 and 64, the ends of two groups, tie: 63
        features[0, 2, [2, 3]] = 1.0  # 18,700 and the space (18,999) tie: 18,700
        features[1, 0, 7] = 1.0  # 18,998 alone
        features[1, 1, [7, 3]] = 1.0  # two in the last group: 18,998
        features[1, 2, 6] = 1.0  # 12,345 alone
        # steps 3 and 4 of each line: nothing at all, every class alike: class 0
        x = np.zeros((2, 3 * 48 * 5, 8), np.float32)  # 720 steps of 8 values
        x[:, :5] = features
        x = x.reshape(2, 3, 48, 40)
        want = [[7, 63, 18_700, 0, 0], [18_998, 18_998, 12_345, 0, 0]]
        logits = features @ _stand_in_weight(classes)
    else:
        logits = np.zeros((2, 2, classes), np.float32)
        logits[0, 0, [7, 18_001]] = 5.0  # a tie: 7 first
        logits[0, 1, [18_700, 18_999]] = 4.0  # a tie between two large indices
        logits[1, 0, 18_709] = 3.0  # one best, past every integer bf16 holds (256)
        logits[1, 1, classes - 1] = 2.0  # the last class (the space)
        x = np.zeros((2, 3, 48, 2375), np.float32)  # 3 * 48 * 2375 = 18 steps of 19,000
        x.reshape(2, -1)[:, : 2 * classes] = logits.reshape(2, -1)
        want = [[7, 18_700], [18_709, classes - 1]]
    out = session.run(x)
    steps = len(want[0])
    assert out[:, :steps, 0].tolist() == want
    probs = np.exp(logits - logits.max(2, keepdims=True))
    probs /= probs.sum(2, keepdims=True)
    np.testing.assert_allclose(out[:, :steps, 1], probs.max(2), rtol=1e-4)
    np.testing.assert_allclose(out[:, :steps, 2], probs[..., -1], rtol=1e-4)


def _stand_in_weight(classes: int) -> np.ndarray:
    weight = np.zeros((8, classes), np.float32)
    for k, c in enumerate(TIE_CLASSES):
        weight[k, c] = 4.0
    return weight


def test_the_engine_restores_no_space_on_clean_lines_and_keys_the_cache_apart(ocr_engine):
    """On clean lines the restored spaces change nothing a user reads (text, confidence);
    the page cache still tells the two settings apart."""
    from ocrstream.processors.ocr.engine import OcrEngine
    from tests.fakes.engines import render_text_page, scan_noise

    lines = ["Invoice 2291, due 2024-03-31: total 1,250.00", "Kindly remit to the account below."]
    page = scan_noise(render_text_page(lines), angle=0.0, sigma=4.0, quality=85)
    assert ocr_engine.settings.rec_space_min > 0
    greedy = OcrEngine(ocr_engine.settings.model_copy(update={"rec_space_min": 0.0}))
    (a,) = ocr_engine.recognize([page])
    (b,) = greedy.recognize([page])
    assert [line.text for line in a.lines] == lines
    assert [line.confidence for line in a.lines] == [line.confidence for line in b.lines]
    assert ocr_engine.fingerprint("text") != greedy.fingerprint("text")


def test_a_chinese_page_reads_with_its_mark_widths(ocr_engine):
    """A scanned-looking Chinese page (the a4-zh dev set's renderer): its commas, colons and
    semicolons come back full-width as printed, so the raw text is as close to the page as
    the normalised one (NFKC folds the two forms together); the page cache keys it apart."""
    from ocrstream.bench import devsets
    from ocrstream.bench.cer import page_cer
    from ocrstream.processors.ocr.engine import OcrEngine

    missing = devsets.requirements("a4-zh")
    if missing:
        pytest.skip(f"this machine cannot render Chinese pages: {'; '.join(missing)}")
    data, truth = devsets.render_page("a4-zh", 9)  # 11 marks read half-width without it
    assert any(mark in line.text for line in truth for mark in "，；：")
    (page,) = ocr_engine.recognize([data])
    raw = page_cer(page.lines, truth, normalised=False)
    folded = page_cer(page.lines, truth, normalised=True)
    assert raw.edits <= folded.edits + 2
    assert raw.edits < 0.02 * raw.ref_chars
    as_read = OcrEngine(ocr_engine.settings.model_copy(update={"rec_mark_width": False}))
    assert ocr_engine.fingerprint("text") != as_read.fingerprint("text")


@pytest.mark.parametrize(("opset", "compact"), [(11, False), (13, True), (18, True)])
def test_a_softmax_without_an_axis_gets_the_compact_head_only_where_it_means_the_last(
    tmp_path, opset, compact
):
    """ONNX's Softmax without an axis normalises over the last axis from opset 13 and over
    every axis after the first before: only the latter is a per-step softmax to compact. The
    head is written in the model's opset (reductions' axes as an input from 18)."""
    import onnx

    from ocrstream.processors.ocr.backends import create_key
    from ocrstream.processors.ocr.backends.base import SessionOptions
    from ocrstream.processors.ocr.models import ctc_best_model

    source = tmp_path / "stand-in.onnx"
    _stand_in_rec(source, 100, classifier=False)
    model = onnx.load(str(source))
    softmax = next(n for n in model.graph.node if n.op_type == "Softmax")
    del softmax.attribute[:]
    model.opset_import[0].version = opset
    onnx.save(model, str(source))
    made = ctc_best_model(source, tmp_path)
    assert (made is not None) is compact
    if made is not None:
        logits = np.zeros((1, 2, 100), np.float32)
        logits[0, 0, 70] = logits[0, 1, 99] = 3.0  # the second group, and the space
        x = np.zeros((1, 3, 48, 25), np.float32)  # 3,600 values: 36 steps of 100 classes
        x.reshape(-1)[:200] = logits.reshape(-1)
        session = create_key("onnxruntime").load(made[0], "rec", SessionOptions(threads=1))
        assert session.run(x)[0, :2, 0].tolist() == [70.0, 99.0]


def test_the_compact_head_adds_no_initializer_that_no_node_reads(tmp_path):
    """onnxruntime warns, at every start of every worker, of each initializer no node reads."""
    import onnx

    from ocrstream.processors.ocr.models import ctc_best_model, load_model_set

    made = ctc_best_model(load_model_set("ppocrv6-tiny").rec_path, tmp_path)
    assert made is not None
    graph = onnx.load(str(made[0])).graph
    read = {name for node in graph.node for name in node.input}
    assert [i.name for i in graph.initializer if i.name not in read] == []
