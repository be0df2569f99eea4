"""FP16/BF16 conversion: I/O types kept, FP32 islands with Casts, clipping named, nothing dropped silently."""

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator

from tests.quant.qmodels import capture_trtkit_log, fp16_mix, residual_cnn
from trtkit.errors import ModelError
from trtkit.quant.fp16 import convert_to_bf16, convert_to_fp16


def _types(model):
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in list(g.input) + list(g.output) + list(g.value_info)}
    types.update({t.name: t.data_type for t in g.initializer})
    return types


def _node(model, name):
    return next(n for n in model.graph.node if n.name == name)


def test_keeps_fp32_io_and_runs_close_to_fp32():
    model = residual_cnn()
    conv = convert_to_fp16(model)
    onnx.checker.check_model(conv.model, full_check=True)
    assert [v.type.tensor_type.elem_type for v in conv.model.graph.input] == [TensorProto.FLOAT]
    assert {v.name: v.type.tensor_type.elem_type for v in conv.model.graph.output} == {
        "prob": TensorProto.FLOAT,
        "tiny2": TensorProto.FLOAT,
    }
    types = _types(conv.model)
    assert types[_node(conv.model, "stem_conv").input[1]] == TensorProto.FLOAT16
    assert types["stem_r"] == TensorProto.FLOAT16
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    ref = ReferenceEvaluator(model).run(["prob"], {"x": x})[0]
    got = ReferenceEvaluator(conv.model).run(["prob"], {"x": x})[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, atol=2e-2)


def test_fp16_io_when_asked():
    conv = convert_to_fp16(residual_cnn(), keep_io_types=False)
    assert conv.model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    assert conv.model.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    onnx.checker.check_model(conv.model, full_check=True)


def test_blocked_ops_shape_math_and_resize_scales_stay_fp32(caplog):
    with capture_trtkit_log(caplog, logging.INFO):
        conv = convert_to_fp16(fp16_mix())
    model = conv.model
    onnx.checker.check_model(model, full_check=True)
    types = _types(model)
    pow_node = _node(model, "pow")
    assert types[pow_node.input[0]] == TensorProto.FLOAT  # cast back to FP32 before Pow
    assert types[pow_node.input[1]] == TensorProto.FLOAT  # the Constant exponent stays FP32 for Pow
    assert types[_node(model, "resize").input[2]] == TensorProto.FLOAT
    assert types[_node(model, "resize").input[0]] == TensorProto.FLOAT16
    assert types["sf"] == TensorProto.FLOAT and types["sm"] == TensorProto.FLOAT  # shape arithmetic
    assert "pow (Pow)" in conv.kept_fp32 and "shape_mul (Mul)" in conv.kept_fp32
    assert "kept 4 node(s) in FP32: Cast x2, Mul x1, Pow x1" in caplog.text
    assert conv.casts >= 3


def test_clipping_is_named_in_a_warning(caplog):
    with capture_trtkit_log(caplog, logging.WARNING):
        conv = convert_to_fp16(fp16_mix())
    assert conv.clipped == ["big"]
    assert "clipped values beyond ±65504 in: big" in caplog.text
    big16 = next(t for t in conv.model.graph.initializer if t.name == "big__fp16")
    assert onnx.numpy_helper.to_array(big16).max() == pytest.approx(65504.0)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the clipped 65504 constant overflows FP16 on purpose
def test_graph_output_consumed_inside_keeps_its_name_and_type():
    conv = convert_to_fp16(fp16_mix())
    x = np.random.default_rng(1).standard_normal((1, 3, 4, 4)).astype(np.float32)
    ref_r = ReferenceEvaluator(fp16_mix()).run(["r"], {"x": x})[0]
    got_r = ReferenceEvaluator(conv.model).run(["r"], {"x": x})[0]
    assert got_r.dtype == np.float32
    np.testing.assert_allclose(got_r, ref_r, rtol=1e-2, atol=1e-2)


def test_bf16_conversion_rounds_to_nearest_even():
    conv = convert_to_bf16(residual_cnn())
    onnx.checker.check_model(conv.model)  # ONNX's Conv schema lists no bfloat16; TensorRT's parser takes it
    w = next(t for t in conv.model.graph.initializer if t.name == "w_stem__bf16")
    assert w.data_type == TensorProto.BFLOAT16
    original = onnx.numpy_helper.to_array(next(t for t in residual_cnn().graph.initializer if t.name == "w_stem"))
    bits = np.frombuffer(w.raw_data, dtype="<u2").astype(np.uint32) << 16
    np.testing.assert_allclose(bits.view(np.float32).reshape(original.shape), original, rtol=1 / 128)
    assert conv.clipped == []


def test_unknown_dtype_is_refused():
    with pytest.raises(ModelError, match="Cannot convert a model to 'int4'; use fp16 or bf16"):
        from trtkit.quant.fp16 import convert_float

        convert_float(residual_cnn(), dtype="int4")


def test_a_subgraph_reading_tensors_of_the_outer_graph_gets_them_in_fp32():
    """torchvision's SSD exports its NMS as an If whose branch reads the boxes and a Constant of the main graph."""
    from onnx import helper

    branch = helper.make_graph(
        [helper.make_node("Add", ["r", "c"], ["out"])],
        "branch",
        [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["r"], ["out2"])],
        "other",
        [],
        [helper.make_tensor_value_info("out2", TensorProto.FLOAT, None)],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.FLOAT, [1], [0.5])),
        helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=other),
    ]
    graph = helper.make_graph(
        nodes,
        "if_outer",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    conv = convert_to_fp16(model)
    onnx.checker.check_model(conv.model, full_check=True)
    x = np.array([-1.0, 0.25, 1.0, 2.0], np.float32)
    got = ReferenceEvaluator(conv.model).run(["y"], {"x": x, "cond": np.array(True)})[0]
    np.testing.assert_allclose(got, [0.5, 0.75, 1.5, 2.5])


def test_inverse_sigmoid_quotient_stays_fp32_so_its_log_is_finite():
    """DETR's inverse_sigmoid, log(clip(x, 1e-5) / clip(1 - x, 1e-5)), is log(1e5) at x = 1; 1e5 is inf in FP16."""
    h = onnx.helper
    eps, one = h.make_tensor("eps", TensorProto.FLOAT, [], [1e-5]), h.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    nodes = [
        h.make_node("Sigmoid", ["x"], ["s"]),
        h.make_node("Clip", ["s", "eps"], ["x1"]),
        h.make_node("Sub", ["one", "s"], ["r"]),
        h.make_node("Clip", ["r", "eps"], ["x2"]),
        h.make_node("Div", ["x1", "x2"], ["q"], name="quotient"),
        h.make_node("Log", ["q"], ["y"]),
    ]
    vi = [h.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in ("x", "y")]
    model = h.make_model(
        h.make_graph(nodes, "inverse_sigmoid", vi[:1], vi[1:], [eps, one]), opset_imports=[h.make_opsetid("", 17)]
    )
    conv = convert_to_fp16(model)
    assert "quotient (Div)" in conv.kept_fp32
    x = np.array([-3.0, 0.0, 3.0, 30.0], np.float32)
    ref = ReferenceEvaluator(model).run(["y"], {"x": x})[0]
    got = ReferenceEvaluator(conv.model).run(["y"], {"x": x})[0]
    assert np.isfinite(got).all() and ref[-1] == pytest.approx(np.log(1e5), rel=1e-3)
    np.testing.assert_allclose(got, ref, atol=1e-2)
