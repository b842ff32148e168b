"""The dev sets: deterministic scanned-looking pages whose text and boxes are known."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ocrstream.bench import devsets


def _needs(name: str) -> None:
    missing = devsets.requirements(name)
    if missing:
        pytest.skip(f"this machine cannot build {name}: {'; '.join(missing)}")


@pytest.mark.parametrize("name", devsets.DEVSETS)
def test_a_page_is_the_same_for_its_seed_and_another_for_another_seed(name: str) -> None:
    _needs(name)
    data, lines = devsets.render_page(name, 3)
    again, lines_again = devsets.render_page(name, 3)
    other, _ = devsets.render_page(name, 4)
    assert data == again
    assert lines == lines_again
    assert data != other
    with Image.open(io.BytesIO(data)) as im:
        assert im.size == devsets.A4_PX
        assert im.format == "JPEG"
    assert len(lines) >= 15


@pytest.mark.parametrize("name", devsets.DEVSETS)
def test_the_boxes_cover_the_ink_of_their_text(name: str) -> None:
    _needs(name)
    data, lines = devsets.render_page(name, 1)
    gray = np.asarray(Image.open(io.BytesIO(data)).convert("L"), np.float32)
    inside = np.zeros(gray.shape, bool)
    for line in lines:
        xs = [p[0] for p in line.polygon]
        ys = [p[1] for p in line.polygon]
        inside[int(min(ys)) : int(max(ys)) + 1, int(min(xs)) : int(max(xs)) + 1] = True
        box = gray[int(min(ys)) : int(max(ys)) + 1, int(min(xs)) : int(max(xs)) + 1]
        assert box.min() < 120, f"no ink under {line.text!r}"
    dark = gray < 120
    assert dark[inside].sum() > 0.97 * dark.sum()  # nearly all ink is inside some box


def test_the_chinese_set_is_chinese_and_small_print_is_small() -> None:
    _needs("a4-zh")
    _needs("small-print")
    _, zh = devsets.render_page("a4-zh", 2)
    text = "".join(line.text for line in zh)
    han = sum("\u4e00" <= c <= "\u9fff" for c in text)
    assert han > 0.8 * len(text)
    _, small = devsets.render_page("small-print", 2)
    _, large = devsets.render_page("a4-en", 2)

    def height(lines: tuple[devsets.TextLine, ...]) -> float:
        return float(np.median([ln.polygon[3][1] - ln.polygon[0][1] for ln in lines]))

    assert height(small) < 35 < height(large)  # 6-8 pt vs 9-12 pt at 300 DPI


def test_the_chinese_set_holds_simplified_chinese_not_mojibake() -> None:
    """jieba's dictionary holds UTF-8 read as GBK (鍦, 鏄, 銆 ...) and traditional forms among
    its frequent words; the set draws none of them, on any page, while its real words stay."""
    _needs("a4-zh")
    text = "".join(line.text for seed in range(6) for line in devsets.render_page("a4-zh", seed)[1])
    han = [c for c in text if devsets._is_han(c)]
    assert len(han) > 3000
    "".join(han).encode("gb2312")  # raises on a character outside simplified Chinese
    words, _ = devsets._zh_vocabulary()
    assert len(words) == 40_000
    assert {"中国", "我们", "银行", "合同"} <= set(words)
    assert not {"鍦", "鏄", "銆", "簡", "購"} & set(words)


def test_a_set_is_rendered_once_into_its_cache(tmp_path: Path) -> None:
    _needs("small-print")
    first = devsets.devset("small-print", 2, "heldout", cache=tmp_path)
    stamp = [s.path.stat().st_mtime_ns for s in first]
    again = devsets.devset("small-print", 2, "heldout", cache=tmp_path)
    assert [s.path.stat().st_mtime_ns for s in again] == stamp
    assert [s.gt for s in again] == [s.gt for s in first]
    version = devsets.VERSIONS["small-print"]
    assert all(s.path.parent.name == f"small-print-heldout-v{version}" for s in first)
    assert first[0].name.endswith(f"{devsets.SPLITS['heldout']:06d}")


def test_a_missing_font_or_package_is_named_with_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(devsets, "_fc_list", lambda pattern: [])
    devsets.fonts_for.cache_clear()
    devsets._zh_vocabulary.cache_clear()
    real = devsets.importlib_find_spec

    def no_jieba(name: str) -> object:
        return None if name == "jieba" else real(name)

    monkeypatch.setattr(devsets, "importlib_find_spec", no_jieba)
    try:
        with pytest.raises(devsets.MissingRequirement) as err:
            devsets.devset("a4-zh", 1, cache=tmp_path)
        assert "apt-get install fonts-noto-cjk" in str(err.value)
        assert "pip install jieba" in str(err.value)
        with pytest.raises(devsets.MissingRequirement, match="fonts-dejavu-core"):
            devsets.devset("small-print", 1, cache=tmp_path)
    finally:
        devsets.fonts_for.cache_clear()
        devsets._zh_vocabulary.cache_clear()


def test_the_vertical_set_stands_in_columns_read_right_to_left() -> None:
    _needs("a4-zh-vertical")
    _, lines = devsets.render_page("a4-zh-vertical", 2)
    boxes = [np.array(ln.polygon) for ln in lines]
    sizes = [(b[:, 0].max() - b[:, 0].min(), b[:, 1].max() - b[:, 1].min()) for b in boxes]
    assert all(tall > 5 * wide for wide, tall in sizes)  # each column stands
    lefts = [float(b[:, 0].min()) for b in boxes]
    assert lefts == sorted(lefts, reverse=True)  # the truth's order: right to left
    text = "".join(line.text for line in lines)
    assert sum("\u4e00" <= c <= "\u9fff" for c in text) > 0.8 * len(text)


def _kana(c: str) -> bool:
    return "\u3041" <= c <= "\u3096" or "\u30a1" <= c <= "\u30fc"


@pytest.mark.parametrize("name", ["a4-ja", "a4-ja-vertical"])
def test_the_japanese_sets_are_japanese_kana_and_kanji(name: str) -> None:
    _needs(name)
    _, lines = devsets.render_page(name, 2)
    text = "".join(line.text for line in lines)
    kana = sum(_kana(c) for c in text)
    kanji = sum("\u4e00" <= c <= "\u9fff" for c in text)
    assert kana > 0.25 * len(text)
    assert kanji > 0.25 * len(text)
    assert kana + kanji > 0.85 * len(text)  # the rest: 、。 and the odd number
    assert not any(c.isascii() and c.isalpha() for c in text)


def test_the_japanese_vertical_set_stands_in_columns_read_right_to_left() -> None:
    _needs("a4-ja-vertical")
    _, lines = devsets.render_page("a4-ja-vertical", 2)
    boxes = [np.array(ln.polygon) for ln in lines]
    sizes = [(b[:, 0].max() - b[:, 0].min(), b[:, 1].max() - b[:, 1].min()) for b in boxes]
    assert all(tall > 5 * wide for wide, tall in sizes)
    lefts = [float(b[:, 0].min()) for b in boxes]
    assert lefts == sorted(lefts, reverse=True)


def test_without_wordfreq_the_japanese_set_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "wordfreq", None)  # import wordfreq raises ImportError
    devsets._ja_vocabulary.cache_clear()
    try:
        with pytest.raises(devsets.MissingRequirement, match="pip install wordfreq"):
            devsets.devset("a4-ja", 1, cache=tmp_path)
    finally:
        devsets._ja_vocabulary.cache_clear()


def test_bench_engine_offers_every_dev_set() -> None:
    import click

    from ocrstream.cli.bench import bench

    engine = bench.commands["engine"]  # type: ignore[attr-defined]
    option = next(p for p in engine.params if p.name == "devsets")
    assert isinstance(option.type, click.Choice)
    assert tuple(option.type.choices) == devsets.DEVSETS
