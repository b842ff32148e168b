"""DB post-processing and det pre-processing on crafted inputs (no model)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from ocrstream.processors.ocr.det import (
    MIN_SHRINK,
    SHRINK_STEPS,
    SIDE_LADDER,
    DetParams,
    boxes_from_map,
    det_shape,
    normalise,
    padded_shape,
    plan_batches,
    shrink_step,
    sigmoid,
)
from ocrstream.processors.ocr.models import SPLIT_CONCATS, _split_concats


def _map(h: int, w: int, rects: list[tuple[int, int, int, int]], p: float = 0.9) -> np.ndarray:
    prob = np.zeros((h, w), np.float32)
    for x0, y0, x1, y1 in rects:
        prob[y0:y1, x0:x1] = p
    return prob


def test_two_rectangles_give_two_boxes_at_their_place_grown_back():
    prob = _map(200, 400, [(40, 30, 240, 50), (60, 120, 360, 150)])
    params = DetParams()
    boxes = boxes_from_map(prob, 200, 400, params)
    assert len(boxes) == 2
    top, bottom = sorted(boxes, key=lambda b: float(b.quad[:, 1].mean()))
    for box, (x0, y0, x1, y1) in ((top, (40, 30, 240, 50)), (bottom, (60, 120, 360, 150))):
        q = box.quad
        assert box.score == pytest.approx(0.9, abs=0.02)
        # clockwise from top-left
        assert q[0, 0] < q[1, 0]
        assert q[0, 1] < q[3, 1]
        assert q[2, 0] > q[3, 0]
        # the kernel is grown by area * ratio / perimeter on every side
        h, w = y1 - y0, x1 - x0
        d = h * w * params.unclip_ratio / (2 * (h + w))
        assert q[:, 0].min() == pytest.approx(x0 - d, abs=2.5)
        assert q[:, 0].max() == pytest.approx(x1 + d, abs=2.5)
        assert q[:, 1].min() == pytest.approx(y0 - d, abs=2.5)
        assert q[:, 1].max() == pytest.approx(y1 + d, abs=2.5)


def test_boxes_scale_from_map_to_page_pixels():
    prob = _map(100, 200, [(20, 40, 120, 60)])
    (small,) = boxes_from_map(prob, 100, 200, DetParams())
    (big,) = boxes_from_map(prob, 300, 600, DetParams())
    np.testing.assert_allclose(big.quad, small.quad * 3, atol=3.5)


def test_faint_tiny_and_rotated_regions():
    params = DetParams()
    faint = _map(100, 200, [(20, 40, 120, 60)], p=0.4)  # above thresh, below box_thresh
    assert boxes_from_map(faint, 100, 200, params) == []
    speck = _map(100, 200, [(20, 40, 22, 42)])
    assert boxes_from_map(speck, 100, 200, params) == []
    import cv2

    rotated = np.zeros((300, 300), np.float32)
    rect = ((150.0, 150.0), (200.0, 20.0), 10.0)
    cv2.fillPoly(rotated, [cv2.boxPoints(rect).astype(np.int32)], 0.95)
    (box,) = boxes_from_map(rotated, 300, 300, params)
    edge = box.quad[1] - box.quad[0]
    assert np.degrees(np.arctan2(edge[1], edge[0])) == pytest.approx(10.0, abs=1.5)


def test_det_shape_multiples_of_32_within_budget():
    params = DetParams(limit_side=1600)
    budget = 1600 * 1600 / np.sqrt(2)
    for h, w in [(3508, 2480), (1013, 463), (20000, 300), (32, 32), (600, 800)]:
        rh, rw = det_shape(h, w, params)
        assert rh % 32 == 0
        assert rw % 32 == 0
        assert rh * rw <= budget * 1.1
        assert abs(rh / rw - h / w) / (h / w) < 0.25 or min(rh, rw) == 32
    # a small receipt is enlarged, an A4 scan reduced
    assert min(det_shape(1013, 463, params)) >= 700
    assert max(det_shape(3508, 2480, params)) <= 1650


def test_large_print_is_scaled_down_to_the_line_height_det_needs():
    params = DetParams(max_line_height=12.0)
    base = det_shape(3508, 2480, DetParams())  # an A4 page in the 1600-px budget
    scale = base[0] / 3508

    def page_px(input_px: float) -> float:  # a line this tall in the budget's input
        return input_px / scale

    # 18-px lines come out 12 px tall: the page is scaled by 2/3 on each side, or the step
    # just above (2 ** -4/8 = 0.71)
    h, w = det_shape(3508, 2480, params, page_px(18.0))
    assert h % 32 == 0
    assert w % 32 == 0
    assert abs(h - base[0] * 2**-0.5) <= 32  # each side snapped
    assert abs(w - base[1] * 2**-0.5) <= 32
    # pages of nearly the same print share a shape
    assert det_shape(3508, 2480, params, page_px(17.5)) == (h, w)
    # small print, and a page with no estimate, keep the budget's scale: never enlarged by it
    assert det_shape(3508, 2480, params, page_px(8.0)) == base
    assert det_shape(3508, 2480, params, None) == base
    # however large the print, no smaller than half the budget's scale
    h, w = det_shape(3508, 2480, params, page_px(200.0))
    assert abs(h - base[0] * MIN_SHRINK) <= 32
    assert abs(w - base[1] * MIN_SHRINK) <= 32
    # a small receipt is enlarged to det's minimum side, then scaled down by its print
    enlarged = det_shape(1013, 463, params, None)
    assert det_shape(1013, 463, params, 30.0)[1] < enlarged[1]
    # off at 0, and the full text-size scale (line_height) decides alone where it is set
    assert det_shape(3508, 2480, DetParams(), page_px(18.0)) == base
    both = DetParams(max_line_height=12.0, line_height=24.0)
    assert det_shape(3508, 2480, both, page_px(18.0)) == det_shape(
        3508, 2480, DetParams(line_height=24.0), page_px(18.0)
    )


def test_shrink_steps_round_towards_less_shrinking():
    assert shrink_step(1.3) == 1.0
    assert shrink_step(0.5) == MIN_SHRINK == 0.5
    assert shrink_step(0.01) == MIN_SHRINK
    steps = {shrink_step(w) for w in np.linspace(0.5, 0.999, 200)}
    assert len(steps) == SHRINK_STEPS + 1  # 0.5 … 0.917 and 1
    for wanted in np.linspace(0.5, 0.999, 50):
        step = shrink_step(float(wanted))
        assert wanted <= step < wanted * 2 ** (1 / SHRINK_STEPS) + 1e-9


def test_det_batches_only_group_pages_of_one_shape():
    shapes = [(640, 480), (1024, 736), (640, 480), (640, 480), (1024, 736)]
    batches = plan_batches(shapes, max_batch=2)
    seen = sorted(i for _, idx in batches for i in idx)
    assert seen == [0, 1, 2, 3, 4]
    for shape, idx in batches:
        assert len(idx) <= 2
        assert all(shapes[i] == shape for i in idx)


@pytest.mark.parametrize("shape", [(64, 96), (160, 64)])  # smaller and larger than the page
def test_det_input_is_the_page_normalised_by_the_models_mean_and_std(shape: tuple[int, int]):
    rng = np.random.default_rng(3)
    page = rng.integers(0, 256, (120, 80, 3), dtype=np.uint8)
    params = DetParams(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    got = normalise(page, shape, params)
    interp = cv2.INTER_AREA if shape[0] * shape[1] < 120 * 80 else cv2.INTER_LINEAR
    resized = cv2.resize(page, shape[::-1], interpolation=interp).astype(np.float32) / 255.0
    want = ((resized - np.array(params.mean)) / np.array(params.std)).transpose(2, 0, 1)
    assert (got.shape, got.dtype) == ((3, *shape), np.float32)
    assert got.flags.c_contiguous
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_ladder_pads_each_side_by_at_most_a_quarter_into_few_shapes():
    """A GPU's det inputs: every det shape (multiples of 32 up to 4096 a side) is padded to
    one of at most 256 shapes, each side no smaller and at most 128 px or a quarter larger;
    the CPU's exact shapes stay as they are."""
    ladder = DetParams(ladder=True)
    sides = range(32, 4097, 32)
    got = {s: padded_shape((s, s), ladder)[0] for s in sides}
    assert set(got.values()) <= set(SIDE_LADDER)
    for side, padded in got.items():
        assert side <= padded <= max(side + 128, side * 5 // 4), side
    assert len({padded_shape((h, w), ladder) for h in sides for w in sides}) <= 256
    assert padded_shape((1600, 1152), ladder) == (1792, 1280)
    assert padded_shape((1600, 1152), DetParams()) == (1600, 1152)
    assert padded_shape((4160, 96), ladder) == (4160, 128)  # past the ladder: as it is


def test_a_padded_slot_holds_the_page_then_white():
    rng = np.random.default_rng(4)
    page = rng.integers(0, 256, (70, 50, 3), dtype=np.uint8)
    params = DetParams(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    alone = normalise(page, (64, 32), params)
    slot = np.full((3, 128, 128), np.nan, np.float32)
    normalise(page, (64, 32), params, out=slot)
    np.testing.assert_array_equal(slot[:, :64, :32], alone)
    white = normalise(np.full((1, 1, 3), 255, np.uint8), (32, 32), params)[:, 0, 0]
    for c in range(3):
        assert (slot[c, 64:, :] == white[c]).all()
        assert (slot[c, :, 32:] == white[c]).all()


def test_boxes_come_from_the_pages_part_of_a_padded_map():
    prob = _map(128, 128, [(10, 10, 40, 20), (80, 90, 120, 100)])  # the second in padding
    boxes = boxes_from_map(prob, 64, 64, DetParams(), shape=(64, 64))
    assert len(boxes) == 1
    assert boxes[0].quad[:, 0].max() < 45


def test_a_grey_page_is_normalised_as_its_grey_in_every_channel():
    page = np.random.default_rng(4).integers(0, 256, (120, 80), dtype=np.uint8)
    params = DetParams(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    got = normalise(page, (64, 96), params)
    colour = normalise(np.repeat(page[:, :, None], 3, axis=2), (64, 96), params)
    np.testing.assert_array_equal(got, colour)


def test_sigmoid_turns_logits_into_the_models_probabilities_in_place():
    logits = np.array([[-200.0, -20.0, -0.8473, 0.0], [0.8473, 5.0, 20.0, 200.0]], np.float32)
    want = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    with np.errstate(over="raise"):  # no overflow warning for very negative logits
        got = sigmoid(logits)
    assert got is logits
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30)
    assert got[0, 0] == 0.0
    assert got[1, 3] == 1.0


def _logits_of(source, target):
    """The published det model with its Sigmoid's input as the output: the logits as they were
    before any folding."""
    import onnx

    model = onnx.load(str(source))
    graph = model.graph
    sigmoid = next(n for n in graph.node if n.op_type == "Sigmoid")
    kept = [n for n in graph.node if n is not sigmoid and not set(n.input) & set(sigmoid.output)]
    del graph.node[:]
    graph.node.extend(kept)
    graph.output[0].name = sigmoid.input[0]
    onnx.save(model, str(target))
    return target


@pytest.mark.parametrize("backend_name", ["onnxruntime", "openvino"])
@pytest.mark.parametrize("model", ["ppocrv6-tiny", "ppocrv6-small"])
def test_det_without_its_sigmoid_gives_the_same_probabilities(tmp_path, backend_name, model):
    """The derived det model (models.det_logits_model: no Sigmoid, DB's upsampling tail folded
    to a quarter of the size) and det.sigmoid after it: the map the model as published gives,
    on a rendered page, from the very same logits."""
    import onnx

    from ocrstream.processors.ocr.backends import create_key
    from ocrstream.processors.ocr.backends.base import SessionOptions
    from ocrstream.processors.ocr.backends.choice import installed
    from ocrstream.processors.ocr.models import det_logits_model, load_model_set
    from tests.fakes.engines import render_text_page

    if backend_name not in installed():
        pytest.skip(f"{backend_name} is not installed (no OpenVINO wheel for this platform)")
    models = load_model_set(model)
    derived = det_logits_model(models.det_path, tmp_path, backend_name)
    assert derived is not None
    assert derived.parent == tmp_path / "models"
    assert det_logits_model(models.det_path, tmp_path, backend_name) == derived  # once, by hash
    ops = [n.op_type for n in onnx.load(str(derived)).graph.node]
    assert "DepthToSpace" in ops
    assert "Sigmoid" not in ops
    page = render_text_page(["Total due 1,250.00", "Account 2291"])
    params = DetParams(mean=models.det_mean, std=models.det_std)
    x = normalise(page, det_shape(*page.shape[:2], params), params)[None]
    backend, options = create_key(backend_name), SessionOptions(threads=1)
    want = backend.load(models.det_path, "det", options).run(x)
    logits = backend.load(derived, "det", options).run(x)
    unfolded = _logits_of(models.det_path, tmp_path / "unfolded.onnx")
    if backend_name in SPLIT_CONCATS:  # the same split on both sides: the fold alone compared
        split = onnx.load(str(unfolded))
        assert _split_concats(split) >= 1
        onnx.save(split, str(unfolded))
    np.testing.assert_array_equal(logits, backend.load(unfolded, "det", options).run(x))
    got = sigmoid(logits)
    # a Conv split into parts sums in another order: float32's rounding, up to ~2e-5
    np.testing.assert_allclose(got, want, atol=5e-5 if backend_name in SPLIT_CONCATS else 1e-6)
    assert len(boxes_from_map(got[0, 0], *page.shape[:2], params)) == 2


def _derived(tmp_path, backend_name, model):
    """``model`` saved as a det model, and the copy the engine loads for ``backend_name``
    (models.det_logits_model): (source, copy). Skips where that backend is not installed."""
    import onnx

    from ocrstream.processors.ocr.backends.choice import installed
    from ocrstream.processors.ocr.models import det_logits_model

    if backend_name not in installed():
        pytest.skip(f"{backend_name} is not installed (no OpenVINO wheel for this platform)")
    source = tmp_path / "det.onnx"
    onnx.save(model, str(source))
    derived = det_logits_model(source, tmp_path, backend_name)
    assert derived is not None
    return source, derived


def _both_logits(backend_name, source, derived, size):
    """The derived copy's logits and the source's own (its Sigmoid taken off, nothing else
    changed) on one random input of ``size`` (height, width), in f32 on ``backend_name``."""
    from ocrstream.processors.ocr.backends import create_key
    from ocrstream.processors.ocr.backends.base import SessionOptions

    x = np.random.default_rng(3).normal(size=(1, 3, *size)).astype(np.float32)
    backend, options = create_key(backend_name), SessionOptions(threads=1)
    plain = _logits_of(source, source.with_name("plain.onnx"))
    return backend.load(derived, "det", options).run(x), backend.load(plain, "det", options).run(x)


def _det_stand_in(nodes, inits, name):
    """A made-up det model of ``nodes``: a 3-channel image ``x`` in, the map ``prob`` out."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _joined_channels_graph():
    """A made-up det model whose last Conv (stride 2, with a bias) reads a Concat of 3 and 5
    channels through an Identity, then a Sigmoid."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(11)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.normal(size=shape).astype(np.float32), name)

    inits = [
        weight("wa", 3, 3, 1, 1),
        weight("wb", 5, 3, 3, 3),
        weight("w", 4, 8, 3, 3),
        weight("b", 4),
        weight("w1", 1, 4, 1, 1),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["ya"]),
        helper.make_node("Conv", ["x", "wb"], ["yb"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["yb"], ["rb"]),
        helper.make_node("Concat", ["ya", "rb"], ["joined"], axis=1),
        helper.make_node("Identity", ["joined"], ["passed"]),
        helper.make_node("Conv", ["passed", "w", "b"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["y", "w1"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["prob"]),
    ]
    return _det_stand_in(nodes, inits, "joined")


@pytest.mark.parametrize("backend_name", ["onnxruntime", "openvino"])
def test_a_conv_of_joined_channels_runs_as_one_conv_a_part(tmp_path, backend_name):
    """For OpenVINO (models.SPLIT_CONCATS) the det copy reads each joined input with its own
    slice of the Conv's weight and sums them (the bias once): the same logits to float32's
    rounding, and nothing reads the Concat any more; onnxruntime's copy keeps the Concat."""
    import onnx

    source, derived = _derived(tmp_path, backend_name, _joined_channels_graph())
    nodes = onnx.load(str(derived)).graph.node
    read = {name for node in nodes for name in node.input}
    split = backend_name in SPLIT_CONCATS
    assert ("passed" in read) is not split
    assert sum(n.op_type == "Conv" for n in nodes) == (5 if split else 4)
    got, want = _both_logits(backend_name, source, derived, (9, 13))
    assert got.shape == want.shape == (1, 1, 5, 7)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _tail_graph(pads=(0, 0, 0, 0)):
    """A made-up DB tail: 3 -> 4 channels upsampled twice by stride-2 2x2 ConvTranspose, with
    biases, Relu between, an Identity on the way and a Sigmoid at the end."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(7)
    inits = [
        numpy_helper.from_array(rng.normal(size=(3, 4, 2, 2)).astype(np.float32), "w0"),
        numpy_helper.from_array(rng.normal(size=(1, 4, 1, 1)).astype(np.float32), "b0"),
        numpy_helper.from_array(rng.normal(size=(4, 1, 2, 2)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([[[[0.25]]]], np.float32), "b2"),
    ]
    up = {"kernel_shape": [2, 2], "strides": [2, 2]}
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("ConvTranspose", ["r", "w0"], ["u0"], pads=list(pads), **up),
        helper.make_node("Add", ["u0", "b0"], ["a0"]),
        helper.make_node("Relu", ["a0"], ["r0"]),
        helper.make_node("Identity", ["r0"], ["i0"]),
        helper.make_node("ConvTranspose", ["i0", "w2"], ["u2"], **up),
        helper.make_node("Add", ["u2", "b2"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["prob"]),
    ]
    return _det_stand_in(nodes, inits, "db-tail")


@pytest.mark.parametrize("backend_name", ["onnxruntime", "openvino"])
def test_a_folded_db_tail_gives_the_logits_of_the_two_upsamplings(tmp_path, backend_name):
    """Every output pixel of the folded tail, at every position of its 4x4 block, against the
    two transposed convolutions it replaces (made-up weights; in f32)."""
    import onnx

    source, derived = _derived(tmp_path, backend_name, _tail_graph())
    ops = [n.op_type for n in onnx.load(str(derived)).graph.node]
    assert ops.count("ConvTranspose") == (2 if backend_name == "openvino" else 0)
    assert ops[-1] == "DepthToSpace"
    got, want = _both_logits(backend_name, source, derived, (5, 7))
    assert got.shape == want.shape == (1, 1, 20, 28)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_db_tail_of_another_shape_is_not_folded(tmp_path):
    """Padding on the first upsampling: not the 2x2 blocks the fold assumes; the Sigmoid still
    goes, the tail stays."""
    import onnx

    from ocrstream.processors.ocr.models import det_logits_model

    source = tmp_path / "det.onnx"
    onnx.save(_tail_graph(pads=(0, 0, 1, 1)), str(source))
    derived = det_logits_model(source, tmp_path)
    assert derived is not None
    ops = [n.op_type for n in onnx.load(str(derived)).graph.node]
    assert ops == ["Relu", "ConvTranspose", "Add", "Relu", "Identity", "ConvTranspose", "Add"]


def test_a_det_model_that_ends_in_no_sigmoid_is_left_as_it_is(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from ocrstream.processors.ocr.models import det_logits_model

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "no-sigmoid",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])],
    )
    source = tmp_path / "det.onnx"
    onnx.save(helper.make_model(graph), str(source))
    assert det_logits_model(source, tmp_path) is None
    assert not (tmp_path / "models").exists()


@pytest.mark.parametrize(
    "quad",
    [
        [(10, 20), (110, 20), (110, 50), (10, 50)],  # axis-aligned: two points share each x
        [(12.5, 30), (100, 10), (104.25, 40), (16.75, 60)],  # rotated a little
    ],
)
def test_any_order_of_four_corners_comes_back_clockwise_from_top_left(quad):
    from itertools import permutations

    from ocrstream.processors.ocr.geometry import order_quad

    want = np.array(quad, np.float32)
    for perm in permutations(quad):
        got = order_quad(np.array(perm, np.float32))
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
