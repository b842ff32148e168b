"""An experiment for ``ocrstream bench engine --device-pipeline``: pages on the GPU from decode
to CTC, with torch.

Why it is here, under ``bench/``, and not in the engine: only the benchmark runs it. Beside the
engine's GPU path (:class:`~ocrstream.processors.ocr.engine.OcrEngine` on the torch or TensorRT
backend, whose sessions already run on the device) it lacks the page orientation, deskew and
line classifier the engine has, and it has not been measured on a GPU yet (docs/benchmarks.md),
so it cannot replace that path without reading less for a speed no one has seen. The day a
measurement shows it faster at the same text, it moves to ``processors/ocr/`` as the engine's
device path, with those stages.

The CPU engine does these steps with OpenCV and numpy; this module does the same steps on
tensors, through the torch (and TensorRT) sessions' device path
(:meth:`~ocrstream.processors.ocr.backends.torch_backend.TorchSession.run_torch`):

1. :func:`decode_images`: JPEG bytes are decoded with nvjpeg
   (``torchvision.io.decode_jpeg(..., device="cuda")``, one batched call); other formats and
   CPU devices decode on the host and are copied up once. Result: uint8 ``3xHxW`` tensors.
2. :func:`det_tensor`: resize pages of one det shape (``det.det_shape``) and normalise with
   the det mean/std.
3. DB post-processing (contours, unclip) stays on the CPU: it is branchy and small. Only the
   probability map crosses, as uint8 (:func:`prob_map_to_host`).
4. :func:`crop_lines`: each text line's 4-point box is rectified and resized to the rec height
   in ONE ``grid_sample`` pass: the homography from the output strip to the page quad
   (solved in a batch with ``torch.linalg.solve``) composed with the resize to
   ``height x ceil(height * w / h)``. Tall boxes (h/w >= 1.5) are turned 90° counter-clockwise
   like PaddleOCR's ``get_rotate_crop_image``. Output is normalised ``(x/255 - 0.5) / 0.5``.
5. :func:`rec_batch`: crops of one width bucket are right-padded with zeros into one batch.
6. :func:`ctc_best`: argmax, its probability and the space's per time step on the device;
   only an ``N x T x 3`` array goes back to the host, decoded there as the CPU engine decodes
   its compact rec head (:func:`~ocrstream.processors.ocr.rec.ctc_greedy`, restored spaces
   included).

Colour order: the PP-OCR models were trained on OpenCV's BGR images; ``bgr=True`` (default)
flips decoded RGB to BGR on the device so the numbers match the CPU path.

The sizes and rules (det input shape, crop size, vertical-line turn, rec width, bucket width)
are the CPU engine's own functions (``det``, ``rec``, ``geometry``), so both paths batch alike.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ocrstream.errors import FatalError, PoisonError
from ocrstream.processors.ocr.geometry import grow_for_rec
from ocrstream.processors.ocr.types import EngineInfo

if TYPE_CHECKING:
    import torch

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
JPEG_MAGIC = b"\xff\xd8\xff"


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise FatalError(
            "GPU preprocessing needs PyTorch: pip install 'ocrstream[torch]'",
            code="backend_unavailable",
        ) from e
    return torch


# --------------------------------------------------------------------------- decode


def decode_images(data: Sequence[bytes], device: str = "cuda") -> list[torch.Tensor]:
    """Decode encoded images to uint8 ``3xHxW`` RGB tensors on ``device``.

    JPEGs go to nvjpeg in one batched call when ``device`` is CUDA; everything else (PNG,
    TIFF, JPEGs on CPU) is decoded on the host (torchvision, or OpenCV for TIFF) and copied.
    """
    torch = _torch()
    from torchvision.io import ImageReadMode, decode_image, decode_jpeg

    out: list[Any] = [None] * len(data)
    on_gpu = device.startswith("cuda")
    jpeg_idx = [i for i, d in enumerate(data) if on_gpu and d[:3] == JPEG_MAGIC]
    if jpeg_idx:
        encoded = [torch.frombuffer(bytearray(data[i]), dtype=torch.uint8) for i in jpeg_idx]
        try:
            decoded = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)
        except RuntimeError as e:
            raise PoisonError(f"nvjpeg cannot decode a page: {e}", code="image_decode") from e
        for i, img in zip(jpeg_idx, decoded, strict=True):
            out[i] = img
    for i, blob in enumerate(data):
        if out[i] is not None:
            continue
        out[i] = _decode_host(blob, decode_image, ImageReadMode.RGB).to(device)
    return out


def _decode_host(blob: bytes, decode_image: Any, mode: Any) -> torch.Tensor:
    torch = _torch()
    try:
        return decode_image(torch.frombuffer(bytearray(blob), dtype=torch.uint8), mode=mode)
    except RuntimeError:
        import cv2  # TIFF and other formats torchvision does not read

        arr = cv2.imdecode(np.frombuffer(blob, np.uint8), cv2.IMREAD_COLOR)
        if arr is None:
            raise PoisonError("cannot decode page image", code="image_decode") from None
        return torch.from_numpy(np.ascontiguousarray(arr[:, :, ::-1])).permute(2, 0, 1)


def from_numpy(image: npt.NDArray[np.uint8], device: str, bgr_input: bool = True) -> torch.Tensor:
    """A host image (HxW gray or HxWx3, BGR as OpenCV gives) as a uint8 ``3xHxW`` RGB tensor."""
    torch = _torch()
    arr = image
    if arr.ndim == 2:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    elif arr.ndim == 3 and arr.shape[2] == 4:
        arr = arr[:, :, :3]
    if bgr_input:
        arr = arr[:, :, ::-1]
    t = torch.from_numpy(np.ascontiguousarray(arr)).permute(2, 0, 1)
    if device.startswith("cuda"):
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


# --------------------------------------------------------------------------- det


def det_tensor(
    images: Sequence[torch.Tensor],
    shape: tuple[int, int],
    mean: tuple[float, float, float] = IMAGENET_MEAN,
    std: tuple[float, float, float] = IMAGENET_STD,
    bgr: bool = True,
    shapes: Sequence[tuple[int, int]] | None = None,
) -> torch.Tensor:
    """Pages (uint8 RGB ``3xHxW`` on one device) resized to ``shape`` and normalised, NCHW.

    ``shape`` comes from :func:`ocrstream.processors.ocr.det.det_shape`. With ``shapes``
    (each page's own, :func:`~ocrstream.processors.ocr.det.padded_shape` giving ``shape``),
    each page is resized to its own and padded with white to ``shape``, as the engine does
    with ``det_shapes=ladder``. Downscaling uses antialiased bilinear (the CPU path's
    INTER_AREA), upscaling plain bilinear (INTER_LINEAR); mean/std apply to BGR/255.
    """
    torch = _torch()
    import torch.nn.functional as F

    if not images:
        raise ValueError("det_tensor needs at least one image")
    device = images[0].device
    m, s = _mean_std(mean, std, device)
    batch = torch.empty((len(images), 3, *shape), dtype=torch.float32, device=device)
    if shapes is not None:
        batch.copy_(((1.0 - m) / s).expand(len(images), 3, *shape))  # white
    for i, im in enumerate(images):
        h, w = shapes[i] if shapes is not None else shape
        x = im.unsqueeze(0).float()
        if bgr:
            x = x.flip(1)
        if (h, w) != tuple(im.shape[1:]):
            shrink = h * w < im.shape[1] * im.shape[2]
            x = F.interpolate(
                x, size=(h, w), mode="bilinear", align_corners=False, antialias=shrink
            )
        batch[i, :, :h, :w] = (x[0] / 255.0 - m) / s
    return batch


def _mean_std(
    mean: Sequence[float], std: Sequence[float], device: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    torch = _torch()
    # PaddleOCR applies its mean/std list in the order of the image's channels (BGR).
    m = torch.tensor(list(mean), dtype=torch.float32, device=device).view(3, 1, 1)
    s = torch.tensor(list(std), dtype=torch.float32, device=device).view(3, 1, 1)
    return m, s


def prob_map_to_host(prob: torch.Tensor) -> npt.NDArray[np.float32]:
    """The det probability maps (``Nx1xHxW`` in [0, 1]) to the host as float32 ``NxHxW``.

    Sent as uint8 (a quarter of the bytes) and widened on the host: DB thresholds (0.3) and
    box scores (mean inside the polygon) are insensitive to 1/255 steps.
    """
    q = (prob[:, 0].clamp(0, 1) * 255.0 + 0.5).to(dtype=_torch().uint8)
    return q.cpu().numpy().astype(np.float32) / 255.0


# --------------------------------------------------------------------------- crops


def crop_sizes(
    quads: npt.ArrayLike,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Per quad: crop width, height and whether it is turned 90° (as ``geometry.crop_quad``)."""
    from ocrstream.processors.ocr.geometry import VERTICAL_RATIO

    q: np.ndarray = np.asarray(quads, dtype=np.float64).reshape(-1, 4, 2)
    w = np.maximum(
        np.linalg.norm(q[:, 0] - q[:, 1], axis=1), np.linalg.norm(q[:, 2] - q[:, 3], axis=1)
    )
    h = np.maximum(
        np.linalg.norm(q[:, 0] - q[:, 3], axis=1), np.linalg.norm(q[:, 1] - q[:, 2], axis=1)
    )
    w = np.maximum(np.round(w), 1.0)
    h = np.maximum(np.round(h), 1.0)
    return w, h, h >= VERTICAL_RATIO * w


def rec_widths(
    quads: npt.ArrayLike,
    height: int,
    max_width: int,
    heights: npt.ArrayLike | None = None,
) -> npt.NDArray[np.int64]:
    """The rec input width of each line: ``ceil(height * w / h)``, clipped to 1..max_width;
    ``heights`` (``geometry.RecQuads``) replaces a horizontal line's ``h`` where taller, as
    ``rec.crop_line`` does."""
    w, h, turned = crop_sizes(quads)
    cw = np.where(turned, h, w)
    ch = np.where(turned, w, h)
    if heights is not None:
        tall = np.round(np.asarray(heights, dtype=np.float64).reshape(-1))
        ch = np.where(turned, ch, np.maximum(ch, tall))
    return np.clip(np.ceil(height * cw / ch), 1, max_width).astype(np.int64)


def homographies(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """Batched 3x3 homographies mapping ``dst`` points to ``src`` points (``Kx4x2`` each)."""
    torch = _torch()
    k = src.shape[0]
    x, y = dst[..., 0], dst[..., 1]
    u, v = src[..., 0], src[..., 1]
    zeros, ones = torch.zeros_like(x), torch.ones_like(x)
    rows_u = torch.stack([x, y, ones, zeros, zeros, zeros, -x * u, -y * u], dim=-1)
    rows_v = torch.stack([zeros, zeros, zeros, x, y, ones, -x * v, -y * v], dim=-1)
    a = torch.cat([rows_u, rows_v], dim=1)  # K x 8 x 8
    b = torch.cat([u, v], dim=1).unsqueeze(-1)  # K x 8 x 1
    h = torch.linalg.solve(a.double(), b.double()).squeeze(-1)
    return torch.cat([h, torch.ones((k, 1), dtype=h.dtype, device=h.device)], 1).view(k, 3, 3)


def crop_lines(
    image: torch.Tensor,
    quads: npt.NDArray[np.float32],
    height: int = 48,
    max_width: int = 3200,
    bgr: bool = True,
    mode: str = "bilinear",
    heights: npt.ArrayLike | None = None,
) -> list[torch.Tensor]:
    """Rectify and resize each line of one page (uint8 RGB ``3xHxW``) in one grid_sample.

    ``quads`` is ``Kx4x2`` in page pixels, clockwise from top-left; ``heights`` as
    :func:`rec_widths` takes them (a line cut at its neighbour is narrowed in the same
    sampling; the CPU engine narrows in a second, INTER_AREA pass). Returns K float32
    tensors ``3 x height x w_k`` normalised to [-1, 1], ready for :func:`rec_batch`.
    """
    torch = _torch()
    import torch.nn.functional as F

    if len(quads) == 0:
        return []
    device = image.device
    q: np.ndarray = np.asarray(quads, dtype=np.float64).reshape(-1, 4, 2)
    cw, ch, turned = crop_sizes(q)
    # a turned crop is read from the quad starting at its top-right corner (rot90 CCW)
    q = np.where(turned[:, None, None], np.roll(q, -1, axis=1), q)
    cw, ch = np.where(turned, ch, cw), np.where(turned, cw, ch)
    widths = rec_widths(quads, height, max_width, heights)
    w_max = int(widths.max())
    k = len(q)
    dst = np.stack(
        [np.zeros(k), np.zeros(k), cw, np.zeros(k), cw, ch, np.zeros(k), ch], axis=1
    ).reshape(k, 4, 2)
    hmat = homographies(torch.from_numpy(q).to(device), torch.from_numpy(dst).to(device))
    # output pixel (u, v) -> crop pixel (half-pixel centres, as cv2.resize) -> page pixel
    us = torch.arange(w_max, device=device, dtype=torch.float64) + 0.5
    vs = torch.arange(height, device=device, dtype=torch.float64) + 0.5
    sx = torch.from_numpy(cw / widths).to(device).view(k, 1, 1)
    sy = torch.from_numpy(ch / height).to(device).view(k, 1, 1)
    xc = us.view(1, 1, -1) * sx - 0.5
    yc = vs.view(1, -1, 1) * sy - 0.5
    xc, yc = torch.broadcast_tensors(xc, yc)
    pts = torch.stack([xc, yc, torch.ones_like(xc)], dim=-1)  # K x H x W x 3
    mapped = torch.einsum("kij,khwj->khwi", hmat, pts)
    px = mapped[..., 0] / mapped[..., 2]
    py = mapped[..., 1] / mapped[..., 2]
    in_h, in_w = int(image.shape[1]), int(image.shape[2])
    grid = torch.stack([(2 * px + 1) / in_w - 1, (2 * py + 1) / in_h - 1], dim=-1).float()
    src = image.unsqueeze(0).float()
    if bgr:
        src = src.flip(1)
    # every line's grid stacked into one tall grid: one sampling pass over the page, no
    # K-fold copy of the page
    tall = grid.reshape(1, k * height, w_max, 2)
    out = F.grid_sample(src, tall, mode=mode, padding_mode="border", align_corners=False)
    out = out.reshape(3, k, height, w_max).permute(1, 0, 2, 3)
    out = (out.clamp(0, 255) / 255.0 - 0.5) / 0.5
    return [out[i, :, :, : int(widths[i])] for i in range(k)]


def rec_batch(
    crops: Sequence[torch.Tensor], width: int | None = None, dtype: Any = None, rows: int = 0
) -> torch.Tensor:
    """Right-pad normalised crops (``3xHxw``) with zeros into one ``Nx3xHxW`` batch; ``rows``
    > N adds blank rows below (rec.batch_rows)."""
    torch = _torch()
    if not crops:
        raise ValueError("rec_batch needs at least one crop")
    w = max(width or 0, max(int(c.shape[-1]) for c in crops))
    h = int(crops[0].shape[1])
    n = max(len(crops), rows)
    batch = torch.zeros((n, 3, h, w), dtype=dtype or torch.float32, device=crops[0].device)
    for i, c in enumerate(crops):
        batch[i, :, :, : c.shape[-1]] = c
    return batch


# --------------------------------------------------------------------------- CTC


def ctc_best(probs: torch.Tensor) -> npt.NDArray[np.float32]:
    """Per time step the argmax class (as a float), its probability and the last class's (the
    space): ``NxTxC`` in, ``NxTx3`` out on the host, the layout of the CPU engine's compact
    rec head (:func:`~ocrstream.processors.ocr.backends.torch_backend.ctc_best`, on the
    device)."""
    from ocrstream.processors.ocr.backends.torch_backend import ctc_best as on_device

    return on_device(probs).cpu().numpy()


# --------------------------------------------------------------------------- pipeline


class DevicePipeline:
    """det → DB → crops → rec → CTC with the pages on the GPU (sessions need ``run_torch``).

    The same stages, sizes and batching rules as :class:`~ocrstream.processors.ocr.engine.
    OcrEngine` (det batches of one shape, reading order, rec batches of one width bucket drawn
    from every page, greedy CTC, lines under ``min_confidence`` dropped); only the DB contour
    search runs on the host, on a uint8 copy of the probability map. Orientation, deskew and
    the line classifier are not done here: the engine's CPU path has them.

    ``timings_ms`` per page are shares of each batch's time, measured after a device
    synchronise, so they are exact but cost a little overlap.
    """

    def __init__(
        self,
        det: Any,
        rec: Any,
        charset: Sequence[str],
        *,
        det_params: Any,
        rec_params: Any,
        det_batch: int,
        rec_batch: int,
        min_confidence: float = 0.5,
        device: str = "cuda",
        info: EngineInfo | None = None,
    ) -> None:
        for session in (det, rec):
            if not hasattr(session, "run_torch"):
                raise FatalError(
                    f"{type(session).__name__} has no device path (run_torch)", code="bad_config"
                )
        self.det, self.rec, self.charset = det, rec, tuple(charset)
        self.det_params, self.rec_params = det_params, rec_params
        self.det_batch, self.rec_batch = max(1, det_batch), max(1, rec_batch)
        self.min_confidence = min_confidence
        self.device = getattr(det, "device", device)
        self._info = info or EngineInfo("device-pipeline", "", "", str(self.device))
        # DB post-processing of a det batch's pages in parallel (OpenCV releases the GIL)
        self._pool = ThreadPoolExecutor(
            max_workers=min(8, os.cpu_count() or 1), thread_name_prefix="db-post"
        )

    @classmethod
    def from_engine(cls, engine: Any) -> DevicePipeline:
        """Reuse an :class:`OcrEngine`'s loaded sessions, charset and parameters. Every line
        is sampled to rec's height here (:func:`crop_lines`): the engine's lines read at their
        own height and padded (``RecParams.native_min_height``, v6 small) are not, so on such
        pages this pipeline reads a few more columns than the engine."""
        settings = engine.settings
        return cls(
            engine._det,
            engine._rec,
            engine._charset,
            det_params=engine.det_params,
            rec_params=dataclasses.replace(engine.rec_params, native_min_height=0),
            det_batch=settings.det_batch_size,
            rec_batch=settings.rec_batch_lines,
            min_confidence=settings.min_confidence,
            device=settings.device,
            info=engine.info,
        )

    @property
    def info(self) -> EngineInfo:
        return self._info

    def _sync(self) -> None:
        torch = _torch()
        if str(self.device).startswith("cuda"):
            torch.cuda.synchronize(self.device)

    def recognize(self, pages: Sequence[bytes | torch.Tensor]) -> list[Any]:
        """Encoded images (or uint8 RGB ``3xHxW`` tensors) in, one ``PageOCR`` per page out."""
        import time

        from ocrstream.processors.ocr import det as det_mod
        from ocrstream.processors.ocr import rec as rec_mod
        from ocrstream.processors.ocr.order import reading_order
        from ocrstream.processors.ocr.types import Line, PageOCR

        n = len(pages)
        ms = [{"decode": 0.0, "det": 0.0, "rec": 0.0} for _ in range(n)]
        start = time.perf_counter()
        encoded = [i for i, p in enumerate(pages) if isinstance(p, bytes | bytearray)]
        images: list[Any] = list(pages)
        if encoded:
            for i, img in zip(
                encoded, decode_images([bytes(pages[i]) for i in encoded], self.device), strict=True
            ):
                images[i] = img
        self._sync()
        for m in ms:
            m["decode"] = (time.perf_counter() - start) * 1000 / max(1, n)

        p = self.det_params
        sizes = [(int(im.shape[1]), int(im.shape[2])) for im in images]
        boxes: list[list[Any]] = [[] for _ in range(n)]
        shapes = [det_mod.det_shape(h, w, p) for h, w in sizes]
        padded = [det_mod.padded_shape(shape, p) for shape in shapes]
        for shape, idx in det_mod.plan_batches(padded, self.det_batch):
            t = time.perf_counter()
            own = [shapes[i] for i in idx] if p.ladder else None
            x = det_tensor([images[i] for i in idx], shape, p.mean, p.std, shapes=own)
            maps = prob_map_to_host(self.det.run_torch(x))

            def post(j: int, i: int, maps: Any = maps) -> list[Any]:
                h, w = sizes[i]
                found = det_mod.boxes_from_map(maps[j], h, w, p, shapes[i])
                return [found[k] for k in reading_order([b.quad for b in found])]

            for i, found in zip(idx, self._pool.map(post, range(len(idx)), idx), strict=True):
                boxes[i] = found
            share = (time.perf_counter() - t) * 1000 / len(idx)
            for i in idx:
                ms[i]["det"] += share

        r = self.rec_params
        crops: list[Any] = []
        owners: list[tuple[int, int]] = []
        t = time.perf_counter()
        for i in range(n):
            if boxes[i]:
                h, w = sizes[i]
                grown, tall = grow_for_rec([b.quad for b in boxes[i]], r.crop_margin, w, h)
                crops.extend(
                    crop_lines(images[i], np.stack(grown), r.height, r.max_width, heights=tall)
                )
                owners.extend((i, k) for k in range(len(boxes[i])))
        texts: list[list[tuple[str, float]]] = [[("", 0.0)] * len(b) for b in boxes]
        crop_share = (time.perf_counter() - t) * 1000 / max(1, len(crops))
        widths = [rec_mod.bucket_width(int(c.shape[-1]), r) for c in crops]
        for idx in rec_mod.plan_batches(widths, self.rec_batch, r):
            t = time.perf_counter()
            rows = rec_mod.batch_rows(len(idx), self.rec_batch, r)
            batch = rec_batch([crops[k] for k in idx], widths[idx[0]], rows=rows)
            probs = self.rec.run_torch(batch)[: len(idx)]
            decoded = rec_mod.decode(ctc_best(probs), self.charset, r)
            share = (time.perf_counter() - t) * 1000 / len(idx) + crop_share
            for j, k in enumerate(idx):
                pi, bi = owners[k]
                texts[pi][bi] = decoded[j]
                ms[pi]["rec"] += share

        out = []
        for i in range(n):
            lines = []
            for box, (text, conf) in zip(boxes[i], texts[i], strict=True):
                text = text.strip()
                if text and conf >= self.min_confidence:
                    poly = tuple((float(x), float(y)) for x, y in box.quad.tolist())
                    lines.append(Line(text=text, confidence=conf, polygon=poly))  # type: ignore[arg-type]
            ms[i]["total"] = ms[i]["decode"] + ms[i]["det"] + ms[i]["rec"]
            out.append(
                PageOCR(
                    width=sizes[i][1],
                    height=sizes[i][0],
                    lines=tuple(lines),
                    status="ok" if lines else "empty",
                    timings_ms={k: round(v, 2) for k, v in ms[i].items()},
                )
            )
        return out
