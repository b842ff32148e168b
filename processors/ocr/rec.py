"""Text recognition: line crops from many pages in width buckets, then CTC greedy decoding.

Each crop is resized to the model's height (48) keeping its aspect ratio and padded with zeros
(after normalisation, as PP-OCR was trained) to a bucket width that depends on the crop alone:
at least ``min_width`` (64 px; padding short words to PP-OCR's training width of 320 changed
nothing on sroie-dev but the time), then a multiple of ``width_step``, at
most ``max_width`` (longer lines are squeezed to it). Only crops of the same bucket share a
batch, so a line reads the same alone or among others, and padding stays small.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import unicodedata
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import cv2
import numpy as np
import numpy.typing as npt

from ocrstream.errors import FatalError
from ocrstream.processors.ocr.geometry import Quad, crop_quad, quad_size, stands
from ocrstream.processors.ocr.models import REC_CROP_MARGIN

if TYPE_CHECKING:
    from ocrstream.processors.ocr.backends.base import InferSession
    from ocrstream.settings import OcrSettings

ImageBGR = npt.NDArray[np.uint8]
FloatArray = npt.NDArray[np.float32]


# The widths a GPU's rec batches are padded to (RecParams.ladder): multiples of 32, then
# RecParams.max_width (3200). A line is padded to at most 4/3 of its width (3/2 under 128 px)
# and a worker meets 17 widths, not the exact bucketing's 99.
WIDTH_LADDER = (64, 96, 128, 160, 192, 256, 320, 384, 480, 608, 768, 960, 1216, 1536, 1920, 2400)


@dataclasses.dataclass(frozen=True, slots=True)
class RecParams:
    height: int = 48
    min_width: int = 64
    width_step: int = 32
    max_width: int = 3200
    # A batch holds at most this many output timesteps (sum of widths / 8): the output is
    # N x T x classes floats, ~75 KB per timestep for an 18,710-character dictionary.
    max_batch_width: int = 64 * 320
    # Line crops are this share of their det box's height taller above and below
    # (geometry.grow_for_rec); 0: the det box as it is. The engine takes its model set's
    # (models.ModelSetSpec.rec_crop_margin) unless the settings name one.
    crop_margin: float = REC_CROP_MARGIN
    # A horizontal crop at least this tall but shorter than ``height`` is read at its own
    # height, its top and bottom rows repeated to ``height``, not enlarged: fewer columns
    # (crop_line); 0: every crop enlarged.
    native_min_height: int = 0
    # Restore a lost space where the space class reached this between two characters
    # (ctc_greedy); 0: the greedy path as it is.
    space_min: float = 0.1
    # Punctuation in the width of the script around it (mark_widths), and Japanese look-alike
    # letters in the script around them (kana_in_context); False: as read.
    mark_width: bool = True
    # Shapes for a GPU (settings.OcrSettings.rec_shapes): widths padded up to WIDTH_LADDER
    # (then max_width) and a batch's lines up to a power of two (batch_rows), so that cuDNN
    # builds its plans for a few dozen shapes once, not for every new (lines, width).
    ladder: bool = False

    @classmethod
    def from_settings(
        cls, settings: OcrSettings, model_margin: float, model_native_height: int = 0
    ) -> RecParams:
        """What the settings choose (the engine's and line rescue's rec read lines alike);
        the crop margin is ``model_margin`` and the least height read unenlarged
        ``model_native_height`` (the rec model's own) unless the settings set them."""
        margin, native = settings.rec_crop_margin, settings.rec_native_min_height
        return cls(
            height=settings.rec_height,
            max_batch_width=settings.rec_batch_pixels,
            crop_margin=model_margin if margin is None else margin,
            native_min_height=model_native_height if native is None else native,
            space_min=settings.rec_space_min,
            mark_width=settings.rec_mark_width,
            ladder=settings.rec_shape_ladder,
        )


def decode(probs: FloatArray, charset: Sequence[str], params: RecParams) -> list[tuple[str, float]]:
    """A rec batch's text and confidence per line, decoded as ``params`` say (:func:`ctc_greedy`
    with their restored spaces and punctuation widths): the one decoding of the engine, the
    line rescue and the device pipeline."""
    return ctc_greedy(probs, charset, params.space_min, mark_width=params.mark_width)


def resized_width(crop_h: int, crop_w: int, params: RecParams) -> int:
    """The width the crop takes at the model's height, before padding."""
    w = math.ceil(params.height * crop_w / max(1, crop_h))
    return int(min(max(w, 1), params.max_width))


def bucket_width(width: int, params: RecParams) -> int:
    """The batch width of a line ``width`` px wide: rounded up to ``width_step``, or with
    ``ladder`` to the next step of WIDTH_LADDER; within ``min_width`` and ``max_width``."""
    width = max(params.min_width, width)
    if params.ladder:
        step = bisect.bisect_left(WIDTH_LADDER, width)
        return (
            min(params.max_width, WIDTH_LADDER[step])
            if step < len(WIDTH_LADDER)
            else (params.max_width)
        )
    step = params.width_step
    return int(min(params.max_width, math.ceil(width / step) * step))


def batch_rows(lines: int, max_lines: int, params: RecParams) -> int:
    """Rows of a batch of ``lines`` lines: as many, or with ``ladder`` the next power of two
    (at most ``max_lines``, at least ``lines``). The extra rows are blank and their output
    is not read."""
    if not params.ladder or lines <= 1:
        return lines
    return max(lines, min(max_lines, 1 << (lines - 1).bit_length()))


def resize_line(crop: ImageBGR, params: RecParams) -> ImageBGR:
    """A line crop at the model's height, aspect kept (uint8; normalised in its batch).

    INTER_AREA, not bilinear: on the held-out small print (6-8 pt lines ~35 px tall, enlarged
    to 48) bilinear lost 12 spaces between words where INTER_AREA lost none, and it read 7
    fewer errors on 10 receipts, the same Chinese, one more on English A4 (docs/benchmarks.md).
    """
    h, w = crop.shape[:2]
    rw = resized_width(h, w, params)
    return cv2.resize(crop, (rw, params.height), interpolation=cv2.INTER_AREA)  # type: ignore[return-value]


# A horizontal line this much taller than rec's height, or less, is warped straight to its
# rec size in one bilinear pass (crop_line); a taller one is cut at its own size first and
# shrunk with INTER_AREA, which bilinear sampling would alias past 2:1.
FUSED_MAX_SHRINK = 2.0


def crop_line(
    image: ImageBGR, quad: Quad, params: RecParams, height: float | None = None
) -> ImageBGR:
    """The text line under ``quad`` at the model's height, ready for :func:`batch_tensor`.

    ``height`` (:class:`~ocrstream.processors.ocr.geometry.RecQuads`' for the quad) sets a
    horizontal line's width at rec's height where it is taller than the quad: a crop cut short
    at its neighbour keeps the width of the crop grown by the whole margin.

    A horizontal line that shrinks by at most :data:`FUSED_MAX_SHRINK` is warped once, from
    the page straight to its rec size: a tenth of the time of a crop at its own size and then
    a resize (0.13 against 1.67 ms for a 2,000 x 61 px line of a 300-DPI A4 page, one
    thread). The held-out sets' edits moved by at most 1 on A4 and small print and by 5 of
    29,899 characters on receipts (docs/benchmarks.md, session 25). A line to enlarge, shrink
    further, or turn upright is cut bicubic and then resized (:func:`resize_line`).

    A horizontal line at least ``params.native_min_height`` tall (with ``height``) but shorter
    than rec's height is cut at its own height and its top and bottom rows repeated up to
    rec's, so that rec reads as many columns as the line has, not 48 / its height times
    more. v6 small read small print and 200-DPI A4 so from 40 px with as many edits and 2-10%
    less rec time; from 32 px, receipts scanned at 200 DPI read worse (docs/benchmarks.md,
    session 52).
    """
    if stands(quad):
        return resize_line(crop_quad(image, quad), params)
    ch = max(1, round(quad_size(quad)[1]))
    tall = max(ch, round(height)) if height is not None else ch
    if params.native_min_height and params.native_min_height <= tall < params.height:
        own = dataclasses.replace(params, height=tall)
        pad = params.height - tall
        return cv2.copyMakeBorder(  # type: ignore[return-value]
            _cut_across(image, quad, own, height), pad // 2, pad - pad // 2, 0, 0,
            cv2.BORDER_REPLICATE,
        )  # fmt: skip
    return _cut_across(image, quad, params, height)


def _cut_across(image: ImageBGR, quad: Quad, params: RecParams, height: float | None) -> ImageBGR:
    """A horizontal line at ``params.height``, as :func:`crop_line` describes."""
    w, h = quad_size(quad)
    cw, ch = max(1, round(w)), max(1, round(h))
    rw = resized_width(ch, cw, params)
    if params.height <= ch <= FUSED_MAX_SHRINK * params.height:
        dst = np.array([[0, 0], [rw, 0], [rw, params.height], [0, params.height]], np.float32)
        matrix = cv2.getPerspectiveTransform(np.asarray(quad, np.float32), dst)
        line = cv2.warpPerspective(
            image, matrix, (rw, params.height), flags=cv2.INTER_LINEAR,
            borderMode=cv2.BORDER_REPLICATE,
        )  # fmt: skip
    else:
        line = resize_line(crop_quad(image, quad), params)
    if height is not None and round(height) > ch:
        # narrowed in a second pass, INTER_AREA: one warp straight to the narrower width
        # (bilinear) read 1-2 more edits a held-out set (v6 tiny; docs/benchmarks.md, session 31)
        narrow = resized_width(round(height), cw, params)
        if narrow < line.shape[1]:
            line = cv2.resize(line, (narrow, params.height), interpolation=cv2.INTER_AREA)
    return line  # type: ignore[return-value]


def batch_tensor(
    lines: Sequence[ImageBGR], width: int, params: RecParams, max_lines: int | None = None
) -> FloatArray:
    """Lines already at the model's height as an N×3×H×width batch: (x/255 - 0.5) / 0.5,
    zero (grey) padding on the right; with ``max_lines`` (the batch limit) and ``ladder``,
    blank rows below up to :func:`batch_rows`' count, whose output the caller does not read."""
    rows = batch_rows(len(lines), max_lines, params) if max_lines else len(lines)
    batch = np.zeros((rows, 3, params.height, width), np.float32)
    for j, line in enumerate(lines):
        w = min(width, line.shape[1])
        chw = line[:, :w].transpose(2, 0, 1)
        np.multiply(chw, 1.0 / 127.5, out=batch[j, :, :, :w], casting="unsafe")
        batch[j, :, :, :w] -= 1.0
    return batch


def plan_batches(widths: Sequence[int], max_lines: int, params: RecParams) -> list[list[int]]:
    """Group line indices by bucket width into batches bounded in lines and in total width."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, w in enumerate(widths):
        groups[w].append(i)
    batches: list[list[int]] = []
    for width in sorted(groups):
        idx = groups[width]
        per_batch = max(1, min(max_lines, params.max_batch_width // width))
        for start in range(0, len(idx), per_batch):
            batches.append(idx[start : start + per_batch])
    return batches


def plan_streams(
    widths: Sequence[int], max_lines: int, params: RecParams, streams: int
) -> list[list[int]]:
    """:func:`plan_batches` as the engine runs them on ``streams`` rec streams side by side: a
    lone batch split in two so that two streams share it, the costliest (lines x width) first."""
    batches = plan_batches(widths, max_lines, params)
    if streams > 1 and len(batches) == 1 and len(batches[0]) > 1:
        half = (len(batches[0]) + 1) // 2
        batches = [batches[0][:half], batches[0][half:]]
    batches.sort(key=lambda idx: -len(idx) * widths[idx[0]])
    return batches


def read_lines(
    session: InferSession,
    lines: Sequence[ImageBGR],
    charset: Sequence[str],
    params: RecParams,
    max_lines: int,
) -> list[tuple[str, float]]:
    """Text and confidence of line crops already at the model's height, in their order: their
    width-bucketed batches (:func:`plan_batches`) run one after the other on ``session``, the
    widest first, and decoded (:func:`decode`). The engine's rec on one stream and the line
    rescue's. Widest first because OpenVINO sizes its buffers again for an input larger than
    any before, and the C allocator keeps the ones it freed: narrowest first, a one-thread
    engine grew by 10-27 MB at each longer line of a small-print page (docs/benchmarks.md,
    session 45); on several streams :func:`plan_streams` puts the costliest first anyway."""
    widths = [bucket_width(line.shape[1], params) for line in lines]
    out: list[tuple[str, float]] = [("", 0.0)] * len(lines)
    for idx in reversed(plan_batches(widths, max_lines, params)):
        batch = batch_tensor([lines[i] for i in idx], widths[idx[0]], params, max_lines)
        decoded = decode(session.run(batch)[: len(idx)], charset, params)
        for i, result in zip(idx, decoded, strict=True):
            out[i] = result
    return out


def ctc_greedy(
    probs: FloatArray,
    charset: Sequence[str],
    space_min: float = 0.0,
    *,
    mark_width: bool = False,
) -> list[tuple[str, float]]:
    """Greedy CTC over a batch (N × T × C): best class per step, repeats collapsed, blanks
    (class 0) dropped; confidence is the mean probability of the kept steps.

    ``probs`` may also be the compact output of a ``ctc_best`` model (:func:`.models.
    ctc_best_model`): per step the best class as a float and its probability, and the space
    class's probability where the model gives it (N × T × 3; N × T × 2 without it), told
    apart by its last dimension.

    ``space_min`` > 0 puts back spaces that the greedy path lost: where two characters are
    separated only by blank steps and the space class's probability reached ``space_min`` on
    one of them, a space is read between the two (never beside another space, never at
    either end, never in Chinese or Japanese, never inside a figure: :func:`_restore_spaces`).
    PP-OCR's rec often leaves the space after a comma, a full stop or a figure in second place
    behind the blank (``balance,limited``); restored at 0.1, v6 small read the held-out English
    A4 with 7 edits instead of 14 and 50 receipts with 2,098 instead of 2,156
    (docs/benchmarks.md). A restored space does not count in the confidence, which stays the
    model's own.

    ``mark_width`` puts punctuation in the width of the script around it (:func:`mark_widths`:
    ``,;:!?`` full-width beside Chinese or Japanese, full-width forms as ASCII in Latin text),
    and a Japanese line's look-alike letters in the script around them (:func:`kana_in_context`).
    """
    if probs.ndim != 3:
        raise ValueError(f"CTC input must be N x T x C, not {probs.shape}")
    n_chars = len(charset)
    has_space = n_chars > 1 and charset[-1] == " "
    space: FloatArray | None = None
    if probs.shape[2] in (2, 3) and n_chars > 3:
        idx = probs[..., 0].astype(np.int64)
        best = probs[..., 1]
        if probs.shape[2] == 3:
            space = probs[..., 2]
    else:
        idx = probs.argmax(axis=2)
        best = np.take_along_axis(probs, idx[..., None], axis=2)[..., 0]
        space = probs[..., n_chars - 1] if has_space and probs.shape[2] >= n_chars else None
    keep = idx != 0
    keep[:, 1:] &= idx[:, 1:] != idx[:, :-1]
    counts = keep.sum(axis=1)
    sums = np.where(keep, best, 0.0).sum(axis=1)
    restore = space_min > 0 and has_space and space is not None
    if restore:
        assert space is not None
        # the space's probability on blank steps only; the best of each run between two
        # kept steps (a character's own steps and its repeats count as 0)
        gap = np.where(idx == 0, space, 0.0)
    out: list[tuple[str, float]] = []
    for row in range(probs.shape[0]):
        if counts[row] == 0:
            out.append(("", 0.0))
            continue
        at = np.flatnonzero(keep[row])
        chars = idx[row][at].tolist()
        if restore and len(at) > 1:
            chars = _restore_spaces(chars, np.maximum.reduceat(gap[row], at)[:-1], space_min,
                                    charset)  # fmt: skip
        text = "".join(charset[c] if c < n_chars else "" for c in chars)
        if mark_width:
            text = mark_widths(kana_in_context(text))
        out.append((text, float(sums[row] / counts[row])))
    return out


# Punctuation in the width of the script around it. PP-OCR's rec reads ``,;:!?`` half-width
# where Chinese and Japanese print the full-width form: the glyphs are alike, only the room
# after the mark differs, and on the held-out Chinese A4 pages v6 small read 71 of them
# half-width with the engine's taller line crops (docs/benchmarks.md, session 26). The other
# way, it read ``（BLUE）`` on an English receipt. Chinese and Japanese typesetting puts the
# full-width form beside their characters (GB/T 15834; JIS X 4051), Latin text the ASCII one.
# Korean, whose Hangul is as wide, takes the half-width marks with spaces, so Hangul counts as
# neither.
_FULL_WIDTH = str.maketrans({",": "，", ";": "；", ":": "：", "!": "！", "?": "？"})
_HALF_MARKS = frozenset(",;:!?")
# full-width ASCII forms (U+FF01-FF5E) and the ideographic full stop and comma, as ASCII
_HALF_WIDTH = str.maketrans({**{chr(o): chr(o - 0xFEE0) for o in range(0xFF01, 0xFF5F)},
                             "。": ".", "、": ","})  # fmt: skip
_WIDE_MARKS = frozenset(chr(o) for o in range(0xFF01, 0xFF5F)) | {"。", "、"}


def _han_or_kana(c: str) -> bool:
    """A Chinese character or kana."""
    o = ord(c)
    return (
        0x3040 <= o <= 0x30FF  # hiragana, katakana
        or 0x3400 <= o <= 0x4DBF  # extension A
        or 0x4E00 <= o <= 0x9FFF  # unified ideographs
        or 0xF900 <= o <= 0xFAFF  # compatibility ideographs
        or 0x20000 <= o <= 0x3FFFF  # extensions B and later
    )


def cjk_side(c: str) -> bool:
    """Chinese or Japanese text: a character, kana, CJK punctuation or a full-width form."""
    o = ord(c)
    return _han_or_kana(c) or 0x3000 <= o <= 0x303F or 0xFF01 <= o <= 0xFF60


def mark_widths(text: str) -> str:
    """``text`` with its punctuation in the width of the script around it:

    - each ``,;:!?`` full-width where it follows a Chinese or Japanese character
      (``中国,北京`` -> ``中国，北京``), or precedes one and follows neither a Latin letter nor
      a space (``编号6814:鲁迅`` -> ``编号6814：鲁迅``; ``Note: 中文`` and ``10:30`` stay);
    - in a line with no Chinese character or kana at all, full-width ASCII forms and ``。、``
      as ASCII (``（BLUE）`` -> ``(BLUE)``).
    """
    if not any(map(_han_or_kana, text)):
        return text.translate(_HALF_WIDTH) if not _WIDE_MARKS.isdisjoint(text) else text
    if _HALF_MARKS.isdisjoint(text):
        return text
    chars = list(text)
    last = len(chars) - 1
    for k, c in enumerate(chars):
        if c not in _HALF_MARKS:
            continue
        before = text[k - 1] if k else ""
        after = text[k + 1] if k < last else ""
        if (before and cjk_side(before)) or (
            after
            and cjk_side(after)
            and not (before.isascii() and (before.isalpha() or before.isspace()))
        ):
            chars[k] = c.translate(_FULL_WIDTH)
    return "".join(chars)


# Japanese letters whose glyphs are alike across scripts, read in the script around them
# (kana_in_context). Hiragana and katakana be/pe are the same shapes; these katakana and kanji
# differ by a stroke's length at most; the long-vowel mark is a kanji one in a column.
_KANA_TWINS = {"べ": "ベ", "ぺ": "ペ"}  # hiragana -> katakana
_KANA_TWINS_BACK = {v: k for k, v in _KANA_TWINS.items()}
_KATAKANA_KANJI = {"エ": "工", "カ": "力", "ロ": "口", "ニ": "二", "ハ": "八", "タ": "夕",
                   "ト": "卜"}  # fmt: skip
_KANJI_KATAKANA = {v: k for k, v in _KATAKANA_KANJI.items()}
_TO_KANJI = frozenset("エロニハタ")  # katakana read as kanji between two kanji
_LOOK_ALIKES = (
    frozenset(_KANA_TWINS) | set(_KANA_TWINS_BACK) | set(_KATAKANA_KANJI) | set(_KANJI_KATAKANA)
)
_LONG_VOWEL = "ー"
# what rec reads for a long-vowel mark set in a column, between two katakana
_LONG_VOWEL_MISREAD = frozenset("一1|lI-—－")


def _hiragana(c: str) -> bool:
    return "\u3041" <= c <= "\u3096"


def _katakana(c: str) -> bool:
    """A katakana letter or the long-vowel mark (U+30A1-30FA, U+30FC)."""
    return "\u30a1" <= c <= "\u30fa" or c == _LONG_VOWEL


def _han(c: str) -> bool:
    return _han_or_kana(c) and not ("\u3040" <= c <= "\u30ff")


def kana_in_context(text: str) -> str:
    """A Japanese line (one with kana) with its look-alike letters in the script around them.

    PP-OCR's rec reads べ/ベ and ぺ/ペ, identical glyphs, from the shape alone (``食ベる``,
    ``すベて``), and now and then a katakana as the kanji it resembles (``工ネルギー``), a kanji
    one as the long-vowel mark (``年ーに``), or a long-vowel mark set in a column as ``1``:

    - ー after a kanji is 一; 一, 1, | and dashes between two katakana are ー;
    - べ, ぺ take the script of the letter after them, when that is kana;
    - 工力口二八夕卜 are katakana where the letters on both sides are katakana, or the one
      beside them is at the line's start or end or next to punctuation; エロニハタ are kanji
      between two kanji (カ and ト stay: 数カ月, 3カ国, and 卜 is rare).

    Lines without kana (Chinese, Latin) are returned as they are.
    """
    if not any(_hiragana(c) or ("\u30a1" <= c <= "\u30fa") for c in text):
        return text
    chars = list(text)
    last = len(chars) - 1
    for k, c in enumerate(chars):
        if c == _LONG_VOWEL and k and _han(chars[k - 1]):
            chars[k] = "一"
        elif (
            c in _LONG_VOWEL_MISREAD and 0 < k < last
            and _katakana(chars[k - 1]) and _katakana(chars[k + 1])
        ):  # fmt: skip
            chars[k] = _LONG_VOWEL
    for k, c in enumerate(chars):
        if c not in _LOOK_ALIKES:
            continue
        sides = [chars[k - 1] if k else "", chars[k + 1] if k < last else ""]
        after = sides[1]
        if c in _KANA_TWINS or c in _KANA_TWINS_BACK:
            if after and _hiragana(after):
                chars[k] = _KANA_TWINS_BACK.get(c, c)
            elif after and _katakana(after):
                chars[k] = _KANA_TWINS.get(c, c)
            continue
        letters = [s for s in sides if s and (_han(s) or _hiragana(s) or _katakana(s))]
        if c in _KANJI_KATAKANA and letters and all(map(_katakana, letters)):
            chars[k] = _KANJI_KATAKANA[c]
        elif c in _TO_KANJI and len(letters) == 2 and all(map(_han, letters)):
            chars[k] = _KATAKANA_KANJI[c]
    return "".join(chars)


# Between two of these a space is never restored (_restore_spaces)
DIGITS = frozenset("0123456789")


def _restore_spaces(
    chars: list[int], gaps: FloatArray, space_min: float, charset: Sequence[str]
) -> list[int]:
    """``chars`` with the space put back after character k where ``gaps[k]`` (the space's
    best probability on the blank steps before character k + 1) reached ``space_min``: not
    beside a space, not beside a wide (CJK) character and not in a line mostly of them,
    whose scripts do not space words (on the Chinese pages these were a colon's width read as
    a space, each one edit), and not between two digits: there the space class rising is a
    figure's own spacing (a narrow "1"), and figures read apart (``11 779``, ``4161 9``) were
    most of v6 tiny's restored-space errors on small print, while a real gap between two
    numbers is wide enough for the greedy path to read (docs/benchmarks.md, session 29)."""
    candidates = np.flatnonzero(gaps >= space_min)
    if candidates.size == 0:
        return chars
    n = len(charset)
    sp = n - 1
    wide = [c < n and unicodedata.east_asian_width(charset[c][:1] or " ") in "WF" for c in chars]
    if 2 * sum(wide) >= len(chars):
        return chars
    after = {int(k) for k in candidates}
    digit = [c < n and charset[c] in DIGITS for c in chars]
    out: list[int] = []
    for k, c in enumerate(chars):
        out.append(c)
        if k not in after or c == sp or chars[k + 1] == sp:
            continue
        if not (wide[k] or wide[k + 1] or (digit[k] and digit[k + 1])):
            out.append(sp)
    return out


def model_classes(session: object, params: RecParams) -> int:
    """How many classes a loaded rec session's model has: its ``classes`` attribute where it
    says (a session whose output is compacted on the device, ``SessionOptions.ctc_best``),
    else the last dimension of its output on a blank line."""
    known = int(getattr(session, "classes", 0) or 0)
    if known:
        return known
    probe = np.zeros((1, 3, params.height, params.min_width), np.float32)
    return int(session.run(probe).shape[-1])  # type: ignore[attr-defined]


def match_charset(classes: int, charset: Sequence[str], model: object) -> tuple[str, ...]:
    """The dictionary matched to a rec model's number of output classes: all of it, or all but
    the space (a model trained without ``use_space_char``); FatalError otherwise."""
    if classes == len(charset):
        return tuple(charset)
    if classes == len(charset) - 1:
        return tuple(charset[:-1])
    raise FatalError(
        f"rec model {model} has {classes} classes but the dictionary gives "
        f"{len(charset)} (blank + {len(charset) - 2} characters + space)",
        code="model_invalid",
    )
