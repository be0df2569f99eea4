"""add_nms: the graph it appends (EfficientNMS_TRT and its inputs) and the layouts it refuses."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests import models
from trtkit.detection import NmsOptions, add_nms
from trtkit.errors import ModelError, UsageError


def detector(classes=3, anchors=6):
    return models.constant_detector(np.zeros((1, 4 + classes, anchors), np.float32))


def test_plugin_node_inputs_outputs_and_attributes():
    model = add_nms(detector(), NmsOptions(score_threshold=0.3, iou_threshold=0.6, max_detections=50))
    graph = model.graph
    assert [n.op_type for n in graph.node][-4:] == ["Transpose", "Slice", "Slice", "EfficientNMS_TRT"]
    plugin = graph.node[-1]
    attrs = {a.name: helper.get_attribute_value(a) for a in plugin.attribute}
    assert attrs["score_threshold"] == pytest.approx(0.3) and attrs["iou_threshold"] == pytest.approx(0.6)
    assert attrs["max_output_boxes"] == 50 and attrs["box_coding"] == 1 and attrs["background_class"] == -1
    assert attrs["plugin_version"] == b"1" and attrs["class_agnostic"] == 0 and attrs["score_activation"] == 0
    outs = {o.name: o.type.tensor_type for o in graph.output}
    assert list(outs) == ["num_dets", "boxes", "scores", "classes"]
    assert outs["num_dets"].elem_type == TensorProto.INT32 and outs["classes"].elem_type == TensorProto.INT32
    assert [d.dim_value for d in outs["boxes"].shape.dim][1:] == [50, 4]
    assert outs["boxes"].shape.dim[0].dim_param == "N"
    assert plugin.domain == "trt"
    onnx.checker.check_model(model)  # the builder's model loader runs the checker


def test_boxes_and_scores_are_the_head_rows_split_after_the_transpose():
    model = add_nms(detector(classes=2, anchors=5))
    nodes = {n.op_type: n for n in model.graph.node}
    assert list(helper.get_attribute_value(nodes["Transpose"].attribute[0])) == [0, 2, 1]
    init = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    slices = [n for n in model.graph.node if n.op_type == "Slice"]
    bounds = [(int(init[s.input[1]][0]), int(init[s.input[2]][0]), int(init[s.input[3]][0])) for s in slices]
    assert bounds == [(0, 4, 2), (4, np.iinfo(np.int64).max, 2)]
    assert list(nodes["EfficientNMS_TRT"].input) == [slices[0].output[0], slices[1].output[0]]


def test_class_agnostic_and_file_input(tmp_path):
    path = tmp_path / "det.onnx"
    onnx.save(detector(), path)
    model = add_nms(str(path), NmsOptions(class_agnostic=True))
    attrs = {a.name: helper.get_attribute_value(a) for a in model.graph.node[-1].attribute}
    assert attrs["class_agnostic"] == 1


def _with_outputs(*shapes):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Identity", ["x"], [f"y{i}"]) for i in range(len(shapes))]
    outs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, s) for i, s in enumerate(shapes)]
    return helper.make_model(helper.make_graph(nodes, "g", [x], outs), opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shapes, message", [
    ([[1, 84, 8400], [1, 32, 160, 160]], r"has 2 outputs: 'y0' \(1, 84, 8400\), 'y1' \(1, 32, 160, 160\)"),
    ([[1, 1000]], r"found output 'y0' \(1, 1000\)"),
    ([[1, 3, 8400]], r"second dimension of at least 5; found output 'y0' \(1, 3, 8400\)"),
    ([["N", "c", "a"]], r"'y0' \(N, c, a\), whose dimensions ONNX shape inference cannot fix"),
    ([["N", "c", 84]], r"cannot fix"),
    ([[1, 8400, 85]], r"looks like \(N, anchors, 4 \+ classes\)"),
])
def test_other_head_layouts_are_refused_with_what_was_found(shapes, message):
    with pytest.raises(ModelError, match=message):
        add_nms(_with_outputs(*shapes))


def test_a_model_that_already_has_the_plugin_is_refused():
    with pytest.raises(ModelError, match="already ends in EfficientNMS_TRT"):
        add_nms(add_nms(detector()))


@pytest.mark.parametrize("kwargs, message", [
    ({"score_threshold": 1.0}, r"score_threshold must be a number from 0 up to 1 \(1 excluded\), not 1.0"),
    ({"iou_threshold": 0.0}, "iou_threshold must be a number above 0.0 and <= 1.0"),
    ({"max_detections": 0}, "max_detections must be an integer >= 1"),
])
def test_bad_options_are_refused(kwargs, message):
    with pytest.raises(UsageError, match=message):
        NmsOptions(**kwargs)


def test_symbolic_head_dims_are_filled_by_shape_inference():
    model = detector(classes=3, anchors=6)
    for dim, name in zip(model.graph.output[0].type.tensor_type.shape.dim[1:], ("rows", "anchors")):
        dim.ClearField("dim_value")
        dim.dim_param = name
    out = {o.name: o.type.tensor_type for o in add_nms(model).graph.output}
    assert [d.dim_value for d in out["boxes"].shape.dim][1:] == [100, 4]


def test_the_sample_detector_whose_export_named_its_dims():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "samples" / "detection" / "model" / "detector.onnx"
    declared = onnx.load(str(path)).graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param for d in declared][1:] == ["Concatoutput0_dim_1", "Concatoutput0_dim_2"]
    model = add_nms(str(path))
    assert [o.name for o in model.graph.output] == ["num_dets", "boxes", "scores", "classes"]
    onnx.checker.check_model(model)
