"""The development set of ``ocrstream bench structure``: A4 pages written as HTML, rendered by
PyMuPDF's Story, rasterised and degraded like scans, with their ground truth.

Each page comes from one seed, deterministically: a template (:data:`TEMPLATES`) decides the
page's bands — a title, one or two columns of headings and paragraphs, ruled and borderless
tables whose header cells span rows and columns, figures (drawn shapes, no text) with
captions — and the running header and footer with a page number. Paragraphs are added while
they fit, so nothing written is cut off the page. The same elements give the HTML and the
ground truth, written beside the page as ``page-SEED.json``:

- ``title``, ``headings``: the title and the section headings;
- ``body``: every text element in reading order (title, headings, paragraphs, captions; not
  tables, not figures), one string each;
- ``tables``: each table's HTML (``<table><tr><td rowspan=…>``, as written);
- ``header``, ``footer``: the strings of the running header and footer (page number included).

Rasterising: 150, 200 or 300 DPI, a skew of up to ±0.8°, a Gaussian blur, noise, and JPEG at
quality 60–85 — ``page-SEED.jpg``. The born-digital PDF is kept too (``page-SEED.pdf``), for
the peers and the text-layer path that read PDFs.

Splits: ``dev`` is seeds 0, 1, 2 …; ``heldout`` is seeds from 100000, never looked at while the
structure code is tuned; ``final`` is seeds from 200000, kept for a last report once
``heldout`` has been seen in aggregate. Pages are made on demand into
``~/.cache/ocrstream/structbench/vN`` (N: :data:`VERSION`, raised whenever a page would come
out differently) and reused.
"""

from __future__ import annotations

import html
import io
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSION = 1
SPLITS = {"dev": 0, "heldout": 100_000, "final": 200_000}
A4 = (595.28, 841.89)
MARGIN = 56.0
HEADER_BAND = (22.0, 44.0)  # points from the top where the running header sits
FOOTER_BAND = (804.0, 826.0)
BODY_TOP, BODY_BOTTOM = 70.0, 780.0
GUTTER = 22.0
TEMPLATES = ("report", "article", "mixed", "datasheet")
CSS = """
body { font-family: %(font)s; font-size: %(size)spt; }
h1 { font-size: %(h1)spt; font-weight: bold; margin: 0 0 10pt 0; }
h2 { font-size: %(h2)spt; font-weight: bold; margin: 10pt 0 5pt 0; }
p { margin: 0 0 6pt 0; line-height: 1.25; }
p.caption { font-style: italic; font-size: %(small)spt; margin: 3pt 0 10pt 0; }
table { margin: 6pt 0 10pt 0; font-size: %(small)spt; }
table.ruled { border-collapse: collapse; }
table.ruled td, table.ruled th { border: 1px solid black; padding: 2pt 5pt; }
table.plain td, table.plain th { padding: 2pt 9pt; }
th { font-weight: bold; }
"""


@dataclass(frozen=True, slots=True)
class PageTruth:
    """What a structure parser should find on the page (see the module docstring)."""

    title: str
    headings: tuple[str, ...]
    body: tuple[str, ...]
    tables: tuple[str, ...]
    header: tuple[str, ...]
    footer: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "headings": list(self.headings),
            "body": list(self.body),
            "tables": list(self.tables),
            "header": list(self.header),
            "footer": list(self.footer),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PageTruth:
        return cls(
            title=str(data["title"]),
            headings=tuple(data["headings"]),
            body=tuple(data["body"]),
            tables=tuple(data["tables"]),
            header=tuple(data["header"]),
            footer=tuple(data["footer"]),
        )


@dataclass(frozen=True, slots=True)
class StructPage:
    """One page of the set: its scan, its born-digital PDF and its ground truth."""

    name: str
    split: str
    seed: int
    template: str
    dpi: int
    image: Path
    pdf: Path
    truth: PageTruth


# --------------------------------------------------------------------------- text

_WORD_TEXT = (
    "the of and to in for on with as by from at this that which these its their our all new "
    "annual quarterly report review results revenue growth margin costs operating capital "
    "investment market share customers orders delivery supply chain production plant capacity "
    "energy water network service quality safety staff training programme project phase "
    "budget forecast estimate target region branch office board committee policy risk audit "
    "compliance contract partner supplier product range price volume demand trend period "
    "increase decrease improved stable lower higher strong steady modest significant overall "
    "following described shown table figure section below above during compared previous"
)
_WORDS = tuple(_WORD_TEXT.split())
_TOPICS = (
    "Introduction", "Summary of Results", "Market Overview", "Operating Costs", "Outlook",
    "Methodology", "Regional Performance", "Capital Expenditure", "Risk Management",
    "Customer Service", "Supply Chain", "Staff and Training", "Energy Use", "Conclusions",
    "Product Range", "Quality Control", "Financial Position", "Governance",
)  # fmt: skip
_TITLES = (
    "Annual Operations Review", "Quarterly Business Report", "Regional Sales Survey",
    "Energy Efficiency Study", "Supply Chain Assessment", "Board Report on Capital Projects",
    "Service Quality Audit", "Market Research Summary", "Plant Capacity Planning",
)  # fmt: skip
_ORGS = ("Northwind Trading", "Contoso Energy", "Fabrikam Logistics", "Tailspin Foods",
         "Litware Systems", "Adventure Works")  # fmt: skip
_REGIONS = ("North", "South", "East", "West", "Central", "Coastal", "Highlands", "Metro")
_METRICS = ("Revenue", "Orders", "Margin", "Costs", "Staff", "Output", "Returns", "Visits")
_FONTS = ("sans-serif", "serif")


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(7, 16))]
    for i in range(1, len(words)):
        if rng.random() < 0.07:
            words[i] = str(rng.randint(2, 980))
    return words[0].capitalize() + " " + " ".join(words[1:]) + "."


def _paragraph(rng: random.Random) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(2, 5)))


def _number(rng: random.Random) -> str:
    return f"{rng.randint(1, 999)}.{rng.randint(0, 9)}"


@dataclass(frozen=True, slots=True)
class _Table:
    """A grid with a two-row header (a group cell spanning columns, a first cell spanning both
    header rows) and, sometimes, a row label spanning two body rows."""

    ruled: bool
    rows: tuple[tuple[tuple[str, int, int], ...], ...]  # (text, rowspan, colspan) per cell

    def html(self, styled: bool) -> str:
        cls = f' class="{"ruled" if self.ruled else "plain"}"' if styled else ""
        out = [f"<table{cls}>"]
        for r, row in enumerate(self.rows):
            out.append("<tr>")
            for text, rowspan, colspan in row:
                tag = "th" if styled and r < 2 else "td"
                attrs = (f' rowspan="{rowspan}"' if rowspan > 1 else "") + (
                    f' colspan="{colspan}"' if colspan > 1 else ""
                )
                out.append(f"<{tag}{attrs}>{html.escape(text)}</{tag}>")
            out.append("</tr>")
        out.append("</table>")
        return "".join(out)


def _table(rng: random.Random, ruled: bool) -> _Table:
    groups = rng.randint(1, 2)
    per_group = 2 if groups == 2 else rng.randint(2, 3)
    years = sorted(rng.sample(range(2019, 2027), per_group))
    label = rng.choice(("Region", "Branch", "Segment", "Unit"))
    head1: list[tuple[str, int, int]] = [(label, 2, 1)]
    head2: list[tuple[str, int, int]] = []
    for metric in rng.sample(_METRICS, groups):
        head1.append((metric, 1, per_group))
        head2 += [(str(y), 1, 1) for y in years]
    cols = groups * per_group
    rows = [tuple(head1), tuple(head2)]
    n_rows = rng.randint(3, 6)
    names = rng.sample(_REGIONS, n_rows)
    span_at = rng.randrange(n_rows - 1) if rng.random() < 0.5 else -1
    r = 0
    while r < n_rows:
        if r == span_at:
            rows.append(((names[r], 2, 1), *((_number(rng), 1, 1) for _ in range(cols))))
            rows.append(tuple((_number(rng), 1, 1) for _ in range(cols)))
            r += 2
            continue
        rows.append(((names[r], 1, 1), *((_number(rng), 1, 1) for _ in range(cols))))
        r += 1
    return _Table(ruled, tuple(rows))


def _figure_png(rng: random.Random, width: int, height: int) -> bytes:
    """A chart without text: axes, bars or a polyline, a frame."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, width - 1, height - 1), outline=(90, 90, 90), width=2)
    x0, y0, x1, y1 = 30, 15, width - 15, height - 25
    draw.line((x0, y1, x1, y1), fill="black", width=2)
    draw.line((x0, y0, x0, y1), fill="black", width=2)
    n = rng.randint(5, 9)
    step = (x1 - x0) / n
    if rng.random() < 0.5:
        for i in range(n):
            h = rng.uniform(0.15, 0.95) * (y1 - y0)
            shade = rng.choice(((70, 110, 170), (160, 90, 60), (90, 140, 90)))
            draw.rectangle((x0 + i * step + 6, y1 - h, x0 + (i + 1) * step - 6, y1), fill=shade)
    else:
        pts = [(x0 + (i + 0.5) * step, y1 - rng.uniform(0.1, 0.9) * (y1 - y0)) for i in range(n)]
        draw.line(pts, fill=(40, 60, 160), width=3)
        for x, y in pts:
            draw.ellipse((x - 4, y - 4, x + 4, y + 4), fill=(40, 60, 160))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


# --------------------------------------------------------------------------- elements

Element = tuple[str, Any]  # ("title"|"h"|"p"|"caption", str), ("table", _Table), ("figure", …)


def _html(elements: Sequence[Element], column_width: float) -> str:
    out = []
    for kind, value in elements:
        if kind == "title":
            out.append(f"<h1>{html.escape(value)}</h1>")
        elif kind == "h":
            out.append(f"<h2>{html.escape(value)}</h2>")
        elif kind == "p":
            out.append(f"<p>{html.escape(value)}</p>")
        elif kind == "table":
            out.append(value.html(styled=True))
        elif kind == "figure":
            name, caption, width = value
            out.append(f'<p><img src="{name}" width="{min(width, column_width):.0f}"/></p>')
            out.append(f'<p class="caption">{html.escape(caption)}</p>')
    return "".join(out)


@dataclass(slots=True)
class _Band:
    columns: int
    elements: list[Element]
    fill: bool = False  # add paragraphs and headings while they fit


class _Composer:
    """Places the bands of a page top to bottom with Stories, trying each addition first."""

    def __init__(self, rng: random.Random, css: str) -> None:
        from ocrstream.processors.mupdf import pymupdf as fitz

        self.fitz = fitz
        self.rng = rng
        self.css = css
        self.archive = fitz.Archive()
        self.figures = 0

    def figure(self, width_pt: float) -> Element:
        self.figures += 1
        name = f"fig{self.figures}.png"
        w = int(width_pt * 2)
        self.archive.add((_figure_png(self.rng, w, int(w * self.rng.uniform(0.45, 0.65))), name))
        caption = f"Figure {self.figures}: " + _sentence(self.rng).rstrip(".")
        return ("figure", (name, caption, width_pt))

    def _rects(self, columns: int, top: float) -> list[Any]:
        fitz = self.fitz
        x0, x1 = MARGIN, A4[0] - MARGIN
        if columns == 1:
            return [fitz.Rect(x0, top, x1, BODY_BOTTOM)]
        mid = (x0 + x1) / 2
        return [
            fitz.Rect(x0, top, mid - GUTTER / 2, BODY_BOTTOM),
            fitz.Rect(mid + GUTTER / 2, top, x1, BODY_BOTTOM),
        ]

    def _story(self, elements: Sequence[Element], columns: int) -> Any:
        width = (A4[0] - 2 * MARGIN - (GUTTER if columns == 2 else 0)) / columns
        return self.fitz.Story(html=_html(elements, width), user_css=self.css, archive=self.archive)

    def _fits(self, elements: Sequence[Element], columns: int, top: float) -> float | None:
        """The bottom of the band if all of ``elements`` fit below ``top``, else None."""
        story = self._story(elements, columns)
        bottom = top
        for rect in self._rects(columns, top):
            more, filled = story.place(rect)
            story.draw(None)  # moves the story on: the next rect takes what did not fit
            bottom = max(bottom, filled[3])
            if not more:
                return bottom
        return None

    def compose(self, bands: list[_Band], more_text: Any) -> tuple[list[_Band], list[float]]:
        """The bands with their fill added, and the top of each."""
        tops = []
        top = BODY_TOP
        for band in bands:
            if band.fill:
                for _ in range(60):
                    trial = [*band.elements, more_text()]
                    if self._fits(trial, band.columns, top) is None:
                        break
                    band.elements = trial
                while band.elements and band.elements[-1][0] == "h":
                    band.elements.pop()  # no heading left hanging at the foot of the page
            while band.elements and self._fits(band.elements, band.columns, top) is None:
                band.elements.pop()
            tops.append(top)
            bottom = self._fits(band.elements, band.columns, top) if band.elements else top
            top = (bottom or top) + 8.0
        return bands, tops

    def draw(self, dev: Any, bands: Sequence[_Band], tops: Sequence[float]) -> None:
        for band, top in zip(bands, tops, strict=True):
            if not band.elements:
                continue
            story = self._story(band.elements, band.columns)
            for rect in self._rects(band.columns, top):
                more, _ = story.place(rect)
                story.draw(dev)
                if not more:
                    break

    def line(self, dev: Any, left: str, right: str, band: tuple[float, float]) -> None:
        fitz = self.fitz
        x0, x1 = MARGIN, A4[0] - MARGIN
        for text, align in ((left, "left"), (right, "right")):
            if not text:
                continue
            css = self.css + f"p {{ text-align: {align}; margin: 0; }}"
            story = fitz.Story(html=f"<p>{html.escape(text)}</p>", user_css=css)
            story.place(fitz.Rect(x0, band[0], x1, band[1] + 10))
            story.draw(dev)


def _more_text(rng: random.Random) -> Any:
    def next_element() -> Element:
        if rng.random() < 0.22:
            return ("h", rng.choice(_TOPICS))
        return ("p", _paragraph(rng))

    return next_element


def _bands(template: str, rng: random.Random, composer: _Composer) -> list[_Band]:
    title = rng.choice(_TITLES) + f" {rng.randint(2019, 2026)}"
    heading = rng.choice(_TOPICS)
    full = A4[0] - 2 * MARGIN
    if template == "report":  # one column: title, text, a ruled table, more text
        return [
            _Band(1, [("title", title), ("p", _paragraph(rng)), ("h", heading),
                      ("table", _table(rng, ruled=True))]),
            _Band(1, [("p", _paragraph(rng))], fill=True),
        ]  # fmt: skip
    if template == "article":  # title across, then two columns with a figure in the first
        col = (full - GUTTER) / 2
        return [
            _Band(1, [("title", title), ("p", _paragraph(rng))]),
            _Band(2, [("h", heading), ("p", _paragraph(rng)), composer.figure(col * 0.9),
                      ("p", _paragraph(rng))], fill=True),
        ]  # fmt: skip
    if template == "mixed":  # a borderless table across, then two columns
        return [
            _Band(1, [("title", title), ("p", _paragraph(rng)),
                      ("table", _table(rng, ruled=False))]),
            _Band(2, [("h", heading), ("p", _paragraph(rng))], fill=True),
        ]  # fmt: skip
    # datasheet: one column with a figure, both kinds of table
    return [
        _Band(1, [("title", title), ("h", heading), ("table", _table(rng, ruled=False)),
                  composer.figure(full * 0.5), ("table", _table(rng, ruled=True))]),
        _Band(1, [("p", _paragraph(rng))], fill=True),
    ]  # fmt: skip


def _running(rng: random.Random, page_no: int) -> tuple[tuple[str, str], tuple[str, str]]:
    org = rng.choice(_ORGS)
    header = (org, rng.choice(("Internal", "Draft", "Final", f"Issue {rng.randint(1, 12)}")))
    number = rng.choice((f"Page {page_no}", str(page_no), f"{page_no} of {page_no + 9}"))
    footer_left = rng.choice((f"{org} · Confidential", "For internal use only", ""))
    return header, (footer_left, number)


def render_page(seed: int) -> tuple[bytes, bytes, dict[str, Any]]:
    """One page from ``seed``: (born-digital PDF, degraded JPEG scan, ground-truth dict)."""
    from ocrstream.processors.mupdf import pymupdf as fitz

    rng = random.Random(seed)
    template = TEMPLATES[seed % len(TEMPLATES)]
    size = rng.choice((9.5, 10.0, 10.5))
    css = CSS % {
        "font": rng.choice(_FONTS),
        "size": size,
        "h1": size + 9,
        "h2": size + 3.5,
        "small": size - 0.5,
    }
    composer = _Composer(rng, css)
    bands, tops = composer.compose(_bands(template, rng, composer), _more_text(rng))
    page_no = rng.randint(2, 240)
    (h_left, h_right), (f_left, f_right) = _running(rng, page_no)
    buf = io.BytesIO()
    writer = fitz.DocumentWriter(buf)
    dev = writer.begin_page(fitz.Rect(0, 0, *A4))
    composer.line(dev, h_left, h_right, HEADER_BAND)
    composer.draw(dev, bands, tops)
    composer.line(dev, f_left, f_right, FOOTER_BAND)
    writer.end_page()
    writer.close()
    pdf = buf.getvalue()
    dpi = rng.choice((150, 200, 300))
    scan = degrade(pdf, dpi, rng)
    truth = _truth(bands, (h_left, h_right), (f_left, f_right))
    meta = {"seed": seed, "template": template, "dpi": dpi, **truth.to_dict()}
    return pdf, scan, meta


def _truth(bands: Sequence[_Band], header: tuple[str, str], footer: tuple[str, str]) -> PageTruth:
    title, headings, body, tables = "", [], [], []
    for band in bands:
        for kind, value in band.elements:
            if kind == "title":
                title = value
                body.append(value)
            elif kind == "h":
                headings.append(value)
                body.append(value)
            elif kind == "p":
                body.append(value)
            elif kind == "figure":
                body.append(value[1])
            elif kind == "table":
                tables.append(value.html(styled=False))
    return PageTruth(
        title=title,
        headings=tuple(headings),
        body=tuple(body),
        tables=tuple(tables),
        header=tuple(t for t in header if t),
        footer=tuple(t for t in footer if t),
    )


def degrade(pdf: bytes, dpi: int, rng: random.Random) -> bytes:
    """The page rasterised at ``dpi`` and made to look scanned: skew, blur, noise, JPEG."""
    import cv2
    import numpy as np

    from ocrstream.processors.mupdf import pymupdf as fitz

    with fitz.open("pdf", pdf) as doc:
        pix = doc[0].get_pixmap(dpi=dpi, colorspace=fitz.csGRAY)
        img: Any = np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width).copy()
    h, w = img.shape
    angle = rng.uniform(-0.8, 0.8)
    matrix = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.0)
    img = cv2.warpAffine(img, matrix, (w, h), flags=cv2.INTER_LINEAR, borderValue=255)
    sigma = rng.uniform(0.4, 1.0) * dpi / 200
    img = cv2.GaussianBlur(img, (0, 0), sigma)
    noise = np.random.default_rng(rng.randrange(2**32)).normal(0, rng.uniform(3, 9), img.shape)
    img = np.clip(img.astype(np.float32) * rng.uniform(0.9, 1.0) + 12 + noise, 0, 255)
    ok, jpg = cv2.imencode(".jpg", img.astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY,
                                                         rng.randint(60, 85)])  # fmt: skip
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return bytes(jpg.tobytes())


# --------------------------------------------------------------------------- the set


def default_dir() -> Path:
    return Path.home() / ".cache" / "ocrstream" / "structbench"


def pages(split: str, count: int, root: Path | None = None) -> list[StructPage]:
    """The first ``count`` pages of ``split``, made into ``root`` where not there yet."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {sorted(SPLITS)}")
    folder = (root or default_dir()) / f"v{VERSION}" / split
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for seed in range(SPLITS[split], SPLITS[split] + count):
        stem = folder / f"page-{seed:06d}"
        truth_path, image, pdf = (stem.with_suffix(s) for s in (".json", ".jpg", ".pdf"))
        if not (truth_path.is_file() and image.is_file() and pdf.is_file()):
            pdf_bytes, scan, meta = render_page(seed)
            pdf.write_bytes(pdf_bytes)
            image.write_bytes(scan)
            truth_path.write_text(json.dumps(meta, indent=1, ensure_ascii=False), "utf-8")
        meta = json.loads(truth_path.read_text("utf-8"))
        out.append(
            StructPage(
                name=stem.name,
                split=split,
                seed=seed,
                template=str(meta["template"]),
                dpi=int(meta["dpi"]),
                image=image,
                pdf=pdf,
                truth=PageTruth.from_dict(meta),
            )
        )
    return out
