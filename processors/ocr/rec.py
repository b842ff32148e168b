"""Text recognition: line crops from many pages in width buckets, then CTC greedy decoding.

Each crop is resized to the model's height (48) keeping its aspect ratio and padded with zeros
(after normalisation, as PP-OCR was trained) to a bucket width that depends on the crop alone:
at least ``min_width`` (64 px; padding short words to PP-OCR's training width of 320 changed
nothing on sroie-dev but the time), then a multiple of ``width_step``, at
most ``max_width`` (longer lines are squeezed to it). Only crops of the same bucket share a
batch, so a line reads the same alone or among others, and padding stays small.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import cv2
import numpy as np
import numpy.typing as npt

from ocrstream.errors import FatalError

if TYPE_CHECKING:
    from ocrstream.settings import OcrSettings

ImageBGR = npt.NDArray[np.uint8]
FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class RecParams:
    height: int = 48
    min_width: int = 64
    width_step: int = 32
    max_width: int = 3200
    # A batch holds at most this many output timesteps (sum of widths / 8): the output is
    # N x T x classes floats, ~75 KB per timestep for an 18,710-character dictionary.
    max_batch_width: int = 64 * 320
    # Line crops are this share of their det box's height taller above and below
    # (geometry.grow_for_rec); 0: the det box as it is.
    crop_margin: float = 0.04

    @classmethod
    def from_settings(cls, settings: OcrSettings) -> RecParams:
        """What the settings choose (the engine's and line rescue's rec read lines alike)."""
        return cls(
            height=settings.rec_height,
            max_batch_width=settings.rec_batch_pixels,
            crop_margin=settings.rec_crop_margin,
        )


def resized_width(crop_h: int, crop_w: int, params: RecParams) -> int:
    """The width the crop takes at the model's height, before padding."""
    w = math.ceil(params.height * crop_w / max(1, crop_h))
    return int(min(max(w, 1), params.max_width))


def bucket_width(width: int, params: RecParams) -> int:
    step = params.width_step
    return int(min(params.max_width, max(params.min_width, math.ceil(width / step) * step)))


def resize_line(crop: ImageBGR, params: RecParams) -> ImageBGR:
    """A line crop at the model's height, aspect kept (uint8; normalised in its batch).

    INTER_AREA, not bilinear: on the held-out small print (6-8 pt lines ~35 px tall, enlarged
    to 48) bilinear lost 12 spaces between words where INTER_AREA lost none, and it read 7
    fewer errors on 10 receipts, the same Chinese, one more on English A4 (docs/benchmarks.md).
    """
    h, w = crop.shape[:2]
    rw = resized_width(h, w, params)
    return cv2.resize(crop, (rw, params.height), interpolation=cv2.INTER_AREA)  # type: ignore[return-value]


def batch_tensor(lines: Sequence[ImageBGR], width: int, params: RecParams) -> FloatArray:
    """Lines already at the model's height as an N×3×H×width batch: (x/255 - 0.5) / 0.5,
    zero (grey) padding on the right."""
    batch = np.zeros((len(lines), 3, params.height, width), np.float32)
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


def ctc_greedy(probs: FloatArray, charset: Sequence[str]) -> list[tuple[str, float]]:
    """Greedy CTC over a batch (N × T × C): best class per step, repeats collapsed, blanks
    (class 0) dropped; confidence is the mean probability of the kept steps.

    ``probs`` may also be the compact N × T × 2 output of a ``ctc_best`` model (best class as
    a float, its probability), told apart by its last dimension.
    """
    if probs.ndim != 3:
        raise ValueError(f"CTC input must be N x T x C, not {probs.shape}")
    if probs.shape[2] == 2 and len(charset) > 2:
        idx = probs[..., 0].astype(np.int64)
        best = probs[..., 1]
    else:
        idx = probs.argmax(axis=2)
        best = np.take_along_axis(probs, idx[..., None], axis=2)[..., 0]
    keep = idx != 0
    keep[:, 1:] &= idx[:, 1:] != idx[:, :-1]
    counts = keep.sum(axis=1)
    sums = np.where(keep, best, 0.0).sum(axis=1)
    out: list[tuple[str, float]] = []
    n_chars = len(charset)
    for row in range(probs.shape[0]):
        if counts[row] == 0:
            out.append(("", 0.0))
            continue
        chars = idx[row][keep[row]]
        text = "".join(charset[c] if c < n_chars else "" for c in chars.tolist())
        out.append((text, float(sums[row] / counts[row])))
    return out


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
