"""Rec crops a little taller than the det boxes, but not into the next line."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from ocrstream.processors.ocr.engine import OcrEngine
from ocrstream.processors.ocr.geometry import NEIGHBOUR_OVERLAP, grow_for_rec, quad_size
from tests.fakes.engines import render_text_page, scan_noise


def box(x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float32)


def test_a_lone_line_grows_by_the_margin_above_and_below_only():
    (grown,), (tall,) = grow_for_rec([box(100, 200, 600, 250)], 0.04, 1000, 1000)
    np.testing.assert_allclose(grown, box(100, 198, 600, 252), atol=1e-4)
    assert tall == pytest.approx(54)


def test_a_turned_line_grows_across_its_own_direction():
    angle = math.radians(10)
    along = np.array([math.cos(angle), math.sin(angle)], np.float32)
    across = np.array([-math.sin(angle), math.cos(angle)], np.float32)
    tl = np.array([100.0, 100.0], np.float32)
    quad = np.stack([tl, tl + 400 * along, tl + 400 * along + 50 * across, tl + 50 * across])
    (grown,), (tall,) = grow_for_rec([quad.astype(np.float32)], 0.1, 1000, 1000)
    w, h = quad_size(grown)
    assert w == pytest.approx(400, abs=0.01)
    assert h == pytest.approx(60, abs=0.01)
    assert tall == pytest.approx(60, abs=0.01)
    np.testing.assert_allclose(grown[0], tl - 5 * across, atol=1e-3)


def test_sides_facing_a_close_neighbour_keep_their_edge():
    gap = -(NEIGHBOUR_OVERLAP + 0.05) * 50  # boxes overlap by a quarter of their height
    top, bottom = box(100, 100, 600, 150), box(150, 150 + gap, 700, 200 + gap)
    far = box(100, 500, 600, 550)  # free space above and below
    (g_top, g_bottom, g_far), heights = grow_for_rec([top, bottom, far], 0.04, 1000, 1000)
    assert g_top[0, 1] == pytest.approx(98)  # grown above, where nothing is
    assert g_top[3, 1] == pytest.approx(150)  # not below, into the overlapping next line
    assert g_bottom[0, 1] == pytest.approx(150 + gap)
    assert g_bottom[3, 1] == pytest.approx(202 + gap)
    np.testing.assert_allclose(g_far, box(100, 498, 600, 552), atol=1e-4)
    assert heights == pytest.approx([52, 52, 54])  # as tall as they are cut


def test_a_side_grows_only_up_to_the_next_line_but_keeps_the_whole_margins_width():
    """Small print: the next line 1 px below, or overlapping it by 2 px (4% of the height,
    under NEIGHBOUR_OVERLAP). The crop stops at the neighbour's box (its descenders and
    ascenders were read as accents), but its height for the width at rec's height is the
    whole margin's, so rec reads no more columns than before."""
    top, bottom = box(100, 100, 600, 150), box(100, 151, 600, 201)  # 1 px apart
    (g_top, g_bottom), heights = grow_for_rec([top, bottom], 0.04, 1000, 1000)
    assert g_top[0, 1] == pytest.approx(98)  # the free side grows by the whole margin
    assert g_top[3, 1] == pytest.approx(151)  # 1 px of the 2, up to the next box
    assert g_bottom[0, 1] == pytest.approx(150)
    assert g_bottom[3, 1] == pytest.approx(203)
    assert heights == pytest.approx([54, 54])
    top, bottom = box(100, 100, 600, 150), box(100, 148, 600, 198)  # overlapping by 2 px
    (g_top, g_bottom), heights = grow_for_rec([top, bottom], 0.04, 1000, 1000)
    assert g_top[3, 1] == pytest.approx(150)
    assert g_bottom[0, 1] == pytest.approx(148)
    assert heights == pytest.approx([54, 54])


def test_a_column_grows_across_but_not_into_a_column_that_overlaps_it():
    """A vertical line is read turned a quarter turn: its width is its height there, and it
    grows by the margin on its left and right, where no column beside it overlaps it by
    more than NEIGHBOUR_OVERLAP of its width (det's column boxes of Chinese set 1.5 em apart
    overlap by a few pixels, under it)."""
    right = box(500, 100, 550, 900)
    close = box(452, 100, 502, 700)  # overlaps ``right`` by 2 px: both grow towards it
    squeezed = box(300, 100, 350, 900)
    crowded = box(338, 300, 388, 900)  # overlaps ``squeezed`` by 12 px, over a fifth: neither
    (g_right, g_close, g_squeezed, g_crowded), _ = grow_for_rec(
        [right, close, squeezed, crowded], 0.1, 1000, 1000
    )
    np.testing.assert_allclose(g_right, box(495, 100, 555, 900), atol=1e-4)
    np.testing.assert_allclose(g_close, box(447, 100, 507, 700), atol=1e-4)
    np.testing.assert_allclose(g_squeezed, box(295, 100, 350, 900), atol=1e-4)
    np.testing.assert_allclose(g_crowded, box(338, 300, 393, 900), atol=1e-4)


def test_vertical_lines_pages_edges_and_no_margin():
    vertical = box(100, 100, 140, 400)
    edge = box(0, 0, 300, 40)
    (g_vertical, g_edge), heights = grow_for_rec([vertical, edge], 0.04, 300, 1000)
    np.testing.assert_allclose(g_vertical, box(98.4, 100, 141.6, 400), atol=1e-4)  # across
    assert g_edge[:, 1].min() == 0.0  # clipped to the page
    assert g_edge[:, 0].max() == 299.0
    assert g_edge[:, 1].max() == pytest.approx(41.6)
    assert heights == pytest.approx([300, 41.6])  # clipped: the height the crop has
    same, heights = grow_for_rec([edge], 0.0, 300, 1000)
    np.testing.assert_array_equal(same[0], edge)
    assert heights == [40]


def test_the_margin_changes_the_crops_not_the_reported_boxes(ocr_engine: OcrEngine):
    """The polygons a user gets are the det boxes; the page cache tells the settings apart."""
    lines = ["Quarterly statement, account 4471-2290", "Balance due: 12,900.15 on 2024-03-31"]
    page_bytes = scan_noise(render_text_page(lines), angle=0.0, sigma=4.0, quality=85)
    settings = ocr_engine.settings
    assert ocr_engine.rec_params.crop_margin > 0
    plain = OcrEngine(settings.model_copy(update={"rec_crop_margin": 0.0}))
    (a,) = ocr_engine.recognize([page_bytes])
    (b,) = plain.recognize([page_bytes])
    assert [line.polygon for line in a.lines] == [line.polygon for line in b.lines]
    assert [line.text for line in a.lines] == lines
    assert ocr_engine.fingerprint("text") != plain.fingerprint("text")


def test_the_margin_is_the_models_own_unless_the_settings_name_one(ocr_engine: OcrEngine):
    """Each model set carries the margin chosen for it; OCRSTREAM_OCR_REC_CROP_MARGIN wins."""
    from ocrstream.processors.ocr.models import load_model_set
    from ocrstream.processors.ocr.rec import RecParams

    settings = ocr_engine.settings
    assert settings.rec_crop_margin is None
    assert ocr_engine.rec_params.crop_margin == ocr_engine.models.rec_crop_margin
    tiny = load_model_set("ppocrv6-tiny")
    assert tiny.rec_crop_margin != ocr_engine.models.rec_crop_margin  # the sets differ
    assert RecParams.from_settings(settings, tiny.rec_crop_margin).crop_margin == (
        tiny.rec_crop_margin
    )
    chosen = settings.model_copy(update={"rec_crop_margin": 0.05})
    assert RecParams.from_settings(chosen, tiny.rec_crop_margin).crop_margin == 0.05
    assert RecParams.from_settings(chosen, 0.0).crop_margin == 0.05


def _turned_box(x: float, y: float, w: float, h: float, degrees: float) -> np.ndarray:
    angle = math.radians(degrees)
    along = np.array([math.cos(angle), math.sin(angle)], np.float32)
    across = np.array([-math.sin(angle), math.cos(angle)], np.float32)
    tl = np.array([x, y], np.float32)
    return np.stack([tl, tl + w * along, tl + w * along + h * across, tl + h * across]).astype(
        np.float32
    )


@pytest.mark.parametrize("height", [48, 60, 90])
def test_a_line_is_cut_straight_to_recs_height_as_a_cut_and_resize_would(height: int):
    """rec.crop_line warps a line that shrinks by at most 2:1 once, page to rec size: the
    same size as cutting it out and resizing it, and the same picture up to resampling."""
    from ocrstream.processors.ocr import rec as rec_mod
    from ocrstream.processors.ocr.geometry import crop_quad

    fontsize = height / 300 * 72 / 1.25  # the text fills ~80% of the box
    page = render_text_page(["Invoice 2024-0117: 3 x widgets at 14.50"], fontsize=fontsize,
                            width_in=6.0, margin_pt=36.0)  # fmt: skip
    params = rec_mod.RecParams()
    top = 36 / 72 * 300 - 0.1 * height  # the box around the first line
    quad = _turned_box(140, top, 1500, height, 0.3)
    fused = rec_mod.crop_line(page, quad, params)
    two_step = rec_mod.resize_line(crop_quad(page, quad), params)
    assert fused.shape == two_step.shape
    assert fused.shape[0] == params.height
    diff = np.abs(fused.astype(np.int16) - two_step.astype(np.int16))
    # of 255, where ink and paper differ by ~200; bilinear against INTER_AREA differs more
    # the more a line shrinks: 1.9 at 56 px, 3.4 at 72, 5.6 at 90 on this unblurred text
    assert diff.mean() < 8.0, diff.mean()
    assert np.abs(255 - fused.astype(np.int16)).mean() > 10  # there is text in it


@pytest.mark.parametrize(
    "quad",
    [
        _turned_box(100, 100, 600, 30, 0.0),  # enlarged to 48 px: cut, then INTER_AREA
        _turned_box(100, 100, 900, 120, 1.0),  # shrunk by more than 2:1
        _turned_box(300, 100, 40, 400, 0.0),  # vertical: turned upright
    ],
)
def test_lines_to_enlarge_shrink_far_or_turn_are_cut_then_resized(quad: np.ndarray):
    from ocrstream.processors.ocr import rec as rec_mod
    from ocrstream.processors.ocr.geometry import crop_quad

    rng = np.random.default_rng(7)
    page = rng.integers(0, 256, (700, 1200, 3), np.uint8)
    params = rec_mod.RecParams()
    expected = rec_mod.resize_line(crop_quad(page, quad), params)
    np.testing.assert_array_equal(rec_mod.crop_line(page, quad, params), expected)


def test_a_crop_cut_at_its_neighbour_keeps_the_width_of_the_whole_margin():
    """crop_line with the height grow_for_rec gives: rec's 48 rows, the width the taller
    crop would take (narrower than the cut crop's own aspect), the cut quad's picture
    narrowed with INTER_AREA; a height under the quad's changes nothing."""
    from ocrstream.processors.ocr import rec as rec_mod

    page = render_text_page(["Totals carried forward: 4,213.90"], fontsize=11.0, width_in=5.0,
                            margin_pt=36.0)  # fmt: skip
    params = rec_mod.RecParams()
    quad = _turned_box(140, 130, 1100, 52, 0.0)
    own = rec_mod.crop_line(page, quad, params)
    assert own.shape[1] == math.ceil(48 * 1100 / 52)
    taller = rec_mod.crop_line(page, quad, params, height=60.0)
    assert taller.shape == (48, math.ceil(48 * 1100 / 60), 3)
    narrowed = cv2.resize(own, (taller.shape[1], 48), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(taller, narrowed)
    np.testing.assert_array_equal(rec_mod.crop_line(page, quad, params, height=40.0), own)
    # enlarged (cut, then INTER_AREA) alike
    small = _turned_box(140, 130, 700, 30, 0.0)
    assert rec_mod.crop_line(page, small, params, height=36.0).shape == (48, 934, 3)
    # a vertical line is turned upright and keeps its own size whatever the height says
    vertical = _turned_box(300, 100, 40, 400, 0.0)
    np.testing.assert_array_equal(
        rec_mod.crop_line(page, vertical, params, height=500.0),
        rec_mod.crop_line(page, vertical, params),
    )


@pytest.mark.parametrize("degrees", [0.6, -0.6, 1.5])
def test_columns_scanned_a_little_askew_get_the_crops_they_would_get_straight(degrees: float):
    """A page turned a little on the scanner keeps the room between its columns: measured on
    the page's axes, two 2,700-px columns 25 px apart slanted by 0.6° overlap by 3 px, and
    by 46 px (over NEIGHBOUR_OVERLAP of their width) at 1.5°, where their crops did not grow
    towards each other. The crops are the straight page's, turned with it."""
    columns = [box(3000, 300, 3060, 3000), box(2915, 300, 2975, 3000), box(2200, 300, 2260, 1000)]
    angle = math.radians(degrees)
    turn = np.array(
        [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], np.float32
    )

    def turned(q: np.ndarray) -> np.ndarray:
        return ((q - 2000) @ turn.T + 2000).astype(np.float32)

    want, want_heights = grow_for_rec(columns, 0.1, 5000, 5000)
    got, heights = grow_for_rec([turned(q) for q in columns], 0.1, 5000, 5000)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, turned(w), atol=0.05)
    assert heights == pytest.approx(want_heights, abs=0.05)
    # straight, each column grows by 6 px on both sides, towards the other one too
    np.testing.assert_allclose(want[0], box(2994, 300, 3066, 3000), atol=1e-4)
    np.testing.assert_allclose(want[1], box(2909, 300, 2981, 3000), atol=1e-4)


def test_a_line_a_little_shorter_than_recs_height_is_padded_to_it_not_enlarged():
    """With ``native_min_height`` a horizontal line from that height up to rec's 48 px is cut
    at its own height and its first and last rows repeated up to 48: rec reads as many
    columns as the line has. A shorter line, a taller one and a column are cut as before."""
    import dataclasses

    from ocrstream.processors.ocr import rec as rec_mod

    page = render_text_page(["Net 30 days; late payments accrue 1.5% a month"], fontsize=7.0,
                            width_in=6.0, margin_pt=36.0)  # fmt: skip
    params = rec_mod.RecParams(native_min_height=32)
    enlarging = dataclasses.replace(params, native_min_height=0)
    quad = _turned_box(140, 140, 1200, 36, 0.0)

    padded = rec_mod.crop_line(page, quad, params)
    assert padded.shape == (48, 1200, 3)  # enlarged, it would be 1,600 columns
    assert rec_mod.crop_line(page, quad, enlarging).shape == (48, 1600, 3)
    own = rec_mod.crop_line(page, quad, dataclasses.replace(enlarging, height=36))
    np.testing.assert_array_equal(padded[6:42], own)  # the line itself, in the middle
    np.testing.assert_array_equal(padded[:6], np.repeat(own[:1], 6, axis=0))
    np.testing.assert_array_equal(padded[42:], np.repeat(own[-1:], 6, axis=0))
    assert np.abs(255 - own.astype(np.int16)).mean() > 10  # there is text in it

    # the height grow_for_rec gives counts: a 30-px crop cut at its neighbour, 34 px whole
    cut = rec_mod.crop_line(page, _turned_box(140, 142, 1200, 30, 0.0), params, height=34.0)
    assert cut.shape == (48, 1200, 3)
    for other in (
        _turned_box(140, 142, 1200, 30, 0.0),  # under 32 px: enlarged, as a receipt's line
        _turned_box(140, 130, 1200, 52, 0.0),  # rec's height or more: shrunk as before
        _turned_box(300, 100, 40, 400, 0.0),  # a column: turned upright as before
    ):
        np.testing.assert_array_equal(
            rec_mod.crop_line(page, other, params), rec_mod.crop_line(page, other, enlarging)
        )


def test_v6_smalls_rec_reads_small_print_at_its_own_height_as_it_reads_it_enlarged(
    ocr_engine: OcrEngine, monkeypatch: pytest.MonkeyPatch
):
    """The default set reads lines 40-47 px tall unenlarged (measured on the dev sets); a
    page of 7.5-pt print reads the same either way in fewer columns, the page cache tells the
    two apart, and the fast profile's rec, which read small print worse so, keeps enlarging."""
    from ocrstream.processors.ocr import rec as rec_mod
    from ocrstream.processors.ocr.models import load_model_set

    columns: list[int] = []
    cut = rec_mod.crop_line

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        line = cut(*args, **kwargs)
        columns.append(line.shape[1])
        return line

    monkeypatch.setattr(rec_mod, "crop_line", counted)

    lines = ["Terms: net 30 days from the invoice date; 1.5% a month",
             "accrues on late balances. Order 88213-B, 14 cartons."]  # fmt: skip
    page_bytes = scan_noise(render_text_page(lines, fontsize=7.5), angle=0.0, sigma=3.0,
                            quality=90)  # fmt: skip
    assert ocr_engine.rec_params.native_min_height == 40
    assert load_model_set("ppocrv6-tiny").rec_native_min_height == 0
    assert load_model_set("ppocrv6-small-tinydet").rec_native_min_height == 0
    enlarging = OcrEngine(ocr_engine.settings.model_copy(update={"rec_native_min_height": 0}))
    try:
        assert enlarging.rec_params.native_min_height == 0
        (native,) = ocr_engine.recognize([page_bytes])
        native_columns = sum(columns)
        columns.clear()
        (enlarged,) = enlarging.recognize([page_bytes])
        assert native_columns < 0.95 * sum(columns)
        assert [line.text for line in enlarged.lines] == lines
        assert [line.text for line in native.lines] == lines
        assert ocr_engine.fingerprint("text") != enlarging.fingerprint("text")
    finally:
        enlarging.close()
