"""The quality measures of ``ocrstream bench structure``, from a parser's page to numbers.

Every parser's answer for a page is brought to one shape, :class:`PageParse`: its headings
(title included), its tables as HTML, and its body — the units it reads as running text, in
its reading order, without what it set apart as header, footer, table or figure. A parser that
has no notion of headings or tables says ``None`` there (``text`` mode), and those columns read
``-``. Against the page's :class:`~ocrstream.bench.structset.PageTruth`:

- **TEDS**, **TEDS-S**: :func:`~ocrstream.bench.teds.match_tables` per page (a missed or a
  false table scores 0), averaged over all slots of all pages.
- **heading recall**: the share of true headings (title included) found among the parser's
  headings (``fuzz.ratio`` ≥ 85 after normalising); **title**: the share of pages whose title
  is found so.
- **body CER**: the edit distance between the body joined in the parser's order and the true
  body joined in reading order, over the true body's characters (NFKC, whitespace collapsed,
  bullets and Markdown emphasis dropped), summed over pages. Reading two columns across, or
  leaving headers in, costs here.
- **header/footer out**: the share of pages where no string of the running header or footer
  (page number included) is in the body: a body unit that begins or ends with it (a number
  only when it is that unit's first or last word).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

from rapidfuzz import fuzz
from rapidfuzz.distance import Levenshtein

from ocrstream.bench.structset import PageTruth
from ocrstream.bench.teds import match_tables

HEADING_MATCH = 85.0
EDGE_MATCH = 90.0
_BULLET = re.compile(r"(?m)^\s*(?:[•▪◦●○■□‣⁃*-]|#{1,6})\s+")
_EMPHASIS = re.compile(r"[*_`]{1,3}")


@dataclass(frozen=True, slots=True)
class PageParse:
    """What one parser made of one page (see the module docstring)."""

    body: tuple[str, ...]
    headings: tuple[str, ...] | None = None
    tables: tuple[str, ...] | None = None


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    text = _EMPHASIS.sub("", _BULLET.sub("", text))
    return " ".join(text.split())


@dataclass(slots=True)
class Scores:
    """Sums over pages; the ratios are properties (None where the parser has no answer)."""

    pages: int = 0
    teds: list[float] = field(default_factory=list)
    teds_s: list[float] = field(default_factory=list)
    table_pages: int = 0  # pages where the parser can answer tables
    headings_found: int = 0
    headings_total: int = 0
    titles_found: int = 0
    heading_pages: int = 0
    edits: int = 0
    ref_chars: int = 0
    running_out: int = 0

    def add(self, parse: PageParse, truth: PageTruth) -> None:
        self.pages += 1
        if parse.tables is not None:
            self.table_pages += 1
            self.teds += match_tables(list(parse.tables), list(truth.tables))
            self.teds_s += match_tables(list(parse.tables), list(truth.tables), structure_only=True)
        if parse.headings is not None:
            self.heading_pages += 1
            found = [normalise(h) for h in parse.headings]
            wanted = [truth.title, *truth.headings] if truth.title else list(truth.headings)
            hits = [_found(normalise(h), found) for h in wanted]
            self.headings_found += sum(hits)
            self.headings_total += len(wanted)
            self.titles_found += bool(truth.title) and hits[0]
        pred = normalise(" ".join(parse.body))
        ref = normalise(" ".join(truth.body))
        self.edits += Levenshtein.distance(pred, ref)
        self.ref_chars += len(ref)
        self.running_out += not leaks(parse.body, (*truth.header, *truth.footer))

    @property
    def teds_mean(self) -> float | None:
        return sum(self.teds) / len(self.teds) if self.table_pages and self.teds else None

    @property
    def teds_s_mean(self) -> float | None:
        return sum(self.teds_s) / len(self.teds_s) if self.table_pages and self.teds_s else None

    @property
    def heading_recall(self) -> float | None:
        if not self.heading_pages or not self.headings_total:
            return None
        return self.headings_found / self.headings_total

    @property
    def title_rate(self) -> float | None:
        return self.titles_found / self.heading_pages if self.heading_pages else None

    @property
    def body_cer(self) -> float | None:
        return self.edits / self.ref_chars if self.ref_chars else None

    @property
    def running_out_rate(self) -> float | None:
        return self.running_out / self.pages if self.pages else None

    def to_dict(self) -> dict[str, float | int | None]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 4)

        return {
            "pages": self.pages,
            "tables_scored": len(self.teds) if self.table_pages else 0,
            "teds": r(self.teds_mean),
            "teds_structure": r(self.teds_s_mean),
            "heading_recall": r(self.heading_recall),
            "title_rate": r(self.title_rate),
            "body_cer": r(self.body_cer),
            "header_footer_out": r(self.running_out_rate),
        }


def _found(heading: str, found: Sequence[str]) -> bool:
    return any(fuzz.ratio(heading, f) >= HEADING_MATCH for f in found)


def leaks(body: Sequence[str], running: Sequence[str]) -> bool:
    """Is any string of the running header or footer in the body (see the module docstring)?"""
    units = [normalise(u) for u in body]
    for s in (normalise(t) for t in running):
        if not s:
            continue
        for u in units:
            if not u:
                continue
            if not any(ch.isalpha() for ch in s):
                words = [w.strip(".,;:()[]") for w in u.split()]
                if s in (words[0], words[-1]) or u == s:
                    return True
                continue
            edge = len(s) + 12
            if fuzz.partial_ratio(s, u[:edge]) >= EDGE_MATCH or (
                fuzz.partial_ratio(s, u[-edge:]) >= EDGE_MATCH
            ):
                return True
    return False


# --------------------------------------------------------------------------- Markdown


_PIPE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_HTML_TABLE = re.compile(r"<table\b.*?</table>", re.IGNORECASE | re.DOTALL)
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")


def parse_markdown(markdown: str) -> PageParse:
    """A Markdown page (pymupdf4llm's) as a :class:`PageParse`: ``#`` lines are headings,
    pipe tables (emphasis dropped from their cells) and HTML tables are tables, every other
    paragraph is a body unit."""
    import html as html_mod

    tables = [m.group(0) for m in _HTML_TABLE.finditer(markdown)]
    text = _HTML_TABLE.sub("\n\n", markdown)
    headings: list[str] = []
    body: list[str] = []
    para: list[str] = []
    rows: list[list[str]] = []

    def close_para() -> None:
        if para:
            body.append(" ".join(para))
            para.clear()

    def close_table() -> None:
        if rows:
            cells = "".join(
                "<tr>" + "".join(f"<td>{html_mod.escape(c)}</td>" for c in row) + "</tr>"
                for row in rows
            )
            tables.append(f"<table>{cells}</table>")
            rows.clear()

    for raw in text.splitlines():
        line = _IMAGE.sub("", raw).strip()
        if line.startswith("|"):
            close_para()
            if not _PIPE_RULE.match(line):
                cells = line.strip().strip("|").split("|")
                rows.append([_EMPHASIS.sub("", c).strip() for c in cells])
            continue
        close_table()
        heading = _HEADING.match(line)
        if heading:
            close_para()
            title = normalise(heading.group(2))
            headings.append(title)
            body.append(title)
        elif not line or line.startswith("---"):
            close_para()
        else:
            para.append(line)
    close_para()
    close_table()
    return PageParse(body=tuple(body), headings=tuple(headings), tables=tuple(tables))
