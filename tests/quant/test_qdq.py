"""Q/DQ placement on small generated graphs (golden structure) and insertion."""

import logging

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

from tests.quant.qmodels import batchnorm_before_add, capture_trtkit_log, matmul_block, residual_cnn
from trtkit.errors import CalibrationError, ModelError
from trtkit.quant.qdq import QdqOptions, insert_qdq, plan_qdq


def _amax(plan, value=4.0):
    return {name: value for name in plan.activations}


def _inputs_of(model, node_name):
    node = next(n for n in model.graph.node if n.name == node_name)
    producers = {o: n for n in model.graph.node for o in n.output}
    return [producers[i].op_type if i in producers else i for i in node.input]


def test_residual_cnn_placement_is_golden():
    plan = plan_qdq(residual_cnn())
    assert plan.quantized == ["stem_conv", "conv_a", "conv_b", "conv_down", "conv_main"]
    assert plan.skipped == {
        "conv_tiny": "tiny (32 weights < 256)",
        "fc": "final layer (head) kept in higher precision",
    }
    assert plan.activations == ["x", "stem_r", "a_r", "res_r", "down"]
    # the skip input of each residual add; on two convolutions the earlier one (the downsample) is the skip
    assert plan.residual == [("add_skip", "stem_r"), ("add_two_convs", "down")]
    assert plan.consumers["stem_r"] == [("conv_a", 0), ("add_skip", 1)]
    assert {k: (w.initializer, w.axis) for k, w in plan.weights.items()} == {
        ("stem_conv", 1): ("w_stem", 0), ("conv_a", 1): ("w_a", 0), ("conv_b", 1): ("w_b", 0),
        ("conv_down", 1): ("w_down", 0), ("conv_main", 1): ("w_b", 0)}


def test_inserted_model_is_valid_and_wired_as_planned():
    model = residual_cnn()
    qdq, plan = insert_qdq(model, _amax(plan_qdq(model)))
    onnx.checker.check_model(qdq, full_check=True)
    ops = [n.op_type for n in qdq.graph.node]
    assert ops.count("QuantizeLinear") == 5 + 4  # five activations, four distinct weights (w_b is shared)
    assert _inputs_of(qdq, "conv_a")[:2] == ["DequantizeLinear", "DequantizeLinear"]
    assert _inputs_of(qdq, "add_skip") == ["Conv", "DequantizeLinear"]
    assert _inputs_of(qdq, "add_two_convs") == ["Conv", "DequantizeLinear"]
    assert _inputs_of(qdq, "fc")[:2] == ["Reshape", "w_fc"]  # head untouched
    assert _inputs_of(qdq, "maxpool") == ["Relu"]  # other consumers keep the FP32 tensor
    w_dq = next(n for n in qdq.graph.node if n.name == "w_stem_DequantizeLinear")
    assert [(a.name, a.i) for a in w_dq.attribute] == [("axis", 0)]
    scale = next(t for t in qdq.graph.initializer if t.name == "w_stem_qdq_scale")
    assert list(scale.dims) == [16]


def test_qdq_model_stays_close_to_fp32():
    model = residual_cnn()
    model.opset_import[0].version = 19  # onnx's reference evaluator implements DequantizeLinear from opset 19
    x = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    ref = ReferenceEvaluator(model).run(None, {"x": x})
    # amax from the real activations (min-max) keeps INT8 error small
    plan = plan_qdq(model)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(t) for t in plan.activations if t != "x")
    values = ReferenceEvaluator(probe).run(None, {"x": x})
    names = [o.name for o in probe.graph.output]
    amax = {n: float(np.abs(v).max()) for n, v in zip(names, values)}
    amax["x"] = float(np.abs(x).max())
    qdq, _ = insert_qdq(model, amax, plan)
    got = ReferenceEvaluator(qdq).run(None, {"x": x})
    np.testing.assert_allclose(got[0], ref[0], atol=0.05)


def test_matmul_weights_per_channel_and_activation_pairs():
    plan = plan_qdq(matmul_block(), QdqOptions(keep_output_layers=False))
    assert plan.quantized == ["mm_weight", "mm_act"]
    assert plan.weights[("mm_weight", 1)].axis is None  # per tensor unless asked
    assert plan_qdq(matmul_block(), QdqOptions(keep_output_layers=False, per_channel_matmul=True)).weights[
        ("mm_weight", 1)].axis == 1
    assert plan.activations == ["x", "h_r", "h_t"]
    assert plan_qdq(matmul_block()).skipped == {"mm_act": "final layer (head) kept in higher precision"}


def test_a_weight_passed_through_identity_is_quantized_as_the_weight():
    # torch's exporter reads a shared weight through Identity(initializer): still a weight, not an activation
    model = matmul_block()
    model.graph.node.insert(0, onnx.helper.make_node("Identity", ["w"], ["w_shared"], name="w_identity"))
    model.graph.node[1].input[1] = "w_shared"
    model.opset_import[0].version = 19  # onnx's reference evaluator implements DequantizeLinear from opset 19
    plan = plan_qdq(model, QdqOptions(keep_output_layers=False, per_channel_matmul=True))
    assert plan.activations == ["x", "h_r", "h_t"]
    assert (plan.weights[("mm_weight", 1)].initializer, plan.weights[("mm_weight", 1)].axis) == ("w", 1)
    feed = {"x": np.random.default_rng(0).standard_normal((2, 8, 16)).astype(np.float32)}
    values = ReferenceEvaluator(model).run(["y", *plan.activations], feed)
    qdq, _ = insert_qdq(model, {t: float(np.abs(v).max()) for t, v in zip(plan.activations, values[1:])}, plan)
    onnx.checker.check_model(qdq, full_check=True)
    assert _inputs_of(qdq, "mm_weight") == ["DequantizeLinear", "DequantizeLinear"]
    want, got = values[0], ReferenceEvaluator(qdq).run(None, feed)[0]
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


def test_a_layer_read_only_for_its_shape_is_no_head():
    # conv_shape's output reaches the graph output only through Shape (a Reshape's target): quantized like any other
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    w = [onnx.numpy_helper.from_array(rng.standard_normal((16, 16, 3, 3)).astype(np.float32), f"w{i}") for i in (0, 1)]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a"], name="conv_shape", pads=[1, 1, 1, 1]),
        helper.make_node("Shape", ["a"], ["s"], name="shape"),
        helper.make_node("Conv", ["x", "w1"], ["b"], name="conv_head", pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["b", "s"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], w)
    plan = plan_qdq(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert plan.quantized == ["conv_shape"]
    assert plan.skipped == {"conv_head": "final layer (head) kept in higher precision"}


def test_options_exclude():
    plan = plan_qdq(residual_cnn(), QdqOptions(exclude_nodes=frozenset({"conv_a"})))
    assert plan.skipped["conv_a"] == "excluded by name"
    assert all(w.axis == 0 for w in plan.weights.values())  # convolution weights per output channel


def test_missing_amax_warns_or_raises(caplog):
    model = residual_cnn()
    with pytest.raises(CalibrationError, match="No amax for 1 tensor\\(s\\) to quantize: down"):
        insert_qdq(model, {"x": 1.0, "stem_r": 1.0, "a_r": 1.0, "res_r": 1.0}, strict=True)
    with capture_trtkit_log(caplog, logging.WARNING):
        qdq, _ = insert_qdq(model, {"x": 1.0, "stem_r": 1.0, "a_r": 1.0, "res_r": 1.0})
    assert "left unquantized: down" in caplog.text
    onnx.checker.check_model(qdq, full_check=True)


def test_old_opset_is_refused():
    model = residual_cnn()
    model.opset_import[0].version = 11
    with pytest.raises(ModelError, match="needs ONNX opset 13 or later .* the model has opset 11"):
        insert_qdq(model, {})


def test_excluding_a_node_the_model_lacks_names_it_and_the_close_match():
    with pytest.raises(ModelError, match=r"qdq_exclude names node\(s\) the model does not have: 'conv_mian' "
                                         r"\(did you mean 'conv_main'\?\)\. Its Conv/Gemm/MatMul nodes are: stem_conv"):
        plan_qdq(residual_cnn(), QdqOptions(exclude_nodes=frozenset({"conv_mian"})))


def test_a_residual_behind_a_batchnorm_of_the_convolution_is_seen_as_the_convolutions():
    """Exports that keep BatchNormalization (onnx's own test_resnet50 data: Conv → BatchNormalization → Add) have
    the residual adds of a folded export: TensorRT folds the BatchNormalization into the convolution. Before, the
    onnx wheel's ResNet-50 planned '0 residual add(s)'."""
    from onnx import helper

    model = batchnorm_before_add(residual_cnn())
    nodes = list(model.graph.node)
    at = next(i for i, n in enumerate(nodes) if n.name == "add_skip") - 1
    plan = plan_qdq(model)
    assert ("add_skip", "stem_r") in plan.residual
    # a BatchNormalization whose input something else reads too is no folded convolution
    nodes.insert(at + 1, helper.make_node("Relu", ["b"], ["b_side"], name="side"))
    model.graph.output.append(helper.make_tensor_value_info("b_side", onnx.TensorProto.FLOAT, None))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    assert ("add_skip", "stem_r") not in plan_qdq(model).residual


def test_a_two_input_sum_is_a_residual_add_too():
    """onnx's own ResNet-50 data writes its residual adds as Sum: with Add and Sum alike it plans 16 of them."""
    model = residual_cnn()
    for node in model.graph.node:
        if node.name == "add_skip":
            node.op_type = "Sum"
    plan = plan_qdq(model)
    assert ("add_skip", "stem_r") in plan.residual
    qdq, _ = insert_qdq(model, {t: 1.0 for t in plan.activations}, plan)
    onnx.checker.check_model(qdq, full_check=True)
