"""``ocrstream bench structure``: document structure (parse mode ``layout``) against its peers,
on the development set of :mod:`ocrstream.bench.structset`, scored by
:mod:`ocrstream.bench.structmetrics`.

Every mode runs in its own fresh child process (``spawn``), one page at a time, after one
page of warm-up that is not timed; pages/s is pages over the wall time of the timed pages, CPU
time is the child's (all its threads) over those pages, peak RSS is the child's VmHWM.

- **ocrstream-text**: ``OcrEngine.recognize`` on the scan; the body is its lines in reading
  order (``ocrstream ocr --format text``): no headings, no tables, headers left in.
- **ocrstream-layout**: the same with ``LayoutPage`` (``ocrstream ocr --mode layout``): blocks.
- **ocrstream-pdf**: the born-digital PDF through the splitter's text layer and
  ``text_layer_blocks`` (``ocrstream ocr --mode layout --skip-text``): no OCR, no model.
- **rapidai** (when rapidocr, rapid-layout and rapid-table import): the RapidAI stack as its
  READMEs show it, on the scan: ``RapidLayout()`` (PP-PicoDet CDLA, the wheel's model),
  ``RapidOCR()`` on the page (its bundled models), and ``RapidTable()`` (the wheel's SLANet
  model) on each table region's crop with ``RapidOCR`` run on that crop. Glue of ours, as a
  user would write it: each line goes to the region holding its centre; the body is the
  regions other than header, footer, table and figure (and the lines in no region) sorted top
  to bottom, then left to right; ``title`` regions are the headings.
- **pymupdf4llm** (when it imports; AGPL, used here only as a peer): ``to_markdown`` of the
  born-digital PDF with ``header=False, footer=False``, read by
  :func:`~ocrstream.bench.structmetrics.parse_markdown`.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ocrstream.bench.engine import _collect, _peak_rss_kb, machine
from ocrstream.bench.structmetrics import PageParse, Scores
from ocrstream.bench.structset import StructPage
from ocrstream.streams.supervisor import terminate_with

MODES = ("ocrstream-text", "ocrstream-layout", "ocrstream-pdf", "rapidai", "pymupdf4llm")
INPUTS = {"ocrstream-pdf": "pdf", "pymupdf4llm": "pdf"}  # the others read the scan
NEEDS = {
    "rapidai": ("rapidocr", "rapid_layout", "rapid_table"),
    "pymupdf4llm": ("pymupdf4llm",),
}
_SET_APART = ("header", "footer", "table", "figure")


@dataclass(frozen=True, slots=True)
class StructConfig:
    backend: str = "auto"
    model: str = "ppocrv6-small"
    threads: int = 1
    warmup: int = 1


@dataclass(slots=True)
class ModeRun:
    """One mode's speed, memory and scores on one split."""

    mode: str
    setup: str
    pages: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_rss_mb: float = 0.0
    scores: dict[str, Any] = field(default_factory=dict)
    per_page: list[dict[str, Any]] = field(default_factory=list)  # the same scores, per page
    error: str | None = None

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cpu_s_per_page(self) -> float:
        return self.cpu_s / self.pages if self.pages else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["input"] = INPUTS.get(self.mode, "scan")
        out["pages_per_s"] = round(self.pages_per_s, 4)
        out["cpu_s_per_page"] = round(self.cpu_s_per_page, 3)
        return out


def available(mode: str) -> str | None:
    """None when ``mode`` can run here, else why not."""
    missing = [m for m in NEEDS.get(mode, ()) if importlib.util.find_spec(m) is None]
    return f"not installed: {', '.join(missing)}" if missing else None


# --------------------------------------------------------------------------- runners

Runner = Callable[[StructPage], PageParse]


def blocks_parse(blocks: Sequence[Any]) -> PageParse:
    """Blocks (ocrstream's, in reading order) as a :class:`PageParse`."""
    body = tuple(b.text for b in blocks if b.type not in _SET_APART)
    headings = tuple(b.text for b in blocks if b.type in ("title", "heading"))
    tables = tuple(b.to_dict()["html"] for b in blocks if b.type == "table")
    return PageParse(body=body, headings=headings, tables=tables)


def _ocrstream_runner(cfg: StructConfig, layout: bool) -> Runner:
    from ocrstream.processors.ocr.engine import OcrEngine
    from ocrstream.processors.ocr.order import text_rows
    from ocrstream.processors.ocr.types import LayoutPage
    from ocrstream.settings import OcrSettings

    engine = OcrEngine(OcrSettings(backend=cfg.backend, model=cfg.model, threads=cfg.threads))

    def run(page: StructPage) -> PageParse:
        data = page.image.read_bytes()
        result = engine.recognize([LayoutPage(data) if layout else data])[0]
        if result.status == "failed":
            raise RuntimeError(f"{page.name}: {result.error_code}: {result.error_message}")
        if result.blocks is not None:
            return blocks_parse(result.blocks)
        lines = result.lines
        return PageParse(body=tuple(text_rows([ln.polygon for ln in lines],
                                              [ln.text for ln in lines])))  # fmt: skip

    return run


def _pdf_runner(cfg: StructConfig) -> Runner:
    from ocrstream.processors.layout.structure import text_layer_blocks
    from ocrstream.processors.split import iter_pages
    from ocrstream.settings import LimitsSettings

    limits = LimitsSettings()

    def run(page: StructPage) -> PageParse:
        for split in iter_pages(page.pdf, None, limits, 150, use_text_layer=True):
            if split.text_lines is None:
                raise RuntimeError(f"{page.name}: no usable text layer")
            return blocks_parse(text_layer_blocks(split.text_lines, split.width, split.height))
        raise RuntimeError(f"{page.name}: no page")

    return run


def _rapidai_runner(cfg: StructConfig) -> Runner:
    import cv2
    from rapid_layout import RapidLayout
    from rapid_table import RapidTable
    from rapidocr import RapidOCR

    ocr = RapidOCR(params={"Global.log_level": "error"})
    layout = RapidLayout()
    table = RapidTable()

    def lines_of(image: Any) -> list[tuple[list[list[float]], str, float]]:
        r: Any = ocr(image)
        if r.boxes is None or r.txts is None:
            return []
        return [
            (box.tolist(), str(text), float(score))
            for box, text, score in zip(r.boxes, r.txts, r.scores, strict=True)
        ]

    def run(page: StructPage) -> PageParse:
        image = cv2.imread(str(page.image))
        found: Any = layout(image)
        regions = [
            (tuple(float(v) for v in box), str(label))
            for box, label in zip(found.boxes or [], found.class_names or [], strict=True)
        ]
        lines = lines_of(image)
        return rapidai_parse(regions, lines, lambda box: _table_html(image, box))

    def _table_html(image: Any, box: tuple[float, ...]) -> str:
        x0, y0, x1, y1 = (round(v) for v in box)
        crop = image[max(0, y0) : y1, max(0, x0) : x1]
        crop_lines = lines_of(crop)
        if not crop_lines:
            return "<table></table>"
        html, *_ = table(crop, [list(line) for line in crop_lines])
        return str(html)

    return run


def rapidai_parse(
    regions: Sequence[tuple[tuple[float, ...], str]],
    lines: Sequence[tuple[list[list[float]], str, float]],
    table_html: Callable[[tuple[float, ...]], str],
) -> PageParse:
    """The RapidAI stack's layout regions and OCR lines as a :class:`PageParse` (the glue a
    user writes; see the module docstring)."""
    members: dict[int, list[tuple[float, float, str]]] = {i: [] for i in range(len(regions))}
    units: list[tuple[float, float, str]] = []
    for points, text, _ in lines:
        cx = sum(p[0] for p in points) / len(points)
        cy = sum(p[1] for p in points) / len(points)
        top, left = min(p[1] for p in points), min(p[0] for p in points)
        holders = [
            i for i, (r, _) in enumerate(regions) if r[0] <= cx <= r[2] and r[1] <= cy <= r[3]
        ]
        if holders:
            best = min(holders, key=lambda i: (regions[i][0][2] - regions[i][0][0])
                       * (regions[i][0][3] - regions[i][0][1]))  # fmt: skip
            members[best].append((top, left, text))
        else:
            units.append((top, left, text))
    headings, tables = [], []
    for i, (box, label) in enumerate(regions):
        if label == "table":
            tables.append(table_html(box))
        if label in ("header", "footer", "table", "figure") or not members[i]:
            continue
        text = " ".join(t for _, _, t in sorted(members[i]))
        units.append((box[1], box[0], text))
        if label == "title":
            headings.append(text)
    body = tuple(text for _, _, text in sorted(units))
    return PageParse(body=body, headings=tuple(headings), tables=tuple(tables))


def _pymupdf4llm_runner(cfg: StructConfig) -> Runner:
    import pymupdf4llm

    from ocrstream.processors.mupdf import with_layout

    with_layout()  # pymupdf4llm uses PyMuPDF's layout add-on where installed

    from ocrstream.bench.structmetrics import parse_markdown

    def run(page: StructPage) -> PageParse:
        markdown = pymupdf4llm.to_markdown(str(page.pdf), header=False, footer=False,
                                           use_ocr=False, show_progress=False)  # fmt: skip
        return parse_markdown(str(markdown))

    return run


def _runner(mode: str, cfg: StructConfig) -> Runner:
    if mode == "ocrstream-text":
        return _ocrstream_runner(cfg, layout=False)
    if mode == "ocrstream-layout":
        return _ocrstream_runner(cfg, layout=True)
    if mode == "ocrstream-pdf":
        return _pdf_runner(cfg)
    if mode == "rapidai":
        return _rapidai_runner(cfg)
    if mode == "pymupdf4llm":
        return _pymupdf4llm_runner(cfg)
    raise ValueError(f"unknown mode {mode!r}")


def _setup(mode: str, cfg: StructConfig) -> str:
    from importlib.metadata import PackageNotFoundError, version

    def v(dist: str) -> str:
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            return f"{dist} ?"

    if mode.startswith("ocrstream"):
        if mode == "ocrstream-pdf":
            return "text layer, no OCR"
        return f"{cfg.backend} {cfg.model} threads={cfg.threads} batch=1"
    if mode == "rapidai":
        return ", ".join(v(d) for d in ("rapid-layout", "rapidocr", "rapid-table"))
    return v("pymupdf4llm")


def _child(mode: str, cfg: StructConfig, pages: list[StructPage], queue: Any, parent: int) -> None:
    terminate_with(parent)  # a killed bench leaves no child running into the next one
    try:
        run = _runner(mode, cfg)
        for page in pages[: cfg.warmup]:
            run(page)
        cpu0, start = time.process_time(), time.perf_counter()
        parses = [run(page) for page in pages]
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    except Exception as e:  # noqa: BLE001 - reported to the parent, which prints it
        queue.put({"error": f"{type(e).__name__}: {e}"})
        return
    queue.put({"parses": parses, "wall": wall, "cpu": cpu, "rss_kb": _peak_rss_kb(False)})


def run_mode(mode: str, cfg: StructConfig, pages: Sequence[StructPage]) -> ModeRun:
    """One mode over ``pages`` in a fresh child process, scored."""
    result = ModeRun(mode=mode, setup=_setup(mode, cfg))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(mode, cfg, list(pages), queue, os.getpid()))
    child.start()
    (report,) = _collect([child], queue)
    child.join()
    if "error" in report:
        result.error = report["error"]
        return result
    scores = Scores()
    for page, parse in zip(pages, report["parses"], strict=True):
        scores.add(parse, page.truth)
        alone = Scores()
        alone.add(parse, page.truth)
        result.per_page.append({"page": page.name, "template": page.template, **alone.to_dict()})
    result.pages = len(pages)
    result.wall_s = float(report["wall"])
    result.cpu_s = float(report["cpu"])
    result.peak_rss_mb = round(report["rss_kb"] / 1024, 1)
    result.scores = scores.to_dict()
    return result


# --------------------------------------------------------------------------- report

COLUMNS = ("mode", "input", "pages", "pages/s", "CPU s/page", "RSS MB", "TEDS", "TEDS-S",
           "headings", "title", "body CER", "hdr/ftr out")  # fmt: skip


def _num(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _row(cells: Sequence[str], widths: Sequence[int]) -> str:
    """Cells padded to their widths: the first two to the left, the numbers to the right."""
    return " ".join(
        f"{c:<{w}}" if i < 2 else f"{c:>{w}}"
        for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )


def format_table(split: str, runs: Sequence[ModeRun]) -> str:
    widths = (17, 5, 5, 8, 10, 7, 6, 6, 8, 6, 8, 11)
    head = _row(COLUMNS, widths)
    rows = [f"== {split}", head, "-" * len(head)]
    for r in runs:
        if r.error:
            rows.append(f"{r.mode:<17} {INPUTS.get(r.mode, 'scan'):<5} error: {r.error}")
            continue
        s = r.scores
        cells = (r.mode, INPUTS.get(r.mode, "scan"), str(r.pages), _num(r.pages_per_s),
                 _num(r.cpu_s_per_page, 2), f"{r.peak_rss_mb:.0f}", _num(s["teds"]),
                 _num(s["teds_structure"]), _num(s["heading_recall"]), _num(s["title_rate"], 2),
                 _num(s["body_cer"]), _num(s["header_footer_out"], 2))  # fmt: skip
        rows.append(_row(cells, widths))
    by_mode = {r.mode: r for r in runs if not r.error and r.pages}
    text, layout = by_mode.get("ocrstream-text"), by_mode.get("ocrstream-layout")
    if text and layout and text.cpu_s_per_page > 0:
        extra = layout.cpu_s_per_page / text.cpu_s_per_page - 1
        rows.append(
            f"layout vs text CPU time per A4 page: {layout.cpu_s_per_page:.2f} s vs "
            f"{text.cpu_s_per_page:.2f} s = {extra:+.0%} (target: at most +40%)"
        )
    rows.append("setups: " + "; ".join(f"{r.mode}: {r.setup}" for r in runs))
    return "\n".join(rows)


def bench(
    splits: dict[str, list[StructPage]], cfg: StructConfig, modes: Sequence[str]
) -> dict[str, Any]:
    """Every available mode on every split; the JSON-ready report."""
    report: dict[str, Any] = {
        "machine": machine(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "config": asdict(cfg),
        "splits": {},
    }
    for split, pages in splits.items():
        runs, skipped = [], {}
        for mode in modes:
            why = available(mode)
            if why is not None:
                skipped[mode] = why
                print(f"  {mode}: skipped ({why})", file=sys.stderr, flush=True)
                continue
            run = run_mode(mode, cfg, pages)
            runs.append(run)
            print(
                f"  {split} {mode}: {run.pages} pages in {run.wall_s:.1f}s"
                + (f" ({run.error})" if run.error else ""),
                file=sys.stderr,
                flush=True,
            )
        report["splits"][split] = {
            "pages": len(pages),
            "runs": [r.to_dict() for r in runs],
            "skipped": skipped,
            "table": format_table(split, runs),
        }
    return report
