"""The development set of ``ocrstream bench structure`` (ocrstream.bench.structset): pages
rendered from HTML whose ground truth is what is on the page."""

from __future__ import annotations

from pathlib import Path

import pymupdf
import pytest

from ocrstream.bench import structset
from ocrstream.bench.structmetrics import normalise
from ocrstream.bench.teds import parse_table


def _flat(text: str) -> str:
    return normalise(text).replace(" ", "")


@pytest.mark.parametrize("seed", range(len(structset.TEMPLATES)))
def test_every_truth_string_is_on_the_page(seed: int) -> None:
    pdf, scan, meta = structset.render_page(seed)
    assert meta["template"] == structset.TEMPLATES[seed]
    with pymupdf.open("pdf", pdf) as doc:
        page_text = _flat(doc[0].get_text())
        size = doc[0].rect
    assert (round(size.width), round(size.height)) == (595, 842)  # A4
    truth = structset.PageTruth.from_dict(meta)
    assert truth.title
    assert truth.body[0] == truth.title
    assert len(truth.body) >= 4
    for text in (*truth.body, *truth.header, *truth.footer):
        assert _flat(text) in page_text, text
    for table in truth.tables:
        tree = parse_table(table)
        assert any(c.rowspan > 1 or c.colspan > 1 for r in tree.children for c in r.children)
        for row in tree.children:
            for cell in row.children:
                assert _flat(cell.text) in page_text
    assert scan[:2] == b"\xff\xd8"  # a JPEG


def test_templates_cover_columns_tables_and_figures() -> None:
    metas = [structset.render_page(seed)[2] for seed in range(len(structset.TEMPLATES))]
    assert sum(len(m["tables"]) for m in metas) >= 3
    assert any(any(b.startswith("Figure ") for b in m["body"]) for m in metas)
    assert {m["dpi"] for m in metas} <= {150, 200, 300}


def test_pages_are_made_once_and_the_splits_do_not_overlap(tmp_path: Path) -> None:
    dev = structset.pages("dev", 2, tmp_path)
    assert [p.seed for p in dev] == [0, 1]
    stamps = [p.image.stat().st_mtime_ns for p in dev]
    again = structset.pages("dev", 2, tmp_path)
    assert [p.image.stat().st_mtime_ns for p in again] == stamps  # reused, not remade
    assert again[0].truth == dev[0].truth
    held = structset.pages("heldout", 1, tmp_path)
    assert held[0].seed == structset.SPLITS["heldout"]
    assert held[0].truth.body != dev[0].truth.body
    final = structset.pages("final", 1, tmp_path)
    assert final[0].seed == 200_000
    assert final[0].truth.body not in (dev[0].truth.body, held[0].truth.body)
    with pytest.raises(ValueError, match="unknown split"):
        structset.pages("test", 1, tmp_path)


def test_a_page_is_the_same_from_the_same_seed() -> None:
    _, scan_a, meta_a = structset.render_page(5)
    _, scan_b, meta_b = structset.render_page(5)
    assert meta_a == meta_b
    assert scan_a == scan_b
