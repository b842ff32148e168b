"""Development sets of scanned-looking pages with known text: Chinese A4, small print, English A4.

Each set is rendered at 300 DPI on A4 (2480 × 3508) with Pillow, then degraded the way a
flatbed scan is (a small rotation, blur, ink that is not quite black on paper that is not quite
white, sensor noise, JPEG at quality 70-88), and cached as JPEG + ground-truth JSON under
``~/.cache/ocrstream/devsets/<set>-<split>-v<N>/``; the images are never committed.
Everything about a page follows from its seed: the same fonts and library versions give the
same bytes, and the ground-truth boxes are the rendered text's boxes carried through the
rotation.

- ``a4-zh``: simplified Chinese prose at 9-12 pt in Noto Sans/Serif CJK SC, with the odd number
  or year, words drawn by frequency from jieba's dictionary (the ``jieba`` package, MIT), only
  words written in GB2312's characters: the dictionary also holds mojibake (UTF-8 read as GBK:
  ``鍦``, ``鏄``, ``銆`` among its most frequent single characters) and traditional forms, which
  no simplified Chinese scan holds and no model reads (v1 of the set had them: 36 of v6 small's
  79 held-out edits were characters outside its dictionary).
- ``a4-zh-vertical``: the same Chinese written in vertical columns (top to bottom, the first
  column on the right), laid out by Pillow's libraqm with the fonts' vertical forms
  (``features=["vert"]``): a title column, then the body, as a Chinese or Japanese book or
  letter is set. Ground truth: one line per column, in reading order.
- ``a4-ja`` and ``a4-ja-vertical``: Japanese (kanji, hiragana, katakana) at 9-12 pt in Noto Sans/
  Serif CJK JP, in lines and in vertical columns as ``a4-zh-vertical``, words drawn by frequency
  from wordfreq's Japanese list (the ``wordfreq`` package: code Apache-2.0, its word lists
  CC BY-SA 4.0, read at run time, never copied here), only words written wholly in kana and the
  kanji of the CJK block (no Latin, digits or symbols), with the odd year or number, 、 and 。.
  The words follow one another without grammar, as the Chinese set's do: rec reads characters
  with no language model, so what counts is which characters occur and how often.
- ``small-print``: English at 6-8 pt in DejaVu Sans/Serif, with amounts in two-column rows
  (terms and conditions, footnotes, the back of an invoice).
- ``a4-en``: English at 9-12 pt, the same words and fonts, for an English set degraded like
  the others (``--synthetic-a4`` stays the clean PyMuPDF set).

Two splits: ``dev`` (seeds from 0; tune on these) and ``heldout`` (seeds from 100,000; report
on these, never tune on them).

What a set needs is checked first and said in one error: the Noto CJK fonts for ``a4-zh``
(``apt-get install fonts-noto-cjk``) and jieba (``pip install jieba==0.42.1``); DejaVu fonts
for the English sets (``apt-get install fonts-dejavu-core``); the Noto CJK fonts and wordfreq
(``pip install wordfreq==3.1.1``) for the Japanese sets. Fonts are found with ``fc-list``.
"""

from __future__ import annotations

import bisect
import functools
import io
import json
import math
import random
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.util import find_spec as importlib_find_spec
from pathlib import Path
from typing import Any

from ocrstream.bench.cer import TextLine
from ocrstream.bench.datasets import Sample, _sentence

DEVSETS = ("a4-en", "a4-zh", "small-print", "a4-zh-vertical", "a4-ja", "a4-ja-vertical")
VERTICAL = ("a4-zh-vertical", "a4-ja-vertical")
JAPANESE = ("a4-ja", "a4-ja-vertical")
CHINESE = ("a4-zh", "a4-zh-vertical")
SPLITS = {"dev": 0, "heldout": 100_000}
# Raised for a set whenever its pages would come out different (its cache folder is -v{N}).
VERSIONS = {"a4-en": 1, "a4-zh": 2, "small-print": 1, "a4-zh-vertical": 1, "a4-ja": 1,
            "a4-ja-vertical": 1}  # fmt: skip
DPI = 300
A4_PX = (2480, 3508)  # width, height at 300 DPI
CACHE = Path.home() / ".cache" / "ocrstream" / "devsets"
# words, and their cumulative weights for drawing them (_draw)
Vocabulary = tuple[tuple[str, ...], tuple[float, ...]]


class MissingRequirement(RuntimeError):
    """A font or package the set needs is not on this machine (the message says how to get it)."""


@dataclass(frozen=True, slots=True)
class FontFace:
    path: str
    index: int
    family: str


# --------------------------------------------------------------------------- what a set needs


def _fc_list(pattern: str) -> list[FontFace]:
    try:
        out = subprocess.run(
            ["fc-list", "-f", "%{file}|%{index}|%{family[0]}|%{style[0]}\n", pattern],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    faces = []
    for row in sorted(set(out.splitlines())):
        parts = row.split("|")
        if len(parts) == 4 and parts[0] and parts[1].isdigit():
            faces.append(FontFace(parts[0], int(parts[1]), parts[2]))
    return faces


@functools.cache
def fonts_for(devset: str) -> tuple[FontFace, ...]:
    """The faces ``devset`` renders with, or :class:`MissingRequirement` saying what to install."""
    if devset in CHINESE:
        wanted = ("Noto Sans CJK SC", "Noto Serif CJK SC")
        faces = [f for f in _fc_list(":lang=zh:style=Regular") if f.family in wanted]
        hint = "the Noto CJK fonts (apt-get install fonts-noto-cjk)"
    elif devset in JAPANESE:
        wanted = ("Noto Sans CJK JP", "Noto Serif CJK JP")
        faces = [f for f in _fc_list(":lang=ja:style=Regular") if f.family in wanted]
        hint = "the Noto CJK fonts (apt-get install fonts-noto-cjk)"
    elif devset in ("a4-en", "small-print"):
        wanted = ("DejaVu Sans", "DejaVu Serif")
        faces = [f for f in _fc_list(":style=Book") if f.family in wanted]
        hint = "the DejaVu fonts (apt-get install fonts-dejavu-core)"
    else:
        raise ValueError(f"unknown dev set {devset!r}; known: {', '.join(DEVSETS)}")
    found = {f.family: f for f in faces if "Condensed" not in Path(f.path).name}
    if not found:
        raise MissingRequirement(
            f"dev set {devset} needs {hint}: fc-list finds none of {', '.join(wanted)}"
        )
    return tuple(found[name] for name in wanted if name in found)


def requirements(devset: str) -> list[str]:
    """What ``devset`` lacks on this machine, as install hints; empty when it can be built."""
    missing = []
    try:
        fonts_for(devset)
    except MissingRequirement as e:
        missing.append(str(e))
    if devset in VERTICAL:
        from PIL import features

        if not features.check("raqm"):
            missing.append(f"dev set {devset} needs a Pillow built with libraqm (PyPI's is)")
    if devset in CHINESE:
        try:
            _zh_vocabulary()
        except MissingRequirement as e:
            missing.append(str(e))
    if devset in JAPANESE:
        try:
            _ja_vocabulary()
        except MissingRequirement as e:
            missing.append(str(e))
    return missing


@functools.cache
def _zh_vocabulary() -> Vocabulary:
    """The 40,000 most frequent words of jieba's dictionary written in GB2312's Chinese
    characters, with cumulative frequencies for drawing words in proportion to how often they
    are used."""
    spec = importlib_find_spec("jieba")
    if spec is None or not spec.submodule_search_locations:
        raise MissingRequirement(
            "dev set a4-zh needs jieba's dictionary: pip install jieba==0.42.1"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "dict.txt"
    rows = []
    for row in path.read_text(encoding="utf-8").splitlines():
        parts = row.split(" ")
        if len(parts) >= 2 and parts[1].isdigit() and _is_simplified_chinese(parts[0]):
            rows.append((int(parts[1]), parts[0]))
    rows.sort(key=lambda r: (-r[0], r[1]))
    return _weighted(rows[:40_000])


def _weighted(rows: Sequence[tuple[float, str]]) -> Vocabulary:
    """(frequency, word) rows as the words and their cumulative weights, the square root of
    each frequency: the head flattened a little (fewer 的 的 的)."""
    total, cumulative = 0.0, []
    for freq, _ in rows:
        total += math.sqrt(freq)
        cumulative.append(total)
    return tuple(w for _, w in rows), tuple(cumulative)


def _draw(rng: random.Random, vocabulary: Vocabulary) -> str:
    """A word of ``vocabulary``, drawn in proportion to its weight."""
    words, cumulative = vocabulary
    return words[bisect.bisect_left(cumulative, rng.random() * cumulative[-1])]


@functools.cache
def _ja_vocabulary() -> Vocabulary:
    """The 40,000 most frequent words of wordfreq's Japanese list written wholly in kana and
    CJK-block kanji, with cumulative frequencies (flattened as the Chinese set's) for drawing
    words in proportion to how often they are used."""
    try:
        import wordfreq
    except ImportError:
        raise MissingRequirement(
            "the Japanese dev sets need wordfreq's word list: pip install wordfreq==3.1.1"
        ) from None
    rows: list[tuple[float, str]] = []
    # buckets of words by frequency, bucket i holding the words used 10^(-i/100) of the time
    for bucket, words in enumerate(wordfreq.get_frequency_list("ja")):
        rows += [(10.0 ** (-bucket / 100), w) for w in words if _is_japanese(w)]
        if len(rows) >= 40_000:
            break
    return _weighted(rows[:40_000])


def _is_japanese(word: str) -> bool:
    """All of ``word`` is hiragana, katakana (with its long-vowel mark) or kanji of the CJK
    block, and it is not one kana alone (a particle, which the sentences add themselves)."""
    kana = [_is_kana(c) for c in word]
    return (
        bool(word)
        and all(k or _is_han(c) for k, c in zip(kana, word, strict=True))
        and not (len(word) == 1 and kana[0])
    )


def _is_kana(c: str) -> bool:
    return "\u3041" <= c <= "\u3096" or "\u30a1" <= c <= "\u30fc"  # hiragana, katakana, ー


def _is_han(c: str) -> bool:
    return "\u4e00" <= c <= "\u9fff"


def _is_simplified_chinese(word: str) -> bool:
    """All of ``word`` is Chinese characters of GB2312, the 6,763 of everyday simplified
    Chinese: not mojibake, not a traditional form."""
    if not word or not all(_is_han(c) for c in word):
        return False
    try:
        word.encode("gb2312")
    except UnicodeEncodeError:
        return False
    return True


# --------------------------------------------------------------------------- text


def _zh_sentence(rng: random.Random) -> str:
    vocabulary = _zh_vocabulary()
    out = []
    for i in range(rng.randint(5, 16)):
        r = rng.random()
        if r < 0.02:
            out.append(f"{rng.randint(1950, 2030)}年")
        elif r < 0.03:
            out.append(f"{rng.randint(1, 99)}.{rng.randint(0, 9)}%")
        elif r < 0.045:
            out.append(str(rng.randint(2, 9999)))
        else:
            out.append(_draw(rng, vocabulary))
        if i and rng.random() < 0.12:
            out.append(rng.choice("，、"))
    return "".join(out).strip("，、") + rng.choice("。。。；：")


def _ja_sentence(rng: random.Random) -> str:
    vocabulary = _ja_vocabulary()
    out = []
    for i in range(rng.randint(6, 18)):
        r = rng.random()
        if r < 0.02:
            out.append(f"{rng.randint(1950, 2030)}年")
        elif r < 0.035:
            out.append(str(rng.randint(2, 9999)))
        else:
            out.append(_draw(rng, vocabulary))
            if rng.random() < 0.3:  # a particle after a word
                out.append(rng.choice("のにはがをでともへ"))
        if i and rng.random() < 0.1:
            out.append("、")
    return "".join(out).strip("、") + "。"


def _sentence_for(devset: str, rng: random.Random) -> str:
    if devset in CHINESE:
        return _zh_sentence(rng)
    if devset in JAPANESE:
        return _ja_sentence(rng)
    return _en_sentence(rng)


def _en_sentence(rng: random.Random) -> str:
    return _sentence(rng, rng.randint(4, 10), ends=".......:;")


# --------------------------------------------------------------------------- rendering


@dataclass(frozen=True, slots=True)
class _Style:
    sizes_pt: tuple[float, ...]
    leading: tuple[float, float]
    cjk: bool  # written without spaces between words, and no upper case


_STYLES = {
    "a4-en": _Style((9.0, 10.0, 11.0, 12.0), (1.3, 1.5), cjk=False),
    "small-print": _Style((6.0, 6.5, 7.0, 7.5, 8.0), (1.15, 1.35), cjk=False),
    "a4-zh": _Style((9.0, 10.0, 10.5, 11.0, 12.0), (1.5, 1.8), cjk=True),
    "a4-zh-vertical": _Style((9.0, 10.0, 10.5, 11.0, 12.0), (1.5, 1.8), cjk=True),
    "a4-ja": _Style((9.0, 10.0, 10.5, 11.0, 12.0), (1.5, 1.8), cjk=True),
    "a4-ja-vertical": _Style((9.0, 10.0, 10.5, 11.0, 12.0), (1.5, 1.8), cjk=True),
}


def _blank_page(devset: str, seed: int) -> tuple[random.Random, Any, Any, float, Any, Any, int]:
    """A white A4 page for ``seed``: its random source, the page and a pen on it, the text
    size in px, the body and title fonts, and the margin (0.7-1 inch)."""
    from PIL import Image, ImageDraw, ImageFont

    faces = fonts_for(devset)
    rng = random.Random(f"{devset}:{seed}")
    face = faces[seed % len(faces)]
    size_px = rng.choice(_STYLES[devset].sizes_pt) * DPI / 72.0
    font = ImageFont.truetype(face.path, round(size_px), index=face.index)
    title_font = ImageFont.truetype(face.path, round(size_px * 1.3), index=face.index)
    page = Image.new("L", A4_PX, 255)
    margin = round(rng.uniform(0.7, 1.0) * DPI)
    return rng, page, ImageDraw.Draw(page), size_px, font, title_font, margin


def render_page(devset: str, seed: int) -> tuple[bytes, tuple[TextLine, ...]]:
    """One page of ``devset`` as JPEG bytes, and its lines (boxes in image pixels)."""
    import numpy as np
    from PIL import Image

    if devset in VERTICAL:
        return _render_vertical(devset, seed)
    style = _STYLES[devset]
    rng, page, draw, size_px, font, title_font, margin = _blank_page(devset, seed)
    width, height = A4_PX
    left, right, bottom = margin, width - margin, height - margin
    leading = size_px * rng.uniform(*style.leading)
    sentence = functools.partial(_sentence_for, devset, rng)
    lines: list[TextLine] = []

    def put(x: float, y: float, text: str, f: Any = font) -> None:
        draw.text((x, y), text, font=f, fill=0)
        x0, y0, x1, y1 = draw.textbbox((x, y), text, font=f)
        lines.append(TextLine(text=text, polygon=((x0, y0), (x1, y0), (x1, y1), (x0, y1))))

    y = float(margin)
    title = sentence().rstrip("。；：.:;")
    title = _fit(draw, title, title_font, right - left)
    put(left, y, title.upper() if not style.cjk else title, title_font)
    y += leading * 2.2
    while y + leading < bottom:
        if rng.random() < 0.15:  # a label on the left, an amount on the right
            label = _fit(draw, sentence().rstrip("。；：.:;"), font, (right - left) * 0.55)
            amount = f"{rng.randint(1, 99999):,}.{rng.randint(0, 99):02d}"
            put(left, y, label)
            put(right - draw.textlength(amount, font=font), y, amount)
        else:
            text = _fill(draw, rng, sentence, font, (right - left) * rng.uniform(0.55, 1.0))
            put(left, y, text)
        y += leading * (2.0 if rng.random() < 0.1 else 1.0)
    image, lines = _degrade(np.asarray(page), lines, rng)
    out = io.BytesIO()
    Image.fromarray(image).save(out, "JPEG", quality=rng.randint(70, 88), dpi=(DPI, DPI))
    return out.getvalue(), tuple(lines)


def _render_vertical(devset: str, seed: int) -> tuple[bytes, tuple[TextLine, ...]]:
    """A page of Chinese or Japanese in vertical columns: a title column on the right, then
    columns of prose leftwards, each as long as the text that fills it, some followed by a blank
    one."""
    import numpy as np
    from PIL import Image

    style = _STYLES[devset]
    rng, page, draw, size_px, font, title_font, margin = _blank_page(devset, seed)
    width, height = A4_PX
    top, bottom = margin, height - margin
    pitch = size_px * rng.uniform(*style.leading)  # column to column
    ttb: dict[str, Any] = {"direction": "ttb", "features": ["vert"], "anchor": "mt"}
    lines: list[TextLine] = []

    def length(text: str, f: Any = font) -> float:
        return float(draw.textlength(text, font=f, direction="ttb", features=["vert"]))

    def fit(text: str, f: Any, room: float) -> str:
        while len(text) > 1 and length(text, f) > room:
            text = text[:-1]
        return text.strip()

    def put(x: float, text: str, f: Any = font) -> None:  # x: the column's centre
        draw.text((x, top), text, font=f, fill=0, **ttb)
        x0, y0, x1, y1 = draw.textbbox((x, top), text, font=f, **ttb)
        lines.append(TextLine(text=text, polygon=((x0, y0), (x1, y0), (x1, y1), (x0, y1))))

    x = width - margin - size_px * 0.65
    title = _sentence_for(devset, rng).rstrip("。；：.:;")
    put(x, fit(title, title_font, bottom - top), title_font)
    x -= pitch * 2.2
    while x - pitch > margin:
        room = (bottom - top) * rng.uniform(0.55, 1.0)
        text = ""
        while length(text) <= room:
            text += _sentence_for(devset, rng)
        put(x, fit(text, font, room))
        x -= pitch * (2.0 if rng.random() < 0.1 else 1.0)
    image, lines = _degrade(np.asarray(page), lines, rng)
    out = io.BytesIO()
    Image.fromarray(image).save(out, "JPEG", quality=rng.randint(70, 88), dpi=(DPI, DPI))
    return out.getvalue(), tuple(lines)


def _fit(draw: Any, text: str, font: Any, width: float) -> str:
    while len(text) > 1 and draw.textlength(text, font=font) > width:
        text = text[:-1]
    return text.strip()


def _fill(draw: Any, rng: random.Random, sentence: Any, font: Any, width: float) -> str:
    """Sentences until the line is full (cut at a word for English, a character for Chinese)."""
    text = ""
    while True:
        nxt = sentence()
        trial = f"{text} {nxt}".strip() if nxt.isascii() else text + nxt
        if draw.textlength(trial, font=font) <= width:
            text = trial
            continue
        if nxt.isascii():
            for word in nxt.split():
                longer = f"{text} {word}".strip()
                if draw.textlength(longer, font=font) > width:
                    return text or word
                text = longer
        return _fit(draw, trial, font, width)


def _degrade(page: Any, lines: list[TextLine], rng: random.Random) -> tuple[Any, list[TextLine]]:
    """A scan of ``page``: rotation (boxes follow), blur, grey ink on tinted paper, noise; RGB."""
    import cv2
    import numpy as np

    h, w = page.shape
    angle = rng.uniform(-0.8, 0.8)
    matrix = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.0)
    img = cv2.warpAffine(page, matrix, (w, h), flags=cv2.INTER_LINEAR, borderValue=255)
    sigma = rng.uniform(0.5, 1.1)
    img = cv2.GaussianBlur(img, (0, 0), sigma).astype(np.float32)
    ink, paper = rng.uniform(20, 70), rng.uniform(215, 250)
    img = ink + (paper - ink) * img / 255.0
    noise = np.random.default_rng(rng.randrange(2**32)).normal(0, rng.uniform(3, 9), img.shape)
    img = np.clip(img + noise, 0, 255)
    tint = np.array([rng.uniform(0.96, 1.0), rng.uniform(0.97, 1.0), 1.0], np.float32)  # BGR→RGB
    rgb = np.clip(img[:, :, None] * tint[::-1], 0, 255).astype(np.uint8)
    moved = []
    for line in lines:
        pts = np.array(line.polygon, np.float32)
        pts = pts @ matrix[:, :2].T.astype(np.float32) + matrix[:, 2].astype(np.float32)
        polygon = tuple((float(x), float(y)) for x, y in pts)
        moved.append(TextLine(text=line.text, polygon=polygon))
    return rgb, moved


# --------------------------------------------------------------------------- the cache


def devset(devset: str, n: int, split: str = "dev", cache: Path | None = None) -> list[Sample]:
    """``n`` pages of ``devset`` from the cache, rendering the ones not there yet."""
    if devset not in DEVSETS:
        raise ValueError(f"unknown dev set {devset!r}; known: {', '.join(DEVSETS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    missing = requirements(devset)
    if missing:
        raise MissingRequirement("; ".join(missing))
    folder = (cache or CACHE) / f"{devset}-{split}-v{VERSIONS[devset]}"
    folder.mkdir(parents=True, exist_ok=True)
    samples = []
    for i in range(n):
        seed = SPLITS[split] + i
        image, truth = folder / f"{seed:06d}.jpg", folder / f"{seed:06d}.json"
        if not (image.is_file() and truth.is_file()):
            data, lines = render_page(devset, seed)
            rows = [{"text": ln.text, "polygon": ln.polygon} for ln in lines]
            _write(truth, json.dumps(rows, ensure_ascii=False).encode())
            _write(image, data)
        gt = tuple(
            TextLine(text=row["text"], polygon=tuple(tuple(p) for p in row["polygon"]))
            for row in json.loads(truth.read_text(encoding="utf-8"))
        )
        samples.append(Sample(name=f"{devset}-{split}-{seed:06d}", path=image, gt=gt))
    return samples


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def language_of(dataset: str) -> str:
    """The language and writing direction of a bench dataset, by its name (a dev set's,
    ``a4-zh-vertical-heldout-10``, and its rescanned copies' names): ``zh``, ``zh-vertical``,
    ``ja``, ``ja-vertical``, or ``en`` for the rest (English A4, small print, receipts), for an
    engine that must be told what it reads (Tesseract's ``-l``)."""
    for name in sorted(DEVSETS, key=len, reverse=True):  # a4-zh-vertical before a4-zh
        if dataset == name or dataset.startswith(f"{name}-"):
            lang = "ja" if name in JAPANESE else "zh" if name in CHINESE else "en"
            return f"{lang}-vertical" if name in VERTICAL else lang
    return "en"


def all_devsets(names: Sequence[str], n: int, split: str) -> dict[str, list[Sample]]:
    return {f"{name}-{split}-{n}": devset(name, n, split) for name in names}


# --------------------------------------------------------------------------- receipt-like pages


def receipt_like_page(seed: int) -> bytes:
    """A till receipt as JPEG bytes, for calibration only (no ground truth is kept): a narrow
    strip at ~200 DPI, upper-case shop lines, items with right-aligned amounts, a total, in
    DejaVu Sans or Serif at 7-10 pt, degraded like the dev sets and set on a darker,
    uneven background the way a photographed or fed-through receipt is."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFont

    rng = random.Random(f"receipt:{seed}")
    faces = fonts_for("a4-en")
    face = faces[seed % len(faces)]
    dpi = rng.choice((150, 200, 240))
    size_px = rng.uniform(7.0, 10.0) * dpi / 72.0
    font = ImageFont.truetype(face.path, round(size_px), index=face.index)
    width = round(rng.uniform(2.6, 3.2) * dpi)  # 66-81 mm of paper
    rows = rng.randint(18, 40)
    leading = size_px * rng.uniform(1.2, 1.6)
    height = round(leading * (rows + 4) + 2 * size_px)
    page = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(page)
    left, right, y = size_px, width - size_px, size_px
    lines: list[TextLine] = []
    total = 0.0
    for row in range(rows):
        if row < 3:  # shop name, address, date
            text = _fit(draw, _en_sentence(rng).rstrip(".:;").upper(), font, right - left)
            draw.text(((width - draw.textlength(text, font=font)) / 2, y), text, font=font, fill=0)
        else:
            amount = rng.randint(50, 99999) / 100
            total += amount
            label = _fit(draw, _sentence(rng, rng.randint(1, 4), ends=" ").upper(), font,
                         (right - left) * 0.6)  # fmt: skip
            draw.text((left, y), label, font=font, fill=0)
            text = f"{amount:.2f}"
            draw.text((right - draw.textlength(text, font=font), y), text, font=font, fill=0)
        y += leading
    text = f"TOTAL {total:.2f}"
    draw.text((right - draw.textlength(text, font=font), y + leading), text, font=font, fill=0)
    image, _ = _degrade(np.asarray(page), lines, rng)
    pad = round(rng.uniform(0.1, 0.4) * width)  # the table or scanner lid around the strip
    shade = np.array([rng.uniform(60, 200)] * 3, np.float32)
    canvas = np.empty((height + 2 * pad, width + 2 * pad, 3), np.float32)
    canvas[:] = shade
    gradient = np.linspace(rng.uniform(0.8, 1.0), rng.uniform(1.0, 1.15), canvas.shape[0])
    canvas[pad : pad + height, pad : pad + width] = image
    canvas *= gradient[:, None, None]
    out = io.BytesIO()
    Image.fromarray(np.clip(canvas, 0, 255).astype(np.uint8)).save(
        out, "JPEG", quality=rng.randint(60, 85)
    )
    return out.getvalue()
