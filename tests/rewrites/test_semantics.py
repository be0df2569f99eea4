"""Nodes an opset-17 parser would import with other semantics (trtkit.builder.rewrites.semantics): each one named,
and the build refusing them instead of making an engine that gives wrong results."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.models import _model
from trtkit import prepare
from trtkit.builder.rewrites import ParserTarget, semantics

TARGET_86 = ParserTarget.assumed()
TARGET_NEW = ParserTarget("a parser of opset 22", 22, True)


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def reduce_axes_input(opset=18):
    """What onnx's test_reduce_mean_do_not_keepdims_example is: axes from a graph input."""
    return _model([helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="mean", keepdims=0)],
                  [_vi("x", TensorProto.FLOAT, [3, 2, 2]), _vi("axes", TensorProto.INT64, [1])],
                  [_vi("y", TensorProto.FLOAT, [3, 2])], opset=opset)


def test_reduce_axes_from_a_graph_input_is_named_with_what_the_parser_would_compute():
    hazards = prepare(reduce_axes_input(), target=TARGET_86).hazards
    assert [(h.node, h.op_type) for h in hazards] == [("mean", "ReduceMean")]
    # the INT64 boundary rewrite renamed the input; the message uses the model's name
    assert "axes come from 'axes', not a constant: the parser would reduce over every axis" in hazards[0].what
    assert "re-export the model at opset 17" in hazards[0].advice


def test_constant_axes_are_rewritten_to_the_attribute_and_are_no_hazard():
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    model = _model([helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="mean", keepdims=0)],
                   [_vi("x", TensorProto.FLOAT, [3, 2, 2])], [_vi("y", TensorProto.FLOAT, None)], [axes], opset=18)
    assert prepare(model, target=TARGET_86).hazards == []


def test_a_parser_that_reads_the_models_opset_sees_no_hazard():
    assert prepare(reduce_axes_input(), target=TARGET_NEW).hazards == []
    assert semantics.find(reduce_axes_input(opset=18), ParserTarget("unknown range", None, False)) == []


@pytest.mark.parametrize("node, inputs, opset, expected", [
    (helper.make_node("ScatterND", ["d", "i", "u"], ["y"], name="s", reduction="min"),
     [_vi("d", TensorProto.FLOAT, [4]), _vi("i", TensorProto.INT64, [1, 1]), _vi("u", TensorProto.FLOAT, [1])],
     18, "reduction='min': the parser would overwrite instead"),
    (helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="r", antialias=1, mode="cubic"),
     [_vi("x", TensorProto.FLOAT, [1, 1, 4, 4]), _vi("sizes", TensorProto.INT64, [4])],
     19, "antialias=1"),
    # a 5-D GridSample (opset 20 and later): no opset-16 form to rename it to
    (helper.make_node("GridSample", ["x", "g"], ["y"], name="g", mode="linear"),
     [_vi("x", TensorProto.FLOAT, [1, 1, 4, 4, 4]), _vi("g", TensorProto.FLOAT, [1, 2, 2, 2, 3])],
     22, "mode='linear' (opset 20's name)"),
    # onnx's version converter takes these to opset 17 and keeps the attribute opset 17 does not have
    (helper.make_node("AveragePool", ["x"], ["y"], name="p", kernel_shape=[2, 2], dilations=[2, 2]),
     [_vi("x", TensorProto.FLOAT, [1, 1, 6, 6])], 19, "dilations other than 1: the parser would pool without them"),
    (helper.make_node("ReduceMax", ["x"], ["y"], name="m", noop_with_empty_axes=1),
     [_vi("x", TensorProto.FLOAT, [2, 3])], 18, "noop_with_empty_axes=1 without axes (an identity)"),
])
def test_each_later_form_the_parser_would_ignore_is_named(node, inputs, opset, expected):
    model = _model([node], inputs, [_vi("y", TensorProto.FLOAT, None)], opset=opset)
    hazards = prepare(model, target=TARGET_86).hazards
    assert len(hazards) == 1 and hazards[0].node == node.name and expected in hazards[0].what, hazards


def test_the_build_refuses_the_model_naming_the_node_instead_of_building_a_wrong_engine():
    from tests.fakes.fake_trt import make_fake_trt
    from trtkit.builder import BuildConfig, build
    from trtkit.errors import ModelError

    with pytest.raises(ModelError) as info:
        build(reduce_axes_input(), BuildConfig(profiling_verbosity="NONE"), trt=make_fake_trt("8.6.1"))
    text = str(info.value)
    assert "TensorRT 8.6.1 cannot take 1 node(s)" in text and "node 'mean' (ReduceMean)" in text
    assert "would reduce over every axis" in text


def test_the_manifest_part_of_a_prepared_model_lists_its_hazards():
    prepared = prepare(reduce_axes_input(), target=TARGET_86)
    assert prepared.to_json()["hazards"][0]["op_type"] == "ReduceMean"
    assert prepared.require_same_semantics is not None
    assert prepare(reduce_axes_input(), target=TARGET_NEW).require_same_semantics().hazards == []


def test_attributes_set_to_what_their_absence_means_are_no_hazard():
    for node in (helper.make_node("AveragePool", ["x"], ["y"], name="p", kernel_shape=[2, 2], dilations=[1, 1]),
                 helper.make_node("ReduceMax", ["x"], ["y"], name="m", noop_with_empty_axes=0)):
        model = _model([node], [_vi("x", TensorProto.FLOAT, [1, 1, 6, 6])], [_vi("y", TensorProto.FLOAT, None)],
                       opset=19)
        assert prepare(model, target=TARGET_86).hazards == [], node.op_type


def test_an_attribute_the_parsers_schema_does_not_have_is_named():
    # LpPool-18 added ceil_mode; a model at opset 18 read by an opset-17 parser loses it
    node = helper.make_node("LpPool", ["x"], ["y"], name="lp", kernel_shape=[2, 2], ceil_mode=1)
    model = _model([node], [_vi("x", TensorProto.FLOAT, [1, 1, 5, 5])], [_vi("y", TensorProto.FLOAT, None)], opset=18)
    hazards = semantics.find(model, TARGET_86)
    assert [h.what for h in hazards] == ["attribute 'ceil_mode' is not in LpPool-11's schema"]


def test_an_input_the_parsers_schema_does_not_have_is_named():
    # Clip-6 takes min/max as attributes; an opset-11 Clip with inputs read by an opset-6 parser loses them
    model = _model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="clip")],
                   [_vi("x", TensorProto.FLOAT, [4]), _vi("lo", TensorProto.FLOAT, []),
                    _vi("hi", TensorProto.FLOAT, [])],
                   [_vi("y", TensorProto.FLOAT, [4])], opset=11)
    hazards = semantics.find(model, ParserTarget("an opset-6 parser", 6, False, min_opset=None))
    assert [h.what for h in hazards] == ["input 2 'lo' is not in Clip-6's schema",
                                         "input 3 'hi' is not in Clip-6's schema"]


def test_an_axes_input_declared_empty_means_every_axis_as_the_parser_does():
    # onnx's test_reduce_l1_default_axes_keepdims_random: axes of shape [0] (every axis, unless noop_with_empty_axes)
    def model(noop):
        node = helper.make_node("ReduceL1", ["x", "axes"], ["y"], name="l1", keepdims=1, noop_with_empty_axes=noop)
        return _model([node], [_vi("x", TensorProto.FLOAT, [3, 2]), _vi("axes", TensorProto.INT64, [0])],
                      [_vi("y", TensorProto.FLOAT, None)], opset=18)

    assert prepare(model(0), target=TARGET_86).hazards == []
    assert "an identity" in prepare(model(1), target=TARGET_86).hazards[0].what


def _pool(shape, **attrs):
    node = helper.make_node("AveragePool", ["x"], ["y"], name="pool", **attrs)
    return _model([node], [_vi("x", TensorProto.FLOAT, shape)], [_vi("y", TensorProto.FLOAT, None)], opset=17)


def test_a_ceil_mode_pool_whose_last_window_starts_in_the_padding_is_named():
    # onnx's test_averagepool_2d_ceil_last_window_starts_on_pad: ONNX gives (1, 3, 1, 1), TensorRT 8.6 (1, 3, 2, 2)
    model = _pool([1, 3, 2, 2], kernel_shape=[3, 3], strides=[3, 3], pads=[1, 1, 1, 1], ceil_mode=1,
                  count_include_pad=1)
    hazards = prepare(model, target=TARGET_86).hazards
    assert [h.what for h in hazards] == [
        f"ceil_mode=1 and the last window along axis {a} starts in the padding: ONNX gives 1 output(s) there, "
        "TensorRT 2" for a in (2, 3)]
    assert "export with ceil_mode=0" in hazards[0].advice


def test_ceil_mode_pools_whose_windows_all_start_inside_are_left():
    for model in (_pool([1, 3, 5, 5], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),  # 3 windows, the last at 4
                  _pool([1, 3, 2, 2], kernel_shape=[3, 3], strides=[3, 3], pads=[1, 1, 1, 1], ceil_mode=0),
                  _pool([1, 3, "h", "w"], kernel_shape=[3, 3], strides=[3, 3], pads=[1, 1, 1, 1], ceil_mode=1)):
        assert prepare(model, target=TARGET_86).hazards == []
    model = _pool([1, 3, 2, 2], kernel_shape=[3, 3], strides=[3, 3], pads=[1, 1, 1, 1], ceil_mode=1)
    assert prepare(model, target=TARGET_NEW).hazards == []  # measured on 8.6 only
