"""Narrow/unsigned integer graph I/O no TensorRT takes (INT8 without Q/DQ, INT16, UINT16, UINT32, UINT64): the
engine's INT32 (INT64) along the whole path, where every op on it gives the same values."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.models import _model
from tests.rewrites.test_rewrites import TARGET_86, _vi, run
from trtkit.builder.rewrites import ParserTarget, apply_rewrites, int64_io, narrow_io

TARGET_10 = ParserTarget("TensorRT 10", 20, True)
A = np.array([3, 700, 65535, 0])
B = np.array([5, 699, 1, 0])


def narrow_model(elem=TensorProto.UINT16):
    """Max then Sub (which wraps around at the type's width) out, Greater and a Cast to FLOAT out."""
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    ten = numpy_helper.from_array(np.array(10, dtype=dtype), "ten")
    nodes = [helper.make_node("Max", ["a", "b"], ["m"], name="max"),
             helper.make_node("Sub", ["m", "ten"], ["d"], name="sub"),
             helper.make_node("Greater", ["a", "b"], ["g"], name="greater"),
             helper.make_node("Cast", ["a"], ["f"], name="to_float", to=TensorProto.FLOAT)]
    return _model(nodes, [_vi("a", elem, [4]), _vi("b", elem, [4])],
                  [_vi("d", elem, [4]), _vi("g", TensorProto.BOOL, [4]), _vi("f", TensorProto.FLOAT, [4])], [ten])


def _elem(value):
    return value.type.tensor_type.elem_type


@pytest.mark.parametrize(("elem", "target", "engine"), [
    (TensorProto.UINT16, TARGET_86, np.int32), (TensorProto.INT16, TARGET_86, np.int32),
    (TensorProto.INT8, TARGET_86, np.int32), (TensorProto.UINT32, TARGET_86, np.int32),
    (TensorProto.UINT32, TARGET_10, np.int64), (TensorProto.UINT64, TARGET_10, np.int64)])
def test_narrow_io_becomes_the_engines_integer_type_with_the_same_results(elem, target, engine):
    model = narrow_model(elem)
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    a, b = (A % 128).astype(dtype), (B % 128).astype(dtype)  # INT8 holds them too
    rewritten, report = apply_rewrites(model, target, steps=[("narrow-int-io", narrow_io.rewrite)])
    onnx.checker.check_model(rewritten, full_check=True)
    wanted = helper.np_dtype_to_tensor_dtype(np.dtype(engine))
    assert [_elem(v) for v in rewritten.graph.input] == [wanted, wanted] and _elem(rewritten.graph.output[0]) == wanted
    assert int64_io.original_dtypes(report) == {"a": dtype.name, "b": dtype.name, "d": dtype.name}
    assert f"ops that now see {np.dtype(engine).name.upper()}: Cast, Greater, Max, Sub" in report[0].what
    expected = run(model, {"a": a, "b": b})
    got = run(rewritten, {"a": a.astype(engine), "b": b.astype(engine)})
    assert got[0].dtype == engine and np.array_equal(got[0].astype(dtype), expected[0])  # the runner's astype
    assert np.array_equal(got[1], expected[1]) and np.array_equal(got[2], expected[2])
    assert _elem(model.graph.input[0]) == elem  # the input model is untouched


def test_a_wrapped_around_difference_comes_back_as_the_models_value():
    model = narrow_model()
    rewritten, _ = apply_rewrites(model, TARGET_86, steps=[("narrow-int-io", narrow_io.rewrite)])
    a, b = A.astype(np.uint16), B.astype(np.uint16)
    expected = run(model, {"a": a, "b": b})[0]
    assert expected[3] == 65526  # max(0, 0) - 10 wraps around at UINT16
    assert np.array_equal(run(rewritten, {"a": a.astype(np.int32), "b": b.astype(np.int32)})[0].astype(np.uint16),
                          expected)


def _left(model, target=TARGET_86):
    rewritten, report = apply_rewrites(model, target, steps=[("narrow-int-io", narrow_io.rewrite)])
    assert rewritten is model and report and all(r.status == "skipped" for r in report)
    return report


def test_a_wrapped_value_that_is_then_compared_is_left():
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Greater", ["s", "b"], ["g"], name="greater")]
    model = _model(nodes, [_vi("a", TensorProto.UINT16, [4]), _vi("b", TensorProto.UINT16, [4])],
                   [_vi("g", TensorProto.BOOL, [4])])
    report = _left(model)
    assert "node 'greater' (Greater) reads a value equal to the model's only modulo 2**bits" in report[0].what
    assert report[0].rewrite == "uint16-io" and "no TensorRT has UINT16 tensors" in report[0].why


def test_uint64_arithmetic_is_left_where_the_engine_has_only_int32_and_done_where_it_has_int64():
    model = _model([helper.make_node("Add", ["a", "b"], ["s"], name="add")],
                   [_vi("a", TensorProto.UINT64, [4]), _vi("b", TensorProto.UINT64, [4])],
                   [_vi("s", TensorProto.UINT64, [4])])
    assert "wraps around at UINT64's width, wider than INT32" in _left(model)[0].what
    rewritten, report = apply_rewrites(model, TARGET_10, steps=[("narrow-int-io", narrow_io.rewrite)])
    assert _elem(rewritten.graph.output[0]) == TensorProto.INT64 and report[0].status == "applied"


def test_ops_not_known_to_keep_the_values_and_constants_that_do_not_fit_are_left():
    shift = _model([helper.make_node("BitShift", ["a", "b"], ["s"], name="shift", direction="LEFT")],
                   [_vi("a", TensorProto.UINT16, [4]), _vi("b", TensorProto.UINT16, [4])],
                   [_vi("s", TensorProto.UINT16, [4])])
    assert "node 'shift' (BitShift) reads UINT16 and may compute other values" in _left(shift)[0].what
    big = numpy_helper.from_array(np.array([1 << 40], dtype=np.uint64), "big")
    high = _model([helper.make_node("Max", ["a", "big"], ["m"], name="max")], [_vi("a", TensorProto.UINT64, [1])],
                  [_vi("m", TensorProto.UINT64, [1])], [big])
    assert "initializer 'big' holds values beyond INT32" in _left(high)[0].what


def test_uint8_and_int8_in_a_qdq_network_are_left_alone():
    for elem in (TensorProto.UINT8,):
        model = _model([helper.make_node("Identity", ["a"], ["b"])], [_vi("a", elem, [4])], [_vi("b", elem, [4])])
        assert narrow_io.rewrite(model, TARGET_86) == []
    scale = numpy_helper.from_array(np.array(0.5, dtype=np.float32), "scale")
    qdq = _model([helper.make_node("DequantizeLinear", ["q", "scale"], ["x"], name="dq")],
                 [_vi("q", TensorProto.INT8, [4])], [_vi("x", TensorProto.FLOAT, [4])], [scale])
    assert narrow_io.rewrite(qdq, TARGET_86) == []
