"""The splitter on ordinary documents: what comes out of each page, and the limits."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pymupdf
import pytest
from PIL import Image

from ocrstream.errors import LimitExceededError, PoisonError, ReasonCode
from ocrstream.processors.split import iter_pages, probe, sniff
from ocrstream.processors.split_types import SplitPage
from ocrstream.processors.textlayer import text_quality
from ocrstream.settings import LimitsSettings
from tests import hostile, samples

LIMITS = LimitsSettings()


def decode(page: SplitPage) -> Any:
    pixels = cv2.imdecode(np.frombuffer(page.data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert pixels is not None, page
    assert (pixels.shape[1], pixels.shape[0]) == (page.width, page.height)
    return pixels


def embedded_jpegs(data: bytes) -> list[bytes]:
    with pymupdf.open(stream=data, filetype="pdf") as doc:
        return [doc.xref_stream_raw(page.get_images()[0][0]) for page in doc]


def test_scanned_pdf_pages_pass_through_byte_identical() -> None:
    sample = samples.scanned_pdf(3, dpi=150, seed=1)
    pages = list(iter_pages(sample.data, "application/pdf", LIMITS))
    originals = embedded_jpegs(sample.data)
    assert [p.page_no for p in pages] == [1, 2, 3]
    assert all(p.page_count == 3 for p in pages)
    for page, original in zip(pages, originals, strict=True):
        assert page.origin == "passthrough"
        assert page.encoding == "jpeg"
        assert page.data == original
        assert (page.width, page.height) == (1275, 1650)
        assert page.dpi == pytest.approx(150)
        decode(page)


def test_vector_pdf_is_rendered_gray_png_at_dpi() -> None:
    sample = samples.text_pdf(1)
    (page,) = iter_pages(sample.data, None, LIMITS, dpi=200)
    assert (page.origin, page.encoding) == ("rendered", "png")
    assert (page.width, page.height) == (1700, 2200)
    assert page.dpi == pytest.approx(200)
    assert decode(page).ndim == 2  # black text on white: stored gray
    assert page.text_lines is None  # the text layer only when asked


def test_page_over_pixel_limit_is_rendered_smaller() -> None:
    limits = LimitsSettings(max_page_pixels=1_000_000)
    (page,) = iter_pages(samples.text_pdf(1).data, None, limits, dpi=300)
    assert page.ok
    assert page.width * page.height <= 1_000_000
    assert 90 < page.dpi < 300
    assert page.width / page.height == pytest.approx(612 / 792, rel=0.01)


def test_rotated_page_comes_out_upright() -> None:
    upright = samples.scanned_pdf(1, dpi=100, seed=13)
    sideways = samples.scanned_pdf(1, dpi=100, seed=13, rotate=90)
    (want,) = iter_pages(upright.data, None, LIMITS)
    (got,) = iter_pages(sideways.data, None, LIMITS)
    assert (got.width, got.height) == (want.width, want.height) == (850, 1100)
    a = decode(want).astype(np.int16)
    b = decode(got).astype(np.int16)
    assert np.abs(a - b).mean() < 3  # the same page, within JPEG noise


def test_multipage_tiff_one_page_per_frame_kept_bilevel() -> None:
    sample = samples.scanned_tiff(3, dpi=150)
    assert probe(sample.data, "image/tiff", LIMITS) == 3
    pages = list(iter_pages(sample.data, "image/tiff", LIMITS))
    assert [p.page_no for p in pages] == [1, 2, 3]
    for page in pages:
        assert (page.origin, page.encoding, page.dpi) == ("converted", "png", 150)
        assert Image.open(io.BytesIO(page.data)).mode == "1"  # a fax stays 1-bit
        assert set(np.unique(decode(page))) <= {0, 255}


@pytest.mark.parametrize(
    ("fmt", "mode", "origin"),
    [
        ("jpeg", "L", "passthrough"),
        ("jpeg", "RGB", "passthrough"),
        ("png", "L", "passthrough"),
        ("png", "P", "converted"),
        ("png", "RGBA", "converted"),
        ("bmp", "RGB", "converted"),
        ("webp", "RGB", "converted"),
        ("gif", "L", "converted"),
    ],
)
def test_image_files_are_documents(fmt: str, mode: str, origin: str) -> None:
    sample = samples.scanned_image(fmt, mode=mode, dpi=100)
    (page,) = iter_pages(sample.data, sample.content_type, LIMITS)
    assert page.origin == origin
    if origin == "passthrough":
        assert page.data == sample.data
    pixels = decode(page)
    assert pixels.dtype == np.uint8
    assert 0 < pixels.mean() < 255


def test_oversized_jpeg_is_decoded_at_a_reduced_scale() -> None:
    sample = samples.scanned_image("jpeg", dpi=200)  # 1700 x 2200
    limits = LimitsSettings(max_page_pixels=1_000_000)
    (page,) = iter_pages(sample.data, None, limits)
    assert (page.origin, page.width, page.height) == ("converted", 850, 1100)
    assert page.dpi == pytest.approx(100)


def test_jbig2_page_is_converted_once_to_bilevel_png() -> None:
    entries = b"/Width 800 /Height 1000 /BitsPerComponent 1 /ColorSpace /DeviceGray"
    data = hostile.image_page_pdf(
        entries + b" /Filter /JBIG2Decode", hostile.jbig2_white(800, 1000)
    )
    (page,) = iter_pages(data, None, LIMITS)
    assert (page.origin, page.encoding, page.width, page.height) == ("converted", "png", 800, 1000)
    assert Image.open(io.BytesIO(page.data)).mode == "1"
    assert decode(page).min() == 255  # all white, as encoded
    assert len(page.data) < 2000


def test_text_layer_answers_born_digital_pages() -> None:
    sample = samples.text_pdf(2, seed=4)
    pages = list(iter_pages(sample.data, None, LIMITS, dpi=150, use_text_layer=True))
    for page, lines in zip(pages, sample.lines, strict=True):
        assert page.text_lines is not None
        assert [line.text for line in page.text_lines] == list(lines)
        gray = decode(page)
        for line in page.text_lines:
            assert line.confidence == 1.0
            (x0, y0), (x1, _), (_, y1), _ = line.polygon
            assert 0 <= x0 < x1 <= page.width
            assert 0 <= y0 < y1 <= page.height
            assert gray[int(y0) : int(y1) + 1, int(x0) : int(x1) + 1].min() < 100  # ink inside


def test_text_layer_polygons_follow_page_rotation() -> None:
    with samples.text_page_pdf(["Rotated page with a text layer here"] * 3) as doc:
        doc[0].set_rotation(90)
        data = doc.tobytes()
    (page,) = iter_pages(data, None, LIMITS, dpi=100, use_text_layer=True)
    assert page.width > page.height  # landscape, as shown
    assert page.text_lines is not None
    gray = decode(page)
    for line in page.text_lines:
        xs = [p[0] for p in line.polygon]
        ys = [p[1] for p in line.polygon]
        assert max(ys) - min(ys) > max(xs) - min(xs)  # the line now runs down the image
        assert gray[int(min(ys)) : int(max(ys)), int(min(xs)) : int(max(xs))].min() < 100


def test_scans_and_junk_text_layers_are_not_used() -> None:
    scan = samples.scanned_pdf(1, dpi=100, seed=2)
    (page,) = iter_pages(scan.data, None, LIMITS, use_text_layer=True)
    assert page.text_lines is None
    with samples.text_page_pdf(["l ; ' . , I : | ! ; . , ' l I"] * 3) as doc:
        junk = doc.tobytes()
    (page,) = iter_pages(junk, None, LIMITS, dpi=72, use_text_layer=True)
    assert page.text_lines is None


def test_earlier_ocr_layer_on_a_scan_is_used_and_the_scan_still_passes_through() -> None:
    scan = samples.scanned_pdf(1, dpi=100, seed=6)
    with pymupdf.open(stream=scan.data) as doc:
        for i, text in enumerate(scan.lines[0]):
            doc[0].insert_text((72, 86 + i * 28), text, fontsize=14, render_mode=3)
        data = doc.tobytes()
    (page,) = iter_pages(data, None, LIMITS, use_text_layer=True)
    assert page.origin == "passthrough"
    assert page.text_lines is not None
    assert [line.text for line in page.text_lines] == list(scan.lines[0])


def test_page_with_visible_text_over_the_scan_is_rendered() -> None:
    scan = samples.scanned_pdf(1, dpi=100, seed=7)
    with pymupdf.open(stream=scan.data) as doc:
        doc[0].insert_text((300, 700), "APPROVED", fontsize=30, color=(1, 0, 0))
        data = doc.tobytes()
    (page,) = iter_pages(data, None, LIMITS, dpi=100)
    assert page.origin == "rendered"
    assert decode(page).ndim == 3  # the red stamp keeps colour


def test_limits_file_bytes_from_bytes_and_path(tmp_path: Path) -> None:
    sample = samples.scanned_pdf(1, dpi=100, seed=8)
    limits = LimitsSettings(max_file_bytes=len(sample.data) - 1)
    path = tmp_path / "scan.pdf"
    path.write_bytes(sample.data)
    for source in (sample.data, path, str(path)):
        with pytest.raises(LimitExceededError) as info:
            probe(source, None, limits)
        assert info.value.code == ReasonCode.FILE_TOO_LARGE
    assert probe(path, None, LIMITS) == 1
    assert [p.ok for p in iter_pages(path, None, LIMITS)] == [True]


def test_limit_on_pages_raises_before_the_first_page() -> None:
    pages = iter_pages(
        samples.scanned_pdf(3, dpi=100, seed=1).data, None, LimitsSettings(max_pages=2)
    )
    with pytest.raises(PoisonError) as info:
        next(pages)
    assert info.value.code == "too_many_pages"


def test_missing_file_is_a_poison_error(tmp_path: Path) -> None:
    with pytest.raises(PoisonError):
        probe(tmp_path / "nothing.pdf", None, LIMITS)


@pytest.mark.parametrize(
    ("head", "media_type"),
    [
        (b"%PDF-1.7\n", "application/pdf"),
        (b"\x00" * 100 + b"%PDF-1.4", "application/pdf"),
        (b"\xff\xd8\xff\xe0", "image/jpeg"),
        (b"\x89PNG\r\n\x1a\n", "image/png"),
        (b"II*\x00", "image/tiff"),
        (b"MM\x00*", "image/tiff"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"GIF89a", "image/gif"),
        (b"\x00\x00\x00\x0cjP  \r\n\x87\n", "image/jp2"),
        (b"PK\x03\x04", None),
        (b"", None),
    ],
)
def test_sniff(head: bytes, media_type: str | None) -> None:
    assert sniff(head) == media_type


@pytest.mark.parametrize(
    ("texts", "usable"),
    [
        (["Invoice number 12345 dated 3 March 2024", "Total amount due: 1,250.00 EUR"], True),
        (["请于三十日内支付发票金额，谢谢合作。", "合同编号 2024-117"], True),
        (["Page 1"], False),  # too little
        (["\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd" * 3], False),
        (["\ue000\ue001\ue002 \ue003\ue004\ue005 \ue006\ue007 abc def ghi jkl"], False),
        (["l I ' ; . , : | ! l I ' ; . , : | ! l I"], False),  # earlier OCR junk
        (["-- .. ** ## == ++ -- .. ** ## == ++ -- .. ** ##"], False),
    ],
)
def test_text_layer_quality(texts: list[str], usable: bool) -> None:
    assert text_quality(texts) is usable


@pytest.mark.parametrize(("fmt", "mode"), [("PNG", "RGB"), ("PNG", "L"), ("JPEG", "RGB")])
def test_an_image_given_by_path_splits_like_the_same_bytes(
    tmp_path: Path, fmt: str, mode: str
) -> None:
    """``ocrstream ocr scan.png`` opens the file by path: a plain 8-bit PNG came out
    ``unreadable_image`` (PIL had closed the file it read the pixels from)."""
    image = Image.new(mode, (120, 80), "white")
    path = tmp_path / f"scan.{fmt.lower()}"
    image.save(path, fmt)
    media = "image/png" if fmt == "PNG" else "image/jpeg"
    (by_path,) = iter_pages(path, media, LIMITS)
    (by_bytes,) = iter_pages(path.read_bytes(), media, LIMITS)
    assert by_path.error_code is None, by_path.error_message
    assert (by_path.width, by_path.height) == (120, 80)
    assert by_path.data == by_bytes.data
