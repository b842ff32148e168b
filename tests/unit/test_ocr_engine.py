"""The real engine on pages the tests render themselves (PyMuPDF, 300 DPI, scan noise)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from ocrstream.processors.imageio import decode_image
from ocrstream.processors.ocr import det as det_mod
from ocrstream.processors.ocr.bilevel import soften
from ocrstream.processors.ocr.engine import OcrEngine
from ocrstream.processors.ocr.models import MODEL_SETS, load_model_set
from ocrstream.processors.split_encode import encode_bilevel_png
from ocrstream.settings import OcrSettings
from tests.fakes.engines import cer, render_text_page, scan_noise

LINES = [
    "Invoice 2024-0117 for ACME Corporation",
    "Total amount due: 1,234.56 USD",
    "Payment within 30 days of receipt.",
    "Reference number 98765 and 43210",
]
TRUTH = "\n".join(LINES)


@pytest.fixture(scope="module")
def scanned() -> bytes:
    return scan_noise(render_text_page(LINES), angle=1.0, sigma=8.0, quality=70)


def test_scanned_page_reads_back(ocr_engine: OcrEngine, scanned: bytes):
    (page,) = ocr_engine.recognize([scanned])
    assert page.status == "ok"
    assert cer(page.text, TRUTH) < 0.05, page.text
    assert [line.text for line in page.lines][:1] == [LINES[0]]  # reading order
    for line in page.lines:
        assert 0.5 <= line.confidence <= 1.0
        xs, ys = zip(*line.polygon, strict=True)
        assert min(xs) >= 0
        assert max(xs) <= page.width
        assert min(ys) >= 0
        assert max(ys) <= page.height
        assert xs[0] < xs[1]
        assert ys[0] < ys[3]
    assert {"decode", "det", "rec", "total"} <= set(page.timings_ms)
    assert page.timings_ms["total"] >= page.timings_ms["det"] + page.timings_ms["rec"] - 1e-6
    assert (page.height, page.width) == render_text_page(LINES).shape[:2]


def test_page_reads_the_same_alone_and_in_a_batch_of_32(ocr_engine: OcrEngine, scanned: bytes):
    (alone,) = ocr_engine.recognize([scanned])
    others: list[bytes | np.ndarray] = []
    for i in range(31):
        if i % 10 == 0:  # same size as the page, so it shares the page's det batch
            other = render_text_page([f"Other page {i}", "with more text", "on four", "lines"])
        else:
            page = np.full((736 + 32 * (i % 3), 760 + 16 * (i % 5), 3), 255, np.uint8)
            words = render_text_page([f"Word {i}"], width_in=2.0)
            page[100 : 100 + words.shape[0], 50 : 50 + words.shape[1]] = words
            other = page
        others.append(scan_noise(other, seed=i) if i % 2 else other)
    batch = [*others[:17], scanned, *others[17:]]
    results = ocr_engine.recognize(batch)
    assert len(results) == 32
    inside = results[17]
    assert [line.text for line in inside.lines] == [line.text for line in alone.lines]
    for a, b in zip(alone.lines, inside.lines, strict=True):
        np.testing.assert_allclose(a.polygon, b.polygon, atol=1.0)
        assert a.confidence == pytest.approx(b.confidence, abs=1e-3)
    assert "Word 1" in results[1].text


def test_a_one_thread_cpu_engine_reads_on_its_own_thread_and_the_same(
    ocr_engine: OcrEngine, scanned: bytes
):
    # a worker given one thread keeps to one core: det is not overlapped on a thread of its own
    import threading

    one = OcrEngine(OcrSettings(threads=1))
    try:
        before = set(threading.enumerate())
        pages = one.recognize([scanned, scanned])
        started = [t.name for t in set(threading.enumerate()) - before]
        assert not [name for name in started if name.startswith(("ocr-det", "ocr-host"))], started
        (two,) = ocr_engine.recognize([scanned])
        assert [p.text for p in pages] == [two.text, two.text]
    finally:
        one.close()


def test_pages_prepared_side_by_side_read_the_same(ocr_engine: OcrEngine, scanned: bytes):
    """A GPU engine decodes a call's pages, fills its det batches, cuts its pages' lines and
    fills and decodes its rec batches around each run in threads (the host work the GPU would
    otherwise wait on): the same lines as one by one. Exercised here on a CPU engine with the
    GPU's switches: pages side by side, and one rec session run one batch at a time."""
    import threading

    side = OcrEngine(OcrSettings(threads=2, det_batch=4))
    try:
        side._side_by_side = side._host
        assert side._pool is not None  # the CPU's two rec streams; a GPU has none
        side._pool.shutdown()
        side._pool = None
        overlapped = side._read_overlapped
        calls: list[int] = []

        def counted(batches, fill, host):  # type: ignore[no-untyped-def]
            calls.append(len(batches))
            return overlapped(batches, fill, host)

        side._read_overlapped = counted  # type: ignore[method-assign]
        pages = [scanned] + [
            scan_noise(render_text_page([f"Page {i} of four", "Total 12.50"]), seed=i, quality=90)
            for i in range(3)
        ]
        before = {t.name for t in threading.enumerate()}
        got = side.recognize(pages)
        assert any(t.name.startswith("ocr-host") for t in threading.enumerate()), before
        want = [ocr_engine.recognize([p])[0] for p in pages]
        for a, b in zip(got, want, strict=True):
            assert [ln.text for ln in a.lines] == [ln.text for ln in b.lines]
            for x, y in zip(a.lines, b.lines, strict=True):
                np.testing.assert_allclose(x.polygon, y.polygon, atol=1.0)
        assert got[2].text.startswith("Page 1 of four")
        assert len(calls) == 1  # one rec pass over every line of the call
        assert calls[0] > 3  # in one-line batches here
    finally:
        side.close()


def test_a_1bit_fax_page_reads_back_blurred_into_grey(ocr_engine: OcrEngine):
    """A 100-DPI page stored 1-bit, as the splitter stores a fax or a Group 4 TIFF, reads
    back, and the engine reads it as ``bilevel.soften`` makes it (grey edges again)."""
    gray = cv2.cvtColor(render_text_page(LINES, dpi=100), cv2.COLOR_BGR2GRAY)
    _, split = cv2.threshold(gray, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    fax = encode_bilevel_png(np.asarray(split, np.uint8))
    (page,) = ocr_engine.recognize([fax])
    assert page.status == "ok"
    assert cer(page.text, TRUTH) < 0.05, page.text
    assert ocr_engine.settings.bilevel_smoothing > 0
    softened = soften(decode_image(fax, max_pixels=10**8), ocr_engine.settings.bilevel_smoothing)
    (same,) = ocr_engine.recognize([softened])
    assert [(line.text, line.polygon) for line in same.lines] == [
        (line.text, line.polygon) for line in page.lines
    ]


def test_blank_undecodable_and_oversized_pages(ocr_engine: OcrEngine, scanned: bytes):
    blank = np.full((800, 600, 3), 255, np.uint8)
    gray = np.full((800, 600), 250, np.uint8)
    big = np.zeros((ocr_engine.settings.max_page_pixels // 1000 + 1, 1001), np.uint8)
    pages = ocr_engine.recognize([blank, b"not an image", scanned, gray, big])
    assert [p.status for p in pages] == ["empty", "failed", "ok", "empty", "failed"]
    assert pages[0].lines == ()
    assert (pages[0].width, pages[0].height) == (600, 800)
    assert pages[1].error_code == "undecodable_image"
    assert pages[4].error_code == "page_too_large"
    assert pages[1].to_dict(2)["error"]["code"] == "undecodable_image"
    assert ocr_engine.recognize([]) == []


def test_engine_info(ocr_engine: OcrEngine):
    info = ocr_engine.info
    assert info.model == "ppocrv6-small"
    # auto on the CPU: one backend, or det's + rec's when they measured faster on different ones
    cpu = ("openvino", "onnxruntime")
    assert info.backend in {*cpu, *(f"{a}+{b}" for a in cpu for b in cpu if a != b)}
    assert "det:090f04ab" in info.version


def test_batch_sizes_follow_the_device_unless_set(monkeypatch: pytest.MonkeyPatch):
    """CPU: one page per det batch and one line per rec batch (a shape per width bucket, not
    per lines x width); GPU: wide batches; an explicit setting wins on either."""
    cpu, gpu = OcrSettings(), OcrSettings(device="cuda:0")
    assert (cpu.det_batch_size, cpu.rec_batch_lines, cpu.rec_batch_pixels) == (1, 1, 4096)
    assert (gpu.det_batch_size, gpu.rec_batch_lines, gpu.rec_batch_pixels) == (4, 64, 65536)
    assert (cpu.rec_shape_ladder, gpu.rec_shape_ladder) == (False, True)
    assert (cpu.det_shape_ladder, gpu.det_shape_ladder) == (False, True)
    assert OcrSettings(device="cuda", rec_shapes="exact").rec_shape_ladder is False
    monkeypatch.setenv("OCRSTREAM_OCR_DET_BATCH", "8")
    monkeypatch.setenv("OCRSTREAM_OCR_REC_BATCH", "16")
    monkeypatch.setenv("OCRSTREAM_OCR_REC_BATCH_WIDTH", "8192")
    assert (OcrSettings().det_batch_size, OcrSettings().rec_batch_lines,
            OcrSettings().rec_batch_pixels) == (8, 16, 8192)  # fmt: skip


def _lines() -> list[np.ndarray]:
    lines = []
    for word, width in (("Total", 200), ("12.50", 210), ("Cash", 220), ("Change due 3.10", 400)):
        line = np.full((48, width, 3), 255, np.uint8)
        cv2.putText(line, word, (4, 36), cv2.FONT_HERSHEY_SIMPLEX, 1.2, (0, 0, 0), 2)
        lines.append(line)
    return lines


def _recorded(engine: OcrEngine, lines: list[np.ndarray]) -> tuple[list, list[tuple[int, ...]]]:
    seen: list[tuple[int, ...]] = []
    run = engine._rec.run

    def record(batch: np.ndarray) -> np.ndarray:
        seen.append(batch.shape)
        return run(batch)

    engine._rec.run = record  # type: ignore[method-assign]
    try:
        return engine._read_lines(lines), seen
    finally:
        del engine._rec.run


def test_on_the_cpu_each_line_is_read_alone(ocr_engine: OcrEngine):
    """The engine's rec runs one line per batch on the CPU, on whichever backend auto chose."""
    read, seen = _recorded(ocr_engine, _lines())
    assert [text for text, _ in read] == ["Total", "12.50", "Cash", "Change due 3.10"]
    assert sorted(seen) == [(1, 3, 48, 224)] * 3 + [(1, 3, 48, 416)]


def test_a_line_reads_the_same_alone_or_in_a_batch_of_its_width():
    """Lines of one width bucket batched (rec_batch, as on a GPU) read as they do alone: the
    same text and confidence, as no line is padded by its neighbours."""
    alone = OcrEngine(OcrSettings(backend="onnxruntime"))
    batched = OcrEngine(OcrSettings(backend="onnxruntime", rec_batch=4))
    try:
        one, one_seen = _recorded(alone, _lines())
        many, many_seen = _recorded(batched, _lines())
    finally:
        alone.close()
        batched.close()
    assert {shape[0] for shape in one_seen} == {1}
    assert sorted(many_seen) == [(1, 3, 48, 416), (3, 3, 48, 224)]
    assert [t for t, _ in one] == [t for t, _ in many] == ["Total", "12.50", "Cash",
                                                           "Change due 3.10"]  # fmt: skip
    for (_, a), (_, b) in zip(one, many, strict=True):
        assert a == pytest.approx(b, abs=1e-4)


def test_ladder_shapes_read_the_same_in_fewer_shapes():
    """rec_shapes=ladder (a GPU's default), run here on the CPU: three lines padded into one
    batch of 256 px with a blank fourth row, the others to ladder widths, read the same text
    as the exact shapes, and the blank row's output is not read as a line."""
    words = (("Total", 200), ("12.50", 230), ("Cash", 250), ("Due", 300), ("Change 3.10", 400))
    lines = []
    for word, width in words:
        line = np.full((48, width, 3), 255, np.uint8)
        cv2.putText(line, word, (4, 36), cv2.FONT_HERSHEY_SIMPLEX, 1.2, (0, 0, 0), 2)
        lines.append(line)
    exact = OcrEngine(OcrSettings(backend="onnxruntime", rec_batch=8, rec_shapes="exact"))
    ladder = OcrEngine(OcrSettings(backend="onnxruntime", rec_batch=8, rec_shapes="ladder"))
    try:
        one, one_seen = _recorded(exact, lines)
        many, many_seen = _recorded(ladder, lines)
    finally:
        exact.close()
        ladder.close()
    assert sorted(w for *_, w in one_seen) == [224, 256, 320, 416]  # 32 px steps
    assert sorted(many_seen) == [(1, 3, 48, 320), (1, 3, 48, 480), (4, 3, 48, 256)]
    assert [t for t, _ in many] == [t for t, _ in one] == [w for w, _ in words]
    for (_, a), (_, b) in zip(one, many, strict=True):
        assert a == pytest.approx(b, abs=0.02)


def test_a_page_reads_the_same_padded_to_the_det_ladder(ocr_engine: OcrEngine, scanned: bytes):
    """det_shapes=ladder (a GPU's default), here on the CPU: the page is run padded with white
    and read as at its own size."""
    (exact,) = ocr_engine.recognize([scanned])
    ladder = OcrEngine(
        ocr_engine.settings.model_copy(update={"det_shapes": "ladder"}), models=ocr_engine.models
    )
    try:
        assert ladder.det_params.ladder
        seen: list[tuple[int, ...]] = []
        run = ladder._det.run
        ladder._det.run = lambda batch: (seen.append(batch.shape), run(batch))[1]  # type: ignore[method-assign]
        (padded,) = ladder.recognize([scanned])
    finally:
        ladder.close()
    shape = det_mod.det_shape(exact.height, exact.width, ocr_engine.det_params)
    assert seen == [(1, 3, *det_mod.padded_shape(shape, ladder.det_params))]
    assert seen[0][2:] != shape
    assert [ln.text for ln in padded.lines] == [ln.text for ln in exact.lines]


def test_engine_uses_the_settings_batch_width(ocr_engine: OcrEngine):
    assert ocr_engine.rec_params.max_batch_width == ocr_engine.settings.rec_batch_pixels == 4096


def _backends() -> list[str]:
    names = ["onnxruntime"]
    if importlib.util.find_spec("openvino"):
        names.append("openvino")
    if importlib.util.find_spec("torch") and importlib.util.find_spec("onnx2torch"):
        names.append("torch")
    return names


@pytest.mark.slow
def test_backends_read_the_same_text(ocr_engine: OcrEngine, scanned: bytes):
    if len(_backends()) < 2:
        pytest.skip("only onnxruntime is installed")
    (reference,) = ocr_engine.recognize([scanned])
    for name in _backends():
        if name == ocr_engine.info.backend:
            continue
        engine = OcrEngine(OcrSettings(backend=name, device="cpu", threads=2))
        (page,) = engine.recognize([scanned])
        assert [ln.text for ln in page.lines] == [ln.text for ln in reference.lines], name
        for a, b in zip(page.lines, reference.lines, strict=True):
            np.testing.assert_allclose(a.polygon, b.polygon, atol=1.5)


def test_users_own_models_dir(tmp_path: Path):
    tiny = load_model_set("ppocrv6-tiny")
    dict_file = MODEL_SETS["ppocrv6-tiny"].dict_file
    assert dict_file is not None
    shutil.copy(tiny.det_path, tmp_path / "det.onnx")
    shutil.copy(tiny.rec_path, tmp_path / "rec.onnx")
    shutil.copy(dict_file.locate(), tmp_path / "dict.txt")
    engine = OcrEngine(OcrSettings(model_dir=tmp_path, backend="onnxruntime", threads=2))
    assert engine.info.model == f"dir:{tmp_path.name}"
    (page,) = engine.recognize([render_text_page(LINES)])
    assert cer(page.text, TRUTH) < 0.1, page.text


@pytest.fixture(scope="module")
def fixing_engine() -> OcrEngine:
    return OcrEngine(OcrSettings(fix_orientation=True, deskew=True, threads=2))


@pytest.fixture(scope="module")
def full_page() -> tuple[np.ndarray, str]:
    lines = [f"{i:02d} The quick brown fox jumps over the lazy dog" for i in range(14)]
    return render_text_page(lines, width_in=6.0), "\n".join(lines)


@pytest.mark.parametrize("turns", [1, 2, 3])
@pytest.mark.parametrize("engine", ["fixing_engine", "ocr_engine"])
def test_turned_page_is_set_upright(
    request: pytest.FixtureRequest, engine: str, full_page, turns: int
):
    """A page scanned sideways or upside down is read upright: by the orientation model
    (``fixing_engine``) or, by default, found from its own lines (boxes that stand, lines
    that read better turned)."""
    reader: OcrEngine = request.getfixturevalue(engine)
    image, truth = full_page
    turned = np.ascontiguousarray(np.rot90(image, k=-turns))  # turned clockwise
    (page,) = reader.recognize([turned])
    assert page.rotation == (360 - 90 * turns) % 360
    assert cer(page.text, truth) < 0.05, page.text
    assert (page.height, page.width) == image.shape[:2]
    assert page.timings_ms["orientation"] > 0


def test_an_upright_page_is_not_read_twice(ocr_engine: OcrEngine, full_page, scanned: bytes):
    for upright in (full_page[0], scanned):
        (page,) = ocr_engine.recognize([upright])
        assert page.rotation == 0
        assert "orientation" not in page.timings_ms  # no line was read turned


def test_pages_are_read_as_they_come_when_turned_pages_are_not_looked_for(full_page):
    engine = OcrEngine(OcrSettings(find_turned_pages=False, threads=2))
    image, truth = full_page
    (page,) = engine.recognize([np.ascontiguousarray(np.rot90(image, k=-2))])
    assert page.rotation == 0
    assert cer(page.text, truth) > 0.5


def test_with_the_search_off_a_page_turned_clockwise_keeps_its_lines_in_order():
    """Its lines stand and each reads upright once cut (a standing line is turned a quarter
    turn counter-clockwise): read right to left, the top line of the page first."""
    engine = OcrEngine(OcrSettings(find_turned_pages=False, threads=2))
    lines = ["Invoice 2041 for March", "Seven boxes of paper", "Shipped to Lisbon by rail",
             "Total due within thirty days", "Thank you for your order"]  # fmt: skip
    image = render_text_page(lines, width_in=4.0)
    (page,) = engine.recognize([np.ascontiguousarray(np.rot90(image, k=-1))])
    assert page.rotation == 0
    assert cer(page.text, "\n".join(lines)) < 0.05, page.text


NOTO_CJK = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")
VERSES = [
    "春眠不觉晓，处处闻啼鸟。", "夜来风雨声，花落知多少。", "床前明月光，疑是地上霜。",
    "举头望明月，低头思故乡。", "白日依山尽，黄河入海流。", "欲穷千里目，更上一层楼。",
    "千山鸟飞绝，万径人踪灭。",
]  # fmt: skip
BARE = [verse.replace("，", "").replace("。", "") for verse in VERSES]  # no punctuation


def _chinese_page(lines: list[str], down: bool) -> np.ndarray:
    """``lines`` at 300 DPI: written across, or down in columns from the right with the
    font's vertical forms (punctuation in the top right of its square)."""
    from PIL import Image, ImageDraw, ImageFont, features

    if not NOTO_CJK.is_file():
        pytest.skip(f"no {NOTO_CJK}: apt-get install fonts-noto-cjk (scripts/test.sh does)")
    if down and not features.check("raqm"):
        pytest.skip("this Pillow lays out no vertical text (built without libraqm)")
    font = ImageFont.truetype(str(NOTO_CJK), 50, index=2)  # Noto Sans CJK SC
    page = Image.new("L", (900, 800) if down else (800, 900), 255)
    draw = ImageDraw.Draw(page)
    for i, line in enumerate(lines):
        if down:
            ttb: dict[str, object] = {"direction": "ttb", "features": ["vert"], "anchor": "mt"}
            draw.text((800 - i * 100, 100), line, font=font, fill=0, **ttb)  # type: ignore[arg-type]
        else:
            draw.text((100, 100 + i * 100), line, font=font, fill=0)
    return cv2.cvtColor(np.asarray(page), cv2.COLOR_GRAY2BGR)


@pytest.mark.parametrize(("lines", "turns", "rotation"), [
    (VERSES, 1, 270), (VERSES, 3, 90), (BARE, 1, 0), (BARE, 3, 90),
])  # fmt: skip
def test_a_chinese_page_scanned_sideways_is_read_upright_when_its_marks_tell(
    ocr_engine: OcrEngine, lines: list[str], turns: int, rotation: int
):
    """Turned clockwise, its lines read as they stand, as a page written in columns does;
    its punctuation, low in the lines as cut, tells it from one: it is turned back. Without
    punctuation it is read as it is, in order (the one page that stays sideways). Turned
    counter-clockwise, its lines read upside down, and it is turned upright."""
    image = _chinese_page(lines, down=False)
    (read,) = ocr_engine.recognize([np.ascontiguousarray(np.rot90(image, k=-turns))])
    assert read.rotation == rotation
    assert cer(read.text, "\n".join(lines)) < 0.1, read.text


@pytest.mark.parametrize("lines", [VERSES, BARE])
def test_a_page_written_in_columns_reads_right_to_left_as_it_is(
    ocr_engine: OcrEngine, lines: list[str]
):
    """Its lines stand, read well as they are, are Chinese and have their punctuation where
    columns have it (or none): not a page scanned sideways. The columns' punctuation, at the
    top of each column as cut, is read where writing across sets it."""
    (page,) = ocr_engine.recognize([_chinese_page(lines, down=True)])
    assert page.rotation == 0
    assert cer(page.text, "\n".join(lines)) < 0.05, page.text
    for mark in "，。":
        assert page.text.count(mark) == "".join(lines).count(mark), page.text


NOTO_SERIF_CJK = Path("/usr/share/fonts/opentype/noto/NotoSerifCJK-Regular.ttc")
# Japanese with the long-vowel mark and small kana, whose vertical forms in a serif face are
# hairlines once a column is cut and turned
KANA = [
    "コーヒーをちょっと飲みましょう。", "スーパーマーケットへ行った。",
    "きっぷをなくしちゃった。", "ニュースをチェックする。",
    "ショッピングセンターの前で。", "メールのフォルダーを見て。",
]  # fmt: skip
SMALL = "ーっゃゅょッャュョェォィ"


def test_japanese_columns_in_a_serif_face_keep_their_long_vowels_and_small_kana(
    ocr_engine: OcrEngine,
):
    """Written down in columns from the right in Noto Serif CJK JP, as a book is set: its
    ``ー`` and small kana are read, 21 of 23 here (9 before the columns' strokes were
    thickened, orientation.strokes_thickened)."""
    from PIL import Image, ImageDraw, ImageFont, features

    if not NOTO_SERIF_CJK.is_file():
        pytest.skip(f"no {NOTO_SERIF_CJK}: apt-get install fonts-noto-cjk (scripts/test.sh does)")
    if not features.check("raqm"):
        pytest.skip("this Pillow lays out no vertical text (built without libraqm)")
    font = ImageFont.truetype(str(NOTO_SERIF_CJK), 42, index=0)  # Noto Serif CJK JP
    page = Image.new("L", (800, 900), 255)
    draw = ImageDraw.Draw(page)
    ttb: dict[str, object] = {"direction": "ttb", "features": ["vert"], "anchor": "mt"}
    for i, line in enumerate(KANA):
        draw.text((700 - i * 100, 80), line, font=font, fill=0, **ttb)  # type: ignore[arg-type]
    image = cv2.GaussianBlur(np.asarray(page), (0, 0), 0.7)
    (read,) = ocr_engine.recognize([cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)])
    assert read.rotation == 0
    want = "".join(KANA)
    got = read.text.replace("\n", "")
    small = sum(want.count(c) for c in SMALL)
    assert sum(got.count(c) for c in SMALL) >= 0.85 * small, read.text
    assert cer(read.text, "\n".join(KANA)) < 0.05, read.text


def test_with_the_search_off_columns_read_right_to_left_as_they_are():
    """Nothing tells the page's script before it is read: its punctuation is left where it
    is, and misread (as every engine measured misreads vertical punctuation)."""
    engine = OcrEngine(OcrSettings(find_turned_pages=False, threads=2))
    (page,) = engine.recognize([_chinese_page(VERSES, down=True)])
    assert page.rotation == 0
    bare = "".join(c for c in page.text if c.isalnum() or c == "\n")
    assert cer(bare, "\n".join(BARE)) < 0.1, page.text


def test_skewed_page_is_deskewed(fixing_engine: OcrEngine, full_page):
    import cv2

    image, truth = full_page
    h, w = image.shape[:2]
    m = cv2.getRotationMatrix2D((w / 2, h / 2), 4.0, 1.0)
    skewed = cv2.warpAffine(image, m, (w, h), borderValue=(255, 255, 255))
    (page,) = fixing_engine.recognize([skewed])
    assert page.skew == pytest.approx(-4.0, abs=0.3)
    assert cer(page.text, truth) < 0.05, page.text
    tops = [line.polygon[1][1] - line.polygon[0][1] for line in page.lines]
    assert max(abs(t) for t in tops) < 6  # lines now level


def test_line_classifier_turns_upside_down_lines(scanned: bytes):
    """With use_cls, lines printed upside down are turned before recognition."""
    import cv2

    engine = OcrEngine(OcrSettings(use_cls=True, threads=2))
    upright = cv2.imdecode(np.frombuffer(scanned, np.uint8), cv2.IMREAD_COLOR)
    (page,) = engine.recognize([np.ascontiguousarray(upright[::-1, ::-1])])
    assert page.rotation == 0  # the page was not turned: each line was
    assert cer("\n".join(sorted(ln.text for ln in page.lines)), "\n".join(sorted(LINES))) < 0.05


def test_fingerprint_follows_models_options_and_mode(
    ocr_engine: OcrEngine, fixing_engine: OcrEngine
) -> None:
    """The page cache's engine fingerprint: stable, and different for another option that
    changes results (orientation fixing, 1-bit pages read as they are, turned pages not looked
    for) and for layout mode (the layout model joins)."""
    text = ocr_engine.fingerprint("text")
    assert text == ocr_engine.fingerprint("text")
    assert text == OcrEngine(ocr_engine.settings).fingerprint("text")  # another process's
    assert text != ocr_engine.fingerprint("layout")
    assert text != fixing_engine.fingerprint("text")
    as_they_are = ocr_engine.settings.model_copy(update={"bilevel_smoothing": 0.0})
    assert text != OcrEngine(as_they_are).fingerprint("text")  # 1-bit pages read unblurred
    as_they_come = ocr_engine.settings.model_copy(update={"find_turned_pages": False})
    assert text != OcrEngine(as_they_come).fingerprint("text")  # turned pages read as noise


def test_the_set_of_v6_small_rec_and_v6_tiny_det_reads_with_its_own_box_thresholds(
    ocr_engine: OcrEngine, scanned: bytes
) -> None:
    """ppocrv6-small-tinydet: v6 tiny's det file with its own DB threshold and unclip ratio,
    v6 small's rec; it reads the page, and its pages are not taken for the default's in the
    page cache."""
    spec = MODEL_SETS["ppocrv6-small-tinydet"]
    mixed = OcrEngine(OcrSettings(model=spec.name, auto_measure=False))
    assert mixed.models.det_path == load_model_set("ppocrv6-tiny").det_path
    assert mixed.models.rec_path == load_model_set("ppocrv6-small").rec_path
    params = mixed.det_params
    assert (params.thresh, params.unclip_ratio) == (spec.det_thresh, spec.det_unclip_ratio)
    assert (params.thresh, params.unclip_ratio) != (
        ocr_engine.det_params.thresh,
        ocr_engine.det_params.unclip_ratio,
    )  # the default keeps det.DetParams' own
    (page,) = mixed.recognize([scanned])
    assert page.status == "ok"
    assert cer(page.text, TRUTH) < 0.05, page.text
    assert mixed.info.model == spec.name
    assert mixed.fingerprint("text") != ocr_engine.fingerprint("text")


@pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None, reason="openvino is not installed"
)
def test_an_openvino_engine_sizes_det_once_at_start_and_reads_lines_widest_first():
    """One det pass at the budget's largest page before any page, and a page's lines read
    from the widest down: OpenVINO sizes its buffers once for each (an input larger than any
    before reallocates them, and the C allocator keeps the old ones)."""
    from ocrstream.processors.ocr.backends import create_key
    from ocrstream.processors.ocr.backends.base import ModelKind, SessionOptions

    real = create_key("openvino")
    shapes: dict[str, list[tuple[int, ...]]] = {"det": [], "rec": []}

    class Recording:
        """OpenVINO, with every det and rec input shape written down."""

        name = "openvino"

        def load(self, path: Path, kind: ModelKind, options: SessionOptions):  # type: ignore[no-untyped-def]
            session = real.load(path, kind, options)
            if kind in shapes:
                run = session.run

                def recorded(batch: np.ndarray) -> np.ndarray:
                    shapes[kind].append(tuple(batch.shape))
                    return run(batch)

                session.run = recorded  # type: ignore[method-assign]
            return session

    settings = OcrSettings(model="ppocrv6-tiny", threads=1)
    warmed = OcrEngine(settings, backend=Recording())  # type: ignore[arg-type]
    # one pass before any page: a 300-DPI A4 page at the 1600-px budget (1600 x 1120),
    # each side rounded up to 128
    assert shapes == {"det": [(1, 3, 1664, 1152)], "rec": []}
    (page,) = warmed.recognize([render_text_page(LINES)])
    assert len(shapes["det"]) == 2
    assert shapes["det"][1][2] * shapes["det"][1][3] < 1664 * 1152
    widths = [shape[3] for shape in shapes["rec"]]
    assert len(set(widths)) > 1, widths  # lines of several widths ...
    assert widths == sorted(widths, reverse=True)  # ... the widest first
    for found in shapes.values():
        found.clear()
    unwarmed = settings.model_copy(update={"det_warmup": False})
    cold = OcrEngine(unwarmed, backend=Recording())  # type: ignore[arg-type]
    assert shapes == {"det": [], "rec": []}
    (again,) = cold.recognize([render_text_page(LINES)])
    assert [ln.text for ln in again.lines] == [ln.text for ln in page.lines]  # same text
    assert cer(page.text, TRUTH) < 0.1, page.text
    warmed.close()
    cold.close()


def test_print_larger_than_det_needs_is_detected_at_a_smaller_input_and_reads_the_same():
    """PP-OCRv6 scales pages of large print down for det (its ``det_max_line_height``): fewer
    pixels, the same text. Here 12-pt print on a strip of paper 8.5 inches wide, which the
    budget alone would enlarge to det's minimum side."""
    from ocrstream.processors.ocr.backends import create_key
    from ocrstream.processors.ocr.backends.base import ModelKind, SessionOptions

    real = create_key("onnxruntime")

    class Recording:
        """onnxruntime, with every det input shape written down."""

        name = "onnxruntime"

        def __init__(self) -> None:
            self.shapes: list[tuple[int, ...]] = []

        def load(self, path: Path, kind: ModelKind, options: SessionOptions):  # type: ignore[no-untyped-def]
            session = real.load(path, kind, options)
            if kind == "det":
                run = session.run

                def recorded(batch: np.ndarray) -> np.ndarray:
                    self.shapes.append(tuple(batch.shape))
                    return run(batch)

                session.run = recorded  # type: ignore[method-assign]
            return session

    page = scan_noise(render_text_page(LINES, width_in=8.5), angle=0.5)
    read = {}
    prints: set[str] = set()
    for cap in (None, 0.0):  # the model's own, and off
        backend = Recording()
        settings = OcrSettings(model="ppocrv6-tiny", threads=1, det_max_line_height=cap)
        engine = OcrEngine(settings, backend=backend)  # type: ignore[arg-type]
        (result,) = engine.recognize([page])
        (shape,) = backend.shapes
        read[cap] = (result.text, shape[2] * shape[3])
        prints.add(engine.fingerprint("text"))  # the page cache tells the two apart
        engine.close()
    assert MODEL_SETS["ppocrv6-tiny"].det_max_line_height > 0
    assert len(prints) == 2
    assert read[None][1] < 0.6 * read[0.0][1]  # well under the budget's pixels
    assert cer(read[None][0], TRUTH) < 0.05, read[None][0]
    assert cer(read[0.0][0], TRUTH) < 0.05, read[0.0][0]


def test_the_det_scaling_cap_off_leaves_the_page_caches_engine_key_as_it_was():
    """Engines that do not scale large print down (v6 small) keep the fingerprint they had
    before the option existed, so their cached pages stay valid; those that do get a new one."""
    from ocrstream.processors.ocr.det import DetParams
    from ocrstream.processors.ocr.engine import _det_key

    off = DetParams()
    before = repr(off).replace("max_line_height=0.0, ", "").replace(", ladder=False", "")
    assert _det_key(off) == before
    assert "max_line_height" not in _det_key(off)
    assert "ladder" not in _det_key(off)  # nor does the GPU's det ladder, off on the CPU
    assert "max_line_height=12.0" in _det_key(DetParams(max_line_height=12.0))
    assert "ladder=True" in _det_key(DetParams(ladder=True))


@pytest.mark.parametrize("backend", ["auto", "onnxruntime", "openvino"])
def test_starting_an_engine_leaves_the_process_locale_as_it_was(backend: str, tmp_path: Path):
    """The process's text encoding (LC_CTYPE) is the user's after the engine starts. det and
    rec once loaded side by side, and a library saving and restoring the locale around its
    loading left it at C when the two overlapped: every later ``open()`` and text subprocess
    of the process then read and wrote ASCII. The overlap depends on timing (loads from a warm
    cache overlapped most), so the engine starts several times."""
    import locale

    if backend != "onnxruntime" and importlib.util.find_spec("openvino") is None:
        pytest.skip("openvino is not installed")
    before = locale.setlocale(locale.LC_CTYPE, None)
    settings = OcrSettings(model="ppocrv6-tiny", backend=backend, threads=2, det_warmup=False,
                           auto_measure=False, engine_cache_dir=tmp_path)  # fmt: skip
    for _ in range(6):  # the first fills the cache, the others load from it
        OcrEngine(settings).close()
        assert locale.setlocale(locale.LC_CTYPE, None) == before
