"""CastLike on parsers without it (TensorRT 8.6): a Cast to the type of its second input, where that type is known."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.fakes.fake_trt import make_fake_trt
from tests.models import _model
from tests.rewrites.test_rewrites import TARGET_86, _vi, run
from trtkit.builder.rewrites import ParserTarget, apply_rewrites, castlike, default_steps

X = np.array([[1.7, -2.2, 3.5], [0.25, 9.0, -0.5]], dtype=np.float32)


def castlike_model():
    """Three CastLikes whose targets are typed by an initializer, a graph input, and only by shape inference."""
    ref = numpy_helper.from_array(np.array([0], dtype=np.int32), "ref")
    nodes = [helper.make_node("CastLike", ["x", "ref"], ["as_int"], name="like_init"),
             helper.make_node("CastLike", ["as_int", "x"], ["back"], name="like_input"),
             helper.make_node("Cast", ["x"], ["half"], name="to_half", to=TensorProto.FLOAT16),
             helper.make_node("CastLike", ["back", "half"], ["y"], name="like_inferred")]
    return _model(nodes, [_vi("x", TensorProto.FLOAT, [2, 3])],
                  [_vi("as_int", TensorProto.INT32, [2, 3]), _vi("y", TensorProto.FLOAT16, [2, 3])], [ref], opset=17)


def test_castlike_becomes_cast_with_the_targets_type_and_the_same_outputs():
    model = castlike_model()
    assert not TARGET_86.supported("CastLike", 17)  # in onnx-tensorrt's 10.x operator list, not 8.6's
    rewritten, report = apply_rewrites(model, TARGET_86, steps=[("castlike", castlike.rewrite)])
    onnx.checker.check_model(rewritten, full_check=True)
    assert "CastLike" not in {n.op_type for n in rewritten.graph.node}
    assert [r.what for r in report] == ["replaced by Cast(to=INT32), the type of 'ref'",
                                        "replaced by Cast(to=FLOAT), the type of 'x'",
                                        "replaced by Cast(to=FLOAT16), the type of 'half'"]
    assert all(len(n.input) == 1 for n in rewritten.graph.node)
    expected, got = run(model, {"x": X}), run(rewritten, {"x": X})
    for want, have in zip(expected, got):
        assert have.dtype == want.dtype and np.array_equal(have, want)


def test_a_castlike_whose_target_type_is_unknown_is_named_and_left():
    nodes = [helper.make_node("Mystery", ["x"], ["m"], name="mystery", domain="custom"),
             helper.make_node("CastLike", ["x", "m"], ["y"], name="like_mystery")]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, [3])], [_vi("y", TensorProto.FLOAT, [3])])
    model.opset_import.append(helper.make_opsetid("custom", 1))
    report = castlike.rewrite(model, TARGET_86)
    assert report[0].status == "skipped" and "'m' is not known" in report[0].what
    assert model.graph.node[1].op_type == "CastLike"


def test_parsers_with_castlike_keep_it():
    target = ParserTarget.from_trt(make_fake_trt("10.9.0"))
    assert castlike.rewrite(castlike_model(), target) == []


def test_castlike_in_an_expanded_function_body_is_replaced_too():
    # Swish (opset 24) is not in 8.6's list; its ONNX function body is CastLike, Constant, Mul, Sigmoid
    model = _model([helper.make_node("Swish", ["x"], ["y"], name="swish", alpha=1.5)],
                   [_vi("x", TensorProto.FLOAT, [2, 3])], [_vi("y", TensorProto.FLOAT, [2, 3])], opset=24)
    rewritten, report = apply_rewrites(model, TARGET_86, steps=default_steps())
    assert [r.rewrite for r in report if r.status == "applied"][:2] == ["expand-function", "castlike"]
    ops = {n.op_type for n in rewritten.graph.node}
    assert "CastLike" not in ops and "Swish" not in ops and all(TARGET_86.supported(op, 17) for op in ops)
    np.testing.assert_allclose(run(rewritten, {"x": X})[0], X / (1 + np.exp(-1.5 * X)), rtol=1e-6)


def test_saturate_is_kept_only_for_float8_targets_where_it_acts():
    ref = numpy_helper.from_array(np.array([0], dtype=np.int32), "ref")
    model = _model([helper.make_node("CastLike", ["x", "ref"], ["y"], name="like", saturate=1)],
                   [_vi("x", TensorProto.FLOAT, [2, 3])], [_vi("y", TensorProto.INT32, [2, 3])], [ref], opset=19)
    castlike.rewrite(model, TARGET_86)
    assert [a.name for a in model.graph.node[0].attribute] == ["to"]
    onnx.checker.check_model(model, full_check=True)
